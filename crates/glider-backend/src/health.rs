//! Health and warm state of a backend. Local backends are probed (Ollama: `/api/tags`,
//! `/api/ps` for the models loaded in memory and `/api/show` once per model;
//! OpenAI-compatible: `/models`, and llama.cpp's `/props`; an `openai` or `anthropic`
//! backend marked `local: true` the same way as an OpenAI-compatible one, since
//! llama-server and Ollama list their models there on either wire), which also reads
//! what their models can do ([`crate::capabilities`]). A cloud backend is probed with its
//! model list (`GET /v1/models`: no tokens spent), with its key when it has one, so a
//! wrong key or an unreachable host shows at start; without a key any HTTP answer (a 401)
//! proves the connection and TLS. It is probed again only every
//! [`CLOUD_PROBE_INTERVAL`]; between probes its breaker judges it. A llama.cpp model
//! listed as a file path is recorded by its file stem ([`readable_model_id`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use glider_config::BackendKind;
use serde::Serialize;
use serde_json::Value;

use crate::capabilities::{
    Capabilities, from_llama_props, from_ollama_ps, from_ollama_show, from_openai_model,
};
use crate::client::Backend;
use crate::pool::ReplicaHealth;

/// How long one probe request may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a cloud backend's model list is asked for again (the local ones are
/// probed at every health tick): often enough to notice a key that was fixed, rarely
/// enough not to be traffic of its own.
pub const CLOUD_PROBE_INTERVAL: Duration = Duration::from_secs(300);

/// Whether a backend answered its last probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Not probed yet.
    #[default]
    Unknown,
    Up,
    Down,
}

/// Set to `off`, cloud backends are never probed (tests of the embedded profile, whose
/// cloud backends name the real vendors, keep everything on loopback with it).
pub const CLOUD_PROBES_ENV: &str = "GLIDER_CLOUD_PROBES";

