//! After a crash or SIGKILL, the stdio MCP servers Glider started may outlive it (a
//! server that ignores the end of its stdin, or a grandchild it started). The run state
//! records each server's process group as `mcp:NAME` with the time it was started; at
//! the next start, a recorded group that still has members is ended, but only when it
//! is plainly the one Glider left: its leader, if still there, started when the group
//! was recorded, and every member started no earlier. (A group id cannot be handed out
//! again while any member of the old group lives, so members found under it are the
//! old group's unless that group had died out whole and a stranger's took its number:
//! the stranger's leader then started later, and is left alone.)

use glider_sys::runstate::{DelegateProcess, Previous};

/// What `/proc` says of one process.
struct Proc {
    pid: u32,
    pgrp: u32,
    /// Unix seconds.
    started_at: u64,
}

/// End the MCP server groups `previous` (an unclean run) left running; returns one line
/// per group ended, for the log.
pub fn end_leftover_servers(previous: &Previous) -> Vec<String> {
    let Previous::Unclean(record) = previous else {
        return Vec::new();
    };
    let servers: Vec<&DelegateProcess> = record
        .delegates
        .iter()
        .filter(|d| d.cli.starts_with("mcp:"))
        .collect();
    if servers.is_empty() {
        return Vec::new();
    }
    let processes = read_processes();
    let mut ended = Vec::new();
    for server in servers {
        let members: Vec<&Proc> = processes.iter().filter(|p| p.pgrp == server.pgid).collect();
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
                "a recorded MCP server group has members that do not look like Glider's orphans; left alone"
            );
            continue;
        }
        let killed = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", server.pgid)])
            .status();
        match killed {
            Ok(status) if status.success() => ended.push(format!(
                "ended {} (process group {}, {} process(es)) left running by the previous run",
                server.cli,
                server.pgid,
                members.len()
            )),
            Ok(status) => tracing::warn!(pgid = server.pgid, %status, "kill failed"),
            Err(e) => tracing::warn!(pgid = server.pgid, error = %e, "could not run kill"),
        }
    }
    ended
}

fn read_processes() -> Vec<Proc> {
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
            // `pid (comm) state ppid pgrp ... starttime` (22nd): comm may hold spaces.
            let (_, after) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = after.split_whitespace().collect();
            let pgrp = fields.get(2)?.parse().ok()?;
            let start_ticks: u64 = fields.get(19)?.parse().ok()?;
            Some(Proc {
                pid,
                pgrp,
                started_at: boot + start_ticks / TICKS_PER_SEC,
            })
        })
        .collect()
}
