//! What a plugin declares at `initialize`: the protocol version it speaks, its
//! capabilities (`observe` with the events it wants, `route`, `rewrite` with a scope,
//! `tools`), and the request fields it reads. Glider calls a plugin only within its
//! manifest, and refuses a manifest it cannot honour.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol versions this Glider speaks; `initialize` offers them and the plugin
/// picks one.
pub const PROTOCOL_VERSIONS: &[u32] = &[1];

/// The events an `observe` capability may ask for.
pub const EVENTS: &[&str] = &[
    "request_finished",
    "route_decided",
    "tool_call",
    "budget_stop",
];

/// The request fields a plugin may ask to read (`reads`); `model` is always given.
pub const FIELDS: &[&str] = &[
    "turns",
    "tools",
    "tool_choice",
    "max_tokens",
    "temperature",
    "stream",
    "metadata",
];

/// Which routes a `rewrite` hook runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Local,
    Cloud,
    Both,
}

impl Scope {
    /// Whether a candidate (local or not) is in scope.
    pub fn covers(self, local: bool) -> bool {
        match self {
            Scope::Local => local,
            Scope::Cloud => !local,
            Scope::Both => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observe {
    pub events: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rewrite {
    pub scope: Scope,
}

/// A tool the plugin offers to the tool loop (`tools/call` runs it; crate::tools).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub input_schema: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    #[serde(default)]
    pub observe: Option<Observe>,
    /// `{}` when the plugin gives routing opinions.
    #[serde(default)]
    pub route: Option<Value>,
    #[serde(default)]
    pub rewrite: Option<Rewrite>,
    #[serde(default)]
    pub tools: Vec<Tool>,
}

/// The manifest a plugin returns from `initialize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    #[serde(default)]
    pub version: String,
    pub capabilities: Capabilities,
    /// The request fields the `route` and `rewrite` hooks are given (besides `model`).
    #[serde(default)]
    pub reads: Vec<String>,
}

/// `initialize`'s result.
#[derive(Debug, Clone, Deserialize)]
pub struct Initialized {
    pub protocol_version: u32,
    pub manifest: Manifest,
}

impl Initialized {
    /// Read `initialize`'s result; `Err` says why the plugin is refused.
    pub fn parse(result: serde_json::Value) -> Result<Initialized, String> {
        let initialized: Initialized = serde_json::from_value(result)
            .map_err(|e| format!("its initialize result is not a manifest: {e}"))?;
        if !PROTOCOL_VERSIONS.contains(&initialized.protocol_version) {
            return Err(format!(
                "it speaks protocol version {}, Glider speaks {PROTOCOL_VERSIONS:?}",
                initialized.protocol_version
            ));
        }
        let manifest = &initialized.manifest;
        if let Some(observe) = &manifest.capabilities.observe
            && let Some(unknown) = observe
                .events
                .iter()
                .find(|e| !EVENTS.contains(&e.as_str()))
        {
            return Err(format!(
                "it asks to observe {unknown:?} (known: {})",
                EVENTS.join(", ")
            ));
        }
        if let Some(unknown) = manifest
            .reads
            .iter()
            .find(|f| !FIELDS.contains(&f.as_str()))
        {
            return Err(format!(
                "it asks to read {unknown:?} (known: {})",
                FIELDS.join(", ")
            ));
        }
        let mut names = std::collections::HashSet::new();
        for tool in &manifest.capabilities.tools {
            if tool.name.trim().is_empty() {
                return Err("it declares a tool with no name".to_owned());
            }
            if !names.insert(tool.name.as_str()) {
                return Err(format!("it declares the tool {:?} twice", tool.name));
            }
        }
        Ok(initialized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_manifest_is_refused_for_a_version_an_event_or_a_field_glider_does_not_know() {
        let ok = json!({"protocol_version": 1, "manifest": {"name": "p",
            "capabilities": {"rewrite": {"scope": "local"}}, "reads": ["turns"]}});
        let parsed = Initialized::parse(ok).expect("valid");
        assert_eq!(
            parsed.manifest.capabilities.rewrite,
            Some(Rewrite {
                scope: Scope::Local
            })
        );
        for (bad, why) in [
            (
                json!({"protocol_version": 9, "manifest": {"name": "p", "capabilities": {}}}),
                "protocol version 9",
            ),
            (
                json!({"protocol_version": 1, "manifest": {"name": "p", "capabilities": {"observe": {"events": ["everything"]}}}}),
                "observe \"everything\"",
            ),
            (
                json!({"protocol_version": 1, "manifest": {"name": "p", "capabilities": {}, "reads": ["api_key"]}}),
                "read \"api_key\"",
            ),
            (
                json!({"protocol_version": 1, "manifest": {"name": "p", "capabilities": {"exec": {}}}}),
                "not a manifest",
            ),
            (
                json!({"protocol_version": 1, "manifest": {"name": "p", "capabilities": {"tools": [{"name": "t"}, {"name": "t"}]}}}),
                "the tool \"t\" twice",
            ),
        ] {
            let error = Initialized::parse(bad).expect_err("refused");
            assert!(error.contains(why), "{error}");
        }
        assert!(Scope::Both.covers(true) && Scope::Both.covers(false));
        assert!(Scope::Cloud.covers(false) && !Scope::Cloud.covers(true));
    }
}
