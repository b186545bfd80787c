//! Responses request codec's unit tests: decoding clients' bodies, encoding for a backend, and the 400s for bodies that break the shape.

use glider_ngl::{
    Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part, Request, Role,
    ThinkingConfig, ToolChoice, ToolDef, Turn,
};
use serde_json::{Value, json};

use crate::openai_responses::fixtures::{codec, text};

fn decode(body: &Value) -> Request {
    codec()
        .decode_request(body.to_string().as_bytes())
        .expect("valid request")
}

/// A request as Codex CLI sends it (`wire_api = "responses"`, ChatGPT-less provider).
fn codex_request() -> Value {
    json!({
        "model": "gpt-5-codex",
        "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI on a user's computer.",
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<permissions instructions>\nFilesystem sandboxing: workspace-write.\n</permissions instructions>"}
            ]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nRun cargo test.\n</INSTRUCTIONS>"},
                {"type": "input_text", "text": "<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n</environment_context>"}
            ]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Fix the failing test in src/lib.rs"}
            ]},
            {"type": "reasoning", "summary": [
                {"type": "summary_text", "text": "**Inspecting the test**"},
                {"type": "summary_text", "text": "**Planning the fix**"}
            ], "content": null, "encrypted_content": "gAAAAABo-enc-1"},
            {"type": "function_call", "name": "shell",
             "arguments": "{\"command\":[\"bash\",\"-lc\",\"cargo test\"],\"workdir\":\"/repo\"}",
             "call_id": "call_A1"},
            {"type": "function_call_output", "call_id": "call_A1",
             "output": "Exit code: 101\nWall time: 2.1 seconds\nOutput:\ntest tests::adds ... FAILED"},
            {"type": "custom_tool_call", "status": "completed", "call_id": "call_B2", "name": "apply_patch",
             "input": "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-    a - b\n+    a + b\n*** End Patch\n"},
            {"type": "custom_tool_call_output", "call_id": "call_B2",
             "output": "Success. Updated the following files:\nM src/lib.rs\n"},
            {"type": "web_search_call", "status": "completed",
             "action": {"type": "search", "query": "rust assert_eq"}},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "Fixed the sign in `add`."}
            ]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Thanks! Now run the tests again."}
            ]}
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
             "strict": false,
             "parameters": {"type": "object", "properties": {
                 "command": {"type": "array", "items": {"type": "string"}},
                 "workdir": {"type": "string"}
             }, "required": ["command"], "additionalProperties": false}},
            {"type": "custom", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}},
            {"type": "web_search"},
            {"type": "namespace", "name": "mcp__github", "description": "GitHub MCP server tools",
             "tools": [{"type": "function", "name": "get_issue", "description": "Get an issue",
                        "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}}}]}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a7c2-4d1e-7b40-9c8e-3f2a1b0c9d8e",
        "text": {"verbosity": "low"}
    })
}

