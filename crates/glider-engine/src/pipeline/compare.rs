//! How two answers to one request compare, for fan-out `all` and `shadow`: each
//! answer's latency, output tokens, stop reason, tool calls and a digest of its text,
//! and whether another answer agrees with the one the client got. Cheap on purpose (no
//! model judges), and by the request's kind (docs/routing.md's kinds) when it is known:
//! a title or a compaction asks for text, so two answers agree when neither called a
//! tool and their texts' token-Jaccard similarity is at least [`TEXT_AGREEMENT`] — a
//! compaction whose conversation edited files or left errors open by its coverage
//! instead: the answer names each of them the client's answer named ([`Coverage`]);
//! any other kind is a step of an agent, so two answers agree when they called the
//! same tools with the same arguments (in order) and stopped for the same reason.
//! Beside that, the similarity and whether the texts are identical.
//! docs/fan-out.md#comparing-answers.

use std::collections::HashSet;
use std::time::Duration;

use glider_backend::UpstreamRequest;
use glider_dialects::codec;
use glider_ngl::{Response, ResponseBuilder};
use glider_vocab::{Agreement, AnswerSummary, Coverage, MustName};

use crate::router::RequestKind;

/// Token-Jaccard similarity from which two answers to a title or compaction request
/// agree: half their distinct words shared.
pub const TEXT_AGREEMENT: f64 = 0.5;

/// An answer as compared: its summary and the text only the comparison reads.
pub(crate) struct Answer {
    pub summary: AnswerSummary,
    text: String,
    /// Each tool call's arguments, in order, as compact JSON.
    arguments: Vec<String>,
}

impl Answer {
    /// `body` (the whole reply to `request`, streamed or not) decoded in its dialect.
    pub fn decode(
        backend: &str,
        model: &str,
        request: &UpstreamRequest,
        body: &[u8],
        took: Duration,
    ) -> Answer {
        match decode_reply(request, body) {
            Ok(response) => Answer::of(backend, model, &response, took),
            Err(error) => Answer::failed(backend, model, error, took),
        }
    }

    fn of(backend: &str, model: &str, response: &Response, took: Duration) -> Answer {
        let text = response.plain_text();
        Answer {
            summary: AnswerSummary {
                backend: backend.to_owned(),
                model: model.to_owned(),
                latency_ms: took.as_millis() as u64,
                output_tokens: response.usage.output_tokens,
                stop_reason: Some(response.stop_reason.as_str().to_owned()),
                tool_calls: glider_ngl::tool_calls(&response.parts)
                    .map(|(_, name, _)| name.to_owned())
                    .collect(),
                text_chars: text.chars().count(),
                // The same stable digest the session key uses (FNV-1a, mixed).
                digest: glider_backend::session_key_digest(&text),
                error: None,
            },
            text,
            arguments: glider_ngl::tool_calls(&response.parts)
                .map(|(_, _, arguments)| arguments.to_string())
                .collect(),
        }
    }

    /// A candidate that gave no answer.
    pub fn failed(backend: &str, model: &str, error: String, took: Duration) -> Answer {
        Answer {
            summary: AnswerSummary {
                backend: backend.to_owned(),
                model: model.to_owned(),
                latency_ms: took.as_millis() as u64,
                output_tokens: 0,
                stop_reason: None,
                tool_calls: Vec::new(),
                text_chars: 0,
                digest: String::new(),
                error: Some(error),
            },
            text: String::new(),
            arguments: Vec::new(),
        }
    }

    /// How `self` compares with `chosen` (the answer the client got) as an agent's
    /// step; `None` when either has no answer.
    pub fn against(&self, chosen: &Answer) -> Option<Agreement> {
        self.against_as(chosen, RequestKind::MainTurn, &[])
    }

