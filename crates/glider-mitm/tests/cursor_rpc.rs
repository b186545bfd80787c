//! Cursor's Agent RPC plane end to end on loopback: a scripted Cursor-like client
//! (HTTP/2, Connect, trusting Glider's CA) talks through the MITM to a scripted Cursor
//! origin (TLS, h2). A root turn is answered by the local mock; a child turn and the
//! follow-ons of a cloud turn reach the origin; a local stream that dies after its
//! first text ends with an error frame and never touches the origin.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{Http, TestCa, bounded, provider};
use glider_config::{Config, ConfigHandle};
use glider_cursorrpc::frame::{EndOfStream, Frame, decode_all, message_frame};
use glider_cursorrpc::messages::{
    AgentClientMessage, AgentRunRequest, AgentServerMessage, BidiAppendRequest, BidiRequestId,
    ConversationAction, ModelDetails, hex_encode, run_sse_request,
};
use glider_cursorrpc::wire::{Encode, Unknown};
use glider_cursorrpc::{Update, server_frame};
use glider_engine::Engine;
use glider_mitm::Mitm;
use glider_test_support::{MockConfig, MockVendor};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const HOST: &str = "api2.cursor.sh";
const APPEND: &str = "/aiserver.v1.BidiService/BidiAppend";
const RUN_SSE: &str = "/agent.v1.AgentService/RunSSE";

