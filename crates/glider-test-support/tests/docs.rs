//! The workspace's own documents held to the code: the README's spec-package table
//! against the `//! … (spec package `x`)` line each module opens with, the README's
//! layout block against the crates in `crates/`, and every `crates/…` path that
//! `docs/architecture.md` and `STYLE.md` name against the files there. It only reads
//! files; it lives here because this crate builds fast.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The crates of the workspace: the folders of `crates/` with a `Cargo.toml`.
fn crates(root: &Path) -> BTreeSet<String> {
    std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file (`glider_engine::pipeline::fan_out`), or `None`
/// for a file that is no module of its crate's library or binary (`src/bin/`).
fn module_path(krate: &str, src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let mut segments: Vec<String> = relative
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if segments.first().is_some_and(|s| s == "bin") {
        return None;
    }
    let last = segments.pop()?;
    match last.as_str() {
        "lib.rs" | "main.rs" if segments.is_empty() => {}
        "mod.rs" => {}
        _ => segments.push(last.strip_suffix(".rs")?.to_owned()),
    }
    let mut path = krate.replace('-', "_");
    for segment in segments {
        path.push_str("::");
        path.push_str(&segment);
    }
    Some(path)
}

/// The `//!` lines a file opens with, joined.
fn module_doc(text: &str) -> String {
    text.lines()
        .map_while(|line| line.strip_prefix("//!"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn is_package_name(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_lowercase())
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The spec packages a module doc says it implements: the lowercase names in backticks
/// from "spec package(s)" to the closing parenthesis.
fn claimed_packages(doc: &str) -> Vec<String> {
    let mut packages = Vec::new();
    let mut rest = doc;
    while let Some(at) = rest.find("spec package") {
        let claim = &rest[at..];
        let end = claim.find(')').unwrap_or(claim.len());
        packages.extend(
            backticked(&claim[..end])
                .into_iter()
                .filter(|word| is_package_name(word))
                .map(str::to_owned),
        );
        rest = &claim[end..];
    }
    packages
}

/// Spec package → the modules whose doc claims it.
fn claims(root: &Path) -> BTreeMap<String, Vec<String>> {
    let mut claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for krate in crates(root) {
        let src = root.join("crates").join(&krate).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        for file in files {
            let Some(module) = module_path(&krate, &src, &file) else {
                continue;
            };
            for package in claimed_packages(&module_doc(&read(&file))) {
                claims.entry(package).or_default().push(module.clone());
            }
        }
    }
    claims
}

/// Whether the module `path` (`glider_engine::pipeline::fan_out`) is a file of the
/// workspace. Trailing segments that name items (`CamelCase`) are dropped first.
fn module_exists(root: &Path, path: &str) -> bool {
    let mut segments: Vec<&str> = path.split("::").collect();
    while segments
        .last()
        .is_some_and(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
    {
        segments.pop();
    }
    let Some((krate, modules)) = segments.split_first() else {
        return false;
    };
    let src = root
        .join("crates")
        .join(krate.replace('_', "-"))
        .join("src");
    if modules.is_empty() {
        return src.join("lib.rs").is_file() || src.join("main.rs").is_file();
    }
    let dir = modules.iter().fold(src, |dir, m| dir.join(m));
    dir.with_extension("rs").is_file() || dir.join("mod.rs").is_file()
}

/// Whether `a` and `b` are the same module or one lies inside the other.
fn related(a: &str, b: &str) -> bool {
    let inside = |inner: &str, outer: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with("::"))
    };
    inside(a, b) || inside(b, a)
}

/// One row of the README's spec-package table.
struct SpecRow {
    line: usize,
    /// The package, for a row whose first cell starts with one in backticks.
    package: Option<String>,
    /// The cell says "not built yet".
    unbuilt: bool,
    /// The modules the cell names (`glider_x::…`, `glider-x`).
    modules: Vec<String>,
    text: String,
}

fn spec_rows(readme: &str) -> Vec<SpecRow> {
    let start = readme
        .find("## Where each spec package lives")
        .expect("README has the spec-package section");
    let offset = readme[..start].lines().count();
    let mut rows = Vec::new();
    for (i, line) in readme[start..].lines().enumerate().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if !line.starts_with('|') || cells.len() < 2 {
            continue;
        }
        let (first, second) = (cells[0].trim(), cells[1..].join("|"));
        if first == "spec package" || first.starts_with("---") {
            continue;
        }
        let package = first
            .starts_with('`')
            .then(|| backticked(first).first().map(|p| (*p).to_owned()))
            .flatten();
        let modules = backticked(&second)
            .into_iter()
            .filter(|word| word.starts_with("glider_") || word.starts_with("glider-"))
            .map(|word| word.replace('-', "_"))
            .collect();
        rows.push(SpecRow {
            line: offset + i + 1,
            package,
            unbuilt: second.trim().starts_with("not built yet"),
            modules,
            text: second.trim().to_owned(),
        });
    }
    rows
}

/// What the README's spec-package table gets wrong against `claims`, one line each.
fn spec_table_problems(
    root: &Path,
    readme: &str,
    claims: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let rows = spec_rows(readme);
    for row in &rows {
        let at = format!("README.md line {}", row.line);
        for module in &row.modules {
            if !module_exists(root, module) {
                problems.push(format!("{at}: `{module}` is no module of the workspace"));
            }
        }
        let Some(package) = &row.package else {
            continue;
        };
        let claimants = claims.get(package).map(Vec::as_slice).unwrap_or_default();
        if row.unbuilt {
            if !claimants.is_empty() || !row.modules.is_empty() {
                problems.push(format!(
                    "{at}: `{package}` says not built yet, but {claimants:?} say they implement it"
                ));
            }
            continue;
        }
        if row.text.contains("not built yet") {
            problems.push(format!(
                "{at}: `{package}` is partly \"not built yet\": say what is built, or give the rest a row"
            ));
        }
        if row.modules.is_empty() {
            problems.push(format!("{at}: `{package}` names no module"));
        }
        if claimants.is_empty() {
            problems.push(format!(
                "{at}: no module's `//!` doc says it implements spec package `{package}`"
            ));
        }
    }
    for (package, modules) in claims {
        let row = rows.iter().find(|r| r.package.as_deref() == Some(package));
        for module in modules {
            match row {
                None => problems.push(format!(
                    "`{module}` says spec package `{package}`, which has no README row"
                )),
                Some(row) if !row.modules.iter().any(|named| related(named, module)) => {
                    problems.push(format!(
                        "README.md line {}: `{module}` says it implements `{package}`, but the row does not name it",
                        row.line
                    ));
                }
                Some(_) => {}
            }
        }
    }
    problems
}

/// The crates the README's layout block lists.
fn layout_crates(readme: &str) -> BTreeSet<String> {
    let start = readme
        .find("## Layout")
        .expect("README has a layout section");
    let block = readme[start..].split("```").nth(1).unwrap_or_default();
    block
        .lines()
        .filter_map(|line| line.strip_prefix("crates/"))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Every `crates/…` path a document names.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for (at, _) in text.match_indices("crates/") {
        if text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '/' || c == '-') {
            continue;
        }
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "/_-.".contains(*c))
            .collect();
        paths.insert(path.trim_end_matches('.').to_owned());
    }
    paths
}

