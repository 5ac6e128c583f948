-- examples/demo.lua: what `make demo` runs. Starts a real Apache Kafka
-- 4.1.2 broker (KRaft, from Maven Central's jars: spec/support/kafka/)
-- unless KAFKA_BROKERS names a cluster (or KAFKA_DEMO=mock asks for
-- librdkafka's mock cluster of 3 brokers), then produces 10,000 messages
-- with each codec and consumes them back.
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = "build/lua5.4/?.so;" .. package.cpath
local kafka = require "kafka"
local socket = require "socket"

local brokers, mock = os.getenv("KAFKA_BROKERS"), nil
if (not brokers or brokers == "") and os.getenv("KAFKA_DEMO") == "mock" then
  mock = require("support.rdkafka_mock").start { brokers = 3 }
  brokers = mock.bootstrap
  print("started librdkafka's mock cluster: " .. brokers)
elseif not brokers or brokers == "" then
  local rk = require "support.realkafka"
  local t = socket.gettime()
  brokers = rk.cluster(rk.MAIN, 1).bootstrap.PLAINTEXT
  print(("started Apache Kafka %s (KRaft, one node) in %.1f s: %s"):format(rk.MAIN, socket.gettime() - t, brokers))
else
  print("using KAFKA_BROKERS=" .. brokers)
end

local N = 10000
local client = kafka.client.new { brokers = brokers, client_id = "lua-kafka-demo" }
local run = ("%x"):format(os.time())
print(("%-8s %10s %10s %12s %12s %9s"):format("codec", "produced", "consumed", "produce/s", "consume/s", "failed"))
local ok_all = true
for _, codec in ipairs { "none", "gzip", "snappy", "lz4", "zstd" } do
  local topic = "demo-" .. codec .. "-" .. run
  local p = kafka.producer.new(client, { compression = codec })
  local t0 = socket.gettime()
  for i = 1, N do
    assert(p:send(topic, ("demo message %05d "):format(i) .. ("payload "):rep(10), { key = "k" .. (i % 100) }))
  end
  local reports, failed = p:flush()
  local t1 = socket.gettime()
  local c = kafka.consumer.new(client, { auto_offset_reset = "earliest" })
  local parts = {}
  for i = 0, assert(client:partitions(topic)) - 1 do parts[#parts + 1] = { topic = topic, partition = i, offset = "earliest" } end
  assert(c:assign(parts))
  local got, idle = 0, 0
  while got < N - failed and idle < 20 do
    local msgs = assert(c:poll(250))
    got = got + #msgs
    idle = #msgs == 0 and idle + 1 or 0
  end
  local t2 = socket.gettime()
  print(("%-8s %10d %10d %12.0f %12.0f %9d"):format(codec, #reports - failed, got, N / (t1 - t0), got / (t2 - t1), failed))
  ok_all = ok_all and failed == 0 and got == N
end
client:close()
if mock then mock:stop() end
print(ok_all and "all messages produced and consumed back" or "SOME MESSAGES WERE NOT DELIVERED")
os.exit(ok_all and 0 or 1, true) -- closing the state stops the broker started here
