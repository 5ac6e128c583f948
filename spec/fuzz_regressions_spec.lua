-- Inputs the fuzzers (fuzz/, `make fuzz`) found crashing, kept as
-- regression cases: each must decode to a value or an error value. Under
-- `make asan` (UBSan, no recovery) the old code aborted on them.
local proto = require "kafka.proto"
local H = require "support.helpers"

local MiB = 1048576

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."

local function read(name)
  local f = assert(io.open(root .. "/spec/data/" .. name, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("fuzz regressions", function()
  it("records: a timestamp delta that overflows int64 wraps (fuzz_records, signed overflow)", function()
    local data = read("fuzz-records-ts-overflow.bin")
    for _, crc in ipairs({ false, true }) do
      local msgs, info = proto.decode_records(data, { check_crc = crc })
      assert.is_table(msgs, info)
      local cols, cinfo = proto.decode_columns(data, { check_crc = crc })
      assert.is_table(cols, cinfo)
      assert.are.equal(#msgs, cols.n)
    end
  end)

  it("zstd: a legacy (pre-1.0) frame is refused before its decoder allocates (fuzz_decompress, 128 MiB)", function()
    local data = read("fuzz-zstd-window.bin")
    local ok, err, code = proto.decompress("zstd", data, MiB)
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.matches("no zstd frame at byte 0", err)
    -- real zstd frames, several in a row, still decode; a frame whose window
    -- is larger than the limit is refused
    local two = proto.compress("zstd", ("a"):rep(5000)) .. proto.compress("zstd", ("b"):rep(5000))
    assert.are.equal(("a"):rep(5000) .. ("b"):rep(5000), proto.decompress("zstd", two, MiB))
    local big = proto.compress("zstd", ("c"):rep(3 * MiB))
    ok, err = proto.decompress("zstd", big, 4096)
    assert.is_nil(ok)
    assert.is_string(err)
  end)

  it("a null element in an array of strings is corrupt, not a hole (fuzz_request round trip)", function()
    -- DescribeConfigs v4 (flexible) whose second resource's configuration_keys
    -- (a nullable array) holds a null string: the array may be null, its
    -- elements may not (Kafka's readers refuse them); the decoder accepted it
    -- and the encoder could not write it back
    local data = read("fuzz-request-null-element.bin")
    local ok, err, code = proto.decode_request(data)
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.are.equal("null string 'resources[2].configuration_keys[1]' at byte 23 is not nullable in v4", err)
    -- a null array and an array of strings still decode
    for _, keys in ipairs({ false, { "a", "" } }) do
      local body = { resources = { { resource_type = 2, resource_name = "t", configuration_keys = keys or nil } } }
      local frame = proto.encode_request("DescribeConfigs", 4, { correlation_id = 1, client_id = "c" }, body)
      local req = assert(proto.decode_request(frame))
      assert.are.equal(4, req.api_version)
      if keys then assert.are.same(keys, req.body.resources[1].configuration_keys) end
    end
  end)

  if H.int64 then
    local maxint, minint = H.maxinteger, H.mininteger
    it("timestamps and offsets at the ends of the int64 range round-trip (wrapping deltas)", function()
      local msgs = { { value = "a", timestamp = maxint }, { value = "b", timestamp = minint },
                     { value = "c", timestamp = 0 } }
      for _, magic in ipairs({ 1, 2 }) do
        local got = proto.decode_records(proto.encode_records(msgs, { magic = magic, base_offset = maxint - 1 }))
        assert.are.equal(3, #got)
        assert.are.equal(maxint, got[1].timestamp)
        assert.are.equal(minint, got[2].timestamp)
        assert.are.equal(0, got[3].timestamp)
        assert.are.equal(maxint - 1, got[1].offset)
        assert.are.equal(maxint, got[2].offset)
        assert.are.equal(minint, got[3].offset)
      end
    end)
  else
    -- Lua 5.1 / LuaJIT: int64 values are doubles (docs/client.md, "64-bit values")
    it("int64 as doubles: exact to 2^53, the range's ends wrap and decode to the nearest double", function()
      local top = 2 ^ 63 - 1024 -- the largest double inside int64
      local msgs = { { value = "a", timestamp = top }, { value = "b", timestamp = -2 ^ 63 },
                     { value = "c", timestamp = 2 ^ 53 }, { value = "d", timestamp = -2 ^ 53 } }
      for _, magic in ipairs({ 1, 2 }) do
        local got = proto.decode_records(proto.encode_records(msgs, { magic = magic, base_offset = 2 ^ 53 - 3 }))
        assert.are.equal(4, #got)
        assert.are.equal(top, got[1].timestamp)
        assert.are.equal(-2 ^ 63, got[2].timestamp)
        assert.are.equal(2 ^ 53, got[3].timestamp)
        assert.are.equal(-2 ^ 53, got[4].timestamp)
        assert.are.equal(2 ^ 53 - 3, got[1].offset)
        assert.are.equal(2 ^ 53, got[4].offset) -- all four offsets exact
      end
      -- a v2 batch based at int64 max - 1 (not a double): offsets max - 1 and
      -- max decode to 2^63, the next wraps to -2^63
      local v2 = proto.encode_records({ { value = "a" }, { value = "b" }, { value = "c" } })
      local got = proto.decode_records("\127\255\255\255\255\255\255\254" .. v2:sub(9))
      assert.are.equal(3, #got)
      assert.are.equal(2 ^ 63, got[1].offset)
      assert.are.equal(2 ^ 63, got[2].offset)
      assert.are.equal(-2 ^ 63, got[3].offset)
      -- encoding takes integral numbers inside int64 only
      for _, bad in ipairs({ 2 ^ 63, -2 ^ 64, 1.5, 0 / 0, math.huge }) do
        assert.has_error(function() proto.encode_records({ { value = "x", timestamp = bad } }) end)
        assert.has_error(function() proto.encode_records({ { value = "x" } }, { base_offset = bad }) end)
      end
    end)
  end
end)
