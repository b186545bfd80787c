//! Delegation to `cursor-agent` and `agy` through the gateway, with faithful fakes under
//! tests/fixtures: cursor-agent's documented stream-json relayed and resumed, `/agy`
//! opening a real detached tmux session and answering at once (or running headless),
//! the runstate record of running delegates, and crash, hang, disconnect and missing-CLI
//! cases, each ending with a clear reply and no process left.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::procs::{DelegateLab as Setup, alive, group_gone, group_members, until};
use common::{gateway_with_delegator, mock_and_config, post, text_request, wire};
use futures_util::StreamExt;
use glider_ngl::Dialect;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

impl Setup {
    fn workdir(&self) -> String {
        std::fs::canonicalize(self.path("work"))
            .expect("canon")
            .display()
            .to_string()
    }

    async fn ask(&self, text: &str, stream: bool) -> common::Reply {
        let body = wire(
            Dialect::Anthropic,
            &text_request("m-anthropic", text, stream),
        )
        .to_string();
        post(
            &self.gateway.base,
            "/v1/messages",
            body,
            &[("x-claude-code-session-id", "client-1")],
        )
        .await
    }

    async fn text(&self, text: &str) -> String {
        let reply = self.ask(text, false).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply
            .decode(Dialect::Anthropic, false)
            .expect("decodes")
            .plain_text()
    }

    /// Run tmux against this test's own server (its socket lives under the temp dir).
    fn tmux(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .args(args)
            .env("TMUX_TMPDIR", self.path("tmux"))
            .output()
            .expect("tmux is installed (.ci/run installs it)")
    }
}

impl Drop for Setup {
    /// A failed assertion must not leave this test's tmux server (and a fake agy) behind.
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("kill-server")
            .env("TMUX_TMPDIR", self.path("tmux"))
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A gateway whose `delegate:` section is `vendors` (YAML lines for cursor_agent/agy,
/// indented by two), with `workdir`, `timeout_secs` and `$GLIDER_TEST_DIR` set. `pids`
/// records running delegates in runstate.
async fn setup(
    vendors: impl Fn(&Path) -> String,
    timeout_secs: u64,
    pids: Option<glider_sys::runstate::DelegatePids>,
) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("work")).expect("workdir");
    std::fs::create_dir(dir.path().join("tmux")).expect("tmux dir");
    let (mock, yaml) = mock_and_config(&format!(
        "delegate:\n  workdir: '{}'\n  timeout_secs: {timeout_secs}\n{}",
        dir.path().join("work").display(),
        vendors(dir.path())
    ))
    .await;
    let delegator = Arc::new(match pids {
        Some(pids) => glider_delegate::Delegator::with_pids(pids),
        None => glider_delegate::Delegator::new(),
    });
    let gateway = gateway_with_delegator(&yaml, delegator).await;
    Setup {
        dir,
        gateway,
        _mock: mock,
    }
}

fn cursor(extra: &str) -> impl Fn(&Path) -> String {
    let extra = extra.to_owned();
    move |dir: &Path| {
        format!(
            "  cursor_agent:\n    path: '{}'\n    env: {{GLIDER_TEST_DIR: '{}'}}\n{extra}",
            fixture("cursor-agent"),
            dir.display()
        )
    }
}

fn agy(extra: &str) -> impl Fn(&Path) -> String {
    agy_with_env("", extra)
}

/// `agy` with more `env` entries (`, K: V` YAML flow items) and `extra` settings.
fn agy_with_env(more_env: &str, extra: &str) -> impl Fn(&Path) -> String {
    let (more_env, extra) = (more_env.to_owned(), extra.to_owned());
    move |dir: &Path| {
        format!(
            "  agy:\n    path: '{}'\n    env: {{GLIDER_TEST_DIR: '{}', TMUX_TMPDIR: '{}'{more_env}}}\n{extra}",
            fixture("agy"),
            dir.display(),
            dir.join("tmux").display()
        )
    }
}

#[tokio::test]
async fn cursor_agent_streams_its_messages_and_tools_and_resumes_its_chat() {
    let s = setup(cursor("    allow_all_tools: true\n"), 30, None).await;
    let reply = s.ask("/cursor-agent write notes", true).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.headers["x-glider-route"], "delegate:cursor-agent");
    assert!(reply.text().contains("event: content_block_delta"));
    let text = reply
        .decode(Dialect::Anthropic, true)
        .expect("decodes")
        .plain_text();
    let chat = format!("chat-{}", s.pids()[0]);
    assert_eq!(
        text,
        format!(
            "Reading the README first.\n[tool: read README.md]\n[tool: write NOTES.md]\nWrote NOTES.md in chat {chat}."
        )
    );
    // The policy allows every tool: --force.
    assert_eq!(
        s.lines("argv.log")[0],
        "-p --output-format stream-json --force -- write notes"
    );
    assert_eq!(s.lines("cwd.log")[0], s.workdir());
    assert!(group_gone(s.pids()[0]).await.is_empty());

    let text = s.text("/cursor-agent now add a test").await;
    assert!(text.contains(&format!("in chat {chat}.")), "{text}");
    assert_eq!(
        s.lines("argv.log")[1],
        format!("-p --output-format stream-json --force --resume {chat} -- now add a test")
    );
}

