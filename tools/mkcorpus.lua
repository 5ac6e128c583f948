-- Writes the fuzzers' seed corpus (fuzz/corpus/) from golden frames and
-- records made by the codec itself and the spec generator.
--   make corpus   (runs: lua5.4 tools/mkcorpus.lua fuzz/corpus)
local proto = require "kafka.proto"
local gen = require "support.gen"
local H = require "support.helpers"

local dir = arg[1] or "fuzz/corpus"
local function write(sub, name, data)
  os.execute("mkdir -p " .. dir .. "/" .. sub)
  local f = assert(io.open(dir .. "/" .. sub .. "/" .. name, "wb"))
  f:write(data)
  f:close()
end

local r = H.rng(2024)
for i, a in ipairs(proto.apis()) do
  for _, v in ipairs({ a.min, a.max }) do
    local req = proto.encode_request(a.key, v, { correlation_id = 1, client_id = "fuzz" },
      gen.body(a.key, v, "request", r, { short = true }))
    write("request", ("%s-v%d"):format(a.name, v), req)
    local resp = proto.encode_response(a.key, v, 1, gen.body(a.key, v, "response", r, { short = true }))
    -- the response harness takes: api index, version index, then the frame without its size
    write("response", ("%s-v%d"):format(a.name, v), string.char(i - 1, v - a.min) .. resp:sub(5))
  end
end

-- data structures: the response harness's indexes past the apis, then the
-- version-prefixed structure
local napis = #proto.apis()
for j, d in ipairs(require("kafka.core").datas()) do
  for _, v in ipairs({ d.min, d.max }) do
    local b = require("kafka.core").encode_data(d.name, v, (gen.body(d.name, v, "data", r, { short = true })))
    write("response", ("data-%s-v%d"):format(d.name, v), string.char(napis + j - 1, 0) .. b)
  end
end

local msgs = {
  { key = "k1", value = "hello", timestamp = 1700000000000, headers = { { key = "h", value = "v" } } },
  { value = ("repeated "):rep(20), timestamp = 1700000000001 },
  { key = "", value = nil, timestamp = 1700000000002 },
}
for _, magic in ipairs({ 0, 1, 2 }) do
  for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
    if not (magic < 2 and codec == "zstd") then
      local m = msgs
      if magic < 2 then m = { { key = "k1", value = "hello" }, msgs[2], msgs[3] } end
      local bytes = proto.encode_records(m, { magic = magic, compression = codec, base_offset = 7 })
      write("records", ("m%d-%s"):format(magic, codec), "\0" .. bytes)
      write("records", ("m%d-%s-crc"):format(magic, codec), "\1" .. bytes)
    end
  end
end
write("records", "mixed", "\1" .. proto.encode_records({ { value = "a" } }, { magic = 0 })
  .. proto.encode_records({ { value = "b" } }, { compression = "lz4", base_offset = 1 }))

local text = ("The quick brown fox jumps over the lazy dog. "):rep(10)
for i, codec in ipairs({ "gzip", "snappy", "lz4", "zstd" }) do
  write("decompress", codec, string.char(i - 1) .. proto.compress(codec, text))
end
write("decompress", "lz4-legacy", string.char(2) .. proto.compress("lz4", text, true))
write("decompress", "snappy-xerial", string.char(1) ..
  H.unhex("82534e415050590000000001000000010000000503 08666f6f00000005 0308666f6f"))
