//! A headless delegate run: the CLI in its own process group, its output (Claude Code or
//! cursor-agent stream-json, or plain text) relayed as ngl stream events, bounded by a
//! timeout and an output limit. Dropping the event stream (request over, client gone)
//! kills the whole process group.
//!
//! One file past 600 lines on purpose: the process's life (spawn, timeout, output
//! limit, kill on drop) and the reading of its output (Claude Code's and cursor-agent's
//! stream-json lines, plain text) are methods of one `Run`, which holds the child and
//! the stream they both write to.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use futures_util::Stream;
use glider_ngl::stream::PartKind;
use glider_ngl::{ApiError, ErrorKind, StopReason, StreamEvent, Usage};
use glider_sys::childenv::ChildEnv;
use glider_sys::procutil::{self, GroupGuard};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout};
use tokio::time::Instant;

/// The boxed event stream a run produces.
pub type Events = Pin<Box<dyn Stream<Item = StreamEvent> + Send>>;

/// Told what a run reports about itself while it runs.
pub type ReportSink = Box<dyn FnMut(Report) + Send>;

/// Something a run's output said that the handler keeps for later.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The delegate's session id (to resume it).
    Session(String),
    /// Tool uses the delegate was refused (Claude Code's `result.permission_denials`).
    Denied(Vec<Denial>),
    /// The run is over (reported once, also when its client went away mid-run).
    Ended(RunEnd),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    /// The CLI's exit code, when it exited by itself and was reaped (`None`: killed by
    /// a signal, stopped by Glider at a limit, or its client went away).
    pub exit_code: Option<i32>,
    /// Why the run did not end cleanly (the message the client got), if it did not.
    pub error: Option<String>,
    /// From the start of the process to the end of the run.
    pub duration: Duration,
}

/// One tool use a delegate asked for and was not allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct Denial {
    /// The tool, e.g. `Bash`.
    pub tool: String,
    /// Its input, as the delegate sent it.
    pub input: Value,
}

impl Denial {
    /// `Bash ls src`: the tool and a one-line view of its input.
    pub fn describe(&self) -> String {
        format!("{} {}", self.tool, summary(&self.input))
            .trim_end()
            .to_owned()
    }
}

/// Which machine-readable output a CLI prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Claude Code `--output-format stream-json --verbose`.
    ClaudeStreamJson,
    /// cursor-agent `--output-format stream-json` (one `assistant` line per message,
    /// `tool_call` started/completed).
    CursorStreamJson,
    /// Plain text: every line is relayed as it is.
    Text,
}

/// Everything needed to start one headless run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The executable.
    pub program: PathBuf,
    /// All its arguments.
    pub args: Vec<String>,
    /// Variables of Glider's environment it keeps besides the minimal ones
    /// ([`glider_sys::childenv`]; `*` ends a prefix): its vendor's
    /// ([`crate::Vendor::own_env`]).
    pub inherit: &'static [&'static str],
    /// Variables added to that environment (`delegate.<vendor>.env`).
    pub env: BTreeMap<String, String>,
    /// Where it runs.
    pub workdir: PathBuf,
    /// Longest the run may take.
    pub timeout: Duration,
    /// Most bytes of text relayed.
    pub max_output_bytes: usize,
    /// Name used in messages and as the reply's model, e.g. `claude`.
    pub label: String,
    /// How to read its stdout.
    pub output: Output,
    /// Where the running process group is recorded (runstate), if anywhere.
    pub pids: Option<glider_sys::runstate::DelegatePids>,
}

