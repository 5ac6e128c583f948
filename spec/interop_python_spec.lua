-- Cross-checks with an independent implementation: kafka-python (Debian's
-- python3-kafka, run with /usr/bin/python3), in both directions.
local proto = require "kafka.proto"
local gen = require "support.gen"
local H = require "support.helpers"

local pack_msgs, unpack_msgs = H.kp_pack_msgs, H.kp_unpack_msgs

local function sample(n, magic)
  local t = {}
  for i = 1, n do
    -- values of a few hundred bytes, so codecs really compress
    t[i] = { key = (i % 4 == 0) and nil or ("k" .. i), value = ("payload-%05d "):format(i):rep(20),
             timestamp = magic == 0 and -1 or 1700000000000 + i * 3 }
    if magic == 2 and i % 3 == 0 then t[i].headers = { { key = "trace", value = "t" .. i }, { key = "empty", value = "" } } end
  end
  return t
end

local function compare(want, got, offsets)
  assert.are.equal(#want, #got)
  for i = 1, #want do
    local w, g = want[i], got[i]
    assert.are.equal(w.key, g.key)
    assert.are.equal(w.value, g.value)
    assert.are.equal(w.timestamp, g.timestamp)
    assert.are.equal(offsets and offsets[i] or i - 1, g.offset)
    assert.are.same(w.headers, g.headers)
  end
end

local have = H.have_python()

describe("kafka-python interop", function()
  it("the oracle is installed", function()
    assert.is_true(have, "install python3-kafka python3-snappy python3-lz4 python3-zstandard (see .ci/run)")
  end)
  if not have then return end

  for _, magic in ipairs({ 0, 1, 2 }) do
    for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
      if not (codec == "zstd" and magic < 2) then
        it(("magic %d %s: ours -> kafka-python"):format(magic, codec), function()
          local msgs = sample(60, magic)
          local bytes = proto.encode_records(msgs, { magic = magic, compression = codec })
          compare(msgs, unpack_msgs(H.kp("records_decode", bytes)))
        end)
        it(("magic %d %s: kafka-python -> ours"):format(magic, codec), function()
          local msgs = sample(60, magic)
          local bytes = H.kp("records_encode", pack_msgs(msgs), magic, codec)
          local got, info = proto.decode_records(bytes)
          assert(got, info)
          assert.is_nil(info.errors)
          -- offsets as kafka-python itself reads them: its magic 1 wrapper
          -- carries offset 0, so inner offsets come out as -(n-1)..0
          local offsets = {}
          for i, m in ipairs(unpack_msgs(H.kp("records_decode", bytes))) do offsets[i] = m.offset end
          compare(msgs, got, offsets)
          if codec ~= "none" and magic < 2 then
            assert.are.equal(codec, info.batches[1].compression)
          end
        end)
      end
    end
  end

  it("CRC-32C of every length around the three-stream blocks (3 x 1024 bytes), at every alignment", function()
    local r = H.rng(11)
    local data = r.bytes(100000 + 8)
    local cases, lines = {}, {}
    for _, n in ipairs { 0, 1, 7, 8, 9, 1023, 3071, 3072, 3073, 3079, 3080, 6143, 6144, 6145, 9216, 9223, 100000 } do
      for off = 1, 8, 3 do
        local s = data:sub(off, off + n - 1)
        cases[#cases + 1] = s
        lines[#lines + 1] = #s > 0 and (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) or ""
      end
    end
    local want = {}
    for l in H.kp("crc32c", table.concat(lines, "\n")):gmatch("[^\n]+") do want[#want + 1] = l end
    assert.are.equal(#cases, #want)
    for i, s in ipairs(cases) do
      assert.are.equal(want[i], ("%08x"):format(proto.crc32c(s)), "length " .. #s)
      assert.are.equal(want[i], ("%08x"):format(proto.crc32c(s, "sw")), "length " .. #s .. " (tables)")
    end
  end)

  -- kafka-python 2.0.2's own defects (checked in its source): skip exactly these.
  local known_bad = {
    ["2 request 4"] = "writes current_leader_epoch as int64 (PEERS.md)",
    ["2 request 5"] = "writes current_leader_epoch as int64 (PEERS.md)",
    ["10 response 1"] = "lacks throttle_time_ms (PEERS.md)",
    ["15 response 3"] = "puts authorized_operations after the groups array, not in each group",
    ["32 response 1"] = "types config_source (int8) as a Boolean",
    ["33 response 1"] = "its AlterConfigsResponse list holds AlterConfigsRequest_v1",
    ["37 request 0"] = "nests count and assignment in a struct (a shape our positional form cannot match)",
    ["37 request 1"] = "nests count and assignment in a struct (a shape our positional form cannot match)",
  }
  for v = 7, 11 do known_bad["1 request " .. v] = "uses the String class, not an instance, for forgotten topics" end

  it("request and response bodies of every version kafka-python knows, both directions", function()
    local r = H.rng(99)
    local cases, enc_lines, re_lines = {}, {}, {}
    for key, v, kind in H.kp("list", ""):gmatch("(%d+) (%d+) (%a+)") do
      key, v = tonumber(key), tonumber(v)
      local name = proto.api_name(key)
      local _, _, flex = proto.versions(key)
      if not known_bad[key .. " " .. kind .. " " .. v] and (flex == nil or v < flex) then
        for _ = 1, 3 do
          local body = gen.body(name, v, kind, r, { ascii = true, short = true })
          local frame, hdr
          if kind == "request" then
            frame = proto.encode_request(key, v, { correlation_id = 1, client_id = "c" }, body)
            hdr = 4 + 8 + 3
          else
            frame = proto.encode_response(key, v, 1, body)
            hdr = 8
          end
          local ours = H.hex(frame:sub(hdr + 1))
          cases[#cases + 1] = { what = ("%s %s v%d"):format(name, kind, v), ours = ours }
          enc_lines[#enc_lines + 1] = ("encode %d %d %s %s"):format(key, v, kind, gen.positional(proto.schema(key, kind), body, v))
          re_lines[#re_lines + 1] = ("reencode %d %d %s %s"):format(key, v, kind, ours)
        end
      end
    end
    local enc = H.kp("bodies", table.concat(enc_lines, "\n"))
    local re = H.kp("bodies", table.concat(re_lines, "\n"))
    local bad, i = {}, 0
    local re_it = re:gmatch("[^\n]+")
    for line in enc:gmatch("[^\n]+") do
      i = i + 1
      local c, again = cases[i], re_it()
      if line ~= "ok " .. c.ours then
        local theirs = line:match("^ok (%x*)$")
        if theirs then
          local at = 1
          while theirs:sub(at, at) == c.ours:sub(at, at) do at = at + 1 end
          at = at - (at - 1) % 2
          bad[#bad + 1] = ("%s: bodies differ at byte %d: ours %s, theirs %s"):format(c.what, math.floor((at - 1) / 2),
            c.ours:sub(at, at + 40), theirs:sub(at, at + 40))
        else
          bad[#bad + 1] = c.what .. ": " .. line:sub(1, 200)
        end
      end
      if again ~= "ok " .. c.ours then bad[#bad + 1] = c.what .. " reencode: " .. tostring(again):sub(1, 200) end
    end
    assert.are.equal(#cases, i)
    assert(#bad == 0, #bad .. " disagreements:\n" .. table.concat(bad, "\n"))
    assert.is_true(#cases > 200, "checked " .. #cases)
  end)
end)
