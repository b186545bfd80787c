"""Tool fitting, measured on a real Claude Code request: the CLI (tests/cli) sends one
`-p` turn to a recorder directly, and once through `glider serve` whose local backend
(type vllm) is the recorder; the two bodies are the request before and after the fit
phase. Prints bytes, tool count and Glider's byte-ratio token estimate of each.
Run: cargo build --workspace --bins && python3 bench/tool-fitting.py"""

import http.server
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import start_glider  # noqa: E402

BYTES_PER_TOKEN = 3.5  # crates/glider-engine/src/tokenizer.rs
bodies = []


class Recorder(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        bodies.append((self.path, json.loads(body)))
        self.send_response(500)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": {"message": "recorded"}}')

    def log_message(self, *args):
        pass


def claude(base, home):
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="k", CLAUDE_CODE_MAX_RETRIES="0",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1")
    subprocess.run([str(ROOT / "tests/cli/node_modules/.bin/claude"), "-p", "list the files here"], env=env,
                   cwd=home, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


def biggest():
    path, body = max(bodies, key=lambda b: len(json.dumps(b[1])))
    bodies.clear()
    return body


def row(label, body):
    size = len(json.dumps(body, separators=(",", ":")))
    tools = len(body.get("tools", []))
    return f"| {label} | {size:,} | {tools} | ~{round(size / BYTES_PER_TOKEN):,} | {body.get('max_tokens')} |"


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_port}"
with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    claude(url, tmp)
    before = biggest()
    through = {}
    for fit in ("false", "true"):
        config = tmp / "glider.yaml"
        config.write_text(f"""
backends:
  - {{name: local, type: vllm, base_url: '{url}/v1', models: [local], context_window: 200000}}
model_aliases: {{'claude-*': local}}
routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}
fit: {{enabled: {fit}}}
""")
        glider = start_glider(config, tmp / f"glider-home-{fit}")
        try:
            claude(glider.match.group(1), tmp)
        finally:
            glider.stop()
        through[fit] = biggest()
    after = through["true"]
print("| request | bytes (compact JSON) | tools | estimated tokens | max_tokens |")
print("|---|---|---|---|---|")
print(row("Claude Code as sent (Anthropic Messages)", before))
print(row("through Glider, fit off (Chat Completions to the local backend)", through["false"]))
print(row("through Glider, fit on (Chat Completions to the local backend)", after))
print()
print("kept tools:", ", ".join(t["function"]["name"] for t in after.get("tools", [])))
