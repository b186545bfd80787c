//! Delegation (spec package `vendors`): a message whose last user turn starts with
//! `/claude`, `/cursor-agent` or `/agy` is handed to that CLI instead of the pipeline.
//! This crate finds the CLIs, runs them headless (relaying their output as ngl stream
//! events) or in a console of their own, remembers each client session's delegate
//! session so a run continues, and relays the permissions a delegate was refused.

pub mod interactive;
pub mod run;
pub mod vendors;

use aho_corasick::AhoCorasick;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use glider_config::{DelegateConfig, DelegateMode};
use glider_ngl::stream::PartKind;
use glider_ngl::{Dialect, Part, Request, Role, StopReason, StreamEvent, Usage};
use glider_sys::runstate::DelegatePids;
use glider_vocab::{ContextSink, DelegatedRun};
use http::HeaderMap;

pub use run::{Denial, Events, Output, Report, RunEnd, RunSpec};
pub use vendors::{Discovered, Registry, Vendor, discover, locate};

/// Most client sessions whose delegate state is remembered.
const MAX_SESSIONS: usize = 4096;

/// A message taken for delegation: the reply to send instead of the pipeline's.
pub struct Delegation {
    /// Which CLI it went to.
    pub vendor: Vendor,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// The reply, as ngl events (encode with the front codec, or build a whole reply).
    pub events: Events,
}

impl std::fmt::Debug for Delegation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegation")
            .field("vendor", &self.vendor)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// Where a headless run's end is told: the context log, under the client's session.
struct Told {
    sink: Arc<dyn ContextSink>,
    session: String,
}

/// What Glider remembers about one client session's delegate (per vendor).
#[derive(Debug, Default)]
struct Client {
    /// The delegate's session id, to resume it.
    session: Option<String>,
    /// Tools the user allowed during this session (on top of the configured ones).
    allowed: Vec<String>,
    /// A permission question waiting for `/<cli> allow|deny`.
    ask: Option<Ask>,
}

/// Tool uses a delegate was refused, waiting for the user's answer.
#[derive(Debug)]
struct Ask {
    denials: Vec<Denial>,
    expires: Instant,
}

/// The delegate handler: shared by every request, it holds per client session the
/// delegate's session (so `/claude` again resumes the same run), the tools the user
/// allowed and any permission question still waiting for an answer.
#[derive(Debug, Default)]
pub struct Delegator {
    clients: Arc<Mutex<HashMap<String, Client>>>,
    pids: Option<DelegatePids>,
}

/// The flag and task found in a request's last user message.
#[derive(Debug, Clone, PartialEq)]
pub struct Flagged {
    /// The vendor the flag names.
    pub vendor: Vendor,
    /// The text after the flag, trimmed (may be empty).
    pub task: String,
}

/// The delegation flag of `request`: the first word of a text part of its last turn,
/// when that turn is the user's. System turns after it do not count: Claude Code ends
/// its messages with a `role: system` entry (its agent and skill listing). An unknown
/// `/word` is not a delegation.
pub fn find_flag(request: &Request) -> Option<Flagged> {
    let turn = request.last_turn().filter(|t| t.role == Role::User)?;
    turn.parts.iter().find_map(|part| {
        let Part::Text { text, .. } = part else {
            return None;
        };
        let trimmed = text.trim_start();
        let word = trimmed.split(char::is_whitespace).next()?;
        let vendor = Vendor::from_flag(word)?;
        Some(Flagged {
            vendor,
            task: trimmed[word.len()..].trim().to_owned(),
        })
    })
}

/// The user's answer to a permission question.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Allow,
    Deny,
}

impl Answer {
    fn parse(task: &str) -> Option<Answer> {
        match task.to_ascii_lowercase().as_str() {
            "allow" => Some(Answer::Allow),
            "deny" => Some(Answer::Deny),
            _ => None,
        }
    }
}

/// The permission rule that allows what `denial` asked for: a Bash command exactly
/// (`Bash(npm test)`), any other tool by name.
fn rule_for(denial: &Denial) -> String {
    match denial
        .input
        .get("command")
        .and_then(serde_json::Value::as_str)
    {
        Some(command) if denial.tool == "Bash" => format!("Bash({command})"),
        _ => denial.tool.clone(),
    }
}

