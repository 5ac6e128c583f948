-- examples/codec.lua: the codec on its own, no broker needed.
--   lua5.4 examples/codec.lua
-- Builds a Produce request (RecordBatch v2, zstd), decodes it as a broker
-- would, and reads the records back.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/lua5.4/?.so;" .. package.cpath
local proto = require "kafka.proto"

local b = proto.batch { compression = "zstd" }
for i = 1, 5 do
  b:append("hello " .. i, "key-" .. i, { { key = "source", value = "example" } })
end

local frame = proto.encode_request("Produce", 9, { correlation_id = 1, client_id = "example" }, {
  acks = proto.ACKS_ALL, timeout_ms = 5000,
  topic_data = { { name = "demo", partition_data = { { index = 0, records = b:encode() } } } },
})
print(("Produce v9 frame: %d bytes (frame_length says %d)"):format(#frame, proto.frame_length(frame)))

local req = assert(proto.decode_request(frame))
print(("decoded %s v%d from client %q"):format(req.api_name, req.api_version, req.client_id))
for _, m in ipairs(req.body.topic_data[1].partition_data[1].records) do
  print(("  offset %d key %s value %s header %s=%s"):format(m.offset, m.key, m.value, m.headers[1].key, m.headers[1].value))
end

local _, err, code = proto.decode_request(frame:sub(1, 40))
print("a truncated frame: " .. err .. " (" .. code .. ")")
