//! Finding local model servers on this machine's usual ports (Ollama 11434, LM Studio
//! 1234, vLLM 8000, llama.cpp 8080), each identified by its own endpoints: Ollama's
//! `/api/version`, llama.cpp's `/props`, an OpenAI-compatible `/v1/models` (vLLM says
//! `owned_by: vllm`). A Glider gateway (its `/api/version` says `glider-…`) is told
//! apart, so a running Glider is never taken for a model server. `glider doctor` reports
//! what it finds; `glider serve` without a config uses it as its local backends.

use std::time::Duration;

use glider_config::BackendConfig;
use serde_json::{Value, json};

/// The ports scanned, and the server each usually is.
pub const USUAL_PORTS: [(u16, &str); 4] = [
    (11434, "Ollama"),
    (1234, "LM Studio"),
    (8000, "vLLM"),
    (8080, "llama.cpp"),
];

/// Replaces [`USUAL_PORTS`] with a comma-separated list (`GLIDER_DISCOVER_PORTS=11434,8080`;
/// empty: scan nothing).
pub const PORTS_ENV: &str = "GLIDER_DISCOVER_PORTS";

/// How long one identifying request may take: a local server answers at once, and a
/// port where something hangs must not hold up a start.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What answers on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    Ollama,
    LlamaCpp,
    Vllm,
    LmStudio,
    /// `/v1/models` answers, nothing else says which server it is.
    OpenAiCompatible,
    /// Another Glider's gateway.
    Glider,
    /// Something speaks HTTP there, but none of the endpoints above.
    Unknown,
}

impl ServerKind {
    /// The server's name, for people.
    pub fn label(self) -> &'static str {
        match self {
            ServerKind::Ollama => "Ollama",
            ServerKind::LlamaCpp => "llama.cpp",
            ServerKind::Vllm => "vLLM",
            ServerKind::LmStudio => "LM Studio",
            ServerKind::OpenAiCompatible => "an OpenAI-compatible server",
            ServerKind::Glider => "Glider",
            ServerKind::Unknown => "an unknown HTTP server",
        }
    }

    /// A short identifier (JSON output, backend names).
    pub fn id(self) -> &'static str {
        match self {
            ServerKind::Ollama => "ollama",
            ServerKind::LlamaCpp => "llamacpp",
            ServerKind::Vllm => "vllm",
            ServerKind::LmStudio => "lmstudio",
            ServerKind::OpenAiCompatible => "openai-compatible",
            ServerKind::Glider => "glider",
            ServerKind::Unknown => "unknown",
        }
    }

    /// Whether it serves models Glider can use as a backend.
    pub fn is_model_server(self) -> bool {
        !matches!(self, ServerKind::Glider | ServerKind::Unknown)
    }
}

/// One server found.
#[derive(Debug, Clone)]
pub struct Found {
    pub port: u16,
    pub kind: ServerKind,
    /// The endpoint that identified it (`/api/version`, `/props`, `/v1/models`).
    pub identified_by: &'static str,
    /// The models it lists (file stems for llama.cpp's GGUF paths).
    pub models: Vec<String>,
}

impl Found {
    /// The base URL a backend uses for it (Ollama's root; `/v1` for the OpenAI wire).
    pub fn base_url(&self) -> String {
        match self.kind {
            ServerKind::Ollama => format!("http://127.0.0.1:{}", self.port),
            _ => format!("http://127.0.0.1:{}/v1", self.port),
        }
    }

    /// The backend `type` that speaks to it: Ollama's own wire for Ollama, the
    /// OpenAI-compatible (`vllm` type) wire for the others.
    pub fn backend_type(&self) -> &'static str {
        match self.kind {
            ServerKind::Ollama => "ollama",
            _ => "vllm",
        }
    }

    /// A backend for it, named `name`: Ollama's own wire for Ollama, the
    /// OpenAI-compatible (`vllm` type) wire for the others; its listed models, the first
    /// one answering for a request that names none of them.
    pub fn backend(&self, name: &str) -> Result<BackendConfig, String> {
        serde_json::from_value(json!({
            "name": name,
            "type": self.backend_type(),
            "base_url": self.base_url(),
            "models": self.models,
            "default_model": self.models.first(),
        }))
        .map_err(|e| {
            format!(
                "backend for {} on port {}: {e}",
                self.kind.label(),
                self.port
            )
        })
    }
}

/// The ports to scan: [`PORTS_ENV`] when set, else [`USUAL_PORTS`].
pub fn ports() -> Result<Vec<u16>, String> {
    match std::env::var(PORTS_ENV) {
        Ok(list) => list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| format!("{PORTS_ENV}: {p:?} is not a port number"))
            })
            .collect(),
        Err(_) => Ok(USUAL_PORTS.iter().map(|(port, _)| *port).collect()),
    }
}

