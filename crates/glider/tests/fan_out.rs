//! Fan-out over loopback (issue 17): with `fan_out.mode: hedge`, a local model that
//! sends no first byte by the delay also starts the cloud candidate, the first byte
//! wins and the loser's upstream stream is closed (counted at the mock); a fast local
//! model, or one whose first byte came before the delay, is never hedged; the client
//! gets exactly one well-formed stream in each front dialect. `mode: first` keeps the
//! first complete answer. Counts, never times.

mod common;

use std::time::Duration;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::{Failure, MockConfig, MockVendor};

/// Long enough that a local reply this slow can only lose.
const SLOW: Duration = Duration::from_secs(60);

/// A local Ollama model on `local` and a cloud OpenAI one on `cloud`, with `fan_out`.
fn config(local: &MockVendor, cloud: &MockVendor, fan_out: &str) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{}', models: [m-local]}}\n\
         \x20 - {{name: cloud, type: openai, base_url: '{}/v1', api_key: k, models: [m-cloud], default_model: m-cloud}}\n\
         routing: {{classifier: {{enabled: false}}}}\n\
         fan_out: {fan_out}\n",
        local.base_url(),
        cloud.base_url()
    )
}

async fn mock_with_first_byte_delay(delay: Duration) -> MockVendor {
    MockVendor::start(MockConfig {
        first_byte_delay: delay,
        ..MockConfig::default()
    })
    .await
}

/// Generation requests the mock received.
fn generations(mock: &MockVendor) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

async fn ask(gw: &Gateway, front: Dialect, stream: bool) -> Reply {
    let body = wire(front, &text_request("m-local", "hello there", stream));
    post_json(&gw.base, front_path(front), &body).await
}

#[tokio::test]
async fn a_fast_local_model_is_answered_alone() {
    let local = mock_with_first_byte_delay(Duration::ZERO).await;
    let cloud = mock_with_first_byte_delay(Duration::ZERO).await;
    let gw = gateway(&config(&local, &cloud, "{mode: hedge, delay_ms: 30000}")).await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, Dialect::OpenAiChat, true).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(reply.header("x-glider-route").contains("backend=local"));
    let record = next_finished(&mut events).await;
    let fan_out = record.fan_out.expect("the hedge ran");
    assert!(!fan_out.fired, "{fan_out:?}");
    assert_eq!(fan_out.winner, "local");
    assert!(fan_out.cancelled.is_empty(), "{fan_out:?}");
    assert_eq!(generations(&local), 1);
    assert_eq!(generations(&cloud), 0, "a fast local model is never hedged");
}

#[tokio::test]
async fn a_slow_local_model_is_hedged_the_cloud_wins_and_the_local_stream_is_closed() {
    let local = mock_with_first_byte_delay(SLOW).await;
    let cloud = mock_with_first_byte_delay(Duration::ZERO).await;
    let gw = gateway(&config(&local, &cloud, "{mode: hedge, delay_ms: 50}")).await;
    let mut events = gw.engine.bus().subscribe();
    for (asked, front) in FRONTS.into_iter().enumerate() {
        let reply = ask(&gw, front, true).await;
        assert_eq!(reply.status, 200, "{front:?}: {}", reply.text());
        assert!(
            reply.header("x-glider-route").contains("backend=cloud"),
            "{front:?}: {}",
            reply.header("x-glider-route")
        );
        // Exactly one well-formed stream in the client's dialect: it decodes whole,
        // with one end, and carries the cloud's answer only.
        let answer = reply
            .decode(front, true)
            .unwrap_or_else(|e| panic!("{front:?}: not one well-formed stream: {e:?}"));
        assert_eq!(answer.plain_text(), "echo: hello there", "{front:?}");
        let record = next_finished(&mut events).await;
        let fan_out = record.fan_out.expect("the hedge ran");
        assert!(fan_out.fired, "{front:?}: {fan_out:?}");
        assert_eq!(fan_out.winner, "cloud", "{front:?}");
        assert_eq!(fan_out.cancelled, vec!["local".to_owned()], "{front:?}");
        assert_eq!(fan_out.delay_ms, Some(50));
        assert_eq!(record.backend.as_deref(), Some("cloud"));
        // One request to each per client request; the local one's stream is closed.
        assert_eq!(generations(&local), asked + 1, "{front:?}");
        assert_eq!(generations(&cloud), asked + 1, "{front:?}");
        assert!(
            local.wait_open_streams(0, Duration::from_secs(10)).await,
            "{front:?}: the cancelled local stream is still open ({} open)",
            local.open_streams()
        );
    }
}

