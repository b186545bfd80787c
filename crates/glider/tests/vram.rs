//! GPU memory for local models (issue 16), over loopback: a fake `nvidia-smi` on disk
//! reports the GPU, the Ollama mock accounts memory on it and loads with a delay.
//! A cold model is loaded after a planned eviction; a model with a stream open is never
//! evicted (the competing request goes to the next candidate); a cold model whose
//! measured load exceeds `routing.max_cold_wait_secs` is passed over (and loaded in the
//! background); the measurements survive a restart; with no GPU every rule steps aside.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::{MockConfig, MockVendor};
use glider_vram::Vram;
use glider_vram::planner::Plan;

/// A fake `nvidia-smi` printing one GPU of `total_mib` with `used_mib` in use.
fn fake_nvidia_smi(dir: &Path, total_mib: u64, used_mib: u64) -> PathBuf {
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

/// An Ollama mock on a 10000 MiB GPU where `small` and `big` take 6000 MiB each: they
/// do not fit together.
async fn ollama(delta_delay: Duration) -> MockVendor {
    MockVendor::start(MockConfig {
        models: vec!["small".into(), "big".into()],
        gpu_total_mib: Some(10_000),
        model_memory_mib: vec![("small".into(), 6000), ("big".into(), 6000)],
        load_delay: Duration::from_millis(50),
        delta_delay,
        ..MockConfig::default()
    })
    .await
}

/// The local Ollama and a cloud OpenAI backend behind it; `vram` is the `vram:` body.
fn config(local: &MockVendor, cloud: &MockVendor, vram: &str, max_cold_wait: f64) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{}', models: [small, big]}}\n\
         \x20 - {{name: cloud, type: openai, base_url: '{}/v1', api_key: k, models: ['gpt-*'], default_model: gpt-x}}\n\
         routing: {{classifier: {{enabled: false}}, max_cold_wait_secs: {max_cold_wait}}}\n\
         vram: {{{vram}}}\n",
        local.base_url(),
        cloud.base_url()
    )
}

/// Attach VRAM state as `glider serve` does, measurements under `home`, then probe.
async fn attach(gw: &Gateway, home: &Path) -> Arc<Vram> {
    let vram = Vram::new(&gw.config.snapshot().vram, Some(home));
    assert!(gw.engine.attach_vram(vram.clone()).is_ok());
    gw.engine.probe_all().await;
    vram
}

async fn ask(gw: &Gateway, model: &str, stream: bool) -> Reply {
    let body = wire(Dialect::OpenAiChat, &text_request(model, "hello", stream));
    post_json(&gw.base, "/v1/chat/completions", &body).await
}

/// The mock's explicit unloads (`keep_alive: 0`), by model.
fn unloads(mock: &MockVendor) -> Vec<String> {
    mock.requests()
        .iter()
        .filter(|r| r.path == "/api/chat" && r.body["keep_alive"] == 0)
        .filter_map(|r| r.body["model"].as_str().map(str::to_owned))
        .collect()
}

/// A streamed chat request for `model`, its headers read and its body not yet.
async fn open_stream(gw: &Gateway, model: &str) -> reqwest::Response {
    let body = wire(Dialect::OpenAiChat, &text_request(model, "hello", true));
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("stream starts")
}

