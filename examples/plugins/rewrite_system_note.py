#!/usr/bin/env python3
"""A Glider plugin (standard library only) that adds a system note ($GLIDER_NOTE) to
every request going to a local model. It needs no prompt text: it answers with
`append_system`, and Glider adds the note. Protocol: docs/plugins.md."""
import json
import os
import sys

NOTE = os.environ.get("GLIDER_NOTE", "Answer briefly; this repository uses tabs.")
MANIFEST = {"name": "rewrite-system-note", "version": "1", "capabilities": {"rewrite": {"scope": "local"}}}


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        reply(msg["id"], {"protocol_version": 1, "manifest": MANIFEST})
    elif method == "rewrite":
        reply(msg["id"], {"append_system": NOTE})
    elif method == "shutdown":
        reply(msg["id"], {})
        break
    elif "id" in msg:
        reply(msg["id"], {})
