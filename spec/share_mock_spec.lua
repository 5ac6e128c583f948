-- kafka.mock serving share groups (KIP-932), checked against the real
-- broker: every scenario below runs against kafka.mock (in-process, its
-- clock virtual: no JVM, also with KAFKA_VERSIONS=none) and against a real
-- Kafka 4.4.0 broker, asserting the same exact values on both: which
-- offsets each poll hands out, with which delivery count, the errors of
-- the share session and group protocol, epochs and assignments.
local kafka = require "kafka"
local mock = require "kafka.mock"
local share = require "kafka.share_consumer"
local proto = require "kafka.proto"
local rk = require "support.realkafka"
local H = require "support.helpers"

local API, E = proto.api, proto.errors

-- An environment: a cluster (mock or real) and what the scenarios do on it.
local function env_of(kind)
  local env = { kind = kind }
  local n = 0
  local client, admin, cluster, k
  function env.setup()
    if kind == "mock" then
      local t = 1e6
      cluster = mock.new { brokers = 1, now = function() return t end, sleep = function(ms) t = t + ms end,
        group_share_heartbeat_interval_ms = 1000, group_share_min_record_lock_duration_ms = 1000 }
      env.cluster = cluster
      env.opts = { brokers = cluster:bootstrap(), socket = cluster:socket_factory(), now = cluster.now,
        sleep = cluster.sleep }
    else
      -- the cluster share_consumer_spec uses (started once, shared)
      k = rk.cluster("4.4.0", 1, "4.4.0-share", { ["group.share.heartbeat.interval.ms"] = "1000",
        ["group.share.min.heartbeat.interval.ms"] = "1000", ["group.share.min.record.lock.duration.ms"] = "1000" })
      env.opts = { brokers = k.bootstrap.PLAINTEXT }
    end
    client = kafka.client.new(env.opts)
    admin = kafka.admin.new(client)
    env.client = client
  end
  function env.teardown()
    if client then client:close() end
    if cluster then cluster:close() end
  end
  env.now = function() return client.now() end
  env.sleep = function(ms) client.sleep(ms) end
  -- a new topic of `parts` partitions (one replica)
  function env.topic(parts)
    n = n + 1
    local name = ("sm-%d-%d-%d"):format(os.time(), math.random(1e6), n)
    local r = assert(admin:create_topics { { name = name, num_partitions = parts or 1, replication_factor = 1 } })
    assert.are.equal(0, r[1].error_code, r[1].error)
    assert(client:load_metadata({ topics = { name } }))
    return name
  end
  function env.group(prefix, cfg)
    n = n + 1
    local g = ("%s-%d-%d-%d"):format(prefix, os.time(), math.random(1e6), n)
    if cfg then
      local list = {}
      for name, v in pairs(cfg) do list[#list + 1] = { name = name, op = "set", value = v } end
      local r = assert(admin:alter_configs { { type = "group", name = g, configs = list } })
      assert.are.equal(0, r[1].error_code, r[1].error)
    end
    return g
  end
  -- batches: {count, count, ...}: one Produce (one batch) of that many records each; keys "k<offset>"
  function env.produce(topic, partition, batches)
    local conn = assert(client:broker(assert(client:leader(topic, partition))))
    for _, cnt in ipairs(batches) do
      local _, hw = env.offsets(topic, partition)
      local msgs = {}
      for i = 1, cnt do msgs[i] = { key = "k" .. (hw + i - 1), value = "v" } end
      local resp = assert(conn:request(API.Produce, { acks = -1, timeout_ms = 5000, topic_data = { { name = topic,
        partition_data = { { index = partition, records = proto.encode_records(msgs, { base_offset = 0 }) } } } } }))
      assert.are.equal(0, resp.responses[1].partition_responses[1].error_code)
    end
  end
  function env.offsets(topic, partition)
    local conn = assert(client:broker(assert(client:leader(topic, partition))))
    local resp = assert(conn:request(API.ListOffsets, { replica_id = -1, isolation_level = 0, topics = { { name = topic,
      partitions = { { partition_index = partition, timestamp = -1, current_leader_epoch = -1 } } } } }))
    return 0, resp.topics[1].partitions[1].offset
  end
  function env.new(g, opts)
    opts = opts or {}
    opts.group_id = g
    return share.new(kafka.client.new(env.opts), opts)
  end
  -- polls c until done(list of "offset/delivery_count" so far) or ms pass (on the env's clock)
  function env.poll_until(c, ms, each, done)
    local stop = env.now() + ms
    local got = {}
    while not (done and done(got)) and env.now() < stop do
      local recs = assert(c:poll(math.min(200, math.max(1, stop - env.now()))))
      for _, r in ipairs(recs) do
        got[#got + 1] = r.offset .. "/" .. r.delivery_count
        if each then each(r) end
      end
    end
    return got
  end
  -- c is a stable member whose share session is open (a ShareFetch answered), given no record
  function env.settle(c)
    local stop = env.now() + 30000
    repeat
      assert.are.same({}, assert(c:poll(100)))
      local _, s = next(c.sessions)
      if s and s.epoch > 0 and c:state() == "stable" then return end
    until env.now() > stop
    error("no share session in 30 s")
  end
  return env
end

-- the real broker's half runs on the first Lua of make test (the Luas all
-- run the mock's; what the real broker does is not the Lua's business)
local kinds = { "mock" }
if rk.main() == "4.4.0" and not H.lite() then kinds[2] = "4.4.0" end

for _, kind in ipairs(kinds) do
  describe("share groups on " .. (kind == "mock" and "kafka.mock" or "Kafka " .. kind), function()
    local env = env_of(kind)
    setup(function() env.setup() end)
    teardown(function() env.teardown() end)

    it("a new group starts at the latest offset; whole batches up to max_poll_records", function()
      local t = env.topic(1)
      env.produce(t, 0, { 2 })
      local g = env.group("sm-latest")
      -- the member starts the group (its first ShareFetch): at offset 2, the end;
      -- its fetches wait 1 ms at most, so none waits on the broker for the batches below
      local c = env.new(g, { share_acknowledgement_mode = "explicit", max_poll_records = 4, fetch_max_wait_ms = 1 })
      c:subscribe { t }
      env.settle(c)
      env.sleep(100)
      -- batches of 3, 3, 3, 1 at offsets 2..11: max 4 records a fetch takes whole batches
      env.produce(t, 0, { 3, 3, 3, 1 })
      local polls = {}
      local total = 0
      local stop = env.now() + 20000
      while total < 10 and env.now() < stop do
        local recs = assert(c:poll(200))
        if #recs > 0 then
          local list = {}
          for _, r in ipairs(recs) do
            list[#list + 1] = r.offset .. "/" .. r.delivery_count
            assert.are.equal("k" .. r.offset, r.key)
            c:acknowledge(r, "accept")
          end
          polls[#polls + 1] = table.concat(list, " ")
          total = total + #recs
        end
      end
      assert.are.same({ "2/1 3/1 4/1 5/1 6/1 7/1", "8/1 9/1 10/1 11/1" }, polls)
      assert.are.same({ { topic = t, partition = 0, offsets = 4, error_code = 0 } }, c:commit_sync(5000))
      c:close()
    end)

    it("release redelivers (delivery count + 1) up to share.delivery.count.limit, reject never", function()
      local t = env.topic(1)
      local g = env.group("sm-rel", { ["share.auto.offset.reset"] = "earliest" })
      env.produce(t, 0, { 1, 1, 1, 1, 1, 1 })
      local results = {}
      local c = env.new(g, { share_acknowledgement_mode = "explicit",
        on_acknowledgement_commit = function(res) for _, x in ipairs(res) do results[#results + 1] = x end end })
      c:subscribe { t }
      local first = env.poll_until(c, 20000, function(r)
        c:acknowledge(r, ({ "release", "reject", "accept" })[r.offset % 3 + 1])
      end, function(got) return #got >= 6 end)
      assert.are.same({ "0/1", "1/1", "2/1", "3/1", "4/1", "5/1" }, first)
      -- the released ones come back, released again each time: delivered 5 times, then archived
      local rounds = {}
      for _ = 2, 5 do
        rounds[#rounds + 1] = table.concat(env.poll_until(c, 20000, function(r) c:acknowledge(r, "release") end,
          function(got) return #got >= 2 end), " ")
      end
      assert.are.same({ "0/2 3/2", "0/3 3/3", "0/4 3/4", "0/5 3/5" }, rounds)
      c:commit_sync(5000)
      -- every acknowledgement taken: 6 + 4 times 2
      local n = 0
      for _, x in ipairs(results) do
        assert.are.same({ t, 0, 0 }, { x.topic, x.partition, x.error_code })
        n = n + x.offsets
      end
      assert.are.equal(14, n)
      assert.are.same({}, env.poll_until(c, 2000))
      c:close()
      -- a new member gets nothing either
      local c2 = env.new(g)
      c2:subscribe { t }
      assert.are.same({}, env.poll_until(c2, 3000))
      c2:close()
    end)

    it("a lock that runs out returns the records; leaving the group does not release them", function()
      local t = env.topic(1)
      local g = env.group("sm-lock", { ["share.auto.offset.reset"] = "earliest",
        ["share.record.lock.duration.ms"] = "3000" })
      env.produce(t, 0, { 3 })
      local c1 = env.new(g, { share_acknowledgement_mode = "explicit" })
      -- (before the fetch that acquires them: their lock starts later than this)
      local t_acquire = env.now()
      c1:subscribe { t }
      assert.are.same({ "0/1", "1/1", "2/1" }, env.poll_until(c1, 20000, nil, function(got) return #got >= 3 end))
      local t0 = env.now()
      -- c1 leaves the group (epoch -1) but keeps its share session: nothing is released
      c1.member:leave(env.now() + 5000)
      assert.are.equal(0, c1.member.left)
      local c2 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c2:subscribe { t }
      env.settle(c2)
      local early = env.poll_until(c2, 1500 - (env.now() - t0))
      assert.are.same({}, early)
      -- after the lock (3 s): delivered again
      local again = env.poll_until(c2, 10000, function(r) c2:acknowledge(r, "accept") end,
        function(got) return #got >= 3 end)
      assert.are.same({ "0/2", "1/2", "2/2" }, again)
      assert.is_true(env.now() - t_acquire >= 3000)
      c2:close()
      c1.held = {}
      c1:close()
    end)

    it("closing the share session releases at once what the member holds", function()
      local t = env.topic(1)
      local g = env.group("sm-sess", { ["share.auto.offset.reset"] = "earliest" })
      env.produce(t, 0, { 4 })
      local c1 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c1:subscribe { t }
      assert.are.same({ "0/1", "1/1", "2/1", "3/1" }, env.poll_until(c1, 20000, nil, function(got) return #got >= 4 end))
      -- no acknowledgement: the close's ShareAcknowledge (epoch -1) lists the partition only
      c1.held = {}
      assert.are.same({}, c1:close())
      local c2 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c2:subscribe { t }
      local t0 = env.now()
      local again = env.poll_until(c2, 20000, function(r) c2:acknowledge(r, "accept") end,
        function(got) return #got >= 4 end)
      assert.are.same({ "0/2", "1/2", "2/2", "3/2" }, again)
      assert.is_true(env.now() - t0 < 15000) -- (not after the 30 s lock)
      c2:close()
    end)

    it("a closed connection ends its share session: the records come back at once", function()
      local t = env.topic(1)
      local g = env.group("sm-conn", { ["share.auto.offset.reset"] = "earliest" })
      env.produce(t, 0, { 3 })
      local c1 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c1:subscribe { t }
      assert.are.same({ "0/1", "1/1", "2/1" }, env.poll_until(c1, 20000, nil, function(got) return #got >= 3 end))
      local _, s = next(c1.sessions)
      c1.pool[s.node_id]:close("test: the connection drops")
      local c2 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c2:subscribe { t }
      local t0 = env.now()
      local again = env.poll_until(c2, 20000, function(r) c2:acknowledge(r, "accept") end,
        function(got) return #got >= 3 end)
      assert.are.same({ "0/2", "1/2", "2/2" }, again)
      assert.is_true(env.now() - t0 < 15000) -- (not after the 30 s lock)
      c2:close()
      c1.held = {}
      c1:close()
    end)

    it("renew keeps records past their lock; acknowledging another member's record: INVALID_RECORD_STATE", function()
      local t = env.topic(1)
      local g = env.group("sm-renew", { ["share.auto.offset.reset"] = "earliest",
        ["share.record.lock.duration.ms"] = "2000" })
      env.produce(t, 0, { 4 })
      local c1 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c1:subscribe { t }
      local recs = {}
      env.poll_until(c1, 20000, function(r) recs[#recs + 1] = r end, function(got) return #got >= 4 end)
      local c2 = env.new(g, { share_acknowledgement_mode = "explicit" })
      c2:subscribe { t }
      env.settle(c2)
      -- 5 s (2.5 locks): c1 renews every 0.5 s, c2 gets nothing
      local stop = env.now() + 5000
      while env.now() < stop do
        for _, r in ipairs(recs) do assert.is_true(c1:acknowledge(r, "renew")) end
        assert.are.same({ { topic = t, partition = 0, offsets = 4, error_code = 0 } }, c1:commit_sync(5000))
        assert.are.same({}, env.poll_until(c2, 500))
      end
      -- c2 acknowledges a record c1 holds: refused
      local pk = next(c1.held)
      c2.held[pk] = { info = c1.held[pk].info, offsets = { [recs[1].offset] = true } }
      c2:acknowledge(recs[1], "accept")
      assert.are.same({ { topic = t, partition = 0, offsets = 1, error_code = E.INVALID_RECORD_STATE,
        error = "INVALID_RECORD_STATE" } }, c2:commit_sync(5000))
      -- the last one not renewed any more: c2 gets it after its lock, delivered twice
      for i = 1, 3 do c1:acknowledge(recs[i], "accept") end
      assert.are.same({ { topic = t, partition = 0, offsets = 3, error_code = 0 } }, c1:commit_sync(5000))
      local again = env.poll_until(c2, 10000, function(r) c2:acknowledge(r, "accept") end,
        function(got) return #got >= 1 end)
      assert.are.same({ "3/2" }, again)
      c2:close()
      c1.held = {}
      c1:close()
    end)

    it("share session errors: acknowledgements in epoch 0, wrong epochs, no session", function()
      local t = env.topic(1)
      local g = env.group("sm-err", { ["share.auto.offset.reset"] = "earliest" })
      env.produce(t, 0, { 2 })
      local c = env.new(g, { share_acknowledgement_mode = "explicit" })
      c:subscribe { t }
      assert.are.same({ "0/1", "1/1" }, env.poll_until(c, 20000, nil, function(got) return #got >= 2 end))
      local tid = env.client:topic(t).topic_id
      local conn = assert(env.client:broker(assert(env.client:leader(t, 0))))
      local member = c.member.member_id
      local acks = { { topic_id = tid, partitions = { { partition_index = 0, acknowledgement_batches = {
        { first_offset = 0, last_offset = 0, acknowledge_types = { 1 } } } } } } }
      local function fetch(epoch, topics)
        return assert(conn:request(API.ShareFetch, { group_id = g, member_id = member, share_session_epoch = epoch,
          max_wait_ms = 0, min_bytes = 1, max_bytes = 1048576, max_records = 10, batch_size = 10, topics = topics,
          forgotten_topics_data = {} })).error_code
      end
      local function ack(epoch, who)
        return assert(conn:request(API.ShareAcknowledge, { group_id = g, member_id = who or member,
          share_session_epoch = epoch, topics = acks })).error_code
      end
      -- (sessions are the group's and member's, whatever the connection: a
      -- member with none gets SHARE_SESSION_NOT_FOUND)
      assert.are.same({ E.INVALID_REQUEST, E.INVALID_SHARE_SESSION_EPOCH, E.INVALID_SHARE_SESSION_EPOCH,
        E.SHARE_SESSION_NOT_FOUND }, { fetch(0, acks), ack(0), ack(9999), ack(5, ("z"):rep(22)) })
      -- c's session (epoch 1 now on the broker) answers a wrong epoch
      local _, s = next(c.sessions)
      local cconn = c.pool[s.node_id]
      local wrong = assert(cconn:request(API.ShareAcknowledge, { group_id = g, member_id = member,
        share_session_epoch = s.epoch + 3, topics = acks }))
      assert.are.equal(E.INVALID_SHARE_SESSION_EPOCH, wrong.error_code)
      -- the right epoch: accepted; the same offset again: nothing to do (below the start offset)
      local ok = assert(cconn:request(API.ShareAcknowledge, { group_id = g, member_id = member,
        share_session_epoch = s.epoch, topics = acks }))
      assert.are.same({ 0, 0 }, { ok.error_code, ok.responses[1].partitions[1].error_code })
      local again = assert(cconn:request(API.ShareAcknowledge, { group_id = g, member_id = member,
        share_session_epoch = s.epoch + 1, topics = acks }))
      assert.are.same({ 0, 0 }, { again.error_code, again.responses[1].partitions[1].error_code })
      s.epoch = s.epoch + 2
      c.held = {}
      c:close()
    end)

    it("heartbeats: epochs, assignment, a shared partition, fencing, leaving, bad requests", function()
      local t = env.topic(1)
      local g = env.group("sm-hb")
      local conn = assert(env.client:coordinator(g))
      local tid = env.client:topic(t).topic_id
      local function hb(member, epoch, topics)
        return assert(conn:request(API.ShareGroupHeartbeat, { group_id = g, member_id = member, member_epoch = epoch,
          subscribed_topic_names = topics }))
      end
      -- heartbeats (every 200 ms) until the member is assigned partition 0 of t; its epoch
      -- (Kafka assigns a new topic's partitions once their share state is
      -- initialized: a heartbeat or two later; kafka.mock in the first answer)
      local function join(member)
        local r = hb(member, 0, { t })
        local stop = env.now() + 20000
        while r.error_code == E.COORDINATOR_LOAD_IN_PROGRESS and env.now() < stop do
          env.sleep(200)
          r = hb(member, 0, { t })
        end
        assert.are.equal(0, r.error_code)
        local epoch, a = r.member_epoch, r.assignment
        while not (a and #a.topic_partitions == 1) and env.now() < stop do
          env.sleep(200)
          r = hb(member, epoch)
          assert.are.equal(0, r.error_code)
          epoch, a = r.member_epoch, r.assignment or a
        end
        assert.are.same({ { topic_id = tid, partitions = { 0 } } }, a.topic_partitions)
        return epoch
      end
      local A, B = ("a"):rep(22), ("b"):rep(22)
      local ea = join(A)
      local eb = join(B)
      -- a's next heartbeat takes the group's epoch; its assignment did not change (not sent)
      local r = hb(A, ea)
      assert.are.same({ 0, eb, nil }, { r.error_code, r.member_epoch, r.assignment })
      ea = r.member_epoch
      local d = assert(conn:request(API.ShareGroupDescribe, { group_ids = { g }, include_authorized_operations = false }))
      local gd = d.groups[1]
      local ms = {}
      for _, m in ipairs(gd.members) do
        local tp = m.assignment.topic_partitions[1]
        ms[#ms + 1] = { m.member_id, m.member_epoch, tp.topic_name, tp.partitions }
      end
      table.sort(ms, function(x, y) return x[1] < y[1] end)
      assert.are.same({ 0, "Stable", eb, eb, "simple", { { A, eb, t, { 0 } }, { B, eb, t, { 0 } } } },
        { gd.error_code, gd.group_state, gd.group_epoch, gd.assignment_epoch, gd.assignor_name, ms })
      -- errors: a wrong epoch, an unknown member, no subscription at epoch 0, no member id
      assert.are.same({ E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID, E.INVALID_REQUEST, E.INVALID_REQUEST },
        { hb(A, ea + 5).error_code, hb(("c"):rep(22), 3).error_code, hb(("d"):rep(22), 0, nil).error_code,
          hb("", 0, { t }).error_code })
      -- b leaves: a's epoch moves on, its assignment the same
      local lb = hb(B, -1)
      assert.are.same({ 0, -1 }, { lb.error_code, lb.member_epoch })
      r = hb(A, ea)
      -- (Kafka moves it on a heartbeat or more later, kafka.mock at once)
      assert.are.same({ 0, true }, { r.error_code, r.member_epoch >= ea })
      local la = hb(A, -1)
      assert.are.same({ 0, -1 }, { la.error_code, la.member_epoch })
      d = assert(conn:request(API.ShareGroupDescribe, { group_ids = { g }, include_authorized_operations = false }))
      assert.are.same({ 0, "Empty", 0 }, { d.groups[1].error_code, d.groups[1].group_state, #d.groups[1].members })
    end)

    if kind == "mock" then
      it("the default lock is 30 s on the cluster's clock (kafka.mock only: a virtual clock)", function()
        local t = env.topic(1)
        local g = env.group("sm-30s", { ["share.auto.offset.reset"] = "earliest" })
        env.produce(t, 0, { 2 })
        local c1 = env.new(g, { share_acknowledgement_mode = "explicit" })
        c1:subscribe { t }
        assert.are.same({ "0/1", "1/1" }, env.poll_until(c1, 20000, nil, function(got) return #got >= 2 end))
        local t0 = env.now()
        c1.member:leave(env.now() + 5000)
        local c2 = env.new(g, { share_acknowledgement_mode = "explicit" })
        c2:subscribe { t }
        assert.are.same({}, env.poll_until(c2, 29900 - (env.now() - t0)))
        local again = env.poll_until(c2, 2000, nil, function(got) return #got >= 2 end)
        assert.are.same({ "0/2", "1/2" }, again)
        assert.is_true(env.now() - t0 >= 30000 and env.now() - t0 < 30500)
        c2.held = {}
        c2:close()
        c1.held = {}
        c1:close()
      end)
    end
  end)
end
