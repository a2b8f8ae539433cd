-- wrk script of the HTTP benchmark: POST the reviews of $BENCH_BODIES (one JSON per line) in
-- turn over keep-alive connections, and print one JSON line of results when done.
local bodies = {}
local next_body = 0

function init(args)
  for line in io.lines(os.getenv("BENCH_BODIES")) do
    if #line > 0 then
      bodies[#bodies + 1] = line
    end
  end
end

function request()
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[next_body])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\nBENCH-JSON {"requests":%d,"duration_us":%d,"bytes":%d,"errors_connect":%d,' ..
    '"errors_read":%d,"errors_write":%d,"errors_status":%d,"errors_timeout":%d,' ..
    '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"mean_ms":%.3f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, latency.mean / 1000))
end
