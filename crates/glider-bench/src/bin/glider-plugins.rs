//! `glider-plugins`: what a plugin hook costs a request. The real gateway (in-process,
//! on loopback) in front of a mock Ollama, with no plugin, with a `rewrite` hook
//! (examples/plugins/rewrite_system_note.py) and with a `route` hook
//! (examples/plugins/route_small_local.py), each a real Python subprocess. At
//! concurrency 1: per-request latency p50/p99 and what the hook adds to it; at
//! concurrency `--connections` (50): requests per second and its ratio to no plugin.
//! The hooks get a generous deadline and breaker so that every call is measured (the
//! hook counts are printed: a timeout would show there). The cases run interleaved in
//! `--rounds` rounds, and what a hook adds is the median over the rounds of its
//! difference to the round's no-plugin case, so load that drifts on a shared machine
//! weighs on both sides. Not part of the test suite.
//!
//! ```text
//! glider-plugins [--seconds S] [--warmup-ms MS] [--connections N] [--rounds N] [--examples DIR]   # prints BENCH_JSON {...}
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use glider_bench::{Flags, summary};
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

struct Opts {
    seconds: Duration,
    warmup: Duration,
    connections: usize,
    rounds: usize,
    examples: String,
}

/// The config for one case: the mock as the only (local) backend, and `plugin` if any.
fn config(mock: &str, plugin: Option<(&str, &str)>, examples: &str) -> String {
    let plugins = match plugin {
        None => String::new(),
        Some((name, script)) => format!(
            "plugins:\n  - {{name: {name}, command: [python3, '{examples}/{script}'], \
             deadline_ms: 5000, breaker_failures: 1000000, env: {{GLIDER_NOTE: 'bench note'}}}}\n"
        ),
    };
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{mock}', models: [m-local]}}\n\
         routing: {{classifier: {{enabled: false}}}}\n{plugins}"
    )
}

/// Closed-loop load: `workers` clients each sending one request after another for
/// `length`; returns each request's latency (µs) and the errors.
async fn load(url: &str, workers: usize, length: Duration) -> Result<(Vec<u64>, u64), String> {
    let client = reqwest::Client::new();
    let body = json!({"model": "m-local", "messages": [{"role": "user", "content": "hello"}]});
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (client, body, stop, url) =
                (client.clone(), body.clone(), stop.clone(), url.to_owned());
            tokio::spawn(async move {
                let (mut latencies, mut errors) = (Vec::new(), 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let ok = match client.post(&url).json(&body).send().await {
                        Ok(reply) => reply.status().is_success() && reply.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    if ok {
                        latencies.push(started.elapsed().as_micros() as u64);
                    } else {
                        errors += 1;
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (l, e) = task.await.map_err(|e| e.to_string())?;
        latencies.extend(l);
        errors += e;
    }
    Ok((latencies, errors))
}

/// One case: start the mock and the gateway, wait for the plugin's manifest, then the
/// c1 and cN points.
async fn case(name: &str, plugin: Option<(&str, &str)>, opts: &Opts) -> Result<Value, String> {
    let mock = MockVendor::start(MockConfig::default()).await;
    let yaml = config(&mock.base_url(), plugin, &opts.examples);
    let parsed = Config::parse(&yaml, "glider-plugins").map_err(|e| e.to_string())?;
    let engine = Engine::new(ConfigHandle::new(parsed, None));
    engine.attach_plugins(None);
    let waited = Instant::now();
    while !engine
        .plugins()
        .hosts()
        .iter()
        .all(|h| h.manifest().is_some())
    {
        if waited.elapsed() > Duration::from_secs(30) {
            return Err(format!("{name}: the plugin never initialised"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(glider_gateway::serve(listener, engine.clone(), async {
        let _ = stopped.await;
    }));
    let mut points = Vec::new();
    for workers in [1, opts.connections] {
        load(&url, workers, opts.warmup).await?;
        let (mut latencies, errors) = load(&url, workers, opts.seconds).await?;
        let rps = latencies.len() as f64 / opts.seconds.as_secs_f64();
        points.push(json!({
            "connections": workers,
            "requests": latencies.len(),
            "errors": errors,
            "rps": (rps * 10.0).round() / 10.0,
            "latency_us": summary(&mut latencies),
        }));
    }
    let plugins = engine.plugins();
    let counts: Vec<Value> = plugins
        .hosts()
        .iter()
        .map(|h| json!({"plugin": h.name(), "restarts": h.restarts(), "counts": &h.counts}))
        .collect();
    engine.stop_plugins().await;
    let _ = stop.send(());
    let _ = server.await;
    mock.shutdown().await;
    Ok(json!({"case": name, "points": points, "plugins": counts}))
}

fn at<'a>(case: &'a Value, point: usize, key: &str) -> &'a Value {
    &case["points"][point][key]
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn main_async(opts: &Opts) -> Result<Value, String> {
    const CASES: [(&str, Option<(&str, &str)>); 3] = [
        ("none", None),
        ("rewrite", Some(("note", "rewrite_system_note.py"))),
        ("route", Some(("small", "route_small_local.py"))),
    ];
    let mut rounds = Vec::new();
    for _ in 0..opts.rounds.max(1) {
        let mut cases = Vec::new();
        for (name, plugin) in CASES {
            cases.push(case(name, plugin, opts).await?);
        }
        rounds.push(cases);
    }
    // What each hook adds at c1 (p50, p99) and keeps of the throughput at cN: per
    // round against that round's no-plugin case, then the median over the rounds.
    let added: Vec<Value> = (1..CASES.len())
        .map(|hook| {
            let over_rounds = |of: &dyn Fn(&[Value]) -> f64| {
                median(rounds.iter().map(|cases| of(cases)).collect())
            };
            let latency = |cases: &[Value], c: usize, p: &str| {
                at(&cases[c], 0, "latency_us")[p].as_f64().unwrap_or(f64::NAN)
            };
            let rps = |cases: &[Value], c: usize| at(&cases[c], 1, "rps").as_f64().unwrap_or(f64::NAN);
            json!({
                "case": CASES[hook].0,
                "added_p50_us_c1": over_rounds(&|cs| latency(cs, hook, "p50") - latency(cs, 0, "p50")),
                "added_p99_us_c1": over_rounds(&|cs| latency(cs, hook, "p99") - latency(cs, 0, "p99")),
                "throughput_ratio_cN": (over_rounds(&|cs| rps(cs, hook) / rps(cs, 0)) * 1000.0).round() / 1000.0,
            })
        })
        .collect();
    Ok(json!({
        "seconds_per_point": opts.seconds.as_secs_f64(),
        "connections": opts.connections,
        "rounds": rounds.len(),
        // The last round's cases in full; every round's in `rounds_cases`.
        "cases": rounds.last().cloned().unwrap_or_default(),
        "rounds_cases": rounds,
        "versus_none": added,
    }))
}

fn parse() -> Result<Opts, String> {
    let flags = Flags::parse(std::env::args().skip(1), &[])?;
    let default_examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/plugins");
    Ok(Opts {
        seconds: Duration::from_secs(flags.number("seconds", 3)?),
        warmup: Duration::from_millis(flags.number("warmup-ms", 500)?),
        connections: flags.number("connections", 50)? as usize,
        rounds: flags.number("rounds", 3)? as usize,
        examples: flags.get("examples").unwrap_or(default_examples).to_owned(),
    })
}

fn main() -> ExitCode {
    glider_bench::run_case("glider-plugins", parse, |opts| async move {
        main_async(&opts).await
    })
}
