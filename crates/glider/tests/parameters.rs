//! The parameter rule end to end (docs/translation.md, "The rule"): a request
//! parameter is honoured, forwarded to a backend that answers for itself, or refused
//! with a typed 400 in the caller's dialect that names it. Each case runs over real
//! HTTP through the gateway to the faithful mocks, front × every backend × streamed and
//! not: Chat Completions' `n`, `logprobs` and `top_logprobs`, the usage chunk only when
//! `stream_options.include_usage` asks for it, Anthropic `document` blocks (text carried,
//! PDF refused), a forced `tool_choice` (refused to Ollama, which cannot enforce it), and
//! the Ollama front's endpoints beyond `/api/chat`.

mod common;

use common::*;
use serde_json::{Value, json};

/// Every backend of the shared mock, with whether it speaks Chat Completions (and so
/// gets a Chat client's own fields verbatim).
const CHAT_BACKENDS: [&str; 2] = ["m-vllm", "m-openai"];

async fn setup() -> (glider_test_support::MockVendor, Gateway) {
    let (mock, yaml) = mock_and_config("").await;
    let gateway = gateway(&yaml).await;
    (mock, gateway)
}

fn chat_body(model: &str, stream: bool, extra: &Value) -> Value {
    let mut body = json!({"model": model, "stream": stream, "max_tokens": 50,
                          "messages": [{"role": "user", "content": "hello there"}]});
    for (key, value) in extra.as_object().into_iter().flatten() {
        body[key] = value.clone();
    }
    body
}

/// The SSE `data:` payloads of a reply, `[DONE]` left out.
fn sse_chunks(reply: &Reply) -> Vec<Value> {
    reply
        .text()
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("chunk JSON"))
        .collect()
}

#[tokio::test]
async fn chat_only_parameters_are_forwarded_to_chat_backends_and_refused_elsewhere() {
    let (mock, gw) = setup().await;
    for (extra, param) in [
        (json!({"n": 2}), "n"),
        (json!({"logprobs": true}), "logprobs"),
        (json!({"logprobs": true, "top_logprobs": 2}), "logprobs"),
        (json!({"frequency_penalty": 0.5}), "frequency_penalty"),
    ] {
        for (model, _) in BACKENDS {
            for stream in [false, true] {
                let leg = format!("{extra} → {model}, stream={stream}");
                mock.clear_requests();
                let reply = post_json(
                    &gw.base,
                    "/v1/chat/completions",
                    &chat_body(model, stream, &extra),
                )
                .await;
                if CHAT_BACKENDS.contains(&model) {
                    assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
                    let seen = mock.requests();
                    assert_eq!(seen.len(), 1, "{leg}");
                    assert_eq!(seen[0].body[param], extra[param], "{leg}: forwarded");
                } else {
                    assert_eq!(reply.status, 400, "{leg}: {}", reply.text());
                    let error = &reply.json()["error"];
                    assert_eq!(error["type"], "invalid_request_error", "{leg}");
                    assert_eq!(error["param"], param, "{leg}");
                    assert!(
                        error["message"].as_str().is_some_and(|m| m.contains(param)),
                        "{leg}: {error}"
                    );
                    assert!(mock.requests().is_empty(), "{leg}: nothing sent");
                }
            }
        }
    }
    // Their default values ask for nothing: honoured by every backend.
    for (model, _) in BACKENDS {
        let extra = json!({"n": 1, "logprobs": false, "presence_penalty": 0});
        let reply = post_json(
            &gw.base,
            "/v1/chat/completions",
            &chat_body(model, false, &extra),
        )
        .await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.text());
    }
}

