//! `GET /api/fit`: each local model with the speed the engine measured on its own
//! replies through the gateway, and what fitting gives it (output cap, system text
//! budget) as the fit code computes them — before any reply, after one, and with
//! fitting off.

mod common;

use std::time::Duration;

use common::{Setup, send, start, start_with};
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

/// The window the mock's Ollama says its models run with: `routing.default_local_context`,
/// so the window fitted to is the same before and after the health probe reads it.
const WINDOW: u64 = 32_768;

/// Poll `/api/fit` until `check` holds for the local model's row (20 s at most); the
/// whole answer.
async fn fit_until(stack: &common::Stack, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let fit = stack.get_json("/api/fit").await;
        if fit["models"].get(0).is_some_and(&check) {
            return fit;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {fit}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_local_models_measured_speed_and_the_cap_it_implies_are_listed() {
    // Streamed: the first byte after 300 ms, then 19 more pieces 20 ms apart; 400
    // characters of reply (100 tokens as the mock counts them).
    let mock = MockVendor::start(MockConfig {
        first_byte_delay: Duration::from_millis(300),
        delta_delay: Duration::from_millis(20),
        deltas: 20,
        reply_text: Some("word ".repeat(80)),
        context_window: Some(WINDOW),
        ..MockConfig::default()
    })
    .await;
    // Two seconds of generation: at the mock's speed, less than the backend's default
    // cap (`fit.max_output_tokens`, 4096).
    let stack = start_with(
        mock,
        Setup {
            extra: "fit: {max_reply_secs: 2}\n".into(),
            background: true,
            ..Setup::default()
        },
    )
    .await;

    // Before any reply: no speed, the backend's default cap (under a quarter of the
    // window).
    let before = fit_until(&stack, "the local model", |m| m["window"] == WINDOW).await;
    assert_eq!(before["enabled"], true);
    assert_eq!(before["max_reply_secs"], 2.0);
    assert_eq!(before["max_system_share"], 0.25);
    assert_eq!(
        before["models"],
        json!([{
            "backend": "local", "model": "m-local", "window": WINDOW, "speed": null,
            "output_cap": {"tokens": 4096, "setting": "fit.max_output_tokens"},
            "system_budget_tokens": WINDOW / 4,
        }]),
        "the local model alone, the cloud one is never fitted"
    );

    // One streamed reply through the gateway, its prompt long enough to be a sample.
    let body = json!({
        "model": "m-local", "max_tokens": 200, "stream": true,
        "messages": [{"role": "user", "content": "measure me ".repeat(200)}],
    });
    let reply = send(
        stack
            .http
            .post(format!("{}/v1/messages", stack.gateway))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let after = fit_until(&stack, "a measured speed", |m| m["speed"].is_object()).await;
    let model = &after["models"][0];
    let speed = &model["speed"];
    assert_eq!(speed["samples"], 1, "{model}");
    let generated = speed["generated_per_sec"]
        .as_f64()
        .expect("generation measured");
    let prompt = speed["prompt_per_sec"].as_f64().expect("prompt measured");
    // 100 tokens over at least 380 ms; some 600 tokens (the mock counts a quarter of
    // the body's bytes) before a first byte at 300 ms at the earliest.
    assert!(generated > 0.0 && generated <= 100.0 / 0.38, "{model}");
    assert!(prompt > 0.0 && prompt <= 1000.0 / 0.3, "{model}");
    assert_eq!(
        model["output_cap"],
        json!({
            "tokens": ((generated * 2.0) as u64).max(256),
            "setting": "fit.max_reply_secs at the model's measured speed",
        }),
        "two seconds of generation at the measured rate: {model}"
    );
    assert_eq!(model["system_budget_tokens"], WINDOW / 4);
    // What the endpoint says is what the engine fits to.
    assert_eq!(
        after["models"],
        serde_json::to_value(stack.engine.local_fits()).expect("json"),
    );
    let measured = stack.engine.speed("local", "m-local").expect("measured");
    assert_eq!(measured.generated_per_sec, Some(generated));
}

#[tokio::test]
async fn with_fitting_off_nothing_is_capped_or_cut() {
    let stack = start(Setup {
        extra: "fit: {enabled: false}\n".into(),
        ..Setup::default()
    })
    .await;
    let fit = stack.get_json("/api/fit").await;
    assert_eq!(fit["enabled"], false);
    let model = &fit["models"][0];
    assert_eq!(
        (
            &model["model"],
            &model["output_cap"],
            &model["system_budget_tokens"]
        ),
        (&json!("m-local"), &Value::Null, &Value::Null),
        "{fit}"
    );
}
