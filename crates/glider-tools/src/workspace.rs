//! The workspace root every internal tool is confined to, held open as a directory
//! descriptor. A path a model names is resolved and opened in one step beneath that
//! descriptor — `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` — so `..` and
//! symlinks may move about inside the root, but the kernel refuses any step out of it
//! (an absolute symlink included), and nothing swapped in between a check and an open
//! is followed: there is no separate check. What was opened is judged by its
//! descriptor (`fstat`): regular files and directories only, never a FIFO, socket or
//! device, and nothing is opened blocking (`O_NONBLOCK`, `O_NOCTTY`). Walks of a tree
//! open each directory and file beneath the directory they started from with
//! `RESOLVE_NO_SYMLINKS` as well, so they never follow a symlink, and skip `.git`.
//! Without `openat2` (Linux before 5.6) the tools are off: there is no racy fallback.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::ToolError;

/// How everything a tool reads is opened: read-only, never waiting for a writer (a
/// FIFO) or taking a terminal, closed in any child.
const READ: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// A path a model names: beneath the root, no `/proc` magic links.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// A path a walk found: beneath the walked directory, and no symlink at all.
const WALKED: ResolveFlags = BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// How often an `openat2` is retried that the kernel could not make sure of (`EAGAIN`:
/// a rename elsewhere raced its resolution of `..`).
const EAGAIN_TRIES: usize = 8;

/// What a path opened to.
#[derive(Debug)]
pub enum Opened {
    File(std::fs::File),
    Dir(OwnedFd),
}

/// Why a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// Every file was seen.
    Done,
    /// There were more files than asked for.
    AtMaxFiles,
    /// The deadline passed first.
    AtDeadline,
}

/// The regular files a walk found, relative to the directory walked, in path order.
#[derive(Debug)]
pub struct Walk {
    pub files: Vec<PathBuf>,
    pub end: WalkEnd,
}

/// A canonical workspace root, and the directory held open there.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    dir: Arc<OwnedFd>,
}

/// `openat2(dir, path)` with no mode, retried on `EAGAIN`.
fn openat2(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) if tries < EAGAIN_TRIES => tries += 1,
            other => return other,
        }
    }
}

fn no_openat2() -> ToolError {
    ToolError::Unavailable(
        "this kernel has no openat2 (Linux 5.6 or later is needed), and the file tools never \
         open a path without it"
            .into(),
    )
}

fn io_error(errno: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno.raw_os_error())
}

/// The kind of file `fd` is, from the descriptor itself.
fn kind_of(fd: BorrowedFd<'_>) -> FileType {
    rustix::fs::fstat(fd)
        .map(|stat| FileType::from_raw_mode(stat.st_mode))
        .unwrap_or(FileType::Unknown)
}

/// `fd` as a regular file or a directory; anything else is its kind.
fn classify(fd: OwnedFd) -> Result<Opened, FileType> {
    match kind_of(fd.as_fd()) {
        FileType::RegularFile => Ok(Opened::File(fd.into())),
        FileType::Directory => Ok(Opened::Dir(fd)),
        other => Err(other),
    }
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Symlink => "a symlink",
        _ => "neither a file nor a directory",
    }
}

/// The entries of the open directory `dir` (without `.` and `..`), each with its kind
/// as the directory says it (a symlink is a symlink, never what it points to).
pub fn entries(dir: BorrowedFd<'_>) -> std::io::Result<Vec<(OsString, FileType)>> {
    let listing = Dir::read_from(dir).map_err(io_error)?;
    let mut entries = Vec::new();
    for entry in listing {
        let entry = entry.map_err(io_error)?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            // File systems without `d_type`: ask, still without following a link.
            kind = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|stat| FileType::from_raw_mode(stat.st_mode))
                .unwrap_or(FileType::Unknown);
        }
        entries.push((
            std::ffi::OsStr::from_bytes(name.to_bytes()).to_owned(),
            kind,
        ));
    }
    Ok(entries)
}

/// The regular file at `relative` (a path a walk of `dir` found), opened beneath `dir`
/// without following any symlink; `None` when it is gone, or is no longer a regular
/// file (a FIFO or a directory swapped in since the walk saw it).
pub fn open_walked(dir: BorrowedFd<'_>, relative: &Path) -> Option<std::fs::File> {
    let fd = openat2(dir, relative, READ | OFlags::NOFOLLOW, WALKED).ok()?;
    match classify(fd) {
        Ok(Opened::File(file)) => Some(file),
        _ => None,
    }
}

