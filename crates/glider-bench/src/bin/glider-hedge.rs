//! `glider-hedge`: what hedging buys and costs against a slow local model, in-process
//! over loopback. A mock local Ollama answers with a time to first byte drawn from a
//! long-tailed (Pareto) distribution, a mock cloud with a steady one; the same scripted
//! sequence of requests runs with `fan_out` off, hedged at the measured p95, and
//! hedged at a fixed delay. Prints p50/p99 time to first byte (to the engine's answer,
//! which comes with the first upstream byte) and the upstream requests each run cost.
//!
//! ```text
//! glider-hedge [--requests N] [--cloud-ttft-ms MS] [--fixed-delay-ms MS]   # prints BENCH_JSON {...}
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use glider_bench::{Flags, summary};
use glider_config::{Config, ConfigHandle};
use glider_engine::{CompletionBody, CompletionRequest, Engine};
use glider_ngl::Dialect;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

/// A deterministic long tail: Pareto with scale 60 ms and shape 1.2, capped at 4 s
/// (most replies start within ~150 ms; a few take seconds, as a busy local GPU does).
fn long_tailed_ttfts(count: usize) -> Vec<Duration> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..count)
        .map(|_| {
            // xorshift64*: uniform in (0, 1].
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let bits = state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
            let uniform = (bits as f64 + 1.0) / (1u64 << 53) as f64;
            let ms = (60.0 * uniform.powf(-1.0 / 1.2)).min(4000.0);
            Duration::from_millis(ms as u64)
        })
        .collect()
}

fn config(local: &str, cloud: &str, fan_out: &str) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{local}', models: [m-local]}}\n\
         \x20 - {{name: cloud, type: openai, base_url: '{cloud}/v1', api_key: k, models: [m-cloud], default_model: m-cloud}}\n\
         routing: {{classifier: {{enabled: false}}}}\n\
         fan_out: {fan_out}\n"
    )
}

fn generations(mock: &MockVendor) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

/// One run of `requests` sequential streamed requests under `fan_out`.
async fn run(
    name: &str,
    fan_out: &str,
    ttfts: &[Duration],
    cloud_ttft: Duration,
) -> Result<Value, String> {
    let local = MockVendor::start(MockConfig {
        first_byte_delays: ttfts.to_vec(),
        ..MockConfig::default()
    })
    .await;
    let cloud = MockVendor::start(MockConfig {
        first_byte_delay: cloud_ttft,
        ..MockConfig::default()
    })
    .await;
    let yaml = config(&local.base_url(), &cloud.base_url(), fan_out);
    let parsed = Config::parse(&yaml, "glider-hedge").map_err(|e| e.to_string())?;
    let engine = Engine::new(ConfigHandle::new(parsed, None));
    let body = Bytes::from(
        json!({"model": "m-local", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
    );
    let mut ttft_ms = Vec::with_capacity(ttfts.len());
    let mut cloud_won = 0u64;
    for _ in ttfts {
        let started = Instant::now();
        let completion = engine
            .complete(CompletionRequest::gateway(
                Dialect::OpenAiChat,
                body.clone(),
                Default::default(),
            ))
            .await
            .map_err(|e| format!("{name}: {e:?}"))?;
        ttft_ms.push(started.elapsed().as_millis() as u64);
        if completion.backend == "cloud" {
            cloud_won += 1;
        }
        match completion.body {
            CompletionBody::Raw { mut rest, .. } => while rest.next().await.is_some() {},
            CompletionBody::Events(mut events) => while events.next().await.is_some() {},
            CompletionBody::Whole(_) => {}
        }
    }
    let generations_cloud = generations(&cloud);
    let upstream = generations(&local) + generations_cloud;
    let requests = ttfts.len();
    local.shutdown().await;
    cloud.shutdown().await;
    Ok(json!({
        "case": name,
        "fan_out": fan_out,
        "requests": requests,
        "ttft_ms": summary(&mut ttft_ms),
        "upstream_requests": upstream,
        "extra_upstream_requests": upstream - requests,
        // Every cloud request is a fired hedge: the local model never fails here.
        "cloud_requests": generations_cloud,
        "cloud_answered": cloud_won,
    }))
}

async fn main_async(flags: &Flags) -> Result<Value, String> {
    let requests = flags.number("requests", 200)? as usize;
    let cloud_ttft = Duration::from_millis(flags.number("cloud-ttft-ms", 250)?);
    let fixed: u64 = flags.number("fixed-delay-ms", 300)?;
    let ttfts = long_tailed_ttfts(requests);
    let mut cases = Vec::new();
    for (name, fan_out) in [
        ("off", "{mode: off}".to_owned()),
        (
            "hedge_p95",
            "{mode: hedge, initial_delay_ms: 1000, min_samples: 20}".to_owned(),
        ),
        ("hedge_fixed", format!("{{mode: hedge, delay_ms: {fixed}}}")),
    ] {
        cases.push(run(name, &fan_out, &ttfts, cloud_ttft).await?);
    }
    let mut scripted: Vec<u64> = ttfts.iter().map(|d| d.as_millis() as u64).collect();
    Ok(json!({
        "local_ttft_script_ms": summary(&mut scripted),
        "cloud_ttft_ms": cloud_ttft.as_millis() as u64,
        "cases": cases,
    }))
}

fn main() -> ExitCode {
    glider_bench::run_case(
        "glider-hedge",
        || Flags::parse(std::env::args().skip(1), &[]),
        |flags| async move { main_async(&flags).await },
    )
}
