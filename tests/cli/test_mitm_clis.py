"""The real Claude Code (and Codex) CLI through Glider's MITM proxy, as a user runs it: only
HTTPS_PROXY and the CA trust are set, the base URL and the key are left alone, so the
CLI talks to https://api.anthropic.com. Glider decrypts that host; `mitm.upstream_overrides`
sends its origin traffic to a local TLS mock of Anthropic (its own test CA, trusted by
Glider through `mitm.upstream_ca_file`). One request is answered by the local model (a
glider-mock Ollama), one goes through to the origin with the user's key unchanged."""

import json
import pathlib
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import Process, _binary, start_mock
from test_real_clis import claude_quiet_env, clean_env, cli, run

ORIGIN_TEXT = "hello-from-the-real-origin"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_origin_certs(directory):
    """A test CA and a leaf for api.anthropic.com and api.openai.com signed by it."""
    d = pathlib.Path(directory)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=Glider Test Origin CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    openssl("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=api.anthropic.com", cwd=d)
    (d / "leaf.ext").write_text(
        "subjectAltName=DNS:api.anthropic.com,DNS:api.openai.com\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext", cwd=d)
    return d / "ca.pem", d / "leaf.pem", d / "leaf.key"


def sse(model):
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_origin", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ORIGIN_TEXT}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 4}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


