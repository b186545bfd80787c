"""count_tokens methods against the exact count, on real Claude Code request shapes: the
CLI (tests/cli) sends one `-p` turn to a recorder, and that body (and smaller shapes cut
from it) is counted through `glider serve` four ways: a llama.cpp backend (the real
llama-server with Gemma 3 270M and the suite's template: /apply-template + /tokenize,
the exact count), the byte-ratio estimate (a backend without a tokenizer), tiktoken (an
OpenAI model name) and llama-server's own /v1/messages/count_tokens (an Anthropic-wire
backend). Fitting is off, so every method counts the same request. Prints a Markdown
table of counts and each method's error against the exact count.
Run: cargo build --workspace --bins && scripts/local-model && python3 bench/count-tokens.py"""

import json
import pathlib
import socket
import sys
import tempfile
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "local_model"))
from conftest import start_glider  # noqa: E402
from llama import running_llama_server  # noqa: E402
from claude_turn import Recording, claude  # noqa: E402

WINDOW = 32768


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def capture_claude_code_turn(tmp):
    """The biggest body Claude Code sends for one `-p` turn (recorded, not answered)."""
    recording = Recording()
    try:
        claude(recording.url, tmp)
        return recording.biggest()
    finally:
        recording.close()


def shapes(turn):
    """(label, count_tokens body) from the captured turn, largest first."""
    keep = ("system", "messages", "tools")
    full = {k: turn[k] for k in keep if k in turn}
    no_tools = {k: v for k, v in full.items() if k != "tools"}
    first_user = {"messages": turn["messages"][:1]}
    return [
        ("Claude Code turn as sent (system, messages, all tools)", full),
        ("the same without tools (system + messages)", no_tools),
        ("its first user message only", first_user),
        ("a short question", {"messages": [{"role": "user", "content": "What does this function return?"}]}),
    ]


def count(gateway, model, body):
    request = urllib.request.Request(f"{gateway}/v1/messages/count_tokens",
                                     data=json.dumps({"model": model, **body}).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=300) as reply:
        return json.loads(reply.read())["input_tokens"]


def error(value, exact):
    return f"{value:,} ({(value - exact) / exact:+.1%})"


with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    turn = capture_claude_code_turn(tmp)
    dead = closed_port()
    with running_llama_server(context=WINDOW) as llama:
        config = tmp / "glider.yaml"
        config.write_text(f"""
backends:
  - {{name: llama, type: vllm, base_url: '{llama}/v1', models: [exact], context_window: 200000}}
  - {{name: llama-anthropic, type: anthropic, base_url: '{llama}', api_key: unused, models: [own]}}
  - {{name: estimate, type: ollama, base_url: 'http://127.0.0.1:{dead}', models: [bytes], context_window: 200000}}
  - {{name: openai, type: openai, base_url: 'http://127.0.0.1:{dead}/v1', api_key: unused, models: [gpt-4o]}}
routing: {{cloud_fallback: true, classifier: {{enabled: false}}}}
fit: {{enabled: false}}
""")
        glider = start_glider(config, tmp / "home")
        try:
            gateway = glider.match.group(1)
            print(f"Claude Code turn: {len(json.dumps(turn, separators=(',', ':'))):,} bytes, "
                  f"{len(turn.get('tools', []))} tools. Exact: Gemma 3 270M's tokenizer over its chat template.")
            print()
            print("| shape | exact (llama.cpp /tokenize) | byte ratio (3.5 B/token) | tiktoken (o200k) "
                  "| llama-server /v1/messages/count_tokens |")
            print("|---|---|---|---|---|")
            for label, body in shapes(turn):
                exact = count(gateway, "exact", body)
                print(f"| {label} | {exact:,} | {error(count(gateway, 'bytes', body), exact)} "
                      f"| {error(count(gateway, 'gpt-4o', body), exact)} | {error(count(gateway, 'own', body), exact)} |")
        finally:
            glider.stop()
