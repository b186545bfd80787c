//! MCP for Glider (spec package `mcp`): the client hub that keeps one supervised
//! connection per configured server (a stdio child in its own process group, or a
//! Streamable HTTP endpoint), offers their tools under prefixed names filtered by each
//! server's `allow` / `deny`, and forwards calls ([`McpHub`]); and the gateway's `/mcp`
//! Streamable HTTP server that offers the union of those tools ([`server`]).
//!
//! The hub's small API ([`McpHub::tools`], [`McpHub::call`]) is what both `/mcp` and
//! the tool loop use (the loop through the hub's `glider_tools::ToolProvider`,
//! [`provider`]); it speaks plain JSON so neither needs to know rmcp.

pub mod auth;
mod provider;
pub mod server;
mod supervise;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use glider_config::mcp::TOOL_SEPARATOR;
use glider_config::{McpConfig, McpServerConfig};
use glider_sys::runstate::DelegatePids;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use supervise::{CLOSE_GRACE, MAX_LINE_BYTES, STDERR_LINE_BYTES, ServerState};

/// One tool the hub offers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// `SERVER__tool`: unique across servers.
    pub name: String,
    pub description: String,
    /// The tool's JSON Schema for its arguments (an object schema).
    pub input_schema: serde_json::Map<String, serde_json::Value>,
}

/// What a tool call returned (the call reached the tool; `is_error` says whether the
/// tool itself reported a failure).
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// The result as the server sent it (content blocks, structured content).
    pub result: CallToolResult,
}

impl ToolOutput {
    /// Whether the tool reported an error (the call itself went through).
    pub fn is_error(&self) -> bool {
        self.result.is_error == Some(true)
    }

    /// The text blocks of the result, joined by newlines (what a model reads).
    pub fn text(&self) -> String {
        self.result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Why a tool call did not reach a tool or got no answer.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ToolError {
    #[error("no tool is named {0:?} (tools are named SERVER{TOOL_SEPARATOR}tool)")]
    UnknownTool(String),
    #[error("tool {tool:?} is not offered by MCP server {server:?} (its allow/deny lists)")]
    NotOffered { server: String, tool: String },
    #[error("MCP server {server:?} is not ready: {state}")]
    Unavailable { server: String, state: String },
    #[error("the arguments of a tool call must be a JSON object")]
    BadArguments,
    #[error("MCP server {server:?} failed the call: {why}")]
    Failed { server: String, why: String },
    #[error("MCP server {server:?} did not answer within {secs} s")]
    TimedOut { server: String, secs: u64 },
}

/// One server as the dashboard shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ServerView {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub state: ServerState,
    /// The tools offered (prefixed), empty while the server is down.
    pub tools: Vec<String>,
    pub calls: u64,
    pub errors: u64,
    /// Unix seconds of the last restart, if any.
    pub last_restart: Option<u64>,
    pub restarts: u64,
    /// Stdout lines past `supervise::MAX_LINE_BYTES`, each of which ended a connection.
    pub long_lines: u64,
    /// The protocol revision negotiated (`2026-07-28` stateless, or a session-based
    /// one such as `2025-11-25`), while connected.
    pub protocol: Option<String>,
}

/// The MCP servers Glider is connected to. Cheap to clone.
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Mutex<BTreeMap<String, Running>>,
    settings: Mutex<Settings>,
    /// Bumped whenever the set of offered tools changes (`/mcp` tells its clients).
    tools_changed: watch::Sender<u64>,
    /// Where stdio servers' process groups are recorded while they run.
    pids: Option<DelegatePids>,
    /// Where `oauth:` servers' tokens are kept ([`auth::token_dir`]).
    token_dir: std::sync::OnceLock<std::path::PathBuf>,
}

#[derive(Clone, Copy)]
struct Settings {
    restart_initial: Duration,
    restart_max: Duration,
    call_timeout: Duration,
}

