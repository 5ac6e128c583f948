-- Other clients against kafka.mock on TCP: kcat (librdkafka), kafka-python
-- and Kafka's Java client, each talking to bin/kafka-mock run as its own
-- process (the spec process blocks while an external client runs).
local socket = require "socket"
local kafka = require "kafka"
local H = require "support.helpers"
local full_it = H.lite() and pending or it -- the first Lua only

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."
local lua = rawget(_G, "jit") and "luajit" or ("lua" .. _VERSION:match("%d+%.%d+"))

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  local ok = p:close()
  return ok, out
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function lines_of(s)
  local t = {}
  for l in (s or ""):gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- starts bin/kafka-mock; returns {bootstrap=, pid=}
local function start_mock(args)
  local pf, pidf = os.tmpname(), os.tmpname()
  os.remove(pf)
  local log = os.tmpname()
  os.execute(("sh -c 'echo $$ > %s; exec %s %s/bin/kafka-mock %s --port-file %s --seconds 900' >%s 2>&1 &")
    :format(pidf, lua, root, args, pf, log))
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local s = read(pf)
    if s and s:find("\n") then
      os.remove(pf)
      return { bootstrap = s:match("[^\n]+"), pid = tonumber(read(pidf)), log = log, pidf = pidf }
    end
    socket.sleep(0.02)
  end
  error("kafka-mock did not start: " .. tostring(read(log)))
end

local function stop_mock(m)
  if m and m.pid then
    os.execute("kill " .. m.pid .. " 2>/dev/null")
    os.remove(m.pidf)
    os.remove(m.log)
    m.pid = nil
  end
end

-- a background command; returns {pid=, out=, err=}
local function background(cmd)
  local pidf, out, err = os.tmpname(), os.tmpname(), os.tmpname()
  os.execute(("sh -c 'echo $$ > %s; exec %s %s' >%s 2>%s &"):format(pidf, H.closefds, cmd, out, err))
  local pid
  for _ = 1, 100 do
    pid = tonumber(read(pidf))
    if pid then break end
    socket.sleep(0.01)
  end
  os.remove(pidf)
  return { pid = pid, out = out, err = err }
end

local function kill(bg)
  if bg.pid then
    os.execute("kill " .. bg.pid .. " 2>/dev/null")
    bg.pid = nil
  end
end

local function wait_for(fn, seconds)
  local deadline = socket.gettime() + seconds
  while socket.gettime() < deadline do
    if fn() then return true end
    socket.sleep(0.1)
  end
  return false
end

local function has(cmd)
  return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == true
    or os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == 0
end