#[test]
fn decodes_a_codex_request() {
    let req = decode(&codex_request());
    assert_eq!(req.model, "gpt-5-codex");
    assert!(req.stream);
    assert_eq!(req.parallel_tool_calls, Some(false));
    assert_eq!(req.tool_choice, Some(ToolChoice::Auto));
    assert_eq!(req.max_tokens, None);
    assert_eq!(
        req.thinking,
        Some(ThinkingConfig {
            budget_tokens: None,
            effort: Some("medium".into())
        })
    );

    let roles: Vec<Role> = req.turns.iter().map(|t| t.role).collect();
    use Role::*;
    assert_eq!(
        roles,
        vec![
            System, System, User, User, Assistant, Tool, Assistant, Tool, Assistant, User
        ]
    );
    assert!(req.turns[0].plain_text().starts_with("You are Codex"));
    assert!(req.turns[1].plain_text().contains("workspace-write"));
    assert_eq!(req.turns[2].parts.len(), 2);
    assert_eq!(
        req.turns[4].parts,
        vec![
            Part::Thinking {
                text: "**Inspecting the test**\n\n**Planning the fix**".into(),
                signature: Some("gAAAAABo-enc-1".into()),
                redacted: None,
            },
            Part::ToolCall {
                id: "call_A1".into(),
                name: "shell".into(),
                arguments: json!({"command": ["bash", "-lc", "cargo test"], "workdir": "/repo"}),
            },
        ]
    );
    let Part::ToolResult {
        call_id,
        name,
        content,
        is_error,
    } = &req.turns[5].parts[0]
    else {
        panic!("tool result expected");
    };
    assert_eq!(call_id, "call_A1");
    assert_eq!(name.as_deref(), Some("shell"));
    assert!(!is_error);
    assert!(
        Turn {
            role: Tool,
            parts: content.clone()
        }
        .plain_text()
        .contains("FAILED")
    );
    assert_eq!(
        req.turns[6].parts,
        vec![Part::ToolCall {
            id: "call_B2".into(),
            name: "apply_patch".into(),
            arguments: json!(
                "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-    a - b\n+    a + b\n*** End Patch\n"
            ),
        }]
    );
    assert!(matches!(
        &req.turns[7].parts[0],
        Part::ToolResult { call_id, name: Some(n), .. } if call_id == "call_B2" && n == "apply_patch"
    ));
    // The web_search_call record is skipped; the assistant message follows.
    assert_eq!(req.turns[8].parts, vec![text("Fixed the sign in `add`.")]);
    assert_eq!(
        req.last_user_text().as_deref(),
        Some("Thanks! Now run the tests again.")
    );

    assert_eq!(req.tools.len(), 4);
    assert_eq!(req.tools[0].name, "shell");
    assert!(req.tools[0].native.is_none());
    assert_eq!(req.tools[0].parameters["required"], json!(["command"]));
    let natives: Vec<(&str, &str)> = req.tools[1..]
        .iter()
        .map(|t| {
            let native = t.native.as_ref().expect("native");
            assert_eq!(native.dialect, Dialect::OpenAiResponses);
            (
                t.name.as_str(),
                native.raw["type"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        natives,
        vec![
            ("apply_patch", "custom"),
            ("web_search", "web_search"),
            ("mcp__github", "namespace")
        ]
    );

    let extra = req.extra_for(Dialect::OpenAiResponses).expect("extra");
    assert_eq!(extra["store"], json!(false));
    assert_eq!(extra["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        extra["prompt_cache_key"],
        json!("0199a7c2-4d1e-7b40-9c8e-3f2a1b0c9d8e")
    );
    assert_eq!(
        extra["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(extra["text"], json!({"verbosity": "low"}));
    assert_eq!(req.metadata, None);
}

#[test]
fn codex_request_round_trips() {
    let req = decode(&codex_request());
    let wire = codec().encode_request(&req);
    assert_eq!(wire["model"], "gpt-5-codex");
    assert!(
        wire["instructions"]
            .as_str()
            .unwrap_or_default()
            .starts_with("You are Codex")
    );
    assert_eq!(wire["store"], json!(false));
    assert_eq!(wire["stream"], json!(true));
    assert_eq!(wire["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        wire["prompt_cache_key"],
        json!("0199a7c2-4d1e-7b40-9c8e-3f2a1b0c9d8e")
    );
    assert_eq!(
        wire["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(wire["text"], json!({"verbosity": "low"}));
    assert_eq!(wire["tool_choice"], json!("auto"));
    assert_eq!(wire["parallel_tool_calls"], json!(false));
    assert!(wire.get("max_output_tokens").is_none());

    let input = wire["input"].as_array().expect("input");
    let types: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        types,
        vec![
            "message",
            "message",
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
            "custom_tool_call",
            "custom_tool_call_output",
            "message",
            "message"
        ]
    );
    assert_eq!(input[0]["role"], "system");
    assert_eq!(
        input[3],
        json!({"type": "reasoning",
               "summary": [{"type": "summary_text", "text": "**Inspecting the test**\n\n**Planning the fix**"}],
               "encrypted_content": "gAAAAABo-enc-1"})
    );
    assert_eq!(input[4]["call_id"], "call_A1");
    assert_eq!(input[4]["name"], "shell");
    let args: Value = serde_json::from_str(input[4]["arguments"].as_str().unwrap_or_default())
        .expect("arguments are JSON text");
    assert_eq!(args["workdir"], "/repo");
    assert_eq!(
        input[5]["output"].as_str().map(|s| s.contains("FAILED")),
        Some(true)
    );
    assert_eq!(input[6]["name"], "apply_patch");
    assert!(
        input[6]["input"]
            .as_str()
            .unwrap_or_default()
            .starts_with("*** Begin Patch")
    );
    assert!(input[6].get("id").is_none());
    assert_eq!(input[8]["role"], "assistant");
    assert_eq!(input[8]["content"][0]["type"], "output_text");

    let tools = wire["tools"].as_array().expect("tools");
    assert_eq!(tools[0]["strict"], json!(false));
    assert_eq!(tools[1]["type"], "custom");
    assert_eq!(tools[2], json!({"type": "web_search"}));
    assert_eq!(tools[3]["type"], "namespace");

    assert_eq!(decode(&wire), req);
}

#[test]
fn decodes_an_sdk_request_with_every_field() {
    let body = json!({
        "model": "gpt-4.1",
        "instructions": "Be terse.",
        "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "What is in these images?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
                {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"},
                {"type": "input_image", "file_id": "file-abc123", "detail": "auto"}
            ]},
            {"role": "assistant", "content": "A cat."},
            {"role": "system", "content": "Answer in French from now on."},
            {"role": "user", "content": "And the weather in Paris?"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_w1", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_w2", "name": "get_time",
             "arguments": "{\"tz\":\"Europe/Paris\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_w1", "output": "18°C"},
            {"type": "function_call_output", "call_id": "call_w2",
             "output": [{"type": "input_text", "text": "14:05"}]}
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "description": "Current weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": false},
             "strict": true},
            {"type": "function", "name": "get_time", "parameters": null}
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": true,
        "max_output_tokens": 512,
        "temperature": 0.2,
        "top_p": 0.9,
        "text": {"format": {"type": "json_schema", "name": "weather",
                            "schema": {"type": "object", "properties": {"temp": {"type": "number"}}},
                            "strict": true}},
        "metadata": {"session_id": "s-42"},
        "user": "user-7",
        "service_tier": "flex",
        "truncation": "auto",
        "previous_response_id": "resp_prev",
        "stream": false
    });
    let req = decode(&body);
    assert_eq!(req.turns[0], Turn::text(Role::System, "Be terse."));
    assert_eq!(
        req.turns[1].parts,
        vec![
            text("What is in these images?"),
            Part::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into()
                },
                cache_control: None
            },
            Part::Image {
                source: ImageSource::Url {
                    url: "https://example.com/cat.jpg".into()
                },
                cache_control: None
            },
        ]
    );
    assert_eq!(req.turns[2], Turn::text(Role::Assistant, "A cat."));
    assert_eq!(
        req.turns[3],
        Turn::text(Role::System, "Answer in French from now on.")
    );
    assert_eq!(
        req.turns[4],
        Turn::text(Role::User, "And the weather in Paris?")
    );
    // Parallel calls share one assistant turn; their outputs share one tool turn.
    assert_eq!(
        req.turns[5].parts,
        vec![
            Part::ToolCall {
                id: "call_w1".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"})
            },
            Part::ToolCall {
                id: "call_w2".into(),
                name: "get_time".into(),
                arguments: json!({"tz": "Europe/Paris"})
            },
        ]
    );
    assert_eq!(
        req.turns[6],
        Turn {
            role: Role::Tool,
            parts: vec![
                Part::ToolResult {
                    call_id: "call_w1".into(),
                    name: Some("get_weather".into()),
                    content: vec![text("18°C")],
                    is_error: false
                },
                Part::ToolResult {
                    call_id: "call_w2".into(),
                    name: Some("get_time".into()),
                    content: vec![text("14:05")],
                    is_error: false
                },
            ]
        }
    );
    assert_eq!(req.turns.len(), 7);
    assert_eq!(
        req.tools[1].parameters,
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(req.tools[0].description.as_deref(), Some("Current weather"));
    assert_eq!(
        req.tool_choice,
        Some(ToolChoice::Tool {
            name: "get_weather".into()
        })
    );
    assert_eq!(req.parallel_tool_calls, Some(true));
    assert_eq!(req.max_tokens, Some(512));
    assert_eq!(req.temperature, Some(0.2));
    assert_eq!(req.top_p, Some(0.9));
    assert!(!req.stream);
    assert_eq!(req.thinking, None);
    assert_eq!(
        req.output_schema,
        Some(OutputSchema {
            name: Some("weather".into()),
            schema: json!({"type": "object", "properties": {"temp": {"type": "number"}}})
        })
    );
    assert_eq!(
        req.metadata,
        Some(json!({"metadata": {"session_id": "s-42"}, "user": "user-7"}))
    );
    let extra = req.extra_for(Dialect::OpenAiResponses).expect("extra");
    assert_eq!(extra["service_tier"], "flex");
    assert_eq!(extra["truncation"], "auto");
    assert_eq!(extra["previous_response_id"], "resp_prev");

    // And back: same fields, the json_schema format keeps its `strict`.
    let wire = codec().encode_request(&req);
    assert_eq!(wire["instructions"], "Be terse.");
    assert_eq!(wire["max_output_tokens"], 512);
    assert_eq!(wire["temperature"], 0.2);
    assert_eq!(wire["top_p"], 0.9);
    assert_eq!(
        wire["tool_choice"],
        json!({"type": "function", "name": "get_weather"})
    );
    assert_eq!(wire["metadata"], json!({"session_id": "s-42"}));
    assert_eq!(wire["user"], "user-7");
    assert_eq!(wire["service_tier"], "flex");
    assert_eq!(wire["text"]["format"]["strict"], json!(true));
    assert_eq!(wire["text"]["format"]["name"], "weather");
    assert_eq!(
        wire["input"][0]["content"][1],
        json!({"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"})
    );
    assert_eq!(wire["input"][6]["output"], "18°C");
    assert_eq!(wire["input"][7]["output"], "14:05");
    assert_eq!(decode(&wire), req);
}

#[test]
fn string_input_typed_calls_and_odd_items() {
    let req = decode(&json!({"model": "o4-mini", "input": "Hello"}));
    assert_eq!(req.turns, vec![Turn::text(Role::User, "Hello")]);
    assert!(req.extra_for(Dialect::OpenAiResponses).is_some());

    let req = decode(&json!({
        "model": "codex-mini-latest",
        "input": [
            {"role": "user", "content": "list files"},
            {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_L", "status": "completed",
             "action": {"type": "exec", "command": ["ls", "-la"], "timeout_ms": 10000,
                        "working_directory": "/repo", "env": {}, "user": null}},
            {"type": "local_shell_call_output", "id": "call_L", "output": "Cargo.toml\nsrc"},
            {"type": "function_call", "call_id": "call_N", "name": "get_issue", "namespace": "mcp__github",
             "arguments": "{\"number\":7}"},
            {"type": "function_call_output", "call_id": "call_N", "output": {"content": "not found", "success": false}},
            {"type": "reasoning", "id": "rs_x", "summary": [],
             "content": [{"type": "reasoning_text", "text": "raw chain"}]},
            {"type": "reasoning", "id": "rs_y", "summary": [],
             "encrypted_content": "glider.redacted_thinking:EmwKAhgBEgy"},
            {"type": "item_reference", "id": "msg_old"},
            {"type": "compaction", "encrypted_content": "gAAAA-compacted"},
            {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
        ],
        "tools": [{"type": "local_shell"}],
        "tool_choice": {"type": "web_search_preview"},
        "reasoning": {"effort": "none"}
    }));
    assert_eq!(req.thinking, None);
    assert_eq!(req.tool_choice, None);
    let extra = req.extra_for(Dialect::OpenAiResponses).expect("extra");
    assert_eq!(extra["tool_choice"], json!({"type": "web_search_preview"}));
    assert_eq!(
        req.turns[1].parts[0],
        Part::ToolCall {
            id: "call_L".into(),
            name: "local_shell".into(),
            arguments: json!({"action": {"type": "exec", "command": ["ls", "-la"], "timeout_ms": 10000,
                                         "working_directory": "/repo", "env": {}, "user": null}}),
        }
    );
    assert!(matches!(&req.turns[2].parts[0],
        Part::ToolResult { call_id, name: Some(n), is_error: false, .. } if call_id == "call_L" && n == "local_shell"));
    assert_eq!(
        req.turns[3].parts[0],
        Part::ToolCall {
            id: "call_N".into(),
            name: "mcp__github.get_issue".into(),
            arguments: json!({"number": 7})
        }
    );
    assert!(matches!(
        &req.turns[4].parts[0],
        Part::ToolResult { is_error: true, .. }
    ));
    // Assistant-side items after the tool turn merge into one assistant turn.
    assert_eq!(
        req.turns[5].parts,
        vec![
            Part::Thinking {
                text: "raw chain".into(),
                signature: None,
                redacted: None
            },
            Part::Thinking {
                text: String::new(),
                signature: None,
                redacted: Some("EmwKAhgBEgy".into())
            },
            text("I can't."),
        ]
    );
    assert_eq!(req.turns.len(), 6);

    // The namespace and the typed call survive re-encoding.
    let wire = codec().encode_request(&req);
    assert_eq!(wire["tool_choice"], json!({"type": "web_search_preview"}));
    assert_eq!(wire.get("reasoning"), Some(&json!({"effort": "none"})));
    let input = &wire["input"];
    assert_eq!(input[1]["type"], "local_shell_call");
    assert_eq!(input[1]["call_id"], "call_L");
    assert_eq!(input[1]["status"], "completed");
    assert_eq!(input[1]["action"]["command"], json!(["ls", "-la"]));
    assert_eq!(
        input[2],
        json!({"type": "function_call_output", "call_id": "call_L", "output": "Cargo.toml\nsrc"})
    );
    assert_eq!(input[3]["name"], "get_issue");
    assert_eq!(input[3]["namespace"], "mcp__github");
    // Thinking without a signature and redacted thinking are not sent back.
    assert_eq!(input[5]["type"], "message");
    assert_eq!(input.as_array().map(Vec::len), Some(6));
}

#[test]
fn request_errors_name_the_field() {
    let cases = [
        (json!({"input": "hi"}), "model: required", Some("model")),
        (
            json!({"model": 5, "input": "hi"}),
            "model: expected string",
            Some("model"),
        ),
        (json!({"model": "m"}), "input: required", Some("input")),
        (
            json!({"model": "m", "input": 3}),
            "input: expected string or array",
            Some("input"),
        ),
        (
            json!({"model": "m", "input": ["x"]}),
            "input[0]: expected object",
            Some("input[0]"),
        ),
        (
            json!({"model": "m", "input": [{"content": "x"}]}),
            "input[0].type: required",
            Some("input[0].type"),
        ),
        (
            json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}),
            "input[0].role: unsupported role `tool`",
            Some("input[0].role"),
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": 4}]}),
            "input[0].content: expected string or array",
            Some("input[0].content"),
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0].type: `input_file` content is not supported",
            Some("input[0].content[0].type"),
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "video"}]}]}),
            "unsupported content type `video`",
            Some("input[0].content[0].type"),
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
            "input_image needs image_url or file_id",
            Some("input[0].content[0]"),
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "input[0].call_id: required",
            Some("input[0].call_id"),
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}),
            "input[0].output: required",
            Some("input[0].output"),
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"name": "f"}]}),
            "tools[0].type: required",
            Some("tools[0].type"),
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "function"}]}),
            "tools[0].name: required",
            Some("tools[0].name"),
        ),
        (
            json!({"model": "m", "input": "x", "tool_choice": "any"}),
            "tool_choice: unsupported value `any`",
            Some("tool_choice"),
        ),
        (
            json!({"model": "m", "input": "x", "max_output_tokens": -1}),
            "max_output_tokens: expected a non-negative integer",
            Some("max_output_tokens"),
        ),
        (
            json!({"model": "m", "input": "x", "temperature": "hot"}),
            "temperature: expected number",
            Some("temperature"),
        ),
        (
            json!({"model": "m", "input": "x", "stream": "yes"}),
            "stream: expected boolean",
            Some("stream"),
        ),
        (
            json!({"model": "m", "input": "x", "reasoning": {"effort": 3}}),
            "reasoning.effort: expected string",
            Some("reasoning.effort"),
        ),
        (
            json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}),
            "text.format.schema: required",
            Some("text.format.schema"),
        ),
        (
            json!({"model": "m", "input": "x", "metadata": "no"}),
            "metadata: expected object",
            Some("metadata"),
        ),
    ];
    for (body, message, param) in cases {
        let err = codec()
            .decode_request(body.to_string().as_bytes())
            .expect_err(&body.to_string());
        assert_eq!(err.kind, ErrorKind::InvalidRequest, "{body}");
        assert!(err.message.contains(message), "{body}: {}", err.message);
        assert_eq!(err.param.as_deref(), param, "{body}");
    }
    let err = codec()
        .decode_request(b"{\"model\": ")
        .expect_err("malformed");
    assert_eq!(err.kind, ErrorKind::InvalidRequest);
    assert!(err.message.contains("invalid JSON"));
    let err = codec().decode_request(b"[1]").expect_err("not an object");
    assert!(err.message.contains("JSON object"));
}