/// Every regular file under the open directory `dir`, as paths relative to it, in
/// path order; each subdirectory is opened beneath `dir` without following a symlink
/// (one swapped in for a directory is skipped), `.git` is skipped; at most
/// `max_files`, and no directory is begun after `deadline`.
pub fn files_under(dir: BorrowedFd<'_>, max_files: usize, deadline: Instant) -> Walk {
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    let mut end = WalkEnd::Done;
    'walk: while let Some(next) = stack.pop() {
        if Instant::now() >= deadline {
            end = WalkEnd::AtDeadline;
            break;
        }
        let listed = if next.as_os_str().is_empty() {
            entries(dir)
        } else {
            match openat2(
                dir,
                &next,
                READ | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                WALKED,
            ) {
                Ok(sub) => entries(sub.as_fd()),
                Err(_) => continue,
            }
        };
        let Ok(mut listed) = listed else {
            continue;
        };
        listed.sort_by(|a, b| b.0.cmp(&a.0));
        for (name, kind) in listed {
            match kind {
                FileType::Directory if name != ".git" => stack.push(next.join(name)),
                FileType::RegularFile => {
                    if files.len() == max_files {
                        end = WalkEnd::AtMaxFiles;
                        break 'walk;
                    }
                    files.push(next.join(name));
                }
                _ => {}
            }
        }
    }
    files.sort();
    Walk { files, end }
}