/// The server usually found on `port`, if it is one of [`USUAL_PORTS`].
pub fn usual_server(port: u16) -> Option<&'static str> {
    USUAL_PORTS
        .iter()
        .find(|(usual, _)| *usual == port)
        .map(|(_, name)| *name)
}

/// Scan `ports` on 127.0.0.1, all at once; what answers, in the order of `ports`.
pub async fn scan(ports: &[u16]) -> Vec<Found> {
    let client = match reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(REQUEST_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!(error = %e, "cannot build the HTTP client for local server discovery");
            return Vec::new();
        }
    };
    let client = &client;
    futures_util::future::join_all(ports.iter().map(|&port| identify(client, port)))
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// How long identifying one port may take in all: a port that accepts but never answers
/// costs this once, not once per endpoint asked.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(3);

/// Why identifying a port stopped before its endpoints said what it is.
enum Silent {
    /// Nothing listens there.
    Refused,
    /// Something accepted the connection but did not answer in time.
    TimedOut,
}

/// What answers on `port`, by its own endpoints; `None` when nothing listens, an
/// unknown server when something listens but does not answer in time.
async fn identify(client: &reqwest::Client, port: u16) -> Option<Found> {
    let unknown = || Found {
        port,
        kind: ServerKind::Unknown,
        identified_by: "",
        models: Vec::new(),
    };
    match tokio::time::timeout(IDENTIFY_TIMEOUT, identify_answering(client, port)).await {
        Ok(Ok(found)) => Some(found),
        Ok(Err(Silent::Refused)) => None,
        Ok(Err(Silent::TimedOut)) | Err(_) => Some(unknown()),
    }
}

/// [`identify`] until the first request that is refused or times out.
async fn identify_answering(client: &reqwest::Client, port: u16) -> Result<Found, Silent> {
    let get = |path: &'static str| async move {
        let response = client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await;
        match response {
            Err(e) if e.is_connect() => Err(Silent::Refused),
            Err(e) if e.is_timeout() => Err(Silent::TimedOut),
            Err(_) => Ok(None),
            Ok(response) if response.status().is_success() => {
                Ok(response.json::<Value>().await.ok())
            }
            Ok(_) => Ok(None),
        }
    };
    let found = |kind, identified_by, models| Found {
        port,
        kind,
        identified_by,
        models,
    };
    // Nothing listening: the first request says so and the others are not sent.
    let version = get("/api/version").await?;
    if let Some(version) = version.as_ref().and_then(|v| v["version"].as_str()) {
        if version.starts_with("glider-") {
            return Ok(found(ServerKind::Glider, "/api/version", Vec::new()));
        }
        // Other servers answer `{"version": …}` there too (Open WebUI on 8080): Ollama is
        // the one whose /api/tags lists models.
        let tags = get("/api/tags").await?;
        if let Some(tags) = tags.filter(|t| t["models"].is_array()) {
            return Ok(found(
                ServerKind::Ollama,
                "/api/version and /api/tags",
                glider_backend::health::ollama_model_names(&tags),
            ));
        }
    }
    let models = get("/v1/models").await?;
    let listed = models.as_ref().map(openai_ids).unwrap_or_default();
    if get("/props").await?.is_some_and(|p| p.is_object()) {
        return Ok(found(ServerKind::LlamaCpp, "/props", listed));
    }
    let Some(models) = models.filter(|m| m["data"].is_array()) else {
        return Ok(found(ServerKind::Unknown, "", Vec::new()));
    };
    let owned_by_vllm = models["data"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| m["owned_by"] == "vllm");
    let kind = match (owned_by_vllm, usual_server(port)) {
        (true, _) | (false, Some("vLLM")) => ServerKind::Vllm,
        (false, Some("LM Studio")) => ServerKind::LmStudio,
        _ => ServerKind::OpenAiCompatible,
    };
    Ok(found(kind, "/v1/models", listed))
}

