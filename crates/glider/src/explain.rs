//! `glider route explain`: route a request body read from standard input, in any of
//! the four dialects, without sending it anywhere, and print the decision with every
//! rule's opinion; each candidate says whether it is local or cloud. The decision is
//! made on `serve`'s own path as a dry run ([`Engine::explain`]), so a compaction that
//! `context.compaction` sends to a local model, or answers from the continuity record,
//! is explained as such. It prints the side the request goes to, its kind (the default
//! policy's unit, docs/routing.md) and the classifier's score exactly as compared.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_ngl::Dialect;
use serde_json::Value;

/// Guess the dialect of a request body: Responses has `input`; Anthropic has
/// `max_tokens` with a top-level `system` or typed content blocks; Ollama has
/// `options`, `keep_alive`, `think` or `format`; anything else is Chat Completions.
pub fn guess_dialect(body: &Value) -> Dialect {
    if body.get("input").is_some() {
        return Dialect::OpenAiResponses;
    }
    let typed_blocks = body["messages"].as_array().is_some_and(|messages| {
        messages.iter().any(|m| {
            m["content"].as_array().is_some_and(|parts| {
                parts.iter().any(|p| {
                    matches!(
                        p["type"].as_str(),
                        Some("tool_use" | "tool_result" | "thinking")
                    ) || (p["type"] == "image" && p.get("source").is_some())
                })
            })
        })
    });
    if body.get("max_tokens").is_some() && (body.get("system").is_some() || typed_blocks) {
        return Dialect::Anthropic;
    }
    if ["options", "keep_alive", "think", "format"]
        .iter()
        .any(|k| body.get(*k).is_some())
    {
        return Dialect::Ollama;
    }
    if body.get("max_tokens").is_some() && body.get("stop_sequences").is_some() {
        return Dialect::Anthropic;
    }
    Dialect::OpenAiChat
}

pub fn parse_dialect(name: &str) -> anyhow::Result<Dialect> {
    Ok(match name {
        "anthropic" => Dialect::Anthropic,
        "openai" | "openai-chat" | "chat" => Dialect::OpenAiChat,
        "responses" | "openai-responses" => Dialect::OpenAiResponses,
        "ollama" => Dialect::Ollama,
        other => anyhow::bail!(
            "unknown dialect {other:?} (anthropic, openai-chat, openai-responses, ollama)"
        ),
    })
}

/// The warm condition needs what is loaded and what loads cost: with a GPU and a local
/// Ollama backend, probe the local backends once (read-only) and plan with the
/// measurements `glider serve` kept under `GLIDER_HOME`.
fn see_warm_state(
    engine: &std::sync::Arc<Engine>,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    let current = engine.runtime();
    let ollama = current
        .backends
        .iter()
        .any(|b| b.is_local() && b.kind() == glider_config::BackendKind::Ollama);
    if !current.config.vram.enabled || !ollama {
        return Ok(());
    }
    let vram = glider_vram::Vram::new(&current.config.vram, Some(&crate::glider_home()));
    if vram.steps_aside(&current.config.vram) {
        return Ok(());
    }
    runtime.block_on(engine.probe_local_backends());
    let _ = engine.attach_vram(vram);
    Ok(())
}

/// Where the decision sends the request first: `local` (a local model, or Glider
/// answering from its record: nothing leaves the machine) or `cloud`.
fn side(decision: &glider_engine::RouteDecision) -> &'static str {
    let local = decision.answered_by.is_some()
        || decision
            .candidates
            .first()
            .is_some_and(|c| c.backend.is_local());
    if local { "local" } else { "cloud" }
}

/// Run the command; returns the text to print.
pub fn explain(
    config: Option<PathBuf>,
    dialect: Option<String>,
    headers: Vec<String>,
    json: bool,
) -> anyhow::Result<String> {
    let loaded = match &config {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default()?,
    };
    let mut body = Vec::new();
    std::io::stdin()
        .read_to_end(&mut body)
        .context("reading the request body from standard input")?;
    explain_body(loaded, config, &body, dialect, headers, json)
}

