//! The writer end to end on a real database: families given to a session's requests
//! and replies, and a writer that falls behind logging its loss as a gap.

use std::time::Duration;

use glider_context::event::{Event, EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult};
use glider_context::store::{self, Retention};
use glider_context::{ContextLog, LogOptions};
use serde_json::json;

/// [`options`] with a writer that never idles long enough to render on its own: only
/// reads render.
fn options_rendering_on_read_only(dir: &std::path::Path) -> LogOptions {
    LogOptions {
        idle_rebuild_after: Duration::from_secs(3600),
        ..options(dir, 64)
    }
}

fn root_turn(key: &str, goal: &str) -> [Event; 2] {
    let mut request = request(key, true, &[]);
    if let EventBody::Request(body) = &mut request.body {
        body.user_text = Some(goal.to_owned());
    }
    [request, reply(key, &[])]
}

/// Poll `done` for up to 30 s; `never` says what did not happen.
fn wait_until(mut done: impl FnMut() -> bool, never: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{never}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn options(dir: &std::path::Path, queue_capacity: usize) -> LogOptions {
    LogOptions {
        dir: dir.to_path_buf(),
        queue_capacity,
        retention: Retention {
            max_age_ms: u64::MAX,
            max_bytes: u64::MAX,
        },
        retention_every: Duration::from_secs(3600),
        record_max_tokens: 1500,
        idle_rebuild_after: Duration::from_millis(20),
    }
}

fn event(body: EventBody) -> Event {
    Event {
        at_ms: glider_context::now_ms(),
        session: Some("s".into()),
        body,
    }
}

fn request(key: &str, root: bool, results: &[&str]) -> Event {
    event(EventBody::Request(RequestEvent {
        request: key.into(),
        root,
        user_text: root.then(|| "do it".to_owned()),
        tool_results: results
            .iter()
            .map(|id| ToolResult::new((*id).into(), None, false, "ok"))
            .collect(),
        ..RequestEvent::default()
    }))
}

fn reply(key: &str, calls: &[&str]) -> Event {
    event(EventBody::Reply(ReplyEvent {
        request: key.into(),
        status: Some(200),
        tool_calls: calls
            .iter()
            .map(|id| ToolCall::new((*id).into(), "Task".into(), json!({"prompt": "look"})))
            .collect(),
        ..ReplyEvent::default()
    }))
}

/// Session `s`'s record once the writer holds one (polled; `never` if it does not
/// within 30 s).
fn wait_for_record(log: &ContextLog, never: &str) -> std::sync::Arc<str> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(record) = log.records().get("s") {
            return record;
        }
        assert!(std::time::Instant::now() < deadline, "{never}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_tool_loop_and_a_subagent_prompt_stay_in_the_root_requests_family() {
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options(home.path(), 64)).expect("starts");
    for e in [
        request("a", true, &[]),
        reply("a", &["task-1"]),
        // The subagent's own prompt looks like a root, but its parent waits on task-1.
        request("sub", true, &[]),
        reply("sub", &[]),
        request("b", false, &["task-1"]),
        reply("b", &[]),
        // The user's next message: a new episode.
        request("c", true, &[]),
        reply("c", &[]),
    ] {
        log.append(e);
    }
    log.flush();
    assert_eq!(
        log.counters()
            .written
            .load(std::sync::atomic::Ordering::Relaxed),
        8
    );
    drop(log);
    let conn = store::open(home.path()).expect("opens");
    let families: Vec<_> = store::events(&conn, Some("s"))
        .expect("reads")
        .into_iter()
        .map(|s| s.family.unwrap_or_default())
        .collect();
    assert_eq!(families, ["a", "a", "a", "a", "a", "a", "c", "c"]);

    // After a restart the session continues its newest family.
    let log = ContextLog::start(options(home.path(), 64)).expect("restarts");
    log.append(request("d", false, &["x"]));
    log.flush();
    drop(log);
    let last = store::events(&conn, Some("s"))
        .expect("reads")
        .pop()
        .expect("one");
    assert_eq!(last.family.as_deref(), Some("c"));
}

