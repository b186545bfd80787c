//! The `tools:` section: the workspace root the internal tools are confined to, the
//! caps on what they read, the sandbox of the tools that run a subprocess, and the tool
//! loop for local answers (`tools.loop`). docs/tools.md says what each key does.

use serde::{Deserialize, Serialize};

/// Where a sandboxed subprocess may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No writes anywhere (the default).
    #[default]
    ReadOnly,
    /// Writes inside the workspace only.
    WorkspaceWrite,
}

/// The `tools:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// The directory the internal tools work in; without it they are off.
    pub workspace: Option<String>,
    pub sandbox: SandboxMode,
    /// Seconds a tool's subprocess may run before its process group is killed, and a
    /// file tool may look before it stops and says so.
    pub timeout_secs: f64,
    /// Bytes `read_file` and `grep` read of one file.
    pub max_read_bytes: usize,
    /// Lines `read_file` shows at once.
    pub max_lines: usize,
    /// Entries `list_dir` and `glob` show.
    pub max_entries: usize,
    /// Matching lines `grep` shows.
    pub max_matches: usize,
    /// Files `glob` and `grep` look at in one call.
    pub max_files_scanned: usize,
    /// Bytes kept of a subprocess's stdout and of its stderr.
    pub max_output_bytes: usize,
    /// The tool loop for local answers.
    #[serde(rename = "loop")]
    pub tool_loop: ToolLoopConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            workspace: None,
            sandbox: SandboxMode::ReadOnly,
            timeout_secs: 10.0,
            max_read_bytes: 256 * 1024,
            max_lines: 2000,
            max_entries: 500,
            max_matches: 200,
            max_files_scanned: 20_000,
            max_output_bytes: 64 * 1024,
            tool_loop: ToolLoopConfig::default(),
        }
    }
}

/// `tools.loop`: Glider runs a local model's tool calls itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolLoopConfig {
    pub enabled: bool,
    /// Only requests for these models (after aliasing); empty: every local answer.
    pub models: Vec<String>,
    /// Model turns that may call tools before Glider ends the loop with its own reply.
    pub max_turns: u32,
    /// Seconds the whole loop may take.
    pub max_secs: f64,
    /// The tools the model is given; empty: every internal tool.
    pub tools: Vec<String>,
    /// `*` patterns on prefixed MCP tool names (`files__read_*`) the loop may call;
    /// empty (the default): no MCP tool, since an MCP tool may write or reach out.
    pub mcp: Vec<String>,
    /// Tool calls run from one model reply; the rest are not run, and the model is told.
    pub max_calls_per_reply: usize,
    /// Tool calls run in one request, every turn together; past it the loop ends with
    /// Glider's own reply.
    pub max_calls_per_request: usize,
    /// Bytes of one call's arguments (as JSON); a call with more is not run, the model
    /// is told, and the arguments are not sent back to it.
    pub max_argument_bytes: usize,
    /// Bytes of one call's result sent to the model; a longer one is cut and says so.
    pub max_result_bytes: usize,
}

impl Default for ToolLoopConfig {
    fn default() -> Self {
        ToolLoopConfig {
            enabled: false,
            models: Vec::new(),
            max_turns: 8,
            max_secs: 120.0,
            tools: Vec::new(),
            mcp: Vec::new(),
            max_calls_per_reply: 16,
            max_calls_per_request: 64,
            max_argument_bytes: 64 * 1024,
            max_result_bytes: 64 * 1024,
        }
    }
}

impl ToolLoopConfig {
    /// Whether the loop offers the tool `name` (`from_mcp`: one of an MCP server's):
    /// it must be in `tools` when that is set, and an MCP tool must match `mcp` too.
    pub fn offers(&self, name: &str, from_mcp: bool) -> bool {
        let listed = self.tools.is_empty() || self.tools.iter().any(|t| t == name);
        listed && (!from_mcp || self.mcp.iter().any(|p| crate::glob_match(p, name)))
    }
}

impl ToolsConfig {
    /// What is wrong with the section, if anything.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.tool_loop.enabled && self.workspace.is_none() {
            problems.push(
                "tools.loop.enabled needs tools.workspace (the directory the tools work in)"
                    .to_owned(),
            );
        }
        if self.tool_loop.max_turns == 0 {
            problems.push("tools.loop.max_turns must be at least 1".to_owned());
        }
        let caps = [
            ("max_calls_per_reply", self.tool_loop.max_calls_per_reply),
            (
                "max_calls_per_request",
                self.tool_loop.max_calls_per_request,
            ),
            ("max_argument_bytes", self.tool_loop.max_argument_bytes),
            ("max_result_bytes", self.tool_loop.max_result_bytes),
        ];
        for (key, value) in caps {
            if value == 0 {
                problems.push(format!("tools.loop.{key} must be at least 1"));
            }
        }
        let positive = |secs: f64| secs.is_finite() && secs > 0.0;
        if !positive(self.timeout_secs) || !positive(self.tool_loop.max_secs) {
            problems.push("tools.timeout_secs and tools.loop.max_secs must be above 0".to_owned());
        }
        problems
    }
}
