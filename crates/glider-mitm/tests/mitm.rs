//! The MITM proxy end to end on loopback: CONNECT, decryption with Glider's CA, local
//! replies through the engine, origin passthrough with bytes and credentials unchanged,
//! raw tunnels (proved by the certificate the client sees), refusal, HTTP/1.1 and
//! HTTP/2 clients, streaming, and clients that do not trust the CA.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use glider_engine::PipelineEvent;
use glider_ngl::Dialect;
use http_body_util::BodyExt;

const KEY: (&str, &str) = ("x-api-key", "sk-ant-user-own-key");

#[tokio::test]
async fn an_unlisted_host_is_tunnelled_without_decryption() {
    let s = stack("").await;
    // Trusting ONLY the origin's CA: the handshake succeeds, and the certificate the
    // client sees is the origin's own, byte for byte — Glider never decrypted.
    for http in [Http::One, Http::Two] {
        let (mut client, presented) = client(
            s.proxy,
            "tunnel.test",
            std::slice::from_ref(&s.origin_ca.der),
            http,
        )
        .await;
        assert_eq!(
            presented, s.origin.cert,
            "{http:?}: the origin's certificate"
        );
        let (response, body) = client
            .fetch(request(
                http,
                "GET",
                "tunnel.test",
                "/hello?x=1",
                &[KEY],
                "",
            ))
            .await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-origin"], "yes");
        let json: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(json["path"], "/hello?x=1");
    }
    // And a client trusting only Glider's CA cannot talk to a tunnelled host.
    let (code, _, stream) = connect(s.proxy, "tunnel.test:443").await;
    assert_eq!(code, 200);
    let refused = tls(stream, "tunnel.test", &[s.glider_ca()], &[b"http/1.1"]).await;
    assert!(
        refused.is_err(),
        "Glider's CA must not validate a tunnelled origin"
    );
    assert_eq!(
        s.mitm.leaves().len(),
        0,
        "no leaf was made for a tunnelled host"
    );
}

#[tokio::test]
async fn an_intercepted_request_for_a_local_model_is_answered_locally() {
    let s = stack("").await;
    for http in [Http::One, Http::Two] {
        for stream in [false, true] {
            let (mut client, presented) =
                client(s.proxy, "api.anthropic.com", &[s.glider_ca()], http).await;
            assert_ne!(presented, s.origin.cert, "Glider's leaf, not the origin's");
            let body = messages_body("claude-local-1", "hello local", stream);
            let (response, reply) = client
                .fetch(request(
                    http,
                    "POST",
                    "api.anthropic.com",
                    "/v1/messages?beta=true",
                    &[KEY, ("content-type", "application/json")],
                    body,
                ))
                .await;
            let text = String::from_utf8_lossy(&reply);
            assert_eq!(response.status(), 200, "{http:?} {stream}: {text}");
            let answer = if stream {
                sse_text(&text)
            } else {
                text.to_string()
            };
            assert!(
                answer.contains("echo: hello local"),
                "{http:?} {stream}: {text}"
            );
            let route = response.headers()["x-glider-route"]
                .to_str()
                .expect("ascii");
            assert!(route.contains("backend=local"), "{route}");
            if stream {
                assert!(text.contains("event: message_stop"), "{text}");
            }
        }
    }
    assert!(
        s.origin.seen().is_empty(),
        "the origin saw nothing: {:?}",
        s.origin.seen()
    );
    let local = s.mock.requests();
    assert_eq!(local.len(), 4);
    assert_eq!(local[0].path, "/api/chat");
    assert_eq!(local[0].body["model"], "qwen-local");
}

