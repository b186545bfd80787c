//! Fitting a request to a local model (issue 15, item 3): a small model gets a tool set
//! it can handle, an output cap it can finish in a time a user accepts (a quarter of its
//! window at most, and with its speed measured, `fit.max_reply_secs` of generation), a
//! system prompt that leaves room in its window (`fit.max_system_share`), and nothing
//! it would reject or misread.
//! Each change is named in the returned notes, which go on the request's record: nothing
//! is dropped silently. Cloud routes are never fitted (they stay byte-exact).

use std::collections::BTreeSet;

use glider_backend::Candidate;
use glider_config::{BackendFit, BackendKind, Config, FitConfig, ModelSpec};
use glider_ngl::{Dialect, Part, Request, ToolChoice, ToolDef, ToolList};
use glider_vocab::estimate::estimate_text;
use serde::Serialize;
use serde_json::Value;

use crate::speed::Speed;
use crate::tokenizer::estimate_tools;

/// Top-level fields of a client's dialect that no local server takes (Claude Code's
/// `context_management`, OpenAI's cache and storage hints): dropped on a local route.
const LOCAL_UNSUPPORTED_FIELDS: &[&str] = &[
    "context_management",
    "container",
    "mcp_servers",
    "service_tier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "store",
];

/// A slimmed tool keeps at most this much of its description (its first sentence).
const SLIM_DESCRIPTION_CHARS: usize = 160;

/// What one local candidate's request is fitted to.
#[derive(Clone, Copy)]
pub struct FitTarget<'a> {
    pub fit: &'a FitConfig,
    pub backend: &'a BackendFit,
    /// The model's spec on this backend, when it lists it.
    pub model: Option<&'a ModelSpec>,
    /// The dialect the backend is spoken to in.
    pub dialect: Dialect,
    pub kind: BackendKind,
    /// The model's context window (configured, else what its server says, else
    /// `routing.default_local_context`).
    pub window: u64,
    /// How fast the model was measured to be, if it was.
    pub speed: Option<Speed>,
}

impl<'a> FitTarget<'a> {
    /// The target for `candidate`'s backend, spoken to from `front`; `model` is its
    /// effective spec (configured, filled in with what the server says).
    pub fn for_candidate(
        config: &'a Config,
        candidate: &'a Candidate,
        model: Option<&'a ModelSpec>,
        front: Dialect,
    ) -> Self {
        let backend = &candidate.backend;
        FitTarget {
            fit: &config.fit,
            backend: &backend.config.fit,
            model,
            dialect: backend.dialect_for(front),
            kind: backend.kind(),
            window: local_window(config, candidate),
            speed: None,
        }
    }
}

/// The context window of a local candidate's model: configured, else what its server
/// says it runs the model with, else `routing.default_local_context`.
pub fn local_window(config: &Config, candidate: &Candidate) -> u64 {
    candidate
        .backend
        .effective_context_window(&candidate.model)
        .unwrap_or(config.routing.default_local_context)
}

/// What fitting gives one local model before any request is seen — its window, its
/// measured speed, and (with `fit.enabled`) the output cap a request asking for more
/// gets and the system text's budget, each computed as the fit phase computes them
/// ([`output_cap`], [`system_budget`]). The dashboard lists these (`GET /api/fit`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalFit {
    pub backend: String,
    pub model: String,
    /// The context window fitted to (configured, else the server's, else
    /// `routing.default_local_context`).
    pub window: u64,
    /// The model's measured speed; `None` until a reply of it was measured.
    pub speed: Option<Speed>,
    /// `None` with `fit.enabled: false` (nothing is capped then).
    pub output_cap: Option<OutputCap>,
    /// `None` with `fit.enabled: false` (nothing is cut then).
    pub system_budget_tokens: Option<u64>,
}

impl LocalFit {
    /// The fit of `candidate` (a local backend's model) under `config`, at `speed`.
    pub fn of(config: &Config, candidate: &Candidate, speed: Option<Speed>) -> LocalFit {
        let spec = candidate.backend.effective_spec(&candidate.model);
        // The client's dialect changes how a request is worded, not these limits.
        let target = FitTarget {
            speed,
            ..FitTarget::for_candidate(config, candidate, spec.as_ref(), Dialect::Anthropic)
        };
        let enabled = config.fit.enabled;
        LocalFit {
            backend: candidate.backend.name().to_owned(),
            model: candidate.model.clone(),
            window: target.window,
            speed,
            output_cap: output_cap(&target).filter(|_| enabled),
            system_budget_tokens: enabled.then(|| system_budget(&target)),
        }
    }
}

