//! A child process that speaks line-delimited JSON-RPC 2.0 over its stdio, the process
//! model of plugins and MCP stdio servers: [`RpcChild`] starts it as the leader of its own
//! process group (recorded in runstate, so a crash leaves its group named for the next
//! start's check; the group is killed when the child is dropped), caps its memory
//! (`RLIMIT_AS`) and the length of each line it writes, and matches replies to calls with
//! a deadline per call. [`Supervisor`] keeps one such child, starting it again with
//! backoff after it dies. Nothing here knows what the methods mean.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::childenv::ChildEnv;
use crate::procutil::{self, GroupGuard};
use crate::runstate::DelegatePids;

/// How to start the child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSpec {
    /// Its name in logs and in runstate (`cli` of the recorded group).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Added to the child's minimal environment ([`crate::childenv`]), never to
    /// Glider's own.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// `RLIMIT_AS` of the child, in bytes; `None` leaves it unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// The longest line read from its stdout or stderr; a longer stdout line ends it.
    pub max_line_bytes: usize,
}

/// Why a call got no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// No reply within the call's deadline.
    Timeout,
    /// The child is gone (or was never started): why.
    Closed(String),
    /// The child answered with a JSON-RPC error.
    Remote { code: i64, message: String },
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Timeout => f.write_str("no reply within the deadline"),
            RpcError::Closed(why) => write!(f, "the process is gone: {why}"),
            RpcError::Remote { code, message } => write!(f, "error {code}: {message}"),
        }
    }
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// What the reader learnt when the child's output ended; every later call fails with it.
type Ended = Arc<Mutex<Option<String>>>;

/// One running child.
pub struct RpcChild {
    name: String,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Pending,
    ended: Ended,
    next_id: AtomicU64,
    /// Owns the process group; dropping it kills every member.
    guard: Mutex<Option<GroupGuard>>,
    readers: [JoinHandle<()>; 2],
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RpcChild {
    /// Start the child. `pids` records its group while it lives.
    pub fn spawn(spec: &ChildSpec, pids: Option<DelegatePids>) -> std::io::Result<RpcChild> {
        let mut command = match spec.memory_limit_bytes {
            // `unsafe_code` is forbidden here, so no `pre_exec(setrlimit)`: the shell sets
            // the limit and then becomes the child (same pid, same group).
            Some(bytes) => {
                let mut command = Command::new("/bin/sh");
                command
                    .arg("-c")
                    .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", bytes / 1024))
                    .arg(&spec.program)
                    .args(&spec.args);
                command
            }
            None => {
                let mut command = Command::new(&spec.program);
                command.args(&spec.args);
                command
            }
        };
        command
            .minimal_env(&[])
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        let mut leader = procutil::spawn_group_leader(&mut command)?;
        let (stdin, stdout, stderr) = (
            leader.stdin.take(),
            leader.stdout.take(),
            leader.stderr.take(),
        );
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            return Err(std::io::Error::other("the child's pipes were not opened"));
        };
        let Some(mut guard) = GroupGuard::new(leader) else {
            return Err(std::io::Error::other(
                "the child exited before it was watched",
            ));
        };
        if let Some(pids) = pids {
            pids.started(guard.pgid(), &spec.name);
            guard = guard.on_ended(move |pgid| pids.ended(pgid));
        }
        let pending: Pending = Arc::default();
        let ended: Ended = Arc::default();
        let out_reader = tokio::spawn(read_replies(
            BufReader::new(stdout),
            spec.max_line_bytes,
            pending.clone(),
            ended.clone(),
            spec.name.clone(),
        ));
        let err_reader = tokio::spawn(log_stderr(
            BufReader::new(stderr),
            spec.max_line_bytes,
            spec.name.clone(),
        ));
        Ok(RpcChild {
            name: spec.name.clone(),
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            pending,
            ended,
            next_id: AtomicU64::new(1),
            guard: Mutex::new(Some(guard)),
            readers: [out_reader, err_reader],
        })
    }

