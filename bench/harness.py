"""The benchmark driver behind bench/run.sh (which installs the peers and builds the
binaries first). Starts the mock upstream, Glider, LiteLLM, claude-code-router and
mitmdump on loopback, runs every case with wrk or glider-load, samples each proxy's
memory, stops every process it started, and writes bench/results/<date>-<sha>.md plus
a raw .json. Stdlib only. See bench/README.md for the cases and how to read them.

Environment: BENCH_SECONDS (per measured run, default 10), BENCH_WARMUP (default 1),
BENCH_CASES (comma list of a,b,c,d,e,f,n,hotpath,context,plugins,hedge; default all), BENCH_NAME (the
report's name after the date; default the short commit), BENCH_CONTEXT_ROUNDS (default 3), BENCH_CONTEXT_BODY (the context case's body, small or large; default small), BENCH_CONTEXT_MODEL (its model: bench-chat, a local vLLM backend, by default; gpt-4.1 goes to a cloud OpenAI one), BENCH_N_ROUNDS (default 1), BENCH_PEERS (comma list of
litellm,ccr,mitmproxy; default all), BENCH_SAT_CONNS (default 32), BENCH_STREAMS
(concurrent streams for the memory case, default 1000), BENCH_CPU_MOCK / _PROXY / _LOAD
(taskset lists; default 0 / 1 / 0 on two or more cores, no pinning on one),
BENCH_NGINX_CONNS (connections for the nginx case's throughput runs, default 50).
"""

import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bodies  # noqa: E402
import report  # noqa: E402

SECONDS = int(os.environ.get("BENCH_SECONDS", "10"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "1"))
CASES = set(os.environ.get("BENCH_CASES", "a,b,c,d,e,f,n,hotpath,context,plugins,hedge").split(","))
PEERS = set(os.environ.get("BENCH_PEERS", "litellm,ccr,mitmproxy").split(","))
SAT_CONNS = int(os.environ.get("BENCH_SAT_CONNS", "32"))
NGINX_CONNS = int(os.environ.get("BENCH_NGINX_CONNS", "50"))
STREAMS = int(os.environ.get("BENCH_STREAMS", "1000"))
CONTEXT_BODY = os.environ.get("BENCH_CONTEXT_BODY", "small")
CONTEXT_MODEL = os.environ.get("BENCH_CONTEXT_MODEL", "bench-chat")
BIN = os.environ.get("BENCH_BIN", os.path.join(ROOT, "target", "release"))
VENV = os.path.join(HERE, ".venv")
PIDFILE = os.environ.get("BENCH_PIDFILE")
REPLY = "Benchmark reply from the mock upstream."
NCPU = os.cpu_count() or 1
PIN = NCPU >= 2
CPU_MOCK = os.environ.get("BENCH_CPU_MOCK", "0")
CPU_PROXY = os.environ.get("BENCH_CPU_PROXY", "1")
CPU_LOAD = os.environ.get("BENCH_CPU_LOAD", "0")
# LiteLLM refuses to start without a master key; clients then present it.
LITELLM_KEY = "sk-bench-0123456789abcdef"
STAMP = datetime.datetime.now(datetime.timezone.utc)
# The Responses case's model: a `gpt-*` name, as every Codex turn carries (it is what
# selects tiktoken in the token estimate).
GPT_MODEL = "gpt-4.1"
# The fronts the mock is reached on directly and through nginx: (dialect, path, model,
# what the label calls it).
FRONTS = [("openai", "/v1/chat/completions", "bench-chat", "OpenAI Chat"),
          ("anthropic", "/v1/messages", "bench-claude", "Anthropic Messages"),
          ("responses", "/v1/responses", GPT_MODEL, "OpenAI Responses")]


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pinned(cmd, cpus):
    return (["taskset", "-c", cpus] + cmd) if PIN else cmd


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- processes ----------