/// A backend's health as last seen.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Health {
    pub status: HealthStatus,
    /// Why it is down, when it is.
    pub detail: Option<String>,
    /// What the probe of an up cloud backend found (which credential it checked).
    pub note: Option<String>,
    /// Models loaded in memory (Ollama's `/api/ps`): a warm model answers without a load.
    pub warm_models: Vec<String>,
    /// Models the server says it has (Ollama's `/api/tags`, OpenAI-compatible `/models`).
    pub served_models: Vec<String>,
    /// What each served model can do, as the server says (empty for cloud backends
    /// and servers that say nothing).
    pub capabilities: BTreeMap<String, Capabilities>,
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
    /// Read and change the health under one lock: nothing cloned, and no probe's result
    /// lands between the read and the write.
    fn update<R>(&self, change: impl FnOnce(&mut Health) -> R) -> R {
        change(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Backend {
    /// A real request succeeded: a probe's Down is disproved (a cloud probe is not
    /// repeated for minutes, and the executor would keep trying this backend last).
    /// Called on every successful request, so it only reads the status unless Down.
    pub(crate) fn answered(&self) {
        self.health.update(|health| {
            if health.status == HealthStatus::Down {
                health.status = HealthStatus::Up;
                health.note = Some(format!(
                    "a request succeeded after the probe found it down ({})",
                    health.detail.take().unwrap_or_default()
                ));
            }
        });
    }

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
            (None, BackendKind::Vllm) => self.probe_openai_compatible(self.models_path()).await,
            (None, BackendKind::Openai | BackendKind::Anthropic) if self.is_local() => {
                self.probe_openai_compatible(self.models_path()).await
            }
            (None, BackendKind::Openai | BackendKind::Anthropic) => {
                let kept = self.health.get();
                let recent = kept.checked_at.zip(now).is_some_and(|(then, now)| {
                    now.saturating_sub(then) < CLOUD_PROBE_INTERVAL.as_secs()
                });
                if recent {
                    return kept;
                }
                self.probe_cloud().await
            }
        };
        if let Some(path) = self.replica_probe_path() {
            self.probe_replicas(path, &mut health).await;
        }
        health.checked_at = now;
        self.health.set(health.clone());
        health
    }

    /// The model list a pooled local backend's replicas are probed with; `None` for a
    /// backend without replicas or not configured.
    fn replica_probe_path(&self) -> Option<&'static str> {
        if self.pool.is_none() || self.unavailable.is_some() || !self.is_local() {
            return None;
        }
        Some(self.models_path())
    }

    /// The path that lists the backend's models: what every probe asks. An Anthropic
    /// base URL has no `/v1` (the Anthropic wire's paths carry it).
    fn models_path(&self) -> &'static str {
        match self.kind() {
            BackendKind::Ollama => "/api/tags",
            BackendKind::Anthropic => "/v1/models",
            BackendKind::Vllm | BackendKind::Openai => "/models",
        }
    }

    /// Probe every replica of the pool at `path` (concurrently; the first, the
    /// backend's `base_url`, as the backend's own probe found it) and record each one's
    /// health. The backend is up while any replica is: a pool with one replica down
    /// still serves, its down replicas named in `detail`.
    async fn probe_replicas(&self, path: &str, health: &mut Health) {
        let Some(pool) = &self.pool else { return };
        let first = ReplicaHealth {
            status: health.status,
            detail: health.detail.clone(),
        };
        let others = pool.replicas.iter().skip(1).map(|replica| async move {
            let url = format!("{}{path}", replica.base_url);
            match read_json(self.get_url(&url), &url).await {
                Ok(_) => ReplicaHealth {
                    status: HealthStatus::Up,
                    detail: None,
                },
                Err(detail) => ReplicaHealth {
                    status: HealthStatus::Down,
                    detail: Some(detail),
                },
            }
        });
        let found: Vec<ReplicaHealth> = std::iter::once(first)
            .chain(futures_util::future::join_all(others).await)
            .collect();
        let down: Vec<String> = pool
            .replicas
            .iter()
            .zip(&found)
            .filter(|(_, h)| h.status == HealthStatus::Down)
            .map(|(r, h)| {
                format!(
                    "replica {}: {}",
                    r.base_url,
                    h.detail.as_deref().unwrap_or("down")
                )
            })
            .collect();
        if found.iter().any(|h| h.status == HealthStatus::Up) {
            health.status = HealthStatus::Up;
            health.detail = (!down.is_empty()).then(|| down.join("; "));
        }
        for (replica, found) in pool.replicas.iter().zip(found) {
            replica.set_health(found);
        }
    }

    /// A cloud backend's model list: with its key, a 2xx proves the key (a 403 shows it
    /// reachable, a 401 down, anything else unverified); without one,
    /// any answer below 500 proves the host, TCP and TLS (the client's credentials are
    /// checked by the vendor per request).
    async fn probe_cloud(&self) -> Health {
        if std::env::var_os(CLOUD_PROBES_ENV).is_some_and(|v| v == "off") {
            return Health {
                note: Some(format!("not probed ({CLOUD_PROBES_ENV}=off)")),
                ..Health::default()
            };
        }
        let path = self.models_path();
        let url = self.url(path);
        let response = match self.get(path).timeout(PROBE_TIMEOUT).send().await {
            Ok(response) => response,
            Err(e) => return down(format!("{url} unreachable: {}", error_chain(&e))),
        };
        let status = response.status();
        let keyed = self.credentials() == &crate::Credentials::Configured;
        let unverified = |why: &str| Health {
            status: HealthStatus::Unknown,
            note: Some(format!(
                "unverified: GET {path} answered HTTP {status} ({why})"
            )),
            ..Health::default()
        };
        let note = match (keyed, status.as_u16()) {
            // Overloaded (529) or a failing gateway (502/503): the vendor is there but
            // said nothing about the key, so neither up nor down.
            (_, 500..) => {
                return unverified(
                    "the vendor is overloaded or failing; requests may still succeed",
                );
            }
            (true, 200..=299) => format!("GET {path} accepted the configured key"),
            (true, 401) => {
                return down(format!(
                    "{url} rejected the configured key (HTTP {status}): fix api_key (or the variable it names)"
                ));
            }
            // A restricted key may be refused the model list yet allowed to chat.
            (true, 403) => format!(
                "reachable; GET {path} refused the configured key (HTTP 403): a restricted key may still be allowed to send requests"
            ),
            // A 404 (a base_url missing its /v1), a redirect, a 429: the key was
            // neither accepted nor rejected, so the backend is not shown up.
            (true, _) => {
                return unverified(
                    "neither accepted nor refused the key; a 404 usually means base_url lacks its /v1",
                );
            }
            (false, _) => format!(
                "reachable (GET {path} without a key answered HTTP {status}); requests carry the client's own credentials"
            ),
        };
        Health {
            status: HealthStatus::Up,
            note: Some(note),
            ..Health::default()
        }
    }

    async fn fetch_json(&self, path: &str) -> Result<Value, String> {
        read_json(self.get(path), &self.url(path)).await
    }

    /// What Ollama says each served model can do: `/api/show` for a model not asked
    /// about before (the answer is kept across probes), `/api/ps` for the window each
    /// loaded model runs with now.
    async fn ollama_capabilities(
        &self,
        served: &[String],
        ps: &Value,
    ) -> BTreeMap<String, Capabilities> {
        let known = self.health.get().capabilities;
        let known = &known;
        let shown = futures_util::future::join_all(served.iter().map(|name| async move {
            let show = match known.get(name) {
                Some(caps) => Some(caps.clone()),
                None => read_json(
                    self.post("/api/show")
                        .json(&serde_json::json!({"model": name})),
                    &self.url("/api/show"),
                )
                .await
                .map(|show| from_ollama_show(&show))
                .inspect_err(
                    |e| tracing::debug!(backend = self.name(), error = %e, "no capabilities"),
                )
                .ok(),
            };
            (name.clone(), show)
        }))
        .await;
        let loaded: BTreeMap<&str, &Value> = ps["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| Some((m["name"].as_str().or(m["model"].as_str())?, m)))
            .collect();
        shown
            .into_iter()
            .filter_map(|(name, show)| {
                let caps = match loaded.get(name.as_str()) {
                    Some(entry) => from_ollama_ps(entry).or(show.unwrap_or_default()),
                    None => show?,
                };
                Some((name, caps))
            })
            .collect()
    }

    async fn probe_ollama(&self) -> Health {
        match self.fetch_json("/api/tags").await {
            Ok(tags) => {
                let served = ollama_model_names(&tags);
                let ps = self.fetch_json("/api/ps").await.unwrap_or_default();
                Health {
                    status: HealthStatus::Up,
                    capabilities: self.ollama_capabilities(&served, &ps).await,
                    served_models: served,
                    warm_models: ollama_model_names(&ps),
                    ..Health::default()
                }
            }
            Err(detail) => down(detail),
        }
    }

    /// An OpenAI-style model list at `models_path` under the base URL, and llama.cpp's
    /// `/props` at the server's root.
    async fn probe_openai_compatible(&self, models_path: &str) -> Health {
        match self.fetch_json(models_path).await {
            Ok(models) => {
                let entries: Vec<(String, Capabilities)> = models["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| {
                        Some((readable_model_id(m["id"].as_str()?), from_openai_model(m)))
                    })
                    .collect();
                // llama.cpp's `/props` describes the one model it runs (a vLLM server
                // has no such endpoint; its 404 just says nothing).
                let props = match entries.len() {
                    1 => read_json(
                        self.at_root(reqwest::Method::GET, "/props"),
                        &self.root_url("/props"),
                    )
                    .await
                    .map(|props| from_llama_props(&props))
                    .unwrap_or_default(),
                    _ => Capabilities::default(),
                };
                let served: Vec<String> = entries.iter().map(|(id, _)| id.clone()).collect();
                let capabilities = entries
                    .into_iter()
                    .map(|(id, listed)| (id, props.clone().or(listed)))
                    .filter(|(_, caps)| !caps.is_empty())
                    .collect();
                Health {
                    status: HealthStatus::Up,
                    // A server that serves a model has it loaded.
                    warm_models: served.clone(),
                    served_models: served,
                    capabilities,
                    ..Health::default()
                }
            }
            Err(detail) => down(detail),
        }
    }
}

