//! Requests the real coding CLIs sent, captured by `scripts/capture-cli-traffic` into
//! `tests/fixtures/cli/<cli>-<version>/<scenario>/NNN-<kind>.json` (see
//! docs/captured-traffic.md): the method, path, headers and JSON body of each request,
//! in the order the CLI sent them, with secrets redacted (`REDACTED`), the working
//! directory written `/workspace` and the HOME `/home/user`. `reply` is what the
//! scripted model answered (a summary). Every test or benchmark that claims a CLI's
//! request shape uses these; a variation the captures cannot give is derived from a
//! captured body, and says so.
//!
//! ```no_run
//! let loop_ = glider_test_support::captured::captured("claude-code", "tool-loop");
//! let last = loop_.iter().rfind(|r| r.kind == "messages").expect("a main turn");
//! assert!(last.body["tools"].is_array());
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One captured request.
#[derive(Debug, Clone)]
pub struct CapturedRequest {
    /// The file it was read from, e.g. `003-messages.json`.
    pub file: String,
    /// What the capture script called it (the file name's tail): `messages`,
    /// `compact`, `count-tokens`, `probe` (Claude Code); `responses`, `compact` (Codex).
    pub kind: String,
    pub method: String,
    /// Path and query as sent, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Value::Null` for a request without one).
    pub body: Value,
    /// The scripted model's answer, summarised (`{"text": …}` or `{"tool_calls": […]}`).
    pub reply: Value,
}

impl CapturedRequest {
    /// A header's value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The body as bytes, as a test would send it.
    pub fn body_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body).expect("a JSON value serialises")
    }
}

/// `tests/fixtures/cli`, where the captures live.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/cli")
}

/// Every captured CLI directory (`claude-code-2.1.197`, `codex-0.171.0`, …), sorted.
pub fn clis() -> Vec<String> {
    subdirectories(&root())
}

/// The names of `dir`'s subdirectories, sorted.
fn subdirectories(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = read_dir(dir)
        .into_iter()
        .filter(|p| p.is_dir())
        .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
        .collect();
    out.sort();
    out
}

/// The directory for `cli`: an exact directory name (`claude-code-2.1.197`), or a CLI
/// name (`claude-code`, `codex`) for its newest captured version.
pub fn cli_dir(cli: &str) -> PathBuf {
    let exact = root().join(cli);
    if exact.is_dir() {
        return exact;
    }
    let prefix = format!("{cli}-");
    let newest = clis()
        .into_iter()
        .filter_map(|d| {
            let version = d.strip_prefix(&prefix)?;
            version
                .starts_with(|c: char| c.is_ascii_digit())
                .then(|| (version_key(version), d.clone()))
        })
        .max_by(|a, b| a.0.cmp(&b.0));
    match newest {
        Some((_, dir)) => root().join(dir),
        None => panic!("no capture of {cli} under {}", root().display()),
    }
}

