//! Glider's configuration (spec package `config`): the YAML schema with defaults and
//! validation ([`schema`]), `${VAR}` interpolation of secrets ([`Secret`]), and the live
//! snapshot with hot reload ([`watch`]), which applies every key but the restart-only
//! ones ([`reload`]). A request reads one immutable `Arc<Config>`.

pub mod fan_out;
pub mod mcp;
pub mod plugins;
pub mod pricing;
pub mod reload;
pub mod schema;
pub mod tools;
pub mod vram;
pub mod watch;

pub use fan_out::{FanOutConfig, FanOutMode, FanOutPolicy, FanOutRoute, ShadowConfig};
pub use mcp::{McpConfig, McpServerConfig};
pub use plugins::PluginConfig;
pub use pricing::{ModelPrice, PricingConfig};
pub use reload::{RESTART_ONLY, is_restart_only, restart_only_keys};
pub use schema::*;
pub use tools::{SandboxMode, ToolLoopConfig, ToolsConfig};
pub use vram::{MonitorKind, SleepConfig, Strategy, VramConfig, VramModel};
pub use watch::{ConfigHandle, FileWatcher, ReloadOutcome, watch_path};

/// What can be wrong with a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// YAML syntax or type error; the message carries line and column.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// Parsed, but the values do not make sense together.
    #[error("{path}: {}", problems.join("; "))]
    Invalid { path: String, problems: Vec<String> },
}
