//! The pipeline's event bus (spec package `metrics`' collector end): every request
//! produces a `RequestStarted` and exactly one `RequestFinished` record, whether it
//! succeeded, failed, went to the CLI's origin, or its client went away. Subscribers
//! (dashboard, history, metrics) read a bounded broadcast channel: a slow reader loses
//! the oldest events and is told how many; it never slows a request. The bus also
//! carries backend state changes and config reloads, so one stream tells the whole story.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use glider_backend::breaker::BreakerState;
use glider_backend::health::HealthStatus;
use glider_backend::{Backend, Capabilities};
use glider_config::BackendKind;
use glider_dialects::{StreamDecoder, codec};
use glider_ngl::{Dialect, Response, StreamEvent};
use serde::Serialize;
use tokio::sync::broadcast;

use glider_vocab::{Door, RequestRecord, ShadowSample};

use crate::context::{ReplyCapture, WholeReplyRead};
use crate::contextkit::ContextKit;

/// Events kept for a subscriber that falls behind.
pub const BUS_CAPACITY: usize = 4096;
/// Largest non-streamed reply body kept to read its usage from.
const MAX_OBSERVED_BODY: usize = 8 * 1024 * 1024;

/// A backend's live state as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendState {
    pub backend: String,
    #[serde(rename = "type")]
    pub kind: BackendKind,
    /// Runs on this machine (Ollama, vLLM) rather than spending a cloud key.
    pub local: bool,
    pub enabled: bool,
    pub health: HealthStatus,
    /// Why the last probe failed, when it did.
    pub detail: Option<String>,
    pub breaker: BreakerState,
    /// Models loaded in memory (answer without a load).
    pub warm_models: Vec<String>,
    /// What each served model can do, as the server says (local backends).
    pub capabilities: BTreeMap<String, Capabilities>,
    /// Why the backend cannot be used at all (a missing `${VAR}`), if so.
    pub unavailable: Option<String>,
}

impl BackendState {
    /// The state of `backend` now.
    pub fn of(backend: &Backend) -> BackendState {
        let health = backend.health();
        BackendState {
            backend: backend.name().to_owned(),
            kind: backend.kind(),
            local: backend.is_local(),
            enabled: backend.config.enabled,
            health: health.status,
            detail: health.detail,
            breaker: backend.breaker.state(),
            warm_models: health.warm_models,
            capabilities: health.capabilities,
            unavailable: backend.unavailable.clone(),
        }
    }
}

/// What the bus carries.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PipelineEvent {
    RequestStarted(RequestRecord),
    RequestFinished(RequestRecord),
    /// A backend's health, breaker or warm models changed (published by whoever watches
    /// the backends: the dashboard polls them, so time-driven breaker moves show too).
    BackendStateChanged(BackendState),
    /// A new config is running (hot keys applied; the backends were rebuilt).
    ConfigReloaded {
        /// Unix milliseconds.
        at_ms: u64,
        /// The backends of the new config, in order.
        backends: Vec<String>,
    },
    /// A request's shadow copy ended, failed or was skipped (fan-out `shadow`): once the
    /// copy and the primary's reply have both ended, or at once when skipped.
    ShadowSampled(ShadowSample),
}

/// The sending side, cheap to clone.
#[derive(Clone)]
pub struct Bus {
    sender: broadcast::Sender<Arc<PipelineEvent>>,
    next_id: Arc<AtomicU64>,
}

