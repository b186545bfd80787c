"""The real Claude Code and Codex CLIs (from npm, headless, throwaway HOME, no network
beyond loopback) against `glider serve` in front of a mock Ollama. Each completes a
turn that includes one tool call the CLI really runs, and its result."""

import json
import os
import pathlib
import subprocess

import pytest

from conftest import _binary, running_stack

HERE = pathlib.Path(__file__).resolve().parent
BIN = HERE / "node_modules" / ".bin"

# Every cloud model name the CLIs use lands on the local model (an Ollama mock).
CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: '{url}', models: [qwen-local]}}
model_aliases: {{'claude-*': qwen-local, 'gpt-*': qwen-local}}
routing: {{cloud_fallback: false}}
"""


def cli(name):
    path = BIN / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `npm install --prefix tests/cli` (.ci/run does)")
    return str(path)


def clean_env(home, **extra):
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("https_proxy", "http_proxy", "all_proxy")}
    env.update(HOME=str(home), NO_PROXY="127.0.0.1,localhost", **extra)
    return env


def claude_quiet_env(home, **extra):
    """Claude Code's environment: no telemetry, updates, non-essential traffic or
    retries; `extra` on top."""
    return clean_env(
        home,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_MAX_RETRIES="0",
        **extra,
    )


def claude_gateway_env(home, gateway):
    """[claude_quiet_env] for Glider's gateway at base URL `gateway`."""
    return claude_quiet_env(home, ANTHROPIC_BASE_URL=gateway, ANTHROPIC_API_KEY="test-key")


@pytest.fixture(scope="module")
def gateway():
    with running_stack(CONFIG) as (base, _mock):
        yield base


def run(args, env, cwd, timeout=120):
    # stdin closed: Codex waits forever on an open pipe. `timeout` bounds every run, and
    # the CLI's own process group is killed with it.
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(f"{args[0]} timed out\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    return proc.returncode, out, err


def test_claude_code_runs_a_tool_through_glider(gateway, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_gateway_env(home, gateway)
    prompt = 'run it [[call:Bash {"command":"echo glider-tool-ok","description":"print a marker"}]]'
    code, out, err = run([cli("claude"), "-p", prompt, "--output-format", "json", "--allowedTools", "Bash"], env, work)
    assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    result = json.loads(out)
    # The mock answers the tool result with its text: Claude Code ran Bash for real.
    assert "tool result: glider-tool-ok" in result["result"], result
    assert result["num_turns"] == 2, result
    assert result["is_error"] is False


def codex_config(home, gateway):
    """A CODEX_HOME whose provider is Glider's gateway (Responses), with no retries."""
    (home / "config.toml").write_text(f"""
model = "gpt-5.5"
model_provider = "glider"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false

[model_providers.glider]
name = "Glider"
base_url = "{gateway}/v1"
env_key = "GLIDER_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
""")
    return clean_env(home, CODEX_HOME=str(home), GLIDER_KEY="test-key")


def test_codex_runs_a_tool_through_glider(gateway, tmp_path):
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = codex_config(home, gateway)
    last = tmp_path / "last.txt"
    prompt = 'run it [[call:exec_command {"cmd":"echo glider-tool-ok"}]]'
    code, out, err = run(
        [cli("codex"), "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never",
         "--dangerously-bypass-approvals-and-sandbox", "--json", "-o", str(last), prompt],
        env, work,
    )
    assert code == 0, f"codex failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    executed = [e["item"] for e in events if e.get("item", {}).get("type") == "command_execution"
                and e.get("type") == "item.completed"]
    assert executed and executed[0]["aggregated_output"] == "glider-tool-ok\n" and executed[0]["exit_code"] == 0, events
    assert "glider-tool-ok" in last.read_text()


# A cloud backend nothing answers: a request reaches the model only if /local sent it
# to the local one.
FLAG_CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: '{url}', models: [qwen-local]}}
  - {{name: claude, type: anthropic, base_url: 'http://127.0.0.1:1', api_key: k, models: ['claude-*']}}
routing: {{cloud_fallback: false, local_fallback: false, classifier: {{enabled: false}}}}
"""


def test_claude_code_reaches_glider_with_local_through_glider_setup_claude(tmp_path):
    """Claude Code refuses an unknown `/local`; `glider setup claude`'s command file lets
    it through, Glider routes it local, and neither the flag nor Claude Code's command
    block reaches the model (the mock echoes what it was sent)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_quiet_env(home, ANTHROPIC_API_KEY="test-key")
    env.pop("CLAUDE_CONFIG_DIR", None)
    setup = subprocess.run([_binary("glider"), "setup", "claude"], env=env, capture_output=True, text=True, timeout=30)
    assert setup.returncode == 0, setup.stderr
    assert (home / ".claude" / "commands" / "local.md").read_text().endswith("/local $ARGUMENTS\n")
    with running_stack(FLAG_CONFIG) as (base, _mock):
        env["ANTHROPIC_BASE_URL"] = base
        code, out, err = run([cli("claude"), "-p", "/local say hi", "--output-format", "json"], env, work)
    assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    result = json.loads(out)
    assert result["is_error"] is False, result
    echoed = result["result"]
    assert "echo:" in echoed and "say hi" in echoed, result
    assert "/local" not in echoed and "command-name" not in echoed and "command-args" not in echoed, echoed
