//! Token estimates (spec: `Tokenizer.EstimateRequestTokens`). OpenAI models are counted
//! with tiktoken (their real vocabularies, embedded). Every other model is estimated as
//! one token per 3.5 bytes of text plus 4 tokens per message: no public tokenizer exists
//! for Claude, and local models differ; real counts from upstream `usage` replace the
//! estimate where they arrive.

use glider_ngl::{Part, Request};

/// Bytes per token assumed for models without a known tokenizer.
pub const BYTES_PER_TOKEN: f64 = 3.5;
/// Framing tokens counted per message (role markers and separators).
pub const TOKENS_PER_MESSAGE: u64 = 4;

/// How an estimate was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Tiktoken,
    ByteRatio,
}

/// Estimate the input tokens of `request` for `model`.
pub fn estimate_request_tokens(request: &Request, model: &str) -> (u64, Method) {
    let text = request_text(request);
    let framing = TOKENS_PER_MESSAGE * request.turns.len() as u64;
    match tiktoken_rs::tokenizer::get_tokenizer(model)
        .and_then(|t| tiktoken_rs::bpe_for_tokenizer(t).ok())
    {
        Some(bpe) => (
            bpe.encode_ordinary(&text).len() as u64 + framing,
            Method::Tiktoken,
        ),
        None => (estimate_text(&text) + framing, Method::ByteRatio),
    }
}

/// The byte-ratio estimate for a piece of text.
pub fn estimate_text(text: &str) -> u64 {
    (text.len() as f64 / BYTES_PER_TOKEN).ceil() as u64
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
            // Vendors bill images by size; a flat allowance keeps the estimate sane.
            Part::Image { .. } => text.push_str(&" ".repeat(1_500 * 4)),
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
    fn other_models_use_the_byte_ratio() {
        let text = "x".repeat(350);
        let (tokens, method) = estimate_request_tokens(&request(&text), "claude-sonnet-4-5");
        assert_eq!(method, Method::ByteRatio);
        assert_eq!(tokens, 101 + TOKENS_PER_MESSAGE);
    }
}
