//! The proxy: [`Mitm`]'s one `impl` — how it is built (the CA, the host matcher, the
//! way out), served and drained — and its mechanics, in two layers. Outside: an
//! HTTP/1.1 proxy server that answers `CONNECT` (decrypt a listed host, tunnel or
//! refuse the others) and plain-HTTP absolute-form requests. Inside a decrypted tunnel:
//! TLS with a leaf for the host, then an HTTP/1.1 + HTTP/2 server that hands Agent RPC
//! and model requests to their [`crate::handler::HttpHandler`] and forwards everything
//! else to the origin untouched. One file past 600 lines on purpose: every method reads
//! the same fields and the two layers call each other (`connect` → `intercept` →
//! `decrypted_request` → `handle` → `forward`), so a split would spread one type's one
//! `impl` over files; what is not the proxy's (the API path, the Cursor plane, the
//! origin's body, the CA) is in modules of its own.

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use glider_door::{error_response, render};
use glider_engine::{Engine, Tracker};
use glider_ngl::{ApiError, ErrorKind};
use glider_sys::listen::{Cutoff, Drain, Limits};
use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::api::{ApiHandler, api_front};
use crate::body::origin_body;
use crate::ca::{Authority, LeafCache};
use crate::cursor::AgentRpcHandler;
use crate::handler::{HandlerCtx, HttpHandler, OriginBound, RequestOrResponse, Target};
use crate::hosts::HostMatcher;
use crate::upstream::Upstream;
use crate::upstream::{strip_hop_by_hop, upgrade_protocol};
use crate::{Mitm, MitmError, ca_dir, cursor, debug, expand_home, transparent};

