//! The continuity record's tests: what each section keeps, in what order, and how
//! it is cut to fit a budget.

use serde_json::json;

use super::*;
use crate::event::{
    CompactionEvent, Event, EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult,
};
use crate::graph::fold;
use crate::store::Stored;

/// Events of one session, each a second apart.
#[derive(Default)]
struct Log {
    events: Vec<Stored>,
    family: Option<String>,
}

impl Log {
    fn push(&mut self, body: EventBody) {
        let n = self.events.len() as u64 + 1;
        self.events.push(Stored {
            id: n as i64,
            family: self.family.clone(),
            event: Event {
                at_ms: 1000 * n,
                session: Some("s".into()),
                body,
            },
        });
    }

    /// A request (a root with `user`, else carrying `results`) and its reply.
    fn turn(
        &mut self,
        user: Option<&str>,
        results: Vec<ToolResult>,
        reply: &str,
        calls: Vec<ToolCall>,
    ) {
        let request = format!("r{}", self.events.len());
        if user.is_some() {
            self.family = Some(request.clone());
        }
        self.push(EventBody::Request(RequestEvent {
            request: request.clone(),
            root: user.is_some(),
            user_text: user.map(str::to_owned),
            tool_results: results,
            ..RequestEvent::default()
        }));
        self.push(EventBody::Reply(ReplyEvent {
            request,
            status: Some(200),
            tool_calls: calls,
            text: (!reply.is_empty()).then(|| reply.to_owned()),
            ..ReplyEvent::default()
        }));
    }