class Origin:
    """A TLS Anthropic look-alike for api.anthropic.com on 127.0.0.1:<port>."""

    def __init__(self, cert, key):
        self.requests = []
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body, content_type="application/json"):
                data = body.encode()
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def record(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                origin.requests.append({"method": self.command, "path": self.path,
                                        "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                return body

            def do_GET(self):
                self.record()
                self.reply(200, "{}")

            do_HEAD = do_GET

            def do_POST(self):
                body = self.record()
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    return self.reply(200, json.dumps({"input_tokens": 5}) if "count_tokens" in self.path else "{}")
                request = json.loads(body or b"{}")
                if request.get("stream"):
                    return self.reply(200, sse(request.get("model", "m")), "text/event-stream")
                self.reply(200, json.dumps({
                    "id": "msg_origin", "type": "message", "role": "assistant", "model": request.get("model"),
                    "content": [{"type": "text", "text": ORIGIN_TEXT}], "stop_reason": "end_turn",
                    "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 4}}))

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.set_alpn_protocols(["http/1.1"])
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def messages(self):
        return [r for r in self.requests if r["method"] == "POST" and r["path"].split("?")[0] == "/v1/messages"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mitm_stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mitm")
    ca, cert, key = make_origin_certs(tmp)
    origin = Origin(str(cert), str(key))
    mock = start_mock()
    glider = None
    try:
        port = free_port()
        config = tmp / "glider.yaml"
        config.write_text(f"""
backends:
  - {{name: local, type: ollama, base_url: 'http://{mock.match.group(1)}', models: [qwen-local]}}
model_aliases: {{'claude-local-*': qwen-local, 'gpt-*': qwen-local}}
routing: {{cloud_fallback: false}}
mitm:
  enabled: true
  port: {port}
  hosts: [api.anthropic.com, api.openai.com]
  upstream_overrides: {{api.anthropic.com: '127.0.0.1:{origin.port}', api.openai.com: '127.0.0.1:{origin.port}'}}
  upstream_ca_file: '{ca}'
""")
        home = tmp / "glider-home"
        env = clean_env(tmp, GLIDER_HOME=str(home), GLIDER_LOG="info")
        glider = Process([_binary("glider"), "serve", "-c", str(config), "--port", "0"],
                         r"mitm proxy listening on (127\.0\.0\.1:\d+)", env=env)
        yield {"proxy": f"http://{glider.match.group(1)}", "ca": home / "mitm" / "ca.crt", "origin": origin,
               "config": config, "home": home, "glider": glider}
    finally:
        if glider:
            glider.stop()
        mock.stop()
        origin.stop()


def claude_env(home, **extra):
    env = claude_quiet_env(home, ANTHROPIC_API_KEY="sk-ant-user-own-key")
    # The CLI must reach api.anthropic.com itself: no base URL, NO_PROXY only for
    # loopback, and no CA setting inherited from this machine.
    for name in ("ANTHROPIC_BASE_URL", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE"):
        env.pop(name, None)
    env.update(extra)
    return env


def run_claude(args, env, work):
    code, out, err = run(args, env, work)
    assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    return json.loads(out)


def test_claude_code_answered_locally_through_the_mitm_proxy(mitm_stack, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    origin = mitm_stack["origin"]
    before, before_all = len(origin.messages()), len(origin.requests)
    env = claude_env(home, HTTPS_PROXY=mitm_stack["proxy"], NODE_EXTRA_CA_CERTS=str(mitm_stack["ca"]))
    result = run_claude([cli("claude"), "-p", "say hi locally", "--model", "claude-local-1",
                         "--output-format", "json"], env, work)
    # glider-mock's Ollama echoes the prompt: the local model answered.
    assert "echo:" in result["result"] and "say hi locally" in result["result"], result
    assert result["is_error"] is False
    new = origin.messages()[before:]
    assert all(json.loads(r["body"]).get("model") != "claude-local-1" for r in new), new
    # What is not a model request (Claude Code's settings and policy endpoints) still
    # reached the origin, decrypted and forwarded untouched.
    others = [r for r in origin.requests[before_all:] if r["path"].startswith("/api/claude_code/")]
    assert others and all(r["headers"]["x-api-key"] == "sk-ant-user-own-key" for r in others), others


def test_claude_code_passed_through_to_the_origin_with_its_key(mitm_stack, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    origin = mitm_stack["origin"]
    before = len(origin.requests)
    # `glider run` sets HTTPS_PROXY, NO_PROXY and the CA trust for this one process.
    env = claude_env(home, GLIDER_HOME=str(mitm_stack["home"]))
    result = run_claude([_binary("glider"), "run", "-c", str(mitm_stack["config"]), cli("claude"), "-p",
                         "ask the cloud", "--model", "claude-sonnet-4-5", "--output-format", "json"], env, work)
    assert ORIGIN_TEXT in result["result"], result
    new = origin.requests[before:]
    sent = [r for r in new if r["method"] == "POST" and r["path"].split("?")[0] == "/v1/messages"]
    assert sent, [(r["method"], r["path"]) for r in new]
    main = [r for r in sent if json.loads(r["body"]).get("model") == "claude-sonnet-4-5"]
    assert main, [json.loads(r["body"]).get("model") for r in sent]
    # The user's own key and Claude Code's own request reached the origin unchanged.
    assert main[0]["headers"]["x-api-key"] == "sk-ant-user-own-key"
    assert "ask the cloud" in main[0]["body"].decode()
    assert "claude-cli" in main[0]["headers"].get("user-agent", ""), main[0]["headers"]


def test_codex_answered_locally_through_glider_run(mitm_stack, tmp_path):
    """Codex with its default provider (https://api.openai.com/v1) and an API key,
    started by `glider run`: its Responses request is decrypted and answered by the
    local model. (It first tries the Responses WebSocket; the origin mock refuses the
    upgrade and Codex falls back to HTTPS, as it does against any origin without one.)"""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text("""
model = "gpt-5.5"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
""")
    origin = mitm_stack["origin"]
    before = len(origin.requests)
    env = clean_env(home, CODEX_HOME=str(home), OPENAI_API_KEY="sk-user-own-openai-key",
                    GLIDER_HOME=str(mitm_stack["home"]))
    for name in ("OPENAI_BASE_URL", "CODEX_CA_CERTIFICATE", "SSL_CERT_FILE"):
        env.pop(name, None)
    code, out, err = run([_binary("glider"), "run", "-c", str(mitm_stack["config"]), cli("codex"), "exec",
                          "--skip-git-repo-check", "--ephemeral", "--color", "never", "--json",
                          "reply via glider"], env, work)
    assert code == 0, f"codex failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    texts = [e["item"].get("text", "") for e in events
             if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]
    assert any("echo:" in t and "reply via glider" in t for t in texts), events
    posted = [r for r in origin.requests[before:] if r["method"] == "POST" and "/responses" in r["path"]]
    assert not posted, posted


def test_a_cli_that_does_not_trust_the_ca_gets_the_fix_in_glider_s_log(mitm_stack, tmp_path):
    """The first hour's MITM mistake: HTTPS_PROXY set, Glider's CA not trusted. Claude
    Code fails its handshake (and says little); Glider's log says how to fix it."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_env(home, HTTPS_PROXY=mitm_stack["proxy"])
    code, _out, _err = run([cli("claude"), "-p", "hello", "--output-format", "json"], env, work, timeout=120)
    assert code != 0, "an untrusted CA cannot have worked"
    glider = mitm_stack["glider"]
    line = glider.wait_for(r"TLS handshake with the client (failed|timed out).*", timeout=30).group(0)
    assert "NODE_EXTRA_CA_CERTS=$(glider ca path)" in line and "glider run <cli>" in line, line
    assert str(mitm_stack["ca"]) in line, line