/// A guard for a delegate's process group (see [`GroupGuard`]) that also records the
/// group in runstate while it lives, so a crash leaves a record the next start names;
/// the record goes once the dropped guard has killed the group. `None` when the leader
/// was already reaped.
fn recorded_group(
    leader: Child,
    label: &str,
    pids: Option<glider_sys::runstate::DelegatePids>,
) -> Option<GroupGuard> {
    let guard = GroupGuard::new(leader)?;
    let Some(pids) = pids else {
        return Some(guard);
    };
    pids.started(guard.pgid(), label);
    Some(guard.on_ended(move |pgid| pids.ended(pgid)))
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Start `spec` and relay its output as `spec.output` says: stream-json (one JSON object
/// a line: `system`/`init`, `assistant`, tool events, `result`, each with `session_id`)
/// or plain text. Fails before any event when the process cannot start.
pub fn start(spec: RunSpec, on_report: ReportSink) -> Result<Events, ApiError> {
    let mut command = tokio::process::Command::new(&spec.program);
    command
        .args(&spec.args)
        .minimal_env(spec.inherit)
        .envs(&spec.env)
        .current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = procutil::spawn_group_leader(&mut command).map_err(|e| {
        ApiError::new(
            ErrorKind::Unavailable,
            format!(
                "cannot start {} ({}) in {}: {e}",
                spec.label,
                spec.program.display(),
                spec.workdir.display()
            ),
        )
    })?;
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ApiError::new(ErrorKind::Internal, "delegate pipes missing"));
    };
    let Some(guard) = recorded_group(child, &spec.label, spec.pids.clone()) else {
        return Err(ApiError::new(ErrorKind::Internal, "delegate has no pid"));
    };
    // Keep the tail of stderr for the error message; the task ends when the pipe closes
    // and is aborted with the run anyway.
    let stderr_task = AbortOnDrop(tokio::spawn(async move {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if all.len() > 8192 {
                all.drain(..all.len() - 4096);
            }
        }
        String::from_utf8_lossy(&all).trim().to_owned()
    }));
    let mut pending = VecDeque::new();
    pending.push_back(StreamEvent::Start {
        id: format!("msg_delegate_{}", guard.pgid()),
        model: spec.label.clone(),
        usage: Usage::default(),
    });
    pending.push_back(StreamEvent::PartStart {
        index: 0,
        kind: PartKind::Text,
    });
    let line_cap = match spec.output {
        Output::Text => spec.max_output_bytes,
        Output::ClaudeStreamJson | Output::CursorStreamJson => {
            spec.max_output_bytes.saturating_add(JSON_LINE_SLACK)
        }
    };
    let run = Run {
        started: std::time::Instant::now(),
        exit_code: None,
        deadline: Instant::now() + spec.timeout,
        unflushed: spec.pids.clone(),
        spec,
        stdout: BufReader::new(stdout),
        line: Vec::new(),
        line_cap,
        stderr: Some(stderr_task),
        on_report,
        pending,
        relayed: 0,
        ends_with_newline: true,
        result_seen: false,
        done: false,
        guard,
    };
    Ok(Box::pin(futures_util::stream::unfold(
        run,
        |mut run| async move {
            if let Some(pids) = run.unflushed.take() {
                // The group is on disk before anything of the run is relayed, so a
                // crash from here on leaves a record the next start can name; the
                // fsync waits on the blocking pool, not on this worker.
                let flushed = tokio::task::spawn_blocking(move || pids.flush());
                let _ = tokio::time::timeout(RECORD_WAIT, flushed).await;
            }
            loop {
                if let Some(event) = run.pending.pop_front() {
                    return Some((event, run));
                }
                if run.done {
                    return None;
                }
                run.step().await;
            }
        },
    )))
}

/// How far past `delegate.max_output_bytes` one stream-json line may run: its JSON
/// framing, and what it carries that is not relayed (the init line's tool list, a
/// tool's result). A longer line stops the run like the output limit does.
const JSON_LINE_SLACK: usize = 1 << 20;

/// Longest the first event waits for the run's group to be written to runstate.
const RECORD_WAIT: Duration = Duration::from_secs(5);

