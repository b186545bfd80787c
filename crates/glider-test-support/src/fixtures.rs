//! Request bodies shaped the way real coding CLIs send them (Claude Code: ~24 tools,
//! system blocks, a `role: "system"` entry after the user turn, adaptive thinking,
//! `context_management`; its title and compaction calls; Codex: developer messages,
//! non-function tools, no output cap). Shapes and sizes, not the vendors' prompt text.
//! Shared by the router's tests and benchmarks.
//!
//! Real requests now exist: [`crate::captured`] loads what the pinned Claude Code and
//! Codex actually sent (`tests/fixtures/cli`, written by `scripts/capture-cli-traffic`;
//! see docs/captured-traffic.md). These hand-written bodies are to be replaced by those
//! captures; prefer them in new tests.

use serde_json::{Value, json};

/// 24 tools shaped like Claude Code's (names and schema sizes, not its text).
pub fn claude_code_tools() -> Vec<Value> {
    let names = [
        "Agent",
        "Bash",
        "Edit",
        "Glob",
        "Grep",
        "MultiEdit",
        "NotebookEdit",
        "Read",
        "Skill",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "TaskStop",
        "TaskUpdate",
        "TodoWrite",
        "WebFetch",
        "WebSearch",
        "Write",
        "CronCreate",
        "CronDelete",
        "CronList",
        "EnterWorktree",
        "ExitWorktree",
    ];
    names
        .iter()
        .map(|name| {
            json!({
                "name": name,
                "description": format!("{name}: {}", "Performs one step of the agent's work with care. ".repeat(40)),
                "input_schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                    "properties": {"file_path": {"type": "string", "description": "Absolute path"}, "command": {"type": "string"}},
                    "additionalProperties": false}
            })
        })
        .collect()
}

pub fn claude_code_system() -> Value {
    json!([
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197; cc_entrypoint=sdk-cli;"},
        {"type": "text", "text": "You are an agent for software engineering.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Rules for the work. ".repeat(400), "cache_control": {"type": "ephemeral"}}
    ])
}

/// A Claude Code main turn: tools, thinking, a system entry after the user turn.
pub fn claude_code_main(user_text: &str) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 64000,
        "stream": true,
        "system": claude_code_system(),
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use this context.\n</system-reminder>"},
                {"type": "text", "text": user_text, "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "system", "content": "Available agent types for the Agent tool: claude, Explore, Plan."}
        ],
        "tools": claude_code_tools(),
        "metadata": {"user_id": "{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"sess-main\"}"},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    })
}

/// The title call Claude Code makes after the first turn: same model and max_tokens,
/// no tools, a JSON-schema output with one `title` field.
pub fn claude_code_title() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 64000,
        "system": [{"type": "text", "text": "Generate a concise title for this coding session."}],
        "messages": [{"role": "user", "content": "Fix the flaky parser test in src/parse.rs"}],
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"], "additionalProperties": false}}},
        "metadata": {"user_id": "{\"session_id\":\"sess-main\"}"}
    })
}

/// Compaction: a main turn whose last user message asks for a summary.
pub fn claude_code_compaction() -> Value {
    let mut body = claude_code_main("x");
    body["tools"] = json!([]);
    body["thinking"] = json!(null);
    body.as_object_mut().map(|o| o.remove("thinking"));
    body["messages"] = json!([
        {"role": "user", "content": "refactor the parser"},
        {"role": "assistant", "content": "Done: the parser now streams."},
        {"role": "user", "content": "Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests."}
    ]);
    body
}

/// A haiku-class utility call.
pub fn claude_code_haiku() -> Value {
    json!({
        "model": "claude-3-5-haiku-20241022",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "Extract the command prefix of: git commit -m 'x'"}]
    })
}

/// A Codex turn: developer messages, function and non-function tools, no output cap.
pub fn codex_main(user_text: &str) -> Value {
    json!({
        "model": "gpt-5-codex",
        "stream": true,
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex. ".repeat(800)}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context><cwd>/w</cwd></environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": user_text}]}
        ],
        "tools": [
            {"type": "function", "name": "exec_command", "description": "Runs a command", "strict": false, "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
            {"type": "custom", "name": "apply_patch", "description": "Apply a patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
            {"type": "web_search"}
        ]
    })
}
