//! Stdio MCP servers that misbehave, as real children (issue 50 item 8): a server stuck
//! in `tools/list` that ignores SIGTERM is killed, its whole group, when a reload removes
//! it; one writing an endless stdout line is an error for that server (counted, then
//! restarted), and an endless stderr line is kept only up to its cap.

mod common;

use std::path::{Path, PathBuf};

use common::procs::{group_gone, group_members, until};
use glider_config::McpConfig;
use glider_mcp::{McpHub, ServerState};

fn stub() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stub_mcp.py")
}

/// `mcp:` with one server `stub` running the stub in `mode`, its mark at `mark`.
fn config_with_stub(mode: &str, mark: &Path) -> McpConfig {
    let yaml = format!(
        "restart_initial_secs: 0.1\nrestart_max_secs: 0.2\nservers:\n  stub: {{command: python3, args: ['{}', {mode}, '{}']}}\n",
        stub().display(),
        mark.display()
    );
    let config: McpConfig = serde_saphyr::from_str(&yaml).expect("mcp config parses");
    assert_eq!(config.problems(), Vec::<String>::new());
    config
}

/// The pid the stub wrote once initialized (waited for, bounded).
async fn initialized(mark: &Path) -> u32 {
    assert!(until(|| mark.exists()).await, "the stub never initialized");
    std::fs::read_to_string(mark)
        .expect("mark")
        .parse()
        .expect("a pid")
}

#[tokio::test]
async fn a_stuck_server_that_ignores_sigterm_is_killed_when_a_reload_removes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("pid");
    let hub = McpHub::new(None);
    hub.apply(&config_with_stub("stuck", &mark));
    let pgid = initialized(&mark).await;
    assert!(!group_members(pgid).is_empty());
    // Removed on reload while it hangs in tools/list.
    hub.apply(&McpConfig::default());
    let left = group_gone(pgid).await;
    assert!(left.is_empty(), "the removed server still runs: {left:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn an_endless_stdout_line_is_an_error_for_that_server_counted_and_restarted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("pid");
    let hub = McpHub::new(None);
    hub.apply(&config_with_stub("long", &mark));
    let cap = glider_mcp::MAX_LINE_BYTES;
    let said = format!("longer than {cap} bytes");
    let failed_so = until(|| {
        hub.servers()
            .iter()
            .any(|s| why_of(&s.state).is_some_and(|why| why.contains(&said)))
    })
    .await;
    assert!(failed_so, "{:?}", hub.servers());
    let counted = until(|| {
        hub.servers()
            .iter()
            .any(|s| s.long_lines >= 2 && s.restarts >= 1)
    })
    .await;
    assert!(counted, "{:?}", hub.servers());
    hub.shutdown().await;
}

fn why_of(state: &ServerState) -> Option<&str> {
    match state {
        ServerState::Failed { why, .. } => Some(why),
        _ => None,
    }
}

#[tokio::test]
async fn an_endless_stderr_line_is_kept_only_up_to_its_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("pid");
    let hub = McpHub::new(None);
    hub.apply(&config_with_stub("stderr", &mark));
    let mut seen = None;
    let found = until(|| {
        seen = hub.servers().iter().find_map(|s| {
            why_of(&s.state)
                .filter(|why| why.contains("its last stderr line"))
                .map(str::to_owned)
        });
        seen.is_some()
    })
    .await;
    assert!(found, "{:?}", hub.servers());
    let why = seen.expect("seen");
    assert!(
        why.len() < glider_mcp::STDERR_LINE_BYTES + 1024,
        "the stderr line kept is {} bytes",
        why.len()
    );
    assert!(
        why.ends_with("[cut]"),
        "{}",
        &why[why.len().saturating_sub(80)..]
    );
    hub.shutdown().await;
}