#[tokio::test]
async fn a_cloud_request_goes_to_the_origin_with_bytes_and_credentials_unchanged() {
    let s = stack("").await;
    let mut events = s.engine.bus().subscribe();
    // Spacing and key order a re-encoder would not keep.
    let body = "{\"model\":  \"claude-sonnet-4-5\", \"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    for http in [Http::One, Http::Two] {
        s.origin.clear();
        let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], http).await;
        let (response, reply) = client
            .fetch(request(
                http,
                "POST",
                "api.anthropic.com",
                "/v1/messages?beta=true",
                &[
                    KEY,
                    ("authorization", "Bearer oauth-user-token"),
                    ("anthropic-beta", "oauth-2025-04-20"),
                    ("content-type", "application/json"),
                ],
                body,
            ))
            .await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-origin"], "yes");
        assert!(String::from_utf8_lossy(&reply).contains("from-origin"));
        let seen = s.origin.seen();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let got = &seen[0];
        assert_eq!(got.path_and_query, "/v1/messages?beta=true");
        assert_eq!(
            got.body,
            Bytes::from_static(body.as_bytes()),
            "body bytes unchanged"
        );
        assert_eq!(got.headers["x-api-key"], KEY.1);
        assert_eq!(got.headers["authorization"], "Bearer oauth-user-token");
        assert_eq!(got.headers["anthropic-beta"], "oauth-2025-04-20");
    }
    // The pipeline recorded the origin leg with the origin's status.
    let finished = next_finished(&mut events).await;
    assert_eq!(finished.backend.as_deref(), Some("origin"));
    assert_eq!(finished.door, "mitm");
    assert_eq!(finished.status, Some(200));
    assert_eq!(finished.usage.output_tokens, 2, "{finished:?}");
}

