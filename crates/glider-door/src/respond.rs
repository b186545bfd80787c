//! The door sequence in one call, for a door that speaks HTTP: read the body under
//! `server.max_body_bytes` and `server.body_read_timeout_secs` (a refusal rendered in
//! the caller's dialect), make a Responses request stateful ([`crate::stateful`]),
//! answer it ([`crate::answer`]) and render the outcome ([`crate::render`])
//! under the drain deadline. A door makes this one call and gets back the reply — or,
//! at the MITM, the client's request for the origin, with why.
//!
//! The doors differ in two places, both here: a `previous_response_id` the store
//! cannot give is the client's error at the gateway, while at the MITM the origin may
//! hold that chain (it gets the client's bytes unless the pipeline decides for a local
//! model); and only the MITM may be told to send a request to the origin. Either way
//! the pipeline decides once, on the request as the model would see it.

use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use glider_context::ResponseStore;
use glider_delegate::Delegator;
use glider_engine::{CompletionRequest, Engine};
use glider_ngl::{ApiError, Dialect, ErrorKind};
use glider_sys::listen::Cutoff;
use http::HeaderMap;
use http::request::Parts;

use crate::render::{self, error_response};
use crate::sequence::{
    Door, Outcome, ToOrigin, after_local_error, answer, carry_out, delegation, outcome, read_within,
};
use crate::stateful::{self, ToStore};

/// Who answers a request at a door, and in which dialect.
pub struct Visit<'a> {
    pub engine: &'a Engine,
    /// Takes `/claude`, `/cursor-agent` and `/agy` messages before the pipeline.
    pub delegator: Option<&'a Delegator>,
    /// Stored Responses: a Responses request continues its chain from here, and its
    /// reply is stored here.
    pub responses: Option<&'a Arc<ResponseStore>>,
    pub front: Dialect,
}

/// What became of a request at a door.
pub enum Responded {
    /// The reply for the client, in its dialect.
    Reply(Response),
    /// The origin answers (MITM only): the client's request as it came, and why.
    Origin(Box<ForOrigin>),
}

/// A request the MITM sends on to the origin with its bytes and credentials unchanged.
pub struct ForOrigin {
    pub parts: Parts,
    pub body: Bytes,
    pub why: ToOrigin,
}

/// The whole door sequence for `request` at `door`: read, (Responses) expand, answer,
/// render, (Responses) store. `look` sees the request once its body is read (the MITM's
/// debug dumps). `cutoff`: the drain deadline the answer is made under, when the door
/// does not keep it itself.
pub async fn respond<B>(
    door: Door,
    visit: Visit<'_>,
    request: http::Request<B>,
    cutoff: Option<Cutoff>,
    look: impl FnOnce(&Parts, &Bytes),
) -> Responded
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Visit {
        engine,
        delegator,
        responses,
        front,
    } = visit;
    let server = &engine.runtime().config.server;
    let (limit, time) = (server.max_body_bytes, server.client_limits().body_read);
    let (parts, body) = request.into_parts();
    let body = match read_within(body, limit, time).await {
        Ok(body) => body,
        Err(error) => return Responded::Reply(render::body_refused(front, door, &error)),
    };
    look(&parts, &body);
    let stateful = front == Dialect::OpenAiResponses;
    // Whether a continuation was expanded from the store (its `store: false` is final).
    let mut continued = false;
    let (answer_with, mut to_store) = match (stateful, door) {
        (false, _) => (Answer::Body(Ok(body.clone())), None),
        (true, Door::Gateway) => match stateful::prepare(responses, body.clone()) {
            Ok(prepared) => (Answer::Body(Ok(prepared.body)), prepared.store),
            Err(error) => (Answer::Body(Err(error)), None),
        },
        (true, Door::Mitm) if stateful::continues(&body) => {
            match stateful::prepare(responses, body.clone()) {
                Ok(prepared) => {
                    continued = true;
                    (Answer::Body(Ok(prepared.body)), prepared.store)
                }
                Err(error) => (Answer::Unexpanded(error), None),
            }
        }
        (true, Door::Mitm) => (Answer::Body(Ok(body.clone())), None),
    };
    let (headers, client_body) = (parts.headers.clone(), body.clone());
    // What the client's request asked of its stream (Chat Completions' usage chunk).
    let asked = body.clone();
    let answer = async move {
        match answer_with {
            Answer::Body(Ok(answer_body)) => {
                answer(door, engine, delegator, front, headers, answer_body).await
            }
            Answer::Body(Err(error)) => after_local_error(door, engine, error),
            Answer::Unexpanded(error) => {
                unexpanded(engine, delegator, front, headers, client_body, error).await
            }
        }
    };
    // The pipeline's future is large: boxed here so the door's holds only the box.
    let answer = Box::pin(async move { rendered(door, front, &asked, answer.await).await });
    // The drain deadline: a reply not made by then is a 503, a stream still open ends
    // with the dialect's error event.
    let outcome = match &cutoff {
        Some(cutoff) => tokio::select! {
            outcome = answer => outcome,
            () = cutoff.reached() => {
                Rendered::Reply(error_response(front, &render::shutting_down()), false)
            }
        },
        None => answer.await,
    };
    let (response, replied) = match outcome {
        Rendered::Reply(response, replied) => {
            (render::ending_at(front, response, cutoff.as_ref()), replied)
        }
        Rendered::Origin(why) => {
            return Responded::Origin(Box::new(ForOrigin { parts, body, why }));
        }
    };
    if door == Door::Mitm {
        // Only a local reply is stored at the MITM; one not continued (a continuation
        // was prepared above, and its `store: false` is final) is stored unless it says
        // `store: false`.
        if !replied {
            to_store = None;
        } else if stateful && !continued && to_store.is_none() {
            to_store = stateful::prepare(responses, body)
                .ok()
                .and_then(|prepared| prepared.store);
        }
    }
    Responded::Reply(stored(to_store, response).await)
}

