//! The `mcp:` section: the MCP servers Glider connects to (a stdio command or a
//! Streamable HTTP URL each), which of their tools it offers (`allow` / `deny`), and
//! how it restarts a server that went down. docs/tools.md says what each key does.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::schema::Secret;

/// What joins a server's name to its tool's name in the names Glider offers
/// (`files__read_file`). Server names may not contain it, so a prefixed name splits back
/// into exactly one server and tool.
pub const TOOL_SEPARATOR: &str = "__";

/// One MCP server: either `command` (stdio) or `url` (Streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program to start (a name looked up on PATH, or a path).
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: extra environment variables (`${VAR}` is interpolated).
    pub env: BTreeMap<String, Secret>,
    /// stdio: its working directory (default: Glider's).
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the server's endpoint, e.g. `https://host/mcp`.
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request (`${VAR}` is interpolated).
    pub headers: BTreeMap<String, Secret>,
    /// Streamable HTTP: the environment variable whose value is sent as
    /// `Authorization: Bearer …`.
    pub bearer_token_env: Option<String>,
    /// Tool names (`*` patterns, unprefixed) offered; empty offers all.
    pub allow: Vec<String>,
    /// Tool names (`*` patterns, unprefixed) never offered; wins over `allow`.
    pub deny: Vec<String>,
    /// Set false to keep the entry but not connect.
    pub enabled: bool,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            bearer_token_env: None,
            allow: Vec::new(),
            deny: Vec::new(),
            enabled: true,
        }
    }
}

impl McpServerConfig {
    /// Whether a tool (by its own, unprefixed name) passes `allow` and `deny`.
    pub fn offers(&self, tool: &str) -> bool {
        let allowed =
            self.allow.is_empty() || self.allow.iter().any(|p| crate::glob_match(p, tool));
        allowed && !self.deny.iter().any(|p| crate::glob_match(p, tool))
    }
}

/// The `mcp:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// The servers, by name (the prefix of their tools' names).
    pub servers: BTreeMap<String, McpServerConfig>,
    /// Seconds before the first restart of a server that went down; doubled after each
    /// failed try up to `restart_max_secs`.
    pub restart_initial_secs: f64,
    pub restart_max_secs: f64,
    /// Seconds one tool call may take before it fails.
    pub call_timeout_secs: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: BTreeMap::new(),
            restart_initial_secs: 0.5,
            restart_max_secs: 30.0,
            call_timeout_secs: 120,
        }
    }
}

impl McpConfig {
    /// What is wrong with these values, one line each, naming the key.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (name, server) in &self.servers {
            let at = format!("mcp.servers.{name}");
            if !valid_server_name(name) {
                problems.push(format!(
                    "{at}: a server name takes letters, digits, - and single _ (not {TOOL_SEPARATOR}, nor _ at either end), as it prefixes its tools' names"
                ));
            }
            match (&server.command, &server.url) {
                (None, None) => problems.push(format!(
                    "{at}: set command (a stdio server) or url (a Streamable HTTP server)"
                )),
                (Some(_), Some(_)) => problems.push(format!(
                    "{at}: set command (stdio) or url (Streamable HTTP), not both"
                )),
                (Some(command), None) => {
                    if command.trim().is_empty() {
                        problems.push(format!("{at}.command is empty"));
                    }
                    let url_keys = [
                        ("headers", !server.headers.is_empty()),
                        ("bearer_token_env", server.bearer_token_env.is_some()),
                    ];
                    for (key, set) in url_keys {
                        if set {
                            problems.push(format!(
                                "{at}.{key} is for a url server; a stdio server takes env"
                            ));
                        }
                    }
                }
                (None, Some(url)) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        problems.push(format!(
                            "{at}.url must start with http:// or https://, got {url:?}"
                        ));
                    }
                    let stdio_keys = [
                        ("args", !server.args.is_empty()),
                        ("env", !server.env.is_empty()),
                        ("cwd", server.cwd.is_some()),
                    ];
                    for (key, set) in stdio_keys {
                        if set {
                            problems.push(format!(
                                "{at}.{key} is for a command server; a url server takes headers"
                            ));
                        }
                    }
                }
            }
        }
        let initial = self.restart_initial_secs;
        if !(initial.is_finite() && initial > 0.0) {
            problems.push("mcp.restart_initial_secs must be a positive number".into());
        }
        if !(self.restart_max_secs.is_finite() && self.restart_max_secs >= initial) {
            problems.push("mcp.restart_max_secs must be at least mcp.restart_initial_secs".into());
        }
        if self.call_timeout_secs == 0 {
            problems.push("mcp.call_timeout_secs must be at least 1".into());
        }
        problems
    }
}

/// Letters, digits, `-` and `_`, without the separator and without `_` at either end
/// (so `NAME__tool` splits at its first separator into this server and its tool).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains(TOOL_SEPARATOR)
        && !name.starts_with('_')
        && !name.ends_with('_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> McpConfig {
        serde_saphyr::from_str(yaml).expect("parses")
    }

    #[test]
    fn a_stdio_and_a_url_server_validate() {
        let config = parse(
            "servers:\n  files: {command: npx, args: [-y, x], env: {A: b}, deny: [write_*]}\n  remote: {url: 'https://h/mcp', bearer_token_env: TOKEN}\n",
        );
        assert_eq!(config.problems(), Vec::<String>::new());
        let files = &config.servers["files"];
        assert!(files.enabled);
        assert!(files.offers("read_file"));
        assert!(!files.offers("write_file"));
    }

    #[test]
    fn problems_name_the_key() {
        let config = parse(
            "servers:\n  both: {command: x, url: 'http://h'}\n  none: {args: [a]}\n  bad__name: {command: x}\n  web: {url: 'ftp://h', env: {A: b}}\n  cmd: {command: x, headers: {A: b}}\nrestart_initial_secs: 0\n",
        );
        let problems = config.problems().join("\n");
        for needle in [
            "mcp.servers.both: set command (stdio) or url",
            "mcp.servers.none: set command",
            "mcp.servers.bad__name: a server name",
            "mcp.servers.web.url must start with http",
            "mcp.servers.web.env is for a command server",
            "mcp.servers.cmd.headers is for a url server",
            "mcp.restart_initial_secs",
        ] {
            assert!(
                problems.contains(needle),
                "{needle:?} missing in:\n{problems}"
            );
        }
    }

    #[test]
    fn allow_then_deny() {
        let server = McpServerConfig {
            allow: vec!["get_*".into(), "echo".into()],
            deny: vec!["get_secret".into()],
            ..McpServerConfig::default()
        };
        assert!(server.offers("echo"));
        assert!(server.offers("get_sum"));
        assert!(!server.offers("get_secret"));
        assert!(!server.offers("add"));
    }

    #[test]
    fn server_names() {
        for good in ["files", "a-b", "a_b", "x1"] {
            assert!(valid_server_name(good), "{good}");
        }
        for bad in ["", "a__b", "_a", "a_", "a.b", "a b"] {
            assert!(!valid_server_name(bad), "{bad}");
        }
    }
}