/// What fitting did to one candidate's request.
#[derive(Debug, Default, PartialEq)]
pub struct Fitted {
    /// One note per change (empty: the request was already fit and is left as it came).
    pub notes: Vec<String>,
    /// The output cap Glider set in place of the client's higher (or missing) one: a
    /// reply that stops there stopped at Glider's limit, not the client's.
    pub output_cap: Option<OutputCap>,
    /// The JSON schema went out as the forced tool [`SCHEMA_TOOL`]: its call is the reply.
    pub schema_tool: bool,
}

/// An output cap Glider set on a local request, and the setting it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OutputCap {
    pub tokens: u32,
    /// The config key that set it, named in the note the reply gets.
    pub setting: &'static str,
}

/// The words of the note that says a model was sent a text note for images it cannot
/// see: the client is told of it too (`x-glider-warning`), not only the record.
pub const IMAGES_REPLACED: &str = "images replaced by a text note";

/// Fit `request` to `target` in place; returns what was changed.
pub fn fit_request(request: &mut Request, target: &FitTarget) -> Fitted {
    let mut notes = Vec::new();
    fit_tools(request, target, &mut notes);
    trim_system(request, target, &mut notes);
    let schema_tool = schema_as_tool(request, target, &mut notes);
    let output_cap = cap_output(request, target, &mut notes);
    notes.extend(drop_thinking(request, target));
    drop_unsupported_fields(request, target.dialect, &mut notes);
    let (markers, images) = clean_parts(request, target.model.and_then(|m| m.vision));
    if markers > 0 {
        notes.push(format!("{markers} cache_control markers dropped"));
    }
    if images > 0 {
        notes.push(format!(
            "{images} {IMAGES_REPLACED} (the model is not marked `vision: true`)"
        ));
    }
    Fitted {
        notes,
        output_cap,
        schema_tool,
    }
}

/// The tool a JSON schema is sent as where the wire to a local server has no schema
/// field: its input schema is the client's schema, and its call is turned back into
/// the text reply ([`crate::local_reply`]).
pub const SCHEMA_TOOL: &str = "glider_json_answer";

/// A JSON schema for a local server spoken to over the Anthropic wire (llama-server's
/// or Ollama's `/v1/messages`), which builds its request from a fixed set of fields and
/// takes no schema in any form: sent instead as a forced tool whose input schema is the
/// client's, so the server's tool-call grammar holds the model to it. With tools of
/// the client's own, the model must call one of them or this one. Returns whether it
/// was done.
fn schema_as_tool(request: &mut Request, target: &FitTarget, notes: &mut Vec<String>) -> bool {
    if target.dialect != Dialect::Anthropic {
        return false;
    }
    let Some(schema) = request.output_schema.take() else {
        return false;
    };
    if target.model.and_then(|m| m.tools) == Some(false) {
        notes.push(
            "output schema not enforced (the Anthropic wire carries none to a local server, and the model has no tool support)"
                .into(),
        );
        request.output_schema = Some(schema);
        return false;
    }
    request.tool_choice = match request.tool_choice.take() {
        Some(forced @ (ToolChoice::Tool { .. } | ToolChoice::Required)) => Some(forced),
        Some(ToolChoice::Auto) if !request.tools.is_empty() => Some(ToolChoice::Required),
        None if !request.tools.is_empty() => Some(ToolChoice::Required),
        // No tools of the client's, or none it lets the model call: only this one.
        _ => Some(ToolChoice::Tool {
            name: SCHEMA_TOOL.into(),
        }),
    };
    request.tools.push(ToolDef {
        name: SCHEMA_TOOL.into(),
        description: Some("Give your answer as this tool's input.".into()),
        parameters: schema.schema,
        native: None,
    });
    notes.push(format!(
        "output schema sent as the forced tool {SCHEMA_TOOL} (the Anthropic wire carries none to a local server); its call is returned as the JSON text"
    ));
    true
}

