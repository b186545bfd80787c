//! Turn budgets and the loop guard (contextkit) through the real gateway over loopback,
//! in all four front dialects, streamed and not: past the hard limit, or at the N-th
//! identical tool call, the client gets a well-formed final reply (200, one assistant
//! text, `end_turn`, in its own dialect and stream grammar) naming the limit and the key
//! that raises it, and the backend is not asked; from the soft limit on, the backend
//! receives the wrap-up note.

mod common;

use common::*;
use glider_ngl::{Dialect, StopReason};

/// The episode's request after `calls` tool round trips of the same call (ids c1..).
fn loop_turn(model: &str, calls: usize, stream: bool) -> glider_ngl::Request {
    let mut request = tool_request(model, stream);
    for n in 1..=calls {
        push_weather_round(&mut request, &format!("c{n}"));
    }
    request
}

async fn send(
    gateway: &Gateway,
    front: Dialect,
    session: &str,
    request: &glider_ngl::Request,
) -> Reply {
    post(
        &gateway.base,
        front_path(front),
        wire(front, request).to_string(),
        &[("x-claude-code-session-id", session)],
    )
    .await
}

/// The reply is Glider's final answer: 200, routed to `glider-budget`, one text part
/// naming `key`, `end_turn`, decoded by the front's own codec (stream grammar included).
fn assert_final_reply(reply: &Reply, front: Dialect, stream: bool, key: &str) {
    let case = format!("{front:?} stream={stream}");
    assert_eq!(reply.status, 200, "{case}: {}", reply.text());
    let route = reply.header("x-glider-route");
    assert!(route.contains("glider-budget"), "{case}: route {route}");
    let content_type = reply.header("content-type");
    let streamed_type = content_type.starts_with("text/event-stream")
        || content_type.starts_with("application/x-ndjson");
    assert_eq!(streamed_type, stream, "{case}: content-type {content_type}");
    let response = reply
        .decode(front, stream)
        .unwrap_or_else(|e| panic!("{case}: not a well-formed reply ({e}): {}", reply.text()));
    assert_eq!(response.stop_reason, StopReason::EndTurn, "{case}");
    assert!(tool_calls(&response).is_empty(), "{case}");
    let text = response.plain_text();
    assert!(
        text.contains("Glider stopped this agent loop"),
        "{case}: {text}"
    );
    assert!(text.contains(key), "{case}: names {key}: {text}");
}

#[tokio::test]
async fn past_the_hard_budget_every_dialect_gets_a_final_reply_and_the_soft_note_reaches_the_backend()
 {
    let (mock, yaml) =
        mock_and_config("context: {enabled: false, turn_budget: {soft: 2, hard: 2}}\n").await;
    let gateway = gateway(&yaml).await;
    for front in FRONTS {
        for stream in [false, true] {
            let case = format!("{front:?} stream={stream}");
            let session = format!("budget-{}-{stream}", front.as_str());
            let first = send(&gateway, front, &session, &loop_turn("m-ollama", 0, stream)).await;
            assert_eq!(first.status, 200, "{case}: {}", first.text());
            let before = mock.requests().len();
            let second = send(&gateway, front, &session, &loop_turn("m-ollama", 1, stream)).await;
            assert_eq!(second.status, 200, "{case}: {}", second.text());
            let sent = mock.requests();
            assert_eq!(sent.len(), before + 1, "{case}: turn 2 goes to the backend");
            let body = sent[before].body.to_string();
            assert!(
                body.contains("Turn budget (from Glider): this is model turn 2 of at most 2"),
                "{case}: the wrap-up note reaches the backend: {body}"
            );
            let third = send(&gateway, front, &session, &loop_turn("m-ollama", 2, stream)).await;
            assert_final_reply(&third, front, stream, "context.turn_budget.hard");
            assert_eq!(
                mock.requests().len(),
                before + 1,
                "{case}: the stopped turn is not sent"
            );
        }
    }
    let budget = gateway
        .engine
        .session_budget("claude-code:budget-anthropic-false")
        .expect("the session is kept");
    assert_eq!((budget.episode_spend.turns, budget.stops), (3, 1));
    assert_eq!(
        budget.total.backends.get("ollama").map(|b| b.requests),
        Some(2),
        "the two answered turns count on their backend"
    );
}

#[tokio::test]
async fn the_same_tool_call_repeated_ends_the_loop_in_every_dialect() {
    let (mock, yaml) =
        mock_and_config("context: {enabled: false, loop_guard: {repeats: 3}}\n").await;
    let gateway = gateway(&yaml).await;
    for front in FRONTS {
        for stream in [false, true] {
            let case = format!("{front:?} stream={stream}");
            let session = format!("loop-{}-{stream}", front.as_str());
            for calls in 0..3 {
                let reply = send(
                    &gateway,
                    front,
                    &session,
                    &loop_turn("m-anthropic", calls, stream),
                )
                .await;
                assert_eq!(reply.status, 200, "{case} turn {calls}: {}", reply.text());
                let route = reply.header("x-glider-route");
                assert!(
                    !route.contains("glider-budget"),
                    "{case} turn {calls}: {route}"
                );
            }
            let before = mock.requests().len();
            let stopped = send(
                &gateway,
                front,
                &session,
                &loop_turn("m-anthropic", 3, stream),
            )
            .await;
            assert_final_reply(&stopped, front, stream, "context.loop_guard.repeats");
            assert!(
                stopped.text().contains("`get_weather` was called 3 times"),
                "{case}: {}",
                stopped.text()
            );
            assert_eq!(mock.requests().len(), before, "{case}: not sent");
        }
    }
}

#[tokio::test]
async fn with_the_loop_guard_off_a_repeating_loop_goes_on() {
    let (mock, yaml) =
        mock_and_config("context: {enabled: false, loop_guard: {enabled: false, repeats: 2}}\n")
            .await;
    let gateway = gateway(&yaml).await;
    for calls in 0..5 {
        let reply = send(
            &gateway,
            Dialect::Anthropic,
            "guard-off",
            &loop_turn("m-ollama", calls, false),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    assert_eq!(mock.requests().len(), 5, "every turn reached the backend");
}