/// The workspace crates `krate`'s `Cargo.toml` lists under `[dependencies]`.
fn workspace_dependencies(root: &Path, krate: &str) -> BTreeSet<String> {
    let manifest = read(&root.join("crates").join(krate).join("Cargo.toml"));
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[dependencies]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split(['.', ' ', '=']).next())
        .filter(|name| name.starts_with("glider"))
        .map(str::to_owned)
        .collect()
}

/// What the crate list of `docs/architecture.md` gets wrong: each crate has one
/// `- **`name`** — … Builds on `a`, `b`.` item (or "Builds on nothing in the
/// workspace"), whose list is its `Cargo.toml`'s and names only crates listed above it.
fn crate_list_problems(root: &Path, doc: &str) -> Vec<String> {
    let mut items: Vec<(String, String)> = Vec::new();
    let mut open = false;
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("- **`") {
            let name = rest.split('`').next().unwrap_or_default().to_owned();
            items.push((name, line.to_owned()));
            open = true;
        } else if let (true, Some((_, text))) = (open && line.starts_with("  "), items.last_mut()) {
            text.push(' ');
            text.push_str(line.trim());
        } else {
            open = false;
        }
    }
    let mut problems = Vec::new();
    let mut above = BTreeSet::new();
    for (name, text) in &items {
        let Some((_, builds_on)) = text.split_once("Builds on ") else {
            problems.push(format!("`{name}`: no \"Builds on\""));
            continue;
        };
        let said: BTreeSet<String> = if builds_on.starts_with("nothing") {
            BTreeSet::new()
        } else {
            backticked(builds_on)
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        if !root.join("crates").join(name).join("Cargo.toml").is_file() {
            problems.push(format!("`{name}` is not a crate in crates/"));
        } else {
            let real = workspace_dependencies(root, name);
            if said != real {
                problems.push(format!(
                    "`{name}` builds on {real:?}, the page says {said:?}"
                ));
            }
        }
        let below: Vec<_> = said.difference(&above).collect();
        if !below.is_empty() {
            problems.push(format!("`{name}` builds on {below:?}, listed after it"));
        }
        above.insert(name.clone());
    }
    for krate in crates(root).difference(&above) {
        problems.push(format!("`{krate}` has no item in the crate list"));
    }
    problems
}

