//! Tools a model may call (spec package `tools`): the [`ToolProvider`] abstraction that
//! every source of tools implements (Glider's internal tools here; the MCP hub of
//! `glider-mcp`), the [`ToolSet`] that unions providers, the read-only internal tools
//! confined to a workspace root ([`internal`], [`workspace`]), and the Landlock sandbox
//! for the tools that run a subprocess ([`sandbox`]).

pub mod fs_tools;
pub mod git;
pub mod internal;
pub mod sandbox;
pub mod workspace;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use internal::{InternalTools, Limits};
pub use sandbox::{Sandbox, SandboxMode};
pub use workspace::Workspace;

/// What a model is told about one tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema object for the arguments.
    pub input_schema: Value,
}

/// What a tool call returned.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    Text(String),
    /// Structured content (an MCP tool's `structuredContent`, say).
    Structured(Value),
}

impl ToolOutput {
    /// The output as the text a model reads in a tool result.
    pub fn into_text(self) -> String {
        match self {
            ToolOutput::Text(text) => text,
            ToolOutput::Structured(value) => value.to_string(),
        }
    }
}

/// Why a tool call did not run or did not succeed. The message is written for the
/// model (it reads it as the tool's result) and for the person reading the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("no tool named `{0}`")]
    UnknownTool(String),
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments { tool: String, message: String },
    /// The call asked for something outside what the tool may touch.
    #[error("refused: {0}")]
    Refused(String),
    /// The tools are not set up (`tools.workspace` missing, say).
    #[error("tools unavailable: {0}")]
    Unavailable(String),
    /// The sandbox could not confine the subprocess, so it did not run.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

/// The name the MCP hub goes by as a provider: the tool loop offers its tools only
/// where `tools.loop.mcp` allows them, and `/mcp` serves them from the hub itself.
pub const MCP_PROVIDER: &str = "mcp";

/// A boxed future, so [`ToolProvider`] stays object-safe.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;

/// A source of tools: Glider's internal tools, an MCP server hub.
pub trait ToolProvider: Send + Sync {
    /// The provider's name, for logs and records (`internal`, an MCP server's name).
    fn name(&self) -> &str;
    /// The tools it offers now (a hub answers from what it last listed; never waits).
    fn specs(&self) -> Vec<ToolSpec>;
    /// Run tool `name` with `args` (a JSON object).
    fn call<'a>(&'a self, name: &'a str, args: Value) -> ToolFuture<'a>;
}

/// The union of several providers. A name offered by two providers goes to the first
/// (the later one's tool is not offered, and a warning says so).
#[derive(Clone, Default)]
pub struct ToolSet {
    providers: Vec<Arc<dyn ToolProvider>>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.providers.iter().map(|p| p.name()).collect();
        f.debug_struct("ToolSet")
            .field("providers", &names)
            .finish()
    }
}

impl ToolSet {
    pub fn new() -> Self {
        ToolSet::default()
    }

    pub fn with(mut self, provider: Arc<dyn ToolProvider>) -> Self {
        self.providers.push(provider);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }

    /// Every tool offered, first provider first, each name once; with `only` non-empty,
    /// just the tools it names (the reduced set a small model is given).
    pub fn specs(&self, only: &[String]) -> Vec<ToolSpec> {
        self.specs_where(|_, spec| only.is_empty() || only.contains(&spec.name))
    }

    /// [`ToolSet::specs`] of the tools `keep` accepts, given the provider's name.
    pub fn specs_where(&self, keep: impl Fn(&str, &ToolSpec) -> bool) -> Vec<ToolSpec> {
        let mut seen = std::collections::HashSet::new();
        let mut specs = Vec::new();
        for provider in &self.providers {
            for spec in provider.specs() {
                if !keep(provider.name(), &spec) {
                    continue;
                }
                if seen.insert(spec.name.clone()) {
                    specs.push(spec);
                } else {
                    tracing::warn!(
                        tool = %spec.name,
                        provider = provider.name(),
                        "a tool of that name is already offered by an earlier provider; not offered twice"
                    );
                }
            }
        }
        specs
    }

    /// The set without the providers named `name`.
    pub fn without(&self, name: &str) -> ToolSet {
        ToolSet {
            providers: self
                .providers
                .iter()
                .filter(|p| p.name() != name)
                .cloned()
                .collect(),
        }
    }

    /// Run `name` on the first provider that offers it.
    pub async fn call(&self, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.call_where(name, args, |_, _| true).await
    }

    /// Run `name` on the first provider whose tool of that name `keep` accepts: the
    /// one [`ToolSet::specs_where`] with the same `keep` offered, never a provider the
    /// filter left out that happens to have the name too.
    pub async fn call_where(
        &self,
        name: &str,
        args: Value,
        keep: impl Fn(&str, &ToolSpec) -> bool,
    ) -> Result<ToolOutput, ToolError> {
        for provider in &self.providers {
            if provider
                .specs()
                .iter()
                .any(|spec| spec.name == name && keep(provider.name(), spec))
            {
                return provider.call(name, args).await;
            }
        }
        Err(ToolError::UnknownTool(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(&'static str, &'static str);

    impl ToolProvider for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn specs(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: self.1.to_owned(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
            }]
        }
        fn call<'a>(&'a self, _: &'a str, _: Value) -> ToolFuture<'a> {
            Box::pin(async move { Ok(ToolOutput::Text(self.0.to_owned())) })
        }
    }

    #[tokio::test]
    async fn a_set_offers_each_name_once_and_calls_the_first_provider_of_it() {
        let set = ToolSet::new()
            .with(Arc::new(Fixed("a", "x")))
            .with(Arc::new(Fixed("b", "x")))
            .with(Arc::new(Fixed("c", "y")));
        let names: Vec<String> = set.specs(&[]).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["x", "y"]);
        assert_eq!(set.specs(&["y".into()]).len(), 1);
        let from_b: Vec<String> = set
            .specs_where(|provider, _| provider == "b")
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(from_b, ["x"], "a filter sees each provider's own tools");
        let without_a = set.without("a");
        assert_eq!(
            without_a
                .call("x", Value::Null)
                .await
                .map(ToolOutput::into_text),
            Ok("b".to_owned())
        );
        let out = set.call("x", Value::Null).await.expect("runs");
        assert_eq!(out.into_text(), "a");
        // The call goes where the same filter's offer came from, not to `a`'s `x`.
        assert_eq!(
            set.call_where("x", Value::Null, |provider, _| provider == "b")
                .await
                .map(ToolOutput::into_text),
            Ok("b".to_owned())
        );
        assert_eq!(
            set.call_where("y", Value::Null, |provider, _| provider == "b")
                .await,
            Err(ToolError::UnknownTool("y".into()))
        );
        assert_eq!(
            set.call("z", Value::Null).await,
            Err(ToolError::UnknownTool("z".into()))
        );
    }
}
