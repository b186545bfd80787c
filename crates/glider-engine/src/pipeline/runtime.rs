//! The runtime snapshot — backends, classifier and Starlark rules built from one
//! config — and how the engine follows config and rules-file changes: each change goes
//! through the [`hotswap`](crate::hotswap) registry. Three parts of the snapshot are
//! modules of their own there, each validated and kept or swapped on its own:
//! `backends` ([`BackendsModule`]: a changed backend that cannot be built keeps the
//! previous set), `classifier` ([`ClassifierModule`]) and `fan_out` ([`FanOutModule`]:
//! checked against the backends in use); `runtime` then assembles the snapshot from
//! what each kept, so a request reads one consistent set.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use glider_backend::Backend;
use glider_config::{BackendConfig, ClassifierConfig, Config, ConfigHandle, FanOutConfig};
use glider_starlark::Rules;

use super::Engine;
use crate::events::{PipelineEvent, unix_ms};
use crate::hotswap::{HotSwap, Swap, Swapped};
use crate::router::Router;
use crate::router::classifier::{Classifier, ScoringClassifier};
use crate::router::sticky::StickyStore;

/// Backends built from one config; replaced whole on reload.
pub struct Runtime {
    pub config: Arc<Config>,
    pub backends: Vec<Arc<Backend>>,
    /// The classifier built from `routing.classifier` (rebuilt on reload: the hot swap).
    pub classifier: Box<dyn Classifier>,
    /// The compiled Starlark rules, if configured and valid.
    pub starlark: Option<Arc<Rules>>,
    /// Why the configured Starlark file is not in use, if so.
    pub starlark_error: Option<String>,
    /// The tools Glider runs itself for a local answer (`tools:`; `tools.loop`).
    pub tools: glider_tools::ToolSet,
}

impl Runtime {
    /// Build from `config` over `backends` (built from its `backends:`, see
    /// [`build_backends`]). `base` is the directory relative paths in the config are
    /// read from.
    pub(crate) fn build(
        config: Arc<Config>,
        backends: Vec<Arc<Backend>>,
        base: &Path,
        providers: &[Arc<dyn glider_tools::ToolProvider>],
    ) -> Runtime {
        let classifier = Box::new(ScoringClassifier::from_config(&config.routing.classifier));
        let (starlark, starlark_error) = match load_rules(&config, base) {
            Ok(rules) => (rules.map(Arc::new), None),
            Err(error) => {
                tracing::error!(%error, "starlark rules not loaded; the rule is skipped");
                (None, Some(error))
            }
        };
        let tools = tool_set(&config, base, providers);
        Runtime {
            config,
            backends,
            classifier,
            starlark,
            starlark_error,
            tools,
        }
    }

    /// The router over this snapshot.
    pub fn router<'a>(&'a self, sticky: &'a StickyStore) -> Router<'a> {
        Router {
            config: &self.config,
            backends: &self.backends,
            classifier: self.classifier.as_ref(),
            starlark: self.starlark.as_deref(),
            sticky,
        }
    }

    pub fn backend(&self, name: &str) -> Option<&Arc<Backend>> {
        self.backends.iter().find(|b| b.name() == name)
    }
}

/// The directory of the config file (relative paths in it are read from there).
pub(crate) fn config_dir(config: &ConfigHandle) -> PathBuf {
    config
        .path()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The path of the configured Starlark file, relative paths read from `base`.
pub fn rules_path(config: &Config, base: &Path) -> Option<PathBuf> {
    let file = config.routing.starlark.file.as_ref()?;
    let path = Path::new(file);
    Some(if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    })
}

fn load_rules(config: &Config, base: &Path) -> Result<Option<Rules>, String> {
    let Some(path) = rules_path(config, base) else {
        return Ok(None);
    };
    let source = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Rules::compile(&path.display().to_string(), &source).map(Some)
}

