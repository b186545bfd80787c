//! Delegation through the gateway: `/claude <task>` runs a fake Claude Code (a shell
//! script printing Claude Code's documented stream-json) in its own process group, and
//! the reply streams back in the client's dialect; resume, crash, hang, disconnect and
//! missing-CLI cases each end with a clear reply and no process left.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use common::procs::{DelegateLab as Setup, group_gone, group_members};
use common::{gateway, mock_and_config, post, text_request, wire};
use futures_util::StreamExt;
use glider_ngl::Dialect;

/// A fake `claude`: logs its argv (one line per run), records its pid (= its process
/// group), and behaves by the task's text: `crash`, `hang` (with a grandchild), `slow`
/// (a line, then waits with a grandchild), `huge` (50 MB on one line, no newline, then
/// waits), else a normal run. A resumed run keeps the
/// resumed session id, a fresh one gets `sess-<pid>`.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
printf '%s\n' "$*" >> "$GLIDER_TEST_DIR/argv.log"
echo $$ >> "$GLIDER_TEST_DIR/pids.log"
pwd > "$GLIDER_TEST_DIR/cwd.log"
sid="sess-$$"
prev=""
for a in "$@"; do
  if [ "$prev" = "--resume" ]; then sid="$a"; fi
  prev="$a"
done
case "$*" in
  *crash*) echo "boom: no credentials" >&2; exit 1 ;;
  *hang*) sleep 300 & sleep 300 ;;
  *huge*) head -c 50000000 /dev/zero | tr '\0' a; exec sleep 300 ;;
esac
echo '{"type":"system","subtype":"init","session_id":"'$sid'","tools":["Bash"]}'
# Permissions, as Claude Code -p reports them: the refused tool_use gets an error
# tool_result, the model goes on, and `result.permission_denials` lists what was refused.
case "$*" in
  *"--allowedTools "*"Bash(rm -rf build)"*"granted the permission"*)
    echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Removed build (allowed)."}]},"session_id":"'$sid'"}'
    echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","permission_denials":[],"session_id":"'$sid'"}'
    exit 0 ;;
  *"refused the permission"*)
    echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Leaving build in place."}]},"session_id":"'$sid'"}'
    echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","permission_denials":[],"session_id":"'$sid'"}'
    exit 0 ;;
  *needs-permission*)
    echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t9","name":"Bash","input":{"command":"rm -rf build","description":"Remove build"}}]},"session_id":"'$sid'"}'
    echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t9","is_error":true,"content":"Claude requested permissions to use Bash, but you have not granted it yet."}]},"session_id":"'$sid'"}'
    echo '{"type":"assistant","message":{"content":[{"type":"text","text":"I need permission to remove build."}]},"session_id":"'$sid'"}'
    echo '{"type":"result","subtype":"success","is_error":false,"result":"I need permission to remove build.","permission_denials":[{"tool_name":"Bash","tool_use_id":"t9","tool_input":{"command":"rm -rf build","description":"Remove build"}}],"session_id":"'$sid'"}'
    exit 0 ;;
esac
case "$*" in
  *slow*)
    sleep 300 &
    echo '{"type":"assistant","message":{"content":[{"type":"text","text":"started"}]},"session_id":"'$sid'"}'
    sleep 300 ;;
esac
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Looking at the parser."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls src"}}]},"session_id":"'$sid'"}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"main.rs"}]},"session_id":"'$sid'"}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Refactored in session '$sid'."}]},"session_id":"'$sid'"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'$sid'"}'
"#;

async fn setup(claude_path: Option<&str>, timeout_secs: u64) -> Setup {
    setup_with(claude_path, timeout_secs, "").await
}

async fn setup_with(claude_path: Option<&str>, timeout_secs: u64, extra: &str) -> Setup {
    setup_full(claude_path, timeout_secs, extra, "").await
}

/// `extra` goes into `delegate:`, `claude_extra` into `delegate.claude:` (both indented).
async fn setup_full(
    claude_path: Option<&str>,
    timeout_secs: u64,
    extra: &str,
    claude_extra: &str,
) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("claude");
    std::fs::write(&script, FAKE_CLAUDE).expect("write fake claude");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("workdir");
    let path = claude_path.map_or(script.display().to_string(), str::to_owned);
    let (mock, yaml) = mock_and_config(&format!(
        "delegate:\n{extra}  workdir: '{}'\n  timeout_secs: {timeout_secs}\n  claude:\n{claude_extra}    path: '{path}'\n    env: {{GLIDER_TEST_DIR: '{}'}}\n",
        work.display(),
        dir.path().display()
    ))
    .await;
    let gateway = gateway(&yaml).await;
    Setup {
        dir,
        gateway,
        _mock: mock,
    }
}

