//! `/api/vendors`: the delegate CLIs the registry found, and `POST /api/vendors/discover`
//! that looks again under the current config (an action: same Origin rules as the others).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use common::{Setup, start};

fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

#[tokio::test]
async fn vendors_are_listed_and_rediscovered_on_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let claude = script(dir.path(), "claude", "echo '2.1.0 (Claude Code)'");
    let agy = script(dir.path(), "agy", "echo 1.0.5");
    let registry: Arc<Mutex<Option<Arc<glider_delegate::Registry>>>> = Arc::default();
    let seen = registry.clone();
    let stack = start(Setup {
        extra: format!(
            "delegate:\n  claude: {{path: '{claude}'}}\n  cursor_agent: {{path: '{}'}}\n  agy: {{path: '{agy}'}}\n",
            dir.path().join("missing-cursor-agent").display()
        ),
        customize: Box::new(move |options| {
            *seen.lock().expect("lock") = Some(options.vendors.clone());
        }),
        ..Setup::default()
    })
    .await;
    let registry = registry.lock().expect("lock").clone().expect("registry");

    // Nothing discovered yet: an empty list, not an error.
    let before = stack.get_json("/api/vendors").await;
    assert_eq!(before["vendors"], serde_json::json!([]));
    assert_eq!(before["discovered_at_ms"], 0);

    // Another origin may not trigger it.
    let evil = stack
        .post(
            "/api/vendors/discover",
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(evil.status, 403, "{}", evil.text);

    let found = stack.post("/api/vendors/discover", &[]).await;
    assert_eq!(found.status, 200, "{}", found.text);
    let list = found.json()["vendors"].clone();
    assert_eq!(list[0]["vendor"], "claude");
    assert_eq!(list[0]["path"], claude.as_str());
    assert_eq!(list[0]["version"], "2.1.0 (Claude Code)");
    assert_eq!(list[0]["mode"], "headless");
    assert_eq!(list[0]["available"], true);
    assert_eq!(list[1]["vendor"], "cursor-agent");
    assert_eq!(list[1]["available"], false);
    assert!(
        list[1]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("not installed")),
        "{list}"
    );
    assert_eq!(list[2]["vendor"], "agy");
    assert_eq!(list[2]["mode"], "interactive");
    assert_eq!(list[2]["version"], "1.0.5");

    // GET now shows the same list; the shared registry holds it too.
    let after = stack.get_json("/api/vendors").await;
    assert_eq!(after["vendors"], list);
    assert!(after["discovered_at_ms"].as_u64() > Some(0));
    assert_eq!(registry.list().len(), 3);
    let names = registry.image_names();
    for name in ["claude", "cursor-agent", "agy"] {
        assert!(names.iter().any(|n| n == name), "{names:?}");
    }

    // A re-discovery follows the config as it is now: the CLI went away.
    std::fs::remove_file(&claude).expect("remove");
    let again = stack.post("/api/vendors/discover", &[]).await.json();
    assert_eq!(again["vendors"][0]["available"], false, "{again}");
}
