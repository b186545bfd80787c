//! Stop sequences Glider applies itself. A local backend's wire cannot say which of the
//! client's stop sequences ended a reply (Ollama's `done_reason` is only `"stop"`,
//! llama-server's OpenAI-compatible reply only `finish_reason: "stop"`, and both cut the
//! sequence out of the text), so an Anthropic client would get `end_turn` and no
//! `stop_sequence`. For a translated reply from a local backend Glider therefore keeps
//! the sequences out of the upstream request, matches them on the reply as it streams
//! (holding back only the longest sequence's length minus one byte), cuts the text at
//! the match, ends the upstream request by dropping its body, and finishes the reply
//! with `StopReason::StopSequence` naming the sequence. A backend that does name the
//! sequence (vLLM's `stop_reason`, Anthropic's `stop_sequence`) is decoded by its codec.

use std::collections::VecDeque;
use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use glider_backend::Backend;
use glider_ngl::stream::PartKind;
use glider_ngl::{Dialect, Request, StopReason, StreamEvent, Usage};
use glider_vocab::estimate::estimate_text;

/// Whether Glider, not `backend`, applies `request`'s stop sequences: the request has
/// some, the backend is local, and its reply is translated (a reply forwarded as bytes
/// is the backend's own, stop handling included).
pub(crate) fn applied_by_glider(front: Dialect, request: &Request, backend: &Backend) -> bool {
    request.stop.iter().any(|s| !s.is_empty())
        && backend.is_local()
        && backend.dialect_for(front) != front
}

/// Finds the first of a set of stop sequences in text that arrives in pieces.
#[derive(Debug)]
pub(crate) struct StopMatcher {
    stops: Vec<String>,
    /// Bytes a piece of text is held back: the longest sequence's length minus one, the
    /// most of a match that can be in text already seen without being complete.
    hold: usize,
    pending: String,
}

impl StopMatcher {
    /// A matcher for `stops` (empty sequences never match); `None` when none is left.
    pub(crate) fn new(stops: &[String]) -> Option<Self> {
        let stops: Vec<String> = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        let longest = stops.iter().map(String::len).max()?;
        Some(StopMatcher {
            stops,
            hold: longest - 1,
            pending: String::new(),
        })
    }

    /// Feed the next piece of text: the text that can go to the client now and, when a
    /// sequence completed, that sequence (the text returned then ends just before it,
    /// and the matcher is spent).
    pub(crate) fn feed(&mut self, text: &str) -> (String, Option<String>) {
        self.pending.push_str(text);
        // The sequence that completed first (the model wrote its last byte earliest)
        // is the one it stopped on, as a backend checking after each token would.
        let first = self
            .stops
            .iter()
            .filter_map(|stop| self.pending.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|(at, stop)| (at + stop.len(), *at));
        if let Some((at, stop)) = first {
            let stop = stop.clone();
            let before = self.pending[..at].to_owned();
            self.pending.clear();
            return (before, Some(stop));
        }
        let mut safe = self.pending.len().saturating_sub(self.hold);
        while !self.pending.is_char_boundary(safe) {
            safe -= 1;
        }
        (self.pending.drain(..safe).collect(), None)
    }

