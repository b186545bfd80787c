//! Whether the previous run of Glider stopped cleanly (spec package `runstate`). A run
//! writes `GLIDER_HOME/runstate.json` when it starts and marks it clean when it stops.
//! A crash or SIGKILL runs no code, so it leaves state behind that Glider cannot see
//! then (redirect rules, orphaned delegate processes); the NEXT start finds the mark
//! missing and says what to check. It warns and does not repair, except for the
//! process groups Glider started for itself (stdio MCP servers, plugins), which the
//! next start ends when they are plainly its own ([`end_orphaned_groups`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{atomicfile, fileacl};

/// File name of the record under `GLIDER_HOME`.
pub const FILE_NAME: &str = "runstate.json";

/// What one run wrote about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub pid: u32,
    /// Unix seconds.
    pub started_at: u64,
    pub version: String,
    /// Parts of Glider that leave state on the machine while they run (`mitm`,
    /// `transparent`), so the advice after an unclean stop can be specific.
    #[serde(default)]
    pub features: Vec<String>,
    /// Set when the run stopped cleanly.
    #[serde(default)]
    pub stopped_at: Option<u64>,
    /// Delegate process groups running right now (added at start, removed at exit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegates: Vec<DelegateProcess>,
    /// Packet-redirect rules this run installed (transparent mode), recorded before
    /// they were installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
}

/// A delegate CLI process group this run started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegateProcess {
    /// Process group id (the leader's pid).
    pub pgid: u32,
    /// Which CLI (`claude`, `cursor-agent`, `agy`).
    pub cli: String,
    /// Unix seconds.
    pub started_at: u64,
}

/// Redirect rules a run put on the machine, so a later start can name them exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Redirect {
    /// The mechanism, e.g. `iptables`.
    pub backend: String,
    /// The commands that list what is left (e.g. `iptables -t nat -L GLIDER_TRANSPARENT -n -v`).
    pub list: Vec<String>,
    /// The rules as installed, one per line (for the record; `-S` syntax).
    pub rules: Vec<String>,
    /// Set when the rules were removed (clean stop or `glider transparent cleanup`).
    #[serde(default)]
    pub removed_at: Option<u64>,
}

impl Redirect {
    /// Advice when these rules may still be on the machine, or None once removed.
    fn leftover_advice(&self) -> Option<String> {
        if self.removed_at.is_some() {
            return None;
        }
        Some(format!(
            "transparent mode installed {} redirect rules that were not removed: list them with {}; remove them with `glider transparent cleanup`",
            self.backend,
            self.list
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(" and ")
        ))
    }
}

/// What the previous run left.
#[derive(Debug, Clone, PartialEq)]
pub enum Previous {
    /// No record: the first run with this `GLIDER_HOME`.
    None,
    /// It stopped cleanly.
    Clean(Record),
    /// It did not stop cleanly (crash, SIGKILL, power loss).
    Unclean(Record),
    /// Its process is still alive: another Glider uses this `GLIDER_HOME`.
    StillRunning(Record),
    /// The record could not be read; the text says why.
    Unreadable(String),
}

impl Previous {
    /// A warning for the operator, or None when all is well.
    pub fn warning(&self) -> Option<String> {
        match self {
            Previous::None => None,
            // A clean stop whose rule removal failed still leaves rules behind.
            Previous::Clean(record) => record
                .redirect
                .as_ref()
                .and_then(Redirect::leftover_advice)
                .map(|advice| format!("the previous Glider run stopped, but {advice}")),
            Previous::StillRunning(record) => Some(format!(
                "another Glider (pid {}) seems to be running with this GLIDER_HOME; two instances share the CA and state files",
                record.pid
            )),
            Previous::Unreadable(why) => Some(format!(
                "could not read the previous run's state ({why}); if Glider crashed last time, check for leftover iptables rules (iptables -t nat -S OUTPUT) and orphaned delegate processes"
            )),
            Previous::Unclean(record) => {
                let ago = now().saturating_sub(record.started_at);
                let mut checks = Vec::new();
                if let Some(advice) = record.redirect.as_ref().and_then(Redirect::leftover_advice) {
                    checks.push(advice);
                } else if record.features.iter().any(|f| f == "transparent") {
                    checks.push(
                        "transparent mode was on: look for redirect rules that stayed with `iptables -t nat -S OUTPUT` (and `ip6tables -t nat -S OUTPUT`); remove a leftover REDIRECT rule with `iptables -t nat -D OUTPUT <rule>`"
                            .to_owned(),
                    );
                } else {
                    checks.push(
                        "if transparent mode was used, look for redirect rules that stayed with `iptables -t nat -S OUTPUT`".to_owned(),
                    );
                }
                for (delegate, alive) in leftover_delegates(&record.delegates) {
                    checks.push(format!(
                        "its {} delegate (process group {}) is still running: {}; stop it with `kill -- -{}` once you have checked it is not something else",
                        delegate.cli,
                        delegate.pgid,
                        alive.join(", "),
                        delegate.pgid
                    ));
                }
                checks.push(
                    "look for delegate CLI processes whose parent is gone: `ps -eo pid,ppid,etime,cmd | grep -E 'claude|codex|cursor-agent|agy'` (a ppid of 1 means orphaned)".to_owned(),
                );
                Some(format!(
                    "the previous Glider run (pid {}, version {}, started {} ago) did not stop cleanly (a crash, SIGKILL or power loss), so it could not clean up after itself. Glider does not repair this for you; check: {}",
                    record.pid,
                    record.version,
                    human_duration(ago),
                    checks.join("; ")
                ))
            }
        }
    }
}