#[tokio::test]
async fn cursor_agent_crash_and_hang_are_clear_errors_and_leave_nothing() {
    let s = setup(cursor(""), 1, None).await;
    let reply = s.ask("/cursor-agent crash now", false).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("cursor-agent exited with exit status: 1"),
        "{message}"
    );
    assert!(message.contains("cursor-agent login"), "{message}");
    assert!(group_gone(s.pids()[0]).await.is_empty());

    let reply = s.ask("/cursor-agent hang forever", true).await;
    assert_eq!(reply.status, 200);
    assert!(reply.text().contains("event: error"), "{}", reply.text());
    assert!(
        reply.text().contains("delegate.timeout_secs"),
        "{}",
        reply.text()
    );
    assert_eq!(group_gone(s.pids()[1]).await, Vec::<u32>::new());
}

#[tokio::test]
async fn a_missing_cursor_agent_or_agy_gets_a_clear_reply() {
    let s = setup(
        |_: &Path| {
            "  cursor_agent: {path: /nonexistent/cursor-agent}\n  agy: {path: /nonexistent/agy}\n"
                .to_owned()
        },
        30,
        None,
    )
    .await;
    let text = s.text("/cursor-agent do it").await;
    assert!(text.contains("not installed"), "{text}");
    assert!(text.contains("delegate.cursor_agent.path"), "{text}");
    let text = s.text("/agy do it").await;
    assert!(text.contains("not installed"), "{text}");
    assert!(text.contains("/nonexistent/agy"), "{text}");
}