/// Longest a client may take to finish the TLS handshake inside a tunnel.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

    /// One request on the proxy port: CONNECT, or an absolute-form plain-HTTP request.
    pub(crate) async fn proxy_request(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Response<Body> {
        if request.method() == Method::CONNECT {
            return self.connect(request).await;
        }
        let uri = request.uri();
        let (Some(host), Some(scheme)) = (uri.host(), uri.scheme_str()) else {
            return text(
                StatusCode::BAD_REQUEST,
                "This is Glider's MITM proxy. Use it as a proxy (HTTPS_PROXY=http://<this address>), not as a server.\n",
            );
        };
        let scheme = if scheme.eq_ignore_ascii_case("https") {
            "https"
        } else {
            "http"
        };
        let target = Target {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: uri
                .port_u16()
                .unwrap_or(if scheme == "https" { 443 } else { 80 }),
            scheme,
        };
        match self.route(&target.host) {
            Route::Decrypt => self.decrypted_request(request, &target).await,
            Route::Refuse => refuse(&target.host),
            Route::Tunnel if self.is_this_machine(&target.host) => refuse_local(&target.host),
            Route::Tunnel => self.forward(request.map(Body::new), &target, None).await,
        }
    }

    fn passthrough_default(&self) -> bool {
        self.engine.runtime().config.mitm.passthrough_default
    }

    /// `CONNECT host:port`: decrypt, tunnel or refuse.
    async fn connect(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let Some(authority) = request.uri().authority().cloned() else {
            return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port\n");
        };
        let target = Target {
            host: authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: authority.port_u16().unwrap_or(443),
            scheme: "https",
        };
        match self.route(&target.host) {
            Route::Decrypt => {
                tracing::debug!(host = %target.host, "CONNECT: decrypting");
                tokio::spawn(async move {
                    match hyper::upgrade::on(request).await {
                        Ok(upgraded) => self.intercept(TokioIo::new(upgraded), target).await,
                        Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
                    }
                });
                return established();
            }
            Route::Refuse => {
                tracing::info!(host = %target.host, "CONNECT refused: not in mitm.hosts and mitm.passthrough_default is false");
                return refuse(&target.host);
            }
            Route::Tunnel if self.is_this_machine(&target.host) => {
                tracing::info!(host = %target.host, "CONNECT refused: a loopback address is never relayed");
                return refuse_local(&target.host);
            }
            Route::Tunnel => {}
        }
        // Connect first, so a dead origin is a clear 502 instead of a tunnel that closes.
        let mut origin = match self.upstream.connect_tcp(&target.host, target.port).await {
            Ok(origin) => origin,
            Err(e) => {
                tracing::info!(host = %target.host, port = target.port, error = %e, "CONNECT: origin unreachable");
                return text(
                    StatusCode::BAD_GATEWAY,
                    &format!("Glider could not reach {}: {e}\n", target.authority()),
                );
            }
        };
        tracing::debug!(host = %target.host, "CONNECT: tunnelling untouched");
        tokio::spawn(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => tunnel(TokioIo::new(upgraded), &mut origin, &target.host).await,
                Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
            }
        });
        established()
    }

    /// Whether `host` names this machine — `localhost`, `*.localhost`, a loopback or
    /// unspecified address — with no `mitm.upstream_overrides` target: the proxy port
    /// never relays there (the dashboard, the gateway and other local services listen on
    /// loopback trusting that only local processes reach them; a proxy open to a
    /// container or the LAN would hand them to anyone). A listed host (`mitm.hosts`) is
    /// decrypted before this is asked.
    fn is_this_machine(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let local = host == "localhost"
            || host.ends_with(".localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified() || is_mapped_loopback(ip));
        local && !self.upstream.is_overridden(&host)
    }

    /// What to do with a connection for `host`: the one decision the CONNECT door and
    /// the transparent door share.
    pub(crate) fn route(&self, host: &str) -> Route {
        if self.hosts.matches(host) {
            Route::Decrypt
        } else if self.passthrough_default() {
            Route::Tunnel
        } else {
            Route::Refuse
        }
    }

    /// Terminate TLS for `target` with a leaf from Glider's CA, then serve HTTP/1.1 or
    /// HTTP/2 (as ALPN chose) on the decrypted stream. `io` is the client's side of the
    /// tunnel; the transparent door hands its accepted socket here too.
    pub async fn intercept<IO>(self: Arc<Self>, io: IO, target: Target)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let config = match self.leaves.server_config(&target.host) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(host = %target.host, error = %e, "cannot make a certificate for this host");
                return;
            }
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::warn!(
                    host = %target.host,
                    "TLS handshake with the client failed: {e}{}",
                    self.trust_hint(Some(&e))
                );
                return;
            }
            Err(_) => {
                tracing::warn!(
                    host = %target.host,
                    "TLS handshake with the client timed out after {}s{}",
                    HANDSHAKE_TIMEOUT.as_secs(),
                    self.trust_hint(None)
                );
                return;
            }
        };
        let (limits, drain) = (self.client_limits(), self.drain());
        let service = service_fn(move |request: Request<Incoming>| {
            let mitm = self.clone();
            let target = target.clone();
            async move { Ok::<_, Infallible>(mitm.decrypted_request(request, &target).await) }
        });
        glider_sys::listen::serve_connection(tls, service, limits, drain).await;
    }

    /// Why a handshake failed, in words a user can act on: the fix for a client that
    /// does not trust Glider's CA. Said outright when the client's alert says so; as
    /// the likely cause otherwise (Node-based CLIs such as Claude Code and Codex close
    /// the connection without an alert).
    fn trust_hint(&self, error: Option<&std::io::Error>) -> String {
        let rustls_error = error
            .and_then(|e| e.get_ref())
            .and_then(|e| e.downcast_ref::<rustls::Error>());
        let said_untrusted = matches!(
            rustls_error,
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::UnknownCA
                    | rustls::AlertDescription::BadCertificate
                    | rustls::AlertDescription::CertificateUnknown
                    | rustls::AlertDescription::AccessDenied
            ))
        );
        let cause = if said_untrusted {
            "the client does not trust Glider's CA"
        } else {
            "if the client does not trust Glider's CA"
        };
        format!(
            " — {cause}: start it with `glider run <cli>` (it sets the trust for that one command), \
             or for a Node-based CLI (Claude Code, Codex) set NODE_EXTRA_CA_CERTS=$(glider ca path) \
             (here: {}); `glider ca install` trusts it system-wide",
            self.authority.cert_path().display()
        )
    }

    /// One request inside a decrypted tunnel (or a plain-HTTP request to a listed host):
    /// to the handler [`pick_handler`] chose, or to the origin untouched.
    async fn decrypted_request(
        self: Arc<Self>,
        request: Request<Incoming>,
        target: &Target,
    ) -> Response<Body> {
        match pick_handler(request.method(), request.uri().path()) {
            Picked::AgentRpc(handler) => self.handle(target, handler, request).await,
            Picked::Api(handler) => {
                // The drain deadline: a reply not made by then is a 503, a stream still
                // open ends with the dialect's error event.
                let front = handler.front;
                let cutoff = request.extensions().get::<Cutoff>().cloned();
                let answer = Box::pin(self.handle(target, handler, request));
                render::by_deadline(front, cutoff, answer).await
            }
            Picked::Origin => {
                tracing::debug!(host = %target.host, method = %request.method(), path = request.uri().path(), "to the origin untouched");
                self.forward(request.map(Body::new), target, None).await
            }
        }
    }

    /// Run `handler` for `request`: the mechanics' side of the [`HttpHandler`] contract.
    async fn handle<H: HttpHandler>(
        self: &Arc<Self>,
        target: &Target,
        mut handler: H,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let ctx = HandlerCtx { mitm: self, target };
        match handler.handle_request(&ctx, request).await {
            RequestOrResponse::Response(response) => response,
            RequestOrResponse::Request(to_origin) => {
                let OriginBound { request, tracker } = *to_origin;
                let response = self.forward(request, target, tracker).await;
                handler.handle_response(&ctx, response)
            }
        }
    }

    /// Send `request` to `target`'s origin and stream its reply back. The body is not
    /// re-encoded; hop-by-hop headers are dropped both ways. `tracker` records a model
    /// request that went to the origin.
    pub(crate) async fn forward(
        &self,
        request: Request<Body>,
        target: &Target,
        mut tracker: Option<Tracker>,
    ) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        if let Some(protocol) = upgrade_protocol(&parts.headers) {
            return self.forward_upgrade(parts, body, protocol, target).await;
        }
        if let Err(why) = to_origin(&mut parts, target) {
            return text(StatusCode::BAD_REQUEST, &why);
        }
        parts.version = Version::HTTP_11;
        match self.upstream.send(Request::from_parts(parts, body)).await {
            Ok(response) => {
                let (mut parts, incoming) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                parts.version = Version::HTTP_11;
                let body = match tracker {
                    Some(mut tracker) => {
                        if parts.status.is_success() {
                            let (dialect, stream) = (tracker.record.front, tracker.record.stream);
                            tracker.observe_raw_in(dialect, stream);
                        } else {
                            tracker.record.error =
                                Some(format!("origin answered {}", parts.status));
                        }
                        Body::new(origin_body(incoming, tracker, parts.status.as_u16()))
                    }
                    None => Body::new(incoming),
                };
                Response::from_parts(parts, body)
            }
            Err(e) => {
                let message = unreachable_origin(target, &e);
                match tracker.take() {
                    Some(mut tracker) => {
                        tracker.fail(502, &message);
                        let front = tracker.record.front;
                        error_response(front, &ApiError::new(ErrorKind::BadGateway, message))
                    }
                    None => text(StatusCode::BAD_GATEWAY, &format!("{message}\n")),
                }
            }
        }
    }

    /// An HTTP/1.1 protocol upgrade (WebSocket): ask the origin over HTTP/1.1 with the
    /// upgrade headers kept; on its `101`, join the two upgraded connections byte for
    /// byte. Anything else it answers is passed back as a normal reply.
    async fn forward_upgrade(
        &self,
        mut parts: http::request::Parts,
        body: Body,
        protocol: HeaderValue,
        target: &Target,
    ) -> Response<Body> {
        let client_upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
        if let Err(why) = to_origin(&mut parts, target) {
            return text(StatusCode::BAD_REQUEST, &why);
        }
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, protocol);
        parts.version = Version::HTTP_11;
        let mut response = match self
            .upstream
            .send_upgrade(Request::from_parts(parts, body))
            .await
        {
            Ok(response) => response,
            Err(e) => {
                let message = unreachable_origin(target, &e);
                return text(StatusCode::BAD_GATEWAY, &format!("{message}\n"));
            }
        };
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let (mut parts, incoming) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            return Response::from_parts(parts, Body::new(incoming));
        }
        let origin_upgrade = hyper::upgrade::on(&mut response);
        let (mut parts, _) = response.into_parts();
        let upgrade = parts.headers.get(header::UPGRADE).cloned();
        strip_hop_by_hop(&mut parts.headers);
        if let Some(upgrade) = upgrade {
            parts.headers.insert(header::UPGRADE, upgrade);
        }
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        let host = target.host.clone();
        tokio::spawn(async move {
            let Some(client_upgrade) = client_upgrade else {
                tracing::debug!(%host, "the client's connection cannot be upgraded");
                return;
            };
            match tokio::try_join!(client_upgrade, origin_upgrade) {
                Ok((client, origin)) => {
                    let (mut client, mut origin) = (TokioIo::new(client), TokioIo::new(origin));
                    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut origin).await {
                        tracing::debug!(%host, error = %e, "upgraded connection closed with an error");
                    }
                }
                Err(e) => tracing::debug!(%host, error = %e, "protocol upgrade failed"),
            }
        });
        Response::from_parts(parts, Body::empty())
    }
}