    fn record(&self) -> ContinuityRecord {
        ContinuityRecord::of_graph(&fold("s", &self.events))
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new(id.into(), name.into(), args)
}

fn result(id: &str, text: &str, is_error: bool) -> ToolResult {
    ToolResult::new(id.into(), None, is_error, text)
}

/// Two episodes: read and edit a file, then a failing test run.
fn session() -> Log {
    let mut log = Log::default();
    log.turn(
        Some("rename foo to bar in src/lib.rs"),
        vec![],
        "Reading it first.",
        vec![call("c1", "Read", json!({"file_path": "src/lib.rs"}))],
    );
    log.turn(
        None,
        vec![result("c1", "fn foo() {}", false)],
        "",
        vec![call(
            "c2",
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": "foo", "new_string": "bar"}),
        )],
    );
    log.turn(
        None,
        vec![result("c2", "updated", false)],
        "Renamed foo to bar because the API calls it bar.",
        vec![],
    );
    log.turn(
        Some("now run the tests"),
        vec![],
        "",
        vec![call("c3", "Bash", json!({"command": "cargo test"}))],
    );
    log.turn(
        None,
        vec![result(
            "c3",
            "test result: FAILED. 1 passed; 1 failed",
            false,
        )],
        "One test fails.",
        vec![],
    );
    log
}

#[test]
fn a_heading_counts_what_was_left_out_in_decimal() {
    let written = |left_out| {
        let mut out = String::new();
        heading(&mut out, "Files (newest first", left_out, "more");
        out
    };
    assert_eq!(written(0), "Files (newest first):");
    assert_eq!(written(7), "Files (newest first; 7 more left out):");
    assert_eq!(written(1030), "Files (newest first; 1030 more left out):");
    let text = written(usize::MAX);
    assert!(text.contains(&format!("; {} more", usize::MAX)), "{text}");
    assert_eq!(
        measured(|out| heading(out, "Files (newest first", 1030, "more")),
        written(1030).len()
    );
}

#[test]
fn the_record_holds_goals_file_states_closing_words_and_open_errors() {
    let record = session().record();
    let goals: Vec<_> = record.goals.iter().map(|g| g.text.as_str()).collect();
    assert_eq!(
        goals,
        ["rename foo to bar in src/lib.rs", "now run the tests"]
    );
    assert_eq!(record.files.len(), 1);
    assert_eq!(record.files[0].path, "src/lib.rs");
    assert_eq!(
        record.files[0].state,
        FileOp::Edited,
        "the edit supersedes the read"
    );
    let decisions: Vec<_> = record.decisions.iter().map(|d| d.text.as_str()).collect();
    assert_eq!(
        decisions,
        [
            "Renamed foo to bar because the API calls it bar.",
            "One test fails."
        ]
    );
    assert_eq!(record.open_errors.len(), 1);
    assert_eq!(record.open_errors[0].subject, "cargo test");
    assert_eq!(record.recent.len(), RECENT_EXCHANGES);
    assert_eq!(
        record.recent[1].user.as_deref(),
        Some("now run the tests"),
        "the request that began an episode shows the user's words"
    );
    assert_eq!(record.recent[1].tools, ["Bash"]);

    let text = record.render(10_000);
    assert!(
        text.starts_with("<continuity-record session=\"s\">"),
        "{text}"
    );
    assert!(text.contains("- src/lib.rs: edited"), "{text}");
    assert!(text.contains("- rename foo to bar in src/lib.rs"), "{text}");
    assert!(text.contains("- cargo test: test result: FAILED"), "{text}");
    assert!(text.ends_with("</continuity-record>"));
}

#[test]
fn a_reply_is_what_the_assistant_said_only_when_it_is_an_answer() {
    let goal = "explain what the parser in src/parse.rs does with empty input";
    let closing = |reply: &str, status: u16, stop: Option<&'static str>| {
        let mut log = Log::default();
        log.turn(Some(goal), vec![], reply, vec![]);
        if let Some(Stored {
            event:
                Event {
                    body: EventBody::Reply(reply),
                    ..
                },
            ..
        }) = log.events.last_mut()
        {
            reply.status = Some(status);
            reply.stop_reason = stop.map(Into::into);
        }
        log.record()
            .decisions
            .into_iter()
            .map(|d| d.text)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        closing("It returns an empty AST.", 200, Some("end_turn")),
        ["It returns an empty AST."]
    );
    // A small local model echoing its prompt, a reply cut at a limit, a failed
    // reply, and Glider's own note are not the assistant's account of the task.
    let echo = format!("User: {goal}\nAssistant: User: {goal}");
    for (reply, status, stop) in [
        (echo.as_str(), 200, Some("end_turn")),
        ("<system-reminder>skills</system-reminder> hi", 200, None),
        ("It returns an empty", 200, Some("max_tokens")),
        ("upstream error", 502, None),
        ("[glider] stopped after 3 tool turns", 200, Some("end_turn")),
    ] {
        assert!(closing(reply, status, stop).is_empty(), "{reply}");
    }
}

#[test]
fn over_its_budget_the_record_leaves_out_exchanges_first_and_keeps_the_newest_goal() {
    let mut log = session();
    for i in 0..30 {
        log.turn(
            Some(&format!("goal {i}: {}", "words ".repeat(40))),
            vec![],
            &"a long closing reply ".repeat(30),
            vec![],
        );
    }
    let record = log.record();
    let full = record.render(100_000);
    let small = record.render(300);
    assert!(
        glider_vocab::estimate::estimate_text(&small) <= 300,
        "{small}"
    );
    assert!(small.len() < full.len());
    assert!(small.contains("goal 29:"), "the newest goal stays: {small}");
    assert!(!small.contains("Last exchanges:"), "{small}");
    assert!(
        small.contains("cargo test"),
        "the open error outlives the goals: {small}"
    );
    assert!(small.contains("earlier left out"), "{small}");
}