class Proc:
    """A process started in its own process group (so it and its children are stopped
    together), logging to RUN_DIR/<name>.log, with its group id in $BENCH_PIDFILE so
    run.sh's EXIT trap can stop it even if this script dies."""

    running = []

    def __init__(self, name, cmd, env=None, cwd=None):
        self.name = name
        self.log_path = os.path.join(RUN_DIR, name + ".log")
        self.log_file = open(self.log_path, "w")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            cmd, stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=full_env, cwd=cwd, start_new_session=True)
        self.pid = self.popen.pid
        Proc.running.append(self)
        if PIDFILE:
            with open(PIDFILE, "a") as f:
                f.write(f"{self.pid}\n")
        self.idle = None
        self.peak_rss = 0
        self.rss_samples = []

    def wait_line(self, pattern, timeout):
        """Wait for a log line matching `pattern`; returns the match."""
        deadline = time.time() + timeout
        rx = re.compile(pattern)
        while time.time() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.popen.returncode}): {self.tail()}")
            with open(self.log_path, errors="replace") as f:
                m = rx.search(f.read())
            if m:
                return m
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready in {timeout} s: {self.tail()}")

    def wait_port(self, port, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.popen.returncode}): {self.tail()}")
            if port_open(port):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not listening on {port} in {timeout} s: {self.tail()}")

    def tail(self, n=800):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:].strip()
        except OSError:
            return ""

    def pids(self):
        """Every live process in this group."""
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                pgrp = int(stat[stat.rindex(")") + 2:].split()[2])
            except (OSError, ValueError, IndexError):
                continue
            if pgrp == self.pid:
                out.append(int(entry))
        return out

    def cpu_seconds(self):
        """User + system CPU seconds of the process group so far (/proc/PID/stat; every
        thread of each process counted: a proxy's writer and summarizer threads too)."""
        ticks = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2:].split()
                ticks += int(fields[11]) + int(fields[12])
            except (OSError, ValueError, IndexError):
                continue
        return ticks / os.sysconf("SC_CLK_TCK")

    def memory(self):
        """(VmRSS, VmHWM) in KiB summed over the process group."""
        rss = hwm = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            rss += int(line.split()[1])
                        elif line.startswith("VmHWM:"):
                            hwm += int(line.split()[1])
            except OSError:
                pass
        return rss, hwm

    def pause(self):
        """Stop the process group (SIGSTOP) while another is measured."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self):
        os.killpg(self.pid, signal.SIGCONT)

    def stop(self):
        if self in Proc.running:
            Proc.running.remove(self)
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=8)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        self.log_file.close()

    @classmethod
    def stop_all(cls):
        for proc in list(reversed(cls.running)):
            proc.stop()


class Sampler(threading.Thread):
    """Samples the memory of the process `target` names every 100 ms while it is the
    target of a run (peak VmRSS over the group = "under load")."""

    def __init__(self):
        super().__init__(daemon=True)
        self.target = None
        self.stopped = False

    def run(self):
        while not self.stopped:
            proc = self.target
            if proc is not None:
                rss, _ = proc.memory()
                proc.peak_rss = max(proc.peak_rss, rss)
            time.sleep(0.1)


SAMPLER = Sampler()


# ---------------------------------------------------------------- measuring ----------

BODY_CACHE = {}


def body(size, dialect, stream, model):
    key = (size, dialect, stream, model)
    if key not in BODY_CACHE:
        path = os.path.join(RUN_DIR, "bodies", f"{size}-{dialect}-{'s' if stream else 'n'}-"
                            f"{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(bodies.render(bodies.conversation(size), dialect, model, stream), f,
                      separators=(",", ":"))
        BODY_CACHE[key] = path
    return BODY_CACHE[key]


class Target:
    """One way to reach the mock: directly or through a proxy. `dialect` is what the
    client speaks; `model` selects the backend inside the proxy."""

    def __init__(self, name, proc, url, dialect, model, label, key="bench"):
        self.name, self.proc, self.url = name, proc, url
        self.dialect, self.model, self.label = dialect, model, label
        self.headers = ({"anthropic-version": "2023-06-01", "x-api-key": key}
                        if dialect == "anthropic" else {})
        self.headers["authorization"] = f"Bearer {key}"
        self.error = None

    def body(self, size, stream=False):
        return body(size, self.dialect, stream, self.model)


def parse_bench_json(output):
    for line in output.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    raise RuntimeError("no BENCH_JSON line in output: " + output[-600:])


def run_cmd(cmd, env=None, timeout=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    done = subprocess.run(cmd, capture_output=True, text=True, env=full_env,
                          timeout=timeout or (SECONDS + WARMUP) * 3 + 60,
                          start_new_session=True)
    return done.stdout + done.stderr


def wrk(target, body_path, conns, seconds=None, threads=1):
    seconds = seconds or SECONDS
    env = {"BENCH_BODY": body_path,
           "BENCH_HEADERS": "|".join(f"{k}: {v}" for k, v in target.headers.items())}
    script = os.path.join(HERE, "wrk", "post.lua")
    base = ["wrk", f"-t{threads}", f"-c{conns}", "--timeout", "30s", "-s", script, target.url]
    if WARMUP:
        run_cmd(pinned(base[:3] + [f"-d{WARMUP}s"] + base[3:], CPU_LOAD), env)
    SAMPLER.target = target.proc
    cpu_before = target.proc.cpu_seconds() if target.proc else None
    try:
        out = run_cmd(pinned(base[:3] + [f"-d{seconds}s"] + base[3:], CPU_LOAD), env)
    finally:
        SAMPLER.target = None
    result = parse_bench_json(out)
    if cpu_before is not None and result.get("requests"):
        # The proxy's CPU a request: its cost whatever share of the other core the load
        # generator and the mock got (req/s moves with that share too).
        cpu = target.proc.cpu_seconds() - cpu_before
        result["cpu_us_per_request"] = cpu * 1e6 / result["requests"]
    result["loadavg"] = float(open("/proc/loadavg").read().split()[0])
    e = result["errors"]
    result["error_count"] = e["connect"] + e["read"] + e["write"] + e["status"] + e["timeout"]
    return result


def load(target, body_path, conns, seconds=None, extra=None, url=None):
    cmd = [os.path.join(BIN, "glider-load"), "--url", url or target.url, "--body", body_path,
           "--connections", str(conns), "--duration", str(seconds or SECONDS),
           "--warmup", str(WARMUP), "--expect", REPLY.split()[0]]
    for k, v in target.headers.items():
        cmd += ["--header", f"{k}: {v}"]
    SAMPLER.target = target.proc
    try:
        out = run_cmd(pinned(cmd + (extra or []), CPU_LOAD))
    finally:
        SAMPLER.target = None
    result = parse_bench_json(out)
    result["loadavg"] = float(open("/proc/loadavg").read().split()[0])
    return result


def check(target):
    """One request; the reply must come from the mock (its fixed text) — a proxy that
    answers with an error is reported, not measured."""
    for stream in (False, True):
        req = urllib.request.Request(target.url, data=open(target.body("small", stream), "rb").read(),
                                     headers={"content-type": "application/json", **target.headers})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"HTTP {e.code}: {e.read()[:300]!r}") from None
        # A stream splits the text across deltas; its events must still carry no error
        # (a Responses stream's `"error":null` fields are not one).
        if ("Benchmark" not in text if not stream else (stream_error(text) or not text)):
            raise RuntimeError(f"reply does not carry the mock's text: {text[:300]!r}")


def stream_error(text):
    """Whether a stream's text carries an error event or a non-null error member."""
    return bool(re.search(r'event: *error|"type": *"error"|"error": *(?!null)[{"]', text))