/// What the scripted origin received: (path, request id).
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A Cursor origin: acknowledges appends, answers every RunSSE with "from-origin".
struct CursorOrigin {
    addr: SocketAddr,
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CursorOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CursorOrigin {
    async fn start(ca: &TestCa) -> CursorOrigin {
        let (cert, key) = ca.leaf(&[HOST]);
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen: Seen = Arc::default();
        let task_seen = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, seen) = (acceptor.clone(), task_seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        origin_reply(request, seen.clone())
                    });
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        CursorOrigin { addr, seen, task }
    }

    fn seen(&self, path: &str) -> Vec<String> {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

async fn origin_reply(
    request: Request<Incoming>,
    seen: Seen,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = request.uri().path().to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let id = if path == APPEND {
        BidiAppendRequest::decode(&body)
            .ok()
            .and_then(|a| a.request_id().map(str::to_owned))
    } else {
        decode_all(&body, false)
            .ok()
            .and_then(|frames| frames.first().cloned())
            .and_then(|f| BidiRequestId::decode(&f.payload).ok())
            .map(|r| r.request_id)
    };
    let id = id.unwrap_or_default();
    seen.lock().expect("lock").push((path.clone(), id.clone()));
    let reply = if path == RUN_SSE {
        let frames = origin_run_sse(&id);
        Response::builder()
            .header("content-type", "application/connect+proto")
            .body(Full::new(Bytes::from(frames)))
    } else {
        Response::builder()
            .header("content-type", "application/proto")
            .body(Full::new(Bytes::new()))
    };
    Ok(reply.expect("response"))
}

/// The origin's RunSSE reply: text (after a `read` tool call for `tool-*` ids).
fn origin_run_sse(request_id: &str) -> Vec<u8> {
    let mut frames = Vec::new();
    if request_id.starts_with("tool-") {
        // InteractionUpdate.tool_call_started { call_id, tool_call { read (8) { path } } }
        let started = [
            &[0x0a, 0x06][..],
            b"call-1",
            &[0x12, 0x09, 0x42, 0x07, 0x0a, 0x05],
            b"a.txt",
        ]
        .concat();
        let mut update = vec![0x12, started.len() as u8];
        update.extend_from_slice(&started);
        let mut message = vec![0x0a, update.len() as u8];
        message.extend_from_slice(&update);
        frames.extend(message_frame(&message));
    }
    frames.extend(server_frame(Update::TextDelta("from-origin".into())));
    frames.extend(server_frame(Update::TurnEnded));
    frames.extend(EndOfStream::ok().encode());
    frames
}

/// Glider's proxy with a local backend behind the engine, in front of the origin.
struct CursorStack {
    proxy: SocketAddr,
    mitm: Arc<Mitm>,
    engine: Arc<Engine>,
    config: ConfigHandle,
    /// The YAML the stack started with.
    yaml: String,
    origin: CursorOrigin,
    home: tempfile::TempDir,
    _mock: MockVendor,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// `local_backend`: the YAML of the `local` backend (its URL decides what answers).
async fn cursor_stack(local_backend: &str, extra_mitm: &str) -> CursorStack {
    let home = tempfile::tempdir().expect("tempdir");
    let origin_ca = TestCa::new();
    let ca_file = home.path().join("origin-ca.pem");
    std::fs::write(&ca_file, &origin_ca.pem).expect("write ca");
    let origin = CursorOrigin::start(&origin_ca).await;
    let mock = MockVendor::start(MockConfig::default()).await;
    let backend = local_backend.replace("{mock}", &mock.base_url());
    let yaml = format!(
        "backends:\n\
         \x20 - {backend}\n\
         model_aliases: {{cursor-local: qwen-local}}\n\
         routing: {{cloud_fallback: false}}\n\
         mitm:\n\
         \x20 enabled: true\n\
         \x20 port: 0\n\
         \x20 hosts: [{HOST}]\n\
         \x20 upstream_overrides: {{{HOST}: '{origin}'}}\n\
         \x20 upstream_ca_file: '{ca}'\n{extra_mitm}",
        origin = origin.addr,
        ca = ca_file.display(),
    );
    let config = ConfigHandle::new(
        Config::parse(&yaml, "test").expect("valid test config"),
        None,
    );
    let engine = Engine::new(config.clone());
    engine.follow_config();
    let mitm = Mitm::new(engine.clone(), home.path()).expect("mitm");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(mitm.clone().serve(listener, async {
        let _ = rx.await;
    }));
    CursorStack {
        proxy,
        mitm,
        engine,
        config,
        yaml,
        origin,
        home,
        _mock: mock,
        _shutdown: tx,
    }
}

const OLLAMA_LOCAL: &str = "{name: local, type: ollama, base_url: '{mock}', models: [qwen-local]}";

/// The Cursor-like client: one HTTP/2 connection through the proxy.
async fn cursor_client(
    stack: &CursorStack,
) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let roots =
        [glider_mitm::ca::first_certificate(stack.mitm.authority().cert_pem()).expect("ca der")];
    match common::client(stack.proxy, HOST, &roots, Http::Two).await.0 {
        common::Client::Two(sender) => sender,
        common::Client::One(_) => unreachable!("asked for HTTP/2"),
    }
}

struct Turn<'a> {
    request_id: &'a str,
    model: &'a str,
    text: &'a str,
    conversation: &'a str,
    subagent: Option<&'a str>,
    /// A `ConversationAction` member other than a user message (4: summarize).
    other_action: Option<u8>,
}

impl Turn<'_> {
    fn append_body(&self) -> Vec<u8> {
        let action = match self.other_action {
            Some(member) => ConversationAction {
                unknown: Unknown(vec![(member << 3) | 2, 0]),
                ..Default::default()
            },
            None => ConversationAction::user_text(self.text, "msg-1"),
        };
        let message = AgentClientMessage {
            run_request: Some(AgentRunRequest {
                action: Some(action),
                model_details: Some(ModelDetails {
                    model_id: self.model.into(),
                    unknown: Unknown::default(),
                }),
                conversation_id: Some(self.conversation.into()),
                subagent_type_name: self.subagent.map(str::to_owned),
                // A conversation state Glider does not model rides along untouched.
                unknown: Unknown(vec![0x0a, 0x02, 0x08, 0x01]),
            }),
            ..Default::default()
        };
        BidiAppendRequest {
            data: hex_encode(&message.encode()),
            request_id: Some(BidiRequestId::new(self.request_id)),
            append_seqno: 0,
            unknown: Unknown::default(),
        }
        .encode()
    }
}

