-- wrk script for the Glider benchmarks: POST the JSON body in $BENCH_BODY (a file) with
-- the headers in $BENCH_HEADERS ("name: value" pairs separated by "|"), and print one
-- JSON line (prefixed "BENCH_JSON ") with requests, errors and latency percentiles in
-- microseconds when the run is done. Used by bench/harness.py; see bench/README.md.

local function read_file(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end

wrk.method = "POST"
wrk.body = read_file(os.getenv("BENCH_BODY"))
wrk.headers["Content-Type"] = "application/json"
local extra = os.getenv("BENCH_HEADERS") or ""
for pair in string.gmatch(extra, "[^|]+") do
  local name, value = string.match(pair, "^%s*([^:]+):%s*(.-)%s*$")
  if name then wrk.headers[name] = value end
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_s":%.3f,"rps":%.1f,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"stdev":%.1f,"max":%d,' ..
    '"p50":%d,"p90":%d,"p99":%d,"p999":%d}}\n',
    summary.requests, secs, summary.requests / secs, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
