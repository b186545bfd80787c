//! The warm condition of the backup sequence: a local candidate whose model is cold and
//! whose planned load (measured, evictions included) exceeds `routing.max_cold_wait_secs`,
//! or that cannot fit without evicting a model in use, is passed over for the next
//! candidate; a sleeping vLLM model's load is its wake. The decision's reason says so (the route record, `glider route explain`).
//! With nothing else to go to it stays, and the request waits; so does a request the
//! user sent there (explicit or sticky), whose model the execute phase then loads. The
//! breaker and health rules are the executor's, unchanged. A sticky local session's
//! next user turn prewarms its model. Steps aside without a GPU (docs/vram.md).

use std::sync::Arc;

use glider_backend::executor::attempt_order;
use glider_backend::{Backend, Candidate};
use glider_config::Config;
use glider_ngl::{Part, Request, Role};
use glider_vram::planner::Plan;
use glider_vram::{Cause, Vram};

use super::RouteDecision;
use glider_vocab::RuleName;

/// Move the cold candidates that would wait too long behind the others (ahead of any
/// local reserve); the ones moved, for a background load. `backends` are all the
/// configured ones: the plan counts the models loaded on each.
pub fn pass_over_cold(
    decision: &mut RouteDecision,
    vram: &Vram,
    config: &Config,
    backends: &[Arc<Backend>],
) -> Vec<Candidate> {
    let end = decision
        .local_reserve
        .unwrap_or(decision.candidates.len())
        .min(decision.candidates.len());
    if matches!(decision.rule, RuleName::Explicit | RuleName::Sticky)
        || vram.steps_aside(&config.vram)
    {
        return Vec::new();
    }
    let limit = config.routing.max_cold_wait_secs;
    let mut notes = Vec::new();
    let mut cold = vec![false; end];
    for (i, candidate) in decision.candidates[..end].iter().enumerate() {
        if !candidate.backend.is_local() {
            continue;
        }
        let Some(wait) =
            vram.cold_wait(&config.vram, &candidate.backend, &candidate.model, backends)
        else {
            continue;
        };
        let why = match &wait.plan {
            Plan::CannotFit { reason } => format!("cannot fit: {reason}"),
            _ if wait.wait_secs > limit => format!(
                "planned load ~{:.1}s ({}) exceeds routing.max_cold_wait_secs {limit}s",
                wait.wait_secs,
                if wait.measured {
                    "measured"
                } else {
                    wait.prior
                }
            ),
            _ => continue,
        };
        cold[i] = true;
        notes.push(format!(
            "{} model {} is cold, {why}",
            candidate.backend.name(),
            candidate.model
        ));
    }
    if notes.is_empty() || cold.iter().all(|&c| c) {
        return Vec::new();
    }
    let tail = decision.candidates.split_off(end);
    let mut moved = Vec::new();
    for (candidate, passed_over) in std::mem::take(&mut decision.candidates)
        .into_iter()
        .zip(cold)
    {
        if passed_over {
            moved.push(candidate);
        } else {
            decision.candidates.push(candidate);
        }
    }
    let next = decision
        .candidates
        .first()
        .map(|c| c.backend.name().to_owned())
        .unwrap_or_default();
    decision.candidates.extend(moved.iter().cloned());
    decision.candidates.extend(tail);
    decision.reason = format!(
        "{}; {}: passed over for {next} (warm condition)",
        decision.reason,
        notes.join("; ")
    );
    moved
}

/// Load a passed-over model while the request goes elsewhere, so the next finds it warm
/// (`vram.background_load`).
pub fn load_in_background(
    vram: Arc<Vram>,
    config: Arc<Config>,
    candidate: Candidate,
    backends: &[Arc<Backend>],
) {
    let backends = backends.to_vec();
    tokio::spawn(async move {
        vram.make_room(
            &config.vram,
            &candidate.backend,
            &candidate.model,
            Cause::Background,
            &backends,
        )
        .await;
    });
}

/// Prewarm: when a sticky local session's next user turn starts, the model it will be
/// sent to is checked afresh and loaded again if it was evicted since the session's
/// last turn, alongside the phases before execute. A tool result relayed back is the
/// same turn going on (its model was in use moments ago), so it does not prewarm.
pub fn prewarm_sticky(
    decision: &RouteDecision,
    request: &Request,
    vram: &Arc<Vram>,
    config: &Config,
    backends: &[Arc<Backend>],
) {
    if decision.rule != RuleName::Sticky
        || vram.steps_aside(&config.vram)
        || !starts_user_turn(request)
    {
        return;
    }
    let reserve = decision.local_reserve.unwrap_or(decision.candidates.len());
    let Some(candidate) = attempt_order(&decision.candidates, reserve)
        .first()
        .map(|&index| &decision.candidates[index])
        .filter(|candidate| candidate.backend.is_local())
    else {
        return;
    };
    vram.prewarm(&config.vram, &candidate.backend, &candidate.model, backends);
}

/// Whether `request` starts a user turn: its last turn (system text aside: Claude Code
/// sends one after the user's) is the user's own text, not a tool result.
fn starts_user_turn(request: &Request) -> bool {
    request.last_turn().is_some_and(|turn| {
        turn.role == Role::User
            && crate::transform::has_text(turn)
            && !turn
                .parts
                .iter()
                .any(|part| matches!(part, Part::ToolResult { .. }))
    })
}

#[cfg(test)]
mod tests {
    use glider_ngl::Turn;

    use super::*;

    fn request(turns: Vec<Turn>) -> Request {
        Request {
            turns,
            ..Request::default()
        }
    }

    #[test]
    fn a_user_turn_starts_with_the_users_text_and_a_tool_result_goes_on_with_it() {
        let user = Turn::text(Role::User, "fix the test");
        let system_after = Turn::text(Role::System, "reminder");
        let result = Turn {
            role: Role::Tool,
            parts: vec![Part::ToolResult {
                call_id: "c1".into(),
                name: None,
                content: vec![Part::text("ok")],
                is_error: false,
            }],
        };
        assert!(starts_user_turn(&request(vec![user.clone()])));
        assert!(starts_user_turn(&request(vec![
            user.clone(),
            system_after.clone()
        ])));
        assert!(!starts_user_turn(&request(vec![user.clone(), result])));
        assert!(!starts_user_turn(&request(vec![
            user,
            Turn::text(Role::Assistant, "done")
        ])));
        assert!(!starts_user_turn(&request(vec![system_after])));
        assert!(!starts_user_turn(&request(vec![Turn::text(
            Role::User,
            "  "
        )])));
    }
}
