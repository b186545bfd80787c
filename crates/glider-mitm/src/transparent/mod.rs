//! Transparent mode (spec "Transparent redirection"): the redirect rules' life cycle
//! (recorded in runstate before they are installed, removed on stop) and the door on
//! `mitm.transparent_port` that takes redirected connections, learns their original
//! destination (`SO_ORIGINAL_DST`) and host (TLS SNI), and decrypts or tunnels them.

pub mod filter;
pub mod redirect;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use glider_sys::runstate::{Redirect, RedirectLog, RunState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Mitm;
use crate::handler::Target;
use crate::proxy::{HANDSHAKE_TIMEOUT, Route, tunnel};
pub use filter::{Enrollment, ProcessFilter, Selection, selected_names};
pub use redirect::{CHAIN, GLIDER_MARK, Plan, RedirectError, Redirector, Spec};

/// CLIs that reach their origin through the MITM without being delegate vendors; the
/// transparent filter selects them next to the vendor registry's executables.
pub const MITM_ONLY_CLIS: &[&str] = &["codex"];

/// The most bytes read while waiting for a complete TLS ClientHello.
const MAX_HELLO: usize = 64 * 1024;

/// Why transparent mode did not start.
#[derive(Debug, thiserror::Error)]
pub enum TransparentError {
    /// The redirector refused: platform, leftover chain or a failed firewall command.
    #[error(transparent)]
    Redirect(#[from] RedirectError),
    /// The door's port is taken.
    #[error("cannot listen on {addr} (mitm.transparent_port): {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The rules could not be recorded, so they were not installed.
    #[error("cannot record the redirect rules in the run state before installing them: {0}")]
    RunState(std::io::Error),
}

/// Transparent mode while it runs: its rules stay installed until [`Transparent::stop`]
/// (or, after an early error, until this is dropped).
pub struct Transparent {
    redirector: Box<dyn Redirector>,
    addrs: Vec<SocketAddr>,
    removed: bool,
    /// Where the removal is recorded, by `stop` and by the drop guard alike.
    log: RedirectLog,
}

impl Transparent {
    /// Bind the door on loopback (where `REDIRECT` sends locally made connections:
    /// 127.0.0.1, and ::1 when IPv6 and ip6tables are usable), refuse to start over
    /// an earlier run's leftover chain, record the rules in `runstate`, install them,
    /// and serve until `shutdown`.
    pub async fn start(
        mitm: Arc<Mitm>,
        filter: ProcessFilter,
        runstate: &mut RunState,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Transparent, TransparentError> {
        let config = mitm.engine.runtime().config.mitm.clone();
        let port = config.transparent_port;
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port);
        // The platform check first: on macOS nothing is bound or installed.
        redirect::for_this_platform(Spec {
            to_port: port,
            ports: config.transparent_ports.clone(),
            ipv6: false,
        })?;
        let mut listeners = vec![
            TcpListener::bind(v4)
                .await
                .map_err(|source| TransparentError::Listen { addr: v4, source })?,
        ];
        let ipv6 = match TcpListener::bind(v6).await {
            Ok(listener) if redirect::ipv6_usable() => {
                listeners.push(listener);
                true
            }
            Ok(_) => {
                tracing::info!("transparent mode: IPv4 only (ip6tables' nat table is not usable)");
                false
            }
            Err(e) => {
                tracing::info!(error = %e, "transparent mode: IPv4 only (cannot listen on {v6})");
                false
            }
        };
        let redirector = redirect::for_this_platform(Spec {
            to_port: port,
            ports: config.transparent_ports.clone(),
            ipv6,
        })?;
        if let Some(leftover) = redirector.leftover()? {
            return Err(RedirectError::Leftover(leftover).into());
        }
        let plan = redirector.plan();
        runstate
            .record_redirect(Redirect {
                backend: plan.backend.clone(),
                list: plan.list.clone(),
                rules: plan.rules.clone(),
                removed_at: None,
            })
            .map_err(TransparentError::RunState)?;
        if let Err(e) = redirector.install() {
            // install() took back what it had added: nothing is left to warn about.
            let _ = runstate.redirect_removed();
            return Err(e.into());
        }
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        tracing::info!(
            rules = ?plan.rules,
            processes = ?filter.names(),
            "transparent mode: TCP to ports {:?} is redirected to {addrs:?}; list the rules with `{}`",
            config.transparent_ports,
            plan.list.join("` / `")
        );
        let door = Arc::new(Door { mitm, filter });
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
        for listener in listeners {
            let mut stop = stop_rx.clone();
            tokio::spawn(door.clone().serve(listener, async move {
                let _ = stop.wait_for(|s| *s).await;
            }));
        }
        Ok(Transparent {
            redirector,
            addrs,
            removed: false,
            log: runstate.redirect_log(),
        })
    }

