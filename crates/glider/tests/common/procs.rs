//! Process checks for delegate tests: who is in a process group (from `/proc`), and a
//! bounded wait until a group is empty.

use std::time::Duration;

/// Processes whose process group is `pgid` (from /proc/<pid>/stat, field 5).
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1;
                    after.split_whitespace().nth(2)?.parse::<u32>().ok()
                })
                == Some(pgid)
        })
        .collect()
}

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