impl Delegator {
    /// A handler with no remembered sessions that records nothing in runstate.
    pub fn new() -> Self {
        Delegator::default()
    }

    /// A handler that records each running delegate's process group in runstate.
    pub fn with_pids(pids: DelegatePids) -> Self {
        Delegator {
            pids: Some(pids),
            ..Delegator::default()
        }
    }

    /// Read or change what is remembered for client session `key`.
    fn client<T>(&self, key: &str, f: impl FnOnce(&mut Client) -> T) -> T {
        let mut map = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        remember(&mut map, key, f)
    }

    /// Take the request if it is a delegation (`None`: it goes to the pipeline). A body
    /// that does not decode is left to the pipeline, which reports it.
    pub fn take(
        &self,
        config: &DelegateConfig,
        front: Dialect,
        headers: &HeaderMap,
        body: &[u8],
        context: Option<Arc<dyn ContextSink>>,
    ) -> Option<Delegation> {
        if !config.enabled || !mentions_a_flag(body) {
            return None;
        }
        let request = glider_dialects::codec(front).decode_request(body).ok()?;
        let flagged = find_flag(&request)?;
        let session = glider_vocab::session_id(&request, headers);
        let told = context.map(|sink| Told {
            sink,
            session: session
                .clone()
                .unwrap_or_else(|| glider_vocab::UNSESSIONED.to_owned()),
        });
        let client_session = session.map(|s| format!("{}|{s}", flagged.vendor.binary()));
        let events = self.start(config, &flagged, client_session, told);
        Some(Delegation {
            vendor: flagged.vendor,
            stream: request.stream,
            events,
        })
    }

    fn start(
        &self,
        config: &DelegateConfig,
        flagged: &Flagged,
        client_session: Option<String>,
        told: Option<Told>,
    ) -> Events {
        let vendor = flagged.vendor;
        let label = vendor.binary();
        let Some(program) = locate(vendor, config) else {
            return note(
                label,
                format!(
                    "Glider: cannot delegate to {label}: it is not installed (looked for {} ; set delegate.{}.path).",
                    vendor
                        .settings(config)
                        .path
                        .clone()
                        .unwrap_or_else(|| format!("{label} on PATH")),
                    label.replace('-', "_")
                ),
            );
        };
        let Some(workdir) = config.workdir.as_deref().map(vendors::expand_home) else {
            return note(
                label,
                "Glider: set delegate.workdir to the directory a delegate may work in; Glider does not run one in its own working directory.".to_owned(),
            );
        };
        if !workdir.is_dir() {
            return note(
                label,
                format!(
                    "Glider: delegate.workdir {} is not a directory.",
                    workdir.display()
                ),
            );
        }
        if vendor.mode(config) == DelegateMode::Interactive {
            return interactive::launch(config, vendor, program, workdir, flagged.task.clone());
        }
        let key = client_session.as_deref();
        let (resume, allowed, task) = match self.prepare(config, vendor, key, &flagged.task) {
            Ok(prepared) => prepared,
            Err(text) => return note(label, text),
        };
        let settings = vendor.settings(config);
        let args = headless_args(vendor, settings, &allowed, resume.as_deref(), task);
        let spec = RunSpec {
            program,
            args,
            inherit: vendor.own_env(),
            env: settings.env.clone(),
            workdir,
            timeout: Duration::from_secs(config.timeout_secs.max(1)),
            max_output_bytes: config.max_output_bytes,
            label: label.to_owned(),
            output: vendor.output(),
            pids: self.pids.clone(),
        };
        tracing::info!(delegate = label, resume = resume.is_some(), workdir = %spec.workdir.display(), "delegating a message");
        let clients = self.clients.clone();
        let ttl = Duration::from_secs(config.ask_ttl_secs.max(1));
        let on_report: run::ReportSink = Box::new(move |report: Report| {
            if let Report::Ended(end) = &report {
                if let Some(told) = &told {
                    told.sink.delegated(&DelegatedRun {
                        session: &told.session,
                        vendor: label,
                        exit_code: end.exit_code,
                        error: end.error.as_deref(),
                        duration_ms: u64::try_from(end.duration.as_millis()).unwrap_or(u64::MAX),
                    });
                }
                return;
            }
            let Some(key) = &client_session else { return };
            let mut map = clients.lock().unwrap_or_else(|p| p.into_inner());
            remember(&mut map, key, |client| match report {
                Report::Session(id) => client.session = Some(id),
                Report::Denied(denials) => {
                    client.ask = Some(Ask {
                        denials,
                        expires: Instant::now() + ttl,
                    });
                }
                Report::Ended(_) => {}
            });
        });
        match run::start(spec, on_report) {
            Ok(events) => events,
            Err(error) => Box::pin(futures_util::stream::iter([StreamEvent::Error { error }])),
        }
    }

