//! Shared harness for Glider's black-box tests: mock vendors on port 0, an engine and
//! gateway served on port 0, and helpers that speak each front dialect over real HTTP.
#![allow(dead_code)]

pub mod output;
pub mod procs;
pub mod serve;

use std::sync::Arc;

use bytes::Bytes;
use glider_config::{Config, ConfigHandle};
use glider_dialects::codec;
use glider_engine::Engine;
use glider_ngl::{Dialect, Part, Response, ResponseBuilder, Role, Turn};
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

/// A loopback port nothing listens on right now (bound, then released).
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port()
}

/// A gateway served on 127.0.0.1:0 in this process.
pub struct Gateway {
    pub base: String,
    pub engine: Arc<Engine>,
    pub config: ConfigHandle,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub async fn gateway(yaml: &str) -> Gateway {
    gateway_with_delegator(yaml, Arc::new(glider_delegate::Delegator::new())).await
}

/// [`gateway`] whose delegations go through `delegator`.
pub async fn gateway_with_delegator(
    yaml: &str,
    delegator: Arc<glider_delegate::Delegator>,
) -> Gateway {
    gateway_serving(yaml, delegator, None).await
}

/// [`gateway`] that stores Responses in `responses`.
pub async fn gateway_with_responses(
    yaml: &str,
    responses: Arc<glider_context::ResponseStore>,
) -> Gateway {
    gateway_serving(
        yaml,
        Arc::new(glider_delegate::Delegator::new()),
        Some(responses),
    )
    .await
}

async fn gateway_serving(
    yaml: &str,
    delegator: Arc<glider_delegate::Delegator>,
    responses: Option<Arc<glider_context::ResponseStore>>,
) -> Gateway {
    let config = Config::parse(yaml, "test").expect("test config is valid");
    let handle = ConfigHandle::new(config, None);
    let engine = Engine::new(handle.clone());
    // Follow reloads, but no periodic probes: tests count the requests mocks receive.
    engine.follow_config();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let router =
        glider_gateway::router_with(engine.clone(), delegator, responses).expect("gateway routes");
    let server = handle.snapshot().server.clone();
    let drain = glider_sys::listen::Drain::on(
        async {
            let _ = rx.await;
        },
        std::time::Duration::from_secs(server.shutdown_grace_secs),
    );
    tokio::spawn(glider_gateway::serve_with(
        listener,
        router,
        server.client_limits(),
        drain,
    ));
    Gateway {
        base: format!("http://{addr}"),
        engine,
        config: handle,
        shutdown: Some(tx),
    }
}

/// One mock serving all four dialects, and a config with one backend of each type on it.
pub async fn mock_and_config(extra: &str) -> (MockVendor, String) {
    mock_and_config_with(MockConfig::default(), extra).await
}

/// [`mock_and_config`] with a mock configured by `config`.
pub async fn mock_and_config_with(config: MockConfig, extra: &str) -> (MockVendor, String) {
    let mock = MockVendor::start(config).await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: ollama, type: ollama, base_url: '{url}', models: [m-ollama]}}\n\
         \x20 - {{name: vllm, type: vllm, base_url: '{url}/v1', models: [m-vllm]}}\n\
         \x20 - {{name: openai, type: openai, base_url: '{url}/v1', api_key: k-openai, models: [m-openai]}}\n\
         \x20 - {{name: anthropic, type: anthropic, base_url: '{url}', api_key: k-anthropic, models: [m-anthropic]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n{extra}"
    );
    (mock, yaml)
}

pub const FRONTS: [Dialect; 4] = [
    Dialect::Anthropic,
    Dialect::OpenAiChat,
    Dialect::OpenAiResponses,
    Dialect::Ollama,
];

/// (backend model, the path the mock must see for it)
pub const BACKENDS: [(&str, &str); 4] = [
    ("m-ollama", "/api/chat"),
    ("m-vllm", "/v1/chat/completions"),
    ("m-openai", "/v1/chat/completions"),
    ("m-anthropic", "/v1/messages"),
];

pub fn front_path(front: Dialect) -> &'static str {
    match front {
        Dialect::Anthropic => "/v1/messages",
        Dialect::OpenAiChat => "/v1/chat/completions",
        Dialect::OpenAiResponses => "/v1/responses",
        Dialect::Ollama => "/api/chat",
    }
}

