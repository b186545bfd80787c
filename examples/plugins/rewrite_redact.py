#!/usr/bin/env python3
"""A Glider plugin (standard library only) that redacts secrets (API-key shapes) from
every text of a request before it is sent, on local and cloud routes. It must see
prompt text, so its config entry needs `allow_prompt_text: true`.
Protocol: docs/plugins.md."""
import json
import re
import sys

SECRET = re.compile(r"(sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36})")
MANIFEST = {
    "name": "rewrite-redact",
    "version": "1",
    "capabilities": {"rewrite": {"scope": "both"}},
    "reads": ["turns", "tools", "tool_choice", "max_tokens", "temperature", "stream", "metadata"],
}


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


def redact(value):
    """Redact inside every string of a part (text, tool results' text)."""
    if isinstance(value, str):
        return SECRET.sub("[redacted]", value)
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, dict):
        return {k: (redact(v) if k in ("text", "content", "parts") else v) for k, v in value.items()}
    return value


for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        reply(msg["id"], {"protocol_version": 1, "manifest": MANIFEST})
    elif method == "rewrite":
        request = msg["params"]["request"]
        redacted = dict(request, turns=redact(request.get("turns", [])))
        reply(msg["id"], {"request": redacted} if redacted != request else {})
    elif method == "shutdown":
        reply(msg["id"], {})
        break
    elif "id" in msg:
        reply(msg["id"], {})
