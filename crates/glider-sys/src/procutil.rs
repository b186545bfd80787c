//! Child processes as whole process groups (spec package `procutil`): start a command as
//! the leader of its own group, and a [`GroupGuard`] that kills every member of the group
//! when it is dropped (or when [`GroupGuard::finish`] kill-then-reaps it), so nothing a
//! child started — grandchildren included — outlives the guard. For anything Glider runs
//! on someone's behalf: delegate CLIs, `--version` probes, and later MCP stdio servers
//! and plugins.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use tokio::process::{Child, Command};

/// Start `command` as the leader of a new process group (its pid is the group's id),
/// killed if its [`Child`] is dropped unreaped. Hand the child to [`GroupGuard::new`]
/// once its pipes are taken.
pub fn spawn_group_leader(command: &mut Command) -> std::io::Result<Child> {
    command.process_group(0).kill_on_drop(true).spawn()
}

/// Told the group's id once a dropped [`GroupGuard`] has killed the group and let its
/// leader go: where a user takes its own record of the group off (runstate, say).
pub type OnEnded = Box<dyn FnOnce(u32) + Send>;

/// Owns a process group: the leader (started by [`spawn_group_leader`]) and everything
/// it started. [`GroupGuard::finish`] ends the group when the leader is done; dropping
/// the guard kills the group.
///
/// Why the leader is reaped only after the group is killed: a process group id is a
/// pid, and the kernel does not hand that number out again while any process — the
/// leader included, even as an unreaped zombie — still carries it. Once the leader is
/// reaped and its last member is gone, the number is free and may become someone
/// else's group, and a `kill -- -PGID` sent then could hit a stranger. So the guard
/// keeps the leader unreaped until the group kill has been sent, and never signals the
/// group after reaping it.
pub struct GroupGuard {
    pgid: u32,
    /// The leader, not yet reaped (`None` once [`GroupGuard::finish`] reaped it).
    leader: Option<Child>,
    on_ended: Option<OnEnded>,
    /// The `kill` program (a test points it elsewhere).
    kill: PathBuf,
}

impl std::fmt::Debug for GroupGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupGuard")
            .field("pgid", &self.pgid)
            .field("leader", &self.leader)
            .field("on_ended", &self.on_ended.is_some())
            .finish_non_exhaustive()
    }
}

impl GroupGuard {
    /// A guard for the group `leader` leads; `None` when it was already reaped.
    pub fn new(leader: Child) -> Option<Self> {
        let pgid = leader.id()?;
        Some(GroupGuard {
            pgid,
            leader: Some(leader),
            on_ended: None,
            kill: PathBuf::from("kill"),
        })
    }

    /// Call `on_ended` with the group's id when the dropped guard is done with the group
    /// (after the kill, so a record of the group outlives every member).
    pub fn on_ended(mut self, on_ended: impl FnOnce(u32) + Send + 'static) -> Self {
        self.on_ended = Some(Box::new(on_ended));
        self
    }

    /// The group's id (the leader's pid).
    pub fn pgid(&self) -> u32 {
        self.pgid
    }

    /// The leader is done (its output ended): kill whatever is left of the group, then
    /// reap the leader and return its exit status. Killing first is safe for the status:
    /// a leader whose stdout ended has exited (its status is fixed by then, and the
    /// kernel ignores signals to a process that is already exiting) — one that closes
    /// its stdout and goes on is taken as done. Cancel-safe: cancelled before the reap,
    /// the guard still holds the leader and its drop cleans up.
    pub async fn finish(&mut self) -> std::io::Result<ExitStatus> {
        let Some(leader) = self.leader.as_mut() else {
            return Err(std::io::Error::other(
                "the process group was already reaped",
            ));
        };
        let killed = Command::from(kill_command(&self.kill, self.pgid))
            .status()
            .await;
        if let Err(e) = killed {
            tracing::warn!(pgid = self.pgid, error = %e, "could not run kill for a process group");
        }
        let status = leader.wait().await?;
        self.leader = None;
        Ok(status)
    }

