//! The Ollama front beyond `/api/chat`: the endpoints Ollama's own clients (the `ollama`
//! CLI and Python package, Open WebUI, Continue) call to find, describe and prompt a
//! model, answered for the models Glider routes. `/api/generate` is a chat request of
//! one user turn carried through the same door sequence as `/api/chat`, its replies
//! rewritten into generate's shape (`response` for `message.content`), streamed line by
//! line; `/api/show` and `/api/ps` describe each routed model from what its backend's
//! probe learnt (capabilities, context window, loaded or not); `/api/version` is the
//! Ollama API version this front follows. Model management (`pull`, `push`, `create`,
//! `copy`, `delete`) is the backends' business: refused in Ollama's error shape with
//! what to do instead. Every error is Ollama's `{"error": "..."}` with its status.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use glider_ngl::{ApiError, Dialect, ErrorKind};
use serde_json::{Map, Value, json};

use crate::{Gateway, complete, error_response, read_body};

/// The Ollama API version this front follows (tool call ids and `tool_name`, `think`,
/// `/api/ps` `context_length`): what `/api/version` says, so that a client gating a
/// feature on the version finds it.
pub const OLLAMA_API_VERSION: &str = "0.12.0";

/// A date for fields Glider has no value for (`modified_at`, `expires_at`).
const NO_DATE: &str = "1970-01-01T00:00:00Z";

/// `GET /api/version`.
pub(crate) async fn version() -> Response {
    axum::Json(json!({ "version": OLLAMA_API_VERSION })).into_response()
}

/// An error in Ollama's shape.
fn refused(kind: ErrorKind, message: impl Into<String>) -> Response {
    error_response(Dialect::Ollama, &ApiError::new(kind, message))
}

/// `POST /api/pull`, `/api/push`, `/api/create`, `/api/copy`, `DELETE /api/delete`:
/// Glider routes models, it does not manage them.
pub(crate) async fn management(request: Request) -> Response {
    let path = request.uri().path().to_owned();
    refused(
        ErrorKind::Permission,
        format!(
            "{path} is not served: Glider routes requests to the models its backends have, \
             and does not manage models. Run it against the Ollama server itself (for \
             example `OLLAMA_HOST=<backend> ollama pull <model>`); GET /api/tags lists the \
             models Glider routes"
        ),
    )
}

/// The body of a request to this front as a JSON object, or the 400 (or the body-limit
/// refusal) to answer.
async fn json_body(gw: &Gateway, request: Request) -> Result<Map<String, Value>, Response> {
    let (_, body) = read_body(gw, Dialect::Ollama, request).await?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(refused(
            ErrorKind::InvalidRequest,
            "the body must be a JSON object",
        )),
        Err(e) => Err(refused(
            ErrorKind::InvalidRequest,
            format!("invalid JSON body: {e}"),
        )),
    }
}

/// The model a request names (`model`, or the older `name`).
fn named_model(body: &Map<String, Value>) -> Option<&str> {
    body.get("model")
        .or_else(|| body.get("name"))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
}

/// What Glider knows of one routed model, as `/api/show` and `/api/ps` say it.
struct Described {
    id: String,
    /// The backend that serves it (where it is loaded, for `/api/ps`).
    backend: String,
    context_length: Option<u64>,
    capabilities: Vec<&'static str>,
    loaded: bool,
}

/// The routed model `id` (also found as `id` without Ollama's `:latest` tag).
fn describe(gw: &Gateway, id: &str) -> Option<Described> {
    let info = gw.engine.model(id).or_else(|| {
        id.strip_suffix(":latest")
            .and_then(|id| gw.engine.model(id))
    })?;
    Some(described(gw, info))
}

