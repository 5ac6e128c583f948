-- The idempotent producer's recovery (issue 27), as Kafka's Java client's
-- TransactionManager does it: a local epoch bump (no request) after a
-- stamped batch failed or expired and on UNKNOWN_PRODUCER_ID /
-- OUT_OF_ORDER_SEQUENCE_NUMBER, the broken partitions restarted at
-- sequence 0 once their batches in flight have answered, the others after
-- their stamped batches; a new producer id only when none is held or the
-- epoch would overflow; InitProducerId failures retried after a backoff;
-- fatal only for what Java makes fatal (PRODUCER_FENCED, authorization, an
-- unsupported version). Transactional producers keep the transactional
-- rules (spec/eos_spec.lua).
--
-- Against kafka.mock (in process, on a virtual clock: every wait is
-- exact), which checks sequences and epochs per partition as Kafka does: a
-- new epoch must start at sequence 0, a producer the partition does not
-- know is taken at any sequence (ProducerAppendInfo.checkSequence). Not
-- against librdkafka 2.0.2's mock (spec/support/rdkafka_mock.lua), which differs
-- from Kafka where these rules matter: it does not check an idempotent
-- producer's sequences at all, answers InitProducerId with a producer id
-- and a null transactional id (a bump) INVALID_PRODUCER_ID_MAPPING (49),
-- and keeps one cluster-wide stack of injected errors (not per broker or
-- partition). Then one case on real brokers whose producer state expires.
local kafka = require "kafka"
local mock = require "kafka.mock"
local proto = kafka.proto
local E = proto.errors
local H = require "support.helpers"