    /// The process group's id while the child runs.
    pub fn pgid(&self) -> Option<u32> {
        lock(&self.guard).as_ref().map(GroupGuard::pgid)
    }

    /// Why the child is gone, once its output ended.
    pub fn ended(&self) -> Option<String> {
        lock(&self.ended).clone()
    }

    /// Call `method` and wait up to `deadline` for the result (writing the call counts
    /// against the deadline too: a child that stops reading fills its pipe).
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        deadline: Duration,
    ) -> Result<Value, RpcError> {
        if let Some(why) = self.ended() {
            return Err(RpcError::Closed(why));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let exchange = async {
            self.write(&message).await?;
            rx.await
                .unwrap_or_else(|_| Err(RpcError::Closed("its output ended".into())))
        };
        let result = tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or(Err(RpcError::Timeout));
        lock(&self.pending).remove(&id);
        result
    }

    /// Send `method` as a notification (no reply), within `deadline`.
    pub async fn notify(
        &self,
        method: &str,
        params: Value,
        deadline: Duration,
    ) -> Result<(), RpcError> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        tokio::time::timeout(deadline, self.write(&message))
            .await
            .unwrap_or(Err(RpcError::Timeout))
    }

    async fn write(&self, message: &Value) -> Result<(), RpcError> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(RpcError::Closed("its input was closed".into()));
        };
        let written = async {
            pipe.write_all(&line).await?;
            pipe.flush().await
        };
        written
            .await
            .map_err(|e| RpcError::Closed(format!("cannot write to it: {e}")))
    }

    /// Close its input and give it `grace` to exit on its own, then end its group.
    pub async fn stop(&self, grace: Duration) {
        drop(self.stdin.lock().await.take());
        let exited = async {
            while self.ended().is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(grace, exited).await;
        let guard = lock(&self.guard).take();
        if let Some(mut guard) = guard {
            match guard.finish().await {
                Ok(status) => tracing::debug!(child = %self.name, %status, "child stopped"),
                Err(e) => tracing::debug!(child = %self.name, error = %e, "child stopped"),
            }
        }
    }
}

impl Drop for RpcChild {
    fn drop(&mut self) {
        for reader in &self.readers {
            reader.abort();
        }
        // The guard's own drop kills the group.
    }
}

/// What reading one line gave.
enum Line {
    End,
    Whole,
    /// Longer than the cap; the rest of it was not read.
    TooLong,
}

/// Read up to the next `\n` into `buf` (without it), holding at most `cap` bytes.
async fn read_line_capped<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Line> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::End
            } else {
                Line::Whole
            });
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at, true),
            None => (available.len(), false),
        };
        if buf.len() + take > cap {
            let consumed = available.len();
            reader.consume(consumed);
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Line::Whole);
        }
    }
}

/// Hand each reply to its caller until the output ends or breaks the cap; then every
/// waiting call fails with why.
async fn read_replies<R: AsyncBufRead + Unpin>(
    mut reader: R,
    cap: usize,
    pending: Pending,
    ended: Ended,
    name: String,
) {
    let mut buf = Vec::new();
    let why = loop {
        match read_line_capped(&mut reader, &mut buf, cap).await {
            Ok(Line::End) => break "its output ended".to_owned(),
            Err(e) => break format!("its output could not be read: {e}"),
            Ok(Line::TooLong) => {
                tracing::warn!(child = %name, cap, "a line of output over the cap; the child is ended");
                break format!("it wrote a line over {cap} bytes");
            }
            Ok(Line::Whole) => {}
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(message) = serde_json::from_slice::<Value>(&buf) else {
            tracing::warn!(child = %name, "a line of output that is not JSON was ignored");
            continue;
        };
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            tracing::debug!(child = %name, method = ?message.get("method"), "notification from the child ignored");
            continue;
        };
        let result = match (message.get("result"), message.get("error")) {
            (_, Some(error)) => Err(RpcError::Remote {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message")
                    .to_owned(),
            }),
            (Some(result), None) => Ok(result.clone()),
            (None, None) => {
                tracing::debug!(child = %name, id, "a request from the child ignored");
                continue;
            }
        };
        if let Some(waiting) = lock(&pending).remove(&id) {
            let _ = waiting.send(result);
        }
    };
    *lock(&ended) = Some(why.clone());
    for (_, waiting) in lock(&pending).drain() {
        let _ = waiting.send(Err(RpcError::Closed(why.clone())));
    }
}

