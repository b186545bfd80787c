//! `/ws`: a request's `request_started` and `request_finished` arrive live, and a client
//! that never reads does not slow requests: it loses the oldest events and is told.

mod common;

use common::{Setup, next_event, start, wait_event};

#[tokio::test]
async fn a_socket_sees_a_request_start_and_finish() {
    let stack = start(Setup::default()).await;
    let mut socket = stack.ws().await;
    assert_eq!(stack.ask("m-local", true).await.status, 200);
    let started = wait_event(&mut socket, |e| e["type"] == "request_started").await;
    let request = &started["request"];
    assert_eq!(request["model_requested"], "m-local");
    assert_eq!(
        request["backend"],
        serde_json::Value::Null,
        "not chosen yet at start"
    );
    assert_eq!(request["rule"], "model");
    assert_eq!(request["front"], "anthropic");
    let finished = wait_event(&mut socket, |e| e["type"] == "request_finished").await;
    let done = &finished["request"];
    assert_eq!(done["id"], request["id"]);
    assert_eq!(done["seq"], 1);
    assert_eq!(done["backend"], "local");
    assert_eq!(done["model_used"], "m-local");
    assert_eq!(done["status"], 200);
    assert!(done["ttft_ms"].is_u64() && done["total_ms"].is_u64());
    assert!(done["usage"]["output_tokens"].as_u64() > Some(0));
    let status = stack.get_json("/api/status").await;
    assert_eq!(status["events"]["ws_clients"], 1);
}

#[tokio::test]
async fn a_socket_that_never_reads_does_not_slow_requests() {
    const REQUESTS: usize = 200;
    let stack = start(Setup {
        customize: Box::new(|o| o.ws_queue = 16),
        send_buffer: Some(4096),
        ..Setup::default()
    })
    .await;
    // A client with a small receive window that reads the hello, then nothing.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let addr = stack
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("addr");
    let stream = socket.connect(addr).await.expect("connect");
    let (mut slow, _) = tokio_tungstenite::client_async(stack.ws_url(""), stream)
        .await
        .expect("handshake");
    assert_eq!(next_event(&mut slow).await["type"], "hello");

    // Every request completes while the socket is stalled (8 at a time).
    let mut statuses = Vec::new();
    for _ in 0..REQUESTS / 8 {
        let batch =
            futures_util::future::join_all((0..8).map(|_| stack.ask("m-local", false))).await;
        statuses.extend(batch.into_iter().map(|r| r.status));
    }
    assert_eq!(statuses.len(), REQUESTS);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let status = stack.wait_finished(REQUESTS as u64).await;
    assert_eq!(status["events"]["bus_lagged"], 0, "the collector kept up");

    // Now read: the socket was told what it lost, and got far fewer events than were sent.
    let mut events = 0;
    let dropped = loop {
        let event = next_event(&mut slow).await;
        events += 1;
        if event["type"] == "dropped" {
            break event;
        }
    };
    assert_eq!(dropped["source"], "ws");
    let count = dropped["count"].as_u64().expect("count");
    assert!(count > 0, "{dropped}");
    assert!(
        events < 2 * REQUESTS,
        "{events} events arrived before the drop notice"
    );
    let status = stack.get_json("/api/status").await;
    assert!(
        status["events"]["ws_dropped"].as_u64() >= Some(count),
        "{status}"
    );
    let metrics = stack.get("/metrics").await.text;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("glider_dashboard_events_dropped_total{source=\"websocket\"}")),
        "{metrics}"
    );
    // And the request list has them all.
    let page = stack.get_json("/api/requests?limit=500").await;
    assert_eq!(page["requests"].as_array().map(Vec::len), Some(REQUESTS));
}
