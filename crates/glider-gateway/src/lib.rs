//! The gateway door (spec package `api`): HTTP routes for every front dialect, request
//! bodies read under a size limit, replies rendered as bytes, SSE or NDJSON, and every
//! error in the caller's own dialect with its status decided by `ErrorKind::status`.

pub mod access;
mod embeddings;
pub mod ollama;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use glider_context::ResponseStore;
use glider_door::{Door, Responded, Visit, respond, stateful};
use glider_engine::Engine;
use glider_ngl::{ApiError, Dialect, ErrorKind};
use glider_sys::listen::{Cutoff, Drain, Limits};
use std::time::Duration;

/// The rendering lives in the door kit, shared with the MITM; these paths stay valid.
pub use glider_door::{error_response, render};

#[derive(Clone)]
struct Gateway {
    engine: Arc<Engine>,
    /// Takes `/claude`, `/cursor-agent` and `/agy` messages before the pipeline.
    delegator: Arc<glider_delegate::Delegator>,
    /// Stored Responses (`previous_response_id`, `/v1/responses/{id}`); `None` when
    /// the context store is off.
    responses: Option<Arc<ResponseStore>>,
}

/// The gateway's routes over `engine`, with a delegate handler of its own and no
/// stored Responses.
pub fn router(engine: Arc<Engine>) -> Result<Router, String> {
    router_with(engine, Arc::new(glider_delegate::Delegator::new()), None)
}

/// The gateway's routes over `engine`, delegating through `delegator` (shared with
/// whoever else must see it, e.g. the binary that records delegate PIDs in runstate),
/// behind the [`access`] rules of the config's `server.gateway_token`. `responses`
/// is the context store's stored Responses (`None` with `context.enabled: false`:
/// `previous_response_id` and `/v1/responses/{id}` then answer a typed 400).
///
/// A token whose variable is unset is an error: the gateway must not open up because
/// an environment variable went missing.
pub fn router_with(
    engine: Arc<Engine>,
    delegator: Arc<glider_delegate::Delegator>,
    responses: Option<Arc<ResponseStore>>,
) -> Result<Router, String> {
    router_with_mcp(engine, delegator, responses, None)
}

/// [`router_with`], plus `mcp` (the `/mcp` MCP server's router, from glider-mcp)
/// behind the same [`access`] rules.
pub fn router_with_mcp(
    engine: Arc<Engine>,
    delegator: Arc<glider_delegate::Delegator>,
    responses: Option<Arc<ResponseStore>>,
    mcp: Option<Router>,
) -> Result<Router, String> {
    let access = access::Access {
        token: match &engine.runtime().config.server.gateway_token {
            Some(secret) => Some(
                secret
                    .resolve()
                    .map_err(|e| format!("server.gateway_token: {e}"))?,
            ),
            None => None,
        },
    };
    let routes = routes(Gateway {
        engine,
        delegator,
        responses,
    });
    let routes = match mcp {
        Some(mcp) => routes.merge(mcp),
        None => routes,
    };
    Ok(routes.layer(axum::middleware::from_fn_with_state(access, access::guard)))
}

fn routes(gateway: Gateway) -> Router {
    Router::new()
        .route("/", get(root).head(root))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route(
            "/v1/responses/{id}",
            get(retrieve_response).delete(delete_response),
        )
        .route("/v1/responses/{id}/input_items", get(list_input_items))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
        // `*id`: a model id may hold slashes (`Qwen/Qwen2.5-7B-Instruct`).
        .route("/v1/models/{*id}", get(model))
        .route("/api/chat", post(ollama_chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/api/embed", post(embeddings::ollama_embed))
        .route("/api/embeddings", post(embeddings::ollama_embeddings))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/api/pull", post(ollama::management))
        .route("/api/push", post(ollama::management))
        .route("/api/create", post(ollama::management))
        .route("/api/copy", post(ollama::management))
        .route("/api/delete", axum::routing::delete(ollama::management))
        .fallback(not_found)
        .with_state(gateway)
}

/// Serve the gateway on `listener` until `shutdown` resolves, under the config's
/// client timeouts and drain deadline (`server.*_timeout_secs`,
/// `server.shutdown_grace_secs`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Arc<Engine>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = engine.runtime().config.server.clone();
    let router = router(engine).map_err(std::io::Error::other)?;
    let drain = Drain::on(shutdown, Duration::from_secs(server.shutdown_grace_secs));
    serve_with(listener, router, server.client_limits(), drain).await
}

/// Serve `router` (from [`router`] or [`router_with`]) on `listener` under `limits`
/// until `drain` starts, then finish or cut the open replies by its deadline (see
/// [`glider_sys::listen::serve`]).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    drain: Drain,
) -> std::io::Result<()> {
    let service = hyper_util::service::TowerToHyperService::new(router);
    glider_sys::listen::serve(listener, service, limits, drain).await
}

async fn root() -> &'static str {
    "Glider gateway: OpenAI /v1/chat/completions, /v1/responses, /v1/models; Anthropic /v1/messages; Ollama /api/chat, /api/generate, /api/tags, /api/show, /api/ps\n"
}

async fn chat_completions(State(gw): State<Gateway>, request: Request) -> Response {
    complete(gw, Dialect::OpenAiChat, request).await
}

/// A Responses request: its `previous_response_id` expanded from the store, and its
/// reply stored unless it says `store: false` (see [`stateful`]).
async fn responses(State(gw): State<Gateway>, request: Request) -> Response {
    complete(gw, Dialect::OpenAiResponses, request).await
}

async fn retrieve_response(
    State(gw): State<Gateway>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    stateful::retrieve(gw.responses.clone(), id).await
}

