//! A seeded property test of path resolution (a stable stand-in for a fuzz target):
//! thousands of pseudo-random paths made of `..`, `.`, `/`, empty components, names,
//! symlinks that stay inside the root and symlinks that leave it (relative and
//! absolute), and absolute paths in and out of the root. Whatever a file tool makes of
//! such a path, nothing outside the root ever comes back, and a path whose target
//! (as the kernel would follow it today) lies outside the root is refused.

use std::path::Path;

use glider_test_support::rng::Rng;
use glider_tools::fs_tools::{self, GrepQuery};
use glider_tools::{Limits, ToolError, Workspace};

/// What only the outside tree holds, in a file's text and in a directory's listing.
const SECRET: &str = "SECRET-OUTSIDE";
const OUTSIDE_ENTRY: &str = "outside-only-entry";

fn layout() -> (tempfile::TempDir, tempfile::TempDir) {
    let root = tempfile::tempdir().expect("root");
    let outside = tempfile::tempdir().expect("outside");
    let (r, o) = (root.path(), outside.path());
    std::fs::write(o.join("secret.txt"), format!("{SECRET}\n")).expect("w");
    std::fs::create_dir(o.join(OUTSIDE_ENTRY)).expect("dir");
    std::fs::write(o.join(OUTSIDE_ENTRY).join("in.txt"), format!("{SECRET}\n")).expect("w");
    std::fs::create_dir_all(r.join("sub/deeper")).expect("dirs");
    for file in ["in.txt", "sub/in.txt", "sub/deeper/in.txt"] {
        std::fs::write(r.join(file), "inside\n").expect("w");
    }
    let outside_name = o.file_name().expect("name").to_string_lossy().into_owned();
    let links: [(&str, String); 9] = [
        ("sub/up", "..".into()),
        ("sub/deeper/top", "../..".into()),
        ("rel_in", "sub".into()),
        ("rel_file", "sub/in.txt".into()),
        ("sub/esc", format!("../../{outside_name}")),
        ("esc_file", format!("../{outside_name}/secret.txt")),
        ("out", o.display().to_string()),
        ("abs_in", r.join("sub").display().to_string()),
        ("loop", "loop".into()),
    ];
    for (link, target) in links {
        std::os::unix::fs::symlink(target, r.join(link)).expect("link");
    }
    (root, outside)
}

/// A random path over the layout's names.
fn random_path(rng: &mut Rng, root: &Path, outside: &Path) -> String {
    const PARTS: &[&str] = &[
        "in.txt",
        "sub",
        "deeper",
        "..",
        ".",
        "",
        "up",
        "top",
        "rel_in",
        "rel_file",
        "esc",
        "esc_file",
        "out",
        "abs_in",
        "loop",
        "secret.txt",
        "missing",
    ];
    let mut path = match rng.below(6) {
        0 => format!("{}/", root.display()),
        1 => format!("{}/", outside.display()),
        2 => "/".to_owned(),
        _ => String::new(),
    };
    let outside_name = outside.file_name().expect("name").to_string_lossy();
    for i in 0..=rng.below(6) {
        if i > 0 {
            path.push('/');
        }
        if rng.below(12) == 0 {
            path.push_str(&outside_name);
        } else {
            path.push_str(PARTS[rng.below(PARTS.len())]);
        }
    }
    path
}

/// Where the path leads now (following every symlink), if anywhere.
fn target(root: &Path, path: &str) -> Option<std::path::PathBuf> {
    root.join(path).canonicalize().ok()
}

#[test]
fn no_random_path_reaches_outside_the_root() {
    let (root, outside) = layout();
    let workspace = Workspace::open(root.path()).expect("opens");
    let canonical_root = root.path().canonicalize().expect("root");
    let limits = Limits::default();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..4000 {
        let path = random_path(&mut rng, root.path(), outside.path());
        let results = [
            fs_tools::read_file(&workspace, &limits, &path, None, None),
            fs_tools::list_dir(&workspace, &limits, &path),
            fs_tools::glob(&workspace, &limits, "**", &path),
            fs_tools::grep(
                &workspace,
                &limits,
                &GrepQuery {
                    pattern: "SECRET|inside",
                    path: &path,
                    include: None,
                    case_insensitive: false,
                },
            ),
        ];
        let leaves = target(root.path(), &path).is_some_and(|t| !t.starts_with(&canonical_root));
        for result in results {
            match result {
                Ok(out) => {
                    opened += 1;
                    assert!(!leaves, "`{path}` leads outside, yet: {out}");
                    assert!(
                        !out.contains(SECRET) && !out.contains(OUTSIDE_ENTRY),
                        "`{path}` showed the outside tree: {out}"
                    );
                }
                Err(error) => {
                    refused += 1;
                    if leaves {
                        assert!(
                            matches!(error, ToolError::Refused(_)),
                            "`{path}` leads outside: {error}"
                        );
                    }
                    assert!(!error.to_string().contains(SECRET), "{error}");
                }
            }
        }
    }
    assert!(
        opened > 400 && refused > 1000,
        "{opened} answered, {refused} refused"
    );
}
