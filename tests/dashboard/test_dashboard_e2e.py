"""The dashboard of a real `glider serve`, end to end: Debian's headless Chromium (driven
by playwright-core from npm, no browser download) loads the page, a request goes
through the gateway, and its row appears live; the screenshot is kept as
target/dashboard-e2e.png. Also: /metrics read by the official Prometheus parser, and the
history file written under GLIDER_HOME. A second test drives a CLI-like tool loop and
checks the Sessions view and the charts (target/dashboard-sessions.png,
target/dashboard-charts.png). A third shows a local model's measured speed and the
output cap it implies in the Local models panel, and what was fitted in the request's
row (target/dashboard-fit.png). A fourth looks at every panel after a Claude Code-shaped
session (target/dashboard-panels.png, target/dashboard-session-record.png). A fifth shows
a real Claude Code compaction's shadow comparison, by the files it must name
(target/dashboard-shadow.png)."""

import json
import math
import os
import pathlib
import shutil
import subprocess
import urllib.error
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import ROOT, get_json, poll, running_glider, start_mock

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


SESSIONS_CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: '{url}', models: [qwen-e2e], default_model: qwen-e2e}}
  - {{name: cloud, type: anthropic, base_url: '{url}', api_key: sk-e2e-secret, models: ['claude-*']}}
routing: {{cloud_fallback: false}}
"""
CLOUD_MODEL = "claude-sonnet-4-5-20250929"

FIT_WINDOW = 8192
FIT_CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: '{url}', models: [{{name: qwen-e2e, context_window: 8192}}]}}
routing: {{cloud_fallback: false}}
fit: {{max_reply_secs: 2}}
"""
# The first byte after 300 ms, then 19 more pieces 20 ms apart: 100 tokens of reply (the
# mock counts a quarter of its characters) at a few hundred tokens a second.
FIT_MOCK = ("--first-byte-delay-ms", "300", "--delta-delay-ms", "20", "--deltas", "20", "--reply-text", "word " * 80)


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


