//! Shared mutable state of one mock server: configuration, recorded requests, the
//! current failure mode, open-stream accounting, warm (loaded) models with their memory
//! on a fake GPU, and id counters.

use crate::ollama::normalize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use crate::script::{self, Conversation, Reply};
use crate::{Failure, MockConfig, RecordedRequest};

pub(crate) struct MockState {
    pub config: MockConfig,
    requests: Mutex<Vec<RecordedRequest>>,
    failure: Mutex<Failure>,
    open_streams: AtomicUsize,
    /// Loaded models, least recently used first.
    warm: Mutex<Vec<String>>,
    /// vLLM sleep mode: the level it sleeps at (`None`: awake).
    asleep: Mutex<Option<u8>>,
    /// Requests and streams running on each model: never evicted while they run.
    busy: Mutex<BTreeMap<String, usize>>,
    ids: AtomicU64,
    call_ids: AtomicU64,
    /// Generation replies started, for [`MockConfig::first_byte_delays`].
    replies: AtomicUsize,
    shutdown: watch::Receiver<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MockState {
    pub fn new(config: MockConfig, shutdown: watch::Receiver<bool>) -> Self {
        MockState {
            config,
            requests: Mutex::new(Vec::new()),
            failure: Mutex::new(Failure::None),
            open_streams: AtomicUsize::new(0),
            warm: Mutex::new(Vec::new()),
            asleep: Mutex::new(None),
            busy: Mutex::new(BTreeMap::new()),
            ids: AtomicU64::new(0),
            call_ids: AtomicU64::new(0),
            replies: AtomicUsize::new(0),
            shutdown,
        }
    }

    pub fn record(&self, parts: &axum::http::request::Parts, raw_body: &Bytes, body: &Value) {
        if !self.config.record {
            return;
        }
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let rec = RecordedRequest {
            method: parts.method.as_str().to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            headers,
            body: body.clone(),
            raw_body: raw_body.clone(),
        };
        lock(&self.requests).push(rec);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.requests).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.requests).clear();
    }

    pub fn set_failure(&self, failure: Failure) {
        *lock(&self.failure) = failure;
    }

    /// The failure to apply to this request; counts down [`Failure::FailTimes`].
    pub fn take_failure(&self) -> Failure {
        let mut current = lock(&self.failure);
        match *current {
            Failure::FailTimes(n, status) => {
                if n <= 1 {
                    *current = Failure::None;
                } else {
                    *current = Failure::FailTimes(n - 1, status);
                }
                if n == 0 {
                    Failure::None
                } else {
                    Failure::Status(status)
                }
            }
            ref other => other.clone(),
        }
    }

    /// The first-byte delay of the next generation reply.
    pub fn next_first_byte_delay(&self) -> Duration {
        let script = &self.config.first_byte_delays;
        if script.is_empty() {
            return self.config.first_byte_delay;
        }
        script[self.replies.fetch_add(1, Ordering::Relaxed) % script.len()]
    }

    pub fn open_streams(&self) -> usize {
        self.open_streams.load(Ordering::SeqCst)
    }

    /// A sequence number for message / response ids.
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Plan the scripted reply; tool-call ids are numbered across the server's life.
    pub fn plan(&self, conv: &Conversation, thinking: bool) -> Reply {
        script::plan(conv, thinking, &self.config, || {
            self.call_ids.fetch_add(1, Ordering::Relaxed) + 1
        })
    }

    /// Whether `model` is acceptable: any model when no list is configured.
    pub fn knows_model(&self, model: &str, normalize: fn(&str) -> String) -> bool {
        if self.config.models.is_empty() && self.config.thinking_models.is_empty() {
            return true;
        }
        let wanted = normalize(model);
        self.config
            .models
            .iter()
            .chain(self.config.thinking_models.iter())
            .any(|m| normalize(m) == wanted)
    }

    /// Every configured model name, deduplicated, in configuration order.
    pub fn all_models(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self
            .config
            .models
            .iter()
            .chain(self.config.thinking_models.iter())
        {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }

    pub fn mark_warm(&self, model: &str) {
        let mut warm = lock(&self.warm);
        if !warm.iter().any(|m| m == model) {
            warm.push(model.to_string());
            drop(warm);
            self.report_gpu_use();
        }
    }

    /// vLLM sleep mode: the level it sleeps at now.
    pub fn sleeping(&self) -> Option<u8> {
        *lock(&self.asleep)
    }

    /// vLLM sleep mode: sleep at `level`, or wake with `None`.
    pub fn set_sleeping(&self, level: Option<u8>) {
        *lock(&self.asleep) = level;
        self.report_gpu_use();
    }

    /// MiB the fake GPU holds for this server now: an awake vLLM server its models,
    /// an Ollama server its loaded ones.
    fn gpu_use_mib(&self) -> u64 {
        if self.config.vllm_sleep_mode {
            if self.sleeping().is_some() {
                return 0;
            }
            return self.config.models.iter().map(|m| self.memory_mib(m)).sum();
        }
        lock(&self.warm).iter().map(|m| self.memory_mib(m)).sum()
    }

    /// Write [`MockState::gpu_use_mib`] to [`MockConfig::gpu_use_file`], atomically (a
    /// fake `nvidia-smi` may read it at any moment).
    pub fn report_gpu_use(&self) {
        let Some(path) = &self.config.gpu_use_file else {
            return;
        };
        let partial = path.with_extension("partial");
        let written = std::fs::write(&partial, self.gpu_use_mib().to_string())
            .and_then(|()| std::fs::rename(&partial, path));
        if let Err(e) = written {
            eprintln!("glider-test-support: cannot write {}: {e}", path.display());
        }
    }

    /// MiB `model` takes once loaded (Ollama's `size_vram`).
    pub fn memory_mib(&self, model: &str) -> u64 {
        let wanted = normalize(model);
        self.config
            .model_memory_mib
            .iter()
            .find(|(m, _)| normalize(m) == wanted)
            .map_or(crate::DEFAULT_MODEL_MIB, |(_, mib)| *mib)
    }

    /// Load `model` as Ollama does: already loaded, it becomes the most recently used;
    /// otherwise, on a GPU of `gpu_total_mib`, the least recently used idle models are
    /// evicted until it fits (a busy one never is), and the load takes `load_delay`.
    /// Why it cannot be loaded, when it cannot.
    pub async fn load(&self, model: &str) -> Result<(), String> {
        let wanted = normalize(model);
        {
            let mut warm = lock(&self.warm);
            if let Some(at) = warm.iter().position(|m| normalize(m) == wanted) {
                let name = warm.remove(at);
                warm.push(name);
                return Ok(());
            }
            if let Some(total) = self.config.gpu_total_mib {
                let need = self.memory_mib(model);
                let busy = lock(&self.busy);
                loop {
                    let used: u64 = warm.iter().map(|m| self.memory_mib(m)).sum();
                    if used + need <= total {
                        break;
                    }
                    let idle = warm.iter().position(|m| !busy.contains_key(&normalize(m)));
                    match idle {
                        Some(at) => {
                            warm.remove(at);
                        }
                        None => {
                            return Err(format!(
                                "model requires more system memory ({need} MiB) than is available ({} MiB)",
                                total.saturating_sub(used)
                            ));
                        }
                    }
                }
            }
        }
        if !self.sleep(self.config.load_delay).await {
            return Err("shutting down".into());
        }
        self.mark_warm(&wanted);
        Ok(())
    }

    /// Keep `model` busy until the guard is dropped.
    pub fn busy(self: &Arc<Self>, model: &str) -> ModelBusy {
        let model = normalize(model);
        *lock(&self.busy).entry(model.clone()).or_default() += 1;
        ModelBusy {
            state: self.clone(),
            model,
        }
    }

    pub fn unload(&self, model: &str) {
        let wanted = normalize(model);
        lock(&self.warm).retain(|m| normalize(m) != wanted);
        self.report_gpu_use();
    }

    pub fn warm_models(&self) -> Vec<String> {
        lock(&self.warm).clone()
    }

    /// Sleep for `d`; false if the server began shutting down meanwhile.
    pub async fn sleep(&self, d: Duration) -> bool {
        if d.is_zero() {
            return !self.is_shutting_down();
        }
        let mut rx = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = rx.wait_for(|stop| *stop) => false,
        }
    }

    /// Resolve once the server shuts down (or its handle is gone).
    pub async fn until_shutdown(&self) {
        let mut rx = self.shutdown.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// A model running a request; dropped, it may be evicted again.
pub(crate) struct ModelBusy {
    state: Arc<MockState>,
    model: String,
}

impl Drop for ModelBusy {
    fn drop(&mut self) {
        let mut busy = lock(&self.state.busy);
        if let Some(count) = busy.get_mut(&self.model) {
            *count -= 1;
            if *count == 0 {
                busy.remove(&self.model);
            }
        }
    }
}

/// Counts one open response stream for as long as it lives.
pub(crate) struct OpenStream(Arc<MockState>);

impl OpenStream {
    pub fn new(state: Arc<MockState>) -> Self {
        state.open_streams.fetch_add(1, Ordering::SeqCst);
        OpenStream(state)
    }

    pub fn state(&self) -> &Arc<MockState> {
        &self.0
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::SeqCst);
    }
}
