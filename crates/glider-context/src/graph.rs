//! The entity graph of a session: a fold over its events, so replaying the log rebuilds
//! it exactly. Episodes (a root user turn and its follow-ons) with their requests;
//! files read, edited, created or deleted; commands with their exit status; errors,
//! closed by a later success of the same command or on the same file; and the models
//! and backends that answered. Facts carry validity: each file change records when a
//! later one superseded it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::event::{EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult};
use crate::store::Stored;
use crate::tools::{self, Action, FileOp};

/// One session, folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionGraph {
    pub session: String,
    pub episodes: Vec<Episode>,
    pub files: Vec<FileFact>,
    pub commands: Vec<CommandFact>,
    pub errors: Vec<ErrorFact>,
    pub models: Vec<ModelUse>,
}

/// One root user turn and everything that followed it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Episode {
    /// The root request's key.
    pub family: String,
    pub started_ms: u64,
    /// The user's words that began it (up to 4 KiB).
    pub goal: Option<String>,
    pub steps: Vec<Step>,
}

/// One request of an episode.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Step {
    pub request: String,
    pub at_ms: u64,
    pub door: String,
    pub model: String,
    pub rule: String,
    pub reason: String,
    /// Who answered (`origin` for the CLI's own cloud), once the reply ended.
    pub backend: Option<String>,
    pub local: Option<bool>,
    pub status: Option<u16>,
    pub estimated_tokens: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub stop_reason: Option<String>,
    /// The tools the reply called.
    pub tool_calls: Vec<String>,
}

/// What is known of one file; `changes` oldest first, the last one current.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FileFact {
    pub path: String,
    pub changes: Vec<FileChange>,
}

/// One thing done to a file, valid until `superseded_ms` when a later change came.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileChange {
    pub op: FileOp,
    pub at_ms: u64,
    pub call_id: String,
    pub family: Option<String>,
    pub superseded_ms: Option<u64>,
}

/// A shell command the CLI ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandFact {
    pub command: String,
    pub call_id: String,
    pub at_ms: u64,
    pub family: Option<String>,
    pub exit_code: Option<i32>,
    pub failed: bool,
}

/// A failing tool result, open until a later success of the same command or tool on
/// the same file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorFact {
    /// The command, or the tool and file, that failed.
    pub subject: String,
    pub reason: String,
    pub call_id: String,
    pub opened_ms: u64,
    pub family: Option<String>,
    pub closed_ms: Option<u64>,
    pub closed_by: Option<String>,
}

/// Requests a backend and model answered, and their tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelUse {
    pub backend: String,
    pub model: String,
    pub local: bool,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl SessionGraph {
    /// The files whose latest change is an edit, creation or deletion.
    pub fn edited_files(&self) -> Vec<&str> {
        self.files
            .iter()
            .filter(|f| f.changes.iter().any(|c| c.op != FileOp::Read))
            .map(|f| f.path.as_str())
            .collect()
    }

    /// The errors no later success closed.
    pub fn open_errors(&self) -> impl Iterator<Item = &ErrorFact> {
        self.errors.iter().filter(|e| e.closed_ms.is_none())
    }
}

/// Fold `events` (one session's, oldest first) into its graph.
pub fn fold(session: &str, events: &[Stored]) -> SessionGraph {
    let mut folder = Folder {
        graph: SessionGraph {
            session: session.to_owned(),
            ..SessionGraph::default()
        },
        ..Folder::default()
    };
    for stored in events {
        let at_ms = stored.event.at_ms;
        let family = stored.family.clone();
        match &stored.event.body {
            EventBody::Request(request) => folder.request(request, at_ms, family),
            EventBody::Reply(reply) => folder.reply(reply, at_ms),
            _ => {}
        }
    }
    let mut graph = folder.graph;
    graph.files = folder.files.into_values().collect();
    graph.models = folder.models.into_values().collect();
    graph
}

#[derive(Default)]
struct Folder {
    graph: SessionGraph,
    /// Calls seen (in replies or request history) by id, waiting for their result.
    calls: HashMap<String, ToolCall>,
    /// Call ids whose result was already folded (history repeats them).
    resulted: std::collections::HashSet<String>,
    files: BTreeMap<String, FileFact>,
    models: BTreeMap<(String, String), ModelUse>,
    /// Request key → (episode index, step index).
    steps: HashMap<String, (usize, usize)>,
}

impl Folder {
    fn request(&mut self, request: &RequestEvent, at_ms: u64, family: Option<String>) {
        for call in &request.tool_calls {
            self.calls
                .entry(call.id.clone())
                .or_insert_with(|| call.clone());
        }
        for result in &request.tool_results {
            self.result(result, at_ms, family.clone());
        }
        let family_key = family.clone().unwrap_or_else(|| request.request.clone());
        let episode = match self
            .graph
            .episodes
            .iter()
            .position(|e| e.family == family_key)
        {
            Some(index) => index,
            None => {
                self.graph.episodes.push(Episode {
                    family: family_key,
                    started_ms: at_ms,
                    goal: None,
                    steps: Vec::new(),
                });
                self.graph.episodes.len() - 1
            }
        };
        let episode_ref = &mut self.graph.episodes[episode];
        if episode_ref.goal.is_none() && request.root {
            episode_ref.goal = request.user_text.clone();
        }
        episode_ref.steps.push(Step {
            request: request.request.clone(),
            at_ms,
            door: request.door.clone(),
            model: request.model.clone(),
            rule: request.rule.clone(),
            reason: request.reason.clone(),
            estimated_tokens: request.estimated_tokens,
            ..Step::default()
        });
        self.steps.insert(
            request.request.clone(),
            (episode, episode_ref.steps.len() - 1),
        );
    }

