//! GPU memory for local models (spec package `vram`): the monitor that samples the GPUs
//! ([`monitor`]), the eviction planner ([`planner`]), reservations a request holds on
//! its model ([`reserve`]), the measured cost of each model's load kept across restarts
//! ([`measured`]), Ollama's load and unload ([`ollama`]) and vLLM's sleep and wake
//! ([`vllm`]). [`Vram`] ties them
//! together for the engine (plan and make room before a cold model is sent a request;
//! the warm condition of the backup sequence) and the dashboard (`/api/vram`, `/ws`,
//! the Prometheus gauges). With no GPU, or `vram.enabled: false`, every rule here steps
//! aside: nothing is planned, nothing is unloaded, nothing fails.
//!
//! One file past 600 lines on purpose: [`Vram`] is the one place where the parts meet —
//! the models it holds resident, the plans it makes and carries out, and the events and
//! views it publishes share its state; each part it ties is a module of its own.

pub mod measured;
pub mod monitor;
pub mod ollama;
pub mod planner;
pub mod reserve;
pub mod vllm;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use glider_backend::Backend;
use glider_config::{BackendKind, Strategy, VramConfig};
use serde::Serialize;
use tokio::sync::broadcast;

use measured::{Measured, key};
use monitor::{GpuSample, Monitor};
use ollama::{Ollama, same_model};
use planner::{LoadedModel, Need, Plan, Room};
pub use reserve::{Reservation, ReservedStream};
use vllm::Vllm;

/// The last GPU sample.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuState {
    /// `nvml`, `nvidia-smi` or `none` (`detecting` while [`Vram::start`] still looks).
    pub source: &'static str,
    /// How the monitor was chosen (what was tried, and why it is "no GPU").
    pub detected: String,
    pub gpus: Vec<GpuSample>,
    /// Why the last sample failed, when it did (the one before is kept).
    pub error: Option<String>,
    pub sampled_at_ms: u64,
}

/// Why a plan ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A request is about to be sent to the model.
    Request,
    /// The warm condition passed the model over; it is loaded for the next request.
    Background,
    /// A sticky local session's next user turn began; its model was checked afresh
    /// (an eviction since its last turn is not in the last probe) and loaded again.
    Prewarm,
}

/// One planning decision, as the dashboard shows it and `/ws` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanRecord {
    pub at_ms: u64,
    pub cause: Cause,
    pub backend: String,
    pub model: String,
    pub need_mib: u64,
    pub free_mib: u64,
    pub plan: Plan,
    /// What was done: `loaded in 2.1s`, `not loaded: …`, an unload's error.
    pub outcome: String,
}

/// What `/ws` is told.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum VramEvent {
    Sample(GpuState),
    Plan(PlanRecord),
    Loaded {
        backend: String,
        model: String,
        secs: f64,
        memory_mib: Option<u64>,
    },
    Unloaded {
        backend: String,
        model: String,
    },
    /// A vLLM model was put to sleep (`POST /sleep?level=N`) to make room.
    Slept {
        backend: String,
        model: String,
        level: u8,
    },
    /// A sleeping vLLM model was woken (`POST /wake_up`) for a request.
    Woke {
        backend: String,
        model: String,
        secs: f64,
        memory_mib: Option<u64>,
    },
}

/// What waiting for a cold model would cost, as planned from what is known now.
#[derive(Debug, Clone, PartialEq)]
pub struct ColdWait {
    /// Seconds its load (or, for a sleeping vLLM model, its wake) is expected to take.
    pub wait_secs: f64,
    /// Whether that is a measurement (else `prior`).
    pub measured: bool,
    /// The key the unmeasured figure comes from: `vram.unmeasured_load_secs` or
    /// `vram.unmeasured_wake_secs`.
    pub prior: &'static str,
    pub plan: Plan,
}

/// One local model on `/api/vram`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelView {
    pub backend: String,
    pub model: String,
    pub loaded: bool,
    pub memory_mib: Option<u64>,
    pub load_secs: Option<f64>,
    pub loads: u64,
    /// Seconds its last wake took (a vLLM model in sleep mode).
    pub wake_secs: Option<f64>,
    pub wakes: u64,
    /// `vram.sleep.<backend>.level` when Glider drives the backend's sleep mode.
    pub sleep_level: Option<u8>,
    /// Requests and streams holding it now.
    pub in_flight: usize,
    pub reserve: bool,
    pub priority: i32,
}

