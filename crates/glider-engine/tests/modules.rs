//! The engine's top-level modules form no import circle: reading each module's code
//! (its files, comments and `#[cfg(test)]` parts left out — a test may reach anywhere),
//! every `crate::x` it names is an edge to module `x`, and the edges must have no
//! cycle, so each module can be read knowing only the ones below it. A module names
//! another module's items by that module's path, never through a crate-root re-export
//! (`crate::Bus`): those are for the crates outside, and inside they hide the tie.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A top-level module's name and the code of its files (tests and comments left out).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs is readable");
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let line = line.trim();
        let Some(rest) = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
        else {
            continue;
        };
        let name = rest.trim_end_matches(';').to_owned();
        let mut files = Vec::new();
        let file = src.join(format!("{name}.rs"));
        if file.is_file() {
            files.push(file);
        }
        rust_files(&src.join(&name), &mut files);
        assert!(
            !files.is_empty(),
            "module `{name}` has no file under {src:?}"
        );
        let code = files
            .iter()
            .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
            .map(|f| code_of(&fs::read_to_string(f).expect("a module file is readable")))
            .collect::<Vec<_>>()
            .join("\n");
        out.insert(name, code);
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code before its first top-level `#[cfg(test)]`, without comment lines.
fn code_of(text: &str) -> String {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names that follow `crate::` in `code`, and in a `crate::{a, b::c}` group each
/// name the group opens with.
fn crate_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `glider_crate::…` and the like
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let word: String = item.trim().chars().take_while(is_ident).collect();
                if !word.is_empty() {
                    names.insert(word);
                }
            }
        } else {
            let word: String = rest.chars().take_while(is_ident).collect();
            names.insert(word);
        }
    }
    names
}

fn is_ident(c: &char) -> bool {
    c.is_alphanumeric() || *c == '_'
}

/// What is wrong with the modules under `src`: each `crate::` name that is no module
/// (a crate-root re-export), and each cycle among the modules, one line each.
fn problems(src: &Path) -> Vec<String> {
    let modules = modules(src);
    let mut problems = Vec::new();
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, code) in &modules {
        let to = edges.entry(module).or_default();
        for name in crate_names(code) {
            match modules.get_key_value(&name) {
                Some((other, _)) if other != module => {
                    to.insert(other);
                }
                Some(_) => {}
                None => problems.push(format!(
                    "`{module}` names `crate::{name}`, a crate-root re-export: name it by its module"
                )),
            }
        }
    }
    problems.extend(
        cycles(&edges)
            .into_iter()
            .map(|cycle| format!("import circle: {}", cycle.join(" -> "))),
    );
    problems
}

/// One cycle through each module that lies on one, as the path back to it.
fn cycles<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    let mut found: Vec<Vec<&str>> = Vec::new();
    for &start in edges.keys() {
        if found.iter().any(|c| c.contains(&start)) {
            continue;
        }
        // Breadth first from `start`'s neighbours back to `start`: the shortest cycle.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut frontier = vec![start];
        'search: while !frontier.is_empty() {
            let mut next = Vec::new();
            for &at in &frontier {
                for &to in edges.get(at).into_iter().flatten() {
                    if to == start {
                        let mut path = vec![at];
                        let mut back = at;
                        while back != start {
                            back = came_from[back];
                            path.push(back);
                        }
                        path.reverse();
                        path.push(start);
                        found.push(path);
                        break 'search;
                    }
                    if !came_from.contains_key(to) && to != start {
                        came_from.insert(to, at);
                        next.push(to);
                    }
                }
            }
            frontier = next;
        }
    }
    found
}

#[test]
fn the_engines_modules_form_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = problems(&src);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_circle_and_a_re_export_import_are_caught() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("a parent")).expect("a folder");
        fs::write(path, text).expect("written");
    };
    write(
        "lib.rs",
        "pub mod events;\npub mod context;\nmod pipeline;\nmod tokenizer;\npub use events::Bus;\n",
    );
    write("events.rs", "use crate::context::Capture;\n");
    write(
        "context.rs",
        "//! Names [`crate::tokenizer`] only in a comment.\nuse crate::pipeline::Door;\nfn f() { crate::Bus::default(); }\n",
    );
    write(
        "pipeline/mod.rs",
        "mod phases;\n#[cfg(test)]\nmod tests { use crate::tokenizer::x; }\n",
    );
    write(
        "pipeline/phases.rs",
        "use crate::{events::Tracker, pipeline::Job};\n",
    );
    write("tokenizer.rs", "use crate::events::Bus;\n");
    let found = problems(dir.path());
    assert_eq!(
        found,
        [
            "`context` names `crate::Bus`, a crate-root re-export: name it by its module",
            "import circle: context -> pipeline -> events -> context",
        ],
        "{found:#?}"
    );
}
