//! Glider's internal tools as one [`ToolProvider`]: `read_file`, `list_dir`, `glob`,
//! `grep` (in process) and `git_status`, `git_diff`, `git_log` (sandboxed), all inside
//! `tools.workspace`. Without a workspace the provider offers nothing and every call
//! says how to turn the tools on.
//!
//! The file tools block on the file system (a tree of 200k files, a slow disk), so a
//! call never runs them on an async worker: it takes one of [`FILE_TOOL_SLOTS`] slots
//! (a flood of calls waits for one rather than start a thread each) and runs on
//! tokio's blocking pool, where the tool stops looking at `tools.timeout_secs` and
//! says so. A call that has no answer [`FILE_TOOL_GRACE`] after that (a slot never
//! freed, a read stuck in the kernel) answers an error instead of waiting on.

use std::sync::Arc;
use std::time::Duration;

use glider_config::ToolsConfig;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::fs_tools::{self, GrepQuery};
use crate::git::{self, GitQuery};
use crate::{Sandbox, ToolError, ToolFuture, ToolOutput, ToolProvider, ToolSpec, Workspace};

/// File tool calls that may run at once, each on a thread of tokio's blocking pool;
/// more wait for a slot (within their deadline).
pub const FILE_TOOL_SLOTS: usize = 4;

/// How long past `tools.timeout_secs` a file tool call waits for its answer before it
/// answers an error: the tool itself stops looking at the timeout, so this covers
/// the wait for a slot and a read the kernel does not return from.
pub const FILE_TOOL_GRACE: Duration = Duration::from_secs(2);

/// Caps on what one call reads and shows, and how long it may look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_read_bytes: usize,
    pub max_lines: usize,
    pub max_entries: usize,
    pub max_matches: usize,
    pub max_files_scanned: usize,
    /// `tools.timeout_secs`: a walk or a search stops there, and says so.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&ToolsConfig::default())
    }
}

/// `tools.timeout_secs` as a duration (an unusable value, which the config's checks
/// refuse anyway, as the default's).
pub(crate) fn timeout_of(config: &ToolsConfig) -> Duration {
    Duration::try_from_secs_f64(config.timeout_secs)
        .ok()
        .filter(|d| !d.is_zero())
        .unwrap_or_else(|| Duration::from_secs_f64(ToolsConfig::default().timeout_secs))
}

impl From<&ToolsConfig> for Limits {
    fn from(config: &ToolsConfig) -> Self {
        Limits {
            max_read_bytes: config.max_read_bytes,
            max_lines: config.max_lines,
            max_entries: config.max_entries,
            max_matches: config.max_matches,
            max_files_scanned: config.max_files_scanned,
            timeout: timeout_of(config),
        }
    }
}

/// The internal tools over one workspace.
#[derive(Debug)]
pub struct InternalTools {
    /// `Err`: why the tools are off (no `tools.workspace`, or it cannot be opened).
    workspace: Result<(Workspace, Sandbox), ToolError>,
    limits: Limits,
    /// [`FILE_TOOL_SLOTS`] permits, one held by each file tool running.
    file_slots: Arc<Semaphore>,
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

/// A file tool call with its arguments, owned, to move onto a blocking thread.
enum FileCall {
    ReadFile {
        path: String,
        start: Option<usize>,
        end: Option<usize>,
    },
    ListDir {
        path: String,
    },
    Glob {
        pattern: String,
        path: String,
    },
    Grep {
        pattern: String,
        path: String,
        include: Option<String>,
        case_insensitive: bool,
    },
}

impl FileCall {
    /// The call `name` is, when it is a file tool's.
    fn parse(name: &str, args: &Args<'_>) -> Result<Option<FileCall>, ToolError> {
        let owned = |s: &str| s.to_owned();
        Ok(Some(match name {
            "read_file" => FileCall::ReadFile {
                path: owned(args.required("path")?),
                start: args.number("start_line")?.map(|n| n as usize),
                end: args.number("end_line")?.map(|n| n as usize),
            },
            "list_dir" => FileCall::ListDir {
                path: owned(args.path()?),
            },
            "glob" => FileCall::Glob {
                pattern: owned(args.required("pattern")?),
                path: owned(args.path()?),
            },
            "grep" => FileCall::Grep {
                pattern: owned(args.required("pattern")?),
                path: owned(args.path()?),
                include: args.optional("glob")?.map(owned),
                case_insensitive: args.flag("case_insensitive")?,
            },
            _ => return Ok(None),
        }))
    }

