//! The packet redirector behind transparent mode: a [`Redirector`] trait (install,
//! remove, find leftovers, enrollment support) with the Linux iptables implementation,
//! a macOS stub that refuses at start, and a Windows design note (WinDivert) with no
//! implementation yet.

use std::process::Command;

/// The `SO_MARK` Glider puts on its own origin sockets in transparent mode ("gl"). The
/// redirect chain's first rule returns on it, so Glider's outbound traffic is never
/// sent back to itself.
pub const GLIDER_MARK: u32 = 0x676c;

/// The iptables chain (table `nat`) that holds every rule Glider installs, so it can be
/// listed and removed as a unit.
pub const CHAIN: &str = "GLIDER_TRANSPARENT";

/// What cannot be redirected, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum RedirectError {
    /// This platform has no redirector.
    #[error("{0}")]
    Unsupported(String),
    /// Rules of an earlier run are still installed.
    #[error("{0}")]
    Leftover(String),
    /// A firewall command failed.
    #[error("{0}")]
    Command(String),
}

/// The rules a redirector installs, for the run-state record written before them.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The mechanism (`iptables`).
    pub backend: String,
    /// Commands that list what is installed.
    pub list: Vec<String>,
    /// The rules, one per line.
    pub rules: Vec<String>,
}

/// Sends chosen outbound TCP connections of this machine to the transparent port.
/// Linux: iptables; Windows (design): WinDivert rewriting the destination and keeping
/// a flow table keyed by the client's ip:port, which the door would read in place of
/// `SO_ORIGINAL_DST`, and which could filter by PID itself; macOS (design): pf.
pub trait Redirector: Send + Sync {
    /// What [`Redirector::install`] will put on the machine.
    fn plan(&self) -> Plan;
    /// Rules an earlier run left (it was killed): `Some(description)`.
    fn leftover(&self) -> Result<Option<String>, RedirectError>;
    /// Install the rules. On failure, whatever was added is removed again.
    fn install(&self) -> Result<(), RedirectError>;
    /// Remove the rules (also rules an earlier run left). Removing nothing is fine;
    /// `Ok(true)` when something was removed.
    fn remove(&self) -> Result<bool, RedirectError>;
    /// Whether PID enrollment narrows selection with this redirector. When false, an
    /// enrollment call succeeds and does nothing (spec).
    fn supports_enrollment(&self) -> bool;
}

/// What to redirect.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Where redirected connections go (`mitm.transparent_port`).
    pub to_port: u16,
    /// Destination ports caught (`mitm.transparent_ports`).
    pub ports: Vec<u16>,
    /// Also redirect IPv6 (ip6tables).
    pub ipv6: bool,
}

/// This platform's redirector, or why there is none.
pub fn for_this_platform(spec: Spec) -> Result<Box<dyn Redirector>, RedirectError> {
    if cfg!(target_os = "linux") {
        Ok(Box::new(Iptables::new(spec)))
    } else if cfg!(target_os = "macos") {
        Err(RedirectError::Unsupported(
            "mitm.transparent is not implemented on macOS (the design uses pf/pfctl; no code exists yet). Use the CONNECT proxy instead: `glider run <cli>` or HTTPS_PROXY=http://127.0.0.1:<mitm.port>".into(),
        ))
    } else {
        Err(RedirectError::Unsupported(format!(
            "mitm.transparent is not implemented on {} (Windows needs WinDivert; see docs/mitm.md). Use the CONNECT proxy instead: `glider run <cli>` or HTTPS_PROXY",
            std::env::consts::OS
        )))
    }
}

/// Linux: `iptables -t nat` (and `ip6tables`) rules in Glider's own chain.
#[derive(Debug, Clone)]
pub struct Iptables {
    spec: Spec,
}

impl Iptables {
    /// A redirector for `spec`.
    pub fn new(spec: Spec) -> Iptables {
        Iptables { spec }
    }

    fn tools(&self) -> Vec<&'static str> {
        if self.spec.ipv6 {
            vec!["iptables", "ip6tables"]
        } else {
            vec!["iptables"]
        }
    }

    /// Every table an earlier run may have left a chain in: an earlier run may have had
    /// IPv6 when this one falls back to IPv4 only.
    fn tools_to_clean(&self) -> Vec<&'static str> {
        let mut tools = self.tools();
        if !self.spec.ipv6 && ipv6_usable() {
            tools.push("ip6tables");
        }
        tools
    }

    /// The rules in order: the chain, its RETURN on Glider's mark, one REDIRECT per
    /// port, then the jump from OUTPUT (last, so the chain is complete when it is used).
    fn rules(&self) -> Vec<Vec<String>> {
        let mut rules = vec![
            args(&["-N", CHAIN]),
            args(&[
                "-A",
                CHAIN,
                "-m",
                "mark",
                "--mark",
                &format!("{GLIDER_MARK:#x}"),
                "-j",
                "RETURN",
            ]),
        ];
        for port in &self.spec.ports {
            rules.push(args(&[
                "-A",
                CHAIN,
                "-p",
                "tcp",
                "--dport",
                &port.to_string(),
                "-j",
                "REDIRECT",
                "--to-ports",
                &self.spec.to_port.to_string(),
            ]));
        }
        rules.push(jump());
        rules
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| (*a).to_owned()).collect()
}

/// The rule in OUTPUT that sends TCP into Glider's chain.
fn jump() -> Vec<String> {
    args(&["-A", "OUTPUT", "-p", "tcp", "-j", CHAIN])
}

