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

use std::collections::HashSet;
use std::time::Instant;

use glider_dialects::codec;
use glider_ngl::{
    ApiError, ErrorKind, Part, Request, Response, Role, StopReason, ToolDef, Turn, Usage,
};
use glider_tools::{ToolError, ToolSpec};

use super::encode::Encode;
use super::execute::Execute;
use super::record::collect;
use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::contextkit::{LoopBudget, LoopLimit, MAX_TOOL_ARGUMENT_CHARS, ToolRun};
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
        if calls.is_empty() || calls.iter().any(|(_, name, _)| !ours.contains(name)) {
            response.usage = usage;
            return answer(job, index, response, client_stream);
        }
        if let Err(limit) = budget.spend_turn() {
            let reply = stopped(&config, limit, budget.turns(), &response, usage);
            return answer(job, index, reply, client_stream);
        }
        let mut results = Vec::with_capacity(calls.len());
        for (id, name, arguments) in calls {
            results.push(run_call(job, &budget, id, name, arguments).await);
        }
        if budget.time_left().is_zero() {
            // No time to ask the model again: say so rather than fail.
            let reply = stopped(&config, LoopLimit::Time, budget.turns(), &response, usage);
            return answer(job, index, reply, client_stream);
        }
        let said = Turn {
            role: Role::Assistant,
            parts: response
                .parts
                .into_iter()
                .filter(|p| matches!(p, Part::Text { .. } | Part::ToolCall { .. }))
                .collect(),
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
/// as a tool result, and the call on the record.
async fn run_call(
    job: &mut Job,
    budget: &LoopBudget,
    id: String,
    name: String,
    arguments: serde_json::Value,
) -> Part {
    let started = Instant::now();
    let tools = with_plugin_tools(&job.runtime.tools, job.plugins.as_ref());
    let config = &job.runtime.config.tools.tool_loop;
    let outcome = match tokio::time::timeout(
        budget.time_left(),
        tools.call_where(&name, arguments.clone(), |provider, spec| {
            offered(config, provider, spec)
        }),
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => Err(ToolError::Failed(
            "stopped: the tool loop's time budget (tools.loop.max_secs) ran out".into(),
        )),
    };
    let (text, error) = match outcome {
        Ok(output) => (output.into_text(), None),
        Err(error) => (format!("error: {error}"), Some(error.to_string())),
    };
    let mut shown = arguments.to_string();
    if shown.len() > MAX_TOOL_ARGUMENT_CHARS {
        let mut cut = MAX_TOOL_ARGUMENT_CHARS;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
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
    });
    Part::ToolResult {
        call_id: id,
        name: Some(name),
        content: vec![Part::text(text)],
        is_error: error.is_some(),
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