#[test]
fn encodes_a_foreign_request() {
    let req = Request {
        model: "gpt-5".into(),
        turns: vec![
            Turn {
                role: Role::System,
                parts: vec![text("You are Claude Code."), text("Be careful.")],
            },
            Turn {
                role: Role::User,
                parts: vec![
                    text("Look at this"),
                    Part::Image {
                        source: ImageSource::Base64 {
                            media_type: "image/jpeg".into(),
                            data: "/9j/4AAQ".into(),
                        },
                        cache_control: Some(json!({"type": "ephemeral"})),
                    },
                ],
            },
            Turn {
                role: Role::Assistant,
                parts: vec![
                    Part::Thinking {
                        text: "hmm".into(),
                        signature: Some("EqQBCkgIARAB".into()),
                        redacted: None,
                    },
                    text("Reading it."),
                    Part::ToolCall {
                        id: "toolu_01".into(),
                        name: "Read".into(),
                        arguments: json!({"file_path": "/a.rs"}),
                    },
                ],
            },
            Turn {
                role: Role::Tool,
                parts: vec![Part::ToolResult {
                    call_id: "toolu_01".into(),
                    name: None,
                    content: vec![
                        text("fn main() {}"),
                        Part::Image {
                            source: ImageSource::Url {
                                url: "https://x/y.png".into(),
                            },
                            cache_control: None,
                        },
                    ],
                    is_error: true,
                }],
            },
            Turn::text(Role::System, "<system-reminder>todo</system-reminder>"),
            Turn::text(Role::User, "go on"),
        ],
        tools: vec![
            ToolDef {
                name: "Read".into(),
                description: Some("Read a file".into()),
                parameters: json!({"type": "object", "properties": {"file_path": {"type": "string"}}}),
                native: None,
            },
            ToolDef {
                name: "web_search".into(),
                description: None,
                parameters: json!({}),
                native: Some(NativeTool {
                    dialect: Dialect::Anthropic,
                    raw: json!({"type": "web_search_20250305", "name": "web_search"}),
                }),
            },
        ].into(),
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: None,
        max_tokens: Some(32000),
        temperature: Some(1.0),
        top_p: None,
        top_k: Some(5),
        seed: Some(1),
        stop: vec!["END".into()],
        stream: true,
        thinking: Some(ThinkingConfig {
            budget_tokens: Some(10000),
            effort: None,
        }),
        output_schema: None,
        metadata: Some(json!({"user_id": "u_1"})),
        extra: Some(DialectExtra {
            dialect: Dialect::Anthropic,
            fields: [("context_management".to_owned(), json!({"edits": []}))]
                .into_iter()
                .collect(),
        }),
    };
    let wire = codec().encode_request(&req);
    assert_eq!(
        wire,
        json!({
            "model": "gpt-5",
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "instructions": "You are Claude Code.\nBe careful.",
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Look at this"},
                    {"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "auto"}
                ]},
                {"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": "Reading it.", "annotations": []}
                ]},
                {"type": "function_call", "arguments": "{\"file_path\":\"/a.rs\"}", "call_id": "toolu_01", "name": "Read"},
                {"type": "function_call_output", "call_id": "toolu_01", "output": [
                    {"type": "input_text", "text": "fn main() {}"},
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}
                ]},
                {"type": "message", "role": "system", "content": [
                    {"type": "input_text", "text": "<system-reminder>todo</system-reminder>"}
                ]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}
            ],
            "tools": [{"type": "function", "name": "Read", "description": "Read a file",
                       "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}},
                       "strict": false}],
            "tool_choice": "required",
            "max_output_tokens": 32000,
            "temperature": 1.0,
            "reasoning": {"effort": "medium"},
            "stream": true
        })
    );
}

