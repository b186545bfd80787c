//! Stateful Responses on the gateway over real HTTP: a stored response continued with
//! `previous_response_id` reaches a backend of another dialect (the mock's Ollama) with
//! the earlier turns, streamed and not; GET and DELETE `/v1/responses/{id}`, GET
//! `/v1/responses/{id}/input_items` with OpenAI's paging; and, with no
//! store, typed 400s in the Responses error shape and nothing sent.

mod common;

use std::sync::Arc;

use common::*;
use glider_context::ResponseStore;
use serde_json::{Value, json};

async fn get(base: &str, method: reqwest::Method, path: &str) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let response = client
        .request(method, format!("{base}{path}"))
        .send()
        .await
        .expect("gateway answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

/// The Response object of a reply, streamed (its `response.completed` event) or not.
fn response_object(reply: &Reply) -> Value {
    let text = reply.text();
    if !text.starts_with('{') {
        return text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|e| e["type"] == "response.completed")
            .map(|e| e["response"].clone())
            .unwrap_or_else(|| panic!("no response.completed in {text}"));
    }
    reply.json()
}

#[tokio::test]
async fn previous_response_id_sends_the_stored_turns_and_get_delete_serve_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(ResponseStore::start(dir.path(), 64).expect("store"));
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway_with_responses(&yaml, store).await;
    for stream in [false, true] {
        mock.clear_requests();
        let first = post_json(
            &gw.base,
            "/v1/responses",
            &json!({"model": "m-ollama", "input": "my name is Ada", "stream": stream}),
        )
        .await;
        assert_eq!(first.status, 200, "{}", first.text());
        let first = response_object(&first);
        let id = first["id"].as_str().expect("an id").to_owned();
        let second = post_json(
            &gw.base,
            "/v1/responses",
            &json!({"model": "m-ollama", "input": "what is my name?", "stream": stream,
                    "previous_response_id": id}),
        )
        .await;
        assert_eq!(second.status, 200, "{}", second.text());
        let sent = mock.requests();
        let messages: Vec<(String, String)> = sent[1].body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or_default().to_owned(),
                    m["content"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let said = |role: &str, text: &str| (role.to_owned(), text.to_owned());
        assert_eq!(
            messages,
            [
                said("user", "my name is Ada"),
                said("assistant", "echo: my name is Ada"),
                said("user", "what is my name?"),
            ],
            "stream={stream}"
        );

        let (status, got) = get(
            &gw.base,
            reqwest::Method::GET,
            &format!("/v1/responses/{id}"),
        )
        .await;
        assert_eq!((status, &got["id"]), (200, &json!(id)));
        assert_eq!(got["output"], first["output"]);
        let (status, deleted) = get(
            &gw.base,
            reqwest::Method::DELETE,
            &format!("/v1/responses/{id}"),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            deleted,
            json!({"id": id, "object": "response", "deleted": true})
        );
        let (status, gone) = get(
            &gw.base,
            reqwest::Method::GET,
            &format!("/v1/responses/{id}"),
        )
        .await;
        assert_eq!(status, 404, "{gone}");
        assert_eq!(gone["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn without_a_store_previous_response_id_is_a_typed_400_and_nothing_is_sent() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let reply = post_json(
        &gw.base,
        "/v1/responses",
        &json!({"model": "m-ollama", "input": "next", "previous_response_id": "resp_1"}),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error = &reply.json()["error"];
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["param"], "previous_response_id");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("context.enabled is false"),
        "{error}"
    );
    assert!(
        mock.requests().is_empty(),
        "nothing sent without its history"
    );
    let (status, body) = get(&gw.base, reqwest::Method::GET, "/v1/responses/resp_1").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = get(
        &gw.base,
        reqwest::Method::GET,
        "/v1/responses/resp_1/input_items",
    )
    .await;
    assert_eq!(
        (status, &body["error"]["param"]),
        (400, &json!("response_id")),
        "{body}"
    );
}

#[tokio::test]
async fn input_items_lists_a_stored_response_s_input_in_openai_s_list_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(ResponseStore::start(dir.path(), 64).expect("store"));
    let (_mock, yaml) = mock_and_config("").await;
    let gw = gateway_with_responses(&yaml, store).await;
    let input = json!([
        {"role": "user", "content": "one"},
        {"type": "message", "role": "user", "id": "msg_client", "content": [{"type": "input_text", "text": "two"}]},
        {"role": "user", "content": "three"},
    ]);
    let reply = post_json(
        &gw.base,
        "/v1/responses",
        &json!({"model": "m-ollama", "input": input}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let id = reply.json()["id"].as_str().expect("an id").to_owned();
    let ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|item| {
                item["id"]
                    .as_str()
                    .expect("every item has an id")
                    .to_owned()
            })
            .collect()
    };
    // Newest first by default, as OpenAI lists them.
    let (status, page) = get(
        &gw.base,
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["object"], "list");
    assert_eq!(page["has_more"], false);
    let newest_first = ids(&page);
    assert_eq!(newest_first.len(), 3);
    assert_eq!(
        newest_first[1], "msg_client",
        "a client's own item id is kept"
    );
    assert_eq!(
        page["data"][0]["content"],
        json!([{"type": "input_text", "text": "three"}])
    );
    assert_eq!(page["data"][0]["type"], "message");
    assert_eq!(
        (&page["first_id"], &page["last_id"]),
        (&json!(newest_first[0]), &json!(newest_first[2]))
    );
    // Oldest first, two at a time, then the page after the last id.
    let (_, first) = get(
        &gw.base,
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items?order=asc&limit=2"),
    )
    .await;
    assert_eq!(
        ids(&first),
        [newest_first[2].clone(), newest_first[1].clone()]
    );
    assert_eq!(first["has_more"], true);
    let last = first["last_id"].as_str().expect("last_id");
    let (_, next) = get(
        &gw.base,
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items?order=asc&limit=2&after={last}"),
    )
    .await;
    assert_eq!(ids(&next), [newest_first[0].clone()]);
    assert_eq!(next["has_more"], false);
    // Bad paging and unknown ids: the Responses error shape.
    let (status, body) = get(
        &gw.base,
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items?limit=500"),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["param"]),
        (400, &json!("limit")),
        "{body}"
    );
    let (status, body) = get(
        &gw.base,
        reqwest::Method::GET,
        "/v1/responses/resp_unknown/input_items",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}