/// The record of the running process; mark it clean with [`RunState::stopped`].
#[derive(Debug)]
pub struct RunState {
    shared: Arc<Shared>,
}

/// A handle that records delegate process groups in the run's record while they run.
/// Cheap to clone, and never waits for the disk: each change is applied to the record
/// at once and the file is rewritten (atomically, fsync'd) by a background writer.
#[derive(Debug, Clone)]
pub struct DelegatePids {
    shared: Arc<Shared>,
}

/// The record shared by [`RunState`] and its [`DelegatePids`] handles, and the file it
/// is written to. Every change takes a full snapshot under the `record` lock and gets
/// the next number; the file only ever moves forward to a higher number, so whichever
/// order writes reach the disk in, the last change wins.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    /// The record and how many changes it has had.
    record: Mutex<(Record, u64)>,
    /// The number of the change now on disk; held while writing.
    written: Mutex<u64>,
    /// The newest change waiting for the background writer.
    queue: Mutex<Queue>,
    /// Signalled when the background writer has nothing left to do.
    idle: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// The newest snapshot not yet handed to the writer (older ones are superseded).
    next: Option<(u64, Vec<u8>)>,
    /// Whether a writer thread is running.
    running: bool,
    /// The newest change the writer has dealt with (written, failed, or superseded).
    handled: u64,
}

impl Shared {
    fn new(path: PathBuf, record: Record) -> Self {
        Shared {
            path,
            record: Mutex::new((record, 0)),
            written: Mutex::new(0),
            queue: Mutex::new(Queue::default()),
            idle: Condvar::new(),
        }
    }

    /// Apply `edit` and return the change's number and a snapshot of the whole record.
    fn change(&self, edit: impl FnOnce(&mut Record)) -> io::Result<(u64, Vec<u8>)> {
        let mut guard = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let (record, changes) = &mut *guard;
        edit(record);
        *changes += 1;
        Ok((*changes, encode(record)?))
    }