#[test]
fn events_dropped_while_the_writer_is_blocked_are_logged_as_a_gap() {
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options(home.path(), 4)).expect("starts");
    // Another connection holds the write lock: the writer waits (busy timeout) and the
    // queue fills.
    let blocker = store::open(home.path()).expect("opens");
    blocker.execute_batch("BEGIN IMMEDIATE").expect("locks");
    const SENT: u64 = 200;
    for i in 0..SENT {
        log.append(request(&format!("r{i}"), true, &[]));
    }
    blocker.execute_batch("COMMIT").expect("unlocks");
    log.flush();
    let counters = log.counters();
    let dropped = counters.dropped.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        dropped >= SENT - 16,
        "a queue of 4 holds few of {SENT}: {dropped} dropped"
    );
    // Usually one gap; on a loaded machine the writer can take events between two runs
    // of drops, and each run is its own gap event. What must hold: every drop is told.
    let gap_events = counters.gaps.load(std::sync::atomic::Ordering::Relaxed);
    assert!(gap_events >= 1, "the drops were told as a gap");
    drop(log);
    let conn = store::open(home.path()).expect("opens");
    let all = store::events(&conn, None).expect("reads");
    let gaps: Vec<u64> = all
        .iter()
        .filter_map(|s| match s.event.body {
            EventBody::Gap { dropped } => Some(dropped),
            _ => None,
        })
        .collect();
    assert_eq!(gaps.len() as u64, gap_events, "each counted gap is written");
    assert_eq!(
        gaps.iter().sum::<u64>(),
        dropped,
        "the gap events tell every dropped event"
    );
    let written = all.iter().filter(|s| s.event.session.is_some()).count() as u64;
    assert_eq!(
        written + dropped,
        SENT,
        "every event is either written or counted"
    );
}

#[test]
fn a_restarted_log_holds_its_recent_sessions_records_before_any_new_event() {
    let home = tempfile::tempdir().expect("tempdir");
    let before = {
        let log = ContextLog::start(options(home.path(), 64)).expect("starts");
        log.append(request("a", true, &[]));
        log.append(reply("a", &[]));
        log.flush();
        log.records().get("s").expect("the writer holds the record")
    };
    // A new start on the same file, and no event for the session since.
    let log = ContextLog::start(options(home.path(), 64)).expect("restarts");
    let after = wait_for_record(&log, "the record was never loaded at start");
    assert_eq!(after, before, "the same record as before the restart");
    assert!(after.contains("do it"), "{after}");
    assert_eq!(
        log.counters()
            .written
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "loaded, not written"
    );
}

#[test]
fn delegate_runs_and_budget_stops_fold_into_the_timeline_and_replay_to_the_same_graph() {
    use glider_context::event::{BudgetStopEvent, DelegateEvent};
    let home = tempfile::tempdir().expect("tempdir");
    let delegate = |vendor: &str, exit_code| {
        event(EventBody::Delegate(DelegateEvent {
            vendor: vendor.into(),
            exit_code,
            error: exit_code.is_none().then(|| "timed out".to_owned()),
            duration_ms: 40,
        }))
    };
    let stop = event(EventBody::BudgetStop(BudgetStopEvent {
        request: "b".into(),
        limit: "turn_budget".into(),
        turns: 2,
        message: "Glider stopped this agent loop".into(),
        ..BudgetStopEvent::default()
    }));
    let mut stopped_reply = reply("b", &[]);
    if let EventBody::Reply(body) = &mut stopped_reply.body {
        body.backend = Some("glider-budget".into());
    }
    let reader = glider_context::Reader::new(home.path().to_path_buf());
    let replayed = {
        let log = ContextLog::start(options(home.path(), 64)).expect("starts");
        for e in [
            delegate("claude", Some(0)),
            request("a", true, &[]),
            reply("a", &["task-1"]),
            delegate("cursor-agent", None),
            request("b", false, &["task-1"]),
            stop,
            stopped_reply,
        ] {
            log.append(e);
        }
        log.flush();
        let view = reader.session("s").expect("reads").expect("the session");
        // The record the writer folded as the events came equals the replay's.
        assert_eq!(
            log.records().get("s").as_deref(),
            Some(view.record.text.as_str())
        );
        view.graph
    };
    let episodes = &replayed.episodes;
    assert_eq!(episodes.len(), 2, "{episodes:?}");
    assert!(episodes[0].family.starts_with("delegate-"), "{episodes:?}");
    assert_eq!(episodes[0].delegate_runs[0].vendor, "claude");
    assert_eq!(episodes[0].delegate_runs[0].exit_code, Some(0));
    // The writer gave the run during the episode that episode's family.
    assert_eq!(episodes[1].family, "a");
    let during: Vec<_> = episodes[1]
        .delegate_runs
        .iter()
        .map(|r| (r.vendor.as_str(), r.exit_code, r.error.as_deref()))
        .collect();
    assert_eq!(during, [("cursor-agent", None, Some("timed out"))]);
    let steps = &episodes[1].steps;
    assert_eq!(steps.len(), 2);
    let limit = steps[1].budget_stop.as_ref().map(|s| s.limit.as_str());
    assert_eq!(limit, Some("turn_budget"));
    assert_eq!(steps[1].backend.as_deref(), Some("glider-budget"));

    // After a restart the log replays to the same graph.
    let log = ContextLog::start(options(home.path(), 64)).expect("restarts");
    log.flush();
    let again = reader.session("s").expect("reads").expect("the session");
    assert_eq!(again.graph, replayed);
    assert_eq!(again.budget.stops, 1);
}