    /// Stop the group gently: SIGTERM to every member, up to `grace` for them to exit
    /// (polled in `/proc`; the unreaped leader keeps the group's number reserved
    /// meanwhile), then [`GroupGuard::finish`] (SIGKILL to what is left, reap the leader).
    pub async fn terminate(&mut self, grace: std::time::Duration) -> std::io::Result<ExitStatus> {
        if self.leader.is_some() {
            let term = signal_command(&self.kill, "-TERM", self.pgid);
            if let Err(e) = Command::from(term).status().await {
                tracing::warn!(pgid = self.pgid, error = %e, "could not run kill -TERM for a process group");
            }
            let deadline = tokio::time::Instant::now() + grace;
            let running = |pgid: u32| processes().iter().any(|p| p.pgrp == pgid && p.state != 'Z');
            while running(self.pgid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        self.finish().await
    }
}

impl Drop for GroupGuard {
    /// Kill and reap off the async workers: running `kill` means a fork and a wait, so
    /// inside a Tokio runtime it goes to the blocking pool (and runs right here when
    /// there is no runtime, or when the pool no longer takes work: the [`Reaper`] does
    /// its job when it is dropped, run or not).
    fn drop(&mut self) {
        let reaper = Reaper {
            pgid: self.pgid,
            leader: self.leader.take(),
            on_ended: self.on_ended.take(),
            kill: std::mem::take(&mut self.kill),
        };
        if reaper.leader.is_none() {
            return drop(reaper);
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(move || drop(reaper));
            }
            Err(_) => drop(reaper),
        }
    }
}

/// What a dropped [`GroupGuard`] still has to do: kill the group while its leader is
/// unreaped, then let the leader go (Tokio reaps it), then tell `on_ended`.
struct Reaper {
    pgid: u32,
    leader: Option<Child>,
    on_ended: Option<OnEnded>,
    kill: PathBuf,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(leader) = self.leader.take() {
            // `kill -KILL -- -PGID` signals every member; an already empty group is fine.
            let killed = kill_command(&self.kill, self.pgid).status();
            if let Err(e) = killed {
                tracing::warn!(pgid = self.pgid, error = %e, "could not run kill for a process group");
            }
            // Only now may the leader be reaped (kill_on_drop, then Tokio's reaper).
            drop(leader);
        }
        if let Some(on_ended) = self.on_ended.take() {
            on_ended(self.pgid);
        }
    }
}

/// `kill` (the program at `kill`) set to SIGKILL every member of group `pgid`, quietly;
/// a std `Command`, which converts into a Tokio one where it is awaited.
fn kill_command(kill: &Path, pgid: u32) -> std::process::Command {
    signal_command(kill, "-KILL", pgid)
}