fn body(front: Dialect, text: &str, stream: bool) -> String {
    wire(front, &text_request("m-anthropic", text, stream)).to_string()
}

async fn ask(s: &Setup, front: Dialect, text: &str, stream: bool) -> common::Reply {
    post(
        &s.gateway.base,
        common::front_path(front),
        body(front, text, stream),
        &[("x-claude-code-session-id", "client-1")],
    )
    .await
}

#[tokio::test]
async fn a_delegated_task_streams_back_and_a_second_one_resumes_its_session() {
    let s = setup(None, 30).await;
    let reply = ask(&s, Dialect::Anthropic, "/claude refactor the parser", true).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.headers["x-glider-route"], "delegate:claude");
    assert!(
        reply.text().contains("event: content_block_delta"),
        "{}",
        reply.text()
    );
    let text = reply
        .decode(Dialect::Anthropic, true)
        .expect("decodes")
        .plain_text();
    let pids = s.pids();
    let first = format!("sess-{}", pids[0]);
    assert!(text.contains("Looking at the parser."), "{text}");
    assert!(text.contains("[tool: Bash ls src]"), "{text}");
    assert!(
        text.contains(&format!("Refactored in session {first}.")),
        "{text}"
    );
    let argv = s.lines("argv.log");
    assert_eq!(
        argv[0],
        "-p --output-format stream-json --verbose -- refactor the parser"
    );
    // It ran in delegate.workdir, not the server's cwd.
    assert_eq!(
        s.lines("cwd.log")[0],
        std::fs::canonicalize(s.path("work"))
            .expect("canon")
            .display()
            .to_string()
    );
    assert!(group_gone(pids[0]).await.is_empty());

    // Same client session, now from an OpenAI client, not streamed: resumes.
    let reply = ask(&s, Dialect::OpenAiChat, "/claude now add tests", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply
        .decode(Dialect::OpenAiChat, false)
        .expect("decodes")
        .plain_text();
    assert!(
        text.contains(&format!("Refactored in session {first}.")),
        "{text}"
    );
    assert_eq!(
        s.lines("argv.log")[1],
        format!("-p --output-format stream-json --verbose --resume {first} -- now add tests")
    );
}

#[tokio::test]
async fn an_unknown_flag_goes_to_the_pipeline() {
    let s = setup(None, 30).await;
    let reply = ask(&s, Dialect::Anthropic, "/codex hello", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_ne!(reply.headers["x-glider-route"], "delegate:claude");
    assert!(s.pids().is_empty(), "no delegate ran");
}

#[tokio::test]
async fn a_missing_cli_gets_a_clear_reply_in_the_clients_dialect() {
    let s = setup(Some("/nonexistent/claude"), 30).await;
    for front in [Dialect::Anthropic, Dialect::OpenAiResponses] {
        let reply = ask(&s, front, "/claude do things", false).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let text = reply.decode(front, false).expect("decodes").plain_text();
        assert!(text.contains("not installed"), "{text}");
        assert!(text.contains("/nonexistent/claude"), "{text}");
    }
}

#[tokio::test]
async fn a_crashing_delegate_is_a_clear_error_with_its_stderr() {
    let s = setup(None, 30).await;
    let reply = ask(&s, Dialect::Anthropic, "/claude crash please", false).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.contains("exited with exit status: 1"), "{message}");
    assert!(message.contains("boom: no credentials"), "{message}");
    assert!(group_gone(s.pids()[0]).await.is_empty());
}

#[tokio::test]
async fn a_hung_delegate_times_out_and_its_group_is_killed() {
    let s = setup(None, 1).await;
    let reply = ask(&s, Dialect::Anthropic, "/claude hang forever", true).await;
    assert_eq!(reply.status, 200);
    let text = reply.text();
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("delegate.timeout_secs"), "{text}");
    let pgid = s.pids()[0];
    assert_eq!(
        group_gone(pgid).await,
        Vec::<u32>::new(),
        "sleepers survived"
    );
}

#[tokio::test]
async fn a_client_disconnect_kills_the_process_group() {
    let s = setup(None, 60).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let response = client
        .post(format!("{}/v1/messages", s.gateway.base))
        .header("content-type", "application/json")
        .body(body(Dialect::Anthropic, "/claude slow job", true))
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
}

#[tokio::test]
async fn the_flag_alone_without_a_run_explains_itself() {
    let s = setup(None, 30).await;
    let reply = ask(&s, Dialect::OpenAiChat, "/claude", false).await;
    let text = reply
        .decode(Dialect::OpenAiChat, false)
        .expect("decodes")
        .plain_text();
    assert!(text.contains("usage: /claude <task>"), "{text}");
    assert!(s.pids().is_empty());
}

