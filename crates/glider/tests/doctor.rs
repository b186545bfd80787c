//! `glider doctor` and local-server discovery as a user meets them (issue 21, item 5):
//! real loopback servers on ephemeral ports stand in for the usual ones (the scanned
//! list comes from `GLIDER_DISCOVER_PORTS`): glider-test-support's mock for Ollama, a
//! small HTTP server answering llama.cpp's `/props` and `/v1/models` for llama.cpp; a
//! temp GLIDER_HOME with loose permissions; a port held by another listener.

use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::output::OutputLines;
use common::serve::url_in;
use glider_test_support::canned::{CannedReply, CannedServer};
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

/// A llama.cpp server as its HTTP surface shows it to a scanner: `/props`, and
/// `/v1/models` listing the GGUF file's path as the model id; 404 for anything else
/// (it has no Ollama `/api/*`). Serves until the test's runtime ends.
async fn llama_cpp_standin() -> u16 {
    let server = CannedServer::start(|request| match request.path.as_str() {
        "/props" => CannedReply::json(
            200,
            json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1,
                   "model_path": "/models/tiny-270m.gguf"}),
        ),
        "/v1/models" => CannedReply::json(
            200,
            json!({"object": "list", "data": [{"id": "/models/tiny-270m.gguf",
                   "object": "model", "owned_by": "llamacpp"}]}),
        ),
        _ => CannedReply::json(
            404,
            json!({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}),
        ),
    })
    .await;
    server.port
}

/// `glider doctor --json` with `config` under `home`, scanning `ports`: its exit code
/// and its JSON.
async fn doctor(home: &Path, config: &Path, ports: &[u16]) -> (i32, Value) {
    doctor_with(home, Some(config), ports).await
}

/// [`doctor`], without `-c` when `config` is `None` (the embedded profile, its cloud
/// backends not probed and no key from the developer's environment).
async fn doctor_with(home: &Path, config: Option<&Path>, ports: &[u16]) -> (i32, Value) {
    let ports = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let (home, config) = (home.to_owned(), config.map(Path::to_owned));
    let output = tokio::task::spawn_blocking(move || {
        let mut command = Command::new(GLIDER);
        command.args(["doctor", "--json"]);
        match &config {
            Some(config) => command.arg("-c").arg(config),
            None => command
                .env("GLIDER_CLOUD_PROBES", "off")
                .env_remove("ANTHROPIC_API_KEY")
                .env_remove("OPENAI_API_KEY")
                .env_remove("GLIDER_CONFIG"),
        };
        command
            .env("GLIDER_HOME", &home)
            .env("GLIDER_DISCOVER_PORTS", ports)
            .env_remove("NODE_EXTRA_CA_CERTS")
            .output()
            .expect("glider doctor runs")
    })
    .await
    .expect("joined");
    let text = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().expect("exited"), report)
}

/// The one check of `category` whose subject contains `subject`.
fn check<'a>(report: &'a Value, category: &str, subject: &str) -> &'a Value {
    let checks = report["checks"].as_array().expect("checks");
    let matching: Vec<&Value> = checks
        .iter()
        .filter(|c| {
            c["category"] == category && c["subject"].as_str().is_some_and(|s| s.contains(subject))
        })
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "one {category} check on {subject}: {report:#}"
    );
    matching[0]
}

/// A mock Ollama serving `model`.
async fn ollama_with(model: &str) -> MockVendor {
    MockVendor::start(MockConfig {
        models: vec![model.into()],
        ..MockConfig::default()
    })
    .await
}