/// `/api/vram`.
#[derive(Debug, Clone, Serialize)]
pub struct VramView {
    pub enabled: bool,
    pub strategy: Strategy,
    pub headroom_mib: u64,
    /// The GPU sample; `gpus` is empty on a machine without one.
    pub gpu: GpuState,
    pub models: Vec<ModelView>,
    pub last_plan: Option<PlanRecord>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether Glider plans memory for this backend's models: Ollama loads and unloads on
/// request, a vLLM backend named in `vram.sleep` sleeps and wakes; any other
/// OpenAI-compatible server (vLLM without it, llama.cpp) keeps its one model loaded.
fn managed(config: &VramConfig, backend: &Backend) -> bool {
    backend.is_local()
        && (backend.kind() == BackendKind::Ollama || sleep_level(config, backend).is_some())
}

/// `vram.sleep.<backend>.level`, for a vLLM backend whose sleep mode Glider drives.
fn sleep_level(config: &VramConfig, backend: &Backend) -> Option<u8> {
    (backend.kind() == BackendKind::Vllm)
        .then(|| config.sleep.get(backend.name()).map(|s| s.level))
        .flatten()
}

/// The name a plan gives a model: with its backend, as several share the GPU.
fn label(backend: &str, model: &str) -> String {
    format!("{backend}/{model}")
}

/// A loaded model as planned, with where it is and what it is called there.
struct Resident {
    backend: String,
    model: String,
    planned: LoadedModel,
}

/// `vram.models` settings of `model`, whether the config names it with its tag or not.
fn settings(config: &VramConfig, model: &str) -> glider_config::VramModel {
    config
        .models
        .iter()
        .find(|(name, _)| same_model(name, model))
        .map(|(_, settings)| settings.clone())
        .unwrap_or_default()
}

/// The monitor while [`Vram::start`] is still finding the GPUs: no GPU yet.
struct Detecting;

impl Monitor for Detecting {
    fn source(&self) -> &'static str {
        "detecting"
    }
    fn sample(&self) -> Result<Vec<GpuSample>, String> {
        Ok(Vec::new())
    }
}

/// GPU memory state and control, one per Glider process.
pub struct Vram {
    /// The chosen monitor; [`Vram::start`] replaces its placeholder once detected.
    monitor: Mutex<Arc<dyn Monitor>>,
    /// The probes (`nvidia-smi`) running now: closed by [`Vram::stop`].
    live: glider_sys::procutil::LiveGroups,
    gpu: Mutex<GpuState>,
    measured: Mutex<Measured>,
    reservations: Arc<reserve::Reservations>,
    /// Models a prewarm is checking or loading now, each with a gate the prewarm holds
    /// until it is done: a request for one waits at the gate rather than go out ahead
    /// of the load on the word of an older probe.
    prewarming: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
    last_used: Mutex<BTreeMap<String, u64>>,
    /// Whether each vLLM backend in sleep mode was asleep when last asked or told
    /// (`/is_sleeping`, a sleep, a wake); absent until then.
    asleep: Mutex<BTreeMap<String, bool>>,
    last_plan: Mutex<Option<PlanRecord>>,
    /// One plan at a time: two plans at once would each count the same free memory.
    planning: tokio::sync::Mutex<()>,
    events: broadcast::Sender<VramEvent>,
    http: reqwest::Client,
}

/// The run-state name of a running `nvidia-smi` probe (its `probe:` prefix is what the
/// next start ends when Glider was killed while one ran).
pub const PROBE_LABEL: &str = "probe:nvidia-smi";

impl Vram {
    /// Find the GPUs as `config.monitor` says, and read the measurements kept under
    /// `home/vram` (none kept without a home). Samples once before returning: blocking,
    /// for as long as detection takes (bounded by the monitor's deadline). `glider serve`
    /// uses [`Vram::start`] instead.
    pub fn new(config: &VramConfig, home: Option<&Path>) -> Arc<Vram> {
        let live = glider_sys::procutil::LiveGroups::default();
        let (monitor, detected, first) = monitor::detect(config.monitor, &config.nvidia_smi, &live);
        tracing::info!(monitor = monitor.source(), detected = %detected, "VRAM monitor");
        let vram = Vram::build(monitor.into(), detected, home, live);
        vram.record_sample(first.unwrap_or_else(|| vram.monitor().sample()));
        vram
    }

