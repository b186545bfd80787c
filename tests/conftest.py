"""Fixtures shared by the Python suites: real `glider-mock` and `glider serve`
processes on free ports, started from the workspace's debug build, stopped after.
Readiness is read from each process's "listening on" line, never from a sleep."""

import contextlib
import http.server
import json
import os
import pathlib
import queue
import re
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"


def _binary(name):
    path = TARGET / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `cargo build --workspace --bins` first (scripts/test does)")
    return str(path)


class Process:
    """A child process whose first matching stdout line announces readiness. A thread
    reads its output (so a chatty child never blocks on a full pipe, and lines that
    arrive together are all seen)."""

    def __init__(self, args, pattern, env=None, timeout=60):
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, start_new_session=True
        )
        self.lines = []
        self._queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.match = self.wait_for(pattern, timeout)

    def _pump(self):
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern, timeout=60):
        """Read output lines until one matches `pattern`; return the match."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError(f"{self.proc.args[0]} did not become ready: {''.join(self.lines)}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                self.stop()
                raise RuntimeError(f"{self.proc.args[0]} exited before it was ready: {''.join(self.lines)}")
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def output(self):
        """Every line the child has printed so far (for a failure message)."""
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return "".join(self.lines)
            if line is not None:
                self.lines.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ChatBackend(http.server.ThreadingHTTPServer):
    """A small OpenAI-compatible (Chat Completions) local server that records each body
    it gets in `bodies` and its `x-session-id` header in `session_keys` (the mock binary
    keeps no log), faithful to the wire (vLLM's `GET /health` included): a JSON
    completion, or SSE chunks ending with `[DONE]`; its text is `reply N`. With
    `window`, `GET /v1/models` lists `models` with vLLM's `max_model_len`; without, it
    answers 404 as a server with no listing does. Serve it with `serve_forever` on a
    thread; `shutdown` and `server_close` after."""

    def __init__(self, models=(), window=None):
        super().__init__(("127.0.0.1", 0), _ChatHandler)
        self.bodies = []
        self.session_keys = []
        self.lock = threading.Lock()
        self.models = list(models)
        self.window = window

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _ChatHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            self.reply(b"", "text/plain")
            return
        if self.path.rstrip("/") != "/v1/models" or self.server.window is None:
            self.reply(b'{"error": {"message": "not found"}}', "application/json", status=404)
            return
        listing = {"object": "list", "data": [
            {"id": m, "object": "model", "owned_by": "local", "max_model_len": self.server.window}
            for m in self.server.models]}
        self.reply(json.dumps(listing).encode(), "application/json")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/chat/completions/render":
            self.render(body)
            return
        if path != "/v1/chat/completions":
            self.reply(b'{"error": {"message": "not found"}}', "application/json", status=404)
            return
        with self.server.lock:
            self.server.bodies.append(body)
            self.server.session_keys.append(self.headers.get("x-session-id"))
            n = len(self.server.bodies)
        text = f"reply {n}"
        base = {"id": f"chatcmpl-{n}", "created": 0, "model": body["model"]}
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        if body.get("stream"):
            chunks = [
                {**base, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                {**base, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage},
            ]
            payload = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.reply(payload.encode(), "text/event-stream")
        else:
            reply = {**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
            self.reply(json.dumps(reply).encode(), "application/json")

    def render(self, body):
        """vLLM's `POST /v1/chat/completions/render`: the request as the worker would run
        it (a GenerateRequest), prompt token ids included, without generating. A router
        (vllm-router's `cache_aware`) keys its prefix tree on these ids. The mock's chat
        template puts each message as `<|role|>content\n`, its tokenizer one id per UTF-8
        byte, so a conversation's ids only grow at the end from turn to turn, as a real
        template's do."""
        prompt = "".join(f"<|{m['role']}|>{m.get('content') or ''}\n" for m in body["messages"])
        prompt += "<|assistant|>"
        rendered = {"request_id": f"chatcmpl-render-{id(body)}", "model": body["model"],
                    "token_ids": list(prompt.encode()),
                    "sampling_params": {"max_tokens": body.get("max_tokens")},
                    "stream": bool(body.get("stream"))}
        self.reply(json.dumps(rendered).encode(), "application/json")

    def reply(self, payload, content_type, status=200):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def poll(check, timeout=10):
    """`check()` until it is truthy or `timeout` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def get_json(url, timeout=10):
    """GET `url` and parse its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


def start_mock(*args):
    """glider-mock on a free port; `args` are its own flags (`--first-byte-delay-ms N`, ...)."""
    return Process([_binary("glider-mock"), "--port", "0", *args], r"listening on (127\.0\.0\.1:\d+)")


def write_config(directory, mock_addr, extra="", text=None):
    """Glider config for `mock_addr`: by default one backend of each type on it."""
    url = f"http://{mock_addr}"
    if text is not None:
        path = pathlib.Path(directory) / "glider.yaml"
        path.write_text(text.format(url=url))
        return path
    text = f"""
backends:
  - {{name: ollama, type: ollama, base_url: '{url}', models: [m-ollama]}}
  - {{name: vllm, type: vllm, base_url: '{url}/v1', models: [m-vllm]}}
  - {{name: openai, type: openai, base_url: '{url}/v1', api_key: k-openai, models: [m-openai]}}
  - {{name: anthropic, type: anthropic, base_url: '{url}', api_key: k-anthropic, models: [m-anthropic]}}
routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}
{extra}
"""
    path = pathlib.Path(directory) / "glider.yaml"
    path.write_text(text)
    return path


def start_glider(config_path, home):
    env = dict(os.environ, GLIDER_HOME=str(home), GLIDER_LOG="warn")
    for key in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        env.pop(key, None)
    glider = Process(
        [_binary("glider"), "serve", "-c", str(config_path), "--port", "0", "--dashboard-port", "0"],
        r"listening on (http://127\.0\.0\.1:\d+)",
        env=env,
    )
    glider.dashboard = glider.wait_for(r"dashboard on (http://127\.0\.0\.1:\d+)").group(1)
    return glider


@contextlib.contextmanager
def running_glider(config_text=None, mock_args=()):
    """Start glider-mock (with `mock_args`) and `glider serve` in front of it; yield the
    glider Process (`.match.group(1)`: gateway URL, `.dashboard`: dashboard URL, `.mock`:
    mock address, `.home`: GLIDER_HOME); stop both."""
    with tempfile.TemporaryDirectory() as tmp:
        mock = start_mock(*mock_args)
        glider = None
        try:
            config = write_config(tmp, mock.match.group(1), text=config_text)
            home = pathlib.Path(tmp) / "home"
            glider = start_glider(config, home)
            glider.mock = mock.match.group(1)
            glider.home = home
            yield glider
        finally:
            if glider:
                glider.stop()
            mock.stop()


@contextlib.contextmanager
def running_stack(config_text=None):
    """Start glider-mock and `glider serve` in front of it; yield (gateway URL, mock
    address); stop both."""
    with running_glider(config_text) as glider:
        yield glider.match.group(1), glider.mock


@pytest.fixture(scope="session")
def stack():
    """(gateway base URL, mock address) for a mock with all four dialects behind Glider."""
    with running_stack() as running:
        yield running
