//! What loading each local model has been measured to cost — memory once loaded,
//! seconds to load, seconds to wake (a vLLM model in sleep mode) — kept under `GLIDER_HOME/vram/measured.json` (written atomically)
//! so a restart plans with what the last run learnt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One model's measurements.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelCost {
    /// MiB on the GPU once loaded (Ollama's `size_vram`).
    pub memory_mib: Option<u64>,
    /// Seconds the last load through Glider took.
    pub load_secs: Option<f64>,
    /// Loads measured so far.
    pub loads: u64,
    /// Seconds the last wake of a sleeping vLLM model (`POST /wake_up`) took.
    pub wake_secs: Option<f64>,
    /// Wakes measured so far.
    pub wakes: u64,
}

/// Every model's measurements, by `backend/model`.
#[derive(Debug, Default)]
pub struct Measured {
    path: Option<PathBuf>,
    models: BTreeMap<String, ModelCost>,
    /// Changed since the last [`Measured::save`].
    dirty: bool,
}

/// The key a model's measurements (and reservations) are kept under: Ollama's name
/// with its tag, so `qwen` and `qwen:latest` are one model.
pub fn key(backend: &str, model: &str) -> String {
    format!("{backend}/{}", crate::ollama::canonical(model))
}

impl Measured {
    /// Read `dir/measured.json` (none yet: empty; unreadable: empty, with a warning —
    /// measurements are re-learnt, never a reason not to start).
    pub fn open(dir: Option<&Path>) -> Measured {
        let Some(dir) = dir else {
            return Measured::default();
        };
        let path = dir.join("measured.json");
        let models = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "VRAM measurements unreadable; starting afresh");
                BTreeMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read VRAM measurements");
                BTreeMap::new()
            }
        };
        Measured {
            path: Some(path),
            models,
            dirty: false,
        }
    }

    pub fn get(&self, key: &str) -> ModelCost {
        self.models.get(key).cloned().unwrap_or_default()
    }

    /// Note a model's memory as seen loaded (kept at the next [`Measured::save`]).
    pub fn saw_memory(&mut self, key: &str, memory_mib: u64) {
        let cost = self.models.entry(key.to_owned()).or_default();
        if cost.memory_mib != Some(memory_mib) {
            cost.memory_mib = Some(memory_mib);
            self.dirty = true;
        }
    }

    /// Note a measured load (kept at the next [`Measured::save`]).
    pub fn loaded(&mut self, key: &str, secs: f64) {
        let cost = self.models.entry(key.to_owned()).or_default();
        cost.load_secs = Some(secs);
        cost.loads += 1;
        self.dirty = true;
    }

    /// Note a measured wake (kept at the next [`Measured::save`]).
    pub fn woke(&mut self, key: &str, secs: f64) {
        let cost = self.models.entry(key.to_owned()).or_default();
        cost.wake_secs = Some(secs);
        cost.wakes += 1;
        self.dirty = true;
    }

    /// Write what changed since the last save: once per plan, however many
    /// measurements it noted.
    pub fn save(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let Some(path) = &self.path else { return };
        let result = serde_json::to_vec_pretty(&self.models)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                glider_sys::atomicfile::write(path, &bytes, 0o600)
            });
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "cannot save VRAM measurements");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_survive_a_reopen_and_a_corrupt_file_starts_afresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut measured = Measured::open(Some(dir.path()));
        measured.saw_memory(&key("ollama", "a"), 4445);
        measured.loaded(&key("ollama", "a:latest"), 2.5);
        measured.woke(&key("ollama", "a"), 0.25);
        measured.save();
        let again = Measured::open(Some(dir.path()));
        assert_eq!(
            again.get("ollama/a:latest"),
            ModelCost {
                memory_mib: Some(4445),
                load_secs: Some(2.5),
                loads: 1,
                wake_secs: Some(0.25),
                wakes: 1,
            }
        );
        std::fs::write(dir.path().join("measured.json"), b"{not json").expect("write");
        assert!(Measured::open(Some(dir.path())).models.is_empty());
    }
}
