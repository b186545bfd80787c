//! Secrets in the real binary: API keys typed into a prompt (user text, tool call
//! arguments, tool results) never reach the context log's file, the dashboard's
//! session view and request list, or `glider context export`, and with the example
//! redaction plugin on, the stored text is the text the backend got; the children
//! `glider serve` starts (a stdio MCP server, a plugin) see none of its environment's
//! secrets, only the minimal environment and their own configured `env:`.

mod common;

use std::path::Path;
use std::process::Command;

use common::serve::serve_with_env;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

/// Keys of several vendors' shapes, each made for this test (found nowhere else).
const KEYS: [&str; 4] = [
    "sk-ant-api03-Tst9xYw8vUt7sRq6pOn5mLk4jIh3gFe2dCb1aQ",
    "sk-proj-Tst8Zq9xYw8vUt7sRq6pOn5mLk4jIh3gFe2d",
    "ghp_Tst0abcdefghijklmnopqrstuvwxyz012345",
    "AKIATSTIOSFODNN7EXAM",
];
/// A secret in Glider's own environment.
const GLIDER_SECRET: (&str, &str) = ("OPENAI_API_KEY", "sk-in-glider-env-Tst77abcdefghijklmnop");

fn example(name: &str) -> String {
    format!(
        "{}/../../examples/plugins/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Every file under `dir`, read whole (the SQLite file, its WAL, its shm).
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).expect("dir").flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            bytes.extend(std::fs::read(entry.path()).expect("read"));
        }
    }
    bytes
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// What a child wrote of its environment (`env > file`), once it has.
async fn env_of(file: &Path) -> String {
    assert!(
        common::procs::until(|| std::fs::metadata(file).is_ok_and(|m| m.len() > 0)).await,
        "{} was never written",
        file.display()
    );
    std::fs::read_to_string(file).expect("env file")
}

#[tokio::test]
async fn keys_in_a_prompt_are_stored_redacted_and_children_get_no_secret_env() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let plugin_env = home.path().join("plugin.env");
    let mcp_env = home.path().join("mcp.env");
    let yaml = format!(
        "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n\
         plugins:\n  - {{name: redact, command: [sh, -c, 'env > {}; exec python3 {}'], \
         allow_prompt_text: true, env: {{PLUGIN_OWN: plugin-setting}}}}\n\
         mcp:\n  servers:\n    dump: {{command: sh, args: [-c, 'env > {}; exec sleep 60'], \
         env: {{MCP_OWN: mcp-setting}}}}\n",
        mock.base_url(),
        plugin_env.display(),
        example("rewrite_redact.py"),
        mcp_env.display(),
    );
    let config = home.path().join("glider.yaml");
    std::fs::write(&config, yaml).expect("config");
    let served = serve_with_env(home.path(), &config, &[GLIDER_SECRET]);

    // The children: their own settings and the minimal environment, no secret.
    for (file, own) in [
        (&plugin_env, "PLUGIN_OWN=plugin-setting"),
        (&mcp_env, "MCP_OWN=mcp-setting"),
    ] {
        let env = env_of(file).await;
        assert!(env.lines().any(|l| l == own), "{own} missing: {env}");
        assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
        assert!(
            !env.contains(GLIDER_SECRET.0) && !env.contains(GLIDER_SECRET.1),
            "Glider's secret reached {}: {env}",
            file.display()
        );
        assert!(!env.contains("GLIDER_HOME"), "{env}");
    }

    // The plugin answers once it has given its manifest; wait for it on the API.
    served
        .poll_json("/api/plugins", |v| v.to_string().contains("rewrite-redact"))
        .await;
    let client = reqwest::Client::new();
    let post = |body: Value| {
        client
            .post(format!("{}/v1/messages", served.gateway))
            .header("x-claude-code-session-id", "keys")
            .json(&body)
            .send()
    };
    // A root turn (the user's text is kept), then a tool round (calls and results).
    let prompt = format!("my key is {} and {}", KEYS[0], KEYS[1]);
    let root = json!({"role": "user", "content": prompt});
    let reply = post(json!({"model": "qwen", "max_tokens": 50, "messages": [root]}))
        .await
        .expect("answered");
    assert_eq!(reply.status(), 200);
    let sent = mock
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/api/chat")
        .expect("forwarded")
        .body
        .to_string();
    assert!(
        sent.contains("my key is [redacted] and [redacted]"),
        "the plugin's rewrite: {sent}"
    );
    let args = json!({"command": format!("export GITHUB_TOKEN={}", KEYS[2])});
    let reply = post(json!({"model": "qwen", "max_tokens": 50, "messages": [
        root,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": args}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
            "content": format!("aws_access_key_id = {}", KEYS[3])}]}
    ]}))
    .await
    .expect("answered");
    assert_eq!(reply.status(), 200);

    let view = served
        .poll_json("/api/context/sessions/claude-code:keys", |v| {
            v.to_string().contains("my key is")
        })
        .await
        .to_string();
    let requests = served
        .poll_json("/api/requests", |_| true)
        .await
        .to_string();
    for key in KEYS {
        assert!(!view.contains(key), "{key} in the session view: {view}");
        assert!(!requests.contains(key), "{key} in /api/requests");
    }
    assert!(
        view.contains("my key is [redacted] and [redacted]"),
        "the stored text is what the backend got: {view}"
    );
    served.stop();

    let stored = all_bytes(&home.path().join("context"));
    let history = all_bytes(&home.path().join("history"));
    let out = Command::new(GLIDER)
        .env("GLIDER_HOME", home.path())
        .env_remove("GLIDER_CONFIG")
        .args(["context", "export", "claude-code:keys", "--json"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let export: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let export = export.to_string();
    for key in KEYS {
        assert!(!holds(&stored, key), "{key} in the context files");
        assert!(!holds(&history, key), "{key} in the history files");
        assert!(!export.contains(key), "{key} in the export: {export}");
    }
    for shown in [
        "my key is [redacted] and [redacted]",
        "export GITHUB_TOKEN=[redacted]",
        "aws_access_key_id = [redacted]",
    ] {
        assert!(
            export.contains(shown),
            "{shown} not in the export: {export}"
        );
    }
}
