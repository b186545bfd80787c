//! Tool loop (`tools.loop`, opt-in): when a local model answers a client that will not
//! run tools for it, Glider gives the model a reduced tool set (`tools.loop.tools` of
//! the runtime's [`glider_tools::ToolSet`]: the internal tools, the MCP tools that
//! `tools.loop.mcp` allows — none by default, as an MCP tool may write — and the tools
//! plugins declare), runs
//! the calls it makes itself, appends the results and asks again — encode and execute
//! once per model turn — bounded by contextkit's [`LoopBudget`] (turns and time). The
//! client gets the final answer in its dialect (a stream built from it when it asked
//! for one); when the budget ends first, an honest reply saying so. Every call goes on
//! the request record (`tool_calls`), hence the dashboard and the context log. A reply
//! that calls a tool Glider does not have goes to the client as it is.
//!
//! Each reply and request is bounded (`tools.loop.max_calls_per_reply`,
//! `max_calls_per_request`, `max_argument_bytes`, `max_result_bytes`): calls past a cap
//! are not run and are dropped from the history sent back, a call with oversized
//! arguments is not run (its arguments not sent back), a result is cut; each cut is told
//! to the model in the results, and kept on the record (`ToolRun::cut`). A tool call
//! with an empty name is never run: the model is told it is invalid.

use std::collections::HashSet;
use std::time::Instant;

use glider_dialects::codec;
use glider_ngl::{
    ApiError, ErrorKind, Part, Request, Response, Role, StopReason, ToolDef, Turn, Usage,
};
use glider_tools::{ToolError, ToolSpec};
use glider_vocab::{MAX_TOOL_ARGUMENT_CHARS, ToolRun};

use super::encode::Encode;
use super::execute::Execute;
use super::record::collect;
use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::contextkit::{LoopBudget, LoopLimit};
use crate::pipeline::reply::{Answered, decode_events};
use crate::plugins::with_plugin_tools;

pub(crate) struct ToolLoop;

impl Phase for ToolLoop {
    fn name(&self) -> &'static str {
        "tool_loop"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        // Decided before any future is boxed: with the loop off (the default) this
        // phase costs a request a few comparisons, nothing more.
        match loop_tools(job) {
            Some(specs) if !specs.is_empty() => PhaseFuture::waiting(run_loop(job, specs)),
            _ => ready(Flow::Continue),
        }
    }
}

/// The tools the loop offers this request, or `None` when the loop does not apply: off,
/// another model, a compaction, or a first candidate that is not local.
fn loop_tools(job: &Job) -> Option<Vec<ToolSpec>> {
    let config = &job.runtime.config.tools.tool_loop;
    let applies = config.enabled
        && !job.compaction
        && (config.models.is_empty() || config.models.contains(&job.model))
        && job
            .decision
            .as_ref()
            .and_then(|d| d.candidates.first())
            .is_some_and(|c| c.backend.is_local());
    applies.then(|| {
        with_plugin_tools(&job.runtime.tools, job.plugins.as_ref())
            .specs_where(|provider, spec| offered(config, provider, spec))
    })
}

/// Whether the loop offers (and so may run) `provider`'s `spec`: MCP tools only as
/// `tools.loop.mcp` allows, every tool as `tools.loop.tools` narrows.
fn offered(config: &glider_config::ToolLoopConfig, provider: &str, spec: &ToolSpec) -> bool {
    config.offers(&spec.name, provider == glider_tools::MCP_PROVIDER)
}

/// `specs` added to the request's own tools (a name the client already has stays
/// the client's).
fn offer(request: &mut Request, specs: &[ToolSpec]) {
    for spec in specs {
        if !request.tools.iter().any(|t| t.name == spec.name) {
            request.tools.push(ToolDef {
                name: spec.name.clone(),
                description: Some(spec.description.clone()),
                parameters: spec.input_schema.clone(),
                native: None,
            });
        }
    }
}

