//! MCP through Glider with real third-party servers from npm (tests/cli's
//! node_modules: `@modelcontextprotocol/server-everything` and `server-filesystem`):
//! the hub over stdio (echo, read a file, allow/deny, a crashed server restarted with
//! its tools back), the everything server's Streamable HTTP mode behind the gateway's
//! `/mcp` (list, call, `tools/list_changed` on a hot reload, `/api/mcp`), and no stdio
//! server left running after Glider is SIGKILLed, once it starts again.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::procs::{alive, group_members, until};
use common::serve::serve_yaml;
use glider_config::McpConfig;
use glider_mcp::{McpHub, ServerState, ToolError};
use rmcp::model::CallToolRequestParams;
use rmcp::service::NotificationContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;

fn node_modules() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/cli/node_modules/@modelcontextprotocol");
    assert!(
        dir.join("server-everything/dist/index.js").exists(),
        "the MCP servers from npm are missing: run `npm ci --prefix tests/cli`"
    );
    dir
}

fn everything() -> String {
    node_modules()
        .join("server-everything/dist/index.js")
        .display()
        .to_string()
}

fn mcp_config(yaml: &str) -> McpConfig {
    let config: McpConfig = serde_saphyr::from_str(yaml).expect("mcp config parses");
    assert_eq!(config.problems(), Vec::<String>::new());
    config
}

/// Wait (bounded) until the hub offers `tool`.
async fn offered(hub: &McpHub, tool: &str) {
    let found = until(|| hub.tools().iter().any(|t| t.name == tool)).await;
    assert!(found, "{tool} never offered; servers: {:?}", hub.servers());
}

#[tokio::test]
async fn everything_over_stdio_lists_and_echoes() {
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  everything: {{command: node, args: ['{}', stdio]}}\n",
        everything()
    )));
    offered(&hub, "everything__echo").await;
    let echo = hub
        .tools()
        .into_iter()
        .find(|t| t.name == "everything__echo")
        .expect("echo");
    assert!(
        echo.input_schema["properties"].get("message").is_some(),
        "{echo:?}"
    );
    let output = hub
        .call("everything__echo", json!({"message": "through glider"}))
        .await
        .expect("echo answers");
    assert!(!output.is_error());
    assert_eq!(output.text(), "Echo: through glider");
    let view = &hub.servers()[0];
    assert_eq!((view.calls, view.errors), (1, 0));
    assert!(matches!(
        hub.call("everything__echo", json!([1])).await,
        Err(ToolError::BadArguments)
    ));
    hub.shutdown().await;
    assert!(hub.tools().is_empty());
}

#[tokio::test]
async fn allow_and_deny_filter_the_tools() {
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  ev: {{command: node, args: ['{}', stdio], allow: ['echo', 'get-*'], deny: ['get-env']}}\n",
        everything()
    )));
    offered(&hub, "ev__echo").await;
    let mut names: Vec<String> = hub.tools().into_iter().map(|t| t.name).collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| n == "ev__echo" || n.starts_with("ev__get-")),
        "{names:?}"
    );
    assert!(names.contains(&"ev__get-sum".to_owned()), "{names:?}");
    assert!(!names.contains(&"ev__get-env".to_owned()), "{names:?}");
    assert!(matches!(
        hub.call("ev__get-env", json!({})).await,
        Err(ToolError::NotOffered { .. })
    ));
    assert!(matches!(
        hub.call("nobody__echo", json!({})).await,
        Err(ToolError::UnknownTool(_))
    ));
    hub.shutdown().await;
}

#[tokio::test]
async fn filesystem_over_stdio_reads_a_file() {
    let root = tempfile::tempdir().expect("temp dir");
    let root_path = root.path().canonicalize().expect("canonical");
    std::fs::write(root_path.join("notes.txt"), "hello from a temp dir\n").expect("written");
    let server = node_modules().join("server-filesystem/dist/index.js");
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  files: {{command: node, args: ['{}', '{}']}}\n",
        server.display(),
        root_path.display()
    )));
    offered(&hub, "files__read_text_file").await;
    let output = hub
        .call(
            "files__read_text_file",
            json!({"path": root_path.join("notes.txt")}),
        )
        .await
        .expect("read answers");
    assert!(!output.is_error(), "{:?}", output.result);
    assert!(
        output.text().contains("hello from a temp dir"),
        "{}",
        output.text()
    );
    // Outside its root the server itself refuses, as a tool error.
    let outside = hub
        .call("files__read_text_file", json!({"path": "/etc/hostname"}))
        .await
        .expect("answered");
    assert!(outside.is_error(), "{:?}", outside.result);
    hub.shutdown().await;
}

