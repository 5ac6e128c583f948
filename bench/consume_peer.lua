-- bench/consume_peer.lua: lua-kafka's side of the consume matrix
-- (bench/consume.lua). One consumer reads every partition of a topic
-- already holding N messages from offset 0, RUNS+1 times (run 0 warms up:
-- connections, the TLS handshakes and SASL, the JIT).
--   lua5.4 bench/consume_peer.lua BROKERS TOPIC N RUNS API [CA_PEM USER PASSWORD]
-- API "poll" (a table per message) or "batch" (poll_batch: columns per
-- partition). With CA_PEM USER PASSWORD: SASL_SSL, SCRAM-SHA-512, our C TLS
-- (ssl_transport "openssl", the default). Prints "rate\tMSG_PER_S\tCPU" per
-- measured run (CPU: the process's CPU seconds per wall second) and
-- "vmhwm\tKB" at the end, as bench/rdkafka_bench.c's consume mode does.
-- Settings: the consumer's defaults (fetch_max_bytes 8 MiB,
-- max_partition_fetch_bytes 1 MiB, fetch_min_bytes 1) but fetch_max_wait_ms
-- 100 (librdkafka's fetch.wait.max.ms here) and max_poll_records:
-- BENCH_CONSUME_MAX_POLL (poll: 500, the default; poll_batch: 10000, the
-- larger poll docs/consumer.md says poll_batch makes affordable).
local kafka = require "kafka"
local socket = require "socket"

local brokers, topic, n, runs, api = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), arg[5]
assert(brokers and topic and n and runs, "usage: consume_peer.lua BROKERS TOPIC N RUNS poll|batch [CA_PEM USER PASSWORD]")
assert(api == "poll" or api == "batch", "API: poll or batch")
local RUN_SECS = 120 -- a run's deadline
local FETCH_WAIT_MS = 100
local copts = { brokers = brokers, client_id = "bench-consume" }
if arg[6] then
  assert(arg[8], "SASL_SSL: CA_PEM USER PASSWORD")
  copts.security_protocol, copts.sasl_mechanism = "SASL_SSL", "SCRAM-SHA-512"
  copts.ssl_ca_location, copts.sasl_username, copts.sasl_password = arg[6], arg[7], arg[8]
end
local max_poll = tonumber(os.getenv("BENCH_CONSUME_MAX_POLL")) or (api == "batch" and 10000 or 500)
local client = kafka.client.new(copts)
local c = kafka.consumer.new(client, { fetch_max_wait_ms = FETCH_WAIT_MS, max_poll_records = max_poll })
local parts = {}
for i = 0, assert(client:partitions(topic)) - 1 do parts[#parts + 1] = { topic = topic, partition = i, offset = 0 } end

for r = 0, runs do
  -- the previous run's last Fetch (a long poll on a drained topic) has ended
  if r > 0 then socket.sleep((FETCH_WAIT_MS + 50) / 1000) end
  local t0, cpu0 = socket.gettime(), os.clock()
  assert(c:assign(parts))
  local got = 0
  if api == "poll" then
    while got < n and socket.gettime() - t0 < RUN_SECS do
      got = got + #assert(c:poll(100))
    end
  else
    while got < n and socket.gettime() - t0 < RUN_SECS do
      for _, b in ipairs(assert(c:poll_batch(100))) do got = got + b.count end
    end
  end
  local t1, cpu1 = socket.gettime(), os.clock()
  assert(got == n, ("run %d: consumed %d of %d"):format(r, got, n))
  if r > 0 then print(("rate\t%.0f\t%.3f"):format(n / (t1 - t0), (cpu1 - cpu0) / (t1 - t0))) end
  io.stdout:flush()
end
c:close()
client:close()
local sf = io.open("/proc/self/status", "rb")
local status = sf and sf:read("*a") or ""
if sf then sf:close() end
print(("vmhwm\t%s"):format(status:match("VmHWM:%s*(%d+)") or "-1"))