    /// For `glider serve`: return at once, with no GPU known yet (source `detecting`,
    /// every rule stepping aside), and find the GPUs on a blocking thread — detection
    /// runs NVML and `nvidia-smi`, either of which can hang — then sample as
    /// [`Vram::spawn_sampler`] does. Start-up never waits on a probe; [`Vram::stop`]
    /// kills one still running. With `pids`, each probe is recorded in the run state
    /// while it runs ([`PROBE_LABEL`]), so one a killed Glider left is ended by the next
    /// start.
    pub fn start(
        config: &VramConfig,
        home: Option<&Path>,
        pids: Option<glider_sys::runstate::DelegatePids>,
        settings: impl Fn() -> Arc<glider_config::Config> + Send + Sync + 'static,
    ) -> Arc<Vram> {
        let live = match pids {
            Some(pids) => glider_sys::procutil::LiveGroups::recorded(pids, PROBE_LABEL),
            None => glider_sys::procutil::LiveGroups::default(),
        };
        let vram = Vram::build(
            Arc::new(Detecting),
            "detecting the GPUs".into(),
            home,
            live.clone(),
        );
        let (kind, program) = (config.monitor, config.nvidia_smi.clone());
        let weak = Arc::downgrade(&vram);
        tokio::spawn(async move {
            let detected =
                tokio::task::spawn_blocking(move || monitor::detect(kind, &program, &live)).await;
            let (Ok((monitor, detected, first)), Some(vram)) = (detected, weak.upgrade()) else {
                return;
            };
            tracing::info!(monitor = monitor.source(), detected = %detected, "VRAM monitor");
            let monitor: Arc<dyn Monitor> = monitor.into();
            *lock(&vram.monitor) = monitor.clone();
            lock(&vram.gpu).source = monitor.source();
            lock(&vram.gpu).detected = detected;
            let state = match first {
                Some(first) => vram.record_sample(first),
                None => {
                    let sampler = vram.clone();
                    tokio::task::spawn_blocking(move || sampler.take_sample())
                        .await
                        .unwrap_or_else(|_| vram.gpu())
                }
            };
            let _ = vram.events.send(VramEvent::Sample(state));
            vram.spawn_sampler(settings);
        });
        vram
    }

    /// Kill any probe running now (`nvidia-smi` past its deadline or not) and start no
    /// other: Glider is stopping. Idempotent.
    pub fn stop(&self) {
        self.live.close();
        self.monitor().stop();
    }

    /// Over a given monitor (a fake one in tests).
    pub fn with_monitor(
        monitor: Box<dyn Monitor>,
        detected: String,
        home: Option<&Path>,
    ) -> Arc<Vram> {
        let vram = Vram::build(monitor.into(), detected, home, Default::default());
        vram.record_sample(vram.monitor().sample());
        vram
    }

    fn build(
        monitor: Arc<dyn Monitor>,
        detected: String,
        home: Option<&Path>,
        live: glider_sys::procutil::LiveGroups,
    ) -> Arc<Vram> {
        Arc::new(Vram {
            gpu: Mutex::new(GpuState {
                source: monitor.source(),
                detected,
                ..GpuState::default()
            }),
            monitor: Mutex::new(monitor),
            live,
            measured: Mutex::new(Measured::open(home.map(|h| h.join("vram")).as_deref())),
            reservations: Arc::default(),
            prewarming: Mutex::default(),
            last_used: Mutex::default(),
            asleep: Mutex::default(),
            last_plan: Mutex::default(),
            planning: tokio::sync::Mutex::new(()),
            events: broadcast::channel(64).0,
            http: reqwest::Client::new(),
        })
    }

    /// The monitor now.
    fn monitor(&self) -> Arc<dyn Monitor> {
        lock(&self.monitor).clone()
    }

    fn take_sample(&self) -> GpuState {
        self.record_sample(self.monitor().sample())
    }

    fn record_sample(&self, sampled: monitor::Sampled) -> GpuState {
        let mut gpu = lock(&self.gpu);
        match sampled {
            Ok(gpus) => {
                gpu.gpus = gpus;
                gpu.error = None;
            }
            Err(e) => gpu.error = Some(e),
        }
        gpu.sampled_at_ms = now_ms();
        gpu.clone()
    }