#[tokio::test]
async fn output_past_the_limit_is_cut_and_the_run_stopped() {
    // "slow" prints `started` (7 bytes) and then sleeps: only stopping the run ends it.
    let s = setup_with(None, 30, "  max_output_bytes: 5\n").await;
    let reply = ask(&s, Dialect::Anthropic, "/claude slow job", true).await;
    let response = reply.decode(Dialect::Anthropic, true).expect("decodes");
    let text = response.plain_text();
    assert!(text.starts_with("start\n"), "{text}");
    assert!(
        text.contains("delegate.max_output_bytes (5 bytes)"),
        "{text}"
    );
    assert_eq!(response.stop_reason, glider_ngl::StopReason::MaxTokens);
    assert!(group_gone(s.pids()[0]).await.is_empty());
}

#[tokio::test]
async fn one_endless_line_stops_at_the_limit_instead_of_filling_memory() {
    // Read line by line without a cap, the 50 MB would be buffered whole and then the
    // run would wait for a newline until the timeout; capped, the limit stops it.
    let s = setup_with(None, 60, "  max_output_bytes: 1000\n").await;
    let started = std::time::Instant::now();
    let reply = ask(&s, Dialect::Anthropic, "/claude huge answer", true).await;
    let response = reply.decode(Dialect::Anthropic, true).expect("decodes");
    let text = response.plain_text();
    assert!(
        text.contains("delegate.max_output_bytes (1000 bytes"),
        "{text}"
    );
    assert_eq!(response.stop_reason, glider_ngl::StopReason::MaxTokens);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(group_gone(s.pids()[0]).await, Vec::<u32>::new());
}

