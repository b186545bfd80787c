//! What a CLI's tool call does, read from its arguments' shape (as `EditViews` does for
//! edits): a file read, file edits (Claude Code `Edit`/`MultiEdit`/`Write`, Codex
//! `apply_patch`), a shell command (`Bash`, Codex `exec_command` and `shell`); and what
//! its result says: the exit status when it shows one, and whether it failed.

use glider_ngl::{EditView, EditViews, Part};
use serde_json::Value;

/// One tool call, interpreted.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Read {
        path: String,
    },
    /// The files the call writes, each with how.
    Edit {
        files: Vec<(String, FileOp)>,
    },
    Command {
        command: String,
    },
    /// Anything else (searches, web fetches, MCP tools): seen, not a file or command.
    Other,
}

/// How an edit changes a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOp {
    Read,
    /// Text replaced or patched.
    Edited,
    /// Written whole (created when nothing was known of it before).
    Written,
    /// Added by a patch.
    Created,
    /// Deleted by a patch.
    Deleted,
}

const PATH_KEYS: &[&str] = &["file_path", "path", "filename", "target_file"];
/// Keys a read call may carry besides its path.
const READ_KEYS: &[&str] = &["offset", "limit", "pages", "start_line", "end_line"];

/// Interpret a call from its arguments.
pub fn action(name: &str, arguments: &Value) -> Action {
    let call = Part::ToolCall {
        id: String::new(),
        name: name.to_owned(),
        arguments: arguments.clone(),
    };
    let edits = EditViews::from_parts(std::slice::from_ref(&call));
    if !edits.edits.is_empty() {
        let mut files: Vec<(String, FileOp)> = Vec::new();
        for (_, view) in &edits.edits {
            for path in view.paths() {
                if files.iter().any(|(p, _)| p == path) {
                    continue;
                }
                let op = match view {
                    EditView::Write { .. } => FileOp::Written,
                    EditView::Replace { .. } => FileOp::Edited,
                    EditView::Patch { patch, .. } => patch_op(patch, path),
                };
                files.push((path.to_owned(), op));
            }
        }
        return Action::Edit { files };
    }
    if let Some(command) = command_of(arguments) {
        return Action::Command { command };
    }
    if let Some(object) = arguments.as_object()
        && let Some((_, path)) = object
            .iter()
            .find(|(k, v)| PATH_KEYS.contains(&k.as_str()) && v.is_string())
        && object
            .keys()
            .all(|k| PATH_KEYS.contains(&k.as_str()) || READ_KEYS.contains(&k.as_str()))
        && let Some(path) = path.as_str()
    {
        return Action::Read {
            path: path.to_owned(),
        };
    }
    Action::Other
}

fn patch_op(patch: &str, path: &str) -> FileOp {
    if patch.contains(&format!("*** Add File: {path}")) {
        FileOp::Created
    } else if patch.contains(&format!("*** Delete File: {path}")) {
        FileOp::Deleted
    } else {
        FileOp::Edited
    }
}

/// The shell command of a call: `command` or `cmd` as a string, or as an argv whose
/// `bash -lc SCRIPT` form is shown as the script.
fn command_of(arguments: &Value) -> Option<String> {
    let value = arguments.get("command").or_else(|| arguments.get("cmd"))?;
    match value {
        Value::String(command) => Some(command.clone()),
        Value::Array(argv) => {
            let words: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            match words.as_slice() {
                [shell, flag, script]
                    if shell.ends_with("sh") && (*flag == "-lc" || *flag == "-c") =>
                {
                    Some((*script).to_owned())
                }
                _ if !words.is_empty() => Some(words.join(" ")),
                _ => None,
            }
        }
        _ => None,
    }
}

/// What a result says about its call.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The exit status the result shows (`Exit code 1`, `Process exited with code 0`,
    /// `"exit_code": 2`).
    pub exit_code: Option<i32>,
    /// It failed: marked as an error, a non-zero exit, or a test failure in its output.
    pub failed: bool,
    /// Why, in one line, when it failed.
    pub reason: Option<String>,
}

/// Markers of a failing test run or build in a command's output.
const FAILURE_MARKERS: &[&str] = &[
    "test result: FAILED",
    "FAILED",
    "Traceback (most recent call last)",
    "panicked at",
    "error[E",
    "AssertionError",
    "npm ERR!",
];