/// Whether `request` asks for thinking the target model cannot do. Ollama refuses
/// `think` for a model that cannot think, so there it must be stated; an
/// OpenAI-compatible server ignores an effort it cannot use unless told otherwise.
pub fn thinking_unsupported(request: &Request, target: &FitTarget) -> bool {
    let thinks = target.model.and_then(|m| m.thinking);
    let cannot_think = match target.kind {
        BackendKind::Ollama => thinks != Some(true),
        _ => thinks == Some(false),
    };
    request.thinking.is_some() && cannot_think
}

/// Drops thinking the target model cannot do; the note says so. A correctness rule,
/// not a budget: it holds with `fit.enabled: false` too (Ollama would refuse the request).
pub fn drop_thinking(request: &mut Request, target: &FitTarget) -> Option<String> {
    if !thinking_unsupported(request, target) {
        return None;
    }
    request.thinking = None;
    Some("thinking dropped (the model is not marked `thinking: true`)".into())
}

/// No tools for a model without tool support; above the budget, the tools this
/// conversation needs, slimmed.
fn fit_tools(request: &mut Request, target: &FitTarget, notes: &mut Vec<String>) {
    if request.tools.is_empty() {
        return;
    }
    if target.model.and_then(|m| m.tools) == Some(false) {
        notes.push(format!(
            "tools {} -> 0 (the model has no tool support)",
            request.tools.len()
        ));
        request.tools = ToolList::default();
        request.tool_choice = None;
        request.parallel_tool_calls = None;
        return;
    }
    let budget = target.backend;
    let schema_tokens = estimate_tools(&request.tools);
    if request.tools.len() <= budget.max_tools && schema_tokens <= budget.max_tool_schema_tokens {
        return;
    }
    let keep = tools_to_keep(request, target.fit);
    let before = request.tools.len();
    // A new list of the kept tools: the client's may be shared (a clone of the request,
    // the decoder's kept list), and changing it in place would copy all of it first.
    request.tools = request
        .tools
        .iter()
        .filter(|tool| tool.native.is_none() && keep.contains(tool.name.as_str()))
        .cloned()
        .collect();
    request.tools.iter_mut().for_each(slim_tool);
    if let Some(ToolChoice::Tool { name }) = &request.tool_choice
        && !request.tools.iter().any(|t| &t.name == name)
    {
        // Only a native tool can be forced and missing here; nothing to force any more.
        request.tool_choice = None;
    }
    if request.tools.is_empty() {
        request.tool_choice = None;
        request.parallel_tool_calls = None;
    }
    notes.push(format!(
        "tools {before} -> {} (over the budget of {} tools / {} schema tokens; schemas ~{schema_tokens} -> ~{} tokens)",
        request.tools.len(),
        budget.max_tools,
        budget.max_tool_schema_tokens,
        estimate_tools(&request.tools),
    ));
}

