//! The hot-swap record (issue 17) on a real `glider serve`: a config reload that would
//! break the backends module (a pool replica that is not HTTP) keeps the old module,
//! requests are still answered by the old backend, and `/api/hotswap` records the
//! failure with why; the next good reload is recorded as a swap that took.

mod common;

use common::serve::serve_yaml;
use glider_test_support::MockVendor;
use serde_json::{Value, json};

fn config(base_url: &str, replicas: &str) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: pool, type: vllm, base_url: '{base_url}/v1', replicas: [{replicas}], models: [m-vllm]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    )
}

async fn ask(gateway: &str) -> u16 {
    ask_model(gateway, "m-vllm").await
}

/// The generation requests `mock` served (health probes aside).
fn chats(mock: &MockVendor) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count()
}

async fn reload(dashboard: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{dashboard}/api/config/reload"))
        .send()
        .await
        .expect("the dashboard answers")
        .json()
        .await
        .expect("json")
}

fn swaps_of<'a>(view: &'a Value, module: &str) -> Vec<&'a Value> {
    view["swaps"]
        .as_array()
        .map(|swaps| swaps.iter().filter(|s| s["module"] == module).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_reload_that_breaks_a_module_keeps_the_old_one_and_is_recorded() {
    let old = MockVendor::start(Default::default()).await;
    let new = MockVendor::start(Default::default()).await;
    let home = tempfile::tempdir().expect("home");
    let served = serve_yaml(home.path(), &config(&old.base_url(), ""));
    assert_eq!(ask(&served.gateway).await, 200);

    let path = home.path().join("glider.yaml");
    std::fs::write(&path, config(&new.base_url(), "'ftp://not-http'")).expect("written");
    let outcome = reload(&served.dashboard).await;
    assert_eq!(outcome["outcome"], "rejected", "{outcome}");
    let view = served
        .poll_json("/api/hotswap", |v| !swaps_of(v, "config").is_empty())
        .await;
    let failed = swaps_of(&view, "config")[0];
    assert_eq!(failed["outcome"], "failed", "{view}");
    assert!(
        failed["why"]
            .as_str()
            .is_some_and(|why| why.contains("replicas[0] must start with http")),
        "{view}"
    );
    assert!(failed["at_ms"].as_u64().is_some_and(|t| t > 0), "{view}");
    assert!(
        view["modules"].as_array().is_some_and(|m| !m.is_empty()),
        "{view}"
    );

    // Still the old backend.
    let before = chats(&old);
    assert_eq!(ask(&served.gateway).await, 200);
    // (Glider's own summarizer may ask the local model too: at least one more.)
    assert!(chats(&old) > before);
    assert_eq!(chats(&new), 0, "the broken config reached no one");

    // A good config swaps in, recorded as the module's next version.
    std::fs::write(&path, config(&new.base_url(), "")).expect("written");
    let outcome = reload(&served.dashboard).await;
    assert_eq!(outcome["outcome"], "applied", "{outcome}");
    let view = served
        .poll_json("/api/hotswap", |v| {
            v["swaps"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["module"] != "config" && s["outcome"] == "ok")
            })
        })
        .await;
    let took = view["swaps"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .find(|s| s["module"] != "config" && s["outcome"] == "ok")
        })
        .expect("a swap that took");
    assert_eq!(took["version"], 2, "{view}");
    assert_eq!(ask(&served.gateway).await, 200);
    assert!(chats(&new) >= 1, "the new backend answers now");
    served.stop();
}

/// A local backend on `local`, a cloud one (`judge`) with the `judge_header` value,
/// optionally a third (`spare`), the classifier's `local_threshold` and `fan_out`.
fn modules_config(
    local: &str,
    judge_header: &str,
    spare: bool,
    threshold: f64,
    fan_out: &str,
) -> String {
    let spare = if spare {
        "  - {name: spare, type: openai, base_url: 'http://127.0.0.1:9/v1', api_key: k, models: [m-spare], headers: {x-team: '${GLIDER_TEST_NEVER_SET}'}}\n"
    } else {
        ""
    };
    format!(
        "backends:\n\
         \x20 - {{name: local, type: openai, local: true, base_url: '{local}/v1', api_key: k, models: [m]}}\n\
         \x20 - {{name: judge, type: openai, base_url: 'http://127.0.0.1:9/v1', api_key: k, models: [m-judge], headers: {{x-team: '{judge_header}'}}}}\n\
         {spare}\
         routing: {{cloud_fallback: false, classifier: {{enabled: false, local_threshold: {threshold}}}}}\n\
         fan_out: {fan_out}\n"
    )
}

