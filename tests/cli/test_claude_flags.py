"""Glider's message flags typed in the real Claude Code (issue 21, item 2). Claude Code
refuses an unknown slash command, so a flag reaches Glider only through a command file:
`glider setup claude` installs them in ~/.claude (here a throwaway HOME), `glider run
claude` hands them to that one process (`--add-dir`) and leaves ~/.claude alone. Each
flag is typed in `claude -p`; the backends are recording servers on loopback, so each test
reads what the model was sent: the flag and Claude Code's record of the command never
reach it. Delegation flags run scripted vendor stand-ins (crates/glider/tests/fixtures)."""

import contextlib
import json
import pathlib
import subprocess
import threading

import pytest

from conftest import ChatBackend, Process, _binary, start_glider
from test_mitm_clis import Origin, free_port, make_origin_certs
from test_real_clis import claude_quiet_env, cli, run

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "crates" / "glider" / "tests" / "fixtures"

# Three recording backends; no model alias, so a request without a flag names a model
# (Claude Code's `claude-…`) that none serves and is refused: only a flag routes it.
CONFIG = """
backends:
  - {{name: local, type: vllm, base_url: '{local}', models: [qwen-local]}}
  - {{name: spare, type: vllm, base_url: '{spare}', models: [spare-model]}}
  - {{name: cloud, type: openai, base_url: '{cloud}', api_key: k-cloud, models: [gpt-cloud]}}
routing: {{cloud_fallback: false, local_fallback: false, classifier: {{enabled: false}}}}
delegate:
  workdir: '{work}'
  timeout_secs: 60
  claude: {{path: '{fake_claude}', env: {{GLIDER_TEST_DIR: '{logs}'}}}}
  cursor_agent: {{path: '{fixtures}/cursor-agent', env: {{GLIDER_TEST_DIR: '{logs}'}}}}
  agy: {{path: '{fixtures}/agy', mode: headless, env: {{GLIDER_TEST_DIR: '{logs}'}}}}
"""

# A stand-in for the delegate Claude Code: logs its argv and prints Claude Code's
# documented `-p --output-format stream-json` lines.
FAKE_CLAUDE = """#!/bin/sh
printf '%s\\n' "$*" >> "$GLIDER_TEST_DIR/argv.log"
echo '{"type":"system","subtype":"init","session_id":"sess-1","tools":["Bash"]}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"delegate claude did it"}]},"session_id":"sess-1"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"sess-1"}'
"""


@contextlib.contextmanager
def recording_backends(*names):
    """One [ChatBackend] per name, served on threads; stopped after."""
    servers = {name: ChatBackend() for name in names}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def user_texts(body):
    """Every text the user's messages of a Chat Completions body hold."""
    texts = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        texts.extend(parts)
    return "\n".join(texts)


def assert_reached_without_flag(backend, flag):
    """`backend` was asked `say hi`, with neither `flag` nor Claude Code's command block."""
    assert backend.bodies, f"{flag}: the backend got no request"
    for body in backend.bodies:
        text = user_texts(body)
        assert "say hi" in text, f"{flag}: {text}"
        assert flag not in text, f"{flag} reached the model: {text}"
        for tag in ("<command-name>", "<command-args>", "<command-message>"):
            assert tag not in text, f"{flag}: {tag} reached the model: {text}"


@pytest.fixture(scope="module")
def flag_stack(tmp_path_factory):
    """`glider serve` in front of three recording backends and three delegate
    stand-ins; yields a dict: gateway, backends, logs (the stand-ins' log dir)."""
    tmp = tmp_path_factory.mktemp("flags")
    work, logs = tmp / "work", tmp / "logs"
    work.mkdir()
    logs.mkdir()
    fake_claude = tmp / "claude"
    fake_claude.write_text(FAKE_CLAUDE)
    fake_claude.chmod(0o755)
    with recording_backends("local", "spare", "cloud") as backends:
        config = tmp / "glider.yaml"
        config.write_text(CONFIG.format(
            local=backends["local"].url, spare=backends["spare"].url, cloud=backends["cloud"].url,
            work=work, logs=logs, fake_claude=fake_claude, fixtures=FIXTURES))
        glider = start_glider(config, tmp / "glider-home")
        try:
            yield {"gateway": glider.match.group(1), "backends": backends, "logs": logs}
        finally:
            glider.stop()


@pytest.fixture
def claude_home(tmp_path, flag_stack):
    """A throwaway HOME where `glider setup claude` ran, and Claude Code's environment
    for the gateway; the backends' logs start empty."""
    home = tmp_path / "home"
    home.mkdir()
    env = claude_quiet_env(home, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=flag_stack["gateway"])
    env.pop("CLAUDE_CONFIG_DIR", None)
    setup = subprocess.run([_binary("glider"), "setup", "claude"], env=env, capture_output=True, text=True,
                           timeout=30)
    assert setup.returncode == 0, setup.stderr
    for backend in flag_stack["backends"].values():
        with backend.lock:
            backend.bodies.clear()
    for log in flag_stack["logs"].iterdir():
        log.unlink()
    work = tmp_path / "work"
    work.mkdir()
    return env, work


