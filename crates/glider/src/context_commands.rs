//! `glider context sessions | show ID | export ID [--json] | forget ID`: the context
//! log read straight from its SQLite file under `GLIDER_HOME/context/` (WAL lets this
//! run beside a serving Glider; no dashboard or token is needed, the file is the
//! user's own, 0600).

use std::fmt::Write as _;
use std::path::Path;

use clap::Subcommand;
use glider_context::graph::SessionGraph;
use glider_context::{Reader, SessionView};

#[derive(Subcommand)]
pub enum ContextAction {
    /// The sessions in the log, most recently active first.
    Sessions,
    /// One session: its episodes, files, commands, open errors, models, budget and
    /// continuity record.
    Show { id: String },
    /// One session's events as stored: JSON Lines, or with --json one document with
    /// the events and the graph folded from them.
    Export {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete one session's events (the log keeps only that a deletion happened).
    Forget { id: String },
}

/// Run `action` on the log under `home`; the text to print, or why not.
pub fn run(action: ContextAction, home: &Path) -> anyhow::Result<String> {
    let reader = Reader::new(glider_context::dir(home));
    match action {
        ContextAction::Sessions => {
            let sessions = reader.sessions()?;
            if sessions.is_empty() {
                return Ok(format!("no sessions in {}", reader.dir().display()));
            }
            let mut out = String::from("SESSION\tREQUESTS\tEVENTS\tLAST (unix ms)\n");
            for s in sessions {
                let _ = writeln!(
                    out,
                    "{}\t{}\t{}\t{}",
                    s.session, s.requests, s.events, s.last_ms
                );
            }
            Ok(out.trim_end().to_owned())
        }
        ContextAction::Show { id } => Ok(show(&found(reader.session(&id)?, &id)?)),
        ContextAction::Export { id, json } => {
            let events = reader.events(&id)?;
            if events.is_empty() {
                anyhow::bail!("the context log holds no session {id:?}");
            }
            if json {
                let view = found(
                    SessionView::of_events(&id, &events, reader.record_max_tokens()),
                    &id,
                )?;
                return Ok(serde_json::to_string_pretty(&serde_json::json!({
                    "session": id, "events": events, "graph": view.graph,
                    "record": view.record.record, "budget": view.budget,
                }))?);
            }
            let lines: Result<Vec<String>, _> = events.iter().map(serde_json::to_string).collect();
            Ok(lines?.join("\n"))
        }
        ContextAction::Forget { id } => match reader.forget(&id)? {
            0 => anyhow::bail!("the context log holds no session {id:?}"),
            deleted => Ok(format!("forgot {id}: {deleted} events deleted")),
        },
    }
}

fn found(view: Option<SessionView>, id: &str) -> anyhow::Result<SessionView> {
    view.ok_or_else(|| anyhow::anyhow!("the context log holds no session {id:?}"))
}

/// A session for a terminal.
fn show(view: &SessionView) -> String {
    let graph: &SessionGraph = &view.graph;
    let mut out = format!(
        "session {} ({} requests, {} events)\n",
        view.summary.session, view.summary.requests, view.summary.events
    );
    let _ = writeln!(out, "episodes:");
    for episode in &graph.episodes {
        let local = episode
            .steps
            .iter()
            .filter(|s| s.local == Some(true))
            .count();
        let goal = episode.goal.as_deref().unwrap_or("(no user text)");
        let goal = glider_context::event::prefix(goal.lines().next().unwrap_or(""), 80);
        let _ = writeln!(
            out,
            "  {goal}  [{} requests, {local} local]",
            episode.steps.len()
        );
        for stop in episode.steps.iter().filter_map(|s| s.budget_stop.as_ref()) {
            let repeated = match (&stop.tool, stop.repeats) {
                (Some(tool), Some(repeats)) => format!(", {tool} called alike {repeats} times"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "    loop stopped by Glider: {} at turn {}{repeated}",
                stop.limit, stop.turns
            );
        }
        for run in &episode.delegate_runs {
            let ended = match (run.exit_code, &run.error) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(error)) => error.clone(),
                (None, None) => "did not exit".to_owned(),
            };
            let _ = writeln!(
                out,
                "    delegate run: {}, {ended}, {} ms",
                run.vendor, run.duration_ms
            );
        }
    }
    let _ = writeln!(out, "files:");
    for file in &graph.files {
        let ops: Vec<String> = file
            .changes
            .iter()
            .map(|c| format!("{:?}", c.op).to_lowercase())
            .collect();
        let _ = writeln!(out, "  {}  {}", file.path, ops.join(", "));
    }
    let _ = writeln!(out, "commands:");
    for command in &graph.commands {
        let status = match (command.exit_code, command.failed) {
            (Some(code), _) => format!("exit {code}"),
            (None, true) => "failed".to_owned(),
            (None, false) => "ok".to_owned(),
        };
        let _ = writeln!(out, "  {}  [{status}]", command.command);
    }
    let _ = writeln!(out, "open errors:");
    for error in graph.open_errors() {
        let _ = writeln!(out, "  {}: {}", error.subject, error.reason);
    }
    let _ = writeln!(out, "models:");
    for model in &graph.models {
        let _ = writeln!(
            out,
            "  {}/{}  {} requests, {} in / {} out tokens",
            model.backend, model.model, model.requests, model.input_tokens, model.output_tokens
        );
    }
    let budget = &view.budget;
    let _ = writeln!(
        out,
        "budget (from the log):\n  {} requests, {} in the newest episode, {:.0}% answered locally, {} loops stopped",
        budget.requests,
        budget.episode_requests,
        budget.local_share * 100.0,
        budget.stops
    );
    // The text a local model is given for this session.
    let _ = writeln!(out, "continuity record:");
    let _ = writeln!(out, "{}", view.record.text);
    out.trim_end().to_owned()
}
