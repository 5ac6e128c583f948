-- examples/produce.lua: send messages to a topic.
--   lua5.4 examples/produce.lua [brokers] [topic] [count] [compression]
-- brokers default to $KAFKA_BROKERS, e.g. 127.0.0.1:9092,127.0.0.1:9093
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/lua5.4/?.so;" .. package.cpath
local kafka = require "kafka"

local brokers = (arg[1] and arg[1] ~= "") and arg[1] or os.getenv("KAFKA_BROKERS")
if not brokers then
  io.stderr:write("usage: produce.lua BROKERS [TOPIC] [COUNT] [COMPRESSION] (or set KAFKA_BROKERS)\n")
  os.exit(2)
end
local topic, count, codec = arg[2] or "demo", tonumber(arg[3] or 1000), arg[4] or "none"

local producer = kafka.producer.new({ brokers = brokers, client_id = "produce-example" },
  { compression = codec, acks = kafka.proto.ACKS_ALL })
for i = 1, count do
  local ok, err = producer:send(topic, ("message %d"):format(i), { key = "key-" .. (i % 10),
    headers = { { key = "example", value = "produce.lua" } } })
  if not ok then
    io.stderr:write("send failed: ", err, "\n")
    os.exit(1)
  end
end
local reports, failed = producer:close()
print(("%d messages to %s (%s): %d delivered, %d failed"):format(count, topic, codec, #reports - failed, failed))
for _, r in ipairs(reports) do
  if r.err then print("  message " .. r.id .. ": " .. r.err) end
end
os.exit(failed == 0 and 0 or 1)
