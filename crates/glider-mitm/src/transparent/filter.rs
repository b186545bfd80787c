//! Which processes transparent mode decrypts: image names (the vendor registry's CLI
//! executables plus `mitm.transparent_processes`) and, while PIDs are enrolled, only
//! those PIDs and their descendants. The owner of a connection comes from procinfo.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use glider_sys::procinfo::{self, Process};

/// The PIDs enrolled through `POST /api/mitm/enrollment`; empty means no narrowing.
/// Cheap to clone; every clone shares the same set.
#[derive(Debug, Clone, Default)]
pub struct Enrollment(Arc<RwLock<BTreeSet<u32>>>);

impl Enrollment {
    /// Replace the set (empty clears it).
    pub fn set(&self, pids: BTreeSet<u32>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = pids;
    }

    /// The enrolled PIDs.
    pub fn pids(&self) -> BTreeSet<u32> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The verdict on one connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// Decrypt (when the host is listed): the process matched.
    Selected(Option<Process>),
    /// Tunnel to the original destination untouched; the text says why.
    Passed(String),
}

/// Image names plus enrollment.
#[derive(Debug, Clone)]
pub struct ProcessFilter {
    names: BTreeSet<String>,
    /// The vendor registry, read per connection so a re-discovery on the dashboard's
    /// Vendors page takes effect without a restart.
    registry: Option<Arc<glider_delegate::Registry>>,
    enrollment: Enrollment,
}

/// The image names transparent mode selects for `config`: every executable of the
/// vendor registry (its usual name and the file name of a configured `path`), the CLIs
/// that only use the MITM ([`super::MITM_ONLY_CLIS`]), and `mitm.transparent_processes`.
pub fn selected_names(config: &glider_config::Config) -> BTreeSet<String> {
    use glider_delegate::vendors::Vendor;
    let mut names: BTreeSet<String> = Vendor::ALL
        .into_iter()
        .flat_map(|vendor| {
            let configured = vendor
                .settings(&config.delegate)
                .path
                .as_deref()
                .and_then(|p| std::path::Path::new(p).file_name())
                .map(|n| n.to_string_lossy().into_owned());
            std::iter::once(vendor.binary().to_owned()).chain(configured)
        })
        .collect();
    names.extend(super::MITM_ONLY_CLIS.iter().map(|n| (*n).to_owned()));
    names.extend(config.mitm.transparent_processes.iter().cloned());
    names
}

/// Ancestors examined for an enrolled PID; deeper trees are not followed.
const MAX_ANCESTORS: usize = 64;

impl ProcessFilter {
    /// Select processes going by one of `names`, narrowed by `enrollment`. With no
    /// names and nothing enrolled, every connection is selected (port only).
    pub fn new(names: impl IntoIterator<Item = String>, enrollment: Enrollment) -> ProcessFilter {
        ProcessFilter {
            names: names.into_iter().filter(|n| !n.is_empty()).collect(),
            registry: None,
            enrollment,
        }
    }

    /// Also select every executable name the vendor `registry` knows as it is at each
    /// connection ([`glider_delegate::Registry::image_names`]).
    pub fn with_registry(mut self, registry: Arc<glider_delegate::Registry>) -> ProcessFilter {
        self.registry = Some(registry);
        self
    }

    /// The image names selected now.
    pub fn names(&self) -> BTreeSet<String> {
        let mut names = self.names.clone();
        if let Some(registry) = &self.registry {
            names.extend(registry.image_names().iter().cloned());
        }
        names
    }

    /// Decide for the connection from `client` to `original` (blocking: reads /proc).
    pub fn select(&self, client: SocketAddr, original: SocketAddr) -> Selection {
        let enrolled = self.enrollment.pids();
        let names = self.names();
        if names.is_empty() && enrolled.is_empty() {
            return Selection::Selected(None);
        }
        let process = match procinfo::owner_of(client, original) {
            Ok(Some(process)) => process,
            Ok(None) => {
                return Selection::Passed(format!(
                    "no process owns the connection {client} → {original} any more"
                ));
            }
            Err(e) => return Selection::Passed(format!("cannot find its process: {e}")),
        };
        judge(process, &names, &enrolled, procinfo::parent_of)
    }
}