#[tokio::test]
async fn a_crashed_stdio_server_is_restarted_and_its_tools_come_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("server.sh");
    let pids = dir.path().join("pids");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ >> '{}'\nexec node '{}' stdio\n",
            pids.display(),
            everything()
        ),
    )
    .expect("script");
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  flaky: {{command: sh, args: ['{}']}}\nrestart_initial_secs: 0.5\n",
        script.display()
    )));
    offered(&hub, "flaky__echo").await;
    let first: u32 = std::fs::read_to_string(&pids)
        .expect("pid written")
        .trim()
        .parse()
        .expect("a pid");
    // The server dies the way a crash does: no goodbye.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    // Its tools go first, then its state says why (the group is reaped in between).
    assert!(
        until(|| hub.tools().is_empty() && hub.servers()[0].state != ServerState::Ready).await,
        "tools stayed offered while the server was down: {:?}",
        hub.servers()
    );
    let down = hub.servers()[0].state.clone();
    assert!(
        matches!(
            down,
            ServerState::Failed { .. } | ServerState::Restarting { .. }
        ),
        "{down:?}"
    );
    offered(&hub, "flaky__echo").await;
    let view = &hub.servers()[0];
    assert_eq!(view.state, ServerState::Ready);
    assert_eq!(view.restarts, 1);
    assert!(view.last_restart.is_some());
    assert!(!alive(first));
    let output = hub
        .call("flaky__echo", json!({"message": "again"}))
        .await
        .expect("echo after the restart");
    assert_eq!(output.text(), "Echo: again");
    hub.shutdown().await;
}

/// Counts `notifications/tools/list_changed` from Glider's `/mcp`.
#[derive(Clone, Default)]
struct ListChanged(Arc<tokio::sync::Notify>);

