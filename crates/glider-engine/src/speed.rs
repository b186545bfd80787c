//! How fast each local model is, measured on its own replies: prompt tokens read per
//! second (input tokens over the time to the first byte) and tokens generated per
//! second (output tokens over the rest of the reply), each a moving average. The fit
//! phase caps a local reply's length by it (`fit.max_reply_secs`), so a small model on
//! a CPU answers in a time a user accepts instead of generating for minutes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use glider_vocab::RequestRecord;
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;

use crate::events::{Bus, PipelineEvent};

/// The newest sample's weight in the moving average.
const NEWEST_WEIGHT: f64 = 0.3;
/// Fewer output tokens than this, or a shorter span, measure the server's overhead
/// more than the model's speed: not a sample.
const MIN_GENERATED: u64 = 16;
const MIN_INPUT: u64 = 64;
const MIN_SPAN_MS: u64 = 50;

/// One local model's measured speed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Speed {
    /// Prompt tokens read per second, once measured.
    pub prompt_per_sec: Option<f64>,
    /// Tokens generated per second, once measured.
    pub generated_per_sec: Option<f64>,
    /// Replies measured.
    pub samples: u32,
}

/// Every local backend's models' [`Speed`], fed from the bus's finished requests.
/// Keyed by backend, then model, so the fit phase reads one by borrowed names.
#[derive(Default)]
pub struct SpeedBook {
    speeds: Mutex<HashMap<String, HashMap<String, Speed>>>,
}

impl SpeedBook {
    /// `backend`'s `model`, if any reply of it was measured.
    pub fn get(&self, backend: &str, model: &str) -> Option<Speed> {
        let speeds = self.speeds.lock().unwrap_or_else(PoisonError::into_inner);
        speeds.get(backend)?.get(model).copied()
    }

    /// The models of `backend` measured so far, sorted.
    pub fn models_of(&self, backend: &str) -> Vec<String> {
        let speeds = self.speeds.lock().unwrap_or_else(PoisonError::into_inner);
        let mut models: Vec<String> = speeds
            .get(backend)
            .map(|models| models.keys().cloned().collect())
            .unwrap_or_default();
        models.sort();
        models
    }

    /// Learn from a finished request: a local reply that succeeded, long enough to say
    /// something of the model's speed.
    pub fn observe(&self, record: &RequestRecord) {
        let (Some(true), Some(200), Some(backend), Some(model), Some(ttft), Some(total)) = (
            record.local,
            record.status,
            &record.backend,
            &record.model_used,
            record.ttft_ms,
            record.total_ms,
        ) else {
            return;
        };
        let input = record.usage.input_tokens + record.usage.cache_read_tokens;
        let output = record.usage.output_tokens;
        let generating_ms = total.saturating_sub(ttft);
        let prompt = (input >= MIN_INPUT && ttft >= MIN_SPAN_MS).then(|| per_sec(input, ttft));
        let generated = (output >= MIN_GENERATED && generating_ms >= MIN_SPAN_MS)
            .then(|| per_sec(output, generating_ms));
        if prompt.is_none() && generated.is_none() {
            return;
        }
        let mut speeds = self.speeds.lock().unwrap_or_else(PoisonError::into_inner);
        // On the bus's task, off the request path: the names' copies cost nothing there.
        let speed = speeds
            .entry(backend.clone())
            .or_default()
            .entry(model.clone())
            .or_default();
        speed.prompt_per_sec = average(speed.prompt_per_sec, prompt);
        speed.generated_per_sec = average(speed.generated_per_sec, generated);
        speed.samples = speed.samples.saturating_add(1);
    }

    /// Feed this book from `bus` until the book is dropped.
    pub fn follow(self: &Arc<Self>, bus: &Bus) {
        let mut events = bus.subscribe();
        let book: Weak<SpeedBook> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => event,
                    // A sample missed under load changes an average, nothing more.
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                let Some(book) = book.upgrade() else { return };
                if let PipelineEvent::RequestFinished(record) = event.as_ref() {
                    book.observe(record);
                }
            }
        });
    }
}

fn per_sec(tokens: u64, ms: u64) -> f64 {
    tokens as f64 * 1000.0 / ms as f64
}

fn average(old: Option<f64>, new: Option<f64>) -> Option<f64> {
    match (old, new) {
        (Some(old), Some(new)) => Some(old + NEWEST_WEIGHT * (new - old)),
        (old, new) => new.or(old),
    }
}

#[cfg(test)]
mod tests {
    use glider_ngl::{Dialect, Usage};

    use super::*;

    fn reply(
        local: bool,
        status: u16,
        input: u64,
        output: u64,
        ttft: u64,
        total: u64,
    ) -> RequestRecord {
        let mut record = RequestRecord::arriving(1, 0, "gateway".into(), None, Dialect::Anthropic);
        record.local = Some(local);
        record.status = Some(status);
        record.backend = Some("local".into());
        record.model_used = Some("small".into());
        record.usage = Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        };
        record.ttft_ms = Some(ttft);
        record.total_ms = Some(total);
        record
    }

    #[test]
    fn a_local_model_s_speed_is_learned_from_its_replies_and_averaged() {
        let book = SpeedBook::default();
        // 2000 prompt tokens in 10 s, 100 tokens in the next 5 s.
        book.observe(&reply(true, 200, 2000, 100, 10_000, 15_000));
        let speed = book.get("local", "small").expect("measured");
        assert_eq!(speed.prompt_per_sec, Some(200.0));
        assert_eq!(speed.generated_per_sec, Some(20.0));
        // A faster reply moves the average part of the way.
        book.observe(&reply(true, 200, 2000, 400, 10_000, 15_000));
        let speed = book.get("local", "small").expect("measured");
        assert_eq!(speed.generated_per_sec, Some(20.0 + 0.3 * 60.0));
        assert_eq!(speed.samples, 2);
        assert_eq!(book.models_of("local"), ["small"]);
        assert!(book.models_of("cloud").is_empty());
    }

    #[test]
    fn cloud_failed_and_tiny_replies_teach_nothing() {
        let book = SpeedBook::default();
        book.observe(&reply(false, 200, 2000, 100, 1000, 2000));
        book.observe(&reply(true, 502, 2000, 100, 1000, 2000));
        book.observe(&reply(true, 200, 10, 3, 1000, 1010));
        assert_eq!(book.get("local", "small"), None);
    }
}