#[tokio::test]
async fn a_running_delegate_is_in_runstate_until_the_client_disconnects() {
    let home = tempfile::tempdir().expect("home");
    let (run, _) = glider_sys::runstate::RunState::start(home.path(), "test", &[]).expect("start");
    let s = setup(cursor(""), 60, Some(run.delegate_pids())).await;
    let recorded = || -> Vec<(u64, String)> {
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.path()).expect("runstate")).expect("json");
        record["delegates"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|d| {
                        (
                            d["pgid"].as_u64().unwrap_or(0),
                            d["cli"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let body = wire(
        Dialect::Anthropic,
        &text_request("m-anthropic", "/cursor-agent slow job", true),
    )
    .to_string();
    let response = client
        .post(format!("{}/v1/messages", s.gateway.base))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("answers");
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("started") {
        let chunk = stream.next().await.expect("more").expect("chunk");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let pgid = s.pids()[0];
    // Written in the background, but on disk before the run's first event.
    assert_eq!(
        recorded(),
        vec![(u64::from(pgid), "cursor-agent".to_owned())]
    );
    assert!(
        group_members(pgid).len() >= 2,
        "script and its grandchild run"
    );
    drop(stream);
    drop(client);
    assert_eq!(
        group_gone(pgid).await,
        Vec::<u32>::new(),
        "delegate survived"
    );
    assert!(
        until(|| recorded().is_empty()).await,
        "still recorded: {:?}",
        recorded()
    );
}

#[tokio::test]
async fn agy_opens_a_detached_tmux_session_and_answers_at_once() {
    let s = setup(agy("    args: [--model, gemini-3-pro]\n"), 30, None).await;
    let started = Instant::now();
    let text = s.text("/agy refactor the parser").await;
    let took = started.elapsed();
    // The fake agy sleeps 300 s in its console: the reply did not wait for it.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let session = text
        .split('`')
        .nth(1)
        .expect("the reply names the session")
        .to_owned();
    assert!(session.starts_with("glider-agy-"), "{text}");
    assert!(
        text.contains(&format!("tmux attach -t {session}")),
        "{text}"
    );
    let has = s.tmux(&["has-session", "-t", &session]);
    assert!(has.status.success(), "the tmux session exists: {has:?}");
    // The fake logs its pid before its prompt: wait for the prompt, its last log line.
    assert!(
        until(|| !s.lines("prompt.log").is_empty()).await,
        "agy started in the session"
    );
    let pid = s.pids()[0];
    assert_eq!(
        s.lines("argv.log")[0],
        "--model gemini-3-pro -- refactor the parser"
    );
    assert_eq!(s.lines("prompt.log")[0], "refactor the parser");
    assert_eq!(s.lines("cwd.log")[0], s.workdir());
    assert!(alive(pid), "Glider does not stop it");

    let killed = s.tmux(&["kill-session", "-t", &session]);
    assert!(killed.status.success(), "{killed:?}");
    assert!(until(|| !alive(pid)).await, "agy outlived its tmux session");
}

#[tokio::test]
async fn a_console_that_does_not_open_is_a_clear_error() {
    let s = setup(
        |dir: &Path| {
            format!(
                "  interactive_command: [sh, -c, 'echo no display here >&2; exit 3']\n{}",
                agy("")(dir)
            )
        },
        30,
        None,
    )
    .await;
    let reply = s.ask("/agy do it", false).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("the interactive console did not open"),
        "{message}"
    );
    assert!(message.contains("no display here"), "{message}");
    assert!(s.pids().is_empty(), "agy never started");
}

#[tokio::test]
async fn agy_headless_relays_its_text_and_fails_clearly() {
    let s = setup(agy("    mode: headless\n"), 1, None).await;
    let reply = s.ask("/agy fix it", true).await;
    assert_eq!(reply.headers["x-glider-route"], "delegate:agy");
    let text = reply
        .decode(Dialect::Anthropic, true)
        .expect("decodes")
        .plain_text();
    assert_eq!(text, "Planning the change.\nDone: edited src/lib.rs.\n");
    assert_eq!(s.lines("argv.log")[0], "--print=fix it");
    assert_eq!(s.lines("prompt.log")[0], "fix it");
    assert!(group_gone(s.pids()[0]).await.is_empty());

    let reply = s.ask("/agy crash", false).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(reply.text().contains("not signed in"), "{}", reply.text());
    assert!(group_gone(s.pids()[1]).await.is_empty());

    let reply = s.ask("/agy hang", true).await;
    assert!(
        reply.text().contains("delegate.timeout_secs"),
        "{}",
        reply.text()
    );
    assert_eq!(group_gone(s.pids()[2]).await, Vec::<u32>::new());
}

#[tokio::test]
async fn a_task_starting_with_a_dash_is_the_prompt_not_a_flag() {
    // Headless: the prompt is the value of --print, joined to it.
    let s = setup(agy("    mode: headless\n"), 30, None).await;
    let text = s.text("/agy -v be brief").await;
    assert_eq!(text, "Planning the change.\nDone: edited src/lib.rs.\n");
    assert_eq!(s.lines("argv.log")[0], "--print=-v be brief");
    assert_eq!(s.lines("prompt.log")[0], "-v be brief");
    drop(s);

    // Interactive: `--` ends agy's options; without it the fake (like a Go flag
    // parser) refuses `--help` as an unknown flag and exits.
    let s = setup(agy(""), 30, None).await;
    let text = s.text("/agy --help me refactor").await;
    assert!(text.contains("running in its own console"), "{text}");
    assert!(
        until(|| !s.lines("prompt.log").is_empty()).await,
        "agy did not take its prompt: {:?}",
        s.lines("argv.log")
    );
    assert_eq!(s.lines("prompt.log")[0], "--help me refactor");
    assert!(alive(s.pids()[0]), "agy runs its session");
}

#[tokio::test]
async fn the_consoles_env_reaches_agy_but_never_an_argv() {
    // A quote, spaces and a `$` check the quoting too.
    const SECRET: &str = "sk-glider-test-7f3a9 it's $HOME";
    let s = setup(
        agy_with_env(
            ", GLIDER_TEST_SECRET: \"sk-glider-test-7f3a9 it's $HOME\"",
            "",
        ),
        30,
        None,
    )
    .await;
    // A tmux server that already runs (without the secret) does not hand a new
    // session the launcher's environment: only the env file can bring it.
    let keep = s.tmux(&["new-session", "-d", "-s", "keep", "sleep 300"]);
    assert!(keep.status.success(), "{keep:?}");
    let text = s.text("/agy read the logs").await;
    let session = text
        .split('`')
        .nth(1)
        .expect("names the session")
        .to_owned();
    // The fake logs its prompt after its env.
    assert!(
        until(|| !s.lines("prompt.log").is_empty()).await,
        "agy started"
    );
    assert_eq!(s.lines("secret.log")[0], SECRET, "agy sees its env");
    assert_eq!(s.lines("prompt.log")[0], "read the logs");
    assert!(!s.lines("argv.log").concat().contains("sk-glider-test"));
    // Not in what tmux ran the pane with, nor in any process's command line.
    let panes = s.tmux(&["list-panes", "-a", "-F", "#{pane_start_command}"]);
    let panes = String::from_utf8_lossy(&panes.stdout).into_owned();
    assert!(panes.contains("sh -c"), "{panes}");
    assert!(!panes.contains("sk-glider-test"), "{panes}");
    let in_argv: Vec<String> = std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("sk-glider-test"))
        .collect();
    assert!(in_argv.is_empty(), "{in_argv:?}");
    // The file was read and deleted by the console's shell.
    let dir = glider_delegate::interactive::env_dir().expect("env dir");
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("read env dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&session))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
