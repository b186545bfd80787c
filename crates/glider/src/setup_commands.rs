//! `glider setup claude [--remove]`: Claude Code refuses a message that starts with a
//! slash command it does not know, so Glider's flags (`/local`, `/cloud`, `/via`, and
//! the delegation flags) reach Glider only through user-level custom command files,
//! `~/.claude/commands/<flag>.md` holding `/<flag> $ARGUMENTS`. Each file Glider writes
//! carries a marker line in its front matter; a file without it is the user's own and
//! is never overwritten nor removed.
//!
//! `glider run claude` gives that one Claude Code the same commands without writing to
//! `~/.claude`: the files go under Glider's home (`<GLIDER_HOME>/claude-run/.claude/commands`)
//! and the child gets `--add-dir=<GLIDER_HOME>/claude-run`, whose `.claude/commands`
//! Claude Code reads like a project's. Its login, settings and own commands stay as they
//! are.

use std::path::{Path, PathBuf};

use anyhow::Context;
use glider_engine::router::explicit::{DELEGATION_FLAGS, ROUTING_FLAGS};

/// The front-matter line that marks a command file as Glider's.
pub const MARK: &str = "glider-managed: true  # written by `glider setup claude`; `glider setup claude --remove` deletes it";

/// Where Claude Code reads user commands: `$CLAUDE_CONFIG_DIR/commands`, else
/// `~/.claude/commands`.
pub fn commands_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("commands"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("HOME is not set: cannot find ~/.claude")?;
    Ok(PathBuf::from(home).join(".claude").join("commands"))
}

/// The command file for `flag` (`/local` → `local.md`) and its text.
fn command_file(flag: &str) -> (String, String) {
    let name = flag.trim_start_matches('/');
    let description = match flag {
        "/local" => "Glider: answer this message with the local model".to_owned(),
        "/cloud" => "Glider: answer this message with the cloud model".to_owned(),
        "/via" => "Glider: answer this message with the named backend".to_owned(),
        _ => format!("Glider: hand this task to {name}"),
    };
    let hint = if flag == "/via" {
        "<backend> <message>"
    } else {
        "<message>"
    };
    let text = format!(
        "---\n{MARK}\ndescription: \"{description}\"\nargument-hint: \"{hint}\"\n---\n{flag} $ARGUMENTS\n"
    );
    (format!("{name}.md"), text)
}

/// Whether `path` is a command file Glider wrote.
fn is_ours(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.lines().any(|line| line == MARK))
}

/// Install (or with `remove`, delete) Glider's command files in `dir`; one line per
/// file saying what was done.
pub fn setup_claude(dir: &Path, remove: bool) -> anyhow::Result<Vec<String>> {
    let mut report = Vec::new();
    if !remove {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for flag in ROUTING_FLAGS.iter().chain(DELEGATION_FLAGS) {
        let (name, text) = command_file(flag);
        let path = dir.join(&name);
        let exists = path.exists();
        let line = match (remove, exists, exists && is_ours(&path)) {
            (_, true, false) => format!(
                "kept {}: it is your own command file (no `glider-managed` line), so {flag} there runs it, not Glider",
                path.display()
            ),
            (true, true, true) => {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                format!("removed {}", path.display())
            }
            (true, false, _) => continue,
            (false, _, _) => {
                write_command(&path, &text, 0o644)?;
                format!("{flag}: {}", path.display())
            }
        };
        report.push(line);
    }
    Ok(report)
}

/// Write one command file whole: a Claude Code starting meanwhile (another `glider run
/// claude`) reads the old file or the new one, never half of one. `mode`: 0644 in the
/// user's own `~/.claude`, private under GLIDER_HOME (which `glider doctor` requires to
/// have no group or other access).
fn write_command(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    glider_sys::atomicfile::write(path, text.as_bytes(), mode)
        .with_context(|| format!("writing {}", path.display()))
}

/// The directory `glider run claude` passes as `--add-dir` (under `glider_home`), with
/// Glider's command files written in its `.claude/commands`. A flag whose name is taken
/// in `user_commands` (the user's own file, or Glider's from `glider setup claude`) gets
/// no file here: the user-level one already decides what that command does, and Claude
/// Code would otherwise list the name twice.
pub fn run_overlay(glider_home: &Path, user_commands: Option<&Path>) -> anyhow::Result<PathBuf> {
    let root = glider_home.join("claude-run");
    let dir = root.join(".claude").join("commands");
    for private in [&root, &root.join(".claude"), &dir] {
        glider_sys::fileacl::private_dir(private)
            .with_context(|| format!("creating {}", private.display()))?;
    }
    for flag in ROUTING_FLAGS.iter().chain(DELEGATION_FLAGS) {
        let (name, text) = command_file(flag);
        let path = dir.join(&name);
        if user_commands.is_some_and(|user| user.join(&name).exists()) {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", path.display()));
                }
                _ => {}
            }
        } else {
            write_command(&path, &text, glider_sys::fileacl::PRIVATE_FILE)?;
        }
    }
    Ok(root)
}

/// Whether `program` (as `glider run` was given it) is Claude Code.
pub fn is_claude(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .is_some_and(|name| name == "claude")
}
