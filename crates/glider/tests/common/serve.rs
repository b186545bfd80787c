//! `glider serve` as a child process on free ports: started with a config file and its
//! own `GLIDER_HOME`, ready once it has printed its gateway and dashboard addresses,
//! stopped with SIGTERM (a drained, successful exit), and killed if a failing test
//! drops it still running; and what a test reads of its dashboard (`/metrics`, JSON
//! polled until it says what the test waits for).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::output::OutputLines;

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

/// A running `glider serve`.
pub struct Served {
    pub child: Child,
    pub lines: OutputLines,
    /// `http://127.0.0.1:PORT` of the gateway and of the dashboard.
    pub gateway: String,
    pub dashboard: String,
}

/// Guards a poll against a hang; never a timing assertion.
const POLL_GUARD: Duration = Duration::from_secs(30);

/// Write `yaml` as `home/glider.yaml` and serve it.
pub fn serve_yaml(home: &Path, yaml: &str) -> Served {
    let config = home.join("glider.yaml");
    std::fs::write(&config, yaml).expect("config written");
    serve(home, &config)
}

/// Start `glider serve -c config` under `home` on free ports.
pub fn serve(home: &Path, config: &Path) -> Served {
    serve_with_env::<&str, &str>(home, config, &[])
}

/// [`serve`] with `env` added to the environment `glider serve` inherits (a secret it
/// must not hand on, a `PATH` with fake programs first, say).
pub fn serve_with_env<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
    home: &Path,
    config: &Path,
    env: &[(K, V)],
) -> Served {
    start(home, config, env, &["serve"])
}

/// `glider COMMAND… --port 0 --dashboard-port 0 -c config` under `home` (`serve`, or
/// `desktop` and its flags), ready once it printed its gateway and dashboard addresses.
pub fn start<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
    home: &Path,
    config: &Path,
    env: &[(K, V)],
    command: &[&str],
) -> Served {
    let mut child = Command::new(GLIDER)
        .envs(env.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG")
        .args(command)
        .args(["--port", "0", "--dashboard-port", "0", "-c"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("glider serve starts");
    let mut lines = OutputLines::of(&mut child);
    let gateway = url_in(&lines.wait_for("glider gateway listening on http://"));
    let dashboard = url_in(&lines.wait_for("glider dashboard on http://"));
    Served {
        child,
        lines,
        gateway,
        dashboard,
    }
}

/// The URL in a `... on http://ADDR ...` start line.
pub fn url_in(line: &str) -> String {
    let at = line.find("http://").expect("a URL");
    line[at..]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

impl Served {
    /// The dashboard's `/metrics` text.
    pub async fn metrics(&self) -> String {
        let reply = reqwest::get(format!("{}/metrics", self.dashboard))
            .await
            .expect("/metrics answered");
        assert_eq!(reply.status(), 200, "/metrics");
        reply.text().await.expect("/metrics text")
    }

    /// GET the dashboard's `path` until its JSON satisfies `ready` (the server writes
    /// some state off the request path); panics with the last answer if it never does.
    pub async fn poll_json(&self, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let url = format!("{}{path}", self.dashboard);
        let deadline = Instant::now() + POLL_GUARD;
        loop {
            let reply = reqwest::get(&url).await.expect("the dashboard answered");
            let status = reply.status().as_u16();
            let body: Value = reply.json().await.unwrap_or(Value::Null);
            if status == 200 && ready(&body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{path} never got there: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGTERM, then the exit status, polled for at most `within` (panics past it: the
    /// server did not stop).
    pub fn stop_within(mut self, within: Duration) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "glider serve still runs {within:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's peak resident memory (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc status")
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    /// SIGTERM, and the drained exit must succeed.
    pub fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        assert!(self.child.wait().expect("reaped").success());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // A test that panicked before `stop` must not leave the server running.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