# ---------------------------------------------------------------- peers -------------

def start_mock(name, extra):
    proc = Proc(name, pinned([os.path.join(BIN, "glider-mock"), "--port", "0", "--reply-text",
                              REPLY] + extra, CPU_MOCK))
    port = int(proc.wait_line(r"listening on 127\.0\.0\.1:(\d+)", 30).group(1))
    return proc, port


def start_glider(mock, slow, mitm_port, name="glider", extra=""):
    """`glider serve` on the mocks; `mitm_port` None leaves its MITM door off (a second
    Glider), `extra` is appended to its config. Returns (proc, gateway port, dashboard
    port)."""
    home = os.path.join(RUN_DIR, f"{name}-home")
    os.makedirs(home, exist_ok=True)
    config = os.path.join(RUN_DIR, f"{name}.yaml")
    if mitm_port is None:
        mitm = "mitm: { enabled: false }"
    else:
        mitm = "\n".join([
            "mitm:",
            "  enabled: true",
            f"  port: {mitm_port}",
            '  hosts: ["api.anthropic.com"]',
            "  passthrough_default: true       # the tunnel case: an unlisted host is tunnelled",
            "  origin_on_local_error: false",
            f'  ca_dir: "{os.path.join(home, "mitm")}"',
        ])
    with open(config, "w") as f:
        f.write(f"""# Written by bench/harness.py: every backend is the same mock upstream.
server: {{ bind: 127.0.0.1, proxy_port: 0 }}
backends:
  - {{ name: vllm, type: vllm, base_url: "http://127.0.0.1:{mock}/v1", models: [{{ name: bench-chat, context_window: 131072 }}] }}
  - {{ name: ollama, type: ollama, base_url: "http://127.0.0.1:{mock}", models: [{{ name: bench-ollama, context_window: 131072 }}] }}
  - {{ name: claude, type: anthropic, base_url: "http://127.0.0.1:{mock}", api_key: bench, models: ["bench-claude"] }}
  - {{ name: slow, type: vllm, base_url: "http://127.0.0.1:{slow}/v1", models: [{{ name: bench-slow, context_window: 131072 }}] }}
  - {{ name: openai, type: openai, base_url: "http://127.0.0.1:{mock}/v1", api_key: bench, models: ["{GPT_MODEL}"] }}
routing: {{ cloud_fallback: false }}
{mitm}
{extra}
""")
    proc = Proc(name, pinned([os.path.join(BIN, "glider"), "serve", "-c", config, "--port", "0",
                              "--dashboard-port", "0"], CPU_PROXY),
                env={"GLIDER_HOME": home, "NO_COLOR": "1"})
    port = int(proc.wait_line(r"glider gateway listening on http://127\.0\.0\.1:(\d+)", 60).group(1))
    dashboard = int(proc.wait_line(r"glider dashboard on http://127\.0\.0\.1:(\d+)", 60).group(1))
    return proc, port, dashboard


