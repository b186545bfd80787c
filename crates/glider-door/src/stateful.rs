//! Stateful Responses, for both doors (the gateway for every Responses request, the
//! MITM for one it answers locally): a `POST /v1/responses` with
//! `previous_response_id` has the stored chain's items put before its own input (and the
//! id taken out), so every backend — local, or a cloud that never saw the earlier
//! turns — gets the whole conversation; a reply the client asked to store (`store` is
//! true unless it says `false`) is stored before its last byte goes out, so a follow-up
//! finds it; `GET` and `DELETE /v1/responses/{id}` read and delete stored ones, and
//! `GET /v1/responses/{id}/input_items` lists a stored one's input items. With no
//! store (`context.enabled: false`) each of these is a typed error, never a silent loss
//! of the earlier turns.

use std::sync::Arc;

use crate::error_response;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use glider_context::{ChainError, ResponseStore, StoredResponse};
use glider_ngl::{ApiError, Dialect, ErrorKind};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The largest whole (non-streamed) reply read to be stored.
const MAX_STORED_REPLY: usize = 64 * 1024 * 1024;

/// What to store once the reply is made.
pub struct ToStore {
    store: Arc<ResponseStore>,
    previous: Option<String>,
    input: Box<RawValue>,
}

/// The request body to send on, and what to store of its reply (`None`: not stored).
pub struct Prepared {
    pub body: Bytes,
    pub store: Option<ToStore>,
}

/// Expand `previous_response_id` in `body` from `store`. A body that is not a JSON
/// object goes on untouched, for the codec to refuse in the client's dialect.
pub fn prepare(store: Option<&Arc<ResponseStore>>, body: Bytes) -> Result<Prepared, ApiError> {
    let Some(head) = head_of(&body) else {
        return Ok(Prepared { body, store: None });
    };
    let wants_store = head.store != Some(Value::Bool(false));
    let previous = match head.previous_response_id {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id),
        Some(_) => {
            return Err(ApiError::new(
                ErrorKind::InvalidRequest,
                "previous_response_id must be a string",
            )
            .with_param("previous_response_id"));
        }
    };
    if previous.is_none() && !(wants_store && store.is_some()) {
        return Ok(Prepared { body, store: None });
    }
    let own_input = input_array(head.input.as_deref());
    let body = match &previous {
        Some(id) => {
            let store = store.ok_or_else(|| storage_off("previous_response_id"))?;
            let mut items = store.history(id).map_err(|error| chain_error(id, error))?;
            if let Ok(Value::Array(own)) = serde_json::from_str::<Value>(own_input.get()) {
                items.extend(own);
            }
            // The head was read from a JSON object, so the whole one parses too.
            let mut request = serde_json::from_slice::<Map<String, Value>>(&body)
                .map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))?;
            request.remove("previous_response_id");
            request.insert("input".into(), Value::Array(items));
            Bytes::from(glider_dialects::json_bytes(&Value::Object(request)))
        }
        None => body,
    };
    Ok(Prepared {
        body,
        store: store.filter(|_| wants_store).map(|store| ToStore {
            store: store.clone(),
            previous,
            input: own_input,
        }),
    })
}

/// Whether a Responses body continues a stored response (`previous_response_id` set).
/// Bytes are searched first, so a body without the key (Codex's, which resends its
/// history) is never parsed here; one with it has only its [`Head`] read.
pub fn continues(body: &[u8]) -> bool {
    static KEY: glider_dialects::scan::Needle =
        glider_dialects::scan::Needle::new(b"\"previous_response_id\"");
    KEY.occurs_in(body)
        && head_of(body)
            .is_some_and(|head| !matches!(head.previous_response_id, None | Some(Value::Null)))
}

/// The members of a Responses body this module reads. The rest — the tools and the
/// instructions, most of a Codex turn's bytes — is skipped unparsed, and `input` (Codex
/// resends its whole history there) is kept as raw text, built into values only once
/// it is known to be needed.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    store: Option<Value>,
    #[serde(default)]
    previous_response_id: Option<Value>,
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

