-- Exactly-once building blocks (issue 14): the idempotent producer (on by
-- default), transactions and read_committed consumers. Deterministic cases
-- against the in-process mock (kafka.mock: InitProducerId and the
-- per-partition sequence checks), the rest against real Kafka brokers
-- (spec/support/realkafka.lua) and Kafka's Java client.
local kafka = require "kafka"
local mock = require "kafka.mock"
local proto = kafka.proto
local E = proto.errors

local H = require "support.helpers"
local socket = require "socket"
local new_client = H.mock_client

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
    for _, t in pairs(self.topics) do
      for _, tp in ipairs(t.order) do
        local n = 0
        for _, b in ipairs(tp.queue) do if b.state == "in_flight" then n = n + 1 end end
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

  it("each partition is a visible state machine: batches open, sealed, in flight, done; next_seq", function()
    -- ("v1".."v5" count 72 bytes each against batch_size 200: batches of 2, 2, 1)
    local function run(idempotent)
      local cluster = mock.new { brokers = 1, topics = { t = 2 } }
      local seen
      local p
      p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9, batch_size = 200,
        enable_idempotence = idempotent, on_delivery = function(r)
          if r.id == 1 then seen = p:partition_states() end -- the first batch's answer is in
        end })
      for i = 1, 5 do assert(p:send("t", "v" .. i, { partition = 1 })) end
      local before = p:partition_states()
      local _, failed = p:flush()
      assert.are.equal(0, failed)
      return before, seen, p:partition_states()
    end
    local before, seen, after = run(true)
    assert.are.same({ { topic = "t", partition = 1, next_seq = 0, batches = { "sealed", "sealed", "open" } } }, before)
    -- one round sent all three (up to 5 in flight); sequences stamped when sent
    assert.are.same({ { topic = "t", partition = 1, next_seq = 5, batches = { "in_flight", "in_flight" } } }, seen)
    -- kept after the flush: the broker expects sequence 5 next
    assert.are.same({ { topic = "t", partition = 1, next_seq = 5, batches = {} } }, after)
    before, seen, after = run(false)
    assert.are.same({ { topic = "t", partition = 1, next_seq = 0, batches = { "sealed", "sealed", "open" } } }, before)
    -- one batch in flight at a time without idempotence: the rest wait, the last still open
    assert.are.same({ { topic = "t", partition = 1, next_seq = 0, batches = { "sealed", "open" } } }, seen)
    assert.are.same({}, after) -- nothing to keep: dropped
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
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(5, max_seen())
    -- the later batches' OUT_OF_ORDER_SEQUENCE_NUMBER was a retry, not a lost producer state: no epoch bump
    assert.are.equal(0, p.producer_epoch)
    assert.are.equal(1, cluster:request_counts().InitProducerId)
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

  it("OUT_OF_ORDER_SEQUENCE_NUMBER on the first batch: the epoch is bumped (KIP-360, locally) and the batch sent again", function()
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
    assert.are.equal(1, cluster:request_counts().InitProducerId) -- the bump asks nothing (as Java's)
  end)

  it("UNKNOWN_PRODUCER_ID likewise; PRODUCER_FENCED is fatal: code \"fenced\", later sends refused", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local p = kafka.producer.new(new_client(cluster), { linger_ms = 1e9 })
    assert(p:send_sync("t", "one"))
    cluster:fail("Produce", E.UNKNOWN_PRODUCER_ID, 1)
    assert(p:send_sync("t", "two"))
    assert.are.equal(1, p.producer_epoch)
    cluster:fail("Produce", E.PRODUCER_FENCED, 1)
    assert(p:send("t", "three"))
    local reports, failed = p:flush()
    assert.are.equal(1, failed)
    assert.are.equal("fenced", reports[1].code)
    assert.are.equal(E.PRODUCER_FENCED, reports[1].error_code)
    local id, err, code = p:send("t", "four")
    assert.is_nil(id)
    assert.are.equal("fenced", code)
    assert.matches("PRODUCER_FENCED", err)
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

-- ---------------------------------------------------------------------------
-- Real brokers: one block per version in KAFKA_VERSIONS (4.1.2 and 3.9.1 in
-- `make test`); the Java interop cases on the main version only.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local drop = require "support.dropsocket"

local function sorted(t)
  table.sort(t)
  return t
end

-- the values a consumer at the isolation level reads from partition 0..n-1
local function read_values(client, topic, parts, count, level)
  local by = rt.consume_all(client, topic, parts, count, { isolation_level = level, seconds = 10 })
  local out = {}
  for p = 0, parts - 1 do
    for _, m in ipairs(by[p]) do out[#out + 1] = m.value end
  end
  return out
end

-- Fetch at read_committed until `count` messages or `secs`, then the rest of the
-- topic to its end (nothing more may come)
local function committed_values(client, topic, parts, count)
  return sorted(read_values(client, topic, parts, count, "read_committed"))
end

for _, version in ipairs(rk.versions()) do
  describe("exactly-once on Kafka " .. version, function()
    local k, client
    setup(function()
      k = rk.cluster(version, 1)
      client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-eos" }
    end)
    teardown(function()
      if client then client:close() end
    end)
    -- what the broker serves, from its ApiVersions: transactions v2 (KIP-890)
    -- where the cluster finalized transaction.version 2 (clusters formatted by
    -- 4.x), DescribeTransactions from Kafka 3.0 (not on 2.x)
    local function txn_v2()
      assert(client:any_broker())
      return client:finalized_feature("transaction.version") >= 2
    end
    local function serves(api)
      return assert(client:any_broker()):version(api) ~= nil
    end

    it("a Produce answer lost after the broker wrote the batch: one copy with idempotence, two without", function()
      for _, idem in ipairs { true, false } do
        local topic = rt.uniq("eos-drop")
        rt.create_topic(client, topic, 1, 1)
        local d = drop.new()
        local c2 = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory, retry_backoff_ms = 10 }
        local p = kafka.producer.new(c2, { enable_idempotence = idem, linger_ms = 1e9 })
        assert(p:send_sync(topic, "first"))
        d:drop_produce(1)
        for i = 1, 20 do assert(p:send(topic, "v" .. i)) end
        local reports, failed = p:flush()
        assert.are.equal(0, failed)
        assert.are.equal(1, d.dropped)
        local got = read_values(client, topic, 1, idem and 21 or 41, 0)
        local want = range("v", 1, 20)
        table.insert(want, 1, "first")
        if idem then
          assert.are.same(want, got)
          assert.are.equal(1, reports[1].offset) -- the original offsets
        else
          for i = 1, 20 do want[#want + 1] = "v" .. i end -- at least once: the retry wrote them again
          assert.are.same(want, got)
          assert.are.equal(21, reports[1].offset)
        end
        c2:close()
      end
    end)

    it("5 batches in flight per partition, in order, on a real broker", function()
      local topic = rt.uniq("eos-inflight")
      rt.create_topic(client, topic, 1, 1)
      local p = kafka.producer.new(client, { linger_ms = 1e9, batch_size = 2000 })
      local max_seen = watch_in_flight(p)
      for i = 1, 2000 do assert(p:send(topic, "m" .. i)) end
      local _, failed = p:flush()
      assert.are.equal(0, failed)
      assert.are.equal(5, max_seen())
      assert.are.same(range("m", 1, 2000), read_values(client, topic, 1, 2000, 0))
      for _, b in ipairs(rt.stored_batches(client, topic, 0)) do assert.are.equal(p.producer_id, b.producer_id) end
    end)

    it("committed transactions are read by read_committed, aborted ones are not; plain messages between them", function()
      local topic = rt.uniq("eos-txn")
      rt.create_topic(client, topic, 2, 1)
      local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
      local plain = kafka.producer.new(client, { enable_idempotence = false })
      assert(tp:init_transactions())
      assert.are.equal("ready", tp:transaction_state())
      assert(tp:begin_transaction())
      for i = 1, 10 do assert(tp:send(topic, "c1-" .. i, { partition = i % 2 })) end
      assert(plain:send_sync(topic, "plain-1", { partition = 0 }))
      assert(tp:commit_transaction())
      local reports, failed = tp:flush()
      assert.are.equal(0, failed)
      assert.are.equal(10, #reports)
      assert.is_nil(tp:stats().previous_transaction) -- no transaction before the first
      assert(tp:begin_transaction())
      for i = 1, 10 do assert(tp:send(topic, "a1-" .. i, { partition = i % 2 })) end
      tp:flush() -- written, then aborted
      -- its first partition joined right after the commit: the producer
      -- waited until the coordinator had written the commit's markers (a
      -- broker without DescribeTransactions, 2.x: no wait, nothing seen)
      local describes = serves("DescribeTransactions")
      assert.are.equal(describes and "CompleteCommit" or nil, tp:stats().previous_transaction)
      assert(plain:send_sync(topic, "plain-2", { partition = 0 }))
      assert(tp:abort_transaction())
      assert(tp:begin_transaction())
      for i = 1, 5 do assert(tp:send(topic, "c2-" .. i, { partition = 0 })) end
      tp:flush()
      assert.are.equal(describes and "CompleteAbort" or nil, tp:stats().previous_transaction)
      assert(tp:commit_transaction())
      assert.are.equal("ready", tp:transaction_state())
      local want = range("c1-", 1, 10)
      for i = 1, 5 do want[#want + 1] = "c2-" .. i end
      want[#want + 1] = "plain-1"
      want[#want + 1] = "plain-2"
      assert.are.same(sorted(want), committed_values(client, topic, 2, #want))
      -- read_uncommitted sees the aborted ones too (control records never)
      local all = read_values(client, topic, 2, #want + 10, 0)
      assert.are.equal(#want + 10, #all)
      -- the log holds control batches (the markers) and transactional batches
      local markers = 0
      for _, b in ipairs(rt.stored_batches(client, topic, 0)) do if b.control then markers = markers + 1 end end
      assert.are.equal(3, markers)
    end)

    it("\"latest\" with a transaction open: read_committed starts at the last stable offset, read_uncommitted at the "
      .. "high watermark", function()
      local topic = rt.uniq("eos-lso")
      rt.create_topic(client, topic, 1, 1)
      local plain = kafka.producer.new(client, { enable_idempotence = false, linger_ms = 1e9 })
      for i = 1, 3 do assert(plain:send(topic, "plain-" .. i)) end
      assert.are.equal(0, select(2, plain:flush())) -- offsets 0-2
      local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
      assert(tp:init_transactions())
      assert(tp:begin_transaction())
      for i = 1, 4 do assert(tp:send(topic, "txn-" .. i)) end
      assert.are.equal(0, select(2, tp:flush())) -- offsets 3-6, written, the transaction still open
      assert.are.equal(3, assert(client:list_offsets(topic, 0, "latest", "read_committed")))
      assert.are.equal(3, assert(client:list_offsets(topic, 0, -1, 1)))
      assert.are.equal(7, assert(client:list_offsets(topic, 0, "latest", "read_uncommitted")))
      assert.are.equal(7, assert(client:list_offsets(topic, 0, "latest")))
      assert.has_error(function() client:list_offsets(topic, 0, "latest", "committed") end)
      local function consumer(level, group)
        return kafka.consumer.new(client, { isolation_level = level, group_id = group, auto_offset_reset = "latest",
          fetch_max_wait_ms = 100, enable_auto_commit = false })
      end
      -- an explicit "latest", and a group member without a committed offset (auto_offset_reset)
      local rc, rcg, ru = consumer("read_committed"), consumer("read_committed", rt.uniq("g")), consumer(0)
      assert(rc:assign { { topic = topic, partition = 0, offset = "latest" } })
      assert(rcg:assign { { topic = topic, partition = 0 } })
      assert(ru:assign { { topic = topic, partition = 0, offset = "latest" } })
      assert.are.equal(3, rc:position(topic, 0))
      assert.are.equal(3, rcg:position(topic, 0))
      assert.are.equal(7, ru:position(topic, 0))
      assert.are.same({}, rc:poll(200)) -- nothing is stable past offset 3 yet
      assert(tp:commit_transaction()) -- the commit marker at offset 7
      local function read(c, n)
        local got, deadline = {}, os.time() + 10
        while #got < n and os.time() < deadline do
          for _, m in ipairs(c:poll(200) or {}) do got[#got + 1] = m.offset .. "=" .. m.value end
        end
        for _, m in ipairs(c:poll(150) or {}) do got[#got + 1] = m.offset .. "=" .. m.value end -- nothing more
        return got
      end
      local want = { "3=txn-1", "4=txn-2", "5=txn-3", "6=txn-4" }
      assert.are.same(want, read(rc, 4))
      assert.are.same(want, read(rcg, 4))
      assert.are.same({}, read(ru, 0)) -- it started past them
      assert.are.equal(8, assert(client:list_offsets(topic, 0, "latest", "read_committed")))
      rc:close()
      rcg:close()
      ru:close()
    end)

    -- Waits until the coordinator has written transaction tid's markers (its
    -- state no longer PrepareCommit/PrepareAbort) -> the state. A zombie's
    -- Produce is answered by the coordinator's state: INVALID_TXN_STATE while
    -- the new instance's commit is still being written, INVALID_PRODUCER_EPOCH
    -- once it is complete (Kafka 3.9.1, both seen in make test). A broker
    -- without DescribeTransactions (2.x): until the last stable offset of
    -- topic's partition 0 is its high watermark (the markers written) -> nil.
    local function completed(tid, topic)
      if not serves("DescribeTransactions") then
        local deadline = socket.gettime() + 10
        while assert(client:list_offsets(topic, 0, "latest", "read_committed")) ~= assert(client:list_offsets(topic, 0, "latest")) do
          assert(socket.gettime() < deadline, "transaction " .. tid .. " markers not written after 10 s")
          socket.sleep(0.005)
        end
        return nil
      end
      local c = assert(client:coordinator(tid, 1))
      local deadline = socket.gettime() + 10
      while true do
        local r = assert(c:request("DescribeTransactions", { transactional_ids = { tid } }))
        local st = r.transaction_states[1].transaction_state
        if st ~= "PrepareCommit" and st ~= "PrepareAbort" then return st end
        assert(socket.gettime() < deadline, "transaction " .. tid .. " still " .. st .. " after 10 s")
        socket.sleep(0.005)
      end
    end

    it("a zombie is fenced by a new instance with the same transactional_id: code \"fenced\"", function()
      local topic = rt.uniq("eos-zombie")
      rt.create_topic(client, topic, 1, 1)
      local tid = rt.uniq("tid")
      local old = kafka.producer.new(client, { transactional_id = tid, linger_ms = 1e9 })
      assert(old:init_transactions())
      assert(old:begin_transaction())
      assert(old:send(topic, "zombie-1"))
      old:flush()
      local new = kafka.producer.new(client, { transactional_id = tid, linger_ms = 1e9 })
      assert(new:init_transactions()) -- aborts the old one's open transaction, bumps the epoch
      assert(new:begin_transaction())
      assert(new:send(topic, "new-1"))
      assert(new:commit_transaction())
      assert.are.equal(serves("DescribeTransactions") and "CompleteCommit" or nil, completed(tid, topic))
      assert(old:send(topic, "zombie-2"))
      -- its Produce is refused INVALID_PRODUCER_EPOCH: abortable, as Kafka's Java client takes it (KIP-588: a
      -- transaction the coordinator timed out gets the same answer); the abort's EndTxn says PRODUCER_FENCED
      local ok, err, code, kcode = old:commit_transaction()
      assert.is_nil(ok)
      assert.are.same({ "abortable", E.INVALID_PRODUCER_EPOCH, "abortable_error" }, { code, kcode,
        (old:transaction_state()) }, err)
      ok, err, code, kcode = old:abort_transaction()
      assert.is_nil(ok)
      assert.are.same({ "fenced", E.PRODUCER_FENCED, "fatal_error" }, { code, kcode, (old:transaction_state()) }, err)
      local id, _, code2 = old:send(topic, "zombie-3")
      assert.is_nil(id)
      assert.are.equal("fenced", code2)
      assert.are.same({ "new-1" }, committed_values(client, topic, 1, 1))
      -- a zombie whose next call is the commit: EndTxn refuses its epoch
      local tid2 = rt.uniq("tid")
      local z = kafka.producer.new(client, { transactional_id = tid2, linger_ms = 1e9 })
      assert(z:init_transactions())
      assert(z:begin_transaction())
      assert(z:send(topic, "zombie-b"))
      z:flush()
      assert(kafka.producer.new(client, { transactional_id = tid2 }):init_transactions())
      ok, err, code = z:commit_transaction()
      assert.is_nil(ok)
      assert.are.equal("fenced", code, err)
      assert.are.same({ "new-1" }, committed_values(client, topic, 1, 1))
    end)

    -- the coordinator's timeout: a case about the broker over time (pending on SPEC_TIER=min)
    local slow_it = H.min() and pending or it
    slow_it("a transaction its coordinator timed out: the next Produce is abortable; the abort goes on under v2 (EndTxn v5 "
      .. "takes the old epoch's abort), fenced under v1", function()
      local v2 = txn_v2()
      local topic = rt.uniq("eos-timeout")
      rt.create_topic(client, topic, 1, 1)
      local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9,
        transaction_timeout_ms = 1000 })
      assert(tp:init_transactions())
      local epoch = tp.producer_epoch
      assert(tp:begin_transaction())
      assert(tp:send(topic, "timed-out"))
      assert.are.equal(0, select(2, tp:flush()))
      -- the coordinator aborts it after 1 s (the harness's brokers look every 500 ms): its marker makes the
      -- last stable offset the high watermark
      local deadline = os.time() + 20
      repeat
        client.sleep(200)
        local lso = assert(client:list_offsets(topic, 0, "latest", "read_committed"))
      until lso == 2 or os.time() > deadline
      assert.are.equal(2, assert(client:list_offsets(topic, 0, "latest", "read_committed")))
      assert(tp:send(topic, "late"))
      local reports, failed = tp:flush()
      assert.are.same({ 1, "abortable", E.INVALID_PRODUCER_EPOCH }, { failed, reports[1].code, reports[1].error_code })
      assert.are.equal("abortable_error", (tp:transaction_state()))
      local ok, err, code, kcode = tp:abort_transaction()
      if v2 then
        assert.is_true(ok, err)
        assert.are.same({ "ready", epoch + 1 }, { (tp:transaction_state()), tp.producer_epoch })
        assert(tp:begin_transaction())
        assert(tp:send(topic, "after"))
        assert(tp:commit_transaction())
        assert.are.same({ "after" }, committed_values(client, topic, 1, 1))
      else
        assert.is_nil(ok)
        assert.are.same({ "fenced", E.PRODUCER_FENCED, "fatal_error" }, { code, kcode, (tp:transaction_state()) })
      end
      assert.are.same({ "timed-out", v2 and "after" or nil }, read_values(client, topic, 1, v2 and 2 or 1, 0))
    end)

    it("send_offsets_to_transaction commits a group's offsets with the transaction, or not at all", function()
      local topic = rt.uniq("eos-offsets")
      rt.create_topic(client, topic, 1, 1)
      local group = rt.uniq("g")
      local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
      assert(tp:init_transactions())
      local gm = { group_id = group, generation_id = -1, member_id = "" }
      assert(tp:begin_transaction())
      assert(tp:send(topic, "out-1"))
      assert(tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 7 } }, gm))
      assert(tp:abort_transaction())
      local c = kafka.consumer.new(client, { group_id = group })
      assert.are.equal(-1, assert(c:committed { { topic = topic, partition = 0 } })[1].offset)
      assert(tp:begin_transaction())
      assert(tp:send(topic, "out-2"))
      assert(tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 42 } }, gm))
      assert(tp:commit_transaction())
      local got
      for _ = 1, 50 do -- the commit's markers reach the offsets topic just after EndTxn
        got = assert(c:committed { { topic = topic, partition = 0 } })[1].offset
        if got == 42 then break end
        client.sleep(100)
      end
      assert.are.equal(42, got)
      assert.are.same({ "out-2" }, committed_values(client, topic, 1, 1))
      c:close()
    end)

    -- TxnOffsetCommit's GenerationIdOrMemberEpoch (GenerationId before
    -- Kafka 4.4): the member's generation (classic) or epoch (consumer
    -- protocol) goes with the offsets, so the coordinator takes a member's
    -- commit and refuses a zombie's
    it("send_offsets_to_transaction carries a group member's generation: taken when current, refused when stale",
      function()
      local topic = rt.uniq("eos-gen")
      rt.create_topic(client, topic, 1, 1)
      for _, protocol in ipairs(rk.consumer_protocol(version) and { "classic", "consumer" } or { "classic" }) do
        local group = rt.uniq("g")
        local c = kafka.consumer.new(client, { group_id = group, group_protocol = protocol,
          enable_auto_commit = false, fetch_max_wait_ms = 100 })
        assert(c:subscribe { topic })
        local gm
        local deadline = os.time() + 30
        repeat
          c:poll(100)
          gm = c:group_metadata()
        until (gm.generation_id > 0 and #c:assignment() == 1) or os.time() > deadline
        assert.is_true(gm.generation_id > 0, protocol .. ": the member never got its generation")
        local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
        assert(tp:init_transactions())
        assert(tp:begin_transaction())
        assert(tp:send(topic, "gen-1"))
        local ok, err = tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 5 } }, gm)
        assert(ok, protocol .. ": " .. tostring(err))
        assert(tp:commit_transaction())
        local got
        for _ = 1, 50 do
          got = assert(c:committed { { topic = topic, partition = 0 } })[1].offset
          if got == 5 then break end
          client.sleep(100)
        end
        assert.are.equal(5, got, protocol)
        assert(tp:begin_transaction())
        local stale = { group_id = gm.group_id, member_id = gm.member_id, generation_id = gm.generation_id + 1 }
        local code, kcode
        ok, _, code, kcode = tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 9 } }, stale)
        -- TxnOffsetCommit v6 (Kafka 4.4, transactions v2) tells a consumer-protocol
        -- member's stale epoch by its own code; before, ILLEGAL_GENERATION for both
        local v6 = tp:stats().transaction_version == 2
          and rk.api_versions(version)[kafka.proto.api_key("TxnOffsetCommit")].max >= 6
        local want = (v6 and protocol == "consumer") and E.STALE_MEMBER_EPOCH or E.ILLEGAL_GENERATION
        assert.are.same({ protocol, nil, "abortable", want }, { protocol, ok, code, kcode })
        assert(tp:abort_transaction())
        assert.are.equal(5, assert(c:committed { { topic = topic, partition = 0 } })[1].offset)
        tp:close()
        c:close()
      end
    end)

    it("consume-transform-produce (manual assignment): an aborted round is redone, the output holds each input once", function()
      local input, output = rt.uniq("eos-in"), rt.uniq("eos-out")
      rt.create_topic(client, input, 1, 1)
      rt.create_topic(client, output, 1, 1)
      local group = rt.uniq("g")
      local feed = kafka.producer.new(client)
      for i = 1, 30 do assert(feed:send(input, "in-" .. i)) end
      assert.are.equal(0, select(2, feed:flush()))
      local p = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
      assert(p:init_transactions())
      local c = kafka.consumer.new(client, { group_id = group, isolation_level = "read_committed",
        auto_offset_reset = "earliest", max_poll_records = 10, fetch_max_wait_ms = 100 })
      assert(c:assign { { topic = input, partition = 0, offset = "earliest" } })
      local rounds, aborted, done = 0, 0, 0
      local pending = {}
      local deadline = os.time() + 20
      while done < 30 and os.time() < deadline do
        if not pending[1] then
          for _, m in ipairs(c:poll(500) or {}) do pending[#pending + 1] = m end
        end
        if pending[1] then
          rounds = rounds + 1 -- a round: up to 10 messages in one transaction
          local msgs = {}
          for i = 1, math.min(10, #pending) do msgs[i] = table.remove(pending, 1) end
          assert(p:begin_transaction())
          for _, m in ipairs(msgs) do assert(p:send(output, "out-" .. m.value:sub(4))) end
          local last = msgs[#msgs]
          assert(p:send_offsets_to_transaction({ { topic = input, partition = 0, offset = last.offset + 1 } }, group))
          if rounds == 2 then -- the process "fails" in the middle of its second round
            p:flush()
            assert(p:abort_transaction())
            aborted = aborted + 1
            pending = {}
            assert(c:seek(input, 0, "committed"))
          else
            assert(p:commit_transaction())
            done = last.offset + 1
          end
        end
      end
      assert.are.equal(1, aborted)
      local want = {}
      for i = 1, 30 do want[i] = "out-" .. i end
      assert.are.same(sorted(want), committed_values(client, output, 1, 30))
      assert.are.equal(30, assert(c:committed { { topic = input, partition = 0 } })[1].offset)
      c:close()
    end)

    it("the protocol the cluster offers: v2 without AddPartitionsToTxn and AddOffsetsToTxn, the epoch EndTxn "
      .. "returns used next (4.x); v1 on 3.9", function()
      local v2 = txn_v2() -- clusters formatted by Kafka 4.x finalize transaction.version 2
      local topic, group = rt.uniq("eos-tv"), rt.uniq("g")
      rt.create_topic(client, topic, 2, 1)
      local d = drop.new()
      local c2 = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory }
      local tp = kafka.producer.new(c2, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
      assert.is_nil(tp:stats().transaction_version)
      assert(tp:init_transactions())
      assert.are.equal(v2 and 2 or 0, c2:finalized_feature("transaction.version"))
      assert.are.equal(v2 and 2 or 1, tp:stats().transaction_version)
      local pid, epoch = tp.producer_id, tp.producer_epoch
      local inits = d:count("InitProducerId") -- more than 1 when the coordinator was still loading
      -- which requests went out (a retried one counts again: CONCURRENT_TRANSACTIONS
      -- right after a transaction ended makes the next one's first request wait)
      local function seen()
        -- (offsets v5: v5 or v6, by topic id)
        local p12, e5, o5 = 0, d:count("EndTxn", 5), d:count("TxnOffsetCommit", 5) + d:count("TxnOffsetCommit", 6)
        for v = 12, 20 do p12 = p12 + d:count("Produce", v) end
        return { AddPartitionsToTxn = d:count("AddPartitionsToTxn") > 0, AddOffsetsToTxn = d:count("AddOffsetsToTxn") > 0,
          produce_v12 = p12 > 0, produce_v11 = d:count("Produce") - p12 > 0, end_v5 = e5 > 0,
          end_v4 = d:count("EndTxn") - e5 > 0, offsets_v5 = o5 > 0, offsets_v4 = d:count("TxnOffsetCommit") - o5 > 0,
          InitProducerId = d:count("InitProducerId") - inits }
      end
      local want_seen = { AddPartitionsToTxn = not v2, AddOffsetsToTxn = not v2, produce_v12 = v2, produce_v11 = not v2,
        end_v5 = v2, end_v4 = not v2, offsets_v5 = v2, offsets_v4 = not v2, InitProducerId = 0 }
      -- 1: committed, with the group's offsets
      assert(tp:begin_transaction())
      for i = 1, 6 do assert(tp:send(topic, "c1-" .. i, { partition = i % 2 })) end
      assert(tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 5 } }, group))
      assert(tp:commit_transaction())
      local n = v2 and 1 or 0
      assert.are.same(want_seen, seen())
      assert.are.equal(pid, tp.producer_id)
      assert.are.equal(epoch + n, tp.producer_epoch) -- v2: the coordinator bumped it, EndTxn said so
      -- 2: written, then aborted; 3: committed under the epoch the abort returned
      assert(tp:begin_transaction())
      for i = 1, 4 do assert(tp:send(topic, "a2-" .. i, { partition = i % 2 })) end
      assert.are.equal(0, select(2, tp:flush()))
      assert(tp:abort_transaction())
      assert.are.equal(epoch + 2 * n, tp.producer_epoch)
      assert(tp:begin_transaction())
      for i = 1, 4 do assert(tp:send(topic, "c3-" .. i, { partition = i % 2 })) end
      assert(tp:commit_transaction())
      assert.are.equal(epoch + 3 * n, tp.producer_epoch)
      assert.are.same(want_seen, seen())
      -- each transaction's batches carry the epoch it ran under
      local epochs = {}
      for _, b in ipairs(rt.stored_batches(client, topic, 0)) do
        if not b.control then epochs[#epochs + 1] = b.producer_epoch end
      end
      assert.are.same({ epoch, epoch + n, epoch + 2 * n }, epochs)
      local want = {}
      for i = 1, 6 do want[#want + 1] = "c1-" .. i end
      for i = 1, 4 do want[#want + 1] = "c3-" .. i end
      assert.are.same(sorted(want), committed_values(client, topic, 2, 10))
      local c = kafka.consumer.new(client, { group_id = group })
      local got
      for _ = 1, 50 do -- the commit's markers reach the offsets topic just after EndTxn
        got = assert(c:committed { { topic = topic, partition = 0 } })[1].offset
        if got == 5 then break end
        client.sleep(100)
      end
      assert.are.equal(5, got)
      c:close()
      c2:close()
      if v2 then -- a client whose max_versions keep Produce below v12 uses v1 on a v2 cluster
        local t3 = rt.uniq("eos-tv-capped")
        rt.create_topic(client, t3, 1, 1)
        local c3 = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, max_versions = { Produce = 11 } }
        local tp3 = kafka.producer.new(c3, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
        assert(tp3:init_transactions())
        assert.are.equal(1, tp3:stats().transaction_version)
        assert(tp3:begin_transaction())
        assert(tp3:send(t3, "capped"))
        assert(tp3:commit_transaction())
        assert.are.same({ "capped" }, committed_values(client, t3, 1, 1))
        c3:close()
      end
    end)

    it("a message in doubt (its answer lost, no retries left) makes the transaction abortable; the abort bumps the "
      .. "epoch (v1: InitProducerId, v2: EndTxn)", function()
      local v2 = txn_v2()
      local topic = rt.uniq("eos-doubt")
      rt.create_topic(client, topic, 1, 1)
      local d = drop.new()
      local c2 = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory, retry_backoff_ms = 10 }
      local tp = kafka.producer.new(c2, { transactional_id = rt.uniq("tid"), linger_ms = 1e9, max_retries = 0 })
      assert(tp:init_transactions())
      local epoch, inits = tp.producer_epoch, d:count("InitProducerId")
      assert(tp:begin_transaction())
      assert(tp:send(topic, "in-doubt"))
      d:drop_produce(1)
      local reports, failed = tp:flush()
      assert.are.same({ 1, 1, "network" }, { d.dropped, failed, reports[1].code })
      assert.are.equal("abortable_error", (tp:transaction_state()))
      local ends = d:count("EndTxn")
      assert(tp:abort_transaction())
      assert.are.equal("ready", (tp:transaction_state()))
      -- v1: EndTxn, then InitProducerId (sent again while the abort's markers are written: CONCURRENT_TRANSACTIONS)
      assert.are.same({ epoch + 1, 1, not v2 }, { tp.producer_epoch, d:count("EndTxn") - ends,
        d:count("InitProducerId") > inits })
      assert(tp:begin_transaction())
      assert(tp:send(topic, "after"))
      assert(tp:commit_transaction())
      assert.are.same({ "after" }, committed_values(client, topic, 1, 1))
      assert.are.same({ "in-doubt", "after" }, read_values(client, topic, 1, 2, 0)) -- it was written, then aborted
      c2:close()
    end)

    it("misuse raises; the state machine is visible", function()
      local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid") })
      assert.are.equal("uninitialized", tp:transaction_state())
      assert.has_error(function() tp:send("t", "x") end)
      assert.has_error(function() tp:begin_transaction() end)
      assert.has_error(function() kafka.producer.new(client, { transactional_id = "x", enable_idempotence = false }) end)
      assert.has_error(function() kafka.producer.new(client, { transactional_id = "x", acks = 1 }) end)
      assert(tp:init_transactions())
      assert.has_error(function() tp:commit_transaction() end)
      assert.has_error(function() kafka.producer.new(client):begin_transaction() end)
    end)

    if version == rk.main() and not H.lite() and not version:match("^3%.") then
      it("transaction.version 1 on a 4.x cluster: v1 (Produce v11); finalized 2 later, the producer moves to v2 at the "
        .. "end of a transaction, with an epoch bump", function()
        -- the feature, changed at run time (UpdateFeatures) and put back to 2 whatever happens
        local function set_tv(level)
          local a = kafka.client.new { brokers = k.bootstrap.PLAINTEXT }
          local resp = assert(assert(a:any_broker()):request(proto.api.UpdateFeatures, { timeout_ms = 30000,
            feature_updates = { { feature = "transaction.version", max_version_level = level,
              upgrade_type = level < 2 and 2 or 1 } } })) -- 2: SAFE_DOWNGRADE, 1: UPGRADE
          a:close()
          assert.are.equal(E.NONE, resp.error_code, resp.error_message)
          for _, r in ipairs(resp.results or {}) do assert.are.equal(E.NONE, r.error_code, r.error_message) end -- v0-1
          for _ = 1, 100 do -- until a new connection's ApiVersions tells it
            local b = kafka.client.new { brokers = k.bootstrap.PLAINTEXT }
            assert(b:any_broker())
            local got = b:finalized_feature("transaction.version")
            b:close()
            if got == level then return end
            client.sleep(100)
          end
          error("transaction.version " .. level .. " not seen in 10 s")
        end
        set_tv(1)
        finally(function() set_tv(2) end)
        local topic = rt.uniq("eos-tv1")
        rt.create_topic(client, topic, 1, 1)
        local d = drop.new()
        local c2 = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, socket = d.factory }
        local tp = kafka.producer.new(c2, { transactional_id = rt.uniq("tid"), linger_ms = 1e9 })
        assert(tp:init_transactions())
        assert.are.equal(1, c2:finalized_feature("transaction.version"))
        assert.are.equal(1, tp:stats().transaction_version)
        local epoch, inits = tp.producer_epoch, d:count("InitProducerId")
        local function produce_v12()
          local n = 0
          for v = 12, 20 do n = n + d:count("Produce", v) end
          return n
        end
        local function txn(tag)
          assert(tp:begin_transaction())
          for i = 1, 3 do assert(tp:send(topic, tag .. i)) end
          assert(tp:commit_transaction())
        end
        txn("t1-")
        -- the broker offers Produce v12 and EndTxn v5, but the cluster's transactions are v1
        assert.are.same({ 0, true, 0, true }, { produce_v12(), d:count("AddPartitionsToTxn") > 0, d:count("EndTxn", 5),
          d:count("EndTxn", 4) > 0 })
        assert.are.same({ 1, epoch }, { tp:stats().transaction_version, tp.producer_epoch })
        set_tv(2)
        c2:close() -- the producer's connections see the new level once they reconnect (Java's do the same)
        txn("t2-") -- begun under v1: ends under v1, then the epoch is bumped for v2
        -- (InitProducerId may be sent more than once: CONCURRENT_TRANSACTIONS while the commit's markers are written)
        assert.are.same({ 0, true, 2, epoch + 1 }, { produce_v12(), d:count("InitProducerId") > inits,
          tp:stats().transaction_version, tp.producer_epoch })
        local adds = d:count("AddPartitionsToTxn")
        txn("t3-")
        assert.are.same({ 1, adds, 1, epoch + 2 }, { produce_v12(), d:count("AddPartitionsToTxn"), d:count("EndTxn", 5),
          tp.producer_epoch })
        local epochs = {}
        for _, b in ipairs(rt.stored_batches(client, topic, 0)) do
          if not b.control then epochs[#epochs + 1] = b.producer_epoch end
        end
        assert.are.same({ epoch, epoch, epoch + 1 }, epochs)
        assert.are.same(sorted { "t1-1", "t1-2", "t1-3", "t2-1", "t2-2", "t2-3", "t3-1", "t3-2", "t3-3" },
          committed_values(client, topic, 1, 9))
        c2:close()
      end)
    end

    if version == rk.main() then
      it("Java interop: a Java transactional producer's aborted messages are invisible to our read_committed consumer", function()
        local topic = rt.uniq("eos-java-in")
        rt.create_topic(client, topic, 1, 1)
        rk.java({ "produce", topic, 20, "none", "txn-abort" }, { bootstrap = k.bootstrap.PLAINTEXT })
        rk.java({ "produce", topic, 15, "lz4", "txn-commit" }, { bootstrap = k.bootstrap.PLAINTEXT })
        local by = rt.consume_all(client, topic, 1, 15, { isolation_level = "read_committed", seconds = 10 })
        local keys = {}
        for _, m in ipairs(by[0]) do keys[#keys + 1] = m.key end
        assert.are.same(range("k", 0, 14), keys)
        assert.are.equal(15, #by[0])
        -- read_uncommitted: both transactions' 35 records
        local all = rt.consume_all(client, topic, 1, 35, { seconds = 10 })
        assert.are.equal(35, #all[0])
      end)

      it("Java interop: our transactions read right by a Java read_committed consumer", function()
        local topic = rt.uniq("eos-java-out")
        rt.create_topic(client, topic, 2, 1)
        local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid"), linger_ms = 1e9,
          compression = "zstd" })
        assert(tp:init_transactions())
        assert.are.equal(txn_v2() and 2 or 1, tp:stats().transaction_version)
        assert(tp:begin_transaction())
        for i = 1, 12 do assert(tp:send(topic, "ok-" .. i, { partition = i % 2 })) end
        assert(tp:commit_transaction())
        assert(tp:begin_transaction())
        for i = 1, 12 do assert(tp:send(topic, "no-" .. i, { partition = i % 2 })) end
        tp:flush()
        assert(tp:abort_transaction())
        assert(tp:begin_transaction())
        for i = 13, 20 do assert(tp:send(topic, "ok-" .. i, { partition = i % 2 })) end
        assert(tp:commit_transaction())
        local lines = rk.java({ "consume", topic, 20, 15, "read_committed" }, { bootstrap = k.bootstrap.PLAINTEXT })
        local got = {}
        for _, line in ipairs(lines) do
          local vh = line:match("^REC %d+ %d+ %-?%d+ %-?%d+ %S+ (%S+)")
          if vh then got[#got + 1] = rk.unhex(vh) end
        end
        assert.are.same(sorted(range("ok-", 1, 20)), sorted(got))
      end)
    end
  end)
end
