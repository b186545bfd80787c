//! Which process owns a TCP connection (spec package `procinfo`), on Linux: the socket's
//! inode from `/proc/net/tcp` and `/proc/net/tcp6`, then the process holding that inode
//! among `/proc/*/fd`. Also the names a process goes by and its parent, for the
//! transparent door's process filter. Other platforms answer `Unsupported`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// A process found by [`owner_of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// The kernel's short name (`/proc/<pid>/comm`, at most 15 bytes).
    pub comm: String,
    /// Every name this process goes by for matching an image name: `comm`, the file
    /// name of its executable and of `argv[0]`, and for a script interpreter (`node`,
    /// `bun`, `deno`, `python*`) the file name of the script it runs (`argv[1]`).
    pub names: Vec<String>,
}

impl Process {
    /// Read what `/proc/<pid>` says about a process; `None` when it is gone.
    pub fn read(pid: u32) -> Option<Process> {
        read_process(Path::new("/proc"), pid)
    }

    /// Whether any of its names is `name`.
    pub fn is_named(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// The process that owns the TCP socket whose local end is `local` and remote end
/// `remote` (as that socket sees them: for a redirected connection, the client's
/// address and the original destination). `Ok(None)` when no process holds it (it
/// closed, or it belongs to another network namespace).
pub fn owner_of(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<Process>> {
    if !cfg!(target_os = "linux") {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "finding the process of a connection is implemented for Linux only",
        ));
    }
    let proc = Path::new("/proc");
    let mut inode = None;
    for table in ["net/tcp", "net/tcp6"] {
        let text = match std::fs::read_to_string(proc.join(table)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        inode = find_inode(&text, local, remote);
        if inode.is_some() {
            break;
        }
    }
    let Some(inode) = inode else {
        return Ok(None);
    };
    Ok(pid_holding(proc, inode)?.and_then(|pid| read_process(proc, pid)))
}

/// The parent of `pid` (`/proc/<pid>/stat`); `None` for init, a kernel thread or a
/// process that is gone.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_ppid(&stat).filter(|ppid| *ppid != 0)
}

/// `ppid` from the text of `/proc/<pid>/stat`: the field after the state, which follows
/// the `)` closing the command name (a name may itself hold `)` or spaces).
fn parse_ppid(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The inode of the socket in a `/proc/net/tcp{,6}` table whose local and remote
/// addresses are `local` and `remote`. IPv4-mapped IPv6 addresses equal their IPv4 form.
fn find_inode(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let (local, remote) = (canonical(local), canonical(remote));
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (l, r, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        if parse_addr(l)? != local || parse_addr(r)? != remote {
            return None;
        }
        inode.parse().ok().filter(|inode| *inode != 0)
    })
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// `0100007F:1F90` (IPv4) or 32 hex digits `:PORT` (IPv6). The kernel prints each 32-bit
/// word of the address as a native-endian number, the port as a plain number.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

/// The first process under `proc` with a file descriptor on `socket:[inode]`.
/// Processes that vanish or that we may not read are skipped.
fn pid_holding(proc: &Path, inode: u64) -> io::Result<Option<u32>> {
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir(proc)?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path())
                .is_ok_and(|target| target.as_os_str() == wanted.as_str())
            {
                return Ok(Some(pid));
            }
        }
    }
    Ok(None)
}

fn read_process(proc: &Path, pid: u32) -> Option<Process> {
    let dir = proc.join(pid.to_string());
    let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
    let comm = comm.trim_end_matches('\n').to_owned();
    let exe = std::fs::read_link(dir.join("exe")).ok();
    let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Some(Process {
        pid,
        names: names(&comm, exe.as_deref(), &argv),
        comm,
    })
}

/// The names a process goes by: see [`Process::names`].
fn names(comm: &str, exe: Option<&Path>, argv: &[String]) -> Vec<String> {
    let base = |p: &str| {
        Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    };
    let exe_name = exe.and_then(|e| base(&e.to_string_lossy()));
    let mut names = vec![comm.to_owned()];
    names.extend(exe_name.clone());
    names.extend(argv.first().and_then(|a| base(a)));
    let interpreter = exe_name.as_deref().is_some_and(|n| {
        matches!(n, "node" | "nodejs" | "bun" | "deno") || n.starts_with("python")
    });
    if interpreter {
        names.extend(argv.get(1).and_then(|a| base(a)));
    }
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F93 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4711 1 0000000000000000 100 0 0 10 0
   1: 010200C0:9E10 010200C0:01BB 01 00000000:00000000 00:00000000 00000000     0        0 4712 1 0000000000000000 20 4 30 10 -1
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF0000010200C0:A000 0000000000000000FFFF0000010200C0:01BB 01 00000000:00000000 00:00000000 00000000     0        0 5001 1 0000000000000000 20 4 30 10 -1
   1: 00000000000000000000000001000000:B000 00000000000000000000000001000000:01BB 01 00000000:00000000 00:00000000 00000000     0        0 5002 1 0000000000000000 20 4 30 10 -1
";

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn finds_the_socket_by_both_ends() {
        let client = addr("192.0.2.1:40464");
        let origin = addr("192.0.2.1:443");
        assert_eq!(find_inode(TCP, client, origin), Some(4712));
        // The listener has the right local port but not the right remote end.
        assert_eq!(find_inode(TCP, addr("127.0.0.1:8083"), origin), None);
        assert_eq!(find_inode(TCP, client, addr("192.0.2.1:444")), None);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn ipv6_and_ipv4_mapped_sockets() {
        // An IPv6 socket connected to an IPv4 address shows it as ::ffff:a.b.c.d.
        assert_eq!(
            find_inode(TCP6, addr("192.0.2.1:40960"), addr("192.0.2.1:443")),
            Some(5001)
        );
        assert_eq!(
            find_inode(TCP6, addr("[::1]:45056"), addr("[::1]:443")),
            Some(5002)
        );
    }

    #[test]
    fn ppid_survives_odd_command_names() {
        assert_eq!(parse_ppid("42 (a) b c) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("1 (init) S 0 1 1"), Some(0));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn a_script_run_by_node_goes_by_the_script_name() {
        let n = names(
            "MainThread",
            Some(Path::new("/usr/bin/node")),
            &["node".into(), "/usr/lib/node_modules/x/bin/claude".into()],
        );
        assert!(n.contains(&"claude".to_owned()), "{n:?}");
        assert!(n.contains(&"node".to_owned()), "{n:?}");
        // A non-interpreter's first argument is data, not its name.
        let n = names(
            "vim",
            Some(Path::new("/usr/bin/vim")),
            &["vim".into(), "claude".into()],
        );
        assert_eq!(n, vec!["vim".to_owned()]);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn finds_this_process_for_a_real_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (_server, _) = listener.accept().expect("accept");
        let owner = owner_of(
            client.local_addr().expect("local"),
            client.peer_addr().expect("peer"),
        )
        .expect("read /proc")
        .expect("found");
        assert_eq!(owner.pid, std::process::id());
        let me = Process::read(std::process::id()).expect("self");
        assert_eq!(owner, me);
        assert!(parent_of(std::process::id()).is_some());
    }
}