    /// How `self` compares with `chosen` for a request of `kind`, whose summary must
    /// name `must_name` when it is a compaction; `None` when either has no answer.
    pub fn against_as(
        &self,
        chosen: &Answer,
        kind: RequestKind,
        must_name: &[MustName],
    ) -> Option<Agreement> {
        if self.summary.error.is_some() || chosen.summary.error.is_some() {
            return None;
        }
        let same_tools = self.summary.tool_calls == chosen.summary.tool_calls;
        let same_arguments = same_tools && self.arguments == chosen.arguments;
        let same_stop = self.summary.stop_reason == chosen.summary.stop_reason;
        let text_similarity = token_jaccard(&self.text, &chosen.text);
        let coverage = (kind == RequestKind::Compaction && !must_name.is_empty())
            .then(|| Coverage::of(must_name, &chosen.text, &self.text));
        let text_only = self.summary.tool_calls.is_empty() && chosen.summary.tool_calls.is_empty();
        let agrees = match (kind, &coverage) {
            (RequestKind::Compaction, Some(coverage)) => text_only && coverage.holds(),
            (RequestKind::Title | RequestKind::Compaction, _) => {
                text_only && text_similarity >= TEXT_AGREEMENT
            }
            _ => same_arguments && same_stop,
        };
        Some(Agreement {
            agrees,
            same_tools,
            same_arguments,
            same_stop,
            exact: self.text == chosen.text,
            text_similarity,
            coverage,
        })
    }
}

/// A whole reply in `request`'s dialect, a stream's events gathered into one answer.
fn decode_reply(request: &UpstreamRequest, body: &[u8]) -> Result<Response, String> {
    let codec = codec(request.dialect);
    if !request.stream {
        return codec.decode_response(body).map_err(|e| e.message);
    }
    let mut decoder = codec.stream_decoder();
    let mut builder = ResponseBuilder::new();
    for event in decoder.feed(body).map_err(|e| e.message)? {
        builder.push(&event);
    }
    for event in decoder.finish() {
        builder.push(&event);
    }
    builder.finish().map_err(|e| e.message)
}