-- a virtual clock shared by the mock and the client: sleeps advance it
local function vclock()
  local c = { t = 0, sleeps = {} }
  function c.now() return c.t end
  function c.sleep(ms)
    c.sleeps[#c.sleeps + 1] = ms
    c.t = c.t + ms
  end
  return c
end

-- a cluster, a client and a producer on one virtual clock
local function start(brokers, topics, popts, copts)
  local clock = vclock()
  local cluster = mock.new { brokers = brokers, topics = topics, now = clock.now, sleep = clock.sleep }
  copts = copts or {}
  copts.now, copts.sleep = clock.now, clock.sleep
  local client = H.mock_client(cluster, copts)
  popts = popts or {}
  if popts.linger_ms == nil then popts.linger_ms = 1e9 end
  local p = kafka.producer.new(client, popts)
  return cluster, p, clock, client
end

-- the batches of topic/partition as the broker stores them:
-- {{producer_id, producer_epoch, base_sequence, count}, ...}
local function stamps(cluster, topic, partition)
  local out = {}
  for _, e in ipairs(cluster.topics[topic].partitions[partition].log.entries) do
    local _, info = proto.decode_records(e.bytes, { batches = true })
    local b = info.batches[1]
    out[#out + 1] = { b.producer_id, b.producer_epoch, b.base_sequence, b.count }
  end
  return out
end

local function values(cluster, topic, partition)
  local out = {}
  for i, m in ipairs(cluster:records(topic, partition)) do out[i] = m.value end
  return out
end

local function inits(cluster) return cluster:request_counts().InitProducerId or 0 end

describe("idempotent producer recovery (kafka.mock)", function()
  it("OUT_OF_ORDER_SEQUENCE_NUMBER: a local epoch bump, no InitProducerId; the batch again from sequence 0", function()
    local cluster, p = start(1, { t = 1 })
    assert(p:send_sync("t", "one"))
    assert(p:send_sync("t", "two"))
    local pid = p.producer_id
    cluster:fail("Produce", E.OUT_OF_ORDER_SEQUENCE_NUMBER, 1)
    assert(p:send("t", "three"))
    local _, failed, delivered = p:flush()
    assert.are.same({ 0, 1 }, { failed, delivered })
    assert.are.same({ pid, 1, 1 }, { p.producer_id, p.producer_epoch, inits(cluster) })
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 0, 1, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 0))
    assert.are.same({ "one", "two", "three" }, values(cluster, "t", 0))
  end)

  it("UNKNOWN_PRODUCER_ID: retried under a bumped epoch from sequence 0", function()
    local cluster, p = start(1, { t = 1 })
    assert(p:send_sync("t", "one"))
    local pid = p.producer_id
    cluster:fail("Produce", E.UNKNOWN_PRODUCER_ID, 1)
    assert(p:send("t", "two"))
    local _, failed, delivered = p:flush()
    assert.are.same({ 0, 1 }, { failed, delivered })
    assert.are.same({ pid, 1, 1 }, { p.producer_id, p.producer_epoch, inits(cluster) })
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 0))
  end)

  it("a batch given up in flight, or expired in its retry backoff: the next goes under a bumped epoch from 0, nothing asked",
    function()
    -- (the issue's case: librdkafka 2.0.2's mock answered the InitProducerId
    -- bump 49 and the producer went fatal for good)
    local cluster, p = start(1, { t = 1 }, { delivery_timeout_ms = 1000 })
    assert(p:send_sync("t", "one"))
    local pid = p.producer_id
    cluster:delay("Produce", 5000) -- the answer comes after the batch's deadline
    assert(p:send("t", "lost"))
    local reports, failed = p:flush(2000)
    assert.are.same({ 1, "timeout" }, { failed, reports[1].code })
    cluster:delay("Produce", 0)
    for i = 1, 3 do assert(p:send("t", "after" .. i)) end
    local _, failed2, delivered = p:flush()
    assert.are.same({ 0, 3 }, { failed2, delivered })
    assert.are.same({ pid, 1, 1 }, { p.producer_id, p.producer_epoch, inits(cluster) })
    -- the delayed batch was written too (under epoch 0: the broker had it)
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 0, 1, 1 }, { pid, 1, 0, 3 } }, stamps(cluster, "t", 0))
    assert.is_nil(p:transaction_state())
    -- refused once (not written), then its delivery deadline passes in the retry backoff
    p.retry_backoff_ms, p.retry_backoff_max_ms = 5000, 5000
    cluster:fail("Produce", E.NOT_ENOUGH_REPLICAS, 1)
    assert(p:send("t", "expired"))
    local reports3, failed3 = p:flush()
    assert.are.same({ 1, "timeout" }, { failed3, reports3[1].code })
    assert.matches("delivery_timeout_ms %(1000%) expired after 1 attempts: .*NOT_ENOUGH_REPLICAS", reports3[1].err)
    assert(p:send_sync("t", "next"))
    assert.are.same({ pid, 2, 1 }, { p.producer_id, p.producer_epoch, inits(cluster) })
    assert.are.same({ pid, 2, 0, 1 }, stamps(cluster, "t", 0)[4])
  end)

  it("the broken partition restarts at 0 once its batches in flight have answered; the others keep their stamps", function()
    local cluster, p = start(2, { t = 2 }, { batch_size = 300, max_retries = 20 })
    assert(p:send_sync("t", "start", { partition = 0 })) -- broker 1 leads partition 0,
    assert(p:send_sync("t", "start", { partition = 1 })) -- broker 2 partition 1
    local pid = p.producer_id
    for i = 1, 30 do assert(p:send("t", ("a%02d"):format(i), { partition = 0 })) end
    assert(p:send("t", "b", { partition = 1 }))
    -- partition 0's first batch is refused (its later ones in flight then
    -- too: a gap); partition 1's batch fails retriably in the same round
    cluster:fail("Produce", E.OUT_OF_ORDER_SEQUENCE_NUMBER, 1, "t", 0)
    cluster:fail("Produce", E.NOT_ENOUGH_REPLICAS, 1, "t", 1)
    cluster:delay("Produce", 10) -- (virtual ms: the producer reads the answers one by one)
    local _, failed, delivered = p:flush()
    cluster:delay("Produce", 0)
    assert.are.same({ 0, 31 }, { failed, delivered })
    assert.are.same({ 1, 1 }, { p.producer_epoch, inits(cluster) }) -- one bump
    -- partition 0: every batch again under epoch 1, its sequences from 0 in order
    local s0 = stamps(cluster, "t", 0)
    assert.are.same({ pid, 0, 0, 1 }, s0[1])
    local seq, n = 0, 0
    for i = 2, #s0 do
      assert.are.same({ pid, 1, seq }, { s0[i][1], s0[i][2], s0[i][3] })
      seq, n = seq + s0[i][4], n + s0[i][4]
    end
    assert.are.equal(30, n)
    assert.is_true(#s0 > 3) -- (several batches were in flight at once)
    -- partition 1: its retried batch keeps epoch 0 and its sequence (a copy
    -- the broker has is found a duplicate); the next one starts epoch 1 at 0
    assert(p:send_sync("t", "c", { partition = 1 }))
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 0, 1, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 1))
    local want = { "start" }
    for i = 1, 30 do want[#want + 1] = ("a%02d"):format(i) end
    assert.are.same(want, values(cluster, "t", 0))
    assert.are.same({ "start", "b", "c" }, values(cluster, "t", 1))
  end)

  it("UNKNOWN_PRODUCER_ID on the oldest batch while later ones in flight are written: the restart waits for their answers",
    function()
      -- a partition with no state for the producer takes any sequence (as
      -- Kafka does), so the batches in flight behind the refused one are
      -- written: the restart at 0 must come after their answers, or the
      -- sequences under the new epoch get a gap (a second bump)
      local cluster, p = start(1, { t = 1 }, { batch_size = 300 })
      assert(p:send_sync("u", "id first")) -- (the producer id, before the batches of t go)
      local pid = p.producer_id
      for i = 1, 30 do assert(p:send("t", ("a%02d"):format(i))) end
      cluster:fail("Produce", E.UNKNOWN_PRODUCER_ID, 1, "t", 0)
      cluster:delay("Produce", 10) -- (virtual ms: the producer reads the answers one by one)
      local _, failed, delivered = p:flush()
      cluster:delay("Produce", 0)
      assert.are.same({ 0, 30 }, { failed, delivered })
      assert.are.same({ 1, 1 }, { p.producer_epoch, inits(cluster) }) -- one bump
      -- the 4 batches in flight behind the first went under epoch 0; then
      -- the first and the rest under epoch 1 from sequence 0, in order
      local s0, n, seq = stamps(cluster, "t", 0), 0, 0
      for i = 1, #s0 do
        if i <= 4 then
          assert.are.same({ pid, 0 }, { s0[i][1], s0[i][2] })
        else
          assert.are.same({ pid, 1, seq }, { s0[i][1], s0[i][2], s0[i][3] })
          seq = seq + s0[i][4]
        end
        n = n + s0[i][4]
      end
      assert.are.equal(30, n)
    end)

  it("a batch stamped before the bump answered UNKNOWN_PRODUCER_ID: its partition restarts under the new epoch, no second bump",
    function()
      local cluster, p = start(2, { t = 2 })
      assert(p:send_sync("t", "start", { partition = 0 }))
      assert(p:send_sync("t", "start", { partition = 1 }))
      local pid = p.producer_id
      assert(p:send("t", "a", { partition = 0 }))
      assert(p:send("t", "b", { partition = 1 }))
      cluster:fail("Produce", E.OUT_OF_ORDER_SEQUENCE_NUMBER, 1, "t", 0) -- the bump
      cluster:fail("Produce", E.NOT_ENOUGH_REPLICAS, 1, "t", 1)          -- b waits for its retry,
      cluster:fail("Produce", E.UNKNOWN_PRODUCER_ID, 1, "t", 1)          -- then is sent under epoch 0
      local _, failed, delivered = p:flush()
      assert.are.same({ 0, 2 }, { failed, delivered })
      assert.are.same({ 1, 1 }, { p.producer_epoch, inits(cluster) })
      assert.are.same({ { pid, 0, 0, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 0))
      assert.are.same({ { pid, 0, 0, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 1))
    end)

  it("after a bump a partition sends no batch under the new epoch while one stamped under the old is not settled", function()
    local cluster, p
    local later = false
    cluster, p = start(2, { t = 2, u = 1 }, { on_delivery = function(r)
      -- u/0 (broker 1) is delivered in the first round: a new batch of t/1 after it
      if r.topic == "u" and not later then
        later = true
        assert(p:send("t", "b2", { partition = 1 }))
      end
    end })
    assert(p:send_sync("t", "start", { partition = 0 }))
    assert(p:send_sync("t", "start", { partition = 1 }))
    local pid = p.producer_id
    assert(p:send("t", "a", { partition = 0 }))
    assert(p:send("t", "b1", { partition = 1 }))
    assert(p:send("u", "u", { partition = 0 }))
    cluster:fail("Produce", E.OUT_OF_ORDER_SEQUENCE_NUMBER, 1, "t", 0) -- the bump
    cluster:fail("Produce", E.NOT_ENOUGH_REPLICAS, 2, "t", 1)          -- b1 refused twice, epoch 0
    local _, failed, delivered = p:flush()
    assert.are.same({ 0, 4 }, { failed, delivered })
    assert.are.same({ 1, 1 }, { p.producer_epoch, inits(cluster) })
    -- b1 under epoch 0 (had b2 gone first under epoch 1, b1 would be INVALID_PRODUCER_EPOCH)
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 0, 1, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 1))
    assert.are.same({ "start", "b1", "b2" }, values(cluster, "t", 1))
  end)

  it("INVALID_PRODUCER_EPOCH is not fatal: the batch fails (code \"kafka\"), the epoch is bumped, the producer goes on", function()
    local cluster, p = start(1, { t = 1 })
    assert(p:send_sync("t", "one"))
    local pid = p.producer_id
    cluster:fail("Produce", E.INVALID_PRODUCER_EPOCH, 1)
    assert(p:send("t", "refused"))
    local reports, failed = p:flush()
    assert.are.same({ 1, "kafka", E.INVALID_PRODUCER_EPOCH }, { failed, reports[1].code, reports[1].error_code })
    assert(p:send_sync("t", "two"))
    assert.are.same({ pid, 1, 1 }, { p.producer_id, p.producer_epoch, inits(cluster) })
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 1, 0, 1 } }, stamps(cluster, "t", 0))
    -- the bump came with the failure: "two" went once (not first at sequence 2
    -- under epoch 0, refused OUT_OF_ORDER_SEQUENCE_NUMBER, then bumped)
    assert.are.equal(3, cluster:request_counts().Produce)
  end)

  it("an epoch that would overflow (32767): a new producer id (InitProducerId), sequences from 0", function()
    local cluster, p = start(1, { t = 1 })
    assert(p:send_sync("t", "one"))
    local pid = p.producer_id
    p.producer_epoch = 32767 -- (as if bumped that often: the partition restarts at 0 under it)
    assert(p:send_sync("t", "two"))
    cluster:fail("Produce", E.OUT_OF_ORDER_SEQUENCE_NUMBER, 1)
    assert(p:send_sync("t", "three"))
    local pid2 = p.producer_id
    assert.are_not.equal(pid, pid2)
    assert.are.same({ 0, 2 }, { p.producer_epoch, inits(cluster) })
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 32767, 0, 1 }, { pid2, 0, 0, 1 } }, stamps(cluster, "t", 0))
  end)

  it("InitProducerId errors that are not fatal are retried after a backoff, doubling; no message fails", function()
    local cluster, p, clock = start(1, { t = 1 }, { retry_backoff_ms = 100, retry_backoff_max_ms = 1000 })
    cluster:fail("InitProducerId", E.INVALID_PRODUCER_ID_MAPPING, 1) -- (librdkafka 2.0.2's mock's answer)
    cluster:fail("InitProducerId", E.COORDINATOR_LOAD_IN_PROGRESS, 1)
    cluster:fail("InitProducerId", E.NOT_COORDINATOR, 1)
    for i = 1, 5 do assert(p:send("t", "v" .. i)) end
    local _, failed, delivered = p:flush()
    assert.are.same({ 0, 5 }, { failed, delivered })
    assert.are.same({ 4, 0 }, { inits(cluster), p.producer_epoch })
    assert.are.same({ 100, 200, 400 }, clock.sleeps)
    assert.are.same({ { p.producer_id, 0, 0, 5 } }, stamps(cluster, "t", 0))
  end)

  it("what Java makes fatal is fatal: authorization, an unsupported version (\"fatal\"), PRODUCER_FENCED (\"fenced\")", function()
    for _, case in ipairs { { E.CLUSTER_AUTHORIZATION_FAILED, "fatal" }, { E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "fatal" },
        { E.UNSUPPORTED_VERSION, "fatal" }, { E.UNSUPPORTED_FOR_MESSAGE_FORMAT, "fatal" },
        { E.PRODUCER_FENCED, "fenced" } } do
      local cluster, p = start(1, { t = 1 }, { enable_idempotence = true })
      cluster:fail("InitProducerId", case[1], 1)
      assert(p:send("t", "v"))
      local reports, failed = p:flush()
      assert.are.same({ 1, case[2], case[1] }, { failed, reports[1].code, reports[1].error_code })
      local id, _, code = p:send("t", "w")
      assert.are.same({ nil, case[2] }, { id, code })
      assert.are.same({ 1, 0 }, { inits(cluster), #cluster:records("t", 0) })
    end
    -- the default (enable_idempotence unset): idempotence goes off instead
    local cluster, p = start(1, { t = 1 })
    cluster:fail("InitProducerId", E.CLUSTER_AUTHORIZATION_FAILED, 1)
    assert(p:send("t", "v"))
    local _, failed, delivered = p:flush()
    assert.are.same({ 0, 1, false }, { failed, delivered, p.idempotent })
    assert.are.same({ { -1, -1, -1, 1 } }, stamps(cluster, "t", 0))
  end)

  it("a partition that forgot the producer (its state expired) takes the next sequence: no bump", function()
    local cluster, p = start(1, { t = 1 })
    assert(p:send_sync("t", "one"))
    assert(p:send_sync("t", "two"))
    local pid = p.producer_id
    cluster:expire_producers("t", 0)
    assert(p:send_sync("t", "three"))
    assert.are.same({ pid, 0, 1 }, { p.producer_id, p.producer_epoch, inits(cluster) })
    assert.are.same({ { pid, 0, 0, 1 }, { pid, 0, 1, 1 }, { pid, 0, 2, 1 } }, stamps(cluster, "t", 0))
  end)
end)

-- ---------------------------------------------------------------------------
-- Real brokers: a cluster of its own whose brokers forget an idle
-- producer within about a second (producer.id.expiration.ms; the
-- transactional ids' expiry short too), on the main version only.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local socket = require "socket"

-- the producers partition 0 of topic has state for: {[producer_id] = {epoch, last_sequence}}
local function active_producers(client, topic)
  local c = assert(client:broker(assert(client:leader(topic, 0))))
  local resp = assert(c:request(proto.api_key("DescribeProducers"),
    { topics = { { name = topic, partition_indexes = { 0 } } } }))
  local pr = resp.topics[1].partitions[1]
  assert.are.equal(0, pr.error_code)
  local out = {}
  for _, a in ipairs(pr.active_producers) do out[a.producer_id] = { a.producer_epoch, a.last_sequence } end
  return out
end

if rk.versions()[1] then
  describe("idempotent producer recovery on Kafka " .. rk.main() .. " (producer state that expires)", function()
    local k, client, p
    setup(function()
      k = rk.cluster(rk.main(), 1, rk.main() .. "-pidexp", { ["producer.id.expiration.ms"] = 1000,
        ["producer.id.expiration.check.interval.ms"] = 100, ["transactional.id.expiration.ms"] = 1000 })
      client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-idempotence" }
    end)
    teardown(function()
      if p then p:close() end
      if client then client:close() end
      -- (used by this spec alone: under `make test` it stays up for the next
      -- Lua's run and with-brokers.sh stops it, else it stops here)
      if k and not os.getenv("LK_KAFKA_OWNER") then k:stop() end
    end)

    -- KIP-854's producer.id.expiration.ms (Kafka 3.4), asked of the broker: one
    -- without it (2.x) keeps an idle producer's state for transactional.id.expiration.ms,
    -- checked every 10 minutes, so the case cannot run there
    local it_exp = it
    if not rk.broker_config(rk.main(), "producer.id.expiration.ms") then
      it_exp = function(name) pending(name .. " (Kafka " .. rk.main() .. "'s broker has no producer.id.expiration.ms)") end
    end
    it_exp("an idle producer the broker forgot resumes without failing a message; a refused batch bumps the epoch locally",
      function()
        local topic = rt.uniq("idem-expire")
        rt.create_topic(client, topic, 1, 1, { ["max.message.bytes"] = 1000 })
        p = kafka.producer.new(client, { linger_ms = 0 })
        assert(p:send_sync(topic, "one", { partition = 0 }))
        assert(p:send_sync(topic, "two", { partition = 0 }))
        local pid = p.producer_id
        assert.are.same({ [pid] = { 0, 1 } }, active_producers(client, topic))
        -- idle until the broker has dropped the producer's state (deadline 20 s)
        local deadline = socket.gettime() + 20
        while next(active_producers(client, topic)) and socket.gettime() < deadline do socket.sleep(0.1) end
        assert.are.same({}, active_producers(client, topic))
        for i = 1, 5 do assert(p:send(topic, "resumed" .. i, { partition = 0 })) end
        local _, failed, delivered = p:flush()
        assert.are.same({ 0, 5 }, { failed, delivered })
        assert.are.same({ pid, 0 }, { p.producer_id, p.producer_epoch })
        assert.are.same({ [pid] = { 0, 6 } }, active_producers(client, topic)) -- the sequences went on
        -- a batch the broker refuses (larger than the topic's max.message.bytes) after it was
        -- stamped: the next one goes under epoch 1 from sequence 0, and the broker takes it
        assert(p:send(topic, ("x"):rep(2000), { partition = 0 }))
        local reports, failed2 = p:flush()
        assert.are.same({ 1, "kafka", E.MESSAGE_TOO_LARGE }, { failed2, reports[1].code, reports[1].error_code })
        assert(p:send_sync(topic, "after", { partition = 0 }))
        assert.are.same({ pid, 1 }, { p.producer_id, p.producer_epoch })
        assert.are.same({ [pid] = { 1, 0 } }, active_producers(client, topic))
        local got = {}
        for _, b in ipairs(rt.stored_batches(client, topic, 0)) do
          got[#got + 1] = { b.producer_id, b.producer_epoch, b.base_sequence, b.count }
        end
        assert.are.same({ { pid, 0, 0, 1 }, { pid, 0, 1, 1 }, { pid, 0, 2, 5 }, { pid, 1, 0, 1 } }, got)
      end)
  end)
end
