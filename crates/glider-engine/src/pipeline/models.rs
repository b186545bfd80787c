//! `/v1/models`: every model a client can ask for, each id once, with aliases and what
//! is missing; and the one entry `/v1/models/{id}` retrieves.

use glider_backend::Capabilities;
use glider_backend::health::HealthStatus;
use serde::Serialize;

use super::Engine;

/// One model as `/v1/models` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub id: String,
    pub backend: String,
    /// An alias names the model it stands for.
    pub alias_of: Option<String>,
    /// Why this model cannot be served now, if so.
    pub unavailable: Option<String>,
    /// Whether a probed local backend has the model loaded (llama.cpp's GGUF path
    /// matched by its file stem); `None` for cloud backends and before the first probe.
    pub warm: Option<bool>,
    /// What a probed local server says the model can do (context window, tools,
    /// thinking, vision); `None` when it said nothing.
    pub capabilities: Option<Capabilities>,
}

impl Engine {
    /// Every model a client can ask for, each id once, with aliases and what is missing.
    ///
    /// An id is listed as what a request for it reaches: an exact alias is resolved
    /// before routing, so an alias that equals a backend's model replaces that entry;
    /// a model several backends list is shown on the first, which the router tries first.
    pub fn models(&self) -> Vec<ModelInfo> {
        let runtime = self.runtime();
        let mut models: Vec<ModelInfo> = Vec::new();
        for backend in runtime.backends.iter().filter(|b| b.config.enabled) {
            let health = backend.health();
            let unavailable = backend.unavailable.clone().or(health.detail.clone());
            for id in backend.config.concrete_models() {
                if models.iter().any(|m| m.id == id) {
                    continue;
                }
                models.push(ModelInfo {
                    backend: backend.name().to_owned(),
                    alias_of: None,
                    unavailable: unavailable.clone(),
                    warm: (backend.is_local() && health.status != HealthStatus::Unknown)
                        .then(|| backend.is_warm(&id)),
                    capabilities: backend.discovered(&id),
                    id,
                });
            }
        }
        // Aliases resolve one step, to a backend's model: look targets up before any
        // alias shadows one.
        let concrete = models.clone();
        // Pattern aliases (`claude-*`) are not models a client can pick from a list.
        for (alias, target) in runtime
            .config
            .model_aliases
            .iter()
            .filter(|(a, _)| !a.contains('*'))
        {
            let served = concrete.iter().find(|m| &m.id == target).cloned();
            let entry = ModelInfo {
                id: alias.clone(),
                backend: served
                    .as_ref()
                    .map(|m| m.backend.clone())
                    .unwrap_or_default(),
                alias_of: Some(target.clone()),
                warm: served.as_ref().and_then(|m| m.warm),
                capabilities: served.as_ref().and_then(|m| m.capabilities.clone()),
                unavailable: served.and_then(|m| m.unavailable),
            };
            match models.iter_mut().find(|m| &m.id == alias) {
                Some(shadowed) => *shadowed = entry,
                None => models.push(entry),
            }
        }
        models
    }

    /// The entry `/v1/models` lists under `id`, if any.
    pub fn model(&self, id: &str) -> Option<ModelInfo> {
        self.models().into_iter().find(|m| m.id == id)
    }
}
