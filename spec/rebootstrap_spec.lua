-- Rebootstrap (KIP-899, KIP-1102) and the wrong-cluster check of
-- ApiVersions v5 (KIP-1242) against real Kafka 4.4 brokers: a broker's
-- address taken over by a node of another cluster (an IP reused in a cloud,
-- a pod rescheduled) must not receive the first cluster's data. The client
-- names the cluster and node it means in ApiVersions v5; the other
-- cluster's node answers REBOOTSTRAP_REQUIRED, the client forgets the
-- cluster and starts over from its bootstrap brokers.
--
-- The takeover is staged by the client's socket factory (the `socket`
-- option): while it lasts, a connection to cluster A's node address reaches
-- cluster B's node, which has the same node id and the same topic.
local kafka = require "kafka"
local ksocket = require "kafka.socket"
local H = require "support.helpers"
local rk = require "support.realkafka"
local rt = require "support.realtools"

-- the version whose brokers check ApiVersions v5's cluster and node (4.4+)
local V = os.getenv("KAFKA_REBOOTSTRAP_VERSION") or "4.4.0"

if not rk.main() then return end

describe("rebootstrap on a node of another cluster (Kafka " .. V .. ")", function()
  if H.lite() then
    pending("the first Lua of make test runs it (two clusters of their own)")
    return
  end

  local A, B
  setup(function()
    A = rk.cluster(V, 1, "reboot-a", { cluster_id = "lua-kafka-cluster-AAAA" })
    B = rk.cluster(V, 1, "reboot-b", { cluster_id = "lua-kafka-cluster-BBBB" })
  end)

  -- a socket factory: while `to` is set, connecting to `from` reaches `to`;
  -- the takeover ends by itself after `limit` such connections
  local function takeover_factory()
    local t = { redirected = 0, sockets = {}, connects = {} }
    function t.socket()
      local s = ksocket.luasocket_tcp()
      t.sockets[#t.sockets + 1] = s
      local proxy = {}
      function proxy.connect(_, host, port)
        local hp = host .. ":" .. tostring(port)
        t.connects[hp] = (t.connects[hp] or 0) + 1
        if t.to and host .. ":" .. tostring(port) == t.from then
          t.redirected = t.redirected + 1
          if t.redirected >= t.limit then t.to = nil end
          host, port = B.bootstrap.PLAINTEXT:match("^(.-):(%d+)$")
          port = tonumber(port)
        end
        return s:connect(host, port)
      end
      return setmetatable(proxy, { __index = function(_, k)
        local f = s[k]
        if type(f) ~= "function" then return f end
        return function(_, ...) return f(s, ...) end
      end })
    end
    return t
  end

  it("a producer's data never reaches the other cluster; it goes on on its own once the address is back", function()
    local topic = rt.uniq("reboot")
    local admin_a = kafka.client.new { brokers = A.bootstrap.PLAINTEXT }
    local admin_b = kafka.client.new { brokers = B.bootstrap.PLAINTEXT }
    rt.create_topic(admin_a, topic, 1, 1)
    rt.create_topic(admin_b, topic, 1, 1)
    -- bootstrap by name ("localhost"), nodes by the address A advertises
    local port_a = A.bootstrap.PLAINTEXT:match(":(%d+)$")
    local f = takeover_factory()
    f.from, f.limit = "127.0.0.1:" .. port_a, 3
    local client = kafka.client.new { brokers = "localhost:" .. port_a, socket = f.socket }
    local p = kafka.producer.new(client, { linger_ms = 0 })
    assert(p:send(topic, "m1"))
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal("lua-kafka-cluster-AAAA", client.cluster_id)
    assert.are.equal(0, client.rebootstraps)
    -- B takes A's node address; the connections A had are gone
    f.to = true
    for _, s in ipairs(f.sockets) do s:close() end
    assert(p:send(topic, "m2"))
    local reports
    reports, failed = p:flush()
    assert.are.equal(0, failed)
    assert.are.equal(1, #reports)
    assert.are.equal(1, reports[1].offset)
    -- three connections reached B, each refused with REBOOTSTRAP_REQUIRED
    -- and each making the client start over from "localhost"
    assert.are.equal(3, f.redirected)
    assert.are.equal(3, client.rebootstraps)
    assert.are.equal("lua-kafka-cluster-AAAA", client.cluster_id)
    p:close()
    client:close()
    -- Kafka's Java consumer reads A: m1, m2; B's log is empty
    local lines = rk.java({ "consume", topic, 2, 30 }, { bootstrap = A.bootstrap.PLAINTEXT })
    local values = {}
    for _, l in ipairs(lines) do
      local off, value = l:match("^REC 0 (%d+) %-?%d+ %d+ %S+ (%S+) ")
      if off then values[#values + 1] = off .. "=" .. value end
    end
    assert.are.same({ "0=" .. rt.hex("m1"), "1=" .. rt.hex("m2") }, values)
    assert.are.equal(0, admin_b:list_offsets(topic, 0, "latest"))
    admin_a:close()
    admin_b:close()
  end)

  it("metadata_recovery_strategy = \"none\": the client does not start over, the send fails", function()
    local topic = rt.uniq("reboot-none")
    local admin_a = kafka.client.new { brokers = A.bootstrap.PLAINTEXT }
    rt.create_topic(admin_a, topic, 1, 1)
    local port_a = A.bootstrap.PLAINTEXT:match(":(%d+)$")
    local f = takeover_factory()
    f.from, f.limit = "127.0.0.1:" .. port_a, math.huge
    local client = kafka.client.new { brokers = "localhost:" .. port_a, socket = f.socket,
      metadata_recovery_strategy = "none" }
    local p = kafka.producer.new(client, { linger_ms = 0, delivery_timeout_ms = 3000, request_timeout_ms = 1000 })
    assert(p:send(topic, "m1"))
    local _, failed = p:flush()
    assert.are.equal(0, failed)
    f.to = true
    for _, s in ipairs(f.sockets) do s:close() end
    f.connects = {}
    assert(p:send(topic, "m2"))
    local reports
    reports, failed = p:flush()
    assert.are.equal(1, failed)
    assert.are.equal("timeout", reports[1].code)
    assert.are.equal(0, client.rebootstraps)
    -- only A's node address was tried (and reached B), never "localhost"
    assert.are.same({ ["127.0.0.1:" .. port_a] = f.redirected }, f.connects)
    assert.is_true(f.redirected > 0)
    assert.are.equal("lua-kafka-cluster-AAAA", client.cluster_id)
    p:close(0)
    client:close()
    admin_a:close()
  end)
end)