    /// Write snapshot `number` now, unless a newer one is already on disk.
    fn write_now(&self, number: u64, bytes: &[u8]) -> io::Result<()> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if number <= *written {
            return Ok(());
        }
        atomicfile::write(&self.path, bytes, fileacl::PRIVATE_FILE)?;
        *written = number;
        Ok(())
    }

    /// Queue snapshot `number` for the background writer (an older one is superseded).
    /// Returns whether a writer must be started.
    fn enqueue(&self, number: u64, bytes: Vec<u8>) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if queue
            .next
            .as_ref()
            .is_none_or(|(queued, _)| number > *queued)
        {
            queue.next = Some((number, bytes));
        }
        !std::mem::replace(&mut queue.running, true)
    }

    /// Start the background writer thread (inline when no thread can be had).
    fn start_writer(self: &Arc<Self>) {
        let shared = self.clone();
        let spawned = std::thread::Builder::new()
            .name("glider-runstate".to_owned())
            .spawn(move || shared.drain());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for the runstate writer; writing inline");
            self.drain();
        }
    }

    /// The background writer: write the newest queued snapshot until none is left.
    fn drain(&self) {
        loop {
            let next = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                let next = queue.next.take();
                if next.is_none() {
                    queue.running = false;
                    self.idle.notify_all();
                }
                next
            };
            let Some((number, bytes)) = next else { return };
            if let Err(e) = self.write_now(number, &bytes) {
                tracing::warn!(error = %e, path = %self.path.display(), "could not record delegate processes");
            }
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.handled = queue.handled.max(number);
            self.idle.notify_all();
        }
    }

    /// Wait until every change made before this call is on disk (or its write failed).
    /// Later changes do not keep it waiting.
    fn flush(&self) {
        let wanted = self.record.lock().unwrap_or_else(|p| p.into_inner()).1;
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        while queue.handled < wanted && (queue.running || queue.next.is_some()) {
            queue = self.idle.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Apply `edit` and write the record before returning.
    fn change_now(&self, edit: impl FnOnce(&mut Record)) -> io::Result<()> {
        let (number, bytes) = self.change(edit)?;
        self.write_now(number, &bytes)
    }

    /// Apply `edit` now; the file follows in the background. The snapshot is queued
    /// before the record's lock is let go, so a `flush` that sees this change's number
    /// also finds it queued (or written) and waits for it.
    fn change_later(self: &Arc<Self>, edit: impl FnOnce(&mut Record)) {
        let start = {
            let mut guard = self.record.lock().unwrap_or_else(|p| p.into_inner());
            let (record, changes) = &mut *guard;
            edit(record);
            *changes += 1;
            match encode(record) {
                Ok(bytes) => self.enqueue(*changes, bytes),
                Err(e) => {
                    tracing::warn!(error = %e, "could not encode the run state");
                    false
                }
            }
        };
        if start {
            self.start_writer();
        }
    }
}

impl DelegatePids {
    /// Record that delegate `cli` runs as process group `pgid`. Returns without waiting
    /// for the disk (safe to call on an async worker thread or in a `Drop`).
    pub fn started(&self, pgid: u32, cli: &str) {
        self.shared.change_later(|record| {
            record.delegates.retain(|d| d.pgid != pgid);
            record.delegates.push(DelegateProcess {
                pgid,
                cli: cli.to_owned(),
                started_at: now(),
            });
        });
    }

    /// Record that process group `pgid` is gone. Returns without waiting for the disk.
    pub fn ended(&self, pgid: u32) {
        self.shared
            .change_later(|record| record.delegates.retain(|d| d.pgid != pgid));
    }

    /// Block until every change recorded so far is written (or failed to be). Not for
    /// an async worker: use `spawn_blocking`.
    pub fn flush(&self) {
        self.shared.flush();
    }
}

/// Records the removal of this run's redirect rules. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RedirectLog {
    shared: Arc<Shared>,
}

impl RedirectLog {
    /// Record that the redirect rules were removed (written before this returns).
    pub fn removed(&self) -> io::Result<()> {
        self.shared.change_now(|record| {
            if let Some(redirect) = &mut record.redirect {
                redirect.removed_at = Some(now());
            }
        })
    }
}

/// Each recorded delegate whose process group still has members, with those members
/// as `pid (command)` read from `/proc`.
pub fn leftover_delegates(delegates: &[DelegateProcess]) -> Vec<(&DelegateProcess, Vec<String>)> {
    if delegates.is_empty() {
        return Vec::new();
    }
    let processes = crate::procutil::processes();
    delegates
        .iter()
        .filter_map(|delegate| {
            let alive: Vec<String> = processes
                .iter()
                .filter(|p| p.pgrp == delegate.pgid)
                .map(|p| format!("pid {} ({})", p.pid, p.comm))
                .collect();
            (!alive.is_empty()).then_some((delegate, alive))
        })
        .collect()
}

