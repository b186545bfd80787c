//! The throughput cost of session affinity (issue 17): how long choosing a pool
//! replica for a session key takes, against the order without a key, for pools of 3
//! and 16 replicas. Run with `cargo run --release -p glider-backend --example
//! affinity_hash`; results go to bench/results/.

use std::hint::black_box;
use std::time::Instant;

use glider_backend::pool::{Pool, Replica};

const KEYS: usize = 1_000_000;

fn main() {
    // Keys as Glider sends them: the 16-hex-digit digest of a session.
    let keys: Vec<String> = (0..KEYS)
        .map(|i| glider_backend::session_key_digest(&format!("claude-code:{i}")))
        .collect();
    for replicas in [3, 16] {
        let pool = Pool {
            replicas: (0..replicas)
                .map(|i| Replica::new(format!("http://gpu{i}.lab:8000/v1")))
                .collect(),
        };
        let started = Instant::now();
        for _ in 0..KEYS {
            black_box(pool.order(black_box(None)));
        }
        let plain = started.elapsed().as_nanos() as f64 / KEYS as f64;
        let started = Instant::now();
        for key in &keys {
            black_box(pool.order(black_box(Some(key.as_str()))));
        }
        let hashed = started.elapsed().as_nanos() as f64 / KEYS as f64;
        println!(
            "replicas={replicas}: order without a key {plain:.1} ns, with the session key {hashed:.1} ns (+{:.1} ns per request)",
            hashed - plain
        );
    }
}
