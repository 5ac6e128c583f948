-- lua-kafka's client on kafka.mock in-process (no TCP): the producer and
-- the consumer through injected faults (errors, leaders moved, brokers down,
-- lost and delayed answers, corrupt batches) and the consumer's fetch path
-- (pipelining, seeks, positions). kafka.mock's own behaviour is mock_spec.lua's.
local kafka = require "kafka"
local mock = require "kafka.mock"
local H = require "support.helpers"
local proto = kafka.proto
local E = proto.errors

local codecs = { "none", "gzip", "snappy", "lz4", "zstd" }
local new_client, conn_to, consume_all = H.mock_client, H.mock_conn, H.mock_consume_all

local function count_records(cluster, topic)
  local n = 0
  for p = 0, cluster.topics[topic].count - 1 do n = n + #cluster:records(topic, p) end
  return n
end

describe("lua-kafka's client on kafka.mock through faults", function()
  it("retries produce through NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT: every message stored once", function()
    local cluster = mock.new { brokers = 3, topics = { faults = 6 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { max_retries = 10, retry_backoff_ms = 1 })
    cluster:fail("Produce", E.NOT_LEADER_OR_FOLLOWER, 3)
    cluster:fail("Produce", E.REQUEST_TIMED_OUT, 2)
    local N = 6000
    for i = 1, N do assert(p:send("faults", "#" .. i, { key = tostring(i) })) end
    local reports, failed = p:flush()
    assert.are.equal(N, #reports)
    assert.are.equal(0, failed)
    assert.are.equal(N, count_records(cluster, "faults"))
    assert.are.same({}, cluster.faults)
    -- and fetch through the same errors, one partition named
    cluster:fail("Fetch", E.NOT_LEADER_OR_FOLLOWER, 3)
    cluster:fail("Fetch", E.REQUEST_TIMED_OUT, 2, "faults", 4)
    local by_part, got = consume_all(client, "faults", N)
    assert.are.equal(N, got)
    for part = 0, 5 do
      local _, hw = cluster:offsets("faults", part)
      assert.are.equal(hw, #by_part[part])
    end
    assert.are.same({}, cluster.faults)
  end)

  it("a leader moved, a broker down (leaders fail over) and up again: every message acknowledged and stored once",
    function()
    local cluster = mock.new { brokers = 3, topics = { moving = 6 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { max_retries = 8 })
    local next_id = 0
    local function produce(n)
      for _ = 1, n do
        next_id = next_id + 1
        assert(p:send("moving", "#" .. next_id, { partition = next_id % 6 }))
      end
      local reports, failed = p:flush()
      assert.are.equal(n, #reports)
      assert.are.equal(0, failed)
    end
    produce(600)
    for part = 0, 5 do cluster:move_leader("moving", part, (part + 1) % 3 + 1) end
    produce(600)
    cluster:down(1)
    for part = 0, 5 do assert.are_not.equal(1, cluster:leader("moving", part)) end
    produce(600)
    cluster:up(1)
    for part = 0, 5 do cluster:move_leader("moving", part, 1) end
    produce(600)
    assert.are.equal(2400, count_records(cluster, "moving"))
    for part = 0, 5 do
      local recs = cluster:records("moving", part)
      assert.are.equal(400, #recs)
      for j, m in ipairs(recs) do assert.are.equal("#" .. ((j - 1) * 6 + (part == 0 and 6 or part)), m.value) end
    end
    local _, got = consume_all(client, "moving", 2400)
    assert.are.equal(2400, got)
  end)

  it("a broker down with its leaders (keep_leaders): its partition's messages fail, the others are delivered", function()
    local cluster = mock.new { brokers = 3, topics = { stuck = 3 } }
    local client = new_client(cluster)
    assert(client:refresh { "stuck" })
    cluster:down(3, true)
    local p = kafka.producer.new(client, { max_retries = 2 })
    for i = 1, 300 do assert(p:send("stuck", "v" .. i, { partition = i % 3 })) end
    local reports, failed = p:flush()
    assert.are.equal(300, #reports)
    assert.are.equal(100, failed)
    for _, r in ipairs(reports) do
      if r.partition == 2 then assert.is_string(r.err) else assert.is_nil(r.err) end
    end
    assert.are.equal(100, #cluster:records("stuck", 0))
    assert.are.equal(0, #cluster:records("stuck", 2))
  end)

  -- send()'s common case runs in C (csrc/lua_producer.c), every other case
  -- in producer.lua: the same sends through both must come out the same
  it("send() in C and send() in Lua: the same ids, partitions, records and reports", function()
    local long = ("a-topic-name-longer-than-forty-bytes-"):rep(2) -- (not interned by Lua)
    local function run(on)
      kafka.producer._fast_send(on)
      local cluster = mock.new { brokers = 2, topics = { fa = 5, [long] = 3 } }
      local client = new_client(cluster)
      local p = kafka.producer.new(client, { batch_size = 2000, max_buffered = 300, linger_ms = 1e9 })
      p.rng = function(lo) return lo end -- the sticky partitions' start: the same in both runs
      local ids = {}
      for i = 1, 1500 do
        local topic, value, o = i % 7 == 0 and long or "fa", i % 11 ~= 0 and ("v" .. i) or nil, nil
        local kind = i % 5
        if kind == 1 then o = { key = "k" .. i % 13 }
        elseif kind == 2 then o = { partition = i % 3 }
        elseif kind == 3 then o = { timestamp = 1700000000000 + i, key = i % 2 == 0 and "" or nil }
        elseif kind == 4 and i % 3 == 0 then o = { headers = { h = "x" .. i } } end
        ids[i] = assert(p:send(topic, value, o))
      end
      local reports, failed, delivered = p:flush()
      local out = { ids = ids, failed = failed, delivered = delivered, reports = {}, records = {} }
      for _, r in ipairs(reports) do
        out.reports[#out.reports + 1] = { r.id, r.topic, r.partition, r.offset, r.err }
      end
      for topic, n in pairs { fa = 5, [long] = 3 } do
        for part = 0, n - 1 do
          for _, m in ipairs(cluster:records(topic, part)) do
            -- (a timestamp not given is the clock's: it differs between runs)
            local ts = m.timestamp >= 1700000000000 and m.timestamp < 1700000002000 and m.timestamp or "now"
            local h = m.headers and m.headers[1] and (m.headers[1].key .. "=" .. m.headers[1].value) or nil
            out.records[#out.records + 1] = { topic, part, m.offset, m.key, m.value, ts, h }
          end
        end
      end
      return out, p:stats().fast_sends
    end
    finally(function() kafka.producer._fast_send(true) end)
    local in_c, fast = run(true)
    local in_lua, none = run(false)
    assert.are.equal(0, none)
    assert.is_true(fast > 1000, fast .. " sends in C")
    assert.are.equal(1500, in_c.delivered)
    assert.are.equal(1500, #in_c.records)
    assert.are.same(in_lua, in_c)
  end)

  it("a full buffer flushes inside send: the broker has the first max_buffered messages before flush()", function()
    local cluster = mock.new { brokers = 1, topics = { full = 1 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { max_buffered = 10, linger_ms = 1e9 })
    for i = 1, 10 do assert.are.equal(i, p:send("full", "v" .. i)) end
    assert.are.equal(0, #cluster:records("full", 0)) -- nothing sent yet
    assert.are.equal(11, p:send("full", "v11"))        -- full: flushes the 10, keeps the 11th
    local recs = cluster:records("full", 0)
    assert.are.equal(10, #recs)
    assert.are.equal("v1", recs[1].value)
    assert.are.equal("v10", recs[10].value)
    for i = 12, 21 do assert.are.equal(i, p:send("full", "v" .. i)) end -- 21st: flushes 11-20
    assert.are.equal(20, #cluster:records("full", 0))
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(21, #reports)
    for i, r in ipairs(reports) do
      assert.are.equal(i, r.id)
      assert.are.equal(i - 1, r.offset)
    end
  end)

  it("a full buffer waits for room, not for every answer: a failing partition does not stall the others", function()
    local cluster = mock.new { brokers = 1, topics = { room = 2 } }
    local client = new_client(cluster)
    -- partition 1's writes fail (retriable) until the faults are cleared
    cluster:fail("Produce", E.NOT_ENOUGH_REPLICAS, 1000000, "room", 1)
    local p = kafka.producer.new(client, { max_buffered = 10, linger_ms = 1e9, retry_backoff_ms = 5,
      retry_backoff_max_ms = 5, delivery_timeout_ms = 3000 })
    for i = 1, 10 do assert.are.equal(i, p:send("room", "v" .. i, { partition = i % 2 })) end
    assert.are.equal(11, p:send("room", "v11", { partition = 0 })) -- full: waits until partition 0's answer
    assert.are.equal(6, (p:buffered()))                            -- partition 1's 5, and the 11th
    assert.are.equal(5, #cluster:records("room", 0))
    assert.are.equal(0, #cluster:records("room", 1))
    cluster:clear_faults()
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(11, #reports)
    assert.are.equal(6, #cluster:records("room", 0))
    assert.are.equal(5, #cluster:records("room", 1))
  end)

  it("a seek drops what earlier fetches left pending: every partition restarts exactly there", function()
    local cluster = mock.new { brokers = 3, topics = { pend = 4 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    -- batches of 50 per partition: a fetch from 200 holds offsets 200-499 only
    for i = 1, 2000 do
      assert(p:send("pend", "v" .. i, { partition = i % 4 }))
      if i % 200 == 0 then assert.are.equal(0, select(2, p:flush())) end
    end
    local c = kafka.consumer.new(client, { max_poll_records = 100, fetch_max_wait_ms = 0 })
    local a = {}
    for part = 0, 3 do a[#a + 1] = { topic = "pend", partition = part, offset = 200 } end
    assert(c:assign(a))
    local first = assert(c:poll(100)) -- one partition decoded, the others' fetches kept pending
    assert.is_true(#first >= 100 and #first < 1200, "first poll " .. #first)
    for part = 0, 3 do assert(c:seek("pend", part, 0)) end
    local offs = { [0] = {}, {}, {}, {} }
    local got = 0
    for _ = 1, 40 do
      if got >= 2000 then break end
      for _, m in ipairs(assert(c:poll(100))) do
        table.insert(offs[m.partition], m.offset)
        got = got + 1
      end
    end
    assert.are.equal(2000, got)
    for part = 0, 3 do
      assert.are.equal(500, #offs[part])
      for j = 1, 500 do assert.are.equal(j - 1, offs[part][j]) end
    end
  end)

  -- pipelined fetches: topic with `parts` partitions, 10 batches of 10
  -- records each (offsets 0-99), a consumer whose Fetch holds 2 batches
  -- per partition; each decode of a Fetch answer records how many Fetch
  -- requests the broker had by then
  local function pipelined(parts, opts, client_opts)
    local cluster = mock.new { brokers = 1, topics = { pipe = parts } }
    local client = new_client(cluster, client_opts)
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    for b = 1, 10 do
      for part = 0, parts - 1 do
        for i = 1, 10 do assert(p:send("pipe", ("v%03d"):format((b - 1) * 10 + i), { partition = part })) end
      end
      assert.are.equal(0, select(2, p:flush()))
    end
    local size = #cluster.topics.pipe.partitions[0].log.entries[1].bytes
    opts = opts or {}
    opts.fetch_max_wait_ms, opts.max_partition_fetch_bytes = 0, 2 * size
    local c = kafka.consumer.new(client, opts)
    local a = {}
    for part = 0, parts - 1 do a[#a + 1] = { topic = "pipe", partition = part, offset = 0 } end
    assert(c:assign(a))
    local seen, decode = {}, proto.decode_records
    proto.decode_records = function(raw, o)
      if o and o.into then seen[#seen + 1] = cluster:request_counts().Fetch end
      return decode(raw, o)
    end
    finally(function() proto.decode_records = decode end)
    local offs = {}
    for part = 0, parts - 1 do offs[part] = {} end
    local function poll()
      local msgs = assert(c:poll(10))
      for _, m in ipairs(msgs) do table.insert(offs[m.partition], m.offset) end
      return msgs
    end
    return c, cluster, offs, poll, seen
  end

  local function range(from, to)
    local t = {}
    for o = from, to do t[#t + 1] = o end
    return t
  end

  it("pipelining: the next Fetch goes out before the answer is decoded; every offset once, in order", function()
    local _, _, offs, poll, seen = pipelined(1)
    for _ = 1, 20 do if #offs[0] < 100 then poll() end end
    assert.are.same(range(0, 99), offs[0])
    -- answer k (offsets 20k-20 .. 20k-1) is decoded once Fetch k+1 is out
    assert.are.same({ 2, 3, 4, 5, 6 }, seen)
  end)

  it("pipelining message sets: Fetch v3 and v1 (magic 1 and 0, down-converted), every offset once, in order",
    function()
      for _, v in ipairs { 3, 1 } do
        local _, _, offs, poll, seen = pipelined(1, nil, { max_versions = { Fetch = v } })
        for _ = 1, 40 do if #offs[0] < 100 then poll() end end
        assert.are.same(range(0, 99), offs[0])
        assert.is_true(#seen >= 5)
        for k, n in ipairs(seen) do assert.are.equal(k + 1, n, "v" .. v .. ": answer " .. k) end
      end
    end)

  it("pipelining: a seek while the next Fetch is out delivers exactly from the sought offset", function()
    local c, cluster, offs, poll = pipelined(1)
    poll()
    poll()
    assert.are.same(range(0, 39), offs[0])
    assert.are.equal(3, cluster:request_counts().Fetch) -- the one from 40 is out
    assert(c:seek("pipe", 0, 5))                        -- back: 40-59 is not delivered now
    offs[0] = {}
    for _ = 1, 10 do if #offs[0] < 35 then poll() end end
    assert.are.same(range(5, 39), offs[0])
    assert(c:seek("pipe", 0, 73))                       -- forward, inside a batch
    offs[0] = {}
    for _ = 1, 20 do if #offs[0] < 27 then poll() end end
    assert.are.same(range(73, 99), offs[0])
    assert.are.equal(100, c:position("pipe", 0))
  end)

  it("pipelining: pending data is decoded before any later answer is read; pausing a partition drops it, "
    .. "resuming fetches it again from its position", function()
    local c, cluster, offs, poll = pipelined(3, { max_poll_records = 10 })
    -- (a poll of max_poll_records 10 takes one batch, 10 records)
    poll()                                  -- partition 0's 0-9; its 10-19, 1 and 2 pending; the Fetch from 20 is out
    assert.are.same(range(0, 9), offs[0])
    assert.are.same({ {}, {} }, { offs[1], offs[2] })
    assert.are.equal(2, cluster:request_counts().Fetch)
    poll()                                  -- partition 0's 10-19, from what was pending: nothing read, nothing sent
    assert.are.same(range(0, 19), offs[0])
    assert.are.same({}, offs[1])
    poll()                                  -- partition 1's first batch
    assert.are.same(range(0, 9), offs[1])
    assert.are.equal(2, cluster:request_counts().Fetch)
    assert(c:pause { { topic = "pipe", partition = 2 } }) -- its pending 0-19 is dropped
    for _ = 1, 4 do poll() end
    assert.are.same({}, offs[2])
    assert(c:resume { { topic = "pipe", partition = 2 } })
    for _ = 1, 40 do if #offs[0] + #offs[1] + #offs[2] < 300 then poll() end end
    for part = 0, 2 do assert.are.same(range(0, 99), offs[part], "partition " .. part) end
  end)

  it("pipelining: the log start passing the fetch position resets it (auto_offset_reset), nothing twice", function()
    local c, cluster, offs, poll = pipelined(1, { auto_offset_reset = "earliest" })
    poll()                                         -- 0-19; the Fetch from 20 is out (answered: 20-39)
    assert.are.equal(60, cluster:delete_records("pipe", 0, 60))
    for _ = 1, 20 do if #offs[0] < 80 then poll() end end
    local want = range(0, 39)
    for o = 60, 99 do want[#want + 1] = o end
    assert.are.same(want, offs[0])
    assert.are.equal(100, c:position("pipe", 0))
  end)

  it("a position inside a batch: the batch's records before it are not delivered", function()
    local cluster = mock.new { brokers = 1, topics = { mid = 1 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9, compression = "lz4" })
    for i = 1, 10 do assert(p:send("mid", "v" .. i)) end
    assert.are.equal(0, select(2, p:flush())) -- one batch, offsets 0-9
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "mid", partition = 0, offset = 6 } })
    local offs = {}
    for _ = 1, 5 do
      for _, m in ipairs(assert(c:poll(10))) do offs[#offs + 1] = m.offset end
    end
    assert.are.same({ 6, 7, 8, 9 }, offs)
    assert.are.equal(10, c:position("mid", 0))
  end)

  it("a corrupt batch is never skipped: the position stays on it and every poll reports it", function()
    local cluster = mock.new { brokers = 1, topics = { bad = 1 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    for i = 1, 5 do assert(p:send("bad", "a" .. i)) end
    assert.are.equal(0, select(2, p:flush())) -- batch 0-4
    for i = 1, 5 do assert(p:send("bad", "b" .. i)) end
    assert.are.equal(0, select(2, p:flush())) -- batch 5-9
    -- flip the last byte of the second stored batch (a value byte: its CRC-32C no longer matches)
    local e = cluster.topics.bad.partitions[0].log.entries[2]
    local last = e.bytes:byte(#e.bytes)
    e.bytes = e.bytes:sub(1, -2) .. string.char((last + 1) % 256)
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "bad", partition = 0, offset = 0 } })
    local offs, errs = {}, 0
    for _ = 1, 6 do
      local msgs, err, code = c:poll(10)
      if msgs then
        for _, m in ipairs(msgs) do offs[#offs + 1] = m.offset end
        for _, pe in ipairs(msgs.errors or {}) do
          errs = errs + 1
          assert.are.equal("corrupt", pe.code)
          assert.matches("crc mismatch", pe.err)
        end
      else
        errs = errs + 1
        assert.are.equal("corrupt", code)
        assert.matches("crc mismatch in record batch at byte %d+ %(offset 5%)", err)
      end
    end
    -- the good batch fetched with it is delivered (as Kafka's Java consumer
    -- does), nothing at or past the corrupt batch ever is, and every poll says why
    assert.are.same({ 0, 1, 2, 3, 4 }, offs)
    assert.are.equal(6, errs)
    assert.are.equal(5, c:position("bad", 0))
  end)

  it("records whose framing is broken are reported corrupt by every poll, not dropped silently", function()
    local cluster = mock.new { brokers = 1, topics = { frame = 1 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    for i = 1, 5 do assert(p:send("frame", "a" .. i)) end
    assert.are.equal(0, select(2, p:flush())) -- batch 0-4
    for i = 1, 5 do assert(p:send("frame", "b" .. i)) end
    assert.are.equal(0, select(2, p:flush())) -- batch 5-9
    -- the second stored batch's length field (after its base offset) becomes -1
    local e = cluster.topics.frame.partitions[0].log.entries[2]
    e.bytes = e.bytes:sub(1, 8) .. "\255\255\255\255" .. e.bytes:sub(13)
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "frame", partition = 0, offset = 0 } })
    local got, errs = 0, 0
    for _ = 1, 4 do
      local msgs, err, code = c:poll(10)
      if msgs then
        got = got + #msgs
        for _, pe in ipairs(msgs.errors or {}) do
          errs = errs + 1
          assert.are.equal("corrupt", pe.code)
          assert.matches("negative batch size %-1", pe.err)
        end
      else
        errs = errs + 1
        assert.are.equal("corrupt", code)
        assert.matches("frame/0 at offset 0: corrupt records: negative batch size %-1", err)
      end
    end
    -- nothing of a blob whose framing is broken is delivered, and the position stays
    assert.are.equal(0, got)
    assert.are.equal(4, errs)
    assert.are.equal(0, c:position("frame", 0))
  end)

  it("retriable fetch errors keep the position: no rewind, no skip", function()
    local cluster = mock.new { brokers = 1, topics = { keep = 2 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    for i = 1, 120 do assert(p:send("keep", "v" .. i, { partition = i % 2 })) end
    assert.are.equal(0, select(2, p:flush()))
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "keep", partition = 0, offset = 0 }, { topic = "keep", partition = 1, offset = 0 } })
    local got = 0
    for _ = 1, 20 do if got < 120 then got = got + #assert(c:poll(10)) end end
    assert.are.equal(120, got)
    assert.are.equal(60, c:position("keep", 0))
    for i = 121, 160 do assert(p:send("keep", "v" .. i, { partition = i % 2 })) end
    assert.are.equal(0, select(2, p:flush()))
    -- partition 0's next fetches fail retriably, partition 1's too once
    cluster:fail("Fetch", E.NOT_LEADER_OR_FOLLOWER, 2, "keep", 0)
    cluster:fail("Fetch", E.UNKNOWN_TOPIC_OR_PARTITION, 1, "keep", 1)
    local offs = { [0] = {}, [1] = {} }
    got = 0
    for _ = 1, 30 do
      if got >= 40 then break end
      local msgs = assert(c:poll(10))
      for _, m in ipairs(msgs) do
        table.insert(offs[m.partition], m.offset)
        got = got + 1
      end
    end
    assert.are.equal(40, got)
    for part = 0, 1 do
      assert.are.equal(20, #offs[part])
      for j = 1, 20 do assert.are.equal(59 + j, offs[part][j]) end
      assert.are.equal(80, c:position("keep", part))
    end
  end)

  it("a lost answer (drop_response), without idempotence: the broker wrote, the client retries, the batch is there twice", function()
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9, enable_idempotence = false })
    cluster:drop_response("Produce", 1)
    for i = 1, 100 do assert(p:send("t", "v" .. i)) end
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(100, reports[1].offset) -- the retry's offsets
    assert.are.equal(200, #cluster:records("t", 0))
    -- reconnected once: ApiVersions on the bootstrap connection, on broker 1's, and on its new one
    assert.are.equal(3, cluster:request_counts().ApiVersions)
  end)

  it("delay(api, ms) holds answers on the mock's clock; past the client's timeout the request times out", function()
    local t = 0
    local cluster = mock.new { brokers = 1, topics = { t = 1 }, now = function() return t end,
      sleep = function(ms) t = t + ms end }
    local c = conn_to(cluster, 1, { now = cluster.now })
    cluster:delay("Metadata", 700)
    assert(c:request("Metadata", { topics = { { name = "t" } } }))
    assert.are.equal(700, t)
    c.request_timeout_ms = 500
    local ok, err, code = c:request("Metadata", { topics = { { name = "t" } } })
    assert.is_nil(ok)
    assert.are.equal("timeout", code)
    assert.matches("timeout", err)
    assert.are.equal(1200, t)
    cluster:delay("Metadata", 0)
    assert(c:request("Metadata", { topics = { { name = "t" } } }))
    assert.are.equal(1200, t)
  end)

  it("a poll whose time runs out while a connection negotiates has no error; the next poll reads", function()
    local t = 0
    local cluster = mock.new { brokers = 1, topics = { neg = 1 }, now = function() return t end,
      sleep = function(ms) t = t + ms end }
    local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(),
      now = cluster.now, sleep = cluster.sleep }
    local p = kafka.producer.new(client, { linger_ms = 0 })
    for i = 1, 3 do assert(p:send("neg", "v" .. i, { partition = 0 })) end
    assert.are.equal(0, select(2, p:flush()))
    -- the consumer's fetch connection is new: its ApiVersions answer is held
    cluster:delay("ApiVersions", 300)
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "neg", partition = 0, offset = 0 } })
    local t0 = t
    local msgs, err, code = c:poll(100)
    assert.are.same({}, msgs, tostring(err) .. " " .. tostring(code))
    assert.is_nil(msgs.errors)
    assert.are.equal(t0 + 100, t)
    cluster:delay("ApiVersions", 0)
    local got = {}
    for _ = 1, 5 do
      for _, m in ipairs(assert(c:poll(500))) do got[#got + 1] = m.value end
      if #got == 3 then break end
    end
    assert.are.same({ "v1", "v2", "v3" }, got)
    c:close()
    client:close()
  end)

  it("commit and committed through the coordinator, with injected coordinator errors", function()
    local cluster = mock.new { brokers = 3, topics = { commits = 3 } }
    local client = new_client(cluster)
    local p = kafka.producer.new(client)
    for i = 1, 30 do assert(p:send("commits", "v" .. i, { partition = i % 3 })) end
    assert.are.equal(0, select(2, p:flush()))
    local c = kafka.consumer.new(client, { group_id = "g-commit", auto_offset_reset = "earliest", fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "commits", partition = 0 }, { topic = "commits", partition = 1 },
      { topic = "commits", partition = 2 } })
    local before = assert(c:committed())
    assert.are.equal(3, #before)
    for i, r in ipairs(before) do
      assert.are.equal(i - 1, r.partition)
      assert.are.equal(-1, r.offset)
    end
    local got = 0
    for _ = 1, 20 do if got < 30 then got = got + #assert(c:poll(10)) end end
    assert.are.equal(30, got)
    assert(c:commit())
    assert.are.same({ commits = { [0] = 10, [1] = 10, [2] = 10 } }, cluster:committed("g-commit"))
    cluster:fail("OffsetCommit", E.NOT_COORDINATOR, 2)
    cluster:fail("OffsetFetch", E.COORDINATOR_LOAD_IN_PROGRESS, 1)
    assert(c:commit { { topic = "commits", partition = 2, offset = 4, metadata = "half" } })
    local one = assert(c:committed { { topic = "commits", partition = 2 } })
    assert.are.equal(4, one[1].offset)
    assert.are.equal("half", one[1].metadata)
    cluster:fail("OffsetCommit", E.GROUP_AUTHORIZATION_FAILED, 1)
    local ok, err, code, kcode = c:commit()
    assert.is_nil(ok)
    assert.are.equal("kafka", code)
    assert.are.equal(E.GROUP_AUTHORIZATION_FAILED, kcode)
    assert.matches("GROUP_AUTHORIZATION_FAILED", err)
    local c2 = kafka.consumer.new(client, { group_id = "g-commit", fetch_max_wait_ms = 0 })
    assert(c2:assign { { topic = "commits", partition = 2 } })
    assert.are.equal(4, c2:position("commits", 2))
    local msgs = assert(c2:poll(10))
    assert.are.equal(6, #msgs)
    assert.are.equal(4, msgs[1].offset)
  end)

  it("the client's legacy paths: magic 1 (Produce v2) and magic 0 (no ApiVersions) batches, all codecs", function()
    local cluster = mock.new { brokers = 1, topics = { legacy = 1 } }
    local v1 = new_client(cluster, { max_versions = { Produce = 2, Fetch = 3 } })
    local v0 = new_client(cluster, { api_versions = false })
    local n = 0
    for _, codec in ipairs(codecs) do
      for _, client in ipairs { v1, v0 } do
        if codec ~= "zstd" then -- zstd needs magic 2
          local p = kafka.producer.new(client, { compression = codec, linger_ms = 1e9 })
          for i = 1, 10 do assert(p:send("legacy", codec .. i, { key = "k" })) end
          local reports, failed = p:flush()
          assert.are.equal(0, failed)
          assert.are.equal(n, reports[1].offset)
          n = n + 10
        end
      end
    end
    local recs = cluster:records("legacy", 0)
    assert.are.equal(n, #recs)
    for i, m in ipairs(recs) do assert.are.equal(i - 1, m.offset) end
    local _, got = consume_all(v0, "legacy", n)
    assert.are.equal(n, got)
  end)
end)

-- Found by spec/mock_chaos_spec.lua: a partition whose leader moved to a
-- broker with data flowing was never fetched again while the flow lasted
-- (the pipelined Fetch, always in flight there, carried only the
-- partitions it had); it joins the next pipelined Fetch now.
describe("kafka.mock: the consumer after a leader died", function()
  it("a partition whose leader died, moved to a broker whose Fetch is pipelined, is fetched at the next answer", function()
    local t = 0
    local now, sleep = function() return t end, function(ms) t = t + ms end
    local cluster = mock.new { brokers = 3, topics = { t = { partitions = 2, replication_factor = 3 } }, now = now,
      sleep = sleep }
    local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(), now = now,
      sleep = sleep }
    local p = kafka.producer.new(client, {})
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 100 })
    assert(c:assign { { topic = "t", partition = 0, offset = "earliest" }, { topic = "t", partition = 1,
      offset = "earliest" } })
    assert.are.same({ 1, 2 }, { cluster:leader("t", 0), cluster:leader("t", 1) })
    local got = {}
    local function round(i)
      assert(p:send_sync("t", "flow" .. i, { partition = 1 }))
      for _, m in ipairs(assert(c:poll(50))) do got[m.value] = i end
    end
    for i = 1, 5 do round(i) end
    cluster:down(1) -- (node 1 is the controller: node 2 is elected at once and fences it)
    local part, off = p:send_sync("t", "moved", { partition = 0 })
    assert.are.same({ 0, 0, 2 }, { part, off, cluster:leader("t", 0) })
    for i = 6, 15 do round(i) end
    -- p0's leader gone in round 5: the producer's retry lands in round 5,
    -- the consumer reads it in round 8 (its Fetch to node 1 failed, then
    -- the retry backoff); never, before
    assert.are.same({ 8, 15 }, { got.moved, got.flow14 })
    client:close()
    cluster:close()
  end)
end)
