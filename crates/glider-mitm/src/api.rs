//! The API path on a decrypted Anthropic/OpenAI host: a model request runs the door
//! kit's sequence; Glider answers it locally (a reply, a delegation, an error in the
//! caller's dialect), or it goes to the origin with its bytes and credentials unchanged
//! and a tracker recording the origin's leg.

use axum::body::Body;
use glider_door::{Door, DoorSequence, Outcome, ToOrigin, error_response, read_within, render};
use glider_ngl::Dialect;
use http::Request;
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
        let outcome = Door::Mitm
            .answer(
                &mitm.engine,
                Some(&mitm.delegator),
                front,
                parts.headers.clone(),
                body.clone(),
            )
            .await;
        let response = match outcome {
            Outcome::Delegated(delegation) => {
                tracing::info!(host = %target.host, vendor = delegation.vendor.binary(), "delegated");
                render::delegation(front, delegation).await
            }
            Outcome::Reply(completion) => {
                tracing::info!(host = %target.host, backend = %completion.backend, model = %completion.model, "answered locally");
                render::completion(front, *completion)
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
