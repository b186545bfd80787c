# bench/common.sh — sourced by bench/callgrind.sh and bench/one-core.sh: the steps both
# take around the Glider they measure. Expects `here` (bench/), `bin` (the release
# binaries), `dir` (the run's scratch folder) and a `pids` array the caller's cleanup kills.

# bench_body SIZE DIALECT MODEL STREAM: the benchmark conversation as $dir/body.json
# (STREAM is Python's True or False).
bench_body() {
  python3 -c "
import json, sys
sys.path.insert(0, '$here')
import bodies
json.dump(bodies.render(bodies.conversation('$1'), '$2', '$3', $4), open('$dir/body.json', 'w'))"
}

# bench_mock [PREFIX...]: start the mock upstream (under PREFIX, e.g. taskset -c 0) and
# set `mock` to its host:port once it listens.
bench_mock() {
  "$@" "$bin/glider-mock" --port 0 --reply-text "Benchmark reply" >"$dir/mock.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q listening "$dir/mock.log" && break; sleep 0.1; done
  mock=$(grep -o '127.0.0.1:[0-9]*' "$dir/mock.log" | head -1)
}

# bench_glider_port: wait for the Glider started in the background (its pid in $glider,
# its log in $dir/glider.log) to listen, and set `port` to the gateway's port.
bench_glider_port() {
  pids+=("$glider")
  for _ in $(seq 1 300); do grep -q 'gateway listening' "$dir/glider.log" && break; sleep 0.2; done
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$dir/glider.log" | head -1 | cut -d: -f3)
}
