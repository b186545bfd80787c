//! The API path on a decrypted Anthropic/OpenAI host: a model request runs the door
//! kit's whole sequence ([`glider_door::respond`]); Glider answers it locally (a reply,
//! a delegation, an error in the caller's dialect), or it goes to the origin with its
//! bytes and credentials unchanged and a tracker recording the origin's leg. A
//! Responses request answered locally is stateful as on the gateway
//! ([`glider_door::stateful`]); one for the origin keeps its bytes (the origin holds its
//! own chain).

use axum::body::Body;
use glider_door::{Door, ForOrigin, Responded, Visit, respond};
use glider_ngl::Dialect;
use http::{Method, Request};
use hyper::body::Incoming;
use tracing::Instrument;

use crate::handler::{HandlerCtx, HttpHandler, RequestOrResponse};

/// The dialect of a request Glider may answer: a POST to a known API path. Everything
/// else on a decrypted host goes to the origin untouched.
pub fn api_front(method: &Method, path: &str) -> Option<Dialect> {
    if method != Method::POST {
        return None;
    }
    match path {
        "/v1/messages" => Some(Dialect::Anthropic),
        "/v1/chat/completions" => Some(Dialect::OpenAiChat),
        "/v1/responses" => Some(Dialect::OpenAiResponses),
        _ => None,
    }
}

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
        let debug =
            mitm.engine.runtime().config.mitm.debug_agent_rpc || crate::debug::env_enabled();
        let dump = |parts: &http::request::Parts, body: &bytes::Bytes| {
            if debug {
                mitm.dumps.dump(
                    &target.host,
                    parts.method.as_str(),
                    parts.uri.path_and_query().map_or("/", |p| p.as_str()),
                    &parts.headers,
                    body,
                );
            }
        };
        let visit = Visit {
            engine: &mitm.engine,
            delegator: Some(&mitm.delegator),
            responses: mitm.responses(),
            front,
        };
        // The drain deadline is kept around the whole handler by the proxy.
        let responded = respond(Door::Mitm, visit, request, None, dump)
            .instrument(tracing::info_span!("mitm", host = %target.host))
            .await;
        match responded {
            Responded::Reply(response) => RequestOrResponse::Response(response),
            Responded::Origin(for_origin) => {
                let ForOrigin { parts, body, why } = *for_origin;
                let tracker = why.into_tracker(mitm.engine.bus(), front, &parts.headers);
                let request = Request::from_parts(parts, Body::from(body));
                RequestOrResponse::to_origin(request, Some(tracker))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_api_paths_only() {
        assert_eq!(
            api_front(&Method::POST, "/v1/messages"),
            Some(Dialect::Anthropic)
        );
        assert_eq!(
            api_front(&Method::POST, "/v1/responses"),
            Some(Dialect::OpenAiResponses)
        );
        assert_eq!(api_front(&Method::POST, "/v1/messages/count_tokens"), None);
        assert_eq!(api_front(&Method::HEAD, "/v1/messages"), None);
        assert_eq!(api_front(&Method::GET, "/api/claude_code/settings"), None);
    }
}