/// Names of the tools a reduced set keeps: those already called in the conversation,
/// those the last user message names, the forced one, and the configured core set.
fn tools_to_keep(request: &Request, fit: &FitConfig) -> BTreeSet<String> {
    let mut keep: BTreeSet<String> = request
        .turns
        .iter()
        .flat_map(|turn| &turn.parts)
        .filter_map(|part| match part {
            Part::ToolCall { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    let last_user = request.last_user_text().unwrap_or_default();
    let words: BTreeSet<&str> = last_user
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .filter(|w| !w.is_empty())
        .collect();
    for tool in &request.tools {
        if fit.is_core_tool(&tool.name) || words.contains(tool.name.as_str()) {
            keep.insert(tool.name.clone());
        }
    }
    if let Some(ToolChoice::Tool { name }) = &request.tool_choice {
        keep.insert(name.clone());
    }
    keep
}

/// The tool with its description cut to the first sentence and every description
/// inside its schema removed; names, types and structure stay as they were.
fn slim_tool(tool: &mut ToolDef) {
    if let Some(description) = &mut tool.description {
        *description = first_sentence(description);
    }
    strip_schema_descriptions(&mut tool.parameters);
}

fn first_sentence(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let end = line
        .find(". ")
        .map(|i| i + 1)
        .unwrap_or(line.len())
        .min(line.len());
    let sentence = line[..end].trim();
    if sentence.chars().count() <= SLIM_DESCRIPTION_CHARS {
        return sentence.to_owned();
    }
    sentence.chars().take(SLIM_DESCRIPTION_CHARS).collect()
}

/// Remove the keys that only describe a schema (`description`, `examples`, `$schema`,
/// `title`) at every level. A property *named* `description` is structure and stays:
/// a `properties` map's keys are names, so only its values are walked.
fn strip_schema_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for key in ["description", "examples", "$schema", "title"] {
                map.remove(key);
            }
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value) {
                    // Values, not schemas.
                    ("enum" | "const" | "default", _) => {}
                    ("properties" | "$defs" | "definitions", Value::Object(named)) => {
                        named.values_mut().for_each(strip_schema_descriptions);
                    }
                    (_, value) => strip_schema_descriptions(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_schema_descriptions),
        _ => {}
    }
}

/// The least output cap a window or a measured speed brings a reply down to: below it a
/// coding answer is cut before it says anything.
pub const MIN_FITTED_OUTPUT: u32 = 256;

/// The output cap Glider sets on a request to `target` that asks for more (or for no
/// limit): the lowest of the model's own limit, the backend's default cap, a quarter of
/// the model's window, and — its speed measured — what it generates in
/// `fit.max_reply_secs` (the last two never below [`MIN_FITTED_OUTPUT`]), with the
/// setting it came from. The fit phase applies it ([`fit_request`]); the dashboard
/// shows it per local model ([`LocalFit`]).
pub fn output_cap(target: &FitTarget) -> Option<OutputCap> {
    let quarter = u32::try_from(target.window / 4)
        .unwrap_or(u32::MAX)
        .max(MIN_FITTED_OUTPUT);
    let in_time = target
        .speed
        .and_then(|s| s.generated_per_sec)
        .map(|rate| ((rate * target.fit.max_reply_secs) as u32).max(MIN_FITTED_OUTPUT));
    let limits = [
        target
            .model
            .and_then(|m| m.max_output_tokens)
            .map(|tokens| (tokens, "the model's max_output_tokens")),
        Some((target.backend.max_output_tokens, "fit.max_output_tokens")),
        Some((quarter, "a quarter of the model's context window")),
        in_time.map(|tokens| (tokens, "fit.max_reply_secs at the model's measured speed")),
    ];
    let (tokens, setting) = limits
        .into_iter()
        .flatten()
        .min_by_key(|(tokens, _)| *tokens)?;
    Some(OutputCap { tokens, setting })
}

/// `max_tokens` at most [`output_cap`]; a lower value the client asked for is kept.
/// Returns the cap when Glider set it.
fn cap_output(
    request: &mut Request,
    target: &FitTarget,
    notes: &mut Vec<String>,
) -> Option<OutputCap> {
    let cap = output_cap(target)?;
    match request.max_tokens {
        Some(asked) if asked <= cap.tokens => None,
        asked => {
            let was = asked.map_or("unset".to_owned(), |n| n.to_string());
            let mut note = format!("max_tokens {was} -> {}", cap.tokens);
            if cap.setting != "fit.max_output_tokens" {
                note.push_str(&format!(" ({})", cap.setting));
                if let Some(rate) = target.speed.and_then(|s| s.generated_per_sec) {
                    note.push_str(&format!(", {rate:.0} tokens/s"));
                }
            }
            notes.push(note);
            request.max_tokens = Some(cap.tokens);
            Some(cap)
        }
    }
}

/// The estimated tokens of system text `target`'s model is given at most:
/// `fit.max_system_share` of its window.
pub fn system_budget(target: &FitTarget) -> u64 {
    (target.window as f64 * target.fit.max_system_share) as u64
}

/// System text past `fit.max_system_share` of the model's window is cut (its head is
/// kept: a CLI states who the model is and the rules first), with a note at the cut, so
/// the conversation and the reply keep room in a small window.
fn trim_system(request: &mut Request, target: &FitTarget, notes: &mut Vec<String>) {
    let budget = system_budget(target);
    let system_tokens: u64 = request
        .turns
        .iter()
        .filter(|t| t.role == glider_ngl::Role::System)
        .flat_map(|t| glider_ngl::texts(&t.parts))
        .map(estimate_text)
        .sum();
    if system_tokens <= budget {
        return;
    }
    let mut left = budget;
    for turn in request
        .turns
        .iter_mut()
        .filter(|t| t.role == glider_ngl::Role::System)
    {
        for part in &mut turn.parts {
            let Part::Text { text, .. } = part else {
                continue;
            };
            let tokens = estimate_text(text);
            if tokens <= left {
                left -= tokens;
                continue;
            }
            // Cut at the same share of its characters as of its tokens.
            let keep_chars = (text.chars().count() as u64 * left / tokens.max(1)) as usize;
            let cut = text
                .char_indices()
                .nth(keep_chars)
                .map_or(text.len(), |(at, _)| at);
            text.truncate(cut);
            if !text.is_empty() {
                text.push_str("\n[system text cut here to fit this model's window]");
            }
            left = 0;
        }
        turn.parts
            .retain(|p| !matches!(p, Part::Text { text, .. } if text.is_empty()));
    }
    request
        .turns
        .retain(|t| t.role != glider_ngl::Role::System || !t.parts.is_empty());
    notes.push(format!(
        "system text ~{system_tokens} -> ~{budget} tokens (fit.max_system_share {} of a {}-token window)",
        target.fit.max_system_share, target.window
    ));
}

/// Drop the client's unmodelled fields a local server would reject or misread. Fields
/// of another dialect than the backend's are never sent (the encoder leaves them out);
/// they are named too, so the record shows everything the model did not get.
fn drop_unsupported_fields(request: &mut Request, dialect: Dialect, notes: &mut Vec<String>) {
    let Some(extra) = &mut request.extra else {
        return;
    };
    let dropped: Vec<String> = if extra.dialect == dialect {
        let names: Vec<String> = extra
            .fields
            .keys()
            .filter(|k| LOCAL_UNSUPPORTED_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        names.iter().for_each(|k| {
            extra.fields.remove(k);
        });
        names
    } else {
        let names = extra.fields.keys().cloned().collect();
        extra.fields.clear();
        names
    };
    if extra.fields.is_empty() {
        request.extra = None;
    }
    if !dropped.is_empty() {
        notes.push(format!("dropped {}", dropped.join(", ")));
    }
}

/// Remove cache_control markers everywhere, and replace images with a note when the
/// model cannot see them; returns (markers removed, images replaced).
fn clean_parts(request: &mut Request, vision: Option<bool>) -> (usize, usize) {
    let mut counts = (0, 0);
    for turn in &mut request.turns {
        clean(&mut turn.parts, vision == Some(true), &mut counts);
    }
    counts
}

fn clean(parts: &mut [Part], keep_images: bool, counts: &mut (usize, usize)) {
    for part in parts {
        match part {
            Part::Text { cache_control, .. } => {
                counts.0 += usize::from(cache_control.take().is_some())
            }
            Part::Image { cache_control, .. } => {
                counts.0 += usize::from(cache_control.take().is_some());
                if !keep_images {
                    counts.1 += 1;
                    *part = Part::text("[an image was here: this model cannot read images]");
                }
            }
            Part::ToolResult { content, .. } => clean(content, keep_images, counts),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use glider_dialects::codec;
    use serde_json::json;

    use super::*;

    fn decode(body: Value) -> Request {
        codec(Dialect::Anthropic)
            .decode_request(body.to_string().as_bytes())
            .expect("decodes")
    }

    fn tool(name: &str) -> Value {
        json!({
            "name": name,
            "description": format!("{name} does things. It has many options.\nUsage notes follow."),
            "input_schema": {
                "type": "object",
                "$schema": "http://json-schema.org/draft-07/schema#",
                "properties": {
                    "path": {"type": "string", "description": "A long explanation of the path argument"},
                    "description": {"type": "string", "description": "What the call is for"},
                },
                "required": ["path"],
            },
        })
    }

    fn target<'a>(
        fit: &'a FitConfig,
        backend: &'a BackendFit,
        model: Option<&'a ModelSpec>,
    ) -> FitTarget<'a> {
        FitTarget {
            fit,
            backend,
            model,
            dialect: Dialect::Ollama,
            kind: BackendKind::Ollama,
            window: 32_768,
            speed: None,
        }
    }

    fn claude_code_like() -> Request {
        let names = [
            "Agent",
            "Bash",
            "Edit",
            "Glob",
            "Grep",
            "Read",
            "Write",
            "WebFetch",
            "WebSearch",
            "TodoWrite",
            "NotebookEdit",
            "Skill",
            "AskUserQuestion",
            "KillShell",
        ];
        decode(json!({
            "model": "m", "max_tokens": 32000,
            "tools": names.iter().map(|n| tool(n)).collect::<Vec<_>>(),
            "context_management": {"edits": []},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "look around"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "TodoWrite", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "text", "text": "now use WebFetch on the docs", "cache_control": {"type": "ephemeral"}},
                ]},
            ],
        }))
    }

    #[test]
    fn over_the_budget_the_tools_in_use_named_and_core_are_kept_slimmed() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let mut request = claude_code_like();
        let notes = fit_request(&mut request, &target(&fit, &backend, None)).notes;
        let kept: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            kept,
            [
                "Bash",
                "Edit",
                "Glob",
                "Grep",
                "Read",
                "Write",
                "WebFetch",
                "TodoWrite"
            ],
            "core + named (WebFetch) + used (TodoWrite), in the client's order"
        );
        let read = &request.tools[4];
        assert_eq!(read.description.as_deref(), Some("Read does things."));
        assert_eq!(
            read.parameters,
            json!({"type": "object", "properties": {"path": {"type": "string"}, "description": {"type": "string"}}, "required": ["path"]}),
            "descriptions cut, structure (and a property named description) kept"
        );
        assert!(
            notes[0].starts_with("tools 14 -> 8 (over the budget of 12 tools"),
            "{notes:?}"
        );
        assert!(
            notes.contains(&"max_tokens 32000 -> 4096".to_owned()),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.starts_with("thinking dropped")),
            "{notes:?}"
        );
        assert!(
            notes.contains(&"dropped context_management".to_owned()),
            "{notes:?}"
        );
        assert!(
            notes.contains(&"1 cache_control markers dropped".to_owned()),
            "{notes:?}"
        );
        assert_eq!(
            (request.max_tokens, &request.thinking, &request.extra),
            (Some(4096), &None, &None)
        );
    }

    #[test]
    fn an_anthropic_wire_local_backend_is_fitted_and_its_wire_stays_anthropic() {
        // `type: anthropic, local: true` (llama-server or Ollama serving /v1/messages).
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let target = FitTarget {
            dialect: Dialect::Anthropic,
            kind: BackendKind::Anthropic,
            ..target(&fit, &backend, None)
        };
        let mut request = claude_code_like();
        let notes = fit_request(&mut request, &target).notes;
        assert!(notes[0].starts_with("tools 14 -> 8"), "{notes:?}");
        let wire = codec(Dialect::Anthropic).encode_request(&request);
        assert_eq!(wire["tools"].as_array().map(Vec::len), Some(8));
        assert_eq!(wire["max_tokens"], 4096);
        assert!(wire.get("context_management").is_none(), "{wire}");
        assert!(!wire.to_string().contains("cache_control"), "{wire}");
        // A model not marked `thinking: false` keeps it: the Anthropic wire carries it
        // and llama-server maps it to its own budget.
        assert!(wire.get("thinking").is_some(), "{wire}");
    }

    #[test]
    fn a_request_within_every_limit_is_left_as_it_came() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let mut request = decode(json!({
            "model": "m", "max_tokens": 100, "tools": [tool("Read"), tool("Lookup")],
            "messages": [{"role": "user", "content": "hi"}],
        }));
        let before = request.clone();
        assert_eq!(
            fit_request(&mut request, &target(&fit, &backend, None)),
            Fitted::default()
        );
        assert_eq!(
            request, before,
            "under budget: full tools with descriptions"
        );
    }

    #[test]
    fn fitting_a_copy_leaves_the_clients_shared_tools_as_they_were() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let client = claude_code_like();
        let mut copy = client.clone();
        fit_request(&mut copy, &target(&fit, &backend, None));
        assert_eq!(copy.tools.len(), 8);
        assert_eq!(client.tools.len(), 14);
        assert_eq!(client.tools, claude_code_like().tools, "not slimmed either");
    }

    #[test]
    fn a_model_without_tools_gets_none_and_its_own_output_limit() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let spec = ModelSpec {
            name: "m".into(),
            context_window: None,
            thinking: None,
            tools: Some(false),
            vision: None,
            max_output_tokens: Some(512),
        };
        let mut request = decode(json!({
            "model": "m", "max_tokens": 1000, "tools": [tool("Read")], "tool_choice": {"type": "any"},
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            ]}],
        }));
        let fitted = fit_request(&mut request, &target(&fit, &backend, Some(&spec)));
        assert_eq!(
            fitted.output_cap,
            Some(OutputCap {
                tokens: 512,
                setting: "the model's max_output_tokens"
            })
        );
        let notes = fitted.notes;
        assert_eq!(
            notes,
            [
                "tools 1 -> 0 (the model has no tool support)",
                "max_tokens 1000 -> 512 (the model's max_output_tokens)",
                "1 images replaced by a text note (the model is not marked `vision: true`)",
            ]
        );
        assert!(request.tools.is_empty() && request.tool_choice.is_none());
        assert!(
            matches!(&request.turns[0].parts[1], Part::Text { text, .. } if text.contains("cannot read images"))
        );
    }

    #[test]
    fn the_cap_and_the_system_text_fit_a_small_window_and_a_measured_speed() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let body = |system: &str| {
            json!({"model": "m", "max_tokens": 64000, "system": system,
                   "messages": [{"role": "user", "content": "hi"}]})
        };
        // An 8k window: a quarter of it for the reply, a quarter for the system text.
        let small = FitTarget {
            window: 8192,
            ..target(&fit, &backend, None)
        };
        let long_system = "Rules for the work. ".repeat(2000);
        let mut request = decode(body(&long_system));
        let fitted = fit_request(&mut request, &small);
        assert_eq!(request.max_tokens, Some(2048));
        assert_eq!(
            fitted.output_cap.map(|c| c.setting),
            Some("a quarter of the model's context window")
        );
        let system: String = request
            .turns
            .iter()
            .filter(|t| t.role == glider_ngl::Role::System)
            .flat_map(|t| glider_ngl::texts(&t.parts))
            .collect();
        assert!(
            system.starts_with("Rules for the work."),
            "the head is kept"
        );
        assert!(system.ends_with("[system text cut here to fit this model's window]"));
        assert!(
            estimate_text(&system) <= 2048 + 16,
            "{}",
            estimate_text(&system)
        );
        assert!(
            fitted.notes.iter().any(|n| n.starts_with("system text ~")
                && n.ends_with("(fit.max_system_share 0.25 of a 8192-token window)")),
            "{:?}",
            fitted.notes
        );
        // A short system text is left alone.
        let mut short = decode(body("Be brief."));
        assert!(
            !fit_request(&mut short, &small)
                .notes
                .iter()
                .any(|n| n.starts_with("system text"))
        );
        // Measured at 20 tokens/s: 60 s of generation is 1200 tokens.
        let slow = FitTarget {
            speed: Some(Speed {
                generated_per_sec: Some(20.0),
                ..Speed::default()
            }),
            ..small
        };
        let mut request = decode(body("Be brief."));
        let fitted = fit_request(&mut request, &slow);
        assert_eq!(request.max_tokens, Some(1200));
        assert!(
            fitted.notes.contains(
                &"max_tokens 64000 -> 1200 (fit.max_reply_secs at the model's measured speed), 20 tokens/s"
                    .to_owned()
            ),
            "{:?}",
            fitted.notes
        );
        // Never below the floor, however slow.
        let crawling = FitTarget {
            speed: Some(Speed {
                generated_per_sec: Some(0.5),
                ..Speed::default()
            }),
            ..small
        };
        let mut request = decode(body("Be brief."));
        fit_request(&mut request, &crawling);
        assert_eq!(request.max_tokens, Some(MIN_FITTED_OUTPUT));
    }

    #[test]
    fn the_cap_and_budget_shown_for_a_model_are_those_its_requests_get() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let measured = |rate| Speed {
            generated_per_sec: Some(rate),
            ..Speed::default()
        };
        for (window, speed) in [
            (32_768, None),
            (8192, None),
            (8192, Some(measured(20.0))),
            (200_000, Some(measured(400.0))),
        ] {
            let target = FitTarget {
                window,
                speed,
                ..target(&fit, &backend, None)
            };
            let mut request = decode(json!({"model": "m", "max_tokens": 64000,
                "system": "Rules. ".repeat(80_000),
                "messages": [{"role": "user", "content": "hi"}]}));
            let fitted = fit_request(&mut request, &target);
            assert_eq!(fitted.output_cap, output_cap(&target), "{window} {speed:?}");
            let budget = system_budget(&target);
            assert!(
                fitted
                    .notes
                    .iter()
                    .any(|n| n.contains(&format!(" -> ~{budget} tokens"))),
                "{:?}",
                fitted.notes
            );
        }
    }

    #[test]
    fn a_lower_client_cap_is_kept_and_a_missing_one_is_set() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let mut low = decode(
            json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(
            fit_request(&mut low, &target(&fit, &backend, None)),
            Fitted::default(),
            "the client's own lower cap is not Glider's"
        );
        let mut unset = codec(Dialect::OpenAiChat)
            .decode_request(
                json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string()
                    .as_bytes(),
            )
            .expect("decodes");
        assert_eq!(
            fit_request(&mut unset, &target(&fit, &backend, None)),
            Fitted {
                notes: vec!["max_tokens unset -> 4096".into()],
                output_cap: Some(OutputCap {
                    tokens: 4096,
                    setting: "fit.max_output_tokens"
                }),
                schema_tool: false,
            }
        );
        assert_eq!(unset.max_tokens, Some(4096));
    }

    #[test]
    fn a_forced_tool_survives_the_reduction() {
        let fit = FitConfig {
            core_tools: Default::default(),
            ..FitConfig::default()
        };
        let backend = BackendFit {
            max_tools: 1,
            ..BackendFit::default()
        };
        let mut request = decode(json!({
            "model": "m", "max_tokens": 10, "tools": [tool("A"), tool("B"), tool("C")],
            "tool_choice": {"type": "tool", "name": "B"},
            "messages": [{"role": "user", "content": "go"}],
        }));
        fit_request(&mut request, &target(&fit, &backend, None));
        assert_eq!(request.tools.len(), 1);
        assert_eq!(request.tools[0].name, "B");
        assert_eq!(
            request.tool_choice,
            Some(ToolChoice::Tool { name: "B".into() })
        );
    }

    #[test]
    fn a_schema_for_an_anthropic_wire_local_server_is_sent_as_a_forced_tool() {
        let fit = FitConfig::default();
        let backend = BackendFit::default();
        let anthropic_wire = FitTarget {
            dialect: Dialect::Anthropic,
            kind: BackendKind::Anthropic,
            ..target(&fit, &backend, None)
        };
        let schema = json!({"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]});
        let title = json!({
            "model": "m", "max_tokens": 64,
            "messages": [{"role": "user", "content": "How do I sort a list?"}],
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
        });
        let mut request = decode(title.clone());
        let fitted = fit_request(&mut request, &anthropic_wire);
        assert!(fitted.schema_tool, "{fitted:?}");
        assert!(
            fitted.notes[0].contains("forced tool glider_json_answer"),
            "{fitted:?}"
        );
        let wire = codec(Dialect::Anthropic).encode_request(&request);
        assert_eq!(wire["tools"][0]["name"], SCHEMA_TOOL);
        assert_eq!(wire["tools"][0]["input_schema"], schema);
        assert_eq!(
            wire["tool_choice"],
            json!({"type": "tool", "name": SCHEMA_TOOL})
        );
        assert!(wire.get("output_config").is_none(), "{wire}");
        // With the client's own tools the model must call one of them or the schema's.
        let mut with_tools = title.clone();
        with_tools["tools"] = json!([tool("Read")]);
        let mut request = decode(with_tools);
        fit_request(&mut request, &anthropic_wire);
        assert_eq!(request.tool_choice, Some(ToolChoice::Required));
        assert_eq!(request.tools.len(), 2);
        // Ollama's wire has a schema field of its own: left as it is.
        let mut ollama = decode(title);
        let fitted = fit_request(&mut ollama, &target(&fit, &backend, None));
        assert!(!fitted.schema_tool && ollama.output_schema.is_some() && ollama.tools.is_empty());
    }
}
