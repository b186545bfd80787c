//! Anthropic request codec's unit tests: decoding clients' bodies, encoding for a backend, and the 400s for bodies that break the shape.

use super::*;

use glider_ngl::{
    ApiError, Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part,
    Request, Role, ThinkingConfig, ToolChoice, ToolDef, Turn,
};
use serde_json::{Value, json};

use crate::Codec;
use crate::anthropic::Anthropic;

fn decode(body: &Value) -> Request {
    Anthropic
        .decode_request(body.to_string().as_bytes())
        .expect("request decodes")
}

fn decode_err(body: &Value) -> ApiError {
    Anthropic
        .decode_request(body.to_string().as_bytes())
        .expect_err("request is rejected")
}

fn ephemeral() -> Option<Value> {
    Some(json!({"type": "ephemeral"}))
}

fn cc_text(text: &str) -> Part {
    Part::Text {
        text: text.into(),
        cache_control: ephemeral(),
    }
}

fn bash_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to execute"},
            "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
            "description": {"type": "string", "description": "Clear, concise description of what this command does in 5-10 words."},
            "run_in_background": {"type": "boolean"}
        },
        "required": ["command"],
        "additionalProperties": false,
        "$schema": "http://json-schema.org/draft-07/schema#"
    })
}

/// Shaped like a Claude Code turn: cached system blocks, a `role: system` reminder
/// after the user turn, signed and redacted thinking, parallel tool calls, tool
/// results with an error and a cache breakpoint, images, many tools, extras.
fn claude_code_request() -> Value {
    json!({
        "model": "claude-sonnet-4-5-20250929",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nRun `cargo test` before committing.\n</system-reminder>\n"},
                {"type": "text", "text": "fix the failing test in src/lib.rs", "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "system", "content": "<system-reminder>This is a reminder that your todo list is currently empty.</system-reminder>"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants the failing test fixed. Read the file and run the tests.", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1ZsQ8r2nRZ0Jr3h6vJ4Qp9m5bZ"},
                {"type": "text", "text": "I'll read the file and run the tests."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "Read", "input": {"file_path": "/repo/src/lib.rs"}},
                {"type": "tool_use", "id": "toolu_01B2xkMvXq7nD4s8aLkPzR3c", "name": "Bash", "input": {"command": "cargo test 2>&1 | tail -20", "description": "Run the test suite"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "     1\tpub fn add(a: i32, b: i32) -> i32 {\n     2\t    a - b\n     3\t}\n"},
                {"type": "tool_result", "tool_use_id": "toolu_01B2xkMvXq7nD4s8aLkPzR3c", "content": [{"type": "text", "text": "test tests::adds ... FAILED\nerror: test failed, to rerun pass `--lib`"}], "is_error": true, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "the test lives in tests/add.rs"}
            ]},
            {"role": "assistant", "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
                {"type": "tool_use", "id": "toolu_01C7Fr3nQ2fY8JmW4sTz9KpL", "name": "Edit", "input": {"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01C7Fr3nQ2fY8JmW4sTz9KpL", "content": "The file /repo/src/lib.rs has been updated."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/screenshot.png"}},
                {"type": "text", "text": "here is what the UI shows now", "cache_control": {"type": "ephemeral"}}
            ]}
        ],
        "temperature": 1,
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "\nYou are an interactive CLI tool that helps users with software engineering tasks.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {"name": "Task", "description": "Launch a new agent to handle complex, multi-step tasks autonomously.", "input_schema": {"type": "object", "properties": {"description": {"type": "string"}, "prompt": {"type": "string"}, "subagent_type": {"type": "string"}}, "required": ["description", "prompt", "subagent_type"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}},
            {"name": "Bash", "description": "Executes a given bash command in a persistent shell session.", "input_schema": bash_schema()},
            {"name": "Glob", "description": "Fast file pattern matching tool.", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"]}},
            {"name": "Grep", "description": "A powerful search tool built on ripgrep.", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}, "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]}}, "required": ["pattern"]}},
            {"name": "Read", "description": "Reads a file from the local filesystem.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"}, "limit": {"type": "number"}}, "required": ["file_path"]}},
            {"name": "Edit", "description": "Performs exact string replacements in files.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}, "replace_all": {"type": "boolean", "default": false}}, "required": ["file_path", "old_string", "new_string"]}},
            {"name": "TodoWrite", "description": "Create and manage a structured task list.", "input_schema": {"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object"}}}, "required": ["todos"]}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}
        ],
        "metadata": {"user_id": "user_9f2c4e_account__session_1b7d7c0e-54f2-4d1e-9a55-3c1f0e2b8a11"},
        "max_tokens": 32000,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "stream": true
    })
}

