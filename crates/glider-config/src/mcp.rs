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
    /// Streamable HTTP: log in with OAuth (`glider mcp login NAME`) and send the stored
    /// token as the bearer, refreshed before it expires.
    pub oauth: Option<McpOAuthConfig>,
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
            oauth: None,
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

/// How `glider mcp login` obtains a server's token (`mcp.servers.NAME.oauth`). Each
/// endpoint left unset is discovered from the server (its protected-resource metadata,
/// then its authorization server's metadata) or taken from the `provider` preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpOAuthConfig {
    /// A preset of endpoints: `github` (the device flow at github.com).
    pub provider: Option<String>,
    /// `device` (RFC 8628, works from a terminal) or `code` (authorization code + PKCE
    /// with a loopback redirect). Default: `device` for `provider: github`, else `code`.
    pub flow: Option<String>,
    /// The OAuth client's id; unset, the client registers itself where the
    /// authorization server offers dynamic registration.
    pub client_id: Option<String>,
    /// Scopes asked for (default: the ones the server's metadata lists, if any).
    pub scopes: Vec<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub device_authorization_endpoint: Option<String>,
    /// The code flow's loopback redirect port (0 picks a free one).
    pub redirect_port: u16,
    /// Refresh a token this many seconds before it expires.
    pub refresh_before_secs: u64,
}

impl Default for McpOAuthConfig {
    fn default() -> Self {
        McpOAuthConfig {
            provider: None,
            flow: None,
            client_id: None,
            scopes: Vec::new(),
            authorization_endpoint: None,
            token_endpoint: None,
            device_authorization_endpoint: None,
            redirect_port: 0,
            refresh_before_secs: 60,
        }
    }
}

/// The OAuth providers with built-in endpoints.
pub const OAUTH_PROVIDERS: &[&str] = &["github"];

impl McpOAuthConfig {
    /// The flow used: `flow`, or the provider's default.
    pub fn flow(&self) -> &str {
        match (&self.flow, self.provider.as_deref()) {
            (Some(flow), _) => flow,
            (None, Some("github")) => "device",
            (None, _) => "code",
        }
    }

    fn problems(&self, at: &str, problems: &mut Vec<String>) {
        if let Some(provider) = &self.provider
            && !OAUTH_PROVIDERS.contains(&provider.as_str())
        {
            problems.push(format!(
                "{at}.oauth.provider: unknown provider {provider:?} (known: {})",
                OAUTH_PROVIDERS.join(", ")
            ));
        }
        if !matches!(self.flow(), "device" | "code") {
            problems.push(format!(
                "{at}.oauth.flow must be device or code, got {:?}",
                self.flow()
            ));
        }
        if self.provider.as_deref() == Some("github") && self.client_id.is_none() {
            problems.push(format!(
                "{at}.oauth.client_id: GitHub's device flow needs an OAuth app's client id"
            ));
        }
        let endpoints = [
            ("authorization_endpoint", &self.authorization_endpoint),
            ("token_endpoint", &self.token_endpoint),
            (
                "device_authorization_endpoint",
                &self.device_authorization_endpoint,
            ),
        ];
        for (key, value) in endpoints {
            if let Some(url) = value
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                problems.push(format!(
                    "{at}.oauth.{key} must start with http:// or https://, got {url:?}"
                ));
            }
        }
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
                        ("oauth", server.oauth.is_some()),
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
                    if let Some(oauth) = &server.oauth {
                        if server.bearer_token_env.is_some() {
                            problems.push(format!("{at}: set bearer_token_env or oauth, not both"));
                        }
                        oauth.problems(&at, &mut problems);
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
    fn oauth_keys_validate() {
        let config = parse(
            "servers:\n  gh: {url: 'https://h/mcp', oauth: {provider: github, client_id: abc}}\n  spec: {url: 'https://h/mcp', oauth: {}}\n  bad: {url: 'https://h/mcp', bearer_token_env: T, oauth: {provider: gitlab, flow: x, token_endpoint: 'ftp://t'}}\n  nogh: {url: 'https://h/mcp', oauth: {provider: github}}\n",
        );
        assert_eq!(
            config.servers["gh"].oauth.as_ref().map(|o| o.flow()),
            Some("device")
        );
        assert_eq!(
            config.servers["spec"].oauth.as_ref().map(|o| o.flow()),
            Some("code")
        );
        let problems = config.problems().join("\n");
        for needle in [
            "mcp.servers.bad: set bearer_token_env or oauth",
            "mcp.servers.bad.oauth.provider: unknown provider \"gitlab\"",
            "mcp.servers.bad.oauth.flow must be device or code",
            "mcp.servers.bad.oauth.token_endpoint must start with http",
            "mcp.servers.nogh.oauth.client_id",
        ] {
            assert!(
                problems.contains(needle),
                "{needle:?} missing in:\n{problems}"
            );
        }
        assert!(!problems.contains("mcp.servers.gh"), "{problems}");
        assert!(!problems.contains("mcp.servers.spec"), "{problems}");
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
