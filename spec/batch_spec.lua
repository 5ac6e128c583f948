-- consumer:poll_batch (issue 33): the records of a poll as one batch per
-- partition, in columns (kafka.consumer_batch). What is checked, exactly:
--   * against kafka.mock (every Lua, no JVM): the same records as poll
--     over the same log, poll and poll_batch mixed with the positions
--     exact after every call, max_poll_records kept, seek, pause, a corrupt
--     batch (reported, the position stays on it), misuse raising;
--   * against a real broker with Kafka's Java producer as the writer: every
--     codec read through poll_batch with exact keys, values, offsets,
--     timestamps and headers; read_committed without the aborted records
--     and the control records; seek into a compressed batch; poll and
--     poll_batch mixed, commits exact; a group rebalance while a member
--     holds fetched records it has not returned yet, each record delivered
--     once and each revoked partition committed exactly past the last
--     record returned.
local kafka = require "kafka"
local mock = require "kafka.mock"
local H = require "support.helpers"
local socket = require "socket"

-- rows(list) -> "p/offset/key/value/ts/headers" for every record of a poll's
-- messages or of a poll_batch's batches
local function hdr(h)
  if not h then return "-" end
  local t = {}
  for i, x in ipairs(h) do t[i] = x.key .. "=" .. tostring(x.value) end
  return table.concat(t, ",")
end
local function msg_row(m)
  return ("%d/%d/%s/%s/%d/%s"):format(m.partition, m.offset, tostring(m.key), tostring(m.value), m.timestamp,
    hdr(m.headers))
end
local function batch_rows(bs, out)
  out = out or {}
  for _, b in ipairs(bs) do
    for i = 1, b.count do
      out[#out + 1] = ("%d/%d/%s/%s/%d/%s"):format(b.partition, b:offset(i), tostring(b:key(i)), tostring(b:value(i)),
        b:timestamp(i), hdr(b:headers(i)))
    end
  end
  return out
end