/// What the pipeline is asked.
enum Answer {
    /// This body (a continuation expanded from the store), or the error that stopped
    /// the expansion, which is a local failure.
    Body(Result<Bytes, ApiError>),
    /// A MITM continuation whose chain this store cannot give (see [`unexpanded`]).
    Unexpanded(ApiError),
}

/// A MITM continuation Glider cannot expand (not stored here, or storage off), decided
/// once on the client's body: a local decision makes `error` the local failure (which
/// `mitm.origin_on_local_error` may still send to the origin); any other decision is
/// carried out, which sends the client's bytes to the origin that holds the chain.
async fn unexpanded(
    engine: &Engine,
    delegator: Option<&Delegator>,
    front: Dialect,
    headers: HeaderMap,
    body: Bytes,
    error: ApiError,
) -> Outcome {
    if let Some(delegation) = delegation(engine, delegator, front, &headers, &body) {
        return Outcome::Delegated(delegation);
    }
    let request = CompletionRequest::mitm(front, body, headers, true);
    match engine.prepare_completion(request).await {
        Ok(prepared) if prepared.decision().has_origin_local() => {
            prepared.discard();
            after_local_error(Door::Mitm, engine, error)
        }
        Ok(prepared) => carry_out(Door::Mitm, engine, prepared).await,
        Err(failed) => outcome(Door::Mitm, engine, Err(failed)),
    }
}

/// A rendered outcome: the reply (and whether the pipeline made it), or the origin's.
enum Rendered {
    Reply(Response, bool),
    Origin(ToOrigin),
}

/// The door's outcome as the reply in `front`'s dialect, to the client whose request
/// body was `client_body`.
async fn rendered(door: Door, front: Dialect, client_body: &[u8], outcome: Outcome) -> Rendered {
    match outcome {
        Outcome::Delegated(delegation) => {
            if door == Door::Mitm {
                tracing::info!(vendor = delegation.vendor.binary(), "delegated");
            }
            Rendered::Reply(
                render::delegation(front, client_body, delegation).await,
                false,
            )
        }
        Outcome::Reply(completion) => {
            if door == Door::Mitm {
                tracing::info!(backend = %completion.backend, model = %completion.model, "answered locally");
            }
            Rendered::Reply(render::completion(front, client_body, *completion), true)
        }
        Outcome::Error(error) => {
            if door == Door::Mitm {
                tracing::info!(error = %error, "local answer failed; shown to the client (mitm.origin_on_local_error: false)");
            }
            Rendered::Reply(error_response(front, &error), false)
        }
        Outcome::Origin(why) if door == Door::Mitm => {
            match &why {
                ToOrigin::Decided { decision, .. } => {
                    tracing::info!(rule = decision.rule.as_str(), reason = %decision.reason, "to the origin");
                }
                ToOrigin::LocalFailed(error) => {
                    tracing::info!(error = %error, "local answer failed; to the origin (mitm.origin_on_local_error)");
                }
            }
            Rendered::Origin(why)
        }
        // The gateway never asks for origin passthrough; if it happened anyway, saying
        // so beats a silent hang.
        Outcome::Origin(why) => Rendered::Reply(
            error_response(
                front,
                &ApiError::new(
                    ErrorKind::Internal,
                    format!("unexpected pipeline outcome: {why:?}"),
                ),
            ),
            false,
        ),
    }
}

/// `response`, with its Response object stored on the way out when there is one to.
async fn stored(to_store: Option<ToStore>, response: Response) -> Response {
    match to_store {
        Some(to_store) => stateful::storing(to_store, response).await,
        None => response,
    }
}
