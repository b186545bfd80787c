//! One backend: its resolved settings, HTTP client (pooled connections), breaker,
//! rate-limit cool-down and health, and `send`, which returns once the first byte of
//! the reply has arrived — the last point where a failure can still fall back to
//! another backend. Each timeout bounds what its name says: `connect_timeout_secs` the
//! TCP (and TLS) connection, `first_byte_timeout_secs` the wait for the headers and the
//! first body byte (a cold model load), `idle_timeout_secs` each gap between body
//! chunks after the first.
//!
//! One file past 600 lines on purpose: `send` is one path from the request to the first
//! byte, and each timeout, credential header and failure classification it applies is a
//! step of that path, kept where it happens.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use glider_config::{BackendConfig, BackendKind};
use glider_ngl::{Dialect, ErrorKind};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::breaker::{CircuitBreaker, ProbeGuard};
use crate::cooldown::{Cooldown, retry_after_secs};
use crate::credentials::{self, Credentials};
use crate::direct::{DirectClient, Endpoints, Transport};
use crate::failure::AttemptFailure;
use crate::foreground::Foreground;
use crate::health::HealthCell;
use crate::pool::{Pool, Replica, SESSION_KEY_HEADER};

/// The rest of a reply body after its first chunk.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, AttemptFailure>> + Send>>;

/// A request ready for one backend.
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    pub dialect: Dialect,
    pub body: Bytes,
    pub stream: bool,
    /// Client headers worth forwarding (e.g. `anthropic-beta` to an Anthropic backend).
    pub headers: HeaderMap,
}

/// A reply whose first byte has arrived.
pub struct UpstreamResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub first_chunk: Bytes,
    pub rest: BodyStream,
}

impl UpstreamResponse {
    /// The whole body (for non-streamed replies).
    pub async fn collect(mut self) -> Result<Bytes, AttemptFailure> {
        let mut body = self.first_chunk.to_vec();
        while let Some(chunk) = self.rest.next().await {
            body.extend_from_slice(&chunk?);
        }
        Ok(Bytes::from(body))
    }
}

