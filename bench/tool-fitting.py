"""Tool fitting, measured on a real Claude Code request: the CLI (tests/cli) sends one
`-p` turn to a recorder directly, and once through `glider serve` whose local backend
(type vllm) is the recorder; the two bodies are the request before and after the fit
phase. Prints bytes, tool count and Glider's byte-ratio token estimate of each.
Run: cargo build --workspace --bins && python3 bench/tool-fitting.py"""

import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import start_glider  # noqa: E402
from claude_turn import Recording, claude  # noqa: E402

BYTES_PER_TOKEN = 3.5  # crates/glider-engine/src/tokenizer.rs


def row(label, body):
    size = len(json.dumps(body, separators=(",", ":")))
    tools = len(body.get("tools", []))
    return f"| {label} | {size:,} | {tools} | ~{round(size / BYTES_PER_TOKEN):,} | {body.get('max_tokens')} |"


recording = Recording()
url = recording.url
with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    claude(url, tmp)
    before = recording.biggest()
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
        through[fit] = recording.biggest()
    after = through["true"]
print("| request | bytes (compact JSON) | tools | estimated tokens | max_tokens |")
print("|---|---|---|---|---|")
print(row("Claude Code as sent (Anthropic Messages)", before))
print(row("through Glider, fit off (Chat Completions to the local backend)", through["false"]))
print(row("through Glider, fit on (Chat Completions to the local backend)", after))
print()
print("kept tools:", ", ".join(t["function"]["name"] for t in after.get("tools", [])))