def run_node(script, glider, **extra):
    env = dict(
        os.environ,
        DASHBOARD_URL=glider.dashboard,
        GATEWAY_URL=glider.match.group(1),
        CHROMIUM=CHROMIUM,
        NO_PROXY="127.0.0.1,localhost",
        **extra,
    )
    for key in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    run = subprocess.run(["node", str(HERE / script)], env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, f"{script} failed:\n{run.stdout}\n{run.stderr}"
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_request_appears_live_in_a_real_browser():
    require_tools()
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    with running_glider(CONFIG) as glider:
        seen = run_node("e2e.mjs", glider, SCREENSHOT=str(SCREENSHOT), MODEL=MODEL)
        row = seen["row"]
        assert "e2e-client/1.0" in row, row
        assert row.count(MODEL) == 2, row  # asked and used
        assert "local" in " ".join(row) and "200" in row[-1], row
        assert seen["backend"][2] == "up" and seen["backend"][3] == "closed", seen["backend"]
        modules = [row.split("\t")[0] for row in seen["hotswap"]]
        assert modules[:4] == ["backends", "classifier", "fan_out", "runtime"], seen["hotswap"]
        assert all("\t1\t" in row for row in seen["hotswap"]), seen["hotswap"]
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


def test_sessions_view_and_charts_in_a_real_browser():
    require_tools()
    shots = SCREENSHOT.parent
    shots.mkdir(parents=True, exist_ok=True)
    for name in ("dashboard-sessions.png", "dashboard-charts.png"):
        (shots / name).unlink(missing_ok=True)
    with running_glider(SESSIONS_CONFIG) as glider:
        seen = run_node("sessions.mjs", glider, SCREENSHOT_DIR=str(shots), CLOUD_MODEL=CLOUD_MODEL)

        # Most recently active first.
        assert seen["order"][:2] == ["claude-code:e2e-session-1", "claude-code:e2e-session-0"], seen["order"]
        # The file was read, then edited; its history says so.
        (path, now, changes), = seen["files"]
        assert path == "/repo/src/lib.rs" and now == "edited", seen["files"]
        assert changes.startswith("read") and "edited" in changes, changes
        # The command ran and failed, and its error is still open.
        (command, outcome, _), = seen["commands"]
        assert command == "cargo test" and outcome == "exit 101", seen["commands"]
        (subject, reason, _), = seen["errors"]
        assert subject == "cargo test" and reason, seen["errors"]
        # Two episodes: the /local one answered locally, the /cloud one by the cloud.
        first, second = seen["steps"]
        assert [s["local"] for s in first] == ["true", "true"], first
        assert [s["local"] for s in second] == ["false", "false"], second
        assert "Read" in first[0]["text"] and "Edit, Bash" in second[0]["text"], seen["steps"]
        assert "answered locally: 2" in seen["meta"], seen["meta"]
        # The forget button asked first.
        assert len(seen["dialogs"]) == 1 and "e2e-session-0" in seen["dialogs"][0], seen["dialogs"]
        # The charts: canvases with pixels drawn, holding the ledger's numbers.
        charts = seen["charts"]
        for name in ("requests", "latency", "saved"):
            chart = charts[name]
            assert chart and chart["drawn"] > 1000, (name, chart)
        assert charts["requests"]["sum"] == 5, charts
        assert charts["saved"]["series"] > 0, "the day's bar is drawn: " + json.dumps(charts)
        assert seen["saved"].startswith("$") and seen["saved"] != "$0.00", seen["saved"]
        for name in ("dashboard-sessions.png", "dashboard-charts.png"):
            assert (shots / name).stat().st_size > 10_000, name

        # The same savings as the API and Prometheus give them.
        stats = json.loads(get(glider.dashboard + "/api/stats"))
        saved = stats["totals"]["saved"]
        assert saved["requests"] == 3 and saved["unpriced"] == 0 and saved["cost_usd"] > 0, saved
        assert stats["sessions"]["claude-code:e2e-session-1"]["saved"]["requests"] == 2, stats["sessions"]
        families = {f.name: f for f in text_string_to_metric_families(get(glider.dashboard + "/metrics"))}
        tokens = {s.labels["direction"]: s.value for s in families["glider_tokens_saved"].samples if s.name.endswith("_total")}
        assert tokens["input"] == saved["tokens_in"] and tokens["output"] == saved["tokens_out"], (tokens, saved)
        avoided = [s.value for s in families["glider_cost_avoided_usd"].samples if s.name.endswith("_total")]
        assert abs(avoided[0] - saved["cost_usd"]) < 1e-9, (avoided, saved)
        # Forgotten for good.
        forgotten = urllib.request.Request(
            glider.dashboard + "/api/context/sessions/claude-code:e2e-session-0", method="GET"
        )
        try:
            urllib.request.urlopen(forgotten, timeout=10)
            raise AssertionError("the forgotten session is still served")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e.code


def test_a_local_models_speed_and_its_cap_in_a_real_browser():
    require_tools()
    shot = SCREENSHOT.parent / "dashboard-fit.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    with running_glider(FIT_CONFIG, mock_args=FIT_MOCK) as glider:
        seen = run_node("fit.mjs", glider, SCREENSHOT=str(shot), MODEL=MODEL)

    # Before any reply: the configured window, no speed, a quarter of the window.
    quarter = f"{FIT_WINDOW // 4:,}"
    assert seen["before"] == [
        "local", MODEL, f"{FIT_WINDOW:,}", "–", "–", "0",
        quarter, "a quarter of the model's context window", f"{quarter} tokens",
    ], seen["before"]
    assert "2 s of generation" in seen["note"] and "25%" in seen["note"], seen["note"]

    # After one streamed reply: the speeds the engine measured, and the cap two seconds
    # of generation at that rate give (under the window's quarter), as /api/fit says.
    (model,) = seen["api"]["models"]
    speed = model["speed"]
    assert speed["samples"] == 1, model
    generated, prompt = speed["generated_per_sec"], speed["prompt_per_sec"]
    assert 0 < generated <= 100 / 0.38 and prompt > 0, model
    cap = max(256, int(generated * 2))
    assert model["output_cap"] == {"tokens": cap, "setting": "fit.max_reply_secs at the model's measured speed"}, model
    # As the page writes a rate (JavaScript's Math.round rounds a half up).
    shown = lambda rate: f"{rate:.1f} tok/s" if rate < 10 else f"{math.floor(rate + 0.5)} tok/s"  # noqa: E731
    assert seen["after"] == [
        "local", MODEL, f"{FIT_WINDOW:,}", shown(prompt), shown(generated), "1",
        f"{cap:,}", "fit.max_reply_secs at the model's measured speed", f"{quarter} tokens",
    ], (seen["after"], model)
    # The request's row: the cap Glider set, before the speed was known.
    assert seen["fitted"] == (
        f"fitted: local: max_tokens 64000 -> {FIT_WINDOW // 4} (a quarter of the model's context window)"
    ), seen["fitted"]
    assert shot.stat().st_size > 10_000


PANELS_CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: '{url}', models: [{{name: qwen-e2e, context_window: 8192}}], default_model: qwen-e2e, fit: {{max_tools: 2}}}}
  - {{name: flaky, type: ollama, base_url: 'http://{flaky}', models: [flaky-model]}}
  - {{name: cloud, type: anthropic, base_url: '{url}', api_key: sk-panels-secret, models: ['claude-*']}}