/// The text of an Anthropic SSE reply (its text deltas joined).
fn sse_text(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

async fn next_finished(
    events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<PipelineEvent>>,
) -> glider_engine::RequestRecord {
    loop {
        let event = bounded("pipeline event", events.recv())
            .await
            .expect("event");
        if let PipelineEvent::RequestFinished(record) = &*event {
            return record.clone();
        }
    }
}

#[tokio::test]
async fn everything_else_on_an_intercepted_host_goes_to_the_origin_untouched() {
    let s = stack("").await;
    let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
    for (method, path, body) in [
        ("GET", "/api/claude_code/settings", ""),
        ("GET", "/api/oauth/claude_cli/policy_limits", ""),
        (
            "POST",
            "/v1/messages/count_tokens",
            "{\"model\":\"claude-local-1\",\"messages\":[]}",
        ),
        ("POST", "/api/event_logging/batch", "{\"events\":[1,2,3]}"),
        ("HEAD", "/v1/messages", ""),
        ("GET", "/v1/messages", ""),
    ] {
        let (response, _) = client
            .fetch(request(
                Http::One,
                method,
                "api.anthropic.com",
                path,
                &[KEY],
                body,
            ))
            .await;
        assert!(
            response.status().is_success(),
            "{method} {path}: {}",
            response.status()
        );
        assert_eq!(response.headers()["x-origin"], "yes", "{method} {path}");
        let seen = s.origin.seen();
        let last = seen.last().expect("seen");
        assert_eq!(
            (last.method.as_str(), last.path_and_query.as_str()),
            (method, path)
        );
        assert_eq!(last.body, Bytes::from(body));
        assert_eq!(last.headers["x-api-key"], KEY.1);
    }
    assert!(
        s.mock.requests().is_empty(),
        "nothing reached the local backend"
    );
}

#[tokio::test]
async fn a_local_failure_goes_to_the_origin_or_is_shown_per_origin_on_local_error() {
    let s = stack("").await;
    let body = messages_body("claude-down-1", "q", false);
    let send = |http| {
        let body = body.clone();
        let s = &s;
        async move {
            let (mut client, _) =
                client(s.proxy, "api.anthropic.com", &[s.glider_ca()], http).await;
            client
                .fetch(request(
                    http,
                    "POST",
                    "api.anthropic.com",
                    "/v1/messages",
                    &[KEY],
                    body,
                ))
                .await
        }
    };
    // Hybrid (default): the origin answers.
    let (response, reply) = send(Http::One).await;
    assert_eq!(response.status(), 200);
    assert!(String::from_utf8_lossy(&reply).contains("from-origin"));
    assert_eq!(s.origin.seen().len(), 1);
    assert_eq!(s.origin.seen()[0].body, Bytes::from(body.clone()));

    // Pure local (a hot change): the error, in Anthropic's shape; the origin is not used.
    s.apply("  origin_on_local_error: false\n");
    s.origin.clear();
    let (response, reply) = send(Http::Two).await;
    assert!(response.status().is_server_error(), "{}", response.status());
    let json: serde_json::Value = serde_json::from_slice(&reply).expect("json error");
    assert_eq!(json["type"], "error", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .expect("message")
            .contains("down"),
        "{json}"
    );
    assert!(s.origin.seen().is_empty());
}

#[tokio::test]
async fn passthrough_default_false_refuses_unlisted_hosts() {
    let s = stack("").await;
    let (code, _, _) = connect(s.proxy, "tunnel.test:443").await;
    assert_eq!(code, 200, "tunnelled by default");
    s.apply("  passthrough_default: false\n");
    let (code, head, _) = connect(s.proxy, "tunnel.test:443").await;
    assert_eq!(code, 403, "{head}");
    // Listed hosts still work.
    let (code, _, _) = connect(s.proxy, "api.anthropic.com:443").await;
    assert_eq!(code, 200);
    let (code, _, _) = connect(s.proxy, "x.intercepted.test:443").await;
    assert_eq!(code, 200, "wildcard entry");
}

#[tokio::test]
async fn the_proxy_never_relays_to_a_loopback_service_it_does_not_intercept() {
    // A loopback service (the dashboard, say) beside the proxy.
    let local = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = local.local_addr().expect("addr").port();
    let s = stack("").await;
    for authority in [
        format!("127.0.0.1:{port}"),
        format!("127.1.2.3:{port}"),
        format!("[::1]:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("0.0.0.0:{port}"),
        format!("dashboard.localhost:{port}"),
    ] {
        let (code, head, _) = connect(s.proxy, &authority).await;
        assert_eq!(code, 403, "CONNECT {authority}: {head}");
    }
    // Absolute-form plain HTTP too.
    let mut stream = tokio::net::TcpStream::connect(s.proxy)
        .await
        .expect("proxy");
    let head = format!(
        "GET http://127.0.0.1:{port}/api/config HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
        .await
        .expect("write");
    let mut reply = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut reply),
    )
    .await
    .expect("the proxy answers and closes")
    .expect("read");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(
        reply.contains("loopback address is never reached"),
        "{reply}"
    );
    // A host given an upstream override (how the tests reach their origin) and a listed
    // (intercepted) host are still served.
    let (code, head, _) = connect(s.proxy, "localhost:443").await;
    assert_eq!(code, 200, "{head}");
}

#[tokio::test]
async fn connect_reply_says_connection_established() {
    let s = stack("").await;
    let (code, head, _) = connect(s.proxy, "api.anthropic.com:443").await;
    assert_eq!(code, 200);
    assert!(
        head.starts_with("HTTP/1.1 200 Connection Established"),
        "{head}"
    );
}

/// Read body frames until `needle` has arrived; returns what was read.
async fn read_until(body: &mut hyper::body::Incoming, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let frame = bounded("next frame", body.frame())
            .await
            .unwrap_or_else(|| panic!("stream ended before {needle:?}: {seen}"))
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    seen
}

#[tokio::test]
async fn origin_streams_reach_the_client_as_they_are_produced() {
    let s = stack("").await;
    // Decrypted passthrough: the first SSE events arrive while the origin still holds
    // the rest (it sends them only after `release`).
    for http in [Http::One, Http::Two] {
        let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], http).await;
        let response = client
            .send(request(
                http,
                "POST",
                "api.anthropic.com",
                "/v1/messages",
                &[KEY],
                messages_body("claude-opus-4", "q", true),
            ))
            .await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = read_until(&mut body, "from-origin").await;
        assert!(!first.contains("message_stop"), "{first}");
        s.origin.release();
        let rest = read_until(&mut body, "message_stop").await;
        assert!(rest.contains("message_stop"));
    }
    // Raw tunnel: the same, undecrypted.
    let (mut client, _) = client(
        s.proxy,
        "tunnel.test",
        std::slice::from_ref(&s.origin_ca.der),
        Http::One,
    )
    .await;
    let response = client
        .send(request(Http::One, "GET", "tunnel.test", "/stream", &[], ""))
        .await;
    let mut body = response.into_body();
    read_until(&mut body, "one\n").await;
    s.origin.release();
    read_until(&mut body, "two\n").await;
}

