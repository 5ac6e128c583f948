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

-- a socket factory around another that counts the requests sent through it:
-- sent[api_key][version] = count
local function counting(factory, sent)
  return function()
    local s = factory()
    local proxy = {}
    function proxy.send(_, data, ...)
      if type(data) == "string" and #data >= 8 then
        local key, version = data:byte(5) * 256 + data:byte(6), data:byte(7) * 256 + data:byte(8)
        sent[key] = sent[key] or {}
        sent[key][version] = (sent[key][version] or 0) + 1
      end
      return s:send(data, ...)
    end
    return setmetatable(proxy, { __index = function(_, k)
      local f = s[k]
      if type(f) ~= "function" then return f end
      return function(_, ...) return f(s, ...) end
    end })
  end
end

describe("commits by topic id (kafka.mock)", function()
  it("OffsetCommit and OffsetFetch v10; an id the cluster does not know any more goes again by name", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local sent = {}
    local client = kafka.client.new { brokers = cluster:bootstrap(),
      socket = counting(cluster:socket_factory(), sent) }
    local OC, OF = kafka.proto.api_key("OffsetCommit"), kafka.proto.api_key("OffsetFetch")
    local c = kafka.consumer.new(client, { group_id = "g" })
    assert(client:refresh { "t" })
    assert(c:commit { { topic = "t", partition = 0, offset = 3 } })
    assert.are.equal(3, assert(c:committed { { topic = "t", partition = 0 } })[1].offset)
    assert.are.same({ { [10] = 1 }, { [10] = 1 } }, { sent[OC], sent[OF] })
    cluster:delete_topic("t")
    cluster:create_topic("t", 1)
    -- the client still has the old id: answered UNKNOWN_TOPIC_ID, sent again by name
    assert(c:commit { { topic = "t", partition = 0, offset = 5 } })
    assert.are.equal(5, assert(c:committed { { topic = "t", partition = 0 } })[1].offset)
    assert.are.same({ { [10] = 2, [9] = 1 }, { [10] = 1, [7] = 1 } }, { sent[OC], sent[OF] })
    c:close()
    client:close()
  end)
end)

if not rk.main() then return end

-- deletes topic (1 partition) and creates it again once the broker has let
-- the name go (admin: a kafka.admin; client: the kafka.client to create with)
local function recreate(admin, client, topic)
  assert.are.equal(0, assert(admin:delete_topics({ topic }))[1].error_code)
  local deadline = socket.gettime() + 30
  while not pcall(rt.create_topic, client, topic, 1, 1) do
    assert.is_true(socket.gettime() < deadline, "the topic could not be created again in 30 s")
    socket.sleep(0.2)
  end
end

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
      recreate(admin, client, topic)
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

-- Commits by topic id (KIP-516): OffsetCommit v10 and OffsetFetch v10 (Kafka
-- 4.2+) and TxnOffsetCommit v6 (4.4+) name topics by id only; the consumer
-- and the transactional producer send them where the metadata has every
-- topic's id, as Java's client does, by name before. The versions are read
-- off the wire (the socket seam), the offsets by Java's AdminClient.
-- the version of api a request by topic id goes at to a broker of version v
-- (the highest both sides have, up to the first by id: the batched OffsetFetch
-- v8-9 still names topics)
local function upto(v, api, ids_from)
  return math.min(rk.api_versions(v)[kafka.proto.api_key(api)].max, ids_from)
end