pub use glider_test_support::conformance::weather_tool;

/// A plain user question.
pub fn text_request(model: &str, text: &str, stream: bool) -> glider_ngl::Request {
    glider_ngl::Request {
        model: model.into(),
        turns: vec![
            Turn::text(Role::System, "be brief"),
            Turn::text(Role::User, text),
        ],
        max_tokens: Some(200),
        stream,
        ..glider_ngl::Request::default()
    }
}

/// The first turn of a tool round trip: the mock calls get_weather(Paris).
pub fn tool_request(model: &str, stream: bool) -> glider_ngl::Request {
    glider_ngl::Request {
        tools: vec![weather_tool()].into(),
        ..text_request(
            model,
            "weather in Paris? [[call:get_weather {\"city\":\"Paris\"}]]",
            stream,
        )
    }
}

/// The second turn: the call and its result.
pub fn tool_result_request(model: &str, call_id: &str, stream: bool) -> glider_ngl::Request {
    let mut request = tool_request(model, stream);
    push_weather_round(&mut request, call_id);
    request
}

/// Add one round of the weather loop to `request`: the model's get_weather(Paris) call
/// `call_id`, and its result.
pub fn push_weather_round(request: &mut glider_ngl::Request, call_id: &str) {
    request.turns.push(Turn {
        role: Role::Assistant,
        parts: vec![Part::ToolCall {
            id: call_id.into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        }],
    });
    request.turns.push(Turn {
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: call_id.into(),
            name: Some("get_weather".into()),
            content: vec![Part::text("18C and sunny")],
            is_error: false,
        }],
    });
}

/// The wire body a client of `front` sends for `request`.
pub fn wire(front: Dialect, request: &glider_ngl::Request) -> Value {
    codec(front).encode_request(request)
}

pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "reply is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value as text (empty when absent or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Decode as `front` would, streamed or not.
    pub fn decode(&self, front: Dialect, stream: bool) -> Result<Response, glider_ngl::ApiError> {
        let codec = codec(front);
        if !stream {
            return codec.decode_response(&self.body);
        }
        let mut decoder = codec.stream_decoder();
        let mut builder = ResponseBuilder::new();
        for event in decoder.feed(&self.body)? {
            builder.push(&event);
        }
        for event in decoder.finish() {
            builder.push(&event);
        }
        builder.finish()
    }
}

pub async fn post(
    base: &str,
    path: &str,
    body: impl Into<reqwest::Body>,
    headers: &[(&str, &str)],
) -> Reply {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut request = client
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("gateway answers");
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.expect("body"),
    }
}

/// The next finished request on the bus (waiting at most 10 s, so a bug cannot hang).
pub async fn next_finished(
    events: &mut tokio::sync::broadcast::Receiver<Arc<glider_engine::PipelineEvent>>,
) -> glider_engine::RequestRecord {
    loop {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.recv())
            .await
            .expect("an event within 10 s")
            .expect("bus open");
        if let glider_engine::PipelineEvent::RequestFinished(record) = &*event {
            return record.clone();
        }
    }
}

pub async fn post_json(base: &str, path: &str, body: &Value) -> Reply {
    post(base, path, body.to_string(), &[]).await
}

/// The tool calls of a reply as (id, name, arguments), in order.
pub fn tool_calls(response: &Response) -> Vec<(String, String, Value)> {
    response
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

/// The first tool call in a reply.
pub fn first_tool_call(response: &Response) -> Option<(String, String, Value)> {
    tool_calls(response).into_iter().next()
}

/// A fake `nvidia-smi` printing one GPU of `total_mib` with `used_mib` in use.
pub fn fake_nvidia_smi(dir: &std::path::Path, total_mib: u64, used_mib: u64) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("nvidia-smi");
    let script = format!(
        "#!/bin/sh\n\
         case \"$*\" in\n\
         *--query-gpu=index,memory.total,memory.used,utilization.gpu*) ;;\n\
         *) echo \"unexpected arguments: $*\" >&2; exit 2 ;;\n\
         esac\n\
         echo\n\
         echo '0, {total_mib}, {used_mib}, 17'\n"
    );
    std::fs::write(&path, script).expect("write fake nvidia-smi");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}
