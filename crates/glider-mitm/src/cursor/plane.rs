//! The two Agent RPC handlers on a decrypted Cursor host. BidiAppend: read the turn,
//! decide through the shared pipeline, arm the hub, forward the append to the origin
//! ([`super::decide`]). RunSSE: wait for the decision; answer a root turn locally as
//! RunSSE frames ([`super::answer`]), or relay the stream to the origin and watch it
//! ([`super::watch`]). Families keep a turn's follow-ons with its cloud parent. This
//! file is the [`HttpHandler`] that picks between them and the plane's shared state.

use std::time::Duration;

use axum::body::Body;
use glider_cursorrpc::fields;
use glider_door::{ObservedBody, read_within};
use glider_ngl::ErrorKind;
use http::{Method, Request, Response};
use hyper::body::Incoming;

use super::answer::run_sse;
use super::connect::{connect_error, gzip_stream};
use super::decide::{LocalTurn, bidi_append};
use super::hub::AgentFulfillHub;
use super::watch::TurnWatch;
use crate::Mitm;
use crate::handler::{HandlerCtx, HttpHandler, RequestOrResponse};

/// How long a turn family stays sticky after it opens, and after its root's reply
/// stream ends (the summary and title follow within seconds of the reply).
pub const FAMILY_TTL: Duration = Duration::from_secs(10);
/// A local reply sends a heartbeat after this much silence from the model.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// The model name asked of the pipeline when the append names none.
pub const DEFAULT_MODEL: &str = "default";

/// Which Agent RPC a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    BidiAppend,
    RunSse,
}

/// The Agent RPC a POST to `path` is, if any.
pub fn rpc(method: &Method, path: &str) -> Option<Rpc> {
    if method != Method::POST {
        return None;
    }
    match path {
        fields::BIDI_APPEND_PATH => Some(Rpc::BidiAppend),
        fields::RUN_SSE_PATH => Some(Rpc::RunSse),
        _ => None,
    }
}

/// The plane's state, shared by every connection.
#[derive(Default)]
pub struct AgentRpc {
    pub hub: AgentFulfillHub<LocalTurn>,
}

/// Whether Agent RPC traffic is dumped (`mitm.debug_agent_rpc`, or the environment).
pub(super) fn debug_rpc(mitm: &Mitm) -> bool {
    mitm.engine.runtime().config.mitm.debug_agent_rpc || crate::debug::env_enabled()
}

/// The plane's [`HttpHandler`], one per Agent RPC request. BidiAppend: arm the hub,
/// let the append through. RunSSE: answer locally, or let it through and watch the
/// origin's stream (the family is touched at its end; frames read for dumps and the
/// tool codec).
pub struct AgentRpcHandler {
    rpc: Rpc,
    /// A RunSSE the origin answers: its request id, for the reply's watcher.
    relayed: Option<String>,
}

impl AgentRpcHandler {
    pub fn new(rpc: Rpc) -> Self {
        AgentRpcHandler { rpc, relayed: None }
    }
}

impl HttpHandler for AgentRpcHandler {
    async fn handle_request(
        &mut self,
        ctx: &HandlerCtx<'_>,
        request: Request<Incoming>,
    ) -> RequestOrResponse {
        let (mitm, target) = (ctx.mitm, ctx.target);
        let server = &mitm.engine.runtime().config.server;
        let (limit, time) = (server.max_body_bytes, server.client_limits().body_read);
        let (parts, body) = request.into_parts();
        let body = match read_within(body, limit, time).await {
            Ok(body) => body,
            Err(error) => {
                // 408, 413 or 400, in Connect's words.
                let kind = ErrorKind::from_status(error.status().as_u16());
                return RequestOrResponse::Response(connect_error(
                    error.status(),
                    kind.connect_code(),
                    &format!("Glider could not read the request body: {}", error.cause),
                ));
            }
        };
        if debug_rpc(mitm) {
            mitm.dumps.dump(
                &target.host,
                parts.method.as_str(),
                parts.uri.path(),
                &parts.headers,
                &body,
            );
        }
        match self.rpc {
            Rpc::BidiAppend => bidi_append(mitm, &parts, &body, target).await,
            Rpc::RunSse => match run_sse(mitm, &parts, &body, target).await {
                Ok(response) => return RequestOrResponse::Response(response),
                Err(request_id) => self.relayed = Some(request_id),
            },
        }
        RequestOrResponse::to_origin(Request::from_parts(parts, Body::from(body)), None)
    }

    fn handle_response(
        &mut self,
        ctx: &HandlerCtx<'_>,
        response: Response<Body>,
    ) -> Response<Body> {
        let Some(request_id) = self.relayed.take() else {
            return response;
        };
        let (parts, body) = response.into_parts();
        let tool_codec = ctx.mitm.engine.runtime().config.mitm.agent_rpc_tool_codec;
        let watch = TurnWatch::new(
            ctx.mitm,
            request_id,
            "agent-rpc-origin-reply",
            gzip_stream(&parts.headers),
            tool_codec,
        );
        let watched = ObservedBody::new(body, watch);
        Response::from_parts(parts, Body::new(watched))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_paths() {
        assert_eq!(
            rpc(&Method::POST, "/aiserver.v1.BidiService/BidiAppend"),
            Some(Rpc::BidiAppend)
        );
        assert_eq!(
            rpc(&Method::POST, "/agent.v1.AgentService/RunSSE"),
            Some(Rpc::RunSse)
        );
        assert_eq!(rpc(&Method::GET, "/agent.v1.AgentService/RunSSE"), None);
        assert_eq!(rpc(&Method::POST, "/agent.v1.AgentService/Run"), None);
    }
}
