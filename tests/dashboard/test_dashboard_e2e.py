"""The dashboard of a real `glider serve`, end to end: Debian's headless Chromium (driven
by playwright-core from npm, no browser download) loads the page, a request goes
through the gateway, and its row appears live; the screenshot is kept as
target/dashboard-e2e.png. Also: /metrics read by the official Prometheus parser, and the
history file written under GLIDER_HOME."""

import json
import os
import pathlib
import shutil
import subprocess
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import ROOT, running_glider

HERE = pathlib.Path(__file__).resolve().parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = ROOT / "target" / "dashboard-e2e.png"
MODEL = "qwen-e2e"

CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: '{url}', models: [qwen-e2e]}}
  - {{name: cloud, type: anthropic, base_url: '{url}', api_key: sk-e2e-secret, models: [claude-e2e]}}
routing: {{cloud_fallback: false}}
"""


def require_tools():
    missing = []
    if not pathlib.Path(CHROMIUM).exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium; .ci/run does)")
    if not (HERE / "node_modules" / "playwright-core").exists():
        missing.append("playwright-core (npm ci --prefix tests/dashboard; .ci/run does)")
    if not shutil.which("node"):
        missing.append("node")
    if missing:
        raise RuntimeError("the dashboard e2e test needs: " + ", ".join(missing))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_a_request_appears_live_in_a_real_browser():
    require_tools()
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    with running_glider(CONFIG) as glider:
        env = dict(
            os.environ,
            DASHBOARD_URL=glider.dashboard,
            GATEWAY_URL=glider.match.group(1),
            SCREENSHOT=str(SCREENSHOT),
            CHROMIUM=CHROMIUM,
            MODEL=MODEL,
            NO_PROXY="127.0.0.1,localhost",
        )
        for key in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(key, None)
        run = subprocess.run(
            ["node", str(HERE / "e2e.mjs")], env=env, capture_output=True, text=True, timeout=180
        )
        assert run.returncode == 0, f"e2e failed:\n{run.stdout}\n{run.stderr}"
        seen = json.loads(run.stdout.strip().splitlines()[-1])
        row = seen["row"]
        assert "e2e-client/1.0" in row, row
        assert row.count(MODEL) == 2, row  # asked and used
        assert "local" in " ".join(row) and "200" in row[-1], row
        assert seen["backend"][2] == "up" and seen["backend"][3] == "closed", seen["backend"]
        assert SCREENSHOT.stat().st_size > 10_000

        # The same requests, as Prometheus reads them.
        families = {f.name: f for f in text_string_to_metric_families(get(glider.dashboard + "/metrics"))}
        requests = families["glider_requests"]
        assert sum(s.value for s in requests.samples if s.name == "glider_requests_total") == 2
        local = [s for s in requests.samples if s.labels.get("backend") == "local"]
        assert local and local[0].labels["status"] == "200" and local[0].labels["local"] == "true"
        assert families["glider_local_share"].samples[0].value == 1.0
        assert families["glider_request_duration_seconds"].type == "histogram"
        assert families["glider_backend_breaker_state"].type == "gauge"

        # Secrets never reach the page's data.
        assert "sk-e2e-secret" not in get(glider.dashboard + "/api/config")

        # The history file outlives the process (written out on SIGTERM), and holds no
        # prompt text.
        glider.stop()
        assert glider.proc.returncode == 0, "".join(glider.lines)
        history = list((glider.home / "history").glob("requests-*.jsonl"))
        assert len(history) == 1, history
        text = history[0].read_text()
        lines = text.splitlines()
        assert len(lines) == 2, text
        assert "hello from the browser test" not in text
        assert json.loads(lines[0])["model_requested"] == MODEL
