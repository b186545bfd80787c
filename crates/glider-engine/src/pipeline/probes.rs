//! Health probes of every backend, once on demand and every [`HEALTH_INTERVAL`].

use std::sync::Arc;
use std::time::Duration;

use super::Engine;

/// How often local backends are probed.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(10);

impl Engine {
    /// Probe every backend every [`HEALTH_INTERVAL`], the first time one interval from
    /// now: the first probe is the start report's (`glider serve` runs [`Self::probe_local_backends`]
    /// and [`Self::probe_cloud_backends`] at once), and two at once would ask each cloud vendor twice.
    pub fn spawn_health_probes(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        glider_sys::safego::spawn_named(
            "health probes",
            glider_sys::safego::Restart::BACKOFF,
            move || {
                let weak = weak.clone();
                async move {
                    let mut tick = tokio::time::interval_at(
                        tokio::time::Instant::now() + HEALTH_INTERVAL,
                        HEALTH_INTERVAL,
                    );
                    loop {
                        tick.tick().await;
                        let Some(engine) = weak.upgrade() else { break };
                        engine.probe_all().await;
                    }
                }
            },
        );
    }

    /// Probe every backend once (concurrently).
    pub async fn probe_all(&self) {
        self.probe_where(|_| true).await;
    }

    /// Probe the local backends once (concurrently). `glider serve` does this before it
    /// serves: their discovered windows and capabilities decide the first request's route.
    pub async fn probe_local_backends(&self) {
        self.probe_where(|b| b.is_local()).await;
    }

    /// Probe the cloud backends once (concurrently). `glider serve` does this in the
    /// background, since a slow vendor must not hold up serving.
    pub async fn probe_cloud_backends(&self) {
        self.probe_where(|b| !b.is_local()).await;
    }

    async fn probe_where(&self, which: impl Fn(&glider_backend::Backend) -> bool) {
        let runtime = self.runtime();
        let probes = runtime
            .backends
            .iter()
            .filter(|b| which(b))
            .map(|b| b.probe());
        futures_util::future::join_all(probes).await;
    }
}