#[test]
fn foreign_calls_are_functions_whatever_their_arguments() {
    // Argument shapes prove nothing in a foreign request: only declared native tools
    // make a call custom or typed.
    let req = Request {
        model: "gpt-5".into(),
        turns: vec![
            Turn::text(Role::User, "run it"),
            Turn {
                role: Role::Assistant,
                parts: vec![
                    Part::ToolCall {
                        id: "c1".into(),
                        name: "shell".into(),
                        arguments: json!({"action": {"type": "exec", "command": ["ls"]}}),
                    },
                    Part::ToolCall {
                        id: "c2".into(),
                        name: "note".into(),
                        arguments: json!("not json"),
                    },
                ],
            },
        ],
        tools: vec![ToolDef {
            name: "shell".into(),
            description: None,
            parameters: json!({"type": "object"}),
            native: None,
        }]
        .into(),
        ..Request::default()
    };
    let wire = codec().encode_request(&req);
    assert_eq!(wire["input"][1]["type"], "function_call");
    assert_eq!(
        wire["input"][1]["arguments"],
        "{\"action\":{\"type\":\"exec\",\"command\":[\"ls\"]}}"
    );
    assert_eq!(wire["input"][2]["type"], "function_call");
    assert_eq!(wire["input"][2]["arguments"], "not json");
}

#[test]
fn output_schema_from_another_dialect() {
    let req = Request {
        model: "gpt-5".into(),
        turns: vec![Turn::text(Role::User, "weather?")],
        output_schema: Some(OutputSchema {
            name: None,
            schema: json!({"type": "object"}),
        }),
        ..Request::default()
    };
    let wire = codec().encode_request(&req);
    assert_eq!(
        wire["text"],
        json!({"format": {"type": "json_schema", "name": "output_schema", "schema": {"type": "object"}}})
    );
    assert!(wire.get("instructions").is_none());
    assert!(wire.get("reasoning").is_none());
    assert!(wire.get("include").is_none());
    assert_eq!(wire["stream"], json!(false));
}

#[test]
fn content_type_is_sse() {
    assert_eq!(codec().stream_content_type(), "text/event-stream");
    assert_eq!(codec().dialect(), Dialect::OpenAiResponses);
}