impl Default for Bus {
    fn default() -> Self {
        Bus {
            sender: broadcast::channel(BUS_CAPACITY).0,
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl Bus {
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PipelineEvent>> {
        self.sender.subscribe()
    }

    pub fn publish(&self, event: PipelineEvent) {
        // No subscriber is fine: nothing is listening.
        let _ = self.sender.send(Arc::new(event));
    }

    /// [`Bus::start`] for a request with `headers`: the client shown is its
    /// `user-agent`, so every door names the client the same way.
    pub fn start_for(&self, door: Door, front: Dialect, headers: &http::HeaderMap) -> Tracker {
        let client = headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.start(door.as_str(), front, client)
    }

    /// Open a record for a request that just arrived and announce it.
    pub fn start(&self, door: &str, front: Dialect, client: Option<String>) -> Tracker {
        let record = RequestRecord::arriving(
            self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_ms(),
            door.to_owned(),
            client,
            front,
        );
        Tracker {
            bus: self.clone(),
            record,
            started: Instant::now(),
            announced: false,
            raw_stream: None,
            raw_whole: None,
            ended: false,
            forgotten: false,
            context: None,
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Follows one request to its end and publishes `RequestFinished` when dropped, so a
/// request whose client vanished mid-stream is still recorded (status 499).
pub struct Tracker {
    bus: Bus,
    pub record: RequestRecord,
    started: Instant,
    announced: bool,
    raw_stream: Option<Box<dyn StreamDecoder>>,
    raw_whole: Option<(Dialect, Vec<u8>)>,
    ended: bool,
    /// Dropped without a record ([`Tracker::forget`]).
    forgotten: bool,
    /// The reply's tool calls and stop reason, kept only when a context sink is attached
    /// or the session's spend is counted (in place, not boxed: one allocation less on
    /// each such request).
    context: Option<ReplyCapture>,
}

impl Tracker {
    /// Drop this record without publishing anything: for a request that was only
    /// routed to see where it goes and is not carried out here (the Cursor plane's
    /// turns that the origin answers are not Glider's requests to record).
    pub fn forget(mut self) {
        self.forgotten = true;
    }

    /// Keep the reply's tool calls for the context sink, told when the request ends.
    pub(crate) fn capture_context(&mut self, capture: ReplyCapture) {
        self.context = Some(capture);
    }

    /// The reply capture for the context sink, when one is attached.
    pub(crate) fn context_capture(&mut self) -> Option<&mut ReplyCapture> {
        self.context.as_mut()
    }

    /// Count the reply in `session`'s episode `family` when the request ends (its
    /// tokens, and the tool calls it makes the session wait on).
    pub(crate) fn count_in(&mut self, kit: Arc<ContextKit>, session: &str, family: u64) {
        match &mut self.context {
            Some(capture) if capture.session() == session => capture.count_in(kit, family),
            _ => {
                let mut capture = ReplyCapture::new(None, session.to_owned());
                capture.count_in(kit, family);
                self.context = Some(capture);
            }
        }
    }

    /// Time the request from now: it was prepared ahead of the moment its door
    /// handed it over to be carried out (the Cursor plane decides at BidiAppend and
    /// answers at RunSSE).
    pub fn restart_clock(&mut self) {
        self.started = Instant::now();
        self.record.started_at_ms = unix_ms();
    }

    /// Publish `RequestStarted` (once the request is decoded and routed).
    pub fn announce(&mut self) {
        if !self.announced {
            self.announced = true;
            self.bus
                .publish(PipelineEvent::RequestStarted(self.record.clone()));
        }
    }

    pub fn id(&self) -> u64 {
        self.record.id
    }

    /// The bus this record is published on (for what a request leaves running).
    pub(crate) fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The first byte of the reply is on its way to the client.
    pub fn first_byte(&mut self) {
        if self.record.ttft_ms.is_none() {
            self.record.ttft_ms = Some(self.started.elapsed().as_millis() as u64);
        }
    }

    /// Read usage from the reply bytes of a same-dialect backend as they pass.
    pub fn observe_raw_in(&mut self, dialect: Dialect, stream: bool) {
        if stream {
            // What the record and the capture read, and no more: usage, errors and the
            // end, and the tool calls for a capture that keeps only those.
            self.raw_stream = Some(match self.context.as_ref() {
                None => glider_dialects::usage_stream_decoder(dialect, false),
                Some(capture) if capture.keeps_only_tool_calls() => {
                    glider_dialects::usage_stream_decoder(dialect, true)
                }
                Some(_) => codec(dialect).stream_decoder(),
            });
        } else {
            self.raw_whole = Some((dialect, Vec::new()));
        }
    }

    /// Bytes of a forwarded reply.
    pub fn raw_bytes(&mut self, bytes: &[u8]) {
        if let Some(decoder) = &mut self.raw_stream {
            if let Ok(events) = decoder.feed(bytes) {
                for event in &events {
                    self.event(event);
                }
            }
        } else if let Some((_, body)) = &mut self.raw_whole
            && body.len() + bytes.len() <= MAX_OBSERVED_BODY
        {
            body.extend_from_slice(bytes);
        }
    }

    /// A forwarded stream closed: the error its decoder reports if it ended before the
    /// dialect's terminal event (`None` when complete, or when not decoding a stream).
    /// What the decoder still held (a last line without its line end, e.g. Ollama's
    /// final `done: true` with the usage) is recorded like every other event.
    pub fn raw_truncation(&mut self) -> Option<glider_ngl::ApiError> {
        let held = self.raw_stream.as_mut()?.finish();
        let mut truncation = None;
        for event in held {
            match event {
                StreamEvent::Error { error } => {
                    truncation.get_or_insert(error);
                }
                event => self.event(&event),
            }
        }
        truncation
    }

    /// An event of a translated stream. Its `Finish` is the reply's last event: once
    /// it is on its way to the client the reply is whole, and a client that closes the
    /// connection on reading it (Codex does, on `response.completed`) before the stream
    /// is polled for its end has not left early.
    pub fn event(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::Start { usage, .. } => self.record.usage.merge(usage),
            StreamEvent::Finish { usage, .. } => {
                self.record.usage.merge(usage);
                self.ended = true;
            }
            StreamEvent::Error { error } => {
                // The stream's failure is the backend's: a stall is a 504, a cut or
                // an error the backend sent keeps its class.
                self.record.status.get_or_insert(error.kind.status());
                self.record.error = Some(error.message.clone());
            }
            _ => {}
        }
        if let Some(capture) = &mut self.context {
            capture.event(event);
        }
    }

    /// A whole translated reply.
    pub fn response(&mut self, response: &Response) {
        self.record.usage.merge(&response.usage);
        if let Some(capture) = &mut self.context {
            capture.response(response);
        }
    }

    /// The reply was delivered completely.
    pub fn end(&mut self) {
        self.ended = true;
        if let Some((dialect, body)) = self.raw_whole.take() {
            self.whole_reply(dialect, &body);
        }
    }

    /// A forwarded whole reply, read for what the capture needs of it
    /// ([`ReplyCapture::whole_reply_read`]; its usage alone without one), and decoded
    /// whenever that reading cannot read it: the usage scan cannot place what it reads,
    /// or the dialect has no text reading (only Chat Completions has one) or it declines
    /// the body.
    fn whole_reply(&mut self, dialect: Dialect, body: &[u8]) {
        let codec = codec(dialect);
        let read = self
            .context
            .as_ref()
            .map_or(WholeReplyRead::Usage, |capture| {
                capture.whole_reply_read(dialect, body)
            });
        match read {
            WholeReplyRead::Usage => {
                if let Ok(usage) = codec.response_usage(body) {
                    self.record.usage.merge(&usage);
                    return;
                }
            }
            WholeReplyRead::Text => {
                if let Some(capture) = self.context.as_mut()
                    && let Some(reply) = codec.reply_text(body)
                {
                    self.record.usage.merge(&reply.usage);
                    capture.text_reply(reply.stop_reason, &reply.text);
                    return;
                }
            }
            WholeReplyRead::Decode => {}
        }
        if let Ok(response) = codec.decode_response(body) {
            self.response(&response);
        }
    }

    /// The request failed before any reply: record why.
    pub fn fail(&mut self, status: u16, message: &str) {
        self.record.status = Some(status);
        self.record.error = Some(message.to_owned());
        self.ended = true;
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if self.forgotten {
            return;
        }
        self.announce();
        self.record.total_ms = Some(self.started.elapsed().as_millis() as u64);
        if self.record.status.is_none() {
            self.record.status = Some(match (&self.record.error, self.ended) {
                (_, false) => 499,
                (Some(_), true) => 502,
                (None, true) => 200,
            });
        }
        if self.record.status == Some(499) && self.record.error.is_none() {
            self.record.error = Some("client closed the connection before the reply ended".into());
        }
        if let Some(capture) = self.context.take() {
            capture.finish(&self.record);
        }
        // The record is moved out, not cloned: nothing reads it after the end, and a
        // clone cost one allocation per string and list in it on every request.
        let front = self.record.front;
        let record = std::mem::replace(
            &mut self.record,
            RequestRecord::arriving(0, 0, String::new(), None, front),
        );
        self.bus.publish(PipelineEvent::RequestFinished(record));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::Usage;

    /// The status a tracker records when it is dropped after seeing `events`.
    fn status_after(events: &[StreamEvent]) -> Option<u16> {
        let bus = Bus::default();
        let mut finished = bus.subscribe();
        let mut tracker = bus.start("gateway", Dialect::OpenAiResponses, None);
        for event in events {
            tracker.event(event);
        }
        // Dropped without `end`: the client closed the connection.
        drop(tracker);
        loop {
            match finished.try_recv().map(|e| (*e).clone()) {
                Ok(PipelineEvent::RequestFinished(record)) => return record.status,
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    #[test]
    fn a_client_that_closes_on_the_last_event_got_the_whole_reply() {
        let text = StreamEvent::TextDelta {
            index: 0,
            text: "Paris.".into(),
        };
        let finish = StreamEvent::Finish {
            stop_reason: glider_ngl::StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage::default(),
        };
        // Codex closes on `response.completed`, the stream's `Finish`, before the
        // stream is polled for its end: a success, not a client that left.
        assert_eq!(status_after(&[text.clone(), finish]), Some(200));
        // One that closes before the last event left early.
        assert_eq!(status_after(&[text]), Some(499));
    }
}
