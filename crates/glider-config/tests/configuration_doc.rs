//! `docs/configuration.md` held to the schema: every key the schema has is a row of one
//! of its `| key | default | reload | meaning |` tables, every row names a key the
//! schema has, each row's default is the value serde gives the key when the file leaves
//! it out (or "required" when it cannot be left out), and each row's reload class is
//! what [`glider_config::reload`] applies (`hot`, `restart`, or `mixed` for a section).
//!
//! The keys are found by serializing a sample config that fills every collection with
//! one entry (so a backend's, an MCP server's or a plugin's keys show), and a key's
//! default by removing it from that sample and reading it back. A doc key may write
//! `<cli>` (any one segment) where several keys share a row, and `section.*` for a
//! pointer to a section's own table (which then counts for nothing but its reload
//! class).

use std::collections::BTreeMap;

use glider_config::{Config, is_restart_only};
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/configuration.md");

/// A config with one entry in every collection whose entries have keys of their own.
/// Maps whose values are plain data (aliases, headers, environments) stay empty: they
/// are one key each.
const SAMPLE: &str = r#"
backends:
  - name: b
    type: vllm
    base_url: "http://127.0.0.1:1/v1"
    api_key: "k"
    models: [{name: m}]
    replicas: ["http://127.0.0.1:2/v1"]
fit: {core_tools: {}}
mcp:
  servers:
    s: {url: "http://127.0.0.1:3/mcp", oauth: {}}
plugins:
  - {name: p, command: [p]}
vram:
  models: {m: {}}
  sleep: {b: {level: 1}}
fan_out:
  routes: {explicit: {}}
"#;

/// Maps whose entries are tables of keys, and the name the docs give an entry.
const NAMED_ENTRIES: &[(&str, &str)] = &[
    ("mcp.servers", "<name>"),
    ("vram.models", "<name>"),
    ("vram.sleep", "<backend>"),
    ("fan_out.routes", "<route>"),
];

/// One step into the sample's JSON.
#[derive(Clone)]
enum Step {
    Key(String),
    First,
}

/// One schema key: where it is in the sample, and whether it has keys below it.
struct Key {
    steps: Vec<Step>,
    leaf: bool,
}

fn sample() -> Value {
    let config: Config = serde_saphyr::from_str(SAMPLE).expect("the sample parses");
    assert_eq!(
        config.problems(),
        Vec::<String>::new(),
        "the sample is valid"
    );
    serde_json::to_value(&config).expect("serializes")
}

/// Every key under `value`, by its doc name (`backends[].fit.max_tools`).
fn walk(value: &Value, name: &str, steps: &[Step], keys: &mut BTreeMap<String, Key>) {
    let mut node = |leaf| {
        if !name.is_empty() {
            let steps = steps.to_vec();
            keys.insert(name.to_owned(), Key { steps, leaf });
        }
    };
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            node(false);
            let entry = NAMED_ENTRIES.iter().find(|(map, _)| *map == name);
            for (field, child) in fields {
                let segment = entry.map_or(field.as_str(), |(_, placeholder)| placeholder);
                let child_name = match name {
                    "" => segment.to_owned(),
                    _ => format!("{name}.{segment}"),
                };
                let mut child_steps = steps.to_vec();
                child_steps.push(Step::Key(field.clone()));
                walk(child, &child_name, &child_steps, keys);
            }
        }
        Value::Array(items) if items.first().is_some_and(Value::is_object) => {
            node(false);
            let mut child_steps = steps.to_vec();
            child_steps.push(Step::First);
            walk(&items[0], &format!("{name}[]"), &child_steps, keys);
        }
        _ => node(true),
    }
}

fn at<'v>(value: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    steps.iter().try_fold(value, |value, step| match step {
        Step::Key(key) => value.get(key),
        Step::First => value.get(0),
    })
}

fn remove(value: &mut Value, steps: &[Step]) {
    let (last, parent) = steps.split_last().expect("a key has a path");
    let parent = parent.iter().fold(value, |value, step| match step {
        Step::Key(key) => &mut value[key.as_str()],
        Step::First => &mut value[0],
    });
    if let (Step::Key(key), Value::Object(fields)) = (last, parent) {
        fields.remove(key);
    }
}

/// What leaving a key out of the file gives.
enum LeftOut {
    /// Serde refuses the file.
    Required,
    /// The file loads but does not validate.
    Invalid,
    Value(Value),
}

fn default_of(sample: &Value, key: &Key) -> LeftOut {
    let mut without = sample.clone();
    remove(&mut without, &key.steps);
    let Ok(config) = serde_json::from_value::<Config>(without) else {
        return LeftOut::Required;
    };
    if !config.problems().is_empty() {
        return LeftOut::Invalid;
    }
    let back = serde_json::to_value(&config).expect("serializes");
    LeftOut::Value(at(&back, &key.steps).cloned().unwrap_or(Value::Null))
}

/// One row of a key table.
struct Row {
    line: usize,
    keys: Vec<String>,
    default: String,
    reload: String,
}

fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The rows of every table whose header is `| key | default | reload | meaning |`.
fn rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for (i, line) in doc.lines().enumerate() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.starts_with('|') {
            in_table = false;
        } else if cells[..] == ["key", "default", "reload", "meaning"] {
            in_table = true;
        } else if in_table && !cells[0].starts_with("---") {
            assert_eq!(cells.len(), 4, "line {}: four cells: {line}", i + 1);
            rows.push(Row {
                line: i + 1,
                keys: backticked(cells[0])
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                default: cells[1].to_owned(),
                reload: cells[2].split_whitespace().next().unwrap_or("").to_owned(),
            });
        }
    }
    rows
}

