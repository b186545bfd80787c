//! The generation requests to a backend reached over plain `http://` with no proxy in
//! between — a local model server, or any backend when no HTTP proxy is configured —
//! go out through hyper-util's pooled client directly, without reqwest's layers on top
//! of the same client: reqwest parses the URL twice a request (once in its redirect
//! policy, although redirects are off) and wraps request and reply, ~20k instructions
//! of a forwarded request's ~270k. Everything else (TLS, proxies, probes, JSON helpers)
//! stays with reqwest, and so does every request that reqwest would send through a
//! proxy: the choice is made once, when the backend is built, from the same environment
//! variables reqwest reads.
//!
//! What the two paths share, so a backend behaves the same either way: the connect
//! timeout, `TCP_NODELAY`, a 90 s pool idle timeout, no redirects followed, the headers
//! in the same order (credentials, `anthropic-version`, configured headers, content
//! type, the client's forwarded headers, and `accept: */*` when none was given), and the
//! failure classification ([`Transport`]).

use std::time::Duration;

use bytes::Bytes;
use glider_ngl::Dialect;
use http::{HeaderMap, HeaderValue, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// The pooled plain-HTTP client of one backend.
pub(crate) type DirectClient = Client<HttpConnector, Full<Bytes>>;

/// A client with the settings reqwest's is built with (see the module docs).
pub(crate) fn client(connect_timeout: Duration) -> DirectClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// The environment variables reqwest reads an `http://` request's proxy from.
const HTTP_PROXY_VARIABLES: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// Whether requests to `base_url` may skip reqwest: a plain `http://` URL that no proxy
/// applies to — never for a local backend (its reqwest client has `no_proxy`), and for
/// any other only while no HTTP proxy variable is set (when one is, reqwest applies it
/// and its `NO_PROXY` exceptions).
pub(crate) fn reaches_directly(base_url: &str, local: bool) -> bool {
    base_url.starts_with("http://") && (local || !http_proxy_configured())
}

fn http_proxy_configured() -> bool {
    HTTP_PROXY_VARIABLES
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// The generation endpoint per dialect (in `client::DIALECTS` order) under one base
/// URL: a parsed URI for the direct client, or a parsed URL for reqwest.
#[derive(Debug)]
pub(crate) enum Endpoints {
    Direct([Option<Uri>; 4]),
    Reqwest([Option<reqwest::Url>; 4]),
}

impl Endpoints {
    /// The endpoints under `base_url` (resolved, no trailing slash), parsed once.
    pub(crate) fn under(base_url: &str, local: bool) -> Endpoints {
        let urls =
            crate::client::DIALECTS.map(|d| format!("{base_url}{}", crate::client::path_of(d)));
        if reaches_directly(base_url, local) {
            Endpoints::Direct(urls.map(|url| url.parse().ok()))
        } else {
            Endpoints::Reqwest(urls.map(|url| reqwest::Url::parse(&url).ok()))
        }
    }

    /// Whether any request goes through the direct client.
    pub(crate) fn direct(&self) -> bool {
        matches!(self, Endpoints::Direct(_))
    }
}

/// The headers every generation request to a backend starts with, in reqwest's order
/// and with its semantics: the credentials, then the configured headers, each name of
/// which replaces what came before it. `None` when a credential is not a valid header
/// value (reqwest then reports it on send, as it always did).
pub(crate) fn fixed_headers(
    credentials: impl IntoIterator<
        Item = (
            http::HeaderName,
            Result<HeaderValue, http::header::InvalidHeaderValue>,
        ),
    >,
    configured: &HeaderMap,
) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    for (name, value) in credentials {
        headers.append(name, value.ok()?);
    }
    let mut last = None;
    for (name, value) in configured {
        if last.as_ref() != Some(name) {
            headers.remove(name);
            last = Some(name.clone());
        }
        headers.append(name.clone(), value.clone());
    }
    Some(headers)
}

/// One request's headers: `fixed`, then the JSON content type and the client's
/// forwarded `headers` appended, and `accept: */*` (reqwest's default) when none of
/// them set one.
pub(crate) fn request_headers(fixed: &HeaderMap, forwarded: &HeaderMap) -> HeaderMap {
    let mut headers = fixed.clone();
    headers.append(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in forwarded {
        headers.append(name.clone(), value.clone());
    }
    headers
        .entry(http::header::ACCEPT)
        .or_insert(HeaderValue::from_static("*/*"));
    headers
}

/// The index of `dialect` in `client::DIALECTS`.
pub(crate) fn dialect_index(dialect: Dialect) -> usize {
    crate::client::DIALECTS
        .iter()
        .position(|d| *d == dialect)
        .unwrap_or(0)
}

/// What a transport error says about the backend: no connection at all, or a timeout
/// (both "unreachable"), or something that broke after connecting.
pub(crate) trait Transport: std::error::Error {
    fn is_connect(&self) -> bool;
    fn is_timeout(&self) -> bool;
}

impl Transport for reqwest::Error {
    fn is_connect(&self) -> bool {
        reqwest::Error::is_connect(self)
    }
    fn is_timeout(&self) -> bool {
        reqwest::Error::is_timeout(self)
    }
}

impl Transport for hyper_util::client::legacy::Error {
    fn is_connect(&self) -> bool {
        hyper_util::client::legacy::Error::is_connect(self)
    }
    fn is_timeout(&self) -> bool {
        // The connect timeout is a connect error caused by an I/O error of kind
        // `TimedOut`, as reqwest reports it (a connect error that is also a timeout).
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            if cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
            {
                return true;
            }
            source = cause.source();
        }
        false
    }
}

impl Transport for hyper::Error {
    fn is_connect(&self) -> bool {
        false
    }
    fn is_timeout(&self) -> bool {
        hyper::Error::is_timeout(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &'static str) -> http::HeaderName {
        http::HeaderName::from_static(text)
    }

    fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ASCII").to_owned())
            .collect()
    }

    #[test]
    fn configured_headers_replace_and_forwarded_ones_append_as_reqwest_does() {
        let mut configured = HeaderMap::new();
        configured.append(name("x-team"), HeaderValue::from_static("a"));
        configured.append(name("x-team"), HeaderValue::from_static("b"));
        configured.append(name("x-api-key"), HeaderValue::from_static("configured"));
        let fixed = fixed_headers(
            [
                (name("x-api-key"), HeaderValue::from_str("own")),
                (
                    name("anthropic-version"),
                    HeaderValue::from_str("2023-06-01"),
                ),
            ],
            &configured,
        )
        .expect("valid credentials");
        let mut forwarded = HeaderMap::new();
        forwarded.append(name("x-team"), HeaderValue::from_static("client"));
        let headers = request_headers(&fixed, &forwarded);
        assert_eq!(values(&headers, "x-api-key"), ["configured"]);
        assert_eq!(values(&headers, "x-team"), ["a", "b", "client"]);
        assert_eq!(values(&headers, "anthropic-version"), ["2023-06-01"]);
        assert_eq!(values(&headers, "content-type"), ["application/json"]);
        assert_eq!(values(&headers, "accept"), ["*/*"]);
    }

    #[test]
    fn a_forwarded_accept_header_is_kept_and_a_bad_key_leaves_it_to_reqwest() {
        let mut forwarded = HeaderMap::new();
        forwarded.append(
            name("accept"),
            HeaderValue::from_static("text/event-stream"),
        );
        let headers = request_headers(&HeaderMap::new(), &forwarded);
        assert_eq!(values(&headers, "accept"), ["text/event-stream"]);
        assert!(
            fixed_headers(
                [(name("x-api-key"), HeaderValue::from_str("a\nb"))],
                &HeaderMap::new()
            )
            .is_none()
        );
    }

    #[test]
    fn only_plain_http_reaches_directly() {
        assert!(reaches_directly("http://127.0.0.1:11434", true));
        assert!(!reaches_directly("https://api.anthropic.com", true));
        assert!(!reaches_directly("https://api.anthropic.com", false));
        assert!(matches!(
            Endpoints::under("http://127.0.0.1:8000/v1", true),
            Endpoints::Direct(uris) if uris.iter().all(Option::is_some)
        ));
        assert!(!Endpoints::under("https://api.openai.com/v1", false).direct());
    }
}
