"""The context graph from a real Claude Code session: several `claude -p` turns joined by
`--resume`, against glider-mock's scripted model, which makes the CLI `Read` a file,
`Edit` it and run a `Bash` command for real. `glider context export ID --json` (and the
dashboard's REST API) must then list exactly that file and that command: through the
gateway (base URL), and through the MITM proxy (HTTPS_PROXY, the CLI's own host). The
same for Codex, whose `apply_patch` and `exec_command` the mock makes it run. Then a
`/local` turn of the same session: the local backend (a second, recording server) gets
the continuity record and the bounded episode, never a turn from before it."""

import contextlib
import http.server
import json
import re
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ChatBackend, _binary, get_json, poll, running_glider
from test_mitm_clis import claude_env, free_port, make_origin_certs, mitm_stack  # noqa: F401  (a fixture)
from test_real_clis import CONFIG, claude_gateway_env, claude_quiet_env, clean_env, cli, codex_config, run


def claude_turns(env, work, model=None):
    """Three `claude -p` turns in one session (the 2nd and 3rd `--resume` the 1st); the
    session id and the command the last one ran."""
    notes = work / "notes.txt"
    notes.write_text("alpha\n")
    command = f"cat {notes}"
    prompts = [
        ("Read", 'look at the notes [[call:Read {"file_path":"%s"}]]' % notes),
        ("Edit", 'fix the notes [[call:Edit {"file_path":"%s","old_string":"alpha","new_string":"beta"}]]' % notes),
        ("Bash", 'show the notes [[call:Bash {"command":"%s","description":"show the notes"}]]' % command),
    ]
    session = None
    for tool, prompt in prompts:
        args = [cli("claude"), "-p", prompt, "--output-format", "json", "--allowedTools", tool]
        if model:
            args += ["--model", model]
        if session:
            args += ["--resume", session]
        code, out, err = run(args, env, work)
        assert code == 0, f"claude ({tool}) failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        result = json.loads(out)
        assert result["is_error"] is False, result
        # The mock acknowledges the tool's result: the CLI really ran the tool.
        assert "tool result" in result["result"], (tool, result)
        session = session or result["session_id"]
    assert notes.read_text() == "beta\n", "the Edit really happened"
    return session, str(notes), command


