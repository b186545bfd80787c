//! Child processes as whole process groups (spec package `procutil`): start a command as
//! the leader of its own group, and a [`GroupGuard`] that kills every member of the group
//! when it is dropped (or when [`GroupGuard::finish`] kill-then-reaps it), so nothing a
//! child started — grandchildren included — outlives the guard. For anything Glider runs
//! on someone's behalf: delegate CLIs, `--version` probes, MCP stdio servers and plugins.
//! Groups are signalled directly ([`signal_group`], a `kill(2)` through rustix): never
//! through a `kill` program found on `PATH`, which a sandboxed tool's environment or a
//! hostile `PATH` could replace. Short probes (`nvidia-smi`) go through [`run_bounded`]:
//! a deadline, a byte cap on what is read, and a [`LiveGroups`] that kills them at
//! shutdown.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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
        kill_group(self.pgid);
        let status = leader.wait().await?;
        self.leader = None;
        Ok(status)
    }

    /// Stop the group gently: SIGTERM to every member, up to `grace` for them to exit
    /// (polled in `/proc`; the unreaped leader keeps the group's number reserved
    /// meanwhile), then [`GroupGuard::finish`] (SIGKILL to what is left, reap the leader).
    pub async fn terminate(&mut self, grace: std::time::Duration) -> std::io::Result<ExitStatus> {
        if self.leader.is_some() {
            if let Err(e) = signal_group(self.pgid, Signal::TERM) {
                tracing::warn!(pgid = self.pgid, error = %e, "could not signal a process group");
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
    /// Kill the group while its leader is unreaped, then let the leader go (Tokio reaps
    /// it: `kill_on_drop`), then tell `on_ended`. A signal is one system call: nothing
    /// here blocks the runtime.
    fn drop(&mut self) {
        if let Some(leader) = self.leader.take() {
            kill_group(self.pgid);
            drop(leader);
        }
        if let Some(on_ended) = self.on_ended.take() {
            on_ended(self.pgid);
        }
    }
}

pub use rustix::process::Signal;

/// Send `signal` to every member of process group `pgid` (`kill(2)` with `-pgid`); a
/// group with no member left is fine. Call it only while the group's leader is known to
/// be unreaped (see [`GroupGuard`]), so the number cannot be someone else's group.
pub fn signal_group(pgid: u32, signal: Signal) -> std::io::Result<()> {
    let pid = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .filter(|pid| !pid.is_init())
        .ok_or_else(|| std::io::Error::other(format!("{pgid} is not a process group")))?;
    match rustix::process::kill_process_group(pid, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// SIGKILL to every member of group `pgid`, a failure logged.
fn kill_group(pgid: u32) {
    if let Err(e) = signal_group(pgid, Signal::KILL) {
        tracing::warn!(pgid, error = %e, "could not kill a process group");
    }
}

/// The process groups of the short commands [`run_bounded`] runs now, shared by whoever
/// must be able to end them all at once ([`LiveGroups::close`], at shutdown). Cloning
/// shares the set.
#[derive(Debug, Clone, Default)]
pub struct LiveGroups(Arc<Mutex<Live>>);

#[derive(Debug, Default)]
struct Live {
    closed: bool,
    pgids: BTreeSet<u32>,
    /// Where each group is also recorded while it runs, and under what name, so that
    /// the next start ends one a killed Glider left ([`crate::runstate::end_orphaned_groups`]).
    recorder: Option<(crate::runstate::DelegatePids, String)>,
}

impl LiveGroups {
    /// A set whose groups are also recorded in the run state as `label` while they run
    /// (a `probe:` label is ended by the next start if Glider itself was killed).
    pub fn recorded(pids: crate::runstate::DelegatePids, label: impl Into<String>) -> LiveGroups {
        LiveGroups(Arc::new(Mutex::new(Live {
            recorder: Some((pids, label.into())),
            ..Live::default()
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kill every group running now and refuse to start another: what a stop calls.
    pub fn close(&self) {
        let mut live = self.lock();
        live.closed = true;
        for &pgid in &live.pgids {
            kill_group(pgid);
        }
    }

    /// Whether [`LiveGroups::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The groups running now.
    pub fn running(&self) -> Vec<u32> {
        self.lock().pgids.iter().copied().collect()
    }
}

/// How long a command run by [`run_bounded`] may take and how much of its output is
/// read: past the deadline, or once stdout passes its cap, the group is killed.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub stdout_cap: usize,
    pub stderr_cap: usize,
}

/// How a command run by [`run_bounded`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Its output ended within the caps (it exited, or closed its pipes).
    Exited,
    /// Stdout went on past its cap: the read stopped there and the group was killed.
    Cut,
    /// The deadline passed first: the group was killed and what it printed dropped.
    TimedOut,
    /// [`LiveGroups::close`] killed it (Glider is stopping); what it printed dropped.
    Stopped,
}

/// What [`run_bounded`] read of a command.
#[derive(Debug)]
pub struct Bounded {
    /// The leader's exit status (a signal where it was killed).
    pub status: ExitStatus,
    /// At most `stdout_cap` bytes (empty unless it exited or was cut).
    pub stdout: Vec<u8>,
    /// At most `stderr_cap` bytes (nothing read when stdout was cut).
    pub stderr: Vec<u8>,
    pub ending: Ending,
}

/// Run `command` as the leader of its own process group, stdin closed, reading at most
/// `limits.stdout_cap` bytes of stdout and then (when stdout ended within its cap) at
/// most `limits.stderr_cap` of stderr, for at most `limits.timeout`. Blocking: call it
/// off the async runtime. Whatever happens, the whole group is killed before the leader
/// is reaped, so nothing it started outlives the call; `live` knows the group while it
/// runs (and refuses to start one once closed).
pub fn run_bounded(
    command: &mut std::process::Command,
    limits: RunLimits,
    live: &LiveGroups,
) -> std::io::Result<Bounded> {
    use std::os::unix::process::CommandExt;
    command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = {
        let mut set = live.lock();
        if set.closed {
            return Err(std::io::Error::other("stopping: no new command is started"));
        }
        let child = command.spawn()?;
        set.pgids.insert(child.id());
        if let Some((pids, label)) = &set.recorder {
            pids.started(child.id(), label);
        }
        child
    };
    let pgid = child.id();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("bounded read".into())
        .spawn(move || {
            let (out, cut) = read_capped(stdout, limits.stdout_cap);
            let err = match cut {
                true => Vec::new(),
                false => read_capped(stderr, limits.stderr_cap).0,
            };
            let _ = tx.send((out, err, cut));
        });
    let read = match reader {
        Ok(_) => rx.recv_timeout(limits.timeout).ok(),
        Err(_) => None,
    };
    // The group is killed while the leader is unreaped, taken out of `live` under its
    // lock (so `close` never signals a reaped group), and only then reaped.
    kill_group(pgid);
    {
        let mut set = live.lock();
        set.pgids.remove(&pgid);
        if let Some((pids, _)) = &set.recorder {
            pids.ended(pgid);
        }
    }
    let status = child.wait()?;
    let (stdout, stderr, ending) = match read {
        _ if live.is_closed() && !status.success() => (Vec::new(), Vec::new(), Ending::Stopped),
        None => (Vec::new(), Vec::new(), Ending::TimedOut),
        Some((stdout, stderr, true)) => (stdout, stderr, Ending::Cut),
        Some((stdout, stderr, false)) => (stdout, stderr, Ending::Exited),
    };
    Ok(Bounded {
        status,
        stdout,
        stderr,
        ending,
    })
}

/// Up to `cap` bytes of `pipe`, and whether there was more.
fn read_capped(pipe: Option<impl Read>, cap: usize) -> (Vec<u8>, bool) {
    let Some(pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut buf = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let _ = pipe.take(limit).read_to_end(&mut buf);
    let cut = buf.len() > cap;
    buf.truncate(cap);
    (buf, cut)
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

    /// Run by `a_guard_signals_its_group_itself_and_never_runs_a_kill_program` in a
    /// child test process whose `PATH` starts with a `kill` that only leaves a mark.
    #[tokio::test]
    #[ignore = "run by a_guard_signals_its_group_itself_and_never_runs_a_kill_program"]
    async fn guards_end_their_groups_under_a_path_with_a_fake_kill() {
        let mut terminated = two_sleepers().await;
        let dropped = two_sleepers().await;
        let pgids = [terminated.pgid(), dropped.pgid()];
        terminated
            .terminate(Duration::from_secs(5))
            .await
            .expect("reaped");
        drop(dropped);
        for pgid in pgids {
            assert!(group_gone_within(pgid, Duration::from_secs(10)).await);
        }
    }

    #[test]
    fn a_guard_signals_its_group_itself_and_never_runs_a_kill_program() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let mark = dir.path().join("kill-ran");
        let fake = dir.path().join("kill");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho \"$@\" >> '{}'\n", mark.display()),
        )
        .expect("write");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut path = std::ffi::OsString::from(dir.path());
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "procutil::tests::guards_end_their_groups_under_a_path_with_a_fake_kill",
                "--ignored",
                "--quiet",
            ])
            .env("PATH", path)
            .stdout(Stdio::null())
            .status()
            .expect("runs");
        assert!(status.success(), "the groups were not ended: {status}");
        assert!(
            !mark.exists(),
            "a `kill` from PATH ran: {:?}",
            std::fs::read_to_string(&mark)
        );
        assert!(signal_group(1, Signal::KILL).is_err(), "init is refused");
    }

    /// Whether group `pgid` empties within 10 s (polled; off the runtime).
    fn group_gone_soon(pgid: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !group_members(pgid).is_empty() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    fn sh(script: &str) -> std::process::Command {
        let mut command = std::process::Command::new("sh");
        command.args(["-c", script]);
        command
    }

    const LIMITS: RunLimits = RunLimits {
        timeout: Duration::from_secs(20),
        stdout_cap: 1000,
        stderr_cap: 100,
    };

    #[test]
    fn a_bounded_run_reads_what_a_command_prints_and_its_status() {
        let live = LiveGroups::default();
        let ran =
            run_bounded(&mut sh("echo out; echo err >&2; exit 3"), LIMITS, &live).expect("runs");
        assert_eq!(ran.ending, Ending::Exited);
        assert_eq!(
            (ran.stdout.as_slice(), ran.stderr.as_slice()),
            (&b"out\n"[..], &b"err\n"[..])
        );
        assert_eq!(ran.status.code(), Some(3));
        assert!(live.running().is_empty());
    }

    #[test]
    fn endless_output_stops_at_the_cap_and_the_group_is_killed() {
        let live = LiveGroups::default();
        let ran = run_bounded(&mut sh("echo $$ >&2; yes 0123456789"), LIMITS, &live).expect("runs");
        assert_eq!(ran.ending, Ending::Cut);
        assert_eq!(ran.stdout.len(), LIMITS.stdout_cap);
        assert!(ran.stderr.is_empty(), "stderr is not read after a cut");
        assert!(live.running().is_empty());
    }

    #[test]
    fn a_hung_command_is_killed_at_the_deadline_with_its_children() {
        let live = LiveGroups::default();
        let limits = RunLimits {
            timeout: Duration::from_millis(300),
            ..LIMITS
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let script = format!("echo $$ > {}; sleep 1000 & wait", pid_file.display());
        let ran = run_bounded(&mut sh(&script), limits, &live).expect("runs");
        assert_eq!(ran.ending, Ending::TimedOut);
        let pgid: u32 = std::fs::read_to_string(&pid_file)
            .expect("it ran")
            .trim()
            .parse()
            .expect("a pid");
        assert!(group_gone_soon(pgid), "left: {:?}", group_members(pgid));
    }

    #[test]
    fn closing_the_live_set_kills_a_running_command_and_refuses_new_ones() {
        let live = LiveGroups::default();
        let running = {
            let live = live.clone();
            std::thread::spawn(move || run_bounded(&mut sh("sleep 1000 & wait"), LIMITS, &live))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while live.running().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let pgid = live.running()[0];
        live.close();
        let ran = running.join().expect("joined").expect("ran");
        assert_eq!(ran.ending, Ending::Stopped);
        assert!(group_gone_soon(pgid), "left: {:?}", group_members(pgid));
        assert!(run_bounded(&mut sh("true"), LIMITS, &live).is_err());
    }
}
