//! Glider's internal tools as one [`ToolProvider`]: `read_file`, `list_dir`, `glob`,
//! `grep` (in process) and `git_status`, `git_diff`, `git_log` (sandboxed), all inside
//! `tools.workspace`. Without a workspace the provider offers nothing and every call
//! says how to turn the tools on.

use std::time::Duration;

use glider_config::ToolsConfig;
use serde_json::{Value, json};

use crate::fs_tools::{self, GrepQuery};
use crate::git::{self, GitQuery};
use crate::{Sandbox, ToolError, ToolFuture, ToolOutput, ToolProvider, ToolSpec, Workspace};

/// Caps on what one call reads and shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_read_bytes: usize,
    pub max_lines: usize,
    pub max_entries: usize,
    pub max_matches: usize,
    pub max_files_scanned: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&ToolsConfig::default())
    }
}

impl From<&ToolsConfig> for Limits {
    fn from(config: &ToolsConfig) -> Self {
        Limits {
            max_read_bytes: config.max_read_bytes,
            max_lines: config.max_lines,
            max_entries: config.max_entries,
            max_matches: config.max_matches,
            max_files_scanned: config.max_files_scanned,
        }
    }
}

/// The internal tools over one workspace.
#[derive(Debug)]
pub struct InternalTools {
    /// `Err`: why the tools are off (no `tools.workspace`, or it cannot be opened).
    workspace: Result<(Workspace, Sandbox), ToolError>,
    limits: Limits,
}

/// Every internal tool's name.
pub const INTERNAL_TOOLS: &[&str] = &[
    "read_file",
    "list_dir",
    "glob",
    "grep",
    "git_status",
    "git_diff",
    "git_log",
];

impl InternalTools {
    pub fn from_config(config: &ToolsConfig) -> Self {
        let workspace = match &config.workspace {
            None => Err(ToolError::Unavailable(
                "set tools.workspace to the directory the internal tools may read".into(),
            )),
            Some(root) => Workspace::open(root).map(|workspace| {
                let sandbox = Sandbox::new(
                    workspace.root(),
                    config.sandbox,
                    Duration::from_secs_f64(config.timeout_secs),
                    config.max_output_bytes,
                );
                (workspace, sandbox)
            }),
        };
        InternalTools {
            workspace,
            limits: Limits::from(config),
        }
    }

    /// Why the tools are off, if they are.
    pub fn unavailable(&self) -> Option<&ToolError> {
        self.workspace.as_ref().err()
    }

    async fn run(&self, name: &str, args: &Value) -> Result<String, ToolError> {
        let (workspace, sandbox) = self.workspace.as_ref().map_err(Clone::clone)?;
        let limits = &self.limits;
        let args = Args { tool: name, args };
        match name {
            "read_file" => fs_tools::read_file(
                workspace,
                limits,
                args.required("path")?,
                args.number("start_line")?.map(|n| n as usize),
                args.number("end_line")?.map(|n| n as usize),
            ),
            "list_dir" => fs_tools::list_dir(workspace, limits, args.path()?),
            "glob" => fs_tools::glob(workspace, limits, args.required("pattern")?, args.path()?),
            "grep" => fs_tools::grep(
                workspace,
                limits,
                &GrepQuery {
                    pattern: args.required("pattern")?,
                    path: args.path()?,
                    include: args.optional("glob")?,
                    case_insensitive: args.flag("case_insensitive")?,
                },
            ),
            "git_status" => git::run(workspace, sandbox, GitQuery::Status).await,
            "git_diff" => {
                let query = GitQuery::Diff {
                    path: args.optional("path")?,
                    staged: args.flag("staged")?,
                };
                git::run(workspace, sandbox, query).await
            }
            "git_log" => {
                let query = GitQuery::Log {
                    max_count: args.number("max_count")?.unwrap_or(20),
                    path: args.optional("path")?,
                };
                git::run(workspace, sandbox, query).await
            }
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }
}

/// A call's arguments, read with errors that name the tool and the argument.
struct Args<'a> {
    tool: &'a str,
    args: &'a Value,
}

impl<'a> Args<'a> {
    fn invalid(&self, message: String) -> ToolError {
        ToolError::InvalidArguments {
            tool: self.tool.to_owned(),
            message,
        }
    }

