-- bench/run.lua: `make bench`. Runs every benchmark, each peer in the same
-- run, prints one table and writes it to bench/results.md.
local mock = require "support.rdkafka_mock"

local socket = require "socket"

-- The knobs (a small run: BENCH_E2E_N=20000 BENCH_E2E_RUNS=2 BENCH_GROUP_N=20000)
local ROOT = os.getenv("BENCH_ROOT") or "."
local E2E_N = tonumber(os.getenv("BENCH_E2E_N")) or 1000000
local E2E_RUNS = tonumber(os.getenv("BENCH_E2E_RUNS")) or 5
local CODEC_RUNS = tonumber(os.getenv("BENCH_RUNS")) or 7          -- bench/codec.lua, bench/kp_bench.py
local TXN_MSGS = tonumber(os.getenv("BENCH_TXN_MSGS")) or 1000     -- messages per transaction
local GROUP_N = tonumber(os.getenv("BENCH_GROUP_N")) or 1000000    -- messages the 3-member groups consume
local GROUP_RUNS = tonumber(os.getenv("BENCH_GROUP_RUNS")) or E2E_RUNS
local LAT_RUNS = tonumber(os.getenv("BENCH_LAT_RUNS")) or E2E_RUNS -- rebalance latency rounds
local CMD_SECS = tonumber(os.getenv("BENCH_CMD_SECS")) or 1800     -- deadline of each peer program
local GROUP_SECS = tonumber(os.getenv("BENCH_GROUP_SECS")) or 300  -- deadline of each group round
-- BENCH_ONLY: a comma list of the parts to run (codec, mock, nginx, e2e,
-- idempotence, transactions, groups; "real" for these four; consume: the
-- consume matrix, bench/consume.lua, its knobs BENCH_CONSUME_*); the table
-- then goes to build/bench/results-only.md, bench/results.md is left alone
local ONLY = os.getenv("BENCH_ONLY")
if ONLY == "" then ONLY = nil end
local PARTS = { codec = true, mock = true, nginx = true, e2e = true, idempotence = true, transactions = true,
  groups = true, real = true, consume = true }
if ONLY then
  for w in ONLY:gmatch("[^,%s]+") do assert(PARTS[w], "BENCH_ONLY: unknown part " .. w) end
end
local REAL_PARTS = { e2e = true, idempotence = true, transactions = true, groups = true }
local function want(part)
  if not ONLY then return true end
  for w in ONLY:gmatch("[^,%s]+") do
    if w == part or (w == "real" and REAL_PARTS[part]) then return true end
  end
  return false
end

local results = {} -- key "op size codec" -> who -> rate

