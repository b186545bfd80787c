//! The throughput cost of session affinity (issue 17): how long choosing a pool
//! replica for a session key takes, against the order without a key, for pools of 3
//! and 16 replicas. Run with `cargo run --release -p glider-backend --example
//! affinity_hash [KEYS] [REPLICAS...]` (default 1000000 keys, pools of 3 and 16) for
//! ns per request; under callgrind, with `--toggle-collect` on `order_with_keys` and
//! `order_without_a_key`, for instructions per request (bench/results/ has both).

use std::hint::black_box;
use std::time::Instant;

use glider_backend::pool::{Pool, Replica};

/// `pool`'s order without a session key, `times` times (config order: what a request
/// without a session pays).
#[inline(never)]
fn order_without_a_key(pool: &Pool, times: usize) {
    for _ in 0..times {
        black_box(pool.order(black_box(None)));
    }
}

/// `pool`'s order for each of `keys` (the rendezvous hash a session's request pays).
#[inline(never)]
fn order_with_keys(pool: &Pool, keys: &[String]) {
    for key in keys {
        black_box(pool.order(black_box(Some(key.as_str()))));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let sizes: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![3, 16] } else { sizes };
    // Keys as Glider sends them: the 16-hex-digit digest of a session.
    let keys: Vec<String> = (0..count)
        .map(|i| glider_backend::session_key_digest(&format!("claude-code:{i}")))
        .collect();
    for replicas in sizes {
        let pool = Pool {
            replicas: (0..replicas)
                .map(|i| Replica::new(format!("http://gpu{i}.lab:8000/v1"), true))
                .collect(),
        };
        let started = Instant::now();
        order_without_a_key(&pool, count);
        let plain = started.elapsed().as_nanos() as f64 / count as f64;
        let started = Instant::now();
        order_with_keys(&pool, &keys);
        let hashed = started.elapsed().as_nanos() as f64 / count as f64;
        println!(
            "replicas={replicas} keys={count}: order without a key {plain:.1} ns, with the session key {hashed:.1} ns (+{:.1} ns per request)",
            hashed - plain
        );
    }
}