routing: {{cloud_fallback: false}}
"""


def test_every_panel_as_a_user_sees_it():
    """Each panel after real-shaped traffic: what it says and that it fits on the page."""
    require_tools()
    shots = SCREENSHOT.parent
    shots.mkdir(parents=True, exist_ok=True)
    for name in ("dashboard-panels.png", "dashboard-session-record.png"):
        (shots / name).unlink(missing_ok=True)
    # `flaky`: a local backend that was up, had its model loaded, and went down.
    flaky = start_mock()
    try:
        config = PANELS_CONFIG.replace("{flaky}", flaky.match.group(1))
        with running_glider(config) as glider:
            gateway = glider.match.group(1)
            request = urllib.request.Request(
                gateway + "/v1/messages",
                data=json.dumps({"model": "flaky-model", "max_tokens": 16, "messages": [{"role": "user", "content": "/via flaky hi"}]}).encode(),
                headers={"content-type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert reply.status == 200
            loaded = lambda: any(m["backend"] == "flaky" and m["loaded"] for m in get_json(glider.dashboard + "/api/vram")["models"])  # noqa: E731
            assert poll(loaded, timeout=30), get(glider.dashboard + "/api/vram")
            flaky.stop()
            down = lambda: any(b["backend"] == "flaky" and b["health"] == "down" for b in get_json(glider.dashboard + "/api/backends")["backends"])  # noqa: E731
            assert poll(down, timeout=30), get(glider.dashboard + "/api/backends")
            seen = run_node("panels.mjs", glider, SCREENSHOT_DIR=str(shots), CLOUD_MODEL=CLOUD_MODEL)
            report = get_json(glider.dashboard + "/api/route-report")
    finally:
        flaky.stop()

    failed = [r for r in seen["requests"] if r["status"].startswith("502")]
    assert len(failed) == 1, seen["requests"]
    # The error is said once, in the Status column (not again as the backends tried
    # before it), and that column is on the page.
    assert "no backend could be reached: flaky:" in failed[0]["status"], failed[0]
    assert failed[0]["text"].count("Connection refused") == 1, failed[0]
    assert seen["requestsOverflow"] == 0, seen["requestsOverflow"]
    # The local turn's row says what was fitted for the small model.
    fitted = [line for r in seen["requests"] for line in r["fitted"]]
    # (Claude Code's core tools are kept whatever the budget: the set stays at five.)
    assert any(line.startswith("fitted: local: tools 5 -> 5 (over the budget of 2 tools") for line in fitted), fitted
    # By backend / by route: every column in sight, the Saved column included.
    assert seen["byBackendOverflow"] == 0 and seen["byRouteOverflow"] == 0, seen
    local_row = next(r for r in seen["byBackend"] if r[0] == "local")
    assert local_row[-1].startswith("$"), local_row
    assert any(r[0] == "explicit" for r in seen["byRoute"]), seen["byRoute"]
    assert "since Glider started at" in seen["since"], seen["since"]
    # GPU memory: said once; a down backend's model is not "loaded".
    assert "no GPU (no GPU" not in seen["gpus"] and seen["gpus"].startswith("no GPU"), seen["gpus"]
    flaky_row = next(r for r in seen["vram"] if r[0] == "flaky")
    assert flaky_row[2] == "unknown (backend down)", flaky_row
    local_vram = next(r for r in seen["vram"] if r[0] == "local")
    assert local_vram[2] in ("yes", "no"), local_vram
    # MCP servers and shadow comparisons: say why they are empty.
    assert seen["mcp"] == [["no MCP server configured (mcp.servers in the config)"]], seen["mcp"]
    assert seen["shadow"] == [["no samples (fan_out.mode: shadow)"]], seen["shadow"]
    # Routing evidence: one bar per kind of request, holding the report's own figures
    # (what went local and what went to the cloud), the largest kind drawn widest.
    kinds = {k["kind"]: k for k in report["by_kind"]}
    drawn = {row["kind"]: row for row in seen["routeKinds"]}
    assert drawn.keys() == kinds.keys() and drawn, (seen["routeKinds"], report)
    for kind, row in drawn.items():
        figures = kinds[kind]
        assert (row["local"], row["cloud"]) == (figures["local"]["tokens"], figures["all"]["tokens"] - figures["local"]["tokens"]), (row, figures)
        # What the user reads beside the bar: the share of the kind's tokens sent local.
        share = math.floor(100 * figures["local"]["tokens"] / figures["all"]["tokens"] + 0.5)
        assert row["text"].split()[0] == kind and row["text"].endswith(f"{share}% local"), (row, figures)
    assert sum(row["local"] for row in drawn.values()) > 0 and sum(row["cloud"] for row in drawn.values()) > 0, drawn
    widest = max(drawn.values(), key=lambda row: row["local"] + row["cloud"])
    assert all(row["width"] <= widest["width"] for row in drawn.values()) and widest["width"] > 0, drawn
    assert [r[0] for r in seen["routeTable"]] == [row["kind"] for row in seen["routeKinds"]], seen["routeTable"]
    assert sum(int(r[1].replace(",", "")) for r in seen["routeTable"]) == report["requests_read"], (seen["routeTable"], report)
    assert seen["routeSuggestion"].startswith("No threshold change suggested"), seen["routeSuggestion"]
    # Config: the file's path, the running config with the key redacted, nothing pending.
    assert seen["configPath"].endswith("glider.yaml"), seen["configPath"]
    assert "sk-panels-secret" not in seen["config"] and "flaky-model" in seen["config"], seen["config"]
    assert "matches the file" in seen["restart"], seen["restart"]
    # The session: titled by the user's words, never Claude Code's reminders.
    assert seen["goals"] and all("system-reminder" not in g and "CLAUDE.md" not in g for g in seen["goals"]), seen["goals"]
    assert len(seen["goals"]) == 2 and seen["goals"][0].startswith("why does add() fail?"), seen["goals"]
    assert seen["goals"][1].startswith("fix it and check") and seen["goals"][1].endswith("]]"), seen["goals"]
    commands = {c[0]: c[1] for c in seen["commands"]}
    assert commands == {"cargo build": "succeeded", "cargo test": "exit 101"}, seen["commands"]
    # The record: the text the local model receives, not a dump of its JSON.
    assert seen["record"].startswith("<continuity-record"), seen["record"]
    assert seen["recordJsonDump"] == 0
    assert "5 files touched longer ago: at most 40 are listed" in seen["recordLeftOut"], seen["recordLeftOut"]
    for name in ("dashboard-panels.png", "dashboard-session-record.png"):
        assert (shots / name).stat().st_size > 10_000, name


SHADOW_CONFIG = """
backends:
  - {{name: local, type: ollama, base_url: 'http://{local}', models: [qwen-e2e], default_model: qwen-e2e}}
  - {{name: cloud, type: anthropic, base_url: '{url}', api_key: sk-e2e-secret, models: ['claude-*']}}