#[test]
fn goals_are_kept_verbatim_newest_first_within_their_budget() {
    let mut log = Log::default();
    // Each goal is a third of the budget with its leading digit.
    let long = "g".repeat(GOALS_MAX_CHARS / 3 - 1);
    for i in 0..5 {
        log.turn(Some(&format!("{i}{long}")), vec![], "ok", vec![]);
    }
    let record = log.record();
    let firsts: Vec<char> = record
        .goals
        .iter()
        .filter_map(|g| g.text.chars().next())
        .collect();
    assert_eq!(firsts, ['2', '3', '4'], "the newest three fit");
    assert_eq!(record.goals_left_out, 2);
}

#[test]
fn only_an_accepted_compaction_fills_the_narrative() {
    let mut log = session();
    let compaction = |accepted: bool, narrative: &str| {
        EventBody::Compaction(CompactionEvent {
            accepted,
            narrative: narrative.into(),
            until_ms: 5000,
            source: "summarizer".into(),
            reason: None,
            ..CompactionEvent::default()
        })
    };
    log.push(compaction(true, "Renamed foo; a test fails."));
    log.push(compaction(false, "a summary that left a file out"));
    let record = log.record();
    let narrative = record.narrative.as_ref().expect("accepted one");
    assert_eq!(narrative.text, "Renamed foo; a test fails.");
    assert!(
        record
            .render(10_000)
            .contains("Summary so far:\nRenamed foo; a test fails.")
    );
}

/// A live fold of `episodes` root turns, each a short goal and a text answer (the
/// benchmark's shape: every request begins an episode of one session), with a file
/// read and a failing command in the first so that every section is present.
fn live_session(episodes: usize) -> crate::graph::Folder {
    let mut log = Log::default();
    log.turn(
        Some("look at lib.rs and run the tests"),
        vec![],
        "",
        vec![
            call("t1", "Read", json!({"file_path": "src/lib.rs"})),
            call("t2", "Bash", json!({"command": "cargo test"})),
        ],
    );
    log.turn(
        None,
        vec![
            result("t1", "fn add() {}", false),
            result("t2", "test result: FAILED. 0 passed; 1 failed", true),
        ],
        "The test fails.",
        vec![],
    );
    for n in 0..episodes {
        log.turn(
            Some(&format!("goal {n:05}")),
            vec![],
            &format!("done {n}"),
            vec![],
        );
    }
    let mut folder = crate::graph::Folder::new("s");
    for stored in &log.events {
        folder.feed(stored);
    }
    folder
}

/// What [`ContinuityRecord::render`] did before it shed items by their bytes:
/// one item left out per rendering, until it fits.
fn render_one_at_a_time(record: &ContinuityRecord, max_tokens: u64) -> Option<String> {
    let mut record = record.clone();
    loop {
        let text = record.render_all();
        if glider_vocab::estimate::estimate_text(&text) <= max_tokens {
            return Some(text);
        }
        record.leave_out_one()?;
    }
}

#[test]
fn rendering_to_a_budget_leaves_out_what_one_at_a_time_would() {
    let record = ContinuityRecord::of_folder("s", &live_session(300));
    for max_tokens in [40, 60, 100, 150, 300, 700, 1500, 100_000] {
        let Some(expected) = render_one_at_a_time(&record, max_tokens) else {
            continue;
        };
        assert_eq!(record.render(max_tokens), expected, "budget {max_tokens}");
    }
}

#[test]
fn the_measured_length_is_the_written_one() {
    let mut log = session();
    log.turn(
        Some("  a goal\non two lines\n\nand a gap  "),
        vec![],
        "  an answer\nthat wraps ",
        vec![call("c9", "Read", json!({"file_path": "b.rs"}))],
    );
    log.turn(None, vec![result("c9", "ok", false)], "", vec![]);
    let mut record = log.record();
    record.narrative = Some(crate::graph::Narrative {
        text: " the summary\n".into(),
        ..crate::graph::Narrative::default()
    });
    loop {
        assert_eq!(record.rendered_len(), record.render_all().len());
        if record.leave_out_one().is_none() {
            break;
        }
    }
    assert!(
        log.record()
            .render(10_000)
            .contains("- a goal\n  on two lines\n  \n  and a gap\n"),
        "a multi-line goal stays one indented item"
    );
}

