#!/usr/bin/env bash
# bench/one-core.sh — a quick A/B of one config line at saturation on one core: Glider
# alone on core 1, the mock upstream and glider-load (50 connections) on core 0, an
# OpenAI Chat Completions small body to a local vLLM-type backend. Prints requests a
# second and Glider's CPU time (user + system, /proc/PID/stat) per request. Noisy on a
# shared machine: alternate the variants and compare pairs; `bench/callgrind.sh` is the
# stable count.
#
#   bench/one-core.sh 'context: { enabled: false }' 5     # extra config line, seconds
#   bench/one-core.sh '' 5 perf                            # and a perf record of Glider
#   PERF_OPTS='--call-graph=dwarf,16384 -F 1000' bench/one-core.sh '' 3 perf   # with stacks
#                                  (the release build has no frame pointers: -g's stacks
#                                  are cut short; dwarf unwinding follows them)
#
# Needs the release binaries (cargo build --release -p glider -p glider-test-support
# -p glider-bench --bins) and two cores; perf only for the third argument.
# BENCH_CONNECTIONS (default 50): glider-load's connections; at 1 the p50 is the figure.
# BENCH_LOAD=wrk: wrk (the harness's load) instead of glider-load; it leaves the
# proxy's core less idle time between requests.
# BENCH_RUNS (default 1): measure that many runs in a row on the same Glider (a
# first run's start-up costs — a new database's growth, the heap's — show apart).
# BENCH_WRITER_CORE: move the context log's writer thread to that core (an A/B of
# whether its work delays requests by sharing their core).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
bin="${BENCH_BIN:-$root/target/release}"
mkdir -p "$here/.run"
dir=$(mktemp -d "$here/.run/one-core.XXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_body small openai bench-chat False
bench_mock taskset -c 0
cat >"$dir/glider.yaml" <<YAML
server: { bind: 127.0.0.1, proxy_port: 0 }
backends:
  - { name: vllm, type: vllm, base_url: "http://$mock/v1", models: [{ name: bench-chat, context_window: 131072 }] }
routing: { cloud_fallback: false }
${1:-}
YAML
GLIDER_HOME="$dir/home" taskset -c 1 "$bin/glider" serve -c "$dir/glider.yaml" --port 0 >"$dir/glider.log" 2>&1 &
glider=$!
bench_glider_port
load=(taskset -c 0 "$bin/glider-load" --url "http://127.0.0.1:$port/v1/chat/completions" --body "$dir/body.json" --warmup 0)
"${load[@]}" --connections 4 --duration 1 >/dev/null
if [ -n "${BENCH_WRITER_CORE:-}" ]; then
  # A thread's name is cut to 15 bytes: the writer shows as `glider-context-` (as does
  # the record preload, done by now or harmless to move too).
  moved=0
  for task in /proc/"$glider"/task/*; do
    if [ "$(cat "$task/comm")" = glider-context- ]; then
      taskset -p -c "$BENCH_WRITER_CORE" "${task##*/}" >/dev/null && moved=$((moved + 1))
    fi
  done
  [ "$moved" -gt 0 ] || { echo "BENCH_WRITER_CORE: no context writer thread found (context off?)" >&2; exit 1; }
fi
seconds="${2:-5}"
cpu() { awk '{print $14 + $15}' "/proc/$glider/stat"; }
# Each thread's CPU ticks, user and system, summed by name (tokio's workers share one).
threads() {
  for task in /proc/"$glider"/task/*; do
    printf '%s\t%s\n' "$(cat "$task/comm")" "$(awk '{print $14 "\t" $15}' "$task/stat")"
  done | awk -F'\t' '{u[$1] += $2; s[$1] += $3} END {for (n in u) print n "\t" u[n] "\t" s[n]}' | sort
}
for run in $(seq 1 "${BENCH_RUNS:-1}"); do
  threads >"$dir/threads.0"
  t0=$(cpu)
  if [ "${3:-}" = perf ] && [ "$run" = 1 ]; then
    perf record ${PERF_OPTS:--g} -o "$here/.run/one-core.perf.data" -p "$glider" -- sleep "$seconds" >/dev/null 2>&1 &
    recorder=$!
  fi
  if [ "${BENCH_LOAD:-}" = wrk ]; then
    out=$(BENCH_BODY="$dir/body.json" taskset -c 0 wrk -t1 -c"${BENCH_CONNECTIONS:-50}" -d"${seconds}s" \
      --timeout 30s -s "$here/wrk/post.lua" "http://127.0.0.1:$port/v1/chat/completions")
  else
    out=$("${load[@]}" --connections "${BENCH_CONNECTIONS:-50}" --duration "$seconds")
  fi
  if [ "${3:-}" = perf ] && [ "$run" = 1 ]; then wait "$recorder" || true; fi
  t1=$(cpu)
  threads >"$dir/threads.1"
  requests=$(echo "$out" | grep -o '"requests":[0-9]*' | cut -d: -f2)
  ticks=$(getconf CLK_TCK)
  p50=$(echo "$out" | grep -o '"latency_us":{[^}]*' | grep -o '"p50":[0-9.]*' | head -1 | cut -d: -f2)
  echo "run=$run config='${1:-}' requests=$requests req/s=$((requests / seconds)) cpu_us/req=$(( (t1 - t0) * 1000000 / ticks / requests )) p50_us=$p50"
  # Threads that ran, by CPU µs a request (user + system: the kernel's share, a write's
  # or a wake-up's, is time valgrind does not count).
  join -t$'\t' -a2 -e0 -o 0,1.2,1.3,2.2,2.3 "$dir/threads.0" "$dir/threads.1" |
    awk -F'\t' -v r="$requests" -v hz="$ticks" '$4 + $5 > $2 + $3 {
      us = 1000000 / hz / r
      printf "  %-24s %d (user %d, system %d)\n", $1, ($4 + $5 - $2 - $3) * us, ($4 - $2) * us, ($5 - $3) * us
    }'
done
