-- Structures carried inside other messages (Kafka's type "data"): the
-- consumer protocol's subscription and assignment (JoinGroup/SyncGroup
-- metadata, issue 13 item 3), a transaction marker's control record value,
-- LeaderChangeMessage and the KRaft records. kafka.core.encode_data /
-- decode_data (Java's bytes for them: spec/interop_java_codec_spec.lua).
local core = require "kafka.core"
local gen = require "support.gen"
local H = require "support.helpers"
local hex, unhex = H.hex, H.unhex

describe("data structures", function()
  local r = H.rng(4242)

  it("lists the consumer protocol, the control records and the KRaft records", function()
    local got = {}
    for _, d in ipairs(core.datas()) do got[d.name] = d end
    assert.are.same({ name = "ConsumerProtocolSubscription", min = 0, max = 3 }, got.ConsumerProtocolSubscription)
    assert.are.same({ name = "ConsumerProtocolAssignment", min = 0, max = 3 }, got.ConsumerProtocolAssignment)
    assert.are.same({ name = "EndTxnMarker", min = 0, max = 0 }, got.EndTxnMarker)
    assert.are.same({ name = "LeaderChangeMessage", min = 0, max = 1, flexible = 0 }, got.LeaderChangeMessage)
    assert.is_table(got.VotersRecord)
  end)

  for _, d in ipairs(core.datas()) do
    it(d.name .. " v" .. d.min .. "-" .. d.max .. " round trip, prefixed and bare", function()
      for v = d.min, d.max do
        for _ = 1, 4 do
          local body = gen.body(d.name, v, "data", r)
          local b = core.encode_data(d.name, v, body)
          local got_v, got = core.decode_data(d.name, b)
          assert(got_v, got)
          assert.are.equal(v, got_v)
          local diff = H.deep_diff(body, got)
          assert(diff == nil, d.name .. " v" .. v .. ": " .. tostring(diff))
          assert.are.equal(hex(b), hex(core.encode_data(d.name, v, got)))
          local bare = core.encode_data(d.name, v, body, { bare = true })
          assert.are.equal(hex(b:sub(3)), hex(bare))
          local bv, bt = core.decode_data(d.name, bare, { version = v })
          assert.are.equal(v, bv)
          assert.are.same(got, bt)
        end
      end
    end)
  end

  -- Hand-checked against the JSON definitions: int16 version, then the
  -- struct (non-flexible: int32 array counts, int16 string lengths).
  local sub_v3 = "0003" .. "00000002" .. "0001" .. "61" .. "0002" .. "6262" -- topics a, bb
    .. "00000002" .. "7564"                                                  -- user_data "ud"
    .. "00000001" .. "0001" .. "61" .. "00000002" .. "00000000" .. "00000002" -- owned a [0, 2]
    .. "00000005"                                                            -- generation_id
    .. "0002" .. "7231"                                                      -- rack_id "r1"
  local sub = { topics = { "a", "bb" }, user_data = "ud", owned_partitions = { { topic = "a", partitions = { 0, 2 } } },
                generation_id = 5, rack_id = "r1" }

  it("ConsumerProtocolSubscription v3 bytes", function()
    assert.are.equal(sub_v3, hex(core.encode_data("ConsumerProtocolSubscription", 3, sub)))
    local v, t = core.decode_data("ConsumerProtocolSubscription", unhex(sub_v3))
    assert.are.equal(3, v)
    assert.are.same(sub, t)
  end)

  it("ConsumerProtocolSubscription v0 leaves out what v0 lacks; null user_data is the default", function()
    local b = core.encode_data("ConsumerProtocolSubscription", 0, { topics = { "t" }, generation_id = 9 })
    assert.are.equal("0000" .. "00000001" .. "0001" .. "74" .. "ffffffff", hex(b))
    local v, t = core.decode_data("ConsumerProtocolSubscription", b)
    assert.are.equal(0, v)
    assert.are.same({ topics = { "t" } }, t)
  end)

  it("a version above the newest known decodes its known prefix, as Java's ConsumerProtocol does", function()
    -- v7 from a future member: the v3 fields, then fields this codec does not know
    local future = "0007" .. sub_v3:sub(5) .. "0000002a" .. "0003787978"
    local v, t = core.decode_data("ConsumerProtocolSubscription", unhex(future))
    assert.are.equal(7, v)
    assert.are.same(sub, t)
    local av, at = core.decode_data("ConsumerProtocolAssignment",
      unhex("0004" .. "00000001" .. "0001" .. "61" .. "00000001" .. "00000003" .. "ffffffff" .. "deadbeef"))
    assert.are.equal(4, av)
    assert.are.same({ assigned_partitions = { { topic = "a", partitions = { 3 } } } }, at)
    -- an EndTxnMarker value of a newer version: Java reads it as v0
    local ev, et = core.decode_data("EndTxnMarker", unhex("0001" .. "00000007" .. "0102"))
    assert.are.equal(1, ev)
    assert.are.same({ coordinator_epoch = 7 }, et)
  end)

  it("bad bytes are nil, message, code", function()
    local name = "ConsumerProtocolSubscription"
    local v, err, code = core.decode_data(name, unhex("ffff" .. sub_v3:sub(5)))
    assert.is_nil(v)
    assert.matches("version %-1", err)
    assert.are.equal("unsupported", code)
    v, err, code = core.decode_data(name, unhex(sub_v3 .. "00"))
    assert.is_nil(v)
    assert.matches("unexpected bytes", err)
    assert.are.equal("corrupt", code)
    for n = 0, #sub_v3 / 2 - 1 do
      v, err, code = core.decode_data(name, unhex(sub_v3):sub(1, n))
      assert.is_nil(v)
      assert.are.equal("corrupt", code, err)
    end
    -- a prefix of a newer version must still hold every known field
    local _
    v, _, code = core.decode_data(name, unhex("0009" .. sub_v3:sub(5, -3)))
    assert.is_nil(v)
    assert.are.equal("corrupt", code)
  end)

  it("misuse raises", function()
    assert.has_error(function() core.encode_data("NoSuchThing", 0, {}) end)
    assert.has_error(function() core.encode_data("ConsumerProtocolSubscription", 4, {}) end)
    assert.has_error(function() core.encode_data("ConsumerProtocolSubscription", 0, { topics = 5 }) end)
    assert.has_error(function() core.decode_data("ConsumerProtocolSubscription", "", { version = 9 }) end)
    assert.has_error(function() core.decode_data("NoSuchThing", "") end)
  end)

  it("snake_case names work too", function()
    local b = core.encode_data("consumer_protocol_assignment", 1, { assigned_partitions = {} })
    assert.are.equal("0001" .. "00000000" .. "ffffffff", hex(b))
  end)
end)
