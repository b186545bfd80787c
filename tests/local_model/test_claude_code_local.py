"""The real Claude Code (`claude -p`, from tests/cli, throwaway HOME, loopback only)
through Glider to the real small model: every Claude model name is aliased to the
llama-server backend, so its main turn (24 tools, a 64k output request) is fitted and
answered by Gemma 3 270M. The model's words are not asserted: the CLI finishing the
turn without an error, and the record showing what was fitted, are. A reply cut at
Glider's output cap ends as `end_turn` with a note (docs/local-models.md): reported as
`max_tokens`, Claude Code took it for its own 64k limit and failed the turn."""

import json
import pathlib
import sys

import pytest

from llama import VIA_OPENAI, get_json, running_glider_on, running_llama_server

# The CLI helpers of tests/cli (its directory is on the path only when pytest collected it).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
from test_real_clis import clean_env, cli, run  # noqa: E402

# Claude Code's main turn is ~22k estimated tokens as sent and ~4k once fitted (its
# system prompt stays): more than the suite's 4k window, so this server gets a larger one.
WINDOW = 32768


@pytest.fixture(scope="module")
def glider_for_claude():
    with running_llama_server(context=WINDOW) as url:
        with running_glider_on(url, extra=f"model_aliases: {{'claude-*': {VIA_OPENAI}}}", context=WINDOW) as glider:
            yield glider


def test_claude_code_turn_answered_by_the_local_model(glider_for_claude, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = clean_env(home, ANTHROPIC_BASE_URL=glider_for_claude.match.group(1), ANTHROPIC_API_KEY="test-key",
                    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                    DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1", CLAUDE_CODE_MAX_RETRIES="0")
    code, out, err = run([cli("claude"), "-p", "Reply with one word: hello", "--output-format", "json", "--max-turns", "1"],
                         env, work, timeout=600)
    result = json.loads(out) if out.strip().startswith("{") else {}
    # The 270M model samples: now and then it answers with a tool call, which
    # `--max-turns 1` ends as `error_max_turns` after a well-formed `tool_use` turn. That
    # is the model's choice, read correctly by the CLI; any other failure is Glider's.
    called_a_tool = result.get("subtype") == "error_max_turns" and result.get("stop_reason") == "tool_use"
    if not called_a_tool:
        assert code == 0, f"claude failed ({code})\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
        assert result.get("type") == "result" and isinstance(result.get("result"), str), (out[-2000:], err[-2000:])
        assert result.get("is_error") is False and result["result"].strip(), result
    requests = get_json(f"{glider_for_claude.dashboard}/api/requests?limit=20")["requests"]
    main = [r for r in requests if any("tools" in note for note in r["fitted"])]
    assert main, requests
    assert main[0]["backend"] == "llama-openai" and main[0]["local"] is True
    assert any("max_tokens" in note for note in main[0]["fitted"]), main[0]
    assert main[0]["status"] == 200, main[0]