    fn optional(&self, key: &str) -> Result<Option<&'a str>, ToolError> {
        match self.args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.invalid(format!("`{key}` must be a string"))),
        }
    }

    fn required(&self, key: &str) -> Result<&'a str, ToolError> {
        self.optional(key)?
            .ok_or_else(|| self.invalid(format!("`{key}` is required")))
    }

    /// `path`, the workspace root when not given.
    fn path(&self) -> Result<&'a str, ToolError> {
        Ok(self.optional("path")?.unwrap_or("."))
    }

    fn number(&self, key: &str) -> Result<Option<u64>, ToolError> {
        match self.args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.invalid(format!("`{key}` must be a whole number"))),
        }
    }

    fn flag(&self, key: &str) -> Result<bool, ToolError> {
        match self.args.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.invalid(format!("`{key}` must be true or false"))),
        }
    }
}

fn spec(name: &str, description: &str, properties: Value, required: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: json!({"type": "object", "properties": properties, "required": required}),
    }
}

/// The internal tools' specs.
pub fn internal_specs() -> Vec<ToolSpec> {
    let path = json!({"type": "string", "description": "Path relative to the workspace root (default: the root)"});
    vec![
        spec(
            "read_file",
            "Read a text file of the workspace, with line numbers; optionally only lines start_line..=end_line.",
            json!({"path": path, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}),
            &["path"],
        ),
        spec(
            "list_dir",
            "List a directory of the workspace (dir/ and link@ marked).",
            json!({"path": path}),
            &[],
        ),
        spec(
            "glob",
            "Find workspace files whose path matches a glob (*, ?, **, [abc]).",
            json!({"pattern": {"type": "string"}, "path": path}),
            &["pattern"],
        ),
        spec(
            "grep",
            "Search workspace files for lines matching a regular expression; prints path:line: text.",
            json!({"pattern": {"type": "string"}, "path": path, "glob": {"type": "string", "description": "Only files matching this glob"}, "case_insensitive": {"type": "boolean"}}),
            &["pattern"],
        ),
        spec(
            "git_status",
            "Show `git status --short --branch` of the workspace.",
            json!({}),
            &[],
        ),
        spec(
            "git_diff",
            "Show the workspace's uncommitted changes (`staged` for the index), optionally for one path.",
            json!({"path": path, "staged": {"type": "boolean"}}),
            &[],
        ),
        spec(
            "git_log",
            "Show recent commits (one line each), optionally touching one path.",
            json!({"max_count": {"type": "integer"}, "path": path}),
            &[],
        ),
    ]
}

impl ToolProvider for InternalTools {
    fn name(&self) -> &str {
        "internal"
    }

    fn specs(&self) -> Vec<ToolSpec> {
        if self.workspace.is_err() {
            return Vec::new();
        }
        internal_specs()
    }

    fn call<'a>(&'a self, name: &'a str, args: Value) -> ToolFuture<'a> {
        Box::pin(async move { self.run(name, &args).await.map(ToolOutput::Text) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_a_workspace_the_tools_are_off_and_say_how_to_turn_them_on() {
        let tools = InternalTools::from_config(&ToolsConfig::default());
        assert!(tools.specs().is_empty());
        let error = tools
            .call("read_file", json!({"path": "x"}))
            .await
            .expect_err("off");
        assert!(error.to_string().contains("tools.workspace"), "{error}");
    }

    #[tokio::test]
    async fn calls_check_their_arguments_and_reach_the_tool() {
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("a.txt"), "alpha\n").expect("w");
        let config = ToolsConfig {
            workspace: Some(root.path().display().to_string()),
            ..ToolsConfig::default()
        };
        let tools = InternalTools::from_config(&config);
        assert_eq!(tools.specs().len(), INTERNAL_TOOLS.len());
        let read = tools
            .call("read_file", json!({"path": "a.txt"}))
            .await
            .expect("reads");
        assert_eq!(read.into_text(), "1\talpha\n");
        let missing = tools.call("grep", json!({})).await.expect_err("no pattern");
        assert!(
            missing.to_string().contains("`pattern` is required"),
            "{missing}"
        );
        let typed = tools
            .call("read_file", json!({"path": 3}))
            .await
            .expect_err("bad type");
        assert!(typed.to_string().contains("must be a string"), "{typed}");
        let unknown = tools.call("rm", json!({})).await.expect_err("unknown");
        assert_eq!(unknown, ToolError::UnknownTool("rm".into()));
    }
}