def claude_p(prompt, env, work):
    code, out, err = run([cli("claude"), "-p", prompt, "--output-format", "json"], env, work)
    assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    result = json.loads(out)
    assert result["is_error"] is False, result
    return result["result"]


@pytest.mark.parametrize("flag, prompt, answers", [
    ("/local", "/local say hi", "local"),
    ("/cloud", "/cloud say hi", "cloud"),
    ("/via", "/via spare say hi", "spare"),
])
def test_a_routing_flag_typed_in_claude_code_routes_and_never_reaches_the_model(
        flag_stack, claude_home, flag, prompt, answers):
    env, work = claude_home
    reply = claude_p(prompt, env, work)
    backends = flag_stack["backends"]
    assert reply.startswith("reply "), reply
    assert_reached_without_flag(backends[answers], flag)
    others = {name: b.bodies for name, b in backends.items() if name != answers and b.bodies}
    assert not others, f"{flag} should reach only {answers}: {others}"


@pytest.mark.parametrize("flag, log, answer", [
    ("/claude", "argv.log", "delegate claude did it"),
    ("/cursor-agent", "argv.log", "Wrote NOTES.md"),
    ("/agy", "prompt.log", "Done: edited src/lib.rs"),
])
def test_a_delegation_flag_typed_in_claude_code_runs_the_vendor_cli(flag_stack, claude_home, flag, log, answer):
    env, work = claude_home
    reply = claude_p(f"{flag} say hi", env, work)
    assert answer in reply, reply
    # The stand-in got the task, without the flag or Claude Code's command block.
    told = (flag_stack["logs"] / log).read_text()
    assert "say hi" in told, told
    assert flag not in told and "command-" not in told, told
    # A delegated message goes to no model at all.
    sent = {name: b.bodies for name, b in flag_stack["backends"].items() if b.bodies}
    assert not sent, sent


@pytest.fixture(scope="module")
def mitm_flag_stack(tmp_path_factory):
    """Glider's MITM proxy decrypting api.anthropic.com, whose origin is a local TLS
    look-alike, with one recording local backend; yields a dict: config, home (GLIDER_HOME),
    origin, local."""
    tmp = tmp_path_factory.mktemp("mitm-flags")
    ca, cert, key = make_origin_certs(tmp)
    origin = Origin(str(cert), str(key))
    try:
        with recording_backends("local") as backends:
            config = tmp / "glider.yaml"
            port = free_port()
            config.write_text(f"""
backends:
  - {{name: local, type: vllm, base_url: '{backends["local"].url}', models: [qwen-local]}}
routing: {{cloud_fallback: false, local_fallback: false, classifier: {{enabled: false}}}}
mitm:
  enabled: true
  port: {port}
  hosts: [api.anthropic.com]
  upstream_overrides: {{api.anthropic.com: '127.0.0.1:{origin.port}'}}
  upstream_ca_file: '{ca}'
""")
            home = tmp / "glider-home"
            env = claude_quiet_env(tmp, GLIDER_HOME=str(home), GLIDER_LOG="warn")
            glider = Process([_binary("glider"), "serve", "-c", str(config), "--port", "0",
                              "--dashboard-port", "0"], r"mitm proxy listening on", env=env)
            try:
                yield {"config": config, "home": home, "origin": origin, "local": backends["local"]}
            finally:
                glider.stop()
    finally:
        origin.stop()


def test_glider_run_claude_makes_the_flags_typable_without_touching_the_users_claude_dir(mitm_flag_stack, tmp_path):
    """No `glider setup claude` here: `glider run claude` alone lets `/local` through
    (before, Claude Code answered `Unknown command: /local` itself), the local backend
    answers without the flag, and the user's ~/.claude gets no command file."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_quiet_env(home, ANTHROPIC_API_KEY="sk-ant-user-own-key", GLIDER_HOME=str(mitm_flag_stack["home"]))
    for name in ("ANTHROPIC_BASE_URL", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "CLAUDE_CONFIG_DIR"):
        env.pop(name, None)
    origin = mitm_flag_stack["origin"]
    before = len(origin.messages())
    code, out, err = run([_binary("glider"), "run", "-c", str(mitm_flag_stack["config"]), cli("claude"),
                          "-p", "/local say hi", "--output-format", "json"], env, work)
    assert code == 0, f"glider run claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    result = json.loads(out)
    assert result["is_error"] is False and result["result"].startswith("reply "), result
    assert_reached_without_flag(mitm_flag_stack["local"], "/local")
    to_origin = [r["body"].decode() for r in origin.messages()[before:]]
    assert not any("say hi" in body for body in to_origin), to_origin
    assert not (home / ".claude" / "commands").exists(), list((home / ".claude").rglob("*"))