#[tokio::test]
async fn a_client_that_does_not_trust_glider_fails_the_handshake_clearly_and_nothing_hangs() {
    let s = stack("").await;
    let started = std::time::Instant::now();
    let (code, _, stream) = connect(s.proxy, "api.anthropic.com:443").await;
    assert_eq!(code, 200);
    let error = tls(
        stream,
        "api.anthropic.com",
        std::slice::from_ref(&s.origin_ca.der),
        &[b"h2"],
    )
    .await
    .expect_err("untrusted CA");
    let text = error.to_string();
    assert!(
        text.contains("UnknownIssuer") || text.contains("unknown"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "failed fast");
    // The proxy still serves the next (trusting) client.
    let (mut trusting, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
    let (response, _) = trusting
        .fetch(request(
            Http::One,
            "GET",
            "api.anthropic.com",
            "/api/claude_code/settings",
            &[],
            "",
        ))
        .await;
    assert_eq!(response.status(), 200);
    // A client that connects and never starts TLS is dropped after the handshake
    // timeout; it does not hold anything else up.
    let (_code, _, _idle) = connect(s.proxy, "api.anthropic.com:443").await;
    let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::Two).await;
    let (response, _) = client
        .fetch(request(
            Http::Two,
            "GET",
            "api.anthropic.com",
            "/x",
            &[],
            "",
        ))
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_standard_proxy_client_works_end_to_end() {
    // reqwest as a user's HTTPS_PROXY client would: CONNECT, then TLS with ALPN.
    let s = stack("").await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(s.glider_ca()).expect("root");
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", s.proxy)).expect("proxy"))
        .tls_backend_preconfigured(tls)
        .build()
        .expect("client");
    let response = bounded(
        "reqwest",
        client
            .post("https://api.anthropic.com/v1/messages")
            .header(KEY.0, KEY.1)
            .body(messages_body("claude-local-x", "via reqwest", false))
            .send(),
    )
    .await
    .expect("response");
    assert_eq!(response.version(), http::Version::HTTP_2, "ALPN picked h2");
    let text = response.text().await.expect("text");
    assert!(text.contains("echo: via reqwest"), "{text}");
}

#[tokio::test]
async fn plain_http_proxy_requests_are_forwarded() {
    let s = stack("").await;
    // An absolute-form request for an unlisted plain-HTTP host goes straight through
    // (plain.test is the mock, by an upstream override: the proxy never relays to a
    // loopback address named as such).
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(format!("http://{}", s.proxy)).expect("proxy"))
        .build()
        .expect("client");
    let response = bounded(
        "plain proxy",
        client.get("http://plain.test/api/tags").send(),
    )
    .await
    .expect("response");
    assert_eq!(response.status(), 200);
    assert!(s.mock.requests().iter().any(|r| r.path == "/api/tags"));
    // A listed host over plain HTTP takes the same decrypted route: answered locally.
    let response = bounded(
        "plain listed",
        client
            .post("http://api.intercepted.test/v1/messages")
            .header(KEY.0, KEY.1)
            .body(messages_body("claude-local-1", "plain http", false))
            .send(),
    )
    .await
    .expect("response");
    assert_eq!(response.status(), 200);
    assert!(
        response
            .text()
            .await
            .expect("text")
            .contains("echo: plain http")
    );
    // Not a proxy request at all: a helpful 400.
    let direct = bounded(
        "direct",
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client")
            .get(format!("http://{}/", s.proxy))
            .send(),
    )
    .await
    .expect("response");
    assert_eq!(direct.status(), 400);
    assert!(direct.text().await.expect("text").contains("HTTPS_PROXY"));
}

#[tokio::test]
async fn the_ca_is_created_private_and_reloaded_on_the_next_start() {
    use std::os::unix::fs::PermissionsExt;
    let s = stack("").await;
    let ca_dir = home_file(&s, "mitm");
    let mode = |name: &str| {
        std::fs::metadata(ca_dir.join(name))
            .expect("file")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("ca.key"), 0o600);
    // The certificate is public, but GLIDER_HOME is private as a whole (`glider doctor`).
    assert_eq!(mode("ca.crt"), 0o600);
    assert!(s.mitm.authority().created());
    let pem = s.mitm.authority().cert_pem().to_owned();
    // A second proxy on the same GLIDER_HOME loads the same CA, and a client that
    // trusts the first one's ca.crt (from the file) trusts the second's leaves.
    let again = glider_mitm::Mitm::new(s.engine.clone(), s.home.path()).expect("mitm");
    assert!(!again.authority().created());
    assert_eq!(again.authority().cert_pem(), pem);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let proxy = listener.local_addr().expect("addr");
    tokio::spawn(again.serve(listener, std::future::pending()));
    let from_file = std::fs::read_to_string(ca_dir.join("ca.crt")).expect("ca.crt");
    let root = glider_mitm::ca::first_certificate(&from_file).expect("der");
    let (mut client, _) = client(proxy, "api.anthropic.com", &[root], Http::Two).await;
    let (response, _) = client
        .fetch(request(
            Http::Two,
            "GET",
            "api.anthropic.com",
            "/ok",
            &[],
            "",
        ))
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn debug_dumps_hold_the_body_and_no_credentials() {
    let s = stack("  debug_agent_rpc: true\n").await;
    let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
    let (response, _) = client
        .fetch(request(
            Http::One,
            "POST",
            "api.anthropic.com",
            "/v1/messages",
            &[KEY],
            messages_body("claude-local-1", "secret prompt text", false),
        ))
        .await;
    assert_eq!(response.status(), 200);
    let dir = home_file(&s, "mitm/debug");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .expect("debug dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).expect("dump");
    assert!(text.contains("secret prompt text"));
    assert!(!text.contains(KEY.1), "credentials redacted");
}

#[tokio::test]
async fn a_protocol_upgrade_on_an_intercepted_host_reaches_the_origin() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = stack("").await;
    let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
    let Client::One(sender) = &mut client else {
        unreachable!("asked for HTTP/1.1")
    };
    let request = request(
        Http::One,
        "GET",
        "api.anthropic.com",
        "/v1/realtime",
        &[KEY, ("connection", "upgrade"), ("upgrade", "echo-test")],
        "",
    );
    let response = bounded("upgrade", sender.send_request(request))
        .await
        .expect("response");
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers()["upgrade"], "echo-test");
    let upgraded = bounded("upgraded", hyper::upgrade::on(response))
        .await
        .expect("upgraded");
    let mut io = hyper_util::rt::TokioIo::new(upgraded);
    io.write_all(b"ping through glider").await.expect("write");
    let mut echoed = [0u8; 19];
    bounded("echo", io.read_exact(&mut echoed))
        .await
        .expect("read");
    assert_eq!(&echoed, b"ping through glider");
    let seen = s.origin.seen();
    assert_eq!(
        seen.last().map(|r| r.headers["x-api-key"].clone()),
        Some(http::HeaderValue::from_static(KEY.1))
    );
}

#[tokio::test]
async fn a_client_that_leaves_an_origin_stream_early_is_recorded_as_gone() {
    let s = stack("").await;
    let mut events = s.engine.bus().subscribe();
    let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::Two).await;
    let response = client
        .send(request(
            Http::Two,
            "POST",
            "api.anthropic.com",
            "/v1/messages",
            &[KEY],
            messages_body("claude-opus-4", "q", true),
        ))
        .await;
    let mut body = response.into_body();
    read_until(&mut body, "from-origin").await;
    drop(body);
    drop(client);
    let finished = next_finished(&mut events).await;
    assert_eq!(finished.backend.as_deref(), Some("origin"));
    assert_eq!(finished.status, Some(499), "{finished:?}");
    assert!(finished.ttft_ms.is_some());
    s.origin.release();
}