#[test]
fn a_request_whose_reply_never_comes_still_reaches_the_record() {
    // A request event alone defers its session's record to the reply (a Cursor turn
    // handed back to its origin has none): the writer rebuilds it when it idles.
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options(home.path(), 64)).expect("starts");
    log.append(request("a", true, &[]));
    let record = wait_for_record(&log, "the deferred record was never rebuilt");
    assert!(record.contains("do it"), "{record}");
    // A flush rebuilds what waits at once.
    log.append(request("b", true, &[]));
    log.flush();
    let record = log.records().get("s").expect("held");
    assert_eq!(record.matches("- do it").count(), 2, "{record}");
}

#[test]
fn a_read_after_many_commits_renders_the_record_once_with_every_event() {
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options_rendering_on_read_only(home.path())).expect("starts");
    const TURNS: usize = 6;
    for i in 0..TURNS {
        for e in root_turn(&format!("r{i}"), &format!("goal number {i}")) {
            log.append(e);
        }
        // Each turn its own commit.
        log.flush();
    }
    let records = log.records();
    assert!(records.holds("s"), "the writer folds the session");
    assert!(
        !records.is_current("s"),
        "a commit only marks the record stale"
    );
    assert_eq!(records.renders(), 0, "no commit rendered the record");
    let record = records.get("s").expect("a record");
    for i in 0..TURNS {
        assert!(record.contains(&format!("goal number {i}")), "{record}");
    }
    assert_eq!(records.renders(), 1, "the read rendered it once");
    let again = records.get("s").expect("a record");
    assert!(
        std::sync::Arc::ptr_eq(&record, &again),
        "kept until the next event"
    );
    assert_eq!(records.renders(), 1);
    // The record a read renders is the one a replay of the database folds.
    let view = glider_context::Reader::new(home.path().to_path_buf())
        .session("s")
        .expect("reads")
        .expect("the session");
    assert_eq!(view.record.text, *record);

    for e in root_turn("late", "one more goal") {
        log.append(e);
    }
    log.flush();
    assert!(!records.is_current("s"), "a new event makes it stale again");
    let record = records.get("s").expect("a record");
    assert!(record.contains("one more goal"), "{record}");
    assert_eq!(records.renders(), 2);
}

#[test]
fn an_idle_writer_renders_a_stale_record_before_anyone_reads_it() {
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options(home.path(), 64)).expect("starts");
    for e in root_turn("a", "the first goal") {
        log.append(e);
    }
    log.flush();
    let records = log.records();
    wait_until(
        || records.is_current("s"),
        "the idle writer never rendered the record",
    );
    assert_eq!(records.renders(), 1, "rendered by the writer");
    let record = records.get("s").expect("a record");
    assert!(record.contains("the first goal"), "{record}");
    assert_eq!(records.renders(), 1, "the read found it current");
}

