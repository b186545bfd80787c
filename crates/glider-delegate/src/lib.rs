//! Delegation (spec package `vendors`): a message whose last user turn starts with
//! `/claude`, `/cursor-agent` or `/agy` is handed to that CLI instead of the pipeline.
//! This crate finds the CLIs, runs them headless, relays their output as ngl stream
//! events and remembers each client session's delegate session so a run continues.

pub mod run;
pub mod vendors;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use glider_config::DelegateConfig;
use glider_ngl::stream::PartKind;
use glider_ngl::{Dialect, Part, Request, Role, StopReason, StreamEvent, Usage};
use http::HeaderMap;

pub use run::{Events, GroupGuard, RunSpec};
pub use vendors::{Discovered, Vendor, discover, locate};

/// Most client sessions whose delegate session is remembered.
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

/// The delegate handler: shared by every request, it holds only the map from client
/// session to delegate session (so `/claude` again resumes the same run).
#[derive(Debug, Default)]
pub struct Delegator {
    sessions: Arc<Mutex<HashMap<String, String>>>,
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
/// when that turn is the user's. An unknown `/word` is not a delegation.
pub fn find_flag(request: &Request) -> Option<Flagged> {
    let turn = request.turns.last().filter(|t| t.role == Role::User)?;
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

impl Delegator {
    /// A handler with no remembered sessions.
    pub fn new() -> Self {
        Delegator::default()
    }

    /// The delegate session remembered for `key`, if any.
    fn remembered(&self, key: &str) -> Option<String> {
        self.sessions.lock().ok()?.get(key).cloned()
    }

    /// Take the request if it is a delegation (`None`: it goes to the pipeline). A body
    /// that does not decode is left to the pipeline, which reports it.
    pub fn take(
        &self,
        config: &DelegateConfig,
        front: Dialect,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<Delegation> {
        if !config.enabled || !mentions_a_flag(body) {
            return None;
        }
        let request = glider_vendors::codec(front).decode_request(body).ok()?;
        let flagged = find_flag(&request)?;
        let client_session = glider_engine::router::sticky::session_id(&request, headers)
            .map(|s| format!("{}|{s}", flagged.vendor.binary()));
        let events = self.start(config, &flagged, client_session);
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
    ) -> Events {
        let vendor = flagged.vendor;
        let label = vendor.binary();
        if vendor != Vendor::Claude {
            return note(
                label,
                format!(
                    "Glider: {} delegation is not available in this build yet; only /claude runs headless.",
                    vendor.flag()
                ),
            );
        }
        let Some(program) = locate(vendor, config) else {
            return note(
                label,
                format!(
                    "Glider: cannot delegate to {label}: it is not installed (looked for {} ; set delegate.{label}.path).",
                    vendor
                        .settings(config)
                        .path
                        .clone()
                        .unwrap_or_else(|| format!("{label} on PATH"))
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
        let resume = client_session.as_deref().and_then(|k| self.remembered(k));
        let task = match (flagged.task.is_empty(), &resume) {
            (false, _) => flagged.task.clone(),
            (true, Some(_)) => "continue".to_owned(),
            (true, None) => {
                return note(
                    label,
                    format!(
                        "Glider: usage: {} <task> — the rest of the message is the task; {} again continues the run.",
                        vendor.flag(),
                        vendor.flag()
                    ),
                );
            }
        };
        let settings = vendor.settings(config);
        let mut args = settings.args.clone();
        args.extend(
            ["-p", "--output-format", "stream-json", "--verbose"]
                .into_iter()
                .map(str::to_owned),
        );
        if let Some(id) = &resume {
            args.extend(["--resume".to_owned(), id.clone()]);
        }
        args.extend(["--".to_owned(), task]);
        let spec = RunSpec {
            program,
            args,
            env: settings.env.clone(),
            workdir,
            timeout: Duration::from_secs(config.timeout_secs.max(1)),
            max_output_bytes: config.max_output_bytes,
            label: label.to_owned(),
        };
        tracing::info!(delegate = label, resume = resume.is_some(), workdir = %spec.workdir.display(), "delegating a message");
        let sessions = self.sessions.clone();
        let on_session: run::SessionSink = Box::new(move |id: &str| {
            let Some(key) = &client_session else { return };
            if let Ok(mut map) = sessions.lock() {
                if map.len() >= MAX_SESSIONS && !map.contains_key(key) {
                    map.clear();
                }
                map.insert(key.clone(), id.to_owned());
            }
        });
        match run::start_stream_json(spec, on_session) {
            Ok(events) => events,
            Err(error) => Box::pin(futures_util::stream::iter([StreamEvent::Error { error }])),
        }
    }
}

/// Whether `body` could hold a delegation flag at all (JSON's escaped `\/claude` holds
/// `/claude` too): a cheap scan that spares every ordinary request a second decode.
fn mentions_a_flag(body: &[u8]) -> bool {
    Vendor::ALL.iter().any(|vendor| {
        let flag = vendor.flag().as_bytes();
        body.windows(flag.len()).any(|window| window == flag)
    })
}

/// A short reply from Glider itself (no CLI ran), as a complete event stream.
fn note(model: &str, text: String) -> Events {
    Box::pin(futures_util::stream::iter([
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
            usage: Usage::default(),
        },
    ]))
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
    }
}
