//! contextkit (spec package `contextkit`): what each session and its current episode
//! have spent, kept in memory (the request path reads it; no database is touched), and
//! the limits on it — the per-episode turn budget and the repeated-tool-call guard. An
//! episode is one root user turn and every request after it (tool loop, titles, and a
//! subagent's prompt, which arrives while the family still waits on a tool's result),
//! the same rule the context log uses for its turn families. What this module decides
//! is carried out by the `budget` pipeline phase; it never waits and never fails a
//! request.

use std::sync::Mutex;

use foldhash::{HashMap, HashSet};

use glider_config::ContextConfig;
use glider_ngl::{Part, Request, Role};
use serde_json::Value;

use glider_vocab::user_words::has_user_words;
use glider_vocab::{
    BudgetStop, ReplyToolCall, RequestRecord, SessionBudget, Spend, StopLimit, newest_turns,
    tool_calls_of,
};

/// Sessions kept in memory; past this the least recently used one is forgotten.
const MAX_SESSIONS: usize = 4096;
/// Tool call ids remembered per session (awaited) and per episode (counted).
const MAX_CALL_IDS: usize = 1024;

/// What the budget phase does with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Send it on.
    Go,
    /// Send it with a wrap-up note for the model (the soft limit is reached).
    WrapUp(String),
    /// Answer it with a final reply.
    Stop(BudgetStop),
}

/// A request admitted to its episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// The episode's id: the bus id of its root request.
    pub family: u64,
    pub verdict: Verdict,
}

#[derive(Default)]
struct Episode {
    family: u64,
    spend: Spend,
    /// Times each tool call (name and canonical arguments) was made.
    calls: HashMap<String, u32>,
    /// Call ids already counted in `calls` (each request repeats the last turn).
    counted: HashSet<String>,
}

#[derive(Default)]
struct SessionState {
    /// For eviction: the tick of the last request.
    used: u64,
    total: Spend,
    episode: Option<Episode>,
    /// Tool call ids of replies whose results have not come back yet.
    awaiting: Vec<String>,
    stops: u32,
}

#[derive(Default)]
struct Sessions {
    map: HashMap<String, SessionState>,
    tick: u64,
}

/// Every session's spend, shared by all requests of the engine.
#[derive(Default)]
pub struct ContextKit {
    sessions: Mutex<Sessions>,
}

impl ContextKit {
    /// Count `request` (bus id `request_id`) in its session's episode and say what is
    /// done with it under `config`'s limits.
    pub fn admit(
        &self,
        session: &str,
        request_id: u64,
        request: &Request,
        config: &ContextConfig,
    ) -> Admission {
        let newest = Newest::of(request);
        let mut sessions = self.lock();
        let state = sessions.entry(session);
        for id in &newest.result_ids {
            state.awaiting.retain(|awaited| awaited != id);
        }
        let root = newest.user_text && newest.result_ids.is_empty() && state.awaiting.is_empty();
        if root || state.episode.is_none() {
            state.episode = Some(Episode {
                family: request_id,
                ..Episode::default()
            });
        }
        state.total.turns += 1;
        let Some(episode) = state.episode.as_mut() else {
            return Admission {
                family: request_id,
                verdict: Verdict::Go,
            };
        };
        episode.spend.turns += 1;
        let turns = episode.spend.turns;
        let mut repeated: Option<(String, u32)> = None;
        for call in &newest.calls {
            let key = call_key(call.name, call.arguments);
            let count = if episode.counted.len() < MAX_CALL_IDS
                && episode.counted.insert(call.id.to_owned())
            {
                let count = episode.calls.entry(key).or_default();
                *count += 1;
                *count
            } else {
                episode.calls.get(&key).copied().unwrap_or(0)
            };
            if repeated.as_ref().is_none_or(|(_, most)| count > *most) {
                repeated = Some((call.name.to_owned(), count));
            }
        }
        let family = episode.family;
        let verdict = verdict(config, turns, repeated);
        if matches!(verdict, Verdict::Stop(_)) {
            state.stops += 1;
        }
        Admission { family, verdict }
    }

    /// A request of `session`'s episode `family` ended: count its tokens, and remember
    /// the tool calls its reply made (their results, and a subagent's prompt, are
    /// still of this episode).
    pub fn finished(
        &self,
        session: &str,
        family: u64,
        record: &RequestRecord,
        calls: &[ReplyToolCall],
    ) {
        let mut sessions = self.lock();
        let state = sessions.entry(session);
        state.total.finished(record);
        if let Some(episode) = state.episode.as_mut().filter(|e| e.family == family) {
            episode.spend.finished(record);
        }
        if record.status == Some(200) {
            state.awaiting.extend(calls.iter().map(|c| c.id.clone()));
            let excess = state.awaiting.len().saturating_sub(MAX_CALL_IDS);
            state.awaiting.drain(..excess);
        }
    }