#[test]
fn a_records_work_does_not_grow_with_the_session() {
    let mut work_at = Vec::new();
    for episodes in [2000, 10_000] {
        let folder = live_session(episodes);
        work::take();
        let record = ContinuityRecord::of_folder("s", &folder);
        let text = record.render(1500);
        assert!(text.contains(&format!("- goal {:05}", episodes - 1)));
        assert!(text.contains("cargo test"), "the open error stays: {text}");
        assert_eq!(record.goals_left_out + record.goals.len(), episodes + 1);
        work_at.push(work::take());
    }
    let (rendered, visited) = work_at[1];
    assert_eq!(
        work_at[0], work_at[1],
        "texts rendered and episodes visited are the same at 2,000 and 10,000 episodes"
    );
    assert!(rendered <= 4, "{rendered} renderings for one record");
    assert!(visited < 2000, "{visited} episodes visited");
}

/// A long, mixed session (goals short, long and blank; tool loops reading,
/// editing and running commands on a handful of files, with errors opened and
/// closed; compactions; one agent loop of hundreds of steps, with a run of
/// replies that say nothing; a stretch of episodes without closing words),
/// `turns` turns long.
fn mixed_session(turns: usize) -> Log {
    let mut log = Log::default();
    let mut seed: u64 = 7;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut pending: Vec<ToolCall> = Vec::new();
    for turn in 0..turns {
        let results: Vec<ToolResult> = pending
            .drain(..)
            .map(|c| {
                let failed = next(5) == 0;
                result(
                    &c.id,
                    if failed { "error: it failed" } else { "ok" },
                    failed,
                )
            })
            .collect();
        let file = format!("src/f{}.rs", next(30));
        let id = format!("c{turn}");
        // Inside the agent loop, a run of requests whose replies say and call
        // nothing (failures): the last exchanges are older than the newest steps.
        let failing = (1200..1330).contains(&turn);
        let calls = match if failing { 3 } else { next(4) } {
            0 => vec![call(&id, "Read", json!({"file_path": file}))],
            1 => vec![call(
                &id,
                "Edit",
                json!({"file_path": file, "old_string": "a", "new_string": "b"}),
            )],
            2 => vec![call(
                &id,
                "Bash",
                json!({"command": format!("cargo test {}", next(6))}),
            )],
            _ => vec![],
        };
        let in_long_loop = (1000..1400).contains(&turn);
        // A stretch of episodes that end without closing words: the record's
        // decisions come from before it.
        let silent = (3000..4500).contains(&turn);
        let reply = if calls.is_empty() && !silent && !failing {
            format!("answer {turn}")
        } else {
            String::new()
        };
        if !in_long_loop && (results.is_empty() || next(6) == 0) {
            let goal = match next(5) {
                0 => "   ".to_owned(),
                1 => format!("a long goal {turn} ").repeat(120),
                _ => format!("goal {turn}"),
            };
            log.turn(Some(&goal), vec![], &reply, calls.clone());
        } else {
            log.turn(None, results, &reply, calls.clone());
        }
        if next(40) == 0 {
            let request = format!("r{}", log.events.len());
            log.push(EventBody::Request(RequestEvent {
                request: request.clone(),
                compaction: true,
                ..RequestEvent::default()
            }));
            log.push(EventBody::Reply(ReplyEvent {
                request,
                status: Some(200),
                text: Some("a summary".into()),
                ..ReplyEvent::default()
            }));
        }
        pending = calls;
    }
    log
}