async fn text_of(s: &Setup, session: &str, text: &str) -> String {
    let reply = post(
        &s.gateway.base,
        "/v1/messages",
        body(Dialect::Anthropic, text, false),
        &[("x-claude-code-session-id", session)],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply
        .decode(Dialect::Anthropic, false)
        .expect("decodes")
        .plain_text()
}

#[tokio::test]
async fn a_refused_permission_is_asked_and_allow_resumes_with_the_tool_allowed() {
    let s = setup_full(
        None,
        30,
        "",
        "    allowed_tools: [Read, 'Bash(git log:*)']\n",
    )
    .await;
    let text = text_of(&s, "perm", "/claude clean up needs-permission").await;
    assert!(
        text.contains("I need permission to remove build."),
        "{text}"
    );
    assert!(
        text.contains("[claude asked for permission and was refused: Bash rm -rf build]"),
        "{text}"
    );
    assert!(
        text.contains("`/claude allow`") && text.contains("`/claude deny`"),
        "{text}"
    );
    let first = format!("sess-{}", s.pids()[0]);
    // The configured policy is passed on every run.
    assert_eq!(
        s.lines("argv.log")[0],
        "-p --output-format stream-json --verbose --allowedTools Read,Bash(git log:*) -- clean up needs-permission"
    );

    // Another client session has no question waiting.
    let other = text_of(&s, "someone-else", "/claude allow").await;
    assert!(other.contains("no permission question"), "{other}");

    let text = text_of(&s, "perm", "/claude allow").await;
    assert!(text.contains("Removed build (allowed)."), "{text}");
    assert_eq!(
        s.lines("argv.log")[1],
        format!(
            "-p --output-format stream-json --verbose --allowedTools Read,Bash(git log:*),Bash(rm -rf build) --resume {first} -- The user granted the permission you asked for (Bash rm -rf build). Continue the task."
        )
    );
    // The question was answered: a second answer has nothing to answer.
    let again = text_of(&s, "perm", "/claude allow").await;
    assert!(again.contains("no permission question"), "{again}");
    assert_eq!(s.lines("argv.log").len(), 2, "no run for a stale answer");
    for pid in s.pids() {
        assert!(group_gone(pid).await.is_empty());
    }
}

#[tokio::test]
async fn deny_resumes_telling_the_delegate_and_a_stale_question_expires() {
    let s = setup_with(None, 30, "  ask_ttl_secs: 1\n").await;
    text_of(&s, "perm", "/claude clean up needs-permission").await;
    let first = format!("sess-{}", s.pids()[0]);
    let text = text_of(&s, "perm", "/claude deny").await;
    assert!(text.contains("Leaving build in place."), "{text}");
    assert_eq!(
        s.lines("argv.log")[1],
        format!(
            "-p --output-format stream-json --verbose --resume {first} -- The user refused the permission you asked for (Bash rm -rf build). Do not use it; continue the task without it, or say what you need instead."
        )
    );

    // Asked again, answered after the question expired (ask_ttl_secs: 1): refused.
    text_of(&s, "perm", "/claude clean up needs-permission").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let late = text_of(&s, "perm", "/claude allow").await;
    assert!(late.contains("no permission question"), "{late}");
    assert!(late.contains("delegate.ask_ttl_secs"), "{late}");
    assert_eq!(s.lines("argv.log").len(), 3);
}

/// The real Claude Code (from npm) as this gateway's `/claude` delegate, with a throwaway
/// HOME, its own model requests pointed back at the gateway and on to the mock.
struct RealClaude {
    _dir: tempfile::TempDir,
    work: PathBuf,
    mock: glider_test_support::MockVendor,
    gw: common::Gateway,
}

async fn real_claude() -> RealClaude {
    let claude = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/cli/node_modules/.bin/claude");
    assert!(
        claude.exists(),
        "{} is missing: run `npm ci --prefix tests/cli` (.ci/run does)",
        claude.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir(&home).expect("home");
    std::fs::create_dir(&work).expect("work");
    let (mock, yaml) = mock_and_config("model_aliases: {'claude-*': m-anthropic}\n").await;
    let gw = gateway(&yaml).await;
    // The delegate's own base URL is this gateway, known only once it listens.
    let with_delegate = format!(
        "{yaml}delegate:\n  workdir: '{}'\n  timeout_secs: 120\n  claude:\n    path: '{}'\n    env: {{HOME: '{}', ANTHROPIC_BASE_URL: '{}', ANTHROPIC_API_KEY: test-key, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1', DISABLE_AUTOUPDATER: '1', CLAUDE_CODE_MAX_RETRIES: '0', NO_PROXY: '127.0.0.1,localhost'}}\n",
        work.display(),
        claude.display(),
        home.display(),
        gw.base
    );
    gw.config
        .apply(glider_config::Config::parse(&with_delegate, "test").expect("valid"));
    for _ in 0..200 {
        if gw.engine.runtime().config.delegate.workdir.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        gw.engine.runtime().config.delegate.workdir.is_some(),
        "the reload applied"
    );
    RealClaude {
        _dir: dir,
        work,
        mock,
        gw,
    }
}

/// The real Claude Code (from npm, installed by `.ci/run` under tests/cli) as the
/// delegate, headless with a throwaway HOME, its own requests pointed back at this
/// Glider and on to the mock: the task's answer streams back, and a second `/claude`
/// resumes the same Claude Code session (its next request carries the first exchange).
#[tokio::test]
async fn the_real_claude_code_is_a_delegate_and_resumes_its_session() {
    let real = real_claude().await;
    let (mock, gw) = (&real.mock, &real.gw);
    let session = [("x-claude-code-session-id", "real-client")];
    let first = post(
        &gw.base,
        "/v1/messages",
        body(
            Dialect::Anthropic,
            "/claude say hello from the delegate",
            true,
        ),
        &session,
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.headers["x-glider-route"], "delegate:claude");
    let text = first
        .decode(Dialect::Anthropic, true)
        .expect("decodes")
        .plain_text();
    // The mock echoes the task Claude Code sent it: the answer came through the real CLI.
    assert!(text.contains("hello from the delegate"), "{text}");
    let claude_turns = mock
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .count();
    assert!(
        claude_turns >= 1,
        "Claude Code asked the model through Glider"
    );

    let second = post(
        &gw.base,
        "/v1/messages",
        body(Dialect::Anthropic, "/claude and once more", false),
        &session,
    )
    .await;
    assert_eq!(second.status, 200, "{}", second.text());
    let last = mock
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path == "/v1/messages")
        .expect("a model request");
    let conversation = last.body["messages"].to_string();
    assert!(
        conversation.contains("hello from the delegate") && conversation.contains("and once more"),
        "the resumed run carries the first exchange: {conversation}"
    );
}

/// The real Claude Code refuses a tool outside the policy (the mock's reply asks it to
/// run `touch`): its own `result.permission_denials` becomes the question in the reply,
/// nothing ran, `/claude allow` resumes the same session with that exact command
/// allowed, and the CLI then runs it.
#[tokio::test]
async fn the_real_claude_codes_refused_tool_comes_back_as_a_question() {
    let real = real_claude().await;
    let session = [("x-claude-code-session-id", "real-perm")];
    let ask = |text: &str| {
        post(
            &real.gw.base,
            "/v1/messages",
            body(Dialect::Anthropic, text, false),
            &session,
        )
    };
    let first = ask(r#"/claude please [[call:Bash {"command":"touch made-by-claude","description":"Create a file"}]]"#).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let text = first
        .decode(Dialect::Anthropic, false)
        .expect("decodes")
        .plain_text();
    assert!(text.contains("[tool: Bash touch made-by-claude]"), "{text}");
    assert!(
        text.contains("[claude asked for permission and was refused: Bash touch made-by-claude]"),
        "{text}"
    );
    assert!(
        !real.work.join("made-by-claude").exists(),
        "the refused tool did not run"
    );
    let turns_before = real
        .mock
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .count();

    let second = ask("/claude allow").await;
    assert_eq!(second.status, 200, "{}", second.text());
    let last = real
        .mock
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path == "/v1/messages")
        .expect("a model request");
    let conversation = last.body["messages"].to_string();
    assert!(
        real.mock
            .requests()
            .iter()
            .filter(|r| r.path == "/v1/messages")
            .count()
            > turns_before,
        "the resumed run asked the model again"
    );
    assert!(
        conversation.contains("touch made-by-claude")
            && conversation.contains("The user granted the permission you asked for"),
        "the same session resumed with the answer: {conversation}"
    );

    // The rule Glider added (`Bash(touch made-by-claude)`) is one the real CLI honours:
    // asked for the same command again in this session, it runs it without asking.
    let third = ask(r#"/claude again [[call:Bash {"command":"touch made-by-claude","description":"Create a file"}]]"#).await;
    let text = third
        .decode(Dialect::Anthropic, false)
        .expect("decodes")
        .plain_text();
    assert!(!text.contains("asked for permission"), "{text}");
    assert!(
        real.work.join("made-by-claude").exists(),
        "the allowed tool ran: {text}"
    );
}

#[tokio::test]
async fn a_cross_site_page_cannot_start_a_delegate() {
    let s = setup(None, 30).await;
    // What a web page can send without a preflight: a text/plain POST with its Origin.
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let reply = client
        .post(format!("{}/v1/messages", s.gateway.base))
        .header("content-type", "text/plain")
        .header("origin", "http://evil.example")
        .body(body(Dialect::Anthropic, "/claude rm -rf everything", false))
        .send()
        .await
        .expect("gateway answers");
    assert_eq!(reply.status(), 403);
    let error: serde_json::Value = reply.json().await.expect("json");
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "permission_error", "{error}");
    assert!(
        !s.path("argv.log").exists(),
        "the delegate must not have run: {:?}",
        s.lines("argv.log")
    );
    // The same message without an Origin (a CLI) still delegates.
    let reply = ask(&s, Dialect::Anthropic, "/claude refactor the parser", false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(s.lines("argv.log").len(), 1);
}

#[tokio::test]
async fn each_delegate_run_is_a_delegate_event_in_the_context_log_with_its_exit_and_session() {
    let s = setup(None, 30).await;
    let home = tempfile::tempdir().expect("tempdir");
    let context =
        glider_context::Context::start(home.path(), &glider_config::ContextConfig::default())
            .expect("context log opens")
            .expect("enabled");
    assert!(s.gateway.engine.attach_context(context.clone()).is_ok());

    let done = ask(&s, Dialect::Anthropic, "/claude refactor the parser", true).await;
    assert_eq!(done.status, 200, "{}", done.text());
    let crashed = ask(&s, Dialect::OpenAiChat, "/claude crash please", false).await;
    assert_eq!(crashed.status, 502, "{}", crashed.text());
    context.log().flush();

    let events = glider_context::Reader::new(glider_context::dir(home.path()))
        .events("claude-code:client-1")
        .expect("events read");
    let runs: Vec<serde_json::Value> = events
        .iter()
        .map(|stored| serde_json::to_value(&stored.event.body).expect("JSON"))
        .filter(|body| body["kind"] == "delegate")
        .collect();
    assert_eq!(runs.len(), 2, "one event per run: {runs:?}");
    assert_eq!(runs[0]["vendor"], "claude");
    assert_eq!(runs[0]["exit_code"], 0);
    assert!(runs[0]["error"].is_null(), "{runs:?}");
    assert_eq!(runs[1]["exit_code"], 1);
    let error = runs[1]["error"].as_str().unwrap_or_default();
    assert!(error.contains("boom: no credentials"), "{error}");
    assert!(
        runs.iter().all(|r| r["duration_ms"].as_u64().is_some()),
        "{runs:?}"
    );
    // Delegation never enters the pipeline: no request event besides the runs.
    assert_eq!(events.len(), 2, "{events:?}");
}
