//! Faithful in-process mock vendor servers for Glider's tests and benchmarks: one HTTP
//! server speaking OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and
//! Ollama, written independently of `glider-dialects` so codec tests against it mean
//! something. Start one with [`MockVendor::start`]; script replies with `[[call:...]]`.
//! [`conformance`] holds the case list the codec and end-to-end matrices share.

mod anthropic;
pub mod canned;
pub mod captured;
mod clock;
pub mod conformance;
pub mod embed;
mod ollama;
mod openai_chat;
mod openai_responses;
pub mod rng;
mod script;
mod server;
mod state;
mod stream;
mod vllm;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use state::MockState;

/// How the mock behaves. [`MockConfig::default`] gives 4 deltas, no delays, no model
/// checks (any model accepted) and no thinking models.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// How many pieces a streamed reply text is split into (at least 1).
    pub deltas: usize,
    /// Streaming: delay before the first body chunk (headers go out at once).
    /// Non-streaming: delay before the response (plus `delta_delay` per extra delta).
    pub first_byte_delay: Duration,
    /// When not empty, the n-th generation request waits `first_byte_delays[n % len]`
    /// instead of `first_byte_delay` (a scripted, e.g. long-tailed, time to first byte).
    pub first_byte_delays: Vec<Duration>,
    /// Delay before each content delta after the first.
    pub delta_delay: Duration,
    /// Ollama models that accept `think: true`; other models refuse it.
    pub thinking_models: Vec<String>,
    /// Models listed by `/api/tags` and `/v1/models`. When empty (and `thinking_models`
    /// too), every model name is accepted; otherwise an unknown model is refused with
    /// the dialect's 404.
    pub models: Vec<String>,
    /// A fixed reply text used instead of `echo: <last user text>` (benchmarks).
    pub reply_text: Option<String>,
    /// The context window the mock says its models run with, as each server says it:
    /// vLLM's `max_model_len` in `/v1/models`, `num_ctx` in Ollama's `/api/show`
    /// parameters and `context_length` in `/api/ps` (4096 there when unset). Unset: the
    /// listings carry no window (OpenAI's shape).
    pub context_window: Option<u64>,
    /// Ollama models whose `/api/show` leaves `tools` out of `capabilities`.
    pub tool_less_models: Vec<String>,
    /// Record every request for [`MockVendor::requests`]. On by default; the
    /// `glider-mock` binary turns it off so long benchmarks do not grow memory.
    pub record: bool,
    /// The Anthropic surface takes requests without a key, as a local server speaking
    /// `/v1/messages` does (llama-server without `--api-key`, Ollama); off, it answers
    /// a keyless request with Anthropic's 401.
    pub anthropic_keyless: bool,
    /// Ollama: the fake GPU's memory in MiB. Set, a load that does not fit evicts the
    /// least recently used idle models first (Ollama's own policy) and fails with
    /// Ollama's "requires more system memory" when only busy ones are left; unset,
    /// every model fits.
    pub gpu_total_mib: Option<u64>,
    /// Ollama: MiB each model takes loaded (`size_vram` in `/api/ps`); a model not
    /// listed takes [`DEFAULT_MODEL_MIB`].
    pub model_memory_mib: Vec<(String, u64)>,
    /// Ollama: how long loading a cold model takes (an explicit load or a chat).
    pub load_delay: Duration,
    /// vLLM run with `--enable-sleep-mode` and `VLLM_SERVER_DEV_MODE=1`: serve
    /// `POST /sleep?level=N`, `POST /wake_up` and `GET /is_sleeping` (else they are 404,
    /// as on a server without them). While asleep its models take no GPU memory and a
    /// generation request is refused with 503, so a client that forgot to wake it
    /// finds out.
    pub vllm_sleep_mode: bool,
    /// vLLM sleep mode: how long `POST /wake_up` takes.
    pub wake_delay: Duration,
    /// The fake GPU's use, written as one number (MiB) whenever it changes: what the
    /// loaded Ollama models take, or what an awake vLLM server's models take (each
    /// [`MockConfig::model_memory_mib`]). A fake `nvidia-smi` reads it.
    pub gpu_use_file: Option<std::path::PathBuf>,
    /// llama.cpp's `GET /props` with `modalities.vision` set to this (and `n_ctx` the
    /// [`MockConfig::context_window`], 4096 unset); unset, `/props` is a 404 as on
    /// vLLM, so other tests' probes learn nothing from it.
    pub llama_props_vision: Option<bool>,
}