routing: {{cloud_fallback: false}}
context: {{summarizer: {{enabled: false}}, compaction: cloud}}
fan_out: {{mode: shadow, shadow: {{target: local, sample_rate: 1.0}}}}
"""
COMPACT = ROOT / "tests" / "fixtures" / "cli" / "claude-code-2.1.197" / "compact" / "002-compact.json"


def test_a_compactions_shadow_compared_by_the_files_it_must_name_in_a_real_browser():
    """Claude Code's real `/compact` (after fixing the typo in notes.txt) goes to the cloud,
    whose summary names notes.txt; its shadow copy goes to the local model, whose summary
    is close in words but names no file. The Shadow comparisons panel says the compaction
    disagreed, and that the shadow named 0 of the 1 file the primary named."""
    require_tools()
    shots = SCREENSHOT.parent
    shots.mkdir(parents=True, exist_ok=True)
    (shots / "dashboard-shadow.png").unlink(missing_ok=True)
    captured = json.loads(COMPACT.read_text())
    # Claude Code asks for thinking: the local model must think, as a real one asked so would.
    local = start_mock("--reply-text", "We fixed the typo in the notes file.", "--thinking-model", "qwen-e2e")
    try:
        config = SHADOW_CONFIG.replace("{local}", local.match.group(1))
        with running_glider(config, mock_args=("--reply-text", "We fixed the typo in notes.txt.")) as glider:
            gateway = glider.match.group(1)
            request = urllib.request.Request(
                gateway + "/v1/messages",
                data=json.dumps(captured["body"]).encode(),
                headers={"content-type": "application/json", "x-claude-code-session-id": "shadow-e2e"},
            )
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert reply.status == 200
                assert "backend=cloud" in reply.headers["x-glider-route"], reply.headers["x-glider-route"]
                reply.read()
            compared = lambda: [s for s in get_json(glider.dashboard + "/api/shadow")["recent"] if s["outcome"] == "compared"]  # noqa: E731
            samples = poll(compared, timeout=30)
            assert samples, get(glider.dashboard + "/api/shadow")
            seen = run_node("shadow.mjs", glider, SCREENSHOT_DIR=str(shots))
            sample = samples[0]
    finally:
        local.stop()

    agreement = sample["agreement"]
    # Close in words (what a title would be judged by), yet it left out the file.
    assert agreement["text_similarity"] >= 0.5 and not agreement["agrees"], agreement
    assert agreement["coverage"] == {"required": 1, "primary_named": 1, "shadow_named": 0, "missed": 1, "missed_labels": ["/workspace/notes.txt"]}, agreement
    assert seen["head"][2] == "Kind" and seen["head"][8] == "Coverage", seen["head"]
    assert len(seen["rows"]) == 1, seen["rows"]
    row = dict(zip(seen["head"], seen["rows"][0]))
    assert row["Shadow"] == "local (qwen-e2e)" and row["Primary"] == "cloud", row
    assert row["Kind"] == "compaction" and row["Agreement"] == "0%", row
    assert row["Coverage"] == "0 of 1 named", row
    assert seen["overflow"] == 0, seen["overflow"]
    assert (shots / "dashboard-shadow.png").stat().st_size > 10_000