#[test]
fn decodes_a_claude_code_request() {
    let req = decode(&claude_code_request());
    assert_eq!(req.model, "claude-sonnet-4-5-20250929");
    assert_eq!(req.max_tokens, Some(32000));
    assert_eq!(req.temperature, Some(1.0));
    assert!(req.stream);
    assert_eq!(
        req.thinking,
        Some(ThinkingConfig {
            budget_tokens: Some(31999),
            effort: None
        })
    );
    assert_eq!(
        req.metadata,
        Some(
            json!({"user_id": "user_9f2c4e_account__session_1b7d7c0e-54f2-4d1e-9a55-3c1f0e2b8a11"})
        )
    );
    let extra = req.extra_for(Dialect::Anthropic).expect("extras kept");
    assert_eq!(extra.len(), 1);
    assert_eq!(
        extra["context_management"],
        json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})
    );
    assert_eq!(req.tool_choice, None);
    assert_eq!(req.parallel_tool_calls, None);

    let roles: Vec<Role> = req.turns.iter().map(|t| t.role).collect();
    assert_eq!(
        roles,
        vec![
            Role::System,
            Role::User,
            Role::System,
            Role::Assistant,
            Role::Tool,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::User,
        ]
    );
    assert_eq!(
        req.turns[0].parts,
        vec![
            cc_text("You are Claude Code, Anthropic's official CLI for Claude."),
            cc_text(
                "\nYou are an interactive CLI tool that helps users with software engineering tasks."
            ),
        ]
    );
    assert_eq!(req.turns[1].parts.len(), 2);
    assert_eq!(
        req.turns[1].parts[1],
        cc_text("fix the failing test in src/lib.rs")
    );
    assert_eq!(
        req.turns[2],
        Turn::text(
            Role::System,
            "<system-reminder>This is a reminder that your todo list is currently empty.</system-reminder>"
        )
    );
    assert_eq!(
        req.turns[3].parts,
        vec![
            Part::Thinking {
                text: "The user wants the failing test fixed. Read the file and run the tests."
                    .into(),
                signature: Some(
                    "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1ZsQ8r2nRZ0Jr3h6vJ4Qp9m5bZ".into()
                ),
                redacted: None,
            },
            Part::text("I'll read the file and run the tests."),
            Part::ToolCall {
                id: "toolu_01A09q90qw90lq917835lq9".into(),
                name: "Read".into(),
                arguments: json!({"file_path": "/repo/src/lib.rs"}),
            },
            Part::ToolCall {
                id: "toolu_01B2xkMvXq7nD4s8aLkPzR3c".into(),
                name: "Bash".into(),
                arguments: json!({"command": "cargo test 2>&1 | tail -20", "description": "Run the test suite"}),
            },
        ]
    );
    // Tool results come first, in their own turn, named from the matching calls;
    // the block's cache_control sits on the last content part.
    assert_eq!(
        req.turns[4].parts,
        vec![
            Part::ToolResult {
                call_id: "toolu_01A09q90qw90lq917835lq9".into(),
                name: Some("Read".into()),
                content: vec![Part::text(
                    "     1\tpub fn add(a: i32, b: i32) -> i32 {\n     2\t    a - b\n     3\t}\n"
                )],
                is_error: false,
            },
            Part::ToolResult {
                call_id: "toolu_01B2xkMvXq7nD4s8aLkPzR3c".into(),
                name: Some("Bash".into()),
                content: vec![cc_text(
                    "test tests::adds ... FAILED\nerror: test failed, to rerun pass `--lib`"
                )],
                is_error: true,
            },
        ]
    );
    assert_eq!(
        req.turns[5],
        Turn::text(Role::User, "the test lives in tests/add.rs")
    );
    assert_eq!(
        req.turns[6].parts[0],
        Part::Thinking {
            text: String::new(),
            signature: None,
            redacted: Some(
                "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into()
            ),
        }
    );
    assert_eq!(
        req.turns[8].parts,
        vec![
            Part::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk".into(),
                },
                cache_control: None,
            },
            Part::Image {
                source: ImageSource::Url {
                    url: "https://example.com/screenshot.png".into()
                },
                cache_control: None,
            },
            cc_text("here is what the UI shows now"),
        ]
    );
    assert_eq!(
        req.last_user_text().as_deref(),
        Some("here is what the UI shows now")
    );

    assert_eq!(req.tools.len(), 8);
    assert_eq!(req.tools[1].name, "Bash");
    assert_eq!(
        req.tools[1].description.as_deref(),
        Some("Executes a given bash command in a persistent shell session.")
    );
    assert_eq!(req.tools[1].parameters, bash_schema());
    assert_eq!(req.tools[1].native, None);
    assert_eq!(req.tools[7].name, "web_search");
    assert_eq!(
        req.tools[7].native,
        Some(NativeTool {
            dialect: Dialect::Anthropic,
            raw: json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 8}),
        })
    );
}

