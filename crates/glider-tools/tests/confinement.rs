//! The file tools under attack from the workspace itself (issue 50): a name swapped
//! between a regular file and a symlink out of the root (or a directory and a symlink
//! to an outside directory) while `read_file` and `grep` run must never yield the
//! outside file's text, and a FIFO swapped over a file's name must never block a read.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use glider_tools::fs_tools::{self, GrepQuery};
use glider_tools::{Limits, ToolError, Workspace};
use rustix::fs::{CWD, Mode, RenameFlags, mkfifoat, renameat_with};

/// What only the outside files hold.
const SECRET: &str = "SECRET-OUTSIDE";

/// How long each race runs: long enough that the old check-then-open code lost it
/// every time it was tried (it lost within the first few hundred calls).
const RACE: Duration = Duration::from_millis(1500);

struct Tree {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
    workspace: Workspace,
}

fn tree() -> Tree {
    let root = tempfile::tempdir().expect("root");
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret.txt"), format!("{SECRET}\n")).expect("w");
    let workspace = Workspace::open(root.path()).expect("opens");
    Tree {
        root,
        outside,
        workspace,
    }
}

/// A thread exchanging `a` and `b` (atomically, `RENAME_EXCHANGE`) until dropped.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(a: PathBuf, b: PathBuf) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !flag.load(Ordering::Relaxed) {
                renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE).expect("exchange");
                swaps += 1;
            }
            swaps
        });
        Swapper {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("swapper")
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn query<'a>(pattern: &'a str, path: &'a str) -> GrepQuery<'a> {
    GrepQuery {
        pattern,
        path,
        include: None,
        case_insensitive: false,
    }
}

/// A named tool call, its result (or error) as text.
type Call<'a> = (&'a str, &'a dyn Fn(&Workspace) -> String);

/// Every call `calls` makes, over and over for [`RACE`]: none may show [`SECRET`].
fn never_outside(workspace: &Workspace, calls: &[Call<'_>]) {
    let until = Instant::now() + RACE;
    let mut rounds = 0;
    while Instant::now() < until {
        for (what, call) in calls {
            let out = call(workspace);
            assert!(
                !out.contains(SECRET),
                "{what} returned the outside file's text after {rounds} rounds: {out}"
            );
        }
        rounds += 1;
    }
    assert!(rounds > 10, "the race ran only {rounds} rounds");
}

fn shown(result: Result<String, ToolError>) -> String {
    match result {
        Ok(text) => text,
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_file_swapped_with_a_symlink_out_of_the_root_is_never_read_through_it() {
    let t = tree();
    let name = t.root.path().join("name");
    let alt = t.root.path().join("alt");
    std::fs::write(&name, "inside\n").expect("w");
    std::os::unix::fs::symlink(t.outside.path().join("secret.txt"), &alt).expect("link");
    let swapper = Swapper::start(name, alt);
    let limits = Limits::default();
    never_outside(
        &t.workspace,
        &[
            ("read_file", &|ws| {
                shown(fs_tools::read_file(ws, &limits, "name", None, None))
            }),
            ("grep on the file", &|ws| {
                shown(fs_tools::grep(ws, &limits, &query("SECRET|inside", "name")))
            }),
            ("grep over the tree", &|ws| {
                shown(fs_tools::grep(ws, &limits, &query("SECRET|inside", ".")))
            }),
        ],
    );
    assert!(swapper.stop() > 100, "the swapper hardly ran");
}

#[test]
fn a_directory_swapped_with_a_symlink_to_an_outside_directory_is_never_entered() {
    let t = tree();
    let dir = t.root.path().join("d");
    let alt = t.root.path().join("alt");
    std::fs::create_dir(&dir).expect("dir");
    std::fs::write(dir.join("secret.txt"), "inside\n").expect("w");
    std::os::unix::fs::symlink(t.outside.path(), &alt).expect("link");
    let swapper = Swapper::start(dir, alt);
    let limits = Limits::default();
    never_outside(
        &t.workspace,
        &[
            ("read_file", &|ws| {
                shown(fs_tools::read_file(ws, &limits, "d/secret.txt", None, None))
            }),
            ("grep in the directory", &|ws| {
                shown(fs_tools::grep(ws, &limits, &query("SECRET|inside", "d")))
            }),
            ("grep over the tree", &|ws| {
                shown(fs_tools::grep(ws, &limits, &query("SECRET|inside", ".")))
            }),
            ("list_dir", &|ws| {
                shown(fs_tools::list_dir(ws, &limits, "d"))
            }),
        ],
    );
    assert!(swapper.stop() > 100, "the swapper hardly ran");
}

/// Runs `work` on a thread and fails (instead of hanging) when it takes over 20 s; a
/// read stuck opening a FIFO is then released by opening each of `fifos` for writing.
fn within_a_deadline(fifos: &[PathBuf], work: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        work();
        let _ = done.send(());
    });
    if finished.recv_timeout(Duration::from_secs(20)).is_err() {
        for fifo in fifos {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(fifo);
        }
        panic!("a file tool blocked on a FIFO for 20 s");
    }
}

fn fifo(path: &Path) {
    mkfifoat(CWD, path, Mode::from_raw_mode(0o600)).expect("mkfifo");
}

#[test]
fn a_fifo_is_refused_at_once_and_never_blocks_a_read() {
    let t = tree();
    let pipe = t.root.path().join("pipe");
    fifo(&pipe);
    std::fs::create_dir(t.root.path().join("sub")).expect("dir");
    fifo(&t.root.path().join("sub/pipe"));
    std::fs::write(t.root.path().join("sub/text.txt"), "inside\n").expect("w");
    let workspace = t.workspace.clone();
    within_a_deadline(std::slice::from_ref(&pipe), move || {
        let limits = Limits::default();
        let refused = fs_tools::read_file(&workspace, &limits, "pipe", None, None)
            .expect_err("a FIFO is not a file");
        assert!(refused.to_string().contains("pipe"), "{refused}");
        let found = fs_tools::grep(&workspace, &limits, &query("inside", ".")).expect("greps");
        assert_eq!(found, "sub/text.txt:1: inside\n");
        assert!(fs_tools::grep(&workspace, &limits, &query("x", "pipe")).is_err());
    });
}

#[test]
fn a_fifo_swapped_over_a_files_name_never_blocks_a_read() {
    let t = tree();
    let name = t.root.path().join("name");
    let alt = t.root.path().join("alt");
    std::fs::write(&name, "inside\n").expect("w");
    fifo(&alt);
    let swapper = Swapper::start(name.clone(), alt.clone());
    let workspace = t.workspace.clone();
    within_a_deadline(&[name, alt], move || {
        let limits = Limits::default();
        let until = Instant::now() + RACE;
        while Instant::now() < until {
            if let Ok(text) = fs_tools::read_file(&workspace, &limits, "name", None, None) {
                assert_eq!(text, "1\tinside\n");
            }
            let _ = fs_tools::grep(&workspace, &limits, &query("inside", "."));
        }
    });
    assert!(swapper.stop() > 100, "the swapper hardly ran");
}
