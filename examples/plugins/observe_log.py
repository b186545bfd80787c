#!/usr/bin/env python3
"""A Glider plugin (standard library only) that observes every event it may and
appends each as one JSON line to the file named by $GLIDER_PLUGIN_LOG (default
observed.jsonl). Protocol: docs/plugins.md."""
import json
import os
import sys

LOG = os.environ.get("GLIDER_PLUGIN_LOG", "observed.jsonl")
MANIFEST = {
    "name": "observe-log",
    "version": "1",
    "capabilities": {
        "observe": {
            "events": ["request_finished", "route_decided", "tool_call", "budget_stop"]
        }
    },
}


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        reply(msg["id"], {"protocol_version": 1, "manifest": MANIFEST})
    elif method == "observe":
        with open(LOG, "a", encoding="utf-8") as out:
            out.write(json.dumps(msg["params"]) + "\n")
    elif method == "shutdown":
        reply(msg["id"], {})
        break
    elif "id" in msg:  # heartbeat, and anything else Glider calls
        reply(msg["id"], {})
