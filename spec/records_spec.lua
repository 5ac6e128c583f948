-- Record formats: message sets magic 0/1 and RecordBatch v2, every codec.
local proto = require "kafka.proto"
local H = require "support.helpers"

local codecs = { "none", "gzip", "snappy", "lz4", "zstd" }

local function sample(n, with_headers)
  local t = {}
  for i = 1, n do
    t[i] = { key = (i % 3 == 0) and nil or ("key-" .. i), value = ("value %d "):format(i) .. ("x"):rep(i % 50),
             timestamp = 1700000000000 + i }
    if with_headers and i % 2 == 0 then t[i].headers = { { key = "h" .. i, value = "v" .. i }, { key = "nil" } } end
  end
  return t
end

local function check_same(want, got, magic)
  assert.are.equal(#want, #got)
  for i, m in ipairs(want) do
    local g = got[i]
    assert.are.equal(m.key, g.key, "key " .. i)
    assert.are.equal(m.value, g.value, "value " .. i)
    assert.are.equal(i - 1, g.offset, "offset " .. i)
    if magic == 0 then assert.are.equal(-1, g.timestamp) else assert.are.equal(m.timestamp, g.timestamp) end
    if magic == 2 and m.headers then
      assert.are.same(m.headers, g.headers)
    else
      assert.is_nil(g.headers)
    end
  end
end

describe("records", function()
  for _, magic in ipairs({ 0, 1, 2 }) do
    for _, codec in ipairs(codecs) do
      if not (codec == "zstd" and magic < 2) then
        it(("magic %d %s round trip"):format(magic, codec), function()
          local msgs = sample(120, magic == 2)
          local bytes = assert(proto.encode_records(msgs, { magic = magic, compression = codec }))
          local got, info = proto.decode_records(bytes)
          assert(got, info)
          check_same(msgs, got, magic)
          assert.is_false(info.partial)
          assert.is_nil(info.errors)
          if codec ~= "none" or magic == 2 then
            assert.are.equal(1, #info.batches)
            assert.are.equal(codec, info.batches[1].compression)
            assert.are.equal(magic, info.batches[1].magic)
          end
        end)
      end
    end
  end

  it("decode_columns gives the same records as arrays, one per field", function()
    for _, codec in ipairs(codecs) do
      local msgs = sample(80, true)
      local bytes = proto.encode_records(msgs, { compression = codec, base_offset = 100 })
      local rows = proto.decode_records(bytes)
      local cols, info = proto.decode_columns(bytes)
      assert.are.equal(#rows, cols.n)
      assert.is_false(info.partial)
      for i, r in ipairs(rows) do
        assert.are.equal(r.offset, cols.offset[i])
        assert.are.equal(r.timestamp, cols.timestamp[i])
        assert.are.equal(r.key, cols.key[i])
        assert.are.equal(r.value, cols.value[i])
        assert.are.same(r.headers, cols.headers[i])
      end
    end
    local a = proto.encode_records({ { value = "x" } })
    local bad = a:sub(1, -3) .. "Y" .. a:sub(-1)
    local cols, info = proto.decode_columns(bad .. a:sub(1, 30))
    assert.are.equal(0, cols.n)
    assert.is_true(info.partial)
    assert.matches("crc mismatch", info.errors[1])
    assert.is_nil(proto.decode_columns(("\0"):rep(8) .. "\255\255\255\255" .. ("\0"):rep(20)))
  end)

  it("decode_records with stop_at_error: the messages end before the first problem, a batch it cuts is taken back", function()
    local function batch(base, ...)
      local t = {}
      for _, v in ipairs({ ... }) do t[#t + 1] = { value = v } end
      return proto.encode_records(t, { base_offset = base })
    end
    local a, b, c = batch(0, "a0", "a1", "a2"), batch(3, "b3-long-value", "b4", "b5"), batch(6, "c6", "c7")
    local function values(msgs)
      local t = {}
      for i, m in ipairs(msgs) do t[i] = m.value end
      return table.concat(t, " ")
    end
    -- b's CRC-32C no longer matches (its last value byte changed)
    local badcrc = b:sub(1, -2) .. string.char((b:byte(-1) + 1) % 256)
    local msgs, info = proto.decode_records(a .. badcrc .. c, { stop_at_error = true, batches = false })
    assert.are.equal("a0 a1 a2", values(msgs))
    assert.are.equal(3, info.next_offset)
    assert.are.equal(1, #info.errors)
    assert.matches("^crc mismatch in record batch at byte %d+ %(offset 3%)", info.errors[1])
    -- without it the decoder goes on past the problem
    msgs, info = proto.decode_records(a .. badcrc .. c, { batches = false })
    assert.are.equal("a0 a1 a2 c6 c7", values(msgs))
    assert.are.equal(8, info.next_offset)
    -- b declares 4 records and holds 3 (CRCs not checked): its first three
    -- were decoded before the fourth failed, and are taken back with it
    local cut = b:sub(1, 57) .. "\0\0\0\4" .. b:sub(62)
    local out = { "kept" }
    msgs, info = proto.decode_records(a .. cut .. c, { stop_at_error = true, check_crc = false, into = out })
    assert.are.equal(out, msgs)
    assert.are.equal(4, #out)
    assert.are.equal("a0 a1 a2", values({ out[2], out[3], out[4] }))
    assert.are.equal(3, info.next_offset)
    assert.matches("^record 3 of the batch at byte %d+ %(offset 3%) is malformed", info.errors[1])
    -- nothing good before the problem: no messages, no next_offset
    msgs, info = proto.decode_records(badcrc .. c, { stop_at_error = true })
    assert.are.equal(0, #msgs)
    assert.is_nil(info.next_offset)
  end)

  it("decode_records for consumers: into, set, min_offset, skip_control, next_offset", function()
    local data = proto.encode_records({ { value = "a" }, { value = "b" }, { value = "c" } }, { base_offset = 10,
      compression = "lz4" })
      .. proto.encode_records({ { key = "\0\0\0\0", value = "\0\0\0\0\0\0" } }, { base_offset = 13, control = true })
    local out = { "kept" }
    local msgs, info = proto.decode_records(data, { into = out, set = { topic = "t", partition = 2, high_watermark = 99 },
      min_offset = 11, skip_control = true, batches = false })
    assert.are.equal(out, msgs)
    assert.are.equal(3, #out)
    assert.are.equal("kept", out[1])
    assert.are.same({ "b", "c" }, { out[2].value, out[3].value })
    assert.are.same({ "t", 2, 99 }, { out[2].topic, out[2].partition, out[2].high_watermark })
    assert.are.equal(14, info.next_offset) -- past the control batch
    assert.is_nil(info.batches)
    assert.is_nil(out.batches)
    -- without the options: everything, control record included
    local all = proto.decode_records(data)
    assert.are.equal(4, #all)
    assert.is_true(all[4].control)
    assert.has_error(function() proto.decode_records(data, { into = 5 }) end)
  end)

  it("keeps null and empty keys and values apart", function()
    for _, magic in ipairs({ 0, 1, 2 }) do
      local got = proto.decode_records(proto.encode_records({ { key = "", value = nil }, { key = nil, value = "" } },
        { magic = magic }))
      assert.are.equal("", got[1].key)
      assert.is_nil(got[1].value)
      assert.is_nil(got[2].key)
      assert.are.equal("", got[2].value)
    end
  end)

  it("accepts headers as a map and plain strings as values", function()
    local got = proto.decode_records(proto.encode_records({ "plain", { value = "v", headers = { a = "1" } } }))
    assert.are.equal("plain", got[1].value)
    assert.are.same({ { key = "a", value = "1" } }, got[2].headers)
  end)

  it("the batch builder writes what encode_records writes", function()
    for _, codec in ipairs(codecs) do
      local msgs = sample(50, true)
      local b = proto.batch { compression = codec }
      for _, m in ipairs(msgs) do b:append(m.value, m.key, m.headers, m.timestamp) end
      assert.are.equal(50, #b)
      assert.is_true(b:bytes_size() > 61)
      local bytes = b:encode { base_offset = 0 }
      if codec == "none" or codec == "snappy" or codec == "lz4" or codec == "zstd" then
        -- deterministic codecs: byte-identical
        assert.are.equal(H.hex(proto.encode_records(msgs, { compression = codec })), H.hex(bytes))
      end
      check_same(msgs, (proto.decode_records(bytes)), 2)
      b:clear()
      assert.are.equal(0, #b)
      assert.are.equal("", b:encode())
      b:close()
      b:close() -- idempotent
      assert.has_error(function() b:append("x") end)
    end
  end)

  it("the builder's add: append and accounting in one call, false once the limit would be passed", function()
    local b = proto.batch { limit = 250 }
    -- ids 7, 8, 9 then 20: runs {7, 3, 20, 1}; sizes are the caller's estimates
    assert.are.same({ true, true, true, true }, { b:add("a", nil, nil, 1, 7, 60), b:add("b", "k", nil, 2, 8, 60),
      b:add(nil, nil, { h = "v" }, 3, 9, 60), b:add("d", nil, nil, 4, 20, 60) })
    assert.is_false(b:add("e", nil, nil, 5, 21, 11)) -- 240 + 11 > 250: not added
    assert.is_true(b:add("f", nil, nil, 6, 21, 10))  -- 250: added
    local count, size, runs = b:account()
    assert.are.same({ 5, 250, { 7, 3, 20, 2 } }, { count, size, runs })
    local msgs = proto.decode_records(b:encode { base_offset = 0 })
    local vals = {}
    for i, m in ipairs(msgs) do vals[i] = tostring(m.value) .. "/" .. tostring(m.key) .. "/" .. m.timestamp end
    assert.are.same({ "a/nil/1", "b/k/2", "nil/nil/3", "d/nil/4", "f/nil/6" }, vals)
    -- an empty batch takes a message larger than the limit; a full one does not
    local big = proto.batch { limit = 10 }
    assert.is_true(big:add("x", nil, nil, 1, 1, 500))
    assert.is_false(big:add("y", nil, nil, 1, 2, 1))
    local bc, bs = big:account()
    assert.are.same({ 1, 500 }, { bc, bs })
    -- a data error adds nothing; misuse raises
    local legacy = proto.batch { magic = 1, limit = 100 }
    local ok, err, code = legacy:add("v", nil, { { key = "h", value = "v" } }, 1, 1, 10)
    local _, _, append_code = proto.batch { magic = 1 }:append("v", nil, { { key = "h", value = "v" } })
    assert.is_nil(ok)
    assert.are.equal(append_code, code) -- as b:append's
    assert.matches("headers need magic 2", err)
    assert.are.same({ 0, 0, {} }, { legacy:account() })
    assert.has_error(function() b:add("v", nil, nil, 1, "x", 1) end)
    assert.has_error(function() b:add("v", nil, nil, 1, 1, -1) end)
    assert.has_error(function() proto.batch { limit = -1 } end, "limit must not be negative")
    b:clear()
    assert.are.same({ 0, 0, {} }, { b:account() })
  end)

  it("builder misuse raises, with a message naming the argument", function()
    local b = proto.batch()
    assert.has_error(function() b:append(42) end, "record value must be a string or nil")
    assert.has_error(function() b:append("v", {}) end, "record key must be a string or nil")
    assert.has_error(function() b:append("v", nil, "h") end, "record headers must be a table")
    assert.has_error(function() proto.batch { compression = "brotli" } end)
    assert.has_error(function() proto.batch { magic = 1, compression = "zstd" } end)
    local legacy = proto.batch { magic = 1 }
    local ok, err = legacy:append("v", nil, { { key = "h", value = "v" } })
    assert.is_nil(ok)
    assert.matches("headers need magic 2", err)
  end)

  it("writes producer id, epoch, sequence, transactional and control flags", function()
    local bytes = proto.encode_records({ { value = "x", timestamp = 5 } }, { producer_id = 4242, producer_epoch = 7,
      base_sequence = 99, transactional = true, base_offset = 1000, partition_leader_epoch = 3 })
    local got, info = proto.decode_records(bytes)
    local b = info.batches[1]
    assert.are.equal(4242, b.producer_id)
    assert.are.equal(7, b.producer_epoch)
    assert.are.equal(99, b.base_sequence)
    assert.is_true(b.transactional)
    assert.is_false(b.control)
    assert.are.equal(3, b.partition_leader_epoch)
    assert.are.equal(1000, got[1].offset)
    local ctl = proto.encode_records({ { key = "\0\0\0\0", value = "\0\0\0\0\0\0" } }, { control = true })
    local cg, ci = proto.decode_records(ctl)
    assert.is_true(ci.batches[1].control)
    assert.is_true(cg[1].control)
  end)

  it("decodes several batches with mixed magics in one blob", function()
    local blob = proto.encode_records({ { value = "a" } }, { magic = 0 })
      .. proto.encode_records({ { value = "b", timestamp = 7 } }, { magic = 1, base_offset = 1, compression = "gzip" })
      .. proto.encode_records({ { value = "c" }, { value = "d" } }, { base_offset = 2, compression = "lz4" })
    local got, info = proto.decode_records(blob)
    assert.are.same({ "a", "b", "c", "d" }, { got[1].value, got[2].value, got[3].value, got[4].value })
    assert.are.same({ 0, 1, 2, 3 }, { got[1].offset, got[2].offset, got[3].offset, got[4].offset })
    assert.are.equal(2, #info.batches)
  end)

  it("magic 1 compressed wrappers: inner offsets are relative to the wrapper's last offset", function()
    local bytes = proto.encode_records(sample(5), { magic = 1, compression = "snappy", base_offset = 100 })
    local got, info = proto.decode_records(bytes)
    assert.are.same({ 100, 101, 102, 103, 104 }, { got[1].offset, got[2].offset, got[3].offset, got[4].offset, got[5].offset })
    assert.are.equal(104, info.batches[1].base_offset) -- the wrapper carries the last offset
  end)

  it("drops a partial trailing v2 batch", function()
    local one = proto.encode_records(sample(3), { compression = "zstd" })
    local two = proto.encode_records(sample(3), { base_offset = 3 })
    for cut = 1, #two - 1 do
      local got, info = proto.decode_records(one .. two:sub(1, cut))
      assert.are.equal(3, #got)
      assert.is_true(info.partial)
    end
  end)

  it("a CRC mismatch skips that batch, reports it, and reads on", function()
    local a = proto.encode_records({ { value = "first" } })
    local b = proto.encode_records({ { value = "second" } }, { base_offset = 1 })
    local c = proto.encode_records({ { value = "third" } }, { base_offset = 2 })
    -- flip the last letter of "second" (the byte before the header count)
    local bad = b:sub(1, -3) .. "X" .. b:sub(-1)
    local got, info = proto.decode_records(a .. bad .. c)
    assert.are.same({ "first", "third" }, { got[1].value, got[2].value })
    assert.are.equal(1, #info.errors)
    assert.matches("crc mismatch in record batch at byte " .. #a, info.errors[1])
    -- legacy too
    local l1 = proto.encode_records({ { value = "x" } }, { magic = 1 })
    local l2 = proto.encode_records({ { value = "y" } }, { magic = 1, base_offset = 1 })
    got, info = proto.decode_records(l1:sub(1, -2) .. "Z" .. l2)
    assert.are.equal(1, #got)
    assert.are.equal("y", got[1].value)
    assert.matches("crc mismatch in message at byte 0", info.errors[1])
    -- and can be told not to check
    got = proto.decode_records(a .. bad .. c, { check_crc = false })
    assert.are.equal(3, #got)
    assert.are.equal("seconX", got[2].value)
  end)

  it("a bad batch in one partition of a Fetch response does not derail the next", function()
    local good = proto.encode_records({ { value = "ok" } }, { base_offset = 5 })
    local crcbad = good:sub(1, -3) .. "X" .. good:sub(-1)
    local framing_bad = good:sub(1, 16) .. "\9" .. good:sub(18) -- unknown magic 9
    local body = { responses = { { topic = "t", partitions = {
      { partition_index = 0, high_watermark = 6, records = crcbad },
      { partition_index = 1, high_watermark = 6, records = framing_bad },
      { partition_index = 2, high_watermark = 6, records = good } } } } }
    for _, v in ipairs({ 4, 11, 12, 16 }) do
      local b = body
      if v >= 13 then
        b = { responses = { { topic_id = ("\1"):rep(16), partitions = body.responses[1].partitions } } }
      end
      local corr, got = proto.decode_response("Fetch", v, proto.encode_response("Fetch", v, 3, b))
      assert.are.equal(3, corr)
      local ps = got.responses[1].partitions
      assert.are.equal(0, #ps[1].records)
      assert.matches("crc mismatch", ps[1].records.errors[1])
      assert.are.equal(0, #ps[2].records)
      assert.matches("unknown magic 9", ps[2].records.errors[1])
      assert.are.equal(1, #ps[3].records)
      assert.are.equal("ok", ps[3].records[1].value)
      assert.are.equal(5, ps[3].records[1].offset)
      assert.is_nil(ps[3].records.errors)
    end
  end)

  -- the decompression contexts are kept between calls (csrc/compress.c):
  -- a frame cut in the middle, or refused for its window, leaves nothing
  -- in them for the next one
  it("decodes a whole lz4 or zstd frame right after a cut or refused one", function()
    for _, codec in ipairs { "lz4", "zstd" } do
      local parts = {}
      for i = 1, 20000 do parts[i] = tostring(i * 7919 % 100003) end
      local payload = table.concat(parts, ",")
      local whole = proto.compress(codec, payload)
      assert.is_true(#whole > 1000, codec .. ": the frame is " .. #whole .. " bytes")
      for _, cut in ipairs { 30, math.floor(#whole / 2), #whole - 5 } do
        local ok, err, code = proto.decompress(codec, whole:sub(1, cut))
        assert.are.same({ false, "corrupt" }, { ok ~= nil, code }, codec .. " cut at " .. cut .. ": " .. tostring(err))
        assert.is_true(proto.decompress(codec, whole) == payload, codec .. ": the whole frame after a cut one")
      end
      -- over the output limit: refused, then the same frame again with room
      local ok, _, code = proto.decompress(codec, whole, 1000)
      assert.are.same({ false, "limit" }, { ok ~= nil, code })
      assert.is_true(proto.decompress(codec, whole) == payload, codec .. ": the whole frame after a refused one")
    end
  end)

  it("reads lz4 with the header checksum old Kafka wrote (KAFKA-3160)", function()
    local payload = ("lz4 legacy "):rep(20)
    local legacy = proto.compress("lz4", payload, true)
    local proper = proto.compress("lz4", payload)
    assert.are_not.equal(legacy, proper)
    assert.are.equal(payload, proto.decompress("lz4", legacy))
    assert.are.equal(payload, proto.decompress("lz4", proper))
    -- a frame as 0.8/0.9-era Kafka wrote it, byte by byte: magic 184D2204
    -- (little-endian), FLG 0x60 (version 1, independent blocks), BD 0x40
    -- (64 KB blocks), then the header checksum: (xxh32(descriptor) >> 8) & 0xff
    -- is 0x82 over FLG BD as the LZ4 frame format says; KAFKA-3160's
    -- encoders hashed the magic too: xxh32(04 22 4D 18 60 40) gives 0x1A.
    -- Blocks: 16 bytes stored uncompressed (size's high bit set), a
    -- compressed block of one literal-only sequence (token 0x50: 5
    -- literals), the end mark.
    local blocks = "\16\0\0\128" .. "Kafka 0.9 frame!" .. "\6\0\0\0" .. "\80abcde" .. "\0\0\0\0"
    local old_kafka = "\4\34\77\24\96\64\26" .. blocks
    local per_spec = "\4\34\77\24\96\64\130" .. blocks
    assert.are.equal("Kafka 0.9 frame!abcde", proto.decompress("lz4", old_kafka))
    assert.are.equal("Kafka 0.9 frame!abcde", proto.decompress("lz4", per_spec))
    local ok, _, code = proto.decompress("lz4", "\4\34\77\24\96\64\0" .. blocks)
    assert.is_nil(ok) -- neither checksum: corrupt
    assert.are.equal("corrupt", code)
    -- our legacy writer writes that very header
    assert.are.equal("\4\34\77\24\96\64\26", legacy:sub(1, 7))
    -- magic 0 lz4 sets are written the old way and read back
    local got = proto.decode_records(proto.encode_records(sample(4), { magic = 0, compression = "lz4" }))
    assert.are.equal(4, #got)
  end)

  it("every decompressor stops at its output limit", function()
    local big = ("z"):rep(1048576)
    for _, codec in ipairs({ "gzip", "snappy", "lz4", "zstd" }) do
      local c = proto.compress(codec, big)
      assert.are.equal(#big, #proto.decompress(codec, c, #big))
      local ok, err, code = proto.decompress(codec, c, 1000)
      assert.is_nil(ok)
      assert.are.equal("limit", code, codec)
      assert.matches("limit", err)
    end
    local batch = proto.encode_records({ { value = big } }, { compression = "zstd" })
    local got, info = proto.decode_records(batch, { max_decompressed = 4096 })
    assert.are.equal(0, #got)
    assert.matches("exceeds the limit", info.errors[1])
  end)

  it("corrupt compressed data is an error for that batch, not a crash", function()
    for _, codec in ipairs({ "gzip", "snappy", "lz4", "zstd" }) do
      local c = proto.compress(codec, ("payload "):rep(100))
      for _, junk in ipairs({ c:sub(1, math.floor(#c / 2)), c:sub(1, 10) .. ("\255"):rep(20) .. c:sub(31), "" }) do
        local ok, err, code = proto.decompress(codec, junk)
        assert.is_nil(ok)
        assert.is_string(err)
        assert.is_string(code)
      end
    end
  end)

  it("crc32c: table and instruction paths agree", function()
    local r = H.rng(7)
    for n = 0, 300 do
      local s = r.bytes(n)
      assert.are.equal(proto.crc32c(s, "sw"), proto.crc32c(s, "hw"))
    end
    assert.are.equal(0xe3069283, proto.crc32c("123456789"))
    assert.are.equal(0xcbf43926, proto.crc32("123456789"))
  end)

  it("rejects unknown magics and negative sizes with the byte offset", function()
    local v2 = proto.encode_records({ { value = "x" } })
    local bad = v2:sub(1, 16) .. "\7" .. v2:sub(18)
    local ok, err, code = proto.decode_records(bad)
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.matches("unknown magic 7 at byte 16", err)
    ok, err = proto.decode_records(("\0"):rep(8) .. "\255\255\255\254" .. ("\0"):rep(20))
    assert.is_nil(ok)
    assert.matches("negative batch size %-2 at byte 8", err)
  end)

  it("records_end: where the next Fetch starts, from the batch headers alone; bad bytes are nil, message, code", function()
    local a = proto.encode_records(sample(3), { base_offset = 10, compression = "lz4" }) -- 10-12
    local b = proto.encode_records(sample(5), { base_offset = 13 })                      -- 13-17
    local c = proto.encode_records(sample(2), { base_offset = 18, compression = "zstd" }) -- 18-19
    local blob = a .. b .. c
    assert.are.same({ 13, 1 }, { proto.records_end(a) })
    assert.are.same({ 20, 3 }, { proto.records_end(blob) })
    -- a truncated last batch (normal at the end of a Fetch answer) is left out, at every cut
    for cut = 1, #c - 1 do
      assert.are.same({ 18, 2 }, { proto.records_end(a .. b .. c:sub(1, cut)) }, "cut " .. cut)
    end
    -- the highest end, as decode_records' next_offset, whatever the order
    assert.are.same({ 20, 2 }, { proto.records_end(c .. a) })
    assert.are.equal(select(2, proto.decode_records(blob)).next_offset, (proto.records_end(blob)))
    local function fails(bytes, code, pattern)
      local ok, err, got = proto.records_end(bytes)
      assert.is_nil(ok)
      assert.are.equal(code, got)
      assert.matches(pattern, err)
    end
    fails("", "incomplete", "no complete record batch")
    fails(a:sub(1, 40), "incomplete", "no complete record batch")
    -- message sets: one past the last message's offset (a compressed wrapper carries its last inner offset)
    local m0 = proto.encode_records(sample(4), { magic = 0, base_offset = 13 })             -- 13-16
    local m1 = proto.encode_records(sample(3), { magic = 1, base_offset = 17, compression = "gzip" })
    assert.are.same({ 17, 4 }, { proto.records_end(m0) })
    assert.are.same({ 20, 6 }, { proto.records_end(a .. m0 .. m1) })                       -- 17-19: wrapper 19
    assert.are.same({ 17, 5 }, { proto.records_end(a .. m0 .. m1:sub(1, #m1 - 1)) })
    assert.are.equal(select(2, proto.decode_records(a .. m0)).next_offset, (proto.records_end(a .. m0)))
    fails(a .. b:sub(1, 16) .. "\7" .. b:sub(18), "corrupt", "unknown magic 7 at byte " .. (#a + 16))
    fails(("\0"):rep(8) .. "\255\255\255\254" .. ("\0"):rep(20), "corrupt", "negative batch size %-2 at byte 8")
    fails(("\0"):rep(8) .. "\0\0\0\10" .. ("\0"):rep(4) .. "\2" .. ("\0"):rep(5), "corrupt", "shorter than its header")
    -- random damage never raises: an integer, or nil and one of the codes
    math.randomseed(9)
    for _ = 1, 2000 do
      local s = blob
      for _ = 1, math.random(1, 4) do
        local at = math.random(1, #s)
        s = s:sub(1, at - 1) .. string.char(math.random(0, 255)) .. s:sub(at + 1)
      end
      s = s:sub(1, math.random(0, #s))
      local ok, _, code = proto.records_end(s)
      assert.is_true((type(ok) == "number" and ok == math.floor(ok))
        or code == "incomplete" or code == "corrupt")
    end
  end)
end)

describe("decode_records with max_records: a rest to go on from", function()
  -- blob: 4 batches (or wrappers) of 10 messages; the whole decode, which
  -- the interop specs check against kafka-python, is what the paused
  -- decodes must put together
  -- (and the 4 pieces)
  local function blob_of(magic, codec)
    local pieces, msgs = {}, sample(40, magic == 2)
    for k = 0, 3 do
      local part = {}
      for i = 1, 10 do part[i] = msgs[k * 10 + i] end
      pieces[k + 1] = proto.encode_records(part, { magic = magic, compression = codec, base_offset = k * 10 })
    end
    return table.concat(pieces), pieces
  end

  -- the messages of a decode, without the info fields on the table
  local function list(m)
    local t = {}
    for i, x in ipairs(m) do t[i] = x end
    return t
  end

  local function in_polls(blob, k, min_offset)
    local all, sizes, rest, off = {}, {}, blob, min_offset
    while rest do
      local m, info = proto.decode_records(rest, { max_records = k, min_offset = off })
      assert(m, info)
      sizes[#sizes + 1] = #m
      for _, x in ipairs(m) do all[#all + 1] = x end
      off = info.next_offset or off
      if info.rest then assert.is_true(#info.rest > 0, "a rest was empty") end
      rest = info.rest
      assert.is_true(#sizes <= 100, "no end")
    end
    return all, sizes, off
  end

  it("v2, every codec: polls of exactly k, the messages of the whole decode, in order", function()
    for _, codec in ipairs(codecs) do
      local blob = blob_of(2, codec)
      local whole = list(proto.decode_records(blob))
      for _, k in ipairs { 1, 3, 7, 10, 11, 39, 40, 41 } do
        local all, sizes, off = in_polls(blob, k)
        assert.are.same(whole, all, codec .. " k=" .. k)
        assert.are.equal(40, off)
        for i = 1, #sizes - 1 do assert.are.equal(k, sizes[i], codec .. " k=" .. k) end
        assert.are.equal(40 - (#sizes - 1) * k, sizes[#sizes])
      end
      -- a position inside a compressed batch: the records before it left out
      local all, sizes = in_polls(blob, 4, 13)
      assert.are.same({ 4, 4, 4, 4, 4, 4, 3 }, sizes)
      assert.are.equal(13, all[1].offset)
      assert.are.equal(39, all[#all].offset)
    end
  end)

  it("message sets: magic 0/1 stop at a message, a compressed wrapper at its end", function()
    -- (magic 0 wrappers carry no offsets of their own for the inner ones: a
    -- broker's are tested in the interop specs; here magic 0 uncompressed)
    for _, magic in ipairs { 0, 1 } do
      for _, codec in ipairs(magic == 0 and { "none" } or { "none", "gzip", "snappy" }) do
        local blob = blob_of(magic, codec)
        local whole = list(proto.decode_records(blob))
        local all, sizes = in_polls(blob, 7)
        assert.are.same(whole, all, magic .. codec)
        if codec == "none" then
          assert.are.same({ 7, 7, 7, 7, 7, 5 }, sizes)
        else
          -- a wrapper of 10 is taken whole: 7 asked, 10 a poll
          assert.are.same({ 10, 10, 10, 10 }, sizes, magic .. codec)
        end
      end
    end
  end)

  it("no rest when the pause falls on the last record, or only a partial batch follows", function()
    local blob = blob_of(2, "lz4")
    local m, info = proto.decode_records(blob, { max_records = 40 })
    assert.are.equal(40, #m)
    assert.is_nil(info.rest)
    m, info = proto.decode_records(blob .. blob:sub(1, 30), { max_records = 40 })
    assert.are.equal(40, #m)
    assert.is_nil(info.rest)
    assert.is_true(info.partial)
    -- a batch's end with whole batches after it: the rest starts there
    local _, pieces = blob_of(2, "lz4")
    m, info = proto.decode_records(blob, { max_records = 10 })
    assert.are.equal(10, #m)
    assert.are.equal(#blob - #pieces[1], #info.rest)
    local m2 = proto.decode_records(info.rest, { max_records = 100 })
    assert.are.equal(10, m2[1].offset)
    assert.are.equal(30, #m2)
    -- a rest used up decodes to nothing
    local m3, info3 = proto.decode_records(info.rest)
    assert.are.same({}, list(m3))
    assert.is_nil(info3.rest)
    assert.are.equal(0, #info.rest)
  end)

  it("a corrupt batch after a pause: the messages before it, the error, no rest", function()
    local _, pieces = blob_of(2, "none")
    -- batch 3's last byte changed: its CRC fails
    local p3 = pieces[3]
    local bad = pieces[1] .. pieces[2] .. p3:sub(1, -2) .. string.char((p3:byte(-1) + 1) % 256) .. pieces[4]
    local b3 = #pieces[1] + #pieces[2]
    local m, info = proto.decode_records(bad, { max_records = 15, stop_at_error = true })
    assert.are.equal(15, #m)
    m, info = proto.decode_records(info.rest, { max_records = 15, stop_at_error = true, min_offset = 15 })
    assert.are.equal(5, #m)
    assert.are.equal(20, info.next_offset)
    assert.is_nil(info.rest)
    assert.matches("crc mismatch in record batch at byte " .. b3, info.errors[1], 1, true)
    assert.has_error(function() proto.decode_records(bad, { max_records = -1 }) end)
  end)
end)
