#!/usr/bin/env python3
"""A Glider plugin (standard library only) that declares a tool in its manifest.
Glider keeps declared tools with the manifest; serving them to the tool loop and
`/mcp` comes with the MCP client and is not done yet (docs/plugins.md)."""
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
                "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }
        ]
    },
}


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        reply(msg["id"], {"protocol_version": 1, "manifest": MANIFEST})
    elif msg.get("method") == "shutdown":
        reply(msg["id"], {})
        break
    elif "id" in msg:
        reply(msg["id"], {})
