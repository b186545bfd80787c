"""The summarizer against the real small model (llama.cpp's llama-server on Gemma 3
270M): a Claude Code-shaped episode that edits a file goes through the gateway, the
session goes idle, and the compaction is asked of the real model over its
OpenAI-compatible wire. A 270M model's words are not asserted: the `compaction`
event's structure is (its range, backend and model, the model's answer taken and
checked against the graph: accepted with a narrative, or rejected naming what it left
out), and `/metrics` counts the run."""

import json
import os
import re
import subprocess
import urllib.request

import pytest

from conftest import _binary, poll
from llama import VIA_OPENAI, running_glider_on, running_llama_server

SESSION = "local-model-summary"
EDITED = "src/app.py"
EXTRA = "context: {summarizer: {backend: llama-openai, idle_secs: 15, max_tokens: 96, timeout_secs: 300}}"
EDIT_TOOL = {"name": "Edit", "description": "Replace text in a file", "input_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def llama():
    with running_llama_server() as url:
        yield url


def claude_code(gateway, messages):
    """One non-streamed Anthropic request of the session, as Claude Code sends it."""
    request = urllib.request.Request(
        f"{gateway}/v1/messages",
        data=json.dumps({"model": VIA_OPENAI, "max_tokens": 32, "tools": [EDIT_TOOL], "messages": messages}).encode(),
        headers={"content-type": "application/json", "x-claude-code-session-id": SESSION},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        assert reply.status == 200


def compactions(home):
    """The session's compaction events, from `glider context export --json`."""
    done = subprocess.run(
        [_binary("glider"), "context", "export", f"claude-code:{SESSION}", "--json"],
        capture_output=True, text=True, env=dict(os.environ, GLIDER_HOME=str(home)),
    )
    if done.returncode != 0:
        return []
    events = json.loads(done.stdout)["events"]
    return [e for e in events if e["event"]["body"]["kind"] == "compaction"]


def test_an_idle_episode_is_compacted_by_the_real_model(llama):
    with running_glider_on(llama, extra=EXTRA) as glider:
        gateway = glider.match.group(1)
        ask = {"role": "user", "content": f"Rename foo to bar in {EDITED}."}
        claude_code(gateway, [ask])
        edit = {"file_path": EDITED, "old_string": "foo", "new_string": "bar"}
        claude_code(gateway, [
            ask,
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": edit}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "The file has been updated."}]},
        ])
        # Idle for 15 s after the episode (longer than a reply takes): one compaction.
        found = poll(lambda: compactions(glider.home), timeout=345)
        assert len(found) == 1, found
        body = found[0]["event"]["body"]
        print("compaction event:", json.dumps(body))  # what the real model did, for the reader
        assert body["trigger"] == "idle"
        assert (body["backend"], body["model"]) == ("llama-openai", VIA_OPENAI)
        assert body["until_event"] > 0 and body["until_ms"] >= body["since_ms"] > 0
        assert isinstance(body["took_ms"], int)
        # The real model answered (no transport failure or timeout), with usage. An
        # accepted compaction has no `reason` (the event leaves an absent one out).
        reason = body.get("reason")
        assert not (reason or "").startswith("backend"), body
        assert "within" not in (reason or ""), body
        assert body["output_tokens"] > 0, body
        if body["accepted"]:
            assert body["narrative"].strip() and reason is None and body["missing"] == []
        else:
            assert body["narrative"] == ""
            assert set(body["missing"]) <= {EDITED}, body
            # Rejected for what it left out, for writing nothing, or for being no summary
            # at all (summarizer::judge): Gemma 270M is a base model, and repeats the
            # summarizer's instructions back (99 % of its phrases, measured here).
            judged = (reason or "").startswith(
                ("the summary restates its instructions", "the summary copies its input", "the summary says nothing"))
            assert body["missing"] or reason == "the model wrote no summary" or judged, body
            assert not judged or body.get("rejected_text"), body
        metrics = urllib.request.urlopen(f"{glider.dashboard}/metrics", timeout=10).read().decode()
        counts = dict(re.findall(r'glider_context_compactions_total\{outcome="(\w+)"\} (\d+)', metrics))
        assert int(counts["accepted"]) + int(counts["rejected"]) == 1, counts
        assert int(counts["accepted" if body["accepted"] else "rejected"]) == 1, counts