async fn run_loop(job: &mut Job, specs: Vec<ToolSpec>) -> Flow {
    let Some(candidates) = job.decision.as_ref().map(|d| d.candidates.len()) else {
        return Flow::Fail(not_routed());
    };
    let config = job.runtime.config.tools.tool_loop.clone();
    let ours: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
    let client_stream = job.request.stream;
    // Every candidate's request, with the tools, asked whole (the loop reads each reply
    // entire); the client's bytes no longer describe what is sent.
    job.adapted.resize_with(candidates, || None);
    let mut requests: Vec<Request> = std::mem::take(&mut job.adapted)
        .into_iter()
        .map(|adapted| adapted.unwrap_or_else(|| job.request.clone()))
        .collect();
    for request in &mut requests {
        offer(request, &specs);
        request.stream = false;
    }
    job.body = None;
    let mut budget = LoopBudget::new(config.max_turns, config.max_secs);
    let mut usage = Usage::default();
    // Tool calls run so far in this request (`tools.loop.max_calls_per_request`).
    let mut ran = 0usize;
    loop {
        job.adapted = requests.iter().cloned().map(Some).collect();
        if let stop @ (Flow::Fail(_) | Flow::Answer(_) | Flow::Origin(_)) = Encode.run(job).await {
            return stop;
        }
        let executed = match tokio::time::timeout(budget.time_left(), Execute.run(job)).await {
            Ok(Flow::Continue) => job.executed.take(),
            Ok(stop) => return stop,
            Err(_) => None,
        };
        let Some(executed) = executed else {
            return Flow::Fail(ApiError::new(
                ErrorKind::Timeout,
                format!(
                    "the tool loop's time budget (tools.loop.max_secs: {}) ran out while the model was asked",
                    config.max_secs
                ),
            ));
        };
        let index = executed.index;
        let streamed = job.upstream.get(index).is_some_and(|u| u.stream);
        let Some(dialect) = job
            .decision
            .as_ref()
            .and_then(|d| d.candidates.get(index))
            .map(|c| c.backend.dialect_for(job.front))
        else {
            return Flow::Fail(not_routed());
        };
        let mut response = match whole(dialect, executed, streamed).await {
            Ok(response) => response,
            Err(error) => return Flow::Fail(error),
        };
        add_usage(&mut usage, &response.usage);
        let calls: Vec<(String, String, serde_json::Value)> =
            glider_ngl::tool_calls(&response.parts)
                .map(|(id, name, args)| (id.to_owned(), name.to_owned(), args.clone()))
                .collect();
        // A call with an empty name is no tool of the client's: it is run here as
        // invalid, and the model told so (see `run_call`).
        let foreign = |name: &str| !name.trim().is_empty() && !ours.contains(name);
        if calls.is_empty() || calls.iter().any(|(_, name, _)| foreign(name)) {
            response.usage = usage;
            return answer(job, index, response, client_stream);
        }
        if let Err(limit) = budget.spend_turn() {
            let reply = stopped(&config, limit, budget.turns(), &response, usage);
            return answer(job, index, reply, client_stream);
        }
        let left = config.max_calls_per_request.saturating_sub(ran);
        if left == 0 {
            let reply = stopped(&config, LoopLimit::Calls, budget.turns(), &response, usage);
            return answer(job, index, reply, client_stream);
        }
        let made = calls.len();
        let (cap, key) = match config.max_calls_per_reply <= left {
            true => (config.max_calls_per_reply, "tools.loop.max_calls_per_reply"),
            false => (left, "tools.loop.max_calls_per_request"),
        };
        let mut calls = calls;
        calls.truncate(cap);
        ran += calls.len();
        let mut results = Vec::with_capacity(calls.len());
        let mut kept = Vec::with_capacity(calls.len());
        for (id, name, arguments) in calls {
            let (part, arguments) =
                run_call(job, &budget, id.clone(), name.clone(), arguments).await;
            results.push(part);
            kept.push(Part::ToolCall {
                id,
                name,
                arguments,
            });
        }
        if made > cap {
            let note = format!(
                "[glider] this reply made {made} tool calls; only the first {cap} ran ({key}: {cap}); the other {} were not run — call fewer tools at once",
                made - cap
            );
            note_cut(job, &mut results, note);
        }
        if budget.time_left().is_zero() {
            // No time to ask the model again: say so rather than fail.
            let reply = stopped(&config, LoopLimit::Time, budget.turns(), &response, usage);
            return answer(job, index, reply, client_stream);
        }
        // What the model said, with only the calls that were kept (arguments too large
        // to run are not sent back either).
        let mut parts: Vec<Part> = response
            .parts
            .into_iter()
            .filter(|p| matches!(p, Part::Text { .. }))
            .collect();
        parts.extend(kept);
        let said = Turn {
            role: Role::Assistant,
            parts,
        };
        let answered = Turn {
            role: Role::Tool,
            parts: results,
        };
        for request in &mut requests {
            request.turns.push(said.clone());
            request.turns.push(answered.clone());
        }
    }
}