/// Write `yaml` as the config, reload it, and wait for the runtime's `version`: the
/// `/api/hotswap` view after that reload.
async fn reload_to(
    served: &common::serve::Served,
    home: &std::path::Path,
    yaml: String,
    version: u64,
) -> Value {
    let written_at = glider_engine::unix_ms();
    std::fs::write(home.join("glider.yaml"), yaml).expect("written");
    assert_eq!(reload(&served.dashboard).await["outcome"], "applied");
    // The file watcher may apply the same write too (before or after the explicit
    // reload, each a runtime swap): wait for this write's own swap, then for the
    // runtime to have reached at least `version`.
    served
        .poll_json("/api/hotswap", |v| {
            let applied = v["swaps"].as_array().is_some_and(|swaps| {
                swaps
                    .iter()
                    .any(|s| s["module"] == "runtime" && s["at_ms"].as_u64() >= Some(written_at))
            });
            applied && v["versions"]["runtime"].as_u64() >= Some(version)
        })
        .await
}

/// The module versions are `expected`: exactly for `backends`, `classifier` and
/// `fan_out` (they swap only when their part changed), and at least for `runtime`
/// (a write the file watcher also saw is applied twice).
fn assert_versions(view: &Value, expected: [u64; 4]) {
    let got = versions(view);
    assert_eq!(got[..3], expected[..3], "{view}");
    assert!(
        got[3] >= expected[3],
        "runtime {} < {}: {view}",
        got[3],
        expected[3]
    );
}

/// The versions of `backends`, `classifier`, `fan_out` and `runtime`, in that order.
fn versions(view: &Value) -> [u64; 4] {
    ["backends", "classifier", "fan_out", "runtime"]
        .map(|m| view["versions"][m].as_u64().unwrap_or(0))
}

#[tokio::test]
async fn each_module_swaps_on_its_own_a_broken_one_keeps_its_state_and_versions_count_per_module() {
    let local = MockVendor::start(Default::default()).await;
    let home = tempfile::tempdir().expect("home");
    let served = serve_yaml(
        home.path(),
        &modules_config(&local.base_url(), "a", false, 2.0, "{mode: off}"),
    );
    let view = served
        .poll_json("/api/hotswap", |v| v["versions"]["runtime"] == 1)
        .await;
    assert_eq!(versions(&view), [1, 1, 1, 1]);

    // The judge's header names a variable that is not set: the backends module keeps
    // its set (the judge as it was); the classifier and the fan-out swap.
    let view = reload_to(
        &served,
        home.path(),
        modules_config(
            &local.base_url(),
            "${GLIDER_TEST_NEVER_SET}",
            false,
            3.0,
            "{mode: hedge}",
        ),
        2,
    )
    .await;
    assert_versions(&view, [1, 2, 2, 2]);
    let failed = swaps_of(&view, "backends");
    assert_eq!(failed.len(), 1, "{view}");
    assert_eq!(failed[0]["outcome"], "failed");
    assert!(
        failed[0]["why"].as_str().is_some_and(
            |why| why.contains("backend judge") && why.contains("GLIDER_TEST_NEVER_SET")
        ),
        "{view}"
    );
    let backends: Value = reqwest::get(format!("{}/api/backends", served.dashboard))
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    let judge = backends["backends"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["backend"] == "judge"))
        .expect("the judge is listed");
    assert!(
        judge["unavailable"].is_null(),
        "the judge kept its working state: {judge}"
    );
    assert_eq!(ask_model(&served.gateway, "m").await, 200);

    // A new backend that cannot be built, and a shadow target naming it: the backends
    // module keeps its set again, so the fan-out's target is not in use and it keeps
    // its state too; the classifier, unchanged, is not swapped at all.
    let view = reload_to(
        &served,
        home.path(),
        modules_config(
            &local.base_url(),
            "${GLIDER_TEST_NEVER_SET}",
            true,
            3.0,
            "{mode: shadow, shadow: {target: spare, allow_cloud: true}}",
        ),
        3,
    )
    .await;
    assert_versions(&view, [1, 2, 2, 3]);
    let fan_out = swaps_of(&view, "fan_out");
    let last = fan_out.last().expect("the fan-out's failed swap");
    assert_eq!(last["outcome"], "failed", "{view}");
    assert!(
        last["why"]
            .as_str()
            .is_some_and(|w| w.contains("\"spare\" is not a backend in use")),
        "{view}"
    );
    assert_eq!(swaps_of(&view, "classifier").len(), 1, "{view}");

    // Fixed: every module that changed swaps in at its next version.
    let view = reload_to(
        &served,
        home.path(),
        modules_config(
            &local.base_url(),
            "b",
            false,
            3.0,
            "{mode: shadow, shadow: {target: judge, allow_cloud: true}}",
        ),
        4,
    )
    .await;
    assert_versions(&view, [2, 2, 3, 4]);
    served.stop();
}

async fn ask_model(gateway: &str, model: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("{gateway}/v1/chat/completions"))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("the gateway answers")
        .status()
        .as_u16()
}