/// A scratch directory and a GLIDER_HOME in it, private as doctor requires.
fn private_home() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    set_mode(&home, 0o700);
    (dir, home)
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_each_problem_with_its_fix_and_fails() {
    let named = MockVendor::start(MockConfig {
        models: vec!["m-local".into()],
        ..MockConfig::default()
    })
    .await;
    let unnamed = MockVendor::start(MockConfig {
        models: vec!["qwen3:4b".into()],
        ..MockConfig::default()
    })
    .await;
    let llama = llama_cpp_standin().await;
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let held_port = held.local_addr().expect("addr").port();
    let gone = common::closed_port();

    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    // GLIDER_HOME as an older Glider (or a careless copy) left it: readable by others.
    std::fs::create_dir_all(home.join("mitm")).expect("mkdir");
    std::fs::write(home.join("mitm").join("ca.key"), "not a real key").expect("write");
    set_mode(&home, 0o755);
    set_mode(&home.join("mitm"), 0o755);
    set_mode(&home.join("mitm").join("ca.key"), 0o644);
    let config = dir.path().join("glider.yaml");
    // llama.cpp sits on the port Glider's gateway wants (8080 for both by default).
    std::fs::write(
        &config,
        format!(
            "server: {{proxy_port: {llama}, dashboard_port: {held_port}}}\n\
             mitm: {{enabled: false}}\n\
             backends:\n\
             \x20 - {{name: local, type: ollama, base_url: '{}', models: [m-local]}}\n\
             \x20 - {{name: gone, type: vllm, base_url: 'http://127.0.0.1:{gone}/v1', models: [x]}}\n",
            named.base_url()
        ),
    )
    .expect("write config");

    let (code, report) = doctor(
        &home,
        &config,
        &[named.addr.port(), unnamed.addr.port(), llama],
    )
    .await;
    assert_eq!(code, 1, "a problem means a non-zero exit: {report:#}");

    let local = check(&report, "backend", "local");
    assert_eq!(local["status"], "ok", "{local}");
    assert!(
        local["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("m-local"),
        "{local}"
    );
    let down = check(&report, "backend", "gone");
    assert_eq!(down["status"], "problem", "{down}");
    assert!(
        down["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("Connection refused"),
        "the cause, not only 'error sending request': {down}"
    );
    assert!(
        down["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("start the model server"),
        "{down}"
    );

    let found = check(
        &report,
        "local_server",
        &format!("Ollama on port {}", unnamed.addr.port()),
    );
    assert_eq!(found["status"], "warn", "{found}");
    assert!(
        found["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("qwen3:4b"),
        "{found}"
    );
    assert!(
        found["fix"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("base_url: \"{}\"", unnamed.base_url())),
        "{found}"
    );
    let known = check(
        &report,
        "local_server",
        &format!("Ollama on port {}", named.addr.port()),
    );
    assert_eq!(known["status"], "ok", "{known}");
    let llama_found = check(
        &report,
        "local_server",
        &format!("llama.cpp on port {llama}"),
    );
    assert!(
        llama_found["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("tiny-270m"),
        "the GGUF path read as its file stem: {llama_found}"
    );

    let clash = check(&report, "port", &format!("{llama} (server.proxy_port)"));
    assert_eq!(clash["status"], "problem", "{clash}");
    assert!(
        clash["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("llama.cpp"),
        "{clash}"
    );
    assert!(
        clash["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("glider serve --port "),
        "{clash}"
    );
    let taken = check(
        &report,
        "port",
        &format!("{held_port} (server.dashboard_port)"),
    );
    assert_eq!(taken["status"], "problem", "{taken}");
    assert!(
        taken["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("--dashboard-port"),
        "{taken}"
    );

    let perms = check(&report, "home", &home.display().to_string());
    assert_eq!(perms["status"], "problem", "{perms}");
    assert!(
        perms["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("ca.key (0644)"),
        "{perms}"
    );
    let fix = perms["fix"].as_str().unwrap_or_default().to_owned();
    assert_eq!(fix, format!("chmod -R go-rwx {}", home.display()));
    assert_eq!(report["problems"], 4, "{report:#}");

    // The fixes it printed, applied, clear what they were for.
    let chmod = Command::new("sh").arg("-c").arg(&fix).status().expect("sh");
    assert!(chmod.success());
    drop(held);
    let (_, after) = doctor(&home, &config, &[named.addr.port()]).await;
    assert_eq!(
        check(&after, "home", &home.display().to_string())["status"],
        "ok",
        "{after:#}"
    );
    assert_eq!(
        check(
            &after,
            "port",
            &format!("{held_port} (server.dashboard_port)")
        )["status"],
        "ok"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_working_setup() {
    let mock = ollama_with("m-local").await;
    let (dir, home) = private_home();
    let config = dir.path().join("glider.yaml");
    std::fs::write(
        &config,
        format!(
            "server: {{proxy_port: {}, dashboard_port: {}}}\n\
             mitm: {{enabled: false}}\n\
             backends:\n\
             \x20 - {{name: local, type: ollama, base_url: '{}', models: [m-local]}}\n",
            common::closed_port(),
            common::closed_port(),
            mock.base_url()
        ),
    )
    .expect("write config");
    write_claude_run_overlay(dir.path(), &home, &config);
    let (code, report) = doctor(&home, &config, &[mock.addr.port()]).await;
    assert_eq!(report["problems"], 0, "{report:#}");
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(check(&report, "home", "home")["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_without_a_config_checks_the_servers_serve_would_use() {
    let ollama = ollama_with("m-found").await;
    let (_dir, home) = private_home();
    let (_, report) = doctor_with(&home, None, &[ollama.addr.port()]).await;
    let local = check(&report, "backend", "local");
    assert_eq!(local["status"], "ok", "{report:#}");
    assert!(
        local["detail"]
            .as_str()
            .unwrap_or_default()
            .contains(&ollama.base_url()),
        "the found server, not the embedded 127.0.0.1:11434: {report:#}"
    );
    assert_eq!(check(&report, "backend", "claude")["status"], "warn");
    // No cloud key set: a subscription login's token would be forwarded; the report
    // says which door such a login should use, and whose policy the gateway is.
    let login = check(&report, "login", "subscription");
    let detail = login["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("claude, openai forward the client's own credentials")
            && detail.contains("use the MITM door (`glider run claude`")
            && detail.contains("the vendor's policy"),
        "{login:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_cloud_backend_is_one_problem_not_two() {
    // An unclosed `${`: the key cannot be resolved, so the backend cannot be used.
    let (dir, home) = private_home();
    let config = dir.path().join("glider.yaml");
    std::fs::write(
        &config,
        "mitm: {enabled: false}\n\
         backends:\n\
         \x20 - {name: broken, type: anthropic, base_url: 'http://127.0.0.1:9', api_key: 'sk-${GLIDER_TEST_UNCLOSED', models: [m]}\n",
    )
    .expect("write config");
    let (_, report) = doctor(&home, &config, &[]).await;
    let about_broken: Vec<&Value> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["subject"] == "broken")
        .collect();
    assert_eq!(about_broken.len(), 1, "{report:#}");
    assert_eq!(about_broken[0]["status"], "problem", "{report:#}");
    assert!(
        about_broken[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("unusable"),
        "{report:#}"
    );
    // Not an unset variable: the fix says what is broken, not "export".
    assert!(
        about_broken[0]["fix"]
            .as_str()
            .unwrap_or_default()
            .starts_with("fix backend broken in the config: "),
        "{report:#}"
    );
}

/// `glider run claude` (a stand-in `claude` that exits at once) under `home`, as a user
/// does before running doctor: the command overlay it writes under GLIDER_HOME must not
/// make doctor report the home as exposed.
fn write_claude_run_overlay(dir: &Path, home: &Path, config: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\nexit 0\n").expect("write");
    set_mode(&claude, 0o755);
    let status = Command::new(GLIDER)
        .args(["run", "-c"])
        .arg(config)
        .arg(&claude)
        .env("HOME", dir)
        .env("GLIDER_HOME", home)
        .env_remove("CLAUDE_CONFIG_DIR")
        .stderr(std::process::Stdio::null())
        .status()
        .expect("glider run");
    assert!(status.success());
    assert!(home.join("claude-run/.claude/commands/local.md").exists());
}

/// `glider serve` with no config file, scanning the ports in `ports`, under `home`:
/// its stdout lines (the gateway on a free port).
fn serve_without_config(home: &Path, ports: &[u16]) -> (std::process::Child, OutputLines) {
    let ports = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut child = Command::new(GLIDER)
        .args([
            "serve",
            "--port",
            "0",
            "--dashboard-port",
            "0",
            "--mitm-port",
            "0",
        ])
        .env("GLIDER_HOME", home)
        .env("GLIDER_DISCOVER_PORTS", ports)
        // The embedded profile's cloud backends name the real vendors: nothing here may
        // leave loopback, whatever keys the developer has set.
        .env("GLIDER_CLOUD_PROBES", "off")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("glider serve starts");
    let lines = OutputLines::of(&mut child);
    (child, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_a_config_uses_the_local_servers_it_finds_and_names_them() {
    let ollama = MockVendor::start(MockConfig {
        models: vec!["m-found".into()],
        ..MockConfig::default()
    })
    .await;
    let llama = llama_cpp_standin().await;
    let home = tempfile::tempdir().expect("tempdir");
    let (child, mut lines) = serve_without_config(
        home.path(),
        &[common::closed_port(), ollama.addr.port(), llama],
    );
    let mut child = ChildGuard(child);
    let ollama_line = lines.wait_for(&format!("Ollama on port {}", ollama.addr.port()));
    assert!(ollama_line.contains("backend local"), "{ollama_line}");
    assert!(ollama_line.contains("m-found"), "{ollama_line}");
    let llama_line = lines.wait_for(&format!("llama.cpp on port {llama}"));
    assert!(
        llama_line.contains(&format!("backend llamacpp at http://127.0.0.1:{llama}/v1")),
        "{llama_line}"
    );
    let gateway = url_in(&lines.wait_for("glider gateway listening on http://"));
    let dashboard = url_in(&lines.wait_for("glider dashboard on http://"));

    let backends: Value = reqwest::get(format!("{dashboard}/api/backends"))
        .await
        .expect("dashboard answers")
        .json()
        .await
        .expect("json");
    let listed: Vec<(String, String)> = backends["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .filter(|b| b["local"] == true)
        .map(|b| {
            (
                b["backend"].as_str().unwrap_or_default().to_owned(),
                b["base_url"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("local".to_owned(), ollama.base_url()),
            (
                "llamacpp".to_owned(),
                format!("http://127.0.0.1:{llama}/v1")
            ),
        ],
        "the servers found replace the fixed Ollama address: {backends:#}"
    );

    // And the one found answers a local request.
    let reply = reqwest::Client::new()
        .post(format!("{gateway}/api/chat"))
        .header("x-glider-route", "local")
        .json(&json!({"model": "m-found", "stream": false,
                      "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .expect("gateway answers");
    assert_eq!(reply.status(), 200);
    assert!(
        ollama.requests().iter().any(|r| r.path == "/api/chat"),
        "the found Ollama was asked"
    );
    stop(&mut child.0);
}

/// The embedded profile's 8080 taken by a llama.cpp server: the start fails saying which
/// port to move.
#[test]
fn serve_without_a_config_names_a_server_on_its_own_port() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let llama = runtime.block_on(llama_cpp_standin());
    let home = tempfile::tempdir().expect("tempdir");
    let output = Command::new(GLIDER)
        .args([
            "serve",
            "--port",
            &llama.to_string(),
            "--dashboard-port",
            "0",
            "--mitm-port",
            "0",
        ])
        .env("GLIDER_HOME", home.path())
        .env("GLIDER_DISCOVER_PORTS", llama.to_string())
        .env("GLIDER_CLOUD_PROBES", "off")
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG")
        .output()
        .expect("glider serve runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "llama.cpp is listening on port {llama}, Glider's gateway port"
        )),
        "{stderr}"
    );
    // A port actually free, not a fixed guess.
    let suggested: u16 = stderr
        .split("glider serve --port ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a port suggested: {stderr}"));
    assert!(suggested > llama, "{stderr}");
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", suggested)).is_ok(),
        "{stderr}"
    );
}

/// Kills the child if the test fails before stopping it.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// SIGTERM, and the drained exit must succeed.
fn stop(child: &mut std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert!(child.wait().expect("reaped").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_context_database_is_reported_then_moved_aside_at_start_and_replaced() {
    let mock = ollama_with("m-local").await;
    let (dir, home) = private_home();
    let config = dir.path().join("glider.yaml");
    std::fs::write(
        &config,
        format!(
            "mitm: {{enabled: false}}\n\
             backends:\n\
             \x20 - {{name: local, type: ollama, base_url: '{}', models: [m-local]}}\n",
            mock.base_url()
        ),
    )
    .expect("write config");
    // Garbage where the context database is.
    let context = home.join("context");
    std::fs::create_dir_all(&context).expect("mkdir");
    set_mode(&context, 0o700);
    let db = context.join("context.sqlite3");
    std::fs::write(&db, vec![0x5a_u8; 64 * 1024]).expect("garbage");
    set_mode(&db, 0o600);

    let (code, report) = doctor(&home, &config, &[mock.addr.port()]).await;
    let found = check(&report, "context", "context.sqlite3");
    assert_eq!(found["status"], "problem", "{report:#}");
    assert_ne!(code, 0);

    // Served: the file is moved aside and a fresh database answers.
    let served = common::serve::serve(&home, &config);
    let sessions = reqwest::get(format!("{}/api/context/sessions", served.dashboard))
        .await
        .expect("answered");
    assert_eq!(sessions.status(), 200);
    served.stop();
    let aside: Vec<String> = std::fs::read_dir(&context)
        .expect("context dir")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with("context.sqlite3.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read(context.join(&aside[0])).expect("kept"),
        vec![0x5a_u8; 64 * 1024]
    );

    let (_, report) = doctor(&home, &config, &[mock.addr.port()]).await;
    let statuses: Vec<(bool, &Value)> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["category"] == "context")
        .map(|c| {
            let subject = c["subject"].as_str().unwrap_or_default();
            (subject.contains(".corrupt-"), &c["status"])
        })
        .collect();
    assert_eq!(
        statuses,
        [(false, &json!("ok")), (true, &json!("warn"))],
        "{report:#}"
    );
}