/// `body`'s [`Head`], if it is a JSON object. One with a member twice (the last one
/// counts, as the codecs read it) is read whole.
fn head_of(body: &[u8]) -> Option<Head> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return None;
    }
    serde_json::from_slice::<Head>(body).ok().or_else(|| {
        let mut whole = serde_json::from_slice::<Map<String, Value>>(body).ok()?;
        Some(Head {
            store: whole.remove("store"),
            previous_response_id: whole.remove("previous_response_id"),
            input: whole
                .remove("input")
                .and_then(|input| serde_json::value::to_raw_value(&input).ok()),
        })
    })
}

/// A request's `input` as a JSON array of items (a plain string is one user message),
/// kept as text: an array (Codex resends its whole history there) is copied, never
/// parsed into values.
fn input_array(input: Option<&RawValue>) -> Box<RawValue> {
    let empty = || RawValue::from_string("[]".to_owned()).expect("an empty array is JSON");
    let Some(raw) = input else {
        return empty();
    };
    match raw.get().trim_start().as_bytes().first() {
        Some(b'[') => raw.to_owned(),
        Some(b'"') => match serde_json::from_str::<String>(raw.get()) {
            Ok(text) => {
                serde_json::value::to_raw_value(&[json!({"role": "user", "content": text})])
                    .unwrap_or_else(|_| empty())
            }
            Err(_) => empty(),
        },
        _ => empty(),
    }
}

fn storage_off(param: &str) -> ApiError {
    ApiError::new(
        ErrorKind::InvalidRequest,
        "this Glider stores no responses (context.enabled is false), so previous responses cannot be continued or read; send the whole conversation in `input`, or turn the context store on",
    )
    .with_param(param)
}

fn chain_error(id: &str, error: ChainError) -> ApiError {
    match error {
        ChainError::NotFound(missing) if missing == id => ApiError::new(
            ErrorKind::InvalidRequest,
            format!("Previous response with id '{id}' not found."),
        ),
        ChainError::NotFound(missing) => ApiError::new(
            ErrorKind::InvalidRequest,
            format!(
                "Previous response with id '{id}' continues response '{missing}', which is no longer stored."
            ),
        ),
        other => ApiError::new(ErrorKind::Internal, other.to_string()),
    }
    .with_param("previous_response_id")
}

/// `response` with its Response object stored on the way out: a whole reply is read,
/// stored, then sent; a stream is stored when its `response.completed` event passes,
/// before that event is sent on.
pub async fn storing(to_store: ToStore, response: Response) -> Response {
    if response.status() != StatusCode::OK {
        return response;
    }
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let (parts, body) = response.into_parts();
    if !streamed {
        let bytes = match axum::body::to_bytes(body, MAX_STORED_REPLY).await {
            Ok(bytes) => bytes,
            Err(error) => {
                return error_response(
                    Dialect::OpenAiResponses,
                    &ApiError::new(ErrorKind::BadGateway, format!("reply broke off: {error}")),
                );
            }
        };
        if let Ok(object) = serde_json::from_slice::<Box<RawValue>>(&bytes) {
            to_store.put(object);
        }
        return Response::from_parts(parts, Body::from(bytes));
    }
    let mut lines = LineBuffer::default();
    let mut to_store = Some(to_store);
    let body = body.into_data_stream().map(move |chunk| {
        if let (Ok(bytes), Some(_)) = (&chunk, &to_store) {
            for line in lines.feed(bytes) {
                if let Some(object) = completed_response(&line)
                    && let Some(to_store) = to_store.take()
                {
                    to_store.put(object);
                }
            }
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

impl ToStore {
    /// Store the Response object `object` (JSON text) under its `id`; one without an
    /// id is not stored.
    fn put(self, object: Box<RawValue>) {
        #[derive(serde::Deserialize)]
        struct Id {
            id: Option<String>,
        }
        let Some(id) = serde_json::from_str::<Id>(object.get())
            .ok()
            .and_then(|head| head.id)
        else {
            return;
        };
        self.store.put(StoredResponse {
            id,
            at_ms: glider_context::now_ms(),
            previous: self.previous,
            input: self.input,
            response: object,
        });
    }
}

/// The Response object of a `response.completed` SSE data line, as text. Other lines
/// (every delta) are passed over by a substring test, never parsed.
fn completed_response(line: &str) -> Option<Box<RawValue>> {
    #[derive(serde::Deserialize)]
    struct Completed<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
        response: Option<Box<RawValue>>,
    }
    let data = line.strip_prefix("data:")?.trim_start();
    if !data.contains("response.completed") {
        return None;
    }
    let event: Completed = serde_json::from_str(data).ok()?;
    (event.kind == "response.completed").then_some(event.response)?
}

/// Whole lines out of a byte stream.
#[derive(Default)]
struct LineBuffer {
    partial: Vec<u8>,
}

impl LineBuffer {
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.partial.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line).trim_end().to_owned());
        }
        lines
    }
}

