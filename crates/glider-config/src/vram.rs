//! The `vram:` section: how Glider watches GPU memory (the monitor and its sample
//! interval) and shares it among local models (strategy, headroom, per-model
//! `reserve` and `priority`, `max_loaded`). With no GPU found every VRAM rule steps
//! aside; docs/vram.md says what each key does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where GPU memory figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MonitorKind {
    /// NVML when NVIDIA's library loads, else `nvidia-smi`, else no GPU.
    #[default]
    Auto,
    Nvml,
    NvidiaSmi,
    /// Never look: every VRAM rule steps aside.
    None,
}

/// How local models share the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Load a model when a request needs it; evict idle models, cheapest reload first.
    #[default]
    OnDemand,
    /// The models marked `reserve` keep their memory even while unloaded; the rest
    /// share what is left, on demand.
    Pinned,
}

/// One local model's share of the GPU.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VramModel {
    /// Never evicted; with `strategy: pinned` its memory is held for it while unloaded.
    pub reserve: bool,
    /// A request for a model may evict only models of equal or lower priority.
    pub priority: i32,
    /// MiB it takes loaded, for planning until it has been measured (a vLLM server's
    /// model, whose memory no listing reports; an Ollama model before its first load).
    pub memory_mib: Option<u64>,
}

/// vLLM sleep mode for one backend (its server runs with `--enable-sleep-mode` and
/// `VLLM_SERVER_DEV_MODE=1`): Glider puts its model to sleep to make room for another
/// and wakes it before a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SleepConfig {
    /// `POST /sleep?level=N`: 1 offloads the weights to CPU memory and frees the KV
    /// cache (a wake is quick); 2 discards the weights (a wake reloads them).
    pub level: u8,
}

impl Default for SleepConfig {
    fn default() -> Self {
        SleepConfig { level: 1 }
    }
}

/// The `vram:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VramConfig {
    /// Plan loads and evictions for local models (steps aside anyway without a GPU).
    pub enabled: bool,
    /// How the GPUs are found (restart-only: read once, at start).
    pub monitor: MonitorKind,
    /// The `nvidia-smi` program (a name looked up on PATH, or a path; restart-only).
    pub nvidia_smi: String,
    /// Seconds between GPU samples.
    pub sample_interval_secs: f64,
    /// MiB kept free on the GPU beyond what the models take.
    pub headroom_mib: u64,
    pub strategy: Strategy,
    /// The most models loaded at once on one backend (`None`: no limit but memory).
    pub max_loaded: Option<usize>,
    /// Seconds a load is assumed to take for a model never loaded through Glider.
    pub unmeasured_load_secs: f64,
    /// When a cold model is passed over for `routing.max_cold_wait_secs`, load it in
    /// the background so the next request finds it warm.
    pub background_load: bool,
    /// Per-model settings, by model name as the backend lists it.
    pub models: BTreeMap<String, VramModel>,
    /// Seconds a vLLM wake is assumed to take before one was measured (level 1; a
    /// level 2 wake reloads the weights and is assumed to take `unmeasured_load_secs`).
    pub unmeasured_wake_secs: f64,
    /// vLLM backends, by name, whose sleep mode Glider drives; a vLLM backend not named
    /// here keeps its model loaded and is never put to sleep.
    pub sleep: BTreeMap<String, SleepConfig>,
}

impl Default for VramConfig {
    fn default() -> Self {
        VramConfig {
            enabled: true,
            monitor: MonitorKind::Auto,
            nvidia_smi: "nvidia-smi".into(),
            sample_interval_secs: 5.0,
            headroom_mib: 512,
            strategy: Strategy::OnDemand,
            max_loaded: None,
            unmeasured_load_secs: 10.0,
            background_load: true,
            models: BTreeMap::new(),
            unmeasured_wake_secs: 1.0,
            sleep: BTreeMap::new(),
        }
    }
}

impl VramConfig {
    /// What is wrong with these values, one line each; `backends` are the configured
    /// ones, which `sleep` must name (vLLM backends only).
    pub fn problems(&self, backends: &[crate::BackendConfig]) -> Vec<String> {
        let mut problems = Vec::new();
        if !(self.sample_interval_secs.is_finite() && self.sample_interval_secs >= 0.1) {
            problems.push("vram.sample_interval_secs must be at least 0.1".to_owned());
        }
        if !(self.unmeasured_load_secs.is_finite() && self.unmeasured_load_secs >= 0.0) {
            problems.push("vram.unmeasured_load_secs must be a non-negative number".to_owned());
        }
        if !(self.unmeasured_wake_secs.is_finite() && self.unmeasured_wake_secs >= 0.0) {
            problems.push("vram.unmeasured_wake_secs must be a non-negative number".to_owned());
        }
        for (backend, sleep) in &self.sleep {
            match backends.iter().find(|b| &b.name == backend) {
                None => problems.push(format!("vram.sleep.{backend}: no backend is named so")),
                Some(b) if b.kind != crate::BackendKind::Vllm => problems.push(format!(
                    "vram.sleep.{backend}: only a vllm backend has a sleep mode"
                )),
                Some(_) => {}
            }
            if !matches!(sleep.level, 1 | 2) {
                problems.push(format!(
                    "vram.sleep.{backend}.level must be 1 or 2 (vLLM's sleep levels), not {}",
                    sleep.level
                ));
            }
        }
        if self.max_loaded == Some(0) {
            problems.push("vram.max_loaded must be at least 1".to_owned());
        }
        problems
    }
}
