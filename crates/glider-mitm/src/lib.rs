//! The MITM proxy door (spec package `mitm`): a CONNECT proxy on `mitm.port` that
//! decrypts the hosts in `mitm.hosts` with leaf certificates from Glider's own CA,
//! answers model requests through the door kit's sequence (`glider-door`) with
//! `origin_passthrough` set, and sends everything else to the CLI's origin untouched.
//! The mechanics ([`proxy`]) meet the API path and the Cursor plane at one
//! [`handler::HttpHandler`] seam. Hosts not listed are
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

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use glider_config::MitmConfig;
use glider_engine::Engine;
use glider_sys::listen::{Drain, Limits};
use tokio::net::TcpListener;

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

impl Mitm {
    /// Build the proxy from the engine's config: load or make the CA, build the host
    /// matcher and the origin client. `home` is `GLIDER_HOME`. Delegations get a
    /// delegate handler of their own.
    pub fn new(engine: Arc<Engine>, home: &Path) -> Result<Arc<Mitm>, MitmError> {
        Mitm::with_delegator(engine, home, Arc::new(glider_delegate::Delegator::new()))
    }

    /// [`Mitm::new`], delegating through `delegator` (shared with the gateway, so a
    /// `/claude` run continues whichever door the next message comes through, and with
    /// runstate's record of delegate processes).
    pub fn with_delegator(
        engine: Arc<Engine>,
        home: &Path,
        delegator: Arc<glider_delegate::Delegator>,
    ) -> Result<Arc<Mitm>, MitmError> {
        let config = engine.runtime().config.clone();
        let mitm = &config.mitm;
        let authority = Arc::new(Authority::load_or_create(&ca_dir(mitm, home))?);
        let extra_ca = mitm.upstream_ca_file.as_deref().map(expand_home);
        // Transparent mode marks Glider's own origin sockets so its redirect skips them.
        let mark = mitm.transparent.then_some(transparent::GLIDER_MARK);
        let upstream = Upstream::new(&mitm.upstream_overrides, extra_ca.as_deref(), mark)?;
        for (host, target) in &mitm.upstream_overrides {
            tracing::info!(%host, %target, "origin override (mitm.upstream_overrides)");
        }
        let dumps = debug::DebugDumps::new(home.join("mitm").join("debug"));
        if mitm.debug_agent_rpc || debug::env_enabled() {
            dumps.warn_once();
        }
        Ok(Arc::new(Mitm {
            leaves: LeafCache::new(authority.clone()),
            hosts: HostMatcher::new(&mitm.hosts),
            engine,
            authority,
            upstream,
            dumps,
            agent_rpc: cursor::AgentRpc::default(),
            delegator,
            drain: std::sync::OnceLock::new(),
            responses: std::sync::OnceLock::new(),
        }))
    }

    /// Glider's CA.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Cursor's Agent RPC plane.
    pub fn agent_rpc(&self) -> &cursor::AgentRpc {
        &self.agent_rpc
    }

    /// The leaf certificate cache.
    pub fn leaves(&self) -> &LeafCache {
        &self.leaves
    }

    /// Accept proxy clients on `listener` until `shutdown` resolves, under the config's
    /// client timeouts and drain deadline (see [`Mitm::serve_draining`]).
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let grace = self.engine.runtime().config.server.shutdown_grace_secs;
        let drain = Drain::on(shutdown, std::time::Duration::from_secs(grace));
        self.serve_draining(listener, drain).await
    }

    /// Accept proxy clients on `listener` until `drain` starts, then wait for the open
    /// connections (the decrypted tunnels included) until its deadline. Tunnels of
    /// hosts Glider does not decrypt are bytes it does not read: they stay until either
    /// side closes or the process ends.
    pub async fn serve_draining(
        self: Arc<Self>,
        listener: TcpListener,
        drain: Drain,
    ) -> std::io::Result<()> {
        self.use_drain(drain.clone());
        let limits = self.client_limits();
        let mitm = self.clone();
        let service = hyper::service::service_fn(move |request| {
            let mitm = mitm.clone();
            async move { Ok::<_, std::convert::Infallible>(mitm.proxy_request(request).await) }
        });
        glider_sys::listen::serve(listener, service, limits, drain).await
    }

    /// Serve the decrypted tunnels under `drain` (the proxy's and the transparent
    /// door's); the first drain set stays.
    pub fn use_drain(&self, drain: Drain) {
        let _ = self.drain.set(drain);
    }

    /// Store the Responses answered locally in `store`, and continue their
    /// `previous_response_id` chains from it (the gateway's store; the first set stays).
    pub fn use_responses(&self, store: Arc<glider_context::ResponseStore>) {
        let _ = self.responses.set(store);
    }

    /// The stored Responses, when [`Mitm::use_responses`] gave a store.
    pub(crate) fn responses(&self) -> Option<&Arc<glider_context::ResponseStore>> {
        self.responses.get()
    }

    /// The drain decrypted connections are served under: the one set by
    /// [`Mitm::use_drain`], else one that never starts (a proxy served by no loop).
    pub(crate) fn drain(&self) -> Drain {
        self.drain
            .get_or_init(|| Drain::on(std::future::pending(), std::time::Duration::ZERO))
            .clone()
    }

    /// The client timeouts of `server.*_timeout_secs`.
    pub(crate) fn client_limits(&self) -> Limits {
        self.engine.runtime().config.server.client_limits()
    }
}