fn add_usage(total: &mut Usage, turn: &Usage) {
    total.input_tokens += turn.input_tokens;
    total.output_tokens += turn.output_tokens;
    total.cache_read_tokens += turn.cache_read_tokens;
    total.cache_write_tokens += turn.cache_write_tokens;
}

/// The executed attempt's reply, read whole in the backend's dialect.
async fn whole(
    dialect: glider_ngl::Dialect,
    executed: glider_backend::Executed,
    streamed: bool,
) -> Result<Response, ApiError> {
    let response = executed.response;
    if streamed {
        // Streamed upstream where Glider matches stop sequences itself.
        return collect(decode_events(
            codec(dialect).stream_decoder(),
            response.first_chunk,
            response.rest,
        ))
        .await;
    }
    let body = response
        .collect()
        .await
        .map_err(|failure| ApiError::new(failure.kind, failure.to_string()))?;
    codec(dialect).decode_response(&body)
}

/// Run one call the model made; its result (or its error, which the model is told)
/// as a tool result, and the call on the record. Also the arguments to send back to the
/// model in its turn: the call's own, or `{}` where they were too large to run.
async fn run_call(
    job: &mut Job,
    budget: &LoopBudget,
    id: String,
    name: String,
    arguments: serde_json::Value,
) -> (Part, serde_json::Value) {
    let started = Instant::now();
    let config = job.runtime.config.tools.tool_loop.clone();
    let mut shown = arguments.to_string();
    let argument_bytes = shown.len();
    let refused = if name.trim().is_empty() {
        Some("a tool call with an empty name is invalid: name one of the tools offered".to_owned())
    } else if argument_bytes > config.max_argument_bytes {
        Some(format!(
            "not run: its arguments are {argument_bytes} bytes, more than tools.loop.max_argument_bytes ({}); pass less at once",
            config.max_argument_bytes
        ))
    } else {
        None
    };
    let outcome = match &refused {
        Some(why) => Err(ToolError::Failed(why.clone())),
        None => {
            let tools = with_plugin_tools(&job.runtime.tools, job.plugins.as_ref());
            match tokio::time::timeout(
                budget.time_left(),
                tools.call_where(&name, arguments.clone(), |provider, spec| {
                    offered(&config, provider, spec)
                }),
            )
            .await
            {
                Ok(outcome) => outcome,
                Err(_) => Err(ToolError::Failed(
                    "stopped: the tool loop's time budget (tools.loop.max_secs) ran out".into(),
                )),
            }
        }
    };
    let (mut text, error) = match outcome {
        Ok(output) => (output.into_text(), None),
        Err(error) => (format!("error: {error}"), Some(error.to_string())),
    };
    let mut cut = refused
        .is_some()
        .then(|| format!("arguments of {argument_bytes} bytes: not run"));
    let result_bytes = text.len();
    if result_bytes > config.max_result_bytes {
        truncate_at_char(&mut text, config.max_result_bytes);
        text.push_str(&format!(
            "\n[glider] result cut at {} of {result_bytes} bytes (tools.loop.max_result_bytes)",
            config.max_result_bytes
        ));
        cut = Some(format!(
            "result cut at {} of {result_bytes} bytes",
            config.max_result_bytes
        ));
    }
    if shown.len() > MAX_TOOL_ARGUMENT_CHARS {
        truncate_at_char(&mut shown, MAX_TOOL_ARGUMENT_CHARS);
        shown.push('…');
    }
    tracing::info!(tool = %name, ok = error.is_none(), "tool loop: ran a tool call");
    job.tracker.record.tool_calls.push(ToolRun {
        turn: budget.turns(),
        id: id.clone(),
        tool: name.clone(),
        arguments: shown,
        ok: error.is_none(),
        error: error.clone(),
        result_chars: text.chars().count(),
        duration_ms: started.elapsed().as_millis() as u64,
        cut,
    });
    let sent_back = match refused {
        Some(_) => serde_json::json!({}),
        None => arguments,
    };
    let part = Part::ToolResult {
        call_id: id,
        name: Some(name),
        content: vec![Part::text(text)],
        is_error: error.is_some(),
    };
    (part, sent_back)
}

