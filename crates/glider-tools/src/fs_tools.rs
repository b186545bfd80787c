//! The read-only file tools — `read_file`, `list_dir`, `glob`, `grep` — run in Glider's
//! own process (no subprocess), each confined to the [`Workspace`] (every path opened
//! in one step beneath its root, regular files and directories only) and capped by
//! [`Limits`]: a tool says where it stopped — a cap, or `tools.timeout_secs` — rather
//! than read without bound. They block on the file system, so async code runs them off
//! its workers (`internal.rs`).

use std::fmt::Write as _;
use std::io::Read as _;
use std::ops::ControlFlow;
use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::time::Instant;

use regex::{Regex, RegexBuilder};
use rustix::fs::FileType;

use crate::internal::Limits;
use crate::workspace::{self, Opened, WalkEnd};
use crate::{ToolError, Workspace};

/// Bytes looked at for a NUL to tell a binary file.
const BINARY_SNIFF: usize = 8 * 1024;
/// Longest line `grep` prints (a minified file would flood the model).
const MAX_MATCH_LINE_CHARS: usize = 300;

/// Up to `cap` bytes of `file`, and whether the file was longer.
fn read_capped(file: std::fs::File, cap: usize) -> std::io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1).read_to_end(&mut bytes)?;
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
    let file = workspace.open_file(path)?;
    let (bytes, longer) = read_capped(file, limits.max_read_bytes)
        .map_err(|e| ToolError::Failed(format!("cannot read `{path}`: {e}")))?;
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
    let dir = workspace.open_dir(path)?;
    let entries = workspace::entries(dir.as_fd())
        .map_err(|e| ToolError::Failed(format!("cannot list `{path}`: {e}")))?;
    let mut names: Vec<String> = entries
        .into_iter()
        .map(|(name, kind)| {
            let name = name.to_string_lossy().into_owned();
            match kind {
                FileType::Symlink => format!("{name}@"),
                FileType::Directory => format!("{name}/"),
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

/// A file a walk found: where it is under the directory walked, and its name
/// relative to the root (what a tool prints).
struct Found {
    under: PathBuf,
    name: String,
}

/// The files under the open directory `dir` (opened from `path`) whose path relative
/// to it matches `pattern`, capped at `max_files_scanned` and by `deadline`.
fn matching_files(
    workspace: &Workspace,
    limits: &Limits,
    dir: &std::os::fd::OwnedFd,
    path: &str,
    pattern: Option<&Regex>,
    deadline: Instant,
) -> (Vec<Found>, WalkEnd) {
    let base = workspace.name_of(dir.as_fd(), path);
    let walk = workspace::files_under(dir.as_fd(), limits.max_files_scanned, deadline);
    let found = walk
        .files
        .into_iter()
        .filter(|file| pattern.is_none_or(|re| re.is_match(&file.to_string_lossy())))
        .map(|under| Found {
            name: base.join(&under).to_string_lossy().into_owned(),
            under,
        })
        .collect();
    (found, walk.end)
}

/// When a call that began now stops looking: `tools.timeout_secs` on.
fn deadline(limits: &Limits) -> Instant {
    let now = Instant::now();
    now.checked_add(limits.timeout).unwrap_or(now)
}

/// The note a walk's end needs, after a line break; empty when it saw everything.
fn scan_note(end: WalkEnd, limits: &Limits) -> String {
    match end {
        WalkEnd::Done => String::new(),
        WalkEnd::AtMaxFiles => format!(
            "\n[glider: stopped after scanning {} files; narrow the path]",
            limits.max_files_scanned
        ),
        WalkEnd::AtDeadline => format!(
            "\n[glider: stopped after {} s (tools.timeout_secs) before looking at every file; \
             narrow the path]",
            limits.timeout.as_secs_f64()
        ),
    }
}

/// `glob`: workspace paths matching `pattern` under `path`, at most `max_entries`.
pub fn glob(
    workspace: &Workspace,
    limits: &Limits,
    pattern: &str,
    path: &str,
) -> Result<String, ToolError> {
    let deadline = deadline(limits);
    let re = glob_regex(pattern)?;
    let dir = workspace.open_dir(path)?;
    let (found, end) = matching_files(workspace, limits, &dir, path, Some(&re), deadline);
    let total = found.len();
    let names: Vec<String> = found
        .into_iter()
        .take(limits.max_entries)
        .map(|f| f.name)
        .collect();
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
    out.push_str(&scan_note(end, limits));
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

/// One `grep` call's output as it grows.
struct Search<'a> {
    re: &'a Regex,
    limits: &'a Limits,
    out: String,
    matches: usize,
    /// Files searched only in their first `max_read_bytes`.
    cut: usize,
}

impl Search<'_> {
    /// Search `file` (printed as `name`); `Break` once `max_matches` lines are shown.
    fn file(&mut self, file: std::fs::File, name: &str) -> ControlFlow<()> {
        let Ok((bytes, longer)) = read_capped(file, self.limits.max_read_bytes) else {
            return ControlFlow::Continue(());
        };
        if is_binary(&bytes) {
            return ControlFlow::Continue(());
        }
        if longer {
            self.cut += 1;
        }
        for (number, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
            if !self.re.is_match(line) {
                continue;
            }
            if self.matches == self.limits.max_matches {
                let _ = write!(
                    self.out,
                    "[glider: stopped at {} matches; narrow the pattern or path]",
                    self.limits.max_matches
                );
                return ControlFlow::Break(());
            }
            let shown: String = line.chars().take(MAX_MATCH_LINE_CHARS).collect();
            let _ = writeln!(self.out, "{name}:{}: {shown}", number + 1);
            self.matches += 1;
        }
        ControlFlow::Continue(())
    }

    /// The output, with a note for each way the search fell short.
    fn finish(mut self, pattern: &str, end: WalkEnd) -> String {
        if self.matches == 0 {
            self.out = format!("no match for `{pattern}`");
        }
        if self.cut > 0 {
            let (files, were) = if self.cut == 1 {
                ("file was", "its")
            } else {
                ("files were", "their")
            };
            let _ = write!(
                self.out,
                "\n[glider: {} {files} searched only in {were} first {} bytes \
                 (tools.max_read_bytes); a match further in is not shown]",
                self.cut, self.limits.max_read_bytes
            );
        }
        self.out.push_str(&scan_note(end, self.limits));
        self.out
    }
}

/// `grep`: `path:line: text` for each line matching a regex, at most `max_matches`;
/// binary files are not searched, and files past `max_read_bytes` only up to there
/// (the output says how many).
pub fn grep(
    workspace: &Workspace,
    limits: &Limits,
    query: &GrepQuery,
) -> Result<String, ToolError> {
    let deadline = deadline(limits);
    let re = RegexBuilder::new(query.pattern)
        .case_insensitive(query.case_insensitive)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ToolError::InvalidArguments {
            tool: "grep".into(),
            message: format!("bad regex `{}`: {e}", query.pattern),
        })?;
    let include = query.include.map(glob_regex).transpose()?;
    let mut search = Search {
        re: &re,
        limits,
        out: String::new(),
        matches: 0,
        cut: 0,
    };
    let mut end = WalkEnd::Done;
    match workspace.open_path(query.path)? {
        Opened::File(file) => {
            let name = workspace.name_of(file.as_fd(), query.path);
            let _ = search.file(file, &name.to_string_lossy());
        }
        Opened::Dir(dir) => {
            let (found, walked) = matching_files(
                workspace,
                limits,
                &dir,
                query.path,
                include.as_ref(),
                deadline,
            );
            end = walked;
            for found in found {
                if Instant::now() >= deadline {
                    end = WalkEnd::AtDeadline;
                    break;
                }
                // Opened beneath the walked directory again, without following a
                // symlink: one swapped in since the walk is skipped, never followed.
                let Some(file) = workspace::open_walked(dir.as_fd(), &found.under) else {
                    continue;
                };
                if search.file(file, &found.name).is_break() {
                    return Ok(search.out);
                }
            }
        }
    }
    Ok(search.finish(query.pattern, end))
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

    fn query<'a>(pattern: &'a str, path: &'a str, include: Option<&'a str>) -> GrepQuery<'a> {
        GrepQuery {
            pattern,
            path,
            include,
            case_insensitive: false,
        }
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

    #[test]
    fn grep_says_when_files_were_searched_only_in_their_first_bytes() {
        let (root, ws) = workspace();
        let long = format!("{}needle\n", "hay\n".repeat(100));
        std::fs::write(root.path().join("long.txt"), &long).expect("w");
        std::fs::write(root.path().join("also.txt"), &long).expect("w");
        let small = Limits {
            max_read_bytes: 64,
            ..Limits::default()
        };
        let one = grep(&ws, &small, &query("needle", "long.txt", None)).expect("greps");
        assert_eq!(
            one,
            "no match for `needle`\n[glider: 1 file was searched only in its first 64 bytes \
             (tools.max_read_bytes); a match further in is not shown]"
        );
        let both = grep(&ws, &small, &query("needle|hay", ".", Some("*.txt"))).expect("greps");
        assert!(both.starts_with("also.txt:1: hay\n"), "{both}");
        assert!(
            both.ends_with(
                "[glider: 2 files were searched only in their first 64 bytes \
                 (tools.max_read_bytes); a match further in is not shown]"
            ),
            "{both}"
        );
        let whole = grep(&ws, &Limits::default(), &query("needle", ".", None)).expect("greps");
        assert_eq!(whole, "also.txt:101: needle\nlong.txt:101: needle\n");
    }

    #[test]
    fn glob_and_grep_stop_at_the_timeout_and_say_so() {
        let (_root, ws) = workspace();
        let no_time = Limits {
            timeout: std::time::Duration::ZERO,
            ..Limits::default()
        };
        for out in [
            glob(&ws, &no_time, "**", ".").expect("globs"),
            grep(&ws, &no_time, &query("hello", ".", None)).expect("greps"),
        ] {
            assert!(
                out.ends_with("[glider: stopped after 0 s (tools.timeout_secs) before looking at every file; narrow the path]"),
                "{out}"
            );
        }
    }

    #[test]
    fn a_directory_or_a_fifo_is_not_read_as_a_file() {
        let (root, ws) = workspace();
        let limits = Limits::default();
        let dir = read_file(&ws, &limits, "src", None, None).expect_err("a directory");
        assert!(dir.to_string().contains("not a file"), "{dir}");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            root.path().join("pipe"),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        let fifo = read_file(&ws, &limits, "pipe", None, None).expect_err("a FIFO");
        assert_eq!(
            fifo,
            ToolError::Refused(
                "`pipe` is a FIFO: the file tools open regular files and directories only".into()
            )
        );
        let listed = list_dir(&ws, &limits, "pipe").expect_err("not a directory");
        assert!(listed.to_string().contains("FIFO"), "{listed}");
    }
}