#[test]
fn a_live_fold_renders_the_replays_record_and_holds_what_the_record_reads() {
    let log = mixed_session(6000);
    // Fed as the writer feeds it: each event given up to the fold.
    let mut live = crate::graph::Folder::live("s");
    let mut replay = crate::graph::Folder::new("s");
    let mut given = crate::graph::Folder::new("s");
    let mut most_episodes = 0;
    let mut most_steps = 0;
    for (n, stored) in log.events.iter().enumerate() {
        live.feed_owned(stored.event.clone(), stored.family.clone());
        replay.feed(stored);
        given.feed_owned(stored.event.clone(), stored.family.clone());
        most_episodes = most_episodes.max(live.episodes().len());
        most_steps = most_steps.max(live.episodes().iter().map(|e| e.steps.len()).sum());
        if n % 53 == 0 || n == log.events.len() - 1 {
            let record = ContinuityRecord::of_folder("s", &live);
            assert_eq!(
                record,
                ContinuityRecord::of_folder("s", &replay),
                "event {n}"
            );
            assert_eq!(
                record.render(1500),
                ContinuityRecord::of_folder("s", &replay).render(1500)
            );
        }
    }
    let replayed: usize = replay.episodes().iter().map(|e| e.steps.len()).sum();
    eprintln!(
        "live held at most {most_episodes} episodes, {most_steps} steps; the replay {} episodes, {replayed} steps",
        replay.episodes().len()
    );
    assert!(
        replay.episodes().len() > 2000,
        "{} episodes",
        replay.episodes().len()
    );
    assert!(
        most_episodes <= 200,
        "a live fold held {most_episodes} episodes"
    );
    assert!(
        most_steps <= 400,
        "a live fold held {most_steps} steps (the replay {replayed})"
    );
    assert!(
        live.errors().iter().all(|e| e.closed_ms.is_none()),
        "only open errors are held"
    );
    assert!(live.files().all(|f| f.changes.len() <= 2));
    assert!(
        given.into_graph() == replay.into_graph(),
        "a fold given the events builds the graph a fold that borrows them builds"
    );
}

#[test]
fn a_record_built_for_a_budget_renders_what_the_whole_record_renders() {
    let mut padded = session();
    padded.turn(
        Some(&format!("pad{}", " ".repeat(3000))),
        vec![],
        "ok",
        vec![],
    );
    padded.turn(Some(&"x\n".repeat(500)), vec![], "ok", vec![]);
    let mut folders = vec![live_session(300), live_session(3)];
    for log in [mixed_session(1500), padded] {
        let mut folder = crate::graph::Folder::new("s");
        for stored in &log.events {
            folder.feed(stored);
        }
        folders.push(folder);
    }
    for folder in &folders {
        for max_tokens in [10, 40, 60, 100, 150, 300, 700, 1500, 3000, 5000, 100_000] {
            let whole = ContinuityRecord::of_folder("s", folder);
            let within = ContinuityRecord::of_folder_within("s", folder, max_tokens);
            assert!(within.goals.len() <= whole.goals.len());
            assert_eq!(
                within.goals.len() + within.goals_left_out,
                whole.goals.len() + whole.goals_left_out
            );
            assert_eq!(
                within.into_text(max_tokens),
                whole.into_text(max_tokens),
                "budget {max_tokens}"
            );
        }
    }
    // 10-character goals: 8 KiB of them is about 800, a 1,500-token record
    // (5,250 bytes) shows about 400.
    let folder = live_session(2000);
    let within = ContinuityRecord::of_folder_within("s", &folder, 1500)
        .goals
        .len();
    let whole = ContinuityRecord::of_folder("s", &folder).goals.len();
    assert!(within * 3 < whole * 2, "{within} of {whole} goals copied");
    // Its goals fill the record: nothing the budget leaves out before them is built.
    let within = ContinuityRecord::of_folder_within("s", &folder, 1500);
    let whole = ContinuityRecord::of_folder("s", &folder);
    assert!(!whole.recent.is_empty() && !whole.decisions.is_empty() && !whole.files.is_empty());
    assert!(
        within.recent.is_empty() && within.decisions.is_empty() && within.files.is_empty(),
        "{within:?}"
    );
}