    /// The text held back, when the part it belongs to ends without a match.
    pub(crate) fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// `events` with the stop sequences applied: text parts are matched (thinking and tool
/// arguments are not: a stop sequence ends the model's answer, not its tool call); at a
/// match the text is cut, its part closed, and the reply finished with the sequence.
/// The upstream stream is dropped there, which closes the backend's request.
/// `input_tokens` is the request's estimate, the usage reported when the backend had
/// not counted yet (Ollama counts only in its last line, which a cut reply never gets).
pub(crate) fn cut_events(
    events: Pin<Box<dyn Stream<Item = StreamEvent> + Send>>,
    matcher: StopMatcher,
    input_tokens: u64,
) -> Pin<Box<dyn Stream<Item = StreamEvent> + Send>> {
    struct State {
        upstream: Option<Pin<Box<dyn Stream<Item = StreamEvent> + Send>>>,
        matcher: StopMatcher,
        queue: VecDeque<StreamEvent>,
        open_text: Option<usize>,
        usage: Usage,
        /// Everything the model wrote, for the output estimate of a cut reply.
        output: String,
    }
    let state = State {
        upstream: Some(events),
        matcher,
        queue: VecDeque::new(),
        open_text: None,
        usage: Usage {
            input_tokens,
            ..Usage::default()
        },
        output: String::new(),
    };
    Box::pin(futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.queue.pop_front() {
                return Some((event, s));
            }
            let event = s.upstream.as_mut()?.next().await?;
            match event {
                StreamEvent::Start { ref usage, .. } => {
                    s.usage.merge(usage);
                    s.queue.push_back(event);
                }
                StreamEvent::PartStart {
                    index,
                    kind: PartKind::Text,
                } => {
                    s.open_text = Some(index);
                    s.queue.push_back(event);
                }
                StreamEvent::TextDelta { index, text } if s.open_text == Some(index) => {
                    let (text, matched) = s.matcher.feed(&text);
                    s.output.push_str(&text);
                    if !text.is_empty() {
                        s.queue.push_back(StreamEvent::TextDelta { index, text });
                    }
                    if let Some(sequence) = matched {
                        s.upstream = None;
                        s.usage.output_tokens = estimate_text(&s.output);
                        s.queue.push_back(StreamEvent::PartStop { index });
                        s.queue.push_back(StreamEvent::Finish {
                            stop_reason: StopReason::StopSequence,
                            stop_sequence: Some(sequence),
                            usage: s.usage,
                        });
                    }
                }
                StreamEvent::PartStop { index } if s.open_text == Some(index) => {
                    s.open_text = None;
                    let text = s.matcher.flush();
                    if !text.is_empty() {
                        s.queue.push_back(StreamEvent::TextDelta { index, text });
                    }
                    s.queue.push_back(event);
                }
                StreamEvent::ThinkingDelta { ref text, .. } => {
                    s.output.push_str(text);
                    s.queue.push_back(event);
                }
                StreamEvent::ToolArgsDelta { ref json, .. } => {
                    s.output.push_str(json);
                    s.queue.push_back(event);
                }
                other => s.queue.push_back(other),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::stream::ResponseBuilder;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("has stops")
    }

    #[test]
    fn text_is_held_back_only_the_longest_sequence_minus_one() {
        let mut m = matcher(&["END", "x"]);
        assert_eq!(m.feed("hello wor"), ("hello w".into(), None));
        assert_eq!(
            m.feed("ld E"),
            ("orld".into(), None),
            "`ld E` may start END"
        );
        assert_eq!(m.feed("N"), (" ".into(), None));
        assert_eq!(m.feed("D and more"), (String::new(), Some("END".into())));
    }

    #[test]
    fn a_match_across_pieces_is_found_and_the_first_to_complete_wins() {
        let mut m = matcher(&["abc", "b"]);
        assert_eq!(m.feed("za"), (String::new(), None));
        assert_eq!(m.feed("bc"), ("za".into(), Some("b".into())));
    }

    #[test]
    fn held_text_is_flushed_and_multibyte_text_is_never_split() {
        let mut m = matcher(&["STOP"]);
        let (out, matched) = m.feed("héé");
        assert!(matched.is_none());
        assert!("héé".starts_with(&out), "a char boundary: {out:?}");
        assert_eq!(format!("{out}{}", m.flush()), "héé");
        assert!(
            StopMatcher::new(&[String::new()]).is_none(),
            "an empty stop matches nothing"
        );
    }

    fn events(text_pieces: &[&str]) -> Vec<StreamEvent> {
        let mut events = vec![
            StreamEvent::Start {
                id: "r".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
        ];
        events.extend(text_pieces.iter().map(|t| StreamEvent::TextDelta {
            index: 0,
            text: (*t).into(),
        }));
        events.push(StreamEvent::PartStop { index: 0 });
        events.push(StreamEvent::Finish {
            stop_reason: StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage {
                input_tokens: 7,
                output_tokens: 9,
                ..Usage::default()
            },
        });
        events
    }

    async fn run(pieces: &[&str], stops: &[&str]) -> (Vec<StreamEvent>, std::sync::Arc<()>) {
        // The guard rides in the upstream stream: once the stream is dropped (the
        // upstream request ended), only the test's own reference is left.
        let guard = std::sync::Arc::new(());
        let held = guard.clone();
        let upstream = futures_util::stream::iter(events(pieces)).map(move |e| {
            let _ = &held;
            e
        });
        let cut = cut_events(Box::pin(upstream), matcher(stops), 3);
        let mut cut = cut;
        let mut out = Vec::new();
        while let Some(event) = cut.next().await {
            out.push(event);
            if matches!(out.last(), Some(StreamEvent::Finish { .. })) {
                break;
            }
        }
        (out, guard)
    }

    #[tokio::test]
    async fn a_stream_is_cut_at_the_match_and_its_upstream_dropped() {
        let (out, guard) = run(&["Hello ", "wor", "ld. More"], &["rl"]).await;
        assert_eq!(
            std::sync::Arc::strong_count(&guard),
            1,
            "the upstream stream was dropped at the match"
        );
        let mut builder = ResponseBuilder::new();
        out.iter().for_each(|e| builder.push(e));
        let response = builder.finish().expect("a complete reply");
        assert_eq!(response.plain_text(), "Hello wo");
        assert_eq!(response.stop_reason, StopReason::StopSequence);
        assert_eq!(response.stop_sequence.as_deref(), Some("rl"));
        assert_eq!(response.usage.input_tokens, 3, "the estimate stands in");
        assert!(response.usage.output_tokens > 0);
    }

    #[tokio::test]
    async fn a_stream_without_a_match_is_whole_and_keeps_the_backends_usage() {
        let (out, _) = run(&["Hel", "lo"], &["lox"]).await;
        let mut builder = ResponseBuilder::new();
        out.iter().for_each(|e| builder.push(e));
        let response = builder.finish().expect("a complete reply");
        assert_eq!(response.plain_text(), "Hello");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(response.stop_sequence, None);
        assert_eq!(response.usage.output_tokens, 9);
    }
}
