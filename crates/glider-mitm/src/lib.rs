//! The MITM proxy door (spec package `mitm`): a CONNECT proxy on `mitm.port` that
//! decrypts the hosts in `mitm.hosts` with leaf certificates from Glider's own CA,
//! answers model requests through the door kit's sequence (`glider-door`) with
//! `origin_passthrough` set, and sends everything else to the CLI's origin untouched.
//! The proxy itself, [`Mitm`], is built and runs in [`proxy`], whose mechanics meet the
//! API path and the Cursor plane at one [`handler::HttpHandler`] seam. Hosts not listed are
//! tunnelled as bytes, or refused when `mitm.passthrough_default` is false.

mod api;
mod body;
pub mod ca;
pub mod cursor;
pub mod debug;
pub mod handler;
pub mod hosts;
pub mod proxy;
pub mod transparent;
pub mod trust;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use glider_config::MitmConfig;
use glider_engine::Engine;
use glider_sys::listen::Drain;

pub use api::api_front;
pub use ca::{Authority, CaError, LeafCache};
pub use handler::Target;
pub use hosts::HostMatcher;
pub use upstream::Upstream;

/// What can stop the proxy from starting.
#[derive(Debug, thiserror::Error)]
pub enum MitmError {
    #[error("Glider CA: {0}")]
    Ca(#[from] CaError),
    #[error("{0}")]
    Config(String),
}

/// The CA directory: `mitm.ca_dir` (a leading `~/` is the home directory), else
/// `GLIDER_HOME/mitm`.
pub fn ca_dir(config: &MitmConfig, home: &Path) -> PathBuf {
    match &config.ca_dir {
        Some(dir) => expand_home(dir),
        None => home.join("mitm"),
    }
}

/// `~/x` → `$HOME/x`; anything else as written.
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// The proxy: shared by every connection it serves.
pub struct Mitm {
    engine: Arc<Engine>,
    authority: Arc<Authority>,
    leaves: LeafCache,
    hosts: HostMatcher,
    upstream: Upstream,
    dumps: debug::DebugDumps,
    /// Cursor's Agent RPC plane (the fulfill hub).
    agent_rpc: cursor::AgentRpc,
    /// Takes `/claude`, `/cursor-agent` and `/agy` messages before the pipeline.
    delegator: Arc<glider_delegate::Delegator>,
    /// The shutdown its connections are served under.
    drain: std::sync::OnceLock<Drain>,
    /// Stored Responses, for a Responses request answered locally (set once).
    responses: std::sync::OnceLock<Arc<glider_context::ResponseStore>>,
}
