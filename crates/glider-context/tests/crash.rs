//! A real SIGKILL during heavy writes: a child process (this test binary, re-run in
//! child mode) appends a scripted session as fast as it can and reports each committed
//! point; the parent kills it with SIGKILL mid-write, then restarts on the database:
//! it opens, `integrity_check` is ok, every reported event is there with no hole, and
//! the graph folded from it is the one an uninterrupted run of the same events gives.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use glider_context::event::{Event, EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult};
use glider_context::graph;
use glider_context::store::{self, Retention};
use glider_context::{ContextLog, LogOptions};
use serde_json::json;

const CHILD_DIR: &str = "GLIDER_CONTEXT_CRASH_DIR";
const CHILD_BASE: &str = "GLIDER_CONTEXT_CRASH_BASE_MS";
/// Events the parent waits to see committed before it kills the child.
const KILL_AFTER: u64 = 3000;

fn options(dir: &std::path::Path) -> LogOptions {
    LogOptions {
        dir: dir.to_path_buf(),
        queue_capacity: 100_000,
        retention: Retention {
            max_age_ms: 86_400_000,
            max_bytes: u64::MAX,
        },
        retention_every: Duration::from_secs(3600),
        record_max_tokens: 1500,
        idle_rebuild_after: Duration::from_millis(20),
    }
}

/// The `n`th event (from 1) of a scripted Claude Code session: a user turn, then a
/// loop of Read, Edit and Bash calls whose results come back in the next request.
fn scripted(n: u64, base_ms: u64) -> Event {
    let step = (n - 1) / 2;
    let key = format!("r{step}");
    let call = |s: u64| {
        let id = format!("call-{s}");
        match s % 4 {
            0 => ToolCall::new(
                id,
                "Read".into(),
                json!({"file_path": format!("/p/src/f{}.rs", s % 7)}),
            ),
            1 => ToolCall::new(
                id,
                "Edit".into(),
                json!({"file_path": format!("/p/src/f{}.rs", s % 7), "old_string": "a", "new_string": "b"}),
            ),
            2 => ToolCall::new(
                id,
                "Bash".into(),
                json!({"command": format!("cargo test t{}", s % 5)}),
            ),
            _ => ToolCall::new(
                id,
                "Write".into(),
                json!({"file_path": format!("/p/new{s}.rs"), "content": "x"}),
            ),
        }
    };
    let body = if n % 2 == 1 {
        let root = step.is_multiple_of(10);
        let results = if root || step == 0 {
            Vec::new()
        } else {
            let text = if step.is_multiple_of(3) {
                "Exit code 1\nFAILED"
            } else {
                "ok"
            };
            vec![ToolResult::new(
                format!("call-{}", step - 1),
                None,
                false,
                text,
            )]
        };
        EventBody::Request(RequestEvent {
            request: key,
            root,
            user_text: root.then(|| format!("goal {step}")),
            tool_results: results,
            model: "m".into(),
            ..RequestEvent::default()
        })
    } else {
        EventBody::Reply(ReplyEvent {
            request: key,
            backend: Some("local".into()),
            model: Some("m".into()),
            status: Some(200),
            input_tokens: step,
            tool_calls: vec![call(step)],
            ..ReplyEvent::default()
        })
    };
    Event {
        at_ms: base_ms + n,
        session: Some("crash".into()),
        body,
    }
}

/// Child mode: write forever, printing `committed N` after each flush.
fn run_child(dir: &str, base_ms: u64) -> ! {
    let log = ContextLog::start(options(std::path::Path::new(dir))).expect("child starts");
    let mut n = 0;
    loop {
        for _ in 0..100 {
            n += 1;
            log.append(scripted(n, base_ms));
        }
        log.flush();
        println!("committed {n}");
    }
}

#[test]
fn sigkill_during_heavy_writes_loses_no_committed_event() {
    if let (Ok(dir), Ok(base)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_BASE)) {
        run_child(&dir, base.parse().expect("base ms"));
    }
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("context");
    let base_ms = glider_context::now_ms();
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "sigkill_during_heavy_writes_loses_no_committed_event",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, &dir)
        .env(CHILD_BASE, base_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("child starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut committed = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child output");
        if let Some(n) = line.strip_prefix("committed ") {
            committed = n.parse().expect("a count");
            if committed >= KILL_AFTER {
                break;
            }
        }
    }
    // Child::kill is SIGKILL on Unix: no destructor, no flush, mid-transaction.
    child.kill().expect("killed");
    child.wait().expect("reaped");
    assert!(
        committed >= KILL_AFTER,
        "the child stopped before writing enough: {committed}"
    );

    // Restart: the store opens and migrates as Glider's start does, and is sound.
    let log = ContextLog::start(options(&dir)).expect("restarts after the kill");
    drop(log);
    let conn = store::open(&dir).expect("opens");
    assert_eq!(store::integrity(&conn).expect("integrity_check"), "ok");
    let stored = store::events(&conn, Some("crash")).expect("reads");
    let count = stored.len() as u64;
    assert!(
        count >= committed,
        "{committed} were committed, {count} are there"
    );
    for (i, s) in stored.iter().enumerate() {
        assert_eq!(
            s.event,
            scripted(i as u64 + 1, base_ms),
            "event {} is the one written, no hole",
            i + 1
        );
    }

    // The same events, written without a kill, fold into the same graph.
    let clean = home.path().join("clean");
    let log = ContextLog::start(options(&clean)).expect("starts");
    for n in 1..=count {
        log.append(scripted(n, base_ms));
    }
    drop(log);
    let clean_events =
        store::events(&store::open(&clean).expect("opens"), Some("crash")).expect("reads");
    let replayed = graph::fold("crash", &stored);
    assert_eq!(replayed, graph::fold("crash", &clean_events));
    assert!(
        !replayed.files.is_empty() && !replayed.commands.is_empty() && !replayed.errors.is_empty()
    );
    assert_eq!(
        replayed,
        graph::fold(
            "crash",
            &store::events(&conn, Some("crash")).expect("reads")
        ),
        "replay is stable"
    );
}