struct Run {
    /// When the process started (for [`RunEnd::duration`]).
    started: std::time::Instant,
    /// The CLI's exit code once it was reaped.
    exit_code: Option<i32>,
    spec: RunSpec,
    /// Runstate to flush before the first event (the group was just recorded there).
    unflushed: Option<glider_sys::runstate::DelegatePids>,
    stdout: BufReader<ChildStdout>,
    /// The line being read (reused).
    line: Vec<u8>,
    /// Most bytes one line may hold: reading stops there, so a CLI that prints a huge
    /// line (or never a newline) cannot grow Glider's memory.
    line_cap: usize,
    stderr: Option<AbortOnDrop<String>>,
    on_report: ReportSink,
    pending: VecDeque<StreamEvent>,
    deadline: Instant,
    relayed: usize,
    ends_with_newline: bool,
    result_seen: bool,
    done: bool,
    /// The process group; dropping the run kills it.
    guard: GroupGuard,
}

impl Drop for Run {
    /// A run dropped before its end (the client went away) is over too: its group is
    /// killed by the guard, and its end is reported.
    fn drop(&mut self) {
        if !self.done {
            self.ended(Some(
                "the client went away before the run ended; its process group was killed"
                    .to_owned(),
            ));
        }
    }
}

/// What reading one line found.
enum Line {
    /// A line (its newline stripped), or the last one without a newline.
    Whole,
    /// More than the cap without a newline: the line is cut there.
    TooLong,
    /// The end of the output.
    End,
}

