-- bench/e2e.lua: our producer and consumer, N messages of SIZE bytes to a
-- fresh topic per run (acks=all, batching on), then read back. Same output
-- as bench/rdkafka_bench.c.   lua5.4 bench/e2e.lua BROKERS TOPIC_PREFIX N RUNS SIZE [CODEC [MODE [TXN_MSGS]]]
-- MODE: "idempotent" or "plain" (enable_idempotence true/false; the ops are then
-- named produce_MODE / consume_MODE); without it the producer's default (idempotent).
-- MODE "transactional": a transactional_id, one transaction per TXN_MSGS
-- messages (begin, sends, commit_transaction), read back read_committed.
-- MODE "sasl_ssl" CA_PEM USER PASSWORD: the producer's default over SASL_SSL
-- with SCRAM-SHA-512 (docs/security.md), ops named produce_sasl_ssl / consume_sasl_ssl
-- (BENCH_SSL_TRANSPORT: its ssl_transport option, "openssl" by default).
-- Without MODE the same topic is then read again with consumer:poll_batch
-- (op consume_batch: the same data in the same run, beside poll's consume).
-- BENCH_GC=incremental|generational: Lua 5.4's collector mode for the run
-- (the lua5.4 interpreter starts in generational mode; docs/development.md: Benchmarks)
if os.getenv("BENCH_GC") and os.getenv("BENCH_GC") ~= "" then collectgarbage(os.getenv("BENCH_GC")) end
local kafka = require "kafka"
local socket = require "socket"

local brokers, prefix, n, runs, size = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5])
local codec = arg[6] or "none"
local mode = arg[7]
assert(mode == nil or mode == "idempotent" or mode == "plain" or mode == "sasl_ssl" or mode == "transactional",
  "MODE: idempotent, plain, sasl_ssl or transactional")
local txn = mode == "transactional"
local per_txn = tonumber(arg[8])
assert(not txn or (per_txn and per_txn >= 1), "MODE transactional needs TXN_MSGS")
local suffix = mode and ("_" .. mode) or ""
local idem -- nil: the producer's default
if mode == "plain" then idem = false elseif mode == "idempotent" then idem = true end
local copts = { brokers = brokers, client_id = "bench" }
if mode == "sasl_ssl" then
  assert(arg[10], "sasl_ssl: CA_PEM USER PASSWORD")
  copts.security_protocol, copts.sasl_mechanism = "SASL_SSL", "SCRAM-SHA-512"
  copts.ssl_ca_location, copts.sasl_username, copts.sasl_password = arg[8], arg[9], arg[10]
  -- BENCH_SSL_TRANSPORT=luasec: TLS through LuaSec (bench/tls_transport.lua compares the two)
  local tr = os.getenv("BENCH_SSL_TRANSPORT")
  if tr and tr ~= "" then copts.ssl_transport = tr end
end
local client = kafka.client.new(copts)
-- values prepared up front (1,000 distinct ones, cycled): the bench
-- measures the client, not Lua string building (the C peer snprintf()s)
local pad = ("x"):rep(size)
local pool = {}
for i = 1, 1000 do
  local id = tostring(i)
  pool[i] = id .. pad:sub(#id + 1)
end
-- one consumer serves every run, as in JavaBench.java: its fetch
-- connections (a TLS handshake and SASL each, over SASL_SSL) are made in
-- the warm-up, not inside a measured run
local FETCH_WAIT_MS = 100
local c = kafka.consumer.new(client, { fetch_max_wait_ms = FETCH_WAIT_MS,
  isolation_level = txn and "read_committed" or nil })
for r = 0, runs do -- run 0 is the warm-up
  local topic = prefix .. r
  -- default batching (linger_ms 100, batch_size 1 MiB); successes counted,
  -- failures reported (librdkafka's bench counts in a delivery callback)
  local p = kafka.producer.new(client, { acks = -1, delivery_reports = "errors", compression = codec,
    enable_idempotence = idem, transactional_id = txn and ("bench-" .. topic) or nil })
  -- (InitProducerId with the transactional id is set-up, as the Java
  -- peer's initTransactions() before its clock starts)
  if txn then assert(p:init_transactions()) end
  local t0 = socket.gettime()
  local _, failed, delivered
  if txn then
    failed, delivered = 0, 0
    for i = 1, n do
      if (i - 1) % per_txn == 0 then assert(p:begin_transaction()) end
      assert(p:send(topic, pool[i % 1000 + 1]))
      if i % per_txn == 0 or i == n then
        assert(p:commit_transaction())
        local _, f, d = p:flush()
        failed, delivered = failed + f, delivered + d
      end
    end
  else
    for i = 1, n do
      assert(p:send(topic, pool[i % 1000 + 1]))
    end
    _, failed, delivered = p:flush()
  end
  assert(delivered == n, delivered .. " delivered")
  local t1 = socket.gettime()
  assert(failed == 0, failed .. " messages failed")
  if r > 0 then print(("produce%s\t%d\t%s\t%.0f"):format(suffix, size, codec, n / (t1 - t0))) end
  -- which transaction protocol ran (1: KIP-98's AddPartitionsToTxn flow, 2: KIP-890's)
  if txn and r > 0 then print(("transaction_version\t%d\t%s\t%d"):format(size, codec, p:stats().transaction_version)) end

  local parts = {}
  for i = 0, assert(client:partitions(topic)) - 1 do parts[#parts + 1] = { topic = topic, partition = i, offset = 0 } end
  -- the previous run's last Fetch (a long poll of up to fetch_max_wait_ms on
  -- its drained topic, one per connection) has ended before the clock starts
  if r > 0 then socket.sleep((FETCH_WAIT_MS + 50) / 1000) end
  t0 = socket.gettime()
  local cpu0 = os.clock()
  assert(c:assign(parts))
  local got = 0
  while got < n and socket.gettime() - t0 < 30 do
    local msgs = assert(c:poll(100))
    got = got + #msgs
  end
  t1 = socket.gettime()
  if r > 0 then print(("consume%s\t%d\t%s\t%.0f"):format(suffix, size, codec, got / (t1 - t0))) end
  -- BENCH_CPU=1: also messages per second of this process's CPU time (the
  -- client's own cost, less bound to a broker starved on a busy machine)
  if r > 0 and os.getenv("BENCH_CPU") == "1" then
    print(("consumecpu%s\t%d\t%s\t%.0f"):format(suffix, size, codec, got / math.max(os.clock() - cpu0, 1e-6)))
  end
  io.stdout:flush()
  assert(got == n, ("consumed %d of %d"):format(got, n))
  if not mode then
    -- the same records again through poll_batch (columns, no table per message)
    if r > 0 then socket.sleep((FETCH_WAIT_MS + 50) / 1000) end
    t0 = socket.gettime()
    assert(c:assign(parts))
    got = 0
    while got < n and socket.gettime() - t0 < 30 do
      for _, b in ipairs(assert(c:poll_batch(100))) do got = got + b.count end
    end
    t1 = socket.gettime()
    if r > 0 then print(("consume_batch\t%d\t%s\t%.0f"):format(size, codec, got / (t1 - t0))) end
    io.stdout:flush()
    assert(got == n, ("consumed %d of %d with poll_batch"):format(got, n))
  end
end
c:close()
client:close()
-- the process's peak resident memory over every run (VmHWM, kB), as bench/rdkafka_bench.c prints it
local sf = io.open("/proc/self/status", "rb")
local status = sf and sf:read("*a") or ""
if sf then sf:close() end
print(("vmhwm%s\t%d\t%s\t%s"):format(suffix, size, codec, status:match("VmHWM:%s*(%d+)") or "-1"))
