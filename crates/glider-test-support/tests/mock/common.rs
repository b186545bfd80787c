//! Helpers shared by the mock's integration tests: a started mock, POST helpers that
//! add Anthropic headers, and SSE / NDJSON parsers.

use glider_test_support::{MockConfig, MockVendor};
use serde_json::Value;

pub async fn mock() -> MockVendor {
    MockVendor::start(MockConfig::default()).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// POST JSON; `/v1/messages*` gets `x-api-key` and `anthropic-version`.
pub async fn post(mock: &MockVendor, path: &str, body: &Value) -> reqwest::Response {
    let mut req = client()
        .post(format!("{}{path}", mock.base_url()))
        .json(body);
    if path.starts_with("/v1/messages") {
        req = req
            .header("x-api-key", "test-key")
            .header("anthropic-version", "2023-06-01");
    }
    req.send().await.expect("request sent")
}

pub async fn post_json(mock: &MockVendor, path: &str, body: &Value) -> (u16, Value) {
    let resp = post(mock, path, body).await;
    let status = resp.status().as_u16();
    let json = resp.json::<Value>().await.expect("JSON body");
    (status, json)
}

pub async fn get_json(mock: &MockVendor, path: &str) -> Value {
    let resp = client()
        .get(format!("{}{path}", mock.base_url()))
        .send()
        .await
        .expect("request sent");
    assert_eq!(resp.status(), 200, "GET {path}");
    resp.json().await.expect("JSON body")
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }
}

pub fn parse_sse(text: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.trim().is_empty() {
            continue;
        }
        let mut event = None;
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event: ") {
                event = Some(e.to_string());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push(d);
            }
        }
        out.push(Sse {
            event,
            data: data.join("\n"),
        });
    }
    out
}

pub fn parse_ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("NDJSON line is JSON"))
        .collect()
}

/// POST and return (status, content-type, body text).
pub async fn post_text(mock: &MockVendor, path: &str, body: &Value) -> (u16, String, String) {
    let resp = post(mock, path, body).await;
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = resp.text().await.expect("body text");
    (status, ct, text)
}
