#!/usr/bin/env bash
# bench/run.sh — the one command for Glider's side-by-side benchmarks (see
# bench/README.md). Installs the peers if missing (LiteLLM and mitmproxy from PyPI into
# venvs under bench/.venv, claude-code-router from npm into bench/node_modules, wrk from
# Debian, nginx-light from Debian), builds glider, glider-mock and the bench helpers in release, then runs
# bench/harness.py, which starts every process on loopback, measures, and writes
# bench/results/<date>-<short-sha>.md and .json. Every process started is stopped on
# exit (each runs in its own process group; the EXIT trap kills the groups).
#
# Environment: BENCH_SECONDS (per run, default 10), BENCH_CASES, BENCH_PEERS,
# BENCH_SKIP_INSTALL=1, BENCH_SKIP_BUILD=1 — the rest is documented in bench/harness.py.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

LITELLM_VERSION=1.106.12   # newer releases pin a litellm-proxy-extras that PyPI lacks
MITMPROXY_VERSION=11.0.2   # the newest that runs on Python 3.11 (12.x needs 3.12)

pidfile="$(mktemp /tmp/glider-bench-pids.XXXXXX)"
export BENCH_PIDFILE="$pidfile"
cleanup() {
  # Stop every process group the harness recorded (it stops them itself; this is the
  # net for a harness that died or was interrupted).
  if [[ -f "$pidfile" ]]; then
    while read -r pgid; do
      [[ -n "$pgid" ]] || continue
      kill -TERM -- "-$pgid" 2>/dev/null || true
    done <"$pidfile"
    sleep 1
    while read -r pgid; do
      [[ -n "$pgid" ]] || continue
      kill -KILL -- "-$pgid" 2>/dev/null || true
    done <"$pidfile"
    rm -f "$pidfile"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '[bench] %s\n' "$*"; }

if [[ "${BENCH_SKIP_INSTALL:-0}" != 1 ]]; then
  if ! command -v wrk >/dev/null; then
    say "installing wrk (apt-get)"
    apt-get update -qq && apt-get install -y -qq wrk >/dev/null
  fi
  if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
    say "installing nginx-light (apt-get): the no-logic reverse proxy Glider is measured against"
    apt-get install -y -qq nginx-light >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null; }
  fi
  if ! command -v taskset >/dev/null; then
    say "installing util-linux (taskset)"
    apt-get install -y -qq util-linux >/dev/null
  fi
  py="${BENCH_PYTHON:-python3}"
  if [[ ! -x "$here/.venv/litellm/bin/litellm" ]]; then
    say "installing litellm[proxy]==$LITELLM_VERSION into bench/.venv/litellm"
    "$py" -m venv "$here/.venv/litellm"
    "$here/.venv/litellm/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION"
  fi
  if [[ ! -x "$here/.venv/mitmproxy/bin/mitmdump" ]]; then
    say "installing mitmproxy==$MITMPROXY_VERSION into bench/.venv/mitmproxy"
    "$py" -m venv "$here/.venv/mitmproxy"
    "$here/.venv/mitmproxy/bin/pip" install -q "mitmproxy==$MITMPROXY_VERSION"
  fi
  if [[ ! -f "$here/node_modules/@musistudio/claude-code-router/dist/cli.js" ]]; then
    say "installing @musistudio/claude-code-router (npm ci into bench/node_modules)"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  say "building glider, glider-mock, glider-load, glider-hotpath, glider-plugins (release)"
  # One invocation, so features unify the same way every time and nothing rebuilds.
  nice -n 10 cargo build --release --quiet -p glider -p glider-test-support -p glider-bench --bins
fi

say "running the cases (BENCH_SECONDS=${BENCH_SECONDS:-10})"
python3 "$here/harness.py"
