//! Fan-out `shadow` and `all` over loopback (issue 17). Shadow: the client gets the
//! primary's bytes exactly as with fan-out off, a slow shadow copy is still waiting on
//! its first byte when the client's request has finished (ordering, never times), the
//! budget skips a copy past it, a failed copy is counted and never the client's, a
//! copy never spends a cloud key unless `allow_cloud`; `glider serve` stores the
//! samples that `/api/shadow`, `/metrics` and `glider shadow report` add up. All: every
//! candidate answers and is recorded, the client gets the route's choice, and
//! `glider route explain --compare` prints them side by side.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::serve::serve_yaml;
use common::*;
use glider_engine::{PipelineEvent, ShadowOutcome, ShadowSample};
use glider_ngl::Dialect;
use glider_test_support::{Failure, MockConfig, MockVendor};
use serde_json::Value;
use tokio::sync::broadcast::Receiver;

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");
/// Long enough that a shadow this slow is still waiting when the test looks.
const SLOW: Duration = Duration::from_secs(60);
/// Guards a poll against a hang; never a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

/// A local OpenAI-wire model on `local` (bytes forwarded as they come, so they can be
/// compared) and a cloud one on `cloud` behind it, with `fan_out`.
fn config(local: &MockVendor, cloud: &MockVendor, fan_out: &str) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: openai, local: true, base_url: '{}/v1', api_key: k, models: [m-local]}}\n\
         \x20 - {{name: cloud, type: openai, base_url: '{}/v1', api_key: k, models: [m-cloud], default_model: m-cloud}}\n\
         routing: {{classifier: {{enabled: false}}}}\n\
         fan_out: {fan_out}\n",
        local.base_url(),
        cloud.base_url()
    )
}

async fn mock(config: MockConfig) -> MockVendor {
    MockVendor::start(config).await
}

fn slow() -> MockConfig {
    MockConfig {
        first_byte_delay: SLOW,
        ..MockConfig::default()
    }
}

fn replying(text: &str) -> MockConfig {
    MockConfig {
        reply_text: Some(text.to_owned()),
        ..MockConfig::default()
    }
}

fn generations(mock: &MockVendor) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

/// Poll until `mock` has received `count` generation requests.
async fn wait_generations(mock: &MockVendor, count: usize) {
    let deadline = Instant::now() + GUARD;
    while generations(mock) < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} arrived",
            generations(mock)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn ask(gw: &Gateway, stream: bool) -> Reply {
    let body = wire(
        Dialect::OpenAiChat,
        &text_request("m-local", "hello there", stream),
    );
    post_json(&gw.base, front_path(Dialect::OpenAiChat), &body).await
}

/// The next shadow sample on the bus.
async fn next_shadow(events: &mut Receiver<Arc<PipelineEvent>>) -> ShadowSample {
    loop {
        let event = tokio::time::timeout(GUARD, events.recv())
            .await
            .expect("a shadow sample in time")
            .expect("bus open");
        if let PipelineEvent::ShadowSampled(sample) = &*event {
            return sample.clone();
        }
    }
}