for _, v in ipairs(H.lite() and { rk.main() } or rk.versions()) do
  describe("commits by topic id where the broker takes them (Kafka " .. v .. ")", function()
    if H.min() then
      pending("Lua 5.4 and LuaJIT run it")
      return
    end
    local drop = require "support.dropsocket"
    local function java_offsets(k, group)
      return rk.java({ "list-group-offsets", group }, { bootstrap = k.bootstrap.PLAINTEXT })
    end
    -- the versions of an API sent through d: {[version] = count}
    local function sent(d, api) return d.sent[kafka.proto.api_key(api)] or {} end
    local function same(a, b) return table.concat(a, "\n") == table.concat(b, "\n") end
    local function keys(t)
      local out = {}
      for key in pairs(t) do out[#out + 1] = key end
      table.sort(out)
      return out
    end

    it("a group consumer's commits, automatic and sync, and its committed offsets", function()
      local k = rk.cluster(v, 1)
      local d = drop.new()
      local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory }
      local topic, group = rt.uniq("idcommit"), rt.uniq("g")
      rt.create_topic(client, topic, 2, 1)
      local p = kafka.producer.new(client, { linger_ms = 0 })
      for i = 1, 6 do assert(p:send(topic, "m" .. i, { partition = i % 2 })) end
      assert.are.equal(0, select(2, p:flush()))
      local c = kafka.consumer.new(client, { group_id = group, auto_offset_reset = "earliest",
        auto_commit_interval_ms = 100, fetch_max_wait_ms = 100 })
      assert(c:subscribe { topic })
      local got = poll_n(c, 6, 30)
      assert.are.equal(6, #got)
      -- the automatic commit of both positions reaches the group
      local want = { ("OFF %s 0 3 ~"):format(topic), ("OFF %s 1 3 ~"):format(topic) }
      local deadline, lines = socket.gettime() + 20
      repeat
        c:poll(100)
        lines = java_offsets(k, group)
      until same(want, lines) or socket.gettime() > deadline
      assert.are.same(want, lines)
      c:close() -- (commits the same positions again, or nothing if their answer was in)
      assert.are.same(want, java_offsets(k, group))
      -- a sync commit and committed() (no group membership: the group is empty now)
      c = kafka.consumer.new(client, { group_id = group, enable_auto_commit = false })
      assert(c:commit { { topic = topic, partition = 0, offset = 2, metadata = "sync" } })
      assert.are.same({ { topic = topic, partition = 0, offset = 2, metadata = "sync" } },
        assert(c:committed { { topic = topic, partition = 0 } }))
      c:close()
      local commit_v, fetch_v = upto(v, "OffsetCommit", 10), upto(v, "OffsetFetch", 10)
      -- a request built without ids (a caller's own) stays at the versions by name
      local conn = assert(client:any_broker())
      assert.are.same({ upto(v, "OffsetCommit", 9), upto(v, "OffsetFetch", 7), commit_v },
        { conn:version("OffsetCommit"), conn:version("OffsetFetch"), conn:version("OffsetCommit", 10) })
      local commits, fetches = sent(d, "OffsetCommit"), sent(d, "OffsetFetch")
      assert.are.same({ commit_v }, keys(commits))
      -- (the group's positions, again after a reassignment, then committed())
      assert.are.same({ fetch_v }, keys(fetches))
      assert.are.same({ ("OFF %s 0 2 sync"):format(topic), ("OFF %s 1 3 ~"):format(topic) }, java_offsets(k, group))
      p:close()
      client:close()
    end)

    it("a commit naming a deleted topic's id goes again by name", function()
      local k = rk.cluster(v, 1)
      if upto(v, "OffsetCommit", 10) < 10 then
        pending(("Kafka %s commits by name only (OffsetCommit v%d)"):format(v, upto(v, "OffsetCommit", 10)))
        return
      end
      local d = drop.new()
      local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory }
      local admin = kafka.admin.new(kafka.client.new { brokers = k.bootstrap.PLAINTEXT })
      local topic, group = rt.uniq("idstale"), rt.uniq("g")
      rt.create_topic(client, topic, 1, 1)
      local c = kafka.consumer.new(client, { group_id = group })
      assert(c:commit { { topic = topic, partition = 0, offset = 1 } })
      local old = client.topics[topic].topic_id
      recreate(admin, admin.client, topic)
      -- the client still has the old id: the broker does not know it any more
      assert.are.equal(old, client.topics[topic].topic_id)
      assert(c:commit { { topic = topic, partition = 0, offset = 4 } })
      assert.are.same({ [10] = 2, [9] = 1 }, sent(d, "OffsetCommit"))
      assert.are.same({ ("OFF %s 0 4 ~"):format(topic) }, java_offsets(k, group))
      c:close()
      admin.client:close()
      admin:close()
      client:close()
    end)

    it("a producer's records by topic id (Produce v13); a topic created again gets the next ones", function()
      local k = rk.cluster(v, 1)
      local d = drop.new()
      local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory }
      local admin = kafka.admin.new(kafka.client.new { brokers = k.bootstrap.PLAINTEXT })
      local topic = rt.uniq("idproduce")
      rt.create_topic(admin.client, topic, 1, 1)
      local p = kafka.producer.new(client, { linger_ms = 0 })
      local offsets = {}
      local function send(value)
        local part, off = p:send_sync(topic, value)
        assert.are.equal(0, part, off)
        offsets[#offsets + 1] = off
      end
      send("old1")
      send("old2")
      local old = client.topics[topic].topic_id
      recreate(admin, admin.client, topic)
      assert.are.equal(old, client.topics[topic].topic_id) -- (the producer's metadata is the old topic's)
      send("new1")
      assert.are.same({ 0, 1, 0 }, offsets)
      local recs = rk.java({ "consume", topic, 1, 30 }, { bootstrap = k.bootstrap.PLAINTEXT })
      assert.are.same({ "0 0 " .. rt.hex("new1") }, { (recs[1] or ""):match("^REC (%d+ %d+) ") .. " "
        .. tostring((recs[1] or ""):match("^REC %d+ %d+ %d+ %d+ %S+ (%S+)")) })
      local produce_v = upto(v, "Produce", 13)
      assert.are.same({ produce_v }, keys(sent(d, "Produce")))
      if produce_v == 13 then
        assert.are_not.equal(old, client.topics[topic].topic_id)
      end
      p:close()
      admin.client:close()
      admin:close()
      client:close()
    end)

    it("a transactional producer's offsets (TxnOffsetCommit)", function()
      local k = rk.cluster(v, 1)
      local d = drop.new()
      local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory }
      local topic, group = rt.uniq("idtxn"), rt.uniq("g")
      rt.create_topic(client, topic, 1, 1)
      local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
      assert(tp:init_transactions())
      assert(tp:begin_transaction())
      assert(tp:send(topic, "out"))
      assert(tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 7, metadata = "tx" } },
        { group_id = group, generation_id = -1, member_id = "" }))
      assert(tp:commit_transaction())
      local want, deadline, lines = { ("OFF %s 0 7 tx"):format(topic) }, socket.gettime() + 20
      repeat -- the commit's markers reach the offsets topic just after EndTxn
        lines = java_offsets(k, group)
      until same(want, lines) or socket.gettime() > deadline
      assert.are.same(want, lines)
      -- transactions v2 (transaction.version 2) send v5+, by id from v6
      local txn_v = tp.txn.version
      local expect = upto(v, "TxnOffsetCommit", txn_v == 2 and 6 or 4)
      assert.are.same({ [expect] = 1 }, sent(d, "TxnOffsetCommit"))
      tp:close()
      client:close()
    end)
  end)
end
