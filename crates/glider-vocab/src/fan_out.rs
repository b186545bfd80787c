//! What a fan-out (`hedge`, `first`, `all`) and a shadow copy leave on the record: which
//! backend won, what was cancelled, each answer's summary (never its text) and how it
//! compares with the one the client got. The engine's fan-out and shadow send the
//! copies and fill these in; the dashboard shows and stores them. docs/fan-out.md.

use serde::{Deserialize, Serialize};

use crate::Coverage;

/// What the fan-out did for one request, for its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanOutRecord {
    /// `hedge`, `first` or `all`.
    pub mode: String,
    /// Hedge: whether the next candidate was started (the local one was too slow).
    pub fired: bool,
    /// Hedge: the delay waited before starting it, in milliseconds.
    pub delay_ms: Option<u64>,
    /// The backend whose answer the client got.
    pub winner: String,
    /// Backends whose attempts were still running and were cancelled.
    pub cancelled: Vec<String>,
    /// `all`: every candidate's answer in attempt order, the client's first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<ComparedAnswer>,
}

impl FanOutRecord {
    /// Mode `shadow`'s record: the primary answered alone (the copy is its own sample).
    pub fn shadowed(primary: &str) -> FanOutRecord {
        FanOutRecord {
            mode: "shadow".to_owned(),
            fired: false,
            delay_ms: None,
            winner: primary.to_owned(),
            cancelled: Vec::new(),
            answers: Vec::new(),
        }
    }
}

/// One candidate's answer under `all`, and how it compares with the client's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedAnswer {
    #[serde(flatten)]
    pub answer: AnswerSummary,
    /// The client got this answer.
    pub chosen: bool,
    /// Against the chosen answer; `None` for the chosen one and for a failure.
    pub agreement: Option<Agreement>,
}
/// One candidate's answer, as a record keeps it (never its text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerSummary {
    pub backend: String,
    pub model: String,
    /// Milliseconds from the start of its attempt to the end of its answer.
    pub latency_ms: u64,
    pub output_tokens: u64,
    /// `end_turn`, `tool_use`, `max_tokens`…; `None` when it failed.
    pub stop_reason: Option<String>,
    /// The tools it called, by name, in order.
    pub tool_calls: Vec<String>,
    pub text_chars: usize,
    /// A stable 64-bit digest of its text, in hex: equal digests, equal texts.
    pub digest: String,
    /// Why there is no answer (the attempt failed, or its reply did not decode).
    pub error: Option<String>,
}

/// How an answer compares with the one the client got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// By the request's kind: the same tool calls (names and arguments, in order) and
    /// the same stop reason; for a title or compaction, text only and a similarity of
    /// at least the engine's `TEXT_AGREEMENT` — for a compaction whose graph lists
    /// items, naming every one the client's answer named instead ([`Coverage`])
    /// (docs/fan-out.md#comparing-answers).
    pub agrees: bool,
    pub same_tools: bool,
    /// The same tools called with the same arguments, in order.
    #[serde(default)]
    pub same_arguments: bool,
    pub same_stop: bool,
    /// The texts are identical.
    pub exact: bool,
    /// Token-Jaccard similarity of the texts (lower-cased words), 0.0 to 1.0.
    pub text_similarity: f64,
    /// For a compaction whose conversation's graph lists files edited or errors open:
    /// how each answer names them (it agrees when it names all the client's did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
}
/// What became of one request's shadow copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShadowOutcome {
    /// Both answered; the two are compared.
    Compared,
    /// The shadow gave no answer (its failure is counted, never the client's).
    Failed,
    /// The budget left it out (`skipped_by` says which limit).
    Skipped,
    /// The primary's reply did not reach its end (the client left, or it was longer
    /// than what is copied), so there is nothing to compare with.
    PrimaryUnfinished,
}

impl ShadowOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ShadowOutcome::Compared => "compared",
            ShadowOutcome::Failed => "failed",
            ShadowOutcome::Skipped => "skipped",
            ShadowOutcome::PrimaryUnfinished => "primary_unfinished",
        }
    }
}

/// One request's shadow copy: a labelled pair of answers (never their text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowSample {
    /// The request's record id.
    pub request_id: u64,
    /// Unix milliseconds when the sample was taken (its end, or the skip).
    pub at_ms: u64,
    /// The rule that decided the request (`classifier`, `model`…).
    pub route: String,
    /// The request's kind (`tool_followup`, `compaction`…; docs/routing.md), which
    /// says how the two answers were compared. Absent in samples from before kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub primary_backend: String,
    pub shadow_backend: String,
    pub outcome: ShadowOutcome,
    /// `local_busy`, `sample_rate`, `max_concurrent` or `max_per_minute`, when skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_by: Option<String>,
    pub primary: Option<AnswerSummary>,
    pub shadow: Option<AnswerSummary>,
    /// The shadow's answer against the primary's, when both answered.
    pub agreement: Option<Agreement>,
}