fn version_key(version: &str) -> Vec<u64> {
    version
        .split(['.', '-'])
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

/// The scenarios captured for `cli` (see [`cli_dir`]), sorted.
pub fn scenarios(cli: &str) -> Vec<String> {
    subdirectories(&cli_dir(cli))
}

/// Every request `cli` (see [`cli_dir`]) sent in `scenario`, in order. Panics when the
/// scenario is missing or a file does not parse: a test asking for a capture needs it.
pub fn captured(cli: &str, scenario: &str) -> Vec<CapturedRequest> {
    let dir = cli_dir(cli).join(scenario);
    assert!(dir.is_dir(), "no captured scenario {}", dir.display());
    let mut files: Vec<PathBuf> = read_dir(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files.iter().map(|path| load(path)).collect()
}

/// The requests of `scenario` whose kind is `kind` (`messages`, `compact`, …).
pub fn captured_kind(cli: &str, scenario: &str, kind: &str) -> Vec<CapturedRequest> {
    captured(cli, scenario)
        .into_iter()
        .filter(|r| r.kind == kind)
        .collect()
}

/// One request of `scenario` by its file name without `.json` (`"005-compact"`), for a
/// test that needs that very request. Panics when it is missing.
pub fn captured_file(cli: &str, scenario: &str, stem: &str) -> CapturedRequest {
    load(&cli_dir(cli).join(scenario).join(format!("{stem}.json")))
}

/// One capture file, parsed.
pub fn load(path: &Path) -> CapturedRequest {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    let file = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let kind = file
        .trim_end_matches(".json")
        .split_once('-')
        .map(|(_, kind)| kind.to_owned())
        .unwrap_or_default();
    let string = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{}: no string `{key}`", path.display()))
            .to_owned()
    };
    let headers = value
        .get("headers")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("{}: no `headers` object", path.display()))
        .iter()
        .map(|(k, v)| {
            let v = v
                .as_str()
                .unwrap_or_else(|| panic!("{}: header {k} is not a string", path.display()));
            (k.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    CapturedRequest {
        method: string("method"),
        path: string("path"),
        headers,
        body: value.get("body").cloned().unwrap_or(Value::Null),
        reply: value.get("reply").cloned().unwrap_or(Value::Null),
        file,
        kind,
    }
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scenarios docs/captured-traffic.md describes.
    const CLAUDE_CODE_SCENARIOS: &[&str] = &[
        "auto-compact",
        "cloud-flag",
        "compact",
        "image",
        "interactive",
        "local-flag",
        "local-flag-refused",
        "plain",
        "plan-mode",
        "resume",
        "subagent",
        "tool-loop",
    ];
    const CODEX_SCENARIOS: &[&str] = &["auto-compact", "plain", "resume", "shell"];

    fn text_of(content: &Value) -> String {
        match content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    fn check_claude_code(r: &CapturedRequest, at: &str) {
        if r.kind == "probe" {
            assert_eq!(r.method, "HEAD", "{at}");
            return;
        }
        assert_eq!(r.method, "POST", "{at}");
        assert!(r.path.starts_with("/v1/messages"), "{at}: {}", r.path);
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"), "{at}");
        assert!(
            r.header("x-claude-code-session-id").is_some(),
            "{at}: no session header"
        );
        assert_eq!(r.header("x-api-key"), Some("REDACTED"), "{at}");
        assert!(
            r.header("user-agent")
                .is_some_and(|ua| ua.starts_with("claude-cli/")),
            "{at}"
        );
        if r.kind == "count-tokens" {
            return;
        }
        let system = r.body["system"].as_array().expect("system blocks");
        assert!(
            system
                .first()
                .and_then(|b| b["text"].as_str())
                .is_some_and(|t| t.starts_with("x-anthropic-billing-header:")),
            "{at}: the billing block first"
        );
        let messages = r.body["messages"].as_array().expect("messages");
        assert!(!messages.is_empty(), "{at}");
        assert!(r.body["model"].is_string(), "{at}");
        if r.kind == "messages" {
            let tools = r.body["tools"].as_array().expect("tools");
            assert!(tools.iter().any(|t| t["name"] == "Bash"), "{at}");
            assert_eq!(r.body["stream"], true, "{at}");
        }
        if r.kind == "compact" {
            let last = messages.last().expect("a last message");
            assert!(
                text_of(&last["content"]).contains("summary"),
                "{at}: the compaction instruction last"
            );
        }
    }

    fn check_codex(r: &CapturedRequest, at: &str) {
        assert_eq!(r.method, "POST", "{at}");
        assert_eq!(r.path, "/v1/responses", "{at}");
        assert!(r.header("session-id").is_some(), "{at}: no session header");
        assert_eq!(r.header("authorization"), Some("Bearer REDACTED"), "{at}");
        assert!(
            r.header("user-agent")
                .is_some_and(|ua| ua.starts_with("codex_exec/")),
            "{at}"
        );
        let input = r.body["input"].as_array().expect("an input array");
        assert!(
            input.iter().any(|i| i["role"] == "developer"),
            "{at}: developer messages"
        );
        let tools = r.body["tools"].as_array().expect("tools");
        match r.kind.as_str() {
            "responses" => assert!(tools.iter().any(|t| t["name"] == "exec_command"), "{at}"),
            "compact" => {
                assert!(tools.is_empty(), "{at}: compaction carries no tools");
                let last = input.last().expect("a last item");
                assert!(
                    text_of(&last["content"]).contains("CONTEXT CHECKPOINT COMPACTION"),
                    "{at}"
                );
            }
            other => panic!("{at}: unexpected kind {other}"),
        }
    }

    #[test]
    fn every_capture_parses_and_carries_its_clis_markers() {
        let clis = clis();
        assert!(
            clis.iter().any(|c| c.starts_with("claude-code-"))
                && clis.iter().any(|c| c.starts_with("codex-")),
            "{clis:?}"
        );
        let mut total = 0;
        for cli in &clis {
            for scenario in scenarios(cli) {
                let requests = captured(cli, &scenario);
                for r in &requests {
                    let at = format!("{cli}/{scenario}/{}", r.file);
                    let text = serde_json::to_string(&r.body).expect("serialises");
                    assert!(
                        !text.contains("glider-capture-") && !text.contains("test-key"),
                        "{at}: a sandbox path or the key leaked"
                    );
                    if cli.starts_with("claude-code-") {
                        check_claude_code(r, &at);
                    } else if cli.starts_with("codex-") {
                        check_codex(r, &at);
                    }
                    total += 1;
                }
            }
        }
        assert!(total > 20, "{total} captured requests");
    }

    #[test]
    fn the_documented_scenarios_are_captured_with_their_shapes() {
        assert_eq!(scenarios("claude-code"), CLAUDE_CODE_SCENARIOS);
        assert_eq!(scenarios("codex"), CODEX_SCENARIOS);

        // The tool loop sends each tool's result back: Read, Edit, Bash.
        let turns = captured_kind("claude-code", "tool-loop", "messages");
        let last = turns.last().expect("turns");
        let results = last.body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
            .count();
        assert_eq!(results, 3, "{}", last.file);

        // Compaction: /compact and the automatic one each send one compaction request.
        assert_eq!(captured_kind("claude-code", "compact", "compact").len(), 1);
        assert_eq!(
            captured_kind("claude-code", "auto-compact", "compact").len(),
            1
        );
        assert_eq!(captured_kind("codex", "auto-compact", "compact").len(), 1);

        // The image goes back to the model as an image block in the tool result.
        let image = captured_kind("claude-code", "image", "messages");
        let text = serde_json::to_string(&image.last().expect("turns").body).expect("serialises");
        assert!(
            text.contains("\"media_type\":\"image/png\""),
            "no image block"
        );

        // Interactive mode names the session: a title call without tools, a JSON schema.
        let title = captured_kind("claude-code", "interactive", "title");
        let title = title.first().expect("a title call");
        assert!(
            title.body["tools"].as_array().is_none_or(Vec::is_empty),
            "{}",
            title.file
        );
        assert!(title.body["output_config"]["format"]["schema"]["properties"]["title"].is_object());

        // An unknown slash command never reaches the model.
        assert!(
            captured("claude-code", "local-flag-refused")
                .iter()
                .all(|r| r.kind == "probe")
        );
    }

    #[test]
    fn a_cli_name_picks_its_newest_version() {
        assert_eq!(version_key("2.1.197"), vec![2, 1, 197]);
        assert!(version_key("0.171.0") > version_key("0.99.3"));
        let dir = cli_dir("claude-code");
        let name = dir.file_name().and_then(|n| n.to_str()).expect("a name");
        assert!(name.starts_with("claude-code-") && dir.is_dir(), "{name}");
        assert_eq!(cli_dir(name), dir, "an exact directory name");
    }
}