#[tokio::test]
async fn a_forced_tool_choice_is_refused_to_ollama_and_carried_by_the_rest() {
    let (mock, gw) = setup().await;
    let tools = json!([{"type": "function",
                        "function": {"name": "t", "parameters": {"type": "object"}}}]);
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "t"}}),
    ] {
        let extra = json!({"tools": tools, "tool_choice": choice});
        for (model, _) in BACKENDS {
            for stream in [false, true] {
                let leg = format!("{choice} → {model}, stream={stream}");
                mock.clear_requests();
                let reply = post_json(
                    &gw.base,
                    "/v1/chat/completions",
                    &chat_body(model, stream, &extra),
                )
                .await;
                if model == "m-ollama" {
                    assert_eq!(reply.status, 400, "{leg}: {}", reply.text());
                    let error = &reply.json()["error"];
                    assert_eq!(error["param"], "tool_choice", "{leg}: {error}");
                    assert!(mock.requests().is_empty(), "{leg}: nothing sent");
                } else {
                    assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
                    let seen = mock.requests();
                    assert_eq!(seen.len(), 1, "{leg}");
                    assert!(
                        !seen[0].body["tool_choice"].is_null(),
                        "{leg}: the choice is sent: {}",
                        seen[0].body
                    );
                }
            }
        }
    }
    // `auto` is Ollama's own behaviour: honoured.
    let extra = json!({"tools": tools, "tool_choice": "auto"});
    let reply = post_json(
        &gw.base,
        "/v1/chat/completions",
        &chat_body("m-ollama", false, &extra),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test]