    /// Where the door listens.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Whether an enrollment narrows selection on this platform.
    pub fn supports_enrollment(&self) -> bool {
        self.redirector.supports_enrollment()
    }

    /// Remove the rules and record that in the run state. Blocking (firewall commands
    /// and an fsync'd write): call it off the async workers.
    pub fn stop(mut self) -> Result<(), RedirectError> {
        self.removed = true;
        self.remove()
    }

    fn remove(&self) -> Result<(), RedirectError> {
        self.redirector.remove()?;
        if let Err(e) = self.log.removed() {
            tracing::warn!(error = %e, "the redirect rules were removed, but the run state could not record it");
        }
        tracing::info!("transparent mode: redirect rules removed");
        Ok(())
    }
}

impl Drop for Transparent {
    /// A start-up error after the rules went in (a port taken, say) drops this guard:
    /// the rules go, and the record says so, so the next start does not warn of them.
    fn drop(&mut self) {
        if !self.removed
            && let Err(e) = self.remove()
        {
            tracing::error!("could not remove the transparent redirect rules: {e}");
        }
    }
}

/// Remove a chain an earlier run left (`glider transparent cleanup`). `Ok(true)` when
/// something was removed.
pub fn cleanup(ports: &[u16], to_port: u16) -> Result<bool, RedirectError> {
    let redirector = redirect::for_this_platform(Spec {
        to_port,
        ports: ports.to_vec(),
        ipv6: redirect::ipv6_usable(),
    })?;
    redirector.remove()
}

/// The listener on `mitm.transparent_port`.
struct Door {
    mitm: Arc<Mitm>,
    filter: ProcessFilter,
}

impl Door {
    async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        tokio::spawn(self.clone().connection(stream, peer));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "transparent door: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
    }

    /// One redirected connection: original destination, ClientHello, process, then
    /// decrypt (selected process, listed host) or tunnel to the original destination.
    async fn connection(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let original = match original_destination(&stream) {
            Ok(Some(original)) => original,
            Ok(None) => {
                tracing::warn!(
                    "transparent door: refused a connection from {peer}: it was not redirected by Glider's rules (the transparent port is not a proxy; use mitm.port with HTTPS_PROXY for that)"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "transparent door: refused a connection from {peer}: cannot read its original destination");
                return;
            }
        };
        let hello = read_client_hello(&mut stream).await;
        if hello.bytes.is_empty() && hello.closed {
            return;
        }
        let filter = self.filter.clone();
        let selection = tokio::task::spawn_blocking(move || filter.select(peer, original))
            .await
            .unwrap_or_else(|e| Selection::Passed(format!("process lookup failed: {e}")));
        let host = hello
            .sni
            .clone()
            .unwrap_or_else(|| original.ip().to_string());
        let process = match selection {
            Selection::Selected(process) => process,
            Selection::Passed(why) => {
                tracing::debug!(%host, %original, "transparent: straight through ({why})");
                return self.tunnel(stream, original, &hello.bytes, &host).await;
            }
        };
        let who = process.as_ref().map_or_else(
            || "any process".to_owned(),
            |p| format!("pid {} ({})", p.pid, p.comm),
        );
        match (hello.sni.is_some(), self.mitm.route(&host)) {
            (true, Route::Decrypt) => {
                tracing::info!(%host, %original, "transparent: decrypting for {who}");
                let (read, write) = stream.into_split();
                let replayed = std::io::Cursor::new(hello.bytes).chain(read);
                let target = Target {
                    host,
                    port: original.port(),
                    scheme: "https",
                };
                self.mitm
                    .clone()
                    .intercept(tokio::io::join(replayed, write), target)
                    .await;
            }
            (_, Route::Refuse) => {
                tracing::info!(%host, %original, "transparent: refused for {who}: not in mitm.hosts and mitm.passthrough_default is false");
            }
            _ => {
                tracing::debug!(%host, %original, "transparent: tunnelling untouched for {who}");
                self.tunnel(stream, original, &hello.bytes, &host).await;
            }
        }
    }

