//! Keep files with sensitive content readable by their owner only (spec package
//! `fileacl`): 0600 for a file, 0700 for a directory, and a check that reports (and
//! repairs) a file that others can read. On non-Unix systems these are no-ops.

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