    fn reply(&mut self, reply: &ReplyEvent, _at_ms: u64) {
        for call in &reply.tool_calls {
            self.calls
                .entry(call.id.clone())
                .or_insert_with(|| call.clone());
        }
        if let Some(&(episode, step)) = self.steps.get(&reply.request) {
            let step = &mut self.graph.episodes[episode].steps[step];
            step.backend = reply.backend.clone();
            step.local = reply.local;
            step.status = reply.status;
            step.input_tokens = reply.input_tokens;
            step.output_tokens = reply.output_tokens;
            step.stop_reason = reply.stop_reason.clone();
            step.tool_calls = reply.tool_calls.iter().map(|c| c.name.clone()).collect();
        }
        if let (Some(backend), Some(model)) = (&reply.backend, &reply.model) {
            let entry = self
                .models
                .entry((backend.clone(), model.clone()))
                .or_insert_with(|| ModelUse {
                    backend: backend.clone(),
                    model: model.clone(),
                    local: reply.local.unwrap_or(false),
                    ..ModelUse::default()
                });
            entry.requests += 1;
            entry.input_tokens += reply.input_tokens;
            entry.output_tokens += reply.output_tokens;
        }
    }

    fn result(&mut self, result: &ToolResult, at_ms: u64, family: Option<String>) {
        if !self.resulted.insert(result.call_id.clone()) {
            return;
        }
        let Some(call) = self.calls.get(&result.call_id) else {
            return;
        };
        let outcome = tools::outcome(result.is_error, &result.text);
        let call_id = call.id.clone();
        match tools::action(&call.name, &call.arguments) {
            Action::Read { path } => {
                if outcome.failed {
                    self.open_error(
                        format!("{} {path}", call.name),
                        &outcome,
                        &call_id,
                        at_ms,
                        family,
                    );
                } else {
                    self.close_errors(&format!("{} {path}", call.name), &call_id, at_ms);
                    self.file_change(&path, FileOp::Read, &call_id, at_ms, family);
                }
            }
            Action::Edit { files } => {
                let name = call.name.clone();
                for (path, op) in files {
                    let subject = format!("{name} {path}");
                    if outcome.failed {
                        self.open_error(subject, &outcome, &call_id, at_ms, family.clone());
                    } else {
                        self.close_errors(&subject, &call_id, at_ms);
                        let op = match op {
                            FileOp::Written if !self.files.contains_key(&path) => FileOp::Created,
                            op => op,
                        };
                        self.file_change(&path, op, &call_id, at_ms, family.clone());
                    }
                }
            }
            Action::Command { command } => {
                if outcome.failed {
                    self.open_error(command.clone(), &outcome, &call_id, at_ms, family.clone());
                } else {
                    self.close_errors(&command, &call_id, at_ms);
                }
                self.graph.commands.push(CommandFact {
                    command,
                    call_id,
                    at_ms,
                    family,
                    exit_code: outcome.exit_code,
                    failed: outcome.failed,
                });
            }
            Action::Other => {
                if outcome.failed {
                    self.open_error(call.name.clone(), &outcome, &call_id, at_ms, family);
                }
            }
        }
    }

    fn file_change(
        &mut self,
        path: &str,
        op: FileOp,
        call_id: &str,
        at_ms: u64,
        family: Option<String>,
    ) {
        let fact = self
            .files
            .entry(path.to_owned())
            .or_insert_with(|| FileFact {
                path: path.to_owned(),
                changes: Vec::new(),
            });
        // A read does not supersede what an edit made of the file; an edit supersedes
        // everything known before it.
        if op != FileOp::Read {
            for change in fact
                .changes
                .iter_mut()
                .filter(|c| c.superseded_ms.is_none())
            {
                change.superseded_ms = Some(at_ms);
            }
        }
        fact.changes.push(FileChange {
            op,
            at_ms,
            call_id: call_id.to_owned(),
            family,
            superseded_ms: None,
        });
    }

    fn open_error(
        &mut self,
        subject: String,
        outcome: &tools::Outcome,
        call_id: &str,
        at_ms: u64,
        family: Option<String>,
    ) {
        self.graph.errors.push(ErrorFact {
            subject,
            reason: outcome.reason.clone().unwrap_or_default(),
            call_id: call_id.to_owned(),
            opened_ms: at_ms,
            family,
            closed_ms: None,
            closed_by: None,
        });
    }

    fn close_errors(&mut self, subject: &str, call_id: &str, at_ms: u64) {
        for error in self
            .graph
            .errors
            .iter_mut()
            .filter(|e| e.closed_ms.is_none() && e.subject == subject)
        {
            error.closed_ms = Some(at_ms);
            error.closed_by = Some(call_id.to_owned());
        }
    }
}