/// `kill SIGNAL -- -PGID`: `signal` to every member of group `pgid`.
fn signal_command(kill: &Path, signal: &str, pgid: u32) -> std::process::Command {
    let mut command = std::process::Command::new(kill);
    command
        .args([signal.to_owned(), "--".to_owned(), format!("-{pgid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// Its process group (field 5).
    pub pgrp: u32,
    /// The kernel's short name (field 2, without its parentheses).
    pub comm: String,
    /// When it started, in Unix seconds (field 22 after the boot time).
    pub started_at: u64,
    /// Its state (field 3): `R`, `S`, ..., `Z` for a zombie not yet reaped.
    pub state: char,
}

/// Every process `/proc` lists now; empty where there is no `/proc`.
pub fn processes() -> Vec<ProcStat> {
    // /proc times are in USER_HZ, which Linux fixes at 100 for userspace.
    const TICKS_PER_SEC: u64 = 100;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            stat.lines()
                .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp ... starttime`: comm may hold spaces and
            // parentheses, so the fields are counted from the last `)`.
            let (head, after) = stat.rsplit_once(')')?;
            let comm = head.split_once('(')?.1.to_owned();
            let fields: Vec<&str> = after.split_whitespace().collect();
            let state = fields.first()?.chars().next()?;
            let pgrp = fields.get(2)?.parse().ok()?;
            let start_ticks: u64 = fields.get(19)?.parse().ok()?;
            Some(ProcStat {
                pid,
                pgrp,
                comm,
                started_at: boot + start_ticks / TICKS_PER_SEC,
                state,
            })
        })
        .collect()
}

/// The processes whose process group is `pgid`; empty where there is no `/proc`. For
/// checking that a group is gone.
pub fn group_members(pgid: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid)
        .map(|p| p.pid)
        .collect()
}

/// Whether group `pgid` has no member left within `within`, polled every 20 ms: a
/// killed group's members vanish once the kernel has torn them down and they are
/// reaped, a moment after the signal.
pub async fn group_gone_within(pgid: u32, within: std::time::Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while !group_members(pgid).is_empty() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Wait (bounded) until `check` holds; whether it did.
    async fn until(mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Whether `pid` has exited and is not reaped yet (state `Z` in /proc/<pid>/stat).
    fn is_zombie(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, after)| after.split_whitespace().next())
                == Some("Z")
        })
    }

    /// `sh -c 'sleep 30 & sleep 30'` as a group leader: two members once both run.
    async fn two_sleepers() -> GroupGuard {
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 30 & sleep 30"]);
        let guard =
            GroupGuard::new(spawn_group_leader(&mut command).expect("spawn")).expect("guard");
        let pgid = guard.pgid();
        assert!(
            until(|| group_members(pgid).len() >= 2).await,
            "both sleepers run"
        );
        guard
    }

    #[tokio::test]
    async fn dropping_the_guard_kills_every_member_and_then_says_so() {
        let ended = Arc::new(Mutex::new(None));
        let told = Arc::clone(&ended);
        let guard = two_sleepers().await.on_ended(move |pgid| {
            *told.lock().expect("lock") = Some(pgid);
        });
        let pgid = guard.pgid();
        drop(guard);
        assert!(
            group_gone_within(pgid, Duration::from_secs(10)).await,
            "left: {:?}",
            group_members(pgid)
        );
        assert!(until(|| ended.lock().expect("lock").is_some()).await);
        assert_eq!(*ended.lock().expect("lock"), Some(pgid));
    }

    #[tokio::test]
    async fn finish_kills_the_rest_of_the_group_and_keeps_the_leaders_status() {
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 30 >/dev/null 2>&1 & exit 3"]);
        let mut guard =
            GroupGuard::new(spawn_group_leader(&mut command).expect("spawn")).expect("guard");
        let pgid = guard.pgid();
        // The leader exits at once: wait until it is an unreaped zombie (so the kill
        // cannot be what ended it) with its sleeper still in the group.
        assert!(until(|| is_zombie(pgid) && group_members(pgid).len() == 2).await);
        let status = guard.finish().await.expect("reaped");
        assert_eq!(status.code(), Some(3));
        assert!(
            group_gone_within(pgid, Duration::from_secs(10)).await,
            "left: {:?}",
            group_members(pgid)
        );
        // Reaped: the group is never signalled again, and finishing twice says so.
        assert!(guard.finish().await.is_err());
    }

    #[tokio::test]
    async fn dropping_a_guard_does_not_block_the_runtime() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        // A `kill` that takes two seconds (a loaded machine, a slow fork).
        let slow_kill = dir.path().join("kill");
        std::fs::write(&slow_kill, "#!/bin/sh\nsleep 2\nexec kill \"$@\"\n").expect("write");
        std::fs::set_permissions(&slow_kill, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let mut guard = two_sleepers().await;
        guard.kill = slow_kill;
        let pgid = guard.pgid();
        let started = Instant::now();
        drop(guard);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "drop blocked for {took:?}");
        assert!(
            group_gone_within(pgid, Duration::from_secs(10)).await,
            "left: {:?}",
            group_members(pgid)
        );
    }
}