#[tokio::test]
async fn a_flagged_message_is_delegated_and_never_reaches_the_origin() {
    let work = tempfile::tempdir().expect("tempdir");
    let fake = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../glider/tests/fixtures/cursor-agent")
        .canonicalize()
        .expect("the fake cursor-agent of the delegation tests");
    let dir = work.path().display();
    let s = stack(&format!(
        "delegate:\n  enabled: true\n  workdir: '{dir}'\n  cursor_agent:\n    path: '{}'\n    env: {{GLIDER_TEST_DIR: '{dir}'}}\n",
        fake.display()
    ))
    .await;
    for stream in [false, true] {
        let (mut client, _) =
            client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::Two).await;
        let body = messages_body("claude-sonnet-4-5", "/cursor-agent write the notes", stream);
        let (response, reply) = client
            .fetch(request(
                Http::Two,
                "POST",
                "api.anthropic.com",
                "/v1/messages?beta=true",
                &[KEY, ("content-type", "application/json")],
                body,
            ))
            .await;
        let text = String::from_utf8_lossy(&reply);
        assert_eq!(response.status(), 200, "{stream}: {text}");
        assert_eq!(
            response.headers()["x-glider-route"],
            "delegate:cursor-agent"
        );
        let answer = if stream {
            sse_text(&text)
        } else {
            text.to_string()
        };
        assert!(
            answer.contains("Wrote NOTES.md in chat"),
            "{stream}: {answer}"
        );
    }
    // The delegate ran in the configured workdir, once per message, with the task.
    let argv = std::fs::read_to_string(work.path().join("argv.log")).expect("argv.log");
    assert_eq!(argv.lines().count(), 2, "{argv}");
    assert!(
        argv.lines().all(|l| l.ends_with("write the notes")),
        "{argv}"
    );
    let cwd = std::fs::read_to_string(work.path().join("cwd.log")).expect("cwd.log");
    assert_eq!(
        std::path::Path::new(cwd.trim())
            .canonicalize()
            .expect("cwd"),
        work.path().canonicalize().expect("workdir")
    );
    assert!(s.origin.seen().is_empty(), "{:?}", s.origin.seen());
}

