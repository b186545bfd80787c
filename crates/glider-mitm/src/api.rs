//! The API path on a decrypted Anthropic/OpenAI host: a model request runs the door
//! kit's sequence; Glider answers it locally (a reply, a delegation, an error in the
//! caller's dialect), or it goes to the origin with its bytes and credentials unchanged
//! and a tracker recording the origin's leg. A Responses request answered locally is
//! stateful as on the gateway ([`glider_door::stateful`]): its `previous_response_id`
//! is expanded from Glider's store and its reply stored; one for the origin keeps its
//! bytes (the origin holds its own chain).

use axum::body::Body;
use bytes::Bytes;
use glider_door::{
    Door, DoorSequence, Outcome, ToOrigin, error_response, read_within, render, stateful,
};
use glider_engine::Engine;
use glider_ngl::Dialect;
use http::{HeaderMap, Request};
use hyper::body::Incoming;

use crate::handler::{HandlerCtx, HttpHandler, RequestOrResponse};

/// The handler for a model request in `front`'s dialect.
pub(crate) struct ApiHandler {
    pub front: Dialect,
}

impl HttpHandler for ApiHandler {
    async fn handle_request(
        &mut self,
        ctx: &HandlerCtx<'_>,
        request: Request<Incoming>,
    ) -> RequestOrResponse {
        let (mitm, target, front) = (ctx.mitm, ctx.target, self.front);
        let config = mitm.engine.runtime().config.clone();
        let (parts, body) = request.into_parts();
        let (limit, time) = (
            config.server.max_body_bytes,
            config.server.client_limits().body_read,
        );
        let body = match read_within(body, limit, time).await {
            Ok(body) => body,
            Err(error) => {
                let response = render::body_refused(front, Door::Mitm, &error);
                return RequestOrResponse::Response(response);
            }
        };
        if config.mitm.debug_agent_rpc || crate::debug::env_enabled() {
            mitm.dumps.dump(
                &target.host,
                parts.method.as_str(),
                parts.uri.path_and_query().map_or("/", |p| p.as_str()),
                &parts.headers,
                &body,
            );
        }
        let stateful = front == Dialect::OpenAiResponses;
        // Expanded only once it is known to be answered here: the origin gets the
        // client's bytes. A chain Glider cannot continue (not stored here, storage
        // off) is a local error, which `mitm.origin_on_local_error` may send on to the
        // origin, where the chain may be.
        let continued = stateful
            && stateful::continues(&body)
            && routes_locally(&mitm.engine, front, &parts.headers, &body);
        let (answer_body, mut to_store) = match continued {
            false => (Ok(body.clone()), None),
            true => match stateful::prepare(mitm.responses(), body.clone()) {
                Ok(prepared) => (Ok(prepared.body), prepared.store),
                Err(error) => (Err(error), None),
            },
        };
        let outcome = match answer_body {
            Ok(answer_body) => {
                Door::Mitm
                    .answer(
                        &mitm.engine,
                        Some(&mitm.delegator),
                        front,
                        parts.headers.clone(),
                        answer_body,
                    )
                    .await
            }
            Err(error) => Door::Mitm.after_local_error(&mitm.engine, error),
        };
        let response = match outcome {
            Outcome::Delegated(delegation) => {
                tracing::info!(host = %target.host, vendor = delegation.vendor.binary(), "delegated");
                render::delegation(front, delegation).await
            }
            Outcome::Reply(completion) => {
                tracing::info!(host = %target.host, backend = %completion.backend, model = %completion.model, "answered locally");
                let response = render::completion(front, *completion);
                if stateful && !continued && to_store.is_none() {
                    // Not a continuation (one was prepared above, and its `store: false`
                    // is final): stored unless it says `store: false`.
                    to_store = stateful::prepare(mitm.responses(), body.clone())
                        .ok()
                        .and_then(|prepared| prepared.store);
                }
                match to_store {
                    Some(to_store) => stateful::storing(to_store, response).await,
                    None => response,
                }
            }
            Outcome::Origin(to_origin) => {
                match &to_origin {
                    ToOrigin::Decided { decision, .. } => {
                        tracing::info!(host = %target.host, rule = decision.rule.as_str(), reason = %decision.reason, "to the origin");
                    }
                    ToOrigin::LocalFailed(error) => {
                        tracing::info!(host = %target.host, error = %error, "local answer failed; to the origin (mitm.origin_on_local_error)");
                    }
                }
                let tracker = to_origin.into_tracker(mitm.engine.bus(), front, &parts.headers);
                let request = Request::from_parts(parts, Body::from(body));
                return RequestOrResponse::to_origin(request, Some(tracker));
            }
            Outcome::Error(error) => {
                tracing::info!(host = %target.host, error = %error, "local answer failed; shown to the client (mitm.origin_on_local_error: false)");
                error_response(front, &error)
            }
        };
        RequestOrResponse::Response(response)
    }
}

/// Whether the pipeline would answer `body` here: its route has a local candidate
/// before any cloud reserve (the origin gate keeps only those). Decided without running
/// the request; a body that does not decode or route is not (the pipeline then answers
/// it as it would any other).
fn routes_locally(engine: &Engine, front: Dialect, headers: &HeaderMap, body: &Bytes) -> bool {
    let Ok((request, model, tokens)) = engine.prepare(front, body) else {
        return false;
    };
    engine
        .decide(front, &request, headers, &model, tokens, false)
        .is_ok_and(|decision| decision.has_origin_local())
}
