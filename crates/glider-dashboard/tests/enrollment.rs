//! `POST /api/mitm/enrollment`: the PIDs reach transparent mode's hook, an empty or
//! missing array clears them, bad input is a 400, it does nothing (and succeeds) with
//! transparent mode off, and the dashboard's Origin check applies.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use common::{Setup, send, start};
use glider_dashboard::EnrollmentHook;

#[tokio::test]
async fn enrollment_reaches_the_hook_and_clears() {
    let seen: Arc<Mutex<Vec<BTreeSet<u32>>>> = Arc::default();
    let sink = seen.clone();
    let stack = start(Setup {
        customize: Box::new(move |options| {
            options.enrollment = Some(EnrollmentHook(Arc::new(move |pids| {
                sink.lock().expect("lock").push(pids);
            })));
        }),
        ..Setup::default()
    })
    .await;
    let post = |body: &'static str| {
        send(
            stack
                .http
                .post(format!("{}/api/mitm/enrollment", stack.base))
                .header("content-type", "application/json")
                .body(body),
        )
    };
    let set = post(r#"{"pids":[1234,5678,1234]}"#).await;
    assert_eq!(set.status, 200, "{}", set.text);
    assert_eq!(set.json()["pids"], serde_json::json!([1234, 5678]));
    assert_eq!(set.json()["active"], true);
    assert_eq!(post(r#"{"pids":[]}"#).await.status, 200);
    assert_eq!(post("{}").await.status, 200);
    assert_eq!(post("").await.status, 200);
    for bad in [
        r#"{"pids":[-1]}"#,
        r#"{"pids":"1"}"#,
        r#"{"pid":[1]}"#,
        "nope",
    ] {
        let reply = post(bad).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert_eq!(
            reply.json()["error"]["type"],
            "invalid_request",
            "{}",
            reply.text
        );
    }
    let expected: Vec<BTreeSet<u32>> = vec![
        [1234, 5678].into(),
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
    ];
    assert_eq!(*seen.lock().expect("lock"), expected);

    // Another web page cannot enroll.
    let evil = stack
        .post("/api/mitm/enrollment", &[("origin", "http://evil.example")])
        .await;
    assert_eq!(evil.status, 403, "{}", evil.text);
    assert_eq!(seen.lock().expect("lock").len(), 4);
}

#[tokio::test]
async fn without_transparent_mode_it_succeeds_and_does_nothing() {
    let stack = start(Setup::default()).await;
    let reply = send(
        stack
            .http
            .post(format!("{}/api/mitm/enrollment", stack.base))
            .header("content-type", "application/json")
            .body(r#"{"pids":[42]}"#),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["active"], false);
}
