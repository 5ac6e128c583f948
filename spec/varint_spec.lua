-- Varints at every width edge, in both directions, against an independent
-- encoder (issue 28). A record's fields are zig-zag varints: a value v takes
-- k bytes up to 2^(7k-1) - 1 and k + 1 from 2^(7k-1) (negative: from
-- -2^(7k-1) - 1), so those edges, for every width up to the 10-byte
-- varlong, are crossed by timestamp deltas, offset deltas, key, value and
-- header lengths, header counts and -1 for null. kafka-python (Debian's
-- python3-kafka) writes the same records: its bytes must equal ours, from
-- both of our writers (proto.encode_records and the producer's
-- proto.batch), and each side must read the other's. The unsigned varints
-- of the flexible versions (compact lengths, counts, tagged fields) are
-- checked against Kafka's Java classes in interop_java_codec_spec ("every
-- width edge"); their bounds on both sides are pinned here.
local proto = require "kafka.proto"
local H = require "support.helpers"

local tointeger = rawget(math, "tointeger") -- Lua 5.3+: exact 64-bit integers (5.1 and LuaJIT have doubles)
local int64 = tointeger ~= nil

-- The signed edges of width k: {2^(7k-1) - 1, 2^(7k-1), -2^(7k-1), -2^(7k-1) - 1}.
local function edges(k)
  local e = 2 ^ (7 * k - 1)
  if int64 then e = tointeger(e) end
  return { e - 1, e, -e, -e - 1 }
end

-- The zig-zag varint's width of v: k bytes while |v| (v >= 0) or -v - 1
-- (v < 0) is below 2^(7k-1). (No zig-zag done here: 2v overflows at 2^62.)
local function width(v)
  local u = v >= 0 and v or -v - 1
  local k = 1
  while u >= 2 ^ (7 * k - 1) do k = k + 1 end
  return k
end

local BASE = 1700000000000