#[tokio::test]
async fn a_local_stream_that_ends_before_its_terminator_is_an_error_event_and_a_failure() {
    let s = stack("").await;
    let mut events = s.engine.bus().subscribe();
    s.mock
        .set_failure(glider_test_support::Failure::EndEarly { after_deltas: 1 });
    let (mut client, _) = client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
    let (response, reply) = client
        .fetch(request(
            Http::One,
            "POST",
            "api.anthropic.com",
            "/v1/messages",
            &[KEY, ("content-type", "application/json")],
            messages_body("claude-local-1", "hello local", true),
        ))
        .await;
    let text = String::from_utf8_lossy(&reply);
    assert_eq!(response.status(), 200, "headers went first: {text}");
    assert!(text.contains("event: error"), "{text}");
    assert!(!text.contains("event: message_stop"), "{text}");
    let record = next_finished(&mut events).await;
    assert_eq!(record.status, Some(502), "{record:?}");
    assert!(
        s.origin.seen().is_empty(),
        "a broken local stream is not re-sent"
    );
}

#[tokio::test]
async fn a_stalled_body_inside_a_decrypted_tunnel_is_a_408_in_the_callers_dialect() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = stack("server: {body_read_timeout_secs: 1}\n").await;
    let (code, head, stream) = connect(s.proxy, "api.anthropic.com:443").await;
    assert_eq!(code, 200, "{head}");
    let (mut tls, _) = tls(
        stream,
        "api.anthropic.com",
        &[s.glider_ca()],
        &[b"http/1.1"],
    )
    .await
    .expect("handshake");
    // The head and a first part of the body, then nothing: the body never completes.
    let body = messages_body("claude-local-1", "stalled", false);
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\n{}: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        KEY.0,
        KEY.1,
        body.len()
    );
    tls.write_all(head.as_bytes()).await.expect("head");
    tls.write_all(&body.as_bytes()[..10]).await.expect("part");
    tls.flush().await.expect("flush");
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    // The reply comes at the deadline; the bound only stops a hang from hanging the run.
    while !String::from_utf8_lossy(&reply).contains("\r\n\r\n{") || !reply.ends_with(b"}") {
        let n = bounded("408 reply", tls.read(&mut chunk))
            .await
            .expect("read");
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(
        reply.contains(r#""type":"error""#),
        "Anthropic's error shape: {reply}"
    );
    assert!(reply.contains("server.body_read_timeout_secs"), "{reply}");
    assert!(
        !s.mock.requests().iter().any(|r| r.path.contains("chat")),
        "nothing reached the backend"
    );
}

#[tokio::test]
async fn a_stateful_responses_request_answered_locally_is_expanded_and_one_for_the_origin_keeps_its_bytes()
 {
    let s = stack("").await;
    let store_dir = tempfile::tempdir().expect("tempdir");
    let store = glider_context::ResponseStore::start(store_dir.path(), 64).expect("store");
    s.mitm.use_responses(std::sync::Arc::new(store));
    let send = |body: String| {
        let s = &s;
        async move {
            let (mut client, _) =
                client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
            let (response, reply) = client
                .fetch(request(
                    Http::One,
                    "POST",
                    "api.anthropic.com",
                    "/v1/responses",
                    &[
                        ("authorization", "Bearer sk-user"),
                        ("content-type", "application/json"),
                    ],
                    body,
                ))
                .await;
            (response.status().as_u16(), reply)
        }
    };
    let json = |reply: &Bytes| -> serde_json::Value {
        serde_json::from_slice(reply).expect("a JSON reply")
    };
    // A first turn answered locally is stored (store is true unless it says false).
    let first = serde_json::json!({"model": "claude-local-1", "input": "My name is Ada."});
    let (status, reply) = send(first.to_string()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let first_id = json(&reply)["id"].as_str().expect("an id").to_owned();
    // Its continuation reaches the local model with the earlier turn put before it.
    let second = serde_json::json!({"model": "claude-local-1", "previous_response_id": first_id,
        "input": "What is my name?"});
    let (status, reply) = send(second.to_string()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let sent = s
        .mock
        .requests()
        .last()
        .cloned()
        .expect("the local model was asked");
    let texts: Vec<String> = sent.body["messages"]
        .as_array()
        .expect("ollama messages")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        texts.iter().any(|t| t == "My name is Ada.")
            && texts.iter().any(|t| t.contains("echo: My name is Ada."))
            && texts.last().is_some_and(|t| t == "What is my name?"),
        "the chain is expanded: {texts:?}"
    );
    assert!(s.origin.seen().is_empty(), "{:?}", s.origin.seen());
    // A continuation for the cloud goes to the origin as the client sent it.
    let cloud =
        "{\"model\":  \"gpt-5\", \"previous_response_id\":\"resp_at_origin\",\"input\":\"hi\"}";
    let (status, reply) = send(cloud.to_owned()).await;
    assert_eq!(
        (status, &json(&reply)["origin"]),
        (200, &serde_json::json!(true))
    );
    let seen = s.origin.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].body,
        Bytes::from_static(cloud.as_bytes()),
        "bytes unchanged"
    );
    // A local continuation of a response Glider never stored: the origin, which may hold
    // it, answers by default; with origin_on_local_error off, the typed 400.
    s.origin.clear();
    let unknown = serde_json::json!({"model": "claude-local-1",
        "previous_response_id": "resp_never_stored", "input": "hi"});
    let (status, _) = send(unknown.to_string()).await;
    assert_eq!((status, s.origin.seen().len()), (200, 1));
    s.apply("  origin_on_local_error: false\n");
    let (status, reply) = send(unknown.to_string()).await;
    let error = json(&reply);
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "previous_response_id", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("resp_never_stored")),
        "{error}"
    );
}