    /// What a headless run resumes, which tools it may use and the prompt it gets; or
    /// the note to reply with instead. `/<cli> allow|deny` answers a waiting question.
    fn prepare(
        &self,
        config: &DelegateConfig,
        vendor: Vendor,
        key: Option<&str>,
        task: &str,
    ) -> Result<(Option<String>, Vec<String>, String), String> {
        let flag = vendor.flag();
        let answer = Answer::parse(task);
        let (resume, mut allowed, ask) = match key {
            Some(key) => self.client(key, |client| {
                // Any new message answers or drops a waiting question.
                let ask = client.ask.take().filter(|a| a.expires > Instant::now());
                if answer == Some(Answer::Allow)
                    && let Some(ask) = &ask
                {
                    for rule in ask.denials.iter().map(rule_for) {
                        if !client.allowed.contains(&rule) {
                            client.allowed.push(rule);
                        }
                    }
                }
                (client.session.clone(), client.allowed.clone(), ask)
            }),
            None => (None, Vec::new(), None),
        };
        let mut configured = vendor.settings(config).allowed_tools.clone();
        configured.append(&mut allowed);
        let prompt = match (answer, ask) {
            (Some(_), None) => {
                return Err(format!(
                    "Glider: no permission question from {} is waiting in this session ({flag} allow|deny answers one within {}s of the question; delegate.ask_ttl_secs).",
                    vendor.binary(),
                    config.ask_ttl_secs
                ));
            }
            (Some(answer), Some(ask)) => {
                let asked: Vec<String> = ask.denials.iter().map(Denial::describe).collect();
                match answer {
                    Answer::Allow => format!(
                        "The user granted the permission you asked for ({}). Continue the task.",
                        asked.join("; ")
                    ),
                    Answer::Deny => format!(
                        "The user refused the permission you asked for ({}). Do not use it; continue the task without it, or say what you need instead.",
                        asked.join("; ")
                    ),
                }
            }
            (None, _) if !task.is_empty() => task.to_owned(),
            (None, _) if resume.is_some() => "continue".to_owned(),
            (None, _) => {
                return Err(format!(
                    "Glider: usage: {flag} <task> — the rest of the message is the task; {flag} again continues the run."
                ));
            }
        };
        Ok((resume, configured, prompt))
    }
}

/// A headless run's arguments: the configured ones, the CLI's machine-readable mode,
/// the permission policy, the session to resume and the task.
fn headless_args(
    vendor: Vendor,
    settings: &glider_config::DelegateVendorConfig,
    allowed: &[String],
    resume: Option<&str>,
    task: String,
) -> Vec<String> {
    let mut args = settings.args.clone();
    let owned = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    match vendor {
        Vendor::Claude => {
            args.extend(owned(&[
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
            ]));
            if !allowed.is_empty() {
                args.extend(["--allowedTools".to_owned(), allowed.join(",")]);
            }
            if settings.allow_all_tools {
                args.push("--dangerously-skip-permissions".to_owned());
            }
        }
        Vendor::CursorAgent => {
            args.extend(owned(&["-p", "--output-format", "stream-json"]));
            if settings.allow_all_tools {
                args.push("--force".to_owned());
            }
        }
        Vendor::Agy => {}
    }
    if vendor.output() == Output::Text {
        // agy's prompt is the value of its `-p`/`--print` flag (Go-style flags, no
        // session id). Joined to the flag as `--print=<task>`, a task that starts with
        // `-` cannot be taken for an option by any flag parser; a `--` here would
        // become the prompt itself.
        args.push(format!("--print={task}"));
    } else {
        if let Some(id) = resume {
            args.extend(["--resume".to_owned(), id.to_owned()]);
        }
        args.extend(["--".to_owned(), task]);
    }
    args
}

