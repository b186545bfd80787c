//! vLLM's sleep mode, on a server started with `--enable-sleep-mode` and
//! `VLLM_SERVER_DEV_MODE=1`: `GET /is_sleeping` (`{"is_sleeping": bool}`; awake is
//! loaded), `POST /sleep?level=N` (1: weights to CPU memory, KV cache freed; 2: weights
//! discarded) and `POST /wake_up`. The endpoints sit at the server's root, not under
//! the `/v1` the backend's base URL ends with.

use std::time::{Duration, Instant};

use glider_backend::Backend;
use serde_json::Value;

/// How long a sleep or a wake may take to answer (a level 2 wake reloads the weights).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(600);

/// One vLLM server: the backend's, at its root ([`Backend::root_url`]).
pub struct Vllm<'a> {
    pub http: &'a reqwest::Client,
    pub backend: &'a Backend,
}

impl Vllm<'_> {
    fn url(&self, path: &str) -> String {
        self.backend.root_url(path)
    }

    async fn send(&self, request: reqwest::RequestBuilder, url: &str) -> Result<Value, String> {
        let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(format!("{url}: HTTP {status}: {text}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Whether the server's model is asleep now.
    pub async fn is_sleeping(&self) -> Result<bool, String> {
        let url = self.url("/is_sleeping");
        let request = self.http.get(&url).timeout(Duration::from_secs(5));
        let said = self.send(request, &url).await?;
        said["is_sleeping"].as_bool().ok_or_else(|| {
            format!("{url}: no is_sleeping in {said} (is the server run with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1?)")
        })
    }

    /// Put the model to sleep at `level`.
    pub async fn sleep(&self, level: u8) -> Result<(), String> {
        let url = self.url(&format!("/sleep?level={level}"));
        let request = self.http.post(&url).timeout(CONTROL_TIMEOUT);
        self.send(request, &url).await.map(drop)
    }

    /// Wake the model and say how long it took.
    pub async fn wake_up(&self) -> Result<Duration, String> {
        let url = self.url("/wake_up");
        let start = Instant::now();
        let request = self.http.post(&url).timeout(CONTROL_TIMEOUT);
        self.send(request, &url).await?;
        Ok(start.elapsed())
    }
}