#[test]
fn decodes_system_string_and_skips_empty_system() {
    let req = decode(&json!({
        "model": "claude-haiku-4-5", "max_tokens": 512, "system": "Be terse.",
        "messages": [{"role": "user", "content": "hi"}]
    }));
    assert_eq!(
        req.turns,
        vec![
            Turn::text(Role::System, "Be terse."),
            Turn::text(Role::User, "hi")
        ]
    );
    assert!(!req.stream);
    assert_eq!(req.extra, None);
    for system in [json!(""), json!([]), Value::Null] {
        let req = decode(&json!({
            "model": "m", "max_tokens": 1, "system": system,
            "messages": [{"role": "user", "content": "hi"}]
        }));
        assert_eq!(req.turns, vec![Turn::text(Role::User, "hi")]);
    }
}

#[test]
fn decodes_tool_choice_and_parallel_flag() {
    let cases = [
        (json!({"type": "auto"}), ToolChoice::Auto, None),
        (
            json!({"type": "auto", "disable_parallel_tool_use": true}),
            ToolChoice::Auto,
            Some(false),
        ),
        (
            json!({"type": "any", "disable_parallel_tool_use": false}),
            ToolChoice::Required,
            Some(true),
        ),
        (
            json!({"type": "tool", "name": "Bash"}),
            ToolChoice::Tool {
                name: "Bash".into(),
            },
            None,
        ),
        (json!({"type": "none"}), ToolChoice::None, None),
    ];
    for (wire, choice, parallel) in cases {
        let req = decode(&json!({
            "model": "m", "max_tokens": 100, "tool_choice": wire,
            "tools": [{"name": "Bash", "input_schema": bash_schema()}],
            "messages": [{"role": "user", "content": "list files"}]
        }));
        assert_eq!(req.tool_choice, Some(choice), "{wire}");
        assert_eq!(req.parallel_tool_calls, parallel, "{wire}");
        // And back.
        let back = Anthropic.encode_request(&req);
        assert_eq!(back["tool_choice"], wire);
    }
}

