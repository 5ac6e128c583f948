-- A 3-node Kafka cluster (the first of KAFKA_VERSIONS): a topic with
-- replication factor 3 and min.insync.replicas 2, a producer (acks=all)
-- and a consumer working while the leader of a partition is killed with
-- SIGKILL and restarted, then another node is stopped for longer than
-- request_timeout_ms. Nothing acknowledged is lost, every message sent has
-- one report, order per partition holds, the consumer goes on by itself.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local socket = require "socket"
local slow_it = require("support.helpers").min() and pending or it -- see helpers.min()

local versions = rk.versions()
if #versions > 0 then
  describe("a 3-node Kafka " .. versions[1] .. " cluster", function()
    local k, client

    setup(function()
      k = rk.cluster(versions[1], 3)
      client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, request_timeout_ms = 4000,
        connect_timeout_ms = 1000, reconnect_backoff_max_ms = 1000 }
    end)

    teardown(function()
      if client then client:close() end
      -- leave every node running for the next spec, also after a failure
      if k then
        for i = 1, 3 do
          if not os.execute(("kill -0 $(cat %s/node%d/pid) 2>/dev/null"):format(k.dir, i)) then pcall(k.restart, k, i) end
        end
      end
    end)

    slow_it("loses nothing acknowledged while brokers are killed and restarted", function()
      local topic = rt.uniq("failover")
      local P = 6
      rt.create_topic(client, topic, P, 3, { ["min.insync.replicas"] = 2 })
      local victim = client:leader(topic, 0)
      local other = victim % 3 + 1
      local p = kafka.producer.new(client, { acks = -1, linger_ms = 5 }) -- default delivery_timeout_ms
      local c = kafka.consumer.new(client, { auto_offset_reset = "earliest", fetch_max_wait_ms = 100 })
      local list = {}
      for i = 0, P - 1 do list[#list + 1] = { topic = topic, partition = i, offset = "earliest" } end
      c:assign(list)
      local live = {}        -- id -> times the live consumer saw it
      local live_order = {}  -- partition -> ids in consumed order
      for i = 0, P - 1 do live_order[i] = {} end
      local function take(ms)
        for _, m in ipairs(ms or {}) do
          local id = tonumber(m.value:match("^m(%d+)$"))
          live[id] = (live[id] or 0) + 1
          local o = live_order[m.partition]
          o[#o + 1] = id
        end
      end
      local sent, acked = 0, {}
      local n_acked, n_failed = 0, 0
      local function settle(reports)
        for _, r in ipairs(reports) do
          if r.err then n_failed = n_failed + 1 else acked[r.id] = r; n_acked = n_acked + 1 end
        end
      end
      local moved
      local events = { [8] = function() k:kill(victim) end,
        [21] = function() client:invalidate(topic); moved = client:leader(topic, 0) end,
        [22] = function() k:restart(victim) end,
        [30] = function() k:kill(other) end }
      local killed_at
      local start = socket.gettime()
      for round = 1, 60 do
        if events[round] then events[round]() end
        if round == 30 then killed_at = socket.gettime() end
        for _ = 1, 100 do
          sent = sent + 1
          local id = assert(p:send(topic, "m" .. sent, { key = "key" .. (sent % 50) }))
          assert.equal(sent, id)
        end
        settle(p:flush(30000))
        take(c:poll(100))
        -- the second node stays down for longer than request_timeout_ms (4 s)
        if killed_at and socket.gettime() - killed_at > 6 then k:restart(other); killed_at = nil end
      end
      if killed_at then k:restart(other) end
      settle(p:flush(30000))
      -- the kill moved the leadership of partition 0 away from the victim
      assert.is_number(moved)
      assert.are_not.equal(victim, moved)
      -- every message has one report, and with the default delivery
      -- timeout (120 s) none failed: the outages were shorter
      assert.equal(sent, n_acked + n_failed)
      assert.equal(0, n_failed)
      -- the live consumer went on by itself: it gets every acknowledged message
      local deadline = socket.gettime() + 60
      local missing
      repeat
        take(c:poll(200))
        missing = 0
        for id in pairs(acked) do if not live[id] then missing = missing + 1 end end
      until missing == 0 or socket.gettime() > deadline
      assert.equal(0, missing)
      -- order per partition: apart from whole batches written twice, ids rise
      local dups = 0
      for part = 0, P - 1 do
        local seen, last = {}, 0
        for _, id in ipairs(live_order[part]) do
          if seen[id] then dups = dups + 1 else
            assert.is_true(id > last, ("partition %d: %d after %d"):format(part, id, last))
            seen[id], last = true, id
          end
          if acked[id] then assert.equal(part, acked[id].partition) end
        end
      end
      -- a fresh consumer reads the same log from the start
      local by, total = rt.consume_all(client, topic, P, n_acked + dups, { seconds = 60 })
      local fresh = {}
      for part = 0, P - 1 do for _, m in ipairs(by[part]) do fresh[tonumber(m.value:match("^m(%d+)$"))] = true end end
      for id in pairs(acked) do assert.truthy(fresh[id], "acked message " .. id .. " is not in the log") end
      print(("\n  failover: %d sent, %d acknowledged, %d failed, %d written twice, %d in the log, %.1f s")
        :format(sent, n_acked, n_failed, dups, total, socket.gettime() - start))
      p:close()
      c:close()
    end)
  end)
end