/// The reply's bytes with the mock's `"created":<unix seconds>` blanked: the one field
/// that differs between two runs a second apart.
fn without_clock(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    let mut rest = text.as_ref();
    while let Some(at) = rest.find("\"created\":") {
        let (head, tail) = rest.split_at(at + "\"created\":".len());
        out.push_str(head);
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// POST `body` to the gateway's Chat Completions; it must be answered 200.
async fn chat_ok(client: &reqwest::Client, gateway: &str, body: &Value) {
    let reply = client
        .post(format!("{gateway}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("the gateway answered");
    assert_eq!(reply.status(), 200);
}

#[tokio::test]
async fn a_slow_shadow_neither_changes_nor_delays_the_client_and_the_next_copy_is_skipped() {
    // The same reply without fan-out, from a mock in the same state.
    let plain_local = mock(MockConfig::default()).await;
    let plain_cloud = mock(MockConfig::default()).await;
    let plain = gateway(&config(&plain_local, &plain_cloud, "{mode: off}")).await;
    let expected = ask(&plain, true).await;
    assert_eq!(expected.status, 200, "{}", expected.text());

    let local = mock(MockConfig::default()).await;
    let cloud = mock(slow()).await;
    let gw = gateway(&config(
        &local,
        &cloud,
        "{mode: shadow, shadow: {allow_cloud: true, max_concurrent: 1}}",
    ))
    .await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, true).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        without_clock(&reply.body),
        without_clock(&expected.body),
        "the shadow changed the client's bytes"
    );
    let record = next_finished(&mut events).await;
    let fan_out = record.fan_out.expect("the fan-out is recorded");
    assert_eq!(
        (fan_out.mode.as_str(), fan_out.winner.as_str()),
        ("shadow", "local")
    );
    assert_eq!(record.backend.as_deref(), Some("local"));
    // The copy reached the shadow, which has not sent its first byte: the client's
    // request finished while the shadow was still waiting.
    wait_generations(&cloud, 1).await;
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(&*event, PipelineEvent::ShadowSampled(_)),
            "the shadow ended before it answered: {event:?}"
        );
    }
    // The one slot is taken: the next request's copy is skipped, the request is not.
    let second = ask(&gw, false).await;
    assert_eq!(second.status, 200, "{}", second.text());
    let skipped = next_shadow(&mut events).await;
    assert_eq!(skipped.outcome, ShadowOutcome::Skipped);
    assert_eq!(skipped.skipped_by.as_deref(), Some("max_concurrent"));
    assert_eq!(skipped.shadow_backend, "cloud");
    assert_eq!(generations(&cloud), 1, "a skipped copy is never sent");
}

#[tokio::test]
async fn a_shadow_answer_is_compared_a_failed_one_is_counted_and_the_minute_budget_holds() {
    let local = mock(MockConfig::default()).await;
    let cloud = mock(replying("a different answer")).await;
    let gw = gateway(&config(
        &local,
        &cloud,
        "{mode: shadow, shadow: {allow_cloud: true, max_concurrent: 4, max_per_minute: 2}}",
    ))
    .await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, true).await;
    assert_eq!(reply.status, 200);
    let sample = next_shadow(&mut events).await;
    assert_eq!(sample.outcome, ShadowOutcome::Compared, "{sample:?}");
    let primary = sample.primary.as_ref().expect("the primary's answer");
    let shadow = sample.shadow.as_ref().expect("the shadow's answer");
    assert_eq!(primary.backend, "local");
    assert_eq!(shadow.backend, "cloud");
    assert_eq!(primary.text_chars, "echo: hello there".len());
    assert_eq!(shadow.text_chars, "a different answer".len());
    assert_ne!(primary.digest, shadow.digest);
    assert_eq!(primary.stop_reason.as_deref(), Some("end_turn"));
    let agreement = sample.agreement.expect("both answered");
    // Same stop, no tools either side: they agree, in other words.
    assert!(agreement.agrees && !agreement.exact, "{agreement:?}");
    assert_eq!(agreement.text_similarity, 0.0);

    cloud.set_failure(Failure::Status(500));
    let reply = ask(&gw, false).await;
    assert_eq!(reply.status, 200, "a failed shadow is never the client's");
    let failed = next_shadow(&mut events).await;
    assert_eq!(failed.outcome, ShadowOutcome::Failed);
    assert!(failed.shadow.and_then(|s| s.error).is_some());

    // Two copies started this minute: the third is skipped.
    cloud.set_failure(Failure::None);
    assert_eq!(ask(&gw, false).await.status, 200);
    let third = next_shadow(&mut events).await;
    assert_eq!(third.skipped_by.as_deref(), Some("max_per_minute"));
    assert_eq!(generations(&cloud), 2);
}

#[tokio::test]
async fn without_allow_cloud_no_copy_spends_the_cloud_key() {
    let local = mock(MockConfig::default()).await;
    let cloud = mock(MockConfig::default()).await;
    let gw = gateway(&config(&local, &cloud, "{mode: shadow}")).await;
    let mut events = gw.engine.bus().subscribe();
    assert_eq!(ask(&gw, true).await.status, 200);
    let record = next_finished(&mut events).await;
    assert_eq!(record.fan_out.map(|f| f.mode), Some("shadow".to_owned()));
    // The copy's target is chosen before the reply starts: none was, so none is sent.
    assert_eq!(generations(&cloud), 0);
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(&*event, PipelineEvent::ShadowSampled(_)),
            "{event:?}"
        );
    }
}

