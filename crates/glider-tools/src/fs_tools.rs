//! The read-only file tools — `read_file`, `list_dir`, `glob`, `grep` — run in Glider's
//! own process (no subprocess), each confined to the [`Workspace`] and capped by
//! [`Limits`]: a tool says where it stopped rather than read without bound.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use regex::{Regex, RegexBuilder};

use crate::internal::Limits;
use crate::{ToolError, Workspace};

/// Bytes looked at for a NUL to tell a binary file.
const BINARY_SNIFF: usize = 8 * 1024;
/// Longest line `grep` prints (a minified file would flood the model).
const MAX_MATCH_LINE_CHARS: usize = 300;

/// Up to `cap` bytes of `path`, and whether the file was longer.
fn read_capped(path: &Path, cap: usize) -> Result<(Vec<u8>, bool), ToolError> {
    let file = std::fs::File::open(path)
        .map_err(|e| ToolError::Failed(format!("cannot read {}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::Failed(format!("cannot read {}: {e}", path.display())))?;
    let longer = bytes.len() > cap;
    bytes.truncate(cap);
    Ok((bytes, longer))
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0)
}

/// `read_file`: lines `start..=end` (1-based; the whole file by default) of a text
/// file, each prefixed with its number, at most `limits.max_read_bytes` read.
pub fn read_file(
    workspace: &Workspace,
    limits: &Limits,
    path: &str,
    start: Option<usize>,
    end: Option<usize>,
) -> Result<String, ToolError> {
    let resolved = workspace.resolve(path)?;
    if !resolved.is_file() {
        return Err(ToolError::Failed(format!("`{path}` is not a file")));
    }
    let (bytes, longer) = read_capped(&resolved, limits.max_read_bytes)?;
    if is_binary(&bytes) {
        return Err(ToolError::Failed(format!(
            "`{path}` is a binary file; read_file shows text only"
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    let start = start.unwrap_or(1).max(1);
    let end = end.unwrap_or(usize::MAX);
    if end < start {
        return Err(ToolError::InvalidArguments {
            tool: "read_file".into(),
            message: format!("end_line {end} is before start_line {start}"),
        });
    }
    let mut out = String::new();
    let mut shown = 0;
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        if number < start || number > end {
            continue;
        }
        if shown == limits.max_lines {
            let _ = write!(
                out,
                "[glider: stopped at {} lines; ask for a later start_line]",
                limits.max_lines
            );
            return Ok(out);
        }
        let _ = writeln!(out, "{number}\t{line}");
        shown += 1;
    }
    if longer {
        let _ = write!(
            out,
            "[glider: the file is longer than the {} bytes read_file reads]",
            limits.max_read_bytes
        );
    }
    Ok(out)
}

/// `list_dir`: the entries of a directory, `name/` for directories and `name@` for
/// symlinks (never followed), at most `limits.max_entries`.
pub fn list_dir(workspace: &Workspace, limits: &Limits, path: &str) -> Result<String, ToolError> {
    let resolved = workspace.resolve(path)?;
    let entries = std::fs::read_dir(&resolved)
        .map_err(|e| ToolError::Failed(format!("cannot list `{path}`: {e}")))?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(kind) if kind.is_symlink() => format!("{name}@"),
                Ok(kind) if kind.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    names.sort();
    let total = names.len();
    names.truncate(limits.max_entries);
    let mut out = names.join("\n");
    if total > limits.max_entries {
        let _ = write!(
            out,
            "\n[glider: {} more entries not shown]",
            total - limits.max_entries
        );
    }
    Ok(out)
}

/// A glob pattern (`*`, `?`, `**`, `[abc]`) as a regex over `/`-separated relative paths.
pub fn glob_regex(pattern: &str) -> Result<Regex, ToolError> {
    let mut re = String::from("^");
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                if chars.peek() == Some(&'/') {
                    chars.next();
                    re.push_str("(?:.*/)?");
                } else {
                    re.push_str(".*");
                }
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            '[' => {
                re.push('[');
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                    if c == '\\' {
                        re.push_str("\\\\");
                    } else {
                        re.push(c);
                    }
                }
                re.push(']');
            }
            other => re.push_str(&regex::escape(&other.to_string())),
        }
    }
    re.push('$');
    Regex::new(&re).map_err(|e| ToolError::InvalidArguments {
        tool: "glob".into(),
        message: format!("bad glob pattern `{pattern}`: {e}"),
    })
}

/// The files under `path` whose path relative to it matches `pattern`, capped.
fn matching_files(
    workspace: &Workspace,
    limits: &Limits,
    path: &str,
    pattern: Option<&Regex>,
) -> Result<(Vec<String>, bool), ToolError> {
    let base = workspace.resolve(path)?;
    let (files, stopped) = workspace.files_under(&base, limits.max_files_scanned);
    let names = files
        .iter()
        .filter(|file| {
            pattern.is_none_or(|re| {
                re.is_match(&file.strip_prefix(&base).unwrap_or(file).to_string_lossy())
            })
        })
        .map(|file| workspace.relative(file).to_string_lossy().into_owned())
        .collect();
    Ok((names, stopped))
}

fn scan_note(stopped: bool, limits: &Limits) -> String {
    if stopped {
        format!(
            "\n[glider: stopped after scanning {} files; narrow the path]",
            limits.max_files_scanned
        )
    } else {
        String::new()
    }
}

/// `glob`: workspace paths matching `pattern` under `path`, at most `max_entries`.
pub fn glob(
    workspace: &Workspace,
    limits: &Limits,
    pattern: &str,
    path: &str,
) -> Result<String, ToolError> {
    let re = glob_regex(pattern)?;
    let (mut names, stopped) = matching_files(workspace, limits, path, Some(&re))?;
    let total = names.len();
    names.truncate(limits.max_entries);
    let mut out = if names.is_empty() {
        format!("no file matches `{pattern}`")
    } else {
        names.join("\n")
    };
    if total > limits.max_entries {
        let _ = write!(
            out,
            "\n[glider: {} more paths not shown]",
            total - limits.max_entries
        );
    }
    out.push_str(&scan_note(stopped, limits));
    Ok(out)
}

/// What `grep` is asked.
pub struct GrepQuery<'a> {
    pub pattern: &'a str,
    pub path: &'a str,
    /// Only files whose path under `path` matches this glob.
    pub include: Option<&'a str>,
    pub case_insensitive: bool,
}

/// `grep`: `path:line: text` for each line matching a regex, at most `max_matches`;
/// binary files and files past `max_read_bytes` (their tail) are not searched.
pub fn grep(
    workspace: &Workspace,
    limits: &Limits,
    query: &GrepQuery,
) -> Result<String, ToolError> {
    let re = RegexBuilder::new(query.pattern)
        .case_insensitive(query.case_insensitive)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ToolError::InvalidArguments {
            tool: "grep".into(),
            message: format!("bad regex `{}`: {e}", query.pattern),
        })?;
    let include = query.include.map(glob_regex).transpose()?;
    let base = workspace.resolve(query.path)?;
    let (files, stopped) = if base.is_file() {
        (
            vec![workspace.relative(&base).to_string_lossy().into_owned()],
            false,
        )
    } else {
        matching_files(workspace, limits, query.path, include.as_ref())?
    };
    let mut out = String::new();
    let mut matches = 0;
    for name in &files {
        let Ok((bytes, _)) = read_capped(&workspace.root().join(name), limits.max_read_bytes)
        else {
            continue;
        };
        if is_binary(&bytes) {
            continue;
        }
        for (number, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
            if !re.is_match(line) {
                continue;
            }
            if matches == limits.max_matches {
                let _ = write!(
                    out,
                    "[glider: stopped at {} matches; narrow the pattern or path]",
                    limits.max_matches
                );
                return Ok(out);
            }
            let shown: String = line.chars().take(MAX_MATCH_LINE_CHARS).collect();
            let _ = writeln!(out, "{name}:{}: {shown}", number + 1);
            matches += 1;
        }
    }
    if matches == 0 {
        out = format!("no match for `{}`", query.pattern);
    }
    out.push_str(&scan_note(stopped, limits));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let root = tempfile::tempdir().expect("root");
        std::fs::create_dir_all(root.path().join("src/deep")).expect("dirs");
        std::fs::write(
            root.path().join("src/main.rs"),
            "fn main() {\n    hello();\n}\n",
        )
        .expect("w");
        std::fs::write(root.path().join("src/deep/lib.rs"), "pub fn hello() {}\n").expect("w");
        std::fs::write(root.path().join("notes.md"), "Hello notes\n").expect("w");
        std::fs::write(root.path().join("blob.bin"), b"a\0b hello").expect("w");
        let workspace = Workspace::open(root.path()).expect("opens");
        (root, workspace)
    }

    #[test]
    fn read_file_shows_a_line_range_and_stops_at_its_caps() {
        let (root, ws) = workspace();
        let limits = Limits::default();
        let two = read_file(&ws, &limits, "src/main.rs", Some(2), Some(2)).expect("reads");
        assert_eq!(two, "2\t    hello();\n");
        let small = Limits {
            max_read_bytes: 5,
            ..Limits::default()
        };
        let cut = read_file(&ws, &small, "src/main.rs", None, None).expect("reads");
        assert!(cut.starts_with("1\tfn ma\n"), "{cut}");
        assert!(cut.contains("longer than the 5 bytes"), "{cut}");
        let few = Limits {
            max_lines: 1,
            ..Limits::default()
        };
        assert!(
            read_file(&ws, &few, "src/main.rs", None, None)
                .expect("reads")
                .contains("stopped at 1 lines")
        );
        let binary = read_file(&ws, &limits, "blob.bin", None, None).expect_err("binary");
        assert!(binary.to_string().contains("binary"), "{binary}");
        let backwards = read_file(&ws, &limits, "notes.md", Some(3), Some(1)).expect_err("range");
        assert!(matches!(backwards, ToolError::InvalidArguments { .. }));
        let outside = read_file(&ws, &limits, "../../etc/passwd", None, None).expect_err("outside");
        assert!(matches!(outside, ToolError::Refused(_)), "{outside}");
        drop(root);
    }

    #[test]
    fn list_dir_marks_kinds_and_caps_entries() {
        let (root, ws) = workspace();
        std::os::unix::fs::symlink("/etc", root.path().join("etc")).expect("link");
        let listed = list_dir(&ws, &Limits::default(), ".").expect("lists");
        assert_eq!(listed, "blob.bin\netc@\nnotes.md\nsrc/");
        let capped = list_dir(
            &ws,
            &Limits {
                max_entries: 2,
                ..Limits::default()
            },
            ".",
        )
        .expect("lists");
        assert!(
            capped.ends_with("[glider: 2 more entries not shown]"),
            "{capped}"
        );
        assert!(matches!(
            list_dir(&ws, &Limits::default(), "etc"),
            Err(ToolError::Refused(_))
        ));
    }

    #[test]
    fn glob_matches_stars_and_double_stars_under_the_root_only() {
        let (_root, ws) = workspace();
        let limits = Limits::default();
        assert_eq!(
            glob(&ws, &limits, "**/*.rs", ".").expect("globs"),
            "src/deep/lib.rs\nsrc/main.rs"
        );
        assert_eq!(glob(&ws, &limits, "*.md", ".").expect("globs"), "notes.md");
        assert_eq!(
            glob(&ws, &limits, "*.rs", "src").expect("globs"),
            "src/main.rs"
        );
        assert!(
            glob(&ws, &limits, "*.py", ".")
                .expect("globs")
                .starts_with("no file matches")
        );
        let scanned = Limits {
            max_files_scanned: 1,
            ..Limits::default()
        };
        assert!(
            glob(&ws, &scanned, "**", ".")
                .expect("globs")
                .contains("stopped after scanning 1 files")
        );
        assert!(matches!(
            glob(&ws, &limits, "*", "/"),
            Err(ToolError::Refused(_))
        ));
    }

    #[test]
    fn grep_finds_lines_by_regex_skips_binaries_and_caps_matches() {
        let (_root, ws) = workspace();
        let limits = Limits::default();
        let query = |pattern, include, case_insensitive| GrepQuery {
            pattern,
            path: ".",
            include,
            case_insensitive,
        };
        let found = grep(&ws, &limits, &query("hel+o", None, false)).expect("greps");
        assert_eq!(
            found,
            "src/deep/lib.rs:1: pub fn hello() {}\nsrc/main.rs:2:     hello();\n"
        );
        let any_case = grep(&ws, &limits, &query("hello", Some("*.md"), true)).expect("greps");
        assert_eq!(any_case, "notes.md:1: Hello notes\n");
        let one = Limits {
            max_matches: 1,
            ..Limits::default()
        };
        assert!(
            grep(&ws, &one, &query("hello", None, true))
                .expect("greps")
                .contains("stopped at 1 matches")
        );
        let bad = grep(&ws, &limits, &query("(", None, false)).expect_err("bad regex");
        assert!(bad.to_string().contains("bad regex"), "{bad}");
        let outside = GrepQuery {
            pattern: "root",
            path: "/etc",
            include: None,
            case_insensitive: false,
        };
        assert!(matches!(
            grep(&ws, &limits, &outside),
            Err(ToolError::Refused(_))
        ));
    }
}
