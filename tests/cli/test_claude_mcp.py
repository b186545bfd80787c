"""The real Claude Code with Glider's `/mcp` as its only MCP server (`--mcp-config`,
type http) and Glider's gateway as its API: the scripted model (glider-mock, behind the
gateway) calls a tool of the npm `server-everything` and one of `server-filesystem`,
both configured in Glider's `mcp:`; Claude Code runs them through `/mcp`, and the
tools' real results come back in the next request to the backend (the mock's reply
quotes the tool results it received)."""

import json
import pathlib
import urllib.request

from conftest import poll, running_glider
from test_real_clis import HERE, claude_gateway_env, cli, run

SERVERS = HERE / "node_modules" / "@modelcontextprotocol"

CONFIG = """
backends:
  - {{{{name: local, type: ollama, base_url: '{{url}}', models: [qwen-local]}}}}
model_aliases: {{{{'claude-*': qwen-local}}}}
routing: {{{{cloud_fallback: false}}}}
mcp:
  servers:
    everything: {{{{command: node, args: ['{everything}', stdio], allow: [echo]}}}}
    files: {{{{command: node, args: ['{filesystem}', '{root}'], allow: [read_text_file]}}}}
"""


def offered_tools(dashboard):
    with urllib.request.urlopen(f"{dashboard}/api/mcp", timeout=5) as reply:
        view = json.load(reply)
    return {tool for server in view["servers"] for tool in server["tools"]}


def test_claude_code_runs_mcp_tools_through_glider_mcp(tmp_path):
    home, work, root = tmp_path / "home", tmp_path / "work", tmp_path / "shared"
    for directory in (home, work, root):
        directory.mkdir()
    root = root.resolve()
    (root / "note.txt").write_text("filesystem says hello\n")
    config = CONFIG.format(
        everything=SERVERS / "server-everything" / "dist" / "index.js",
        filesystem=SERVERS / "server-filesystem" / "dist" / "index.js",
        root=root,
    )
    with running_glider(config) as glider:
        gateway = glider.match.group(1)
        wanted = {"everything__echo", "files__read_text_file"}
        assert poll(lambda: wanted <= offered_tools(glider.dashboard), timeout=30), offered_tools(glider.dashboard)
        mcp_config = tmp_path / "mcp.json"
        mcp_config.write_text(json.dumps({"mcpServers": {"glider": {"type": "http", "url": f"{gateway}/mcp"}}}))
        # Claude Code names an MCP tool mcp__SERVER__TOOL; in -p mode it runs only the
        # tools --allowedTools lets through (`mcp__glider`: every tool of that server).
        echo = json.dumps({"message": "from claude code"})
        read = json.dumps({"path": str(root / "note.txt")})
        prompt = f"use both [[call:mcp__glider__everything__echo {echo}]] [[call:mcp__glider__files__read_text_file {read}]]"
        code, out, err = run(
            [cli("claude"), "-p", prompt, "--output-format", "json", "--mcp-config", str(mcp_config),
             "--strict-mcp-config", "--allowedTools", "mcp__glider"],
            claude_gateway_env(home, gateway), work, timeout=90,
        )
        assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        result = json.loads(out)
        # The mock answers the tool results it was sent: both tools ran for real.
        assert result["result"].startswith("tool result: "), result
        assert "Echo: from claude code" in result["result"], result
        assert "filesystem says hello" in result["result"], result
        assert result["is_error"] is False, result
        with urllib.request.urlopen(f"{glider.dashboard}/api/mcp", timeout=5) as reply:
            calls = {server["name"]: server["calls"] for server in json.load(reply)["servers"]}
        assert calls == {"everything": 1, "files": 1}, calls