def start_litellm(mock, slow):
    port = free_port()
    config = os.path.join(RUN_DIR, "litellm.yaml")
    with open(config, "w") as f:
        f.write(f"""# Written by bench/harness.py: LiteLLM proxy in front of the mock (OpenAI-compatible).
model_list:
  - model_name: bench-chat
    litellm_params: {{ model: openai/bench-chat, api_base: "http://127.0.0.1:{mock}/v1", api_key: bench }}
  - model_name: bench-slow
    litellm_params: {{ model: openai/bench-slow, api_base: "http://127.0.0.1:{slow}/v1", api_key: bench }}
litellm_settings: {{ drop_params: true, telemetry: false }}
""")
    proc = Proc("litellm", pinned([os.path.join(VENV, "litellm", "bin", "litellm"), "--config", config,
                                   "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
                                  CPU_PROXY),
                env={"LITELLM_MASTER_KEY": LITELLM_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
                     "NO_COLOR": "1", "HOME": os.path.join(RUN_DIR, "litellm-home")})
    os.makedirs(os.path.join(RUN_DIR, "litellm-home"), exist_ok=True)
    proc.wait_port(port, 180)
    return proc, port


def start_ccr(mock, slow):
    port = free_port()
    home = os.path.join(RUN_DIR, "ccr-home")
    os.makedirs(os.path.join(home, ".claude-code-router"), exist_ok=True)
    with open(os.path.join(home, ".claude-code-router", "config.json"), "w") as f:
        json.dump({
            "LOG": False, "HOST": "127.0.0.1", "PORT": port, "API_TIMEOUT_MS": 600000,
            "Providers": [
                {"name": "mock", "api_base_url": f"http://127.0.0.1:{mock}/v1/chat/completions",
                 "api_key": "bench", "models": ["bench-chat"]},
                {"name": "slow", "api_base_url": f"http://127.0.0.1:{slow}/v1/chat/completions",
                 "api_key": "bench", "models": ["bench-slow"]},
            ],
            "Router": {"default": "mock,bench-chat"},
        }, f, indent=2)
    ccr = os.path.join(HERE, "node_modules", "@musistudio", "claude-code-router", "dist", "cli.js")
    proc = Proc("ccr", pinned(["node", ccr, "start"], CPU_PROXY), env={"HOME": home, "CI": "true"})
    proc.wait_port(port, 60)
    return proc, port


def start_mitmdump(mock):
    port = free_port()
    confdir = os.path.join(RUN_DIR, "mitmproxy-conf")
    os.makedirs(confdir, exist_ok=True)
    proc = Proc("mitmdump", pinned([
        os.path.join(VENV, "mitmproxy", "bin", "mitmdump"), "--listen-host", "127.0.0.1",
        "--listen-port", str(port), "--set", f"confdir={confdir}",
        "--set", "connection_strategy=lazy", "--set", "upstream_cert=false",
        "--set", "flow_detail=0", "--set", "termlog_verbosity=warn",
        "--ignore-hosts", r"^127\.0\.0\.1:", "-s", os.path.join(HERE, "mitm_addon.py")],
        CPU_PROXY), env={"BENCH_MOCK_ADDR": f"127.0.0.1:{mock}"})
    proc.wait_port(port, 60)
    ca = os.path.join(confdir, "mitmproxy-ca-cert.pem")
    for _ in range(100):
        if os.path.exists(ca):
            break
        time.sleep(0.1)
    return proc, port, ca


def start_nginx(mock):
    """nginx as a plain reverse proxy to the mock (no logic at all: what any HTTP proxy
    costs at least), one worker on the proxy core, its own config and temp paths under
    RUN_DIR. Keep-alive to the upstream as Glider's pool does, and no response
    buffering, so a stream reaches the client as it arrives."""
    port = free_port()
    prefix = os.path.join(RUN_DIR, "nginx")
    os.makedirs(prefix, exist_ok=True)
    config = os.path.join(prefix, "nginx.conf")
    with open(config, "w") as f:
        f.write(f"""# Written by bench/harness.py: nginx in front of the mock, nothing else.
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  client_max_body_size 32m;
  client_body_buffer_size 1m;
  keepalive_requests 1000000;
  upstream mock {{ server 127.0.0.1:{mock}; keepalive 256; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
""")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = Proc("nginx", pinned([nginx, "-p", prefix, "-c", config, "-e", os.path.join(prefix, "error.log")],
                                CPU_PROXY))
    proc.wait_port(port, 30)
    return proc, port


def settle_idle(proc):
    """Idle memory: after start and one checked request, 2 s of quiet."""
    time.sleep(2)
    proc.idle = proc.memory()


# ---------------------------------------------------------------- versions ----------

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except subprocess.TimeoutExpired:
        return ""


def machine():
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("grep MemTotal /proc/meminfo | awk '{print $2}'")
    node_pkg = os.path.join(HERE, "node_modules", "@musistudio", "claude-code-router", "package.json")
    try:
        ccr_version = json.load(open(node_pkg))["version"]
    except OSError:
        ccr_version = "not installed"
    return {
        "nproc": NCPU,
        "cpu": cpu,
        "memory_gib": round(int(mem or 0) / 1048576, 1),
        "kernel": sh("uname -r"),
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "glider": sh(f"git -C {ROOT} rev-parse --short HEAD") + (
            "+dirty" if sh(f"git -C {ROOT} status --porcelain -- crates Cargo.toml Cargo.lock") else ""),
        "rustc": sh("rustc --version"),
        "wrk": sh("wrk -v 2>&1 | head -1"),
        "litellm": sh(f"{VENV}/litellm/bin/pip show litellm 2>/dev/null | grep ^Version | cut -d' ' -f2"),
        "claude-code-router": ccr_version,
        "mitmproxy": sh(f"{VENV}/mitmproxy/bin/pip show mitmproxy 2>/dev/null | grep ^Version | cut -d' ' -f2"),
        "python": sh("python3 --version"),
        "node": sh("node --version"),
    }


# ---------------------------------------------------------------- cases -------------

def attempt(results, key, fn):
    """Run one measurement; a failure is recorded as such, never as a number."""
    try:
        value = fn()
        results[key] = value
        return value
    except Exception as e:  # noqa: BLE001 - any failure is reported in the results
        log(f"  {key}: FAILED {e}")
        results[key] = {"failed": str(e)[:500]}
        return None


def main():
    global RUN_DIR
    sha = sh(f"git -C {ROOT} rev-parse --short HEAD") or "nosha"
    out_dir = os.environ.get("BENCH_OUT", os.path.join(HERE, "results"))
    RUN_DIR = os.environ.get("BENCH_RUN_DIR") or os.path.join(HERE, ".run")
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    os.makedirs(RUN_DIR)
    started = time.time()
    res = {"machine": machine(), "seconds": SECONDS, "warmup": WARMUP, "pinning": {
        "enabled": PIN, "mock": CPU_MOCK, "proxy": CPU_PROXY, "load": CPU_LOAD},
        "sat_conns": SAT_CONNS, "streams": STREAMS,
        "targets": {}, "a": {}, "b": {}, "c": {}, "d": {}, "e": {}, "f": {}, "n": {}, "context": {},
        "nginx_conns": NGINX_CONNS,
        "cases": sorted(CASES)}
    SAMPLER.start()
    try:
        run_all(res)
    finally:
        SAMPLER.stopped = True
        Proc.stop_all()
    res["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    res["wall_s"] = round(time.time() - started)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{STAMP.strftime('%Y-%m-%d')}-{os.environ.get('BENCH_NAME') or sha}")
    with open(base + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(report.render(res))
    log(f"wrote {base}.md and {base}.json ({res['wall_s']} s)")


def run_all(res):
    # The upstream: one fast mock for every case, one slow mock (streams of ~1 s) for the
    # many-concurrent-streams memory case.
    mock, mock_port = start_mock("mock", ["--deltas", "20"])
    slow, slow_port = start_mock("mock-slow", ["--deltas", "20", "--delta-delay-ms", "50"])
    mitm_port = free_port()
    if CASES <= {"context", "plugins", "hedge"}:
        # Only the cases that start their own Gliders.
        if "context" in CASES:
            run_context(res, mock_port, slow_port)
        if "plugins" in CASES:
            run_plugins(res)
        if "hedge" in CASES:
            run_hedge(res)
        return
    glider, glider_port, _ = start_glider(mock_port, slow_port, mitm_port)
    m = f"http://127.0.0.1:{mock_port}"
    g = f"http://127.0.0.1:{glider_port}"
    T = {}

    def add(name, proc, url, dialect, model, label, key="bench"):
        T[name] = Target(name, proc, url, dialect, model, label, key)

    for dialect, path, model, what in FRONTS:
        add(f"direct-{dialect}", mock, m + path, dialect, model, f"direct to the mock ({what})")
    add("direct-ollama", mock, m + "/api/chat", "ollama", "bench-ollama",
        "direct to the mock (Ollama)")
    add("glider-responses", glider, g + "/v1/responses", "responses", GPT_MODEL,
        f"Glider, OpenAI Responses ({GPT_MODEL}) -> openai backend (same dialect: bytes forwarded)")
    add("glider-openai", glider, g + "/v1/chat/completions", "openai", "bench-chat",
        "Glider, OpenAI Chat -> vllm backend (same dialect: bytes forwarded)")
    add("glider-anthropic", glider, g + "/v1/messages", "anthropic", "bench-claude",
        "Glider, Anthropic -> anthropic backend (same dialect: bytes forwarded)")
    add("glider-anthropic-openai", glider, g + "/v1/messages", "anthropic", "bench-chat",
        "Glider, Anthropic -> vllm backend (translated to OpenAI Chat)")
    add("glider-anthropic-ollama", glider, g + "/v1/messages", "anthropic", "bench-ollama",
        "Glider, Anthropic -> ollama backend (translated to Ollama /api/chat)")
    if "litellm" in PEERS:
        try:
            proc, port = start_litellm(mock_port, slow_port)
            add("litellm-openai", proc, f"http://127.0.0.1:{port}/v1/chat/completions", "openai",
                "bench-chat", "LiteLLM proxy, OpenAI Chat -> openai/ provider", LITELLM_KEY)
            add("litellm-anthropic-openai", proc, f"http://127.0.0.1:{port}/v1/messages",
                "anthropic", "bench-chat", "LiteLLM proxy, Anthropic /v1/messages -> openai/ provider",
                LITELLM_KEY)
        except Exception as e:  # noqa: BLE001
            log(f"LiteLLM did not start: {e}")
            res["targets"]["litellm-openai"] = {"failed": f"did not start: {e}"[:500]}
    if "ccr" in PEERS:
        try:
            proc, port = start_ccr(mock_port, slow_port)
            add("ccr-anthropic-openai", proc, f"http://127.0.0.1:{port}/v1/messages", "anthropic",
                "mock,bench-chat", "claude-code-router, Anthropic -> OpenAI Chat provider")
        except Exception as e:  # noqa: BLE001
            log(f"claude-code-router did not start: {e}")
            res["targets"]["ccr-anthropic-openai"] = {"failed": f"did not start: {e}"[:500]}
    if "n" in CASES:
        try:
            proc, port = start_nginx(mock_port)
            n = f"http://127.0.0.1:{port}"
            for dialect, path, model, what in FRONTS:
                add(f"nginx-{dialect}", proc, n + path, dialect, model,
                    f"nginx reverse proxy to the mock ({what})")
        except Exception as e:  # noqa: BLE001
            log(f"nginx did not start: {e}")
            res["targets"]["nginx-openai"] = {"failed": f"did not start: {e}"[:500]}
    mitm = None
    if "mitmproxy" in PEERS:
        try:
            mitm = start_mitmdump(mock_port)
        except Exception as e:  # noqa: BLE001
            log(f"mitmdump did not start: {e}")
            res["e"]["mitmproxy"] = {"failed": f"did not start: {e}"[:500]}

    for name in list(T):
        t = T[name]
        try:
            check(t)
            res["targets"][name] = {"label": t.label, "url": t.url, "model": t.model}
        except Exception as e:  # noqa: BLE001
            log(f"{name}: check failed: {e}")
            res["targets"][name] = {"label": t.label, "failed": str(e)[:500]}
            del T[name]
    procs = {p.name: p for p in {t.proc for t in T.values()} if p.name not in ("mock", "mock-slow")}
    for p in procs.values():
        settle_idle(p)
    log(f"targets ready: {', '.join(T)}")

    def each(names):
        return [T[n] for n in names if n in T]

    if "a" in CASES:
        log("(a) non-streaming latency")
        names = ["direct-openai", "glider-openai", "litellm-openai", "direct-anthropic",
                 "glider-anthropic", "glider-anthropic-openai", "ccr-anthropic-openai"]
        for size in ("small", "large"):
            for conns in (1, 10):
                for t in each(names):
                    key = f"{t.name}|{size}|{conns}"
                    r = attempt(res["a"], key, lambda: wrk(t, t.body(size), conns))
                    if r:
                        log(f"  {key}: p50 {r['latency_us']['p50']} us p99 {r['latency_us']['p99']} us"
                            f" {r['rps']:.0f} req/s errors {r['error_count']}")
    if "b" in CASES:
        log(f"(b) throughput at saturation ({SAT_CONNS} connections, small body)")
        for t in each(["direct-openai", "glider-openai", "litellm-openai", "direct-anthropic",
                       "glider-anthropic", "glider-anthropic-openai", "ccr-anthropic-openai"]):
            r = attempt(res["b"], t.name, lambda: wrk(t, t.body("small"), SAT_CONNS))
            if r:
                log(f"  {t.name}: {r['rps']:.0f} req/s, p99 {r['latency_us']['p99']} us, errors {r['error_count']}")
    if "c" in CASES:
        log("(c) streaming time to first and last byte (1 connection)")
        for size in ("small", "large"):
            for t in each(["direct-openai", "glider-openai", "litellm-openai", "direct-anthropic",
                           "glider-anthropic", "glider-anthropic-openai", "glider-anthropic-ollama",
                           "ccr-anthropic-openai", "direct-ollama"]):
                key = f"{t.name}|{size}"
                r = attempt(res["c"], key, lambda: load(t, t.body(size, True), 1,
                                                        seconds=max(3, SECONDS // 2)))
                if r and r.get("ttfb_us"):
                    log(f"  {key}: ttfb p50 {r['ttfb_us']['p50']} us, ttlb p50 {r['latency_us']['p50']} us")
    if "f" in CASES:
        log("(f) cross-dialect: Anthropic front -> other backends")
        for size in ("small", "large"):
            for conns in (1, 10):
                for t in each(["direct-ollama", "glider-anthropic-ollama", "glider-anthropic-openai",
                               "ccr-anthropic-openai", "litellm-anthropic-openai"]):
                    key = f"{t.name}|{size}|{conns}"
                    prior = res["a"].get(key)
                    if prior and "failed" not in prior:
                        res["f"][key] = prior
                        continue
                    r = attempt(res["f"], key, lambda: wrk(t, t.body(size), conns))
                    if r:
                        log(f"  {key}: p50 {r['latency_us']['p50']} us p99 {r['latency_us']['p99']} us"
                            f" {r['rps']:.0f} req/s errors {r['error_count']}")
    if "n" in CASES:
        run_nginx(res, T)
    if "e" in CASES:
        run_mitm(res, T, mitm, mitm_port, glider)
    if "d" in CASES:
        log(f"(d) memory under {STREAMS} concurrent streams (~1 s each, slow mock)")
        for name, t in (("glider", T.get("glider-openai")), ("litellm", T.get("litellm-openai")),
                        ("ccr", T.get("ccr-anthropic-openai"))):
            if t is None:
                continue
            model = {"glider": "bench-slow", "litellm": "bench-slow", "ccr": "slow,bench-slow"}[name]
            st = Target(t.name, t.proc, t.url, t.dialect, model, t.label)
            st.headers = t.headers
            before = t.proc.peak_rss
            t.proc.load_peak = before
            t.proc.peak_rss = 0
            r = attempt(res["d"], f"{name}|streams", lambda: wrk(
                st, st.body("small", True), STREAMS, seconds=min(SECONDS, 10), threads=2))
            if r:
                r["peak_rss_kib"] = t.proc.peak_rss
                r["hwm_kib"] = t.proc.memory()[1]
                log(f"  {name}: {r['rps']:.0f} streams/s, peak RSS {t.proc.peak_rss / 1024:.1f} MiB,"
                    f" errors {r['error_count']}")
            t.proc.peak_rss = max(before, t.proc.peak_rss)
    for p in procs.values():
        rss, hwm = p.memory()
        res["d"][p.name] = {"idle_rss_kib": p.idle[0] if p.idle else None,
                            "peak_rss_load_kib": getattr(p, "load_peak", p.peak_rss), "hwm_kib": hwm, "rss_end_kib": rss,
                            "processes": len(p.pids())}
    if "context" in CASES:
        run_context(res, mock_port, slow_port)
    if "plugins" in CASES:
        run_plugins(res)
    if "hedge" in CASES:
        run_hedge(res)
    if "hotpath" in CASES:
        log("glider-hotpath: codec, estimate and route timings in-process")
        bdir = os.path.join(RUN_DIR, "bodies-hotpath")
        bodies.write_all(bdir, model="bench-model")
        attempt(res, "hotpath", lambda: parse_bench_json(run_cmd(pinned(
            [os.path.join(BIN, "glider-hotpath"), "--bodies", bdir], CPU_PROXY), timeout=600)))


def run_plugins(res):
    """glider-plugins: a rewrite and a route hook (real plugin subprocesses) against no
    plugin, through the in-process gateway and its own mock: added latency at 1
    connection, throughput at 50 (a few seconds per point)."""
    log("glider-plugins: rewrite and route hooks vs no plugin, c1 and c50")
    seconds = str(max(3, SECONDS // 3))
    attempt(res, "plugins", lambda: parse_bench_json(run_cmd(pinned(
        [os.path.join(BIN, "glider-plugins"), "--seconds", seconds], CPU_PROXY), timeout=600)))


def run_hedge(res):
    """glider-hedge: a long-tailed local model hedged against a steady cloud one (its own
    in-process engine and mocks): TTFT percentiles and the extra upstream requests of
    fan_out off, hedged at the measured p95 and at a fixed delay."""
    log("glider-hedge: TTFT p50/p99 with and without hedging, and the extra upstream requests")
    attempt(res, "hedge", lambda: parse_bench_json(run_cmd(pinned(
        [os.path.join(BIN, "glider-hedge"), "--requests", "150"], CPU_PROXY), timeout=900)))


def run_nginx(res, T):
    """nginx vs Glider side by side in one run: p50 at 1 connection (small body),
    requests/s at NGINX_CONNS connections (small and ~80 KB bodies) and the streaming
    TTFB at 1 connection, for every row of NGINX_ROWS (one target loaded at a time).
    BENCH_N_ROUNDS (default 1) repeats the whole sequence, so each target's runs are
    spread over the run as the neighbours' load comes and goes; each measure keeps its
    median run (by the figure the table reads), and the figures of every round."""
    rounds = int(os.environ.get("BENCH_N_ROUNDS", "1"))
    log(f"(n) nginx vs Glider: 1 connection, {NGINX_CONNS} connections small and large, stream TTFB"
        f" ({rounds} round{'s' if rounds > 1 else ''})")
    out = res["n"]
    runs = {}
    for round_no in range(rounds):
        for name in report.NGINX_ROWS:
            t = T.get(name)
            if t is None:
                continue
            for key, fn in ((f"{name}|small|1", lambda: wrk(t, t.body("small"), 1)),
                            (f"{name}|small|{NGINX_CONNS}", lambda: wrk(t, t.body("small"), NGINX_CONNS)),
                            (f"{name}|large|{NGINX_CONNS}", lambda: wrk(t, t.body("large"), NGINX_CONNS)),
                            (f"{name}|stream", lambda: load(t, t.body("small", True), 1,
                                                             seconds=max(3, SECONDS // 2)))):
                scratch = {}
                r = attempt(scratch, key, fn)
                if r is None:
                    out.setdefault(key, scratch[key])
                    continue
                runs.setdefault(key, []).append(r)
                log(f"  {key}{f' round {round_no}' if rounds > 1 else ''}: p50 {r['latency_us']['p50']} us"
                    f" {r['rps']:.0f} req/s"
                    + (f" ttfb p50 {r['ttfb_us']['p50']} us" if r.get("ttfb_us") else "")
                    + f" errors {r.get('error_count', r.get('errors'))}")
    for key, results in runs.items():
        figure = nginx_figure(key)
        results.sort(key=figure)
        median = dict(results[len(results) // 2])
        median["rounds"] = [figure(r) for r in results]
        out[key] = median


def nginx_figure(key):
    """The figure the nginx table reads from a run of measure `key`."""
    if key.endswith("|stream"):
        return lambda r: r["ttfb_us"]["p50"]
    if key.endswith("|1"):
        return lambda r: r["latency_us"]["p50"]
    return lambda r: r["rps"]


# The three ways the context case runs Glider: the log off, the log on with its
# summarizer off, and the defaults (log and summarizer on).
CONTEXT_VARIANTS = [
    ("off", "context: { enabled: false }"),
    ("on", "context: { summarizer: { enabled: false } }"),
    ("on+summarizer", ""),
]
CONTEXT_COUNTERS = ("glider_context_events_written_total", "glider_context_events_dropped_total",
                    "glider_context_gaps_total")


def context_counters(dashboard_port):
    """The context log's counters from Glider's /metrics (zeros when the log is off),
    with the compaction counts."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{dashboard_port}/metrics", timeout=10).read().decode()
    found = {name: 0.0 for name in CONTEXT_COUNTERS}
    found["compactions"] = 0.0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in found:
            found[parts[0]] = float(parts[1])
        elif line.startswith("glider_context_compactions_total{") and len(parts) == 2:
            found["compactions"] += float(parts[1])
    return found


def run_context(res, mock_port, slow_port):
    """Context on vs off (issue 14 "Measured"): one Glider per variant, all started
    before the first run and loaded one at a time, in rounds that alternate them, on the
    OpenAI Chat same-dialect path (by default the cheapest request, a small body to a
    local backend, where the log's cost shows most; BENCH_CONTEXT_BODY and
    BENCH_CONTEXT_MODEL choose another).
    The variants not being measured are stopped (SIGSTOP) meanwhile: they share the
    core, and one's background work must land in its own runs, not another's (the
    summarizer's idle compaction, 60 s after a run, folds the whole session: a million
    events by the fourth round, which took "on" from 10,800 to 4,700 req/s).
    Per run: p50 at 1 connection (the added latency per request) and, at saturation,
    requests/s with the events written per second, dropped and gaps from /metrics."""
    rounds = int(os.environ.get("BENCH_CONTEXT_ROUNDS", "3"))
    log(f"(context) on vs off: {len(CONTEXT_VARIANTS)} variants x {rounds} rounds")
    out = res["context"]
    res["context_body"] = CONTEXT_BODY
    res["context_model"] = CONTEXT_MODEL
    started = {}
    for name, extra in CONTEXT_VARIANTS:
        try:
            proc, port, dashboard = start_glider(mock_port, slow_port, None, f"glider-context-{name}", extra)
        except Exception as e:  # noqa: BLE001
            out[name] = {"failed": f"did not start: {e}"[:500]}
            continue
        t = Target(f"context-{name}", proc, f"http://127.0.0.1:{port}/v1/chat/completions", "openai",
                   CONTEXT_MODEL, f"Glider, OpenAI Chat -> {CONTEXT_MODEL}, {extra or 'defaults'}")
        try:
            check(t)
        except Exception as e:  # noqa: BLE001
            out[name] = {"failed": f"check failed: {e}"[:500]}
            continue
        settle_idle(proc)
        started[name] = (t, dashboard)
        out[name] = {"config": extra or "(defaults)", "latency": [], "saturation": []}
    def measure(name, fn):
        scratch = {}
        r = attempt(scratch, name, fn)
        if r is None:
            out[name].setdefault("failures", []).append(scratch[name]["failed"])
        return r

    for round_no in range(rounds):
        for name, (t, dashboard) in started.items():
            others = [o.proc for n, (o, _) in started.items() if n != name]
            for other in others:
                other.pause()
            try:
                measure_context_variant(out, measure, name, t, dashboard, round_no)
            finally:
                for other in others:
                    other.resume()
    for name, (t, _) in started.items():
        out[name]["rss_end_kib"] = t.proc.memory()[0]
        t.proc.stop()


def measure_context_variant(out, measure, name, t, dashboard, round_no):
    """One round of one context variant: p50 at 1 connection, then saturation."""
    r = measure(name, lambda: wrk(t, t.body(CONTEXT_BODY), 1))
    if r:
        out[name]["latency"].append(r)
        log(f"  {name} round {round_no}: 1 conn p50 {r['latency_us']['p50']} us")
    before = context_counters(dashboard)
    r = measure(name, lambda: wrk(t, t.body(CONTEXT_BODY), SAT_CONNS))
    if r:
        after = context_counters(dashboard)
        r["context"] = {k: after[k] - before[k] for k in after}
        r["events_per_s"] = r["context"]["glider_context_events_written_total"] / SECONDS
        out[name]["saturation"].append(r)
        log(f"  {name} round {round_no}: {SAT_CONNS} conns {r['rps']:.0f} req/s, "
            f"{r['events_per_s']:.0f} events/s, gaps {r['context']['glider_context_gaps_total']:.0f}, "
            f"dropped {r['context']['glider_context_events_dropped_total']:.0f}")


def run_mitm(res, T, mitm, glider_mitm_port, glider):
    log("(e) MITM: decrypted path and raw tunnel (glider-load, 10 connections)")
    direct = T["direct-anthropic"]
    small = direct.body("small")
    attempt(res["e"], "direct|10", lambda: load(direct, small, 10))
    decrypted_url = "https://api.anthropic.com/v1/messages"
    tunnel_url = direct.url
    if mitm is not None:
        proc, port, ca = mitm
        t = Target("mitmproxy", proc, decrypted_url, "anthropic", "bench-claude", "mitmdump")
        proxy = f"http://127.0.0.1:{port}"
        settle_idle(proc)
        for conns in (1, 10):
            r = attempt(res["e"], f"mitmproxy-decrypted|{conns}", lambda: load(
                t, small, conns, extra=["--proxy", proxy, "--ca", ca]))
            if r:
                log(f"  mitmproxy decrypted c={conns}: {r['rps']:.0f} req/s p50 {r['latency_us']['p50']} us"
                    f" errors {r['errors']} reply ok {r['expected_reply']}")
            r = attempt(res["e"], f"mitmproxy-tunnel|{conns}", lambda: load(
                t, small, conns, url=tunnel_url, extra=["--proxy", proxy, "--tunnel"]))
            if r:
                log(f"  mitmproxy tunnel c={conns}: {r['rps']:.0f} req/s p50 {r['latency_us']['p50']} us")
        rss, hwm = proc.memory()
        res["e"]["mitmproxy-memory"] = {"idle_rss_kib": proc.idle[0], "peak_rss_load_kib": proc.peak_rss,
                                        "hwm_kib": hwm}
    # Glider's MITM door: measured once `glider serve` listens on mitm.port with a CA.
    ca = os.path.join(RUN_DIR, "glider-home", "mitm", "ca.crt")
    if not port_open(glider_mitm_port):
        res["e"]["glider"] = {"not_measured": "Glider MITM door not built"}
        log("  Glider MITM: not yet measured: Glider MITM door not built")
        return
    if not os.path.exists(ca):
        res["e"]["glider"] = {"not_measured": f"MITM port listens but no CA at {ca}"}
        return
    # The bench has no TLS origin for api.anthropic.com (mitmproxy's addon rewrites its
    # flows to the plain-HTTP mock instead), so Glider's decrypted case is its local
    # path: decrypt, route, answer from the local vllm backend (the same mock, reached
    # as OpenAI Chat) — more work than mitmproxy's forward, not less.
    t = Target("glider-mitm", glider, decrypted_url, "anthropic", "bench-chat", "Glider MITM")
    proxy = f"http://127.0.0.1:{glider_mitm_port}"
    local_small = t.body("small")
    for conns in (1, 10):
        r = attempt(res["e"], f"glider-decrypted|{conns}", lambda: load(
            t, local_small, conns, extra=["--proxy", proxy, "--ca", ca]))
        if r and not r.get("expected_reply"):
            res["e"][f"glider-decrypted|{conns}"] = {
                "failed": "reply did not come from the mock: " + str(r.get("first_body"))[:200]
                + " / first error: " + str(r.get("first_error"))[:300]}
        attempt(res["e"], f"glider-tunnel|{conns}", lambda: load(
            t, small, conns, url=tunnel_url, extra=["--proxy", proxy, "--tunnel"]))


if __name__ == "__main__":
    def on_signal(signum, _frame):
        Proc.stop_all()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    main()
