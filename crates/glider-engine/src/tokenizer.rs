//! Token estimates (spec: `Tokenizer.EstimateRequestTokens`). Every model is estimated
//! as one token per 3.5 bytes of text plus 4 tokens per message: no public tokenizer
//! exists for Claude, and local models differ; real counts from upstream `usage` replace
//! the estimate where they arrive. OpenAI models can be counted exactly with tiktoken
//! (their real vocabularies, embedded), which costs milliseconds over a coding CLI's
//! 80 KB turn: routing asks for it only near a limit ([`estimate_for_routing`]).

use glider_ngl::{Part, Request, ToolList, json_len};
use glider_vocab::estimate::estimate_len;

/// Framing tokens counted per message (role markers and separators).
pub const TOKENS_PER_MESSAGE: u64 = 4;

/// Within this fraction of a local window (either side), the token limit asks a
/// llama.cpp backend for the exact count instead of trusting the estimate (which is off
/// by up to ~20 % for such a model: bench/results/2026-12-01-count-tokens.md).
pub const NEAR_LIMIT_MARGIN: f64 = 0.2;

/// How an estimate was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Tiktoken,
    ByteRatio,
}

/// Estimate the input tokens of `request` for `model`, as exactly as Glider can: tiktoken
/// for OpenAI models, the byte ratio otherwise.
pub fn estimate_request_tokens(request: &Request, model: &str) -> (u64, Method) {
    estimate_for_routing(request, model, |_| true)
}

/// The estimate a routing decision reads: the byte ratio, counted again with the
/// model's own tokenizer (tiktoken, for OpenAI models) only when `near_limit` says the
/// byte ratio's error could change the decision. A request far from every limit is
/// decided the same either way, and tiktoken over an 80 KB body costs milliseconds.
pub fn estimate_for_routing(
    request: &Request,
    model: &str,
    near_limit: impl FnOnce(u64) -> bool,
) -> (u64, Method) {
    let framing = TOKENS_PER_MESSAGE * request.turns.len() as u64;
    // The byte ratio needs only the text's length: counting it without building the
    // text saves copying (and re-serialising) every tool schema on each request.
    let rough = estimate_len(request_text_len(request)) + framing;
    // The vocabulary is loaded only for a count that runs: o200k's tables are ~42 MB
    // of heap (cl100k ~23 MB more), held for the life of the process, which a proxy
    // that never counts near a limit should not pay for one `gpt-*` request.
    match tiktoken_rs::tokenizer::get_tokenizer(model)
        .filter(|_| near_limit(rough))
        .and_then(|t| tiktoken_rs::bpe_for_tokenizer(t).ok())
    {
        Some(bpe) => (
            bpe.encode_ordinary(&request_text(request)).len() as u64 + framing,
            Method::Tiktoken,
        ),
        None => (rough, Method::ByteRatio),
    }
}

/// Whether `estimate` is within [`NEAR_LIMIT_MARGIN`] of `limit`, either side: close
/// enough for an estimate's error to put the request on the wrong side of it.
pub fn within_margin(estimate: u64, limit: u64) -> bool {
    let limit = limit as f64;
    (estimate as f64 - limit).abs() <= limit * NEAR_LIMIT_MARGIN
}

/// The byte-ratio estimate of one turn (its text plus the per-message framing).
pub fn estimate_turn(turn: &glider_ngl::Turn) -> u64 {
    estimate_len(parts_len(&turn.parts)) + TOKENS_PER_MESSAGE
}

/// The byte-ratio estimate of a set of tool definitions.
pub fn estimate_tools(tools: &ToolList) -> u64 {
    estimate_len(tools.text_len())
}

/// All the text a model reads: turns, tool definitions and tool traffic.
fn request_text(request: &Request) -> String {
    let mut text = String::new();
    for turn in &request.turns {
        push_parts(&mut text, &turn.parts);
    }
    for tool in &request.tools {
        text.push_str(&tool.name);
        if let Some(description) = &tool.description {
            text.push_str(description);
        }
        text.push_str(&tool.parameters.to_string());
    }
    text
}

/// `request_text(request).len()`, counted without building the text.
fn request_text_len(request: &Request) -> usize {
    let turns: usize = request.turns.iter().map(|t| parts_len(&t.parts)).sum();
    // Measured once per tool list: a coding CLI's list is shared across its turns.
    turns + request.tools.text_len()
}

/// What [`push_parts`] would append, in bytes.
fn parts_len(parts: &[Part]) -> usize {
    parts
        .iter()
        .map(|part| {
            let len = match part {
                Part::Text { text, .. } | Part::Thinking { text, .. } => text.len(),
                Part::ToolCall {
                    name, arguments, ..
                } => name.len() + json_len(arguments),
                Part::ToolResult { content, .. } => parts_len(content),
                Part::Native { raw, .. } => json_len(raw),
                Part::Image { .. } => IMAGE_TEXT_BYTES,
            };
            len + 1
        })
        .sum()
}