def glider_context(home, *args):
    proc = subprocess.run([_binary("glider"), "context", *args], env=clean_env(home, GLIDER_HOME=str(home)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def session_with(home, command):
    """The session (key, export) whose graph shows `command`, once the writer has it."""
    def find():
        for line in glider_context(home, "sessions").splitlines()[1:]:
            key = line.split("\t")[0]
            export = json.loads(glider_context(home, "export", key, "--json"))
            if any(c["command"] == command for c in export["graph"]["commands"]):
                return key, export
        return None
    found = poll(find, timeout=20)
    assert found, glider_context(home, "sessions")
    return found


def steps_now(dashboard, key):
    """The session's steps as the dashboard shows them now."""
    view = get_json(session_url(dashboard, key))
    return [s for e in view["graph"]["episodes"] for s in e["steps"]]


def assert_exactly_those(export, path, command, ops=("read", "edited")):
    graph = export["graph"]
    files = {f["path"]: [c["op"] for c in f["changes"]] for f in graph["files"]}
    assert files == {path: list(ops)}, graph["files"]
    commands = [(c["command"], c.get("exit_code")) for c in graph["commands"]]
    assert [c for c, _ in commands] == [command], graph["commands"]
    assert all(code in (0, None) for _, code in commands), commands
    assert not [e for e in graph["errors"] if e.get("closed_ms") is None], graph["errors"]


def test_claude_code_sessions_graph_through_the_gateway(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with running_glider(CONFIG) as glider:
        env = claude_gateway_env(home, glider.match.group(1))
        session, path, command = claude_turns(env, work)
        key, export = session_with(glider.home, command)
        assert_scoped(key, f"claude-code:{session}")
        assert_exactly_those(export, path, command)
        # Each `claude -p` turn began an episode with the user's own words as its goal.
        goals = [e["goal"] or "" for e in export["graph"]["episodes"]]
        for words in ("look at the notes", "fix the notes", "show the notes"):
            assert any(words in goal for goal in goals), (words, goals)
        # The dashboard's REST API shows the same graph.
        with urllib.request.urlopen(session_url(glider.dashboard, key)) as reply:
            view = json.load(reply)
        assert view["graph"]["files"] == export["graph"]["files"]
        assert view["graph"]["commands"] == export["graph"]["commands"]


def test_claude_code_sessions_graph_through_the_mitm_proxy(mitm_stack, tmp_path):  # noqa: F811
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_env(home, HTTPS_PROXY=mitm_stack["proxy"], NODE_EXTRA_CA_CERTS=str(mitm_stack["ca"]))
    session, path, command = claude_turns(env, work, model="claude-local-1")
    key, export = session_with(mitm_stack["home"], command)
    assert_scoped(key, f"claude-code:{session}")
    assert_exactly_those(export, path, command)
    steps = [s for e in export["graph"]["episodes"] for s in e["steps"]]
    assert steps and all(s["door"] == "mitm" for s in steps), steps


def test_codex_sessions_graph_through_the_gateway(tmp_path):
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "notes.txt").write_text("alpha\n")
    patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-alpha\n+beta\n*** End Patch\n"
    command = "echo codex-was-here"
    prompt = 'fix the notes [[call:apply_patch %s]] then [[call:exec_command {"cmd":"%s"}]]' % (
        json.dumps(patch), command)
    with running_glider(CONFIG) as glider:
        env = codex_config(home, glider.match.group(1))
        code, out, err = run(
            [cli("codex"), "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never",
             "--dangerously-bypass-approvals-and-sandbox", "--json", prompt],
            env, work,
        )
        assert code == 0, f"codex failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        assert (work / "notes.txt").read_text() == "beta\n", out[-3000:]
        key, export = session_with(glider.home, command)
        assert_scoped(key, "codex:")
        assert_exactly_those(export, "notes.txt", command, ops=["edited"])


def text_of(message):
    """A Chat Completions message's text (a string or a list of text parts)."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def assert_scoped(key, session):
    """`key` is the CLI's `session` (or, ending in `:`, one of its sessions) scoped by a
    one-way digest of the client's key (docs/context.md, "Session key"): the CLI sent
    one, and the raw key is nowhere in it."""
    assert re.fullmatch(r"k[0-9a-f]{16}/" + re.escape(session) + (".+" if session.endswith(":") else ""), key), (
        key, session)
    assert "test-key" not in key and "sk-ant" not in key, key


def session_url(dashboard, key):
    """The dashboard's URL of session `key` (a key scoped by the client's credential
    holds a `/`, so it is one encoded path segment, as the dashboard's own page sends it)."""
    return f"{dashboard}/api/context/sessions/{urllib.parse.quote(key, safe='')}"


class ScriptedOrigin:
    """api.anthropic.com as the MITM door sees it: TLS on 127.0.0.1 (a test CA), every
    request relayed to glider-mock's scripted Anthropic model at `upstream` (set once it
    runs) and its reply returned whole, so a request Glider forwards to the CLI's own
    cloud is answered by the same script as through the gateway."""

    def __init__(self, cert, key):
        self.upstream = None
        self.paths = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def relay(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                origin.paths.append((self.command, self.path))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("content-type", "anthropic-version", "x-api-key", "authorization")}
                request = urllib.request.Request(origin.upstream + self.path, data=body, headers=headers,
                                                 method=self.command)
                try:
                    with urllib.request.urlopen(request, timeout=60) as reply:
                        status, content_type, data = reply.status, reply.headers.get("content-type"), reply.read()
                except urllib.error.HTTPError as error:
                    status, content_type, data = error.code, error.headers.get("content-type"), error.read()
                self.send_response(status)
                self.send_header("content-type", content_type or "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = relay

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.set_alpn_protocols(["http/1.1"])
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def mitm_door(tmp_path):
    """What Claude Code needs to reach Glider's MITM proxy as a user runs it (only
    HTTPS_PROXY and the CA trust): the config's `mitm` block, with the CLI's own host
    sent to the scripted origin, and a function giving the CLI's environment once
    Glider runs."""
    ca, cert, key = make_origin_certs(tmp_path)
    origin = ScriptedOrigin(str(cert), str(key))
    port = free_port()
    block = f"""
mitm:
  enabled: true
  port: {port}
  hosts: [api.anthropic.com]
  upstream_overrides: {{{{api.anthropic.com: '127.0.0.1:{origin.port}'}}}}
  upstream_ca_file: '{ca}'
"""

    def env_for(home, glider):
        def listening():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
            return False
        assert poll(listening, timeout=20), "the MITM proxy listens"
        origin.upstream = f"http://{glider.mock}"
        env = claude_env(home, HTTPS_PROXY=f"http://127.0.0.1:{port}",
                         NODE_EXTRA_CA_CERTS=str(glider.home / "mitm" / "ca.crt"))
        env.pop("CLAUDE_CONFIG_DIR", None)
        return env
    return block, env_for, origin


@contextlib.contextmanager
def turns_then_local(tmp_path, context="{}", mitm=False):
    """The three scripted turns (Read, Edit, Bash) answered by the cloud mock (every
    Claude model name) in front of a recording local backend, `glider setup claude`'s
    command files installed first. Yields once the server holds the session's record
    naming the edit: (run, local backend, record text held); `run(prompt)` runs one
    more `claude -p` turn of the session and returns its JSON result. `context` is
    merged into the config's `context`; the summarizer is off (it would use the local
    backend too, off the request path), so the local log is the later turns' alone.
    With `mitm`, the CLI goes through Glider's MITM proxy (HTTPS_PROXY) instead of the
    gateway (its base URL)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_quiet_env(home, ANTHROPIC_API_KEY="test-key")
    env.pop("CLAUDE_CONFIG_DIR", None)
    setup = subprocess.run([_binary("glider"), "setup", "claude"], env=env, capture_output=True, text=True,
                           timeout=30)
    assert setup.returncode == 0, setup.stderr
    local = ChatBackend(models=["m-local"], window=131072)
    threading.Thread(target=local.serve_forever, daemon=True).start()
    block, env_for, origin = mitm_door(tmp_path) if mitm else ("", None, None)
    settings = {"summarizer": {"enabled": False}, **json.loads(context)}
    config = f"""
backends:
  - {{{{name: cloud, type: anthropic, base_url: '{{url}}', api_key: k, models: ['claude-*']}}}}
  - {{{{name: local, type: vllm, base_url: '{local.url}', models: [m-local]}}}}
routing: {{{{cloud_fallback: false, local_fallback: false, classifier: {{{{enabled: false}}}}}}}}
context: {json.dumps(settings).replace("{", "{{").replace("}", "}}")}
{block}"""
    try:
        with running_glider(config) as glider:
            if mitm:
                env = env_for(home, glider)
            else:
                env["ANTHROPIC_BASE_URL"] = glider.match.group(1)
            session, path, command = claude_turns(env, work)
            key, _ = session_with(glider.home, command)
            assert not local.bodies, "the scripted turns went to the cloud mock"

            def held():
                text = get_json(session_url(glider.dashboard, key))["record"]["live"]
                return text if text and f"- {path}: edited" in text else None
            record = poll(held, timeout=20)
            assert record, get_json(session_url(glider.dashboard, key))

            def turn(prompt):
                code, out, err = run([cli("claude"), "-p", prompt, "--output-format", "json", "--resume", session],
                                     env, work)
                assert code == 0, f"claude ({prompt}) failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
                result = json.loads(out)
                assert result["is_error"] is False, result
                return result
            turn.glider, turn.key, turn.path, turn.env, turn.work = glider, key, path, env, work
            yield turn, local, record
    finally:
        local.shutdown()
        local.server_close()
        if origin:
            origin.stop()


def system_record(body):
    """The continuity record a local request carries as system text (None: none)."""
    return next((text_of(m) for m in body["messages"] if m["role"] == "system" and "<continuity-record" in text_of(m)),
                None)


def assert_never_sent(bodies, earlier, tools=False):
    """No message but system text, in any request the local backend got, holds the
    words of an earlier turn (nor, with `tools`, a tool call or result)."""
    for body in bodies:
        for message in (m for m in body["messages"] if m["role"] != "system"):
            if tools:
                assert message["role"] in ("user", "assistant"), ("no tool turn of an earlier episode", message)
                assert not message.get("tool_calls"), message
            assert not any(words in text_of(message) for words in earlier), (message, body["messages"])


@pytest.mark.parametrize("door", ["gateway", "mitm"])
def test_a_local_turn_gets_the_record_and_the_episode_not_the_history(tmp_path, door):
    """After the scripted turns, `/local what did we change…` in the same session: the
    local backend receives the record, which names the file edited earlier, as system
    text, and of the conversation only the `/local` episode: none of the earlier turns,
    in any request it got. Through the gateway (base URL) and through the MITM proxy
    (HTTPS_PROXY, the CLI's own host)."""
    question = "what did we change so far and why?"
    other = "another conversation entirely: the password hint is zebra-quartz"
    with turns_then_local(tmp_path, mitm=door == "mitm") as (turn, local, _):
        # Another conversation of the same user and key, answered by the cloud: none of
        # its words may reach the local model with this session's record.
        code, out, err = run([cli("claude"), "-p", other, "--output-format", "json"], turn.env, turn.work)
        assert code == 0, f"claude (other) failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        assert "reply" in turn(f"/local {question}")["result"]
        records = get_json(f"{turn.glider.dashboard}/api/requests?limit=50")["requests"]
        doors = {s["door"] for e in get_json(session_url(turn.glider.dashboard, turn.key))["graph"]
                 ["episodes"] for s in e["steps"]}
    assert doors == {door}, doors

    assert local.bodies, "the /local turn reached the local backend"
    assert not any("zebra-quartz" in json.dumps(b) for b in local.bodies), "another conversation's words"
    assert_never_sent(local.bodies, ("look at the notes", "fix the notes", "show the notes", "tool result", "[[call:"),
                      tools=True)
    main = [b for b in local.bodies if system_record(b)]
    assert main, [[(m["role"], text_of(m)[:200]) for m in b["messages"]] for b in local.bodies]
    record = system_record(main[-1])
    assert f'<continuity-record session="{turn.key}">' in record, record
    assert f"- {turn.path}: edited" in record, record
    assert "fix the notes" in record, "the goals, in the user's words"
    conversation = [m for m in main[-1]["messages"] if m["role"] != "system"]
    assert conversation[0]["role"] == "user" and question in text_of(conversation[0]), conversation
    assert "/local" not in text_of(conversation[-1]), conversation
    # The route record counts what bounding left out: the three earlier turns.
    bounded = [left for r in records for left in (r.get("context_left_out") or []) if left["backend"] == "local"]
    assert bounded and bounded[0]["turns"] > 0 and bounded[0]["record_tokens"] > 0, records[:3]


def test_compact_with_local_compaction_reaches_the_local_model_with_the_record(tmp_path):
    """`claude -p /compact` (built in, allowed headless) sends Claude Code's compaction
    request; with `context.compaction: local` it goes to the local backend, which gets
    the record and the instruction with the episode it follows (the Bash turn), not the
    earlier episodes."""
    with turns_then_local(tmp_path, context='{"compaction": "local"}') as (turn, local, _):
        turn("/compact")
    compactions = [b for b in local.bodies if "create a detailed summary" in text_of(b["messages"][-1])]
    assert compactions, [[(m["role"], text_of(m)[:200]) for m in b["messages"]] for b in local.bodies]
    body = compactions[-1]
    record = system_record(body)
    assert record and f"- {turn.path}: edited" in record, body["messages"]
    assert_never_sent([body], ("look at the notes", "fix the notes"))
    # The episode the instruction follows goes whole: the Bash call with its result.
    conversation = [m for m in body["messages"] if m["role"] != "system"]
    assert "show the notes" in text_of(conversation[0]), conversation
    calls = [c["id"] for m in conversation for c in (m.get("tool_calls") or [])]
    results = [m["tool_call_id"] for m in conversation if m["role"] == "tool"]
    assert calls and calls == results, conversation


def test_codex_local_turn_gets_the_record_and_the_episode_not_the_history(tmp_path):
    """Codex through the gateway: one `codex exec` turn whose scripted cloud model (every
    gpt name) makes it run an `exec_command`; then `codex exec resume --last "/local
    …"`, the same session. Codex sends the `/local` text as the user's own words (exec
    mode runs no slash command), which is what Glider's flag detector reads: the
    recording local backend gets the record (the earlier goal and exchange) as system
    text, and of the conversation only the `/local` turn. (The scripted `apply_patch`
    of the gateway test above does not survive a cloud backend's wire yet: Codex then
    gets the patch without its `*** Begin Patch` line.)"""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    command = "echo codex-was-here"
    prompt = 'show the notes [[call:exec_command {"cmd":"%s"}]]' % command
    local = ChatBackend(models=["m-local"], window=131072)
    threading.Thread(target=local.serve_forever, daemon=True).start()
    config = f"""
backends:
  - {{{{name: cloud, type: anthropic, base_url: '{{url}}', api_key: k, models: ['gpt-*']}}}}
  - {{{{name: local, type: vllm, base_url: '{local.url}', models: [m-local]}}}}
routing: {{{{cloud_fallback: false, local_fallback: false, classifier: {{{{enabled: false}}}}}}}}
context: {{{{summarizer: {{{{enabled: false}}}}}}}}
"""
    codex = [cli("codex"), "exec", "--skip-git-repo-check", "--color", "never",
             "--dangerously-bypass-approvals-and-sandbox", "--json"]
    try:
        with running_glider(config) as glider:
            env = codex_config(home, glider.match.group(1))
            code, out, err = run([*codex, prompt], env, work)
            assert code == 0, f"codex failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
            key, _ = session_with(glider.home, command)
            assert not local.bodies, "the scripted turn went to the cloud mock"

            def held():
                text = get_json(session_url(glider.dashboard, key))["record"]["live"]
                return text if text and "show the notes" in text and "codex-was-here" in text else None
            assert poll(held, timeout=20), get_json(session_url(glider.dashboard, key))
            question = "what did we change so far and why?"
            resume = [cli("codex"), "exec", "resume", "--last", "--skip-git-repo-check",
                      "--dangerously-bypass-approvals-and-sandbox", "--json", f"/local {question}"]
            code, out, err = run(resume, env, work)
            assert code == 0, f"codex resume failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"

            # The writer commits at most every 50 ms under load: the last reply may
            # still be queued when codex exits.
            def answered_locally():
                found = steps_now(glider.dashboard, key)
                return found if any(s["rule"] == "explicit" and s["local"] for s in found) else None
            steps = poll(answered_locally, timeout=10) or steps_now(glider.dashboard, key)
    finally:
        local.shutdown()
        local.server_close()

    assert local.bodies, "the /local turn reached the local backend"
    assert any(s["rule"] == "explicit" and s["local"] for s in steps), steps
    assert_never_sent(local.bodies, ("show the notes", "codex-was-here", "[[call:"), tools=True)
    main = [b for b in local.bodies if system_record(b)]
    assert main, [[(m["role"], text_of(m)[:200]) for m in b["messages"]] for b in local.bodies]
    record = system_record(main[-1])
    assert f'<continuity-record session="{key}">' in record, record
    assert "show the notes" in record and "codex-was-here" in record, "the goal and the exchange"
    conversation = [m for m in main[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in conversation] == ["user"], conversation
    assert question in text_of(conversation[0]) and "/local" not in text_of(conversation[0]), conversation
