//! `/api/context/*` over real HTTP: a request through the gateway becomes a session
//! with its episode; another site's page can neither read nor forget it; forgetting
//! deletes it; `/metrics` counts the events written; with the log off the routes say so.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Setup, send, start};
use glider_config::schema::ContextConfig;
use glider_context::{Context, Reader};
use glider_dashboard::ContextSurface;
use serde_json::{Value, json};

async fn with_context() -> (common::Stack, Arc<Context>, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("tempdir");
    let context = Context::start(home.path(), &ContextConfig::default())
        .expect("starts")
        .expect("enabled by default");
    let surface = ContextSurface {
        reader: Reader::new(glider_context::dir(home.path())),
        counters: context.log().counters().clone(),
    };
    let stack = start(Setup {
        home: Some(home.path().to_path_buf()),
        customize: Box::new(move |options| options.context = Some(surface)),
        ..Setup::default()
    })
    .await;
    assert!(stack.engine.attach_context(context.clone()).is_ok());
    (stack, context, home)
}

/// Poll `/api/context/sessions` until one session has its request and reply.
async fn wait_session(stack: &common::Stack, context: &Context) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        context.log().flush();
        let list = stack.get_json("/api/context/sessions").await;
        if list["sessions"][0]["events"].as_u64() == Some(2) {
            return list["sessions"][0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session yet: {list}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_gateway_request_becomes_a_session_that_can_be_read_and_forgotten() {
    let (stack, context, _home) = with_context().await;
    assert_eq!(stack.ask("m-local", false).await.status, 200);
    let row = wait_session(&stack, &context).await;
    let id = row["session"].as_str().expect("id").to_owned();
    assert!(
        id.starts_with("prefix:"),
        "no session header: the sticky prefix key ({id})"
    );
    assert_eq!(row["requests"], 1);

    let path = format!("/api/context/sessions/{id}");
    let view = stack.get_json(&path).await;
    let episodes = view["graph"]["episodes"].as_array().expect("episodes");
    assert_eq!(episodes.len(), 1);
    assert_eq!(episodes[0]["goal"], "say something short");
    let step = &episodes[0]["steps"][0];
    assert_eq!(
        (
            step["backend"].as_str(),
            step["local"].as_bool(),
            step["status"].as_u64()
        ),
        (Some("local"), Some(true), Some(200))
    );
    assert_eq!(view["graph"]["models"][0]["backend"], "local");
    // Its budget: what the log counts, and the engine's in-memory spend beside it.
    let budget = &view["budget"];
    assert_eq!(
        (
            &budget["requests"],
            &budget["episode_requests"],
            &budget["local_share"],
            &budget["stops"]
        ),
        (&json!(1), &json!(1), &json!(1.0), &json!(0)),
        "{budget}"
    );
    assert_eq!(budget["episode"], episodes[0]["family"], "{budget}");
    let live = &budget["live"];
    assert_eq!(
        (
            &live["session"],
            &live["total"]["turns"],
            &live["episode_spend"]["turns"],
            &live["local_share"]
        ),
        (&json!(id), &json!(1), &json!(1), &json!(1.0)),
        "{budget}"
    );

    // Another site's page: neither reads nor forgets.
    let url = format!("{}{path}", stack.base);
    let read = send(stack.http.get(&url).header("origin", "http://evil.example")).await;
    assert_eq!(read.status, 403, "{}", read.text);
    let forget = send(
        stack
            .http
            .delete(&url)
            .header("origin", "http://evil.example"),
    )
    .await;
    assert_eq!(forget.status, 403, "{}", forget.text);
    assert_eq!(stack.get(&path).await.status, 200, "still there");

    let metrics = stack.get("/metrics").await.text;
    let written = metrics
        .lines()
        .find_map(|l| l.strip_prefix("glider_context_events_written_total "))
        .expect("the counter is served");
    assert!(written.parse::<u64>().expect("a number") >= 2, "{written}");
    assert!(metrics.contains("glider_context_gaps_total 0"), "{metrics}");

    let forgotten = send(stack.http.delete(&url).header("origin", &stack.base)).await;
    assert_eq!(forgotten.status, 200, "{}", forgotten.text);
    assert_eq!(forgotten.json()["deleted"], 2);
    assert_eq!(stack.get(&path).await.status, 404);
    assert_eq!(
        send(stack.http.delete(&url)).await.status,
        404,
        "nothing left to forget"
    );
    assert_eq!(
        stack.get_json("/api/context/sessions").await["sessions"],
        Value::Array(vec![])
    );
}

#[tokio::test]
async fn with_the_log_off_the_routes_say_so_and_no_file_is_made() {
    let home = tempfile::tempdir().expect("tempdir");
    let off = ContextConfig {
        enabled: false,
        ..ContextConfig::default()
    };
    assert!(
        Context::start(home.path(), &off)
            .expect("no error")
            .is_none()
    );
    assert!(
        !glider_context::dir(home.path()).exists(),
        "no context directory"
    );
    let stack = start(Setup::default()).await;
    let reply = stack.get("/api/context/sessions").await;
    assert_eq!(reply.status, 404);
    assert!(
        reply.text.contains("context.enabled: false"),
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn a_socket_is_told_when_a_session_changes_and_when_it_is_forgotten() {
    let (stack, _context, _home) = with_context().await;
    let mut socket = stack.ws().await;
    assert_eq!(stack.ask("m-local", false).await.status, 200);
    let event = common::wait_event(&mut socket, |e| {
        e["type"] == "session" && e["summary"]["events"].as_u64() == Some(2)
    })
    .await;
    let id = event["session"].as_str().expect("session id").to_owned();
    assert!(id.starts_with("prefix:"), "{event}");
    assert_eq!(event["change"], "updated");
    assert_eq!(event["summary"]["requests"], 1);
    assert!(
        !event.to_string().contains("say something short"),
        "no prompt text on /ws: {event}"
    );

    let url = format!("{}/api/context/sessions/{id}", stack.base);
    let forgotten = send(stack.http.delete(&url)).await;
    assert_eq!(forgotten.status, 200, "{}", forgotten.text);
    let gone = common::wait_event(&mut socket, |e| {
        e["type"] == "session" && e["change"] == "forgotten"
    })
    .await;
    assert_eq!(gone["session"], id.as_str());
    assert_eq!(gone["summary"], Value::Null);
}