-- every batch is one partition's records in offset order, columns as the accessors
local function check_shape(bs)
  local seen = {}
  for _, b in ipairs(bs) do
    assert.is_nil(seen[b.partition])
    seen[b.partition] = true
    assert.is_true(b.count > 0)
    assert.equal(b.count, #b.offsets)
    assert.equal(b.count, #b.timestamps)
    for i = 1, b.count do
      assert.equal(b.offsets[i], b:offset(i))
      assert.equal(b.keys[i], b:key(i))
      assert.equal(b.values[i], b:value(i))
      if i > 1 then assert.is_true(b.offsets[i] > b.offsets[i - 1]) end
    end
  end
  assert.is_nil(bs.nmsg)
  assert.is_nil(bs.by)
end

describe("consumer:poll_batch (kafka.mock)", function()
  local cluster, client
  local N = 1200

  setup(function()
    cluster = mock.new { brokers = 1, topics = { t = 2, bad = 1 } }
    client = H.mock_client(cluster)
    local p = kafka.producer.new(client, { linger_ms = 1e9, compression = "lz4", batch_size = 4000 })
    for i = 1, N do
      assert(p:send("t", (i % 5 ~= 0) and ("v" .. i) or nil, { partition = i % 2, key = (i % 3 ~= 0) and ("k" .. i) or nil,
        timestamp = 1700000000000 + i, headers = (i % 4 == 0) and { { key = "h", value = "x" .. i }, { key = "n" } } or nil }))
    end
    assert.equal(0, select(2, p:flush()))
  end)

  teardown(function() client:close() end)

  local function consumer(opts)
    local o = { auto_offset_reset = "earliest", fetch_max_wait_ms = 0 }
    for k, v in pairs(opts or {}) do o[k] = v end
    local c = kafka.consumer.new(client, o)
    assert(c:assign { { topic = "t", partition = 0, offset = "earliest" }, { topic = "t", partition = 1, offset = "earliest" } })
    return c
  end

  it("gives poll's records (null keys and values, headers), mixed with poll, positions exact after every call", function()
    local a, b = consumer { max_poll_records = 170 }, consumer { max_poll_records = 170 }
    local want = {}
    for _ = 1, 200 do
      if #want == N then break end
      for _, m in ipairs(assert(a:poll(10))) do want[#want + 1] = msg_row(m) end
    end
    assert.equal(N, #want)
    local got, calls = {}, 0
    for _ = 1, 200 do
      if #got == N then break end
      calls = calls + 1
      local last = {}
      if calls % 3 == 0 then
        local ms = assert(b:poll(10))
        assert.is_true(#ms <= 170)
        for _, m in ipairs(ms) do
          got[#got + 1] = msg_row(m)
          last[m.partition] = m.offset
        end
      else
        local bs = assert(b:poll_batch(10))
        check_shape(bs)
        local n = 0
        for _, bt in ipairs(bs) do
          n = n + bt.count
          last[bt.partition] = bt:offset(bt.count)
          assert.equal("t", bt.topic)
          assert.equal(600, bt.high_watermark)
        end
        assert.is_true(n <= 170)
        batch_rows(bs, got)
      end
      -- the next offset is one past the last record returned
      for p, off in pairs(last) do assert.equal(off + 1, b:position("t", p)) end
    end
    table.sort(want)
    table.sort(got)
    assert.same(want, got)
    assert.equal(600, b:position("t", 0))
    assert.equal(600, b:position("t", 1))
    -- idle: an empty list
    assert.same({}, assert(b:poll_batch(0)))
    a:close()
    b:close()
  end)

  it("keeps max_poll_records over partitions: what is fetched past it waits for the next calls", function()
    local c = consumer { max_poll_records = 7 }
    local n = 0
    for _ = 1, 6 do
      local got = 0
      for _, b in ipairs(assert(c:poll_batch(10))) do got = got + b.count end
      assert.equal(7, got)
      n = n + got
    end
    assert.equal(n, c:position("t", 0) + c:position("t", 1))
    c:close()
  end)

  it("keeps max_poll_records: the rest of a fetched batch waits for the next call", function()
    local c = consumer { max_poll_records = 7 }
    assert(c:pause { { topic = "t", partition = 1 } })
    local offs = {}
    for _ = 1, 3 do
      local bs = assert(c:poll_batch(10))
      assert.equal(1, #bs)
      assert.equal(7, bs[1].count)
      for i = 1, 7 do offs[#offs + 1] = bs[1]:offset(i) end
      assert.equal(offs[#offs] + 1, c:position("t", 0))
    end
    local want = {}
    for i = 0, 20 do want[#want + 1] = i end
    assert.same(want, offs)
    -- paused: partition 1 never came; after seek, from the offset asked
    assert.equal(0, c:position("t", 1))
    assert(c:seek("t", 0, 100))
    local bs = assert(c:poll_batch(10))
    assert.equal(100, bs[1]:offset(1))
    assert.equal(0, bs[1].partition)
    c:close()
  end)

  it("raises on misuse: a bad timeout, a record index outside 1..count", function()
    local c = consumer { max_poll_records = 3 }
    assert.has_error(function() c:poll_batch(-1) end, "poll_batch: timeout_ms must be an integer >= 0 (got -1)")
    local bs = assert(c:poll_batch(10))
    local b = bs[1]
    assert.equal(3, b.count)
    for _, f in ipairs { "offset", "key", "value", "timestamp", "headers" } do
      assert.has_error(function() b[f](b, 0) end, f .. ": record index 0 out of 1..3")
      assert.has_error(function() b[f](b, 4) end, f .. ": record index 4 out of 1..3")
    end
    c:close()
  end)

  it("a corrupt batch: the batches before it delivered, the position stays on it, every call reports it", function()
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    for i = 1, 5 do assert(p:send("bad", "a" .. i)) end
    assert.equal(0, select(2, p:flush())) -- batch 0-4
    for i = 1, 5 do assert(p:send("bad", "b" .. i)) end
    assert.equal(0, select(2, p:flush())) -- batch 5-9
    local e = cluster.topics.bad.partitions[0].log.entries[2]
    local last = e.bytes:byte(#e.bytes)
    e.bytes = e.bytes:sub(1, -2) .. string.char((last + 1) % 256)
    local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0 })
    assert(c:assign { { topic = "bad", partition = 0, offset = 0 } })
    local vals, errs = {}, 0
    for _ = 1, 4 do
      local bs, err, code = c:poll_batch(10)
      if bs then
        for _, b in ipairs(bs) do
          for i = 1, b.count do vals[#vals + 1] = b:offset(i) .. "=" .. b:value(i) end
        end
        for _, pe in ipairs(bs.errors or {}) do
          errs = errs + 1
          assert.equal("corrupt", pe.code)
        end
      else
        errs = errs + 1
        assert.equal("corrupt", code)
        assert.matches("crc mismatch in record batch at byte %d+ %(offset 5%)", err)
      end
    end
    assert.same({ "0=a1", "1=a2", "2=a3", "3=a4", "4=a5" }, vals)
    assert.equal(4, errs)
    assert.equal(5, c:position("bad", 0))
    c:close()
  end)

  it("a batch that breaks after some of its records (CRC checks off): none of it delivered, the position at its start",
    function()
      cluster:create_topic("torn", 1)
      local p = kafka.producer.new(client, { linger_ms = 1e9 })
      for i = 1, 5 do assert(p:send("torn", "a" .. i)) end
      assert.equal(0, select(2, p:flush())) -- batch 0-4
      for i = 1, 5 do assert(p:send("torn", "b" .. i)) end
      assert.equal(0, select(2, p:flush())) -- batch 5-9
      -- the last record's header count (its last byte, 0) becomes 1: records
      -- 5-8 decode, record 9 does not
      local e = cluster.topics.torn.partitions[0].log.entries[2]
      assert.equal(0, e.bytes:byte(#e.bytes))
      e.bytes = e.bytes:sub(1, -2) .. "\2"
      local c = kafka.consumer.new(client, { fetch_max_wait_ms = 0, check_crcs = false })
      assert(c:assign { { topic = "torn", partition = 0, offset = 0 } })
      local bs = assert(c:poll_batch(10))
      assert.equal(1, #bs)
      local b = bs[1]
      assert.equal(5, b.count)
      assert.same({ 0, 1, 2, 3, 4 }, b.offsets)
      assert.same({ "a1", "a2", "a3", "a4", "a5" }, b.values)
      assert.equal(5, #b.timestamps)
      assert.equal("corrupt", bs.errors[1].code)
      assert.equal(5, c:position("torn", 0))
      local again, _, code = c:poll_batch(10)
      assert.is_nil(again)
      assert.equal("corrupt", code)
      assert.equal(5, c:position("torn", 0))
      c:close()
    end)
end)

describe("decode_records' columns mode and decode_headers (the codec under poll_batch)", function()
  local proto = kafka.proto
  it("appends at count + 1, headers raw until decode_headers; bad header bytes are nil, message, \"corrupt\"", function()
    local bytes = proto.encode_records({ { key = "k", value = "v", timestamp = 5, headers = { { key = "h", value = "x" },
      { key = "n" } } }, { value = "w", timestamp = 6 } }, { base_offset = 40 })
    local cols = { count = 1, offsets = { 7 }, timestamps = { 1 }, keys = {}, values = { "old" }, raw_headers = {} }
    local t, info = proto.decode_records(bytes, { columns = cols })
    assert.equal(cols, t)
    assert.equal(3, info.count)
    assert.equal(42, info.next_offset)
    assert.same({ 7, 40, 41 }, cols.offsets)
    assert.same({ 1, 5, 6 }, cols.timestamps)
    assert.same({ nil, "k" }, cols.keys)
    assert.same({ "old", "v", "w" }, cols.values)
    assert.is_nil(cols.raw_headers[3])
    assert.same({ { key = "h", value = "x" }, { key = "n" } }, proto.decode_headers(cols.raw_headers[2]))
    assert.same({}, proto.decode_headers(""))
    -- a key length past the end; a null key
    assert.same({ nil, "corrupt record headers: header 1 at byte 0", "corrupt" }, { proto.decode_headers("\20ab") })
    assert.same({ nil, "corrupt record headers: header 2 at byte 4", "corrupt" },
      { proto.decode_headers("\2h\2x\1\1") })
    assert.has_error(function() proto.decode_records(bytes, { columns = { count = 0, keys = "no" } }) end,
      "decode_records: columns.keys must be a table")
    assert.has_error(function() proto.decode_records(bytes, { columns = 1 }) end)
  end)
end)

describe("read_committed over columns", function()
  local read_committed = require "kafka.read_committed"
  it("drops an aborted transaction's records from every column, sparse keys and values moved with them", function()
    local batches = {
      { base_offset = 0, last_offset_delta = 2, producer_id = 7, transactional = true },
      { base_offset = 3, last_offset_delta = 0, producer_id = 7, transactional = true, control = true },
      { base_offset = 4, last_offset_delta = 1, producer_id = 8, transactional = true },
    }
    local b = { count = 6, offsets = { 9, 0, 1, 2, 4, 5 }, timestamps = { 19, 10, 11, 12, 14, 15 },
                keys = { "a", "k0", nil, "k2", nil, "k5" }, values = { "x", nil, "v1", "v2", "v4", nil },
                raw_headers = { nil, "h0", nil, nil, "h4", nil } }
    read_committed.drop_aborted_columns(b, 1, batches, { { producer_id = 7, first_offset = 0 } })
    assert.same({ count = 3, offsets = { 9, 4, 5 }, timestamps = { 19, 14, 15 }, keys = { "a", nil, "k5" },
                  values = { "x", "v4" }, raw_headers = { nil, "h4" } }, b)
  end)
end)

local rk = require "support.realkafka"
local rt = require "support.realtools"
local versions = rk.versions()
if #versions > 0 then
  local version = versions[1]
  -- every codec on the first Lua of `make test`, two on the others (SPEC_TIER=lite)
  local CODECS = H.lite() and { "none", "zstd" } or { "none", "gzip", "snappy", "lz4", "zstd" }
  local N = 200

  -- what Peer.java's producer writes as record i
  local function java_row(part, offset, i)
    return ("%d/%d/k%d/%s/%d/i=%d,n=nil"):format(part, offset, i, "v" .. i .. "-" .. ("x"):rep(i % 7 * 40),
      1700000000000 + i, i)
  end

  -- acks(lines) -> {[i] = {partition, offset}}, count
  local function acks(lines)
    local t, n = {}, 0
    for _, l in ipairs(lines) do
      local p, o, i = l:match("^ACK (%d+) (%d+) (%d+)$")
      if p then
        t[tonumber(i)] = { tonumber(p), tonumber(o) }
        n = n + 1
      end
    end
    return t, n
  end

  -- poll_batch until want records or secs: the rows, by partition the batches' records in order
  local function drain(c, want, secs)
    local rows = {}
    local deadline = socket.gettime() + (secs or 20)
    while #rows < want and socket.gettime() < deadline do
      local bs = c:poll_batch(200)
      if bs then
        check_shape(bs)
        batch_rows(bs, rows)
      end
    end
    return rows
  end

  describe("consumer:poll_batch against Kafka " .. version .. ", Kafka's Java producer writing", function()
    local k, client
    local wrote -- name -> {topic=, lines=}

    setup(function()
      k = rk.cluster(version, 1)
      client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-batch" }
      -- one JVM writes it all (a JVM start costs a second or more)
      local cmds, names = {}, {}
      for _, codec in ipairs(CODECS) do
        local topic = rt.uniq("batch-" .. codec)
        rt.create_topic(client, topic, 3, 1)
        cmds[#cmds + 1], names[#names + 1] = { "produce", topic, N, codec, "idempotent" }, codec
      end
      local txn = rt.uniq("batch-txn")
      rt.create_topic(client, txn, 1, 1)
      for _, x in ipairs { { 10, "gzip", "txn-commit" }, { 20, "none", "txn-abort" }, { 15, "lz4", "txn-commit" } } do
        cmds[#cmds + 1], names[#names + 1] = { "produce", txn, x[1], x[2], x[3] }, x[3] .. #names
      end
      local out = rk.java_chain(cmds, { bootstrap = k.bootstrap.PLAINTEXT, timeout = 240 })
      wrote = {}
      for i, name in ipairs(names) do wrote[name] = { topic = cmds[i][2], lines = out[i] } end
    end)

    teardown(function()
      if client then client:close() end
    end)

    local function assign_all(c, topic, parts)
      local list = {}
      for p = 0, parts - 1 do list[#list + 1] = { topic = topic, partition = p, offset = "earliest" } end
      assert(c:assign(list))
    end

    for _, codec in ipairs(CODECS) do
      it(codec .. ": every record exactly (offsets, keys, values, timestamps, headers)", function()
        local w = wrote[codec]
        local a, n = acks(w.lines)
        assert.equal(N, n)
        local want = {}
        for i = 0, N - 1 do want[#want + 1] = java_row(a[i][1], a[i][2], i) end
        local c = kafka.consumer.new(client, { fetch_max_wait_ms = 100, max_poll_records = 64 })
        assign_all(c, w.topic, 3)
        local got = drain(c, N)
        table.sort(want)
        table.sort(got)
        assert.same(want, got)
        c:close()
      end)
    end

    it("read_committed: the aborted transaction's records and the control records are left out", function()
      local topic = wrote["txn-commit" .. #CODECS].topic
      local first = acks(wrote["txn-commit" .. #CODECS].lines)
      local second = acks(wrote["txn-commit" .. #CODECS + 2].lines)
      local aborted = acks(wrote["txn-abort" .. #CODECS + 1].lines)
      local want = {}
      for i = 0, 9 do want[#want + 1] = java_row(0, first[i][2], i) end
      for i = 0, 14 do want[#want + 1] = java_row(0, second[i][2], i) end
      local ends = assert(client:list_offsets(topic, 0, "latest", "read_committed"))
      -- 45 records and three markers
      assert.equal(48, ends)
      local c = kafka.consumer.new(client, { fetch_max_wait_ms = 100, isolation_level = "read_committed" })
      assign_all(c, topic, 1)
      local got = drain(c, #want, 10)
      -- nothing more comes
      local more = c:poll_batch(300)
      if more then batch_rows(more, got) end
      assert.same(want, got)
      assert.equal(ends, c:position(topic, 0))
      c:close()
      -- read_uncommitted: the aborted ones too, the markers never
      local all = {}
      for i = 0, 19 do all[#all + 1] = java_row(0, aborted[i][2], i) end
      for _, r in ipairs(want) do all[#all + 1] = r end
      table.sort(all, function(x, y) return tonumber(x:match("^%d+/(%d+)")) < tonumber(y:match("^%d+/(%d+)")) end)
      c = kafka.consumer.new(client, { fetch_max_wait_ms = 100 })
      assign_all(c, topic, 1)
      got = drain(c, 45, 10)
      assert.same(all, got)
      assert.equal(ends, c:position(topic, 0))
      c:close()
    end)

    it("seek into a compressed batch, then poll_batch: from that offset, exactly", function()
      local codec = CODECS[#CODECS]
      local w = wrote[codec]
      local a = acks(w.lines)
      -- partition 0's records by offset
      local byoff, offs = {}, {}
      for i = 0, N - 1 do
        if a[i][1] == 0 then
          byoff[a[i][2]] = i
          offs[#offs + 1] = a[i][2]
        end
      end
      table.sort(offs)
      local from = offs[math.floor(#offs / 2)] + 1 -- inside a batch of several records
      local c = kafka.consumer.new(client, { fetch_max_wait_ms = 100 })
      assert(c:assign { { topic = w.topic, partition = 0, offset = 0 } })
      assert(c:seek(w.topic, 0, from))
      local want = {}
      for _, o in ipairs(offs) do
        if o >= from then want[#want + 1] = java_row(0, o, byoff[o]) end
      end
      assert.same(want, drain(c, #want))
      assert.equal(offs[#offs] + 1, c:position(w.topic, 0))
      c:close()
    end)

    it("poll and poll_batch mixed: every record once, in order, the commit what was returned", function()
      local w = wrote[CODECS[1]]
      local a = acks(w.lines)
      local want = {}
      for i = 0, N - 1 do want[#want + 1] = java_row(a[i][1], a[i][2], i) end
      table.sort(want)
      local gid = rt.uniq("batch-mixed")
      local c = kafka.consumer.new(client, { group_id = gid, fetch_max_wait_ms = 100, max_poll_records = 25,
        auto_offset_reset = "earliest" })
      assign_all(c, w.topic, 3)
      local got, last, calls = {}, {}, 0
      local deadline = socket.gettime() + 20
      while #got < N and socket.gettime() < deadline do
        calls = calls + 1
        if calls % 2 == 0 then
          for _, m in ipairs(c:poll(200) or {}) do
            got[#got + 1] = msg_row(m)
            last[m.partition] = m.offset
          end
        else
          for _, b in ipairs(c:poll_batch(200) or {}) do
            batch_rows({ b }, got)
            last[b.partition] = b:offset(b.count)
          end
        end
        for p, off in pairs(last) do assert.equal(off + 1, c:position(w.topic, p)) end
        -- commit half way, then check it is exactly the positions
        if calls == 4 then
          assert(c:commit())
          local committed = assert(c:committed())
          for _, x in ipairs(committed) do
            assert.equal(last[x.partition] and last[x.partition] + 1 or c:position(w.topic, x.partition), x.offset)
          end
        end
      end
      local sorted = {}
      for i, r in ipairs(got) do sorted[i] = r end
      table.sort(sorted)
      assert.same(want, sorted)
      -- in offset order per partition
      local prev = {}
      for _, r in ipairs(got) do
        local p, o = r:match("^(%d+)/(%d+)/")
        p, o = tonumber(p), tonumber(o)
        assert.is_true(o > (prev[p] or -1))
        prev[p] = o
      end
      assert(c:commit())
      for _, x in ipairs(assert(c:committed())) do assert.equal(prev[x.partition] + 1, x.offset) end
      c:close()
    end)

    it("a group rebalance while a member holds fetched records: each record once, revocations commit what was returned",
      function()
        local w = wrote[CODECS[1]]
        local topic = w.topic
        local gid = rt.uniq("batch-group")
        local members, order, got, last, log = {}, {}, {}, {}, {}
        local function add(name)
          local c
          c = kafka.consumer.new(client, { group_id = gid, auto_offset_reset = "earliest", fetch_max_wait_ms = 50,
            max_poll_records = 10, group_protocol = "classic", partition_assignment_strategy = "range",
            session_timeout_ms = 6000, heartbeat_interval_ms = 100,
            on_assign = function(_, ps)
              for _, tp in ipairs(ps) do log[#log + 1] = { name, "assign", tp.partition } end
            end,
            on_revoke = function(_, ps)
              -- after the revocation's automatic commit
              local committed = assert(c:committed(ps))
              for i, tp in ipairs(ps) do
                log[#log + 1] = { name, "revoke", tp.partition, committed[i].offset, last[name][tp.partition] }
              end
            end })
          assert(c:subscribe { topic })
          members[name], last[name] = c, {}
          order[#order + 1] = name
        end
        local function poll(name, ms)
          local bs = members[name]:poll_batch(ms)
          assert.is_nil(bs and bs.callback_errors)
          for _, b in ipairs(bs or {}) do
              for i = 1, b.count do
                local key = b.partition .. "/" .. b:offset(i)
                got[key] = (got[key] or 0) + 1
              end
            last[name][b.partition] = b:offset(b.count)
          end
        end
        local function revoked(name)
          for _, e in ipairs(log) do
            if e[1] == name and e[2] == "revoke" then return true end
          end
          return false
        end
        local function total()
          local n = 0
          for _ in pairs(got) do n = n + 1 end
          return n
        end
        add("a")
        -- a has its partitions and records from each, with more fetched than returned
        local deadline = socket.gettime() + 30
        while total() == 0 and socket.gettime() < deadline do poll("a", 50) end
        assert.is_truthy(members.a.fetcher.pending)
        add("b")
        -- until a's revocation, a polls only every 250 ms (10 records at most
        -- each time): it still holds fetched records when the group rebalances
        deadline = socket.gettime() + 40
        local next_a = 0
        while total() < N and socket.gettime() < deadline do
          poll("b", 50)
          if revoked("a") or socket.gettime() >= next_a then
            poll("a", 0)
            next_a = socket.gettime() + 0.25
          end
        end
        assert.is_true(revoked("a"))
        assert.equal(N, total())
        for key, times in pairs(got) do
          if times ~= 1 then error(key .. " delivered " .. times .. " times") end
        end
        -- a revoked every partition once (range, eager), each committed one
        -- past the last record a returned from it (0 where it returned none)
        local nrevoked = 0
        for _, e in ipairs(log) do
          if e[2] == "revoke" and e[1] == "a" then
            nrevoked = nrevoked + 1
            assert.equal(e[5] and e[5] + 1 or 0, e[4])
          end
        end
        assert.equal(3, nrevoked)
        for _, name in ipairs(order) do members[name]:close() end
        -- the group's offsets at the end: every partition's end
        local q = kafka.consumer.new(client, { group_id = gid })
        local ends = {}
        for p = 0, 2 do ends[#ends + 1] = { topic = topic, partition = p } end
        for _, x in ipairs(assert(q:committed(ends))) do
          assert.equal(assert(client:list_offsets(topic, x.partition, "latest")), x.offset)
        end
        q:close()
      end)
  end)
end
