//! A headless delegate run: the CLI in its own process group, its output (Claude Code or
//! cursor-agent stream-json, or plain text) relayed as ngl stream events, bounded by a
//! timeout and an output limit. Dropping the event stream (request over, client gone)
//! kills the whole process group.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use futures_util::Stream;
use glider_ngl::stream::PartKind;
use glider_ngl::{ApiError, ErrorKind, StopReason, StreamEvent, Usage};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
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
    /// Variables added to the inherited environment.
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

/// Kills a process group when dropped, so nothing a delegate started (grandchildren
/// included) outlives the request that started it.
#[derive(Debug)]
pub struct GroupGuard {
    pgid: u32,
    pids: Option<glider_sys::runstate::DelegatePids>,
}

impl GroupGuard {
    /// A guard for the group led by `pgid` (a child started with `process_group(0)`).
    pub fn new(pgid: u32) -> Self {
        GroupGuard { pgid, pids: None }
    }

    /// A guard that also records the group in runstate while it lives.
    pub fn recorded(
        pgid: u32,
        label: &str,
        pids: Option<glider_sys::runstate::DelegatePids>,
    ) -> Self {
        if let Some(pids) = &pids {
            pids.started(pgid, label);
        }
        GroupGuard { pgid, pids }
    }

    /// The group's id (the leader's pid).
    pub fn pgid(&self) -> u32 {
        self.pgid
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // `kill -KILL -- -PGID` signals every member; an already empty group is fine.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pgid)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(pids) = &self.pids {
            pids.ended(self.pgid);
        }
    }
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
        .envs(&spec.env)
        .current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| {
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
    let guard = child
        .id()
        .map(|pgid| GroupGuard::recorded(pgid, &spec.label, spec.pids.clone()));
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ApiError::new(ErrorKind::Internal, "delegate pipes missing"));
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
        id: format!(
            "msg_delegate_{}",
            guard.as_ref().map_or(0, GroupGuard::pgid)
        ),
        model: spec.label.clone(),
        usage: Usage::default(),
    });
    pending.push_back(StreamEvent::PartStart {
        index: 0,
        kind: PartKind::Text,
    });
    let run = Run {
        deadline: Instant::now() + spec.timeout,
        spec,
        child,
        lines: BufReader::new(stdout).lines(),
        stderr: Some(stderr_task),
        on_report,
        pending,
        relayed: 0,
        ends_with_newline: true,
        result_seen: false,
        done: false,
        _guard: guard,
    };
    Ok(Box::pin(futures_util::stream::unfold(
        run,
        |mut run| async move {
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

struct Run {
    spec: RunSpec,
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Option<AbortOnDrop<String>>,
    on_report: ReportSink,
    pending: VecDeque<StreamEvent>,
    deadline: Instant,
    relayed: usize,
    ends_with_newline: bool,
    result_seen: bool,
    done: bool,
    // Last field: dropped after the child handle, and kills the group.
    _guard: Option<GroupGuard>,
}

impl Run {
    /// Read one line (or the end) and queue what it produces.
    async fn step(&mut self) {
        let line = match tokio::time::timeout_at(self.deadline, self.lines.next_line()).await {
            Err(_) => return self.fail(ErrorKind::Timeout, self.timeout_message()),
            Ok(Err(e)) => {
                return self.fail(
                    ErrorKind::BadGateway,
                    format!("reading {}'s output failed: {e}", self.spec.label),
                );
            }
            Ok(Ok(None)) => return self.finish().await,
            Ok(Ok(Some(line))) => line,
        };
        if self.spec.output == Output::Text {
            let mut text = line;
            text.push('\n');
            return self.relay(text);
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
    fn relay(&mut self, mut out: String) {
        if out.is_empty() || self.done {
            return;
        }
        let room = self.spec.max_output_bytes.saturating_sub(self.relayed);
        if out.len() > room {
            let mut cut = room;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str(&format!(
                "\n[glider: {} output passed delegate.max_output_bytes ({} bytes); run stopped]",
                self.spec.label, self.spec.max_output_bytes
            ));
            self.relayed = self.spec.max_output_bytes;
            self.text(out);
            self.close(StopReason::MaxTokens);
            return;
        }
        self.relayed += out.len();
        self.text(out);
    }

    fn text(&mut self, text: String) {
        self.ends_with_newline = text.ends_with('\n');
        self.pending
            .push_back(StreamEvent::TextDelta { index: 0, text });
    }

    fn close(&mut self, stop_reason: StopReason) {
        self.pending.push_back(StreamEvent::PartStop { index: 0 });
        self.pending.push_back(StreamEvent::Finish {
            stop_reason,
            usage: Usage::default(),
        });
        self.done = true;
    }

    fn fail(&mut self, kind: ErrorKind, message: String) {
        tracing::warn!(delegate = %self.spec.label, %message, "delegate run failed");
        self.pending.push_back(StreamEvent::Error {
            error: ApiError::new(kind, message),
        });
        self.done = true;
    }

    fn timeout_message(&self) -> String {
        format!(
            "{} did not finish within {}s (delegate.timeout_secs); its process group was killed",
            self.spec.label,
            self.spec.timeout.as_secs()
        )
    }

    /// Output ended: a clean exit (or a reported result) closes the reply, anything
    /// else is an error naming the exit status and stderr's tail.
    async fn finish(&mut self) {
        let status = match tokio::time::timeout_at(self.deadline, self.child.wait()).await {
            Err(_) => return self.fail(ErrorKind::Timeout, self.timeout_message()),
            Ok(Err(e)) => {
                return self.fail(
                    ErrorKind::BadGateway,
                    format!("waiting for {}: {e}", self.spec.label),
                );
            }
            Ok(Ok(status)) => status,
        };
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