/// The backends of `configs`, reusing `previous` ones whose config did not change (so
/// their breaker and health survive the reload). On a reload (`previous` given) a new
/// or changed backend that cannot be built (a `${VAR}` unset, a header that is not
/// HTTP) fails the whole set, which then keeps the previous one; at start such a
/// backend is kept, unavailable, and says why when used.
pub(crate) fn build_backends(
    configs: &[BackendConfig],
    previous: Option<&[Arc<Backend>]>,
) -> Result<Vec<Arc<Backend>>, String> {
    let mut problems = Vec::new();
    let backends = configs
        .iter()
        .map(|bc| {
            let kept = previous.and_then(|p| {
                p.iter()
                    .find(|b| b.config.name == bc.name && raw_config_eq(b, bc))
            });
            match kept {
                Some(kept) => kept.clone(),
                None => {
                    let built = Backend::new(bc.clone());
                    if let (Some(why), Some(_)) = (&built.unavailable, previous) {
                        problems.push(format!("backend {}: {why}", bc.name));
                    }
                    built
                }
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(backends)
    } else {
        Err(problems.join("; "))
    }
}

fn raw_config_eq(backend: &Backend, config: &glider_config::BackendConfig) -> bool {
    // `Backend` stores its base URL resolved; compare with the config as written.
    let resolved = glider_config::Secret(config.base_url.clone())
        .resolve()
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or_else(|_| config.base_url.clone());
    let written = glider_config::BackendConfig {
        base_url: resolved,
        ..config.clone()
    };
    backend.config == written
}

/// Module `backends`: the set built from `backends:` (with the config it was built
/// from, as written), kept whole when a reload's set cannot be built.
pub(crate) struct BackendsModule {
    pub(crate) current: Swap<(Vec<BackendConfig>, Vec<Arc<Backend>>)>,
}

impl BackendsModule {
    pub(crate) fn new(config: &Config) -> BackendsModule {
        // At start nothing is compared, so the build cannot fail.
        let backends = build_backends(&config.backends, None).unwrap_or_default();
        BackendsModule {
            current: Swap::new((config.backends.clone(), backends)),
        }
    }
}

impl HotSwap for BackendsModule {
    fn name(&self) -> &'static str {
        "backends"
    }

    fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String> {
        if self.current.snapshot().0 == config.backends {
            return Ok(Swapped::Unchanged);
        }
        self.current.swap_with(|(_, previous)| {
            build_backends(&config.backends, Some(previous))
                .map(|backends| (config.backends.clone(), backends))
        })?;
        Ok(Swapped::New)
    }
}

/// Module `classifier`: the `routing.classifier` section the runtime's classifier is
/// built from. The file's checks of its weights and thresholds are its validation, so
/// its reload cannot fail: it is a module for its record (version and swaps on
/// `/api/hotswap`); the runtime builds the classifier from the config itself.
pub(crate) struct ClassifierModule {
    pub(crate) current: Swap<ClassifierConfig>,
}

impl HotSwap for ClassifierModule {
    fn name(&self) -> &'static str {
        "classifier"
    }

    fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String> {
        let next = &config.routing.classifier;
        if *self.current.snapshot() == *next {
            return Ok(Swapped::Unchanged);
        }
        self.current.swap_with(|_| Ok(next.clone()))?;
        Ok(Swapped::New)
    }
}

/// Module `fan_out`: the `fan_out:` section, validated against the backends in use
/// (module `backends` reloads first; when it kept its previous set, a shadow target
/// only the new file has is not there).
pub(crate) struct FanOutModule {
    pub(crate) current: Swap<FanOutConfig>,
    pub(crate) backends: Arc<BackendsModule>,
}

impl FanOutModule {
    /// Why `fan_out` cannot run over `backends`, if so.
    fn check(fan_out: &FanOutConfig, backends: &[Arc<Backend>]) -> Result<(), String> {
        match &fan_out.shadow.target {
            Some(name)
                if !backends
                    .iter()
                    .any(|b| b.config.enabled && b.name() == name) =>
            {
                Err(format!(
                    "fan_out.shadow.target {name:?} is not a backend in use (the backends module kept its previous set)"
                ))
            }
            _ => Ok(()),
        }
    }
}