/// The verdict on `process` for the selected `names` and `enrolled` PIDs.
fn judge(
    process: Process,
    names: &BTreeSet<String>,
    enrolled: &BTreeSet<u32>,
    parent_of: impl Fn(u32) -> Option<u32>,
) -> Selection {
    if !names.is_empty() && !names.iter().any(|n| process.is_named(n)) {
        return Selection::Passed(format!(
            "pid {} ({}) is not a selected process (names: {})",
            process.pid,
            process.comm,
            names.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if !enrolled.is_empty() {
        let mut pid = Some(process.pid);
        let mut enrolled_here = false;
        for _ in 0..MAX_ANCESTORS {
            let Some(p) = pid else { break };
            if enrolled.contains(&p) {
                enrolled_here = true;
                break;
            }
            pid = parent_of(p);
        }
        if !enrolled_here {
            return Selection::Passed(format!(
                "pid {} ({}) is neither enrolled nor a descendant of an enrolled pid",
                process.pid, process.comm
            ));
        }
    }
    Selection::Selected(Some(process))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, name: &str) -> Process {
        Process {
            pid,
            comm: name.into(),
            names: vec![name.into()],
        }
    }

    fn filter(names: &[&str]) -> ProcessFilter {
        ProcessFilter::new(names.iter().map(|n| (*n).to_owned()), Enrollment::default())
    }

    #[test]
    fn names_then_enrollment() {
        let f = filter(&["claude", "curl"]);
        let parent = |pid: u32| match pid {
            30 => Some(20),
            20 => Some(10),
            _ => None,
        };
        let none = BTreeSet::new();
        assert!(matches!(
            judge(process(30, "claude"), &f.names(), &none, parent),
            Selection::Selected(Some(_))
        ));
        assert!(matches!(
            judge(process(30, "wget"), &f.names(), &none, parent),
            Selection::Passed(why) if why.contains("not a selected process")
        ));
        // Enrolled: the PID itself or an ancestor.
        let enrolled: BTreeSet<u32> = [10].into();
        assert!(matches!(
            judge(process(30, "curl"), &f.names(), &enrolled, parent),
            Selection::Selected(_)
        ));
        let other: BTreeSet<u32> = [99].into();
        assert!(matches!(
            judge(process(30, "curl"), &f.names(), &other, parent),
            Selection::Passed(why) if why.contains("enrolled")
        ));
        // Enrollment narrows; it never adds a process whose name does not match.
        let itself: BTreeSet<u32> = [30].into();
        assert!(matches!(
            judge(process(30, "wget"), &f.names(), &itself, parent),
            Selection::Passed(_)
        ));
    }

    #[test]
    fn no_names_and_nothing_enrolled_selects_by_port_only() {
        let f = filter(&[]);
        assert_eq!(
            f.select(
                "127.0.0.1:1".parse().expect("addr"),
                "127.0.0.1:2".parse().expect("addr")
            ),
            Selection::Selected(None)
        );
    }

    #[test]
    fn the_registry_and_the_config_name_the_processes() {
        let mut config = glider_config::Config::default();
        config.mitm.transparent_processes = vec!["my-client".into()];
        config.delegate.claude.path = Some("/opt/cc/claude-beta".into());
        let names = selected_names(&config);
        for name in [
            "claude",
            "cursor-agent",
            "agy",
            "codex",
            "my-client",
            "claude-beta",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
    }

    #[tokio::test]
    async fn a_cli_found_by_rediscovery_is_selected_without_a_restart() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let exe = dir.path().join("claude-nightly");
        std::fs::write(&exe, "#!/bin/sh\necho '9.9.9 (Claude Code)'\n").expect("write");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let registry = Arc::new(glider_delegate::Registry::new());
        let f = filter(&["curl"]).with_registry(registry.clone());
        let none = BTreeSet::new();
        assert!(matches!(
            judge(process(7, "claude-nightly"), &f.names(), &none, |_| None),
            Selection::Passed(_)
        ));
        let mut config = glider_config::DelegateConfig::default();
        config.claude.path = Some(exe.to_string_lossy().into_owned());
        registry.discover(&config).await;
        assert!(matches!(
            judge(process(7, "claude-nightly"), &f.names(), &none, |_| None),
            Selection::Selected(Some(_))
        ));
        assert!(f.names().contains("curl"), "the fixed names stay");
    }

    #[test]
    fn enrollment_is_shared_between_clones() {
        let e = Enrollment::default();
        let f = ProcessFilter::new(["x".to_owned()], e.clone());
        e.set([1, 2].into());
        assert_eq!(f.enrollment.pids(), [1, 2].into());
        e.set(BTreeSet::new());
        assert!(f.enrollment.pids().is_empty());
    }
}