#[test]
fn decodes_thinking_variants() {
    let thinking = |t: Value| {
        decode(&json!({
            "model": "m", "max_tokens": 4096, "thinking": t,
            "messages": [{"role": "user", "content": "x"}]
        }))
        .thinking
    };
    assert_eq!(
        thinking(json!({"type": "enabled", "budget_tokens": 1024})),
        Some(ThinkingConfig {
            budget_tokens: Some(1024),
            effort: None
        })
    );
    assert_eq!(thinking(json!({"type": "disabled"})), None);
    assert_eq!(
        thinking(json!({"type": "adaptive"})),
        Some(ThinkingConfig::default())
    );
}

#[test]
fn decodes_claude_code_title_request_with_output_config() {
    let schema = json!({
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": false
    });
    // The title call the real Claude Code 2.1.197 makes (tests/fixtures/cli).
    let title = glider_test_support::captured::captured_kind("claude-code", "interactive", "title");
    let body = &title.first().expect("a captured title call").body;
    let output_config =
        json!({"effort": "high", "format": {"type": "json_schema", "schema": schema}});
    assert_eq!(body["output_config"], output_config, "the capture's shape");
    let req = decode(body);
    assert_eq!(
        req.output_schema,
        Some(OutputSchema {
            name: None,
            schema: schema.clone()
        })
    );
    assert_eq!(
        req.extra_for(Dialect::Anthropic).expect("extra")["output_config"],
        output_config
    );
    let encoded = Anthropic.encode_request(&req);
    assert_eq!(encoded["output_config"], output_config);
    assert_eq!(encoded.get("output_format"), None);
    assert_eq!(decode(&encoded), req);

    // Other keys of output_config (effort) survive; the schema follows output_schema.
    let mut req = decode(&json!({
        "model": "claude-opus-4-5", "max_tokens": 2048,
        "output_config": {"effort": "medium"},
        "messages": [{"role": "user", "content": "x"}]
    }));
    assert_eq!(req.output_schema, None);
    req.output_schema = Some(OutputSchema {
        name: Some("title".into()),
        schema: schema.clone(),
    });
    assert_eq!(
        Anthropic.encode_request(&req)["output_config"],
        json!({"effort": "medium", "format": {"type": "json_schema", "schema": schema}})
    );
}

#[test]
fn decodes_beta_output_format_and_answers_in_kind() {
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    let req = decode(&json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024,
        "output_format": {"type": "json_schema", "schema": schema},
        "messages": [{"role": "user", "content": "ok?"}]
    }));
    assert_eq!(req.output_schema.as_ref().map(|s| &s.schema), Some(&schema));
    let encoded = Anthropic.encode_request(&req);
    assert_eq!(
        encoded["output_format"],
        json!({"type": "json_schema", "schema": schema})
    );
    assert_eq!(encoded.get("output_config"), None);
}

#[test]
fn decodes_sampling_stop_sequences_and_extras() {
    let req = decode(&json!({
        "model": "claude-3-5-haiku-20241022", "max_tokens": 300,
        "temperature": 0.2, "top_p": 0.9, "top_k": 40,
        "stop_sequences": ["\n\nHuman:", "</answer>"],
        "service_tier": "auto",
        "container": "container_011CQ",
        "mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "docs"}],
        "messages": [
            {"role": "user", "content": "answer in tags"},
            {"role": "assistant", "content": "<answer>"}
        ]
    }));
    assert_eq!(req.temperature, Some(0.2));
    assert_eq!(req.top_p, Some(0.9));
    assert_eq!(req.top_k, Some(40));
    assert_eq!(req.stop, vec!["\n\nHuman:", "</answer>"]);
    assert_eq!(req.turns[1], Turn::text(Role::Assistant, "<answer>"));
    let extra = req.extra_for(Dialect::Anthropic).expect("extra");
    assert_eq!(
        extra.keys().collect::<Vec<_>>(),
        vec!["service_tier", "container", "mcp_servers"]
    );
    let encoded = Anthropic.encode_request(&req);
    assert_eq!(
        encoded["stop_sequences"],
        json!(["\n\nHuman:", "</answer>"])
    );
    assert_eq!(encoded["top_k"], json!(40));
    assert_eq!(encoded["top_p"], json!(0.9));
    assert_eq!(encoded["service_tier"], json!("auto"));
    assert_eq!(encoded["mcp_servers"][0]["name"], json!("docs"));
    assert_eq!(decode(&encoded), req);
}