/// A Responses continuation Glider cannot expand (the chain is the origin's) is decided
/// once on the client's body: one route decision, one record, carried out to the origin
/// with the client's bytes — never a decision made, dropped and made again. Each
/// decision opens a record (its id taken from one counter), so the plain requests sent
/// before and after it have the ids either side of its own.
#[tokio::test]
async fn a_responses_continuation_is_decided_once() {
    let s = stack("").await;
    let store_dir = tempfile::tempdir().expect("tempdir");
    let store = glider_context::ResponseStore::start(store_dir.path(), 64).expect("store");
    s.mitm.use_responses(std::sync::Arc::new(store));
    let mut events = s.engine.bus().subscribe();
    let send = |path: &'static str, body: &'static str| {
        let s = &s;
        async move {
            let (mut client, _) =
                client(s.proxy, "api.anthropic.com", &[s.glider_ca()], Http::One).await;
            let (response, _) = client
                .fetch(request(
                    Http::One,
                    "POST",
                    "api.anthropic.com",
                    path,
                    &[
                        ("authorization", "Bearer sk-user"),
                        ("content-type", "application/json"),
                    ],
                    body,
                ))
                .await;
            response.status().as_u16()
        }
    };
    let plain = "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_eq!(send("/v1/messages", plain).await, 200);
    let before = next_finished(&mut events).await;
    s.origin.clear();
    let continuation =
        "{\"model\":  \"gpt-5\", \"previous_response_id\":\"resp_at_origin\",\"input\":\"hi\"}";
    assert_eq!(send("/v1/responses", continuation).await, 200);
    let seen = s.origin.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].body, Bytes::from_static(continuation.as_bytes()));
    assert_eq!(send("/v1/messages", plain).await, 200);
    // Every record opened between the two plain requests is the continuation's.
    let (mut started, mut finished) = (Vec::new(), Vec::new());
    let after = loop {
        let event = bounded("pipeline event", events.recv())
            .await
            .expect("event");
        match &*event {
            PipelineEvent::RequestStarted(record) if record.front == Dialect::OpenAiResponses => {
                started.push(record.id);
            }
            PipelineEvent::RequestFinished(record) if record.front == Dialect::OpenAiResponses => {
                finished.push(record.clone());
            }
            PipelineEvent::RequestFinished(record) => break record.clone(),
            _ => {}
        }
    };
    assert_eq!(started, [before.id + 1], "one decision announced");
    let [continued] = &finished[..] else {
        panic!("one record for the continuation: {finished:#?}");
    };
    assert_eq!(continued.id, before.id + 1);
    assert_eq!(
        continued.backend.as_deref(),
        Some("origin"),
        "{continued:?}"
    );
    assert_eq!(continued.status, Some(200), "{continued:?}");
    assert!(continued.rule.is_some(), "the decision is on the record");
    assert_eq!(
        after.id,
        before.id + 2,
        "no other record was opened for the continuation"
    );
}
