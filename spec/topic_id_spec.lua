-- Topic ids (KIP-516): the consumer fetches by topic id where the broker
-- and the metadata have them (Fetch v13+), so a topic deleted and created
-- again under its name is not read as the old one: the position, which
-- belongs to the old log, is reset as auto_offset_reset says, and poll says
-- so (an entry of its errors with code "topic_recreated"). Without ids a
-- position past the new topic's start would silently go on reading the new
-- topic at the old offsets.
--
-- Against kafka.mock in process (every Lua, no JVM; the mock answers a
-- Fetch by a deleted topic's id UNKNOWN_TOPIC_ID, as Kafka does), then
-- against a real broker.
local kafka = require "kafka"
local mock = require "kafka.mock"
local H = require "support.helpers"
local rk = require "support.realkafka"
local rt = require "support.realtools"
local socket = require "socket"

-- polls until n messages came (or the deadline): the messages' offset=value
-- and every error entry as "code: err"
local function poll_n(c, n, seconds)
  local got, errs = {}, {}
  local deadline = socket.gettime() + (seconds or 20)
  while #got < n and socket.gettime() < deadline do
    -- (errors alone: nil, the error, its code)
    local ms, err, code = c:poll(100)
    if not ms then errs[#errs + 1] = tostring(code) .. ": " .. tostring(err) end
    for _, e in ipairs(ms and ms.errors or {}) do errs[#errs + 1] = tostring(e.code) .. ": " .. tostring(e.err) end
    for _, m in ipairs(ms or {}) do got[#got + 1] = m.offset .. "=" .. m.value end
  end
  return got, errs
end

local function values(prefix, from, to)
  local t = {}
  for i = from, to do t[#t + 1] = (i - from) .. "=" .. prefix .. i end
  return t
end

describe("a topic deleted and created again under a running consumer (kafka.mock)", function()
  for _, reset in ipairs { "earliest", "latest", "error" } do
    it("auto_offset_reset = " .. reset, function()
      local cluster = mock.new { brokers = 1, topics = { t = 1 } }
      local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory() }
      local p = kafka.producer.new(client, { linger_ms = 0 })
      for i = 1, 5 do assert(p:send("t", "old" .. i)) end
      assert.are.equal(0, select(2, p:flush()))
      local c = kafka.consumer.new(client, { auto_offset_reset = reset, fetch_max_wait_ms = 0 })
      assert(c:assign { { topic = "t", partition = 0, offset = "earliest" } })
      assert.are.same(values("old", 1, 5), (poll_n(c, 5)))
      local old = cluster.topics.t.id
      cluster:delete_topic("t")
      cluster:create_topic("t", 1)
      local new = cluster.topics.t.id
      -- eight records: a position kept at 5 would read the last three
      for i = 1, 8 do assert(p:send("t", "new" .. i)) end
      assert.are.equal(0, select(2, p:flush()))
      local what = ("topic_recreated: t/0: the topic was deleted and created again (topic id %s, was %s)")
        :format(kafka.proto.uuid_text(new), kafka.proto.uuid_text(old))
      if reset == "earliest" then
        local got, errs = poll_n(c, 8)
        assert.are.same(values("new", 1, 8), got)
        assert.are.same({ what .. "; position reset to earliest (offset 0)" }, errs)
      elseif reset == "latest" then
        local got, errs = poll_n(c, 1, 1)
        assert.are.same({}, got)
        assert.are.same({ what .. "; position reset to latest (offset 8)" }, errs)
        assert.are.equal(8, c:position("t", 0))
        assert(p:send("t", "after"))
        assert.are.equal(0, select(2, p:flush()))
        assert.are.same({ "8=after" }, (poll_n(c, 1)))
      else
        local got, errs = poll_n(c, 1, 1)
        assert.are.same({}, got)
        assert.are.same({ what .. '; auto_offset_reset is "error": seek to read it' }, errs)
        -- nothing is read until a seek
        got, errs = poll_n(c, 1, 0.5)
        assert.are.same({ {}, {} }, { got, errs })
        assert(c:seek("t", 0, 6))
        assert.are.same({ "6=new7", "7=new8" }, (poll_n(c, 2)))
      end
      c:close()
      p:close()
      client:close()
    end)
  end
end)

if not rk.main() then return end

-- each version of the run (the lite tiers: the main one), where the broker
-- fetches by topic id (Fetch v13, Kafka 3.1+)
for _, v in ipairs(H.lite() and { rk.main() } or rk.versions()) do
  describe("a topic deleted and created again under a running consumer (Kafka " .. v .. ")", function()
    if H.min() then
      pending("Lua 5.4 and LuaJIT run it")
      return
    end
    local fetch = rk.api_versions(v)[kafka.proto.api_key("Fetch")]
    if not fetch or fetch.max < 13 then
      pending(("Kafka %s fetches by name only (Fetch v%s): a topic created again is seen at the next metadata"
        .. " refresh, not before its first Fetch"):format(v, fetch and fetch.max or "-"))
      return
    end
    it("the consumer fetches by id, resets to earliest and says so; the new records from offset 0", function()
      local k = rk.cluster(v, 1)
      local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT }
      local admin = kafka.admin.new(client)
      local topic = rt.uniq("recreated")
      rt.create_topic(client, topic, 1, 1)
      local p = kafka.producer.new(client, { linger_ms = 0 })
      for i = 1, 5 do assert(p:send(topic, "old" .. i)) end
      assert.are.equal(0, select(2, p:flush()))
      local c = kafka.consumer.new(client, { auto_offset_reset = "earliest", fetch_max_wait_ms = 100 })
      assert(c:assign { { topic = topic, partition = 0, offset = "earliest" } })
      assert.are.same(values("old", 1, 5), (poll_n(c, 5)))
      local old = client.topics[topic].topic_id
      -- delete; create again once the broker has let the name go
      local res = assert(admin:delete_topics({ topic }))
      assert.are.equal(0, res[1].error_code)
      local deadline = socket.gettime() + 30
      while true do
        local ok = pcall(rt.create_topic, client, topic, 1, 1)
        if ok then break end
        assert.is_true(socket.gettime() < deadline, "the topic could not be created again in 30 s")
        socket.sleep(0.2)
      end
      local p2 = kafka.producer.new(kafka.client.new { brokers = k.bootstrap.PLAINTEXT }, { linger_ms = 0 })
      for i = 1, 8 do assert(p2:send(topic, "new" .. i)) end
      assert.are.equal(0, select(2, p2:flush()))
      local got, errs = poll_n(c, 8, 30)
      assert.are.same(values("new", 1, 8), got)
      local new = client.topics[topic].topic_id
      assert.are_not.equal(old, new)
      assert.are.same({ ("topic_recreated: %s/0: the topic was deleted and created again (topic id %s, was %s);"
        .. " position reset to earliest (offset 0)"):format(topic, kafka.proto.uuid_text(new),
        kafka.proto.uuid_text(old)) }, errs)
      c:close()
      p:close()
      p2:close()
      admin:close()
      client:close()
    end)
  end)
end