#[test]
fn the_architecture_crate_list_is_every_crate_with_its_dependencies() {
    let root = root();
    let problems = crate_list_problems(&root, &read(&root.join("docs/architecture.md")));
    assert!(
        problems.is_empty(),
        "docs/architecture.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_readme_spec_table_agrees_with_the_module_docs() {
    let root = root();
    let problems = spec_table_problems(&root, &read(&root.join("README.md")), &claims(&root));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_layout_lists_every_crate() {
    let root = root();
    let (listed, present) = (layout_crates(&read(&root.join("README.md"))), crates(&root));
    let missing: Vec<_> = present.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&present).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's layout block: missing {missing:?}, not crates {stale:?}"
    );
}

#[test]
fn every_crates_path_in_architecture_and_style_exists() {
    let root = root();
    for doc in ["docs/architecture.md", "STYLE.md"] {
        let paths = crate_paths(&read(&root.join(doc)));
        assert!(!paths.is_empty(), "{doc} names no crates/ path");
        let missing: Vec<_> = paths.iter().filter(|p| !root.join(p).exists()).collect();
        assert!(
            missing.is_empty(),
            "{doc} names paths that do not exist: {missing:?}"
        );
    }
}

#[test]
fn a_disagreeing_row_a_missing_module_and_a_missing_path_are_caught() {
    let root = root();
    let readme = "## Where each spec package lives\n\n\
                  | spec package | in this workspace |\n|---|---|\n\
                  | `safego` | not built yet |\n\
                  | `vram` | `glider_sys::nonesuch` |\n\
                  | `orchestrator` | `glider_engine::pipeline`; VRAM control: not built yet |\n\
                  | `nonesuch` | `glider_sys` |\n";
    let problems = spec_table_problems(&root, readme, &claims(&root));
    let says = |text: &str| problems.iter().any(|p| p.contains(text));
    assert!(
        says("`safego` says not built yet, but [\"glider_sys\", \"glider_sys::safego\"]"),
        "{problems:#?}"
    );
    assert!(says("`glider_sys::nonesuch` is no module"), "{problems:#?}");
    assert!(
        says("`glider_vram` says it implements `vram`, but the row does not name it"),
        "{problems:#?}"
    );
    assert!(
        says("`orchestrator` is partly \"not built yet\""),
        "{problems:#?}"
    );
    assert!(
        says("no module's `//!` doc says it implements spec package `nonesuch`"),
        "{problems:#?}"
    );
    assert!(
        says("`glider_mcp` says spec package `mcp`, which has no README row"),
        "{problems:#?}"
    );

    assert_eq!(
        crate_paths("see `crates/glider-engine/src/nonesuch.rs`. And crates/glider/."),
        BTreeSet::from([
            "crates/glider-engine/src/nonesuch.rs".to_owned(),
            "crates/glider/".to_owned()
        ])
    );
    assert!(!root.join("crates/glider-engine/src/nonesuch.rs").exists());
    let list = "- **`glider-ngl`** — x. Builds on nothing in the workspace.\n\
                - **`glider-dialects`** — y. Builds on\n  `glider-ngl`, `glider-sys`.\n\
                - **`glider-sys`** — z. Builds on nothing in the workspace.\n";
    let problems = crate_list_problems(&root, list);
    let says = |text: &str| problems.iter().any(|p| p.contains(text));
    assert!(
        says("`glider-dialects` builds on {\"glider-ngl\"}, the page says"),
        "{problems:#?}"
    );
    assert!(
        says("`glider-dialects` builds on [\"glider-sys\"], listed after it"),
        "{problems:#?}"
    );
    assert!(says("`glider-engine` has no item"), "{problems:#?}");

    assert_eq!(
        layout_crates("## Layout\n\n```\ncrates/glider-ngl   x\nbench   y\n```\n"),
        BTreeSet::from(["glider-ngl".to_owned()])
    );
}
