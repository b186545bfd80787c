//! Health probes of every backend, once on demand and every [`HEALTH_INTERVAL`].

use std::sync::Arc;
use std::time::Duration;

use super::Engine;

/// How often local backends are probed.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(10);

impl Engine {
    /// Probe every backend every [`HEALTH_INTERVAL`], the first time one interval from
    /// now: the first probe is the start report's (`glider serve` runs [`Self::probe_all`]
    /// at once), and two at once would ask each cloud vendor twice.
    pub fn spawn_health_probes(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::now() + HEALTH_INTERVAL,
                HEALTH_INTERVAL,
            );
            loop {
                tick.tick().await;
                let Some(engine) = weak.upgrade() else { break };
                engine.probe_all().await;
            }
        });
    }

    /// Probe every backend once (concurrently).
    pub async fn probe_all(&self) {
        let runtime = self.runtime();
        futures_util::future::join_all(runtime.backends.iter().map(|b| b.probe())).await;
    }
}