    /// Sample now, off the async runtime (a sample may run a subprocess).
    pub async fn sample(self: &Arc<Self>) -> GpuState {
        let vram = self.clone();
        let state = tokio::task::spawn_blocking(move || vram.take_sample())
            .await
            .unwrap_or_else(|_| lock(&self.gpu).clone());
        let _ = self.events.send(VramEvent::Sample(state.clone()));
        state
    }

    /// Sample every `vram.sample_interval_secs` of `settings()` (read each time, so a
    /// reload takes effect) until the last other handle is dropped, skipping the
    /// samples while `vram.enabled` is false; a machine with no GPU is not sampled
    /// again. The interval is valid: `VramConfig::problems` rejects one under 0.1s.
    pub fn spawn_sampler(
        self: &Arc<Self>,
        settings: impl Fn() -> Arc<glider_config::Config> + Send + Sync + 'static,
    ) {
        if self.monitor().source() == "none" {
            return;
        }
        let weak = Arc::downgrade(self);
        let settings = Arc::new(settings);
        glider_sys::safego::spawn_named(
            "vram sampler",
            glider_sys::safego::Restart::BACKOFF,
            move || {
                let (weak, settings) = (weak.clone(), settings.clone());
                async move {
                    loop {
                        let interval = settings().vram.sample_interval_secs;
                        tokio::time::sleep(Duration::from_secs_f64(interval)).await;
                        let Some(vram) = weak.upgrade() else { return };
                        if vram.live.is_closed() {
                            return;
                        }
                        if settings().vram.enabled {
                            vram.sample().await;
                        }
                    }
                }
            },
        );
    }

    /// The last sample.
    pub fn gpu(&self) -> GpuState {
        lock(&self.gpu).clone()
    }

    /// Whether every VRAM rule steps aside now: turned off, or no GPU seen.
    pub fn steps_aside(&self, config: &VramConfig) -> bool {
        !config.enabled || lock(&self.gpu).gpus.is_empty()
    }