/// A configured backend with its live state. Kept across reloads while its config is
/// unchanged, so breaker and health survive an edit of unrelated keys.
pub struct Backend {
    pub config: BackendConfig,
    api_key: Option<String>,
    credentials: Credentials,
    headers: HeaderMap,
    /// Why this backend cannot be used at all (a missing `${VAR}`), if so.
    pub unavailable: Option<String>,
    pub breaker: CircuitBreaker,
    /// Whether the last failure counted by the breaker was a failure to reach the
    /// backend at all (so an open breaker means "unreachable" too).
    last_failure_unreachable: AtomicBool,
    /// Callers a 429 told to wait (see [`crate::cooldown`]).
    pub cooldown: Cooldown,
    pub(crate) health: HealthCell,
    http: reqwest::Client,
    /// The generation endpoint per dialect, parsed once: reqwest parses a URL string
    /// (IDNA host processing included) on every request otherwise.
    endpoints: Endpoints,
    /// The plain-HTTP client of the endpoints reached without reqwest
    /// ([`crate::direct`]), and the headers each of their requests starts with.
    direct: Option<(DirectClient, HeaderMap)>,
    /// The replica pool, when `replicas` is configured (`base_url` is its first).
    pub pool: Option<Pool>,
    /// The client requests started on its server ([`Backend::send`], by any backend
    /// with its origin), which Glider's own background work there yields to.
    pub foreground: Arc<Foreground>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.config.name)
            .field("kind", &self.config.kind)
            .field("unavailable", &self.unavailable)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// Resolve secrets and build the HTTP client. Never fails: problems are recorded in
    /// `unavailable` and reported when the backend is used.
    pub fn new(config: BackendConfig) -> Arc<Backend> {
        let mut problems = Vec::new();
        let (credentials, api_key) = credentials::resolve(&config).unwrap_or_else(|e| {
            problems.push(e);
            (Credentials::Keyless, None)
        });
        let base_url = glider_config::Secret(config.base_url.clone()).resolve();
        let base_url = match base_url {
            Ok(url) => url.trim_end_matches('/').to_owned(),
            Err(e) => {
                problems.push(e);
                config.base_url.clone()
            }
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            match (
                HeaderName::try_from(name.as_str()),
                value.resolve().map(HeaderValue::try_from),
            ) {
                (Ok(name), Ok(Ok(mut value))) => {
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                (_, Err(e)) => problems.push(e),
                _ => problems.push(format!("header {name:?} is not a valid HTTP header")),
            }
        }
        // No `read_timeout`: it would bound the wait for the first byte by the idle
        // timeout too. `send` applies the first-byte and idle timeouts itself.
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout())
            .tcp_nodelay(true)
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            // Never followed: reqwest keeps `x-api-key` (and any configured header) on a
            // redirect to another host, which would hand the key to that host.
            .redirect(reqwest::redirect::Policy::none());
        if config.is_local() {
            // A local model server is never reached through a proxy (which could be
            // Glider's own MITM port, a loop).
            builder = builder.no_proxy();
        }
        let http = builder.build().unwrap_or_else(|e| {
            problems.push(format!("HTTP client: {e}"));
            reqwest::Client::new()
        });
        let pool = (!config.replicas.is_empty()).then(|| Pool {
            replicas: std::iter::once(Ok(base_url.clone()))
                .chain(config.replicas.iter().map(|url| {
                    glider_config::Secret(url.clone())
                        .resolve()
                        .map(|url| url.trim_end_matches('/').to_owned())
                }))
                .filter_map(|url| url.map_err(|e| problems.push(e)).ok())
                .map(|url| Replica::new(url, config.is_local()))
                .collect(),
        });
        let unavailable = (!problems.is_empty()).then(|| problems.join("; "));
        let endpoints = Endpoints::under(&base_url, config.is_local());
        let reaches_directly = endpoints.direct()
            || pool
                .as_ref()
                .is_some_and(|pool| pool.replicas.iter().any(|r| r.endpoints.direct()));
        let direct = reaches_directly
            .then(|| {
                let fixed = crate::direct::fixed_headers(
                    credential_headers(config.kind, api_key.as_deref()),
                    &headers,
                )?;
                Some((crate::direct::client(config.connect_timeout()), fixed))
            })
            .flatten();
        let foreground = crate::foreground::for_origin(&base_url);
        Arc::new(Backend {
            config: BackendConfig { base_url, ..config },
            api_key,
            credentials,
            headers,
            unavailable,
            breaker: CircuitBreaker::default(),
            last_failure_unreachable: AtomicBool::new(false),
            cooldown: Cooldown::default(),
            health: HealthCell::default(),
            http,
            endpoints,
            direct,
            pool,
            foreground,
        })
    }

    /// Count a failure of the backend itself toward its breaker, remembering whether
    /// it was a failure to reach it.
    pub fn failed(&self, unreachable: bool) {
        self.last_failure_unreachable
            .store(unreachable, Ordering::Relaxed);
        self.breaker.failure();
    }

    /// Whether the failures that opened the breaker were failures to reach the backend.
    pub fn breaker_opened_unreachable(&self) -> bool {
        self.last_failure_unreachable.load(Ordering::Relaxed)
    }

    /// How this backend authenticates (its key, or the client's own credentials).
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The headers of a `front` client this backend should see: the client's
    /// credentials when it has no key of its own and the client is of its vendor, and
    /// Anthropic's beta flags (see [`crate::credentials`]). A local server, whatever
    /// its wire, sees none of them: the betas name cloud features it would reject.
    pub fn client_headers(&self, front: Dialect, client: &HeaderMap) -> HeaderMap {
        if self.is_local() {
            return HeaderMap::new();
        }
        credentials::client_headers(&self.credentials, self.kind(), front, client)
    }

    /// The failure for a request that would reach this backend with no credential at
    /// all (no key of its own, and the client sent none it may forward).
    pub(crate) fn missing_credentials(&self, headers: &HeaderMap) -> Option<AttemptFailure> {
        let Credentials::Client { unset } = &self.credentials else {
            return None;
        };
        if credentials::carries_credential(self.kind(), headers) {
            return None;
        }
        let variable = unset.clone().unwrap_or_else(|| match self.kind() {
            BackendKind::Anthropic => "ANTHROPIC_API_KEY".into(),
            _ => "OPENAI_API_KEY".into(),
        });
        let vendor = match self.kind() {
            BackendKind::Anthropic => "an Anthropic client's x-api-key or Authorization",
            _ => "an OpenAI client's Authorization",
        };
        Some(AttemptFailure::cannot_serve(
            self.name(),
            ErrorKind::Authentication,
            format!(
                "no credentials for {}: it has no key of its own and the request carried none it may forward ({vendor}); set {variable} before `glider serve`, set api_key for it, or send the client's own key",
                self.name()
            ),
        ))
    }

    /// Anthropic's exact token count for a Messages body (`/v1/messages/count_tokens`).
    pub async fn count_tokens(
        &self,
        body: &serde_json::Value,
        headers: HeaderMap,
    ) -> Result<u64, String> {
        if let Some(why) = &self.unavailable {
            return Err(format!("not configured: {why}"));
        }
        if let Some(missing) = self.missing_credentials(&headers) {
            return Err(missing.message);
        }
        let response = self
            .authorise(self.http.post(self.url("/v1/messages/count_tokens")))
            .headers(headers)
            .json(body)
            .timeout(self.config.first_byte_timeout())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("HTTP {status}: {}", snippet(&text)));
        }
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["input_tokens"].as_u64())
            .ok_or_else(|| format!("unexpected count_tokens reply: {}", snippet(&text)))
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn kind(&self) -> BackendKind {
        self.config.kind
    }

    /// Whether this backend runs on the user's side ([`BackendConfig::is_local`]): an
    /// Ollama or vLLM one, or an Anthropic/OpenAI-wire one marked `local: true`.
    pub fn is_local(&self) -> bool {
        self.config.is_local()
    }

    /// The dialect this backend should be spoken to in, preferring the client's own.
    pub fn dialect_for(&self, front: Dialect) -> Dialect {
        match self.config.kind {
            BackendKind::Ollama => Dialect::Ollama,
            BackendKind::Vllm => Dialect::OpenAiChat,
            BackendKind::Anthropic => Dialect::Anthropic,
            BackendKind::Openai if front == Dialect::OpenAiResponses => Dialect::OpenAiResponses,
            BackendKind::Openai => Dialect::OpenAiChat,
        }
    }

    /// Full URL for `path` under the base URL.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.config.base_url, path)
    }

    /// A reqwest POST to the generation endpoint for `dialect` under `base` (parsed
    /// once in `endpoints`; a URL that does not parse is left to reqwest, which reports
    /// it on send).
    fn reqwest_post(
        &self,
        endpoints: &Endpoints,
        base: &str,
        dialect: Dialect,
    ) -> reqwest::RequestBuilder {
        let parsed = match endpoints {
            Endpoints::Reqwest(urls) => urls[crate::direct::dialect_index(dialect)].clone(),
            Endpoints::Direct(_) => None,
        };
        match parsed {
            Some(url) => self.http.post(url),
            None => self.http.post(format!("{base}{}", path_of(dialect))),
        }
    }

    /// A GET for health probes and model lists.
    pub(crate) fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorise(self.http.get(self.url(path)))
    }

    /// A GET of `url` (a replica's probe) with this backend's credentials and headers.
    pub(crate) fn get_url(&self, url: &str) -> reqwest::RequestBuilder {
        self.authorise(self.http.get(url))
    }

    /// A POST for capability probes (Ollama's `/api/show`).
    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorise(self.http.post(self.url(path)))
    }

    /// The server's root: the base URL without an OpenAI-style `/v1` (llama.cpp serves
    /// `/props`, `/tokenize` and `/apply-template` there).
    pub fn root_url(&self, path: &str) -> String {
        let base = &self.config.base_url;
        format!("{}{path}", base.strip_suffix("/v1").unwrap_or(base))
    }

    /// A request to `path` under the server's root ([`Backend::root_url`]).
    pub(crate) fn at_root(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.authorise(self.http.request(method, self.root_url(path)))
    }

    fn authorise(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(key) = &self.api_key {
            request = match self.config.kind {
                BackendKind::Anthropic => request.header("x-api-key", key),
                _ => request.bearer_auth(key),
            };
        }
        if self.config.kind == BackendKind::Anthropic {
            request = request.header("anthropic-version", "2023-06-01");
        }
        request.headers(self.headers.clone())
    }

    /// Send `request` and wait for the first byte of a 2xx reply. Anything else — no
    /// connection, a timeout, an error status, an empty body — is an [`AttemptFailure`]
    /// that says whether another backend may be tried; one that could not reach the
    /// backend says what to check.
    pub async fn send(
        &self,
        request: &UpstreamRequest,
    ) -> Result<UpstreamResponse, AttemptFailure> {
        self.foreground.start();
        self.send_background(request).await
    }

    /// [`Backend::send`] for Glider's own work (a summary): not counted as a client's
    /// request, so it does not make other background work yield.
    pub async fn send_background(
        &self,
        request: &UpstreamRequest,
    ) -> Result<UpstreamResponse, AttemptFailure> {
        if let Some(why) = &self.unavailable {
            return Err(AttemptFailure::new(
                self.name(),
                ErrorKind::Unavailable,
                format!("not configured: {why}"),
                true,
            ));
        }
        if let Some(missing) = self.missing_credentials(&request.headers) {
            return Err(missing);
        }
        let outcome = match &self.pool {
            Some(pool) => self.send_to_pool(pool, request).await,
            None => self.attempt(request, None).await,
        };
        outcome.map_err(|mut failure| {
            if failure.unreachable {
                failure.message = format!("{} ({})", failure.message, self.unreachable_hint());
            }
            failure
        })
    }

    /// Send to the session's replica; while a replica is unwell (no connection, a
    /// timeout, a 5xx) or its breaker is open, to the next by rank. Only a failure of
    /// every replica, or one the request itself caused (a 4xx: any replica would say
    /// the same), is the backend's. Each replica's breaker counts its own failures.
    async fn send_to_pool(
        &self,
        pool: &Pool,
        request: &UpstreamRequest,
    ) -> Result<UpstreamResponse, AttemptFailure> {
        let key = request
            .headers
            .get(SESSION_KEY_HEADER)
            .and_then(|v| v.to_str().ok());
        let order = pool.order(key);
        let mut from = 0;
        let mut last_failure = None;
        while let Some((at, index, admission)) = pool.next_admitted(&order, from) {
            from = at + 1;
            let replica = &pool.replicas[index];
            let mut probe = ProbeGuard::new(&replica.breaker, admission);
            let failure = match self.attempt(request, Some(replica)).await {
                Ok(response) => {
                    probe.disarm();
                    replica.breaker.success();
                    return Ok(response);
                }
                Err(failure) => failure,
            };
            probe.disarm();
            if !failure.backend_unwell() {
                replica.breaker.success();
                return Err(failure);
            }
            replica.breaker.failure();
            tracing::warn!(backend = self.name(), replica = %replica.base_url, error = %failure.message, "replica failed; trying the next one");
            last_failure = Some(AttemptFailure {
                message: format!("replica {}: {}", replica.base_url, failure.message),
                ..failure
            });
        }
        Err(last_failure.unwrap_or_else(|| AttemptFailure {
            unreachable: true,
            ..AttemptFailure::new(
                self.name(),
                ErrorKind::Unavailable,
                format!(
                    "every replica's circuit breaker is open after repeated failures ({})",
                    pool.replicas
                        .iter()
                        .map(|r| r.base_url.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                true,
            )
        }))
    }

    /// What to check when this backend cannot be reached.
    fn unreachable_hint(&self) -> String {
        let url = &self.config.base_url;
        if self.is_local() {
            format!(
                "is the model server running at {url}? start it (Ollama: `ollama serve`) or fix base_url"
            )
        } else {
            format!("check the network, proxy (HTTPS_PROXY) or DNS to {url}")
        }
    }

    /// One attempt at `replica` (`None`: at `base_url`): through the direct client
    /// where the endpoint is reached without reqwest ([`crate::direct`]), else reqwest.
    async fn attempt(
        &self,
        request: &UpstreamRequest,
        replica: Option<&Replica>,
    ) -> Result<UpstreamResponse, AttemptFailure> {
        let (endpoints, base) = match replica {
            Some(replica) => (&replica.endpoints, replica.base_url.as_str()),
            None => (&self.endpoints, self.config.base_url.as_str()),
        };
        if let (Endpoints::Direct(uris), Some((client, fixed))) = (endpoints, &self.direct)
            && let Some(uri) = &uris[crate::direct::dialect_index(request.dialect)]
        {
            let started = self.start_direct(client, fixed, uri, request);
            return self
                .finish(request, self.by_first_byte(started).await?)
                .await;
        }
        let mut builder = self
            .authorise(self.reqwest_post(endpoints, base, request.dialect))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(request.body.clone());
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let started = async {
            let response = builder
                .send()
                .await
                .map_err(|e| transport_failure(self.name(), &e))?;
            let status = response.status().as_u16();
            let (content_type, retry_after) = head_of(response.headers());
            let mut body = response.bytes_stream().boxed();
            let first = body.next().await;
            Ok(Started {
                status,
                content_type,
                retry_after,
                first,
                body,
            })
        };
        self.finish(request, self.by_first_byte(started).await?)
            .await
    }

    /// Send `request` to `uri` through the direct client and wait for its first chunk.
    async fn start_direct(
        &self,
        client: &DirectClient,
        fixed: &HeaderMap,
        uri: &http::Uri,
        request: &UpstreamRequest,
    ) -> Result<Started<hyper::Error>, AttemptFailure> {
        let mut outgoing = http::Request::new(http_body_util::Full::new(request.body.clone()));
        *outgoing.method_mut() = http::Method::POST;
        *outgoing.uri_mut() = uri.clone();
        *outgoing.headers_mut() = crate::direct::request_headers(fixed, &request.headers);
        let response = client.request(outgoing).await.map_err(|e| {
            let failure = transport_failure(self.name(), &e);
            AttemptFailure {
                // reqwest's words, so a failure reads the same through either client.
                message: format!("error sending request for url ({uri}): {}", failure.message),
                ..failure
            }
        })?;
        let (head, body) = response.into_parts();
        let (content_type, retry_after) = head_of(&head.headers);
        let mut body = http_body_util::BodyExt::into_data_stream(body).boxed();
        let first = body.next().await;
        Ok(Started {
            status: head.status.as_u16(),
            content_type,
            retry_after,
            first,
            body,
        })
    }

    /// `started`, bounded by the first-byte timeout.
    async fn by_first_byte<E>(
        &self,
        started: impl Future<Output = Result<Started<E>, AttemptFailure>>,
    ) -> Result<Started<E>, AttemptFailure> {
        let first_byte = self.config.first_byte_timeout();
        match tokio::time::timeout(first_byte, started).await {
            Ok(started) => started,
            Err(_) => Err(AttemptFailure::unreachable(
                self.name(),
                ErrorKind::Timeout,
                format!("no reply within {} s", first_byte.as_secs()),
            )),
        }
    }

    /// The reply whose first chunk has come: a 2xx one to stream on, anything else an
    /// [`AttemptFailure`] that says whether another backend may be tried.
    async fn finish<E: Transport + Send + 'static>(
        &self,
        request: &UpstreamRequest,
        started: Started<E>,
    ) -> Result<UpstreamResponse, AttemptFailure> {
        let Started {
            status,
            content_type,
            retry_after,
            first,
            body,
        } = started;
        let first_chunk = match first {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return Err(transport_failure(self.name(), &e)),
            None if (200..300).contains(&status) => {
                return Err(AttemptFailure::new(
                    self.name(),
                    ErrorKind::BadGateway,
                    "empty reply body".to_owned(),
                    true,
                ));
            }
            None => Bytes::new(),
        };
        let rest = idle_bounded(self.config.name.clone(), self.config.idle_timeout(), body);
        if !(200..300).contains(&status) {
            let body = UpstreamResponse {
                status,
                content_type,
                first_chunk,
                rest,
            }
            .collect()
            .await
            .unwrap_or_default();
            let kind = ErrorKind::from_status(status);
            // A client error the backend would repeat anywhere is not worth a fallback;
            // a missing model, refused key, rate limit, overload or server error is.
            let retryable = !matches!(kind, ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge)
                || status >= 500;
            let upstream = glider_dialects::codec(request.dialect).decode_error(status, &body);
            return Err(AttemptFailure {
                status: Some(status),
                upstream_message: Some(upstream.message),
                retry_after_secs: retry_after,
                ..AttemptFailure::new(
                    self.name(),
                    kind,
                    format!("HTTP {status}: {}", snippet(&body)),
                    retryable,
                )
            });
        }
        Ok(UpstreamResponse {
            status,
            content_type,
            first_chunk,
            rest,
        })
    }
}