impl Workspace {
    /// The workspace at `root`, which must be an existing directory; it is opened once
    /// here, and every path is opened beneath that descriptor from then on.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        let given = root.as_ref();
        let cannot = |why: String| {
            ToolError::Unavailable(format!(
                "tools.workspace {} cannot be opened: {why}",
                given.display()
            ))
        };
        let root = given.canonicalize().map_err(|e| cannot(e.to_string()))?;
        let dir = rustix::fs::open(&root, READ | OFlags::DIRECTORY, Mode::empty()).map_err(
            |e| match e {
                Errno::NOTDIR => ToolError::Unavailable(format!(
                    "tools.workspace {} is not a directory",
                    root.display()
                )),
                e => cannot(io_error(e).to_string()),
            },
        )?;
        match openat2(
            dir.as_fd(),
            Path::new("."),
            READ | OFlags::DIRECTORY,
            BENEATH,
        ) {
            Ok(_) => {}
            Err(Errno::NOSYS) => return Err(no_openat2()),
            Err(e) => return Err(cannot(io_error(e).to_string())),
        }
        Ok(Workspace {
            root,
            dir: Arc::new(dir),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn outside(&self, path: &str) -> ToolError {
        ToolError::Refused(format!(
            "`{path}` is outside the workspace {} (paths, `..` and symlinks must stay inside it)",
            self.root.display()
        ))
    }

    /// `path` as a path relative to the root: an absolute one must start with the
    /// root (which is stripped); the root itself is `.`.
    fn under_root<'a>(&self, path: &'a str) -> Result<&'a Path, ToolError> {
        let given = Path::new(path);
        let relative = if given.is_absolute() {
            given
                .strip_prefix(&self.root)
                .map_err(|_| self.outside(path))?
        } else {
            given
        };
        Ok(if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        })
    }

    /// What `path` (relative to the root, or absolute inside it) names, resolved and
    /// opened in one step beneath the root; refused when resolving it would leave the
    /// root, or when it is neither a regular file nor a directory.
    pub fn open_path(&self, path: &str) -> Result<Opened, ToolError> {
        let relative = self.under_root(path)?;
        let fd = openat2(self.dir.as_fd(), relative, READ, BENEATH).map_err(|e| match e {
            Errno::XDEV => self.outside(path),
            Errno::NOENT => ToolError::Failed(format!("`{path}` does not exist in the workspace")),
            Errno::NOSYS => no_openat2(),
            e => ToolError::Failed(format!("`{path}` cannot be opened: {}", io_error(e))),
        })?;
        classify(fd).map_err(|kind| {
            ToolError::Refused(format!(
                "`{path}` is {}: the file tools open regular files and directories only",
                kind_name(kind)
            ))
        })
    }

    /// The regular file `path` names (see [`Workspace::open_path`]).
    pub fn open_file(&self, path: &str) -> Result<std::fs::File, ToolError> {
        match self.open_path(path)? {
            Opened::File(file) => Ok(file),
            Opened::Dir(_) => Err(ToolError::Failed(format!(
                "`{path}` is not a file (a directory)"
            ))),
        }
    }

    /// The directory `path` names (see [`Workspace::open_path`]).
    pub fn open_dir(&self, path: &str) -> Result<OwnedFd, ToolError> {
        match self.open_path(path)? {
            Opened::Dir(dir) => Ok(dir),
            Opened::File(_) => Err(ToolError::Failed(format!("`{path}` is not a directory"))),
        }
    }

    /// Where the open `fd` (opened from `path`) is, relative to the root, for what a
    /// tool prints: the kernel's name for it, or `path` with `.` left out where the
    /// kernel's name is not under the root (the root moved, say). Empty for the root.
    pub fn name_of(&self, fd: BorrowedFd<'_>, path: &str) -> PathBuf {
        let own = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if let Ok(own) = own
            && let Ok(relative) = own.strip_prefix(&self.root)
        {
            return relative.to_path_buf();
        }
        self.under_root(path)
            .map(|relative| {
                relative
                    .components()
                    .filter(|c| !matches!(c, Component::CurDir))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The path inside the root that `path` names now (relative to the root; `.` for
    /// the root), checked by opening it as [`Workspace::open_path`] does: for a
    /// subprocess's argument (a git pathspec), which the subprocess opens itself,
    /// inside the sandbox.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let name = match self.open_path(path)? {
            Opened::File(file) => self.name_of(file.as_fd(), path),
            Opened::Dir(dir) => self.name_of(dir.as_fd(), path),
        };
        Ok(if name.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            name
        })
    }

    /// The root, held open.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir, Workspace) {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(root.path().join("in.txt"), "in").expect("write");
        std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
        let workspace = Workspace::open(root.path()).expect("opens");
        (root, outside, workspace)
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn a_path_inside_resolves_and_dot_dot_out_of_the_root_is_refused() {
        let (root, outside, workspace) = tree();
        assert_eq!(
            workspace.resolve("in.txt").expect("inside"),
            Path::new("in.txt")
        );
        assert_eq!(workspace.resolve(".").expect("root"), Path::new("."));
        let absolute = workspace.root().join("in.txt");
        assert_eq!(
            workspace
                .resolve(&absolute.to_string_lossy())
                .expect("absolute inside"),
            Path::new("in.txt")
        );
        assert!(
            workspace.resolve("./sub/../in.txt").is_err(),
            "sub does not exist"
        );
        let name = outside.path().file_name().expect("name").to_string_lossy();
        let escape = format!("../{name}/secret.txt");
        let refused = workspace.resolve(&escape).expect_err("outside");
        assert!(matches!(refused, ToolError::Refused(_)), "{refused}");
        let absolute = outside.path().join("secret.txt");
        assert!(matches!(
            workspace.resolve(&absolute.to_string_lossy()),
            Err(ToolError::Refused(_))
        ));
        drop(root);
    }

    #[test]
    fn a_symlink_that_stays_inside_resolves_to_where_it_points() {
        let (root, _outside, workspace) = tree();
        std::fs::create_dir(root.path().join("sub")).expect("dir");
        std::os::unix::fs::symlink("../in.txt", root.path().join("sub/link")).expect("link");
        assert_eq!(
            workspace.resolve("sub/link").expect("inside"),
            Path::new("in.txt")
        );
        let walk = files_under(workspace.dir(), 100, later());
        assert_eq!(
            walk.files,
            [PathBuf::from("in.txt")],
            "links are not walked"
        );
    }

    #[test]
    fn a_symlink_that_leaves_the_root_is_refused_and_never_walked() {
        let (root, outside, workspace) = tree();
        std::os::unix::fs::symlink(outside.path(), root.path().join("out")).expect("link");
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.path().join("s"))
            .expect("link");
        for path in ["out/secret.txt", "s", "out"] {
            let refused = workspace.resolve(path).expect_err(path);
            assert!(
                refused.to_string().contains("outside the workspace"),
                "{refused}"
            );
        }
        let walk = files_under(workspace.dir(), 100, later());
        assert_eq!(walk.files.len(), 1, "only in.txt: {:?}", walk.files);
        assert_eq!(walk.end, WalkEnd::Done);
    }

    #[test]
    fn a_walk_stops_at_its_cap_and_at_its_deadline() {
        let (root, _outside, workspace) = tree();
        std::fs::create_dir(root.path().join("sub")).expect("dir");
        std::fs::write(root.path().join("sub/b.txt"), "b").expect("w");
        let capped = files_under(workspace.dir(), 1, later());
        assert_eq!(capped.end, WalkEnd::AtMaxFiles);
        assert_eq!(capped.files.len(), 1);
        let late = files_under(workspace.dir(), 100, Instant::now());
        assert_eq!(late.end, WalkEnd::AtDeadline);
        assert!(late.files.is_empty());
    }

    #[test]
    fn a_missing_root_is_a_clear_error() {
        let error = Workspace::open("/nonexistent/glider-root").expect_err("missing");
        assert!(error.to_string().contains("tools.workspace"), "{error}");
        let file = tempfile::NamedTempFile::new().expect("file");
        let error = Workspace::open(file.path()).expect_err("a file");
        assert!(error.to_string().contains("not a directory"), "{error}");
    }
}