fn rpc_request(path: &str, content_type: &str, body: Vec<u8>) -> Request<Full<Bytes>> {
    Request::builder()
        .method("POST")
        .uri(format!("https://{HOST}{path}"))
        .header("content-type", content_type)
        .header("connect-protocol-version", "1")
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

async fn append(
    client: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    turn: &Turn<'_>,
) {
    client.ready().await.expect("ready");
    let response = bounded(
        "BidiAppend",
        client.send_request(rpc_request(APPEND, "application/proto", turn.append_body())),
    )
    .await
    .expect("append answered");
    assert_eq!(response.status(), StatusCode::OK);
}

/// Open a RunSSE for `request_id` and read every frame.
async fn run_sse(
    mut client: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    request_id: String,
) -> (Response<()>, Vec<Frame>) {
    client.ready().await.expect("ready");
    let body = message_frame(&run_sse_request(&request_id));
    let response = bounded(
        "RunSSE head",
        client.send_request(rpc_request(RUN_SSE, "application/connect+proto", body)),
    )
    .await
    .expect("RunSSE answered");
    let (parts, body) = response.into_parts();
    let bytes = bounded("RunSSE body", body.collect())
        .await
        .expect("body")
        .to_bytes();
    let frames = decode_all(&bytes, false).expect("valid Connect frames");
    (Response::from_parts(parts, ()), frames)
}

/// Until a RunSSE waits in the hub (Cursor opens it before it appends the prompt).
async fn run_sse_waiting(stack: &CursorStack) {
    bounded("the RunSSE waiting in the hub", async {
        while stack.mitm.agent_rpc().hub.sizes().0 == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

fn text_of(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter_map(|f| AgentServerMessage::decode(&f.payload).ok())
        .filter_map(|m| m.interaction_update)
        .filter_map(|u| match u.update {
            Update::TextDelta(t) => Some(t),
            _ => None,
        })
        .collect()
}

fn ended_cleanly(frames: &[Frame]) -> bool {
    let turn_ended = frames.iter().any(|f| {
        AgentServerMessage::decode(&f.payload)
            .ok()
            .and_then(|m| m.interaction_update)
            .is_some_and(|u| u.update == Update::TurnEnded)
    });
    let end = frames
        .last()
        .and_then(|f| f.end_of_stream())
        .and_then(Result::ok);
    turn_ended && end.is_some_and(|e| e.error.is_none())
}

#[tokio::test]
async fn a_root_turn_is_answered_locally_and_the_append_still_reaches_the_origin() {
    let stack = cursor_stack(OLLAMA_LOCAL, "  debug_agent_rpc: true\n").await;
    let mut client = cursor_client(&stack).await;
    // Cursor opens the reply stream first, then appends the prompt: the append is sent
    // only once the RunSSE waits in the hub, so the waiter path is the one exercised.
    let reader = tokio::spawn(run_sse(client.clone(), "root-1".into()));
    run_sse_waiting(&stack).await;
    append(
        &mut client,
        &Turn {
            request_id: "root-1",
            model: "cursor-local",
            text: "hello local",
            conversation: "conv-1",
            subagent: None,
            other_action: None,
        },
    )
    .await;
    let (response, frames) = bounded("local reply", reader).await.expect("task");
    assert_eq!(
        response.headers()["content-type"],
        "application/connect+proto"
    );
    assert_eq!(text_of(&frames), "echo: hello local");
    assert!(ended_cleanly(&frames), "{frames:?}");
    assert_eq!(stack.origin.seen(APPEND), vec!["root-1".to_owned()]);
    assert!(
        stack.origin.seen(RUN_SSE).is_empty(),
        "the origin never saw the RunSSE"
    );
    // Debug dumps: the decoded append and the frames Glider sent.
    let dumps: Vec<String> = std::fs::read_dir(stack.home.path().join("mitm/debug"))
        .expect("dump dir")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("read"))
        .collect();
    assert!(
        dumps
            .iter()
            .any(|d| d.contains("\"root\"") && d.contains("hello local")),
        "{dumps:?}"
    );
    assert!(dumps.iter().any(|d| d.contains("turn_ended")), "{dumps:?}");
}

#[tokio::test]
async fn a_conversations_turns_share_the_session_cursor_conversation_id() {
    let stack = cursor_stack(OLLAMA_LOCAL, "").await;
    for (request_id, text) in [("conv-a-1", "first question"), ("conv-a-2", "other words")] {
        let mut client = cursor_client(&stack).await;
        append(
            &mut client,
            &Turn {
                request_id,
                model: "cursor-local",
                text,
                conversation: "conv-a",
                subagent: None,
                other_action: None,
            },
        )
        .await;
        let (_, frames) = run_sse(client, request_id.into()).await;
        assert_eq!(text_of(&frames), format!("echo: {text}"));
    }
    // Keyed by the prefix hash, two turns with different first messages would be two
    // sessions; keyed by the conversation id they are one.
    let session = stack
        .engine
        .session_budget("cursor:conv-a")
        .expect("the conversation is the session");
    assert_eq!(session.total.turns, 2);
    // Each reply is counted on its backend once its stream is done.
    bounded("both replies counted on the local backend", async {
        while stack
            .engine
            .session_budget("cursor:conv-a")
            .and_then(|s| s.total.backends.get("local").map(|b| b.requests))
            != Some(2)
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_child_turn_goes_to_the_origin() {
    let stack = cursor_stack(OLLAMA_LOCAL, "").await;
    let mut client = cursor_client(&stack).await;
    // This time the append comes first.
    append(
        &mut client,
        &Turn {
            request_id: "child-1",
            model: "cursor-local",
            text: "explore the repo",
            conversation: "conv-2",
            subagent: Some("explore"),
            other_action: None,
        },
    )
    .await;
    let (_, frames) = run_sse(client, "child-1".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
    assert!(ended_cleanly(&frames));
    assert_eq!(stack.origin.seen(RUN_SSE), vec!["child-1".to_owned()]);
}

#[tokio::test]
async fn follow_ons_of_a_cloud_turn_stay_with_the_cloud() {
    let stack = cursor_stack(OLLAMA_LOCAL, "").await;
    let mut client = cursor_client(&stack).await;
    let turn = |request_id, model, other_action| Turn {
        request_id,
        model,
        text: "ok",
        conversation: "conv-3",
        subagent: None,
        other_action,
    };
    // The root: a model no local backend serves, so a cloud decision opens a family.
    append(&mut client, &turn("root-3", "claude-4-sonnet", None)).await;
    let (_, frames) = run_sse(client.clone(), "root-3".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
    // The title follow-on looks like a small local prompt, yet stays with the cloud.
    append(&mut client, &turn("title-3", "cursor-local", None)).await;
    let (_, frames) = run_sse(client.clone(), "title-3".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
    // The reply summary (a summarize action) too — a follow-on kind that always goes to
    // the origin, family or not; the title above is what the family decides.
    append(&mut client, &turn("summary-3", "cursor-local", Some(4))).await;
    let (_, frames) = run_sse(client.clone(), "summary-3".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
    assert_eq!(
        stack.origin.seen(RUN_SSE),
        vec!["root-3".to_owned(), "title-3".into(), "summary-3".into()]
    );
    // Another conversation is not in the family: its local turn is answered locally.
    append(
        &mut client,
        &Turn {
            conversation: "conv-other",
            ..turn("root-4", "cursor-local", None)
        },
    )
    .await;
    let (_, frames) = run_sse(client, "root-4".into()).await;
    assert_eq!(text_of(&frames), "echo: ok");
}

#[tokio::test]
async fn a_run_sse_without_an_append_goes_to_the_origin_after_the_wait() {
    let stack = cursor_stack(OLLAMA_LOCAL, "").await;
    let client = cursor_client(&stack).await;
    let started = std::time::Instant::now();
    let (_, frames) = run_sse(client, "orphan-1".into()).await;
    assert!(started.elapsed() >= glider_mitm::cursor::hub::WAIT);
    assert_eq!(text_of(&frames), "from-origin");
    assert_eq!(stack.origin.seen(RUN_SSE), vec!["orphan-1".to_owned()]);
}

/// An OpenAI-compatible local backend whose stream dies after its first text.
async fn dying_backend() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            let chunk = serde_json::json!({
                "id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}, "finish_reason": null}]
            });
            // One chunk, then the stream ends without a finish reason or [DONE].
            (
                [("content-type", "text/event-stream")],
                format!("data: {chunk}\n\n"),
            )
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}

#[tokio::test]
async fn a_local_stream_that_dies_after_its_first_text_never_reaches_the_origin() {
    let (backend, task) = dying_backend().await;
    // origin_on_local_error is true (the default): only the partial write forbids it.
    let stack = cursor_stack(
        &format!(
            "{{name: local, type: vllm, base_url: 'http://{backend}/v1', models: [qwen-local]}}"
        ),
        "",
    )
    .await;
    let mut client = cursor_client(&stack).await;
    append(
        &mut client,
        &Turn {
            request_id: "dies-1",
            model: "cursor-local",
            text: "hi",
            conversation: "conv-5",
            subagent: None,
            other_action: None,
        },
    )
    .await;
    let (_, frames) = run_sse(client, "dies-1".into()).await;
    assert_eq!(text_of(&frames), "partial");
    let end = frames
        .last()
        .and_then(|f| f.end_of_stream())
        .expect("an end-of-stream frame")
        .expect("json");
    assert!(end.error.is_some(), "{end:?}");
    assert!(
        stack.origin.seen(RUN_SSE).is_empty(),
        "no origin connect after a partial write"
    );
    task.abort();
}

#[tokio::test]
async fn a_relayed_stream_is_untouched_while_the_tool_codec_and_dumps_read_it() {
    let stack = cursor_stack(
        OLLAMA_LOCAL,
        "  debug_agent_rpc: true\n  agent_rpc_tool_codec: true\n",
    )
    .await;
    let mut client = cursor_client(&stack).await;
    append(
        &mut client,
        &Turn {
            request_id: "tool-1",
            model: "claude-4-sonnet",
            text: "read a.txt",
            conversation: "conv-6",
            subagent: None,
            other_action: None,
        },
    )
    .await;
    let (_, frames) = run_sse(client, "tool-1".into()).await;
    let received: Vec<u8> = frames
        .iter()
        .flat_map(|f| glider_cursorrpc::encode_frame(f.flags, &f.payload, false))
        .collect();
    assert_eq!(received, origin_run_sse("tool-1"), "byte for byte");
    // The dump is written when the relayed body is dropped, just after the last frame.
    let dir = stack.home.path().join("mitm/debug");
    let found = bounded("origin-reply dump", async {
        loop {
            let dumps: Vec<String> = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                        .collect()
                })
                .unwrap_or_default();
            if let Some(dump) = dumps.into_iter().find(|d| d.contains("tool_call_started")) {
                return dump;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        found.contains("\"read\"") && found.contains("call-1"),
        "{found}"
    );
}

#[tokio::test]
async fn an_explicit_local_turn_keeps_its_follow_ons_local() {
    let stack = cursor_stack(OLLAMA_LOCAL, "").await;
    let mut client = cursor_client(&stack).await;
    let turn = |request_id, text| Turn {
        request_id,
        // No local backend lists this model: only the flag (then the family) keeps
        // these turns local.
        model: "claude-4-sonnet",
        text,
        conversation: "conv-7",
        subagent: None,
        other_action: None,
    };
    append(&mut client, &turn("root-7", "/local hi there")).await;
    let (_, frames) = run_sse(client.clone(), "root-7".into()).await;
    assert_eq!(text_of(&frames), "echo: hi there", "the flag was stripped");
    append(&mut client, &turn("title-7", "title please")).await;
    let (_, frames) = run_sse(client.clone(), "title-7".into()).await;
    assert_eq!(text_of(&frames), "echo: title please");
    assert!(stack.origin.seen(RUN_SSE).is_empty());
    // A flag the user types still wins over the family.
    append(&mut client, &turn("cloud-7", "/cloud ask the big model")).await;
    let (_, frames) = run_sse(client.clone(), "cloud-7".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
    // ...but `/local` does not replace the live StickyCloud family `/cloud` just opened
    // (spec: a StickyLocal must not replace it): that turn goes to the origin too.
    append(&mut client, &turn("local-7", "/local back to local")).await;
    let (_, frames) = run_sse(client.clone(), "local-7".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
    // Without the family, the same turn in another conversation is the origin's.
    append(
        &mut client,
        &Turn {
            conversation: "conv-8",
            ..turn("title-8", "title please")
        },
    )
    .await;
    let (_, frames) = run_sse(client, "title-8".into()).await;
    assert_eq!(text_of(&frames), "from-origin");
}

#[tokio::test]
async fn a_run_sse_carries_out_the_decision_its_append_made() {
    let stack = cursor_stack(OLLAMA_LOCAL, "").await;
    let mut client = cursor_client(&stack).await;
    append(
        &mut client,
        &Turn {
            request_id: "once-1",
            model: "cursor-local",
            text: "decided once",
            conversation: "conv-once",
            subagent: None,
            other_action: None,
        },
    )
    .await;
    // Between the append and its RunSSE the alias goes away: routed again, the turn
    // would belong to the origin (no backend serves `cursor-local`). Decided once, the
    // RunSSE carries out the append's local decision.
    let without_alias = stack
        .yaml
        .replace("model_aliases: {cursor-local: qwen-local}\n", "");
    assert_ne!(
        without_alias, stack.yaml,
        "the test's config names the alias"
    );
    stack
        .config
        .apply(Config::parse(&without_alias, "reload").expect("valid"));
    bounded("the engine follows the reload", async {
        while !stack.engine.runtime().config.model_aliases.is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let (_, frames) = run_sse(client, "once-1".into()).await;
    assert_eq!(text_of(&frames), "echo: decided once");
    assert!(ended_cleanly(&frames), "{frames:?}");
    assert!(
        stack.origin.seen(RUN_SSE).is_empty(),
        "the origin never saw the RunSSE"
    );
}

#[tokio::test]
async fn a_local_root_turn_runs_the_tool_loop_and_cursor_gets_the_final_text() {
    // Cursor runs no tool for a turn Glider answers (Glider sends text frames only), so
    // with `tools.loop` on, the local model's call to an internal tool is run by Glider
    // and Cursor is streamed the answer written after it.
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("notes.txt"), "cursor notes\n").expect("written");
    let stack = cursor_stack(
        OLLAMA_LOCAL,
        &format!(
            "tools: {{workspace: '{}', loop: {{enabled: true, max_turns: 4, tools: [read_file]}}}}\n",
            workspace.path().display()
        ),
    )
    .await;
    let mut client = cursor_client(&stack).await;
    let reader = tokio::spawn(run_sse(client.clone(), "root-tools".into()));
    run_sse_waiting(&stack).await;
    append(
        &mut client,
        &Turn {
            request_id: "root-tools",
            model: "cursor-local",
            text: r#"read it [[call:read_file {"path":"notes.txt"}]]"#,
            conversation: "conv-tools",
            subagent: None,
            other_action: None,
        },
    )
    .await;
    let (_, frames) = bounded("local reply", reader).await.expect("task");
    let text = text_of(&frames);
    assert!(
        text.contains("tool result:") && text.contains("cursor notes"),
        "the answer written after the tool ran: {text:?}"
    );
    assert!(ended_cleanly(&frames), "{frames:?}");
    assert!(stack.origin.seen(RUN_SSE).is_empty(), "answered by Glider");
}
