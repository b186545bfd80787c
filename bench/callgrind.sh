#!/usr/bin/env bash
# bench/callgrind.sh — instructions per request of `glider serve` under valgrind's
# callgrind: stable on a noisy shared machine, so it is what the optimisation commits
# quote as before/after. Starts a mock upstream and Glider on loopback, sends 50
# requests uninstrumented, then N instrumented ones with glider-load, and prints the
# total and per-request instruction count; the profile stays in bench/.run/callgrind/
# for `callgrind_annotate --inclusive=yes bench/.run/callgrind/cg.out`.
#
#   bench/callgrind.sh [openai|anthropic|anthropic-ollama|anthropic-vllm|responses|responses-vllm|openai-ollama] [small|large] [N]
#
# `responses` is a Codex turn: an OpenAI Responses body with a `gpt-*` model name,
# forwarded to an `openai` backend. BENCH_LOCAL_WINDOW (default 131072) sets the local
# backends' context windows: one near the request's estimate (e.g. 24000 for the large
# body) makes the estimate phase count a `gpt-*` request with tiktoken, as it always did
# before issue 20 — the A/B of counting only near a limit, in one binary.
#
# BENCH_STREAM=1 asks for a streamed reply (what Claude Code and Codex always do): the
# count then includes reading the stream, and with the context log on, capturing it.
#
# BENCH_CONNECTIONS (default 1) sets glider-load's connections: at 16 the context log's
# writer commits batches of tens of events, as it does at saturation.
#
# BENCH_CONTEXT_YAML, when set, is one more line of the config, e.g.
# `context: { enabled: false }` or `context: { summarizer: { enabled: false } }`: the
# context log's writer thread is counted too (callgrind counts every thread), so the
# difference is the whole cost of the log per request.
#
# BENCH_CALLGRIND_OPTS: more valgrind options, e.g. `--cache-sim=yes` to count each
# function's cache misses too (valgrind runs Glider's threads one at a time on one
# simulated cache, as the harness runs them on one core).
#
# Needs valgrind (apt-get install valgrind) and the release binaries (bench/run.sh
# builds them, or: cargo build --release -p glider -p glider-test-support -p glider-bench --bins).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
bin="${BENCH_BIN:-$root/target/release}"
front="${1:-openai}"
size="${2:-small}"
n="${3:-1000}"
window="${BENCH_LOCAL_WINDOW:-131072}"
dir="${BENCH_CALLGRIND_DIR:-$here/.run/callgrind}"
rm -rf "$dir" && mkdir -p "$dir"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

case "$front" in
  openai) dialect=openai; model=bench-chat; path=/v1/chat/completions ;;
  anthropic) dialect=anthropic; model=bench-claude; path=/v1/messages ;;
  anthropic-ollama) dialect=anthropic; model=bench-ollama; path=/v1/messages ;;
  anthropic-vllm) dialect=anthropic; model=bench-chat; path=/v1/messages ;;
  responses-vllm) dialect=responses; model=bench-chat; path=/v1/responses ;;
  openai-ollama) dialect=openai; model=bench-ollama; path=/v1/chat/completions ;;
  responses) dialect=responses; model=gpt-4.1; path=/v1/responses ;;
  *) echo "unknown front $front" >&2; exit 2 ;;
esac
stream=False; [ -n "${BENCH_STREAM:-}" ] && stream=True
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_body "$size" "$dialect" "$model" "$stream"
bench_mock
cat >"$dir/glider.yaml" <<YAML
server: { bind: 127.0.0.1, proxy_port: 0 }
backends:
  - { name: vllm, type: vllm, base_url: "http://$mock/v1", models: [{ name: bench-chat, context_window: $window }] }
  - { name: ollama, type: ollama, base_url: "http://$mock", models: [{ name: bench-ollama, context_window: $window }] }
  - { name: claude, type: anthropic, base_url: "http://$mock", api_key: bench, models: ["bench-claude"] }
  - { name: openai, type: openai, base_url: "http://$mock/v1", api_key: bench, models: ["gpt-4.1"] }
routing: { cloud_fallback: false }
${BENCH_CONTEXT_YAML:-}
YAML
# shellcheck disable=SC2086 # BENCH_CALLGRIND_OPTS is a list of options.
GLIDER_HOME="$dir/home" valgrind --tool=callgrind --instr-atstart=no ${BENCH_CALLGRIND_OPTS:-} \
  --callgrind-out-file="$dir/cg.out" "$bin/glider" serve -c "$dir/glider.yaml" --port 0 \
  >"$dir/glider.log" 2>&1 &
glider=$!
bench_glider_port
load=("$bin/glider-load" --url "http://127.0.0.1:$port$path" --body "$dir/body.json"
  --connections "${BENCH_CONNECTIONS:-1}" --duration 600 --warmup 0
  --header 'anthropic-version: 2023-06-01' --header 'x-api-key: bench')
"${load[@]}" --max-requests 50 >"$dir/warmup.json"
callgrind_control -i on "$glider" >/dev/null
"${load[@]}" --max-requests "$n" | grep -o '"requests":[0-9]*,"errors":[0-9]*'
callgrind_control -i off "$glider" >/dev/null
kill "$glider"; wait "$glider" 2>/dev/null || true
total=$(callgrind_annotate "$dir/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
echo "glider $front $size${BENCH_STREAM:+ stream}${BENCH_CONTEXT_YAML:+ ($BENCH_CONTEXT_YAML)}: $total instructions for $n requests, $((total / n)) per request"