/// Run `f` on the entry for `key`, creating it (and forgetting every entry when the
/// map is full: a crude bound that keeps memory flat).
fn remember<T>(
    map: &mut HashMap<String, Client>,
    key: &str,
    f: impl FnOnce(&mut Client) -> T,
) -> T {
    if map.len() >= MAX_SESSIONS && !map.contains_key(key) {
        map.clear();
    }
    f(map.entry(key.to_owned()).or_default())
}

/// Whether `body` could hold a delegation flag at all (JSON's escaped `\/claude` holds
/// `/claude` too): a cheap scan that spares every ordinary request a second decode.
/// One pass for every flag (a vectorised multi-pattern search, built once): a search
/// per flag read an 80 KB body three times.
fn mentions_a_flag(body: &[u8]) -> bool {
    static FLAGS: LazyLock<AhoCorasick> = LazyLock::new(|| {
        AhoCorasick::new(Vendor::ALL.iter().map(|vendor| vendor.flag()))
            .expect("three short literal flags build a searcher")
    });
    FLAGS.is_match(body)
}

/// A short reply from Glider itself (no CLI ran), as a complete event stream.
fn note(model: &str, text: String) -> Events {
    Box::pin(futures_util::stream::iter(note_events(model, text)))
}

/// The events of a short reply from Glider itself.
pub(crate) fn note_events(model: &str, text: String) -> [StreamEvent; 5] {
    [
        StreamEvent::Start {
            id: "msg_delegate_note".to_owned(),
            model: model.to_owned(),
            usage: Usage::default(),
        },
        StreamEvent::PartStart {
            index: 0,
            kind: PartKind::Text,
        },
        StreamEvent::TextDelta { index: 0, text },
        StreamEvent::PartStop { index: 0 },
        StreamEvent::Finish {
            stop_reason: StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage::default(),
        },
    ]
}

/// The resolved working directory a delegate would run in, if configured.
pub fn workdir(config: &DelegateConfig) -> Option<PathBuf> {
    config.workdir.as_deref().map(vendors::expand_home)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefilter_sees_plain_and_escaped_flags_only() {
        assert!(mentions_a_flag(
            br#"{"messages":[{"role":"user","content":"/claude hi"}]}"#
        ));
        assert!(mentions_a_flag(br#"{"input":"\/agy go"}"#));
        for vendor in Vendor::ALL {
            let body = format!(r#"{{"input":"x {} go"}}"#, vendor.flag());
            assert!(mentions_a_flag(body.as_bytes()), "{}", vendor.flag());
        }
        assert!(!mentions_a_flag(
            br#"{"messages":[{"role":"user","content":"claude hi"}]}"#
        ));
    }

    #[test]
    fn the_flag_is_the_first_word_of_the_last_user_turn() {
        let request = |turns: Vec<(Role, &str)>| Request {
            turns: turns
                .into_iter()
                .map(|(role, text)| glider_ngl::Turn {
                    role,
                    parts: vec![Part::Text {
                        text: text.to_owned(),
                        cache_control: None,
                    }],
                })
                .collect(),
            ..Request::default()
        };
        assert_eq!(
            find_flag(&request(vec![(Role::User, "  /claude  fix it \n")])),
            Some(Flagged {
                vendor: Vendor::Claude,
                task: "fix it".into()
            })
        );
        // Not the first word, not the last turn, or glued to more letters: no flag.
        assert_eq!(
            find_flag(&request(vec![(Role::User, "please /claude fix")])),
            None
        );
        assert_eq!(
            find_flag(&request(vec![
                (Role::User, "/claude x"),
                (Role::Assistant, "ok")
            ])),
            None
        );
        assert_eq!(
            find_flag(&request(vec![(Role::User, "/claudex fix")])),
            None
        );
        // A system entry after the user's message (as Claude Code sends) is not a turn.
        assert_eq!(
            find_flag(&request(vec![
                (Role::User, "/agy look"),
                (Role::System, "Available agent types")
            ]))
            .map(|f| f.vendor),
            Some(Vendor::Agy)
        );
    }
}
