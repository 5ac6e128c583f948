-- The lua-resty-kafka drop-in (compat/resty/kafka/, the rock
-- lua-resty-kafka-compat): code written for lua-resty-kafka 0.23, unchanged,
-- inside nginx (Debian's nginx + lua-nginx-module, LuaJIT 2.1) against real
-- Kafka brokers of every version the suite runs (support.realkafka; 4.x
-- removed the Produce versions the original writes). The scenarios are the
-- original's own t/producer.t and t/basic-consumer.t, its synopsis, and
-- APISIX kafka-logger's calls; what reached Kafka is read back by Kafka's
-- Java client. Needs the LuaJIT build (make LUA=luajit; `make test` does it).
local H = require "support.helpers"
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local socket = require "socket"
local http = require "socket.http"
local url = require "socket.url"

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."
if root:sub(1, 1) ~= "/" then root = os.getenv("PWD") .. "/" .. root end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function have_nginx()
  local f = io.open("/usr/lib/nginx/modules/ngx_http_lua_module.so")
  if f then f:close() end
  return f ~= nil and sh("command -v nginx >/dev/null 2>&1")
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

if not rk.main() then return end

-- start_nginx(modules) -> an nginx running spec/nginx/compat.conf.in with
-- resty.kafka.* taken from modules (the drop-in's compat/, or the original's
-- lib/): {port, prefix, get(path, args), errlog(), stop()}
local function start_nginx(modules)
  local s = socket.bind("127.0.0.1", 0)
  local _, p = s:getsockname()
  s:close()
  local ng = { port = tonumber(p), prefix = os.tmpname() }
  os.remove(ng.prefix)
  assert(sh(("mkdir -p %s/conf %s/logs %s/tmp"):format(ng.prefix, ng.prefix, ng.prefix)))
  local conf = read(root .. "/spec/nginx/compat.conf.in")
  conf = conf:gsub("@MODULES@", modules):gsub("@ROOT@", root):gsub("@PORT@", tostring(ng.port))
    :gsub("@USER@", H.is_root() and "user root;" or "")
  local f = assert(io.open(ng.prefix .. "/conf/nginx.conf", "w"))
  f:write(conf)
  f:close()
  local cmd = ("nginx -p %s -c conf/nginx.conf -e logs/error.log"):format(ng.prefix)
  function ng.errlog() return read(ng.prefix .. "/logs/error.log") end
  function ng.stop()
    sh(cmd .. " -s stop 2>/dev/null")
    local deadline = socket.gettime() + 10
    while read(ng.prefix .. "/logs/nginx.pid") ~= "" and socket.gettime() < deadline do socket.sleep(0.05) end
    sh("rm -rf " .. ng.prefix)
  end
  function ng.get(path, q)
    local t = {}
    for k, v in pairs(q or {}) do t[#t + 1] = k .. "=" .. url.escape(tostring(v)) end
    table.sort(t)
    local body, code = http.request(("http://127.0.0.1:%d%s?%s"):format(ng.port, path, table.concat(t, "&")))
    assert(body, code)
    if code ~= 200 then error(("HTTP %s for %s: %s\n%s"):format(tostring(code), path, body, ng.errlog())) end
    return body
  end
  assert(sh(cmd), "nginx did not start: " .. ng.errlog())
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local c = socket.tcp()
    c:settimeout(0.2)
    local ok = c:connect("127.0.0.1", ng.port)
    c:close()
    if ok then return ng end
    socket.sleep(0.05)
  end
  ng.stop()
  error("nginx does not listen: " .. ng.errlog())
end

-- no "[error]" or aborted Lua thread in an nginx's log but the allowed
local function assert_log_clean(ng, allowed)
  for line in ng.errlog():gmatch("[^\n]+") do
    if line:find("[error]", 1, true) or line:find("[alert]", 1, true) or line:find("lua entry thread aborted", 1, true) then
      local ok = false
      for _, a in ipairs(allowed or {}) do ok = ok or line:find(a, 1, true) ~= nil end
      if not ok then error("nginx error log: " .. line, 3) end
    end
  end
end

local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end

-- Kafka's Java consumer reads the topic back: {value = count}, {value = partition}, keys
-- (hex), {value = timestamp}
local function java_read(k, topic, n)
  local lines = rk.java({ "consume", topic, n, 30 }, { bootstrap = k.bootstrap.PLAINTEXT })
  local seen, part, keys, ts = {}, {}, {}, {}
  for _, l in ipairs(lines) do
    local p, t, key, value = l:match("^REC (%d+) %d+ (%-?%d+) %d+ (%S+) (%S+) ")
    if p then
      value = value == "." and "" or unhex(value)
      seen[value] = (seen[value] or 0) + 1
      part[value] = tonumber(p)
      keys[value] = key
      ts[value] = tonumber(t)
    end
  end
  return seen, part, keys, ts
end

describe("lua-resty-kafka's API on lua-kafka, in nginx", function()
  it("nginx with lua-nginx-module is installed", function()
    assert.is_true(have_nginx(), "install nginx libnginx-mod-http-lua lua-resty-core (see .ci/run)")
  end)
  if not have_nginx() then return end

  local ng
  setup(function() ng = start_nginx(root .. "/compat") end)
  teardown(function() if ng then ng.stop() end end)

  local function get(path, q) return ng.get(path, q) end
  local function assert_clean_log(allowed) assert_log_clean(ng, allowed) end

  for _, v in ipairs(rk.versions()) do
    describe("Kafka " .. v, function()
      local k, plain, host, pport
      setup(function()
        k = rk.cluster(v, 1)
        plain = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-compat" }
        host, pport = k.bootstrap.PLAINTEXT:match("^(.-):(%d+)$")
      end)
      teardown(function() if plain then plain:close() end end)

      it("a sync producer returns each message's next offset as cdata LL; Kafka's Java client reads them", function()
        local topic = rt.uniq("compat-sync")
        rt.create_topic(plain, topic, 3, 1)
        assert.are.equal("first=1LL last=5LL diff=4LL type=cdata sum=5LL parts=1\n",
          get("/sync", { host = host, port = pport, topic = topic, n = 5, key = "k" }))
        local seen, part, keys = java_read(k, topic, 5)
        for i = 1, 5 do
          assert.are.equal(1, seen["sync " .. i], "sync " .. i)
          assert.are.equal(part["sync 1"], part["sync " .. i]) -- one key, one partition
          assert.are.equal("6b", keys["sync " .. i])           -- "k"
        end
        -- a broker list naming a host only the resolver knows
        assert.are.equal("first=6LL last=7LL diff=1LL type=cdata sum=7LL parts=1\n",
          get("/sync", { host = host, port = pport, topic = topic, n = 2, key = "k", resolve = 1 }))
        assert_clean_log()
      end)

      it("an async producer: one per worker and cluster_name, 2000 messages counted by offset()", function()
        local topic = rt.uniq("compat-async")
        rt.create_topic(plain, topic, 2, 1)
        assert.are.equal("offset: 2000LL same=true\n",
          get("/async", { host = host, port = pport, topic = topic, n = 2000, cluster = "async-" .. v }))
        local seen = java_read(k, topic, 2001)
        for i = 1, 2000 do assert.are.equal(1, seen["async " .. i], "async " .. i) end
        assert.are.equal(1, seen.init)
        assert_clean_log()
      end)

      it("error_handle gets what the broker refused: topic, partition, {key, message}, index, Kafka's error name", function()
        local topic = rt.uniq("compat-eh")
        rt.create_topic(plain, topic, 1, 1, { ["max.message.bytes"] = 1000 })
        assert.are.equal(topic .. " 0 k 2000 2 MESSAGE_TOO_LARGE true\n",
          get("/errhandle", { host = host, port = pport, topic = topic, key = "k", size = 2000 }))
        assert_clean_log()
      end)

      it("the client: metadata in the original's shape, versions chosen as the original chooses", function()
        local topic = rt.uniq("compat-md")
        rt.create_topic(plain, topic, 3, 1)
        -- Kafka 4 refuses Produce v0-v2 (KIP-896) but still lists v0 in
        -- ApiVersions (KAFKA-18659, for old librdkafka): the original's
        -- choice, v2, is what 4.x then refuses; the drop-in sends v3+
        assert.are.equal("num=3 errcode=0 leaders=3 brokers=1 produce(0,2)=2 produce(3,7)=7 refresh=3\n",
          get("/metadata", { host = host, port = pport, topic = topic }))
        assert.are.equal("fetch_metadata failed, err:not found topic\n",
          get("/metadata", { host = host, port = pport, topic = "not a topic!" }))
        assert_clean_log()
      end)

      it("the basic consumer: list_offset first/last as \"NLL\", fetch from it", function()
        local topic = rt.uniq("compat-bc")
        rt.create_topic(plain, topic, 1, 1)
        -- five messages whose second has the largest timestamp (ListOffsets' max_timestamp, KIP-734)
        local p = kafka.producer.new(plain, { linger_ms = 0 })
        local base = math.floor(socket.gettime() * 1000) - 60000
        for i, dt in ipairs { 1, 5, 2, 3, 4 } do
          assert(p:send(topic, "sync " .. i, { key = "k", timestamp = base + dt * 1000 }))
        end
        local _, failed = p:flush()
        assert.are.equal(0, failed)
        assert.are.equal(1, plain:list_offsets(topic, 0, "max_timestamp"))
        assert.are.equal("first=0LL last=5LL records=5 r1=sync 1:0LL rn=sync 5 hw=5LL errcode=0"
          .. " max=1LL missing_partition=not found partition\n",
          get("/consumer", { host = host, port = pport, topic = topic, partition = 0 }))
        assert_clean_log()
      end)

      it("SASL PLAIN and SCRAM-SHA-256 (sasl_config), and SSL with ssl_verify = false", function()
        local topic = rt.uniq("compat-sec")
        rt.create_topic(plain, topic, 1, 1)
        local sasl_port = k.bootstrap.SASL_PLAINTEXT:match(":(%d+)$")
        local ssl_port = k.bootstrap.SSL:match(":(%d+)$")
        assert.are.equal("first=1LL last=2LL diff=1LL type=cdata sum=2LL parts=1\n",
          get("/sync", { host = host, port = sasl_port, topic = topic, n = 2, key = "k", sasl = "PLAIN" }))
        assert.are.equal("first=3LL last=4LL diff=1LL type=cdata sum=4LL parts=1\n",
          get("/sync", { host = host, port = sasl_port, topic = topic, n = 2, key = "k", sasl = "SCRAM-SHA-256" }))
        assert.are.equal("first=5LL last=6LL diff=1LL type=cdata sum=6LL parts=1\n",
          get("/sync", { host = host, port = ssl_port, topic = topic, n = 2, key = "k", ssl = 1 }))
        assert_clean_log()
      end)

      it("APISIX kafka-logger's calls: a producer made and used in the log phase, every request's message once", function()
        local topic = rt.uniq("compat-logger")
        rt.create_topic(plain, topic, 2, 1)
        for i = 1, 50 do
          assert.are.equal("ok\n", get("/logged", { host = host, port = pport, topic = topic, id = i }))
        end
        local seen = java_read(k, topic, 50)
        for i = 1, 50 do assert.are.equal(1, seen["logged " .. i], "logged " .. i) end
        assert_clean_log()
      end)
    end)
  end

  it("a full buffer: max_buffering messages, then \"buffer overflow\" (or, waiting, \"buffer overflow timeout\")", function()
    -- a broker that is not there: nothing drains the buffer
    local s = socket.bind("127.0.0.1", 0)
    local _, p = s:getsockname()
    s:close()
    assert.are.equal("true,true,true,true,true,nil:buffer overflow\n", get("/overflow", { port = p }))
    local t0 = socket.gettime()
    assert.are.equal("true,true,true,true,true,nil:buffer overflow timeout\n", get("/overflow", { port = p, wait = 1 }))
    local dt = socket.gettime() - t0
    assert.is_true(dt >= 0.2, dt) -- it waited wait_buffer_timeout
  end)
end)

-- The original lua-resty-kafka 0.23 beside the drop-in: the same locations,
-- the same requests, one nginx each, on every Kafka version of the run; the
-- answers equal but for the differences docs/migrating.md lists, each
-- asserted here as it is. Needs a copy of the original's lib/
-- (LUA_RESTY_KAFKA_ORIGINAL=/path/to/lib): CI machines reach neither
-- luarocks.org nor GitHub, and nothing fetched is committed.
local original = os.getenv("LUA_RESTY_KAFKA_ORIGINAL")
describe("the original lua-resty-kafka 0.23 beside the drop-in", function()
  if not original or not have_nginx() then
    pending("set LUA_RESTY_KAFKA_ORIGINAL to a copy of lua-resty-kafka 0.23's lib/ (docs/migrating.md)")
    return
  end
  local ng = {}
  setup(function()
    assert(io.open(original .. "/resty/kafka/producer.lua"), "no resty/kafka/producer.lua in " .. original):close()
    ng.ours = start_nginx(root .. "/compat")
    ng.theirs = start_nginx(original)
  end)
  teardown(function()
    for _, n in pairs(ng) do n.stop() end
  end)

  for _, v in ipairs(rk.versions()) do
    -- Kafka 4 removed Produce v0-v2, all the original writes (KIP-896), yet
    -- still lists v0 in ApiVersions (KAFKA-18659): the major version tells
    local works = tonumber(v:match("^(%d+)")) < 4
    describe("Kafka " .. v .. (works and "" or " (the original cannot produce)"), function()
      local k, plain, host, pport
      setup(function()
        k = rk.cluster(v, 1)
        plain = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-compat-orig" }
        host, pport = k.bootstrap.PLAINTEXT:match("^(.-):(%d+)$")
      end)
      teardown(function() if plain then plain:close() end end)

      -- the same request to both nginx, each with a topic of its own made by
      -- make(topic) (when given): {ours=, theirs=, ours_topic=, theirs_topic=}
      local function both(path, q, make)
        local out = {}
        for _, side in ipairs { "ours", "theirs" } do
          local a = {}
          for kk, vv in pairs(q) do a[kk] = vv end
          if make then
            a.topic = rt.uniq("orig-" .. side)
            make(a.topic)
          end
          out[side] = ng[side].get(path, a)
          out[side .. "_topic"] = a.topic
        end
        return out
      end
      local function topics(np, cfg) return function(t) rt.create_topic(plain, t, np, 1, cfg) end end

      it("a sync producer: the same offsets; the key's partition murmur2's (ours) or crc32's (theirs)", function()
        local r = both("/sync", { host = host, port = pport, n = 5, key = "k" }, topics(3))
        assert.are.equal("first=1LL last=5LL diff=4LL type=cdata sum=5LL parts=1\n", r.ours)
        if not works then
          assert.are.equal("send err:closed\n", r.theirs) -- the broker closes on Produce v2
          return
        end
        assert.are.equal(r.ours, r.theirs)
        local seen, part, _, ts = java_read(k, r.ours_topic, 5)
        local tseen, tpart, _, tts = java_read(k, r.theirs_topic, 5)
        for i = 1, 5 do
          local m = "sync " .. i
          assert.are.same({ 1, 1 }, { seen[m], tseen[m] })
          -- murmur2("k") % 3 = 2 as Java's producer places it; crc32("k") % 3 = 1
          assert.are.same({ 2, 1 }, { part[m], tpart[m] })
          -- theirs writes message set v0: no timestamp; ours a CreateTime
          assert.is_true(ts[m] > 0, m)
          assert.are.equal(-1, tts[m])
        end
      end)

      it("an async producer: flush() sends all (ours) or one batch_num batch (theirs); all arrive", function()
        local r = both("/async", { host = host, port = pport, n = 2000, cluster = "orig-" .. v }, topics(2))
        assert.are.equal("offset: 2000LL same=true\n", r.ours)
        if not works then
          assert.are.equal("offset: 0 same=true\n", r.theirs)
          return
        end
        -- the original's flush stops at the first batch that reaches batch_num (200);
        -- its timer sends the rest flush_time later
        assert.are.equal("offset: 200LL same=true\n", r.theirs)
        for _, t in ipairs { r.ours_topic, r.theirs_topic } do
          local seen = java_read(k, t, 2001)
          for i = 1, 2000 do assert.are.equal(1, seen["async " .. i], t .. " async " .. i) end
        end
      end)

      it("error_handle: the same arguments for a message the broker refuses", function()
        local r = both("/errhandle", { host = host, port = pport, key = "k", size = 2000 },
          topics(1, { ["max.message.bytes"] = 1000 }))
        assert.are.equal(r.ours_topic .. " 0 k 2000 2 MESSAGE_TOO_LARGE true\n", r.ours)
        assert.are.equal(r.theirs_topic .. (works and " 0 k 2000 2 MESSAGE_TOO_LARGE true\n" or " 0 k 2000 2 closed true\n"),
          r.theirs)
      end)

      it("the client: the same metadata, version choices and refusal", function()
        local r = both("/metadata", { host = host, port = pport }, topics(3))
        assert.are.equal("num=3 errcode=0 leaders=3 brokers=1 produce(0,2)=2 produce(3,7)=7 refresh=3\n", r.ours)
        assert.are.equal(r.ours, r.theirs)
        r = both("/metadata", { host = host, port = pport, topic = "not a topic!" })
        assert.are.equal("fetch_metadata failed, err:not found topic\n", r.ours)
        assert.are.equal(r.ours, r.theirs)
      end)

      it("the basic consumer: the same offsets and records; the max timestamp's offset only ours", function()
        local base = math.floor(socket.gettime() * 1000) - 60000
        local r = both("/consumer", { host = host, port = pport, partition = 0, numeric = 1 }, function(t)
          rt.create_topic(plain, t, 1, 1)
          local p = kafka.producer.new(plain, { linger_ms = 0 })
          for i, dt in ipairs { 1, 5, 2, 3, 4 } do assert(p:send(t, "sync " .. i, { key = "k", timestamp = base + dt * 1000 })) end
          local _, failed = p:flush()
          assert.are.equal(0, failed)
        end)
        assert.are.equal("first=0LL last=5LL records=5 r1=sync 1:0LL rn=sync 5 hw=5LL errcode=0"
          .. " max=1LL missing_partition=not found partition\n", r.ours)
        -- theirs asks ListOffsets v2 for LIST_OFFSET_TIMESTAMP_MAX, which only v7+
        -- answers (KIP-734): the broker refuses it, the original returns nil
        assert.are.equal((r.ours:gsub("max=1LL", "max=nil")), r.theirs)
      end)

      it("the basic consumer: fetch from list_offset's own \"NLL\" (theirs raises)", function()
        local r = {}
        for _, side in ipairs { "ours", "theirs" } do
          local t = rt.uniq("orig-" .. side)
          rt.create_topic(plain, t, 1, 1)
          r[side] = { pcall(ng[side].get, "/consumer", { host = host, port = pport, partition = 0, topic = t }) }
        end
        assert.are.same({ true, "first=0LL last=0LL records=0 r1=nil:nil rn=nil hw=0LL errcode=0"
          .. " max=-1LL missing_partition=not found partition\n" }, r.ours)
        assert.is_false(r.theirs[1])
        assert.is_truthy(r.theirs[2]:find("HTTP 500", 1, true))
        assert.is_truthy(ng.theirs.errlog():find("attempt to perform arithmetic on 'string' and 'int64_t'", 1, true))
      end)

      it("SASL PLAIN and SSL (ssl_verify = false): the same answers", function()
        local sasl_port = k.bootstrap.SASL_PLAINTEXT:match(":(%d+)$")
        local ssl_port = k.bootstrap.SSL:match(":(%d+)$")
        for _, q in ipairs { { port = sasl_port, sasl = "PLAIN" }, { port = ssl_port, ssl = 1 } } do
          q.host, q.n, q.key = host, 2, "k"
          local r = both("/sync", q, topics(1))
          assert.are.equal("first=1LL last=2LL diff=1LL type=cdata sum=2LL parts=1\n", r.ours)
          assert.are.equal(works and r.ours or "send err:closed\n", r.theirs)
        end
      end)

      it("APISIX kafka-logger's calls: every request's message once (theirs: none on Kafka 4)", function()
        local t = { ours = rt.uniq("orig-ours"), theirs = rt.uniq("orig-theirs") }
        for side, topic in pairs(t) do
          rt.create_topic(plain, topic, 2, 1)
          for i = 1, 20 do
            assert.are.equal("ok\n", ng[side].get("/logged", { host = host, port = pport, topic = topic, id = i }))
          end
        end
        for side, topic in pairs(t) do
          if side == "ours" or works then
            local seen = java_read(k, topic, 20)
            for i = 1, 20 do assert.are.equal(1, seen["logged " .. i], side .. " logged " .. i) end
          else
            -- nothing reached the log (the original's timer retries, then drops)
            socket.sleep(1)
            assert.are.same({ 0, 0 }, { plain:list_offsets(topic, 0, "latest"), plain:list_offsets(topic, 1, "latest") })
          end
        end
      end)
    end)
  end
end)