/// A server's supervisor and what it shares with the hub.
struct Running {
    config: McpServerConfig,
    live: Arc<supervise::Live>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl McpHub {
    /// A hub with no servers; `pids` records stdio servers' process groups in the run
    /// state, so a start after a crash can end the ones left behind.
    pub fn new(pids: Option<DelegatePids>) -> McpHub {
        let defaults = McpConfig::default();
        McpHub {
            inner: Arc::new(Inner {
                servers: Mutex::new(BTreeMap::new()),
                settings: Mutex::new(settings_of(&defaults)),
                tools_changed: watch::channel(0).0,
                pids,
                token_dir: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Keep `oauth:` servers' tokens in `dir` (set once, before [`McpHub::apply`]).
    pub fn set_token_dir(&self, dir: std::path::PathBuf) {
        let _ = self.inner.token_dir.set(dir);
    }

    /// Bring the servers in line with `config`: start new ones, restart changed ones,
    /// stop removed or disabled ones, leave the rest untouched. Needs a Tokio runtime.
    pub fn apply(&self, config: &McpConfig) {
        *lock(&self.inner.settings) = settings_of(config);
        let mut servers = lock(&self.inner.servers);
        let wanted: BTreeMap<&String, &McpServerConfig> =
            config.servers.iter().filter(|(_, s)| s.enabled).collect();
        let gone: Vec<String> = servers
            .iter()
            .filter(|(name, running)| wanted.get(name).is_none_or(|c| **c != running.config))
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(running) = servers.remove(&name) {
                tracing::info!(server = %name, "stopping MCP server");
                running.stop.cancel();
                let changed = self.inner.tools_changed.clone();
                tokio::spawn(async move {
                    let _ = running.task.await;
                    changed.send_modify(|n| *n += 1);
                });
            }
        }
        for (name, config) in wanted {
            if servers.contains_key(name) {
                continue;
            }
            let live = Arc::new(supervise::Live::new(name.clone(), config));
            let stop = CancellationToken::new();
            let task = tokio::spawn(supervise::run(supervise::Supervisor {
                live: live.clone(),
                config: config.clone(),
                stop: stop.clone(),
                hub: Arc::downgrade(&self.inner),
            }));
            servers.insert(
                name.clone(),
                Running {
                    config: config.clone(),
                    live,
                    stop,
                    task,
                },
            );
        }
    }

    /// Stop every server and wait until their processes are ended.
    pub async fn shutdown(&self) {
        let running: Vec<Running> = std::mem::take(&mut *lock(&self.inner.servers))
            .into_values()
            .collect();
        for server in &running {
            server.stop.cancel();
        }
        for server in running {
            let _ = server.task.await;
        }
        self.inner.tools_changed.send_modify(|n| *n += 1);
    }

    /// Every tool offered now, by prefixed name (servers that are down offer none).
    pub fn tools(&self) -> Vec<ToolSpec> {
        let servers = lock(&self.inner.servers);
        servers
            .values()
            .flat_map(|running| running.live.offered_tools())
            .collect()
    }

    /// Call the tool `name` (`SERVER__tool`) with `arguments` (a JSON object, or null
    /// for none) and return what it answered.
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let Some((server, tool)) = name.split_once(TOOL_SEPARATOR) else {
            return Err(ToolError::UnknownTool(name.to_owned()));
        };
        let arguments = match arguments {
            serde_json::Value::Object(map) => Some(map),
            serde_json::Value::Null => None,
            _ => return Err(ToolError::BadArguments),
        };
        let live = lock(&self.inner.servers)
            .get(server)
            .map(|running| running.live.clone())
            .ok_or_else(|| ToolError::UnknownTool(name.to_owned()))?;
        if !live.offers(tool) {
            return Err(ToolError::NotOffered {
                server: server.to_owned(),
                tool: tool.to_owned(),
            });
        }
        let peer = live.peer().ok_or_else(|| ToolError::Unavailable {
            server: server.to_owned(),
            state: live.state().to_string(),
        })?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let timeout = lock(&self.inner.settings).call_timeout;
        let outcome = tokio::time::timeout(timeout, peer.call_tool(params)).await;
        let result = match outcome {
            Ok(Ok(result)) => Ok(ToolOutput { result }),
            Ok(Err(e)) => Err(ToolError::Failed {
                server: server.to_owned(),
                why: e.to_string(),
            }),
            Err(_) => Err(ToolError::TimedOut {
                server: server.to_owned(),
                secs: timeout.as_secs(),
            }),
        };
        live.count_call(!result.as_ref().is_ok_and(|output| !output.is_error()));
        result
    }

    /// Each server's state, tools and counters, by name.
    pub fn servers(&self) -> Vec<ServerView> {
        lock(&self.inner.servers)
            .values()
            .map(|running| running.live.view())
            .collect()
    }

    /// Tell `/mcp` that tools it serves besides the hub's (the internal ones) may have
    /// changed; its clients are notified only if the list it serves did change.
    pub fn tools_may_have_changed(&self) {
        self.inner.tools_changed();
    }

    /// A receiver that sees a new number whenever the offered tools change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.tools_changed.subscribe()
    }
}

impl Inner {
    fn tools_changed(&self) {
        self.tools_changed.send_modify(|n| *n += 1);
    }
}

fn settings_of(config: &McpConfig) -> Settings {
    Settings {
        restart_initial: Duration::from_secs_f64(config.restart_initial_secs.max(0.01)),
        restart_max: Duration::from_secs_f64(
            config
                .restart_max_secs
                .max(config.restart_initial_secs.max(0.01)),
        ),
        call_timeout: Duration::from_secs(config.call_timeout_secs.max(1)),
    }
}

/// A poisoned lock still holds consistent data here (every update is one assignment).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
