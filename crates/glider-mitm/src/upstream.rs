//! The way out to a CLI's origin: a pooled HTTP/1.1 + HTTP/2 client (hyper-util with
//! hyper-rustls) that forwards requests without re-encoding their bodies, raw TCP
//! connects for tunnels, `mitm.upstream_overrides` (connect somewhere else, still
//! verify the real host name) and hop-by-hop header handling.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::{HeaderMap, HeaderName, Uri, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use tokio::net::TcpStream;

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
}

impl Upstream {
    /// A client trusting the system's roots plus the certificates in `extra_ca_file`,
    /// connecting to `overrides[host]` instead of `host` where one is given.
    pub fn new(
        overrides: &std::collections::BTreeMap<String, String>,
        extra_ca_file: Option<&Path>,
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
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        let dialer = OverrideConnector {
            inner: http,
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
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&target))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to {target} timed out"),
                )
            })??;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// An `HttpConnector` that dials the override address of a host, leaving the URI (and
/// so the TLS server name and the pool key) as the client asked.
#[derive(Clone)]
struct OverrideConnector {
    inner: HttpConnector,
    overrides: Arc<HashMap<String, String>>,
}

impl tower::Service<Uri> for OverrideConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let host = dst.host().unwrap_or_default().to_ascii_lowercase();
        let dst = match self.overrides.get(&host) {
            Some(target) => {
                match Uri::builder()
                    .scheme("http")
                    .authority(target.as_str())
                    .path_and_query("/")
                    .build()
                {
                    Ok(uri) => uri,
                    Err(e) => return Box::pin(async move { Err(e.into()) }),
                }
            }
            None => dst,
        };
        let future = self.inner.call(dst);
        Box::pin(async move { future.await.map_err(Into::into) })
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
