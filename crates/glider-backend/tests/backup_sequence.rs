//! The backup sequence and the breaker together, with tokio's clock paused: a backend
//! that refuses connections is tried five times, then skipped while its breaker is
//! open, then probed once after 30 seconds.

use std::time::Duration;

use bytes::Bytes;
use glider_backend::{Backend, BreakerState, Candidate, UpstreamRequest, execute};
use glider_config::Config;
use glider_ngl::Dialect;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}

fn candidates() -> Vec<Candidate> {
    let yaml = format!(
        "backends:\n  - {{name: down, type: ollama, base_url: 'http://127.0.0.1:{}', models: [m]}}\n",
        closed_port()
    );
    let config = Config::parse(&yaml, "t").expect("valid");
    vec![Candidate {
        backend: Backend::new(config.backends[0].clone()),
        model: "m".into(),
    }]
}

async fn attempt(candidates: &[Candidate]) -> String {
    let failures = match execute(candidates, |_| {
        Ok(UpstreamRequest {
            dialect: Dialect::Ollama,
            body: Bytes::from_static(b"{}"),
            stream: false,
            headers: Default::default(),
        })
    })
    .await
    {
        Ok(_) => panic!("nothing listens there"),
        Err(failures) => failures,
    };
    assert_eq!(failures.len(), 1);
    failures[0].message.clone()
}

#[tokio::test(start_paused = true)]
async fn breaker_skips_then_probes_a_dead_backend() {
    let candidates = candidates();
    let backend = candidates[0].backend.clone();
    for i in 0..5 {
        let message = attempt(&candidates).await;
        assert!(
            !message.contains("circuit breaker"),
            "attempt {i}: {message}"
        );
    }
    assert_eq!(backend.breaker.state(), BreakerState::Open);

    // Open: the backend is not called at all.
    let message = attempt(&candidates).await;
    assert!(message.contains("circuit breaker open"), "{message}");

    // 30 s later one probe goes out; it fails, so the breaker opens again.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(backend.breaker.state(), BreakerState::HalfOpen);
    let message = attempt(&candidates).await;
    assert!(
        !message.contains("circuit breaker"),
        "the probe reached the backend: {message}"
    );
    assert_eq!(backend.breaker.state(), BreakerState::Open);
    let message = attempt(&candidates).await;
    assert!(message.contains("circuit breaker open"), "{message}");
}