/// `GET /v1/responses/{id}`: the stored Response object.
pub async fn retrieve(store: Option<Arc<ResponseStore>>, id: String) -> Response {
    let Some(store) = store else {
        return error_response(Dialect::OpenAiResponses, &storage_off("response_id"));
    };
    let lookup = id.clone();
    match tokio::task::spawn_blocking(move || store.get(&lookup)).await {
        Ok(Ok(Some(found))) => (
            [(header::CONTENT_TYPE, "application/json")],
            found.response.get().to_owned(),
        )
            .into_response(),
        Ok(Ok(None)) => error_response(Dialect::OpenAiResponses, &not_found(&id)),
        Ok(Err(error)) => store_failed(error.to_string()),
        Err(error) => store_failed(error.to_string()),
    }
}

/// `DELETE /v1/responses/{id}`: the Responses API's deletion reply.
pub async fn delete(store: Option<Arc<ResponseStore>>, id: String) -> Response {
    let Some(store) = store else {
        return error_response(Dialect::OpenAiResponses, &storage_off("response_id"));
    };
    let target = id.clone();
    match tokio::task::spawn_blocking(move || store.delete(&target)).await {
        Ok(Ok(true)) => {
            axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
        }
        Ok(Ok(false)) => error_response(Dialect::OpenAiResponses, &not_found(&id)),
        Ok(Err(error)) => store_failed(error.to_string()),
        Err(error) => store_failed(error.to_string()),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("Response with id '{id}' not found."),
    )
}

fn store_failed(message: String) -> Response {
    error_response(
        Dialect::OpenAiResponses,
        &ApiError::new(ErrorKind::Internal, format!("stored responses: {message}")),
    )
}

/// The paging of `GET /v1/responses/{id}/input_items`, as the query gave it (text:
/// [`list_input_items`] says in the Responses dialect what is wrong with a value).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct ListParams {
    pub limit: Option<String>,
    pub order: Option<String>,
    pub after: Option<String>,
}

/// Items listed per page unless `limit` says otherwise, and the most it may say.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

/// `GET /v1/responses/{id}/input_items`: the stored response's own input items (the
/// request's `input`; earlier turns are the responses it continued) in OpenAI's list
/// shape (`object: list`, `data`, `first_id`, `last_id`, `has_more`), paged by `limit`
/// (1 to 100, default 20), `order` (`desc`, the default, or `asc`) and `after` (the id
/// of the item the page starts after).
pub async fn list_input_items(
    store: Option<Arc<ResponseStore>>,
    id: String,
    params: ListParams,
) -> Response {
    let Some(store) = store else {
        return error_response(Dialect::OpenAiResponses, &storage_off("response_id"));
    };
    let lookup = id.clone();
    let found = match tokio::task::spawn_blocking(move || store.get(&lookup)).await {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) => return error_response(Dialect::OpenAiResponses, &not_found(&id)),
        Ok(Err(error)) => return store_failed(error.to_string()),
        Err(error) => return store_failed(error.to_string()),
    };
    match list_page(&found, &params) {
        Ok(page) => axum::Json(page).into_response(),
        Err(error) => error_response(Dialect::OpenAiResponses, &error),
    }
}