/// What an earlier run measured: big takes two minutes to load.
fn seed_slow_big(home: &Path) {
    std::fs::create_dir_all(home.join("vram")).expect("dir");
    std::fs::write(
        home.join("vram/measured.json"),
        r#"{"local/big:latest": {"memory_mib": 6000, "load_secs": 120.0, "loads": 1}}"#,
    )
    .expect("seed");
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_cold_model_is_loaded_after_a_planned_eviction_and_the_costs_survive_a_restart() {
    let home = tempfile::tempdir().expect("home");
    let smi = fake_nvidia_smi(home.path(), 10_000, 0);
    let (local, cloud) = (
        ollama(Duration::ZERO).await,
        MockVendor::start(Default::default()).await,
    );
    let vram_yaml = format!(
        "monitor: nvidia_smi, nvidia_smi: '{}', headroom_mib: 0",
        smi.display()
    );
    let gw = gateway(&config(&local, &cloud, &vram_yaml, 30.0)).await;
    let vram = attach(&gw, home.path()).await;
    assert_eq!(vram.gpu().source, "nvidia-smi");
    assert_eq!(vram.gpu().gpus[0].total_mib, 10_000);

    let reply = ask(&gw, "small", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(local.loaded_models(), ["small:latest"]);

    let reply = ask(&gw, "big", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply
            .header("x-glider-route")
            .contains("backend=local; model=big")
    );
    assert_eq!(
        unloads(&local),
        ["small:latest"],
        "Glider evicted the idle model"
    );
    assert_eq!(local.loaded_models(), ["big:latest"]);
    let config = gw.config.snapshot();
    let view = vram.view(&config.vram, &gw.engine.runtime().backends);
    let plan = view.last_plan.expect("a plan ran");
    assert_eq!(plan.model, "big");
    assert!(
        matches!(&plan.plan, Plan::Evict { victims, .. } if victims == &["small:latest"]),
        "{plan:?}"
    );
    assert!(plan.outcome.starts_with("loaded in "), "{}", plan.outcome);

    // A restart reads what this run measured.
    let again = Vram::new(&config.vram, Some(home.path()));
    let view = again.view(&config.vram, &gw.engine.runtime().backends);
    for model in ["small", "big"] {
        let seen = view
            .models
            .iter()
            .find(|m| m.model == model)
            .expect("listed");
        assert_eq!(seen.memory_mib, Some(6000), "{model}");
        assert!(
            seen.load_secs.is_some_and(|s| s >= 0.05),
            "{model}: {seen:?}"
        );
    }
}

#[tokio::test]
async fn a_model_with_a_stream_open_is_never_evicted_and_the_competing_request_goes_on() {
    let home = tempfile::tempdir().expect("home");
    let smi = fake_nvidia_smi(home.path(), 10_000, 0);
    let local = ollama(Duration::from_millis(400)).await;
    let cloud = MockVendor::start(Default::default()).await;
    let vram_yaml = format!("nvidia_smi: '{}', headroom_mib: 0", smi.display());
    let gw = gateway(&config(&local, &cloud, &vram_yaml, 30.0)).await;
    let vram = attach(&gw, home.path()).await;
    // Both measured once: big, then small (big evicted).
    for model in ["big", "small"] {
        assert_eq!(ask(&gw, model, false).await.status, 200);
    }
    assert_eq!(local.loaded_models(), ["small:latest"]);

    // A stream on small, held open.
    let response = open_stream(&gw, "small").await;
    assert_eq!(response.status(), 200);
    until("the stream's reservation", || {
        vram.in_flight("local", "small") == 1
    })
    .await;

    let competing = ask(&gw, "big", false).await;
    assert_eq!(competing.status, 200, "{}", competing.text());
    let route = competing.header("x-glider-route");
    assert!(route.contains("backend=cloud"), "{route}");
    assert!(
        route.contains("local model big is cold, cannot fit"),
        "{route}"
    );
    assert!(route.contains("small:latest (in use)"), "{route}");
    assert!(route.contains("passed over for cloud"), "{route}");
    assert!(
        unloads(&local).len() == 1,
        "only the planned eviction of big earlier"
    );
    assert!(local.loaded_models().contains(&"small:latest".to_owned()));

    let text = response.text().await.expect("the stream completes");
    assert!(text.contains("[DONE]"), "{text}");
    until("the release at the stream's end", || {
        vram.in_flight("local", "small") == 0
    })
    .await;

    // Idle now, small may go.
    let reply = ask(&gw, "big", false).await;
    assert!(
        reply.header("x-glider-route").contains("backend=local"),
        "{}",
        reply.header("x-glider-route")
    );
    assert_eq!(local.loaded_models(), ["big:latest"]);
}

#[tokio::test]
async fn a_dropped_stream_releases_its_reservation() {
    let home = tempfile::tempdir().expect("home");
    let smi = fake_nvidia_smi(home.path(), 10_000, 0);
    // Four deltas 2 s apart: the stream would end by itself only after the wait below.
    let local = ollama(Duration::from_secs(2)).await;
    let cloud = MockVendor::start(Default::default()).await;
    let vram_yaml = format!("nvidia_smi: '{}'", smi.display());
    let gw = gateway(&config(&local, &cloud, &vram_yaml, 30.0)).await;
    let vram = attach(&gw, home.path()).await;
    let response = open_stream(&gw, "small").await;
    until("the reservation", || vram.in_flight("local", "small") == 1).await;
    drop(response);
    until("the release on disconnect", || {
        vram.in_flight("local", "small") == 0
    })
    .await;
}

#[tokio::test]
async fn a_cold_model_whose_measured_load_is_too_slow_is_passed_over_and_loaded_in_the_background()
{
    let home = tempfile::tempdir().expect("home");
    let smi = fake_nvidia_smi(home.path(), 10_000, 0);
    seed_slow_big(home.path());
    let (local, cloud) = (
        ollama(Duration::ZERO).await,
        MockVendor::start(Default::default()).await,
    );
    let vram_yaml = format!("nvidia_smi: '{}'", smi.display());
    let gw = gateway(&config(&local, &cloud, &vram_yaml, 30.0)).await;
    attach(&gw, home.path()).await;

    let body = wire(Dialect::OpenAiChat, &text_request("big", "hello", false)).to_string();
    let explained = gw
        .engine
        .explain(
            Dialect::OpenAiChat,
            body.as_bytes(),
            &http::HeaderMap::new(),
        )
        .expect("explains");
    let why = "local model big is cold, planned load ~120.0s (measured) exceeds routing.max_cold_wait_secs 30s";
    assert!(explained.reason.contains(why), "{}", explained.reason);
    assert_eq!(explained.candidates[0].backend.name(), "cloud");

    let reply = ask(&gw, "big", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let route = reply.header("x-glider-route");
    assert!(
        route.contains("backend=cloud") && route.contains(why),
        "{route}"
    );
    // vram.background_load (on by default): the next request finds it warm.
    until("the background load", || {
        local.loaded_models() == ["big:latest"]
    })
    .await;
}

#[tokio::test]
async fn without_a_gpu_every_vram_rule_steps_aside() {
    let home = tempfile::tempdir().expect("home");
    seed_slow_big(home.path());
    let (local, cloud) = (
        ollama(Duration::ZERO).await,
        MockVendor::start(Default::default()).await,
    );
    let gw = gateway(&config(
        &local,
        &cloud,
        "nvidia_smi: /nonexistent/nvidia-smi",
        30.0,
    ))
    .await;
    // The no-GPU monitor itself, so a machine with NVIDIA's library and a GPU tests
    // this path too.
    let vram = Vram::with_monitor(
        Box::new(glider_vram::monitor::NoGpu),
        "test: no GPU".into(),
        Some(home.path()),
    );
    assert!(gw.engine.attach_vram(vram.clone()).is_ok());
    gw.engine.probe_all().await;
    assert_eq!(vram.gpu().source, "none");
    assert!(vram.gpu().gpus.is_empty());
    let reply = ask(&gw, "big", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let route = reply.header("x-glider-route");
    assert!(
        route.contains("backend=local") && !route.contains("cold"),
        "{route}"
    );
    assert!(unloads(&local).is_empty());
    let view = vram.view(&gw.config.snapshot().vram, &gw.engine.runtime().backends);
    assert!(view.last_plan.is_none(), "{:?}", view.last_plan);
}