/// Read one line into `line`, at most `cap` bytes of it (the rest stays unread).
async fn read_line(
    reader: &mut BufReader<ChildStdout>,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Line> {
    line.clear();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let n = (&mut *reader).take(limit).read_until(b'\n', line).await?;
    if n == 0 {
        return Ok(Line::End);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        return Ok(Line::Whole);
    }
    Ok(if line.len() > cap {
        Line::TooLong
    } else {
        Line::Whole
    })
}

impl Run {
    /// Read one line (or the end) and queue what it produces.
    async fn step(&mut self) {
        let read = read_line(&mut self.stdout, &mut self.line, self.line_cap);
        let too_long = match tokio::time::timeout_at(self.deadline, read).await {
            Err(_) => return self.fail(ErrorKind::Timeout, self.timeout_message()),
            Ok(Err(e)) => {
                return self.fail(
                    ErrorKind::BadGateway,
                    format!("reading {}'s output failed: {e}", self.spec.label),
                );
            }
            Ok(Ok(Line::End)) => return self.finish().await,
            Ok(Ok(Line::TooLong)) => true,
            Ok(Ok(Line::Whole)) => false,
        };
        let line = String::from_utf8_lossy(&self.line).into_owned();
        if self.spec.output == Output::Text {
            // A cut line is longer than the room left, so relaying it stops the run.
            let mut text = line;
            if !too_long {
                text.push('\n');
            }
            return self.relay(text);
        }
        if too_long {
            let note = format!(
                "[glider: a line of {}'s output passed delegate.max_output_bytes ({} bytes, plus {} for stream-json framing); run stopped]",
                self.spec.label, self.spec.max_output_bytes, JSON_LINE_SLACK
            );
            return self.stop_at_limit(String::new(), note);
        }
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            tracing::debug!(delegate = %self.spec.label, "non-JSON output line ignored");
            return;
        };
        self.json_line(&value);
    }

    /// One stream-json line (both CLIs share `system`, `assistant` and `result`).
    fn json_line(&mut self, value: &Value) {
        if let Some(session) = value.get("session_id").and_then(Value::as_str) {
            (self.on_report)(Report::Session(session.to_owned()));
        }
        match value.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let blocks = value
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                            self.block(text);
                        }
                        Some("tool_use") => {
                            let name = block.get("name").and_then(Value::as_str).unwrap_or("?");
                            let input = block.get("input").unwrap_or(&Value::Null);
                            let line = tool_line(name, input);
                            self.block(&line);
                        }
                        _ => {}
                    }
                }
            }
            Some("tool_call") => self.cursor_tool_call(value),
            Some("result") => {
                self.result_seen = true;
                let denials: Vec<Denial> = value
                    .get("permission_denials")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|d| Denial {
                        tool: d
                            .get("tool_name")
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                            .to_owned(),
                        input: d.get("tool_input").cloned().unwrap_or(Value::Null),
                    })
                    .collect();
                if !denials.is_empty() {
                    let flag = format!("/{}", self.spec.label);
                    let asked: Vec<String> = denials.iter().map(Denial::describe).collect();
                    self.block(&format!(
                        "[{} asked for permission and was refused: {}]\nAnswer `{flag} allow` to allow {} and continue the run, or `{flag} deny` to refuse and let it continue without.",
                        self.spec.label,
                        asked.join("; "),
                        if asked.len() == 1 { "it" } else { "them" }
                    ));
                    (self.on_report)(Report::Denied(denials));
                }
                let is_error = value.get("is_error").and_then(Value::as_bool) == Some(true)
                    || value
                        .get("subtype")
                        .and_then(Value::as_str)
                        .is_some_and(|s| s != "success");
                if is_error {
                    let what = value
                        .get("result")
                        .and_then(Value::as_str)
                        .or_else(|| value.get("subtype").and_then(Value::as_str))
                        .unwrap_or("error");
                    let line = format!("[{} stopped: {what}]", self.spec.label);
                    self.block(&line);
                }
            }
            _ => {}
        }
    }

    /// cursor-agent's `tool_call` line: `{"subtype": "started"|"completed", "tool_call":
    /// {"<kind>ToolCall": {"args": {..}, "result": {..}}}}` (or `{"function": {"name",
    /// "arguments"}}`). Started calls are shown like Claude Code's; failed ones too.
    fn cursor_tool_call(&mut self, value: &Value) {
        let Some((kind, call)) = value
            .get("tool_call")
            .and_then(Value::as_object)
            .and_then(|o| o.iter().next())
        else {
            return;
        };
        let (name, args) = if kind == "function" {
            let name = call.get("name").and_then(Value::as_str).unwrap_or("?");
            let args = call
                .get("arguments")
                .and_then(Value::as_str)
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            (name.to_owned(), args)
        } else {
            let name = kind.strip_suffix("ToolCall").unwrap_or(kind);
            (
                name.to_owned(),
                call.get("args").cloned().unwrap_or(Value::Null),
            )
        };
        match value.get("subtype").and_then(Value::as_str) {
            Some("started") => {
                let line = tool_line(&name, &args);
                self.block(&line);
            }
            Some("completed") => {
                let failure = call
                    .get("result")
                    .and_then(Value::as_object)
                    .filter(|r| !r.contains_key("success"))
                    .and_then(|r| r.iter().next());
                if let Some((how, detail)) = failure {
                    let detail = detail
                        .get("error")
                        .or_else(|| detail.get("reason"))
                        .or_else(|| detail.get("message"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let line = format!("[tool {name} {how}: {detail}]");
                    self.block(line.trim_end_matches(": ]").trim_end());
                }
            }
            _ => {}
        }
    }

    /// Relay one block of text on its own line(s), within the output limit.
    fn block(&mut self, text: &str) {
        if text.is_empty() || self.done {
            return;
        }
        let mut out = String::new();
        if !self.ends_with_newline {
            out.push('\n');
        }
        out.push_str(text);
        self.relay(out);
    }

    /// Relay `out` as it is, within the output limit.
    fn relay(&mut self, out: String) {
        if out.is_empty() || self.done {
            return;
        }
        let room = self.spec.max_output_bytes.saturating_sub(self.relayed);
        if out.len() > room {
            let note = format!(
                "[glider: {} output passed delegate.max_output_bytes ({} bytes); run stopped]",
                self.spec.label, self.spec.max_output_bytes
            );
            return self.stop_at_limit(out, note);
        }
        self.relayed += out.len();
        self.text(out);
    }

    /// The output limit is reached: relay what still fits of `out`, then `note`, and end
    /// the reply (`max_tokens`); the stream ends, the run is dropped and its process
    /// group killed.
    fn stop_at_limit(&mut self, mut out: String, note: String) {
        let mut cut = self
            .spec
            .max_output_bytes
            .saturating_sub(self.relayed)
            .min(out.len());
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('\n');
        out.push_str(&note);
        self.relayed = self.spec.max_output_bytes;
        self.text(out);
        self.close(StopReason::MaxTokens);
    }

    fn text(&mut self, text: String) {
        self.ends_with_newline = text.ends_with('\n');
        self.pending
            .push_back(StreamEvent::TextDelta { index: 0, text });
    }

    fn close(&mut self, stop_reason: StopReason) {
        let error = (stop_reason == StopReason::MaxTokens).then(|| {
            format!(
                "output passed delegate.max_output_bytes ({} bytes); run stopped",
                self.spec.max_output_bytes
            )
        });
        self.ended(error);
        self.pending.push_back(StreamEvent::PartStop { index: 0 });
        self.pending.push_back(StreamEvent::Finish {
            stop_reason,
            stop_sequence: None,
            usage: Usage::default(),
        });
        self.done = true;
    }

    fn fail(&mut self, kind: ErrorKind, message: String) {
        tracing::warn!(delegate = %self.spec.label, %message, "delegate run failed");
        self.ended(Some(message.clone()));
        self.pending.push_back(StreamEvent::Error {
            error: ApiError::new(kind, message),
        });
        self.done = true;
    }

    /// Report the run's end (once: `done` is set right after).
    fn ended(&mut self, error: Option<String>) {
        if self.done {
            return;
        }
        (self.on_report)(Report::Ended(RunEnd {
            exit_code: self.exit_code,
            error,
            duration: self.started.elapsed(),
        }));
    }

    fn timeout_message(&self) -> String {
        format!(
            "{} did not finish within {}s (delegate.timeout_secs); its process group was killed",
            self.spec.label,
            self.spec.timeout.as_secs()
        )
    }

    /// Output ended: what is left of the group is killed and the leader reaped (in that
    /// order, see [`GroupGuard`]); a clean exit (or a reported result) closes the reply,
    /// anything else is an error naming the exit status and stderr's tail.
    async fn finish(&mut self) {
        let status = match tokio::time::timeout_at(self.deadline, self.guard.finish()).await {
            Err(_) => return self.fail(ErrorKind::Timeout, self.timeout_message()),
            Ok(Err(e)) => {
                return self.fail(
                    ErrorKind::BadGateway,
                    format!("waiting for {}: {e}", self.spec.label),
                );
            }
            Ok(Ok(status)) => status,
        };
        self.exit_code = status.code();
        if status.success() || self.result_seen {
            return self.close(StopReason::EndTurn);
        }
        let stderr = match self.stderr.take() {
            Some(mut task) => tokio::time::timeout(Duration::from_secs(1), &mut task.0)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => String::new(),
        };
        let detail = if stderr.is_empty() {
            String::new()
        } else {
            format!(": {stderr}")
        };
        self.fail(
            ErrorKind::BadGateway,
            format!("{} exited with {status}{detail}", self.spec.label),
        );
    }
}

/// `[tool: Bash ls src]`: how a tool call is shown in the reply.
fn tool_line(name: &str, input: &Value) -> String {
    let summary = summary(input);
    if summary.is_empty() {
        format!("[tool: {name}]")
    } else {
        format!("[tool: {name} {summary}]")
    }
}

/// A short, one-line view of a tool call's input (the usual fields first).
pub fn summary(input: &Value) -> String {
    if input.is_null() {
        return String::new();
    }
    let preferred = [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "description",
    ];
    let text = preferred
        .iter()
        .find_map(|key| input.get(key).and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| input.to_string());
    let one_line = text.replace('\n', " ");
    match one_line.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use glider_sys::procutil::{group_gone_within, group_members};

    fn shell(script: &str, output: Output, max_output_bytes: usize) -> RunSpec {
        RunSpec {
            program: PathBuf::from("sh"),
            args: vec!["-c".to_owned(), script.to_owned()],
            inherit: &[],
            env: BTreeMap::new(),
            workdir: std::env::temp_dir(),
            timeout: Duration::from_secs(60),
            max_output_bytes,
            label: "fake".to_owned(),
            output,
            pids: None,
        }
    }

    /// Every event up to the reply's end (bounded); the stream is kept, not dropped.
    async fn until_the_end(events: &mut Events) -> Vec<StreamEvent> {
        let mut seen = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(event) = events.next().await {
                let last = matches!(
                    event,
                    StreamEvent::Finish { .. } | StreamEvent::Error { .. }
                );
                seen.push(event);
                if last {
                    break;
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the reply did not end: {seen:?}");
        seen
    }

    fn text_of(events: &[StreamEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn pgid_of(events: &[StreamEvent]) -> u32 {
        events
            .iter()
            .find_map(|e| match e {
                StreamEvent::Start { id, .. } => id.strip_prefix("msg_delegate_")?.parse().ok(),
                _ => None,
            })
            .expect("a start event names the group")
    }

    #[tokio::test]
    async fn a_huge_line_without_a_newline_stops_at_the_output_limit() {
        // 50 MB on one line, then the CLI keeps its stdout open: reading whole lines
        // would buffer all of it and then wait for a newline until the timeout.
        let script = "head -c 50000000 /dev/zero | tr '\\0' a; exec sleep 300";
        for output in [Output::Text, Output::ClaudeStreamJson] {
            let mut events = start(shell(script, output, 1000), Box::new(|_| {})).expect("starts");
            let seen = until_the_end(&mut events).await;
            let pgid = pgid_of(&seen);
            let text = text_of(&seen);
            assert!(
                text.contains("delegate.max_output_bytes (1000 bytes"),
                "{output:?}: {text:.300}"
            );
            assert!(
                matches!(
                    seen.last(),
                    Some(StreamEvent::Finish {
                        stop_reason: StopReason::MaxTokens,
                        ..
                    })
                ),
                "{output:?}: {:?}",
                seen.last()
            );
            if output == Output::Text {
                assert!(text.starts_with(&"a".repeat(1000)), "{text:.300}");
                assert!(!text.starts_with(&"a".repeat(1001)), "{text:.300}");
            }
            drop(events);
            assert!(
                group_gone_within(pgid, Duration::from_secs(10)).await,
                "{output:?}: left {:?}",
                group_members(pgid)
            );
        }
    }

    #[tokio::test]
    async fn the_group_is_killed_when_the_output_ends_and_the_status_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("child.pid");
        // The leader leaves a grandchild behind (its stdout elsewhere, so the output
        // ends when the leader exits) and exits with 3.
        let script = format!(
            "sleep 300 >/dev/null 2>&1 & echo $! > '{}'; echo hello; exit 3",
            pidfile.display()
        );
        let mut events =
            start(shell(&script, Output::Text, 1000), Box::new(|_| {})).expect("starts");
        let seen = until_the_end(&mut events).await;
        let pgid = pgid_of(&seen);
        // The leader's own status, although the group was killed before it was reaped.
        let Some(StreamEvent::Error { error }) = seen.last() else {
            panic!("expected an error: {seen:?}");
        };
        assert!(
            error.message.contains("exited with exit status: 3"),
            "{}",
            error.message
        );
        // Gone while the reply stream is still held: the group was killed at the end
        // of the output, before the leader was reaped — not later, when the pgid may
        // no longer be the delegate's.
        assert!(pidfile.exists(), "the grandchild started");
        assert!(
            group_gone_within(pgid, Duration::from_secs(10)).await,
            "left: {:?}",
            group_members(pgid)
        );
        drop(events);
    }
}