#[test]
fn rejects_invalid_requests_naming_the_field() {
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"model": "m", "messages": user}),
            "max_tokens: Field required",
            Some("max_tokens"),
        ),
        (
            json!({"max_tokens": 5, "messages": user}),
            "model: Field required",
            Some("model"),
        ),
        (
            json!({"model": "m", "max_tokens": 5}),
            "messages: Field required",
            Some("messages"),
        ),
        (
            json!({"model": "m", "max_tokens": "5", "messages": user}),
            "max_tokens: expected a non-negative integer",
            Some("max_tokens"),
        ),
        (
            json!({"model": "m", "max_tokens": 0, "messages": user}),
            "max_tokens: Input should be greater than or equal to 1",
            Some("max_tokens"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": {"role": "user"}}),
            "messages: expected array",
            Some("messages"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 7}]}),
            "messages.1.content: expected string or array",
            Some("messages.1.content"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "a"}]}),
            "messages.0.role: expected 'user', 'assistant' or 'system', got 'tool'",
            Some("messages.0.role"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            "messages.0.content.0.text: Field required",
            Some("messages.0.content.0.text"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
            "messages.0.content.0.source.type: unsupported image source type 'file' (expected 'base64' or 'url')",
            Some("messages.0.content.0.source.type"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": user, "tool_choice": {"type": "tool"}}),
            "tool_choice.name: Field required",
            Some("tool_choice.name"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": user, "thinking": {"type": "enabled"}}),
            "thinking.budget_tokens: Field required",
            Some("thinking.budget_tokens"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": user, "tools": [{"name": "Bash"}]}),
            "tools.0.input_schema: Field required",
            Some("tools.0.input_schema"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": user, "system": 3}),
            "system: expected string or array",
            Some("system"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": user, "stop_sequences": ["a", 1]}),
            "stop_sequences.1: expected string",
            Some("stop_sequences.1"),
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": user, "stream": "yes"}),
            "stream: expected boolean",
            Some("stream"),
        ),
    ];
    for (body, message, param) in cases {
        let err = decode_err(&body);
        assert_eq!(err.kind, ErrorKind::InvalidRequest, "{body}");
        assert_eq!(err.message, message, "{body}");
        assert_eq!(err.param.as_deref(), param, "{body}");
    }
    let err = Anthropic
        .decode_request(b"{\"model\": \"m\", ")
        .expect_err("malformed JSON");
    assert_eq!(err.kind, ErrorKind::InvalidRequest);
    assert!(
        err.message.starts_with("invalid JSON body"),
        "{}",
        err.message
    );
    let err = Anthropic.decode_request(b"[1]").expect_err("not an object");
    assert_eq!(err.message, "request body: expected a JSON object");
}

#[test]
fn request_round_trips_and_encodes_claude_code_shapes() {
    let req = decode(&claude_code_request());
    let encoded = Anthropic.encode_request(&req);
    assert_eq!(decode(&encoded), req);

    assert_eq!(encoded["model"], json!("claude-sonnet-4-5-20250929"));
    assert_eq!(encoded["max_tokens"], json!(32000));
    assert_eq!(encoded["stream"], json!(true));
    assert_eq!(
        encoded["thinking"],
        json!({"type": "enabled", "budget_tokens": 31999})
    );
    assert_eq!(
        encoded["system"][0],
        json!({"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}})
    );
    assert_eq!(
        encoded["metadata"],
        json!({"user_id": "user_9f2c4e_account__session_1b7d7c0e-54f2-4d1e-9a55-3c1f0e2b8a11"})
    );
    assert_eq!(
        encoded["context_management"],
        json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})
    );
    assert_eq!(encoded.get("tool_choice"), None);
    let messages = encoded["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(
        roles,
        vec!["user", "system", "assistant", "user", "assistant", "user"]
    );
    assert_eq!(
        messages[1]["content"],
        json!(
            "<system-reminder>This is a reminder that your todo list is currently empty.</system-reminder>"
        )
    );
    // Tool results and the user's text are one message again, results first, and the
    // cache breakpoint is back on the tool_result block.
    assert_eq!(
        messages[3]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "     1\tpub fn add(a: i32, b: i32) -> i32 {\n     2\t    a - b\n     3\t}\n"},
            {"type": "tool_result", "tool_use_id": "toolu_01B2xkMvXq7nD4s8aLkPzR3c", "content": "test tests::adds ... FAILED\nerror: test failed, to rerun pass `--lib`", "is_error": true, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "the test lives in tests/add.rs"}
        ])
    );
    assert_eq!(
        messages[4]["content"][0],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"})
    );
    assert_eq!(
        messages[2]["content"][0]["signature"],
        json!("EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1ZsQ8r2nRZ0Jr3h6vJ4Qp9m5bZ")
    );
    assert_eq!(
        messages[5]["content"][2],
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/screenshot.png"}})
    );
    let tools = encoded["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 8);
    assert_eq!(
        tools[7],
        json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 8})
    );
    assert_eq!(tools[1]["input_schema"], bash_schema());
}

