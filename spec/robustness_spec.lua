-- Hostile and broken input: every prefix of golden frames, bit flips,
-- negative and huge counts, decompression bombs. Always an error value,
-- never a crash, a hang or a large allocation.
local proto = require "kafka.proto"
local gen = require "support.gen"
local H = require "support.helpers"
local pack = H.pack

local MiB = 1048576

local function with_size(frame, n)
  -- the first n bytes of frame, with a size prefix that matches them
  local body = frame:sub(5, n)
  return pack(">i4", #body) .. body
end

-- A v2 batch (one record's header, right length and CRC-32C) whose records
-- are `payload`, compressed with codec.
local function bomb_batch(codec, payload)
  local ids = { gzip = 1, snappy = 2, lz4 = 3, zstd = 4 }
  local hdr = proto.encode_records({ { value = "x" } }):sub(1, 61)
  -- attributes (bytes 22-23) name the codec; the CRC covers them and all after
  local after_crc = pack(">i2", ids[codec]) .. hdr:sub(24, 61) .. payload
  -- base offset, batch length (what follows it), leader epoch and magic, CRC-32C, the rest
  return hdr:sub(1, 8) .. pack(">i4", 9 + #after_crc) .. hdr:sub(13, 17) .. pack(">I4", proto.crc32c(after_crc))
    .. after_crc
end

local function goldens()
  local r = H.rng(4242)
  local out = {}
  for _, a in ipairs(proto.apis()) do
    for _, v in ipairs({ a.min, a.max }) do
      local rq = proto.encode_request(a.key, v, { correlation_id = 5, client_id = "g" }, gen.body(a.key, v, "request", r, { short = true }))
      local rs = proto.encode_response(a.key, v, 5, gen.body(a.key, v, "response", r, { short = true }))
      out[#out + 1] = { api = a.key, v = v, req = rq, resp = rs }
    end
  end
  -- and a fetch response full of real records
  local recs = proto.encode_records({ { key = "k", value = "v", headers = { { key = "h", value = "x" } } } }, { compression = "gzip" })
  out[#out + 1] = { api = 1, v = 11, resp = proto.encode_response("Fetch", 11, 9, { responses = { { topic = "t",
    partitions = { { partition_index = 0, high_watermark = 1, records = recs } } } } }) }
  return out
end

