//! Ollama's memory controls: `/api/ps` (what is loaded, `size_vram` each), `/api/tags`
//! (a model's file size: the estimate of its memory before it was ever loaded), a load
//! (`/api/chat` with no messages, which loads and returns) and an unload (the same with
//! `keep_alive: 0`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;

/// How long an unload may take to show in `/api/ps`.
const UNLOAD_SETTLE: Duration = Duration::from_secs(10);

/// Whether two Ollama model names are the same model (a name without a tag means
/// `:latest`).
pub fn same_model(a: &str, b: &str) -> bool {
    a == b || canonical(a) == canonical(b)
}

/// A model name with its tag (`:latest` when it has none).
pub fn canonical(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

/// A model loaded on an Ollama server.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub name: String,
    pub vram_mib: u64,
}

/// One Ollama server, by its base URL.
pub struct Ollama<'a> {
    pub http: &'a reqwest::Client,
    pub base_url: &'a str,
}

impl Ollama<'_> {
    async fn get(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}{path}", self.base_url);
        let response = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        response.json().await.map_err(|e| format!("{url}: {e}"))
    }

    /// The models loaded now.
    pub async fn running(&self) -> Result<Vec<Running>, String> {
        let ps = self.get("/api/ps").await?;
        Ok(ps["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some(Running {
                    name: m["name"].as_str().or(m["model"].as_str())?.to_owned(),
                    vram_mib: m["size_vram"].as_u64().unwrap_or(0).div_ceil(MIB),
                })
            })
            .collect())
    }

    /// The file size `/api/tags` lists for `model`, in MiB.
    pub async fn file_mib(&self, model: &str) -> Option<u64> {
        let tags = self.get("/api/tags").await.ok()?;
        tags["models"].as_array()?.iter().find_map(|m| {
            let name = m["name"].as_str().or(m["model"].as_str())?;
            same_model(name, model).then(|| m["size"].as_u64().map(|b| b.div_ceil(MIB)))?
        })
    }

    async fn chat_nothing(&self, model: &str, keep_alive: Option<u64>) -> Result<(), String> {
        let url = format!("{}/api/chat", self.base_url);
        let mut body = json!({"model": model, "messages": [], "stream": false});
        if let Some(secs) = keep_alive {
            body["keep_alive"] = json!(secs);
        }
        let response = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        let said = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(text);
        Err(format!("{url}: HTTP {status}: {said}"))
    }

    /// Load `model` and say how long it took.
    pub async fn load(&self, model: &str) -> Result<Duration, String> {
        let start = Instant::now();
        self.chat_nothing(model, None).await?;
        Ok(start.elapsed())
    }

    /// Unload `model`, and wait (bounded) until `/api/ps` no longer lists it.
    pub async fn unload(&self, model: &str) -> Result<(), String> {
        self.chat_nothing(model, Some(0)).await?;
        let deadline = Instant::now() + UNLOAD_SETTLE;
        while Instant::now() < deadline {
            if !self
                .running()
                .await?
                .iter()
                .any(|r| same_model(&r.name, model))
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!(
            "{model} still loaded {UNLOAD_SETTLE:?} after its unload"
        ))
    }
}
