//! BidiAppend, the prompt: read the turn and decide it once through the shared
//! pipeline (the spec's `DecideLocal`), then arm the hub for the RunSSE that follows.
//! A follow-on (summary, title) keeps its turn family's side; anything the plane does
//! not understand goes to the origin.

use bytes::Bytes;
use glider_cursorrpc::messages::{AgentClientMessage, AppendKind, BidiAppendRequest};
use glider_cursorrpc::view;
use glider_door::Door;
use glider_engine::router::Target as RouteTarget;
use glider_engine::router::sticky::CURSOR_CONVERSATION_HEADER;
use glider_engine::{CompleteError, Prepared};
use glider_ngl::{Dialect, Role, Turn};
use http::{HeaderMap, HeaderValue};
use serde_json::json;

use super::connect::unary_payload;
use super::hub::{Decision, FamilyOutcome, Sticky};
use super::plane::{DEFAULT_MODEL, FAMILY_TTL, debug_rpc};
use crate::Mitm;
use crate::handler::Target;

/// A root turn to answer locally: the pipeline's decision, made once at BidiAppend (the
/// spec's `DecideLocal`) and carried out as it is at RunSSE (`CompleteLocal`). A turn
/// whose RunSSE never comes is dropped unrecorded, as the origin's turns are.
pub struct LocalTurn(Option<Prepared>);

impl LocalTurn {
    pub(super) fn take(mut self) -> Option<Prepared> {
        self.0.take()
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        if let Some(prepared) = self.0.take() {
            prepared.discard();
        }
    }
}

impl std::fmt::Debug for LocalTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(prepared) => write!(f, "LocalTurn({})", prepared.model()),
            None => f.write_str("LocalTurn(taken)"),
        }
    }
}

/// A turn the pipeline would not take leaves no record: the origin answers it, and
/// the plane records no origin turn.
fn forget(error: CompleteError) {
    if let CompleteError::OriginPassthrough { tracker, .. } = error {
        tracker.forget();
    }
}

/// Read a BidiAppend and arm the hub for its RunSSE; the append itself always goes
/// on to the origin.
pub(super) async fn bidi_append(
    mitm: &Mitm,
    parts: &http::request::Parts,
    body: &Bytes,
    target: &Target,
) {
    let payload = unary_payload(&parts.headers, body);
    if debug_rpc(mitm) {
        let append = match &payload {
            Ok(payload) => view::append(payload),
            Err(e) => json!({"decode_error": e.to_string()}),
        };
        mitm.dumps.dump_record(
            "agent-rpc-append",
            &json!({"host": target.host, "append": append}),
        );
    }
    let decoded = payload.and_then(|payload| BidiAppendRequest::decode(&payload));
    match decoded {
        Ok(append) => arm_for(mitm, &append, &parts.headers).await,
        Err(e) => {
            tracing::info!(host = %target.host, error = %e, "Agent RPC: BidiAppend not understood; its RunSSE goes to the origin")
        }
    }
}

/// Decide for an append that starts a request, and arm the hub. A later append on
/// the same request (a tool result, a heartbeat) arms nothing: the RunSSE already
/// has, or is about to get, the decision of the first.
async fn arm_for(mitm: &Mitm, append: &BidiAppendRequest, headers: &HeaderMap) {
    let Some(request_id) = append.request_id() else {
        return;
    };
    let message = match append.message() {
        Ok(message) => message,
        Err(e) => {
            tracing::info!(request_id, error = %e, "Agent RPC: client message not understood; to the origin");
            if append.append_seqno == 0 {
                mitm.agent_rpc.hub.arm_origin(request_id);
            }
            return;
        }
    };
    if message.run_request.is_none() && append.append_seqno != 0 {
        return;
    }
    let decision = decide(mitm, request_id, &message, headers).await;
    mitm.agent_rpc.hub.arm(request_id, decision);
}