#[tokio::test]
async fn mode_all_records_every_candidate_and_answers_with_the_routes_choice() {
    let local = mock(MockConfig::default()).await;
    let cloud = mock(replying("echo: hello")).await;
    let gw = gateway(&config(&local, &cloud, "{mode: all}")).await;
    let mut events = gw.engine.bus().subscribe();
    for stream in [true, false] {
        let reply = ask(&gw, stream).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let answer = reply
            .decode(Dialect::OpenAiChat, stream)
            .expect("one answer");
        assert_eq!(
            answer.plain_text(),
            "echo: hello there",
            "the route's choice answers"
        );
        let fan_out = next_finished(&mut events).await.fan_out.expect("fan-out");
        assert_eq!(
            (fan_out.mode.as_str(), fan_out.winner.as_str()),
            ("all", "local")
        );
        let [chosen, other] = &fan_out.answers[..] else {
            panic!("every candidate's answer: {:?}", fan_out.answers);
        };
        assert!(chosen.chosen && chosen.agreement.is_none());
        assert_eq!(chosen.answer.backend, "local");
        assert_eq!(other.answer.backend, "cloud");
        assert!(!other.chosen);
        let agreement = other.agreement.as_ref().expect("compared with the chosen");
        // {echo, hello} of {echo, hello, there}.
        assert_eq!(agreement.text_similarity, 0.667);
        assert!(agreement.agrees && !agreement.exact);
    }
    assert_eq!((generations(&local), generations(&cloud)), (2, 2));

    // The route's choice failing: the next answers, and the failure is recorded too.
    local.set_failure(Failure::Status(500));
    let reply = ask(&gw, false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let record = next_finished(&mut events).await;
    let fan_out = record.fan_out.expect("fan-out");
    assert_eq!(fan_out.winner, "cloud");
    assert!(
        fan_out.answers[0].answer.error.is_some(),
        "{:?}",
        fan_out.answers
    );
    assert!(fan_out.answers[1].chosen);
    assert_eq!(record.fallbacks.len(), 1);
}

fn glider(home: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(GLIDER)
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .args(args)
        .output()
        .expect("glider runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn serve_stores_the_samples_for_the_report_and_every_answer_for_compare() {
    let home = tempfile::tempdir().expect("tempdir");
    let local = mock(MockConfig::default()).await;
    let cloud = mock(replying("echo: hello there")).await;

    let served = serve_yaml(
        home.path(),
        &config(
            &local,
            &cloud,
            "{mode: shadow, shadow: {allow_cloud: true, max_concurrent: 4}}",
        ),
    );
    let client = reqwest::Client::new();
    let body = wire(
        Dialect::OpenAiChat,
        &text_request("m-local", "hello there", false),
    );
    for _ in 0..3 {
        chat_ok(&client, &served.gateway, &body).await;
    }
    let view = served
        .poll_json("/api/shadow", |v| v["summary"][0]["compared"] == 3)
        .await;
    let row = &view["summary"][0];
    assert_eq!(row["shadow_backend"], "cloud");
    assert_eq!(row["primary_backend"], "local");
    assert_eq!(row["agreed"], 3);
    assert_eq!(row["exact"], 3, "the same text from both: {row}");
    assert_eq!(view["recent"].as_array().map(Vec::len), Some(3));
    let metrics = served.metrics().await;
    assert!(
        metrics.contains(
            "glider_shadow_samples_total{shadow=\"cloud\",outcome=\"compared\",skipped_by=\"\"} 3"
        ),
        "{metrics}"
    );
    served.stop();

    let (ok, out, err) = glider(home.path(), &["shadow", "report", "--json"]);
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["samples_read"], 3);
    assert_eq!(report["summary"][0]["agreement"], 1.0);
    let (ok, text, err) = glider(home.path(), &["shadow", "report"]);
    assert!(ok, "{err}");
    assert!(
        text.contains("cloud (m-cloud) shadowing local on route"),
        "{text}"
    );
    assert!(text.contains("agreement 100% (3 of 3)"), "{text}");

    // The same home under `mode: all`: the request's answers side by side.
    let served = serve_yaml(home.path(), &config(&local, &cloud, "{mode: all}"));
    chat_ok(&client, &served.gateway, &body).await;
    let requests = served
        .poll_json("/api/requests", |v| {
            v["requests"]
                .as_array()
                .is_some_and(|r| r.iter().any(|e| e["fan_out"]["mode"] == "all"))
        })
        .await;
    let all = requests["requests"]
        .as_array()
        .and_then(|r| r.iter().find(|e| e["fan_out"]["mode"] == "all"))
        .expect("the all request");
    // A second `glider serve` numbers its records from 1 again; the sequence number
    // goes on from the first one's three requests.
    let (id, seq) = (all["id"].as_u64(), all["seq"].as_u64().expect("its seq"));
    assert_eq!((id, seq), (Some(1), 4));
    served.stop();
    let (ok, text, err) = glider(
        home.path(),
        &["route", "explain", "--compare", &seq.to_string()],
    );
    assert!(ok, "{err}");
    assert!(
        text.contains("mode all: the client got local's answer"),
        "{text}"
    );
    let chosen = text
        .lines()
        .find(|l| l.starts_with("->"))
        .expect("the chosen row");
    assert!(
        chosen.contains("local") && chosen.contains("end_turn"),
        "{text}"
    );
    assert!(
        text.contains("agrees (tools same, stop same, text similarity 1.00, identical)"),
        "{text}"
    );
    assert!(text.starts_with("request 1 (seq 4)"), "{text}");
    // Seq 1 is the first serve's first request (record id 1 too): a shadow one.
    let (ok, _, err) = glider(home.path(), &["route", "explain", "--compare", "1"]);
    assert!(
        !ok && err.contains("request seq 1 fanned out with mode shadow"),
        "{err}"
    );
    let (ok, _, err) = glider(home.path(), &["route", "explain", "--compare", "999999"]);
    assert!(!ok && err.contains("no request with seq 999999"), "{err}");
}

/// `mocks` as local OpenAI-wire backends, in order, each serving `m` (a request for
/// it has them all as candidates, in this order) and `m-<name>` (one for it has that
/// backend alone); no cloud fallback.
fn locals(mocks: &[(&str, &MockVendor)], fan_out: &str, extra: &str) -> String {
    let mut yaml = String::from("backends:\n");
    for (name, mock) in mocks {
        yaml.push_str(&format!(
            "  - {{name: {name}, type: openai, local: true, base_url: '{}/v1', api_key: k, models: [m, m-{name}]}}\n",
            mock.base_url()
        ));
    }
    yaml.push_str(&format!(
        "routing: {{classifier: {{enabled: false}}, cloud_fallback: false}}\nfan_out: {fan_out}\n{extra}"
    ));
    yaml
}

async fn ask_for(gw: &Gateway, model: &str) -> Reply {
    let body = wire(
        Dialect::OpenAiChat,
        &text_request(model, "hello there", false),
    );
    post_json(&gw.base, front_path(Dialect::OpenAiChat), &body).await
}

#[tokio::test]
async fn after_a_fallback_the_copy_goes_past_the_primary_never_to_the_backend_that_failed() {
    let (first, second, third) = (
        mock(MockConfig::default()).await,
        mock(MockConfig::default()).await,
        mock(MockConfig::default()).await,
    );
    first.set_failure(Failure::Status(500));
    let gw = gateway(&locals(
        &[("first", &first), ("second", &second), ("third", &third)],
        "{mode: shadow}",
        "",
    ))
    .await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask_for(&gw, "m").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let sample = next_shadow(&mut events).await;
    assert_eq!(
        (
            sample.primary_backend.as_str(),
            sample.shadow_backend.as_str()
        ),
        ("second", "third"),
        "{sample:?}"
    );
    assert_eq!(sample.outcome, ShadowOutcome::Compared, "{sample:?}");
    assert_eq!(
        (
            generations(&first),
            generations(&second),
            generations(&third)
        ),
        (1, 1, 1),
        "the failed backend got only its own failed attempt"
    );
}

#[tokio::test]
async fn a_local_shadow_model_serving_a_request_gets_no_copy_until_it_is_free() {
    let home = tempfile::tempdir().expect("home");
    let smi = fake_nvidia_smi(home.path(), 100_000, 0);
    let primary = mock(MockConfig::default()).await;
    // Streams one delta, then holds the rest back: a request it serves stays open.
    let busy = mock(MockConfig {
        delta_delay: SLOW,
        ..MockConfig::default()
    })
    .await;
    let gw = gateway(&locals(
        &[("primary", &primary), ("busy", &busy)],
        "{mode: shadow, shadow: {max_concurrent: 4}}",
        &format!(
            "vram: {{monitor: nvidia_smi, nvidia_smi: '{}', headroom_mib: 0}}\n",
            smi.display()
        ),
    ))
    .await;
    let vram = glider_vram::Vram::new(&gw.config.snapshot().vram, Some(home.path()));
    assert!(gw.engine.attach_vram(vram.clone()).is_ok());
    gw.engine.probe_all().await;
    assert!(!vram.gpu().gpus.is_empty(), "the fake GPU is seen");
    let mut events = gw.engine.bus().subscribe();

    // A streamed request for `m` on `busy` alone (named by the model), its first
    // delta read and the rest still to come.
    let body = wire(
        Dialect::OpenAiChat,
        &text_request("busy/m", "hello there", true),
    );
    let open = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.base))
        .json(&body)
        .send()
        .await
        .expect("the stream starts");
    assert_eq!(open.status(), 200);
    assert_eq!(vram.in_flight("busy", "m"), 1);
    assert_eq!(generations(&busy), 1);

    // `primary` answers; its copy would go to `busy`, which is serving a request.
    let reply = ask_for(&gw, "m").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let skipped = loop {
        let sample = next_shadow(&mut events).await;
        if sample.primary_backend == "primary" {
            break sample;
        }
    };
    assert_eq!(skipped.shadow_backend, "busy");
    assert_eq!(skipped.outcome, ShadowOutcome::Skipped);
    assert_eq!(skipped.skipped_by.as_deref(), Some("local_busy"));
    assert_eq!(generations(&busy), 1, "no copy reached the busy model");

    // The stream dropped, its reservation goes; the next copy is sent.
    drop(open);
    let deadline = Instant::now() + GUARD;
    while vram.in_flight("busy", "m") > 0 {
        assert!(
            Instant::now() < deadline,
            "the reservation was never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ask_for(&gw, "m").await.status, 200);
    wait_generations(&busy, 2).await;
}

#[tokio::test]
async fn a_configured_shadow_target_outside_the_route_takes_the_copy_for_its_own_model() {
    let local = mock(MockConfig::default()).await;
    let judge = mock(replying("echo: hello there")).await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: openai, local: true, base_url: '{}/v1', api_key: k, models: [m-local]}}\n\
         \x20 - {{name: judge, type: openai, base_url: '{}/v1', api_key: k, models: [m-judge]}}\n\
         routing: {{classifier: {{enabled: false}}, cloud_fallback: false}}\n\
         fan_out: {{mode: shadow, shadow: {{target: judge, allow_cloud: true}}}}\n",
        local.base_url(),
        judge.base_url()
    );
    let gw = gateway(&yaml).await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask_for(&gw, "m-local").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let record = next_finished(&mut events).await;
    assert_eq!(
        record.backend.as_deref(),
        Some("local"),
        "the route had one candidate"
    );
    let sample = next_shadow(&mut events).await;
    assert_eq!(sample.shadow_backend, "judge");
    assert_eq!(sample.outcome, ShadowOutcome::Compared, "{sample:?}");
    assert!(
        sample.agreement.is_some_and(|a| a.exact),
        "same text both sides"
    );
    let copies: Vec<_> = judge
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].body["model"], "m-judge");

    // A cloud target without allow_cloud, or a name no backend has, is refused at load.
    for (shadow, expected) in [
        ("{target: judge}", "is a cloud backend"),
        (
            "{target: nobody, allow_cloud: true}",
            "no backend is named \"nobody\"",
        ),
    ] {
        let bad = yaml.replace("{target: judge, allow_cloud: true}", shadow);
        let err = glider_config::Config::parse(&bad, "t").expect_err("refused");
        assert!(err.to_string().contains(expected), "{err}");
    }
}
