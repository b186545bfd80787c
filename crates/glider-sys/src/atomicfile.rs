//! Write a file completely or not at all (spec package `atomicfile`): the bytes go to a
//! temporary file in the same directory, which is flushed to disk, given its final
//! permissions, and renamed over the target; the directory is then synced so the
//! rename itself survives a crash. A reader sees the old file or the new one, never half.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(unix)]
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

/// Write `bytes` to `path` atomically with Unix permission bits `mode` (e.g. `0o600`).
/// The temporary file is created with `mode` from the start, so a secret is never
/// readable by others, not even for a moment. The parent directory must exist.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        unique()
    ));
    let result = write_tmp(&tmp, bytes, mode).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    sync_dir(dir);
    Ok(())
}

/// Replace the existing file at `path` atomically with `bytes`, keeping its permission
/// bits (a config that holds a key and is 0600 stays 0600). A file that does not exist
/// yet, or a platform without Unix modes, gets 0600.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    #[cfg(unix)]
    let mode = fs::metadata(path).map_or(crate::fileacl::PRIVATE_FILE, |meta| {
        meta.permissions().mode() & 0o7777
    });
    #[cfg(not(unix))]
    let mode = crate::fileacl::PRIVATE_FILE;
    write(path, bytes, mode)
}

fn write_tmp(tmp: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(mode);
    let mut file = options.open(tmp)?;
    file.write_all(bytes)?;
    // The umask may have narrowed the mode at creation; set it exactly.
    #[cfg(unix)]
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    #[cfg(not(unix))]
    let _ = mode;
    file.sync_all()
}

/// Make a completed rename durable. Best effort: some filesystems cannot sync a directory.
fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replaces_and_sets_the_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret.key");
        write(&path, b"one", 0o600).expect("first write");
        write(&path, b"two", 0o600).expect("second write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        #[cfg(unix)]
        assert_eq!(
            fs::metadata(&path).expect("meta").permissions().mode() & 0o777,
            0o600
        );
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret.key")]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        write(&path, b"old", 0o644).expect("write");
        // The target is now a directory's child that cannot exist: rename fails.
        let bad = dir.path().join("missing-dir").join("f");
        assert!(write(&bad, b"new", 0o644).is_err());
        assert_eq!(fs::read(&path).expect("read"), b"old");
    }

    #[test]
    #[cfg(unix)]
    fn a_replaced_file_keeps_its_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        for kept in [0o600, 0o640] {
            let path = dir.path().join(format!("glider-{kept:o}.yaml"));
            write(&path, b"old", kept).expect("write");
            replace(&path, b"new").expect("replace");
            assert_eq!(fs::read(&path).expect("read"), b"new");
            assert_eq!(mode(&path), kept);
        }
        let fresh = dir.path().join("new.yaml");
        replace(&fresh, b"x").expect("replace");
        assert_eq!(mode(&fresh), crate::fileacl::PRIVATE_FILE);
    }
}