/// Model names in an Ollama `/api/tags` (or `/api/ps`) answer.
pub fn ollama_model_names(value: &Value) -> Vec<String> {
    value["models"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().or(m["model"].as_str()))
        .map(str::to_owned)
        .collect()
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

/// Send a probe request and read its JSON answer; the error names `url`.
async fn read_json(request: reqwest::RequestBuilder, url: &str) -> Result<Value, String> {
    let response = request
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("{url} unreachable: {}", error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered HTTP {status}"));
    }
    response
        .json()
        .await
        .map_err(|e| format!("{url} answered non-JSON: {e}"))
}

/// An error and its causes, `: `-joined: reqwest's own text ("error sending request")
/// hides whether the connection was refused, timed out or failed TLS.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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
    use super::*;

    #[test]
    fn a_successful_request_clears_a_probes_down() {
        let yaml = "backends:\n  - {name: b, type: anthropic, base_url: 'http://127.0.0.1:9', api_key: k, models: [m]}\n";
        let config = glider_config::Config::parse(yaml, "t").expect("valid");
        let backend = Backend::new(config.backends[0].clone());
        backend.answered();
        assert_eq!(
            backend.health().status,
            HealthStatus::Unknown,
            "only a Down is changed"
        );
        backend.health.set(down("HTTP 401".into()));
        backend.answered();
        let health = backend.health();
        assert_eq!(health.status, HealthStatus::Up);
        assert_eq!(health.detail, None);
        assert!(
            health
                .note
                .unwrap_or_default()
                .contains("request succeeded")
        );
    }

    #[tokio::test]
    async fn a_keyed_cloud_probe_answered_404_is_unverified_not_up() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A vendor's answer to a path that is not there, as a base_url missing /v1 gets.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let origin = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 8192];
            let _ = stream.read(&mut buf).await;
            let body = r#"{"error":{"message":"Not Found"}}"#;
            let reply = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(reply.as_bytes()).await.expect("reply");
        });
        let yaml = format!(
            "backends:\n  - {{name: keyed, type: anthropic, base_url: 'http://127.0.0.1:{port}', api_key: sk-ant-probe, models: [m]}}\n"
        );
        let config = glider_config::Config::parse(&yaml, "t").expect("valid");
        let health = Backend::new(config.backends[0].clone()).probe().await;
        origin.await.expect("origin served");
        assert_eq!(health.status, HealthStatus::Unknown, "{health:?}");
        assert!(
            health
                .note
                .unwrap_or_default()
                .starts_with("unverified: GET /v1/models answered HTTP 404"),
        );
    }

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