/// Read a result.
pub fn outcome(is_error: bool, text: &str) -> Outcome {
    let exit_code = exit_code(text);
    let marker = FAILURE_MARKERS.iter().find(|m| text.contains(*m));
    let failed = is_error || exit_code.is_some_and(|c| c != 0) || marker.is_some();
    let reason = failed.then(|| {
        let line = marker
            .and_then(|m| text.lines().find(|l| l.contains(m)))
            .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
            .unwrap_or("failed")
            .trim();
        crate::event::prefix(line, 200).to_owned()
    });
    Outcome {
        exit_code,
        failed,
        reason,
    }
}

fn exit_code(text: &str) -> Option<i32> {
    let lower = text.to_ascii_lowercase();
    for marker in [
        "exit code",
        "exited with code",
        "\"exit_code\":",
        "exit status",
    ] {
        if let Some(at) = lower.find(marker) {
            let rest = lower[at + marker.len()..].trim_start_matches([' ', ':']);
            let digits: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            if let Ok(code) = digits.parse() {
                return Some(code);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn claude_code_tools_are_read_by_shape() {
        assert_eq!(
            action(
                "Read",
                &json!({"file_path": "/p/src/a.rs", "offset": 1, "limit": 20})
            ),
            Action::Read {
                path: "/p/src/a.rs".into()
            }
        );
        assert_eq!(
            action(
                "Edit",
                &json!({"file_path": "/p/a.rs", "old_string": "x", "new_string": "y"})
            ),
            Action::Edit {
                files: vec![("/p/a.rs".into(), FileOp::Edited)]
            }
        );
        assert_eq!(
            action(
                "MultiEdit",
                &json!({"file_path": "/p/a.rs", "edits": [
                {"old_string": "a", "new_string": "b"}, {"old_string": "c", "new_string": "d"}]})
            ),
            Action::Edit {
                files: vec![("/p/a.rs".into(), FileOp::Edited)]
            }
        );
        assert_eq!(
            action(
                "Write",
                &json!({"file_path": "/p/new.rs", "content": "fn main() {}"})
            ),
            Action::Edit {
                files: vec![("/p/new.rs".into(), FileOp::Written)]
            }
        );
        assert_eq!(
            action(
                "Bash",
                &json!({"command": "cargo test", "description": "run tests"})
            ),
            Action::Command {
                command: "cargo test".into()
            }
        );
        assert_eq!(
            action("Grep", &json!({"pattern": "fn", "path": "/p"})),
            Action::Other
        );
    }

    #[test]
    fn codex_tools_are_read_by_shape_and_patch_headers_give_the_paths() {
        assert_eq!(
            action(
                "exec_command",
                &json!({"cmd": "ls -la", "yield_time_ms": 1000})
            ),
            Action::Command {
                command: "ls -la".into()
            }
        );
        assert_eq!(
            action(
                "shell",
                &json!({"command": ["bash", "-lc", "cat README.md"]})
            ),
            Action::Command {
                command: "cat README.md".into()
            }
        );
        let patch = "*** Begin Patch\n*** Add File: src/new.py\n+print(1)\n*** Update File: src/old.py\n@@\n-a\n+b\n*** Delete File: src/gone.py\n*** End Patch\n";
        assert_eq!(
            action("apply_patch", &json!({"input": patch})),
            Action::Edit {
                files: vec![
                    ("src/new.py".into(), FileOp::Created),
                    ("src/old.py".into(), FileOp::Edited),
                    ("src/gone.py".into(), FileOp::Deleted),
                ]
            }
        );
        // A custom (freeform) tool's argument is the patch itself.
        assert_eq!(
            action("apply_patch", &Value::String(patch.into())),
            action("apply_patch", &json!({"input": patch}))
        );
    }

    #[test]
    fn results_show_exit_status_and_failures() {
        assert_eq!(
            outcome(true, "Error: Exit code 2\nls: cannot access 'x'"),
            Outcome {
                exit_code: Some(2),
                failed: true,
                reason: Some("Error: Exit code 2".into())
            }
        );
        let codex =
            "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\nok\n";
        assert_eq!(
            outcome(false, codex),
            Outcome {
                exit_code: Some(0),
                failed: false,
                reason: None
            }
        );
        let shell = r#"{"output":"x","metadata":{"exit_code":1,"duration_seconds":0.1}}"#;
        assert_eq!(outcome(false, shell).exit_code, Some(1));
        assert!(outcome(false, shell).failed);
        let tests = "running 3 tests\ntest a ... FAILED\n\ntest result: FAILED. 2 passed; 1 failed";
        let failing = outcome(false, tests);
        assert!(failing.failed);
        assert_eq!(
            failing.reason.as_deref(),
            Some("test result: FAILED. 2 passed; 1 failed")
        );
        assert!(!outcome(false, "all good\n").failed);
    }
}
