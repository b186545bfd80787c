"""Request bodies for the benchmarks: one neutral conversation rendered in each wire
dialect (Anthropic Messages, OpenAI Chat, OpenAI Responses, Ollama /api/chat), small
(~1 KB) or large (~80 KB, shaped like a Claude Code request: long system prompt, 25
tools with JSON schemas, a few tool turns). Deterministic (fixed seed), stdlib only.

    python3 bench/bodies.py OUT_DIR    # writes {small,large}-{dialect}[-stream].json
"""

import json
import random
import sys

DIALECTS = ("anthropic", "openai", "responses", "ollama")

WORDS = (
    "file function the a of to and in is that for tool call must use when user code "
    "run test edit path line change read write search result error output command "
    "return value should never always only before after each this with not you your "
    "project repository branch commit diff patch review message context token model"
).split()

CLAUDE_CODE_TOOLS = [
    "Task", "Bash", "Glob", "Grep", "LS", "ExitPlanMode", "Read", "Edit", "MultiEdit",
    "Write", "NotebookEdit", "WebFetch", "TodoWrite", "WebSearch", "BashOutput",
    "KillShell", "SlashCommand", "mcp__ide__getDiagnostics", "mcp__ide__executeCode",
    "mcp__github__create_issue", "mcp__github__get_pull_request",
    "mcp__github__list_commits", "mcp__fs__read_multiple_files",
    "mcp__fs__directory_tree", "mcp__fs__search_files",
]


def _text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _schema(rng, n_props):
    props = {}
    for i in range(n_props):
        kind = rng.choice(("string", "integer", "boolean", "array"))
        prop = {"type": kind, "description": _text(rng, rng.randint(12, 40))}
        if kind == "array":
            prop["items"] = {"type": "string"}
        props[f"param_{i}_{rng.choice(WORDS)}"] = prop
    return {
        "type": "object",
        "properties": props,
        "required": list(props)[: max(1, n_props // 2)],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    }


def conversation(size):
    """The neutral request: system text, tools, turns (user / assistant tool call /
    tool result), for `size` in {"small", "large"}."""
    rng = random.Random(20251129 if size == "large" else 7)
    if size == "small":
        return {
            "system": "You are a coding assistant. " + _text(rng, 40),
            "tools": [{
                "name": "Read",
                "description": "Read a file from the local filesystem.",
                "schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                           "required": ["file_path"]},
            }],
            "turns": [("user", "Explain what this repository does. " + _text(rng, 60))],
        }
    tools = []
    for name in CLAUDE_CODE_TOOLS:
        tools.append({
            "name": name,
            "description": _text(rng, rng.randint(120, 280)),
            "schema": _schema(rng, rng.randint(3, 7)),
        })
    turns = [
        ("user", "<system-reminder>" + _text(rng, 300) + "</system-reminder>\n"
         + "Fix the failing test in the parser module. " + _text(rng, 80)),
        ("tool_call", {"id": "toolu_01", "name": "Grep",
                       "input": {"pattern": "fn parse", "path": "src"}}),
        ("tool_result", {"id": "toolu_01", "content": "\n".join(
            f"src/parser/mod{i}.rs:{10 * i}: pub fn parse_{rng.choice(WORDS)}(input: &str)"
            for i in range(40))}),
        ("tool_call", {"id": "toolu_02", "name": "Read",
                       "input": {"file_path": "src/parser/mod1.rs"}}),
        ("tool_result", {"id": "toolu_02", "content": "\n".join(
            f"{i:>5}\t    let {rng.choice(WORDS)} = {rng.choice(WORDS)}({rng.choice(WORDS)});"
            for i in range(200))}),
        ("assistant", "I found the problem; " + _text(rng, 60)),
        ("user", "Go ahead and make the change. " + _text(rng, 30)),
    ]
    return {"system": "You are Claude Code, Anthropic's official CLI for Claude. "
            + _text(rng, 1700), "tools": tools, "turns": turns}


def render(conv, dialect, model, stream, max_tokens=256):
    """The conversation as a request body in `dialect`."""
    if dialect == "anthropic":
        messages = []
        for kind, value in conv["turns"]:
            if kind == "user":
                messages.append({"role": "user", "content": [{"type": "text", "text": value}]})
            elif kind == "assistant":
                messages.append({"role": "assistant", "content": [{"type": "text", "text": value}]})
            elif kind == "tool_call":
                messages.append({"role": "assistant", "content": [
                    {"type": "tool_use", "id": value["id"], "name": value["name"],
                     "input": value["input"]}]})
            else:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": value["id"],
                     "content": value["content"]}]})
        return {
            "model": model, "max_tokens": max_tokens, "stream": stream,
            "system": [{"type": "text", "text": conv["system"],
                        "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": t["name"], "description": t["description"],
                       "input_schema": t["schema"]} for t in conv["tools"]],
            "messages": messages,
            "metadata": {"user_id": "user_bench_session_0000"},
        }
    if dialect in ("openai", "ollama"):
        messages = [{"role": "system", "content": conv["system"]}]
        for kind, value in conv["turns"]:
            if kind in ("user", "assistant"):
                messages.append({"role": kind, "content": value})
            elif kind == "tool_call":
                args = value["input"] if dialect == "ollama" else json.dumps(value["input"])
                call = {"function": {"name": value["name"], "arguments": args}}
                if dialect == "openai":
                    call = {"id": value["id"], "type": "function", **call}
                messages.append({"role": "assistant", "content": "" if dialect == "ollama"
                                 else None, "tool_calls": [call]})
            else:
                msg = {"role": "tool", "content": value["content"]}
                if dialect == "openai":
                    msg["tool_call_id"] = value["id"]
                messages.append(msg)
        tools = [{"type": "function", "function": {
            "name": t["name"], "description": t["description"], "parameters": t["schema"]}}
            for t in conv["tools"]]
        body = {"model": model, "messages": messages, "tools": tools, "stream": stream}
        if dialect == "openai":
            body["max_tokens"] = max_tokens
        else:
            body["options"] = {"num_predict": max_tokens}
        return body
    if dialect == "responses":
        items = []
        for kind, value in conv["turns"]:
            if kind == "user":
                items.append({"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": value}]})
            elif kind == "assistant":
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": value}]})
            elif kind == "tool_call":
                items.append({"type": "function_call", "call_id": value["id"],
                              "name": value["name"], "arguments": json.dumps(value["input"])})
            else:
                items.append({"type": "function_call_output", "call_id": value["id"],
                              "output": value["content"]})
        return {
            "model": model, "instructions": conv["system"], "input": items,
            "tools": [{"type": "function", "name": t["name"], "description": t["description"],
                       "parameters": t["schema"], "strict": False} for t in conv["tools"]],
            "stream": stream, "max_output_tokens": max_tokens,
        }
    raise ValueError(dialect)


def write_all(out_dir, model="bench-model"):
    """Write every (size, dialect, stream) body; returns {name: path}."""
    import os
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for size in ("small", "large"):
        conv = conversation(size)
        for dialect in DIALECTS:
            for stream in (False, True):
                name = f"{size}-{dialect}" + ("-stream" if stream else "")
                path = os.path.join(out_dir, name + ".json")
                with open(path, "w") as f:
                    json.dump(render(conv, dialect, model, stream), f, separators=(",", ":"))
                paths[name] = path
    return paths


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "bodies"
    for name, path in sorted(write_all(out).items()):
        import os
        print(f"{os.path.getsize(path):>7}  {path}")
