//! The workspace root every internal tool is confined to: a path a model names is
//! resolved against the root and canonicalised (`..` and symlinks resolved), and
//! refused unless the result is still inside the root; walks of the tree never follow
//! a symlink, and skip `.git`.

use std::path::{Path, PathBuf};

use crate::ToolError;

/// A canonical workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace at `root`, which must be an existing directory.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        let given = root.as_ref();
        let root = given.canonicalize().map_err(|e| {
            ToolError::Unavailable(format!(
                "tools.workspace {} cannot be opened: {e}",
                given.display()
            ))
        })?;
        if !root.is_dir() {
            return Err(ToolError::Unavailable(format!(
                "tools.workspace {} is not a directory",
                root.display()
            )));
        }
        Ok(Workspace { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The existing path `path` names (relative to the root, or absolute inside it),
    /// canonicalised; refused when it resolves outside the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        let resolved = joined.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                ToolError::Failed(format!("`{path}` does not exist in the workspace"))
            }
            _ => ToolError::Failed(format!("`{path}` cannot be opened: {e}")),
        })?;
        if !resolved.starts_with(&self.root) {
            return Err(ToolError::Refused(format!(
                "`{path}` is outside the workspace {} (paths, `..` and symlinks must stay inside it)",
                self.root.display()
            )));
        }
        Ok(resolved)
    }

    /// `path` relative to the root, for what a tool prints.
    pub fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }

    /// Every regular file under `dir` (a resolved directory), in path order, without
    /// following symlinks and without `.git`; at most `max_files` (the flag says
    /// whether the walk stopped there).
    pub fn files_under(&self, dir: &Path, max_files: usize) -> (Vec<PathBuf>, bool) {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(next) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&next) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| std::cmp::Reverse(e.file_name()));
            for entry in entries {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    if entry.file_name() != ".git" {
                        stack.push(entry.path());
                    }
                } else if kind.is_file() {
                    if files.len() == max_files {
                        files.sort();
                        return (files, true);
                    }
                    files.push(entry.path());
                }
            }
        }
        files.sort();
        (files, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir, Workspace) {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(root.path().join("in.txt"), "in").expect("write");
        std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
        let workspace = Workspace::open(root.path()).expect("opens");
        (root, outside, workspace)
    }

    #[test]
    fn a_path_inside_resolves_and_dot_dot_out_of_the_root_is_refused() {
        let (root, outside, workspace) = tree();
        assert!(
            workspace
                .resolve("in.txt")
                .expect("inside")
                .ends_with("in.txt")
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
        let (files, _) = workspace.files_under(workspace.root(), 100);
        assert_eq!(files.len(), 1, "only in.txt: {files:?}");
    }

    #[test]
    fn a_missing_root_is_a_clear_error() {
        let error = Workspace::open("/nonexistent/glider-root").expect_err("missing");
        assert!(error.to_string().contains("tools.workspace"), "{error}");
    }
}
