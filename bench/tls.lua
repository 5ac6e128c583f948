-- The cost of TLS and SASL against the real broker (spec/support/realkafka):
-- connection set-up (TCP, TLS, ApiVersions, SASL) and produce/consume rates
-- of N 100-byte messages per security protocol, lua-kafka only.
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;$PWD/spec/?.lua;;" LUA_CPATH="$PWD/build/lua5.4/?.so;;" \
--     lua5.4 bench/tls.lua [N]
local kafka = require "kafka"
local sasl = require "kafka.sasl"
local connection = require "kafka.connection"
local rt = require "support.realtools"
local socket = require "socket"
local rk = require "support.realkafka"
local k = rk.cluster(rk.main() or "4.1.2", 1)
local D, env = k.dir, k.bootstrap
local plain = kafka.client.new { brokers = env.PLAINTEXT }
local cases = {
  { "PLAINTEXT", {} },
  { "SSL", { ssl_ca_location = D .. "/ca.pem" } },
  { "SASL_PLAINTEXT", { sasl_mechanism = "SCRAM-SHA-512", sasl_username = "alice", sasl_password = "alice-secret" } },
  { "SASL_SSL", { sasl_mechanism = "SCRAM-SHA-512", sasl_username = "alice", sasl_password = "alice-secret",
    ssl_ca_location = D .. "/ca.pem" } },
  { "SASL_SSL", { sasl_mechanism = "PLAIN", sasl_username = "alice", sasl_password = "alice-secret",
    ssl_ca_location = D .. "/ca.pem" } },
}
local N = tonumber(arg[1]) or 100000
local val = ("x"):rep(100)
for _, c in ipairs(cases) do
  local o = c[2]
  o.security_protocol = c[1]
  o.brokers = env[c[1]]
  local host, port = o.brokers:match("^(.*):(%d+)$")
  local sec = sasl.config(o)
  -- connection set-up: TCP + TLS + ApiVersions + SASL, 20 times
  local t0 = socket.gettime()
  for _ = 1, 20 do
    local conn = connection.new { host = host, port = port, security = sec }
    assert(conn:connect())
    conn:close()
  end
  local setup_ms = (socket.gettime() - t0) * 1000 / 20
  local topic = rt.uniq("bench")
  rt.create_topic(plain, topic, 1, 1)
  local client = kafka.client.new(o)
  local p = kafka.producer.new(client, { linger_ms = 5, delivery_reports = "errors" })
  t0 = socket.gettime()
  for _ = 1, N do assert(p:send(topic, val)) end
  local _, failed = p:flush()
  local pt = socket.gettime() - t0
  assert(failed == 0)
  t0 = socket.gettime()
  local _, total = rt.consume_all(client, topic, 1, N)
  local ct = socket.gettime() - t0
  assert(total == N)
  print(("%-15s %-14s connect %6.1f ms   produce %7.0f msg/s   consume %7.0f msg/s"):format(c[1], o.sasl_mechanism or "",
    setup_ms, N / pt, N / ct))
  client:close()
end
