//! Which config keys a reload applies and which wait for a restart. [`RESTART_ONLY`] is
//! the one list: the watcher reports and holds back exactly these keys
//! ([`Config::restart_only_changes`], [`Config::hot_applicable`]), `/api/config` shows
//! them, and the reload column of `docs/configuration.md` is tested against them
//! (`tests/configuration_doc.rs`). Every key not under one of them is hot.

use crate::Config;

/// One restart-only key: its dotted path (a section's name covers all its keys), and
/// how a reload compares it and keeps its running value.
pub struct RestartKey {
    /// The key as the config file and the docs write it, e.g. `mitm.port`.
    pub key: &'static str,
    differs: fn(&Config, &Config) -> bool,
    keep: fn(&mut Config, &Config),
}

impl std::fmt::Debug for RestartKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key)
    }
}

/// A [`RestartKey`] per field path; the key text is the path as written.
macro_rules! restart_only {
    ($($head:ident $(. $tail:ident)*),* $(,)?) => {
        &[$(RestartKey {
            key: concat!(stringify!($head) $(, ".", stringify!($tail))*),
            differs: |running, next| running.$head$(.$tail)* != next.$head$(.$tail)*,
            keep: |next, running| next.$head$(.$tail)* = Clone::clone(&running.$head$(.$tail)*),
        }),*]
    };
}

/// The keys only a restart applies: what listens (the `server` section, the MITM's
/// ports, hosts, CA and transparent settings, its way to the origins), what the context
/// store's writer is built with at start, and how the GPUs are found.
pub const RESTART_ONLY: &[RestartKey] = restart_only![
    server,
    context.enabled,
    context.retention_days,
    context.max_store_mb,
    context.queue_capacity,
    context.record_max_tokens,
    mitm.enabled,
    mitm.port,
    mitm.hosts,
    mitm.transparent,
    mitm.transparent_port,
    mitm.transparent_ports,
    mitm.transparent_processes,
    mitm.ca_dir,
    mitm.upstream_overrides,
    mitm.upstream_ca_file,
    vram.monitor,
    vram.nvidia_smi,
];

/// The restart-only keys, as written (for `/api/config`).
pub fn restart_only_keys() -> Vec<&'static str> {
    RESTART_ONLY.iter().map(|k| k.key).collect()
}

/// Whether `key` (a dotted path such as `server.bind` or `mitm.hosts`; `[]` and
/// `<name>` segments allowed) waits for a restart: it is, or lies under, a
/// [`RESTART_ONLY`] key.
pub fn is_restart_only(key: &str) -> bool {
    RESTART_ONLY.iter().any(|restart| {
        key.strip_prefix(restart.key)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

impl Config {
    /// The restart-only keys whose value differs between `self` (running) and `next`.
    pub fn restart_only_changes(&self, next: &Config) -> Vec<&'static str> {
        RESTART_ONLY
            .iter()
            .filter(|restart| (restart.differs)(self, next))
            .map(|restart| restart.key)
            .collect()
    }

    /// `next` with the restart-only keys of `self` kept, so a reload applies what it
    /// can and leaves the rest for the restart.
    pub fn hot_applicable(&self, next: Config) -> Config {
        let mut applied = next;
        for restart in RESTART_ONLY {
            (restart.keep)(&mut applied, self);
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_under_a_restart_only_section_is_restart_only() {
        assert!(is_restart_only("server"));
        assert!(is_restart_only("server.bind"));
        assert!(is_restart_only("mitm.port"));
        assert!(!is_restart_only("mitm.portable"));
        assert!(!is_restart_only("mitm.passthrough_default"));
        assert!(!is_restart_only("mitm"));
        assert!(!is_restart_only("routing.sticky.enabled"));
    }

    #[test]
    fn the_keys_read_as_written() {
        let keys = restart_only_keys();
        assert!(keys.contains(&"server"));
        assert!(keys.contains(&"mitm.upstream_ca_file"));
        assert!(keys.contains(&"context.record_max_tokens"));
    }

    #[test]
    fn context_and_gpu_keys_read_at_start_wait_for_a_restart() {
        let old = Config::default();
        let mut next = Config::default();
        next.context.retention_days = 1;
        next.vram.nvidia_smi = "/opt/nvidia-smi".into();
        next.context.bound_local = false;
        assert_eq!(
            old.restart_only_changes(&next),
            ["context.retention_days", "vram.nvidia_smi"]
        );
        let applied = old.hot_applicable(next);
        assert_eq!(applied.context.retention_days, 30);
        assert_eq!(applied.vram.nvidia_smi, "nvidia-smi");
        assert!(!applied.context.bound_local);
    }
}