/// MiB a mock Ollama model takes loaded unless [`MockConfig::model_memory_mib`] says.
pub const DEFAULT_MODEL_MIB: u64 = 4445;

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            deltas: 4,
            first_byte_delay: Duration::ZERO,
            first_byte_delays: Vec::new(),
            delta_delay: Duration::ZERO,
            thinking_models: Vec::new(),
            models: Vec::new(),
            reply_text: None,
            context_window: None,
            tool_less_models: Vec::new(),
            record: true,
            anthropic_keyless: false,
            gpu_total_mib: None,
            model_memory_mib: Vec::new(),
            load_delay: Duration::ZERO,
            vllm_sleep_mode: false,
            wake_delay: Duration::ZERO,
            gpu_use_file: None,
            llama_props_vision: None,
        }
    }
}

/// A failure mode applied to generation requests (`/v1/chat/completions`,
/// `/v1/responses`, `/v1/messages`, `/api/chat`; not listings nor `count_tokens`)
/// until it is replaced with [`Failure::None`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Behave normally.
    None,
    /// Answer with this status and the dialect's error body.
    Status(u16),
    /// Answer 200 with a body that is not JSON (non-streaming) or a stream whose
    /// events are not JSON (streaming).
    Garbage,
    /// Stream normally, then abort the connection once `after_deltas` content deltas
    /// have been sent (or before the final event, whichever comes first); the stream
    /// never ends cleanly. A non-streaming answer is cut in half and aborted.
    CloseMidStream { after_deltas: usize },
    /// Stream normally, then end the body cleanly (a complete HTTP message) once
    /// `after_deltas` content deltas have been sent, or just before the final event:
    /// the dialect's terminator (`[DONE]`, `message_stop`, `response.completed`,
    /// `done: true`) never comes. A non-streaming answer is cut in half and aborted.
    EndEarly { after_deltas: usize },
    /// Answer with this status, the dialect's error body and `retry-after: SECS`.
    StatusRetryAfter { status: u16, retry_after_secs: u64 },
    /// Never answer; the request counts in [`MockVendor::open_streams`] until the
    /// client drops it (or the mock shuts down).
    Hang,
    /// Fail the next `n` generation requests with `status`, then behave normally.
    FailTimes(u32, u16),
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Header names are lowercase; values that are not UTF-8 are replaced lossily.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body, or `Value::Null` when the body is empty or not JSON.
    pub body: Value,
    /// The body bytes as received.
    pub raw_body: Bytes,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A running mock vendor server on 127.0.0.1. Dropping it stops the server too.
pub struct MockVendor {
    pub addr: SocketAddr,
    state: Arc<MockState>,
    shutdown: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
}

impl MockVendor {
    /// Start on `127.0.0.1:0` (a free port).
    ///
    /// # Panics
    /// If no loopback port can be bound, which only happens on a broken host.
    pub async fn start(config: MockConfig) -> MockVendor {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        match MockVendor::start_on(addr, config).await {
            Ok(mock) => mock,
            Err(e) => panic!("glider-test-support: cannot bind {addr}: {e}"),
        }
    }

    /// Start on a given address (the `glider-mock` binary uses this).
    pub async fn start_on(addr: SocketAddr, config: MockConfig) -> io::Result<MockVendor> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(false);
        let state = Arc::new(MockState::new(config, rx.clone()));
        state.report_gpu_use();
        let task = tokio::spawn(server::serve(listener, state.clone(), rx));
        Ok(MockVendor {
            addr,
            state,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests()
    }

    /// Forget the requests recorded so far.
    pub fn clear_requests(&self) {
        self.state.clear_requests();
    }

    /// Apply `failure` to subsequent generation requests.
    pub fn set_failure(&self, failure: Failure) {
        self.state.set_failure(failure);
    }

    /// Ollama: the models loaded now, least recently used first.
    pub fn loaded_models(&self) -> Vec<String> {
        self.state.warm_models()
    }

    /// vLLM sleep mode: the level it sleeps at now (`None`: awake).
    pub fn sleeping(&self) -> Option<u8> {
        self.state.sleeping()
    }

    /// Response streams (and hanging requests) currently open.
    pub fn open_streams(&self) -> usize {
        self.state.open_streams()
    }

    /// Poll until [`MockVendor::open_streams`] equals `expected` or `within` passes;
    /// returns whether it got there.
    pub async fn wait_open_streams(&self, expected: usize, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.open_streams() == expected {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stop accepting, end hanging requests and open streams, and wait (bounded) for
    /// the server task to finish.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for MockVendor {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
    }
}
