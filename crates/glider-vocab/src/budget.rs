//! What a session and its current episode have spent: the values the engine's
//! contextkit keeps and the dashboard and the context store show. The kit itself (the
//! turn budget, the loop guard) is the engine's; a loop it ended is on the request's
//! record ([`crate::record::BudgetStop`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::record::RequestRecord;

/// Tokens one backend spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BackendTokens {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// What a span of requests (a session, an episode) spent.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spend {
    /// Requests admitted (each a model turn, unless it was stopped).
    pub turns: u32,
    /// Finished requests a local backend answered, and all finished ones.
    pub local_requests: u64,
    pub finished_requests: u64,
    pub backends: BTreeMap<String, BackendTokens>,
}

impl Spend {
    /// Finished requests a local backend answered, as a fraction (0 with none).
    pub fn local_share(&self) -> f64 {
        if self.finished_requests == 0 {
            0.0
        } else {
            self.local_requests as f64 / self.finished_requests as f64
        }
    }

    /// Count `record`'s finished request (one with a backend) in this span.
    pub fn finished(&mut self, record: &RequestRecord) {
        let Some(backend) = &record.backend else {
            return;
        };
        self.finished_requests += 1;
        if record.local == Some(true) {
            self.local_requests += 1;
        }
        let usage = &record.usage;
        let tokens = self.backends.entry(backend.clone()).or_default();
        tokens.requests += 1;
        tokens.input_tokens +=
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
        tokens.output_tokens += usage.output_tokens;
    }
}

/// A session's state as the dashboard or a test reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionBudget {
    pub session: String,
    pub total: Spend,
    pub local_share: f64,
    /// The current episode's id (its root request's bus id) and spend.
    pub episode: Option<u64>,
    pub episode_spend: Spend,
    pub stops: u32,
}