impl HotSwap for FanOutModule {
    fn name(&self) -> &'static str {
        "fan_out"
    }

    fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String> {
        let next = &config.fan_out;
        if *self.current.snapshot() == *next {
            return Ok(Swapped::Unchanged);
        }
        Self::check(next, &self.backends.current.snapshot().1)?;
        self.current.swap_with(|_| Ok(next.clone()))?;
        Ok(Swapped::New)
    }
}

/// Module `runtime`, registered after the three above: the snapshot requests read,
/// assembled from the new config with the backends, classifier and fan-out each of
/// those modules kept. Routing reads backends and rules from one snapshot, so the
/// Starlark rules are rebuilt with it (a request never sees new rules with old
/// backends).
pub(crate) struct RuntimeModule {
    pub(crate) current: Arc<Swap<Runtime>>,
    pub(crate) backends: Arc<BackendsModule>,
    pub(crate) classifier: Arc<ClassifierModule>,
    pub(crate) fan_out: Arc<FanOutModule>,
    /// Where relative paths in the config are read from.
    pub(crate) base: PathBuf,
    /// The tool providers attached besides the internal tools (the MCP hub, …), in
    /// order. Held locked while a runtime is built and swapped in, so an attach and a
    /// reload never lose each other's change.
    pub(crate) providers: Mutex<Vec<Arc<dyn glider_tools::ToolProvider>>>,
}

impl RuntimeModule {
    /// The modules of a fresh engine over `config`, the runtime built from them.
    pub(crate) fn start(config: Arc<Config>, base: PathBuf) -> RuntimeModule {
        let backends = Arc::new(BackendsModule::new(&config));
        let classifier = Arc::new(ClassifierModule {
            current: Swap::new(config.routing.classifier.clone()),
        });
        let fan_out = Arc::new(FanOutModule {
            current: Swap::new(config.fan_out.clone()),
            backends: backends.clone(),
        });
        let runtime = Runtime::build(config, backends.current.snapshot().1.clone(), &base, &[]);
        RuntimeModule {
            current: Arc::new(Swap::new(runtime)),
            backends,
            classifier,
            fan_out,
            base,
            providers: Default::default(),
        }
    }

    /// The modules to register, in reload order (this one last).
    pub(crate) fn modules(self: &Arc<Self>) -> [Arc<dyn HotSwap>; 4] {
        [
            self.backends.clone(),
            self.classifier.clone(),
            self.fan_out.clone(),
            self.clone(),
        ]
    }

    /// `config` with the sections of the modules that kept their previous state as
    /// they kept it.
    fn assembled(&self, config: &Config) -> Config {
        let mut assembled = config.clone();
        assembled.backends = self.backends.current.snapshot().0.clone();
        assembled.fan_out = (*self.fan_out.current.snapshot()).clone();
        assembled
    }

    /// Rebuild the runtime with the attached providers, from `config` or, with none,
    /// from the current runtime's config (read under the lock, so a reload that swapped
    /// in a newer one meanwhile is not undone).
    fn rebuild_with(
        &self,
        config: Option<&Arc<Config>>,
        attach: Option<Arc<dyn glider_tools::ToolProvider>>,
    ) {
        let mut providers = self
            .providers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        providers.extend(attach);
        let _ = self.current.swap_with(|previous| {
            let config = match config {
                Some(config) => Arc::new(self.assembled(config)),
                None => previous.config.clone(),
            };
            let backends = self.backends.current.snapshot().1.clone();
            Ok(Runtime::build(config, backends, &self.base, &providers))
        });
    }

    /// Add `provider` to every runtime from now on (the current one rebuilt with it).
    pub(crate) fn attach_tools(&self, provider: Arc<dyn glider_tools::ToolProvider>) {
        self.rebuild_with(None, Some(provider));
    }
}

