//! The classifier rule: a transparent weighted score over features of the request
//! (weights and thresholds in `routing.classifier`, defaults in
//! `glider_config::CLASSIFIER_FEATURES`). Positive leans local, negative leans cloud.
//! It sits behind the [`Classifier`] trait so a learned model can replace it; the
//! runtime rebuilds it from the config on every reload (the spec's hot-swap of
//! `classifier`).

use std::fmt::Write as _;

use glider_config::{CLASSIFIER_FEATURES, ClassifierConfig};
use glider_ngl::{Part, Request, Role, json_len};
use serde::Serialize;

use glider_vocab::compaction_prompt;
use glider_vocab::estimate::BYTES_PER_TOKEN;

/// The numbers a classifier sees. Values are 0/1 flags except `conversation_10k_tokens`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Features {
    pub values: Vec<(&'static str, f64)>,
}

impl Features {
    fn set(&mut self, name: &'static str, value: f64) {
        self.values.push((name, value));
    }

    pub fn get(&self, name: &str) -> f64 {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or(0.0)
    }
}

/// A score with the features that made it.
#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    pub score: f64,
    /// Non-zero contributions, largest magnitude first.
    pub contributions: Vec<(&'static str, f64)>,
}

impl Scored {
    /// "title_request +4.0, has_tools -1.0, conversation_10k_tokens -0.0143": each
    /// contribution exactly as summed (never rounded: a -0.0143 is no -0.0).
    pub fn explain(&self) -> String {
        if self.contributions.is_empty() {
            return "no feature fired".into();
        }
        let mut text = String::with_capacity(24 * self.contributions.len());
        for (at, (name, value)) in self.contributions.iter().enumerate() {
            if at > 0 {
                text.push_str(", ");
            }
            let _ = write!(text, "{name} {}", signed(*value));
        }
        text
    }
}

/// `value` with its sign, in the shortest form that reads back as the same number
/// (`+4.0`, `-2.0286`): what was compared, not a rounding of it.
pub fn signed(value: f64) -> String {
    if value >= 0.0 {
        format!("+{value:?}")
    } else {
        format!("{value:?}")
    }
}

/// Anything that scores a request.
pub trait Classifier: Send + Sync {
    fn score(&self, features: &Features) -> Scored;
    /// Score at or above which it says local.
    fn local_threshold(&self) -> f64;
    /// Score at or below which it says cloud.
    fn cloud_threshold(&self) -> f64;
}