/// End the process groups `previous` (an unclean run) left running whose recorded
/// name starts with one of `prefixes` (`mcp:` stdio servers, `plugin:` plugins), when
/// each is plainly the group that run left: its leader, if still there, started when the
/// group was recorded, and every member started no earlier. (A group id cannot be handed
/// out again while any member of the old group lives, so members found under it are the
/// old group's unless that group had died out whole and a stranger's took its number:
/// the stranger's leader then started later, and is left alone.) Delegate CLIs are not
/// ended here: they run a person's session, and the warning names them instead. Returns
/// one line per group ended, for the log.
pub fn end_orphaned_groups(previous: &Previous, prefixes: &[&str]) -> Vec<String> {
    let Previous::Unclean(record) = previous else {
        return Vec::new();
    };
    let servers: Vec<&DelegateProcess> = record
        .delegates
        .iter()
        .filter(|d| prefixes.iter().any(|p| d.cli.starts_with(p)))
        .collect();
    if servers.is_empty() {
        return Vec::new();
    }
    let processes = crate::procutil::processes();
    let mut ended = Vec::new();
    for server in servers {
        let members: Vec<&crate::procutil::ProcStat> =
            processes.iter().filter(|p| p.pgrp == server.pgid).collect();
        if members.is_empty() {
            continue;
        }
        let leader_is_ours = members
            .iter()
            .find(|p| p.pid == server.pgid)
            .is_none_or(|leader| leader.started_at.abs_diff(server.started_at) <= 2);
        let orphaned = leader_is_ours
            && members
                .iter()
                .all(|p| p.started_at + 2 >= server.started_at);
        if !orphaned {
            tracing::warn!(
                pgid = server.pgid,
                server = %server.cli,
                "a recorded process group has members that do not look like Glider's orphans; left alone"
            );
            continue;
        }
        match crate::procutil::signal_group(server.pgid, crate::procutil::Signal::KILL) {
            Ok(()) => ended.push(format!(
                "ended {} (process group {}, {} process(es)) left running by the previous run",
                server.cli,
                server.pgid,
                members.len()
            )),
            Err(e) => {
                tracing::warn!(pgid = server.pgid, error = %e, "could not kill a process group")
            }
        }
    }
    ended
}

impl RunState {
    /// Read what the previous run left in `home`, then record this run as started
    /// (not yet clean). `features` names what this run turns on (`mitm`, `transparent`).
    pub fn start(
        home: &Path,
        version: &str,
        features: &[&str],
    ) -> io::Result<(RunState, Previous)> {
        let path = home.join(FILE_NAME);
        let previous = read_previous(&path);
        let record = Record {
            pid: std::process::id(),
            started_at: now(),
            version: version.to_owned(),
            features: features.iter().map(|f| (*f).to_owned()).collect(),
            stopped_at: None,
            delegates: Vec::new(),
            redirect: None,
        };
        write(&path, &record)?;
        Ok((
            RunState {
                shared: Arc::new(Shared::new(path, record)),
            },
            previous,
        ))
    }

    /// Mark this run as stopped cleanly. A delegate change still on its way to the disk
    /// cannot overwrite this: it is older, and the file only moves forward.
    pub fn stopped(self) -> io::Result<()> {
        self.shared
            .change_now(|record| record.stopped_at = Some(now()))
    }

    /// The handle delegates record their process groups through.
    pub fn delegate_pids(&self) -> DelegatePids {
        DelegatePids {
            shared: self.shared.clone(),
        }
    }

    /// Record redirect rules before installing them: a crash after this leaves a record
    /// the next start can name.
    pub fn record_redirect(&mut self, redirect: Redirect) -> io::Result<()> {
        self.shared
            .change_now(|record| record.redirect = Some(redirect))
    }

    /// Record that the redirect rules were removed.
    pub fn redirect_removed(&mut self) -> io::Result<()> {
        self.redirect_log().removed()
    }

    /// The handle a guard that owns the redirect rules records their removal through
    /// (it may drop them on a path that has no `RunState` at hand).
    pub fn redirect_log(&self) -> RedirectLog {
        RedirectLog {
            shared: self.shared.clone(),
        }
    }

    /// Where the record lives.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }
}

/// What the run recorded in `home` says, read without starting a run.
pub fn previous(home: &Path) -> Previous {
    read_previous(&home.join(FILE_NAME))
}