#[test]
fn encodes_requests_from_other_dialects() {
    let req = Request {
        model: "claude-sonnet-4-5".into(),
        turns: vec![
            Turn::text(Role::System, "You are a coding agent."),
            Turn::text(Role::System, "Prefer small diffs."),
            Turn {
                role: Role::User,
                parts: vec![
                    Part::text("what is in this picture?"),
                    Part::Image {
                        source: ImageSource::Url {
                            url: "data:image/jpeg;base64,/9j/4AAQSkZJRg==".into(),
                        },
                        cache_control: None,
                    },
                ],
            },
            Turn {
                role: Role::Assistant,
                parts: vec![
                    Part::Thinking {
                        text: "unsigned reasoning from an OpenAI model".into(),
                        signature: None,
                        redacted: None,
                    },
                    Part::text("Let me check."),
                    Part::ToolCall {
                        id: "functions.Read:0".into(),
                        name: "Read".into(),
                        arguments: json!("{not json"),
                    },
                    Part::ToolCall {
                        id: "call_2".into(),
                        name: "Glob".into(),
                        arguments: json!("{\"pattern\": \"*.rs\"}"),
                    },
                ],
            },
            Turn {
                role: Role::Tool,
                parts: vec![Part::ToolResult {
                    call_id: "functions.Read:0".into(),
                    name: Some("Read".into()),
                    content: vec![Part::text("")],
                    is_error: false,
                }],
            },
            Turn {
                role: Role::Tool,
                parts: vec![Part::ToolResult {
                    call_id: "call_2".into(),
                    name: None,
                    content: vec![Part::text("a.rs"), Part::text("b.rs")],
                    is_error: false,
                }],
            },
            Turn::text(Role::User, "now summarise"),
            Turn {
                role: Role::Assistant,
                parts: vec![Part::Thinking {
                    text: "only unsigned thinking".into(),
                    signature: None,
                    redacted: None,
                }],
            },
            Turn::text(Role::User, "and be brief"),
        ],
        tools: vec![
            ToolDef {
                name: "Read".into(),
                description: Some("Read a file".into()),
                parameters: json!({"properties": {"path": {"type": "string"}}}),
                native: None,
            },
            ToolDef {
                name: "Glob".into(),
                description: None,
                parameters: Value::Null,
                native: None,
            },
            ToolDef {
                name: "web_search".into(),
                description: None,
                parameters: json!({}),
                native: Some(NativeTool {
                    dialect: Dialect::OpenAiResponses,
                    raw: json!({"type": "web_search"}),
                }),
            },
        ]
        .into(),
        parallel_tool_calls: Some(false),
        thinking: Some(ThinkingConfig {
            budget_tokens: None,
            effort: Some("high".into()),
        }),
        seed: Some(7),
        metadata: Some(json!({"user": "alice", "user_id": "u-1"})),
        extra: Some(DialectExtra {
            dialect: Dialect::OpenAiChat,
            fields: [("store".to_owned(), json!(true))].into_iter().collect(),
        }),
        ..Request::default()
    };
    let body = Anthropic.encode_request(&req);
    assert_eq!(body["max_tokens"], json!(DEFAULT_MAX_TOKENS));
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": "Prefer small diffs."}
        ])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "what is in this picture?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "functions_Read_0", "name": "Read", "input": {}},
                {"type": "tool_use", "id": "call_2", "name": "Glob", "input": {"pattern": "*.rs"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "functions_Read_0"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": [
                    {"type": "text", "text": "a.rs"}, {"type": "text", "text": "b.rs"}
                ]},
                {"type": "text", "text": "now summarise"},
                {"type": "text", "text": "and be brief"}
            ]}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([
            {"name": "Read", "description": "Read a file", "input_schema": {"properties": {"path": {"type": "string"}}, "type": "object"}},
            {"name": "Glob", "input_schema": {"type": "object"}}
        ])
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    // high effort → 24576, which does not fit under the default 8192 max_tokens.
    assert_eq!(body.get("thinking"), None);
    assert_eq!(body["metadata"], json!({"user_id": "u-1"}));
    assert_eq!(body.get("seed"), None);
    assert_eq!(body.get("store"), None);
    assert_eq!(body.get("stream"), None);
}