/// A reply's status, head and first chunk, as either client returned them.
struct Started<E> {
    status: u16,
    content_type: Option<String>,
    retry_after: Option<u64>,
    first: Option<Result<Bytes, E>>,
    body: Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>,
}

/// A reply head's content type and `Retry-After` (in seconds).
fn head_of(headers: &HeaderMap) -> (Option<String>, Option<u64>) {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (content_type, retry_after_secs(headers))
}

/// The headers that carry a backend's own key (`x-api-key` for Anthropic, a bearer
/// token for the rest) and Anthropic's API version, as [`Backend::authorise`] adds them.
fn credential_headers(
    kind: BackendKind,
    api_key: Option<&str>,
) -> Vec<(
    HeaderName,
    Result<HeaderValue, http::header::InvalidHeaderValue>,
)> {
    let mut headers = Vec::new();
    if let Some(key) = api_key {
        let (name, value) = match kind {
            BackendKind::Anthropic => (HeaderName::from_static("x-api-key"), key.to_owned()),
            _ => (http::header::AUTHORIZATION, format!("Bearer {key}")),
        };
        let value = HeaderValue::try_from(value).map(|mut value| {
            value.set_sensitive(true);
            value
        });
        headers.push((name, value));
    }
    if kind == BackendKind::Anthropic {
        headers.push((
            HeaderName::from_static("anthropic-version"),
            Ok(HeaderValue::from_static("2023-06-01")),
        ));
    }
    headers
}