async fn a_refused_candidate_gives_way_to_one_that_carries_the_parameter() {
    // Two backends list the model: Ollama first, the OpenAI-compatible one as its
    // backup. `n` goes to the backup, which carries it.
    let mock =
        glider_test_support::MockVendor::start(glider_test_support::MockConfig::default()).await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: ollama, type: ollama, base_url: '{url}', models: [m-shared]}}\n\
         \x20 - {{name: vllm, type: vllm, base_url: '{url}/v1', models: [m-shared]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    let gw = gateway(&yaml).await;
    let reply = post_json(
        &gw.base,
        "/v1/chat/completions",
        &chat_body("m-shared", false, &json!({})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.header("x-glider-route").contains("backend=ollama"),
        "Ollama is tried first: {}",
        reply.header("x-glider-route")
    );
    mock.clear_requests();
    let reply = post_json(
        &gw.base,
        "/v1/chat/completions",
        &chat_body("m-shared", false, &json!({"n": 2})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.header("x-glider-route").contains("backend=vllm"),
        "{}",
        reply.header("x-glider-route")
    );
    let seen = mock.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].body["n"], 2);
}

#[tokio::test]
async fn the_usage_chunk_comes_only_when_asked() {
    let (_mock, gw) = setup().await;
    for (model, _) in BACKENDS {
        for asked in [None, Some(false), Some(true)] {
            let extra = match asked {
                Some(include) => json!({"stream_options": {"include_usage": include}}),
                None => json!({}),
            };
            let leg = format!("{model}, include_usage={asked:?}");
            let reply = post_json(
                &gw.base,
                "/v1/chat/completions",
                &chat_body(model, true, &extra),
            )
            .await;
            assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
            assert!(reply.text().ends_with("data: [DONE]\n\n"), "{leg}");
            let chunks = sse_chunks(&reply);
            let empty: Vec<&Value> = chunks
                .iter()
                .filter(|c| c["choices"].as_array().is_some_and(Vec::is_empty))
                .collect();
            if asked == Some(true) {
                assert_eq!(empty.len(), 1, "{leg}: {}", reply.text());
                assert!(
                    empty[0]["usage"]["prompt_tokens"].as_u64() > Some(0),
                    "{leg}"
                );
                assert_eq!(
                    chunks.last().map(|c| &c["choices"]),
                    Some(&json!([])),
                    "{leg}: the usage chunk is last"
                );
            } else {
                // The OpenAI docs' loop: `chunk.choices[0].delta.content` on every chunk.
                assert!(empty.is_empty(), "{leg}: {}", reply.text());
                assert!(
                    chunks.iter().all(|c| c["choices"][0]["delta"].is_object()),
                    "{leg}"
                );
            }
        }
    }
}

fn anthropic_body(model: &str, stream: bool, block: Value) -> Value {
    json!({"model": model, "max_tokens": 50, "stream": stream, "messages": [
        {"role": "user", "content": [block, {"type": "text", "text": "what colour is the sky?"}]}
    ]})
}

#[tokio::test]
async fn a_text_document_reaches_every_backend_and_a_pdf_only_anthropic() {
    let (mock, gw) = setup().await;
    let text = json!({"type": "document", "title": "facts",
        "source": {"type": "text", "media_type": "text/plain", "data": "the sky is green"}});
    let pdf = json!({"type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}});
    for (model, _) in BACKENDS {
        for stream in [false, true] {
            let leg = format!("{model}, stream={stream}");
            mock.clear_requests();
            let reply = post_json(
                &gw.base,
                "/v1/messages",
                &anthropic_body(model, stream, text.clone()),
            )
            .await;
            assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
            let seen = mock.requests();
            assert_eq!(seen.len(), 1, "{leg}");
            assert!(
                String::from_utf8_lossy(&seen[0].raw_body).contains("the sky is green"),
                "{leg}: the document's text reached the backend: {}",
                seen[0].body
            );

            mock.clear_requests();
            let reply = post_json(
                &gw.base,
                "/v1/messages",
                &anthropic_body(model, stream, pdf.clone()),
            )
            .await;
            if model == "m-anthropic" {
                assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
                assert_eq!(
                    mock.requests()[0].body["messages"][0]["content"][0],
                    pdf,
                    "{leg}: forwarded"
                );
            } else {
                assert_eq!(reply.status, 400, "{leg}: {}", reply.text());
                let body = reply.json();
                assert_eq!(body["type"], "error", "{leg}: Anthropic's shape");
                assert_eq!(body["error"]["type"], "invalid_request_error", "{leg}");
                let message = body["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.starts_with("messages[0].content[0]") && message.contains("document"),
                    "{leg}: {message}"
                );
                assert!(mock.requests().is_empty(), "{leg}: nothing sent");
            }
        }
    }
}

#[tokio::test]
async fn the_ollama_front_answers_generate_show_ps_and_version() {
    let (mock, gw) = setup().await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    // /api/version: a plain semver.
    let version: Value = client
        .get(format!("{}/api/version", gw.base))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    let version = version["version"].as_str().unwrap_or_default().to_owned();
    assert!(
        version.split('.').count() == 3 && version.split('.').all(|n| n.parse::<u32>().is_ok()),
        "{version}"
    );

    // /api/generate, translated to every backend, streamed and not.
    for (model, _) in BACKENDS {
        for stream in [false, true] {
            let leg = format!("{model}, stream={stream}");
            let reply = post_json(
                &gw.base,
                "/api/generate",
                &json!({"model": model, "prompt": "hello there", "system": "be brief", "stream": stream}),
            )
            .await;
            assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
            let lines: Vec<Value> = reply
                .text()
                .lines()
                .map(|l| serde_json::from_str(l).expect("JSON line"))
                .collect();
            assert_eq!(lines.len() > 1, stream, "{leg}: {}", reply.text());
            let text: String = lines
                .iter()
                .map(|l| l["response"].as_str().expect("a response field"))
                .collect();
            assert!(text.contains("echo: hello there"), "{leg}: {text}");
            assert!(lines.iter().all(|l| l.get("message").is_none()), "{leg}");
            let last = lines.last().expect("a line");
            assert_eq!(last["done"], true, "{leg}");
            assert_eq!(last["done_reason"], "stop", "{leg}");
        }
    }
    // An empty prompt loads the model, as Ollama answers it.
    mock.clear_requests();
    let load = post_json(&gw.base, "/api/generate", &json!({"model": "m-ollama"})).await;
    assert_eq!(load.json()["done_reason"], "load");
    assert!(mock.requests().is_empty());
    // Prompt handling only Ollama does is refused, naming the field.
    let raw = post_json(
        &gw.base,
        "/api/generate",
        &json!({"model": "m-ollama", "prompt": "x", "raw": true}),
    )
    .await;
    assert_eq!(raw.status, 400);
    assert!(
        raw.json()["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("raw"))
    );

    // /api/show for a routed model, a 404 in Ollama's shape for another.
    let show = post_json(&gw.base, "/api/show", &json!({"model": "m-ollama"})).await;
    assert_eq!(show.status, 200, "{}", show.text());
    let show = show.json();
    let capabilities = show["capabilities"].as_array().expect("capabilities");
    assert!(capabilities.contains(&json!("completion")), "{show}");
    assert!(show["model_info"].is_object(), "{show}");
    let missing = post_json(&gw.base, "/api/show", &json!({"model": "nope"})).await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"].is_string());

    // /api/ps: only what a probed backend has loaded (nothing was probed here).
    let ps: Value = client
        .get(format!("{}/api/ps", gw.base))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    assert_eq!(ps, json!({"models": []}));

    // Model management is the backends' business.
    for path in ["/api/pull", "/api/push", "/api/create", "/api/copy"] {
        let reply = post_json(&gw.base, path, &json!({"model": "m-ollama"})).await;
        assert_eq!(reply.status, 403, "{path}");
        assert!(
            reply.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("does not manage models")),
            "{path}: {}",
            reply.text()
        );
    }
    let delete = client
        .delete(format!("{}/api/delete", gw.base))
        .body(r#"{"model":"m-ollama"}"#)
        .send()
        .await
        .expect("answers");
    assert_eq!(delete.status().as_u16(), 403);
}

#[tokio::test]
async fn an_image_a_local_model_cannot_see_is_dropped_with_a_warning_header() {
    let (mock, yaml) = mock_and_config("").await;
    // The vLLM model is declared able to see images; the Ollama one is not known to.
    let yaml = yaml.replace("models: [m-vllm]", "models: [{name: m-vllm, vision: true}]");
    let gw = gateway(&yaml).await;
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
        "data": glider_test_support::conformance::PNG_BASE64}});
    for (model, _) in BACKENDS {
        for stream in [false, true] {
            let leg = format!("{model}, stream={stream}");
            mock.clear_requests();
            let reply = post_json(
                &gw.base,
                "/v1/messages",
                &anthropic_body(model, stream, image.clone()),
            )
            .await;
            assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
            let warning = reply.header("x-glider-warning");
            let sent = String::from_utf8_lossy(&mock.requests()[0].raw_body).into_owned();
            if model == "m-ollama" {
                assert!(warning.contains("1 images replaced"), "{leg}: {warning:?}");
                assert!(
                    !sent.contains(glider_test_support::conformance::PNG_BASE64),
                    "{leg}"
                );
            } else {
                assert_eq!(warning, "", "{leg}");
                assert!(
                    sent.contains(glider_test_support::conformance::PNG_BASE64),
                    "{leg}"
                );
            }
        }
    }
}

#[tokio::test]
async fn embeddings_on_every_front_come_from_the_model_s_backend() {
    use glider_test_support::embed::vector_of;
    let (mock, gw) = setup().await;
    let texts = ["fn main() {}", "struct Glider;"];
    for (model, _) in BACKENDS {
        mock.clear_requests();
        let openai = post_json(
            &gw.base,
            "/v1/embeddings",
            &json!({"model": model, "input": texts}),
        )
        .await;
        let ollama = post_json(
            &gw.base,
            "/api/embed",
            &json!({"model": model, "input": texts}),
        )
        .await;
        let legacy = post_json(
            &gw.base,
            "/api/embeddings",
            &json!({"model": model, "prompt": texts[0]}),
        )
        .await;
        if model == "m-anthropic" {
            for (reply, front) in [
                (&openai, "openai"),
                (&ollama, "ollama"),
                (&legacy, "legacy"),
            ] {
                assert_eq!(reply.status, 400, "{model} {front}: {}", reply.text());
                assert!(
                    reply.text().contains("no embeddings"),
                    "{front}: {}",
                    reply.text()
                );
            }
            assert_eq!(openai.json()["error"]["param"], "model");
            assert!(mock.requests().is_empty());
            continue;
        }
        assert_eq!(openai.status, 200, "{model}: {}", openai.text());
        let openai = openai.json();
        assert_eq!(openai["object"], "list");
        for (at, text) in texts.iter().enumerate() {
            assert_eq!(openai["data"][at]["index"], at, "{model}");
            assert_eq!(
                openai["data"][at]["embedding"],
                json!(vector_of(text)),
                "{model}"
            );
            assert_eq!(
                ollama.json()["embeddings"][at],
                json!(vector_of(text)),
                "{model}"
            );
        }
        assert!(
            openai["usage"]["prompt_tokens"].as_u64() > Some(0),
            "{model}"
        );
        assert_eq!(
            legacy.json()["embedding"],
            json!(vector_of(texts[0])),
            "{model}"
        );
        let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
        let expected = if model == "m-ollama" {
            "/api/embed"
        } else {
            "/v1/embeddings"
        };
        assert_eq!(paths, [expected; 3], "{model}");
    }
    // Unknown models and options a backend cannot honour: typed 4xx naming them.
    let unknown = post_json(
        &gw.base,
        "/api/embed",
        &json!({"model": "nope", "input": "x"}),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"].is_string());
    // The OpenAI SDKs' default: base64 of little-endian f32s.
    let base64 = post_json(
        &gw.base,
        "/v1/embeddings",
        &json!({"model": "m-vllm", "input": "abc", "encoding_format": "base64"}),
    )
    .await;
    // vector_of("abc") = [3, 294, 1]: 00 00 40 40, 00 00 93 43, 00 00 80 3f.
    assert_eq!(base64.json()["data"][0]["embedding"], "AABAQAAAk0MAAIA/");
    let dims = post_json(
        &gw.base,
        "/v1/embeddings",
        &json!({"model": "m-vllm", "input": "x", "dimensions": 8}),
    )
    .await;
    assert_eq!(dims.status, 400);
    assert_eq!(dims.json()["error"]["param"], "dimensions");
}

#[tokio::test]
async fn vision_is_learned_from_llama_cpp_props() {
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
        "data": glider_test_support::conformance::PNG_BASE64}});
    for vision in [true, false] {
        // An OpenAI-compatible server with one model, not marked `vision` in the config:
        // only its /props says whether it sees images.
        let mock = glider_test_support::MockVendor::start(glider_test_support::MockConfig {
            models: vec!["m-vllm".into()],
            llama_props_vision: Some(vision),
            ..glider_test_support::MockConfig::default()
        })
        .await;
        let url = mock.base_url();
        let yaml = format!(
            "backends:\n\
             \x20 - {{name: vllm, type: vllm, base_url: '{url}/v1', models: [m-vllm]}}\n\
             routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
        );
        let gw = gateway(&yaml).await;
        gw.engine.probe_all().await;
        // The probe found the model served: /api/ps says where it is loaded.
        let ps = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client")
            .get(format!("{}/api/ps", gw.base))
            .send()
            .await
            .expect("answers")
            .json::<Value>()
            .await
            .expect("json");
        assert_eq!(ps["models"][0]["model"], "m-vllm", "{ps}");
        assert_eq!(ps["models"][0]["glider"]["backend"], "vllm", "{ps}");
        assert_eq!(ps["models"][0]["context_length"], 4096, "{ps}");
        let shown = post_json(&gw.base, "/api/show", &json!({"model": "m-vllm"})).await;
        let capabilities = shown.json()["capabilities"].clone();
        assert_eq!(
            capabilities
                .as_array()
                .is_some_and(|c| c.contains(&json!("vision"))),
            vision,
            "{capabilities}"
        );
        mock.clear_requests();
        let reply = post_json(
            &gw.base,
            "/v1/messages",
            &anthropic_body("m-vllm", false, image.clone()),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let sent = mock
            .requests()
            .iter()
            .find(|r| r.path == "/v1/chat/completions")
            .map(|r| String::from_utf8_lossy(&r.raw_body).into_owned())
            .unwrap_or_default();
        let kept = sent.contains(glider_test_support::conformance::PNG_BASE64);
        assert_eq!(kept, vision, "vision {vision}: {sent}");
        assert_eq!(
            reply.header("x-glider-warning").contains("images replaced"),
            !vision,
            "vision {vision}"
        );
    }
}

#[tokio::test]
async fn what_only_a_vendor_cloud_serves_is_refused_to_a_local_server_of_its_dialect() {
    // llama-server's own /v1/messages: the Anthropic dialect, on the user's machine.
    let mock = glider_test_support::MockVendor::start(glider_test_support::MockConfig {
        anthropic_keyless: true,
        ..glider_test_support::MockConfig::default()
    })
    .await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: llama, type: anthropic, local: true, base_url: '{url}', models: [m-local]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    let gw = gateway(&yaml).await;
    for stream in [false, true] {
        let mut body = anthropic_body("m-local", stream, json!({"type": "text", "text": "hi"}));
        let plain = post_json(&gw.base, "/v1/messages", &body).await;
        assert_eq!(plain.status, 200, "{}", plain.text());
        body["container"] = json!("container_1");
        mock.clear_requests();
        let refused = post_json(&gw.base, "/v1/messages", &body).await;
        assert_eq!(refused.status, 400, "stream={stream}: {}", refused.text());
        let message = refused.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.starts_with("container"), "{message}");
        assert!(mock.requests().is_empty(), "nothing sent");
    }
}
