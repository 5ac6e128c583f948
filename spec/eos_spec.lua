-- Exactly-once building blocks (issue 14): the idempotent producer (on by
-- default), transactions and read_committed consumers. Deterministic cases
-- against the in-process mock (kafka.mock: InitProducerId and the
-- per-partition sequence checks), the rest against real Kafka brokers
-- (spec/support/realkafka.lua) and Kafka's Java client.
local kafka = require "kafka"
local mock = require "kafka.mock"
local proto = kafka.proto
local E = proto.errors

local function new_client(cluster, o)
  o = o or {}
  o.brokers = cluster:bootstrap()
  o.socket = cluster:socket_factory()
  o.retry_backoff_ms = o.retry_backoff_ms or 1
  o.reconnect_backoff_ms = o.reconnect_backoff_ms or 1
  o.reconnect_backoff_max_ms = o.reconnect_backoff_max_ms or 4
  o.client_id = o.client_id or "spec"
  return kafka.client.new(o)
end

local function values(records)
  local out = {}
  for i, r in ipairs(records) do out[i] = r.value end
  return out
end

local function range(prefix, a, b)
  local out = {}
  for i = a, b do out[#out + 1] = prefix .. i end
  return out
end

-- the most batches of one partition in flight at once, seen after each send round
local function watch_in_flight(p)
  local max = 0
  local round = p._send_round
  p._send_round = function(self, ...)
    round(self, ...)
    for _, tq in pairs(self.queues) do
      for _, q in pairs(tq) do
        local n = 0
        for _, b in ipairs(q) do if b.in_flight then n = n + 1 end end
        if n > max then max = n end
      end
    end
  end
  return function() return max end
end

describe("idempotent producer (mock)", function()
  it("is on by default with acks = -1: a producer id, sequences from 0, batches stamped", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9, batch_size = 200 })
    for i = 1, 10 do assert(p:send("t", "v" .. i, { partition = 0 })) end
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    assert.is_true(p.idempotent)
    assert.is_true(p.producer_id >= 0)
    assert.are.equal(0, p.producer_epoch)
    local raw = cluster.topics.t.partitions[0].log
    local seqs = {}
    for _, e in ipairs(raw.entries) do
      local _, info = proto.decode_records(e.bytes, { batches = true })
      local b = info.batches[1]
      assert.are.equal(p.producer_id, b.producer_id)
      seqs[#seqs + 1] = b.base_sequence
    end
    assert.is_true(#seqs > 1)
    local want, n = {}, 0
    for _, e in ipairs(raw.entries) do
      want[#want + 1] = n
      n = n + e.count
    end
    assert.are.same(want, seqs)
    assert.are.same(range("v", 1, 10), values(cluster:records("t", 0)))
  end)

  it("acks 0 or 1 with enable_idempotence = true is misuse; acks 1 alone is not idempotent", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local client = new_client(cluster)
    assert.has_error(function() kafka.producer.new(client, { acks = 1, enable_idempotence = true }) end,
      "kafka.producer.new: enable_idempotence needs acks = -1 (got acks = 1)")
    assert.has_error(function() kafka.producer.new(client, { acks = 0, enable_idempotence = true }) end)
    assert.has_error(function() kafka.producer.new(client, { enable_idempotence = "yes" }) end)
    assert.has_error(function() kafka.producer.new(client, { max_in_flight_requests_per_connection = 6 }) end)
    local p = kafka.producer.new(client, { acks = 1 })
    assert(p:send_sync("t", "x"))
    assert.is_false(p.idempotent)
    local q = kafka.producer.new(client, { enable_idempotence = false })
    assert(q:send_sync("t", "y"))
    assert.is_false(q.idempotent)
    assert.are.equal(0, cluster:request_counts().InitProducerId or 0)
  end)

  it("a lost answer (drop_response) is retried and the broker keeps one copy (DUPLICATE_SEQUENCE_NUMBER)", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9 })
    assert(p:send_sync("t", "first")) -- the producer id is there before the drop
    cluster:drop_response("Produce", 1)
    for i = 1, 100 do assert(p:send("t", "v" .. i)) end
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(1, reports[1].offset) -- the original offsets, from the duplicate's answer
    assert.are.equal(100, reports[100].offset)
    local want = range("v", 1, 100)
    table.insert(want, 1, "first")
    assert.are.same(want, values(cluster:records("t", 0)))
  end)

  it("5 batches in flight per partition, injected retriable errors: every message once, in order", function()
    local cluster = mock.new { brokers = 1, topics = { t = 2 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9, batch_size = 300, max_retries = 20 })
    local max_seen = watch_in_flight(p)
    assert(p:send_sync("t", "start", { partition = 0 }))
    assert(p:send_sync("t", "start", { partition = 1 }))
    for i = 1, 200 do
      assert(p:send("t", "a" .. i, { partition = 0 }))
      assert(p:send("t", "b" .. i, { partition = 1 }))
    end
    cluster:fail("Produce", E.NOT_ENOUGH_REPLICAS, 2, "t", 0)
    cluster:fail("Produce", E.NOT_LEADER_OR_FOLLOWER, 1, "t", 1)
    cluster:drop_response("Produce", 1)
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(5, max_seen())
    local a, b = range("a", 1, 200), range("b", 1, 200)
    table.insert(a, 1, "start")
    table.insert(b, 1, "start")
    assert.are.same(a, values(cluster:records("t", 0)))
    assert.are.same(b, values(cluster:records("t", 1)))
  end)

  it("without idempotence one batch per partition is in flight", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9, batch_size = 300, enable_idempotence = false })
    local max_seen = watch_in_flight(p)
    for i = 1, 100 do assert(p:send("t", "a" .. i)) end
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(1, max_seen())
  end)

  it("OUT_OF_ORDER_SEQUENCE_NUMBER on the first batch: the epoch is bumped (KIP-360) and the batch sent again", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9 })
    assert(p:send_sync("t", "one"))
    local pid = p.producer_id
    cluster:fail("Produce", E.OUT_OF_ORDER_SEQUENCE_NUMBER, 1)
    assert(p:send("t", "two"))
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(1, reports[1].offset)
    assert.are.equal(pid, p.producer_id)
    assert.are.equal(1, p.producer_epoch)
    assert.are.same({ "one", "two" }, values(cluster:records("t", 0)))
    assert.are.equal(2, cluster:request_counts().InitProducerId)
  end)

  it("UNKNOWN_PRODUCER_ID likewise; INVALID_PRODUCER_EPOCH is fatal: code \"fenced\", later sends refused", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9 })
    assert(p:send_sync("t", "one"))
    cluster:fail("Produce", E.UNKNOWN_PRODUCER_ID, 1)
    assert(p:send_sync("t", "two"))
    assert.are.equal(1, p.producer_epoch)
    cluster:fail("Produce", E.INVALID_PRODUCER_EPOCH, 1)
    assert(p:send("t", "three"))
    local reports, failed = p:flush()
    assert.are.equal(1, failed)
    assert.are.equal("fenced", reports[1].code)
    assert.are.equal(E.INVALID_PRODUCER_EPOCH, reports[1].error_code)
    local id, err, code = p:send("t", "four")
    assert.is_nil(id)
    assert.are.equal("fenced", code)
    assert.matches("INVALID_PRODUCER_EPOCH", err)
    assert.are.same({ "one", "two" }, values(cluster:records("t", 0)))
  end)

  it("MESSAGE_TOO_LARGE splits a stamped batch into parts that keep its sequence range", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    cluster.topics.t.partitions[0].log.max_message_bytes = 300
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9 })
    for i = 1, 5 do assert(p:send("t", ("%03d"):format(i) .. ("x"):rep(100))) end
    assert(p:send("t", "after"))
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    local got = values(cluster:records("t", 0))
    assert.are.equal(6, #got)
    assert.are.equal("after", got[6])
  end)
end)