/// Whether the doc's key names the schema's: segment by segment, `<…>` in the doc
/// standing for any one segment.
fn names(doc_key: &str, key: &str) -> bool {
    let (doc, schema): (Vec<&str>, Vec<&str>) =
        (doc_key.split('.').collect(), key.split('.').collect());
    doc.len() == schema.len()
        && doc
            .iter()
            .zip(&schema)
            .all(|(d, s)| d == s || (d.starts_with('<') && d.ends_with('>')))
}

/// Whether a doc value (YAML as written in backticks) is `value`.
fn same(written: &str, value: &Value) -> bool {
    match value {
        Value::String(text) => written == text,
        Value::Bool(flag) => written == flag.to_string(),
        Value::Number(number) => written.parse::<f64>().ok() == number.as_f64(),
        _ => serde_saphyr::from_str::<Value>(written).is_ok_and(|parsed| equal(&parsed, value)),
    }
}

/// JSON equality with numbers compared by value (`1` and `1.0` are the same).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

fn class<'k>(mut leaves: impl Iterator<Item = &'k String>) -> &'static str {
    let first = leaves.next().map(|key| is_restart_only(key));
    let mixed = leaves.any(|key| Some(is_restart_only(key)) != first);
    match (first, mixed) {
        (_, true) => "mixed",
        (Some(true), false) => "restart",
        _ => "hot",
    }
}

/// What is wrong with `doc` against the schema, one line each.
fn problems(doc: &str) -> Vec<String> {
    let sample = sample();
    let mut keys = BTreeMap::new();
    walk(&sample, "", &[], &mut keys);
    let rows = rows(doc);
    let mut problems = Vec::new();
    let mut listed = std::collections::BTreeSet::new();
    for row in &rows {
        for doc_key in &row.keys {
            let at = format!("line {}: `{doc_key}`", row.line);
            let (matched, pointer): (Vec<&String>, bool) = match doc_key.strip_suffix(".*") {
                Some(section) => {
                    let under = keys
                        .iter()
                        .filter(|(k, key)| key.leaf && k.starts_with(&format!("{section}.")));
                    (under.map(|(k, _)| k).collect(), true)
                }
                None => (keys.keys().filter(|k| names(doc_key, k)).collect(), false),
            };
            if matched.is_empty() {
                problems.push(format!("{at}: no such key in the schema"));
                continue;
            }
            let leaves = |k: &&String| {
                keys.iter()
                    .filter(|(other, key)| {
                        key.leaf
                            && (other == k
                                || other.starts_with(&format!("{k}."))
                                || other.starts_with(&format!("{k}[]")))
                    })
                    .map(|(other, _)| other)
                    .collect::<Vec<_>>()
            };
            let under: Vec<&String> = matched.iter().flat_map(leaves).collect();
            let expected = class(under.iter().copied());
            if row.reload != expected {
                problems.push(format!(
                    "{at}: reload says {:?}, the schema {expected:?}",
                    row.reload
                ));
            }
            if pointer {
                continue;
            }
            for key in matched.iter().filter(|k| keys[**k].leaf) {
                listed.insert((*key).clone());
                let says_required = row.default.starts_with("required");
                match default_of(&sample, &keys[*key]) {
                    LeftOut::Required | LeftOut::Invalid if says_required => {}
                    LeftOut::Required => {
                        problems.push(format!("{at}: `{key}` is required; the default says {:?}", row.default));
                    }
                    _ if says_required => {
                        problems.push(format!("{at}: `{key}` may be left out, yet the default says required"));
                    }
                    LeftOut::Invalid | LeftOut::Value(Value::Null) => {}
                    LeftOut::Value(value) => match backticked(&row.default).first() {
                        Some(written) if same(written, &value) => {}
                        Some(written) => problems.push(format!(
                            "{at}: `{key}` defaults to {value}, the page says `{written}`"
                        )),
                        None => problems.push(format!(
                            "{at}: `{key}` defaults to {value}, the page gives no value in backticks"
                        )),
                    },
                }
            }
        }
    }
    for (key, _) in keys.iter().filter(|(_, key)| key.leaf) {
        if !listed.contains(key) {
            problems.push(format!("`{key}` ({}) has no row", class([key].into_iter())));
        }
    }
    problems
}

#[test]
fn the_configuration_page_lists_every_key_with_its_default_and_reload_class() {
    let problems = problems(DOC);
    assert!(
        problems.is_empty(),
        "docs/configuration.md disagrees with the schema:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_missing_key_a_wrong_default_and_a_wrong_reload_class_are_caught() {
    let doc = "| key | default | reload | meaning |\n|---|---|---|---|\n\
               | `server.bind` | `0.0.0.0` | restart | x |\n\
               | `server.proxy_port` | `8080` | hot | x |\n\
               | `server.nonesuch` | none | hot | x |\n\
               | `backends[].name` | none | hot | x |\n";
    let problems = problems(doc);
    let says = |text: &str| problems.iter().any(|p| p.contains(text));
    assert!(
        says("`server.bind` defaults to \"127.0.0.1\""),
        "{problems:#?}"
    );
    assert!(
        says("reload says \"hot\", the schema \"restart\""),
        "{problems:#?}"
    );
    assert!(says("`server.nonesuch`: no such key"), "{problems:#?}");
    assert!(says("`backends[].name` is required"), "{problems:#?}");
    assert!(
        says("`routing.sticky.enabled` (hot) has no row"),
        "{problems:#?}"
    );
    assert!(
        says("`server.dashboard_port` (restart) has no row"),
        "{problems:#?}"
    );
}
