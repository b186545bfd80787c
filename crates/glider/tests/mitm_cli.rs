//! The binary's MITM commands as a user runs them: `glider ca path|print|install`,
//! `glider run <cli>` (environment for that child only, exit status and signals as if
//! started directly), and runstate's warning after a run that was killed (naming a
//! delegate it left running).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

use common::output::OutputLines;

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

fn glider(home: &Path) -> Command {
    let mut command = Command::new(GLIDER);
    command
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("NODE_EXTRA_CA_CERTS")
        .env_remove("GLIDER_LOG");
    command
}

fn config(dir: &Path, port: u16, extra: &str) -> std::path::PathBuf {
    let path = dir.join("glider.yaml");
    std::fs::write(
        &path,
        format!(
            "backends:\n  - {{name: l, type: ollama, base_url: 'http://127.0.0.1:1', models: [m]}}\nmitm:\n  enabled: true\n  port: {port}\n{extra}"
        ),
    )
    .expect("write config");
    path
}

#[test]
fn ca_commands_make_print_and_explain_the_ca() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = glider(home.path())
        .args(["ca", "path"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let path = String::from_utf8(out.stdout).expect("utf8");
    assert_eq!(
        path.trim(),
        home.path().join("mitm/ca.crt").display().to_string()
    );
    let out = glider(home.path())
        .args(["ca", "print"])
        .output()
        .expect("run");
    let pem = String::from_utf8(out.stdout).expect("utf8");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert_eq!(pem, std::fs::read_to_string(path.trim()).expect("ca.crt"));
    // --dry-run: the exact commands and the per-CLI variables, nothing installed.
    let out = glider(home.path())
        .args(["ca", "install", "--dry-run"])
        .output()
        .expect("run");
    let text = String::from_utf8(out.stdout).expect("utf8");
    assert!(out.status.success(), "{text}");
    let ca = path.trim();
    assert!(
        text.contains(&format!(
            "sudo install -m 0644 {ca} /usr/local/share/ca-certificates/glider-mitm-ca.crt"
        )),
        "{text}"
    );
    assert!(text.contains("sudo update-ca-certificates"), "{text}");
    assert!(
        text.contains(&format!("export NODE_EXTRA_CA_CERTS={ca}")),
        "{text}"
    );
    assert!(text.contains("export CODEX_CA_CERTIFICATE="), "{text}");
    assert!(!Path::new("/usr/local/share/ca-certificates/glider-mitm-ca.crt").exists());
}

#[test]
fn run_sets_the_proxy_for_the_child_only_and_returns_its_status() {
    let home = tempfile::tempdir().expect("tempdir");
    let port = common::closed_port();
    let cfg = config(home.path(), port, "  hosts: [api.anthropic.com]\n");
    let script = r#"echo "$HTTPS_PROXY|$HTTP_PROXY|$NO_PROXY|$NODE_EXTRA_CA_CERTS|$CODEX_CA_CERTIFICATE|$SSL_CERT_FILE"; exit 7"#;
    let out = glider(home.path())
        .env("NO_PROXY", "api.anthropic.com,corp.example")
        .args(["run", "-c"])
        .arg(&cfg)
        .args(["sh", "-c", script])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let line = String::from_utf8(out.stdout).expect("utf8");
    let fields: Vec<&str> = line.trim().split('|').collect();
    let ca = home.path().join("mitm/ca.crt").display().to_string();
    let bundle = home.path().join("mitm/ca-bundle.pem").display().to_string();
    let proxy = format!("http://127.0.0.1:{port}");
    assert_eq!(
        fields,
        vec![
            proxy.as_str(),
            proxy.as_str(),
            "localhost,127.0.0.1,::1,corp.example",
            ca.as_str(),
            bundle.as_str(),
            bundle.as_str()
        ]
    );
    // Nothing listens on that port: the user is told, and the CLI still runs.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("nothing answers on 127.0.0.1:{port}")),
        "{stderr}"
    );
    let bundle_text = std::fs::read_to_string(&bundle).expect("bundle");
    assert!(bundle_text.ends_with(&std::fs::read_to_string(&ca).expect("ca")));
    // A missing program is 127, like a shell.
    let out = glider(home.path())
        .args(["run", "-c"])
        .arg(&cfg)
        .arg("no-such-cli-here")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(127));
    // A config whose proxy port is chosen at each start cannot be targeted.
    let zero = config(home.path(), 0, "");
    let out = glider(home.path())
        .args(["run", "-c"])
        .arg(&zero)
        .arg("true")
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mitm.port is 0"));
}