#[test]
fn a_forgotten_session_is_let_go_while_its_record_is_stale() {
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options_rendering_on_read_only(home.path())).expect("starts");
    for e in root_turn("a", "a secret goal") {
        log.append(e);
    }
    log.flush();
    assert!(
        log.records().get("s").is_some(),
        "a record before the forget"
    );
    for e in root_turn("b", "another secret goal") {
        log.append(e);
    }
    log.flush();
    assert!(!log.records().is_current("s"), "stale when forgotten");
    // Forgotten through another connection, as `glider context forget` does.
    let reader = glider_context::Reader::new(home.path().to_path_buf());
    assert_eq!(reader.forget("s").expect("forgets"), 4);
    wait_until(
        || !log.records().holds("s"),
        "the writer never let the forgotten session go",
    );
    assert_eq!(log.records().get("s"), None, "nothing of it is rendered");
    assert_eq!(
        log.records().renders(),
        1,
        "the forgotten events were never rendered"
    );
}

/// API keys in every text of a prompt or reply an event carries are replaced before
/// the event is stored: the database's files never hold one, and neither does what is
/// read back or the session's record.
#[test]
fn keys_never_reach_the_file_the_fold_or_a_read() {
    use glider_context::event::{CompactionEvent, ToolRunEvent};
    const KEYS: [&str; 5] = [
        "sk-ant-api03-Wrt9xYw8vUt7sRq6pOn5mLk4jIh3gFe2dCb1aQ",
        "sk-proj-Wrt8Zq9xYw8vUt7sRq6pOn5mLk4jIh3gFe2d",
        "ghp_Wrt0abcdefghijklmnopqrstuvwxyz012345",
        "AKIAWRTIOSFODNN7EXAM",
        "github_pat_11WRT0123456789_abcdefghijklmnop",
    ];
    let home = tempfile::tempdir().expect("tempdir");
    let log = ContextLog::start(options(home.path(), 64)).expect("starts");
    let mut first = request("a", true, &[]);
    if let EventBody::Request(body) = &mut first.body {
        body.user_text = Some(format!("my key is {}", KEYS[0]));
        body.tool_calls = vec![ToolCall::new(
            "c1".into(),
            "Bash".into(),
            json!({"command": format!("export K={}", KEYS[1])}),
        )];
        body.tool_results = vec![ToolResult::new(
            "c1".into(),
            None,
            false,
            &format!("token: {}", KEYS[2]),
        )];
    }
    let mut answer = reply("a", &[]);
    if let EventBody::Reply(body) = &mut answer.body {
        body.text = Some(format!("use {} for AWS", KEYS[3]));
    }
    let run = event(EventBody::ToolRun(ToolRunEvent {
        request: "a".into(),
        arguments: format!("{{\"pat\": \"{}\"}}", KEYS[4]),
        ..ToolRunEvent::default()
    }));
    let compaction = event(EventBody::Compaction(CompactionEvent {
        accepted: true,
        narrative: format!("the user pasted {}", KEYS[0]),
        source: "summarizer".into(),
        ..CompactionEvent::default()
    }));
    for e in [first, run, answer, compaction] {
        log.append(e);
    }
    log.flush();
    let record = wait_for_record(&log, "a record for the session");
    drop(log);

    let mut stored = Vec::new();
    for entry in std::fs::read_dir(home.path()).expect("dir").flatten() {
        stored.extend(std::fs::read(entry.path()).expect("read"));
    }
    let conn = store::open(home.path()).expect("opens");
    let read =
        serde_json::to_string(&store::events(&conn, Some("s")).expect("reads")).expect("JSON");
    for key in KEYS {
        assert!(
            !stored.windows(key.len()).any(|w| w == key.as_bytes()),
            "{key} in the database's files"
        );
        assert!(!read.contains(key), "{key} read back: {read}");
        assert!(!record.contains(key), "{key} in the record: {record}");
    }
    for kept in [
        "my key is [redacted]",
        "export K=[redacted]",
        "token: [redacted]",
        "use [redacted] for AWS",
        "the user pasted [redacted]",
    ] {
        assert!(read.contains(kept), "{kept} not read back: {read}");
    }
}