/// Mark the redirect rules in `home`'s record as removed (after an explicit cleanup), so
/// the next start stops warning about them. `Ok(false)` when there was nothing to mark.
pub fn mark_redirect_removed(home: &Path) -> io::Result<bool> {
    let path = home.join(FILE_NAME);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut record: Record = serde_json::from_slice(&text).map_err(io::Error::other)?;
    match &mut record.redirect {
        Some(redirect) if redirect.removed_at.is_none() => {
            redirect.removed_at = Some(now());
            write(&path, &record)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

fn read_previous(path: &Path) -> Previous {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Previous::None,
        Err(e) => return Previous::Unreadable(format!("{}: {e}", path.display())),
    };
    let record: Record = match serde_json::from_slice(&text) {
        Ok(record) => record,
        Err(e) => return Previous::Unreadable(format!("{}: {e}", path.display())),
    };
    if record.stopped_at.is_some() {
        Previous::Clean(record)
    } else if record.pid != std::process::id() && is_alive(record.pid) {
        Previous::StillRunning(record)
    } else {
        Previous::Unclean(record)
    }
}

/// Whether a process with `pid` that looks like Glider is alive (Linux: `/proc`).
fn is_alive(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    comm.trim().starts_with("glider")
}

fn write(path: &Path, record: &Record) -> io::Result<()> {
    atomicfile::write(path, &encode(record)?, fileacl::PRIVATE_FILE)
}

fn encode(record: &Record) -> io::Result<Vec<u8>> {
    let mut text = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    text.push(b'\n');
    Ok(text)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn human_duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..86400 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn the_run_state_file_is_private_to_its_owner() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("tempdir");
        let (run, _) = RunState::start(home.path(), "1", &[]).expect("start");
        let mode = || {
            std::fs::metadata(home.path().join(FILE_NAME))
                .expect("meta")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(), 0o600, "written at start");
        run.stopped().expect("stop");
        assert_eq!(mode(), 0o600, "rewritten at stop");
    }

    #[test]
    fn clean_then_unclean() {
        let home = tempfile::tempdir().expect("tempdir");
        let (run, previous) = RunState::start(home.path(), "1", &["mitm"]).expect("start");
        assert_eq!(previous, Previous::None);
        run.stopped().expect("stop");

        let (run, previous) = RunState::start(home.path(), "1", &["transparent"]).expect("start");
        assert!(matches!(previous, Previous::Clean(_)), "{previous:?}");
        assert!(previous.warning().is_none());
        // Dropped without `stopped`: what a crash leaves. Our own pid is not "another
        // instance", so the next start reads it as unclean.
        drop(run);
        let (_run, previous) = RunState::start(home.path(), "1", &[]).expect("start");
        let Previous::Unclean(record) = &previous else {
            panic!("expected unclean, got {previous:?}");
        };
        assert_eq!(record.features, vec!["transparent".to_owned()]);
        let warning = previous.warning().expect("warns");
        assert!(warning.contains("did not stop cleanly"), "{warning}");
        assert!(warning.contains("iptables -t nat -S OUTPUT"), "{warning}");
        assert!(warning.contains("ppid"), "{warning}");
    }

    fn rules() -> Redirect {
        Redirect {
            backend: "iptables".into(),
            list: vec!["iptables -t nat -L GLIDER_TRANSPARENT -n -v".into()],
            rules: vec!["-A OUTPUT -p tcp -j GLIDER_TRANSPARENT".into()],
            removed_at: None,
        }
    }

    #[test]
    fn rules_left_by_a_crash_are_named_exactly() {
        let home = tempfile::tempdir().expect("tempdir");
        let (mut run, _) = RunState::start(home.path(), "1", &["transparent"]).expect("start");
        run.record_redirect(rules()).expect("record");
        drop(run); // SIGKILL
        let (_run, previous) = RunState::start(home.path(), "1", &[]).expect("start");
        let warning = previous.warning().expect("warns");
        assert!(
            warning.contains("`iptables -t nat -L GLIDER_TRANSPARENT -n -v`"),
            "{warning}"
        );
        assert!(warning.contains("glider transparent cleanup"), "{warning}");
        // After the explicit cleanup the record says so, and a later start is quiet
        // about the rules.
        let home2 = tempfile::tempdir().expect("tempdir");
        let (mut run, _) = RunState::start(home2.path(), "1", &["transparent"]).expect("start");
        run.record_redirect(rules()).expect("record");
        drop(run);
        assert!(mark_redirect_removed(home2.path()).expect("mark"));
        assert!(!mark_redirect_removed(home2.path()).expect("mark again"));
        let (_run, previous) = RunState::start(home2.path(), "1", &[]).expect("start");
        let warning = previous.warning().expect("still an unclean stop");
        assert!(!warning.contains("GLIDER_TRANSPARENT"), "{warning}");
    }

    #[test]
    fn a_clean_stop_that_could_not_remove_its_rules_still_warns() {
        let home = tempfile::tempdir().expect("tempdir");
        let (mut run, _) = RunState::start(home.path(), "1", &["transparent"]).expect("start");
        run.record_redirect(rules()).expect("record");
        run.stopped().expect("stop");
        let (mut run, previous) = RunState::start(home.path(), "1", &[]).expect("start");
        assert!(
            previous
                .warning()
                .is_some_and(|w| w.contains("GLIDER_TRANSPARENT"))
        );
        run.record_redirect(rules()).expect("record");
        run.redirect_removed().expect("removed");
        run.stopped().expect("stop");
        let (_run, previous) = RunState::start(home.path(), "1", &[]).expect("start");
        assert_eq!(previous.warning(), None);
    }

    #[test]
    fn leftover_delegates_are_named_after_an_unclean_stop() {
        let home = tempfile::tempdir().expect("tempdir");
        let (run, _) = RunState::start(home.path(), "1", &[]).expect("start");
        let pids = run.delegate_pids();
        // A live delegate stand-in in its own process group, and one that ended.
        let mut sleeper = {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .expect("sleep")
        };
        pids.started(sleeper.id(), "claude");
        pids.started(999_999_999, "agy");
        pids.started(4_000_000_000, "cursor-agent");
        pids.ended(4_000_000_000);
        pids.flush();
        let written: Record =
            serde_json::from_slice(&std::fs::read(run.path()).expect("read")).expect("json");
        assert_eq!(written.delegates.len(), 2);
        drop(run);
        let (_run, previous) = RunState::start(home.path(), "1", &[]).expect("start");
        let warning = previous.warning().expect("warns");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(
            warning.contains(&format!(
                "claude delegate (process group {0}) is still running: pid {0} (sleep)",
                sleeper.id()
            )),
            "{warning}"
        );
        assert!(!warning.contains("agy delegate"), "{warning}");
        assert!(!warning.contains("cursor-agent delegate"), "{warning}");
    }

    fn on_disk(run: &RunState) -> Record {
        serde_json::from_slice(&std::fs::read(run.path()).expect("read")).expect("json")
    }

    #[test]
    fn delegate_changes_do_not_wait_for_a_slow_disk() {
        let home = tempfile::tempdir().expect("tempdir");
        let (run, _) = RunState::start(home.path(), "1", &[]).expect("start");
        let pids = run.delegate_pids();
        // A write in progress (an fsync that takes its time) holds the file lock; a
        // delegate starting or ending meanwhile must not wait for it.
        let writing = run.shared.written.lock().expect("lock");
        let (done, finished) = std::sync::mpsc::channel();
        let handle = pids.clone();
        std::thread::spawn(move || {
            handle.started(41, "claude");
            handle.ended(41);
            handle.started(42, "agy");
            let _ = done.send(());
        });
        assert!(
            finished
                .recv_timeout(std::time::Duration::from_secs(5))
                .is_ok(),
            "started/ended waited for the disk"
        );
        assert!(on_disk(&run).delegates.is_empty(), "not written yet");
        drop(writing);
        pids.flush();
        let delegates = on_disk(&run).delegates;
        assert_eq!(delegates.len(), 1, "{delegates:?}");
        assert_eq!((delegates[0].pgid, delegates[0].cli.as_str()), (42, "agy"));
    }

    #[test]
    fn the_last_change_wins_whatever_order_writes_finish_in() {
        let home = tempfile::tempdir().expect("tempdir");
        let (run, _) = RunState::start(home.path(), "1", &[]).expect("start");
        let pids = run.delegate_pids();
        let threads: Vec<_> = (0..8u32)
            .map(|i| {
                let pids = pids.clone();
                std::thread::spawn(move || {
                    // Pgids of their own per thread (1000 and up), apart from the
                    // final 0..8, so no thread ends another's delegate.
                    for round in 0..20u32 {
                        pids.started((i + 1) * 1000 + round, "claude");
                        pids.ended((i + 1) * 1000 + round);
                    }
                    pids.started(i, "cursor-agent");
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("join");
        }
        pids.flush();
        let mut pgids: Vec<u32> = on_disk(&run).delegates.iter().map(|d| d.pgid).collect();
        pgids.sort_unstable();
        assert_eq!(pgids, (0..8).collect::<Vec<_>>());
        // A started that is still queued when the run stops cleanly cannot undo the
        // clean mark: the stop is the newer change.
        let writing = run.shared.written.lock().expect("lock");
        pids.started(77, "agy");
        drop(writing);
        let path = run.path().to_owned();
        run.stopped().expect("stop");
        pids.flush();
        let record: Record =
            serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json");
        assert!(record.stopped_at.is_some(), "{record:?}");
        assert!(record.delegates.iter().any(|d| d.pgid == 77), "{record:?}");
    }

    #[test]
    fn a_broken_record_is_reported_not_fatal() {
        let home = tempfile::tempdir().expect("tempdir");
        std::fs::write(home.path().join(FILE_NAME), "{not json").expect("write");
        let (_run, previous) = RunState::start(home.path(), "1", &[]).expect("start");
        assert!(matches!(previous, Previous::Unreadable(_)));
        assert!(previous.warning().is_some());
    }
}
