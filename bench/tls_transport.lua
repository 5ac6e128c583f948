-- bench/tls_transport.lua: the TLS transports side by side on one real Kafka broker
-- (the main version of KAFKA_VERSIONS), in one run: bench/e2e.lua's produce
-- and consume of N x 100 B over PLAINTEXT, over SASL_SSL (SCRAM-SHA-512)
-- with TLS in C (ssl_transport "openssl", the default) and with LuaSec,
-- the three taking turns for ROUNDS rounds; prints each one's mean rate
-- and the SASL_SSL/PLAINTEXT ratios, by wall clock and by the client's own
-- CPU time (os.clock: what the transport changes, when a busy machine
-- starves the broker). Not part of `make bench`:
--   spec/support/kafka/with-brokers.sh env LUA_PATH=... LUA_CPATH=... lua5.4 bench/tls_transport.lua
-- BENCH_E2E_N (200000), BENCH_E2E_RUNS (2 per process), BENCH_TLS_ROUNDS (2)
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"

local N = tonumber(os.getenv("BENCH_E2E_N")) or 200000
local RUNS = tonumber(os.getenv("BENCH_E2E_RUNS")) or 2
local ROUNDS = tonumber(os.getenv("BENCH_TLS_ROUNDS")) or 2
local ROOT = os.getenv("BENCH_ROOT") or "."

local k = rk.cluster(assert(rk.main(), "KAFKA_VERSIONS names no version"), 1)
local admin = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "bench-tls" }
local sec = ("sasl_ssl %s/ca.pem alice alice-secret"):format(k.dir)
local env = ("LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' LUA_CPATH='%s/build/lua5.4/?.so;;'"):format(ROOT, ROOT, ROOT)
local variants = {
  { name = "PLAINTEXT", bs = k.bootstrap.PLAINTEXT, mode = "", tr = "" },
  { name = "SASL_SSL, TLS in C", bs = k.bootstrap.SASL_SSL, mode = sec, tr = "openssl" },
  { name = "SASL_SSL, LuaSec", bs = k.bootstrap.SASL_SSL, mode = sec, tr = "luasec" },
}

local sums = {} -- variant name -> op -> {sum, count}
for round = 1, ROUNDS do
  for vi, v in ipairs(variants) do
    local prefix = ("tlsbench-%d-%d-%d-"):format(os.time(), round, vi)
    for r = 0, RUNS do rt.create_topic(admin, prefix .. r, 6, 1) end
    local cmd = ("%s BENCH_CPU=1 BENCH_SSL_TRANSPORT=%s timeout 600 lua5.4 %s/bench/e2e.lua %s %s %d %d 100 none %s"):format(env,
      v.tr, ROOT, v.bs, prefix, N, RUNS, v.mode)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    assert(p:close(), "failed: " .. cmd .. "\n" .. out)
    for op, rate in out:gmatch("(%a+)[%w_]*\t100\tnone\t(%d+)") do
      if op == "produce" or op == "consume" or op == "consumecpu" then
        local s = sums[v.name] or {}
        sums[v.name] = s
        s[op] = s[op] or { 0, 0 }
        s[op][1], s[op][2] = s[op][1] + tonumber(rate), s[op][2] + 1
      end
    end
    io.stderr:write(("round %d: %s done\n"):format(round, v.name))
  end
end
admin:close()

local function mean(name, op)
  local s = sums[name] and sums[name][op]
  return s and s[1] / s[2] or 0
end
print(("%d x 100 B, %d runs x %d rounds per variant, Kafka %s, one broker"):format(N, RUNS, ROUNDS, rk.main()))
print("| variant | produce msg/s | consume msg/s | consume / PLAINTEXT | consume msg per client CPU s | that / PLAINTEXT |")
print("|---|---|---|---|---|---|")
local base, cbase = mean("PLAINTEXT", "consume"), mean("PLAINTEXT", "consumecpu")
for _, v in ipairs(variants) do
  print(("| %s | %.0f | %.0f | %.2f | %.0f | %.2f |"):format(v.name, mean(v.name, "produce"), mean(v.name, "consume"),
    mean(v.name, "consume") / base, mean(v.name, "consumecpu"), mean(v.name, "consumecpu") / cbase))
end
