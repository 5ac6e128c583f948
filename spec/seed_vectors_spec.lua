-- The seed's byte vectors (../shared/seed/NOTES.md), byte-exact, as data.
local proto = require "kafka.proto"
local H = require "support.helpers"
local hex, unhex = H.hex, H.unhex

describe("seed vectors", function()
  it("CRC-32 of a magic 0 message foo/bar", function()
    local set = proto.encode_records({ { key = "foo", value = "bar" } }, { magic = 0 })
    -- offset(8) size(4) crc(4) ...
    assert.are.equal("b8ba5f57", hex(set:sub(13, 16)))
    assert.are.equal(0xb8ba5f57, proto.crc32(set:sub(17)))
  end)

  it("Metadata v0 request", function()
    local f = proto.encode_request("Metadata", 0, { correlation_id = 123, client_id = "testcli" }, { topics = {} })
    assert.are.equal("00000015000300000000007b000774657374636c6900000000", hex(f))
    local r = assert(proto.decode_request(f))
    assert.are.equal(3, r.api_key)
    assert.are.equal("testcli", r.client_id)
    assert.are.same({}, r.body.topics)
  end)

  local fetch_req = [[00000047 0001 0000 000000f1 0004 74657374 ffffffff 000007d0 000030a6
    00000001 0003 666f6f 00000002 000001a5 0000000000000211 00001339
    00000000 000000000000000b 0000005c]]

  it("Fetch v0 request", function()
    local body = { replica_id = -1, max_wait_ms = 2000, min_bytes = 12454, topics = { { topic = "foo",
      partitions = { { partition = 421, fetch_offset = 529, partition_max_bytes = 4921 },
                     { partition = 0, fetch_offset = 11, partition_max_bytes = 92 } } } } }
    local f = proto.encode_request(1, 0, { correlation_id = 241, client_id = "test" }, body)
    assert.are.equal(hex(unhex(fetch_req)), hex(f))
    local r = assert(proto.decode_request(unhex(fetch_req)))
    assert.are.same(body, r.body)
    assert.are.equal(241, r.correlation_id)
  end)

  local produce_req = [[00000049 0000 0000 000000f1 0004 74657374 ffff 000003e8 00000001 0003
    666f6f 00000001 00000000 00000020 0000000000000000 00000014 b8ba5f57 00 00
    00000003 666f6f 00000003 626172]]

  it("Produce v0 request with one magic 0 message", function()
    local f = proto.encode_request("Produce", 0, { correlation_id = 241, client_id = "test" }, {
      acks = proto.ACKS_ALL, timeout_ms = 1000,
      topic_data = { { name = "foo", partition_data = { { index = 0, records = { { key = "foo", value = "bar" } } } } } } })
    assert.are.equal(hex(unhex(produce_req)), hex(f))
    local r = assert(proto.decode_request(f))
    local recs = r.body.topic_data[1].partition_data[1].records
    assert.are.equal(1, #recs)
    assert.are.equal("foo", recs[1].key)
    assert.are.equal("bar", recs[1].value)
    assert.are.equal(0, recs[1].offset)
    assert.are.equal(0xb8ba5f57, recs[1].crc)
  end)

  local produce_resp = "00000022 000000f1 00000001 0006 667275697473 00000001 0000005d 0003 ffffffffffffffff"

  it("Produce v0 response", function()
    local corr, body = proto.decode_response("Produce", 0, unhex(produce_resp))
    assert.are.equal(241, corr)
    local p = body.responses[1].partition_responses[1]
    assert.are.equal("fruits", body.responses[1].name)
    assert.are.equal(93, p.index)
    assert.are.equal(3, p.error_code)
    assert.are.equal("UNKNOWN_TOPIC_OR_PARTITION", proto.errors[p.error_code].name)
    assert.are.equal(-1, p.base_offset)
    assert.are.equal(hex(unhex(produce_resp)), hex(proto.encode_response("Produce", 0, 241, body)))
    -- what a socket reader has after the size prefix decodes the same
    local corr2, body2 = proto.decode_response("Produce", 0, unhex(produce_resp):sub(5), { unsized = true })
    assert.are.equal(241, corr2)
    assert.are.same(body, body2)
  end)

  local msgs = [[0000000000000002 00000014 b8ba5f57 00 00 00000003 666f6f 00000003 626172
      0000000000000003 00000014 b8ba5f57 00 00 00000003 666f6f 00000003 626172]]
  local fetch_resp = [[00000075 000000f1 00000001 0003 666f6f 00000002
    00000000 0000 0000000000000004 00000040 ]] .. msgs .. [[
    00000001 0003 ffffffffffffffff 00000000]]

  it("Fetch v0 response with two messages and an errored partition", function()
    local corr, body = proto.decode_response("Fetch", 0, unhex(fetch_resp))
    assert.are.equal(241, corr)
    local t = body.responses[1]
    assert.are.equal("foo", t.topic)
    local p0, p1 = t.partitions[1], t.partitions[2]
    assert.are.equal(0, p0.partition_index)
    assert.are.equal(4, p0.high_watermark)
    assert.are.equal(2, #p0.records)
    assert.are.equal(2, p0.records[1].offset)
    assert.are.equal(3, p0.records[2].offset)
    for _, m in ipairs(p0.records) do
      assert.are.equal("foo", m.key)
      assert.are.equal("bar", m.value)
    end
    assert.are.equal(1, p1.partition_index)
    assert.are.equal(3, p1.error_code)
    assert.are.equal(-1, p1.high_watermark)
    assert.are.equal(0, #p1.records)
    -- server side: the same frame from the same values, records as bytes
    local _, raw = proto.decode_response("Fetch", 0, unhex(fetch_resp), { raw_records = true })
    assert.are.equal(hex(unhex(msgs)), hex(raw.responses[1].partitions[1].records))
    assert.are.equal(hex(unhex(fetch_resp)), hex(proto.encode_response("Fetch", 0, 241, raw)))
  end)

  it("snappy raw block and xerial framing", function()
    assert.are.equal("foo", proto.decompress("snappy", unhex("0308666f6f")))
    local xerial = unhex("82534e415050590000000001000000010000000503 08666f6f00000005 0308666f6f")
    assert.are.equal("foofoo", proto.decompress("snappy", xerial))
  end)

  it("drops a truncated last message silently and reports it", function()
    local set = proto.encode_records({ { value = ("a"):rep(15) }, { value = ("b"):rep(15) },
      { value = ("c"):rep(15) } }, { magic = 0 })
    local got, info = proto.decode_records(set:sub(1, -5))
    assert.are.equal(2, #got)
    assert.are.equal(("a"):rep(15), got[1].value)
    assert.are.equal(("b"):rep(15), got[2].value)
    assert.is_true(info.partial)
    assert.is_nil(info.errors)
  end)

  it("the Kafka constants", function()
    assert.are.equal(-1, proto.OFFSET_LATEST)
    assert.are.equal(-2, proto.OFFSET_EARLIEST)
    assert.are.equal(0, proto.ACKS_NONE)
    assert.are.equal(1, proto.ACKS_LEADER)
    assert.are.equal(-1, proto.ACKS_ALL)
    assert.are.equal(2, proto.compression.snappy)
  end)
end)