describe("kcat against kafka-mock on TCP", function()
  local m
  setup(function() m = start_mock("--brokers 3 --topic codecs:3 --topic grp:6 --session-timeout-min 1000") end)
  teardown(function() stop_mock(m) end)

  it("produces every codec with headers and consumes them back with CRC checks", function()
    for _, codec in ipairs { "none", "gzip", "snappy", "lz4", "zstd" } do
      local ok, out = sh(("printf 'k1:%s-a\\nk2:%s-b\\nk3:%s-c\\n' | kcat -b %s -P -t codecs -p 1 -K : -z %s -H h1=v1 -H codec=%s")
        :format(codec, codec, codec, m.bootstrap, codec, codec))
      assert(ok, out)
    end
    local ok, out = sh(("kcat -b %s -C -t codecs -p 1 -o beginning -e -q -X check.crcs=true -f '%%o|%%k|%%s|%%h\\n'")
      :format(m.bootstrap))
    assert(ok, out)
    local want = {}
    for i, codec in ipairs { "none", "gzip", "snappy", "lz4", "zstd" } do
      for j, x in ipairs { "a", "b", "c" } do
        want[#want + 1] = ("%d|k%d|%s-%s|h1=v1,codec=%s"):format((i - 1) * 3 + j - 1, j, codec, x, codec)
      end
    end
    assert.are.same(want, lines_of(out))
    -- and lua-kafka reads the same log over TCP, batch by batch as kcat wrote it
    local client = kafka.client.new { brokers = m.bootstrap }
    local c = kafka.consumer.new(client, {})
    assert(c:assign { { topic = "codecs", partition = 1, offset = "earliest" } })
    local got = {}
    for _ = 1, 20 do
      for _, msg in ipairs(assert(c:poll(100))) do got[#got + 1] = msg end
      if #got >= 15 then break end
    end
    assert.are.equal(15, #got)
    assert.are.equal("zstd-c", got[15].value)
    assert.are.same({ { key = "h1", value = "v1" }, { key = "codec", value = "zstd" } }, got[15].headers)
    client:close()
  end)

  it("kcat -G: two members of a classic group split 6 partitions after a rebalance, and consume every message once",
    function()
    local function member(name)
      return background(("timeout 40 kcat -b %s -G kgroup -X session.timeout.ms=6000 -X heartbeat.interval.ms=200 "
        .. "-X auto.offset.reset=earliest -u -f \"%s %%p %%o %%s\\n\" grp"):format(m.bootstrap, name))
    end
    local function assigned(bg)
      local last
      for line in (read(bg.err) or ""):gmatch("[^\n]+") do
        local a = line:match("rebalanced %b(): assigned: (.*)")
        if a then last = a end
        if line:find("revoked", 1, true) then last = nil end
      end
      if not last then return nil end
      local parts = {}
      for p in last:gmatch("grp %[(%d+)%]") do parts[#parts + 1] = tonumber(p) end
      table.sort(parts)
      return parts
    end
    local a = member("A")
    local b
    local ok, err = pcall(function()
      assert.is_true(wait_for(function() local x = assigned(a) return x and #x == 6 end, 20), read(a.err))
      b = member("B")
      assert.is_true(wait_for(function()
        local x, y = assigned(a), assigned(b)
        return x and y and #x == 3 and #y == 3
      end, 25), "no rebalance: " .. tostring(read(a.err)) .. tostring(read(b.err)))
      local pa, pb = assigned(a), assigned(b)
      local all = {}
      for _, p in ipairs(pa) do all[#all + 1] = p end
      for _, p in ipairs(pb) do all[#all + 1] = p end
      table.sort(all)
      assert.are.same({ 0, 1, 2, 3, 4, 5 }, all)
      -- 60 messages, 10 per partition
      local client = kafka.client.new { brokers = m.bootstrap }
      local p = kafka.producer.new(client, {})
      for i = 1, 60 do assert(p:send("grp", "m" .. i, { partition = i % 6 })) end
      local _, failed = p:flush()
      assert.are.equal(0, failed)
      client:close()
      local function lines()
        local t = {}
        for _, bg in ipairs { a, b } do for _, l in ipairs(lines_of(read(bg.out))) do t[#t + 1] = l end end
        return t
      end
      assert.is_true(wait_for(function() return #lines() >= 60 end, 15), "consumed " .. #lines())
      socket.sleep(0.5)
      local seen, owner = {}, {}
      for _, p2 in ipairs(pa) do owner[p2] = "A" end
      for _, p2 in ipairs(pb) do owner[p2] = "B" end
      for _, l in ipairs(lines()) do
        local who, part, off, v = l:match("^(%u) (%d+) (%d+) (%S+)$")
        part = tonumber(part)
        assert.are.equal(owner[part], who)
        assert.is_nil(seen[v], "twice: " .. v)
        seen[v] = tonumber(off)
      end
      local n = 0
      for i = 1, 60 do
        assert.are.equal(math.floor((i - (i % 6 == 0 and 6 or i % 6)) / 6), seen["m" .. i])
        n = n + 1
      end
      assert.are.equal(60, n)
    end)
    kill(a)
    if b then kill(b) end
    for _, bg in ipairs { a, b } do
      if bg then os.remove(bg.out) os.remove(bg.err) end
    end
    assert(ok, err)
  end)
end)

describe("kafka-python against kafka-mock on TCP", function()
  it("produces with headers (api_version auto-detected), consumes in a group and commits", function()
    local m = start_mock("--brokers 2 --topic py:3")
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
import sys
from kafka import KafkaProducer, KafkaConsumer, TopicPartition
bs = sys.argv[1]
p = KafkaProducer(bootstrap_servers=bs, acks='all')
futs = [p.send('py', key=b'k%d' % i, value=b'v%d' % i, partition=i % 3, headers=[('i', b'%d' % i)]) for i in range(30)]
p.flush()
for i, f in enumerate(futs):
    md = f.get(timeout=10)
    print('ACK', i, md.partition, md.offset)
print('VERSION', '.'.join(map(str, p.config['api_version'])))
p.close()
c = KafkaConsumer('py', bootstrap_servers=bs, group_id='pyg', auto_offset_reset='earliest',
                  enable_auto_commit=False, consumer_timeout_ms=8000)
got = 0
for msg in c:
    print('REC', msg.partition, msg.offset, msg.key.decode(), msg.value.decode(), dict(msg.headers)['i'].decode())
    got += 1
    if got == 30:
        break
c.commit()
for part in range(3):
    print('COMMITTED', part, c.committed(TopicPartition('py', part)))
c.close()
print('DONE')
]])
    f:close()
    local ok, out = sh(("timeout 120 /usr/bin/python3 %s %s"):format(script, m.bootstrap))
    os.remove(script)
    stop_mock(m)
    assert(ok, out)
    local acks, recs, committed = {}, {}, {}
    local version
    for _, l in ipairs(lines_of(out)) do
      local i, part, off = l:match("^ACK (%d+) (%d+) (%d+)$")
      if i then acks[tonumber(i)] = { tonumber(part), tonumber(off) } end
      local rp, ro, k, v, h = l:match("^REC (%d+) (%d+) (%S+) (%S+) (%S+)$")
      if rp then recs[v] = { tonumber(rp), tonumber(ro), k, h } end
      local cp, co = l:match("^COMMITTED (%d+) (%d+)$")
      if cp then committed[tonumber(cp)] = tonumber(co) end
      version = version or l:match("^VERSION (%S+)$")
    end
    assert.matches("DONE", out)
    assert.are.equal("2.4.0", version) -- kafka-python's guess from the ApiVersions the mock advertises
    for i = 0, 29 do
      assert.are.same({ i % 3, math.floor(i / 3) }, acks[i])
      assert.are.same({ i % 3, math.floor(i / 3), "k" .. i, tostring(i) }, recs["v" .. i])
    end
    assert.are.same({ [0] = 10, [1] = 10, [2] = 10 }, committed)
  end)
end)

describe("Kafka's Java client against kafka-mock on TCP", function()
  full_it("its idempotent producer (every codec) and its consumer, through Peer.java", function()
    if not has("java") then
      pending("no java")
      return
    end
    local rk = require "support.realkafka"
    local m = start_mock("--brokers 3")
    local ok, err = pcall(function()
      local total = 0
      local codecs = { "none", "gzip", "snappy", "lz4", "zstd" }
      -- one JVM: each codec's produce, then its consume
      local cmds = {}
      for _, codec in ipairs(codecs) do
        cmds[#cmds + 1] = { "produce", "java-" .. codec, 40, codec, "idempotent" }
        cmds[#cmds + 1] = { "consume", "java-" .. codec, 40, 30 }
      end
      local out = rk.java_chain(cmds, { bootstrap = m.bootstrap, timeout = 240,
        props = { ["request.timeout.ms"] = "10000" } })
      for ci = 1, #codecs do
        local lines = out[2 * ci - 1]
        local seen = {}
        for _, l in ipairs(lines) do
          local part, off, i = l:match("^ACK (%d+) (%d+) (%d+)$")
          assert(part, l)
          seen[#seen + 1] = { tonumber(part), tonumber(off), tonumber(i) }
        end
        assert.are.equal(40, #seen)
        total = total + #seen
        local recs = out[2 * ci]
        assert.are.equal(40, #recs)
        local by_key = {}
        for _, l in ipairs(recs) do
          local part, off, ts, tstype, key, value, headers = l:match("^REC (%d+) (%d+) (%d+) (%d+) (%S+) (%S+) (%S+)$")
          assert(part, l)
          by_key[rk.unhex(key)] = { tonumber(part), tonumber(off), tonumber(ts), tonumber(tstype), rk.unhex(value), headers }
        end
        for _, s in ipairs(seen) do
          local i = s[3]
          local r = by_key["k" .. i]
          assert(r, "record k" .. i .. " not consumed")
          assert.are.equal(s[1], r[1])
          assert.are.equal(s[2], r[2])
          assert.are.equal(1700000000000 + i, r[3])
          assert.are.equal(0, r[4]) -- CreateTime
          assert.are.equal("v" .. i .. "-" .. ("x"):rep(i % 7 * 40), r[5])
          assert.are.equal(rk.hex("i") .. "=" .. rk.hex(tostring(i)) .. "," .. rk.hex("n") .. "=-", r[6])
        end
      end
      assert.are.equal(200, total)
    end)
    stop_mock(m)
    assert(ok, err)
  end)
end)