async fn list_input_items(
    State(gw): State<Gateway>,
    axum::extract::Path(id): axum::extract::Path<String>,
    axum::extract::Query(params): axum::extract::Query<stateful::ListParams>,
) -> Response {
    stateful::list_input_items(gw.responses.clone(), id, params).await
}

async fn delete_response(
    State(gw): State<Gateway>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    stateful::delete(gw.responses.clone(), id).await
}

async fn messages(State(gw): State<Gateway>, request: Request) -> Response {
    complete(gw, Dialect::Anthropic, request).await
}

async fn ollama_chat(State(gw): State<Gateway>, request: Request) -> Response {
    complete(gw, Dialect::Ollama, request).await
}

/// Read the body under the configured size and time limits: over the size is a 413,
/// a body that has not arrived by `server.body_read_timeout_secs` a 408, each in the
/// caller's dialect.
async fn read_body(
    gw: &Gateway,
    front: Dialect,
    request: Request,
) -> Result<(HeaderMap, Bytes), Response> {
    let server = &gw.engine.runtime().config.server;
    let (limit, time) = (server.max_body_bytes, server.client_limits().body_read);
    let (parts, body) = request.into_parts();
    match glider_door::read_within(body, limit, time).await {
        Ok(body) => Ok((parts.headers, body)),
        Err(error) => Err(render::body_refused(front, Door::Gateway, &error)),
    }
}

/// A model request in `front`'s dialect, through the door kit's whole sequence.
async fn complete(gw: Gateway, front: Dialect, request: Request) -> Response {
    // The drain deadline: a reply not made by then is a 503, a stream still open ends
    // with the dialect's error event.
    let cutoff = request.extensions().get::<Cutoff>().cloned();
    let visit = Visit {
        engine: &gw.engine,
        delegator: Some(&gw.delegator),
        responses: gw.responses.as_ref(),
        front,
    };
    match respond(Door::Gateway, visit, request, cutoff, |_, _| {}).await {
        Responded::Reply(response) => response,
        // `respond` renders an origin outcome at the gateway as an error itself.
        Responded::Origin(_) => error_response(
            front,
            &ApiError::new(ErrorKind::Internal, "the gateway has no origin"),
        ),
    }
}

async fn count_tokens(State(gw): State<Gateway>, request: Request) -> Response {
    let (headers, body) = match read_body(&gw, Dialect::Anthropic, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    match gw.engine.count_tokens(&body, &headers).await {
        Ok(tokens) => axum::Json(serde_json::json!({ "input_tokens": tokens })).into_response(),
        Err(error) => error_response(Dialect::Anthropic, &error),
    }
}

/// Does the caller speak Anthropic's models API? Anthropic's SDKs send
/// `anthropic-version` on every call, and authenticate with `x-api-key`.
fn anthropic_caller(headers: &HeaderMap) -> bool {
    headers.contains_key("anthropic-version") || headers.contains_key("x-api-key")
}

/// One model in Anthropic's shape or OpenAI's, with Glider's own `glider` details:
/// which backend serves it and what is missing.
fn model_object(m: &glider_engine::ModelInfo, anthropic: bool) -> serde_json::Value {
    let glider = serde_json::json!({
        "backend": m.backend,
        "alias_of": m.alias_of,
        "available": m.unavailable.is_none(),
        "unavailable": m.unavailable,
        "warm": m.warm,
        "capabilities": m.capabilities,
    });
    if anthropic {
        serde_json::json!({"type": "model", "id": m.id, "display_name": m.id, "created_at": "1970-01-01T00:00:00Z", "glider": glider})
    } else {
        serde_json::json!({"id": m.id, "object": "model", "created": 0, "owned_by": m.backend, "glider": glider})
    }
}

/// OpenAI's list shape, or Anthropic's for an Anthropic-shaped caller.
async fn models(State(gw): State<Gateway>, headers: HeaderMap) -> Response {
    let models = gw.engine.models();
    let anthropic = anthropic_caller(&headers);
    let data: Vec<serde_json::Value> = models.iter().map(|m| model_object(m, anthropic)).collect();
    let body = if anthropic {
        serde_json::json!({
            "data": data,
            "has_more": false,
            "first_id": models.first().map(|m| m.id.clone()),
            "last_id": models.last().map(|m| m.id.clone()),
        })
    } else {
        serde_json::json!({"object": "list", "data": data})
    };
    axum::Json(body).into_response()
}

/// `GET /v1/models/{id}`: the entry `/v1/models` lists under `id`, in the caller's
/// shape; an id it does not list is a 404 in the caller's dialect.
async fn model(
    State(gw): State<Gateway>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let anthropic = anthropic_caller(&headers);
    match gw.engine.model(&id) {
        Some(found) => axum::Json(model_object(&found, anthropic)).into_response(),
        None => error_response(
            if anthropic {
                Dialect::Anthropic
            } else {
                Dialect::OpenAiChat
            },
            &ApiError::new(
                ErrorKind::NotFound,
                format!("model {id:?} is not listed by /v1/models"),
            )
            .with_param("model"),
        ),
    }
}

/// The dialect an error on `path` is written in, for replies made before a handler runs.
fn front_for_path(path: &str) -> Dialect {
    if path.starts_with("/v1/messages") {
        Dialect::Anthropic
    } else if path.starts_with("/api/") {
        Dialect::Ollama
    } else {
        Dialect::OpenAiChat
    }
}

async fn not_found(request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let front = front_for_path(&path);
    let mut response = error_response(
        front,
        &ApiError::new(
            ErrorKind::NotFound,
            format!("no route for {} {path}", request.method()),
        ),
    );
    if request.method() != axum::http::Method::GET && request.method() != axum::http::Method::POST {
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    }
    response
}
