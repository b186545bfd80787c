//! The router's own cost per request, Starlark included: `cargo bench -p glider-engine
//! --bench route_cost`. Runs requests the real CLIs sent (the captures under
//! `tests/fixtures/cli`) through `decide` many times in one process and writes p50/p99
//! to `bench/results/router-<date>.md`. The decode and token estimate that precede
//! routing are timed separately, so the table shows what the rules themselves cost.

use std::time::Instant;

use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_ngl::Dialect;
use glider_test_support::captured::captured_file;
use serde_json::Value;

const ITERATIONS: usize = 3000;

const RULES: &str = r#"
def route(req):
    text = req["last_user_text"]
    if "GPU" in text or "benchmark" in text:
        return "cloud"
    if req["tokens"] > 60000:
        return "cloud"
    for tool in req["tools"]:
        if tool == "WebSearch":
            return None
    return None
"#;

fn percentile(sorted: &[u128], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index] as f64 / 1000.0
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rules.star"), RULES).expect("write rules");
    let config_path = dir.path().join("glider.yaml");
    std::fs::write(
        &config_path,
        "backends:\n\
         \x20 - {name: local, type: ollama, base_url: 'http://127.0.0.1:9', models: ['qwen2.5-coder:7b'], context_window: 32768}\n\
         \x20 - {name: claude, type: anthropic, base_url: 'http://127.0.0.1:9', api_key: k, models: ['claude-*']}\n\
         \x20 - {name: openai, type: openai, base_url: 'http://127.0.0.1:9', api_key: k, models: ['gpt-*']}\n\
         routing: {starlark: {file: rules.star}}\n",
    )
    .expect("write config");
    let config = Config::load(&config_path).expect("valid");
    let engine = Engine::new(ConfigHandle::new(config, Some(config_path)));
    assert!(engine.runtime().starlark.is_some(), "rules compiled");

    // The requests Claude Code 2.1.197 and Codex 0.171.0 really sent (docs/captured-traffic.md).
    let cases: Vec<(&str, Dialect, Value)> = [
        (
            "claude code main turn",
            "claude-code",
            "plain",
            "002-messages",
        ),
        (
            "claude code title",
            "claude-code",
            "interactive",
            "002-title",
        ),
        (
            "claude code subagent turn",
            "claude-code",
            "subagent",
            "003-messages",
        ),
        (
            "claude code compaction",
            "claude-code",
            "compact",
            "002-compact",
        ),
        ("codex main turn", "codex", "plain", "001-responses"),
        ("codex compaction", "codex", "auto-compact", "002-compact"),
    ]
    .into_iter()
    .map(|(name, cli, scenario, file)| {
        let front = if cli == "codex" {
            Dialect::OpenAiResponses
        } else {
            Dialect::Anthropic
        };
        (name, front, captured_file(cli, scenario, file).body)
    })
    .collect();
    let headers = http::HeaderMap::new();
    let mut rows = Vec::new();
    for (name, front, body) in &cases {
        let bytes = body.to_string().into_bytes();
        let (request, model, tokens) = engine.prepare(*front, &bytes).expect("decodes");
        let mut decide = Vec::with_capacity(ITERATIONS);
        let mut prepare = Vec::with_capacity(ITERATIONS);
        for _ in 0..ITERATIONS {
            let start = Instant::now();
            let decision = engine
                .decide(*front, &request, &headers, &model, tokens, true)
                .expect("routes");
            decide.push(start.elapsed().as_nanos());
            std::hint::black_box(decision);
            let start = Instant::now();
            std::hint::black_box(engine.prepare(*front, &bytes).expect("decodes"));
            prepare.push(start.elapsed().as_nanos());
        }
        decide.sort_unstable();
        prepare.sort_unstable();
        let decision = engine
            .decide(*front, &request, &headers, &model, tokens, false)
            .expect("routes");
        rows.push(format!(
            "| {name} | {} KB | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            bytes.len() / 1024,
            decision.rule,
            percentile(&decide, 0.5),
            percentile(&decide, 0.99),
            percentile(&prepare, 0.5),
            percentile(&prepare, 0.99),
        ));
    }
    let date = std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let report = format!(
        "# Route decision cost — {date}\n\n\
         Machine: {cores} cores, {cpu}. `cargo bench -p glider-engine --bench route_cost` ({ITERATIONS} iterations per row, one process).\n\n\
         `decide` asks every rule (explicit, sticky, classifier, Starlark with a small script, token limit — the\n\
         worst case, as `glider route explain` does) and resolves candidates; `prepare` is decoding the body, aliasing and the token estimate that precede it. Times in µs.\n\
         Target: decide ≤ 50 µs at p99.\n\n\
         | request | body | rule | decide p50 | decide p99 | prepare p50 | prepare p99 |\n\
         |---|---|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/results")
        .join(format!("router-{date}.md"));
    std::fs::create_dir_all(out.parent().expect("parent")).expect("results dir");
    std::fs::write(&out, &report).expect("write results");
    println!("{report}\nwritten to {}", out.display());
}