/// [`explain`] on a body already read.
fn explain_body(
    loaded: Config,
    config: Option<PathBuf>,
    body: &[u8],
    dialect: Option<String>,
    headers: Vec<String>,
    json: bool,
) -> anyhow::Result<String> {
    let value: Value = serde_json::from_slice(body).context("the request body is not JSON")?;
    let front = match dialect {
        Some(name) => parse_dialect(&name)?,
        None => guess_dialect(&value),
    };
    let mut header_map = http::HeaderMap::new();
    for header in headers {
        let (name, value) = header
            .split_once(':')
            .with_context(|| format!("header {header:?} is not NAME:VALUE"))?;
        header_map.insert(
            http::HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())?,
            http::HeaderValue::from_str(value.trim())?,
        );
    }
    let engine = Engine::new(ConfigHandle::new(loaded, config));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    see_warm_state(&engine, &runtime)?;
    // serve's deciding path as a dry run: the decision serve would carry out.
    let decision = runtime
        .block_on(engine.explain(front, body, &header_map))
        .map_err(|e| anyhow::anyhow!("{} ({:?}, HTTP {})", e.message, e.kind, e.kind.status()))?;
    let candidates: Vec<String> = decision
        .candidates
        .iter()
        .map(|c| {
            let place = if c.backend.is_local() {
                "local"
            } else {
                "cloud"
            };
            format!("{} ({}, {place})", c.backend.name(), c.model)
        })
        .collect();
    if json {
        let mut out = serde_json::to_value(&decision)?;
        out["dialect"] = front.as_str().into();
        out["side"] = side(&decision).into();
        out["candidates"] = candidates.into();
        return Ok(serde_json::to_string_pretty(&out)?);
    }
    let mut out = String::new();
    out.push_str(&format!("dialect:    {}\n", front.as_str()));
    let goes_to = match decision.answered_by {
        Some(source) => format!("glider ({source}, no model is asked)"),
        None => candidates.join(", then "),
    };
    out.push_str(&format!("decision:   {} -> {goes_to}\n", decision.rule));
    out.push_str(&format!("side:       {}\n", side(&decision)));
    out.push_str(&format!("kind:       {}\n", decision.kind));
    if let Some(score) = decision.score {
        // Exactly as compared with the thresholds (the classifier's opinion says how).
        out.push_str(&format!("score:      {score:?}\n"));
    }
    out.push_str(&format!("reason:     {}\n", decision.reason));
    out.push_str(&format!("tokens:     ~{}\n", decision.estimated_tokens));
    if let Some(session) = &decision.session {
        out.push_str(&format!("session:    {session}\n"));
    }
    out.push_str("opinions:\n");
    for opinion in &decision.opinions {
        out.push_str(&format!(
            "  {:<11} {:<8} {}\n",
            opinion.rule,
            opinion.target.as_deref().unwrap_or("-"),
            opinion.detail
        ));
    }
    let runtime = engine.runtime();
    if runtime.starlark.is_none() {
        let why = runtime
            .starlark_error
            .clone()
            .unwrap_or_else(|| "not configured".into());
        out.push_str(&format!("  {:<11} {:<8} {why}\n", "starlark", "-"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A local `box` serving `qwen` and a cloud `claude` serving `claude-*`.
    fn box_and_claude() -> Config {
        Config::parse(
            "backends:\n\
             \x20 - {name: box, type: ollama, base_url: 'http://127.0.0.1:1', models: [qwen]}\n\
             \x20 - {name: claude, type: anthropic, base_url: 'http://127.0.0.1:1', api_key: k, models: ['claude-*']}\n",
            "t",
        )
        .expect("valid")
    }

    /// `glider route explain` of `body` under `config`, as printed.
    fn explained(config: Config, body: &serde_json::Value) -> String {
        explain_body(
            config,
            None,
            body.to_string().as_bytes(),
            None,
            vec![],
            false,
        )
        .expect("explains")
    }

    #[test]
    fn the_decision_line_says_local_or_cloud() {
        let config = box_and_claude();
        let decision_for = |model: &str| {
            let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
            let out = explained(config.clone(), &body);
            out.lines()
                .find(|l| l.starts_with("decision:"))
                .expect("a decision line")
                .to_owned()
        };
        let local = decision_for("qwen");
        assert!(local.contains("-> box (qwen, local)"), "{local}");
        let cloud = decision_for("claude-x");
        assert!(cloud.contains("-> claude (claude-x, cloud)"), "{cloud}");
    }

    #[test]
    fn it_prints_the_side_the_kind_and_the_exact_score() {
        let config = box_and_claude();
        // small_model +2, and 500 bytes of conversation cost -0.0143: 1.9857, which
        // rounded would read as the 2.0 threshold.
        let body = json!({"model": "claude-3-5-haiku", "messages": [
            {"role": "user", "content": "x".repeat(500)}]});
        let out = explained(config, &body);
        let line = |name: &str| {
            out.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no {name} line in {out}"))
                .to_owned()
        };
        assert_eq!(line("score:"), "score:      1.9857", "{out}");
        assert_eq!(line("side:"), "side:       cloud", "{out}");
        assert_eq!(line("kind:"), "kind:       main_turn", "{out}");
        let classifier = line("  classifier");
        assert!(
            classifier.contains(
                "score 1.9857 between cloud_threshold -2.0 and local_threshold 2.0: no opinion \
                 (small_model +2.0, conversation_10k_tokens -0.0143)"
            ),
            "{classifier}"
        );
    }

    #[test]
    fn dialects_are_recognised_by_shape() {
        assert_eq!(
            guess_dialect(&json!({"model": "m", "input": "hi"})),
            Dialect::OpenAiResponses
        );
        assert_eq!(
            guess_dialect(&json!({"model": "m", "max_tokens": 5, "system": "s", "messages": []})),
            Dialect::Anthropic
        );
        assert_eq!(
            guess_dialect(
                &json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]})
            ),
            Dialect::Anthropic
        );
        assert_eq!(
            guess_dialect(&json!({"model": "m", "messages": [], "options": {}})),
            Dialect::Ollama
        );
        assert_eq!(
            guess_dialect(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})),
            Dialect::OpenAiChat
        );
    }
}
