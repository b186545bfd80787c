//! The environment of every child Glider starts (stdio MCP servers, plugins, delegated
//! CLIs and their launchers): never Glider's own, which holds the cloud API keys, but a
//! minimal one built here — the variables in [`KEPT`] and `LC_*` taken from Glider's
//! environment, then the ones the caller names for that kind of child (a delegated
//! CLI's own auth variables), then what the child's config sets (an MCP server's or a
//! plugin's `env:` map, added by the caller after this). docs/tools.md, docs/plugins.md
//! and docs/delegation.md say what each child gets.

use std::ffi::{OsStr, OsString};

/// Variables every child keeps from Glider's environment: where programs and the home
/// directory are, the locale, the temporary directory and the terminal type.
pub const KEPT: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
];

/// Prefixes of variables every child keeps (the locale's categories).
const KEPT_PREFIXES: [&str; 1] = ["LC_"];

/// Whether `name` is kept: one of [`KEPT`], an `LC_*`, or named by `also` — exactly, or
/// by a prefix written with a trailing `*` (`ANTHROPIC_*`).
fn kept(name: &OsStr, also: &[&str]) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    KEPT.contains(&name)
        || KEPT_PREFIXES.iter().any(|p| name.starts_with(p))
        || also.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        })
}

/// What a child keeps of `parent` (an environment, e.g. [`std::env::vars_os`]).
pub fn minimal_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    also: &[&str],
) -> Vec<(OsString, OsString)> {
    parent
        .into_iter()
        .filter(|(name, _)| kept(name, also))
        .collect()
}

/// A command whose environment can be cleared and set: std's and tokio's.
pub trait ChildEnv {
    /// Clear the environment and set exactly [`minimal_env`] of `parent`.
    fn minimal_env_of(
        &mut self,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
        also: &[&str],
    ) -> &mut Self;

    /// [`ChildEnv::minimal_env_of`] Glider's own environment.
    fn minimal_env(&mut self, also: &[&str]) -> &mut Self {
        self.minimal_env_of(std::env::vars_os(), also)
    }
}

impl ChildEnv for std::process::Command {
    fn minimal_env_of(
        &mut self,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
        also: &[&str],
    ) -> &mut Self {
        self.env_clear().envs(minimal_env(parent, also))
    }
}

impl ChildEnv for tokio::process::Command {
    fn minimal_env_of(
        &mut self,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
        also: &[&str],
    ) -> &mut Self {
        self.env_clear().envs(minimal_env(parent, also))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("LC_ALL", "C.UTF-8"),
            ("ANTHROPIC_API_KEY", "sk-ant-secret"),
            ("ANTHROPIC_BASE_URL", "http://h"),
            ("OPENAI_API_KEY", "sk-openai-secret"),
            ("GLIDER_DASHBOARD_TOKEN", "tok"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().filter_map(|(k, _)| k.to_str()).collect()
    }

    #[test]
    fn only_the_kept_and_the_named_variables_pass() {
        assert_eq!(
            names(&minimal_env(parent(), &[])),
            ["PATH", "HOME", "LC_ALL"]
        );
        assert_eq!(
            names(&minimal_env(parent(), &["ANTHROPIC_*"])),
            [
                "PATH",
                "HOME",
                "LC_ALL",
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL"
            ]
        );
        assert_eq!(
            names(&minimal_env(parent(), &["ANTHROPIC_BASE_URL"])),
            ["PATH", "HOME", "LC_ALL", "ANTHROPIC_BASE_URL"]
        );
    }

    #[tokio::test]
    async fn a_real_child_sees_the_minimal_environment_and_its_own() {
        let out = tokio::process::Command::new("/usr/bin/env")
            .minimal_env_of(parent(), &[])
            .env("OWN", "configured")
            .output()
            .await
            .expect("env runs");
        let seen = String::from_utf8_lossy(&out.stdout);
        assert!(seen.contains("OWN=configured\n"), "{seen}");
        assert!(seen.contains("HOME=/home/u\n"), "{seen}");
        for secret in [
            "sk-ant-secret",
            "sk-openai-secret",
            "GLIDER_DASHBOARD_TOKEN",
        ] {
            assert!(!seen.contains(secret), "{secret} reached the child: {seen}");
        }
    }
}
