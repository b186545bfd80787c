//! Delegate tests' shared parts: the lab a test runs in (its fake CLI's log directory,
//! the gateway and the mock), who is in a process group (from `/proc`), and a bounded
//! wait until a group is empty.

use std::path::PathBuf;
use std::time::Duration;

/// A delegate test's run: the directory its fake CLI logs into (argv, pids, cwd), the
/// gateway it talks to and the mock backend behind it.
pub struct DelegateLab {
    pub dir: tempfile::TempDir,
    pub gateway: super::Gateway,
    pub _mock: glider_test_support::MockVendor,
}

impl DelegateLab {
    /// A file in the lab's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The lines of a log file (none if it was never written).
    pub fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The pids the fake CLI recorded, one per run.
    pub fn pids(&self) -> Vec<u32> {
        self.lines("pids.log")
            .iter()
            .filter_map(|l| l.parse().ok())
            .collect()
    }
}

/// Processes whose process group is `pgid`.
pub use glider_sys::procutil::group_members;

/// Wait (bounded) until no process of group `pgid` remains; the members left if any.
pub async fn group_gone(pgid: u32) -> Vec<u32> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let members = group_members(pgid);
        if members.is_empty() || tokio::time::Instant::now() > deadline {
            return members;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .next()
                .map(|s| s != "Z")
        })
        .unwrap_or(false)
}

/// Wait (bounded) until `check` holds; whether it did.
pub async fn until(mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