    /// `session`'s spend, if it is still remembered.
    pub fn session(&self, session: &str) -> Option<SessionBudget> {
        let sessions = self.lock();
        let state = sessions.map.get(session)?;
        Some(SessionBudget {
            session: session.to_owned(),
            local_share: state.total.local_share(),
            total: state.total.clone(),
            episode: state.episode.as_ref().map(|e| e.family),
            episode_spend: state
                .episode
                .as_ref()
                .map(|e| e.spend.clone())
                .unwrap_or_default(),
            stops: state.stops,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Sessions {
    /// `session`'s state, made (and the least recently used one forgotten at the cap)
    /// when it is new.
    fn entry(&mut self, session: &str) -> &mut SessionState {
        self.tick += 1;
        if self.map.len() >= MAX_SESSIONS
            && !self.map.contains_key(session)
            && let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
        {
            self.map.remove(&oldest);
        }
        // A known session (nearly every request) is found without copying its key:
        // an allocation a request, twice (admitted, then finished).
        let tick = self.tick;
        if !self.map.contains_key(session) {
            self.map.insert(session.to_owned(), SessionState::default());
        }
        let state = self.map.get_mut(session).expect("present or just inserted");
        state.used = tick;
        state
    }
}

/// The limits applied to an episode's `turns`-th request whose tool calls' highest
/// repeat count is `repeated`. The loop guard speaks first: it names the cause.
fn verdict(config: &ContextConfig, turns: u32, repeated: Option<(String, u32)>) -> Verdict {
    let guard = &config.loop_guard;
    if guard.enabled
        && let Some((tool, count)) = repeated
        && count >= guard.repeats
    {
        return Verdict::Stop(BudgetStop {
            limit: StopLimit::LoopGuard,
            turns,
            message: format!(
                "Glider stopped this agent loop: the tool `{tool}` was called {count} times \
                 with the same arguments in this episode (context.loop_guard.repeats is {}). \
                 Send a new message to go on differently, or raise context.loop_guard.repeats \
                 (or set context.loop_guard.enabled: false) in Glider's config.",
                guard.repeats
            ),
            tool: Some(tool),
            repeats: Some(count),
        });
    }
    let budget = &config.turn_budget;
    if let Some(hard) = budget.hard
        && turns > hard
    {
        return Verdict::Stop(BudgetStop {
            limit: StopLimit::TurnBudget,
            turns,
            message: format!(
                "Glider stopped this agent loop: this episode used its turn budget of {hard} \
                 model turns (context.turn_budget.hard). Send a new message to start a new \
                 episode, or raise context.turn_budget.hard in Glider's config."
            ),
            tool: None,
            repeats: None,
        });
    }
    match budget.soft {
        Some(soft) if turns >= soft => Verdict::WrapUp(wrap_up_note(turns, budget.hard)),
        _ => Verdict::Go,
    }
}

/// The note a model gets once the soft limit is reached.
fn wrap_up_note(turns: u32, hard: Option<u32>) -> String {
    let left = match hard {
        Some(hard) => format!(" of at most {hard}"),
        None => String::new(),
    };
    format!(
        "Turn budget (from Glider): this is model turn {turns}{left} in this task, and the \
         budget is nearly spent. Wrap up now: finish with what you have, or summarize what is \
         done and what is left, and start no new tool calls unless they are needed to finish."
    )
}

/// What the newest turns of a request carry: the tool calls of the newest assistant
/// turn, the ids of the tool results after it, and whether the user wrote text there.
struct Newest<'a> {
    calls: Vec<NewestCall<'a>>,
    result_ids: Vec<&'a str>,
    user_text: bool,
}

struct NewestCall<'a> {
    id: &'a str,
    name: &'a str,
    arguments: &'a Value,
}

impl<'a> Newest<'a> {
    fn of(request: &'a Request) -> Newest<'a> {
        let (assistant, after) = newest_turns(request);
        let mut newest = Newest {
            calls: tool_calls_of(assistant)
                .map(|(id, name, arguments)| NewestCall {
                    id,
                    name,
                    arguments,
                })
                .collect(),
            result_ids: Vec::new(),
            user_text: false,
        };
        for turn in after
            .iter()
            .filter(|t| matches!(t.role, Role::User | Role::Tool))
        {
            for part in &turn.parts {
                match part {
                    Part::ToolResult { call_id, .. } => newest.result_ids.push(call_id),
                    // Only the user's own words open an episode, never a CLI's
                    // injected blocks alone (the context sink reads them alike).
                    Part::Text { text, .. } if has_user_words(text) => newest.user_text = true,
                    _ => {}
                }
            }
        }
        newest
    }
}

/// A tool call's identity for the loop guard: its name and its arguments with object
/// keys sorted (a model may write the same arguments in another order); arguments a
/// model wrote as unparsable text count as that text.
fn call_key(name: &str, arguments: &Value) -> String {
    let mut key = String::with_capacity(name.len() + 64);
    key.push_str(name);
    key.push('\0');
    canonical(arguments, &mut key);
    key
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for key in keys {
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(value) = map.get(key) {
                    canonical(value, out);
                }
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::String(text) => {
            // Arguments kept as text: parse them when they are JSON, so a stream's
            // joined fragments and a parsed object of the same call agree.
            match serde_json::from_str::<Value>(text) {
                Ok(parsed) if parsed.is_object() => canonical(&parsed, out),
                _ => out.push_str(&value.to_string()),
            }
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Why [`LoopBudget`] ended a tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopLimit {
    /// `tools.loop.max_turns` model turns called tools.
    Turns,
    /// `tools.loop.max_secs` went by.
    Time,
    /// `tools.loop.max_calls_per_request` calls ran.
    Calls,
}

/// The turn and time budget of one tool loop: each model turn that calls tools spends
/// one turn; the loop may not run past its deadline.
#[derive(Debug, Clone)]
pub struct LoopBudget {
    max_turns: u32,
    turns: u32,
    deadline: std::time::Instant,
}

impl LoopBudget {
    pub fn new(max_turns: u32, max_secs: f64) -> Self {
        LoopBudget {
            max_turns,
            turns: 0,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs_f64(max_secs),
        }
    }

    /// Model turns that called tools so far.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Spend a turn on the model's tool calls, or say which limit forbids it.
    pub fn spend_turn(&mut self) -> Result<(), LoopLimit> {
        if self.turns >= self.max_turns {
            return Err(LoopLimit::Turns);
        }
        if self.time_left().is_zero() {
            return Err(LoopLimit::Time);
        }
        self.turns += 1;
        Ok(())
    }

    /// Time left before the deadline.
    pub fn time_left(&self) -> std::time::Duration {
        self.deadline
            .saturating_duration_since(std::time::Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use glider_config::{LoopGuard, TurnBudget};
    use glider_ngl::{Turn, Usage};
    use glider_vocab::BackendTokens;
    use serde_json::json;

    use super::*;

    fn config(soft: Option<u32>, hard: Option<u32>, repeats: u32) -> ContextConfig {
        ContextConfig {
            turn_budget: TurnBudget { soft, hard },
            loop_guard: LoopGuard {
                enabled: true,
                repeats,
            },
            ..ContextConfig::default()
        }
    }

    fn user(text: &str) -> Request {
        Request {
            model: "m".into(),
            turns: vec![Turn::text(Role::User, text)],
            ..Request::default()
        }
    }

    /// The follow-on of `call` (id, tool, arguments) with its result.
    fn follow_on(id: &str, tool: &str, arguments: Value) -> Request {
        let mut request = user("go");
        request.turns.push(Turn {
            role: Role::Assistant,
            parts: vec![Part::ToolCall {
                id: id.into(),
                name: tool.into(),
                arguments,
            }],
        });
        request.turns.push(Turn {
            role: Role::Tool,
            parts: vec![Part::ToolResult {
                call_id: id.into(),
                name: Some(tool.into()),
                content: vec![Part::text("ok")],
                is_error: false,
            }],
        });
        request
    }

    fn record(backend: &str, local: bool, input: u64, output: u64) -> RequestRecord {
        let bus = crate::events::Bus::default();
        let mut tracker = bus.start("gateway", glider_ngl::Dialect::Anthropic, None);
        tracker.record.backend = Some(backend.into());
        tracker.record.local = Some(local);
        tracker.record.status = Some(200);
        tracker.record.usage = Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        };
        let record = tracker.record.clone();
        tracker.forget();
        record
    }

    #[test]
    fn the_soft_limit_adds_a_note_and_past_the_hard_one_the_loop_stops() {
        let kit = ContextKit::default();
        let config = config(Some(2), Some(3), 5);
        let first = kit.admit("s", 1, &user("fix it"), &config);
        assert_eq!(
            first,
            Admission {
                family: 1,
                verdict: Verdict::Go
            }
        );
        let second = kit.admit("s", 2, &follow_on("a", "Read", json!({"p": 1})), &config);
        assert_eq!(second.family, 1);
        let Verdict::WrapUp(note) = second.verdict else {
            panic!("soft limit: {second:?}");
        };
        assert!(note.contains("turn 2 of at most 3"), "{note}");
        let third = kit.admit("s", 3, &follow_on("b", "Read", json!({"p": 2})), &config);
        assert!(matches!(third.verdict, Verdict::WrapUp(_)));
        let fourth = kit.admit("s", 4, &follow_on("c", "Read", json!({"p": 3})), &config);
        let Verdict::Stop(stop) = fourth.verdict else {
            panic!("hard limit: {fourth:?}");
        };
        assert_eq!((stop.limit, stop.turns), (StopLimit::TurnBudget, 4));
        assert!(stop.message.contains("context.turn_budget.hard"));
        // The user's next message is a new episode with a fresh budget.
        let next = kit.admit("s", 5, &user("thanks, now this"), &config);
        assert_eq!(
            next,
            Admission {
                family: 5,
                verdict: Verdict::Go
            }
        );
        assert_eq!(kit.session("s").map(|s| s.stops), Some(1));
    }

    #[test]
    fn the_same_call_repeated_ends_the_loop_whatever_its_key_order() {
        let kit = ContextKit::default();
        let config = config(None, None, 3);
        kit.admit("s", 1, &user("loop"), &config);
        let args = [json!({"a": 1, "b": 2}), json!({"b": 2, "a": 1})];
        let verdicts: Vec<Verdict> = ["c1", "c2", "c3"]
            .iter()
            .zip(args.iter().cycle())
            .enumerate()
            .map(|(i, (id, args))| {
                kit.admit(
                    "s",
                    2 + i as u64,
                    &follow_on(id, "Bash", args.clone()),
                    &config,
                )
                .verdict
            })
            .collect();
        assert_eq!(verdicts[..2], [Verdict::Go, Verdict::Go]);
        let Verdict::Stop(stop) = &verdicts[2] else {
            panic!("third repeat: {verdicts:?}");
        };
        assert_eq!(stop.limit, StopLimit::LoopGuard);
        assert_eq!(
            (stop.tool.as_deref(), stop.repeats),
            (Some("Bash"), Some(3))
        );
        assert!(stop.message.contains("context.loop_guard.repeats"));
    }

    #[test]
    fn a_request_repeated_with_the_same_call_id_counts_once_and_other_arguments_not_at_all() {
        let kit = ContextKit::default();
        let config = config(None, None, 2);
        kit.admit("s", 1, &user("loop"), &config);
        let same = follow_on("c1", "Bash", json!({"command": "ls"}));
        assert_eq!(kit.admit("s", 2, &same, &config).verdict, Verdict::Go);
        assert_eq!(
            kit.admit("s", 3, &same, &config).verdict,
            Verdict::Go,
            "a retry"
        );
        let other = follow_on("c2", "Bash", json!({"command": "pwd"}));
        assert_eq!(kit.admit("s", 4, &other, &config).verdict, Verdict::Go);
        let again = follow_on("c3", "Bash", json!({"command": "ls"}));
        assert!(matches!(
            kit.admit("s", 5, &again, &config).verdict,
            Verdict::Stop(_)
        ));
    }

    #[test]
    fn a_subagent_prompt_while_a_tool_call_is_awaited_counts_toward_the_parents_episode() {
        let kit = ContextKit::default();
        let config = config(None, Some(3), 5);
        assert_eq!(kit.admit("s", 1, &user("plan"), &config).family, 1);
        let task = ReplyToolCall {
            id: "task1".into(),
            name: "Task".into(),
            arguments: "{}".into(),
        };
        kit.finished("s", 1, &record("cloud", false, 100, 10), &[task]);
        // The subagent's own conversation: root-looking, but the parent waits on Task.
        assert_eq!(
            kit.admit("s", 2, &user("explore the repo"), &config).family,
            1
        );
        kit.finished("s", 1, &record("local", true, 50, 5), &[]);
        let back = kit.admit("s", 3, &follow_on("task1", "Task", json!({})), &config);
        assert_eq!(
            back,
            Admission {
                family: 1,
                verdict: Verdict::Go
            }
        );
        let over = kit.admit("s", 4, &follow_on("x", "Read", json!({})), &config);
        assert!(matches!(over.verdict, Verdict::Stop(_)), "{over:?}");
        let budget = kit.session("s").expect("kept");
        assert_eq!(budget.episode, Some(1));
        assert_eq!(budget.episode_spend.turns, 4);
        assert_eq!(budget.total.finished_requests, 2);
        assert_eq!(budget.local_share, 0.5);
        assert_eq!(
            budget.total.backends.get("cloud"),
            Some(&BackendTokens {
                requests: 1,
                input_tokens: 100,
                output_tokens: 10
            })
        );
    }

    #[test]
    fn the_loop_guard_off_and_no_budget_let_everything_go() {
        let kit = ContextKit::default();
        let mut config = config(None, None, 2);
        config.loop_guard.enabled = false;
        kit.admit("s", 1, &user("loop"), &config);
        for i in 0..10 {
            let request = follow_on(&format!("c{i}"), "Bash", json!({"command": "ls"}));
            assert_eq!(
                kit.admit("s", 2 + i, &request, &config).verdict,
                Verdict::Go
            );
        }
    }
}
