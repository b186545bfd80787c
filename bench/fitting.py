"""Fitting, measured on the CLIs' captured traffic (tests/fixtures/cli,
docs/captured-traffic.md): each captured main turn — Claude Code 2.1.197's
`claude -p "hello"` and its interactive turn, Codex 0.171.0's `codex exec "hello"` — is
sent, with its captured path and headers, through `glider serve` whose only backend is
a local `vllm` recorder (bench/claude_turn.py's): once with fitting off, then with it on
at a 32k and at an 8k context window. The recorder keeps the body the local model would
get. Prints, for each, the bytes (compact JSON), the tools and their bytes, the system
text's bytes (Anthropic `system` blocks and `role: "system"` entries; Responses
`instructions` and `developer` items; Chat `system` and `developer` messages), Glider's
byte-ratio token estimate of the whole body, the output cap sent, the tools sent by
name, and the route's reason and the fit phase's notes from the request's record (the
dashboard's /api/requests).
Run: cargo build -p glider --bin glider && python3 bench/fitting.py"""

import json
import pathlib
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from conftest import start_glider  # noqa: E402
from claude_turn import Recording  # noqa: E402

BYTES_PER_TOKEN = 3.5  # crates/glider-engine/src/tokenizer.rs
CAPTURES = ROOT / "tests" / "fixtures" / "cli"
TURNS = [
    ("Claude Code 2.1.197, `claude -p \"hello\"`", "claude-code-2.1.197/plain/002-messages.json"),
    ("Claude Code 2.1.197, interactive turn", "claude-code-2.1.197/interactive/003-messages.json"),
    ("Codex 0.171.0, `codex exec \"hello\"`", "codex-0.171.0/plain/001-responses.json"),
]
# (label, fit.enabled, the local model's context window)
RUNS = [("fit off", "false", 200_000), ("fit on, 32k window", "true", 32_768), ("fit on, 8k window", "true", 8_192)]
# Headers the HTTP client sets itself.
CLIENT_SET = {"host", "content-length", "accept-encoding", "connection"}


def compact(value):
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def text_bytes(content):
    if isinstance(content, str):
        return len(content.encode())
    return sum(len((part.get("text") or "").encode()) for part in content or [] if isinstance(part, dict))


def system_bytes(body):
    """The system text's bytes, wherever the dialect puts it."""
    total = text_bytes(body.get("system") or []) + len((body.get("instructions") or "").encode())
    for item in body.get("messages", []) + body.get("input", []):
        if isinstance(item, dict) and item.get("role") in ("system", "developer"):
            total += text_bytes(item.get("content"))
    return total


def row(label, body):
    size = compact(body)
    tools = body.get("tools", [])
    cap = body.get("max_tokens", body.get("max_completion_tokens", body.get("max_output_tokens")))
    return (f"| {label} | {size:,} | {len(tools)} | {compact(tools):,} | {system_bytes(body):,} "
            f"| ~{round(size / BYTES_PER_TOKEN):,} | {cap} |")


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def send(glider, captured):
    headers = {k: v for k, v in captured["headers"].items() if k.lower() not in CLIENT_SET}
    request = urllib.request.Request(glider.match.group(1) + captured["path"], method="POST",
                                     data=json.dumps(captured["body"]).encode(), headers=headers)
    try:
        urllib.request.urlopen(request, timeout=60).read()
    except urllib.error.HTTPError:
        pass  # the recorder answers 500: the body is what counts
    for _ in range(200):
        finished = get_json(glider.dashboard + "/api/requests?limit=1")["requests"]
        if finished:
            return finished[0].get("fitted") or [], finished[0].get("reason")
        time.sleep(0.05)
    raise RuntimeError("the request never finished")


def main():
    recording = Recording()
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            for label, path in TURNS:
                captured = json.loads((CAPTURES / path).read_text())
                rows, notes, reasons, sent = [row("as the CLI sent it", captured["body"])], {}, {}, {}
                for run, fit, window in RUNS:
                    config = tmp / "glider.yaml"
                    config.write_text(f"""
backends:
  - {{name: local, type: vllm, base_url: '{recording.url}/v1', models: [{{name: local, context_window: {window}}}]}}
model_aliases: {{'claude-*': local, 'gpt-*': local}}
routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}
fit: {{enabled: {fit}}}
""")
                    glider = start_glider(config, tmp / f"home-{fit}-{window}-{len(results)}")
                    try:
                        notes[run], reasons[run] = send(glider, captured)
                    finally:
                        glider.stop()
                    body = recording.biggest()
                    rows.append(row(f"through Glider, {run} (Chat Completions to the local model)", body))
                    sent[run] = [tool.get("function", tool).get("name") for tool in body.get("tools", [])]
                results.append((label, path, rows, notes, reasons, sent))
    finally:
        recording.close()
    for label, path, rows, notes, reasons, sent in results:
        print(f"### {label} (`tests/fixtures/cli/{path}`)\n")
        print("| request | bytes (compact JSON) | tools | tool bytes | system text bytes | estimated tokens | output cap |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        print()
        for run, fitted in notes.items():
            print(f"- {run}: the route's reason: `{reasons[run]}`; tools sent: {', '.join(sent[run]) or 'none'}; "
                  + "the record's `fitted`: " + ("; ".join(f"`{n}`" for n in fitted) if fitted else "nothing"))
        print()


main()
