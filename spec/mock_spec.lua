-- kafka.mock: the broker's behaviour, asked through raw requests and through
-- lua-kafka's client, in-process (no TCP) and on TCP for the hostile-client
-- cases. The client through kafka.mock's faults is mock_client_spec.lua's.
local kafka = require "kafka"
local mock = require "kafka.mock"
local connection = require "kafka.connection"
local socket = require "socket"
local proto = kafka.proto
local E = proto.errors

local codecs = { "none", "gzip", "snappy", "lz4", "zstd" }

local H = require "support.helpers"
local new_client, conn_to, consume_all = H.mock_client, H.mock_conn, H.mock_consume_all

local function produce_raw(c, topic, partition, records, version, acks)
  return assert(c:request("Produce", { acks = acks or -1, timeout_ms = 1000,
    topic_data = { { name = topic, partition_data = { { index = partition, records = records } } } } },
    { version = version }))
end

local function pr(resp) return resp.responses[1].partition_responses[1] end

local function fetch_raw(c, topic, partition, offset, o)
  o = o or {}
  local resp = assert(c:request("Fetch", { replica_id = -1, max_wait_ms = o.max_wait_ms or 0, min_bytes = o.min_bytes or 1,
    max_bytes = o.max_bytes or 52428800, isolation_level = 0, session_id = 0, session_epoch = -1,
    topics = { { topic = topic, topic_id = o.topic_id, partitions = { { partition = partition, fetch_offset = offset,
      log_start_offset = -1, partition_max_bytes = o.partition_max_bytes or 1048576, current_leader_epoch = -1 } } } } },
    { version = o.version or (o.topic_id and 18 or 12) })) -- (v13+ by topic id)
  return resp.responses[1].partitions[1], resp.responses[1]
end

