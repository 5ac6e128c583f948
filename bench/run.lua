-- bench/run.lua: `make bench`. Runs every benchmark, each peer in the same
-- run, prints one table and writes it to bench/results.md.
local mock = require "support.mock"

local ROOT = os.getenv("BENCH_ROOT") or "."
local E2E_N = tonumber(os.getenv("BENCH_E2E_N")) or 1000000
local E2E_RUNS = tonumber(os.getenv("BENCH_E2E_RUNS")) or 5
-- BENCH_ONLY=real: only the real-broker part (its table is printed and
-- written to build/bench/results-real.md; bench/results.md is left alone)
local ONLY = os.getenv("BENCH_ONLY")
if ONLY == "" then ONLY = nil end
assert(ONLY == nil or ONLY == "real", "BENCH_ONLY: unset or real")
local ALL = ONLY == nil

local results = {} -- key "op size codec" -> who -> rate

local function lines(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local ok = p:close()
  if not ok then error("failed: " .. cmd .. "\n" .. out) end
  return out
end

-- Collects "op size codec rate" lines; several lines of one key (e2e runs)
-- are reduced to their median.
local function collect(who, out)
  local many = {}
  for op, size, codec, rate in out:gmatch("(%S+)\t(%d+)\t(%S+)\t([%d.]+)") do
    local k = op .. " " .. size .. " " .. codec
    many[k] = many[k] or {}
    table.insert(many[k], tonumber(rate))
  end
  for k, rates in pairs(many) do
    table.sort(rates)
    results[k] = results[k] or {}
    results[k][who] = rates[math.floor((#rates + 1) / 2)]
  end
end

local env54 = ("LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' LUA_CPATH='%s/build/lua5.4/?.so;;'"):format(ROOT, ROOT, ROOT)
local envjit = ("LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' LUA_CPATH='%s/build/luajit/?.so;;'"):format(ROOT, ROOT, ROOT)

if ALL then
  io.stderr:write("codec, Lua 5.4 ...\n")
  collect("lua54", lines(env54 .. " lua5.4 " .. ROOT .. "/bench/codec.lua"))
  io.stderr:write("codec, LuaJIT ...\n")
  collect("luajit", lines(envjit .. " luajit " .. ROOT .. "/bench/codec.lua"))
  io.stderr:write("kafka-python ...\n")
  collect("kp", lines("/usr/bin/python3 " .. ROOT .. "/bench/kp_bench.py"))
  io.stderr:write("C floor ...\n")
  collect("floor", lines(ROOT .. "/build/bench/floor"))

  io.stderr:write(("end to end, %d messages x %d runs, lua-kafka and librdkafka ...\n"):format(E2E_N, E2E_RUNS))
  local m = mock.start { brokers = 3 }
  for r = 0, E2E_RUNS do
    -- the mock keeps ~5 MB per partition: spread 100 MB wide
    m:cmd("topic e2e-lua-" .. r .. " 200")
    m:cmd("topic e2e-rdk-" .. r .. " 200")
  end
  collect("lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s e2e-lua- %d %d 100"):format(env54, ROOT, m.bootstrap, E2E_N, E2E_RUNS)))
  collect("rdkafka", lines(("%s/build/bench/rdkafka_bench %s e2e-rdk- %d %d 100"):format(ROOT, m.bootstrap, E2E_N, E2E_RUNS)))
  m:stop()
end

-- Inside nginx (bench/nginx.lua): requests per second of a location that
-- sends one 200-byte message beside the same location without Kafka, and
-- the producer's rate in nginx beside plain LuaJIT (BENCH_NGINX=0 skips it).
local NGINX = ALL and os.getenv("BENCH_NGINX") ~= "0"
if NGINX then
  io.stderr:write("inside nginx (wrk, 20 connections) and plain LuaJIT ...\n")
  local envn = ("BENCH_ROOT='%s' LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;%s/spec/?.lua;;' LUA_CPATH='%s/build/lua5.4/?.so;;'")
    :format(ROOT, ROOT, ROOT, ROOT, ROOT)
  collect("nginx", lines(envn .. " lua5.4 " .. ROOT .. "/bench/nginx.lua"))
end

-- End to end against one real Kafka broker (full JIT, 1 GiB heap), lua-kafka
-- beside Kafka's Java client in the same run: 1,000,000 x 100 B and
-- 100,000 x 1 KiB, uncompressed, lz4 and zstd, topics of 6 partitions;
-- the uncompressed cases also over SASL_SSL (SCRAM-SHA-512), both clients,
-- right after their PLAINTEXT runs, and lua-kafka's connection set-up per
-- protocol (as bench/tls.lua measures it).
local REAL = ONLY == "real" or os.getenv("BENCH_REAL") ~= "0"
local SETUP_CONNECTS = 20
local REAL_CASES = { { n = E2E_N, size = 100 }, { n = math.floor(E2E_N / 10), size = 1024 } }
local REAL_CODECS = { "none", "lz4", "zstd" }
if REAL then
  local rk = require "support.realkafka"
  local rt = require "support.realtools"
  local kafka = require "kafka"
  io.stderr:write("end to end against a real Kafka " .. rk.MAIN .. " broker, lua-kafka and the Java client ...\n")
  local k = rk.cluster(rk.MAIN, 1, "bench") -- with the KAFKA_JVM_OPTS make bench sets
  local bs = k.bootstrap.PLAINTEXT
  local sec_args = k.dir .. "/ca.pem alice alice-secret"
  local admin = kafka.client.new { brokers = bs }
  local cpfile = lines(ROOT .. "/spec/support/kafka/harness.sh classpath " .. rk.MAIN):match("([^\n]+)%s*$")
  local cp = lines("cat " .. cpfile):gsub("%s+$", "")
  local jdir = ROOT .. "/build/bench/java"
  lines(("mkdir -p %s && javac -nowarn -d %s -cp '%s' %s/bench/JavaBench.java"):format(jdir, jdir, cp, ROOT))
  local java = ("java -Xmx1g -cp '%s:%s' -Dlog4j2.configurationFile=file:%s/spec/support/kafka/peer-log4j2.properties"
    .. " JavaBench"):format(jdir, cp, ROOT)
  for _, case in ipairs(REAL_CASES) do
    for _, codec in ipairs(REAL_CODECS) do
      local tag = ("%d-%d-%s-"):format(case.n, case.size, codec)
      for r = 0, E2E_RUNS do
        rt.create_topic(admin, "real-lua-" .. tag .. r, 6, 1)
        rt.create_topic(admin, "real-java-" .. tag .. r, 6, 1)
      end
      local args = ("%d %d %d %s"):format(case.n, E2E_RUNS, case.size, codec)
      collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-lua-%s %s"):format(env54, ROOT, bs, tag, args)))
      collect("real_java", lines(("%s %s real-java-%s %s"):format(java, bs, tag, args)))
      if codec == "none" then
        -- the same over SASL_SSL, SCRAM-SHA-512 as alice (the harness's user)
        local stag = ("%d-%d-sasl-"):format(case.n, case.size)
        for r = 0, E2E_RUNS do
          rt.create_topic(admin, "real-lua-" .. stag .. r, 6, 1)
          rt.create_topic(admin, "real-java-" .. stag .. r, 6, 1)
        end
        local sbs = k.bootstrap.SASL_SSL
        collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-lua-%s %s sasl_ssl %s"):format(env54, ROOT, sbs,
          stag, args, sec_args)))
        collect("real_java", lines(("%s %s real-java-%s %s SASL_SSL %s"):format(java, sbs, stag, args, sec_args)))
        -- the idempotent producer (the default) beside enable_idempotence = false, same run
        for _, mode in ipairs({ "idempotent", "plain" }) do
          for r = 0, E2E_RUNS do rt.create_topic(admin, "real-" .. mode .. "-" .. tag .. r, 6, 1) end
          collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-%s-%s %s %s"):format(env54, ROOT, bs, mode,
            tag, args, mode)))
        end
      end
    end
  end
  -- connection set-up of lua-kafka, TCP + TLS + ApiVersions + SASL: ms per
  -- connection, SETUP_CONNECTS in a row, the median of the runs
  local sasl = require "kafka.sasl"
  local connection = require "kafka.connection"
  local socket = require "socket"
  for _, proto_name in ipairs({ "PLAINTEXT", "SASL_SSL" }) do
    local o = { security_protocol = proto_name }
    if proto_name == "SASL_SSL" then
      o.sasl_mechanism, o.sasl_username, o.sasl_password = "SCRAM-SHA-512", "alice", "alice-secret"
      o.ssl_ca_location = k.dir .. "/ca.pem"
    end
    local host, port = k.bootstrap[proto_name]:match("^(.*):(%d+)$")
    local sec = sasl.config(o)
    local out = {}
    for r = 0, E2E_RUNS do
      local t0 = socket.gettime()
      for _ = 1, SETUP_CONNECTS do
        local conn = connection.new { host = host, port = port, security = sec }
        assert(conn:connect())
        conn:close()
      end
      if r > 0 then out[#out + 1] = ("setup_%s\t0\tnone\t%.3f"):format(proto_name, (socket.gettime() - t0) * 1000 / SETUP_CONNECTS) end
    end
    collect("real_lua54", table.concat(out, "\n"))
  end
  admin:close()
  k:stop()
end

local function M(x) return x and ("%.2f M"):format(x / 1e6) or "-" end
local function K(x) return x and ("%.1f k"):format(x / 1e3) or "-" end
local function ratio(a, b) return (a and b) and ("%.2fx"):format(a / b) or "-" end

local rows = {}
local function row(op, size, codec, peer_name, peer_key, floor_key, what)
  local r = results[op .. " " .. size .. " " .. codec] or {}
  local pk = results[(peer_key or op) .. " " .. size .. " " .. codec] or {}
  local fk = results[(floor_key or op) .. " " .. size .. " " .. codec] or {}
  local peer = pk[peer_name]
  rows[#rows + 1] = ("| %s | %d B | %s | %s | %s | %s %s | %s | %s |"):format(what, size, codec, M(r.lua54), M(r.luajit),
    peer_name == "kp" and "kafka-python" or "librdkafka", M(peer), ratio(r.lua54, peer), M(fk.floor))
end

for _, size in ipairs({ 100, 1024 }) do
  for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
    row("encode_batch", size, codec, "kp", nil, nil, "encode v2 batch (proto.batch)")
  end
  row("encode_request", size, "none", "kp", "encode_batch", "encode_batch", "encode Produce request (message array)")
  for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
    row("decode_tables", size, codec, "kp", nil, nil, "decode Fetch into tables")
  end
  row("decode_columns", size, "none", "kp", "decode_tables", "decode_tables", "decode records (decode_columns)")
end
local e2e = {}
for _, op in ipairs({ "produce", "consume" }) do
  local r = results[op .. " 100 none"] or {}
  e2e[#e2e + 1] = ("| %s %d x 100 B (acks=all) | %s msg/s, %.0f MB/s | %s msg/s, %.0f MB/s | %s |"):format(op, E2E_N,
    M(r.lua54), (r.lua54 or 0) * 100 / 1e6, M(r.rdkafka), (r.rdkafka or 0) * 100 / 1e6, ratio(r.lua54, r.rdkafka))
end

local real = {}
if REAL then
  for _, case in ipairs(REAL_CASES) do
    for _, codec in ipairs(REAL_CODECS) do
      for _, op in ipairs({ "produce", "consume" }) do
        local r = results[op .. " " .. case.size .. " " .. codec] or {}
        real[#real + 1] = ("| %s %d x %d B %s (acks=all) | %s msg/s, %.0f MB/s | %s msg/s, %.0f MB/s | %s |"):format(op,
          case.n, case.size, codec, M(r.real_lua54), (r.real_lua54 or 0) * case.size / 1e6, M(r.real_java),
          (r.real_java or 0) * case.size / 1e6, ratio(r.real_lua54, r.real_java))
      end
    end
  end
  for _, case in ipairs(REAL_CASES) do
    local i = results["produce_idempotent " .. case.size .. " none"] or {}
    local pl = results["produce_plain " .. case.size .. " none"] or {}
    real[#real + 1] = ("| produce %d x %d B, idempotent (default) / enable_idempotence = false | %s msg/s | %s msg/s | %s |")
      :format(case.n, case.size, M(i.real_lua54), M(pl.real_lua54), ratio(i.real_lua54, pl.real_lua54))
  end
end

-- TLS cost: each client over SASL_SSL beside itself over PLAINTEXT (k msg/s)
local tls_rows = {}
if REAL then
  for _, case in ipairs(REAL_CASES) do
    for _, op in ipairs({ "produce", "consume" }) do
      local pl = results[op .. " " .. case.size .. " none"] or {}
      local ss = results[op .. "_sasl_ssl " .. case.size .. " none"] or {}
      tls_rows[#tls_rows + 1] = ("| %s %d x %d B none (acks=all) | %s | %s | %s | %s | %s | %s | %s |"):format(op, case.n,
        case.size, K(pl.real_lua54), K(ss.real_lua54), ratio(ss.real_lua54, pl.real_lua54), K(pl.real_java),
        K(ss.real_java), ratio(ss.real_java, pl.real_java), ratio(ss.real_lua54, ss.real_java))
    end
  end
  local function ms(key)
    local v = (results[key .. " 0 none"] or {}).real_lua54
    return v and ("%.2f ms"):format(v) or "-"
  end
  local sp = (results["setup_PLAINTEXT 0 none"] or {}).real_lua54
  local ss = (results["setup_SASL_SSL 0 none"] or {}).real_lua54
  tls_rows[#tls_rows + 1] = ("| connection set-up (TCP, TLS, ApiVersions, SASL), per connection | %s | %s | %s | - | - | - | - |")
    :format(ms("setup_PLAINTEXT"), ms("setup_SASL_SSL"), ratio(ss, sp))
end

local ngx_rows = {}
if NGINX then
  local function r(k) return (results[k] or {}).nginx end
  local plain, with = r("nginx_rps 200 plain"), r("nginx_rps 200 kafka")
  ngx_rows[#ngx_rows + 1] = ("| requests/s, a content_by_lua location without Kafka | %s req/s | |"):format(K(plain))
  ngx_rows[#ngx_rows + 1] = ("| requests/s, the same location sending one 200 B message | %s req/s | %s of the plain rate |")
    :format(K(with), ratio(with, plain))
  local lua54 = (results["produce 100 none"] or {}).lua54
  local bg, sync, jit = r("produce 100 nginx_bg"), r("produce 100 nginx_sync"), r("produce 100 luajit")
  ngx_rows[#ngx_rows + 1] = ("| producer %d x 100 B, background mode in nginx (the sender timer) | %s msg/s | %s of plain LuaJIT |")
    :format(E2E_N, M(bg), ratio(bg, jit))
  ngx_rows[#ngx_rows + 1] = ("| producer %d x 100 B, synchronous in a content handler | %s msg/s | %s of plain LuaJIT |")
    :format(E2E_N, M(sync), ratio(sync, jit))
  ngx_rows[#ngx_rows + 1] = ("| producer %d x 100 B, plain LuaJIT (bench/e2e.lua) | %s msg/s | |"):format(E2E_N, M(jit))
  ngx_rows[#ngx_rows + 1] = ("| producer %d x 100 B, plain Lua 5.4 (bench/e2e.lua) | %s msg/s | %s of plain LuaJIT |")
    :format(E2E_N, M(lua54), ratio(lua54, jit))
end

local cpu = lines("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"):gsub("^%s+", ""):gsub("%s+$", "")
local header = ([[
# lua-kafka benchmarks

Machine: %s, %s cores; %s. Every figure is the median of at least 5 runs
after a warm-up, all peers measured in the same run (`make bench`). Codec
rows: messages per CPU-second, 10,000 messages per run. Floor: the same
bytes through memcpy + compression + CRC-32C in C (bench/floor.c), what the
hardware and libraries allow. End to end: wall clock against librdkafka's
mock cluster (3 brokers, 200 partitions) on loopback. This run: BENCH_E2E_N=%d,
BENCH_E2E_RUNS=%d.
]]):format(cpu, lines("nproc"):gsub("%s+", ""), os.date("!%Y-%m-%d"), E2E_N, E2E_RUNS)
local t = { header }
if ALL then
  t[#t + 1] = "| operation | size | codec | lua-kafka Lua 5.4 | lua-kafka LuaJIT | peer | ratio (5.4/peer) | floor |"
  t[#t + 1] = "|---|---|---|---|---|---|---|---|"
  for _, r in ipairs(rows) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = "| end to end | lua-kafka (Lua 5.4) | librdkafka 2.0.2 | ratio |"
  t[#t + 1] = "|---|---|---|---|"
  for _, r in ipairs(e2e) do t[#t + 1] = r end
else
  t[#t + 1] = "(BENCH_ONLY=real: the real-broker part only)"
end
if NGINX then
  t[#t + 1] = ""
  t[#t + 1] = "Inside nginx (Debian's nginx 1.22 + lua-nginx-module 0.10.23, LuaJIT 2.1, 1 worker, the"
  t[#t + 1] = "examples/openresty config: a per-worker producer, linger_ms 20, acks=all) against the same mock:"
  t[#t + 1] = "requests/s by wrk (1 thread, 20 keep-alive connections, 5 s per run after a 2 s warm-up, median"
  t[#t + 1] = "of 3); producer rates are acks=all, first send to flush, 200 partitions (bench/nginx.lua):"
  t[#t + 1] = ""
  t[#t + 1] = "| in nginx | rate | ratio |"
  t[#t + 1] = "|---|---|---|"
  for _, r in ipairs(ngx_rows) do t[#t + 1] = r end
end
if REAL then
  t[#t + 1] = ""
  t[#t + 1] = "Against one real Apache Kafka broker (KRaft, full JIT, 1 GiB heap, topics of 6 partitions), lua-kafka at"
  t[#t + 1] = "its defaults (linger_ms 100, 1 MiB batches) beside Kafka's Java client (linger.ms 5, batch.size 1 MiB,"
  t[#t + 1] = "max.partition.fetch.bytes 8 MiB, max.poll.records 10000), both acks=all, the same run:"
  t[#t + 1] = ""
  t[#t + 1] = "| end to end, real broker | lua-kafka (Lua 5.4) | Java kafka-clients " .. require("support.realkafka").MAIN .. " | ratio |"
  t[#t + 1] = "|---|---|---|---|"
  for _, r in ipairs(real) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = "The cost of TLS and SASL: the uncompressed cases over the broker's SASL_SSL listener (SCRAM-SHA-512,"
  t[#t + 1] = "the CA verified and the host name checked; lua-kafka's TLS is LuaSec/OpenSSL, Java's the JDK's), each"
  t[#t + 1] = "client right after its PLAINTEXT runs, the same settings; ratio: SASL_SSL / PLAINTEXT rate of the"
  t[#t + 1] = ("same client. Connection set-up: lua-kafka, %d connections in a row (bench/tls.lua measures the other"
    .. " protocols):"):format(SETUP_CONNECTS)
  t[#t + 1] = ""
  t[#t + 1] = "| TLS cost, real broker (msg/s) | lua-kafka PLAINTEXT | lua-kafka SASL_SSL | lua-kafka ratio | Java PLAINTEXT"
    .. " | Java SASL_SSL | Java ratio | lua/Java over SASL_SSL |"
  t[#t + 1] = "|---|---|---|---|---|---|---|---|"
  for _, r in ipairs(tls_rows) do t[#t + 1] = r end
end
local text = table.concat(t, "\n") .. "\n"
io.write(text)
local f = assert(io.open(ROOT .. (ALL and "/bench/results.md" or "/build/bench/results-real.md"), "w"))
f:write(text)
f:close()
