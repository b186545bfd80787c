//! Embeds the project's user docs (`docs/*.md` and `README.md`) in the binary: writes a
//! table of `include_str!`s to `OUT_DIR`, and reruns when a doc is added or edited.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("../..");
    let docs = root.join("docs");
    println!("cargo:rerun-if-changed={}", docs.display());
    println!(
        "cargo:rerun-if-changed={}",
        root.join("README.md").display()
    );
    let mut pages: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&docs)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .filter_map(|p| {
                    let stem = p.file_stem()?.to_str()?.to_owned();
                    Some((stem, p))
                })
                .collect()
        })
        .unwrap_or_default();
    pages.sort();
    let mut out = String::from(
        "/// (page name, markdown) for every embedded doc.\npub static PAGES: &[(&str, &str)] = &[\n",
    );
    let readme = root.join("README.md");
    if readme.exists() {
        let _ = writeln!(
            out,
            "    (\"readme\", include_str!({:?})),",
            readme.canonicalize().unwrap_or(readme.clone())
        );
    }
    for (name, path) in pages {
        let path = path.canonicalize().unwrap_or(path);
        let _ = writeln!(out, "    ({name:?}, include_str!({path:?})),");
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("docs.rs");
    std::fs::write(dest, out).expect("write the docs table");
}