/// What Glider knows of the routed model `info`.
fn described(gw: &Gateway, info: glider_engine::ModelInfo) -> Described {
    let runtime = gw.engine.runtime();
    let target = info.alias_of.clone().unwrap_or_else(|| info.id.clone());
    let backend = runtime.backend(&info.backend);
    let spec = backend.and_then(|backend| backend.effective_spec(&target));
    let probed = info.capabilities.as_ref();
    // The window Glider fits requests to: the model's, the backend's, the server's.
    let context_length = spec
        .as_ref()
        .and_then(|s| s.context_window)
        .or_else(|| backend.and_then(|b| b.config.context_window))
        .or_else(|| probed.and_then(|c| c.context_window));
    let tools = spec.as_ref().and_then(|s| s.tools);
    let vision = spec.as_ref().and_then(|s| s.vision);
    let thinking = spec.as_ref().and_then(|s| s.thinking);
    let mut capabilities = vec!["completion"];
    // A model no one said cannot call tools is offered them, as the router does.
    if tools != Some(false) {
        capabilities.push("tools");
    }
    if vision == Some(true) {
        capabilities.push("vision");
    }
    if thinking == Some(true) {
        capabilities.push("thinking");
    }
    Described {
        id: info.id,
        backend: info.backend,
        context_length,
        capabilities,
        loaded: info.warm == Some(true),
    }
}

/// The `details` object Ollama lists models with (Glider knows no file format or size).
fn details() -> Value {
    json!({"parent_model": "", "format": "", "family": "", "families": null,
           "parameter_size": "", "quantization_level": ""})
}