/// |A ∩ B| / |A ∪ B| over the lower-cased words of each text, rounded to three places;
/// two empty texts are identical (1.0).
fn token_jaccard(a: &str, b: &str) -> f64 {
    let words = |text: &str| -> HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 1.0;
    }
    let shared = a.intersection(&b).count();
    (shared as f64 / union as f64 * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::{Part, StopReason, Usage};

    fn response(text: &str, tools: &[&str], stop: StopReason) -> Response {
        with_arguments(text, tools, stop, serde_json::json!({}))
    }

    fn with_arguments(
        text: &str,
        tools: &[&str],
        stop: StopReason,
        arguments: serde_json::Value,
    ) -> Response {
        let mut parts = vec![Part::text(text)];
        for name in tools {
            parts.push(Part::ToolCall {
                id: format!("call_{name}"),
                name: (*name).to_owned(),
                arguments: arguments.clone(),
            });
        }
        Response {
            id: "r".into(),
            model: "m".into(),
            parts,
            stop_reason: stop,
            stop_sequence: None,
            usage: Usage {
                output_tokens: 7,
                ..Usage::default()
            },
        }
    }

    #[test]
    fn the_same_tool_and_stop_agree_even_when_the_words_differ() {
        let took = Duration::from_millis(5);
        let chosen = Answer::of(
            "cloud",
            "c",
            &response("I will read the file", &["read"], StopReason::ToolUse),
            took,
        );
        let other = Answer::of(
            "local",
            "l",
            &response("reading the file now", &["read"], StopReason::ToolUse),
            took,
        );
        let agreement = other.against(&chosen).expect("both answered");
        assert!(agreement.agrees && !agreement.exact, "{agreement:?}");
        // {reading, the, file, now} and {i, will, read, the, file}: 2 of 7.
        assert_eq!(agreement.text_similarity, 0.286);
        assert_eq!(other.summary.tool_calls, vec!["read".to_owned()]);
        assert_eq!(other.summary.stop_reason.as_deref(), Some("tool_use"));
    }

    #[test]
    fn another_tool_or_stop_disagrees_and_a_failure_is_not_compared() {
        let took = Duration::ZERO;
        let chosen = Answer::of(
            "c",
            "c",
            &response("x", &["edit"], StopReason::ToolUse),
            took,
        );
        let other = Answer::of("l", "l", &response("x", &[], StopReason::EndTurn), took);
        let agreement = other.against(&chosen).expect("both answered");
        assert!(!agreement.agrees && !agreement.same_tools && !agreement.same_stop);
        assert!(agreement.exact);
        assert_eq!(agreement.text_similarity, 1.0);
        assert_eq!(chosen.summary.digest, other.summary.digest);
        let failed = Answer::failed("l", "l", "boom".into(), took);
        assert!(failed.against(&chosen).is_none());
    }

    #[test]
    fn by_kind_a_step_needs_the_same_arguments_and_a_title_similar_words() {
        let took = Duration::ZERO;
        let read = |path: &str| {
            Answer::of(
                "x",
                "x",
                &with_arguments(
                    "",
                    &["Read"],
                    StopReason::ToolUse,
                    serde_json::json!({"file_path": path}),
                ),
                took,
            )
        };
        let (cloud, same, other) = (read("notes.txt"), read("notes.txt"), read("red.png"));
        let agreement = same
            .against_as(&cloud, RequestKind::ToolFollowup, &[])
            .expect("both");
        assert!(
            agreement.agrees && agreement.same_arguments,
            "{agreement:?}"
        );
        let agreement = other
            .against_as(&cloud, RequestKind::ToolFollowup, &[])
            .expect("both");
        assert!(agreement.same_tools && !agreement.same_arguments && !agreement.agrees);

        let text = |t: &str| Answer::of("x", "x", &response(t, &[], StopReason::EndTurn), took);
        let cloud = text("Fix typo in notes file");
        // {fix, typo, in, notes} of {fix, typo, in, notes, file, txt}: 0.667.
        let close = text("Fix typo in notes.txt");
        let agreement = close
            .against_as(&cloud, RequestKind::Title, &[])
            .expect("both");
        assert!(agreement.agrees, "{agreement:?}");
        // As an agent's step the words do not matter: same (no) tools, same stop.
        let far = text("Greeting");
        assert!(
            far.against_as(&cloud, RequestKind::MainTurn, &[])
                .expect("both")
                .agrees
        );
        let agreement = far
            .against_as(&cloud, RequestKind::Title, &[])
            .expect("both");
        assert!(!agreement.agrees && agreement.text_similarity < TEXT_AGREEMENT);
        let tool = read("notes.txt");
        assert!(
            !tool
                .against_as(&cloud, RequestKind::Compaction, &[])
                .expect("both")
                .agrees
        );
    }

    #[test]
    fn a_compaction_with_files_and_errors_agrees_by_naming_what_the_client_named() {
        let text = |t: &str| {
            Answer::of(
                "x",
                "x",
                &response(t, &[], StopReason::EndTurn),
                Duration::ZERO,
            )
        };
        let must_name = [
            MustName::file("/w/notes.txt"),
            MustName {
                label: "cargo test".into(),
                names: vec!["cargo test".into()],
            },
        ];
        let cloud = text("We fixed the typo in notes.txt; cargo test still fails.");
        // Close in words, but it leaves out the file the client's summary named.
        let vague = text("We fixed the typo in the notes; cargo test still fails.");
        let agreement = vague
            .against_as(&cloud, RequestKind::Compaction, &must_name)
            .expect("both");
        assert!(agreement.text_similarity >= TEXT_AGREEMENT, "{agreement:?}");
        assert!(!agreement.agrees, "{agreement:?}");
        assert_eq!(
            agreement.coverage,
            Some(Coverage {
                required: 2,
                primary_named: 2,
                shadow_named: 1,
                missed: 1,
                missed_labels: vec!["/w/notes.txt".into()],
            })
        );
        // Far in words, but it names both: it covers what the client covered.
        let terse = text("Open: CARGO TEST. Edited: /w/notes.txt.");
        let agreement = terse
            .against_as(&cloud, RequestKind::Compaction, &must_name)
            .expect("both");
        assert!(agreement.text_similarity < TEXT_AGREEMENT && agreement.agrees);
        // A title is compared by its words whatever the conversation holds.
        let agreement = terse
            .against_as(&cloud, RequestKind::Title, &must_name)
            .expect("both");
        assert!(!agreement.agrees && agreement.coverage.is_none());
    }
}
