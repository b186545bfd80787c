//! The way out to a CLI's origin: a pooled HTTP/1.1 + HTTP/2 client (hyper-util with
//! hyper-rustls) that forwards requests without re-encoding their bodies, raw TCP
//! connects for tunnels, `mitm.upstream_overrides` (connect somewhere else, still
//! verify the real host name), the socket mark that keeps transparent mode's redirect
//! off Glider's own connections, and hop-by-hop header handling.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::{HeaderMap, HeaderName, Uri, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use tokio::net::{TcpSocket, TcpStream};

use crate::MitmError;

/// Seconds allowed to open a TCP connection to an origin.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connections to origins.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpsConnector<OverrideConnector>, Body>,
    /// HTTP/1.1 only: protocol upgrades (WebSocket) exist only there.
    client_h1: Client<HttpsConnector<OverrideConnector>, Body>,
    overrides: Arc<HashMap<String, String>>,
    dialer: Dialer,
}

impl Upstream {
    /// A client trusting the system's roots plus the certificates in `extra_ca_file`,
    /// connecting to `overrides[host]` instead of `host` where one is given. With
    /// `mark`, every socket it opens carries that `SO_MARK` (Linux; needs
    /// CAP_NET_ADMIN), which the transparent redirect rules skip.
    pub fn new(
        overrides: &std::collections::BTreeMap<String, String>,
        extra_ca_file: Option<&Path>,
        mark: Option<u32>,
    ) -> Result<Upstream, MitmError> {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for error in &native.errors {
            tracing::debug!(%error, "a system CA certificate could not be loaded");
        }
        let (added, _ignored) = roots.add_parsable_certificates(native.certs);
        if let Some(path) = extra_ca_file {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    MitmError::Config(format!("mitm.upstream_ca_file {}: {e}", path.display()))
                })?;
            if certs.is_empty() {
                return Err(MitmError::Config(format!(
                    "mitm.upstream_ca_file {}: no PEM certificate in it",
                    path.display()
                )));
            }
            let (extra, _) = roots.add_parsable_certificates(certs);
            tracing::info!(file = %path.display(), certificates = extra, "trusting extra CA certificates for origins");
        } else if added == 0 {
            tracing::warn!(
                "no system CA certificates found: origins cannot be verified (install ca-certificates)"
            );
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| MitmError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let overrides: Arc<HashMap<String, String>> = Arc::new(
            overrides
                .iter()
                .map(|(host, target)| (host.to_ascii_lowercase(), target.clone()))
                .collect(),
        );
        let dialer = OverrideConnector {
            dialer: Dialer { mark },
            overrides: overrides.clone(),
        };
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(dialer.clone());
        let connector_h1 = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(dialer);
        let build = |connector| {
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .build(connector)
        };
        Ok(Upstream {
            client: build(connector),
            client_h1: build(connector_h1),
            overrides,
            dialer: Dialer { mark },
        })
    }

    /// Send `request` (absolute URI) to its origin.
    pub async fn send(
        &self,
        request: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        self.client.request(request).await
    }

    /// Send a protocol-upgrade request (WebSocket) over HTTP/1.1.
    pub async fn send_upgrade(
        &self,
        request: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        self.client_h1.request(request).await
    }

    /// Open a TCP connection to `host:port` (or its override) for a raw tunnel.
    pub async fn connect_tcp(&self, host: &str, port: u16) -> std::io::Result<TcpStream> {
        let target = self
            .overrides
            .get(&host.to_ascii_lowercase())
            .cloned()
            .unwrap_or_else(|| format!("{host}:{port}"));
        self.dialer.dial(&target).await
    }

    /// Whether `mitm.upstream_overrides` gives `host` a target of its own.
    pub fn is_overridden(&self, host: &str) -> bool {
        self.overrides.contains_key(&host.to_ascii_lowercase())
    }

    /// Open a TCP connection to an address (transparent mode's original destination).
    pub async fn connect_addr(&self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        self.dialer.dial(&addr.to_string()).await
    }
}

/// Opens TCP connections: resolve, try each address in turn within
/// [`CONNECT_TIMEOUT`], mark the socket when asked, no Nagle delay.
#[derive(Clone, Copy, Debug)]
struct Dialer {
    mark: Option<u32>,
}

impl Dialer {
    /// Connect to `target` (`host:port`, `ip:port` or `[v6]:port`).
    async fn dial(self, target: &str) -> std::io::Result<TcpStream> {
        let attempt = async {
            let mut last = None;
            for addr in tokio::net::lookup_host(target).await? {
                match self.connect(addr).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{target} resolved to no address"),
                )
            }))
        };
        tokio::time::timeout(CONNECT_TIMEOUT, attempt)
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to {target} timed out"),
                )
            })?
    }

    async fn connect(self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(mark) = self.mark {
            set_mark(&socket, mark)?;
        }
        socket.set_nodelay(true)?;
        socket.connect(addr).await
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_mark(socket: &TcpSocket, mark: u32) -> std::io::Result<()> {
    socket2::SockRef::from(socket).set_mark(mark).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot mark Glider's origin socket (SO_MARK {mark:#x}, needs CAP_NET_ADMIN): {e}"
            ),
        )
    })
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn set_mark(_socket: &TcpSocket, _mark: u32) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "socket marks (SO_MARK) exist on Linux only",
    ))
}

/// A connector that dials the override address of a host, leaving the URI (and so the
/// TLS server name and the pool key) as the client asked.
#[derive(Clone)]
struct OverrideConnector {
    dialer: Dialer,
    overrides: Arc<HashMap<String, String>>,
}

impl tower::Service<Uri> for OverrideConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let host = dst.host().unwrap_or_default();
        let target = match self.overrides.get(&host.to_ascii_lowercase()) {
            Some(target) => target.clone(),
            None => {
                let port = dst.port_u16().unwrap_or(match dst.scheme_str() {
                    Some("https") => 443,
                    _ => 80,
                });
                // An IPv6 host is bracketed in the URI already.
                format!("{host}:{port}")
            }
        };
        let dialer = self.dialer;
        Box::pin(async move {
            let stream = dialer.dial(&target).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// The protocol a request asks to upgrade to (`Connection: upgrade` + `Upgrade`).
pub fn upgrade_protocol(headers: &HeaderMap) -> Option<http::HeaderValue> {
    let asks = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    if asks {
        headers.get(header::UPGRADE).cloned()
    } else {
        None
    }
}

/// Headers that describe one hop, not the message: never forwarded (RFC 9110 §7.6.1),
/// plus every header the `Connection` header names. `te: trailers` is end-to-end and
/// kept (gRPC needs it).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TRAILER,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    let te_trailers = headers
        .get(header::TE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("trailers"));
    if !te_trailers {
        headers.remove(header::TE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_end_to_end_headers_stay() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("x-api-key", "secret"),
            ("authorization", "Bearer t"),
            ("content-length", "3"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                http::HeaderValue::from_static(value),
            );
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(
            left,
            vec!["authorization", "content-length", "te", "x-api-key"]
        );
        let mut gzip = HeaderMap::new();
        gzip.insert(header::TE, http::HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut gzip);
        assert!(gzip.is_empty());
    }
}