/// The child's stderr goes to Glider's log at debug (it may hold what the child saw).
async fn log_stderr<R: AsyncBufRead + Unpin>(mut reader: R, cap: usize, name: String) {
    let mut buf = Vec::new();
    loop {
        match read_line_capped(&mut reader, &mut buf, cap).await {
            Ok(Line::End) | Err(_) => return,
            Ok(Line::TooLong) => tracing::debug!(child = %name, "stderr line over the cap dropped"),
            Ok(Line::Whole) => {
                tracing::debug!(child = %name, line = %String::from_utf8_lossy(&buf), "stderr")
            }
        }
    }
}

/// Backoff between starts of a child that keeps dying.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

/// Keeps one child of `spec` running: [`Supervisor::child`] hands out the running one,
/// or starts a new one (running `handshake` on it first) once the backoff since the last
/// start allows.
pub struct Supervisor {
    spec: ChildSpec,
    pids: Option<DelegatePids>,
    backoff: Backoff,
    state: tokio::sync::Mutex<SupervisorState>,
    starts: AtomicU64,
}

#[derive(Default)]
struct SupervisorState {
    child: Option<Arc<RpcChild>>,
    /// Starts that ended in a dead child, in a row.
    failures: u32,
    not_before: Option<tokio::time::Instant>,
}

impl Supervisor {
    pub fn new(spec: ChildSpec, pids: Option<DelegatePids>, backoff: Backoff) -> Supervisor {
        Supervisor {
            spec,
            pids,
            backoff,
            state: tokio::sync::Mutex::default(),
            starts: AtomicU64::new(0),
        }
    }

    pub fn spec(&self) -> &ChildSpec {
        &self.spec
    }

    /// How many times a child was started (the first start included).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// The running child, or a new one once the backoff allows; `handshake` runs on a
    /// new child before it is handed out (its error ends the child and counts as a
    /// failed start).
    pub async fn child<H, F>(&self, handshake: H) -> Result<Arc<RpcChild>, RpcError>
    where
        H: FnOnce(Arc<RpcChild>) -> F,
        F: std::future::Future<Output = Result<(), RpcError>>,
    {
        let mut state = self.state.lock().await;
        if let Some(child) = &state.child {
            match child.ended() {
                None => return Ok(child.clone()),
                Some(why) => {
                    tracing::warn!(child = %self.spec.name, %why, "child died; it is restarted after a backoff");
                    state.child = None;
                    self.failed(&mut state);
                }
            }
        }
        if let Some(not_before) = state.not_before
            && tokio::time::Instant::now() < not_before
        {
            return Err(RpcError::Closed("restarting after a backoff".into()));
        }
        self.starts.fetch_add(1, Ordering::Relaxed);
        let child = match RpcChild::spawn(&self.spec, self.pids.clone()) {
            Ok(child) => Arc::new(child),
            Err(e) => {
                self.failed(&mut state);
                return Err(RpcError::Closed(format!("cannot start it: {e}")));
            }
        };
        if let Err(e) = handshake(child.clone()).await {
            child.stop(Duration::ZERO).await;
            self.failed(&mut state);
            return Err(e);
        }
        state.failures = 0;
        state.not_before = None;
        state.child = Some(child.clone());
        Ok(child)
    }

    fn failed(&self, state: &mut SupervisorState) {
        let wait =
            crate::safego::backoff_wait(self.backoff.first, self.backoff.max, state.failures);
        state.failures = state.failures.saturating_add(1);
        state.not_before = Some(tokio::time::Instant::now() + wait);
    }

