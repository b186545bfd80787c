//! `glider-hotpath`: times Glider's own per-request work in-process, without sockets —
//! codec decode and encode of each request body per dialect (against a plain
//! `serde_json` parse of the same bytes), the token estimate (byte ratio and tiktoken),
//! the route decision, and the whole `prepare` + `decide` a request pays before its
//! first upstream byte. Reads the bodies `bench/bodies.py` writes.
//!
//! ```text
//! glider-hotpath --bodies DIR [--iterations N]    # prints BENCH_JSON {...}
//! ```

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use glider_bench::{Flags, summary};
use glider_config::{Config, ConfigHandle};
use glider_dialects::codec;
use glider_engine::Engine;
use glider_engine::tokenizer::estimate_request_tokens;
use glider_ngl::Dialect;
use serde_json::{Value, json};

const DIALECTS: [(&str, Dialect); 4] = [
    ("anthropic", Dialect::Anthropic),
    ("openai", Dialect::OpenAiChat),
    ("responses", Dialect::OpenAiResponses),
    ("ollama", Dialect::Ollama),
];

/// The config the route decision runs against: a local model served by two backends,
/// a cloud backend behind them (so fallbacks are computed), and an alias pattern.
const CONFIG: &str = r#"
backends:
  - { name: local, type: ollama, base_url: "http://127.0.0.1:9", models: ["bench-model", "qwen2.5-coder:7b"] }
  - { name: vllm, type: vllm, base_url: "http://127.0.0.1:9/v1", models: [{ name: "bench-model", context_window: 131072 }] }
  - { name: claude, type: anthropic, base_url: "http://127.0.0.1:9", api_key: "k", models: ["claude-*"], default_model: claude-sonnet-4-5 }
model_aliases: { "gpt-*": "bench-model" }
routing: { cloud_fallback: true }
"#;

/// Time `f` `iterations` times (after a tenth as warm-up); nanoseconds per call.
fn time<T>(iterations: usize, mut f: impl FnMut() -> T) -> Vec<u64> {
    for _ in 0..iterations.div_ceil(10) {
        black_box(f());
    }
    (0..iterations)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed().as_nanos() as u64
        })
        .collect()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("glider-hotpath: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let flags = Flags::parse(std::env::args().skip(1), &[])?;
    let dir = flags.get("bodies").ok_or("--bodies DIR is required")?;
    let iterations = flags.number("iterations", 300)?.max(10) as usize;
    let config = Config::parse(CONFIG, "glider-hotpath").map_err(|e| e.to_string())?;
    let engine = Engine::new(ConfigHandle::new(config, None));

    let mut rows = Vec::new();
    for size in ["small", "large"] {
        for (name, dialect) in DIALECTS {
            let path = format!("{dir}/{size}-{name}.json");
            let body = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
            let front = codec(dialect);
            let request = front
                .decode_request(&body)
                .map_err(|e| format!("{path}: {}", e.message))?;
            let mut ops: Vec<(String, Vec<u64>)> = vec![
                (
                    "serde_json parse (baseline)".into(),
                    time(iterations, || serde_json::from_slice::<Value>(&body)),
                ),
                (
                    "decode".into(),
                    time(iterations, || front.decode_request(&body)),
                ),
                (
                    format!("encode {name}"),
                    time(iterations, || front.encode_request(&request).to_string()),
                ),
            ];
            for (other, other_dialect) in DIALECTS.iter().filter(|(o, _)| *o != name) {
                let target = codec(*other_dialect);
                ops.push((
                    format!("translate to {other} (decode + encode)"),
                    time(iterations, || {
                        front
                            .decode_request(&body)
                            .map(|r| target.encode_request(&r).to_string())
                    }),
                ));
            }
            ops.push((
                "token estimate, byte ratio".into(),
                time(iterations, || {
                    estimate_request_tokens(&request, "bench-model")
                }),
            ));
            ops.push((
                "token estimate, tiktoken (gpt-4o)".into(),
                time(iterations.min(100), || {
                    estimate_request_tokens(&request, "gpt-4o")
                }),
            ));
            let headers = http::HeaderMap::new();
            let (prepared, model, tokens) = engine
                .prepare(dialect, &body)
                .map_err(|e| format!("{path}: {}", e.message))?;
            ops.push((
                "route (all rules, Router::decide)".into(),
                time(iterations, || {
                    engine.decide(dialect, &prepared, &headers, &model, tokens, false)
                }),
            ));
            ops.push((
                "route decision (estimate + route)".into(),
                time(iterations, || {
                    let (tokens, _) = estimate_request_tokens(&prepared, &model);
                    engine.decide(dialect, &prepared, &headers, &model, tokens, false)
                }),
            ));
            ops.push((
                "prepare + decide (decode, alias, estimate, route)".into(),
                time(iterations, || {
                    engine
                        .prepare(dialect, &body)
                        .and_then(|(r, m, t)| engine.decide(dialect, &r, &headers, &m, t, false))
                }),
            ));
            let baseline = median(&ops[0].1);
            for (op, mut samples) in ops {
                let ratio = median(&samples) as f64 / baseline.max(1) as f64;
                let mut micros: Vec<u64> = samples.iter_mut().map(|ns| *ns / 100).collect();
                // Tenths of a microsecond keep sub-µs operations visible.
                let stats = summary(&mut micros);
                rows.push(json!({
                    "size": size,
                    "bytes": body.len(),
                    "dialect": name,
                    "op": op,
                    "p50_us": stats["p50"].as_u64().map(|v| v as f64 / 10.0),
                    "p99_us": stats["p99"].as_u64().map(|v| v as f64 / 10.0),
                    "x_parse": (ratio * 100.0).round() / 100.0,
                }));
            }
        }
    }
    println!(
        "BENCH_JSON {}",
        json!({ "iterations": iterations, "rows": rows })
    );
    Ok(())
}

fn median(samples: &[u64]) -> u64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}