describe("robustness", function()
  local frames = goldens()

  it("every prefix of every golden frame is an error, incomplete or corrupt, never a crash", function()
    local n = 0
    for _, g in ipairs(frames) do
      if g.req then
        for cut = 0, #g.req - 1 do
          local ok, err, code = proto.decode_request(g.req:sub(1, cut))
          assert(ok == nil and code == "incomplete", err)
          if cut >= 12 then
            ok, err, code = proto.decode_request(with_size(g.req, cut))
            assert(ok == nil and type(err) == "string" and code == "corrupt", "prefix " .. cut .. ": " .. tostring(err))
          end
          n = n + 1
        end
      end
      for cut = 0, #g.resp - 1 do
        local ok, err, code = proto.decode_response(g.api, g.v, g.resp:sub(1, cut))
        assert(ok == nil and code == "incomplete", err)
        if cut >= 8 then
          ok, err, code = proto.decode_response(g.api, g.v, with_size(g.resp, cut))
          assert(ok == nil and code == "corrupt", "prefix " .. cut .. ": " .. tostring(err))
        end
        n = n + 1
      end
    end
    assert.is_true(n > 10000)
  end)

  it("names the field and the byte offset of a truncation", function()
    local f = proto.encode_response("FindCoordinator", 0, 1, { error_code = 0, node_id = 1, host = "h", port = 9092 })
    local ok, err, code = proto.decode_response("FindCoordinator", 0, with_size(f, 19))
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.are.equal("truncated int32 'port' at byte 17", err)
    -- inside arrays the element count is checked against the bytes left first
    f = proto.encode_response("Produce", 0, 1, { responses = { { name = "t", partition_responses = {
      { index = 1, error_code = 0, base_offset = 5 } } } } })
    ok, err = proto.decode_response("Produce", 0, with_size(f, 27))
    assert.is_nil(ok)
    assert.are.equal("truncated array length 'responses[1].partition_responses' at byte 15", err)
  end)

  it("random bit flips give a table or an error value", function()
    local r = H.rng(777)
    local results = { ok = 0, err = 0 }
    for _, g in ipairs(frames) do
      for _ = 1, 30 do
        local s = g.resp
        local pos = 5 + r.next() % (#s - 4)
        local flipped = s:sub(1, pos - 1) .. string.char(H.flip_bit(s:byte(pos), r.next() % 8)) .. s:sub(pos + 1)
        local a, b = proto.decode_response(g.api, g.v, flipped)
        if a == nil then
          assert.is_string(b)
          results.err = results.err + 1
        else
          assert.is_table(b)
          results.ok = results.ok + 1
        end
      end
    end
    assert.is_true(results.err > 0 and results.ok > 0)
  end)

  it("huge and negative counts fail without allocating for them", function()
    collectgarbage()
    local before = collectgarbage("count")
    -- Metadata v0 response claiming 2^31-1 brokers
    local f = pack(">i4i4i4", 8, 1, 0x7fffffff)
    local ok, err, code = proto.decode_response("Metadata", 0, f)
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.matches("array length 'brokers' at byte 8", err)
    assert.is_true(collectgarbage("count") - before < 1024)
    -- negative count other than -1
    ok, err = proto.decode_response("Metadata", 0, pack(">i4i4i4", 8, 1, -5))
    assert.is_nil(ok)
    assert.matches("bad array length 'brokers' at byte 8", err)
    -- a string length of -2 is corrupt (only -1 means null), -1 where it is not nullable too
    ok, err, code = proto.decode_response("Metadata", 0, pack(">i4i4i4i4i2", 18, 1, 1, 1, -2) .. "host")
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.are.equal("bad string 'brokers[1].host' at byte 16", err)
    ok, err, code = proto.decode_response("Metadata", 0, pack(">i4i4i4i4i2", 18, 1, 1, 1, -1) .. "host")
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.are.equal("null string 'brokers[1].host' at byte 16 is not nullable in v0", err)
    -- -1 where the array is not nullable
    ok, err = proto.decode_response("Metadata", 0, pack(">i4i4i4", 8, 1, -1))
    assert.is_nil(ok)
    assert.matches("null array 'brokers' at byte 8 is not nullable", err)
    -- a string length past the end, and a negative one
    ok, err = proto.decode_response("FindCoordinator", 0, pack(">i4i4i2i4i2", 12, 1, 0, 1, 300))
    assert.is_nil(ok)
    assert.matches("truncated string 'host' at byte 14", err)
    ok, err = proto.decode_response("FindCoordinator", 0, pack(">i4i4i2i4i2", 12, 1, 0, 1, -2))
    assert.is_nil(ok)
    assert.matches("bad string 'host' at byte 14", err)
    -- compact (flexible) lengths too: ApiVersions v3 with a huge varint count
    ok, err = proto.decode_response("ApiVersions", 3, pack(">i4i4i2", 11, 1, 0) .. "\255\255\255\255\7")
    assert.is_nil(ok)
    assert.matches("api_keys", err)
  end)

  it("frame_length: nil until 4 bytes, then the whole length; bad sizes are errors", function()
    assert.is_nil(proto.frame_length(""))
    assert.is_nil(proto.frame_length("\0\0\0"))
    assert.are.equal(4 + 21, proto.frame_length("\0\0\0\21"))
    local ok, err, code = proto.frame_length("\255\255\255\255")
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.is_string(err)
    ok, err, code = proto.frame_length("\127\0\0\0")
    assert.is_nil(ok)
    assert.are.equal("limit", code)
    assert.matches("exceeds the limit", err)
    assert.are.equal(4 + 0x7f000000, proto.frame_length("\127\0\0\0", 0x7fffffff))
  end)

  it("decompression bombs stop at the limit: 1 GiB declared from 1 MiB", function()
    local zeros = ("\0"):rep(64 * MiB)
    for _, codec in ipairs({ "gzip", "zstd" }) do
      local one = proto.compress(codec, zeros)
      local bomb = one:rep(16) -- concatenated members/frames: 1 GiB out
      assert.is_true(#bomb < 2 * MiB)
      local ok, err, code = proto.decompress(codec, bomb, 8 * MiB)
      assert.is_nil(ok)
      assert.are.equal("limit", code)
      assert.matches("limit", err)
      -- inside a batch (CRC right, so only the limit stops it): that batch
      -- is skipped and reported, the good batch after it is read
      local bad = bomb_batch(codec, bomb)
      local good = proto.encode_records({ { value = "after" } }, { base_offset = 7 })
      local got, info = proto.decode_records(bad .. good, { max_decompressed = 8 * MiB })
      assert.are.equal(1, #got)
      assert.are.equal("after", got[1].value)
      assert.are.equal(7, got[1].offset)
      assert.are.equal(1, #info.errors)
      assert.matches("exceeds the limit", info.errors[1])
    end
    zeros = nil -- luacheck: ignore
    collectgarbage()
  end)

  it("bounded memory: a hostile Fetch response costs a small multiple of its size plus the limit", function()
    -- four partitions, each a zstd bomb: 16 frames of 64 MiB of zeros (1 GiB declared)
    local one = proto.compress("zstd", ("\0"):rep(64 * MiB))
    local bomb = proto.encode_records({ { value = "x" } }) -- a valid batch whose records we replace
    local payload = one:rep(16)
    -- a v2 batch header (61 bytes) with zstd attributes, then the bomb as its records
    local hdr = bomb:sub(1, 61)
    local body = hdr:sub(1, 21) .. pack(">i2", 4) .. hdr:sub(24, 61) .. payload
    local batch = body:sub(1, 8) .. pack(">i4", #body - 12) .. body:sub(13)
    local parts = {}
    for i = 0, 3 do parts[#parts + 1] = { partition_index = i, high_watermark = 1, records = batch } end
    local frame = proto.encode_response("Fetch", 11, 1, { responses = { { topic = "t", partitions = parts } } })
    collectgarbage()
    collectgarbage()
    local lua_before = collectgarbage("count")
    proto.mem_stats(true)
    local limit = 4 * MiB
    local corr, got = proto.decode_response("Fetch", 11, frame, { max_decompressed = limit, check_crc = false })
    assert.are.equal(1, corr)
    local _, peak = proto.mem_stats()
    for _, p in ipairs(got.responses[1].partitions) do
      assert.are.equal(0, #p.records)
      assert.matches("exceeds the limit", p.records.errors[1])
    end
    -- decompression buffers grow by doubling: at most 2x the limit, plus slack
    assert.is_true(peak <= 2 * limit + 4 * #frame + MiB, "C peak " .. peak)
    assert.is_true(collectgarbage("count") - lua_before < 256, "Lua grew")
    -- counts of 2^31-1 allocate nothing for them
    proto.mem_stats(true)
    lua_before = collectgarbage("count")
    for _ = 1, 100 do proto.decode_response("Metadata", 0, pack(">i4i4i4", 8, 1, 0x7fffffff)) end
    local cur2, peak2 = proto.mem_stats()
    assert.is_true(peak2 - cur2 < 4096)
    assert.is_true(collectgarbage("count") - lua_before < 512)
  end)

  it("deeply nested compressed wrappers are refused past the nesting limit", function()
    local inner = proto.encode_records({ { value = "deep" } }, { magic = 1 })
    for _ = 1, 5 do
      -- wrap the set as the value of a gzip wrapper message
      local set = proto.compress("gzip", inner)
      local body = pack(">i1i1i8", 1, 1, 0) .. pack(">i4", -1) .. pack(">s4", set)
      inner = pack(">i8i4", 0, #body + 4) .. pack(">I4", proto.crc32(body)) .. body
    end
    local got, info = proto.decode_records(inner)
    assert.are.equal(0, #got)
    assert.matches("nested more than", info.errors[1])
  end)

  it("wrong types in a body raise with the field's path (misuse)", function()
    assert.has_error(function()
      proto.encode_request("Produce", 3, { client_id = "x" }, { acks = "all", timeout_ms = 1, topic_data = {} })
    end, "expected an integer for 'acks'")
    assert.has_error(function()
      proto.encode_request("Metadata", 1, {}, { topics = { { name = 5 } } })
    end, "expected a string for 'topics[1].name'")
    assert.has_error(function()
      proto.encode_request("Produce", 3, {}, { acks = 70000 })
    end, "value 70000 out of range for int16 'acks'")
    assert.has_error(function() proto.encode_request("Nope", 0, {}, {}) end)
    assert.has_error(function() proto.encode_request("Produce", 99, {}, {}) end)
    assert.has_error(function() proto.decode_response("Produce", 0, {}) end)
  end)

  it("decode_request: an unknown api is data, not a raise", function()
    local ok, err, code = proto.decode_request(pack(">i4i2i2i4i2", 10, 999, 0, 1, -1))
    assert.is_nil(ok)
    assert.are.equal("unsupported", code)
    assert.matches("api key 999", err)
  end)
end)