#[cfg(unix)]
#[test]
fn run_passes_signals_to_the_cli() {
    use std::os::unix::process::ExitStatusExt;
    let home = tempfile::tempdir().expect("tempdir");
    let cfg = config(home.path(), common::closed_port(), "");
    // The CLI is the process `glider run` started: a signal to that pid is a signal to
    // the CLI, and its death by signal is the status the caller sees.
    let mut child = glider(home.path())
        .args(["run", "-c"])
        .arg(&cfg)
        .args(["sh", "-c", "echo ready; exec sleep 30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("a line").expect("read"), "ready");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

fn wait_bounded(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `glider serve` with its output read line by line on a thread.
struct Serve {
    child: Child,
    lines: OutputLines,
}

impl Serve {
    fn start(home: &Path, cfg: &Path) -> Serve {
        // Its own ports, the dashboard's too: on the default 8081, a test running
        // beside it that holds that port made `serve` exit 1.
        let mut child = glider(home)
            .args(["serve", "--port", "0", "--dashboard-port", "0", "-c"])
            .arg(cfg)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn serve");
        let lines = OutputLines::of(&mut child);
        Serve { child, lines }
    }

    /// Wait for a line containing `needle`; panics with what was seen otherwise (the
    /// child is killed as the panic drops it).
    fn wait_for(&mut self, needle: &str) -> String {
        self.lines.wait_for(needle)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(unix)]
#[test]
fn a_killed_run_is_reported_at_the_next_start() {
    let home = tempfile::tempdir().expect("tempdir");
    let cfg = config(home.path(), 0, "");
    let mut first = Serve::start(home.path(), &cfg);
    first.wait_for("glider mitm proxy listening on 127.0.0.1:");
    // SIGKILL: no code runs, nothing is marked clean.
    first.child.kill().expect("kill");
    first.child.wait().expect("reap");

    let mut second = Serve::start(home.path(), &cfg);
    let warning = second.wait_for("did not stop cleanly");
    assert!(warning.contains("iptables -t nat -S OUTPUT"), "{warning}");
    second.wait_for("glider mitm proxy listening on");
    // A clean stop (SIGTERM) is recorded, so the next start is quiet.
    let status = Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let status = wait_bounded(&mut second.child, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("runstate.json")).expect("runstate"),
    )
    .expect("json");
    assert!(record["stopped_at"].is_u64(), "{record}");
    assert_eq!(record["features"], serde_json::json!(["mitm"]));
}

/// A delegate still running when Glider is SIGKILLed is named at the next start: its
/// process group was recorded in runstate while it ran.
#[cfg(unix)]
#[test]
fn an_orphaned_delegate_is_named_at_the_next_start() {
    use std::io::{Read, Write};
    let home = tempfile::tempdir().expect("tempdir");
    let work = home.path().join("work");
    std::fs::create_dir(&work).expect("workdir");
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cursor-agent");
    let cfg = config(
        home.path(),
        0,
        &format!(
            "delegate:\n  workdir: '{}'\n  cursor_agent:\n    path: '{}'\n    env: {{GLIDER_TEST_DIR: '{}'}}\n",
            work.display(),
            fake.display(),
            home.path().display()
        ),
    );
    let mut first = Serve::start(home.path(), &cfg);
    let line = first.wait_for("glider gateway listening on http://");
    let addr = line
        .rsplit("http://")
        .next()
        .expect("address")
        .trim()
        .to_owned();
    let body = r#"{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"/cursor-agent slow job"}]}"#;
    let mut socket = std::net::TcpStream::connect(&addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        socket,
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("started") {
        let n = socket.read(&mut buf).expect("read");
        assert!(n > 0, "reply ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let pgid: u32 = std::fs::read_to_string(home.path().join("pids.log"))
        .expect("pids")
        .trim()
        .parse()
        .expect("pid");
    // Whatever happens below, the orphan does not outlive the test.
    struct KillGroup(u32);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0)])
                .status();
        }
    }
    let _orphan = KillGroup(pgid);
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("runstate.json")).expect("runstate"),
    )
    .expect("json");
    assert_eq!(record["delegates"][0]["pgid"], pgid, "{record}");
    assert_eq!(record["delegates"][0]["cli"], "cursor-agent", "{record}");

    first.child.kill().expect("kill");
    first.child.wait().expect("reap");
    drop(socket);
    let mut second = Serve::start(home.path(), &cfg);
    let warning = second.wait_for("is still running");
    assert!(
        warning.contains(&format!(
            "cursor-agent delegate (process group {pgid}) is still running: "
        )),
        "{warning}"
    );
    assert!(
        warning.contains(&format!("pid {pgid} (cursor-agent)")),
        "{warning}"
    );
    assert!(warning.contains("(sleep)"), "{warning}");
}