/// The default classifier: a weighted sum.
#[derive(Debug, Clone)]
pub struct ScoringClassifier {
    weights: Vec<(&'static str, f64)>,
    local_threshold: f64,
    cloud_threshold: f64,
}

impl ScoringClassifier {
    pub fn from_config(config: &ClassifierConfig) -> Self {
        let weights = CLASSIFIER_FEATURES
            .iter()
            .map(|(name, default)| {
                (
                    *name,
                    config.weights.get(*name).copied().unwrap_or(*default),
                )
            })
            .collect();
        ScoringClassifier {
            weights,
            local_threshold: config.local_threshold,
            cloud_threshold: config.cloud_threshold,
        }
    }
}

impl Classifier for ScoringClassifier {
    fn score(&self, features: &Features) -> Scored {
        let mut contributions: Vec<(&'static str, f64)> = self
            .weights
            .iter()
            .map(|(name, weight)| (*name, weight * features.get(name)))
            .filter(|(_, value)| *value != 0.0)
            .collect();
        contributions.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        Scored {
            score: contributions.iter().map(|(_, v)| v).sum(),
            contributions,
        }
    }

    fn local_threshold(&self) -> f64 {
        self.local_threshold
    }

    fn cloud_threshold(&self) -> f64 {
        self.cloud_threshold
    }
}

const SMALL_MODEL_MARKERS: &[&str] = &["haiku", "mini", "nano", "flash", "small", "lite"];
const EDIT_TOOL_NAMES: &[&str] = &[
    "edit",
    "multiedit",
    "write",
    "apply_patch",
    "str_replace",
    "write_file",
    "notebookedit",
];

/// Read the features of `request`.
pub fn features(request: &Request) -> Features {
    let mut f = Features::default();
    let flag = |b: bool| if b { 1.0 } else { 0.0 };

    f.set("title_request", flag(is_title_request(request)));

    let last_user = request.last_user_text().unwrap_or_default();
    let lower = last_user.to_lowercase();
    // A CLI's own compaction instruction (Claude Code's and Codex's checkpoint, which
    // never says "summary of the conversation"), or a plain request for one.
    let summary = compaction_prompt(request).is_some()
        || ((lower.contains("summary")
            || lower.contains("summarize")
            || lower.contains("summarise"))
            && (lower.contains("conversation") || lower.contains("so far")));
    f.set("summary_request", flag(summary));

    let model = request.model.to_lowercase();
    f.set(
        "small_model",
        flag(SMALL_MODEL_MARKERS.iter().any(|m| model.contains(m))),
    );
    f.set(
        "small_max_tokens",
        flag(request.max_tokens.is_some_and(|m| m <= 1024)),
    );

    let relays_tool_result = request.last_turn().is_some_and(|t| t.role == Role::Tool);
    f.set("tool_result", flag(relays_tool_result));
    f.set(
        "short_followup",
        flag(
            !relays_tool_result && !last_user.is_empty() && last_user.trim().chars().count() < 200,
        ),
    );

    f.set("has_tools", flag(!request.tools.is_empty()));
    let edits = request
        .tools
        .iter()
        .any(|t| EDIT_TOOL_NAMES.contains(&t.name.to_lowercase().as_str()));
    f.set("edit_tools", flag(edits));

    let thinking = request.thinking.as_ref();
    f.set("thinking", flag(thinking.is_some()));
    let heavy = thinking.is_some_and(|t| {
        t.budget_tokens.is_some_and(|b| b >= 16_000)
            || t.effort
                .as_deref()
                .is_some_and(|e| matches!(e, "high" | "xhigh" | "max"))
    });
    f.set("heavy_reasoning", flag(heavy));

    let conversation = conversation(request);
    f.set("images", flag(conversation.images));
    f.set("conversation_10k_tokens", conversation.tokens() / 10_000.0);
    f.set(
        "long_conversation",
        flag(conversation.turns > LONG_CONVERSATION_TURNS),
    );
    f
}

/// Turns of conversation beyond which `long_conversation` fires.
pub(crate) const LONG_CONVERSATION_TURNS: usize = 40;

/// Claude Code's session title call: no tools, a JSON-schema output with a `title`.
pub(crate) fn is_title_request(request: &Request) -> bool {
    request.tools.is_empty()
        && request
            .output_schema
            .as_ref()
            .is_some_and(|s| s.schema.pointer("/properties/title").is_some())
}

/// What the conversation holds, system turns left out.
pub(crate) struct Conversation {
    /// An image anywhere, a tool result's included.
    pub images: bool,
    /// Bytes of text, thinking, tool calls and results.
    pub bytes: usize,
    /// Turns that are not system turns.
    pub turns: usize,
}

impl Conversation {
    /// Its size in tokens as the classifier counts them (the byte ratio).
    pub fn tokens(&self) -> f64 {
        (self.bytes as f64 / BYTES_PER_TOKEN).ceil()
    }
}

/// Read what [`Conversation`] says of `request`.
pub(crate) fn conversation(request: &Request) -> Conversation {
    let mut images = false;
    let mut conversation_bytes = 0usize;
    let mut turns = 0usize;
    for turn in request.turns.iter().filter(|t| t.role != Role::System) {
        turns += 1;
        for part in &turn.parts {
            match part {
                Part::Image { .. } => images = true,
                Part::Text { text, .. } | Part::Thinking { text, .. } => {
                    conversation_bytes += text.len()
                }
                Part::ToolCall { arguments, .. } => conversation_bytes += json_len(arguments),
                Part::ToolResult { content, .. } => {
                    for inner in content {
                        match inner {
                            Part::Text { text, .. } => conversation_bytes += text.len(),
                            Part::Image { .. } => images = true,
                            _ => {}
                        }
                    }
                }
                Part::Native { raw, .. } => conversation_bytes += json_len(raw),
            }
        }
    }
    Conversation {
        images,
        bytes: conversation_bytes,
        turns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::{OutputSchema, ThinkingConfig, ToolDef, Turn};
    use serde_json::json;

    fn classifier() -> ScoringClassifier {
        ScoringClassifier::from_config(&ClassifierConfig::default())
    }

    fn tool(name: &str) -> ToolDef {
        ToolDef::plain(name)
    }

    #[test]
    fn a_title_request_scores_local() {
        let request = Request {
            model: "claude-sonnet-4-5".into(),
            turns: vec![Turn::text(Role::User, "write a title for: fix the parser")],
            max_tokens: Some(32_000),
            output_schema: Some(OutputSchema {
                name: None,
                schema: json!({"type": "object", "properties": {"title": {"type": "string"}}}),
            }),
            ..Request::default()
        };
        let scored = classifier().score(&features(&request));
        assert!(scored.score >= 2.0, "{scored:?}");
        assert_eq!(scored.contributions[0].0, "title_request");
    }

    #[test]
    fn an_agentic_main_turn_with_thinking_scores_cloud() {
        let request = Request {
            model: "claude-sonnet-4-5".into(),
            turns: vec![Turn::text(Role::User, "refactor the parser")],
            tools: vec![tool("Bash"), tool("Edit"), tool("Read")].into(),
            thinking: Some(ThinkingConfig {
                budget_tokens: Some(31_999),
                effort: None,
            }),
            ..Request::default()
        };
        let scored = classifier().score(&features(&request));
        assert!(scored.score <= -2.0, "{scored:?}");
        assert!(
            scored.explain().contains("thinking -2.0"),
            "{}",
            scored.explain()
        );
    }

    #[test]
    fn weights_come_from_the_config() {
        let mut config = ClassifierConfig::default();
        config.weights.insert("small_model".into(), 10.0);
        let request = Request {
            model: "claude-3-5-haiku".into(),
            turns: vec![Turn::text(Role::User, "x".repeat(500))],
            ..Request::default()
        };
        let scored = ScoringClassifier::from_config(&config).score(&features(&request));
        assert_eq!(scored.contributions[0], ("small_model", 10.0));
        // 500 bytes of conversation cost a little: -1 per 10k tokens.
        assert!(
            (scored.score - (10.0 - 143.0 / 10_000.0)).abs() < 1e-9,
            "{scored:?}"
        );
    }
}
