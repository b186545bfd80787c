"""bench/memory_steps.py — where Glider's resident memory grows, load by load.

Starts the mocks and one Glider exactly as bench/harness.py does (its config: five
backends, the context log and the dashboard on; release binaries from target/release),
runs the loads named in STEPS one after another on the same process, and prints the
resident set after each (its peak while the load ran, then 2 s later). A growth that
does not come back between runs of the same load is memory the server keeps.

  STEPS   comma-separated, from small1, small50, large50, stream1, streams1000
          (default: all five, in that order)
  DIALECT openai (default), anthropic or responses (80 KB bodies: a Codex turn)
  SECS    seconds per load (default 5)
  BENCH_RUN_DIR  the run's directory and GLIDER_HOME (default /tmp/memory-steps;
          emptied first: a reused home holds what earlier runs stored)

  e.g. SECS=10 STEPS=small50,small50,small50 python3 bench/memory_steps.py
"""
import os, shutil, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("BENCH_RUN_DIR", "/tmp/memory-steps")
shutil.rmtree(os.environ["BENCH_RUN_DIR"], ignore_errors=True)
import harness as H  # noqa: E402
H.RUN_DIR = os.environ["BENCH_RUN_DIR"]
os.makedirs(H.RUN_DIR, exist_ok=True)
H.SECONDS = int(os.environ.get("SECS", "5"))
H.WARMUP = 0
H.SAMPLER.start()
extra = os.environ.get("EXTRA", "")
steps = os.environ.get("STEPS", "small1,small50,large50,stream1,streams1000").split(",")
try:
    mock, mp = H.start_mock("mock", ["--deltas", "20"])
    slow, sp = H.start_mock("mock-slow", ["--deltas", "20", "--delta-delay-ms", "50"])
    g, gp, dp = H.start_glider(mp, sp, None, extra=extra)
    url = f"http://127.0.0.1:{gp}"
    dialect = os.environ.get("DIALECT", "openai")
    path = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}[dialect]
    model = {"openai": "bench-chat", "anthropic": "bench-claude", "responses": H.GPT_MODEL}[dialect]
    t = H.Target("g", g, url + path, dialect, model, "g")
    H.check(t)
    time.sleep(1)
    print("idle", g.memory(), flush=True)
    for s in steps:
        g.peak_rss = 0
        if s == "small1": r = H.wrk(t, t.body("small"), 1)
        elif s == "small50": r = H.wrk(t, t.body("small"), 50)
        elif s == "large50": r = H.wrk(t, t.body("large"), 50)
        elif s == "stream1": r = H.load(t, t.body("small", True), 1, seconds=3)
        elif s == "streams1000":
            st = H.Target("s", g, url + "/v1/chat/completions", "openai", "bench-slow", "s")
            r = H.wrk(st, st.body("small", True), 1000, seconds=10, threads=2)
        rss, hwm = g.memory()
        print(f"{s}: rps {r.get('rps'):.0f} errors {r.get('error_count', r.get('errors'))} peak {g.peak_rss/1024:.1f} MiB rss-after {rss/1024:.1f} hwm {hwm/1024:.1f}", flush=True)
        time.sleep(2)
        print(f"   2 s later rss {g.memory()[0]/1024:.1f} MiB", flush=True)
finally:
    H.SAMPLER.stopped = True
    H.Proc.stop_all()
