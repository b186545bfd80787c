//! Keep files with sensitive content readable by their owner only (spec package
//! `fileacl`): 0600 for a file, 0700 for a directory, and a check that reports (and
//! repairs) a file that others can read, and GLIDER_HOME made private whole at start.
//! On non-Unix systems these are no-ops.

use std::io;
use std::path::Path;

#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;

/// Permission bits of a private file.
pub const PRIVATE_FILE: u32 = 0o600;
/// Permission bits of a private directory.
pub const PRIVATE_DIR: u32 = 0o700;

/// Create `dir` (and its parents) if needed and make it private (0700).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    set_mode(dir, PRIVATE_DIR)
}

/// Make GLIDER_HOME private: create it if needed, then take group and other access off
/// it and everything in it (0700 directories, 0600 files; an owner's execute bit is
/// kept). Request history, run state and the CA key live there, and an older Glider made
/// them 0755/0644. Links are not followed, so nothing outside the home is changed.
pub fn private_home(home: &Path) -> io::Result<()> {
    private_dir(home)?;
    let tightened = tighten_tree(home)?;
    if tightened > 0 {
        tracing::info!(home = %home.display(), tightened, "made GLIDER_HOME's files private to their owner");
    }
    Ok(())
}

/// Remove group and other access from everything under `dir`; returns how many entries
/// were changed. An entry that vanishes meanwhile (a history file expiring) is skipped.
fn tighten_tree(dir: &Path) -> io::Result<usize> {
    let mut tightened = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            tightened += usize::from(tighten(&path, &meta)?);
            tightened += tighten_tree(&path)?;
        } else if meta.is_file() {
            tightened += usize::from(tighten(&path, &meta)?);
        }
    }
    Ok(tightened)
}

/// Clear the group and other bits of `path`; true if there were any.
fn tighten(path: &Path, meta: &std::fs::Metadata) -> io::Result<bool> {
    #[cfg(unix)]
    {
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 == 0 {
            return Ok(false);
        }
        set_mode(path, mode & !0o077)?;
        Ok(true)
    }
    #[cfg(not(unix))]
    {
        let _ = (path, meta);
        Ok(false)
    }
}

/// Whether group or others have any access to `path`.
pub fn is_exposed(path: &Path) -> io::Result<bool> {
    #[cfg(unix)]
    {
        Ok(std::fs::metadata(path)?.permissions().mode() & 0o077 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(false)
    }
}

/// Make `path` private to its owner (0600) if it is not already. Returns true when it
/// had to be repaired, so the caller can say so.
pub fn restrict(path: &Path) -> io::Result<bool> {
    if !is_exposed(path)? {
        return Ok(false);
    }
    set_mode(path, PRIVATE_FILE)?;
    Ok(true)
}

/// Set the Unix permission bits of `path`.
pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_home_is_made_private_with_everything_already_in_it() {
        let root = tempfile::tempdir().expect("tempdir");
        let home = root.path().join("glider-home");
        // What an older Glider left: 0755 directories, 0644 files.
        for dir in ["history", "mitm/debug"] {
            std::fs::create_dir_all(home.join(dir)).expect("mkdir");
        }
        let files = [
            "runstate.json",
            "history/requests-2025-01-01.jsonl",
            "mitm/ca.crt",
        ];
        for file in files {
            std::fs::write(home.join(file), "x").expect("write");
            set_mode(&home.join(file), 0o644).expect("chmod");
        }
        for dir in ["", "history", "mitm", "mitm/debug"] {
            set_mode(&home.join(dir), 0o755).expect("chmod");
        }
        // A link to something outside is not followed.
        let outside = root.path().join("outside.txt");
        std::fs::write(&outside, "x").expect("write");
        set_mode(&outside, 0o644).expect("chmod");
        std::os::unix::fs::symlink(&outside, home.join("link")).expect("symlink");

        private_home(&home).expect("private home");
        for dir in ["", "history", "mitm", "mitm/debug"] {
            assert_eq!(mode(&home.join(dir)), PRIVATE_DIR, "{dir:?}");
        }
        for file in files {
            assert_eq!(mode(&home.join(file)), PRIVATE_FILE, "{file}");
        }
        assert_eq!(mode(&outside), 0o644, "outside the home, untouched");

        // A home that does not exist yet is created private.
        let fresh = root.path().join("fresh/home");
        private_home(&fresh).expect("create");
        assert_eq!(mode(&fresh), PRIVATE_DIR);
    }

    #[test]
    fn exposed_files_are_repaired() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "x").expect("write");
        set_mode(&path, 0o644).expect("chmod");
        assert!(is_exposed(&path).expect("stat"));
        assert!(restrict(&path).expect("restrict"));
        assert!(!is_exposed(&path).expect("stat"));
        assert!(!restrict(&path).expect("already private"));
        let sub = dir.path().join("a/b");
        private_dir(&sub).expect("dir");
        assert_eq!(
            std::fs::metadata(&sub).expect("meta").permissions().mode() & 0o777,
            0o700
        );
    }
}