    /// What `/ws` hears from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<VramEvent> {
        self.events.subscribe()
    }

    /// Hold `model` on `backend` until the reservation is dropped.
    pub fn reserve(&self, backend: &str, model: &str) -> Reservation {
        let key = key(backend, model);
        lock(&self.last_used).insert(key.clone(), now_ms());
        self.reservations.reserve(key)
    }

    /// Reservations on `model` now.
    pub fn in_flight(&self, backend: &str, model: &str) -> usize {
        self.reservations.count(&key(backend, model))
    }

    /// Whether `model` is loaded as far as Glider knows without asking: Ollama's last
    /// probe, a vLLM backend in sleep mode awake when last asked (or never asked yet),
    /// any other local server always.
    fn loaded_on(&self, config: &VramConfig, backend: &Backend, model: &str) -> bool {
        if !managed(config, backend) {
            return true;
        }
        if sleep_level(config, backend).is_some() {
            return !lock(&self.asleep)
                .get(backend.name())
                .copied()
                .unwrap_or(false);
        }
        backend
            .health()
            .warm_models
            .iter()
            .any(|m| same_model(m, model))
    }

    /// Seconds to have `model` of `backend` back once it is gone, and whether that is a
    /// measurement: a wake for a vLLM backend in sleep mode, else a load.
    fn return_secs(
        &self,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
    ) -> (f64, bool, &'static str) {
        let cost = lock(&self.measured).get(&key(backend.name(), model));
        match sleep_level(config, backend) {
            Some(level) => match cost.wake_secs {
                Some(secs) => (secs, true, "vram.unmeasured_wake_secs"),
                // A level 2 wake reloads the weights: it is priced as a load.
                None if level >= 2 => (
                    config.unmeasured_load_secs,
                    false,
                    "vram.unmeasured_load_secs",
                ),
                None => (
                    config.unmeasured_wake_secs,
                    false,
                    "vram.unmeasured_wake_secs",
                ),
            },
            None => (
                cost.load_secs.unwrap_or(config.unmeasured_load_secs),
                cost.load_secs.is_some(),
                "vram.unmeasured_load_secs",
            ),
        }
    }

    /// MiB `model` is expected to take loaded: measured, else `vram.models.<m>.memory_mib`.
    fn expected_mib(&self, config: &VramConfig, backend: &str, model: &str) -> Option<u64> {
        lock(&self.measured)
            .get(&key(backend, model))
            .memory_mib
            .or(settings(config, model).memory_mib)
    }

    fn resident(
        &self,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
        memory_mib: u64,
    ) -> Resident {
        let key = key(backend.name(), model);
        let settings = settings(config, model);
        Resident {
            backend: backend.name().to_owned(),
            model: model.to_owned(),
            planned: LoadedModel {
                name: label(backend.name(), model),
                backend: backend.name().to_owned(),
                memory_mib,
                reload_secs: self.return_secs(config, backend, model).0,
                in_use: self.reservations.count(&key) > 0,
                reserved: settings.reserve,
                priority: settings.priority,
                last_used_ms: lock(&self.last_used).get(&key).copied().unwrap_or(0),
            },
        }
    }

    /// What the last probes and answers say is loaded on the local backends Glider
    /// plans for, without asking them again.
    fn known_residents(&self, config: &VramConfig, backends: &[Arc<Backend>]) -> Vec<Resident> {
        let mut residents = Vec::new();
        for backend in backends
            .iter()
            .filter(|b| b.config.enabled && managed(config, b))
        {
            let models: Vec<String> = if sleep_level(config, backend).is_some() {
                backend.config.concrete_models()
            } else {
                backend.health().warm_models.clone()
            };
            for model in models {
                if self.loaded_on(config, backend, &model) {
                    let mib = self.expected_mib(config, backend.name(), &model);
                    residents.push(self.resident(config, backend, &model, mib.unwrap_or(0)));
                }
            }
        }
        residents
    }

    /// Ask `backend` what it has loaded now (Ollama's `/api/ps`, vLLM's `/is_sleeping`),
    /// noting what that says.
    async fn ask_residents(
        &self,
        config: &VramConfig,
        backend: &Backend,
    ) -> Result<Vec<Resident>, String> {
        let name = backend.name();
        if sleep_level(config, backend).is_some() {
            let vllm = Vllm {
                http: &self.http,
                backend,
            };
            let asleep = vllm.is_sleeping().await?;
            lock(&self.asleep).insert(name.to_owned(), asleep);
            if asleep {
                return Ok(Vec::new());
            }
            return Ok(backend
                .config
                .concrete_models()
                .iter()
                .map(|m| {
                    let mib = self.expected_mib(config, name, m).unwrap_or(0);
                    self.resident(config, backend, m, mib)
                })
                .collect());
        }
        let ollama = Ollama {
            http: &self.http,
            base_url: &backend.config.base_url,
        };
        let running = ollama.running().await?;
        let mut measured = lock(&self.measured);
        for r in &running {
            measured.saw_memory(&key(name, &r.name), r.vram_mib);
        }
        drop(measured);
        Ok(running
            .iter()
            .map(|r| self.resident(config, backend, &r.name, r.vram_mib))
            .collect())
    }

    /// Memory held for reserved models of `backend` that are not loaded (`pinned`).
    fn held_mib(&self, config: &VramConfig, backend: &str, loaded: &[LoadedModel]) -> u64 {
        if config.strategy != Strategy::Pinned {
            return 0;
        }
        let measured = lock(&self.measured);
        config
            .models
            .iter()
            .filter(|(name, m)| {
                m.reserve
                    && !loaded
                        .iter()
                        .any(|l| same_model(&l.name, &label(backend, name)))
            })
            .filter_map(|(name, _)| measured.get(&key(backend, name)).memory_mib)
            .sum()
    }

    /// Free memory for planning: the GPUs' total less what the loaded models (on every
    /// local backend) take and what anything else uses (the sampled use beyond the
    /// models). The loaded models are read fresh, so a sample taken before a load or an
    /// unload does not mislead.
    fn room(&self, config: &VramConfig, backend: &str, loaded: &[LoadedModel]) -> Room {
        let gpus = lock(&self.gpu).gpus.clone();
        let total: u64 = gpus.iter().map(|g| g.total_mib).sum();
        let used: u64 = gpus.iter().map(|g| g.used_mib).sum();
        let models: u64 = loaded.iter().map(|m| m.memory_mib).sum();
        Room {
            // total − (others + models), where others = used − models (never below 0).
            free_mib: total.saturating_sub(used.max(models)),
            headroom_mib: config.headroom_mib,
            held_mib: self.held_mib(config, backend, loaded),
            max_loaded: config.max_loaded,
        }
    }

    fn need(&self, config: &VramConfig, backend: &str, model: &str, memory_mib: u64) -> Need {
        Need {
            name: label(backend, model),
            backend: backend.to_owned(),
            memory_mib,
            priority: settings(config, model).priority,
        }
    }

    /// What a request for cold `model` would wait, planned from the last probe and the
    /// measurements, among the models loaded on `backends` (every configured backend:
    /// a vLLM model may make room for an Ollama one and the other way round); `None`
    /// when VRAM steps aside or the model is loaded.
    pub fn cold_wait(
        &self,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
        backends: &[Arc<Backend>],
    ) -> Option<ColdWait> {
        if self.steps_aside(config) || self.loaded_on(config, backend, model) {
            return None;
        }
        let name = backend.name();
        let loaded: Vec<LoadedModel> = self
            .known_residents(config, backends)
            .into_iter()
            .map(|r| r.planned)
            .collect();
        let mib = self.expected_mib(config, name, model).unwrap_or(0);
        let need = self.need(config, name, model, mib);
        let plan = planner::plan(&need, &loaded, &self.room(config, name, &loaded));
        let (wait_secs, measured, prior) = self.return_secs(config, backend, model);
        Some(ColdWait {
            wait_secs,
            measured,
            prior,
            plan,
        })
    }

    /// Before a request is sent to `model` (or for `cause`): if it is not loaded, plan
    /// room for it among the models loaded on `backends`, unload or put to sleep the
    /// plan's victims and load or wake it, measuring that. The caller holds a
    /// reservation on `model` so no other plan evicts it meanwhile. `None` when VRAM
    /// steps aside or the model is loaded.
    pub async fn make_room(
        self: &Arc<Self>,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
        cause: Cause,
        backends: &[Arc<Backend>],
    ) -> Option<PlanRecord> {
        if self.steps_aside(config) || !managed(config, backend) {
            return None;
        }
        if cause != Cause::Prewarm {
            let gate = lock(&self.prewarming)
                .get(&key(backend.name(), model))
                .cloned();
            if let Some(gate) = gate {
                drop(gate.lock().await);
            }
        }
        // A model the last probe saw loaded is sent its request at once, as `cold_wait`
        // judges it: a warm request never waits on a round trip or on another plan. A
        // prewarm checks afresh: the probe may be older than an eviction. A vLLM
        // backend never asked yet is asked (it may be asleep since a run before).
        let never_asked = sleep_level(config, backend).is_some()
            && !lock(&self.asleep).contains_key(backend.name());
        if cause != Cause::Prewarm && !never_asked && self.loaded_on(config, backend, model) {
            return None;
        }
        let _one_at_a_time = self.planning.lock().await;
        let record = self
            .plan_and_load(config, backend, model, cause, backends)
            .await;
        lock(&self.measured).save();
        record
    }

    /// A sticky local session's next user turn began: check `model` is still loaded
    /// (Ollama's `keep_alive` or another session may have evicted it since the last
    /// probe) and load it again if not, in the background while the request's other
    /// phases run. The model is reserved meanwhile, and the request's own
    /// [`Vram::make_room`] waits for this one to finish. One prewarm per model at once.
    pub fn prewarm(
        self: &Arc<Self>,
        config: &VramConfig,
        backend: &Arc<Backend>,
        model: &str,
        backends: &[Arc<Backend>],
    ) {
        if self.steps_aside(config) || !managed(config, backend) {
            return;
        }
        let key = key(backend.name(), model);
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        let Ok(closed) = gate.clone().try_lock_owned() else {
            return;
        };
        {
            let mut prewarming = lock(&self.prewarming);
            if prewarming.contains_key(&key) {
                return;
            }
            prewarming.insert(key.clone(), gate.clone());
        }
        let held = self.reserve(backend.name(), model);
        let vram = self.clone();
        // Owned copies only for a prewarm that runs: most sticky turns return above.
        let (config, backend, model, backends) = (
            config.clone(),
            backend.clone(),
            model.to_owned(),
            backends.to_vec(),
        );
        tokio::spawn(async move {
            vram.make_room(&config, &backend, &model, Cause::Prewarm, &backends)
                .await;
            let mut prewarming = lock(&vram.prewarming);
            if prewarming.get(&key).is_some_and(|g| Arc::ptr_eq(g, &gate)) {
                prewarming.remove(&key);
            }
            drop((closed, held));
        });
    }

    /// `make_room` under the planning lock; the measurements it notes are saved after.
    async fn plan_and_load(
        self: &Arc<Self>,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
        cause: Cause,
        backends: &[Arc<Backend>],
    ) -> Option<PlanRecord> {
        let name = backend.name();
        let record = |need_mib, free_mib, plan, outcome: String| PlanRecord {
            at_ms: now_ms(),
            cause,
            backend: name.to_owned(),
            model: model.to_owned(),
            need_mib,
            free_mib,
            plan,
            outcome,
        };
        let mut residents = match self.ask_residents(config, backend).await {
            Ok(residents) => residents,
            Err(e) => {
                let reason = format!("cannot read what is loaded: {e}");
                let plan = Plan::CannotFit {
                    reason: reason.clone(),
                };
                return Some(self.publish(record(0, 0, plan, reason)));
            }
        };
        if residents.iter().any(|r| same_model(&r.model, model)) {
            return None;
        }
        for peer in backends
            .iter()
            .filter(|b| b.name() != name && b.config.enabled && managed(config, b))
        {
            match self.ask_residents(config, peer).await {
                Ok(theirs) => residents.extend(theirs),
                // Its memory still counts through the GPU sample, as "anything else".
                Err(e) => {
                    tracing::warn!(backend = %peer.name(), error = %e, "VRAM: cannot read what is loaded")
                }
            }
        }
        self.sample().await;
        let loaded: Vec<LoadedModel> = residents.iter().map(|r| r.planned.clone()).collect();
        let need_mib = match self.expected_mib(config, name, model) {
            Some(mib) => mib,
            None if sleep_level(config, backend).is_none() => {
                let ollama = Ollama {
                    http: &self.http,
                    base_url: &backend.config.base_url,
                };
                ollama.file_mib(model).await.unwrap_or(0)
            }
            None => 0,
        };
        let need = self.need(config, name, model, need_mib);
        let room = self.room(config, name, &loaded);
        let plan = planner::plan(&need, &loaded, &room);
        let outcome = self
            .carry_out(config, backend, model, &plan, &residents, backends)
            .await;
        // The backup sequence reads warm state from each backend's last probe.
        backend.probe().await;
        for peer in backends
            .iter()
            .filter(|b| b.name() != name && residents.iter().any(|r| r.backend == b.name()))
        {
            peer.probe().await;
        }
        Some(self.publish(record(need_mib, room.free_mib, plan, outcome)))
    }

    /// Unload or put to sleep the plan's victims, then load or wake the model; what
    /// happened, in words.
    async fn carry_out(
        self: &Arc<Self>,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
        plan: &Plan,
        residents: &[Resident],
        backends: &[Arc<Backend>],
    ) -> String {
        let victims: &[String] = match plan {
            Plan::Loaded => return "already loaded".into(),
            Plan::CannotFit { reason } => return format!("not loaded: {reason}"),
            Plan::Fits => &[],
            Plan::Evict { victims, .. } => victims,
        };
        let mut made_room = Vec::new();
        for victim in victims {
            let Some(resident) = residents.iter().find(|r| &r.planned.name == victim) else {
                return format!("the plan's victim {victim} is not among the loaded models");
            };
            let host = backends
                .iter()
                .map(|b| &**b)
                .chain(std::iter::once(backend))
                .find(|b| b.name() == resident.backend);
            let Some(host) = host else {
                return format!("the plan's victim {victim} is on no configured backend");
            };
            match self.remove(config, host, &resident.model).await {
                Ok(how) => made_room.push(format!("{how} {victim}")),
                Err(e) => return format!("making room ({victim}) failed: {e}"),
            }
        }
        let (verb, took) = match self.bring_in(config, backend, model).await {
            Ok(done) => done,
            Err(e) => return e,
        };
        let after = if made_room.is_empty() {
            String::new()
        } else {
            format!(" after {}", made_room.join(", "))
        };
        format!("{verb} in {took:.2}s{after}")
    }

    /// Unload `model` (Ollama) or put it to sleep (vLLM in sleep mode); how, in words.
    async fn remove(
        &self,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
    ) -> Result<&'static str, String> {
        let base_url = &backend.config.base_url;
        if let Some(level) = sleep_level(config, backend) {
            Vllm {
                http: &self.http,
                backend,
            }
            .sleep(level)
            .await?;
            lock(&self.asleep).insert(backend.name().to_owned(), true);
            let _ = self.events.send(VramEvent::Slept {
                backend: backend.name().to_owned(),
                model: model.to_owned(),
                level,
            });
            return Ok("putting to sleep");
        }
        Ollama {
            http: &self.http,
            base_url,
        }
        .unload(model)
        .await?;
        let _ = self.events.send(VramEvent::Unloaded {
            backend: backend.name().to_owned(),
            model: model.to_owned(),
        });
        Ok("unloading")
    }

    /// Load `model` (Ollama) or wake it (vLLM in sleep mode), measuring the seconds and
    /// the memory it takes: Ollama's `size_vram`, or for a wake what the GPU sample
    /// grew by. The verb and the seconds, or what failed.
    async fn bring_in(
        self: &Arc<Self>,
        config: &VramConfig,
        backend: &Backend,
        model: &str,
    ) -> Result<(&'static str, f64), String> {
        let name = backend.name();
        let key = key(name, model);
        let base_url = &backend.config.base_url;
        if sleep_level(config, backend).is_some() {
            let used = |gpu: &GpuState| gpu.gpus.iter().map(|g| g.used_mib).sum::<u64>();
            let before = used(&self.sample().await);
            let took = Vllm {
                http: &self.http,
                backend,
            }
            .wake_up()
            .await
            .map_err(|e| format!("waking failed: {e}"))?
            .as_secs_f64();
            lock(&self.asleep).insert(name.to_owned(), false);
            let grew = used(&self.sample().await).saturating_sub(before);
            let memory_mib = (grew > 0).then_some(grew);
            let mut measured = lock(&self.measured);
            measured.woke(&key, took);
            if let Some(mib) = memory_mib {
                measured.saw_memory(&key, mib);
            }
            drop(measured);
            let _ = self.events.send(VramEvent::Woke {
                backend: name.to_owned(),
                model: model.to_owned(),
                secs: took,
                memory_mib,
            });
            return Ok(("woke", took));
        }
        let ollama = Ollama {
            http: &self.http,
            base_url,
        };
        let took = ollama
            .load(model)
            .await
            .map_err(|e| format!("loading failed: {e}"))?
            .as_secs_f64();
        lock(&self.measured).loaded(&key, took);
        let memory_mib = match ollama.running().await {
            Ok(running) => running
                .iter()
                .find(|r| same_model(&r.name, model))
                .map(|r| r.vram_mib),
            Err(_) => None,
        };
        if let Some(mib) = memory_mib {
            lock(&self.measured).saw_memory(&key, mib);
        }
        let _ = self.events.send(VramEvent::Loaded {
            backend: name.to_owned(),
            model: model.to_owned(),
            secs: took,
            memory_mib,
        });
        Ok(("loaded", took))
    }

    fn publish(&self, record: PlanRecord) -> PlanRecord {
        tracing::info!(backend = %record.backend, model = %record.model, plan = ?record.plan, outcome = %record.outcome, "VRAM plan");
        *lock(&self.last_plan) = Some(record.clone());
        let _ = self.events.send(VramEvent::Plan(record.clone()));
        record
    }

    /// Everything `/api/vram` shows, for the local models of `backends`.
    pub fn view(&self, config: &VramConfig, backends: &[Arc<Backend>]) -> VramView {
        let models = backends
            .iter()
            .filter(|b| b.config.enabled && b.is_local())
            .flat_map(|backend| {
                backend
                    .config
                    .concrete_models()
                    .into_iter()
                    .map(|model| {
                        let key = key(backend.name(), &model);
                        let cost = lock(&self.measured).get(&key);
                        let settings = settings(config, &model);
                        ModelView {
                            backend: backend.name().to_owned(),
                            loaded: self.loaded_on(config, backend, &model),
                            memory_mib: cost.memory_mib,
                            load_secs: cost.load_secs,
                            loads: cost.loads,
                            wake_secs: cost.wake_secs,
                            wakes: cost.wakes,
                            sleep_level: sleep_level(config, backend),
                            in_flight: self.reservations.count(&key),
                            reserve: settings.reserve,
                            priority: settings.priority,
                            model,
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        VramView {
            enabled: config.enabled,
            strategy: config.strategy,
            headroom_mib: config.headroom_mib,
            gpu: self.gpu(),
            models,
            last_plan: lock(&self.last_plan).clone(),
        }
    }
}