/// Which handler a decrypted request gets.
enum Picked {
    /// A Cursor Agent RPC: its plane.
    AgentRpc(AgentRpcHandler),
    /// A model request Glider may answer: the API path in its dialect.
    Api(ApiHandler),
    /// Anything else: the origin, untouched and without a handler.
    Origin,
}

/// The one decision of what Glider does with a decrypted request, by its method and
/// path: the Cursor plane, the API path, or nothing (the origin).
fn pick_handler(method: &Method, path: &str) -> Picked {
    if let Some(rpc) = crate::cursor::rpc(method, path) {
        return Picked::AgentRpc(AgentRpcHandler::new(rpc));
    }
    match api_front(method, path) {
        Some(front) => Picked::Api(ApiHandler { front }),
        None => Picked::Origin,
    }
}

/// What happens to a connection for a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Listed in `mitm.hosts`: terminate TLS with a leaf from Glider's CA.
    Decrypt,
    /// Not listed: join client and origin byte for byte.
    Tunnel,
    /// Not listed and `mitm.passthrough_default` is false.
    Refuse,
}

/// Join a client and an origin byte for byte until either side closes.
pub(crate) async fn tunnel<C>(mut client: C, origin: &mut TcpStream, host: &str)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, origin).await {
        tracing::debug!(%host, error = %e, "tunnel closed with an error");
    }
}

