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
    let reply = reqwest::Client::new()
        .post(format!("{gateway}/v1/chat/completions"))
        .json(&json!({"model": "m-vllm", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("the gateway answers");
    reply.status().as_u16()
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
