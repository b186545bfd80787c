#!/usr/bin/env python3
"""MITM benchmark: requests per second and added latency through Glider's decrypted
path and raw tunnel, side by side with mitmproxy, all on loopback.

    python3 -m venv /tmp/mitmproxy-venv && /tmp/mitmproxy-venv/bin/pip install mitmproxy
    cargo build --release -p glider -p glider-test-support -p glider-mitm --bins --example mitm_bench
    python3 bench/mitm/run.py [--mitmdump /tmp/mitmproxy-venv/bin/mitmdump] [--quick]

Every process it starts (a TLS origin, glider-mock, `glider serve`, mitmdump) is on a
free loopback port, announced readiness is read from its output (or its port polled),
and all are stopped at the end. Each load run is bounded in requests and seconds.
Writes bench/mitm/results.json and bench/mitm/results.md."""

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
RELEASE = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"


class Proc:
    def __init__(self, args, pattern=None, env=None, timeout=60):
        self.args = args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                                     start_new_session=True)
        self.match = None
        if pattern is None:
            return
        deadline, seen = time.monotonic() + timeout, []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise RuntimeError(f"{args[0]} not ready: {''.join(seen)}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                self.stop()
                raise RuntimeError(f"{args[0]} exited: {''.join(seen)}")
            seen.append(line)
            m = re.search(pattern, line)
            if m:
                self.match = m
                return

    def rss_mib(self):
        try:
            status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
            kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
            return round(kib / 1024, 1)
        except (OSError, AttributeError):
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def binary(name):
    path = RELEASE / name
    if not path.exists():
        sys.exit(f"{path} is missing: cargo build --release -p glider -p glider-test-support -p glider-mitm "
                 "--bins --example mitm_bench")
    return str(path)


def load(label, target, cas, proxy=None, model="claude-bench", connections=8, requests=3000,
         new_connections=False, max_seconds=60, decrypted=False):
    args = [binary("examples/mitm_bench"), "load", "--target", target, "--model", model,
            "--connections", str(connections), "--requests", str(requests), "--max-seconds", str(max_seconds),
            "--label", label]
    for ca in cas:
        args += ["--ca", str(ca)]
    if proxy:
        args += ["--proxy", proxy]
    if new_connections:
        args.append("--new-connections")
    out = subprocess.run(args, capture_output=True, text=True, timeout=max_seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"{label}: {out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # Who terminated TLS: the origin for direct and tunnelled paths, the proxy's own CA
    # when it decrypted. A wrong issuer means the row measures the wrong thing.
    issuer = result.get("server_cert_issuer") or ""
    if decrypted == ("Bench Origin CA" in issuer):
        raise RuntimeError(f"{label}: TLS terminated by {issuer!r}, which is not what this row measures")
    print(f"  {label:45s} {result['rps']:9.0f} req/s  p50 {result['p50_ms']:6.2f} ms  "
          f"p99 {result['p99_ms']:6.2f} ms  errors {result['errors']}", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mitmdump", default=shutil.which("mitmdump") or "/tmp/mitmproxy-venv/bin/mitmdump")
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    opts = parser.parse_args()
    scale = 0.1 if opts.quick else 1.0
    warm_n, cold_n = int(3000 * scale), int(400 * scale)

    procs = []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="glider-mitm-bench-"))
    try:
        # Two origins: one reached decrypted, one tunnelled. mitmproxy matches
        # --ignore-hosts against the resolved address too, so the two paths are told
        # apart by port.
        ports, cas_pem = [], ""
        for name in ("decrypt", "tunnel"):
            ca_file = tmp / f"origin-{name}-ca.pem"
            origin = Proc([binary("examples/mitm_bench"), "origin", "--ca-out", str(ca_file)],
                          r"origin listening on (127\.0\.0\.1:(\d+))")
            procs.append(origin)
            ports.append(origin.match.group(2))
            cas_pem += ca_file.read_text()
        origin_ca = tmp / "origin-ca.pem"
        origin_ca.write_text(cas_pem)
        decrypt_port, tunnel_port = ports
        mock = Proc([binary("glider-mock"), "--port", "0", "--deltas", "1"], r"listening on (127\.0\.0\.1:\d+)")
        procs.append(mock)

        config = tmp / "glider.yaml"
        config.write_text(f"""
log_level: warn
backends:
  - {{name: local, type: ollama, base_url: 'http://{mock.match.group(1)}', models: [qwen-local]}}
model_aliases: {{'local-*': qwen-local}}
routing: {{cloud_fallback: false}}
mitm:
  enabled: true
  port: 0
  hosts: [localhost]
  upstream_ca_file: '{origin_ca}'
""")
        env = dict(os.environ, GLIDER_HOME=str(tmp / "home"), GLIDER_LOG="warn")
        for k in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
            env.pop(k, None)
        glider = Proc([binary("glider"), "serve", "-c", str(config), "--port", "0"],
                      r"mitm proxy listening on (127\.0\.0\.1:\d+)", env=env)
        procs.append(glider)
        glider_proxy = glider.match.group(1)
        glider_ca = tmp / "home" / "mitm" / "ca.crt"

        mitm = None
        mitm_ca = tmp / "mitmconf" / "mitmproxy-ca-cert.pem"
        if pathlib.Path(opts.mitmdump).exists():
            mitm_port = free_port()
            mitm = Proc([opts.mitmdump, "--mode", "regular", "--listen-host", "127.0.0.1",
                         "--listen-port", str(mitm_port), "--set", f"confdir={tmp / 'mitmconf'}",
                         "--set", f"ssl_verify_upstream_trusted_ca={origin_ca}",
                         "--ignore-hosts", rf":{tunnel_port}$", "-q"], env=env)
            procs.append(mitm)
            wait_port(mitm_port)
            mitm_proxy = f"127.0.0.1:{mitm_port}"
        else:
            print(f"mitmdump not found at {opts.mitmdump}: mitmproxy rows skipped", file=sys.stderr)

        cas = [origin_ca, glider_ca] + ([mitm_ca] if mitm else [])
        decrypted = f"localhost:{decrypt_port}"     # listed in mitm.hosts; mitmproxy decrypts it too
        tunnelled = f"127.0.0.1:{tunnel_port}"      # not listed; mitmproxy ignores its port (raw tunnel)
        results = []
        modes = [
            # (mode, clients, requests, new connection per request)
            ("sequential", 1, int(1000 * scale), False),
            ("keep_alive", 8, warm_n, False),
            ("new_connection", 4, cold_n, True),
        ]
        for mode, c, n, cold in modes:
            print(f"{mode}:", flush=True)
            rows = [
                ("direct (no proxy)", dict(target=decrypted)),
                ("glider: raw tunnel", dict(target=tunnelled, proxy=glider_proxy)),
                ("glider: decrypted -> origin", dict(target=decrypted, proxy=glider_proxy, decrypted=True)),
                ("glider: decrypted -> local model (mock)", dict(target=decrypted, proxy=glider_proxy,
                                                                 model="local-bench", decrypted=True)),
            ]
            if mitm:
                rows += [
                    ("mitmproxy: raw tunnel", dict(target=tunnelled, proxy=mitm_proxy)),
                    ("mitmproxy: decrypted -> origin", dict(target=decrypted, proxy=mitm_proxy, decrypted=True)),
                ]
            for label, kw in rows:
                # One short warm-up (leaf certificates, pools), not counted.
                load("warm-up", cas=cas, connections=2, requests=20, new_connections=cold, **kw)
                result = load(label, cas=cas, connections=c, requests=n, new_connections=cold, **kw)
                result["mode"] = mode
                results.append(result)
        memory = {"glider_rss_mib": glider.rss_mib(), "mitmproxy_rss_mib": mitm.rss_mib() if mitm else None}
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    mitm_version = None
    if pathlib.Path(opts.mitmdump).exists():
        mitm_version = subprocess.run([opts.mitmdump, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "mitmproxy": mitm_version,
        "quick": opts.quick,
        **memory,
    }
    (HERE / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    write_markdown(meta, results)
    print(f"wrote {HERE / 'results.md'}")


def write_markdown(meta, results):
    lines = [
        "# MITM benchmark results",
        "",
        f"{meta['date']} · {meta['cpus']} CPUs ({meta['machine']}, Linux {meta['kernel']}) · "
        f"{meta['mitmproxy'] or 'mitmproxy not run'} · release build · everything on loopback, "
        "load generator, origin, proxies on the same cores.",
        "",
        "Each request: POST /v1/messages, ~1.2 KiB JSON body, ~250 B JSON reply, HTTP/1.1 inside TLS. "
        "'added p50' is the median latency minus the direct run's median.",
        "",
    ]
    for mode, title in (("sequential", "One client, one request at a time (latency without load)"),
                        ("keep_alive", "Kept-alive connections, 8 clients at once (throughput)"),
                        ("new_connection", "A new connection per request, 4 clients (CONNECT + TLS each time)")):
        rows = [r for r in results if r["mode"] == mode]
        base = next((r["p50_ms"] for r in rows if r["label"].startswith("direct")), 0)
        lines += [f"## {title}", "", "| path | req/s | p50 ms | p90 ms | p99 ms | added p50 ms | errors |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['label']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | "
                         f"{r['p99_ms']:.2f} | {r['p50_ms'] - base:+.2f} | {r['errors']} |")
        lines.append("")
    lines += [f"Resident memory after the runs: Glider {meta['glider_rss_mib']} MiB, "
              f"mitmproxy {meta['mitmproxy_rss_mib']} MiB.", ""]
    (HERE / "results.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