    /// Join the client to its original destination (through a marked socket, so the
    /// rules let it pass), replaying the bytes already read.
    async fn tunnel(&self, mut client: TcpStream, original: SocketAddr, seen: &[u8], host: &str) {
        let mut origin = match self.mitm.upstream.connect_addr(original).await {
            Ok(origin) => origin,
            Err(e) => {
                tracing::info!(%host, %original, error = %e, "transparent: original destination unreachable");
                return;
            }
        };
        if let Err(e) = origin.write_all(seen).await {
            tracing::debug!(%host, error = %e, "transparent: origin closed early");
            return;
        }
        tunnel(&mut client, &mut origin, host).await;
    }
}

/// Where a redirected connection was going; `None` when it was not redirected (no NAT
/// record, or its destination is this listener itself).
fn original_destination(stream: &TcpStream) -> std::io::Result<Option<SocketAddr>> {
    let local = stream.local_addr()?;
    match original_dst(stream, local.is_ipv4()) {
        Ok(original) if original == local => Ok(None),
        Ok(original) => Ok(Some(original)),
        // ENOENT: no NAT record; ENOPROTOOPT: connection tracking is not even loaded.
        Err(e) if matches!(e.raw_os_error(), Some(2) | Some(92)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn original_dst(stream: &TcpStream, ipv4: bool) -> std::io::Result<SocketAddr> {
    let socket = socket2::SockRef::from(stream);
    let addr = if ipv4 {
        socket.original_dst_v4()?
    } else {
        socket.original_dst_v6()?
    };
    addr.as_socket()
        .ok_or_else(|| std::io::Error::other("the original destination is not an IP address"))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn original_dst(_stream: &TcpStream, _ipv4: bool) -> std::io::Result<SocketAddr> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "SO_ORIGINAL_DST exists on Linux only",
    ))
}

/// The start of a connection, read until its TLS ClientHello is complete.
struct Hello {
    /// Everything read (replayed to whichever side gets the connection).
    bytes: Vec<u8>,
    /// The server name the client asked for.
    sni: Option<String>,
    /// The client closed (or failed) before a complete ClientHello.
    closed: bool,
}

/// Read until a complete ClientHello (→ its SNI), something that is not TLS (→ no
/// SNI), [`MAX_HELLO`] bytes, or [`HANDSHAKE_TIMEOUT`] (a protocol where the server
/// speaks first is then tunnelled as it is).
async fn read_client_hello(stream: &mut TcpStream) -> Hello {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut hello = Hello {
        bytes: Vec::new(),
        sni: None,
        closed: false,
    };
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let mut buf = [0u8; 4096];
    while hello.bytes.len() < MAX_HELLO {
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                hello.closed = true;
                return hello;
            }
            Ok(Ok(n)) => n,
            Err(_) => return hello,
        };
        hello.bytes.extend_from_slice(&buf[..n]);
        let mut fresh = &buf[..n];
        while !fresh.is_empty() {
            match acceptor.read_tls(&mut fresh) {
                Ok(0) | Err(_) => return hello,
                Ok(_) => {}
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                hello.sni = accepted.client_hello().server_name().map(str::to_owned);
                return hello;
            }
            Ok(None) => {}
            Err(_) => return hello,
        }
    }
    hello
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello from rustls' client, fed through a loopback socket in pieces.
    #[tokio::test]
    async fn sni_comes_from_the_client_hello_and_every_byte_is_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(async move {
            let mut roots = rustls::RootCertStore::empty();
            let ca = rcgen::generate_simple_self_signed(vec!["x".into()]).expect("cert");
            roots.add(ca.cert.der().clone()).expect("root");
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let tcp = TcpStream::connect(addr).await.expect("connect");
            let name = rustls::pki_types::ServerName::try_from("api.anthropic.com").expect("name");
            // The handshake cannot finish (nobody answers); the hello is what counts.
            let _ =
                tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await;
        });
        let (mut stream, _) = listener.accept().await.expect("accept");
        let hello = read_client_hello(&mut stream).await;
        assert_eq!(hello.sni.as_deref(), Some("api.anthropic.com"));
        assert!(!hello.closed);
        assert_eq!(hello.bytes[0], 0x16, "a TLS handshake record");
        drop(stream);
        client.abort();
    }

    #[tokio::test]
    async fn plain_text_has_no_sni_and_is_kept_for_the_tunnel() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut client = TcpStream::connect(addr).await.expect("connect");
        client
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let (mut stream, _) = listener.accept().await.expect("accept");
        let hello = read_client_hello(&mut stream).await;
        assert_eq!(hello.sni, None);
        assert_eq!(hello.bytes, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    #[cfg(target_os = "linux")]
    async fn a_direct_connection_is_not_redirected() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _client = TcpStream::connect(addr).await.expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        // No NAT record (ENOENT), or conntrack reports the listener itself: not redirected.
        assert_eq!(original_destination(&stream).expect("readable"), None);
    }
}
