//! `/v1/models`: every model a client can ask for, with aliases and what is missing.

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
}

impl Engine {
    /// Every model a client can ask for, with aliases and what is missing.
    pub fn models(&self) -> Vec<ModelInfo> {
        let runtime = self.runtime();
        let mut models = Vec::new();
        for backend in runtime.backends.iter().filter(|b| b.config.enabled) {
            let health = backend.health();
            let unavailable = backend.unavailable.clone().or(health.detail.clone());
            for id in backend.config.concrete_models() {
                models.push(ModelInfo {
                    id,
                    backend: backend.name().to_owned(),
                    alias_of: None,
                    unavailable: unavailable.clone(),
                });
            }
        }
        // Pattern aliases (`claude-*`) are not models a client can pick from a list.
        for (alias, target) in runtime
            .config
            .model_aliases
            .iter()
            .filter(|(a, _)| !a.contains('*'))
        {
            let backend = models.iter().find(|m| &m.id == target).cloned();
            models.push(ModelInfo {
                id: alias.clone(),
                backend: backend
                    .as_ref()
                    .map(|m| m.backend.clone())
                    .unwrap_or_default(),
                alias_of: Some(target.clone()),
                unavailable: backend.and_then(|m| m.unavailable),
            });
        }
        models
    }
}