impl HotSwap for RuntimeModule {
    fn name(&self) -> &'static str {
        "runtime"
    }

    /// Never fails as a whole: a Starlark file that does not compile leaves the rule
    /// out of the new snapshot and says why in `Runtime::starlark_error`.
    fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String> {
        self.rebuild_with(Some(config), None);
        Ok(Swapped::New)
    }
}

impl Engine {
    /// Rebuild the runtime whenever the config changes (backends whose settings did not
    /// change keep their breaker and health), then say so on the bus; record a config
    /// file the reload rejected as a failed swap.
    pub fn follow_config(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let handle = self.config.clone();
        // A restart subscribes again; a change made while the follower was down is seen
        // as the next one is.
        glider_sys::safego::spawn_named(
            "config follower",
            glider_sys::safego::Restart::BACKOFF,
            move || {
                let (weak, mut changes) = (weak.clone(), handle.subscribe());
                async move {
                    while changes.changed().await.is_ok() {
                        let Some(engine) = weak.upgrade() else { break };
                        let config = changes.borrow_and_update().clone();
                        engine.rebuild(config);
                    }
                }
            },
        );
        let weak = Arc::downgrade(self);
        let handle = self.config.clone();
        glider_sys::safego::spawn_named(
            "config rejection recorder",
            glider_sys::safego::Restart::BACKOFF,
            move || {
                let (weak, mut rejections) = (weak.clone(), handle.subscribe_rejections());
                async move {
                    while rejections.changed().await.is_ok() {
                        let Some(engine) = weak.upgrade() else { break };
                        let why = rejections.borrow_and_update().clone();
                        if let Some(why) = why {
                            engine
                                .hotswap
                                .record(crate::hotswap::CONFIG_MODULE, Err(why));
                        }
                    }
                }
            },
        );
    }

    /// Hand `config` to every hot-swappable module and publish the result.
    fn rebuild(&self, config: Arc<Config>) {
        for (module, error) in self.hotswap.reload(&config) {
            tracing::error!(module, %error, "module kept its previous state");
        }
        let backends = self
            .runtime()
            .backends
            .iter()
            .map(|b| b.name().to_owned())
            .collect();
        self.bus.publish(PipelineEvent::ConfigReloaded {
            at_ms: unix_ms(),
            backends,
        });
    }

    /// Recompile the Starlark rules whenever their file changes (the file named by the
    /// config at start; a config reload that names another file recompiles at once).
    /// Returns the OS watcher, which must be kept alive.
    pub fn watch_rules(self: &Arc<Self>) -> Option<glider_config::FileWatcher> {
        let path = rules_path(&self.runtime().config, &config_dir(&self.config))?;
        let weak = Arc::downgrade(self);
        match glider_config::watch_path(&path, move || {
            let Some(engine) = weak.upgrade() else {
                return false;
            };
            engine.rebuild(engine.runtime().config.clone());
            tracing::info!("starlark rules reloaded");
            true
        }) {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(%error, "cannot watch the starlark rules file");
                None
            }
        }
    }
}

/// The internal tools over `tools.workspace` (a relative root is read from `base`, the
/// config file's directory; off without a workspace), then the attached `providers`.
fn tool_set(
    config: &Config,
    base: &Path,
    providers: &[Arc<dyn glider_tools::ToolProvider>],
) -> glider_tools::ToolSet {
    let mut tools = config.tools.clone();
    if let Some(root) = &tools.workspace {
        tools.workspace = Some(base.join(root).display().to_string());
    }
    let internal = glider_tools::InternalTools::from_config(&tools);
    if let (Some(why), true) = (internal.unavailable(), config.tools.workspace.is_some()) {
        tracing::error!(error = %why, "the internal tools are off");
    }
    providers.iter().fold(
        glider_tools::ToolSet::new().with(Arc::new(internal)),
        |set, p| set.with(p.clone()),
    )
}