/// One page of `stored`'s input items.
fn list_page(stored: &StoredResponse, params: &ListParams) -> Result<Value, ApiError> {
    let invalid = |param: &str, message: String| {
        ApiError::new(ErrorKind::InvalidRequest, message).with_param(param)
    };
    let limit = match &params.limit {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                invalid(
                    "limit",
                    format!("limit must be an integer from 1 to {MAX_LIMIT}, not '{text}'"),
                )
            })?,
    };
    let mut items: Vec<Value> = stored
        .input_items()
        .iter()
        .enumerate()
        .map(|(index, item)| listed_item(&stored.id, index, item))
        .collect();
    match params.order.as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => {
            return Err(invalid(
                "order",
                format!("order must be 'asc' or 'desc', not '{other}'"),
            ));
        }
    }
    let start = match &params.after {
        None => 0,
        Some(after) => {
            items
                .iter()
                .position(|item| item.get("id").and_then(Value::as_str) == Some(after))
                .ok_or_else(|| {
                    invalid(
                        "after",
                        format!(
                            "Response '{}' has no input item with id '{after}'.",
                            stored.id
                        ),
                    )
                })?
                + 1
        }
    };
    let rest = items.split_off(start.min(items.len()));
    let has_more = rest.len() > limit;
    let data: Vec<Value> = rest.into_iter().take(limit).collect();
    let id_of = |item: Option<&Value>| item.and_then(|i| i.get("id")).cloned();
    Ok(json!({
        "object": "list",
        "data": data,
        "first_id": id_of(data.first()),
        "last_id": id_of(data.last()),
        "has_more": has_more,
    }))
}

