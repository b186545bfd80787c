//! Health and warm state of a backend. Local backends are probed (Ollama: `/api/version`
//! and `/api/ps` for the models loaded in memory; OpenAI-compatible: `/models`); cloud
//! backends are not probed (that would spend the user's quota) and are judged by their
//! breaker alone. A llama.cpp model listed as a file path is recorded by its file stem
//! ([`readable_model_id`]).

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use glider_config::BackendKind;
use serde::Serialize;

use crate::client::Backend;

/// Whether a backend answered its last probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Not probed yet, or a cloud backend (never probed).
    #[default]
    Unknown,
    Up,
    Down,
}

/// A backend's health as last seen.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Health {
    pub status: HealthStatus,
    /// Why it is down, when it is.
    pub detail: Option<String>,
    /// Models loaded in memory (Ollama's `/api/ps`): a warm model answers without a load.
    pub warm_models: Vec<String>,
    /// Models the server says it has (Ollama's `/api/tags`, OpenAI-compatible `/models`).
    pub served_models: Vec<String>,
    /// Unix seconds of the last probe.
    pub checked_at: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct HealthCell(Mutex<Health>);

impl HealthCell {
    fn set(&self, health: Health) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = health;
    }
    fn get(&self) -> Health {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Backend {
    /// The last probe's result.
    pub fn health(&self) -> Health {
        self.health.get()
    }

    /// Is `model` loaded in memory on this backend?
    pub fn is_warm(&self, model: &str) -> bool {
        self.health.get().warm_models.iter().any(|m| m == model)
    }

    /// Probe now and record the result.
    pub async fn probe(&self) -> Health {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .ok();
        let mut health = match (&self.unavailable, self.kind()) {
            (Some(why), _) => Health {
                status: HealthStatus::Down,
                detail: Some(format!("not configured: {why}")),
                ..Health::default()
            },
            (None, BackendKind::Ollama) => self.probe_ollama().await,
            (None, BackendKind::Vllm) => self.probe_openai_compatible().await,
            (None, BackendKind::Openai | BackendKind::Anthropic) => Health::default(),
        };
        health.checked_at = now;
        self.health.set(health.clone());
        health
    }

    async fn fetch_json(&self, path: &str) -> Result<serde_json::Value, String> {
        let response = self
            .get(path)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| format!("{} unreachable: {e}", self.url(path)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{} answered HTTP {status}", self.url(path)));
        }
        response
            .json()
            .await
            .map_err(|e| format!("{} answered non-JSON: {e}", self.url(path)))
    }

    async fn probe_ollama(&self) -> Health {
        let names = |value: &serde_json::Value| -> Vec<String> {
            value["models"]
                .as_array()
                .map(|models| {
                    models
                        .iter()
                        .filter_map(|m| m["name"].as_str().or(m["model"].as_str()))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        match self.fetch_json("/api/tags").await {
            Ok(tags) => Health {
                status: HealthStatus::Up,
                served_models: names(&tags),
                warm_models: self
                    .fetch_json("/api/ps")
                    .await
                    .map(|ps| names(&ps))
                    .unwrap_or_default(),
                ..Health::default()
            },
            Err(detail) => down(detail),
        }
    }

    async fn probe_openai_compatible(&self) -> Health {
        match self.fetch_json("/models").await {
            Ok(models) => {
                let served: Vec<String> = models["data"]
                    .as_array()
                    .map(|d| {
                        d.iter()
                            .filter_map(|m| m["id"].as_str())
                            .map(readable_model_id)
                            .collect()
                    })
                    .unwrap_or_default();
                Health {
                    status: HealthStatus::Up,
                    // A server that serves a model has it loaded.
                    warm_models: served.clone(),
                    served_models: served,
                    ..Health::default()
                }
            }
            Err(detail) => down(detail),
        }
    }
}

/// The id a person would type for a model an OpenAI-compatible server lists. llama.cpp's
/// server, started without `--alias`, lists its model as the GGUF file's path
/// (`/models/gemma-3-270m-it-Q4_K_M.gguf`): that becomes the file stem
/// (`gemma-3-270m-it-Q4_K_M`), which a config can name. Anything else is kept as it is,
/// slashes included (`Qwen/Qwen2.5-7B-Instruct` is a vLLM model name, not a path).
pub fn readable_model_id(id: &str) -> String {
    let file = id.rsplit(['/', '\\']).next().unwrap_or(id);
    match file
        .len()
        .checked_sub(".gguf".len())
        .filter(|&cut| file.is_char_boundary(cut) && file[cut..].eq_ignore_ascii_case(".gguf"))
    {
        Some(cut) if cut > 0 => file[..cut].to_owned(),
        _ => id.to_owned(),
    }
}

fn down(detail: String) -> Health {
    Health {
        status: HealthStatus::Down,
        detail: Some(detail),
        ..Health::default()
    }
}

#[cfg(test)]
mod tests {
    use super::readable_model_id;

    #[test]
    fn a_gguf_path_reads_as_its_file_stem_and_other_ids_are_kept() {
        assert_eq!(
            readable_model_id("/models/gemma-3-270m-it-Q4_K_M.gguf"),
            "gemma-3-270m-it-Q4_K_M"
        );
        assert_eq!(readable_model_id(r"C:\models\Qwen3-4B.GGUF"), "Qwen3-4B");
        assert_eq!(readable_model_id("tiny.gguf"), "tiny");
        // An alias, a vLLM repo name, and a name that is only the extension stay.
        assert_eq!(readable_model_id("gemma"), "gemma");
        assert_eq!(
            readable_model_id("Qwen/Qwen2.5-7B-Instruct"),
            "Qwen/Qwen2.5-7B-Instruct"
        );
        assert_eq!(readable_model_id("/models/.gguf"), "/models/.gguf");
    }
}
