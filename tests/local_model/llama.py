"""A real llama.cpp `llama-server` running the Gemma 3 270M GGUF (installed by
`scripts/local-model`), and a `glider serve` whose local backends are that server: as an
OpenAI-compatible backend (type vllm; twice, once with a tiny output cap) and through
llama-server's own `/v1/messages` (type anthropic, local: true). Both processes are started on free loopback ports and
stopped after; readiness is polled (llama-server's /health), never slept for."""

import contextlib
import json
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from conftest import ROOT, Process, get_json, poll, start_glider  # noqa: F401 (get_json: for the tests)

HERE = pathlib.Path(__file__).resolve().parent
TEMPLATE = HERE / "gemma3.jinja"
# The name llama-server reports for its model (`--alias`), and the names Glider serves
# it under: one per backend dialect, so a test picks the wire it goes over.
ALIAS = "gemma3-270m"
VIA_OPENAI = "gemma-openai"
VIA_ANTHROPIC = "gemma-anthropic"
# The OpenAI wire again, on a backend whose fit cap is tiny: every reply the client asked
# longer is cut there, at Glider's cap rather than the client's.
VIA_CAPPED = "gemma-capped"
CAPPED_AT = 8
CONTEXT = 4096
# A hard cap on every generation: a 270M model otherwise rambles to the context end.
# llama-server's `-n` is only a default (a request's max_tokens overrides it), so the
# OpenAI-wire backend also gets it as its fit cap.
MAX_PREDICT = 128
# One thread: on a small shared machine OpenMP's spinning second thread slows generation
# about 20-fold when the other core is busy.

CONFIG = """
backends:
  - name: llama-openai
    type: vllm
    base_url: '{url}/v1'
    models: [{via_openai}]
    context_window: {context}
    fit: {{max_output_tokens: {max_predict}}}
  - name: llama-capped
    type: vllm
    base_url: '{url}/v1'
    models: [{via_capped}]
    context_window: {context}
    fit: {{max_output_tokens: {capped_at}}}
  - name: llama-anthropic
    type: anthropic
    local: true
    base_url: '{url}'
    models: [{via_anthropic}]
    context_window: {context}
    fit: {{max_output_tokens: {max_predict}}}
routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}
{extra}
"""


def installed():
    """The paths `scripts/local-model --find` prints (LLAMA_SERVER, LOCAL_MODEL_GGUF: the
    Gemma base model, INSTRUCT_MODEL_GGUF: SmolLM2-135M-Instruct); fails loudly (never
    skips) when they are not installed."""
    found = subprocess.run([str(ROOT / "scripts" / "local-model"), "--find"], capture_output=True, text=True)
    if found.returncode != 0:
        raise RuntimeError(
            f"the real local model is not installed ({found.stderr.strip()}): run scripts/local-model (.ci/run does)"
        )
    return dict(line.split("=", 1) for line in found.stdout.splitlines()[-3:])


def free_port():
    # llama-server cannot bind port 0 and report it, so the port is picked here.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post_json(url, body, timeout=120):
    """POST `body` as JSON; (status, parsed reply or raw text)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def record_fitted_with(glider, note, limit=50):
    """The dashboard's record of the request whose `fitted` list holds `note`, polled
    for: a record is written as its reply ends, not before the client has it."""
    def find():
        for record in get_json(f"{glider.dashboard}/api/requests?limit={limit}")["requests"]:
            if note in record["fitted"]:
                return record
        return None
    record = poll(find)
    assert record, f"no record with {note!r}"
    return record


def wait_healthy(server, url, timeout=120):
    """Poll /health until the model is loaded (503 while loading)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"llama-server exited ({server.proc.returncode}): {''.join(server.lines[-40:])}")
        try:
            if get_json(f"{url}/health").get("status") == "ok":
                return
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"llama-server did not become healthy: {''.join(server.lines[-40:])}")


@contextlib.contextmanager
def running_llama_server(context=CONTEXT, instruct=False, extra_args=()):
    """A llama-server with a `context` token window; yields its URL. The model is the
    Gemma base GGUF with the shipped chat template, or with `instruct` SmolLM2-135M-Instruct
    with its own template (it answers short questions; it cannot call tools). `extra_args`
    go on its command line (`--embeddings --pooling mean` serves /v1/embeddings too)."""
    paths = installed()
    binary = paths["LLAMA_SERVER"]
    if instruct:
        model_args = ["-m", paths["INSTRUCT_MODEL_GGUF"], "--jinja"]
    else:
        model_args = ["-m", paths["LOCAL_MODEL_GGUF"], "--jinja", "--chat-template-file", str(TEMPLATE)]
    port = free_port()
    server = Process(
        [binary, *model_args, "--host", "127.0.0.1", "--port", str(port), "--alias", ALIAS,
         "-c", str(context), "-n", str(MAX_PREDICT),
         "--threads", "1", "--parallel", "1", "--no-webui", *extra_args],
        r"listening on",
        timeout=120,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(server, url)
        yield url
    finally:
        server.stop()


@contextlib.contextmanager
def running_glider_on(llama_url, extra="", context=CONTEXT):
    """`glider serve` whose three backends are the llama-server at `llama_url`; yields the
    glider Process (`.match.group(1)`: gateway URL, `.dashboard`: dashboard URL,
    `.home`: its GLIDER_HOME)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "glider.yaml"
        config.write_text(CONFIG.format(url=llama_url, via_openai=VIA_OPENAI, via_anthropic=VIA_ANTHROPIC,
                                        context=context, max_predict=MAX_PREDICT, extra=extra,
                                        via_capped=VIA_CAPPED, capped_at=CAPPED_AT))
        glider = start_glider(config, pathlib.Path(tmp) / "home")
        glider.home = pathlib.Path(tmp) / "home"
        try:
            yield glider
        finally:
            glider.stop()
