//! The `plugins:` section: the out-of-process plugins Glider starts, and what the config
//! grants each beyond its manifest (docs/plugins.md). Hot: adding, removing or changing
//! an entry starts, stops or restarts that plugin on reload.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginConfig {
    /// Its name in logs, metrics and the request record; unique.
    pub name: String,
    /// The program and its arguments, run in the config file's directory.
    pub command: Vec<String>,
    /// Added to the plugin's environment (`${VAR}` is not interpolated: Glider's own
    /// secrets are not handed on by accident).
    pub env: BTreeMap<String, String>,
    pub enabled: bool,
    /// Whether the plugin may see prompt text (message text, system text, tool
    /// results); off, it sees the request's shape with every text replaced by its length.
    pub allow_prompt_text: bool,
    /// How long Glider waits for one hook call before going on without the plugin.
    pub deadline_ms: u64,
    /// The plugin's address-space limit (`RLIMIT_AS`), in MiB; 0 for none.
    pub memory_mb: u64,
    /// The longest line the plugin may write; a longer one ends it (it is restarted).
    pub max_line_bytes: usize,
    /// Failed or timed-out calls in a row that open the plugin's breaker.
    pub breaker_failures: u32,
    /// Seconds an open breaker skips the plugin before one call tries it again.
    pub breaker_open_secs: u64,
    /// Observe events queued for the plugin; past it, events are dropped and counted.
    pub observe_queue: usize,
    /// How long `initialize` may take (the plugin's own start-up: an interpreter loading).
    pub initialize_deadline_ms: u64,
    /// Seconds between `heartbeat` calls to a running plugin; 0 for none.
    pub heartbeat_secs: u64,
    /// How long one call of a tool the plugin declared may take (tools do real work:
    /// longer than a hook's `deadline_ms`).
    pub tool_deadline_ms: u64,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            name: String::new(),
            command: Vec::new(),
            env: BTreeMap::new(),
            enabled: true,
            allow_prompt_text: false,
            deadline_ms: 250,
            memory_mb: 512,
            max_line_bytes: 1 << 20,
            breaker_failures: 5,
            breaker_open_secs: 30,
            observe_queue: 1024,
            initialize_deadline_ms: 10_000,
            heartbeat_secs: 5,
            tool_deadline_ms: 30_000,
        }
    }
}

/// Everything wrong with the `plugins:` entries.
pub(crate) fn problems(plugins: &[PluginConfig], problems: &mut Vec<String>) {
    let mut names = std::collections::HashSet::new();
    for (i, plugin) in plugins.iter().enumerate() {
        let at = format!("plugins[{i}] ({})", plugin.name);
        if plugin.name.trim().is_empty() {
            problems.push(format!("plugins[{i}]: name must not be empty"));
        } else if !names.insert(plugin.name.as_str()) {
            problems.push(format!("{at}: duplicate plugin name"));
        }
        if plugin.command.first().is_none_or(|p| p.trim().is_empty()) {
            problems.push(format!("{at}: command must name a program"));
        }
        if plugin.deadline_ms == 0 {
            problems.push(format!("{at}: deadline_ms must be at least 1"));
        }
        if plugin.max_line_bytes < 1024 {
            problems.push(format!("{at}: max_line_bytes must be at least 1024"));
        }
        if plugin.breaker_failures == 0 {
            problems.push(format!("{at}: breaker_failures must be at least 1"));
        }
        if plugin.initialize_deadline_ms == 0 {
            problems.push(format!("{at}: initialize_deadline_ms must be at least 1"));
        }
        if plugin.tool_deadline_ms == 0 {
            problems.push(format!("{at}: tool_deadline_ms must be at least 1"));
        }
        if plugin.observe_queue == 0 {
            problems.push(format!("{at}: observe_queue must be at least 1"));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn an_entry_takes_the_documented_defaults_and_bad_ones_are_named() {
        let config = Config::parse("plugins:\n  - {name: p, command: [python3, p.py]}\n", "t")
            .expect("valid");
        let plugin = &config.plugins[0];
        assert!(plugin.enabled && !plugin.allow_prompt_text);
        assert_eq!((plugin.deadline_ms, plugin.memory_mb), (250, 512));
        assert_eq!(
            (
                plugin.initialize_deadline_ms,
                plugin.heartbeat_secs,
                plugin.tool_deadline_ms
            ),
            (10_000, 5, 30_000)
        );
        let bad = Config::parse(
            "plugins:\n  - {name: p, command: []}\n  - {name: p, command: [x], deadline_ms: 0, initialize_deadline_ms: 0}\n",
            "t",
        );
        let error = bad.expect_err("invalid").to_string();
        for expected in [
            "plugins[0] (p): command must name a program",
            "plugins[1] (p): duplicate plugin name",
            "plugins[1] (p): deadline_ms must be at least 1",
            "plugins[1] (p): initialize_deadline_ms must be at least 1",
        ] {
            assert!(error.contains(expected), "{error}");
        }
    }
}
