//! OAuth for MCP servers, black-box on loopback: a fake authorization server and a fake
//! resource server (a Streamable HTTP MCP server built with rmcp that demands a bearer)
//! run the whole chain with the real `glider` binary — a 401 without a login names
//! `glider mcp login`, the login discovers the authorization server from the 401,
//! registers a client and runs the code flow with PKCE and `resource` (the test plays
//! the browser), `glider serve` refreshes the short-lived token before its first call
//! and again after the server revokes it — and the device flow against a fake GitHub
//! (`authorization_pending`, then `slow_down`). Tokens are stored 0600 and appear in no
//! output of Glider's.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Form, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use common::procs::until;
use common::serve::url_in;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use sha2::Digest;

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");
/// Every token the fakes issue starts with this, so a leak is easy to find.
const SECRET: &str = "sekrit";
const HANG_GUARD: Duration = Duration::from_secs(30);

/// What the fakes know and saw.
#[derive(Default)]
struct Fake {
    resource_base: Mutex<String>,
    auth_base: Mutex<String>,
    /// Access tokens the resource server accepts, by their generation.
    valid: Mutex<HashMap<String, u32>>,
    /// Refresh tokens the authorization server accepts.
    refresh: Mutex<HashSet<String>>,
    issued: Mutex<u32>,
    /// code -> (code_challenge, redirect_uri, client_id, resource)
    codes: Mutex<HashMap<String, [String; 4]>>,
    registered: Mutex<Vec<Value>>,
    /// The generation of each bearer the resource server accepted.
    served: Mutex<Vec<u32>>,
    refreshes: Mutex<u32>,
    /// When each device-flow poll came, and the device request's form.
    polls: Mutex<Vec<Instant>>,
    device_request: Mutex<Option<HashMap<String, String>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Fake {
    fn resource(&self) -> String {
        format!("{}/mcp", lock(&self.resource_base))
    }

    /// A new access token (valid for `expires_in`) and refresh token.
    fn issue(&self, expires_in: u64) -> Value {
        let generation = {
            let mut issued = lock(&self.issued);
            *issued += 1;
            *issued
        };
        let access = format!("{SECRET}-access-{generation}-{}", rand_hex());
        let refresh = format!("{SECRET}-refresh-{generation}-{}", rand_hex());
        lock(&self.valid).insert(access.clone(), generation);
        lock(&self.refresh).insert(refresh.clone());
        json!({"access_token": access, "token_type": "Bearer", "expires_in": expires_in, "refresh_token": refresh})
    }
}

fn rand_hex() -> String {
    format!("{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// The resource server's MCP side: one tool saying which token generation called.
#[derive(Clone)]
struct WhoAmI(Arc<Fake>);

impl ServerHandler for WhoAmI {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"});
        let schema = schema.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "whoami",
            "which token generation calls",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let generation = lock(&self.0.served).last().copied().unwrap_or(0);
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(format!("generation {generation}")),
        ])))
    }
}

/// The resource server demands a bearer it knows; without one, the RFC 9728 challenge.
async fn require_bearer(State(fake): State<Arc<Fake>>, request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/.well-known/") {
        return next.run(request).await;
    }
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let generation = bearer.and_then(|b| lock(&fake.valid).get(&b).copied());
    match generation {
        Some(generation) => {
            lock(&fake.served).push(generation);
            next.run(request).await
        }
        None => {
            let metadata = format!(
                "{}/.well-known/oauth-protected-resource/mcp",
                lock(&fake.resource_base)
            );
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    format!(r#"Bearer error="invalid_token", resource_metadata="{metadata}""#),
                )],
            )
                .into_response()
        }
    }
}

async fn protected_resource(State(fake): State<Arc<Fake>>) -> Json<Value> {
    Json(json!({
        "resource": fake.resource(),
        "authorization_servers": [lock(&fake.auth_base).clone()],
        "scopes_supported": ["tools"],
    }))
}

async fn server_metadata(State(fake): State<Arc<Fake>>) -> Json<Value> {
    let base = lock(&fake.auth_base).clone();
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "code_challenge_methods_supported": ["S256"],
    }))
}

