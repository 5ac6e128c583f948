-- The client against a real Kafka-protocol broker: librdkafka's mock
-- cluster (3 brokers) on loopback, with faults injected through it.
local kafka = require "kafka"
local mock = require "support.rdkafka_mock"
local proto = kafka.proto

local codecs = { "none", "gzip", "snappy", "lz4", "zstd" }

-- Consumes every partition of topic from the start until `want` messages
-- arrived (or the deadline): returns them grouped by partition.
local function consume_all(client, topic, want, consumer_opts)
  local c = kafka.consumer.new(client, consumer_opts or {})
  local n = assert(client:partitions(topic))
  local a = {}
  for p = 0, n - 1 do a[#a + 1] = { topic = topic, partition = p, offset = "earliest" } end
  assert(c:assign(a))
  local by_part, got = {}, 0
  local deadline = client.now() + 30000
  while got < want and client.now() < deadline do
    local msgs, err = c:poll(300)
    assert(msgs, err)
    for _, m in ipairs(msgs) do
      by_part[m.partition] = by_part[m.partition] or {}
      table.insert(by_part[m.partition], m)
      got = got + 1
    end
  end
  return by_part, got, c
end

local function id_of(m) return tonumber(m.value:match("^#(%d+) ")) end

-- Every message of by_part (consume_all's) is one of value(1..n), each exactly
-- once: ids compared, not counts (a duplicate and a loss would cancel).
local function assert_ids(by_part, n, value)
  local seen, got = {}, 0
  for _, msgs in pairs(by_part) do
    for _, m in ipairs(msgs) do
      assert.is_nil(seen[m.value], "duplicate " .. tostring(m.value))
      seen[m.value] = true
      got = got + 1
    end
  end
  for i = 1, n do assert.is_true(seen[value(i)], "missing " .. value(i)) end
  assert.are.equal(n, got)
end

describe("client against the mock cluster", function()
  local m, client
  setup(function()
    m = mock.start { brokers = 3, topics = {} }
    client = kafka.client.new { brokers = m.bootstrap, client_id = "spec", retry_backoff_ms = 20,
      reconnect_backoff_ms = 20, reconnect_backoff_max_ms = 200 }
  end)
  teardown(function()
    client:close()
    m:stop()
  end)

  it("negotiates versions with ApiVersions and caches metadata of 3 brokers", function()
    m:cmd("topic meta 6")
    local md = assert(client:metadata { "meta" })
    local n = 0
    for id, b in pairs(md.brokers) do
      n = n + 1
      assert.are.equal("127.0.0.1", b.host)
      assert.is_true(id >= 1 and id <= 3)
    end
    assert.are.equal(3, n)
    assert.are.equal(6, md.topics.meta.count)
    local conn = assert(client:broker(1))
    assert.are.equal(7, conn:version("Produce")) -- the mock's max
    assert.are.equal(11, conn:version("Fetch"))
    assert.are.equal(2, conn:version("Metadata"))
  end)

  for _, codec in ipairs(codecs) do
    it("100,000 messages (SPEC_BULK_N), keyed and unkeyed, " .. codec .. ", across 6 partitions: all back, in order", function()
      local topic = "bulk-" .. codec
      m:cmd("topic " .. topic .. " 6")
      local p = kafka.producer.new(client, { compression = codec, linger_ms = 1e9 })
      local N = tonumber(os.getenv("SPEC_BULK_N")) or 100000
      local key_of = {}
      for i = 1, N do
        local key = (i % 2 == 0) and ("user-" .. (i % 5000)) or nil
        key_of[i] = key
        assert(p:send(topic, ("#%d "):format(i) .. ("x"):rep(i % 40), { key = key }))
      end
      local reports, failed = p:flush()
      assert.are.equal(N, #reports)
      assert.are.equal(0, failed)
      local by_part, got = consume_all(client, topic, N)
      assert.are.equal(N, got)
      -- plain comparisons in the loop: luassert costs microseconds per call
      local parts_used, bad = 0, nil
      for part, msgs in pairs(by_part) do
        parts_used = parts_used + 1
        local last_id, last_off = 0, -1
        local want_part = function(k) return (proto.murmur2(k) % 2147483648) % 6 end
        for _, msg in ipairs(msgs) do
          local id = id_of(msg)
          if id <= last_id or msg.offset <= last_off then bad = bad or ("out of order in partition " .. part) end
          last_id, last_off = id, msg.offset
          local k = key_of[id]
          if k ~= msg.key then bad = bad or ("key of message " .. id) end
          if k and want_part(k) ~= part then bad = bad or ("key " .. k .. " on partition " .. part) end
        end
      end
      assert.is_nil(bad)
      assert.are.equal(6, parts_used)
    end)
  end

  it("list_offsets: earliest and latest", function()
    m:cmd("topic offs 2")
    local p = kafka.producer.new(client)
    for i = 1, 25 do assert(p:send("offs", "v" .. i, { partition = 1 })) end
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(0, client:list_offsets("offs", 1, "earliest"))
    assert.are.equal(25, client:list_offsets("offs", 1, "latest"))
    assert.are.equal(0, client:list_offsets("offs", 0, proto.OFFSET_LATEST))
  end)

  it("commit and committed round trip through the group coordinator", function()
    m:cmd("topic commits 3")
    local p = kafka.producer.new(client)
    for i = 1, 30 do assert(p:send("commits", "v" .. i, { partition = i % 3 })) end
    assert.are.equal(0, select(2, p:flush()))
    local c = kafka.consumer.new(client, { group_id = "g-commit", auto_offset_reset = "earliest" })
    assert(c:assign { { topic = "commits", partition = 0 }, { topic = "commits", partition = 1 },
      { topic = "commits", partition = 2 } })
    local before = assert(c:committed())
    assert.are.equal(3, #before)
    for i, r in ipairs(before) do
      assert.are.equal("commits", r.topic)
      assert.are.equal(i - 1, r.partition)
      assert.are.equal(-1, r.offset)
    end
    local got = 0
    while got < 30 do got = got + #assert(c:poll(200)) end
    assert(c:commit())
    local after = assert(c:committed())
    assert.are.equal(3, #after)
    for i, r in ipairs(after) do
      assert.are.equal(i - 1, r.partition)
      assert.are.equal(10, r.offset)
    end
    -- the coordinator moving or loading is retried: found again, asked again
    m:cmd("err 8 16 2")
    m:cmd("err 9 14 1")
    assert(c:commit { { topic = "commits", partition = 2, offset = 4, metadata = "half" } })
    local one = assert(c:committed { { topic = "commits", partition = 2 } })
    assert.are.equal(4, one[1].offset)
    assert.are.equal("half", one[1].metadata)
    -- a new consumer of the group starts where the group left off
    -- a non-retriable group error is returned with its Kafka code
    m:cmd("err 8 30 1")
    local ok, err, code, kcode = c:commit()
    assert.is_nil(ok)
    assert.are.equal("kafka", code)
    assert.are.equal(30, kcode)
    assert.matches("GROUP_AUTHORIZATION_FAILED", err)
    local c2 = kafka.consumer.new(client, { group_id = "g-commit" })
    assert(c2:assign { { topic = "commits", partition = 2 } })
    assert.are.equal(4, c2:position("commits", 2))
    local msgs = assert(c2:poll(500))
    assert.are.equal(6, #msgs)
    assert.are.equal(4, msgs[1].offset)
  end)

  it("retries produce through NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE and REQUEST_TIMED_OUT", function()
    m:cmd("topic faults 6")
    local p = kafka.producer.new(client, { max_retries = 10, retry_backoff_ms = 10 })
    m:cmd("err 0 6 3")
    m:cmd("err 0 5 2")
    m:cmd("err 0 7 2")
    local N = 6000
    for i = 1, N do assert(p:send("faults", ("#%d "):format(i), { key = tostring(i) })) end
    local reports, failed = p:flush()
    assert.are.equal(N, #reports)
    assert.are.equal(0, failed)
    -- and fetch through the same errors, with the same consumer object
    m:cmd("err 1 6 3")
    m:cmd("err 1 7 2")
    m:cmd("err 1 5 1")
    local by_part = consume_all(client, "faults", N)
    assert_ids(by_part, N, function(i) return ("#%d "):format(i) end)
  end)

  local TRANSIENT = { network = true, retriable = true }
  it("a leader moved mid-stream and a broker down then up: nothing silently lost", function()
    m:cmd("topic moving 6")
    local p = kafka.producer.new(client, { max_retries = 8, retry_backoff_ms = 20 })
    local c = kafka.consumer.new(client, {})
    local a = {}
    for part = 0, 5 do a[#a + 1] = { topic = "moving", partition = part, offset = "earliest" } end
    assert(c:assign(a))
    local acked, failed_ids, consumed = {}, {}, {}
    local next_id = 0
    local function produce(n)
      for _ = 1, n do
        next_id = next_id + 1
        assert(p:send("moving", ("#%d "):format(next_id), { partition = next_id % 6 }))
      end
      local reports = p:flush()
      for _, r in ipairs(reports) do
        if r.err then failed_ids[#failed_ids + 1] = r.id else acked[r.id] = true end
      end
    end
    local function drain()
      for _ = 1, 10 do
        local msgs, err, code = c:poll(100)
        -- a poll error may only be a connection the mock closed as leaders
        -- moved (retried by the next poll); anything else fails the spec
        if not msgs then
          assert(TRANSIENT[code], tostring(err) .. " (" .. tostring(code) .. ")")
        else
          for _, e in ipairs(msgs.errors or {}) do assert(TRANSIENT[e.code], tostring(e.err)) end
          for _, msg in ipairs(msgs) do consumed[id_of(msg)] = true end
        end
      end
    end
    produce(3000)
    drain()
    -- move every leader
    for part = 0, 5 do m:cmd(("leader moving %d %d"):format(part, (part + 1) % 3 + 1)) end
    produce(3000)
    drain()
    -- take broker 1 down; move its partitions away as a real cluster would
    m:cmd("down 1")
    for part = 0, 5 do m:cmd(("leader moving %d %d"):format(part, part % 2 + 2)) end
    produce(3000)
    drain()
    -- bring it back and give it leaders again: the client reconnects
    m:cmd("up 1")
    for part = 0, 5 do m:cmd(("leader moving %d 1"):format(part)) end
    client.sleep(300) -- past the reconnect backoff
    produce(3000)
    drain()
    local n_acked = 0
    for id in pairs(acked) do
      n_acked = n_acked + 1
      assert(consumed[id], "message " .. id .. " was acknowledged but never consumed")
    end
    for id in pairs(consumed) do assert(id >= 1 and id <= next_id) end
    -- the leaders moved to live brokers and broker 1 came back: nothing fails
    assert.are.same({}, failed_ids)
    assert.are.equal(12000, n_acked)
  end)

  it("a broker that stays down: its messages are reported failed, the rest delivered", function()
    m:cmd("topic stuck 3")
    for part = 0, 2 do m:cmd(("leader stuck %d %d"):format(part, part + 1)) end
    client:refresh { "stuck" }
    m:cmd("down 3")
    local p = kafka.producer.new(client, { max_retries = 2, retry_backoff_ms = 10 })
    for i = 1, 300 do assert(p:send("stuck", "v" .. i, { partition = i % 3 })) end
    local reports, failed = p:flush()
    assert.are.equal(300, #reports)
    assert.are.equal(100, failed)
    for _, r in ipairs(reports) do
      if r.partition == 2 then
        assert.is_string(r.err)
        assert.is_string(r.code)
      else
        assert.is_nil(r.err)
        assert.is_true(r.offset >= 0)
      end
    end
    m:cmd("up 3")
  end)

  it("a message larger than allowed and a full buffer are errors to the caller", function()
    m:cmd("topic limits 1")
    local p = kafka.producer.new(client, { max_message_bytes = 1000, max_buffered = 10, flush_on_full = false })
    local ok, err, code = p:send("limits", ("x"):rep(2000))
    assert.is_nil(ok)
    assert.are.equal("too_large", code)
    assert.matches("exceeds max_message_bytes", err)
    for i = 1, 10 do assert(p:send("limits", "v" .. i)) end
    ok, err, code = p:send("limits", "one too many")
    assert.is_nil(ok)
    assert.are.equal("buffer_full", code)
    assert.matches("buffer full", err)
    local reports, failed = p:flush()
    assert.are.equal(10, #reports)
    assert.are.equal(0, failed)
    assert(p:send("limits", "fits again"))
    local part, off = p:send_sync("limits", "sync")
    assert.are.equal(0, part)
    assert.are.equal(11, off)
    ok, err, code = p:send("limits", "x", { partition = 7 })
    assert.is_nil(ok)
    assert.are.equal("unknown_partition", code)
    assert.matches("has no partition 7", err)
  end)

  it("a full buffer flushes inside send and the messages after it are kept", function()
    m:cmd("topic autoflush 2")
    local p = kafka.producer.new(client, { max_buffered = 10, linger_ms = 5 })
    for i = 1, 35 do assert(p:send("autoflush", "v" .. i)) end
    client.sleep(10)
    for i = 36, 40 do assert(p:send("autoflush", "v" .. i)) end -- past linger: flushes first
    local reports, failed = p:flush()
    assert.are.equal(40, #reports)
    assert.are.equal(0, failed)
    for i, r in ipairs(reports) do assert.are.equal(i, r.id) end
    local by_part = consume_all(client, "autoflush", 40)
    assert_ids(by_part, 40, function(i) return "v" .. i end)
  end)

  it("delivery_reports = errors: successes are counted, not reported", function()
    m:cmd("topic quiet 2")
    local p = kafka.producer.new(client, { delivery_reports = "errors" })
    for i = 1, 500 do assert(p:send("quiet", "v" .. i)) end
    local reports, failed, delivered = p:flush()
    assert.are.same({}, reports)
    assert.are.equal(0, failed)
    assert.are.equal(500, delivered)
    local part, off = p:send_sync("quiet", "sync", { partition = 1 })
    assert.are.equal(1, part)
    assert.is_true(off >= 0)
  end)

  it("an unknown topic is answered clearly where the broker does not create it", function()
    m:cmd("topic_err forbidden 29")
    local p = kafka.producer.new(client)
    local ok, err, code = p:send("forbidden", "x")
    assert.is_nil(ok)
    assert.are.equal("kafka", code)
    assert.matches("TOPIC_AUTHORIZATION_FAILED", err)
  end)

  it("acks=0 sends without waiting for acknowledgements", function()
    m:cmd("topic fire 1")
    local p = kafka.producer.new(client, { acks = 0 })
    for i = 1, 100 do assert(p:send("fire", "v" .. i)) end
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(-1, reports[1].offset)
    local by_part = consume_all(client, "fire", 100)
    assert_ids(by_part, 100, function(i) return "v" .. i end)
  end)

  it("consumer: max_poll_records keeps the rest of a fetch for the next polls, and a seek drops it", function()
    m:cmd("topic pollcap 4")
    local p = kafka.producer.new(client)
    for i = 1, 2000 do assert(p:send("pollcap", ("#%d "):format(i), { partition = i % 4 })) end
    assert.are.equal(0, select(2, p:flush()))
    local c = kafka.consumer.new(client, { max_poll_records = 300 })
    local a = {}
    for part = 0, 3 do a[#a + 1] = { topic = "pollcap", partition = part, offset = 0 } end
    assert(c:assign(a))
    local seen, got, polls = {}, 0, 0
    while got < 2000 and polls < 50 do
      local msgs = assert(c:poll(200))
      polls = polls + 1
      assert.is_true(#msgs <= 300 + 500, "poll of " .. #msgs) -- the cap, plus at most one partition's fetch
      for _, msg in ipairs(msgs) do
        local id = id_of(msg)
        assert.is_nil(seen[id], "duplicate " .. id)
        seen[id] = true
        got = got + 1
      end
    end
    assert.are.equal(2000, got)
    -- a seek while data is pending: the pending data is dropped, reading restarts there
    assert(c:seek("pollcap", 1, 0))
    local again = {}
    for _ = 1, 5 do
      for _, msg in ipairs(assert(c:poll(200))) do
        if msg.partition == 1 then again[#again + 1] = msg.offset end
      end
    end
    assert.are.equal(500, #again)
    assert.are.equal(0, again[1])
  end)

  it("consumer: a poll holds max_poll_records messages exactly, a compressed batch's rest decoded by the next polls",
    function()
      -- kafka.mock answers a Fetch with every stored batch that fits
      -- (librdkafka's mock, m, with one): 10 batches of 100 records (a
      -- flush after every 100 sends) come in one answer
      for _, codec in ipairs { "none", "lz4", "zstd" } do
        local cluster = require("kafka.mock").new { topics = { pollcut = 1 } }
        local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory() } -- luacheck: ignore
        local p = kafka.producer.new(client, { compression = codec })
        for b = 0, 9 do
          for i = 1, 100 do assert(p:send("pollcut", ("#%d "):format(b * 100 + i), { partition = 0 })) end
          assert.are.equal(0, select(2, p:flush()))
        end
        local c = kafka.consumer.new(client, { max_poll_records = 240 })
        assert(c:assign { { topic = "pollcut", partition = 0, offset = 0 } })
        local sizes, offsets, polls, positions = {}, {}, 0, {}
        while #offsets < 1000 and polls < 50 do
          local msgs = assert(c:poll(200))
          polls = polls + 1
          if #msgs > 0 then
            sizes[#sizes + 1] = #msgs
            positions[#positions + 1] = c:position("pollcut", 0)
          end
          for _, msg in ipairs(msgs) do
            assert.are.equal(("#%d "):format(#offsets + 1), msg.value)
            offsets[#offsets + 1] = msg.offset
          end
        end
        -- 240 a poll, batches cut inside (a batch's rest comes first in the next poll)
        assert.are.same({ 240, 240, 240, 240, 40 }, sizes, codec)
        assert.are.same({ 240, 480, 720, 960, 1000 }, positions, codec)
        for i = 1, 1000 do assert.are.equal(i - 1, offsets[i]) end
        c:close()
        client:close()
      end
      -- the cut in C: whole batches, at most n records, one batch at least
      local recs = proto.encode_records({ "a", "b", "c" })
      local two = recs .. proto.encode_records({ "d" }, { base_offset = 3 })
      assert.are.equal(#recs, proto.records_cut(two, 3))
      assert.are.equal(#recs, proto.records_cut(two, 1))
      assert.is_nil(proto.records_cut(two, 4))
      assert.is_nil(proto.records_cut(recs, 1))
      assert.is_nil(proto.records_cut(two .. "trailing partial", 4))
    end)

  it("consumer: a Fetch answer's frame is released once its last partition is decoded, not before", function()
    -- one broker, so that an answer holds every partition; librdkafka's mock
    -- answers with one batch per partition; a poll takes one partition's
    -- batch and half the next one's, the rest of that and the third wait
    -- for the next poll, decoded from the answer's frame after other frames
    -- have been read
    local m1 = mock.start { brokers = 1, topics = {} }
    local client1 = kafka.client.new { brokers = m1.bootstrap, client_id = "spec" }
    local release, results = proto.release, {}
    -- one finally: busted keeps only the last function given to finally()
    -- (a second call dropped this mock's stop, and its process outlived the
    -- file: a later spec's collection then waited in pclose for it)
    finally(function()
      proto.release = release
      client1:close()
      m1:stop()
    end)
    m1:cmd("topic relframe 3")
    local pad = ("x"):rep(1000)
    local function value(part, i) return ("#%d/%d %s"):format(part, i, pad) end
    local p = kafka.producer.new(client1, { linger_ms = 1e9 })
    for b = 0, 4 do
      for part = 0, 2 do
        for i = 1, 100 do assert(p:send("relframe", value(part, b * 100 + i), { partition = part })) end
      end
      assert.are.equal(0, select(2, p:flush()))
    end
    proto.release = function(b)
      local r = release(b)
      results[#results + 1] = r
      return r
    end
    local c = kafka.consumer.new(client1, { max_poll_records = 150, fetch_max_wait_ms = 10 })
    local a = {}
    for part = 0, 2 do a[#a + 1] = { topic = "relframe", partition = part, offset = 0 } end
    assert(c:assign(a))
    local got, polls, next_i = 0, 0, { [0] = 1, 1, 1 }
    while got < 1500 and polls < 100 do
      local msgs, err = c:poll(200)
      assert(msgs, err)
      polls = polls + 1
      for _, msg in ipairs(msgs) do
        assert.are.equal(value(msg.partition, next_i[msg.partition]), msg.value)
        assert.are.equal(next_i[msg.partition] - 1, msg.offset)
        next_i[msg.partition] = next_i[msg.partition] + 1
        got = got + 1
      end
    end
    assert.are.same({ [0] = 501, 501, 501 }, next_i)
    -- the 5 answers with records (300 KiB each) were released, each once;
    -- the empty answers after them are too small to keep
    local kept = 0
    for _, r in ipairs(results) do if r then kept = kept + 1 end end
    assert.are.equal(5, kept)
    c:close()
  end)

  it("consumer: offset out of range resets by auto_offset_reset, or is an error", function()
    m:cmd("topic oor 1")
    local p = kafka.producer.new(client)
    for i = 1, 5 do assert(p:send("oor", "v" .. i)) end
    p:flush()
    local c = kafka.consumer.new(client, { auto_offset_reset = "earliest" })
    assert(c:assign { { topic = "oor", partition = 0, offset = 1000 } })
    local msgs = assert(c:poll(200))
    if #msgs == 0 then msgs = assert(c:poll(200)) end
    assert.are.equal(5, #msgs)
    local strict = kafka.consumer.new(client, { auto_offset_reset = "error" })
    assert(strict:assign { { topic = "oor", partition = 0, offset = 1000 } })
    local ok, err, code
    for _ = 1, 5 do -- a poll may end before the first answer: empty, never a message
      ok, err, code = strict:poll(200)
      if not ok then break end
      assert.are.equal(0, #ok)
    end
    assert.is_nil(ok)
    assert.are.equal("offset_out_of_range", code)
    assert.matches("out of range", err)
  end)
end)

-- max_in_flight_requests_per_connection bounds the Produce requests waiting
-- for an answer on each connection (as in Kafka's clients), not only the
-- batches of a partition: one batch a request (max_request_bytes), 12
-- partitions on one broker answering after 50 ms.
describe("the producer against one slow broker", function()
  for _, idem in ipairs { true, false } do
    it(("max_in_flight_requests_per_connection = 3 bounds the requests on the connection (enable_idempotence %s)")
      :format(tostring(idem)), function()
      local m1 = mock.start { brokers = 1, topics = { "inflight:12" } }
      m1:cmd("rtt 1 50")
      local c1 = kafka.client.new { brokers = m1.bootstrap, client_id = "spec-inflight" }
      local ok, err = pcall(function()
        local p = kafka.producer.new(c1, { enable_idempotence = idem, max_in_flight_requests_per_connection = 3,
          batch_size = 1024, max_request_bytes = 1500, linger_ms = 0 })
        local most = 0
        local round = p._send_round
        p._send_round = function(self, ...)
          round(self, ...)
          local per = {}
          for _, x in ipairs(self.in_flight) do
            per[x.conn] = (per[x.conn] or 0) + 1
            if per[x.conn] > most then most = per[x.conn] end
          end
        end
        local N = 12 * 10
        for i = 1, N do assert(p:send("inflight", ("#%d "):format(i) .. ("x"):rep(200), { partition = i % 12 })) end
        local reports, failed = p:flush()
        assert.are.equal(0, failed)
        assert.are.equal(N, #reports)
        -- in order per partition: offsets rise with the ids
        local last = {}
        for _, r in ipairs(reports) do
          assert.are.equal(r.id % 12, r.partition)
          assert.is_true(r.offset > (last[r.partition] or -1))
          last[r.partition] = r.offset
        end
        assert.are.equal(3, most)
        p:close()
      end)
      c1:close()
      m1:stop()
      assert(ok, err)
    end)
  end
end)

describe("client:call, the retry service", function()
  it("o.backoff(kafka_code, attempt) overrides a retry's wait (a first AddPartitionsToTxn's CONCURRENT_TRANSACTIONS: 20 ms)",
    function()
    local E = require("kafka").proto.errors
    local sleeps, t = {}, 0
    local client = require("kafka").client.new { brokers = "127.0.0.1:1", retry_backoff_ms = 100,
      retry_backoff_max_ms = 1000, now = function() return t end,
      sleep = function(ms) sleeps[#sleeps + 1], t = ms, t + ms end }
    -- fails twice with CONCURRENT_TRANSACTIONS, once with COORDINATOR_LOAD_IN_PROGRESS, then answers
    local answers = { E.CONCURRENT_TRANSACTIONS, E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS }
    local n = 0
    local res = client:call(function()
      n = n + 1
      if answers[n] then return nil, "busy", "retriable", answers[n], true end
      return "done"
    end, { backoff = function(kc) return kc == E.CONCURRENT_TRANSACTIONS and 20 or nil end })
    assert.are.equal("done", res)
    -- the third wait is the client's own for attempt 3: retry_backoff_ms doubled twice
    assert.are.same({ 20, 20, 400 }, sleeps)
    client:close()
  end)
end)