/// An input item as the list shows it: a message with its `type` and its content as
/// parts (a client may send `{"role": "user", "content": "text"}`), and an `id` (the
/// client's, else one made of the response's id and the item's place, stable across
/// reads).
fn listed_item(response_id: &str, index: usize, item: &Value) -> Value {
    let mut item = item.clone();
    let Value::Object(map) = &mut item else {
        return item;
    };
    if !map.contains_key("type") && map.contains_key("role") {
        map.insert("type".into(), "message".into());
    }
    if map.get("type").and_then(Value::as_str) == Some("message")
        && let Some(Value::String(text)) = map.get("content").cloned()
    {
        let kind = match map.get("role").and_then(Value::as_str) {
            Some("assistant") => "output_text",
            _ => "input_text",
        };
        map.insert("content".into(), json!([{"type": kind, "text": text}]));
    }
    if !map.contains_key("id") {
        map.insert("id".into(), format!("{response_id}_input_{index}").into());
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(items: usize) -> StoredResponse {
        StoredResponse {
            id: "resp_1".into(),
            at_ms: 0,
            previous: None,
            input: serde_json::value::to_raw_value(
                &(0..items)
                    .map(|i| json!({"role": "user", "content": format!("turn {i}")}))
                    .collect::<Vec<_>>(),
            )
            .expect("serializes"),
            response: RawValue::from_string(
                r#"{"id": "resp_1", "object": "response", "output": []}"#.into(),
            )
            .expect("JSON"),
        }
    }

    /// The input items `prepare` would store for a request's `input`.
    fn items(input: Option<&RawValue>) -> Value {
        serde_json::from_str(input_array(input).get()).expect("an array")
    }

    fn params(limit: Option<&str>, order: Option<&str>, after: Option<&str>) -> ListParams {
        ListParams {
            limit: limit.map(Into::into),
            order: order.map(Into::into),
            after: after.map(Into::into),
        }
    }

    fn ids(page: &Value) -> Vec<&str> {
        page["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item["id"].as_str())
            .collect()
    }

    #[test]
    fn input_items_are_listed_newest_first_and_paged_after_an_id() {
        let stored = stored(3);
        let page = list_page(&stored, &ListParams::default()).expect("lists");
        assert_eq!(
            ids(&page),
            ["resp_1_input_2", "resp_1_input_1", "resp_1_input_0"]
        );
        assert_eq!(
            page["data"][0],
            json!({"role": "user", "content": [{"type": "input_text", "text": "turn 2"}],
                   "type": "message", "id": "resp_1_input_2"})
        );
        let first = list_page(&stored, &params(Some("2"), Some("asc"), None)).expect("lists");
        assert_eq!(ids(&first), ["resp_1_input_0", "resp_1_input_1"]);
        assert_eq!(
            (
                &first["object"],
                &first["first_id"],
                &first["last_id"],
                &first["has_more"]
            ),
            (
                &json!("list"),
                &json!("resp_1_input_0"),
                &json!("resp_1_input_1"),
                &json!(true)
            )
        );
        let next = list_page(
            &stored,
            &params(Some("2"), Some("asc"), Some("resp_1_input_1")),
        )
        .expect("lists");
        assert_eq!(ids(&next), ["resp_1_input_2"]);
        assert_eq!(next["has_more"], false);
    }

    #[test]
    fn bad_paging_is_a_typed_400_naming_the_parameter() {
        let stored = stored(1);
        for (bad, param) in [
            (params(Some("0"), None, None), "limit"),
            (params(Some("101"), None, None), "limit"),
            (params(None, Some("sideways"), None), "order"),
            (params(None, None, Some("nope")), "after"),
        ] {
            let error = list_page(&stored, &bad).expect_err("refused");
            assert_eq!(
                (error.kind, error.param.as_deref()),
                (ErrorKind::InvalidRequest, Some(param))
            );
        }
    }

    #[test]
    fn the_head_is_read_without_the_rest_and_the_last_duplicate_counts() {
        let head =
            head_of(br#" {"tools": [{"x": 1}], "input": "hi", "store": false}"#).expect("object");
        assert_eq!(head.store, Some(Value::Bool(false)));
        assert_eq!(head.previous_response_id, None);
        assert_eq!(
            items(head.input.as_deref()),
            json!([{"role": "user", "content": "hi"}])
        );
        let twice =
            head_of(br#"{"input": "a", "previous_response_id": null, "input": [{"k": 2}]}"#)
                .expect("object");
        assert_eq!(items(twice.input.as_deref()), json!([{"k": 2}]));
        assert_eq!(items(None), json!([]));
        let number = RawValue::from_string("7".into()).expect("JSON");
        assert_eq!(items(Some(&number)), json!([]), "neither items nor text");
        assert!(matches!(
            twice.previous_response_id,
            None | Some(Value::Null)
        ));
        assert!(head_of(br#"["store", null, "input"]"#).is_none());
        assert!(head_of(b"{not json").is_none());
    }

    #[test]
    fn only_a_completed_event_yields_the_response_and_its_text_is_kept_as_sent() {
        let completed = r#"data: {"type":"response.completed","response":{"id":"resp_9","output":[{"type":"message"}]}}"#;
        assert_eq!(
            completed_response(completed).map(|raw| raw.get().to_owned()),
            Some(r#"{"id":"resp_9","output":[{"type":"message"}]}"#.to_owned())
        );
        let delta = r#"data: {"type":"response.output_text.delta","delta":"response.completed"}"#;
        assert!(completed_response(delta).is_none(), "a delta naming it");
        assert!(completed_response("event: response.completed").is_none());
        assert!(completed_response(r#"data: {"type":"response.completed""#).is_none());
    }

    #[test]
    fn a_body_with_nothing_to_expand_or_store_goes_on_untouched() {
        let body = Bytes::from_static(br#"{"model": "gpt-4.1",  "input": "hi"}"#);
        let prepared = prepare(None, body.clone()).expect("prepared");
        assert_eq!(prepared.body, body);
        assert!(prepared.store.is_none());
        let error = match prepare(
            None,
            Bytes::from_static(br#"{"previous_response_id": "r1"}"#),
        ) {
            Err(error) => error,
            Ok(_) => panic!("no store to continue from"),
        };
        assert_eq!(error.param.as_deref(), Some("previous_response_id"));
    }
}