#[test]
fn maps_effort_to_a_thinking_budget() {
    let thinking = |effort: &str, max_tokens: u32, temperature: Option<f64>| {
        let req = Request {
            model: "claude-opus-4-1".into(),
            turns: vec![Turn::text(Role::User, "x")],
            max_tokens: Some(max_tokens),
            temperature,
            thinking: Some(ThinkingConfig {
                budget_tokens: None,
                effort: Some(effort.into()),
            }),
            ..Request::default()
        };
        Anthropic.encode_request(&req).get("thinking").cloned()
    };
    let enabled = |b: u32| Some(json!({"type": "enabled", "budget_tokens": b}));
    assert_eq!(thinking("low", 16000, None), enabled(2048));
    assert_eq!(thinking("medium", 16000, Some(1.0)), enabled(8192));
    assert_eq!(thinking("high", 32000, None), enabled(24576));
    assert_eq!(thinking("high", 24576, None), None);
    assert_eq!(thinking("medium", 16000, Some(0.3)), None);
    assert_eq!(thinking("minimal", 16000, None), None);
    // No budget and no effort is Anthropic's adaptive thinking.
    let req = Request {
        thinking: Some(ThinkingConfig::default()),
        ..Request::default()
    };
    assert_eq!(
        Anthropic.encode_request(&req)["thinking"],
        json!({"type": "adaptive"})
    );
}

#[test]
fn codec_identity() {
    assert_eq!(Anthropic.dialect(), Dialect::Anthropic);
    assert_eq!(Anthropic.stream_content_type(), "text/event-stream");
    assert_eq!(
        crate::codec(Dialect::Anthropic).dialect(),
        Dialect::Anthropic
    );
}

#[test]
fn unmodelled_blocks_survive_to_an_anthropic_backend() {
    let body = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
        {"type": "text", "text": "summarise"}
    ]}]});
    let request = Anthropic
        .decode_request(body.to_string().as_bytes())
        .expect("unknown blocks are kept, not refused");
    assert!(
        matches!(&request.turns[0].parts[0], Part::Native { dialect: Dialect::Anthropic, raw } if raw["type"] == "document")
    );
    let encoded = Anthropic.encode_request(&request);
    assert_eq!(
        encoded["messages"][0]["content"][0],
        body["messages"][0]["content"][0]
    );
}
