-- kafka.share_consumer (KIP-932 share groups, "Kafka queues") against a real
-- Kafka 4.4.0 broker: records written by Kafka's Java producer, read by
-- lua-kafka share consumers and by Kafka's Java KafkaShareConsumer
-- (Peer.java's share mode, kafka-clients 4.4.0) in one group. Checked
-- exactly: which offsets each member got, with which delivery count, how
-- each acknowledgement was answered. The first Lua of make test runs it;
-- make matrix on each of its versions (KAFKA_SHARE_VERSION: the version of
-- the run; pending where its broker does not serve share groups).
local share = require "kafka.share_consumer"
local H = require "support.helpers"
local rk = require "support.realkafka"
local socket = require "socket"

local V = os.getenv("KAFKA_SHARE_VERSION") or "4.4.0"

-- The share session's bookkeeping and the acknowledgement batches, without a
-- broker (every Lua): what ShareFetch and ShareAcknowledge carry.
describe("share session bookkeeping", function()
  local session = require "kafka.share.session"
  local A, B = ("a"):rep(16), ("b"):rep(16)
  local function tp(id, p) return { topic = id == A and "ta" or "tb", partition = p, topic_id = id } end

  it("epoch 0 lists every partition and no acknowledgement; later requests only what changed", function()
    local s = session.new(1)
    local acks = { [session.key("ta", 0)] = { topic_id = A, partition = 0, node_id = 1, batches = { "x" } } }
    local topics, forgotten, sent = s:topics({ tp(A, 0), tp(A, 1), tp(B, 0) }, {})
    assert.are.same({ { topic_id = A, partitions = { { partition_index = 0, acknowledgement_batches = {} },
      { partition_index = 1, acknowledgement_batches = {} } } },
      { topic_id = B, partitions = { { partition_index = 0, acknowledgement_batches = {} } } } }, topics)
    assert.are.same({}, forgotten)
    assert.are.same({}, sent)
    s:answered()
    assert.are.equal(1, s.epoch)
    -- A/1 dropped, B/1 added, an acknowledgement for A/0
    topics, forgotten, sent = s:topics({ tp(A, 0), tp(B, 0), tp(B, 1) }, acks)
    assert.are.same({ { topic_id = A, partitions = { { partition_index = 0, acknowledgement_batches = { "x" } } } },
      { topic_id = B, partitions = { { partition_index = 1, acknowledgement_batches = {} } } } }, topics)
    assert.are.same({ { topic_id = A, partitions = { 1 } } }, forgotten)
    assert.are.same(acks, sent)
    s.epoch = 2147483647
    s:answered()
    assert.are.equal(1, s.epoch)
    s:reset()
    assert.are.equal(0, s.epoch)
    assert.are.same({}, s.parts)
  end)

  it("acknowledgements: consecutive offsets of one type in one batch", function()
    local b = require("kafka.share_consumer")._batches
    assert.are.same({
      { first_offset = 3, last_offset = 5, acknowledge_types = { 1 } },
      { first_offset = 6, last_offset = 6, acknowledge_types = { 2 } },
      { first_offset = 8, last_offset = 9, acknowledge_types = { 1 } },
      { first_offset = 10, last_offset = 10, acknowledge_types = { 0 } },
    }, b { [3] = 1, [4] = 1, [5] = 1, [6] = 2, [8] = 1, [9] = 1, [10] = 0 })
  end)

  it("misuse raises at the door", function()
    assert.has_error(function() share.new({ brokers = "127.0.0.1:1" }, {}) end)
    assert.has_error(function() share.new({ brokers = "127.0.0.1:1" }, { group_id = "g", group_protocol = "x" }) end)
    assert.has_error(function()
      share.new({ brokers = "127.0.0.1:1" }, { group_id = "g", share_acknowledgement_mode = "auto" })
    end)
    local c = share.new({ brokers = "127.0.0.1:1" }, { group_id = "g", share_acknowledgement_mode = "explicit" })
    assert.has_error(function() c:poll(0) end) -- not subscribed
    assert.has_error(function() c:acknowledge({ topic = "t", partition = 0, offset = 1 }, "accept") end) -- not held
    assert.has_error(function() c:acknowledge({ topic = "t", partition = 0, offset = 1 }, "gap") end)
  end)
end)

if not rk.main() then return end

describe("share consumer (KIP-932, Kafka " .. V .. ")", function()
  -- make matrix sets KAFKA_SHARE_VERSION to the version of its run (lite tier)
  if H.lite() and not os.getenv("KAFKA_SHARE_VERSION") then
    pending("the first Lua of make test runs it (a broker of its own)")
    return
  end
  -- make matrix: the run's own broker says whether its version serves share
  -- groups (no share broker started for one that does not)
  if os.getenv("KAFKA_SHARE_VERSION") and V == rk.main() then
    local ok, why = rk.share_groups(V)
    if not ok then
      pending(why)
      return
    end
  end

  local k, bs
  local n_topic = 0
  setup(function()
    -- the coordinator's heartbeat interval at 1 s (default 5 s); record locks
    -- may be as short as 1 s (a group's share.record.lock.duration.ms)
    k = rk.cluster(V, 1, V .. "-share", { ["group.share.heartbeat.interval.ms"] = "1000",
      ["group.share.min.heartbeat.interval.ms"] = "1000", ["group.share.min.record.lock.duration.ms"] = "1000" })
    bs = k.bootstrap.PLAINTEXT
  end)

  -- A topic of one partition with n records from Java's producer; the group
  -- starts at the earliest offset (share.auto.offset.reset, a group config
  -- set through Java's AdminClient; the default is latest); cfg: more
  -- group configs.
  local function fresh(n, g, cfg)
    n_topic = n_topic + 1
    local topic = ("share-%d-%d"):format(os.time(), n_topic)
    local args = { "create", topic, 1, 1, "+", "alter-config", "group", g, "set",
      "share.auto.offset.reset", "earliest" }
    for name, v in pairs(cfg or {}) do
      for _, a in ipairs { "+", "alter-config", "group", g, "set", name, v } do args[#args + 1] = a end
    end
    for _, a in ipairs { "+", "produce", topic, n, "none", "idempotent" } do args[#args + 1] = a end
    local lines = rk.java(args, { bootstrap = bs, version = V })
    local acks = 0
    for _, l in ipairs(lines) do if l:match("^ACK 0 ") then acks = acks + 1 end end
    assert.are.equal(n, acks)
    return topic
  end

  local function new(g, opts)
    opts = opts or {}
    opts.group_id = g
    return share.new({ brokers = bs }, opts)
  end

  -- polls the consumers in turn until done() or the deadline (s)
  local function poll_until(cs, secs, each, done)
    local stop = socket.gettime() + secs
    while not done() do
      assert(socket.gettime() < stop, "deadline passed")
      for i, c in ipairs(cs) do
        local recs, err = c:poll(200)
        assert(recs, err)
        for _, r in ipairs(recs) do each(i, r) end
      end
    end
  end

  -- the membership's transitions without the join attempts retried
  -- (joining>unjoined>joining: COORDINATOR_LOAD_IN_PROGRESS and the like)
  local function retries_out(states)
    local out = {}
    for _, st in ipairs(states) do
      if st == "unjoined>joining" and out[#out] == "joining>unjoined" then out[#out] = nil
      else out[#out + 1] = st end
    end
    return out
  end

  -- the members of a share group the coordinator has assigned a partition
  local function assigned_members(client, g)
    local conn = assert(client:coordinator(g))
    local resp = assert(conn:request("ShareGroupDescribe", { group_ids = { g }, include_authorized_operations = false }))
    local n = 0
    for _, m in ipairs(resp.groups[1].members or {}) do
      if m.assignment and #(m.assignment.topic_partitions or {}) > 0 then n = n + 1 end
    end
    return n
  end

  local function count(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n
  end

  it("two members on one partition: every record delivered, each accepted once", function()
    local g = "share-two-" .. os.time()
    local N = 400
    local topic = fresh(N, g)
    local states = {}
    local c1 = new(g, { share_acknowledgement_mode = "explicit", max_poll_records = 50,
      on_state = function(a, b) states[#states + 1] = a .. ">" .. b end })
    local c2 = new(g, { share_acknowledgement_mode = "explicit", max_poll_records = 50 })
    c1:subscribe { topic }
    c2:subscribe { topic }
    local accepted, by = {}, { 0, 0 }
    local results = {}
    poll_until({ c1, c2 }, 30, function(i, r)
      assert.are.equal(topic, r.topic)
      assert.are.equal(0, r.partition)
      assert.are.equal(1, r.delivery_count)
      assert.are.equal("k" .. r.offset, r.key)
      assert.is_nil(accepted[r.offset])
      accepted[r.offset] = i
      by[i] = by[i] + 1
      ;({ c1, c2 })[i]:acknowledge(r, "accept")
    end, function()
      for _, c in ipairs { c1, c2 } do
        for _, x in ipairs(c:commit_sync(5000)) do results[#results + 1] = x end
      end
      return count(accepted) == N
    end)
    for o = 0, N - 1 do assert.is_truthy(accepted[o], "offset " .. o) end
    local acked = 0
    for _, x in ipairs(results) do
      assert.are.same({ topic, 0, 0 }, { x.topic, x.partition, x.error_code })
      acked = acked + x.offsets
    end
    assert.are.equal(N, acked)
    local _, info = c1:state()
    assert.are.same({ { topic = topic, partition = 0 } }, info.assignment)
    c1:close()
    c2:close()
    -- (a coordinator still loading on a fresh broker sends the member back
    -- to unjoined to try again: those rounds are taken out)
    assert.are.same({ "unjoined>joining", "joining>stable", "stable>leaving", "leaving>left" }, retries_out(states))
    -- nothing is left for a newcomer: every record was accepted
    local c3 = new(g)
    c3:subscribe { topic }
    local late = {}
    local stop = socket.gettime() + 2
    while socket.gettime() < stop do
      for _, r in ipairs(assert(c3:poll(300))) do late[#late + 1] = r.offset end
    end
    c3:close()
    assert.are.same({}, late)
    print(("    two members: %d and %d records"):format(by[1], by[2]))
  end)

  it("released records come back with delivery_count 2, rejected ones never", function()
    local g = "share-rel-" .. os.time()
    local N = 30
    local topic = fresh(N, g)
    local c = new(g, { share_acknowledgement_mode = "explicit" })
    c:subscribe { topic }
    local first, second = {}, {}
    poll_until({ c }, 20, function(_, r)
      if r.delivery_count == 1 then
        assert.is_nil(first[r.offset])
        first[r.offset] = true
        -- offsets 0, 3, 6 ... released, 1, 4, 7 ... rejected, the others accepted
        c:acknowledge(r, ({ "release", "reject", "accept" })[r.offset % 3 + 1])
      else
        second[#second + 1] = r.offset .. "/" .. r.delivery_count
        c:acknowledge(r, "accept")
      end
    end, function() return count(first) == N and #second >= N / 3 end)
    table.sort(second, function(a, b) return tonumber(a:match("%d+")) < tonumber(b:match("%d+")) end)
    local want = {}
    for o = 0, N - 1, 3 do want[#want + 1] = o .. "/2" end
    assert.are.same(want, second)
    -- the rejected ones (and the accepted) do not come again
    local late = {}
    local stop = socket.gettime() + 2
    while socket.gettime() < stop do
      for _, r in ipairs(assert(c:poll(300))) do late[#late + 1] = r.offset end
    end
    assert.are.same({}, late)
    c:close()
  end)

  it("implicit mode: each poll accepts the previous poll's records, commit_sync the last", function()
    local g = "share-impl-" .. os.time()
    local N = 120
    local topic = fresh(N, g)
    local c = new(g, { max_poll_records = 40 })
    c:subscribe { topic }
    local got, last_n = {}, 0
    local stop = socket.gettime() + 20
    while count(got) < N do
      assert(socket.gettime() < stop, "deadline passed")
      local recs = assert(c:poll(200))
      for _, r in ipairs(recs) do
        assert.are.equal(1, r.delivery_count)
        assert.is_nil(got[r.offset])
        got[r.offset] = true
      end
      if #recs > 0 then last_n = #recs end
    end
    assert.has_error(function() c:acknowledge({ topic = topic, partition = 0, offset = 0 }, "accept") end)
    -- the last poll's records are accepted by commit_sync (the earlier ones went with the polls)
    assert.are.same({ { topic = topic, partition = 0, offsets = last_n, error_code = 0 } }, c:commit_sync(5000))
    assert.are.same({}, c:close())
    -- nothing comes back to another member: all were accepted
    local c2 = new(g)
    c2:subscribe { topic }
    local late = {}
    stop = socket.gettime() + 2
    while socket.gettime() < stop do
      for _, r in ipairs(assert(c2:poll(300))) do late[#late + 1] = r.offset .. "/" .. r.delivery_count end
    end
    c2:close()
    assert.are.same({}, late)
  end)

  it("close releases what the member holds: another member gets it", function()
    local g = "share-close-" .. os.time()
    local N = 20
    local topic = fresh(N, g)
    local c1 = new(g, { share_acknowledgement_mode = "explicit" })
    c1:subscribe { topic }
    local held = {}
    poll_until({ c1 }, 20, function(_, r)
      -- the first 5 accepted, the rest held without an acknowledgement
      if r.offset < 5 then c1:acknowledge(r, "accept") else held[r.offset] = true end
    end, function() return count(held) == N - 5 end)
    assert.are.same({ { topic = topic, partition = 0, offsets = 5, error_code = 0 } }, c1:commit_sync(5000))
    -- close releases the 15 held (and closes the share session, which would release them too)
    assert.are.same({ { topic = topic, partition = 0, offsets = N - 5, error_code = 0 } }, c1:close())
    local c2 = new(g, { share_acknowledgement_mode = "explicit" })
    c2:subscribe { topic }
    local again = {}
    poll_until({ c2 }, 20, function(_, r)
      again[#again + 1] = r.offset .. "/" .. r.delivery_count
      c2:acknowledge(r, "accept")
    end, function() return #again >= N - 5 end)
    c2:commit_sync(5000)
    table.sort(again, function(a, b) return tonumber(a:match("%d+")) < tonumber(b:match("%d+")) end)
    local want = {}
    for o = 5, N - 1 do want[#want + 1] = o .. "/2" end
    assert.are.same(want, again)
    c2:close()
  end)

  it("renew keeps records past their lock (Kafka 4.2+), then accept", function()
    local g = "share-renew-" .. os.time()
    local N = 10
    local topic = fresh(N, g, { ["share.record.lock.duration.ms"] = "2000" })
    local seen = {}
    local c1 = new(g, { share_acknowledgement_mode = "explicit",
      on_acknowledgement_commit = function(res) for _, x in ipairs(res) do seen[#seen + 1] = x end end })
    local c2 = new(g, { share_acknowledgement_mode = "explicit" })
    c1:subscribe { topic }
    local recs = {}
    poll_until({ c1 }, 20, function(_, r) recs[#recs + 1] = r end, function() return #recs == N end)
    c2:subscribe { topic }
    -- 4 s, twice the lock: c1 renews every 0.6 s, c2 gets nothing
    local stop, rounds = socket.gettime() + 4, 0
    while socket.gettime() < stop do
      rounds = rounds + 1
      for _, r in ipairs(recs) do assert.is_true(c1:acknowledge(r, "renew")) end
      if rounds % 2 == 1 then
        assert.are.same({ { topic = topic, partition = 0, offsets = N, error_code = 0 } }, c1:commit_sync(5000))
      else
        assert.are.same({}, assert(c1:poll(0)))
      end
      local t = socket.gettime() + 0.6
      while socket.gettime() < t do assert.are.same({}, assert(c2:poll(200))) end
    end
    -- all accepted but the last, which is not renewed any more: its lock runs
    -- out (2 s) and c2 gets it, delivered a second time
    for i = 1, N - 1 do c1:acknowledge(recs[i], "accept") end
    assert.are.same({ { topic = topic, partition = 0, offsets = N - 1, error_code = 0 } }, c1:commit_sync(5000))
    local again = {}
    poll_until({ c2 }, 10, function(_, r)
      again[#again + 1] = r.offset .. "/" .. r.delivery_count
      c2:acknowledge(r, "accept")
    end, function() return #again > 0 end)
    assert.are.same({ recs[N].offset .. "/2" }, again)
    -- every renewal (those poll sent too) and the accept answered, each without error
    assert.are.equal(rounds + 1, #seen)
    for i, x in ipairs(seen) do
      assert.are.same({ topic, 0, i <= rounds and N or N - 1, 0 }, { x.topic, x.partition, x.offsets, x.error_code })
    end
    c1:close()
    c2:close()
  end)

  it("an acknowledgement the broker refuses is reported for its partition", function()
    local g = "share-refused-" .. os.time()
    local N = 10
    local topic = fresh(N, g)
    local c1 = new(g, { share_acknowledgement_mode = "explicit" })
    local c2 = new(g, { share_acknowledgement_mode = "explicit" })
    c1:subscribe { topic }
    local recs = {}
    poll_until({ c1 }, 20, function(_, r) recs[#recs + 1] = r end, function() return #recs == N end)
    c2:subscribe { topic }
    -- c2 joins and opens its share session (c1 holds every record: it gets none)
    poll_until({ c2 }, 20, function() error("c2 got a record c1 holds") end, function()
      local _, s = next(c2.sessions)
      return s and s.epoch > 0
    end)
    -- c2 acknowledges a record c1 holds (as if it were its own): the broker refuses
    local pk = next(c1.held)
    c2.held[pk] = { info = c1.held[pk].info, offsets = { [recs[1].offset] = true } }
    c2:acknowledge(recs[1], "accept")
    assert.are.same({ { topic = topic, partition = 0, offsets = 1, error_code = 121, error = "INVALID_RECORD_STATE" } },
      c2:commit_sync(5000))
    for _, r in ipairs(recs) do c1:acknowledge(r, "accept") end
    assert.are.same({ { topic = topic, partition = 0, offsets = N, error_code = 0 } }, c1:commit_sync(5000))
    c1:close()
    c2:close()
  end)

  it("fenced member rejoins, a lost share session is opened again", function()
    local g = "share-fence-" .. os.time()
    local N = 20
    local topic = fresh(N, g)
    local states = {}
    local acked = {}
    local c = new(g, { share_acknowledgement_mode = "explicit", max_poll_records = 5,
      on_state = function(a, b) states[#states + 1] = a .. ">" .. b end,
      on_acknowledgement_commit = function(res) for _, x in ipairs(res) do acked[#acked + 1] = x end end })
    c:subscribe { topic }
    local got = {}
    poll_until({ c }, 20, function(_, r)
      got[#got + 1] = r
    end, function() return #got > 0 end)
    -- an epoch the coordinator never gave: FENCED_MEMBER_EPOCH, the member rejoins
    c.member.epoch = c.member.epoch + 100
    c.member.hb_next = 0
    -- a session epoch the broker does not expect: INVALID_SHARE_SESSION_EPOCH, a new session
    local node, s = next(c.sessions)
    s.epoch = s.epoch + 7
    for _, r in ipairs(got) do c:acknowledge(r, "accept") end
    local more = {}
    poll_until({ c }, 20, function(_, r)
      more[#more + 1] = r
      c:acknowledge(r, "accept")
    end, function() return #got + #more == N and c.member.fenced == 1 and c:state() == "stable" end)
    assert.are.equal(1, c.member.fenced)
    assert.are.same({ "unjoined>joining", "joining>stable", "stable>fenced", "fenced>unjoined",
      "unjoined>joining", "joining>stable" }, retries_out(states))
    for _, r in ipairs(more) do assert.are.equal(1, r.delivery_count) end
    c:commit_sync(5000)
    -- every acknowledgement answered without error, each record once (those
    -- refused with the session were sent again)
    local n = 0
    for _, x in ipairs(acked) do
      assert.are.same({ topic, 0, 0 }, { x.topic, x.partition, x.error_code })
      n = n + x.offsets
    end
    assert.are.equal(N, n)
    assert.is_truthy(c.sessions[node].epoch > 0)
    c:close()
  end)

  it("a mixed group with Kafka's Java KafkaShareConsumer: each record delivered once in total", function()
    local g = "share-java-" .. os.time()
    local N = 600
    local topic = fresh(0, g)
    -- the Java member acquires at most 20 records a fetch (record_limit) and
    -- works 5 ms on each: it cannot take everything before lua-kafka's fetches
    local java = rk.java_bg({ "share", topic, g, 60, "%STOP%", 5 }, { bootstrap = bs, version = V,
      props = { ["max.poll.records"] = "20", ["share.acquire.mode"] = "record_limit" } })
    local ok, err = pcall(function()
      local acked = {}
      local c = new(g, { share_acknowledgement_mode = "explicit", max_poll_records = 20,
        on_acknowledgement_commit = function(res) for _, x in ipairs(res) do acked[#acked + 1] = x end end })
      c:subscribe { topic }
      -- both members in the group, each assigned the partition, before the
      -- records come (ShareGroupDescribe, the coordinator's view)
      local stop = socket.gettime() + 30
      repeat
        assert(c:poll(200))
      until assigned_members(c.client, g) == 2 or socket.gettime() > stop
      assert.are.equal(2, assigned_members(c.client, g))
      rk.java({ "produce", topic, N, "none", "idempotent" }, { bootstrap = bs, version = V })
      local lua_got, java_got = {}, {}
      local function java_recs(lines)
        java_got = {}
        for _, l in ipairs(lines or java.lines()) do
          local o, dc = l:match("^REC 0 (%d+) (%d+)")
          if o then java_got[#java_got + 1] = tonumber(o) .. "/" .. dc end
        end
      end
      -- the lua-kafka member takes at most half (then only heartbeats), so the
      -- Java member gets the rest
      poll_until({ c }, 40, function(_, r)
        lua_got[#lua_got + 1] = r.offset .. "/" .. r.delivery_count
        c:acknowledge(r, "accept")
      end, function()
        java_recs()
        return #lua_got >= N / 2 or #lua_got + #java_got >= N
      end)
      c:commit_sync(5000)
      stop = socket.gettime() + 40
      repeat
        c.member:step(c.client.now())
        socket.sleep(0.1)
        java_recs()
      until #lua_got + #java_got >= N or socket.gettime() > stop
      c:close()
      -- every acknowledgement of the lua-kafka member answered without error, each record once
      local n = 0
      for _, x in ipairs(acked) do
        assert.are.same({ topic, 0, 0 }, { x.topic, x.partition, x.error_code })
        n = n + x.offsets
      end
      assert.are.equal(#lua_got, n)
      java.stop()
      local lines = java.wait(30)
      java_recs(lines)
      -- Java's acknowledgement callback saw every one of its records accepted
      local jacked = 0
      for _, l in ipairs(lines) do
        assert.is_nil(l:match("^ACKFAIL"), l)
        local offs = l:match("^ACKED 0(.*)")
        if offs then for _ in offs:gmatch("%d+") do jacked = jacked + 1 end end
      end
      assert.are.equal(#java_got, jacked)
      local all = {}
      for _, x in ipairs(lua_got) do all[#all + 1] = x end
      for _, x in ipairs(java_got) do all[#all + 1] = x end
      table.sort(all, function(a, b) return tonumber(a:match("%d+")) < tonumber(b:match("%d+")) end)
      local want = {}
      for o = 0, N - 1 do want[#want + 1] = o .. "/1" end
      assert.are.same(want, all)
      -- (a mixed group: each member got some)
      assert(#lua_got > 0 and #java_got > 0, ("lua-kafka got %d, Java %d"):format(#lua_got, #java_got))
      -- nothing is left for a newcomer: both members' accepts were taken
      local c3 = new(g)
      c3:subscribe { topic }
      local late = {}
      local stop2 = socket.gettime() + 2
      while socket.gettime() < stop2 do
        for _, r in ipairs(assert(c3:poll(300))) do late[#late + 1] = r.offset end
      end
      c3:close()
      assert.are.same({}, late)
      print(("    mixed group: lua-kafka %d, Java %d records"):format(#lua_got, #java_got))
    end)
    if not ok then java.kill() end
    assert(ok, err)
  end)
end)