#[tokio::test]
async fn a_first_byte_before_the_delay_is_never_hedged() {
    // The first byte comes at once (the delay leaves it a second on loopback); the
    // rest comes well after the delay has passed.
    let local = MockVendor::start(MockConfig {
        deltas: 4,
        delta_delay: Duration::from_millis(600),
        ..MockConfig::default()
    })
    .await;
    let cloud = mock_with_first_byte_delay(Duration::ZERO).await;
    let gw = gateway(&config(&local, &cloud, "{mode: hedge, delay_ms: 1000}")).await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, Dialect::Anthropic, true).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.decode(Dialect::Anthropic, true).expect("one stream");
    assert_eq!(answer.plain_text(), "echo: hello there");
    let fan_out = next_finished(&mut events)
        .await
        .fan_out
        .expect("the hedge ran");
    assert!(!fan_out.fired, "{fan_out:?}");
    assert_eq!(fan_out.winner, "local");
    assert_eq!(generations(&cloud), 0, "no hedge after the first byte");
}

#[tokio::test]
async fn a_local_failure_before_the_delay_goes_on_to_the_next_candidate() {
    let local = mock_with_first_byte_delay(Duration::ZERO).await;
    local.set_failure(Failure::Status(500));
    let cloud = mock_with_first_byte_delay(Duration::ZERO).await;
    let gw = gateway(&config(&local, &cloud, "{mode: hedge, delay_ms: 30000}")).await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, Dialect::OpenAiResponses, false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let record = next_finished(&mut events).await;
    let fan_out = record.fan_out.expect("the hedge ran");
    assert!(!fan_out.fired, "a failure is no hedge: {fan_out:?}");
    assert_eq!(fan_out.winner, "cloud");
    assert_eq!(record.fallbacks.len(), 1, "{:?}", record.fallbacks);
}

#[tokio::test]
async fn a_route_can_turn_the_hedge_off() {
    let local = mock_with_first_byte_delay(Duration::from_millis(200)).await;
    let cloud = mock_with_first_byte_delay(Duration::ZERO).await;
    let gw = gateway(&config(
        &local,
        &cloud,
        "{mode: hedge, delay_ms: 10, routes: {model: {mode: off}}}",
    ))
    .await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, Dialect::Ollama, true).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(next_finished(&mut events).await.fan_out.is_none());
    assert_eq!(generations(&cloud), 0);
}

#[tokio::test]
async fn mode_first_keeps_the_first_complete_answer_and_closes_the_others() {
    let local = mock_with_first_byte_delay(SLOW).await;
    let cloud = mock_with_first_byte_delay(Duration::ZERO).await;
    let gw = gateway(&config(&local, &cloud, "{mode: first}")).await;
    let mut events = gw.engine.bus().subscribe();
    for stream in [true, false] {
        let reply = ask(&gw, Dialect::OpenAiChat, stream).await;
        assert_eq!(reply.status, 200, "stream={stream}: {}", reply.text());
        let answer = reply
            .decode(Dialect::OpenAiChat, stream)
            .expect("one answer");
        assert_eq!(answer.plain_text(), "echo: hello there");
        let fan_out = next_finished(&mut events)
            .await
            .fan_out
            .expect("the fan-out ran");
        assert_eq!(fan_out.mode, "first");
        assert_eq!(fan_out.winner, "cloud");
        assert_eq!(fan_out.cancelled, vec!["local".to_owned()]);
    }
    assert_eq!(generations(&local), 2, "both started at once");
    assert!(
        local.wait_open_streams(0, Duration::from_secs(10)).await,
        "the cancelled local stream is still open"
    );
}
