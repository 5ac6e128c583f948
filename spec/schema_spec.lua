-- Every api x every version x request and response: generated bodies
-- (nulls, empties, long strings, tagged fields present and absent) survive
-- encode -> decode -> encode unchanged.
local proto = require "kafka.proto"
local gen = require "support.gen"
local H = require "support.helpers"

describe("schema round trip", function()
  local r = H.rng(12345)
  local apis = proto.apis()

  it("covers the apis the issue names, in every version Kafka 3.9 and 4.1 define", function()
    -- the union of Kafka 3.9's definitions (v0 up) and 4.1.2's (the newest;
    -- OffsetCommit 10, OffsetFetch 10, InitProducerId 6 are unstable there)
    local want = { Produce = 13, Fetch = 18, ListOffsets = 10, Metadata = 13, OffsetCommit = 9,
      OffsetFetch = 9, FindCoordinator = 6, ApiVersions = 4, JoinGroup = 9, SyncGroup = 5,
      Heartbeat = 4, LeaveGroup = 5, SaslHandshake = 1, SaslAuthenticate = 2, InitProducerId = 5,
      CreateTopics = 7, DeleteTopics = 6, DescribeGroups = 6, ListGroups = 5,
      ConsumerGroupHeartbeat = 1, ConsumerGroupDescribe = 1, ListConfigResources = 1 }
    for name, max in pairs(want) do
      local lo, hi = proto.versions(name)
      assert.are.equal(0, lo, name)
      assert.are.equal(max, hi, name)
    end
    assert.is_true(#apis >= 85)
    -- the old name of key 74 still works
    assert.are.equal(74, proto.api_key("ListClientMetricsResources"))
    assert.are.equal(74, proto.api_key("list_client_metrics_resources"))
    assert.are.equal("ListConfigResources", proto.api_name(74))
  end)

  for _, a in ipairs(apis) do
    it(a.name .. " v" .. a.min .. "-" .. a.max .. " requests and responses", function()
      local frames = 0
      for v = a.min, a.max do
        for _ = 1, 3 do
          local body = gen.body(a.name, v, "request", r)
          local hdr = { correlation_id = r.int(0, 1000000), client_id = "c" .. v }
          local frame = proto.encode_request(a.name, v, hdr, body)
          local got, err = proto.decode_request(frame, { raw_records = true })
          assert(got, err)
          assert.are.equal(a.key, got.api_key)
          assert.are.equal(v, got.api_version)
          assert.are.equal(hdr.correlation_id, got.correlation_id)
          local d = H.deep_diff(body, got.body)
          assert(d == nil, a.name .. " v" .. v .. " request: " .. tostring(d))
          assert.are.equal(H.hex(frame), H.hex(proto.encode_request(a.name, v, hdr, got.body)))

          local rbody = gen.body(a.name, v, "response", r)
          local rframe = proto.encode_response(a.name, v, 77, rbody)
          local corr, dec = proto.decode_response(a.name, v, rframe, { raw_records = true })
          assert(corr, dec)
          assert.are.equal(77, corr)
          d = H.deep_diff(rbody, dec)
          assert(d == nil, a.name .. " v" .. v .. " response: " .. tostring(d))
          assert.are.equal(H.hex(rframe), H.hex(proto.encode_response(a.name, v, 77, dec)))
          frames = frames + 2
        end
      end
      assert.is_true(frames > 0)
    end)
  end
end)
