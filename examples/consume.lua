-- examples/consume.lua: read a topic from the beginning and print it.
--   lua5.4 examples/consume.lua [brokers] [topic] [max_messages]
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/lua5.4/?.so;" .. package.cpath
local kafka = require "kafka"

local brokers = (arg[1] and arg[1] ~= "") and arg[1] or os.getenv("KAFKA_BROKERS")
if not brokers then
  io.stderr:write("usage: consume.lua BROKERS [TOPIC] [MAX] (or set KAFKA_BROKERS)\n")
  os.exit(2)
end
local topic, max = arg[2] or "demo", tonumber(arg[3] or 100)

local client = kafka.client.new { brokers = brokers, client_id = "consume-example" }
local consumer = kafka.consumer.new(client, { auto_offset_reset = "earliest" })
local n = assert(client:partitions(topic))
local assignment = {}
for p = 0, n - 1 do assignment[#assignment + 1] = { topic = topic, partition = p, offset = "earliest" } end
assert(consumer:assign(assignment))

local seen, idle = 0, 0
while seen < max and idle < 3 do
  local msgs, err = consumer:poll(1000)
  if not msgs then
    io.stderr:write("poll: ", err, "\n")
    os.exit(1)
  end
  idle = #msgs == 0 and idle + 1 or 0
  for _, m in ipairs(msgs) do
    seen = seen + 1
    if seen <= max then
      print(("%s/%d@%d key=%s value=%s"):format(m.topic, m.partition, m.offset, tostring(m.key), tostring(m.value)))
    end
  end
end
consumer:close()
client:close()