impl ClientHandler for ListChanged {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notify_one();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The everything server in its Streamable HTTP mode, killed when dropped.
struct HttpServer(std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An MCP session with the Glider `/mcp` at `gateway`, `changed` told of its
/// `tools/list_changed` notifications.
async fn connect_to_glider(
    changed: &ListChanged,
    gateway: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ListChanged> {
    changed
        .clone()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{gateway}/mcp")),
        ))
        .await
        .expect("an MCP session with Glider's /mcp")
}

#[tokio::test]
async fn everything_over_streamable_http_behind_glider_mcp() {
    let port = free_port();
    let _server = HttpServer(
        std::process::Command::new("node")
            .args([everything().as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the everything server starts"),
    );
    assert!(
        until(|| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await,
        "the everything server never listened"
    );
    let home = tempfile::tempdir().expect("home");
    // A reload needs a backend in the file; this one is never asked (nothing listens).
    let base = format!(
        "backends:\n  - {{name: idle, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen]}}\nmcp:\n  servers:\n    remote: {{url: 'http://127.0.0.1:{port}/mcp'}}\n"
    );
    let served = serve_yaml(home.path(), &base);

    let changed = ListChanged::default();
    let client = connect_to_glider(&changed, &served.gateway).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tools = client.list_all_tools().await.expect("tools/list");
        if tools.iter().any(|t| t.name == "remote__echo") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "remote__echo never listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let args = json!({"message": "over http"});
    let result = client
        .call_tool(
            CallToolRequestParams::new("remote__echo")
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("tools/call through Glider");
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    assert_eq!(text, ["Echo: over http"]);
    let unknown = client
        .call_tool(CallToolRequestParams::new("remote__nope"))
        .await;
    assert!(unknown.is_err() || unknown.is_ok_and(|r| r.is_error == Some(true)));

    let view = served
        .poll_json("/api/mcp", |v| v["servers"][0]["calls"].as_u64() >= Some(1))
        .await;
    assert_eq!(view["servers"][0]["name"], "remote");
    assert_eq!(view["servers"][0]["transport"], "http");
    assert_eq!(view["servers"][0]["state"]["state"], "ready");

    // A hot reload that adds a stdio server: connected clients are told the tools changed.
    std::fs::write(
        home.path().join("glider.yaml"),
        format!(
            "{base}    local: {{command: node, args: ['{}', stdio], allow: [echo]}}\n",
            everything()
        ),
    )
    .expect("config rewritten");
    tokio::time::timeout(Duration::from_secs(30), changed.0.notified())
        .await
        .expect("notifications/tools/list_changed after the reload");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tools = client.list_all_tools().await.expect("tools/list");
        if tools.iter().any(|t| t.name == "local__echo") {
            assert!(
                tools.iter().any(|t| t.name == "remote__echo"),
                "remote kept"
            );
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            let view = served.poll_json("/api/mcp", |_| true).await;
            panic!("local__echo never listed: {tools:?}; /api/mcp: {view}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = client.cancel().await;
    served.stop();
}

#[tokio::test]
async fn stdio_servers_left_by_a_sigkilled_glider_are_ended_at_the_next_start() {
    let home = tempfile::tempdir().expect("home");
    let dir = tempfile::tempdir().expect("lab");
    let script = dir.path().join("leaky.sh");
    let leader = dir.path().join("leader");
    let grandchild = dir.path().join("grandchild");
    // A server whose helper would outlive it: only the group kill ends the helper.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ > '{leader}.tmp' && mv '{leader}.tmp' '{leader}'\nsleep 1000 >/dev/null 2>&1 &\necho $! > '{gc}.tmp' && mv '{gc}.tmp' '{gc}'\nexec node '{}' stdio\n",
            everything(),
            leader = leader.display(),
            gc = grandchild.display(),
        ),
    )
    .expect("script");
    let yaml = format!(
        "mcp:\n  servers:\n    leaky: {{command: sh, args: ['{}']}}\n",
        script.display()
    );
    let mut served = serve_yaml(home.path(), &yaml);
    served
        .poll_json("/api/mcp", |v| v["servers"][0]["state"]["state"] == "ready")
        .await;
    let read_pid = |path: &PathBuf| -> u32 {
        std::fs::read_to_string(path)
            .expect("pid file")
            .trim()
            .parse()
            .expect("a pid")
    };
    let pgid = read_pid(&leader);
    let helper = read_pid(&grandchild);
    assert!(alive(helper));
    let runstate = home.path().join("runstate.json");
    assert!(
        until(|| std::fs::read_to_string(&runstate).is_ok_and(|s| s.contains("mcp:leaky"))).await,
        "the server's group was never recorded"
    );
    served.child.kill().expect("SIGKILL glider");
    served.child.wait().expect("reaped");
    drop(served);
    assert!(alive(helper), "the helper outlives a SIGKILLed Glider");

    let served = serve_yaml(home.path(), &yaml);
    assert!(
        until(|| group_members(pgid).is_empty()).await,
        "the old server's group is still there: {:?}",
        group_members(pgid)
    );
    assert!(!alive(helper));
    served
        .poll_json("/api/mcp", |v| v["servers"][0]["state"]["state"] == "ready")
        .await;
    let new_pgid = read_pid(&leader);
    assert_ne!(new_pgid, pgid);
    served.stop();
    // A clean stop ends the group too.
    assert!(until(|| group_members(new_pgid).is_empty()).await);
}

/// Every `tool_calls` entry of the records `/api/requests` shows.
fn tool_calls_shown(requests: &serde_json::Value) -> Vec<serde_json::Value> {
    match requests {
        serde_json::Value::Object(map) => map
            .iter()
            .flat_map(|(key, value)| match (key.as_str(), value) {
                ("tool_calls", serde_json::Value::Array(calls)) => calls.clone(),
                _ => tool_calls_shown(value),
            })
            .collect(),
        serde_json::Value::Array(items) => items.iter().flat_map(tool_calls_shown).collect(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn the_tool_loop_runs_an_allowed_mcp_tool_and_the_model_reads_its_real_result() {
    let workspace = tempfile::tempdir().expect("workspace");
    let home = tempfile::tempdir().expect("home");
    // Only echo is let into the loop: the server's other tools stay out of it.
    let extra = format!(
        "tools: {{workspace: '{}', loop: {{enabled: true, mcp: [everything__echo]}}}}\nmcp:\n  servers:\n    everything: {{command: node, args: ['{}', stdio]}}\n",
        workspace.path().display(),
        everything()
    );
    let (mock, yaml) = common::mock_and_config(&extra).await;
    let served = serve_yaml(home.path(), &yaml);
    served
        .poll_json("/api/mcp", |v| {
            v["servers"][0]["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|n| n == "everything__echo"))
        })
        .await;

    let request = common::text_request(
        "m-ollama",
        r#"say it back [[call:everything__echo {"message":"via the loop"}]]"#,
        false,
    );
    let front = glider_ngl::Dialect::Anthropic;
    let reply = common::post(
        &served.gateway,
        common::front_path(front),
        common::wire(front, &request).to_string(),
        &[],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let response = reply.decode(front, false).expect("an Anthropic reply");
    assert!(
        response
            .plain_text()
            .contains("tool result: Echo: via the loop"),
        "the model answered from the echo: {}",
        response.plain_text()
    );
    // Health probes reach the mock too; the model turns are the chats.
    let sent: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/chat")
        .collect();
    assert_eq!(sent.len(), 2, "two model turns");
    let offered = sent[0].body.to_string();
    assert!(offered.contains("everything__echo"), "{offered}");
    assert!(
        !offered.contains("everything__get-env") && !offered.contains("everything__get-sum"),
        "tools.loop.mcp keeps the server's other tools out: {offered}"
    );
    assert!(
        offered.contains("\"grep\""),
        "the internal tools stay offered"
    );
    let second = sent[1].body.to_string();
    assert!(
        second.contains("Echo: via the loop"),
        "the server's real result reaches the model's next request: {second}"
    );
    let shown = served
        .poll_json("/api/requests", |v| !tool_calls_shown(v).is_empty())
        .await;
    let calls = tool_calls_shown(&shown);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "everything__echo");
    assert_eq!(calls[0]["ok"], true);
    let view = served.poll_json("/api/mcp", |_| true).await;
    assert_eq!(
        view["servers"][0]["calls"], 1,
        "the call went through the hub"
    );
    served.stop();
}

#[tokio::test]
async fn glider_mcp_serves_the_internal_tools_sandboxed_and_says_when_they_appear() {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("notes.txt"), "read through /mcp\n").expect("written");
    let home = tempfile::tempdir().expect("home");
    let base = "backends:\n  - {name: idle, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen]}\n";
    let served = serve_yaml(home.path(), base);
    let changed = ListChanged::default();
    let client = connect_to_glider(&changed, &served.gateway).await;
    let names = |tools: &[rmcp::model::Tool]| -> Vec<String> {
        tools.iter().map(|t| t.name.to_string()).collect()
    };
    let before = client.list_all_tools().await.expect("tools/list");
    assert!(
        names(&before).is_empty(),
        "no workspace, no tools: {:?}",
        names(&before)
    );

    // Setting tools.workspace (a hot reload) brings the internal tools, and says so.
    std::fs::write(
        home.path().join("glider.yaml"),
        format!(
            "{base}tools: {{workspace: '{}'}}\n",
            workspace.path().display()
        ),
    )
    .expect("config rewritten");
    tokio::time::timeout(Duration::from_secs(30), changed.0.notified())
        .await
        .expect("notifications/tools/list_changed once the internal tools are there");
    let after = names(&client.list_all_tools().await.expect("tools/list"));
    for tool in glider_tools::internal::INTERNAL_TOOLS {
        assert!(
            after.contains(&(*tool).to_owned()),
            "{tool} listed: {after:?}"
        );
    }

    let call = |name: &str, args: serde_json::Value| {
        CallToolRequestParams::new(name.to_owned())
            .with_arguments(args.as_object().cloned().unwrap_or_default())
    };
    let read = client
        .call_tool(call("read_file", json!({"path": "notes.txt"})))
        .await
        .expect("read_file through /mcp");
    assert_ne!(read.is_error, Some(true), "{read:?}");
    let text: Vec<&str> = read
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    assert_eq!(text, ["1\tread through /mcp\n"]);
    // The workspace confines a call on /mcp exactly as it does the loop's.
    let outside = client
        .call_tool(call("read_file", json!({"path": "../../etc/passwd"})))
        .await
        .expect("a tool result");
    assert_eq!(outside.is_error, Some(true), "{outside:?}");
    let why: String = outside
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(
        why.contains("refused") && why.contains("outside the workspace"),
        "{why}"
    );
    let _ = client.cancel().await;
    served.stop();
}

#[tokio::test]
async fn glider_mcp_serves_the_tools_a_plugin_declares() {
    // A plugin declaring `word_count` (examples/plugins/tools_declare.py) and no MCP
    // server: /mcp offers the plugin's tool, and a call reaches the plugin process.
    let home = tempfile::tempdir().expect("home");
    let plugin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/plugins/tools_declare.py");
    let yaml = format!(
        "backends:\n  - {{name: idle, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen]}}\n\
         plugins:\n  - {{name: counter, command: [python3, '{}']}}\n",
        plugin.display()
    );
    let served = serve_yaml(home.path(), &yaml);
    let changed = ListChanged::default();
    let client = connect_to_glider(&changed, &served.gateway).await;
    // The plugin gives its manifest a moment after the server is up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tools = client.list_all_tools().await.expect("tools/list");
        if tools.iter().any(|t| t.name == "word_count") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "word_count never listed: {tools:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counted = client
        .call_tool(
            CallToolRequestParams::new("word_count".to_owned()).with_arguments(
                json!({"text": "one two three"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("word_count through /mcp");
    assert_ne!(counted.is_error, Some(true), "{counted:?}");
    let text: Vec<&str> = counted
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    assert_eq!(text, ["3 words"]);
    let _ = client.cancel().await;
    served.stop();
}

#[tokio::test]
async fn the_revision_is_negotiated_stateless_with_a_new_server_and_initialize_with_an_older() {
    // Glider's own /mcp (rmcp's server) knows the stateless 2026-07-28 revision:
    // `server/discover` is answered. server-everything from npm does not: the hub falls
    // back to the `initialize` handshake of a session-based revision.
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("notes.txt"), "negotiated\n").expect("written");
    let home = tempfile::tempdir().expect("home");
    let served = serve_yaml(
        home.path(),
        &format!(
            "backends:\n  - {{name: idle, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen]}}\n\
             tools: {{workspace: '{}'}}\n",
            workspace.path().display()
        ),
    );
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  glider: {{url: '{}/mcp'}}\n  everything: {{command: node, args: ['{}', stdio]}}\n",
        served.gateway,
        everything()
    )));
    offered(&hub, "glider__read_file").await;
    offered(&hub, "everything__echo").await;
    let protocol = |name: &str| {
        hub.servers()
            .into_iter()
            .find(|s| s.name == name)
            .and_then(|s| s.protocol)
    };
    assert_eq!(protocol("glider").as_deref(), Some("2026-07-28"));
    let older = protocol("everything").expect("a negotiated revision");
    assert_ne!(older, "2026-07-28");
    // Both kinds of connection carry calls.
    let read = hub
        .call("glider__read_file", json!({"path": "notes.txt"}))
        .await
        .expect("read_file over the stateless revision");
    assert_eq!(read.text(), "1\tnegotiated\n");
    let echo = hub
        .call("everything__echo", json!({"message": "older"}))
        .await
        .expect("echo over the session-based revision");
    assert_eq!(echo.text(), "Echo: older");
    hub.shutdown().await;
    served.stop();
}

#[tokio::test]
async fn a_stopped_stdio_server_gets_sigterm_and_a_grace_period_before_sigkill() {
    // A shell leads the group and runs server-everything; on SIGTERM it writes a mark
    // and exits. Killed outright (SIGKILL), it could write nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("terminated");
    let script = format!(
        "trap 'echo cleaned-up > \"{mark}\"; exit 0' TERM; exec 3<&0; node '{server}' stdio <&3 & wait",
        mark = mark.display(),
        server = everything()
    );
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  graceful: {{command: sh, args: ['-c', {}]}}\n",
        serde_json::to_string(&script).expect("json string")
    )));
    offered(&hub, "graceful__echo").await;
    hub.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(&mark).expect("the server saw SIGTERM and cleaned up"),
        "cleaned-up\n"
    );
}

/// `server-everything`'s `get-env` hands its environment to any caller: it holds the
/// minimal environment and the server's own `env:`, none of Glider's other variables
/// (here the test process's `CARGO_*`, which cargo sets for it, stand for the keys).
#[tokio::test]
async fn a_stdio_server_sees_only_the_minimal_environment_and_its_own() {
    let inherited: Vec<String> = std::env::vars()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("CARGO_"))
        .collect();
    assert!(!inherited.is_empty(), "cargo sets CARGO_* for its tests");
    let hub = McpHub::new(None);
    hub.apply(&mcp_config(&format!(
        "servers:\n  ev: {{command: node, args: ['{}', stdio], env: {{MCP_OWN: mine}}}}\n",
        everything()
    )));
    offered(&hub, "ev__get-env").await;
    let env = hub
        .call("ev__get-env", json!({}))
        .await
        .expect("get-env answers")
        .text();
    assert!(
        env.contains("\"MCP_OWN\": \"mine\"") || env.contains("\"MCP_OWN\":\"mine\""),
        "{env}"
    );
    assert!(env.contains("\"PATH\""), "{env}");
    for name in inherited {
        assert!(
            !env.contains(&format!("\"{name}\"")),
            "{name} reached the server: {env}"
        );
    }
    hub.shutdown().await;
}