/// Text an image stands for: vendors bill images by size; a flat allowance of 1,500
/// tokens keeps the estimate sane.
const IMAGE_TEXT_BYTES: usize = 1_500 * 4;

fn push_parts(text: &mut String, parts: &[Part]) {
    for part in parts {
        match part {
            Part::Text { text: t, .. } => text.push_str(t),
            Part::Thinking { text: t, .. } => text.push_str(t),
            Part::ToolCall {
                name, arguments, ..
            } => {
                text.push_str(name);
                text.push_str(&arguments.to_string());
            }
            Part::ToolResult { content, .. } => push_parts(text, content),
            Part::Native { raw, .. } => text.push_str(&raw.to_string()),
            Part::Image { .. } => text.push_str(&" ".repeat(IMAGE_TEXT_BYTES)),
        }
        text.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::{Role, Turn};

    fn request(text: &str) -> Request {
        Request {
            model: "m".into(),
            turns: vec![Turn::text(Role::User, text)],
            ..Request::default()
        }
    }

    #[test]
    fn openai_models_use_tiktoken() {
        let (tokens, method) = estimate_request_tokens(&request("hello world"), "gpt-4o");
        assert_eq!(method, Method::Tiktoken);
        // "hello world" is 2 tokens in o200k, plus the newline separator and framing.
        assert!((6..=8).contains(&tokens), "{tokens}");
    }

    #[test]
    fn counted_length_matches_the_built_text() {
        use glider_ngl::{ImageSource, ToolDef};
        let request = Request {
            model: "m".into(),
            turns: vec![
                Turn::text(Role::System, "be brief \u{e9}\"quoted\""),
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking {
                            text: "hmm".into(),
                            signature: None,
                            redacted: None,
                        },
                        Part::ToolCall {
                            id: "c1".into(),
                            name: "Read".into(),
                            arguments: serde_json::json!({"path": "a\nb", "n": [1, 2.5, null]}),
                        },
                    ],
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        call_id: "c1".into(),
                        name: None,
                        content: vec![
                            Part::text("file body"),
                            Part::Image {
                                source: ImageSource::Url {
                                    url: "http://x/y.png".into(),
                                },
                                cache_control: None,
                            },
                        ],
                        is_error: false,
                    }],
                },
                Turn {
                    role: Role::User,
                    parts: vec![Part::Native {
                        dialect: glider_ngl::Dialect::Anthropic,
                        raw: serde_json::json!({"type": "document", "title": "t\u{1F600}"}),
                    }],
                },
            ],
            tools: vec![ToolDef {
                name: "Read".into(),
                description: Some("Read a file".into()),
                parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                native: None,
            }]
            .into(),
            ..Request::default()
        };
        assert_eq!(request_text_len(&request), request_text(&request).len());
    }

    #[test]
    fn routing_counts_an_openai_model_exactly_only_near_a_limit() {
        let text = "hello world ".repeat(50);
        let rough = estimate_len(text.len() + 1) + TOKENS_PER_MESSAGE;
        let mut asked = None;
        let far = estimate_for_routing(&request(&text), "gpt-4.1", |estimate| {
            asked = Some(estimate);
            false
        });
        assert_eq!(
            asked,
            Some(rough),
            "the limit is asked about the byte ratio"
        );
        assert_eq!(far, (rough, Method::ByteRatio));
        let near = estimate_for_routing(&request(&text), "gpt-4.1", |_| true);
        assert_eq!(near, estimate_request_tokens(&request(&text), "gpt-4.1"));
        assert_eq!(near.1, Method::Tiktoken);
        // "hello world " is 2 tokens in o200k; the byte ratio says ~3.4.
        assert!(near.0 < far.0, "{near:?} vs {far:?}");
    }

    #[test]
    fn a_limit_is_near_within_the_margin_either_side() {
        assert!(within_margin(100_000, 100_000));
        assert!(within_margin(81_000, 100_000));
        assert!(within_margin(119_000, 100_000));
        assert!(!within_margin(79_000, 100_000));
        assert!(!within_margin(121_000, 100_000));
    }

    #[test]
    fn other_models_use_the_byte_ratio() {
        let text = "x".repeat(350);
        let (tokens, method) = estimate_request_tokens(&request(&text), "claude-sonnet-4-5");
        assert_eq!(method, Method::ByteRatio);
        assert_eq!(tokens, 101 + TOKENS_PER_MESSAGE);
    }
}