describe("kafka.mock in-process", function()
  it("ApiVersions advertises exactly what the mock implements; an unknown ApiVersions version gets error 35 and a v0 body",
    function()
    local cluster = mock.new { brokers = 1 }
    local c = conn_to(cluster, 1)
    local n = 0
    for key, r in pairs(mock.SUPPORTED) do
      n = n + 1
      assert.are.same({ min = r[1], max = r[2] }, c.broker_versions[key])
    end
    for _ in pairs(c.broker_versions) do n = n - 1 end
    assert.are.equal(0, n)
    assert.are.same({ 0, 18 }, mock.SUPPORTED[1]) -- Fetch by topic id from v13
    -- ApiVersions v9: the version bytes of a v3 request patched
    local frame = proto.encode_request("ApiVersions", 3, { correlation_id = 77, client_id = "x" }, {})
    frame = frame:sub(1, 6) .. "\0\9" .. frame:sub(9)
    local s = cluster:socket_factory()()
    s:settimeout(1000)
    assert(s:connect(cluster.brokers[1].host, cluster.brokers[1].port))
    assert(s:send(frame))
    local head = assert(s:receive(4))
    local body = assert(s:receive(proto.frame_length(head) - 4))
    local corr, v0 = proto.decode_response("ApiVersions", 0, head .. body)
    assert.are.equal(77, corr)
    assert.are.equal(E.UNSUPPORTED_VERSION, v0.error_code)
    assert.are.equal(23, #v0.api_keys) -- (18, and the share group APIs and IncrementalAlterConfigs)
  end)

  it("Metadata: brokers, leaders spread over replicas, auto-creation, unknown topics", function()
    local cluster = mock.new { brokers = 3, topics = { events = 6 }, default_partitions = 2 }
    local client = new_client(cluster)
    local md = assert(client:metadata { "events", "fresh" })
    assert.are.same({ [1] = { host = "mock", port = 9092 }, [2] = { host = "mock", port = 9093 },
      [3] = { host = "mock", port = 9094 } }, md.brokers)
    assert.are.equal("kafka-mock-cluster", md.cluster_id)
    assert.are.equal(1, md.controller_id)
    assert.are.equal(6, md.topics.events.count)
    for p = 0, 5 do
      assert.are.equal(p % 3 + 1, md.topics.events.partitions[p].leader)
      assert.are.equal(3, #md.topics.events.partitions[p].replicas)
    end
    assert.are.equal(2, md.topics.fresh.count) -- auto-created with default_partitions
    local strict = mock.new { brokers = 1, auto_create_topics = false }
    local c = conn_to(strict, 1)
    local resp = assert(c:request("Metadata", { topics = { { name = "nope" } }, allow_auto_topic_creation = true }))
    assert.are.equal(E.UNKNOWN_TOPIC_OR_PARTITION, resp.topics[1].error_code)
  end)

  it("produces and consumes through kafka.client: exact offsets, partitions and keys", function()
    local cluster = mock.new { brokers = 3, topics = { events = 6 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    for i = 1, 600 do
      assert(p:send("events", "v" .. i, { key = "k" .. i, partition = i % 6, headers = { { key = "h", value = "x" .. i } } }))
    end
    local reports, failed = p:flush()
    assert.are.equal(600, #reports)
    assert.are.equal(0, failed)
    for i, r in ipairs(reports) do
      assert.are.equal(i % 6, r.partition)
      assert.are.equal(math.floor((i - 1) / 6), r.offset)
    end
    for part = 0, 5 do
      local lo, hw = cluster:offsets("events", part)
      assert.are.equal(0, lo)
      assert.are.equal(100, hw)
      local recs = cluster:records("events", part)
      assert.are.equal(100, #recs)
      assert.are.equal(part == 0 and "v6" or ("v" .. part), recs[1].value)
      assert.are.same({ { key = "h", value = part == 0 and "x6" or ("x" .. part) } }, recs[1].headers)
      assert.are.equal(99, recs[100].offset)
    end
    local by_part, got = consume_all(client, "events", 600)
    assert.are.equal(600, got)
    for part = 0, 5 do
      for j, m in ipairs(by_part[part]) do
        assert.are.equal(j - 1, m.offset)
        local i = (j - 1) * 6 + (part == 0 and 6 or part)
        assert.are.equal("v" .. i, m.value)
        assert.are.equal("k" .. i, m.key)
        assert.are.same({ { key = "h", value = "x" .. i } }, m.headers)
        assert.are.equal(100, m.high_watermark)
      end
    end
    assert.are.equal(0, client:list_offsets("events", 3, "earliest"))
    assert.are.equal(100, client:list_offsets("events", 3, "latest"))
    -- no offset given, no group: auto_offset_reset says where to start
    local early = kafka.consumer.new(client, { auto_offset_reset = "earliest", fetch_max_wait_ms = 0 })
    assert(early:assign { { topic = "events", partition = 3 } })
    assert.are.equal(0, early:position("events", 3))
    local late = kafka.consumer.new(client, { fetch_max_wait_ms = 0 }) -- latest by default
    assert(late:assign { { topic = "events", partition = 3 } })
    assert.are.equal(100, late:position("events", 3))
    assert.are.equal(0, #assert(late:poll(10)))
  end)

  it("stores batches of every codec and magic as written, offsets assigned, and serves old Fetch versions down-converted",
    function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local c = conn_to(cluster, 1)
    local expect = {}
    for _, codec in ipairs(codecs) do
      for _, version in ipairs(codec == "zstd" and { 9 } or { 1, 2, 9 }) do -- magic 0, 1, 2 (zstd: 2 only)
        local msgs = { compression = codec }
        for k = 1, 3 do
          local v = ("%s-v%d-%d"):format(codec, version, k)
          msgs[k] = { key = "k" .. k, value = v, timestamp = 1700000000000 + k,
            headers = version >= 3 and { { key = "h", value = v } } or nil }
          expect[#expect + 1] = v
        end
        local r = pr(produce_raw(c, "t", 0, msgs, version))
        assert.are.equal(0, r.error_code)
        assert.are.equal(#expect - 3, r.base_offset)
      end
    end
    local recs = cluster:records("t", 0)
    assert.are.equal(#expect, #recs)
    for i, m in ipairs(recs) do
      assert.are.equal(i - 1, m.offset)
      assert.are.equal(expect[i], m.value)
      if m.value:find("-v9-", 1, true) then assert.are.same({ { key = "h", value = m.value } }, m.headers) end
    end
    -- Fetch v11 returns the stored bytes; v0 and v2 get magic 0 and 1 message sets
    for _, fv in ipairs { 0, 2, 11 } do
      local fp = fetch_raw(c, "t", 0, 0, { version = fv })
      assert.are.equal(0, fp.error_code)
      assert.are.equal(#expect, fp.high_watermark)
      assert.are.equal(#expect, #fp.records)
      for i, m in ipairs(fp.records) do
        assert.are.equal(i - 1, m.offset)
        assert.are.equal(expect[i], m.value)
      end
      local want_magic = fv == 0 and 0 or (fv == 2 and 1 or nil)
      if want_magic then -- newer batches are down-converted, older ones stay as they are
        local seen = {}
        for _, b in ipairs(fp.records.batches) do seen[b.magic] = true end
        assert.is_nil(seen[2])
        if want_magic == 0 then assert.is_nil(seen[1]) end
      end
    end
    -- a batch starting before the fetch offset is returned whole (the client skips the head)
    local fp = fetch_raw(c, "t", 0, 7) -- gzip magic 0: one wrapper for offsets 6-8
    assert.are.equal(6, fp.records[1].offset)
    fp = fetch_raw(c, "t", 0, 4) -- uncompressed magic 1: one message per entry
    assert.are.equal(4, fp.records[1].offset)
  end)

  it("checks CRCs and framing: a corrupt batch is refused with CORRUPT_MESSAGE and nothing is stored", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local c = conn_to(cluster, 1)
    local bytes = proto.encode_records({ "a", "b" }, { magic = 2 })
    local bad = bytes:sub(1, -2) .. string.char((bytes:byte(-1) + 1) % 256)
    assert.are.equal(E.CORRUPT_MESSAGE, pr(produce_raw(c, "t", 0, bad, 9)).error_code)
    assert.are.equal(E.CORRUPT_MESSAGE, pr(produce_raw(c, "t", 0, bytes:sub(1, 30), 9)).error_code)
    local legacy = proto.encode_records({ "a" }, { magic = 1 })
    assert.are.equal(E.INVALID_RECORD, pr(produce_raw(c, "t", 0, legacy, 9)).error_code) -- v3+ takes magic 2 only
    assert.are.equal(E.INVALID_RECORD, pr(produce_raw(c, "t", 0, bytes .. bytes, 9)).error_code) -- one batch per partition
    local badlegacy = legacy:sub(1, -2) .. string.char((legacy:byte(-1) + 1) % 256)
    assert.are.equal(E.CORRUPT_MESSAGE, pr(produce_raw(c, "t", 0, badlegacy, 2)).error_code)
    assert.are.equal(0, #cluster:records("t", 0))
    assert.are.equal(0, pr(produce_raw(c, "t", 0, bytes, 9)).error_code)
    assert.are.equal(2, #cluster:records("t", 0))
  end)

  it("acks 0, 1 and -1; invalid acks; NOT_ENOUGH_REPLICAS when the ISR is below min.insync.replicas", function()
    local cluster = mock.new { brokers = 3, topics = { t = 1 }, min_insync_replicas = 2 }
    local c = conn_to(cluster, 1)
    assert.are.same({}, c:request("Produce", { acks = 0, timeout_ms = 1000, topic_data = { { name = "t",
      partition_data = { { index = 0, records = { "zero" } } } } } }, { no_response = true }))
    assert.are.equal(1, pr(produce_raw(c, "t", 0, { "one" }, 9, 1)).base_offset)
    assert.are.equal(2, pr(produce_raw(c, "t", 0, { "all" }, 9, -1)).base_offset)
    assert.are.equal(E.INVALID_REQUIRED_ACKS, pr(produce_raw(c, "t", 0, { "two" }, 9, 2)).error_code)
    assert.are.equal(3, #cluster:records("t", 0))
    assert.are.equal("zero", cluster:records("t", 0)[1].value)
    cluster:down(3)
    cluster:down(2)
    assert.are.equal(E.NOT_ENOUGH_REPLICAS, pr(produce_raw(c, "t", 0, { "x" }, 9, -1)).error_code)
    assert.are.equal(3, pr(produce_raw(c, "t", 0, { "acks1 still works" }, 9, 1)).base_offset)
    -- the producer sends the acks it was given: -1 meets the short ISR, 1 does not
    local client = new_client(cluster)
    local all = kafka.producer.new(client, { acks = -1, delivery_timeout_ms = 100, linger_ms = 1e9 })
    assert(all:send("t", "needs the ISR", { partition = 0 }))
    local reports, failed = all:flush()
    assert.are.equal(1, failed)
    assert.are.equal("timeout", reports[1].code)
    assert.are.equal(E.NOT_ENOUGH_REPLICAS, reports[1].error_code)
    local one = kafka.producer.new(client, { acks = 1, linger_ms = 1e9 })
    assert(one:send("t", "leader only", { partition = 0 }))
    reports, failed = one:flush()
    assert.are.equal(0, failed)
    assert.are.equal(4, reports[1].offset)
  end)

  it("the idempotent producer: InitProducerId, DUPLICATE_SEQUENCE_NUMBER, OUT_OF_ORDER_SEQUENCE_NUMBER, epochs", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local c = conn_to(cluster, 1)
    local init = assert(c:request("InitProducerId", { transaction_timeout_ms = 60000, producer_id = -1, producer_epoch = -1 }))
    assert.are.equal(0, init.error_code)
    assert.are.equal(1000, init.producer_id)
    assert.are.equal(0, init.producer_epoch)
    local function batch(seq, n, epoch)
      local t = { producer_id = 1000, producer_epoch = epoch or 0, base_sequence = seq }
      for k = 1, n do t[k] = "s" .. (seq + k - 1) end
      return t
    end
    assert.are.equal(0, pr(produce_raw(c, "t", 0, batch(0, 3))).base_offset)
    local dup = pr(produce_raw(c, "t", 0, batch(0, 3)))       -- a retried batch
    assert.are.equal(E.DUPLICATE_SEQUENCE_NUMBER, dup.error_code)
    assert.are.equal(0, dup.base_offset)                       -- where it was written
    assert.are.equal(E.OUT_OF_ORDER_SEQUENCE_NUMBER, pr(produce_raw(c, "t", 0, batch(5, 1))).error_code) -- a gap
    assert.are.equal(3, pr(produce_raw(c, "t", 0, batch(3, 2))).base_offset)
    -- KIP-360: the producer bumps its epoch; the old epoch is fenced, the new one starts at 0
    local bump = assert(c:request("InitProducerId", { transaction_timeout_ms = 60000, producer_id = 1000, producer_epoch = 0 }))
    assert.are.equal(1000, bump.producer_id)
    assert.are.equal(1, bump.producer_epoch)
    assert.are.equal(5, pr(produce_raw(c, "t", 0, batch(0, 1, 1))).base_offset)
    assert.are.equal(E.INVALID_PRODUCER_EPOCH, pr(produce_raw(c, "t", 0, batch(5, 1, 0))).error_code)
    assert.are.equal(E.OUT_OF_ORDER_SEQUENCE_NUMBER, pr(produce_raw(c, "t", 0, batch(7, 1, 2))).error_code)
    assert.are.equal(6, #cluster:records("t", 0))
    local other = assert(c:request("InitProducerId", { transaction_timeout_ms = 60000, producer_id = -1, producer_epoch = -1 }))
    assert.are.equal(1001, other.producer_id)
  end)

  it("Fetch v13+ by topic id: a deleted topic's id is UNKNOWN_TOPIC_ID, also once its name has a new topic", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local c = conn_to(cluster, 1)
    produce_raw(c, "t", 0, { "a", "b" })
    local old = cluster.topics.t.id
    for _, v in ipairs { 13, 18 } do
      local fp, tr = fetch_raw(c, "t", 0, 0, { topic_id = old, version = v })
      assert.are.same({ 0, 2, old }, { fp.error_code, #fp.records, tr.topic_id })
    end
    cluster:delete_topic("t")
    assert.are.equal(E.UNKNOWN_TOPIC_ID, fetch_raw(c, "t", 0, 0, { topic_id = old }).error_code)
    cluster:create_topic("t", 1)
    produce_raw(c, "t", 0, { "c" })
    local new = cluster.topics.t.id
    assert.are_not.equal(old, new)
    assert.are.equal(E.UNKNOWN_TOPIC_ID, fetch_raw(c, "t", 0, 0, { topic_id = old }).error_code)
    local fp = fetch_raw(c, "t", 0, 0, { topic_id = new })
    assert.are.same({ 0, 1, "c" }, { fp.error_code, #fp.records, fp.records[1].value })
    -- by name (v12) the new topic answers for the old one
    assert.are.equal("c", fetch_raw(c, "t", 0, 0).records[1].value)
  end)

  it("Fetch: high watermark, log start, OFFSET_OUT_OF_RANGE, partition and response byte limits", function()
    local cluster = mock.new { brokers = 1, topics = { t = 2 } }
    local c = conn_to(cluster, 1)
    local sizes = {}
    for i = 1, 5 do
      local msgs = {}
      for k = 1, 10 do msgs[k] = ("m%d-%d"):format(i, k) end
      produce_raw(c, "t", 0, msgs)
      sizes[i] = #proto.encode_records(msgs, { magic = 2 })
    end
    local fp = fetch_raw(c, "t", 0, 0)
    assert.are.equal(50, fp.high_watermark)
    assert.are.equal(50, fp.last_stable_offset)
    assert.are.equal(0, fp.log_start_offset)
    assert.are.equal(50, #fp.records)
    fp = fetch_raw(c, "t", 0, 50)
    assert.are.equal(0, fp.error_code)
    assert.are.equal(0, #fp.records)
    assert.are.equal(E.OFFSET_OUT_OF_RANGE, fetch_raw(c, "t", 0, 51).error_code)
    -- partition_max_bytes: whole batches up to the limit, at least one
    assert.are.equal(10, #fetch_raw(c, "t", 0, 0, { partition_max_bytes = 1 }).records)
    assert.are.equal(20, #fetch_raw(c, "t", 0, 0, { partition_max_bytes = sizes[1] + sizes[2] }).records)
    assert.are.equal(20, #fetch_raw(c, "t", 0, 0, { max_bytes = sizes[1] + sizes[2] + 5 }).records)
    -- the log start moves: below it is out of range, batches wholly below are gone
    assert.are.equal(25, cluster:delete_records("t", 0, 25))
    assert.are.equal(E.OFFSET_OUT_OF_RANGE, fetch_raw(c, "t", 0, 10).error_code)
    fp = fetch_raw(c, "t", 0, 25)
    assert.are.equal(25, fp.log_start_offset)
    assert.are.equal(20, fp.records[1].offset) -- the batch holding 25 starts at 20
    assert.are.equal(25, #cluster:records("t", 0))
    local client = new_client(cluster)
    assert.are.equal(25, client:list_offsets("t", 0, "earliest"))
    -- unknown partitions and the wrong leader
    assert.are.equal(E.UNKNOWN_TOPIC_OR_PARTITION, fetch_raw(c, "t", 7, 0).error_code)
    assert.are.equal(E.UNKNOWN_TOPIC_OR_PARTITION, fetch_raw(c, "nope", 0, 0).error_code)
  end)

  it("ListOffsets by timestamp: the first offset at or after it, -1 past the end", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local c = conn_to(cluster, 1)
    produce_raw(c, "t", 0, { { value = "a", timestamp = 1000 }, { value = "b", timestamp = 2000 } })
    produce_raw(c, "t", 0, { { value = "c", timestamp = 3000 }, { value = "d", timestamp = 2500 } })
    local client = new_client(cluster)
    assert.are.equal(0, client:list_offsets("t", 0, 500))
    assert.are.equal(1, client:list_offsets("t", 0, 1500))
    assert.are.equal(1, client:list_offsets("t", 0, 2000))
    assert.are.equal(2, client:list_offsets("t", 0, 2100))
    assert.are.equal(-1, client:list_offsets("t", 0, 3001))
    assert.are.equal(4, client:list_offsets("t", 0, "latest"))
    local resp = assert(c:request("ListOffsets", { replica_id = -1, topics = { { name = "t", partitions = {
      { partition_index = 0, timestamp = -3, current_leader_epoch = -1 } } } } }, { version = 7 }))
    assert.are.equal(2, resp.topics[1].partitions[1].offset) -- max timestamp (KIP-734)
    assert.are.equal(3000, resp.topics[1].partitions[1].timestamp)
  end)

  it("CreateTopics and DeleteTopics", function()
    local cluster = mock.new { brokers = 3 }
    local c = conn_to(cluster, 2)
    local resp = assert(c:request("CreateTopics", { timeout_ms = 1000, topics = {
      { name = "made", num_partitions = 4, replication_factor = 2 },
      { name = "bad/name", num_partitions = 1, replication_factor = 1 },
      { name = "wide", num_partitions = 1, replication_factor = 5 },
      { name = "zero", num_partitions = 0, replication_factor = 1 },
      { name = "placed", num_partitions = -1, replication_factor = -1,
        assignments = { { partition_index = 1, broker_ids = { 3 } }, { partition_index = 0, broker_ids = { 2, 1 } } } },
    } }, { version = 7 }))
    local codes = {}
    for i, t in ipairs(resp.topics) do codes[i] = t.error_code end
    assert.are.same({ 0, E.INVALID_TOPIC_EXCEPTION, E.INVALID_REPLICATION_FACTOR, E.INVALID_PARTITIONS, 0 }, codes)
    assert.are.equal(4, resp.topics[1].num_partitions)
    assert.are.equal(2, resp.topics[1].replication_factor)
    assert.are.equal(2, cluster:leader("placed", 0))
    assert.are.equal(3, cluster:leader("placed", 1))
    resp = assert(c:request("CreateTopics", { timeout_ms = 1000, topics = { { name = "made", num_partitions = 1,
      replication_factor = 1 } } }))
    assert.are.equal(E.TOPIC_ALREADY_EXISTS, resp.topics[1].error_code)
    resp = assert(c:request("DeleteTopics", { timeout_ms = 1000, topic_names = { "made", "never" } }, { version = 5 }))
    assert.are.equal(0, resp.responses[1].error_code)
    assert.are.equal(E.UNKNOWN_TOPIC_OR_PARTITION, resp.responses[2].error_code)
    assert.is_nil(cluster.topics.made)
    assert.has_error(function() cluster:records("made", 0) end, "kafka.mock: records: unknown topic made")
  end)

  describe("the classic group coordinator", function()
    local t, cluster, c1, c2
    local function join(c, member_id, version, reason_meta)
      return c:request("JoinGroup", { group_id = "g", session_timeout_ms = 10000, rebalance_timeout_ms = 20000,
        member_id = member_id, protocol_type = "consumer",
        protocols = { { name = "range", metadata = reason_meta or "m" } } }, { version = version or 5 })
    end
    local function hb(c, gen, id)
      return assert(c:request("Heartbeat", { group_id = "g", generation_id = gen, member_id = id })).error_code
    end
    before_each(function()
      t = 0
      cluster = mock.new { brokers = 3, topics = { events = 4 }, now = function() return t end,
        sleep = function(ms) t = t + ms end }
      local coord = cluster:coordinator("g")
      c1 = conn_to(cluster, coord, { client_id = "one" })
      c2 = conn_to(cluster, coord, { client_id = "two" })
    end)

    it("FindCoordinator names the broker; the others answer NOT_COORDINATOR", function()
      local coord = cluster:coordinator("g")
      local r = assert(c1:request("FindCoordinator", { key = "g", key_type = 0 }, { version = 3 }))
      assert.are.equal(coord, r.node_id)
      assert.are.equal(9091 + coord, r.port)
      r = assert(c1:request("FindCoordinator", { key_type = 0, coordinator_keys = { "g", "other" } }, { version = 4 }))
      assert.are.equal(coord, r.coordinators[1].node_id)
      assert.are.equal(cluster:coordinator("other"), r.coordinators[2].node_id)
      local wrong = conn_to(cluster, coord % 3 + 1)
      assert.are.equal(E.NOT_COORDINATOR, assert(join(wrong, "")).error_code)
    end)

    it("MEMBER_ID_REQUIRED, a leader, a second member's rebalance, SyncGroup, errors, leave and session timeout", function()
      local r = assert(join(c1, ""))
      assert.are.equal(E.MEMBER_ID_REQUIRED, r.error_code)
      local a = r.member_id
      assert.matches("^one%-", a)
      r = assert(join(c1, a))
      assert.are.equal(0, r.error_code)
      assert.are.equal(1, r.generation_id)
      assert.are.equal(a, r.leader)
      assert.are.equal("range", r.protocol_name)
      assert.are.equal(1, #r.members)
      assert.are.equal(E.UNKNOWN_MEMBER_ID, assert(join(c1, "made-up")).error_code)
      r = assert(c1:request("SyncGroup", { group_id = "g", generation_id = 1, member_id = a,
        assignments = { { member_id = a, assignment = "all" } } }))
      assert.are.equal("all", r.assignment)
      assert.are.equal("Stable", cluster:group("g").state)
      assert.are.equal(0, hb(c1, 1, a))
      -- pre-KIP-394 (v3): joins without a second round trip; the group rebalances
      local corr = assert(c2:send("JoinGroup", 3, { group_id = "g", session_timeout_ms = 10000,
        rebalance_timeout_ms = 20000, member_id = "", protocol_type = "consumer",
        protocols = { { name = "range", metadata = "b" } } }))
      assert.are.equal("PreparingRebalance", cluster:group("g").state)
      assert.are.equal(E.REBALANCE_IN_PROGRESS, hb(c1, 1, a))
      r = assert(join(c1, a)) -- the last member to rejoin completes the phase
      assert.are.equal(2, r.generation_id)
      assert.are.equal(a, r.leader)
      assert.are.equal(2, #r.members)
      local b = r.members[2].member_id
      assert.are.equal("b", r.members[2].metadata)
      local rb = assert(c2:receive(corr))
      assert.are.equal(0, rb.error_code)
      assert.are.equal(b, rb.member_id)
      assert.are.equal(2, rb.generation_id)
      assert.are.equal(0, #rb.members) -- followers get no member list
      -- the follower's SyncGroup waits for the leader's
      local scorr = assert(c2:send("SyncGroup", 3, { group_id = "g", generation_id = 2, member_id = b, assignments = {} }))
      assert.are.equal("CompletingRebalance", cluster:group("g").state)
      assert.are.equal(E.REBALANCE_IN_PROGRESS, assert(c1:request("OffsetCommit", { group_id = "g",
        generation_id_or_member_epoch = 2, member_id = a, topics = {} })).error_code or E.REBALANCE_IN_PROGRESS)
      r = assert(c1:request("SyncGroup", { group_id = "g", generation_id = 2, member_id = a,
        assignments = { { member_id = a, assignment = "p0p1" }, { member_id = b, assignment = "p2p3" } } }))
      assert.are.equal("p0p1", r.assignment)
      assert.are.equal("p2p3", assert(c2:receive(scorr)).assignment)
      assert.are.equal("Stable", cluster:group("g").state)
      -- generations and members are checked
      assert.are.equal(E.ILLEGAL_GENERATION, hb(c1, 1, a))
      assert.are.equal(E.UNKNOWN_MEMBER_ID, hb(c1, 2, "nobody"))
      local commit = assert(c1:request("OffsetCommit", { group_id = "g", generation_id_or_member_epoch = 1, member_id = a,
        topics = { { name = "events", partitions = { { partition_index = 0, committed_offset = 5 } } } } }))
      assert.are.equal(E.ILLEGAL_GENERATION, commit.topics[1].partitions[1].error_code)
      commit = assert(c1:request("OffsetCommit", { group_id = "g", generation_id_or_member_epoch = 2, member_id = a,
        topics = { { name = "events", partitions = { { partition_index = 0, committed_offset = 5, committed_metadata = "m" } } } } }))
      assert.are.equal(0, commit.topics[1].partitions[1].error_code)
      assert.are.same({ events = { [0] = 5 } }, cluster:committed("g"))
      assert.are.same({ events = { [0] = { offset = 5, metadata = "m", leader_epoch = -1 } } }, cluster:committed("g", true))
      -- b leaves: a rebalance, a rejoins alone in generation 3
      r = assert(c2:request("LeaveGroup", { group_id = "g", members = { { member_id = b } } }))
      assert.are.equal(0, r.members[1].error_code)
      assert.are.equal(E.REBALANCE_IN_PROGRESS, hb(c1, 2, a))
      r = assert(join(c1, a))
      assert.are.equal(3, r.generation_id)
      assert.are.equal(1, #r.members)
      assert(c1:request("SyncGroup", { group_id = "g", generation_id = 3, member_id = a,
        assignments = { { member_id = a, assignment = "all" } } }))
      -- silence past the session timeout: a is removed, the group is Empty
      t = t + 9999
      cluster:tick()
      assert.are.equal("Stable", cluster:group("g").state)
      t = t + 1
      cluster:tick()
      local g = cluster:group("g")
      assert.are.equal("Empty", g.state)
      assert.are.equal(4, g.generation)
      assert.are.equal(0, #g.members)
      assert.are.equal(E.UNKNOWN_MEMBER_ID, hb(c1, 3, a))
      -- an Empty group takes simple commits (generation -1), and offsets survive
      commit = assert(c1:request("OffsetCommit", { group_id = "g", generation_id_or_member_epoch = -1, member_id = "",
        topics = { { name = "events", partitions = { { partition_index = 1, committed_offset = 9 } } } } }))
      assert.are.equal(0, commit.topics[1].partitions[1].error_code)
      assert.are.same({ events = { [0] = 5, [1] = 9 } }, cluster:committed("g"))
      local of = assert(c1:request("OffsetFetch", { group_id = "g", require_stable = false }, { version = 7 }))
      assert.are.equal(2, #of.topics[1].partitions)
    end)

    it("a member that does not rejoin within the rebalance timeout is removed", function()
      local a = assert(join(c1, "")).member_id
      assert.are.equal(1, assert(join(c1, a)).generation_id)
      assert(c1:request("SyncGroup", { group_id = "g", generation_id = 1, member_id = a, assignments = {} }))
      local b = assert(join(c2, "")).member_id
      local corr = assert(c2:send("JoinGroup", 5, { group_id = "g", session_timeout_ms = 10000, rebalance_timeout_ms = 20000,
        member_id = b, protocol_type = "consumer", protocols = { { name = "range", metadata = "" } } }))
      -- a heartbeats but never rejoins; b's JoinGroup waits until the rebalance timeout (20 s, a's)
      for _ = 1, 3 do
        t = t + 5000
        assert.are.equal(E.REBALANCE_IN_PROGRESS, hb(c1, 1, a))
      end
      local r = assert(c2:receive(corr)) -- the in-process socket advances the clock to the deadline
      assert.are.equal(20000, t)
      assert.are.equal(0, r.error_code)
      assert.are.equal(2, r.generation_id)
      assert.are.equal(b, r.leader)
      assert.are.equal(1, #r.members)
      assert.are.equal(E.UNKNOWN_MEMBER_ID, hb(c1, 2, a))
    end)

    it("rejects inconsistent protocols and bad session timeouts", function()
      local a = assert(join(c1, "")).member_id
      assert(join(c1, a))
      local r = assert(c2:request("JoinGroup", { group_id = "g", session_timeout_ms = 10000, rebalance_timeout_ms = 1000,
        member_id = "", protocol_type = "consumer", protocols = { { name = "roundrobin", metadata = "" } } }, { version = 3 }))
      assert.are.equal(E.INCONSISTENT_GROUP_PROTOCOL, r.error_code)
      r = assert(c2:request("JoinGroup", { group_id = "g", session_timeout_ms = 10, rebalance_timeout_ms = 1000,
        member_id = "", protocol_type = "consumer", protocols = { { name = "range", metadata = "" } } }))
      assert.are.equal(E.INVALID_SESSION_TIMEOUT, r.error_code)
      r = assert(c2:request("JoinGroup", { group_id = "", session_timeout_ms = 10000, rebalance_timeout_ms = 1000,
        member_id = "", protocol_type = "consumer", protocols = { { name = "range", metadata = "" } } }))
      assert.are.equal(E.INVALID_GROUP_ID, r.error_code)
    end)
  end)


  it("measures in-process produce and consume rates (printed)", function()
    local cluster = mock.new { brokers = 1, topics = { bench = 1 } }
    local client = new_client(cluster)
    local N = tonumber(os.getenv("SPEC_BULK_N")) or 100000
    local value = ("x"):rep(100)
    local p = kafka.producer.new(client, { linger_ms = 1e9, delivery_reports = "errors" })
    local t0 = socket.gettime()
    for _ = 1, N do p:send("bench", value) end
    local _, failed, delivered = p:flush()
    local t1 = socket.gettime()
    assert.are.equal(0, failed)
    assert.are.equal(N, delivered)
    local _, got = consume_all(client, "bench", N)
    local t2 = socket.gettime()
    assert.are.equal(N, got)
    io.stderr:write(("\n  in-process mock, %d x 100 B: produce %.0f msg/s, consume %.0f msg/s\n"):format(N,
      N / (t1 - t0), N / (t2 - t1)))
  end)
end)

describe("kafka.mock misuse raises", function()
  it("with a clear message", function()
    assert.has_error(function() mock.new { brokers = 0 } end, "kafka.mock: new: brokers must be an integer >= 1, got 0")
    assert.has_error(function() mock.new { topics = { ["bad name"] = 1 } } end,
      "kafka.mock.new: topic bad name: invalid topic name")
    assert.has_error(function() mock.new { topics = { t = 0 } } end, "kafka.mock.new: topic t: invalid number of partitions")
    local cluster = mock.new { brokers = 2, topics = { t = 2 } }
    assert.has_error(function() cluster:fail("Nope", 6, 1) end, "kafka.mock: fail: unknown or unimplemented api Nope")
    assert.has_error(function() cluster:fail("Produce", 4242, 1) end, "kafka.mock: fail: unknown Kafka error code 4242")
    assert.has_error(function() cluster:fail("Produce", 6, 0) end, "kafka.mock: fail: count must be an integer >= 1, got 0")
    assert.has_error(function() cluster:down(3) end, "kafka.mock: down: unknown broker id 3")
    assert.has_error(function() cluster:move_leader("t", 2, 1) end, "kafka.mock: move_leader: topic t has no partition 2")
    assert.has_error(function() cluster:move_leader("t", 0, 9) end, "kafka.mock: move_leader: unknown broker id 9")
    assert.has_error(function() cluster:delay("Fetch", -1) end, "kafka.mock: delay: ms must be an integer >= 0, got -1")
    assert.has_error(function() cluster:records("nope", 0) end, "kafka.mock: records: unknown topic nope")
    assert.has_error(function() cluster:committed(5) end, "kafka.mock: committed: group must be a string")
    assert.has_error(function() cluster:step() end, "kafka.mock: step: call listen() first")
    assert.has_error(function() cluster:create_topic("t", 1) end, "kafka.mock: create_topic: t: topic exists")
  end)
end)

describe("kafka.mock on TCP", function()
  local cluster
  after_each(function() if cluster then cluster:close() end end)

  -- a request over a real socket while the mock is stepped
  local function tcp_request(c, api, body, opts)
    local v = opts and opts.version or assert(c:version(api))
    local corr = assert(c:send(api, v, body))
    for _ = 1, 100 do
      cluster:step(0.01)
      local r = socket.select({ c.sock.sock }, nil, 0)
      if r[c.sock.sock] then break end
    end
    return c:receive(corr)
  end

  local function tcp_conn(id)
    local b = cluster.brokers[id]
    local c = connection.new { host = b.host, port = b.port, request_timeout_ms = 2000 }
    -- connect + ApiVersions while the mock runs: send by hand, then step
    c.use_api_versions = false
    assert(c:connect())
    local resp = assert(tcp_request(c, "ApiVersions", {}, { version = 3 }))
    local bv = {}
    for _, k in ipairs(resp.api_keys) do bv[k.api_key] = { min = k.min_version, max = k.max_version } end
    c.broker_versions = bv
    return c
  end

  local function raw_client(bytes)
    local s = assert(socket.connect(cluster.brokers[1].host, cluster.brokers[1].port))
    s:settimeout(0)
    if bytes then s:send(bytes) end
    return s
  end

  local function closed_by_mock(s)
    for _ = 1, 50 do
      cluster:step(0.01)
      local data, err = s:receive(1)
      if err == "closed" then return true end
      if data then return false end
    end
    return false
  end

  it("closes hostile connections (garbage, huge and negative sizes, unknown api, unknown version) and serves the others",
    function()
    cluster = mock.new { brokers = 1, topics = { t = 1 } }
    cluster:listen()
    local good = tcp_conn(1)
    local hostile = {
      "\255\255\255\255garbage",                              -- negative size
      "\127\255\255\255",                                     -- 2 GiB declared
      "\0\0\0\3abc",                                          -- shorter than a request header
      "\0\0\0\10\3\231\0\0\0\0\0\1\255\255",                 -- api key 999
      "\0\0\0\10\0\0\0\99\0\0\0\1\255\255",                  -- Produce v99
      "\0\0\0\18\0\1\0\4\0\0\0\1\0\2zz\255\255\255\255\255\255", -- Fetch v4 body of garbage
    }
    local socks = {}
    for i, bytes in ipairs(hostile) do socks[i] = raw_client(bytes) end
    for i, s in ipairs(socks) do
      assert.is_true(closed_by_mock(s), "hostile client " .. i .. " was not closed")
      s:close()
    end
    local _, bad = cluster:request_counts()
    assert.are.equal(#hostile, bad)
    -- a client that sends half a frame and goes away
    local half = raw_client(proto.encode_request("Metadata", 9, { correlation_id = 1 }, { topics = {} }):sub(1, 9))
    cluster:step(0.01)
    half:close()
    cluster:step(0.01)
    -- the good connection still works
    local resp = assert(tcp_request(good, "Produce", { acks = -1, timeout_ms = 1000, topic_data = { { name = "t",
      partition_data = { { index = 0, records = { "still", "served" } } } } } }))
    assert.are.equal(0, resp.responses[1].partition_responses[1].base_offset)
    assert.are.equal(2, #cluster:records("t", 0))
    good:close()
  end)

  it("Fetch waits max_wait_ms for min_bytes on TCP, and answers as soon as data arrives", function()
    cluster = mock.new { brokers = 1, topics = { t = 1 } }
    cluster:listen()
    local c = tcp_conn(1)
    local body = { replica_id = -1, max_wait_ms = 60000, min_bytes = 1, max_bytes = 1048576, isolation_level = 0,
      topics = { { topic = "t", partitions = { { partition = 0, fetch_offset = 0, partition_max_bytes = 1048576,
        current_leader_epoch = -1, log_start_offset = -1 } } } } }
    local corr = assert(c:send("Fetch", 11, body))
    cluster:run(0.2)
    assert.are.equal(1, #cluster.parked) -- still waiting
    local r = socket.select({ c.sock.sock }, nil, 0)
    assert.is_nil(r[c.sock.sock])
    -- another client produces (in-process, into the same cluster): the fetch is answered
    local p = kafka.producer.new(new_client(cluster))
    assert(p:send_sync("t", "arrived"))
    cluster:step(0.05)
    local resp = assert(c:receive(corr))
    assert.are.equal(0, #cluster.parked)
    assert.are.equal("arrived", resp.responses[1].partitions[1].records[1].value)
    -- nothing arrives: answered empty when max_wait_ms is over
    body.max_wait_ms = 150
    body.topics[1].partitions[1].fetch_offset = 1
    corr = assert(c:send("Fetch", 11, body))
    cluster:step(0.01)
    assert.are.equal(1, #cluster.parked)
    cluster:run(0.3, function() return #cluster.parked == 0 end)
    resp = assert(c:receive(corr))
    assert.are.equal(0, #resp.responses[1].partitions[1].records)
    assert.are.equal(1, resp.responses[1].partitions[1].high_watermark)
    c:close()
  end)

  it("a broker down refuses connections on its port; up listens again on the same port", function()
    cluster = mock.new { brokers = 2, topics = { t = 2 } }
    cluster:listen()
    local port = cluster.brokers[2].port
    cluster:down(2)
    local s = socket.tcp()
    s:settimeout(1)
    local ok, err = s:connect("127.0.0.1", port)
    s:close()
    assert.is_nil(ok)
    assert.are.equal("connection refused", err)
    cluster:up(2)
    assert.are.equal(port, cluster.brokers[2].port)
    local c = tcp_conn(2)
    c:close()
  end)
end)

describe("kafka.mock in-process on an injected clock", function()
  -- A Fetch without data is held for its max_wait_ms, as a broker holds it:
  -- the client's receive sleeps on the cluster's clock until then. (It was
  -- answered at once: an empty poll spun, 55,000 Fetches a second on the
  -- real clock, and never returned on an injected one.)
  it("an empty poll waits fetch_max_wait_ms per Fetch and returns at its deadline; data ends the wait", function()
    local t = 0
    local now, sleep = function() return t end, function(ms) t = t + ms end
    local cluster = mock.new { brokers = 1, topics = { t = 1 }, now = now, sleep = sleep }
    local factory, fetches = cluster:socket_factory(), {}
    local function logged(...) -- the clock's time of each Fetch sent
      local s = factory(...)
      local send = s.send
      s.send = function(self, data, ...)
        local req = kafka.proto.decode_request(tostring(data))
        if req and req.api_name == "Fetch" then fetches[#fetches + 1] = t end
        return send(self, data, ...)
      end
      return s
    end
    local client = kafka.client.new { brokers = cluster:bootstrap(), socket = logged, now = now, sleep = sleep }
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 400 })
    assert(c:assign { { topic = "t", partition = 0, offset = "earliest" } })
    local msgs, err = c:poll(1000)
    assert.are.same({ {}, nil, 1000 }, { msgs, err, t })
    -- each answered empty after 400 ms; the one sent as the poll ends is held
    assert.are.same({ 0, 400, 800, 1000 }, fetches)
    local p = kafka.producer.new(client, {})
    assert.are.same({ 0, 0 }, { p:send_sync("t", "hello") })
    local t0 = t
    msgs = assert(c:poll(1000))
    assert.are.same({ 1, "hello", 0 }, { #msgs, msgs[1].value, t - t0 })
    client:close()
    cluster:close()
  end)

  -- issue 27: a frozen broker (a JVM stopped with SIGSTOP) takes requests
  -- and answers none until thawed; with move_leaders its partitions fail
  -- over at once, as the cluster fences it
  it("freeze(id) holds every answer until thaw(id); freeze(id, true) moves the leaders: written once either way",
    function()
    local results = {}
    for _, mode in ipairs { "thaw", "move" } do
      local t, cluster, thaw_at = 0, nil, nil
      local now = function() return t end
      local function sleep(ms) -- a sleep ends at the thaw, as the broker's answer would end it
        if thaw_at and t + ms >= thaw_at then
          t, thaw_at = thaw_at, nil
          cluster:thaw(1)
        else
          t = t + ms
        end
      end
      cluster = mock.new { brokers = 3, topics = { t = { partitions = 1, replication_factor = 3 } }, now = now,
        sleep = sleep }
      local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(), now = now,
        sleep = sleep, request_timeout_ms = 1000 }
      local p = kafka.producer.new(client, { timeout_ms = 500 })
      local _, o0 = p:send_sync("t", "before")
      local _, o1 = p:send_sync("t", "second")
      assert.are.same({ 0, 1, 1 }, { o0, o1, cluster:leader("t", 0) })
      local t0 = t
      if mode == "thaw" then
        cluster:freeze(1)
        thaw_at = t + 800
      else
        cluster:freeze(1, true)
      end
      local part, off = p:send_sync("t", "during")
      local r = { part, off, t - t0, cluster:leader("t", 0) }
      if mode == "move" then cluster:thaw(1) end -- (the held Produce went with the connection the client closed)
      r[5] = cluster:request_counts().Produce
      local values = {}
      for _, m in ipairs(cluster:records("t", 0)) do values[#values + 1] = m.value end
      r[#r + 1] = table.concat(values, ",")
      results[mode] = r
      client:close()
      cluster:close()
    end
    -- answered at the thaw (800 ms), one Produce for it; or after the
    -- request's deadline (1000 + 500 ms of Produce timeout) and 100 ms of
    -- backoff by the new leader, the held one never served
    assert.are.same({ thaw = { 0, 2, 800, 1, 3, "before,second,during" },
      move = { 0, 2, 1600, 2, 3, "before,second,during" } }, results)
  end)

  -- issue 27: the automatic commit goes out asynchronously, as Java's, and
  -- a later poll takes its answer: a coordinator slow to answer (5 s here)
  -- never stretches a poll past its timeout
  it("poll keeps its deadline while the automatic commit waits for the coordinator", function()
    local t = 0
    local now, sleep = function() return t end, function(ms) t = t + ms end
    local cluster = mock.new { brokers = 1, topics = { t = 2 }, now = now, sleep = sleep }
    local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(), now = now,
      sleep = sleep }
    local p = kafka.producer.new(client, {})
    for i = 1, 10 do p:send("t", "m" .. i, { partition = i % 2 }) end
    local _, failed, delivered = p:flush()
    assert.are.same({ 0, 10 }, { failed, delivered })
    local c = kafka.consumer.new(client, { group_id = "g", auto_commit_interval_ms = 100, fetch_max_wait_ms = 50,
      auto_offset_reset = "earliest" })
    c:subscribe { "t" }
    local got = 0
    while got < 10 and t < 60000 do got = got + #assert(c:poll(100)) end
    assert.are.same({ 10, "stable" }, { got, c:group_state().state })
    cluster:delay("OffsetCommit", 5000)
    local polls = {}
    for i = 1, 4 do
      local t0 = t
      local msgs, err = c:poll(200)
      local ac = c:group_state().auto_commit
      polls[i] = { #msgs, err, t - t0, ac.in_flight, ac.commits }
    end
    -- the first poll is before the interval is up; the second sends the commit
    assert.are.same({ { 0, nil, 200, false, 0 }, { 0, nil, 200, true, 0 }, { 0, nil, 200, true, 0 },
      { 0, nil, 200, true, 0 } }, polls)
    while c:group_state().auto_commit.in_flight and t < 60000 do assert(c:poll(200)) end
    -- answered 5 s after it was sent (at 200 ms, into the poll that began at 5,200)
    assert.are.same({ 5400, 1 }, { t, c:group_state().auto_commit.commits })
    assert.are.same({ t = { [0] = 5, [1] = 5 } }, cluster:committed("g"))
    -- the positions are committed now: later intervals send nothing
    for _ = 1, 5 do assert(c:poll(200)) end
    local ac = c:group_state().auto_commit
    assert.are.same({ 1, false, 1 }, { ac.commits, ac.in_flight, cluster:request_counts().OffsetCommit })
    c:close()
    client:close()
    cluster:close()
  end)
end)

-- issue 27: a controller move as a client of a KRaft cluster sees it when
-- the active controller (a combined node) is killed: until a controller is
-- elected nothing is fenced, no leader changes (the dead node stays
-- registered: listed, named leader, in the ISR, its connects refused, as
-- Kafka's KRaft metadata cache answers), CreateTopics waits for the
-- controller (a broker forwards it) and auto-creation does not happen
describe("kafka.mock: the controller", function()
  local t, cluster
  before_each(function()
    t = 0
    cluster = mock.new { brokers = 3, topics = { t = { partitions = 3, replication_factor = 3 } },
      now = function() return t end, sleep = function(ms) t = t + ms end }
  end)
  after_each(function() cluster:close() end)

  -- {leader, epoch, error, isr} per partition of t, the brokers listed, controller_id, as broker id answers
  local function view(id)
    local c = conn_to(cluster, id, { now = cluster.now })
    local md = assert(c:request("Metadata", { topics = { { name = "t" } }, allow_auto_topic_creation = true }))
    c:close()
    local parts, brokers = {}, {}
    for _, p in ipairs(md.topics[1].partitions) do
      parts[p.partition_index + 1] = { p.leader_id, p.leader_epoch, p.error_code, table.concat(p.isr_nodes, ",") }
    end
    for _, b in ipairs(md.brokers) do brokers[#brokers + 1] = b.node_id end
    table.sort(brokers)
    return { parts = parts, brokers = table.concat(brokers, ","), controller_id = md.controller_id }
  end

  local function create(c, name)
    local resp, err = c:request("CreateTopics", { topics = { { name = name, num_partitions = 1, replication_factor = 2,
      assignments = {}, configs = {} } }, timeout_ms = 1000, validate_only = false })
    return resp and resp.topics[1].error_code, err
  end

  it("kill_controller(election_ms): no leader change and admin requests wait until the election, then the next node "
    .. "fences the dead one", function()
    local before = view(2)
    assert.are.same({ parts = { { 1, 0, 0, "1,2,3" }, { 2, 0, 0, "2,3,1" }, { 3, 0, 0, "3,1,2" } }, brokers = "1,2,3",
      controller_id = 1 }, before)
    assert.are.same({ 1, 1 }, { cluster:controller(), cluster:kill_controller(3000) })
    assert.is_nil(cluster:controller())
    -- the dead node is still named: listed, leader, in the ISR; its connects refused
    assert.are.same(before, view(2))
    local s = cluster:socket_factory()()
    assert.are.same({ nil, "connection refused" }, { s:connect("mock", 9092) })
    -- auto-creation goes to the controller: the topic is not created
    local c = conn_to(cluster, 3, { now = cluster.now })
    local md = assert(c:request("Metadata", { topics = { { name = "fresh" } }, allow_auto_topic_creation = true }))
    assert.are.same({ E.LEADER_NOT_AVAILABLE, 0 }, { md.topics[1].error_code, #md.topics[1].partitions })
    assert.is_nil(cluster.topics.fresh)
    -- CreateTopics waits for the election: answered at 3000 ms
    t = 1000
    assert.are.same({ 0 }, { create(c, "made") })
    assert.are.same({ 3000, 2, "2,3" }, { t, cluster:controller(), table.concat(cluster.topics.made.partitions[0].replicas, ",") })
    -- the new controller fenced node 1: its partition moved (epoch 1), it is out of the ISR and the list
    assert.are.same({ parts = { { 2, 1, 0, "2,3" }, { 2, 0, 0, "2,3" }, { 3, 0, 0, "3,2" } }, brokers = "2,3",
      controller_id = 2 }, view(3))
    -- back with a controller elected: registered at once, its partitions stay moved
    cluster:up(1)
    assert.are.same({ parts = { { 2, 1, 0, "1,2,3" }, { 2, 0, 0, "2,3,1" }, { 3, 0, 0, "3,1,2" } }, brokers = "1,2,3",
      controller_id = 1 }, view(1))
    c:close()
  end)

  it("the election needs a majority running; a node started meanwhile serves from the election on; CreateTopics "
    .. "times out after 60 s; move_controller(id) elects at once", function()
    assert.are.equal(1, cluster:kill_controller(1000))
    cluster:down(2) -- no controller: node 2 stays registered and leader
    local c = conn_to(cluster, 3, { now = cluster.now })
    c.request_timeout_ms = 90000
    t = 5000
    assert.are.same({ parts = { { 1, 0, 0, "1,2,3" }, { 2, 0, 0, "2,3,1" }, { 3, 0, 0, "3,1,2" } }, brokers = "1,2,3",
      controller_id = 1 }, view(3))
    assert.is_nil(cluster:controller()) -- one node of three runs
    assert.are.same({ E.REQUEST_TIMED_OUT }, { create(c, "late") })
    assert.are.same({ 65000, nil }, { t, cluster.topics.late })
    -- two of three: elected at once, the first running node after node 1;
    -- it fences both dead nodes, then registers node 2 (its leaders moved)
    cluster:up(2)
    assert.are.same({ 2 }, { cluster:controller() })
    assert.are.same({ parts = { { 3, 1, 0, "2,3" }, { 3, 1, 0, "2,3" }, { 3, 0, 0, "3,2" } }, brokers = "2,3",
      controller_id = 2 }, view(3))
    -- a node started while no controller is elected waits for one
    assert.are.equal(2, cluster:kill_controller(5000))
    cluster:up(1)
    local s = cluster:socket_factory()()
    assert.are.same({ nil, "connection refused" }, { s:connect("mock", 9092) })
    cluster:move_controller(3)
    assert.are.same({ 1, 3 }, { s:connect("mock", 9092), cluster:controller() })
    assert.are.same({ parts = { { 3, 1, 0, "1,3" }, { 3, 1, 0, "3,1" }, { 3, 0, 0, "3,1" } }, brokers = "1,3",
      controller_id = 1 }, view(1))
    s:close()
    c:close()
  end)
end)