/// Cut `text` to at most `max` bytes, on a character boundary.
fn truncate_at_char(text: &mut String, max: usize) {
    let mut cut = max.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
}

/// Tell the model `note` at the end of the last result, and keep it on the record with
/// the last call.
fn note_cut(job: &mut Job, results: &mut [Part], note: String) {
    if let Some(Part::ToolResult { content, .. }) = results.last_mut() {
        content.push(Part::text(format!("\n{note}")));
    }
    if let Some(run) = job.tracker.record.tool_calls.last_mut() {
        run.cut = Some(match run.cut.take() {
            Some(before) => format!("{before}; {note}"),
            None => note,
        });
    }
}

/// The honest reply when the budget ends before the model answered: what stopped the
/// loop, the key that raises it, and what the model last said.
fn stopped(
    config: &glider_config::ToolLoopConfig,
    limit: LoopLimit,
    turns: u32,
    last: &Response,
    usage: Usage,
) -> Response {
    let why = match limit {
        LoopLimit::Turns => format!(
            "the loop's budget of {} tool turns (tools.loop.max_turns) ran out",
            config.max_turns
        ),
        LoopLimit::Time => format!(
            "the loop's time budget of {} seconds (tools.loop.max_secs) ran out",
            config.max_secs
        ),
        LoopLimit::Calls => format!(
            "the loop's budget of {} tool calls (tools.loop.max_calls_per_request) ran out",
            config.max_calls_per_request
        ),
    };
    let said = glider_ngl::Turn {
        role: Role::Assistant,
        parts: last.parts.clone(),
    }
    .plain_text();
    let mut text = format!(
        "[glider] stopped after {turns} tool turns: {why} before the model gave a final answer."
    );
    if !said.trim().is_empty() {
        text.push_str(&format!(" The model's last words: {}", said.trim()));
    }
    Response {
        id: last.id.clone(),
        model: last.model.clone(),
        parts: vec![Part::text(text)],
        stop_reason: StopReason::EndTurn,
        stop_sequence: None,
        usage,
    }
}

/// The final reply, as the record phase would have shaped it: on the record under the
/// candidate that answered, with its ending rewritten where fitting requires it.
fn answer(job: &mut Job, index: usize, response: Response, stream: bool) -> Flow {
    let Some(decision) = job.decision.take() else {
        return Flow::Fail(not_routed());
    };
    let Some(candidate) = decision.candidates.get(index) else {
        return Flow::Fail(not_routed());
    };
    let backend = candidate.backend.name().to_owned();
    let model = candidate.model.clone();
    let tracker = &mut job.tracker;
    tracker.record.backend = Some(backend.clone());
    tracker.record.model_used = Some(model.clone());
    tracker.record.local = Some(candidate.backend.is_local());
    tracker.first_byte();
    let ending = job.endings.get(index).copied().flatten();
    let mut answered = Answered::glider_response(&backend, &model, decision, stream, response);
    answered.ending = ending;
    Flow::Answer(Box::new(answered))
}