pub(crate) const DIALECTS: [Dialect; 4] = [
    Dialect::Ollama,
    Dialect::OpenAiChat,
    Dialect::OpenAiResponses,
    Dialect::Anthropic,
];

/// The generation path of `dialect` under a backend's base URL.
pub(crate) fn path_of(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Ollama => "/api/chat",
        Dialect::OpenAiChat => "/chat/completions",
        Dialect::OpenAiResponses => "/responses",
        Dialect::Anthropic => "/v1/messages",
    }
}

/// The rest of a body after its first chunk, each further chunk awaited for at most
/// `idle`: a backend silent for longer has stalled, and the stream ends with a
/// `Timeout` failure.
fn idle_bounded<E: Transport + Send + 'static>(
    backend: String,
    idle: std::time::Duration,
    body: Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>,
) -> BodyStream {
    // The backend's name travels in the state: it is needed only when a chunk fails.
    Box::pin(futures_util::stream::unfold(
        Some((body, backend)),
        move |state| async move {
            let (mut body, backend) = state?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some((body, backend)))),
                Ok(Some(Err(e))) => Some((Err(transport_failure(&backend, &e)), None)),
                Ok(None) => None,
                Err(_) => Some((
                    Err(AttemptFailure::new(
                        backend,
                        ErrorKind::Timeout,
                        format!("stream idle for more than {} s", idle.as_secs()),
                        true,
                    )),
                    None,
                )),
            }
        },
    ))
}

/// A failure to reach or read from a backend. Nothing reachable (no connection) is
/// `Unavailable` (503 when no backend is left); a timeout is `Timeout`; anything else
/// that broke after connecting is `BadGateway`. The first two are `unreachable`.
fn transport_failure(backend: &str, e: &impl Transport) -> AttemptFailure {
    let kind = if e.is_connect() {
        ErrorKind::Unavailable
    } else if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::BadGateway
    };
    let message = crate::health::error_chain(e);
    AttemptFailure {
        unreachable: e.is_connect() || e.is_timeout(),
        ..AttemptFailure::new(backend, kind, message, true)
    }
}

/// The start of a body, for error messages.
pub fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
