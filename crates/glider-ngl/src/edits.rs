//! `EditViews`: one vendor-neutral view of the file edits an assistant turn makes,
//! whichever CLI's tools made them. Claude Code edits with `Edit`/`MultiEdit`/`Write`,
//! Codex with `apply_patch`, others with `write_file`/`str_replace`-style tools; the
//! dashboard and the context graph want "which files did this turn touch, and how",
//! not each vendor's argument names. Recognition is by argument shape, never by the
//! name of the CLI (the spec forbids CLI-name decisions in the pipeline).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Part;

/// How one tool call changes one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum EditView {
    /// The whole file is (re)written.
    Write { path: String, content: String },
    /// Exact text replaced, once or everywhere.
    Replace {
        path: String,
        old: String,
        new: String,
        all: bool,
    },
    /// A unified or Codex-style patch touching `paths`.
    Patch { paths: Vec<String>, patch: String },
}

impl EditView {
    /// The files this edit touches.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            EditView::Write { path, .. } | EditView::Replace { path, .. } => vec![path],
            EditView::Patch { paths, .. } => paths.iter().map(String::as_str).collect(),
        }
    }
}

/// The edits found in a list of parts, with the id of the call that made each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditViews {
    pub edits: Vec<(String, EditView)>,
}

impl EditViews {
    /// Read every tool call in `parts` and keep those that edit files.
    pub fn from_parts(parts: &[Part]) -> Self {
        let mut edits = Vec::new();
        for part in parts {
            if let Part::ToolCall { id, arguments, .. } = part {
                for view in views_of_arguments(arguments) {
                    edits.push((id.clone(), view));
                }
            }
        }
        EditViews { edits }
    }

    /// Every distinct path touched, in first-seen order.
    pub fn paths(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (_, view) in &self.edits {
            for path in view.paths() {
                if !out.contains(&path) {
                    out.push(path);
                }
            }
        }
        out
    }
}

fn str_field<'a>(args: &'a Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| args.get(*n).and_then(Value::as_str))
}

const PATH_KEYS: &[&str] = &["file_path", "path", "filename", "target_file"];

fn views_of_arguments(args: &Value) -> Vec<EditView> {
    // A patch, given as the `input`/`patch` argument or as the whole string argument.
    let patch_text = str_field(args, &["patch", "input"])
        .or_else(|| args.as_str())
        .filter(|t| t.contains("*** Begin Patch") || t.starts_with("--- ") || t.contains("\n+++ "));
    if let Some(patch) = patch_text {
        return vec![EditView::Patch {
            paths: patch_paths(patch),
            patch: patch.to_owned(),
        }];
    }
    let Some(path) = str_field(args, PATH_KEYS) else {
        return Vec::new();
    };
    if let Some(edits) = args.get("edits").and_then(Value::as_array) {
        return edits.iter().filter_map(|e| replace_view(path, e)).collect();
    }
    if let Some(view) = replace_view(path, args) {
        return vec![view];
    }
    match str_field(args, &["content", "contents", "file_text"]) {
        Some(content) => vec![EditView::Write {
            path: path.to_owned(),
            content: content.to_owned(),
        }],
        None => Vec::new(),
    }
}

fn replace_view(path: &str, args: &Value) -> Option<EditView> {
    let old = str_field(args, &["old_string", "old_str", "old_text"])?;
    let new = str_field(args, &["new_string", "new_str", "new_text"]).unwrap_or("");
    Some(EditView::Replace {
        path: path.to_owned(),
        old: old.to_owned(),
        new: new.to_owned(),
        all: args
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

fn patch_paths(patch: &str) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for line in patch.lines() {
        let path = [
            "*** Update File: ",
            "*** Add File: ",
            "*** Delete File: ",
            "+++ b/",
            "+++ ",
        ]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix));
        if let Some(path) = path.map(str::trim).filter(|p| *p != "/dev/null")
            && !paths.iter().any(|p| p == path)
        {
            paths.push(path.to_owned());
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(args: Value) -> Part {
        Part::ToolCall {
            id: "c".into(),
            name: "any".into(),
            arguments: args,
        }
    }

    #[test]
    fn recognises_edit_shapes() {
        let parts = vec![
            call(json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"})),
            call(json!({"file_path": "b.rs", "content": "fn main() {}"})),
            call(json!({"file_path": "c.rs", "edits": [
                {"old_string": "1", "new_string": "2", "replace_all": true},
                {"old_string": "3", "new_string": "4"}
            ]})),
            call(
                json!({"input": "*** Begin Patch\n*** Update File: d.rs\n@@\n-a\n+b\n*** End Patch"}),
            ),
            call(json!({"command": "ls"})),
        ];
        let views = EditViews::from_parts(&parts);
        assert_eq!(views.edits.len(), 5);
        assert_eq!(views.paths(), vec!["a.rs", "b.rs", "c.rs", "d.rs"]);
        assert!(matches!(
            &views.edits[2].1,
            EditView::Replace { all: true, .. }
        ));
    }
}