-- lines(cmd) -> its stdout; raises when it fails or runs past CMD_SECS
-- (timeout signals its whole process group, the command's children too)
local function lines(cmd)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(cmd, "\n")
  f:close()
  local p = assert(io.popen(("timeout %d sh %s"):format(CMD_SECS, script)))
  local out = p:read("a")
  local ok, _, status = p:close()
  os.remove(script)
  if not ok then error(("failed (status %s): %s\n%s"):format(tostring(status), cmd, out)) end
  return out
end

-- Peer programs in the background (the group members): spawn(cmd, secs)
-- runs cmd under `timeout secs`; p.read() -> the complete lines written
-- since the last read; p.kill(); p.running(). Every spawned process is
-- killed by kill_all(), also when a round fails.
local spawned = {}
local function spawn(cmd, secs)
  local out = os.tmpname()
  assert(os.execute(("(timeout %d env %s >%s 2>%s.err & echo $! >%s.pid)"):format(secs, cmd, out, out, out)))
  local pf = assert(io.open(out .. ".pid", "rb"))
  local pid = assert(pf:read("a"):match("%d+"))
  pf:close()
  os.remove(out .. ".pid")
  local p = { pid = pid, out = out, offset = 0, cmd = cmd }
  function p.read()
    local t = {}
    local lf = io.open(out, "rb")
    if not lf then return t end
    lf:seek("set", p.offset)
    local data = lf:read("a")
    lf:close()
    local upto = data:match(".*\n()")
    if not upto then return t end
    p.offset = p.offset + upto - 1
    for l in data:sub(1, upto - 1):gmatch("([^\n]*)\n") do t[#t + 1] = l end
    return t
  end
  function p.running() return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end
  function p.stderr()
    local ef = io.open(out .. ".err", "rb")
    local e = ef and ef:read("a") or ""
    if ef then ef:close() end
    return e
  end
  function p.kill() os.execute("kill " .. pid .. " 2>/dev/null") end
  function p.clean()
    os.remove(out)
    os.remove(out .. ".err")
  end
  spawned[#spawned + 1] = p
  return p
end
local function kill_all()
  for _, p in ipairs(spawned) do
    if p.running() then p.kill() end
    p.clean()
  end
  spawned = {}
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

if want("codec") then
  io.stderr:write("codec, Lua 5.4 ...\n")
  collect("lua54", lines(env54 .. " lua5.4 " .. ROOT .. "/bench/codec.lua"))
  io.stderr:write("codec, LuaJIT ...\n")
  collect("luajit", lines(envjit .. " luajit " .. ROOT .. "/bench/codec.lua"))
  io.stderr:write("kafka-python ...\n")
  collect("kp", lines("/usr/bin/python3 " .. ROOT .. "/bench/kp_bench.py"))
  io.stderr:write("C floor ...\n")
  collect("floor", lines(ROOT .. "/build/bench/floor"))
end

-- End to end against librdkafka's mock cluster: E2E_N x 100 B and E2E_N/10
-- x 1 KiB, uncompressed, lz4 and zstd; lua-kafka on Lua 5.4 and LuaJIT
-- beside librdkafka, one process per client and case (its runs, then its
-- peak memory). A fresh mock per client and case: it keeps every message,
-- and it slows down as it fills (1 KiB produce on one mock: 0.5 M msg/s for
-- the first client's runs, 0.2 M for the next client's), so sharing one
-- would favour whoever runs first.
local MOCK_CASES = { { n = E2E_N, size = 100 }, { n = math.floor(E2E_N / 10), size = 1024 } }
local MOCK_CODECS = { "none", "lz4", "zstd" }
-- the cases also run with Lua 5.4's incremental collector
local function gc_case(codec) return codec == "none" end
if want("mock") then
  for _, case in ipairs(MOCK_CASES) do
    for _, codec in ipairs(MOCK_CODECS) do
      io.stderr:write(("end to end on the mock, %d x %d B %s, %d runs: lua-kafka (Lua 5.4, LuaJIT), librdkafka ...\n")
        :format(case.n, case.size, codec, E2E_RUNS))
      local clients = {
        { "lua54", "lua", function(a) return ("%s lua5.4 %s/bench/e2e.lua %s %s"):format(env54, ROOT, a, codec) end },
        { "luajit", "jit", function(a) return ("%s luajit %s/bench/e2e.lua %s %s"):format(envjit, ROOT, a, codec) end },
        -- the same client in Lua 5.4's incremental mode, beside the interpreter's generational default
        gc_case(codec) and { "lua54inc", "inc", function(a)
          return ("BENCH_GC=incremental %s lua5.4 %s/bench/e2e.lua %s %s"):format(env54, ROOT, a, codec)
        end } or nil,
      }
      clients[#clients + 1] = { "rdkafka", "rdk", function(a)
        return ("%s/build/bench/rdkafka_bench %s mock %s"):format(ROOT, a, codec)
      end }
      for _, cl in ipairs(clients) do
        local m = mock.start { brokers = 3 }
        local ok, err = pcall(function()
          -- the mock keeps ~5 MB per partition: spread 100 MB wide
          for r = 0, E2E_RUNS do m:cmd(("topic e2e-%s-%d"):format(cl[2], r) .. " 200") end
          collect(cl[1], lines(cl[3](("%s e2e-%s- %d %d %d"):format(m.bootstrap, cl[2], case.n, E2E_RUNS, case.size))))
        end)
        m:stop()
        if not ok then error(err, 0) end
      end
    end
  end
end

-- Inside nginx (bench/nginx.lua): requests per second of a location that
-- sends one 200-byte message beside the same location without Kafka, and
-- the producer's rate in nginx beside plain LuaJIT (BENCH_NGINX=0 skips it).
local NGINX = os.getenv("BENCH_NGINX") ~= "0" and want("nginx")
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
-- protocol (as bench/tls.lua measures it); the idempotent producer beside enable_idempotence = false, both beside
-- librdkafka's; transactions beside Java's; consumer groups beside Java's.
local REAL = os.getenv("BENCH_REAL") ~= "0"
  and (want("e2e") or want("idempotence") or want("transactions") or want("groups"))
local REAL_CASES = { { n = E2E_N, size = 100 }, { n = math.floor(E2E_N / 10), size = 1024 } }
local REAL_CODECS = { "none", "lz4", "zstd" }
local GROUP_PARTS, LAT_N = 12, 12000
local SETUP_CONNECTS = 20
local PROTOCOLS = {} -- the group protocols the broker speaks
local rk = REAL and require "support.realkafka"

-- A member's lines so far, parsed: joined, first, assigned (the latest),
-- pos {[p] = {next, t}}, last, count, done.
local function member_state()
  return { pos = {}, assigned = -1 }
end
local function absorb(st, ls)
  for _, l in ipairs(ls) do
    local kind, rest = l:match("^(%u+) ?(.*)$")
    if kind == "JOINED" then st.joined = tonumber(rest)
    elseif kind == "FIRST" then st.first = tonumber(rest)
    elseif kind == "ASSIGNED" then st.assigned = tonumber(rest)
    elseif kind == "POS" then
      for p, nx, t in rest:gmatch("(%d+):(%d+):([%d.]+)") do
        st.pos[tonumber(p)] = { tonumber(nx), tonumber(t) }
      end
    elseif kind == "LAST" then
      local t, n = rest:match("^([%d.]+) (%d+)$")
      st.last, st.count = tonumber(t), tonumber(n)
    elseif kind == "DONE" then st.done = true
    end
  end
end

-- Lua group members for one round: start(n, commit) spawns n members of
-- gid; wait(what, fn) polls them every 20 ms until fn(states) or the
-- round's deadline; finish() stops them (the stop file) and waits for
-- their DONE. Any failure kills every member.
local function lua_round(bs, topic, gid, protocol)
  local stopfile = os.tmpname()
  os.remove(stopfile)
  local round = { members = {}, states = {} }
  local deadline = socket.gettime() + GROUP_SECS
  function round.start(n, commit)
    for _ = 1, n do
      local cmd = ("%s lua5.4 %s/bench/group.lua %s %s %s %s %s %s %d"):format(env54, ROOT, bs, topic, gid, protocol,
        commit, stopfile, GROUP_SECS)
      round.members[#round.members + 1] = spawn(cmd, GROUP_SECS + 30)
      round.states[#round.states + 1] = member_state()
    end
  end
  local function refresh()
    for i, p in ipairs(round.members) do
      absorb(round.states[i], p.read())
      if not round.states[i].done and not p.running() then
        absorb(round.states[i], p.read())
        if not round.states[i].done then
          error(("group member %d (%s) exited:\n%s"):format(i, protocol, p.stderr()))
        end
      end
    end
  end
  function round.wait(what, fn)
    while true do
      refresh()
      if fn(round.states) then return end
      if socket.gettime() > deadline then error(("%s group round: timed out waiting for %s"):format(protocol, what)) end
      socket.sleep(0.02)
    end
  end
  function round.finish()
    local f = assert(io.open(stopfile, "wb"))
    f:close()
    round.wait("every member's DONE", function(sts)
      for _, st in ipairs(sts) do if not st.done then return false end end
      return true
    end)
    os.remove(stopfile)
    for _, p in ipairs(round.members) do p.clean() end
  end
  return round
end

-- 3 lua-kafka members (processes started together) consume GROUP_N
-- messages: the rate from the first subscribe to the moment every
-- partition's last offset was first seen.
local function lua_group_rate(bs, topic, protocol)
  local out = {}
  for r = 0, GROUP_RUNS do
    local rd = lua_round(bs, topic, ("bench-lua-%s-%d-%d"):format(protocol, os.time(), r), protocol)
    rd.start(3, "commit")
    local function best(sts)
      local b = {}
      for _, st in ipairs(sts) do
        for p, v in pairs(st.pos) do
          if not b[p] or v[1] > b[p][1] or (v[1] == b[p][1] and v[2] < b[p][2]) then b[p] = v end
        end
      end
      return b
    end
    rd.wait(GROUP_N .. " messages", function(sts)
      local sum = 0
      for _, v in pairs(best(sts)) do sum = sum + v[1] end
      return sum == GROUP_N
    end)
    local t0, t1 = math.huge, 0
    for _, v in pairs(best(rd.states)) do t1 = math.max(t1, v[2]) end
    for _, st in ipairs(rd.states) do t0 = math.min(t0, st.joined) end
    rd.finish()
    if r > 0 then out[#out + 1] = ("group_%s\t100\tnone\t%.0f"):format(protocol, GROUP_N / (t1 - t0)) end
  end
  return table.concat(out, "\n") .. "\n"
end

-- Rebalance latency, lua-kafka: a first member alone, subscribe to first
-- message; then two more; once the 3 own 4 partitions each, a 4th (no
-- commits: moved partitions start at the beginning, so there is a message
-- at once).
local function lua_group_latency(bs, topic, protocol)
  local out = {}
  for r = 0, LAT_RUNS do
    local rd = lua_round(bs, topic, ("bench-lat-%s-%d-%d"):format(protocol, os.time(), r), protocol)
    rd.start(1, "nocommit")
    rd.wait("the first member's first message", function(sts) return sts[1].first ~= nil end)
    rd.start(2, "nocommit")
    rd.wait("3 members owning 4 partitions each", function(sts)
      for _, st in ipairs(sts) do if st.assigned ~= GROUP_PARTS / 3 then return false end end
      return true
    end)
    rd.start(1, "nocommit")
    rd.wait("the 4th member's first message", function(sts) return sts[4].first ~= nil end)
    local st1, st4 = rd.states[1], rd.states[4]
    rd.finish()
    if r > 0 then
      out[#out + 1] = ("join_first_%s\t100\tnone\t%.1f"):format(protocol, (st1.first - st1.joined) * 1000)
      out[#out + 1] = ("join_4th_%s\t100\tnone\t%.1f"):format(protocol, (st4.first - st4.joined) * 1000)
    end
  end
  return table.concat(out, "\n") .. "\n"
end

if REAL then
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
  lines(("mkdir -p %s && LD_PRELOAD= javac -nowarn -d %s -cp '%s' %s/bench/JavaBench.java"):format(jdir, jdir, cp, ROOT))
  local java = ("LD_PRELOAD= java -Xmx1g -cp '%s:%s' -Dlog4j2.configurationFile=file:%s/spec/support/kafka/peer-log4j2.properties"
    .. " JavaBench"):format(jdir, cp, ROOT)
  local rdk = ROOT .. "/build/bench/rdkafka_bench"
  local ok, err = pcall(function()
    for _, case in ipairs(REAL_CASES) do
      for _, codec in ipairs(REAL_CODECS) do
        local tag = ("%d-%d-%s-"):format(case.n, case.size, codec)
        local args = ("%d %d %d %s"):format(case.n, E2E_RUNS, case.size, codec)
        if want("e2e") then
          for r = 0, E2E_RUNS do
            rt.create_topic(admin, "real-lua-" .. tag .. r, 6, 1)
            rt.create_topic(admin, "real-jit-" .. tag .. r, 6, 1)
            rt.create_topic(admin, "real-java-" .. tag .. r, 6, 1)
          end
          collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-lua-%s %s"):format(env54, ROOT, bs, tag, args)))
          collect("real_luajit", lines(("%s luajit %s/bench/e2e.lua %s real-jit-%s %s"):format(envjit, ROOT, bs, tag, args)))
          collect("real_java", lines(("%s %s real-java-%s %s"):format(java, bs, tag, args)))
          if codec == "none" then
            -- the same over SASL_SSL, SCRAM-SHA-512 as alice (the harness's user)
            local stag = ("%d-%d-sasl-"):format(case.n, case.size)
            for r = 0, E2E_RUNS do
              rt.create_topic(admin, "real-lua-" .. stag .. r, 6, 1)
              rt.create_topic(admin, "real-java-" .. stag .. r, 6, 1)
            end
            local sbs = k.bootstrap.SASL_SSL
            collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-lua-%s %s sasl_ssl %s"):format(env54, ROOT,
              sbs, stag, args, sec_args)))
            collect("real_java", lines(("%s %s real-java-%s %s SASL_SSL %s"):format(java, sbs, stag, args, sec_args)))
          end
        end
        if codec == "none" and want("idempotence") then
          -- the idempotent producer (the default) beside enable_idempotence = false,
          -- lua-kafka and librdkafka, same run
          io.stderr:write(("idempotent and plain producers, %d x %d B, lua-kafka and librdkafka ...\n"):format(case.n,
            case.size))
          for _, mode in ipairs({ "idempotent", "plain" }) do
            for r = 0, E2E_RUNS do
              rt.create_topic(admin, "real-" .. mode .. "-" .. tag .. r, 6, 1)
              rt.create_topic(admin, "real-rdk-" .. mode .. "-" .. tag .. r, 6, 1)
            end
            collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-%s-%s %s %s"):format(env54, ROOT, bs, mode,
              tag, args, mode)))
            collect("real_rdkafka", lines(("%s %s real-rdk-%s-%s %d %d %d %s"):format(rdk, bs, mode, tag, case.n,
              E2E_RUNS, case.size, mode)))
          end
        end
        if codec == "none" and case.size == 100 and want("transactions") then
          -- transactions of TXN_MSGS messages, lua-kafka beside Java, same run
          io.stderr:write(("transactional producers, %d messages per transaction ...\n"):format(TXN_MSGS))
          for r = 0, E2E_RUNS do
            rt.create_topic(admin, "real-txn-lua-" .. tag .. r, 6, 1)
            rt.create_topic(admin, "real-txn-java-" .. tag .. r, 6, 1)
          end
          local targs = args .. " transactional " .. TXN_MSGS
          collect("real_lua54", lines(("%s lua5.4 %s/bench/e2e.lua %s real-txn-lua-%s %s"):format(env54, ROOT, bs,
            tag, targs)))
          collect("real_java", lines(("%s %s real-txn-java-%s %s"):format(java, bs, tag, targs)))
        end
      end
    end
    if want("e2e") then
      -- connection set-up of lua-kafka, TCP + TLS + ApiVersions + SASL: ms per
      -- connection, SETUP_CONNECTS in a row, the median of the runs
      local sasl = require "kafka.sasl"
      local connection = require "kafka.connection"
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
          if r > 0 then
            out[#out + 1] = ("setup_%s\t0\tnone\t%.3f"):format(proto_name, (socket.gettime() - t0) * 1000 / SETUP_CONNECTS)
          end
        end
        collect("real_lua54", table.concat(out, "\n"))
      end
    end
    if not want("groups") then return end

    -- Consumer groups: a 12-partition topic of GROUP_N x 100 B read by 3
    -- members (lua-kafka: 3 processes; Java: 3 KafkaConsumers, a thread
    -- each, in one JVM), a fresh group per round; the rebalance latency on
    -- a topic of 12,000 messages. Every protocol the broker speaks.
    local c = assert(admin:any_broker())
    PROTOCOLS[1] = "classic"
    local hv = c:version(kafka.proto.api.ConsumerGroupHeartbeat)
    if hv and hv >= 1 then PROTOCOLS[2] = "consumer" end
    local gtopic, ltopic = ("bench-group-%d-%d"):format(GROUP_N, os.time()), ("bench-lat-%d"):format(os.time())
    rt.create_topic(admin, gtopic, GROUP_PARTS, 1)
    rt.create_topic(admin, ltopic, GROUP_PARTS, 1)
    local pool = {}
    for i = 1, 1000 do pool[i] = tostring(i) .. ("x"):rep(100 - #tostring(i)) end
    for _, t in ipairs({ { gtopic, GROUP_N }, { ltopic, LAT_N } }) do
      local p = kafka.producer.new(admin, { delivery_reports = "errors" })
      -- (round robin: the sticky partitioner would put a fast burst into a few partitions)
      for i = 1, t[2] do assert(p:send(t[1], pool[i % 1000 + 1], { partition = i % GROUP_PARTS })) end
      local _, failed, delivered = p:flush()
      assert(failed == 0 and delivered == t[2], ("filling %s: %d failed, %d delivered"):format(t[1], failed, delivered))
    end
    for _, protocol in ipairs(PROTOCOLS) do
      io.stderr:write(("consumer groups (%s), 3 members, %d messages, %d rounds; rebalance latency, %d rounds ...\n")
        :format(protocol, GROUP_N, GROUP_RUNS, LAT_RUNS))
      collect("real_lua54", lua_group_rate(bs, gtopic, protocol))
      collect("real_java", lines(("%s group %s %s bench-java-%d- %s %d %d 3 100 %d"):format(java, bs, gtopic, os.time(),
        protocol, GROUP_N, GROUP_RUNS, GROUP_SECS)))
      collect("real_lua54", lua_group_latency(bs, ltopic, protocol))
      collect("real_java", lines(("%s grouplat %s %s bench-javalat-%d- %s %d %d 100 %d"):format(java, bs, ltopic,
        os.time(), protocol, GROUP_PARTS, LAT_RUNS, GROUP_SECS)))
    end
  end)
  kill_all()
  admin:close()
  k:stop()
  if not ok then error(err, 0) end
end

-- the consume matrix (issue 33) on a broker of its own, after the others;
-- a failure is written into its section and raised once the table is out
local consume_md, consume_err
if os.getenv("BENCH_REAL") ~= "0" and want("consume") then
  local ok, md = pcall(dofile(ROOT .. "/bench/consume.lua"), { root = ROOT, env54 = env54, envjit = envjit })
  if ok then consume_md = md else consume_err, consume_md = md, "## Consume matrix (issue 33)\n\nfailed: " .. tostring(md) end
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
  row("encode_values", size, "none", "kp", "encode_batch", "encode_batch", "encode v2 batch (encode_records, values)")
  row("encode_request", size, "none", "kp", "encode_batch", "encode_batch", "encode Produce request (message array)")
  local cf, fl = results["call_floor " .. size .. " none"] or {}, results["encode_batch " .. size .. " none"] or {}
  rows[#rows + 1] = ("| the call alone in proto.batch's row: a builder method doing no work (b:bytes_size, the same"
    .. " arguments) | %d B | none | %s | %s | - | - | %s |"):format(size, M(cf.lua54), M(cf.luajit), M(fl.floor))
  for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
    row("decode_tables", size, codec, "kp", nil, nil, "decode Fetch into tables")
  end
  row("decode_columns", size, "none", "kp", "decode_tables", "decode_tables", "decode records (decode_columns)")
  row("decode_poll_rows", size, "none", "kp", "decode_tables", "decode_tables",
    "decode a fetched partition as poll does (a message table each)")
  row("decode_poll_columns", size, "none", "kp", "decode_tables", "decode_tables",
    "decode a fetched partition as poll_batch does (columns)")
  for _, a in ipairs({ { "alloc_floor", "for scale beside decoding into tables: the messages alone, made in Lua,"
    .. " nothing decoded (a table of offset, timestamp, value and a fresh value string each)" }, { "alloc_floor_consumer", "the same with a"
    .. " consumer's 6 fields (topic, partition, high_watermark beside them)" } }) do
    local af, dt = results[a[1] .. " " .. size .. " none"] or {}, results["decode_tables " .. size .. " none"] or {}
    rows[#rows + 1] = ("| %s | %d B | none | %s | %s | - | - | %s |"):format(a[2], size, M(af.lua54), M(af.luajit),
      M(dt.floor))
  end
end
local e2e, e2e_mem, e2e_gc = {}, {}, {}
for _, case in ipairs(MOCK_CASES) do
  for _, codec in ipairs(MOCK_CODECS) do
    for _, op in ipairs({ "produce", "consume", "consume_batch" }) do
      local r = results[("%s %d %s"):format(op, case.size, codec)] or {}
      -- poll_batch's row beside librdkafka's consume (the same data)
      local rd = (results[("%s %d %s"):format(op == "consume_batch" and "consume" or op, case.size, codec)] or {}).rdkafka
      e2e[#e2e + 1] = ("| %s %d x %d B %s | %s msg/s, %.0f MB/s | %s msg/s | %s msg/s, %.0f MB/s | %s | %s |"):format(
        op == "consume_batch" and "consume (poll_batch)" or op, case.n, case.size, codec, M(r.lua54),
        (r.lua54 or 0) * case.size / 1e6, M(r.luajit), M(rd), (rd or 0) * case.size / 1e6, ratio(r.lua54, rd),
        ratio(r.luajit, rd))
    end
    if gc_case(codec) then
      for _, op in ipairs({ "produce", "consume" }) do
        local r = results[("%s %d %s"):format(op, case.size, codec)] or {}
        e2e_gc[#e2e_gc + 1] = ("| %s %d x %d B %s | %s msg/s | %s msg/s | %s | %s |"):format(op, case.n, case.size,
          codec, M(r.lua54), M(r.lua54inc), ratio(r.lua54inc, r.lua54), ratio(r.lua54inc, r.rdkafka))
      end
    end
    local v = results[("vmhwm %d %s"):format(case.size, codec)] or {}
    local function mb(kb) return kb and ("%.0f MB"):format(kb / 1024) or "-" end
    e2e_mem[#e2e_mem + 1] = ("| %d x %d B %s | %s | %s | %s | %s |"):format(case.n, case.size, codec, mb(v.lua54),
      mb(v.luajit), mb(v.rdkafka), ratio(v.lua54, v.rdkafka))
  end
end

local real = {}
if REAL then
  for _, case in ipairs(REAL_CASES) do
    for _, codec in ipairs(REAL_CODECS) do
      for _, op in ipairs({ "produce", "consume", "consume_batch" }) do
        local r = results[op .. " " .. case.size .. " " .. codec] or {}
        -- poll_batch's row beside Java's consume (the same data)
        local jv = (results[(op == "consume_batch" and "consume" or op) .. " " .. case.size .. " " .. codec] or {}).real_java
        real[#real + 1] = ("| %s %d x %d B %s (acks=all) | %s msg/s, %.0f MB/s | %s msg/s | %s msg/s, %.0f MB/s | %s | %s |")
          :format(op == "consume_batch" and "consume (poll_batch)" or op, case.n, case.size, codec, M(r.real_lua54),
            (r.real_lua54 or 0) * case.size / 1e6, M(r.real_luajit), M(jv), (jv or 0) * case.size / 1e6,
            ratio(r.real_lua54, jv), ratio(r.real_luajit, jv))
      end
    end
  end
end

-- idempotence (lua-kafka beside librdkafka), transactions (beside Java),
-- consumer groups (beside Java)
local idem_rows, txn_rows, group_rows = {}, {}, {}
-- rates below 0.1 M in thousands (small runs, transactions, groups)
local function R(x) return (x and x < 1e5) and ("%.1f k"):format(x / 1e3) or M(x) end
if REAL then
  for _, case in ipairs(REAL_CASES) do
    local i = results["produce_idempotent " .. case.size .. " none"] or {}
    local pl = results["produce_plain " .. case.size .. " none"] or {}
    idem_rows[#idem_rows + 1] = ("| produce %d x %d B, idempotent | %s msg/s | %s msg/s | %s |"):format(case.n, case.size,
      R(i.real_lua54), R(i.real_rdkafka), ratio(i.real_lua54, i.real_rdkafka))
    idem_rows[#idem_rows + 1] = ("| produce %d x %d B, enable_idempotence = false | %s msg/s | %s msg/s | %s |"):format(
      case.n, case.size, R(pl.real_lua54), R(pl.real_rdkafka), ratio(pl.real_lua54, pl.real_rdkafka))
    idem_rows[#idem_rows + 1] = ("| produce %d x %d B, idempotent / not idempotent | %s | %s | |"):format(case.n,
      case.size, ratio(i.real_lua54, pl.real_lua54), ratio(i.real_rdkafka, pl.real_rdkafka))
  end
  local tx = results["produce_transactional 100 none"] or {}
  local function txs(x) return x and ("%s msg/s, %.1f transactions/s"):format(R(x), x / TXN_MSGS) or "-" end
  txn_rows[#txn_rows + 1] = ("| produce %d x 100 B, %d messages per transaction | %s | %s | %s |"):format(E2E_N,
    TXN_MSGS, txs(tx.real_lua54), txs(tx.real_java), ratio(tx.real_lua54, tx.real_java))
  local txc = results["consume_transactional 100 none"] or {}
  txn_rows[#txn_rows + 1] = ("| read back, read_committed | %s msg/s | %s msg/s | %s |"):format(R(txc.real_lua54),
    R(txc.real_java), ratio(txc.real_lua54, txc.real_java))
  local function ms(x) return x and ("%.0f ms"):format(x) or "-" end
  for _, protocol in ipairs(PROTOCOLS) do
    local g = results["group_" .. protocol .. " 100 none"] or {}
    group_rows[#group_rows + 1] = ("| %s: 3 members consume %d x 100 B (first subscribe to last message) | %s msg/s | %s msg/s | %s |")
      :format(protocol, GROUP_N, R(g.real_lua54), R(g.real_java), ratio(g.real_lua54, g.real_java))
  end
  for _, protocol in ipairs(PROTOCOLS) do
    local f1 = results["join_first_" .. protocol .. " 100 none"] or {}
    local f4 = results["join_4th_" .. protocol .. " 100 none"] or {}
    group_rows[#group_rows + 1] = ("| %s: a first member, subscribe to its first message | %s | %s | %s |"):format(
      protocol, ms(f1.real_lua54), ms(f1.real_java), ratio(f1.real_lua54, f1.real_java))
    group_rows[#group_rows + 1] = ("| %s: a 4th member joining a group of 3, subscribe to its first message | %s | %s | %s |")
      :format(protocol, ms(f4.real_lua54), ms(f4.real_java), ratio(f4.real_lua54, f4.real_java))
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
  local compat = r("nginx_rps 200 compat")
  ngx_rows[#ngx_rows + 1] = ("| requests/s, the same message through the lua-resty-kafka drop-in (async) | %s req/s"
    .. " | %s of the plain rate |"):format(K(compat), ratio(compat, plain))
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

Machine: %s, %s cores; %s. All peers measured in the same run (`make
bench`). Codec rows: messages per CPU-second, the median of %d runs after a
warm-up, 10,000 messages per run. Floor: the same bytes through memcpy +
compression + CRC-32C in C (bench/floor.c), what the hardware and libraries
allow. End to end: wall clock, the median of %d runs after a warm-up, against
librdkafka's mock cluster (3 brokers, 200 partitions) on loopback. This
run's sizes: `BENCH_E2E_N=%d BENCH_E2E_RUNS=%d BENCH_GROUP_N=%d
BENCH_GROUP_RUNS=%d BENCH_LAT_RUNS=%d BENCH_TXN_MSGS=%d make bench`.
]]):format(cpu, lines("nproc"):gsub("%s+", ""), os.date("!%Y-%m-%d"), CODEC_RUNS, E2E_RUNS, E2E_N, E2E_RUNS, GROUP_N,
  GROUP_RUNS, LAT_RUNS, TXN_MSGS)
local t = { header }
if ONLY then t[#t + 1] = ("(BENCH_ONLY=%s: only these parts)"):format(ONLY) end
if want("codec") then
  t[#t + 1] = "| operation | size | codec | lua-kafka Lua 5.4 | lua-kafka LuaJIT | peer | ratio (5.4/peer) | floor |"
  t[#t + 1] = "|---|---|---|---|---|---|---|---|"
  for _, r in ipairs(rows) do t[#t + 1] = r end
end
if want("mock") then
  t[#t + 1] = ""
  t[#t + 1] = "| end to end (mock, acks=all) | lua-kafka Lua 5.4 | lua-kafka LuaJIT | librdkafka 2.0.2 | ratio (5.4) "
    .. "| ratio (LuaJIT) |"
  t[#t + 1] = "|---|---|---|---|---|---|"
  for _, r in ipairs(e2e) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = "Peak memory of each client's process over its runs of a case (VmHWM; produce and consume, the"
  t[#t + 1] = "warm-up and every run; ratio: Lua 5.4 / librdkafka):"
  t[#t + 1] = ""
  t[#t + 1] = "| peak memory (VmHWM) | lua-kafka Lua 5.4 | lua-kafka LuaJIT | librdkafka 2.0.2 | ratio |"
  t[#t + 1] = "|---|---|---|---|---|"
  for _, r in ipairs(e2e_mem) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = "Lua 5.4's collector: the lua5.4 interpreter starts in generational mode (the columns above);"
  t[#t + 1] = "the same runs with collectgarbage(\"incremental\") first (docs/development.md: Benchmarks), same mock and run:"
  t[#t + 1] = ""
  t[#t + 1] = "| Lua 5.4 GC mode (mock) | generational (lua5.4's default) | incremental | incremental / generational "
    .. "| incremental / librdkafka |"
  t[#t + 1] = "|---|---|---|---|---|"
  for _, r in ipairs(e2e_gc) do t[#t + 1] = r end
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
  t[#t + 1] = "| end to end, real broker | lua-kafka (Lua 5.4) | lua-kafka (LuaJIT) | Java kafka-clients " .. rk.MAIN
    .. " | ratio (5.4) | ratio (LuaJIT) |"
  t[#t + 1] = "|---|---|---|---|---|---|"
  for _, r in ipairs(real) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = "The cost of TLS and SASL: the uncompressed cases over the broker's SASL_SSL listener (SCRAM-SHA-512,"
  t[#t + 1] = "the CA verified and the host name checked; lua-kafka's TLS is OpenSSL's libssl in C, Java's the JDK's), each"
  t[#t + 1] = "client right after its PLAINTEXT runs, the same settings; ratio: SASL_SSL / PLAINTEXT rate of the"
  t[#t + 1] = ("same client. Connection set-up: lua-kafka, %d connections in a row (bench/tls.lua measures the other"
    .. " protocols):"):format(SETUP_CONNECTS)
  t[#t + 1] = ""
  t[#t + 1] = "| TLS cost, real broker (msg/s) | lua-kafka PLAINTEXT | lua-kafka SASL_SSL | lua-kafka ratio | Java PLAINTEXT"
    .. " | Java SASL_SSL | Java ratio | lua/Java over SASL_SSL |"
  t[#t + 1] = "|---|---|---|---|---|---|---|---|"
  for _, r in ipairs(tls_rows) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = "Idempotence, the same broker and run, topics of 6 partitions, acks=all: lua-kafka at its defaults"
  t[#t + 1] = "(enable_idempotence true, linger_ms 100, 1 MiB batches, 5 in flight) beside librdkafka 2.0.2"
  t[#t + 1] = "(bench/rdkafka_bench.c, tuned for throughput as its INTRODUCTION.md advises: linger.ms 100,"
  t[#t + 1] = "batch.size 1000000, batch.num.messages 100000, queue.buffering.max.messages 2000000,"
  t[#t + 1] = "queue.buffering.max.kbytes 2000000; enable.idempotence true, which sets"
  t[#t + 1] = "max.in.flight 5), each also with idempotence off:"
  t[#t + 1] = ""
  t[#t + 1] = "| idempotence, real broker | lua-kafka (Lua 5.4) | librdkafka 2.0.2 | ratio |"
  t[#t + 1] = "|---|---|---|---|"
  for _, r in ipairs(idem_rows) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = ("Transactions, the same broker and run: one transaction per %d messages (begin, %d sends,"):format(TXN_MSGS,
    TXN_MSGS)
  t[#t + 1] = "commit; the producer's set-up, InitProducerId with the transactional id, before the clock), lua-kafka"
  t[#t + 1] = "at its defaults beside Kafka's Java client (the settings above, transactional.id set), then read back"
  local tv = (results["transaction_version 100 none"] or {}).real_lua54
  t[#t + 1] = ("read_committed by each one's consumer; lua-kafka ran transactions v%s"):format(tv or "-")
  t[#t + 1] = tv == 2 and "(KIP-890: the cluster finalized transaction.version 2, no AddPartitionsToTxn):"
    or "(KIP-98's flow: AddPartitionsToTxn before a partition's first batch):"
  t[#t + 1] = ""
  t[#t + 1] = "| transactions, real broker | lua-kafka (Lua 5.4) | Java kafka-clients " .. rk.MAIN .. " | ratio |"
  t[#t + 1] = "|---|---|---|---|"
  for _, r in ipairs(txn_rows) do t[#t + 1] = r end
  t[#t + 1] = ""
  t[#t + 1] = ("Consumer groups, the same broker and run: a topic of %d partitions holding %d x 100 B, a fresh"):format(
    GROUP_PARTS, GROUP_N)
  t[#t + 1] = ("group per round (median of %d): 3 lua-kafka members, each its own process (bench/group.lua), started"):format(
    GROUP_RUNS)
  t[#t + 1] = "together, beside 3 Java KafkaConsumers in one JVM (a thread each, max.poll.records 10000,"
  t[#t + 1] = "max.partition.fetch.bytes 8 MiB); the rate is the topic's size over the time from the first"
  t[#t + 1] = "subscribe to the moment the last partition's last message arrived. Rebalance latency (median of"
  t[#t + 1] = ("%d rounds, a topic of %d x 100 B): from a member's subscribe to its first message, for a first"):format(
    LAT_RUNS, LAT_N)
  t[#t + 1] = "member alone and for a 4th member joining once 3 members own 4 partitions each (no commits, so the"
  t[#t + 1] = "partitions it gets start at the beginning and have messages at once). Group settings are both"
  t[#t + 1] = "clients' defaults (classic: range assignor, heartbeat 3 s, session 45 s; consumer: the broker's"
  t[#t + 1] = "assignor and heartbeat interval, here group.consumer.heartbeat.interval.ms 1 s), auto offset reset"
  t[#t + 1] = "earliest, group.initial.rebalance.delay.ms 0 on the broker (the spec harness's setting):"
  t[#t + 1] = ""
  t[#t + 1] = "| consumer groups, real broker | lua-kafka (Lua 5.4) | Java kafka-clients " .. rk.MAIN .. " | ratio |"
  t[#t + 1] = "|---|---|---|---|"
  for _, r in ipairs(group_rows) do t[#t + 1] = r end
end
if consume_md then t[#t + 1] = "\n" .. consume_md end
local text = table.concat(t, "\n") .. "\n"
io.write(text)
local f = assert(io.open(ROOT .. (ONLY and "/build/bench/results-only.md" or "/bench/results.md"), "w"))
f:write(text)
f:close()
if consume_err then error(consume_err, 0) end