/// Why the origin could not be reached, in words for the client; logged as a warning.
fn unreachable_origin(target: &Target, error: &dyn std::error::Error) -> String {
    let message = format!(
        "Glider could not reach the origin {}: {}",
        target.authority(),
        glider_backend::health::error_chain(error)
    );
    tracing::warn!("{message}");
    message
}

fn established() -> Response<Body> {
    let mut response = Response::new(Body::empty());
    response
        .extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(
            b"Connection Established",
        ));
    response
}

/// `::ffff:127.0.0.1` and the like.
fn is_mapped_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .is_some_and(|v4| v4.is_loopback() || v4.is_unspecified()),
        std::net::IpAddr::V4(_) => false,
    }
}

/// 403 for a tunnel or a plain request to this machine (see `Mitm::is_this_machine`).
fn refuse_local(host: &str) -> Response<Body> {
    text(
        StatusCode::FORBIDDEN,
        &format!(
            "Glider's proxy does not relay to {host}: a loopback address is never reached through it (list the host in mitm.hosts to have Glider handle it)\n"
        ),
    )
}

fn refuse(host: &str) -> Response<Body> {
    text(
        StatusCode::FORBIDDEN,
        &format!(
            "Glider refuses {host}: it is not in mitm.hosts and mitm.passthrough_default is false\n"
        ),
    )
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(message.to_owned()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Point a client's request head at `target`'s origin: an absolute URI (it carries the
/// authority, so `Host` goes; the client picks HTTP/1.1 or HTTP/2 by ALPN) and no
/// hop-by-hop headers. `Err`: why the target makes no URI (the client's 400).
fn to_origin(parts: &mut http::request::Parts, target: &Target) -> Result<(), String> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri = format!("{}://{}{path}", target.scheme, target.authority());
    parts.uri = uri
        .parse()
        .map_err(|e| format!("bad request target {uri}: {e}\n"))?;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    Ok(())
}