async fn register(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Json<Value> {
    lock(&fake.registered).push(body);
    Json(json!({"client_id": "registered-glider"}))
}

async fn authorize(
    State(fake): State<Arc<Fake>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| query.get(k).cloned().unwrap_or_default();
    if field("response_type") != "code"
        || field("code_challenge_method") != "S256"
        || field("client_id") != "registered-glider"
        || field("resource") != fake.resource()
        || field("scope") != "tools"
    {
        return (
            StatusCode::BAD_REQUEST,
            format!("bad authorize request: {query:?}"),
        )
            .into_response();
    }
    let code = format!("code-{}", rand_hex());
    lock(&fake.codes).insert(
        code.clone(),
        [
            field("code_challenge"),
            field("redirect_uri"),
            field("client_id"),
            field("resource"),
        ],
    );
    let mut target = reqwest::Url::parse(&field("redirect_uri")).expect("redirect_uri is a URL");
    target
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &field("state"));
    Redirect::to(target.as_str()).into_response()
}

fn oauth_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": error}))).into_response()
}

async fn token(
    State(fake): State<Arc<Fake>>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| form.get(k).cloned().unwrap_or_default();
    match field("grant_type").as_str() {
        "authorization_code" => {
            let Some([challenge, redirect_uri, client_id, resource]) =
                lock(&fake.codes).remove(&field("code"))
            else {
                return oauth_error("invalid_grant");
            };
            let verified = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(field("code_verifier").as_bytes()));
            if verified != challenge
                || redirect_uri != field("redirect_uri")
                || client_id != field("client_id")
                || resource != field("resource")
            {
                return oauth_error("invalid_grant");
            }
            // Shorter than Glider's refresh margin: refreshed before its first use.
            Json(fake.issue(5)).into_response()
        }
        "refresh_token" => {
            if !lock(&fake.refresh).remove(&field("refresh_token"))
                || field("resource") != fake.resource()
                || field("client_id") != "registered-glider"
            {
                return oauth_error("invalid_grant");
            }
            *lock(&fake.refreshes) += 1;
            Json(fake.issue(3600)).into_response()
        }
        _ => oauth_error("unsupported_grant_type"),
    }
}

/// GitHub's device code endpoint.
async fn github_device_code(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Json<Value> {
    assert_eq!(
        headers.get(header::ACCEPT).map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    *lock(&fake.device_request) = Some(form);
    Json(json!({
        "device_code": "device-123", "user_code": "WDJB-MJHT",
        "verification_uri": "https://github.com/login/device",
        "expires_in": 900, "interval": 0
    }))
}

/// GitHub's token endpoint in the device flow: 200 with an `error` until the user is
/// done — pending first, then slow down (with GitHub's new interval), then the token.
async fn github_token(
    State(fake): State<Arc<Fake>>,
    Form(form): Form<HashMap<String, String>>,
) -> Json<Value> {
    assert_eq!(
        form.get("grant_type").map(String::as_str),
        Some("urn:ietf:params:oauth:grant-type:device_code")
    );
    assert_eq!(
        form.get("device_code").map(String::as_str),
        Some("device-123")
    );
    let poll = {
        let mut polls = lock(&fake.polls);
        polls.push(Instant::now());
        polls.len()
    };
    match poll {
        1 => Json(json!({"error": "authorization_pending"})),
        2 => Json(json!({"error": "slow_down", "interval": 1})),
        _ => {
            let access = format!("{SECRET}-gho-{}", rand_hex());
            lock(&fake.valid).insert(access.clone(), 100);
            Json(json!({"access_token": access, "token_type": "bearer", "scope": "repo"}))
        }
    }
}

/// Serve `router` on a loopback port; its base URL.
async fn listen(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    base
}

/// Start the resource server and the authorization server (and the GitHub endpoints).
async fn fakes() -> Arc<Fake> {
    let fake = Arc::new(Fake::default());
    let handler = WhoAmI(fake.clone());
    let mcp: StreamableHttpService<WhoAmI, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().disable_allowed_hosts(),
    );
    let resource = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(protected_resource),
        )
        .nest_service("/mcp", mcp)
        .layer(from_fn_with_state(fake.clone(), require_bearer))
        .with_state(fake.clone());
    let auth = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/login/device/code", post(github_device_code))
        .route("/login/oauth/access_token", post(github_token))
        .with_state(fake.clone());
    *lock(&fake.resource_base) = listen(resource).await;
    *lock(&fake.auth_base) = listen(auth).await;
    fake
}