    /// The running child, if any, without starting one or waiting for a start under
    /// way (`None` then).
    pub fn running(&self) -> Option<Arc<RpcChild>> {
        let state = self.state.try_lock().ok()?;
        state.child.clone().filter(|c| c.ended().is_none())
    }

    /// Stop the running child (`grace` to exit on its own) and start none until
    /// [`Supervisor::child`] is called again.
    pub async fn stop(&self, grace: Duration) {
        let child = self.state.lock().await.child.take();
        if let Some(child) = child {
            child.stop(grace).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(script: &str) -> ChildSpec {
        ChildSpec {
            name: "test-child".into(),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            cwd: None,
            memory_limit_bytes: None,
            max_line_bytes: 1024,
        }
    }

    /// Answers each call with its own params, as `{"id": N, "result": params}`, via sed.
    const ECHO: &str = r#"while IFS= read -r line; do id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p'); printf '{"jsonrpc":"2.0","id":%s,"result":"ok"}\n' "$id"; done"#;

    #[tokio::test]
    async fn calls_are_matched_to_replies_and_a_silent_child_times_out() {
        let child = RpcChild::spawn(&spec(ECHO), None).expect("spawn");
        for _ in 0..3 {
            let got = child
                .call("ping", json!({}), Duration::from_secs(10))
                .await
                .expect("reply");
            assert_eq!(got, json!("ok"));
        }
        let silent = RpcChild::spawn(&spec("sleep 30"), None).expect("spawn");
        assert_eq!(
            silent
                .call("ping", json!({}), Duration::from_millis(50))
                .await,
            Err(RpcError::Timeout)
        );
        let pgid = silent.pgid().expect("running");
        silent.stop(Duration::ZERO).await;
        assert!(procutil::group_gone_within(pgid, Duration::from_secs(10)).await);
    }

    #[tokio::test]
    async fn a_line_over_the_cap_ends_the_child_and_fails_its_calls() {
        let flood = "read -r line; head -c 100000 /dev/zero | tr '\\0' x; echo; sleep 30";
        let child = RpcChild::spawn(&spec(flood), None).expect("spawn");
        let got = child.call("ping", json!({}), Duration::from_secs(10)).await;
        assert_eq!(
            got,
            Err(RpcError::Closed("it wrote a line over 1024 bytes".into()))
        );
        assert!(child.ended().is_some());
    }

    #[tokio::test]
    async fn the_memory_cap_is_applied_to_the_child() {
        // The first call's id is 1; the reply carries the limit (KiB) the child runs under.
        let mut capped = spec(
            r#"read -r line; printf '{"jsonrpc":"2.0","id":1,"result":"%s"}\n' "$(ulimit -v)""#,
        );
        capped.memory_limit_bytes = Some(512 * 1024 * 1024);
        let child = RpcChild::spawn(&capped, None).expect("spawn");
        let limit = child
            .call("limit", json!({}), Duration::from_secs(10))
            .await
            .expect("reply");
        assert_eq!(limit, json!("524288"));
        child.stop(Duration::ZERO).await;
    }

    #[tokio::test]
    async fn a_dead_child_is_started_again_after_the_backoff() {
        // Answers one call, then exits.
        let once = r#"IFS= read -r line; id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p'); printf '{"jsonrpc":"2.0","id":%s,"result":"ok"}\n' "$id""#;
        let supervisor = Supervisor::new(
            spec(once),
            None,
            Backoff {
                first: Duration::from_millis(1),
                max: Duration::from_millis(1),
            },
        );
        let mut answered = 0;
        for _ in 0..200 {
            let Ok(child) = supervisor.child(|_| async { Ok(()) }).await else {
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            };
            if child
                .call("ping", json!({}), Duration::from_secs(10))
                .await
                .is_ok()
            {
                answered += 1;
            }
            if answered == 3 {
                break;
            }
            while child.ended().is_none() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        assert_eq!(answered, 3);
        assert!(supervisor.starts() >= 3);
        supervisor.stop(Duration::ZERO).await;
    }
}