/// Model ids in an OpenAI `/v1/models` answer, as a config would name them.
fn openai_ids(models: &Value) -> Vec<String> {
    models["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .map(glider_backend::health::readable_model_id)
        .collect()
}

/// `glider serve` with no config file: the model servers found on the usual ports
/// replace the embedded profile's local backend (its fixed Ollama address), the first
/// one under its name `local`, the others under their server's id; each is named at
/// start. Nothing found: the embedded profile stays as it is, and that is said too. A
/// server on Glider's own gateway port is an error that says which port to move.
pub async fn use_found_servers(config: &mut glider_config::Config) -> anyhow::Result<()> {
    let ports = ports().map_err(anyhow::Error::msg)?;
    let found: Vec<Found> = scan(&ports)
        .await
        .into_iter()
        .filter(|f| f.kind.is_model_server())
        .collect();
    if let Some(clash) = found.iter().find(|f| f.port == config.server.proxy_port) {
        let server = &config.server;
        let ours: Vec<u16> = config.listen_ports().iter().map(|p| p.port).collect();
        let instead = free_port_after(&server.bind, clash.port, &ours)
            .map_or_else(|| "PORT".to_owned(), |p| p.to_string());
        anyhow::bail!(
            "{} is listening on port {}, Glider's gateway port (server.proxy_port): start Glider on another port, e.g. `glider serve --port {instead}`, and it uses that server as its local backend",
            clash.kind.label(),
            clash.port
        );
    }
    replace_local_backends(config, &found, &ports)
}

/// The first port above `port` that is free and not another of Glider's (`ours`) nor
/// a model server's usual one: what to suggest to move to.
pub fn free_port_after(bind: &str, port: u16, ours: &[u16]) -> Option<u16> {
    (port.saturating_add(10)..port.saturating_add(100))
        .filter(|p| !ours.contains(p) && usual_server(*p).is_none())
        .find(|p| std::net::TcpListener::bind((bind, *p)).is_ok())
}

/// The model servers in `found` (scanned on `ports`) replace `config`'s local backends,
/// as [`use_found_servers`] says; `glider doctor` without a config checks the same
/// backends serve would use.
pub fn replace_local_backends(
    config: &mut glider_config::Config,
    found: &[Found],
    ports: &[u16],
) -> anyhow::Result<()> {
    let found = found.iter().filter(|f| f.kind.is_model_server());
    let embedded: Vec<String> = config
        .backends
        .iter()
        .filter(|b| b.is_local())
        .map(|b| format!("{} at {}", b.name, b.base_url))
        .collect();
    let mut backends = Vec::new();
    for server in found {
        if server.models.is_empty() {
            tracing::warn!(
                "{} on port {} serves no model yet, so it is not used (Ollama: `ollama pull MODEL`)",
                server.kind.label(),
                server.port
            );
            continue;
        }
        let name = if backends.is_empty() {
            "local".to_owned()
        } else {
            let taken = |name: &str| backends.iter().any(|b: &BackendConfig| b.name == name);
            let id = server.kind.id();
            if taken(id) {
                format!("{id}-{}", server.port)
            } else {
                id.to_owned()
            }
        };
        let backend = server.backend(&name).map_err(anyhow::Error::msg)?;
        tracing::info!(
            "no config file: local model server found: {} on port {} (by {}), backend {name} at {} with models {}",
            server.kind.label(),
            server.port,
            server.identified_by,
            server.base_url(),
            server.models.join(", ")
        );
        backends.push(backend);
    }
    if backends.is_empty() {
        tracing::info!(
            "no config file and no local model server found on ports {ports:?} ({PORTS_ENV}); the embedded profile's {} stays",
            embedded.join(", ")
        );
        return Ok(());
    }
    config.backends.retain(|b| !b.is_local());
    // Local first, as in the embedded profile: the routing rules send local-worthy
    // requests to the first local backend that serves the model.
    backends.append(&mut config.backends);
    config.backends = backends;
    let problems = config.problems();
    if !problems.is_empty() {
        anyhow::bail!(
            "the backends made from the servers found do not validate: {}",
            problems.join("; ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_test_support::canned::{CannedReply, CannedServer};

    /// A loopback HTTP server answering `routes` (path, JSON body) and 404 otherwise;
    /// its port.
    async fn standin(routes: &'static [(&'static str, &'static str)]) -> u16 {
        let server = CannedServer::start(|request| {
            routes
                .iter()
                .find(|(path, _)| *path == request.path)
                .map_or(CannedReply::json(404, "{}"), |(_, body)| {
                    CannedReply::json(200, body)
                })
        })
        .await;
        server.port
    }

    #[tokio::test]
    async fn a_version_without_ollamas_model_list_is_not_ollama() {
        // Open WebUI answers /api/version but has no Ollama /api/tags.
        let webui = standin(&[("/api/version", r#"{"version":"0.6.5"}"#)]).await;
        let ollama = standin(&[
            ("/api/version", r#"{"version":"0.9.0"}"#),
            ("/api/tags", r#"{"models":[{"name":"qwen3:4b"}]}"#),
        ])
        .await;
        let found = scan(&[webui, ollama]).await;
        let kind = |port| found.iter().find(|f| f.port == port).map(|f| f.kind);
        assert_eq!(kind(webui), Some(ServerKind::Unknown), "{found:?}");
        assert_eq!(kind(ollama), Some(ServerKind::Ollama), "{found:?}");
        let ollama = found.iter().find(|f| f.port == ollama).expect("found");
        assert_eq!(ollama.models, ["qwen3:4b"]);
    }

    #[tokio::test]
    async fn a_port_that_accepts_but_never_answers_is_an_unknown_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let found = scan(&[port]).await;
        held.abort();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, ServerKind::Unknown);
    }
}
