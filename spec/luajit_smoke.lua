-- LuaJIT 2.1 smoke spec (Lua 5.1 syntax): the same C module, built with
-- `make LUA=luajit`, for OpenResty. Run by `make test-luajit`.
local proto = require "kafka.proto"

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

describe("kafka.core on LuaJIT", function()
  it("encodes the seed's Metadata v0 and Produce v0 requests byte-exact", function()
    assert.are.equal("00000015000300000000007b000774657374636c6900000000",
      hex(proto.encode_request("Metadata", 0, { correlation_id = 123, client_id = "testcli" }, { topics = {} })))
    local f = proto.encode_request("Produce", 0, { correlation_id = 241, client_id = "test" }, {
      acks = -1, timeout_ms = 1000,
      topic_data = { { name = "foo", partition_data = { { index = 0, records = { { key = "foo", value = "bar" } } } } } } })
    assert.are.equal("0000004900000000000000f1000474657374ffff000003e8000000010003666f6f00000001000000000000002000000000000000000000001"
      .. "4b8ba5f57000000000003666f6f00000003626172", hex(f))
  end)

  it("round-trips records with every codec", function()
    for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
      local msgs = {}
      for i = 1, 100 do msgs[i] = { key = "k" .. i, value = string.rep("v", i), timestamp = 1700000000000 + i,
                                    headers = { { key = "h", value = tostring(i) } } } end
      local got, info = proto.decode_records(proto.encode_records(msgs, { compression = codec }))
      assert.are.equal(100, #got)
      assert.is_nil(info.errors)
      for i = 1, 100 do
        assert.are.equal(msgs[i].value, got[i].value)
        assert.are.equal(msgs[i].timestamp, got[i].timestamp)
        assert.are.equal(i - 1, got[i].offset)
        assert.are.equal(tostring(i), got[i].headers[1].value)
      end
    end
  end)

  it("the batch builder works through the same userdata", function()
    local b = proto.batch { compression = "lz4" }
    for i = 1, 1000 do b:append("value " .. i, nil, nil, 1000 + i) end
    assert.are.equal(1000, #b)
    local got = proto.decode_records(b:encode())
    assert.are.equal(1000, #got)
    assert.are.equal("value 1000", got[1000].value)
    b:close()
  end)

  it("64-bit policy: numbers exact up to 2^53, fractions refused", function()
    local big = 2 ^ 53
    local body = { topics = { { name = "t", partitions = { { partition_index = 0, error_code = 0,
      timestamp = -1, offset = big } } } } }
    local corr, got = proto.decode_response("ListOffsets", 1, proto.encode_response("ListOffsets", 1, 7, body))
    assert.are.equal(7, corr)
    assert.are.equal(big, got.topics[1].partitions[1].offset)
    assert.are.equal(-big, select(2, proto.decode_response("ListOffsets", 1,
      proto.encode_response("ListOffsets", 1, 7, { topics = { { name = "t", partitions = { { offset = -big } } } } })))
      .topics[1].partitions[1].offset)
    assert.has_error(function()
      proto.encode_response("ListOffsets", 1, 7, { topics = { { name = "t", partitions = { { offset = 1.5 } } } } })
    end)
  end)

  it("bad bytes are nil, message, code here too", function()
    local ok, err, code = proto.decode_response("Metadata", 0, "\0\0\0\8\0\0\0\1\127\255\255\255")
    assert.is_nil(ok)
    assert.are.equal("corrupt", code)
    assert.is_string(err)
  end)
end)
