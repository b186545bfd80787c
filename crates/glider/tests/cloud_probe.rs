//! Cloud backends probed at start instead of reported ready unprobed (issue 21, item
//! 4): the model list asked with the configured key, or without one for a backend on
//! the client's credentials; a refused connection and a failed TLS handshake reported
//! down with their cause, in the start log and in `/api/backends`.

mod common;

use common::serve::serve;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_backends_are_probed_at_start_and_report_what_the_probe_found() {
    let origin = MockVendor::start(MockConfig::default()).await;
    let url = origin.base_url();
    let gone = common::closed_port();
    let tls = origin.addr.port();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("glider.yaml");
    // `https://` to a server that speaks plain HTTP: the TLS handshake fails, as it does
    // behind a proxy or captive portal that answers in clear.
    std::fs::write(
        &config,
        format!(
            "mitm: {{enabled: false}}\n\
             backends:\n\
             \x20 - {{name: keyed, type: anthropic, base_url: '{url}', api_key: sk-ant-probe, models: ['claude-*']}}\n\
             \x20 - {{name: passthrough, type: openai, base_url: '{url}/v1', models: ['gpt-*']}}\n\
             \x20 - {{name: refused, type: anthropic, base_url: 'http://127.0.0.1:{gone}', api_key: sk-ant-x, models: [m-refused]}}\n\
             \x20 - {{name: badtls, type: openai, base_url: 'https://127.0.0.1:{tls}/v1', api_key: sk-x, models: [m-badtls]}}\n"
        ),
    )
    .expect("write config");
    let home = dir.path().join("home");
    let mut served = serve(&home, &config);

    let keyed = served.lines.wait_for("backend keyed (anthropic)");
    assert!(keyed.contains("accepted the configured key"), "{keyed}");
    let passthrough = served.lines.wait_for("backend passthrough (openai)");
    assert!(
        passthrough.contains("reachable") && passthrough.contains("client's own credentials"),
        "{passthrough}"
    );
    let refused = served.lines.wait_for("backend refused (anthropic)");
    assert!(
        refused.contains("down") && refused.contains("Connection refused"),
        "{refused}"
    );
    let badtls = served.lines.wait_for("backend badtls (openai)");
    assert!(
        badtls.contains("down")
            && badtls.contains(&format!("https://127.0.0.1:{tls}/v1/models unreachable")),
        "{badtls}"
    );

    let probes: Vec<_> = origin
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == "/v1/models")
        .collect();
    assert!(
        probes
            .iter()
            .any(|r| r.header("x-api-key") == Some("sk-ant-probe")),
        "the keyed backend's probe carries its key: {probes:?}"
    );
    assert!(
        probes
            .iter()
            .any(|r| r.header("x-api-key").is_none() && r.header("authorization").is_none()),
        "the passthrough backend's probe carries no credential: {probes:?}"
    );

    let backends: Value = reqwest::get(format!("{}/api/backends", served.dashboard))
        .await
        .expect("dashboard answers")
        .json()
        .await
        .expect("json");
    let state = |name: &str| -> Value {
        backends["backends"]
            .as_array()
            .expect("backends")
            .iter()
            .find(|b| b["backend"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} listed: {backends:#}"))
    };
    assert_eq!(state("keyed")["health"], "up", "{backends:#}");
    assert_eq!(state("keyed")["usable"], true);
    assert!(
        state("keyed")["probe"]
            .as_str()
            .unwrap_or_default()
            .contains("configured key")
    );
    assert_eq!(state("passthrough")["health"], "up", "{backends:#}");
    assert_eq!(state("refused")["health"], "down", "{backends:#}");
    assert_eq!(state("refused")["usable"], false);
    assert!(
        state("refused")["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("Connection refused")
    );
    assert_eq!(state("badtls")["health"], "down", "{backends:#}");
    served.stop();
}
