#!/usr/bin/env python3
"""A Glider plugin (standard library only) with a routing opinion: a request of fewer
than $SMALL_TOKENS estimated input tokens (default 2000) goes local; a larger one gets
no opinion (the router's other rules decide). It never sees prompt text.
Protocol: docs/plugins.md."""
import json
import os
import sys

SMALL = int(os.environ.get("SMALL_TOKENS", "2000"))
MANIFEST = {"name": "route-small-local", "version": "1", "capabilities": {"route": {}}}


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        reply(msg["id"], {"protocol_version": 1, "manifest": MANIFEST})
    elif method == "route":
        tokens = msg["params"]["estimated_tokens"]
        if tokens < SMALL:
            reply(msg["id"], {"target": "local", "reason": f"{tokens} tokens < {SMALL}"})
        else:
            reply(msg["id"], {"target": None})
    elif method == "shutdown":
        reply(msg["id"], {})
        break
    elif "id" in msg:
        reply(msg["id"], {})
