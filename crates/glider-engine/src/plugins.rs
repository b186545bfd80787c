//! The engine's plugins (crates/glider-plugin): the set built from `plugins:`, swapped
//! through the [`hotswap`](crate::hotswap) registry on reload (a removed or changed
//! plugin is told `shutdown` and ended; an unchanged one keeps its process), and the
//! `observe` events taken from the bus (request finished, budget stop), and the tool
//! loop's tools joined by the ones plugins declare ([`with_plugin_tools`]).

use std::path::PathBuf;
use std::sync::Arc;

use glider_config::Config;
use glider_plugin::Plugins;
use glider_sys::runstate::DelegatePids;
use glider_sys::safego;
use tokio::sync::broadcast::error::RecvError;

use crate::events::{Bus, PipelineEvent};
use crate::hotswap::{HotSwap, Swap, Swapped};

pub(crate) struct PluginsModule {
    pub(crate) current: Arc<Swap<Plugins>>,
    /// Where plugin commands run (the config file's directory).
    pub(crate) base: PathBuf,
    /// Where each plugin's process group is recorded.
    pub(crate) pids: Option<DelegatePids>,
    /// The `plugins:` section the current set was built from (a reload that leaves it
    /// as it was swaps nothing).
    pub(crate) applied: std::sync::Mutex<Vec<glider_config::PluginConfig>>,
}

impl PluginsModule {
    /// The set for `config`, built from the current one; the hosts it no longer has are
    /// stopped in the background.
    fn swap_in(&self, config: &Config) {
        *self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config.plugins.clone();
        let mut gone = Vec::new();
        let _ = self.current.swap_with(|previous| {
            let (next, stopped) = Plugins::build(
                &config.plugins,
                Some(previous),
                &self.base,
                self.pids.as_ref(),
            );
            gone = stopped;
            Ok(next)
        });
        if !gone.is_empty() {
            safego::spawn_once("plugin stop", async move {
                glider_plugin::stop_all(&gone).await;
            });
        }
    }
}

impl HotSwap for PluginsModule {
    fn name(&self) -> &'static str {
        "plugins"
    }

    /// Never fails: a plugin that cannot start is retried with backoff and its calls
    /// go on without it.
    fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String> {
        let unchanged = *self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            == config.plugins;
        if unchanged {
            return Ok(Swapped::Unchanged);
        }
        self.swap_in(config);
        Ok(Swapped::New)
    }
}

/// Build the first set from `config` and register it for reloads; returns the swap
/// the pipeline snapshots.
pub(crate) fn attach(
    config: &Config,
    base: PathBuf,
    pids: Option<DelegatePids>,
    bus: &Bus,
) -> (Arc<Swap<Plugins>>, Arc<PluginsModule>) {
    let module = Arc::new(PluginsModule {
        current: Arc::new(Swap::new(Plugins::default())),
        base,
        pids,
        applied: Default::default(),
    });
    module.swap_in(config);
    let current = module.current.clone();
    let (bus, plugins) = (bus.clone(), Arc::downgrade(&current));
    safego::spawn_named("plugin observe feed", safego::Restart::BACKOFF, move || {
        let (mut events, plugins) = (bus.subscribe(), plugins.clone());
        async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => event,
                    // The plugins' own queues count their gaps; the bus's lag is the
                    // dashboard's to show.
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                let Some(plugins) = plugins.upgrade() else {
                    return;
                };
                let PipelineEvent::RequestFinished(record) = event.as_ref() else {
                    continue;
                };
                let plugins = plugins.snapshot();
                plugins.observe("request_finished", || {
                    serde_json::to_value(record).unwrap_or_default()
                });
                if let Some(stop) = &record.budget_stop {
                    plugins.observe("budget_stop", || {
                        serde_json::json!({"request_id": record.id, "session": record.session, "stop": stop})
                    });
                }
            }
        }
    });
    (current, module)
}

/// `tools` (the runtime's: internal, MCP) and after them the tools the request's plugins
/// declare; a name an earlier provider offers stays the earlier one's. The request's
/// own snapshot of the plugins, so a reload mid-loop changes nothing for it.
pub(crate) fn with_plugin_tools(
    tools: &glider_tools::ToolSet,
    plugins: Option<&Arc<Plugins>>,
) -> glider_tools::ToolSet {
    match plugins {
        Some(plugins) if !plugins.is_empty() => tools.clone().with(plugins.clone()),
        _ => tools.clone(),
    }
}