/// A child whose stdout and stderr go to `log`; killed when dropped.
struct Logged {
    child: Child,
}

impl Logged {
    /// Wait (bounded) for the child to exit, and require success; its log says why not.
    async fn succeeded(&mut self, log: &Path) {
        let exited = until(|| matches!(self.child.try_wait(), Ok(Some(_)))).await;
        assert!(exited, "glider mcp login never finished");
        let status = self.child.wait().expect("status");
        assert!(
            status.success(),
            "{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn glider(home: &Path, args: &[&str], log: &Path) -> Logged {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    let child = Command::new(GLIDER)
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env("GLIDER_LOG", "debug")
        .args(args)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("glider starts");
    Logged { child }
}

/// The first line of `log` containing `needle`, waited for (bounded).
async fn line_with(log: &Path, needle: &str) -> String {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Ok(file) = std::fs::File::open(log)
            && let Some(line) = BufReader::new(file)
                .lines()
                .map_while(Result::ok)
                .find(|l| l.contains(needle))
        {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no line with {needle:?} in {}:\n{}",
            log.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_private_and_unlogged(home: &Path, server: &str, logs: &[&Path]) -> Value {
    let path = home.join("mcp-auth").join(format!("{server}.json"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    for log in logs {
        let text = std::fs::read_to_string(log).expect("log");
        assert!(
            !text.contains(SECRET),
            "a token in {}:\n{text}",
            log.display()
        );
    }
    serde_json::from_slice(&std::fs::read(&path).expect("token file")).expect("token JSON")
}

async fn call_whoami(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
) -> String {
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await
        .expect("tools/call through Glider");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn code_flow_from_a_401_then_refresh_before_expiry_and_after_a_revoke() {
    let fake = fakes().await;
    let home = tempfile::tempdir().expect("home");
    let config = home.path().join("glider.yaml");
    std::fs::write(
        &config,
        format!(
            "backends:\n  - {{name: idle, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen]}}\nmcp:\n  restart_initial_secs: 0.1\n  restart_max_secs: 0.3\n  servers:\n    remote: {{url: '{}', oauth: {{}}}}\n",
            fake.resource()
        ),
    )
    .expect("config");
    let config = config.to_str().expect("utf-8 path");
    let serve_log = home.path().join("serve.log");
    let login_log = home.path().join("login.log");
    let serve = glider(
        home.path(),
        &[
            "serve",
            "--port",
            "0",
            "--dashboard-port",
            "0",
            "-c",
            config,
        ],
        &serve_log,
    );
    let gateway = url_in(&line_with(&serve_log, "glider gateway listening on http://").await);
    let dashboard = url_in(&line_with(&serve_log, "glider dashboard on http://").await);

    // No login yet: the server's state says what to run.
    let http = reqwest::Client::new();
    let hint = "run `glider mcp login remote`";
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let state: Value = http
            .get(format!("{dashboard}/api/mcp"))
            .send()
            .await
            .expect("/api/mcp")
            .json()
            .await
            .expect("/api/mcp JSON");
        let why = state["servers"][0]["state"]["why"]
            .as_str()
            .unwrap_or_default();
        if why.contains(hint) {
            break;
        }
        assert!(Instant::now() < deadline, "no login hint: {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The login: discovery from the 401, registration, the code flow with the test as
    // the browser.
    let mut login = glider(
        home.path(),
        &["mcp", "login", "remote", "-c", config],
        &login_log,
    );
    let line = line_with(&login_log, "open this URL in a browser").await;
    let authorize_url = line[line.find("http://").expect("a URL")..]
        .trim()
        .to_owned();
    let landing = http
        .get(&authorize_url)
        .send()
        .await
        .expect("the browser's GET");
    assert_eq!(landing.status(), 200);
    assert_eq!(
        landing.text().await.expect("page"),
        "Glider is authorized. You can close this tab."
    );
    login.succeeded(&login_log).await;
    line_with(&login_log, "logged in to remote").await;
    let registered = lock(&fake.registered).clone();
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0]["token_endpoint_auth_method"], "none");

    // glider serve connects with the stored token at its next try: the code's token
    // expires within the refresh margin, so it is refreshed before any use.
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{gateway}/mcp")),
        ))
        .await
        .expect("an MCP session with Glider's /mcp");
    let deadline = Instant::now() + HANG_GUARD;
    while !client
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .any(|t| t.name == "remote__whoami")
    {
        assert!(Instant::now() < deadline, "remote__whoami never offered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(call_whoami(&client, "remote__whoami").await, "generation 2");
    assert!(
        !lock(&fake.served).contains(&1),
        "the expiring token was used"
    );
    assert_eq!(*lock(&fake.refreshes), 1);

    // The server revokes every token: the next request's 401 is answered with a refresh
    // and one retry, and the call goes through.
    lock(&fake.valid).clear();
    assert_eq!(call_whoami(&client, "remote__whoami").await, "generation 3");
    assert_eq!(*lock(&fake.refreshes), 2);

    let stored = assert_private_and_unlogged(home.path(), "remote", &[&serve_log, &login_log]);
    assert!(
        stored["access_token"]
            .as_str()
            .is_some_and(|t| t.starts_with(&format!("{SECRET}-access-3-"))),
        "the refreshed token is stored"
    );
    assert_eq!(stored["resource"], fake.resource());
    client.cancel().await.expect("session closed");
    drop(serve);
}

#[tokio::test(flavor = "multi_thread")]
async fn github_device_flow_waits_while_pending_and_slows_down() {
    let fake = fakes().await;
    let home = tempfile::tempdir().expect("home");
    let auth = lock(&fake.auth_base).clone();
    let yaml = format!(
        "backends:\n  - {{name: idle, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen]}}\nmcp:\n  servers:\n    github: {{url: '{}', oauth: {{provider: github, client_id: Iv1.test, scopes: [repo], device_authorization_endpoint: '{auth}/login/device/code', token_endpoint: '{auth}/login/oauth/access_token'}}}}\n",
        fake.resource()
    );
    let config = home.path().join("glider.yaml");
    std::fs::write(&config, &yaml).expect("config");
    let log = home.path().join("login.log");
    let mut login = glider(
        home.path(),
        &[
            "mcp",
            "login",
            "github",
            "-c",
            config.to_str().expect("utf-8"),
        ],
        &log,
    );
    line_with(
        &log,
        "open https://github.com/login/device and enter the code WDJB-MJHT",
    )
    .await;
    login.succeeded(&log).await;

    let device = lock(&fake.device_request)
        .clone()
        .expect("a device code request");
    assert_eq!(
        device.get("client_id").map(String::as_str),
        Some("Iv1.test")
    );
    assert_eq!(device.get("scope").map(String::as_str), Some("repo"));
    assert!(
        !device.contains_key("resource"),
        "GitHub gets no resource: {device:?}"
    );
    let polls = lock(&fake.polls).clone();
    assert_eq!(polls.len(), 3, "pending, slow_down, granted");
    assert!(
        polls[2] - polls[1] >= Duration::from_secs(1),
        "the poll after slow_down came before its new interval"
    );
    let stored = assert_private_and_unlogged(home.path(), "github", &[&log]);
    assert_eq!(stored["refresh_token"], Value::Null);

    // The hub sends the device flow's token (which never expires) as the bearer.
    let hub = glider_mcp::McpHub::new(None);
    hub.set_token_dir(home.path().join("mcp-auth"));
    let config: glider_config::Config = glider_config::Config::load(&config).expect("config loads");
    hub.apply(&config.mcp);
    assert!(
        until(|| hub.tools().iter().any(|t| t.name == "github__whoami")).await,
        "github__whoami never offered: {:?}",
        hub.servers()
    );
    let output = hub.call("github__whoami", Value::Null).await.expect("call");
    assert_eq!(output.text(), "generation 100");
    hub.shutdown().await;
}