-- Timestamp deltas at every edge the Lua can hold exactly: widths 1-7
-- everywhere (|delta| <= 2^48 + 1, with the base below 2^53), 8-9 (up to
-- 2^62 + 1, the 10-byte varlong) with 64-bit integers.
local function ts_deltas()
  local t = { 0 }
  for k = 1, int64 and 9 or 7 do
    for _, d in ipairs(edges(k)) do t[#t + 1] = d end
  end
  return t
end

local function text(n, c) return (c or "a"):rep(n) end

-- Messages whose fields cross every edge once each.
local function edge_messages()
  local msgs = {}
  for _, d in ipairs(ts_deltas()) do
    msgs[#msgs + 1] = { key = "ts", value = "d", timestamp = BASE + d }
  end
  for _, n in ipairs { 0, 63, 64, 8191, 8192, 1048575, 1048576 } do
    msgs[#msgs + 1] = { key = text(n, "k"), value = nil, timestamp = BASE }
    msgs[#msgs + 1] = { key = nil, value = text(n, "v"), timestamp = BASE }
  end
  for _, n in ipairs { 63, 64, 8191, 8192 } do
    msgs[#msgs + 1] = { key = "hk", value = "x", timestamp = BASE, headers = { { key = text(n, "h"), value = nil } } }
    msgs[#msgs + 1] = { key = "hv", value = "x", timestamp = BASE, headers = { { key = "h", value = text(n, "w") },
      { key = "", value = "" } } }
  end
  for _, n in ipairs { 63, 64 } do
    local hs = {}
    for i = 1, n do hs[i] = { key = "n" .. i, value = i % 2 == 0 and "" or nil } end
    msgs[#msgs + 1] = { key = "hn", value = "x", timestamp = BASE, headers = hs }
  end
  -- offset deltas past 8192 (3 bytes): small records to the edge
  while #msgs < 8200 do msgs[#msgs + 1] = { key = nil, value = "o", timestamp = BASE } end
  return msgs
end

-- Ours with kafka-python's partition leader epoch: it writes 0, Kafka's Java
-- producer -1 (as we do); the field is outside the CRC.
local function as_kafka_python(bytes) return bytes:sub(1, 12) .. "\0\0\0\0" .. bytes:sub(17) end

local function same_messages(want, got)
  assert.are.equal(#want, #got)
  for i = 1, #want do
    local w, g = want[i], got[i]
    if w.key ~= g.key or w.value ~= g.value or w.timestamp ~= g.timestamp or i - 1 ~= g.offset then
      error(("message %d differs: key %s/%s value %s/%s timestamp %s/%s offset %s"):format(i, tostring(w.key and #w.key),
        tostring(g.key and #g.key), tostring(w.value and #w.value), tostring(g.value and #g.value),
        tostring(w.timestamp), tostring(g.timestamp), tostring(g.offset)), 2)
    end
    assert.are.same(w.headers, g.headers)
  end
end

describe("varints at every width edge", function()
  local have = H.have_python()
  it("kafka-python, the independent encoder, is installed", function()
    assert.is_true(have, "install python3-kafka (see .ci/run)")
  end)
  if not have then return end

  local msgs = edge_messages()

  it("the messages cross every width of the zig-zag varint the Lua can hold", function()
    local seen = {}
    for _, m in ipairs(msgs) do seen[width(m.timestamp - BASE)] = true end
    for _, n in ipairs { 63, 64, 8191, 8192, 1048575, 1048576, 8199 } do seen[width(n)] = true end
    local widths = {}
    for w in pairs(seen) do widths[#widths + 1] = w end
    table.sort(widths)
    assert.are.same(int64 and { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 } or { 1, 2, 3, 4, 5, 6, 7, 8 }, widths)
    assert.are.equal(8200, #msgs)
  end)

  local theirs
  local function kafka_python()
    theirs = theirs or H.kp("records_encode", H.kp_pack_msgs(msgs), 2, "none")
    return theirs
  end

  it("proto.encode_records writes kafka-python's bytes exactly", function()
    local ours = proto.encode_records(msgs, { magic = 2, compression = "none" })
    local d = H.bytes_diff(kafka_python(), as_kafka_python(ours), "kafka-python")
    assert(d == nil, d)
  end)

  it("the producer's builder (proto.batch) writes kafka-python's bytes exactly", function()
    local b = proto.batch { magic = 2, compression = "none" }
    for _, m in ipairs(msgs) do b:append(m.value, m.key, m.headers, m.timestamp) end
    local ours = b:encode { base_offset = 0 }
    b:close()
    local d = H.bytes_diff(kafka_python(), as_kafka_python(ours), "kafka-python")
    assert(d == nil, d)
  end)

  it("ours read kafka-python's records, and kafka-python reads ours", function()
    local got, info = proto.decode_records(kafka_python())
    assert(got, info)
    assert.is_nil(info.errors)
    same_messages(msgs, got)
    local back = H.kp_unpack_msgs(H.kp("records_decode", proto.encode_records(msgs, { magic = 2, compression = "none" })))
    same_messages(msgs, back)
  end)

end)

describe("compact strings and lengths at their bounds", function()
  -- a Metadata v12 request whose one topic name is n bytes
  local function metadata(n)
    return proto.encode_request("Metadata", 12, { correlation_id = 7, client_id = "c" },
      { topics = { { topic_id = ("\0"):rep(16), name = text(n, "t") } }, allow_auto_topic_creation = true,
        include_topic_authorized_operations = false })
  end

  it("a compact string of 32767 bytes is written; 32768 is misuse, as Kafka's Java classes refuse it", function()
    local frame = metadata(32767)
    local req = assert(proto.decode_request(frame))
    assert.are.equal(32767, #req.body.topics[1].name)
    -- its length is n + 1 = 32768: the 3-byte varint 80 80 02
    assert.truthy(frame:find("\128\128\2" .. text(32767, "t"), 1, true))
    assert.has_error(function() metadata(32768) end, "string too long for 'topics[1].name'")
  end)

  it("a compact string longer than 32767 read from the wire is corrupt, naming the field and its byte", function()
    local frame = metadata(32767)
    local at = frame:find("\128\128\2", 1, true)
    -- length 32769 (81 80 02) and one byte more, the frame's size fixed
    local body = frame:sub(5, at - 1) .. "\129\128\2" .. text(32768, "t") .. frame:sub(at + 3 + 32767)
    local got, err, code = proto.decode_request(H.pack(">i4", #body) .. body)
    assert.is_nil(got)
    assert.are.equal("corrupt", code)
    -- (bytes counted from the frame's first, its size prefix's: the length is at at - 1)
    assert.are.equal(("string 'topics[1].name' at byte %d is 32768 bytes long, over 32767"):format(at - 1), err)
  end)

  it("a compact length of 2^28 (the 5-byte varint) with few bytes left is truncated, not allocated", function()
    local frame = metadata(1)
    local at = frame:find("\2t", 1, true) -- the name: length 2 (n + 1), "t"
    local body = frame:sub(5, at - 1) .. "\129\128\128\128\1" .. frame:sub(at + 2)
    local got, err, code = proto.decode_request(H.pack(">i4", #body) .. body)
    assert.is_nil(got)
    assert.are.equal("corrupt", code)
    assert.are.equal(("truncated string 'topics[1].name' at byte %d"):format(at - 1), err)
  end)
end)