impl Redirector for Iptables {
    fn plan(&self) -> Plan {
        let tools = self.tools();
        Plan {
            backend: "iptables".into(),
            list: tools
                .iter()
                .map(|tool| format!("{tool} -t nat -L {CHAIN} -n -v"))
                .collect(),
            rules: tools
                .iter()
                .flat_map(|tool| {
                    self.rules()
                        .into_iter()
                        .map(move |rule| format!("{tool} -t nat {}", rule.join(" ")))
                })
                .collect(),
        }
    }

    fn leftover(&self) -> Result<Option<String>, RedirectError> {
        let mut found = Vec::new();
        for tool in self.tools_to_clean() {
            if chain_exists(tool)? {
                found.push(format!("{tool} -t nat -L {CHAIN} -n -v"));
            }
        }
        Ok((!found.is_empty()).then(|| {
            format!(
                "the redirect chain {CHAIN} of an earlier Glider run is still installed (that run did not stop cleanly); look at it with `{}`, and remove it with `glider transparent cleanup` before starting transparent mode again",
                found.join("` and `")
            )
        }))
    }

    fn install(&self) -> Result<(), RedirectError> {
        for tool in self.tools() {
            for rule in self.rules() {
                if let Err(e) = iptables(tool, &rule) {
                    let _ = self.remove();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn remove(&self) -> Result<bool, RedirectError> {
        let mut removed = false;
        let mut errors = Vec::new();
        for tool in self.tools_to_clean() {
            match remove_chain(tool) {
                Ok(any) => removed |= any,
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            Ok(removed)
        } else {
            Err(RedirectError::Command(errors.join("; ")))
        }
    }

    fn supports_enrollment(&self) -> bool {
        // iptables cannot match a PID; the door filters by PID itself (procinfo).
        true
    }
}

/// Whether `ip6tables`' nat table can be used here (installed, permitted, supported).
pub fn ipv6_usable() -> bool {
    cfg!(target_os = "linux")
        && run("ip6tables", &args(&["-S", "OUTPUT"])).is_ok_and(|o| o.status.success())
}

/// Whether Glider's chain exists in `tool`'s nat table. A missing tool is an error
/// (transparent mode needs it); a missing chain is `false`.
fn chain_exists(tool: &str) -> Result<bool, RedirectError> {
    let output = run(tool, &args(&["-S", CHAIN]))?;
    Ok(output.status.success())
}

/// Delete every jump to the chain, then flush and delete it. `Ok(false)` when there
/// was nothing.
fn remove_chain(tool: &str) -> Result<bool, RedirectError> {
    if !chain_exists(tool)? {
        return Ok(false);
    }
    let mut delete = jump();
    delete[0] = "-D".into();
    // A crashed run followed by a failed start can leave the jump twice.
    while run(tool, &delete)?.status.success() {}
    iptables(tool, &args(&["-F", CHAIN]))?;
    iptables(tool, &args(&["-X", CHAIN]))?;
    Ok(true)
}

/// Run `tool -w 5 -t nat <rule>`; a non-zero exit is an error that quotes the command.
fn iptables(tool: &str, rule: &[String]) -> Result<(), RedirectError> {
    let output = run(tool, rule)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(RedirectError::Command(format!(
            "`{tool} -t nat {}` failed: {}{}",
            rule.join(" "),
            String::from_utf8_lossy(&output.stderr).trim(),
            permission_hint(&output.stderr)
        )))
    }
}

fn run(tool: &str, rule: &[String]) -> Result<std::process::Output, RedirectError> {
    Command::new(tool)
        .args(["-w", "5", "-t", "nat"])
        .args(rule)
        .output()
        .map_err(|e| {
            RedirectError::Command(if e.kind() == std::io::ErrorKind::NotFound {
                format!("transparent mode needs `{tool}` (Debian: apt install iptables), and it is not on PATH")
            } else {
                format!("cannot run {tool}: {e}")
            })
        })
}

fn permission_hint(stderr: &[u8]) -> &'static str {
    let text = String::from_utf8_lossy(stderr).to_lowercase();
    if text.contains("permission denied") || text.contains("operation not permitted") {
        " — changing the firewall needs root or CAP_NET_ADMIN (e.g. `sudo setcap cap_net_admin+ep $(command -v glider)`)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_returns_on_glider_s_mark_before_redirecting() {
        let plan = Iptables::new(Spec {
            to_port: 8083,
            ports: vec![443, 8443],
            ipv6: false,
        })
        .plan();
        assert_eq!(
            plan.list,
            vec!["iptables -t nat -L GLIDER_TRANSPARENT -n -v"]
        );
        assert_eq!(
            plan.rules,
            vec![
                "iptables -t nat -N GLIDER_TRANSPARENT",
                "iptables -t nat -A GLIDER_TRANSPARENT -m mark --mark 0x676c -j RETURN",
                "iptables -t nat -A GLIDER_TRANSPARENT -p tcp --dport 443 -j REDIRECT --to-ports 8083",
                "iptables -t nat -A GLIDER_TRANSPARENT -p tcp --dport 8443 -j REDIRECT --to-ports 8083",
                "iptables -t nat -A OUTPUT -p tcp -j GLIDER_TRANSPARENT",
            ]
        );
    }

    #[test]
    fn ipv6_doubles_the_rules_with_ip6tables() {
        let plan = Iptables::new(Spec {
            to_port: 8083,
            ports: vec![443],
            ipv6: true,
        })
        .plan();
        assert_eq!(plan.list.len(), 2);
        assert!(
            plan.rules
                .iter()
                .any(|r| r.starts_with("ip6tables -t nat -A OUTPUT"))
        );
    }
}
