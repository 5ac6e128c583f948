-- bench/consume.lua: the consume matrix (issue 33), the part "consume" of
-- `make bench` (BENCH_ONLY=consume), driven by bench/run.lua:
--   local md = dofile("bench/consume.lua")({ root =, env54 =, envjit = })
-- returns the section of bench/results.md as markdown.
-- One real Kafka broker (rk.MAIN, a cluster of its own, KAFKA_JVM_OPTS as
-- make bench sets them). For each partition count x size x codec a topic is
-- filled once by our producer (round robin over the partitions), then read
-- completely by each client, a process per client, API and protocol
-- (a warm-up and RUNS runs, the median; the process's peak memory):
-- lua-kafka on Lua 5.4 and LuaJIT through poll and poll_batch
-- (bench/consume_peer.lua), Kafka's Java KafkaConsumer (JavaBench consume)
-- and librdkafka (rdkafka_bench consume), over PLAINTEXT and then over
-- SASL_SSL (SCRAM-SHA-512). A peer that fails leaves its reason in its cell
-- and the matrix goes on. Knobs: BENCH_CONSUME_N (messages of 100 B; 1 KiB
-- cases take a tenth), BENCH_CONSUME_RUNS, BENCH_CONSUME_PARTITIONS,
-- BENCH_CONSUME_SIZES, BENCH_CONSUME_CODECS, BENCH_CONSUME_PROTOCOLS,
-- BENCH_CONSUME_SECS (deadline of each peer process), BENCH_CONSUME_CLIENTS,
-- BENCH_CONSUME_PROFILE (below).
local socket = require "socket"

local function list(name, default)
  local t = {}
  for w in (os.getenv(name) or default):gmatch("[^,%s]+") do t[#t + 1] = w end
  return t
end

return function(ctx)
  local ROOT = ctx.root
  local N = tonumber(os.getenv("BENCH_CONSUME_N")) or 1000000
  local RUNS = tonumber(os.getenv("BENCH_CONSUME_RUNS")) or 5
  local SECS = tonumber(os.getenv("BENCH_CONSUME_SECS")) or 600
  local PARTITIONS = list("BENCH_CONSUME_PARTITIONS", "6,60,200")
  local SIZES = list("BENCH_CONSUME_SIZES", "100,1024")
  local CODECS = list("BENCH_CONSUME_CODECS", "none,lz4,zstd")
  local PROTOCOLS = list("BENCH_CONSUME_PROTOCOLS", "PLAINTEXT,SASL_SSL")
  -- BENCH_CONSUME_CLIENTS: some of lua54_poll, lua54_batch, jit_poll, jit_batch, java, rdkafka (all)
  local WANT_CLIENT = {}
  if os.getenv("BENCH_CONSUME_CLIENTS") then
    for _, c in ipairs { "lua54_poll", "lua54_batch", "jit_poll", "jit_batch", "java", "rdkafka" } do WANT_CLIENT[c] = false end
    for _, c in ipairs(list("BENCH_CONSUME_CLIENTS", "")) do WANT_CLIENT[c] = true end
  end
  -- BENCH_CONSUME_PROFILE=DIR: each client's runs under `perf record -a -g` (the
  -- whole machine: the broker's threads beside the client), DIR/<case>-<client>-<time>.data
  local PROFILE = os.getenv("BENCH_CONSUME_PROFILE")
  local started = socket.gettime()
  local function log(msg)
    io.stderr:write(("%s (+%4.0f s) consume: %s\n"):format(os.date("!%H:%M:%S"), socket.gettime() - started, msg))
  end

  -- run(cmd) -> stdout, or nil and the reason; a deadline of SECS (timeout
  -- signals the command's process group: its children too)
  local function run(cmd)
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(cmd, "\n")
    f:close()
    local p = assert(io.popen(("timeout -k 10 %d sh %s 2>%s.err"):format(SECS, script, script)))
    local out = p:read("a")
    local ok, _, status = p:close()
    local ef = io.open(script .. ".err", "rb")
    local err = ef and ef:read("a") or ""
    if ef then ef:close() end
    os.remove(script)
    os.remove(script .. ".err")
    if ok then return out end
    -- the last line that says something (Java: the exception, not its stack)
    local why = err:match("([^\n]*Exception[^\n]*)") or err:match("([^\n]+)%s*$") or ""
    return nil, ((status == 124 or status == 137) and ("deadline of %d s"):format(SECS) or ("exit %s"):format(status))
      .. (why ~= "" and (": " .. why:sub(1, 160)) or "")
  end
  -- run's output -> { rate = median msg/s, cpu = its run's CPU, hwm = kB }
  local function parse(out)
    local rs = {}
    for rate, cpu in out:gmatch("rate\t([%d.]+)\t([%d.]+)") do rs[#rs + 1] = { tonumber(rate), tonumber(cpu) } end
    if #rs == 0 then return { err = "no rate in its output" } end
    table.sort(rs, function(a, b) return a[1] < b[1] end)
    local m = rs[math.floor((#rs + 1) / 2)]
    return { rate = m[1], cpu = m[2], hwm = tonumber(out:match("vmhwm\t(%-?%d+)")) }
  end

  local rk = require "support.realkafka"
  local rt = require "support.realtools"
  local kafka = require "kafka"
  log(("a Kafka %s broker; partitions %s, sizes %s, codecs %s, protocols %s, %d x 100 B, %d runs"):format(rk.MAIN,
    table.concat(PARTITIONS, ","), table.concat(SIZES, ","), table.concat(CODECS, ","), table.concat(PROTOCOLS, ","),
    N, RUNS))
  local k = rk.cluster(rk.MAIN, 1, "bench")
  local bs = k.bootstrap.PLAINTEXT
  local client = kafka.client.new { brokers = bs }
  local admin = kafka.admin.new(client)
  local results, cases = {}, {}
  local ok, err = pcall(function()
    local cpfile = assert(run(ROOT .. "/spec/support/kafka/harness.sh classpath " .. rk.MAIN)):match("([^\n]+)%s*$")
    local cp = assert(run("cat " .. cpfile)):gsub("%s+$", "")
    local jdir = ROOT .. "/build/bench/java"
    assert(run(("mkdir -p %s && LD_PRELOAD= javac -nowarn -d %s -cp '%s' %s/bench/JavaBench.java"):format(jdir, jdir, cp,
      ROOT)))
    local java = ("LD_PRELOAD= java -Xmx1g -cp '%s:%s' -Dlog4j2.configurationFile=file:%s/spec/support/kafka/peer-log4j2.properties"
      .. " JavaBench consume"):format(jdir, cp, ROOT)
    local lua = function(env, interp, api)
      return function(b, topic, n, sec) return ("%s %s %s/bench/consume_peer.lua %s %s %d %d %s%s"):format(env, interp,
        ROOT, b, topic, n, RUNS, api, sec) end
    end
    local clients = {
      { "lua54_poll", lua(ctx.env54, "lua5.4", "poll") }, { "lua54_batch", lua(ctx.env54, "lua5.4", "batch") },
      { "jit_poll", lua(ctx.envjit, "luajit", "poll") }, { "jit_batch", lua(ctx.envjit, "luajit", "batch") },
      { "java", function(b, topic, n, sec) return ("%s %s %s %d %d%s"):format(java, b, topic, n, RUNS,
        sec ~= "" and (" SASL_SSL" .. sec) or "") end },
      -- SASL PLAIN over TLS: librdkafka before 2.6.1 (Debian's 2.0.2) fails
      -- SCRAM against Kafka 4.x (edenhill/kcat#462); SASL is connection
      -- set-up, done in the warm-up, so the TLS cost it measures is the same
      { "rdkafka", function(b, topic, n, sec) return ("%s/build/bench/rdkafka_bench consume %s %s %d %d%s"):format(ROOT, b,
        topic, n, RUNS, sec ~= "" and (sec .. " PLAIN") or "") end, sasl = "PLAIN" },
    }
    local sec_args = (" %s/ca.pem alice alice-secret"):format(k.dir)
    -- 1,000 distinct values, cycled (as bench/e2e.lua)
    local pools = {}
    for _, size in ipairs(SIZES) do
      local pad, pool = ("x"):rep(tonumber(size)), {}
      for i = 1, 1000 do pool[i] = tostring(i) .. pad:sub(#tostring(i) + 1) end
      pools[size] = pool
    end
    for _, np in ipairs(PARTITIONS) do
      for _, size in ipairs(SIZES) do
        for _, codec in ipairs(CODECS) do
          local n = tonumber(size) >= 1000 and math.floor(N / 10) or N
          local case = { partitions = tonumber(np), size = tonumber(size), codec = codec, n = n }
          cases[#cases + 1] = case
          local topic = ("consume-%sp-%s-%s-%d"):format(np, size, codec, os.time())
          log(("fill %s: %d x %s B, %s, %s partitions"):format(topic, n, size, codec, np))
          rt.create_topic(client, topic, case.partitions, 1)
          local t0 = socket.gettime()
          local p = kafka.producer.new(client, { acks = -1, compression = codec, delivery_reports = "errors" })
          local pool = pools[size]
          for i = 1, n do assert(p:send(topic, pool[i % 1000 + 1], { partition = i % case.partitions })) end
          local _, failed, delivered = p:flush()
          assert(failed == 0 and delivered == n, ("fill %s: %d failed, %d delivered"):format(topic, failed, delivered))
          p:close()
          case.fill = socket.gettime() - t0
          -- each client over every protocol in a row (its SASL_SSL right after its PLAINTEXT)
          for _, cl in ipairs(clients) do
            for _, proto in ipairs(WANT_CLIENT[cl[1]] ~= false and PROTOCOLS or {}) do
              local key = ("%s %s %s %s %s"):format(np, size, codec, proto, cl[1])
              local b, sec = k.bootstrap[proto], proto == "SASL_SSL" and sec_args or ""
              assert(b, "the broker has no listener " .. proto)
              local c0 = socket.gettime()
              local cmd = cl[2](b, topic, n, sec)
              if PROFILE then -- the whole machine while this client runs: the broker's share beside the client's
                cmd = ("perf record -q -a -g -o %s/%s-%s-%s-%s-%s-%s.data -- env %s"):format(PROFILE, np, size, codec, proto,
                  cl[1], os.time(), cmd)
              end
              local out, why = run(cmd)
              results[key] = out and parse(out) or { err = why }
              local r = results[key]
              if proto == "SASL_SSL" and cl.sasl then r.note = "SASL " .. cl.sasl end
              log(("%s %s: %s (%.0f s)"):format(cl[1], proto, r.rate and ("%.0f msg/s, %.0f%% CPU, %s kB peak"):format(r.rate,
                r.cpu * 100, tostring(r.hwm)) or ("failed: " .. r.err), socket.gettime() - c0))
            end
          end
          admin:delete_topics { topic }
        end
      end
    end
  end)
  admin:close()
  client:close()
  k:stop()
  if not ok then error(err, 0) end
  log(("done in %.0f s"):format(socket.gettime() - started))

  -- the table: a row per (partitions, size, codec, protocol, API)
  local function cell(r, size)
    if not r then return "-" end
    if r.err then return "failed: " .. r.err:gsub("|", "/") end
    return ("%.2f M msg/s, %.0f MB/s, %s, %.0f%% CPU%s"):format(r.rate / 1e6, r.rate * size / 1e6,
      (r.hwm and r.hwm >= 0) and ("%.0f MB peak"):format(r.hwm / 1024) or "peak -", r.cpu * 100,
      r.note and (" (" .. r.note .. ")") or "")
  end
  local function ratio(a, b) return (a and b and a.rate and b.rate) and ("%.2fx"):format(a.rate / b.rate) or "-" end
  local t = {}
  t[#t + 1] = "## Consume matrix (issue 33)"
  t[#t + 1] = ""
  t[#t + 1] = ("Consume throughput and each client's peak memory against one real Kafka %s broker (KRaft, full JIT,"):format(
    rk.MAIN)
  t[#t + 1] = "1 GiB heap): a topic filled once by lua-kafka's producer (round robin), read completely by each"
  t[#t + 1] = ("client in a process of its own, the median of %d runs after a warm-up (the process's peak memory,"):format(RUNS)
  t[#t + 1] = "VmHWM, over all its runs; CPU: the process's CPU seconds per wall second, near 100% per busy thread"
  t[#t + 1] = "when the client bounds the rate). SASL_SSL is SCRAM-SHA-512 over TLS, but librdkafka 2.0.2 (Debian's) runs SASL"
  t[#t + 1] = "PLAIN over TLS: before 2.6.1 its SCRAM fails against Kafka 4.x brokers (edenhill/kcat#462); SASL is done"
  t[#t + 1] = "once per connection, in the warm-up. Settings: docs/development.md, Benchmarks. This run:"
  t[#t + 1] = ("`BENCH_CONSUME_N=%d BENCH_CONSUME_RUNS=%d BENCH_CONSUME_PARTITIONS=%s BENCH_CONSUME_SIZES=%s"
    .. " BENCH_CONSUME_CODECS=%s BENCH_CONSUME_PROTOCOLS=%s`."):format(N, RUNS, table.concat(PARTITIONS, ","),
    table.concat(SIZES, ","), table.concat(CODECS, ","), table.concat(PROTOCOLS, ","))
  t[#t + 1] = ""
  t[#t + 1] = "| consume, real broker | API | lua-kafka Lua 5.4 | lua-kafka LuaJIT | Java kafka-clients " .. rk.MAIN
    .. " | librdkafka 2.0.2 | 5.4/Java | LuaJIT/Java | 5.4/librdkafka | LuaJIT/librdkafka"
    .. " | SASL_SSL/PLAINTEXT (5.4, LuaJIT, Java, librdkafka) |"
  t[#t + 1] = "|---|---|---|---|---|---|---|---|---|---|---|"
  for _, case in ipairs(cases) do
    for _, proto in ipairs(PROTOCOLS) do
      local function get(p, id)
        return results[("%d %d %s %s %s"):format(case.partitions, case.size, case.codec, p, id)]
      end
      for _, api in ipairs({ "poll", "batch" }) do
        local l54, ljit, java, rdk = get(proto, "lua54_" .. api), get(proto, "jit_" .. api), get(proto, "java"),
          get(proto, "rdkafka")
        local tls = "-"
        if proto == "SASL_SSL" then
          tls = ("%s, %s, %s, %s"):format(ratio(l54, get("PLAINTEXT", "lua54_" .. api)),
            ratio(ljit, get("PLAINTEXT", "jit_" .. api)), ratio(java, get("PLAINTEXT", "java")),
            ratio(rdk, get("PLAINTEXT", "rdkafka")))
        end
        t[#t + 1] = ("| %d partitions, %d x %d B, %s, %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(
          case.partitions, case.n, case.size, case.codec, proto, api == "batch" and "poll_batch" or "poll",
          cell(l54, case.size), cell(ljit, case.size), cell(java, case.size), cell(rdk, case.size), ratio(l54, java),
          ratio(ljit, java), ratio(l54, rdk), ratio(ljit, rdk), tls)
      end
    end
  end
  return table.concat(t, "\n")
end
