-- Known-answer vectors (issue 16 item 3): murmur2 as kafka-clients
-- computes it, CRC-32C against RFC 3720's test vectors.
local proto = require "kafka.proto"
local string, table = string, table
local ipairs, require = ipairs, require

-- Key k of length n: the first n bytes of "abcdefghijklmnopq" (ASCII) and
-- of ff fe fd ... ef (high bytes: Java's bytes are signed).
local ascii = "abcdefghijklmnopq"
local high = string.char(255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240, 239)

-- Computed by kafka-clients 4.1.2's org.apache.kafka.common.utils.Utils.murmur2
-- (as an unsigned int), keys of length 0 to 16:
--   java -cp build/kafka/codecpeer-4.4.0:<classpath> CodecPeer murmur2 ~ 61 6162 ... ff fffe ...
local MURMUR2_ASCII = {
  275646681, 2731586172, 316155434, 479470107, 2971317748, 461995741, 1870650108, 3948500121,
  3339539933, 3675287486, 8205847, 4062577747, 3759680359, 387415655, 1842055212, 1680674526, 4041079308,
}
local MURMUR2_HIGH = {
  275646681, 3983499611, 1717632651, 998637092, 2136149935, 524068735, 2920128751, 4128730949,
  2069784301, 4046898338, 1643857841, 43891115, 2124919173, 351248855, 2625452003, 1830479359, 397513979,
}

describe("known answers", function()
  it("murmur2 of keys of length 0-16 equals kafka-clients' Utils.murmur2", function()
    for n = 0, 16 do
      assert.are.equal(MURMUR2_ASCII[n + 1], proto.murmur2(ascii:sub(1, n)), "ascii key of length " .. n)
      assert.are.equal(MURMUR2_HIGH[n + 1], proto.murmur2(high:sub(1, n)), "high-byte key of length " .. n)
    end
  end)

  it("the partition Java's default partitioner picks: toPositive(murmur2) % n", function()
    -- Utils.toPositive(murmur2("abcdefg")) = 1801016473 (murmur2 3948500121)
    assert.are.equal(1801016473, proto.murmur2("abcdefg") % 2147483648)
    assert.are.equal(1801016473 % 12, proto.murmur2("abcdefg") % 2147483648 % 12)
  end)

  it("the producer places keys where Java's partitioner does (12 partitions: not a power of two)", function()
    -- the expected partitions come from the Java vectors above, not from our
    -- murmur2: toPositive(h) % 12; half the keys have h >= 2^31, where
    -- h % 12 would differ
    local kafka = require "kafka"
    local mock = require "kafka.mock"
    local cluster = mock.new { brokers = 1, topics = { keyed = 12 } }
    local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory() }
    local p = kafka.producer.new(client, { linger_ms = 1e9 })
    local want, high_keys = {}, 0
    for n = 0, 16 do
      for _, k in ipairs({ { ascii:sub(1, n), MURMUR2_ASCII[n + 1] }, { high:sub(1, n), MURMUR2_HIGH[n + 1] } }) do
        local id = assert(p:send("keyed", "v", { key = k[1] }))
        want[id] = (k[2] % 2147483648) % 12
        if k[2] >= 2147483648 then high_keys = high_keys + 1 end
      end
    end
    assert.is_true(high_keys >= 10)
    local reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(34, #reports)
    for _, r in ipairs(reports) do assert.are.equal(want[r.id], r.partition, "message " .. r.id) end
    client:close()
  end)

  -- RFC 3720 (iSCSI), appendix B.4; plus the CRC catalogue's check value.
  local function bytes(from, to, step)
    local t = {}
    for b = from, to, step do t[#t + 1] = string.char(b) end
    return table.concat(t)
  end
  local CRC32C = {
    { "32 bytes of zeros", ("\0"):rep(32), 0x8A9136AA },
    { "32 bytes of 0xff", ("\255"):rep(32), 0x62A8AB43 },
    { "32 ascending bytes 0..31", bytes(0, 31, 1), 0x46DD794E },
    { "32 descending bytes 31..0", bytes(31, 0, -1), 0x113FDB5C },
    { "'123456789'", "123456789", 0xE3069283 },
    { "nothing", "", 0 },
  }

  for _, c in ipairs(CRC32C) do
    it("CRC-32C of " .. c[1], function()
      assert.are.equal(c[3], proto.crc32c(c[2]))
      assert.are.equal(c[3], proto.crc32c(c[2], "sw"))
      if require("kafka.core").crc32c_hw then assert.are.equal(c[3], proto.crc32c(c[2], "hw")) end
    end)
  end
end)