/// `POST /api/show`: one routed model's capabilities and context length.
pub(crate) async fn show(State(gw): State<Gateway>, request: Request) -> Response {
    let body = match json_body(&gw, request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Some(name) = named_model(&body) else {
        return refused(ErrorKind::InvalidRequest, "model is required");
    };
    let Some(model) = describe(&gw, name) else {
        return refused(
            ErrorKind::NotFound,
            format!("model '{name}' not found: GET /api/tags lists the models Glider routes"),
        );
    };
    let mut model_info = Map::new();
    model_info.insert("general.architecture".into(), json!("glider"));
    if let Some(length) = model.context_length {
        model_info.insert("glider.context_length".into(), json!(length));
    }
    axum::Json(json!({
        "modelfile": "",
        "parameters": "",
        "template": "",
        "details": details(),
        "model_info": model_info,
        "capabilities": model.capabilities,
        "modified_at": NO_DATE,
    }))
    .into_response()
}

/// `GET /api/ps`: the routed models a probed local backend has loaded, each with the
/// backend it is loaded on (`glider.backend`, beside Ollama's own fields).
pub(crate) async fn ps(State(gw): State<Gateway>) -> Response {
    let models: Vec<Value> = gw
        .engine
        .models()
        .into_iter()
        .map(|info| described(&gw, info))
        .filter(|model| model.loaded)
        .map(|model| {
            json!({"name": model.id, "model": model.id, "size": 0, "digest": "",
                   "details": details(), "expires_at": NO_DATE, "size_vram": 0,
                   "context_length": model.context_length.unwrap_or(0),
                   "glider": {"backend": model.backend}})
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

/// `GET /api/tags`: every routed model.
pub(crate) async fn tags(State(gw): State<Gateway>) -> Response {
    let models: Vec<Value> = gw
        .engine
        .models()
        .into_iter()
        .map(|m| {
            json!({"name": m.id, "model": m.id, "modified_at": NO_DATE, "size": 0,
                   "digest": "", "details": details()})
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

/// `POST /api/generate`: a prompt (and optional `system` and `images`) as a chat request
/// of one user turn, its reply in generate's shape. An empty prompt loads the model in
/// Ollama; Glider loads on first use, so it answers `done_reason: "load"` at once.
/// `raw`, `suffix`, `context` and `template` ask for things only Ollama's own prompt
/// handling does, and are refused when they ask for anything.
pub(crate) async fn generate(State(gw): State<Gateway>, request: Request) -> Response {
    let server = &gw.engine.runtime().config.server;
    let (limit, time) = (server.max_body_bytes, server.client_limits().body_read);
    let (mut parts, body) = request.into_parts();
    let body = match glider_door::read_within(body, limit, time).await {
        Ok(body) => body,
        Err(error) => {
            return crate::render::body_refused(
                Dialect::Ollama,
                glider_door::Door::Gateway,
                &error,
            );
        }
    };
    let body = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return refused(ErrorKind::InvalidRequest, "the body must be a JSON object"),
        Err(e) => return refused(ErrorKind::InvalidRequest, format!("invalid JSON body: {e}")),
    };
    let chat = match chat_of_generate(body) {
        Ok(Asked::Chat(chat)) => chat,
        Ok(Asked::Load { model }) => {
            return axum::Json(json!({"model": model, "created_at": now(), "response": "",
                                     "done": true, "done_reason": "load"}))
            .into_response();
        }
        Err(error) => return error_response(Dialect::Ollama, &error),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    let request = Request::from_parts(parts, Body::from(glider_dialects::json_bytes(&chat)));
    let response = complete(gw, Dialect::Ollama, request).await;
    as_generate(response)
}

/// What a generate request asks.
enum Asked {
    /// This chat request.
    Chat(Value),
    /// Only that `model` be loaded (no prompt).
    Load { model: String },
}

/// A generate body as the chat body that asks the same, or the 400 naming the field
/// that cannot be carried.
fn chat_of_generate(mut body: Map<String, Value>) -> Result<Asked, ApiError> {
    let invalid = |param: &str, message: String| {
        ApiError::invalid(format!("{param}: {message}")).with_param(param)
    };
    let model = match body.remove("model") {
        Some(Value::String(model)) if !model.is_empty() => model,
        _ => return Err(invalid("model", "model is required".into())),
    };
    for (field, what) in [
        ("suffix", "fill-in-the-middle"),
        ("context", "continuing from Ollama's token context"),
        ("template", "a prompt template of the caller's"),
    ] {
        match body.remove(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::Array(a)) if a.is_empty() => {}
            Some(_) => {
                return Err(invalid(
                    field,
                    format!(
                        "{what} is not served: Glider sends the prompt as a chat turn, and only \
                         Ollama's own prompt handling can do this; leave {field} out"
                    ),
                ));
            }
        }
    }
    if body.remove("raw").and_then(|raw| raw.as_bool()) == Some(true) {
        return Err(invalid(
            "raw",
            "raw prompts are not served: Glider sends the prompt as a chat turn through the \
             model's chat template; leave raw out"
                .into(),
        ));
    }
    let prompt = match body.remove("prompt") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(prompt)) => prompt,
        Some(_) => return Err(invalid("prompt", "expected a string".into())),
    };
    let images = body.remove("images").filter(|images| !images.is_null());
    if prompt.is_empty() && images.is_none() {
        return Ok(Asked::Load { model });
    }
    let mut messages = Vec::new();
    match body.remove("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(system)) => {
            if !system.is_empty() {
                messages.push(json!({"role": "system", "content": system}));
            }
        }
        Some(_) => return Err(invalid("system", "expected a string".into())),
    }
    let mut user = json!({"role": "user", "content": prompt});
    if let Some(images) = images {
        user["images"] = images;
    }
    messages.push(user);
    // `stream`, `format`, `options`, `think`, `keep_alive` mean the same in both.
    body.insert("model".into(), Value::String(model));
    body.insert("messages".into(), Value::Array(messages));
    Ok(Asked::Chat(Value::Object(body)))
}

/// Ollama's timestamp of now.
fn now() -> String {
    glider_dialects::ollama::rfc3339_now()
}

/// A chat reply (whole or NDJSON lines) rewritten into generate's shape; an error
/// passes as it is (Ollama's error shape is the same for both).
fn as_generate(response: Response) -> Response {
    if !response.status().is_success() {
        return response;
    }
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/x-ndjson"));
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = if streamed {
        Body::from_stream(generate_lines(body))
    } else {
        Body::from_stream(futures_util::stream::once(async move {
            let whole = axum::body::to_bytes(body, usize::MAX).await?;
            Ok::<_, axum::Error>(Bytes::from(generate_line(&whole)))
        }))
    };
    if !streamed {
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Response::from_parts(parts, body)
}

/// The NDJSON lines of a streamed chat reply, each rewritten as it completes.
fn generate_lines(
    body: Body,
) -> impl futures_util::Stream<Item = Result<Bytes, axum::Error>> + Send {
    struct Lines {
        body: axum::body::BodyDataStream,
        pending: Vec<u8>,
        done: bool,
    }
    let state = Lines {
        body: body.into_data_stream(),
        pending: Vec::new(),
        done: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.done {
            return None;
        }
        loop {
            match state.body.next().await {
                Some(Ok(chunk)) => {
                    state.pending.extend_from_slice(&chunk);
                    let Some(end) = state.pending.iter().rposition(|b| *b == b'\n') else {
                        continue;
                    };
                    let complete: Vec<u8> = state.pending.drain(..=end).collect();
                    let mut out = Vec::with_capacity(complete.len());
                    for line in complete.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                        out.extend_from_slice(&generate_line(line));
                        out.push(b'\n');
                    }
                    return Some((Ok(Bytes::from(out)), state));
                }
                Some(Err(error)) => {
                    state.done = true;
                    return Some((Err(error), state));
                }
                None => {
                    state.done = true;
                    let rest = std::mem::take(&mut state.pending);
                    if rest.iter().all(u8::is_ascii_whitespace) {
                        return None;
                    }
                    let mut out = generate_line(&rest);
                    out.push(b'\n');
                    return Some((Ok(Bytes::from(out)), state));
                }
            }
        }
    })
}

/// One chat reply object (a whole reply or a stream line) as generate's: the message's
/// `content` as `response`, its `thinking` as `thinking`, the rest as it was. A line
/// that is not a chat reply object (an error line) is left as it is.
fn generate_line(line: &[u8]) -> Vec<u8> {
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(line) else {
        return line.to_vec();
    };
    let Some(Value::Object(message)) = object.remove("message") else {
        return line.to_vec();
    };
    let content = message.get("content").cloned().unwrap_or(json!(""));
    object.insert("response".into(), content);
    if let Some(thinking) = message.get("thinking").filter(|t| !t.is_null()) {
        object.insert("thinking".into(), thinking.clone());
    }
    serde_json::to_vec(&Value::Object(object)).unwrap_or_else(|_| line.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generate_body_is_a_chat_of_one_turn() {
        let body = json!({"model": "m", "prompt": "hi", "system": "be brief", "stream": false,
                          "options": {"temperature": 0.1}, "images": ["iVBO"]});
        let Ok(Asked::Chat(chat)) = chat_of_generate(body.as_object().cloned().unwrap_or_default())
        else {
            panic!("a chat");
        };
        assert_eq!(
            chat,
            json!({"model": "m", "stream": false, "options": {"temperature": 0.1},
                   "messages": [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hi", "images": ["iVBO"]}]})
        );
    }

    #[test]
    fn an_empty_prompt_loads_and_prompt_handling_fields_are_refused() {
        let load = json!({"model": "m"});
        assert!(matches!(
            chat_of_generate(load.as_object().cloned().unwrap_or_default()),
            Ok(Asked::Load { model }) if model == "m"
        ));
        for (field, value) in [
            ("raw", json!(true)),
            ("suffix", json!("}")),
            ("context", json!([1, 2])),
            ("template", json!("{{ .Prompt }}")),
        ] {
            let mut body = json!({"model": "m", "prompt": "hi"});
            body[field] = value;
            let error = match chat_of_generate(body.as_object().cloned().unwrap_or_default()) {
                Err(error) => error,
                Ok(_) => panic!("{field} refused"),
            };
            assert_eq!(error.param.as_deref(), Some(field));
            assert_eq!(error.kind, ErrorKind::InvalidRequest);
        }
        // Their empty values ask nothing.
        let body = json!({"model": "m", "prompt": "hi", "raw": false, "suffix": "", "context": []});
        assert!(matches!(
            chat_of_generate(body.as_object().cloned().unwrap_or_default()),
            Ok(Asked::Chat(_))
        ));
    }

    #[test]
    fn chat_lines_become_generate_lines() {
        let line = br#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"he","thinking":"hm"},"done":false}"#;
        let out: Value = serde_json::from_slice(&generate_line(line)).unwrap_or_default();
        assert_eq!(
            out,
            json!({"model": "m", "created_at": "t", "response": "he", "thinking": "hm", "done": false})
        );
        let error = br#"{"error":"boom"}"#;
        assert_eq!(generate_line(error), error.to_vec());
    }
}
