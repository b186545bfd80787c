#!/usr/bin/env python3
"""A Glider plugin (standard library only) that provides a tool to the tool loop:
`word_count`. Glider offers the tools a plugin declares to a local model (with
`tools.loop` on), and runs the model's calls as `tools/call` here; the result is in
MCP's shape (`content` parts, `isError`). Protocol: docs/plugins.md."""
import json
import sys

MANIFEST = {
    "name": "tools-declare",
    "version": "1",
    "capabilities": {
        "tools": [
            {
                "name": "word_count",
                "description": "Count the words of a text.",
                "input_schema": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            }
        ]
    },
}


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


def call_tool(params):
    if params.get("name") != "word_count":
        return {"content": [{"type": "text", "text": f"no tool {params.get('name')!r}"}], "isError": True}
    text = params.get("arguments", {}).get("text")
    if not isinstance(text, str):
        return {"content": [{"type": "text", "text": "`text` must be a string"}], "isError": True}
    return {"content": [{"type": "text", "text": f"{len(text.split())} words"}]}


for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        reply(msg["id"], {"protocol_version": 1, "manifest": MANIFEST})
    elif method == "tools/call":
        reply(msg["id"], call_tool(msg.get("params", {})))
    elif method == "shutdown":
        reply(msg["id"], {})
        break
    elif "id" in msg:
        reply(msg["id"], {})
