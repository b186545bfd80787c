//! `glider serve` as a child process on free ports: started with a config file and its
//! own `GLIDER_HOME`, ready once it has printed its gateway and dashboard addresses,
//! stopped with SIGTERM (a drained, successful exit), and killed if a failing test
//! drops it still running.

use std::path::Path;
use std::process::{Child, Command, Stdio};

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

/// Start `glider serve -c config` under `home` on free ports.
pub fn serve(home: &Path, config: &Path) -> Served {
    let mut child = Command::new(GLIDER)
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG")
        .args(["serve", "--port", "0", "--dashboard-port", "0", "-c"])
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
