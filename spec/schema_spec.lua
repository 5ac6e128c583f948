-- Every api x every version x request and response: generated bodies
-- (nulls, empties, long strings, tagged fields present and absent) survive
-- encode -> decode -> encode unchanged.
local proto = require "kafka.proto"
local gen = require "support.gen"
local H = require "support.helpers"

describe("schema round trip", function()
  local r = H.rng(12345)
  local apis = proto.apis()

  it("covers the apis the issue names, in every version Kafka 3.9, 4.1 and 4.4 define", function()
    -- the union of Kafka 3.9's definitions (v0 up), 4.1.2's and 4.4.0's (the
    -- newest; InitProducerId 6 is unstable there): name -> {min, max}
    local want = { Produce = { 0, 13 }, Fetch = { 0, 18 }, ListOffsets = { 0, 11 }, Metadata = { 0, 13 },
      OffsetCommit = { 0, 10 }, OffsetFetch = { 0, 10 }, FindCoordinator = { 0, 6 }, ApiVersions = { 0, 5 },
      JoinGroup = { 0, 9 }, SyncGroup = { 0, 5 }, Heartbeat = { 0, 4 }, LeaveGroup = { 0, 5 },
      SaslHandshake = { 0, 1 }, SaslAuthenticate = { 0, 2 }, InitProducerId = { 0, 5 },
      CreateTopics = { 0, 7 }, DeleteTopics = { 0, 6 }, DescribeGroups = { 0, 6 }, ListGroups = { 0, 5 },
      ConsumerGroupHeartbeat = { 0, 1 }, ConsumerGroupDescribe = { 0, 1 }, ListConfigResources = { 0, 1 },
      TxnOffsetCommit = { 0, 6 }, DeleteGroups = { 0, 3 }, ShareFetch = { 1, 2 }, ShareAcknowledge = { 1, 2 },
      DescribeShareGroupOffsets = { 0, 1 }, StreamsGroupHeartbeat = { 0, 1 }, StreamsGroupDescribe = { 0, 1 },
      StreamsGroupTopologyDescriptionUpdate = { 0, 0 }, UnregisterController = { 0, 0 } }
    for name, range in pairs(want) do
      local lo, hi = proto.versions(name)
      assert.are.same(range, { lo, hi }, name)
    end
    assert.are.equal(95, #apis)
    assert.are.equal(93, proto.api_key("StreamsGroupTopologyDescriptionUpdate"))
    assert.are.equal(94, proto.api_key("UnregisterController"))
    -- the old name of key 74 still works
    assert.are.equal(74, proto.api_key("ListClientMetricsResources"))
    assert.are.equal(74, proto.api_key("list_client_metrics_resources"))
    assert.are.equal("ListConfigResources", proto.api_name(74))
  end)

  -- Kafka 4.4 renamed TxnOffsetCommit's GenerationId to
  -- GenerationIdOrMemberEpoch in every version (as OffsetCommit's before):
  -- one name for all versions, the newest
  it("TxnOffsetCommit's generation is generation_id_or_member_epoch in every version that has it", function()
    local names = {}
    for _, f in ipairs(proto.schema("TxnOffsetCommit", "request").fields) do names[f.name] = { f.vmin, f.vmax } end
    assert.are.same({ 3, 32767 }, names.generation_id_or_member_epoch)
    assert.is_nil(names.generation_id)
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