    /// Run it (blocking).
    fn run(&self, workspace: &Workspace, limits: &Limits) -> Result<String, ToolError> {
        match self {
            FileCall::ReadFile { path, start, end } => {
                fs_tools::read_file(workspace, limits, path, *start, *end)
            }
            FileCall::ListDir { path } => fs_tools::list_dir(workspace, limits, path),
            FileCall::Glob { pattern, path } => fs_tools::glob(workspace, limits, pattern, path),
            FileCall::Grep {
                pattern,
                path,
                include,
                case_insensitive,
            } => fs_tools::grep(
                workspace,
                limits,
                &GrepQuery {
                    pattern,
                    path,
                    include: include.as_deref(),
                    case_insensitive: *case_insensitive,
                },
            ),
        }
    }
}

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
                    timeout_of(config),
                    config.max_output_bytes,
                );
                (workspace, sandbox)
            }),
        };
        InternalTools {
            workspace,
            limits: Limits::from(config),
            file_slots: Arc::new(Semaphore::new(FILE_TOOL_SLOTS)),
        }
    }

    /// Why the tools are off, if they are.
    pub fn unavailable(&self) -> Option<&ToolError> {
        self.workspace.as_ref().err()
    }

    /// Run a file tool off the async workers: in a slot, on the blocking pool, with an
    /// answer within `tools.timeout_secs` and [`FILE_TOOL_GRACE`].
    async fn off_the_runtime(
        &self,
        name: &str,
        workspace: &Workspace,
        call: FileCall,
    ) -> Result<String, ToolError> {
        let wait = self.limits.timeout + FILE_TOOL_GRACE;
        let work = async {
            let slot = Arc::clone(&self.file_slots)
                .acquire_owned()
                .await
                .map_err(|_| ToolError::Unavailable("the file tools are shutting down".into()))?;
            let workspace = workspace.clone();
            let limits = self.limits.clone();
            // The slot goes with the thread: one still running after its caller gave
            // up keeps it until it stops, so threads stay bounded.
            tokio::task::spawn_blocking(move || {
                let _slot = slot;
                call.run(&workspace, &limits)
            })
            .await
            .map_err(|e| ToolError::Failed(format!("`{name}` did not finish: {e}")))?
        };
        tokio::time::timeout(wait, work).await.unwrap_or_else(|_| {
            Err(ToolError::Failed(format!(
                "`{name}` stopped after {} s without an answer (tools.timeout_secs is {} s, \
                 and a call waits {} s more for a slot or a stuck read); narrow the path or \
                 pattern",
                wait.as_secs_f64(),
                self.limits.timeout.as_secs_f64(),
                FILE_TOOL_GRACE.as_secs_f64(),
            )))
        })
    }

    async fn run(&self, name: &str, args: &Value) -> Result<String, ToolError> {
        let (workspace, sandbox) = self.workspace.as_ref().map_err(Clone::clone)?;
        let args = Args { tool: name, args };
        if let Some(call) = FileCall::parse(name, &args)? {
            return self.off_the_runtime(name, workspace, call).await;
        }
        match name {
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

    fn tools_over(root: &std::path::Path, timeout_secs: f64) -> InternalTools {
        InternalTools::from_config(&ToolsConfig {
            workspace: Some(root.display().to_string()),
            timeout_secs,
            ..ToolsConfig::default()
        })
    }

    /// On a runtime of one thread, a timer keeps firing while a file tool works: the
    /// tool runs on a thread of its own, not on the runtime's only worker.
    #[test]
    fn a_file_tool_never_blocks_the_runtime_it_is_called_from() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        let root = tempfile::tempdir().expect("root");
        let text = "some text that a regex has to look through\n".repeat(200);
        for dir in 0..20 {
            let dir = root.path().join(format!("d{dir}"));
            std::fs::create_dir(&dir).expect("dir");
            for file in 0..25 {
                std::fs::write(dir.join(format!("f{file}.txt")), &text).expect("w");
            }
        }
        let tools = tools_over(root.path(), 10.0);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let ticks = Arc::new(AtomicUsize::new(0));
            let counter = Arc::clone(&ticks);
            let ticker = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
            tokio::task::yield_now().await;
            let before = ticks.load(Ordering::Relaxed);
            let started = std::time::Instant::now();
            let out = tools
                .call("grep", json!({"pattern": "(t|x)+ (a|q)+ r[e-g]+x$"}))
                .await
                .expect("greps")
                .into_text();
            let took = started.elapsed();
            let during = ticks.load(Ordering::Relaxed) - before;
            ticker.abort();
            assert!(out.starts_with("no match"), "{out}");
            assert!(
                during > 0,
                "no timer fired in the {took:?} grep ran: it blocked the runtime"
            );
        });
    }

    /// With every slot taken, a call waits for one only until its deadline, then
    /// answers an error; a freed slot serves the next call.
    #[tokio::test]
    async fn a_flood_of_file_tool_calls_is_bounded_and_answers_by_its_deadline() {
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("a.txt"), "alpha\n").expect("w");
        let tools = tools_over(root.path(), 0.2);
        let held = Arc::clone(&tools.file_slots)
            .acquire_many_owned(FILE_TOOL_SLOTS as u32)
            .await
            .expect("slots");
        let started = std::time::Instant::now();
        let late = tools
            .call("read_file", json!({"path": "a.txt"}))
            .await
            .expect_err("no slot");
        assert!(late.to_string().contains("stopped after 2.2 s"), "{late}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        drop(held);
        let read = tools
            .call("read_file", json!({"path": "a.txt"}))
            .await
            .expect("reads");
        assert_eq!(read.into_text(), "1\talpha\n");
    }
}