async fn decide(
    mitm: &Mitm,
    request_id: &str,
    message: &AgentClientMessage,
    headers: &HeaderMap,
) -> Decision<LocalTurn> {
    let run = message.run_request.as_ref();
    let conversation = run
        .and_then(|r| r.conversation_id.as_deref())
        .filter(|c| !c.is_empty());
    let text = match message.kind() {
        AppendKind::Root { text } => text,
        other => {
            tracing::info!(request_id, kind = ?other, "Agent RPC: not a root Agent turn; to the origin");
            return Decision::Origin;
        }
    };
    let hub = &mitm.agent_rpc.hub;
    // The turn as ngl, straight from the protobuf: no JSON to build and decode back.
    let turn = |model: &str, text: &str| glider_ngl::Request {
        model: model.to_owned(),
        turns: vec![Turn::text(Role::User, text)],
        stream: true,
        ..glider_ngl::Request::default()
    };
    // The conversation is the session: every turn of it, whatever its text.
    let mut headers = headers.clone();
    headers.remove(CURSOR_CONVERSATION_HEADER);
    if let Some(value) = conversation.and_then(|c| HeaderValue::from_str(c).ok()) {
        headers.insert(CURSOR_CONVERSATION_HEADER, value);
    }
    let prepare = |request: glider_ngl::Request| {
        mitm.engine.prepare_decoded(
            Dialect::OpenAiChat,
            request,
            headers.clone(),
            Door::Mitm,
            true,
        )
    };
    let model = run.and_then(|r| r.model()).unwrap_or(DEFAULT_MODEL);
    // A follow-on (summary, title) of a turn that just ran keeps its family's side;
    // a routing flag the user typed still wins.
    if let Some(conversation) = conversation
        && glider_engine::router::explicit::parse_flag(&text).is_none()
        && let Some((root, sticky)) = hub.family_of(conversation)
        && root != request_id
    {
        tracing::info!(request_id, %root, ?sticky, "Agent RPC: follow-on held with its turn family");
        return match sticky {
            Sticky::Cloud => Decision::Origin,
            // The pipeline's own `/local` flag keeps it local even for a model no
            // local backend lists (the flag is stripped before the model sees it).
            Sticky::Local => match prepare(turn(model, &format!("/local {text}"))).await {
                Ok(prepared) => Decision::Local(LocalTurn(Some(prepared))),
                Err(error) => {
                    tracing::info!(request_id, model, error = ?error, "Agent RPC: sticky-local follow-on not routable; to the origin");
                    forget(error);
                    Decision::Origin
                }
            },
        };
    }
    let prepared = match prepare(turn(model, &text)).await {
        Ok(prepared) => prepared,
        Err(error) => {
            tracing::info!(request_id, model, error = ?error, "Agent RPC: no local answer; to the origin");
            forget(error);
            hub.open_family(request_id, conversation, Sticky::Cloud, FAMILY_TTL);
            return Decision::Origin;
        }
    };
    let decision = prepared.decision();
    let is_local = decision.candidates.iter().any(|c| c.backend.is_local());
    let flag = decision.flag.as_ref().map(|f| f.target.clone());
    // `/cloud` is the origin's even when the router, finding no cloud backend of its
    // own, fell through to the conversation's sticky-local choice: the cloud here
    // is Cursor's.
    if !is_local || flag == Some(RouteTarget::Cloud) {
        tracing::info!(request_id, rule = decision.rule.as_str(), reason = %decision.reason, "Agent RPC: cloud decision; to the origin, family opened");
        hub.open_family(request_id, conversation, Sticky::Cloud, FAMILY_TTL);
        prepared.discard();
        return Decision::Origin;
    }
    if flag == Some(RouteTarget::Local)
        && hub.open_family(request_id, conversation, Sticky::Local, FAMILY_TTL)
            == FamilyOutcome::KeptCloud
    {
        tracing::info!(
            request_id,
            "Agent RPC: a live sticky-cloud family kept its place; to the origin"
        );
        prepared.discard();
        return Decision::Origin;
    }
    tracing::info!(request_id, rule = decision.rule.as_str(), reason = %decision.reason, "Agent RPC: root turn answered locally");
    Decision::Local(LocalTurn(Some(prepared)))
}
