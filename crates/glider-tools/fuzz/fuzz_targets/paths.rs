//! The workspace's path resolution on arbitrary path strings: whatever a model names,
//! what opens must lie beneath the root (its real path starts with the root's), and
//! nothing may panic. The tree holds symlinks that stay inside and ones that leave it.
#![no_main]

use std::os::fd::{AsFd, AsRawFd};
use std::sync::OnceLock;

use glider_tools::Workspace;
use glider_tools::workspace::Opened;
use libfuzzer_sys::fuzz_target;

/// A root with files, a subdirectory and symlinks in and out, beside an outside tree.
fn tree() -> &'static (tempfile::TempDir, tempfile::TempDir, Workspace) {
    static TREE: OnceLock<(tempfile::TempDir, tempfile::TempDir, Workspace)> = OnceLock::new();
    TREE.get_or_init(|| {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        let (r, o) = (root.path(), outside.path());
        std::fs::write(o.join("secret.txt"), "secret").expect("write");
        std::fs::create_dir_all(r.join("sub/deeper")).expect("dirs");
        std::fs::write(r.join("sub/in.txt"), "in").expect("write");
        std::os::unix::fs::symlink("sub/in.txt", r.join("inside-link")).expect("link");
        std::os::unix::fs::symlink(o.join("secret.txt"), r.join("out-file")).expect("link");
        std::os::unix::fs::symlink(o, r.join("sub/out-dir")).expect("link");
        std::os::unix::fs::symlink("../..", r.join("sub/deeper/up")).expect("link");
        let workspace = Workspace::open(r).expect("opens");
        (root, outside, workspace)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let (_root, _outside, workspace) = tree();
    if let Ok(opened) = workspace.open_path(path) {
        let fd = match &opened {
            Opened::File(file) => file.as_fd().as_raw_fd(),
            Opened::Dir(dir) => dir.as_fd().as_raw_fd(),
        };
        let real = std::fs::read_link(format!("/proc/self/fd/{fd}")).expect("an open fd has a path");
        assert!(real.starts_with(workspace.root()), "{path:?} opened {real:?}");
    }
});
