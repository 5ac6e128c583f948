-- The chaos soak (issue 10) with the default options: faults every ~200 ms
-- on librdkafka's 3-broker mock (a broker down for 300-800 ms, leaders
-- moved, NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS
-- injected on Produce, NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT on Fetch)
-- while SOAK_N (200,000) keyed messages go to 12 partitions and are
-- consumed back, by lua-kafka and by kcat. Exact outcomes: every message
-- delivered (failed == 0), none lost (every id consumed, every report's
-- offset holds its message), none reordered per key. Duplicates are
-- possible without idempotence (a retried request whose answer was lost):
-- counted and printed, not asserted.
local kafka = require "kafka"
local mock = require "support.rdkafka_mock"
local H = require "support.helpers"
local socket = require "socket"

local N = tonumber(os.getenv("SOAK_N")) or (require("support.helpers").lite() and 50000 or 200000)
local PARTS = 12
local KEYS = 1000

local function now() return socket.gettime() * 1000 end

local function have_kcat()
  local ok = os.execute("command -v kcat >/dev/null 2>&1")
  return ok == true or ok == 0
end

describe("chaos soak", function()
  it(("%d keyed messages over %d partitions through faults every ~200 ms, default options"):format(N, PARTS), function()
    local t_start = now()
    local m = mock.start { brokers = 3, topics = { "soak:" .. PARTS } }
    local rng = H.rng(20261201)
    local down, up_at, next_fault = nil, 0, now() + 200
    local faults = { down = 0, leader = 0, produce_err = 0, fetch_err = 0 }
    local chaos = true
    local function tick()
      local t = now()
      if down and t >= up_at then
        m:cmd("up " .. down)
        down = nil
      end
      if not chaos or t < next_fault then return end
      next_fault = t + 150 + rng.int(0, 100)
      local kind = rng.int(1, 4)
      if kind == 1 and not down then
        down = rng.int(1, 3)
        up_at = t + rng.int(300, 800)
        m:cmd("down " .. down)
        faults.down = faults.down + 1
      elseif kind <= 2 then
        local b = rng.int(1, 3)
        if b == down then b = b % 3 + 1 end
        m:cmd(("leader soak %d %d"):format(rng.int(0, PARTS - 1), b))
        faults.leader = faults.leader + 1
      elseif kind == 3 then
        local codes = { 6, 7, 19 } -- NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS
        m:cmd(("err 0 %d %d"):format(codes[rng.int(1, 3)], rng.int(1, 3)))
        faults.produce_err = faults.produce_err + 1
      else
        local codes = { 6, 7 }
        m:cmd(("err 1 %d %d"):format(codes[rng.int(1, 2)], rng.int(1, 2)))
        faults.fetch_err = faults.fetch_err + 1
      end
    end
    local client = kafka.client.new { brokers = m.bootstrap, client_id = "soak", now = now,
      sleep = function(ms)
        socket.sleep(ms / 1000)
        tick()
      end }
    local ok, err = pcall(function()
      -- produce: paced so that the faults land during production (~10 s)
      -- default options but one batch per partition in flight: librdkafka
      -- 2.0's mock takes any sequence number (a batch after a gap, a
      -- duplicate: it checks none), and an idempotent producer's five in
      -- flight keep their order only where the broker refuses a gap, as
      -- Kafka does (spec/eos_spec.lua proves that on kafka.mock and real brokers)
      local p = kafka.producer.new(client, { max_in_flight_requests_per_connection = 1 })
      local key_of = {}
      local chunk = math.max(1, math.floor(N / 200)) -- 200 chunks, ~40 ms apart
      for i = 1, N do
        local key = "k" .. (i % KEYS)
        key_of[i] = key
        assert(p:send("soak", ("#%d"):format(i), { key = key }))
        if i % chunk == 0 then
          tick()
          socket.sleep(0.04)
        end
      end
      local reports, failed, delivered = p:flush()
      local t_produced = now()
      -- consume back through more faults, then without them up to the end of every partition
      local c = kafka.consumer.new(client)
      local a = {}
      for part = 0, PARTS - 1 do a[#a + 1] = { topic = "soak", partition = part, offset = "earliest" } end
      local assigned
      for _ = 1, 50 do
        assigned = c:assign(a)
        if assigned then break end
        client.sleep(100)
      end
      assert(assigned, "assign")
      local at = {}          -- partition -> offset -> id
      local seen, dups, reordered, got = {}, 0, 0, 0
      local last_of_key = {}
      local function take(msgs)
        for _, msg in ipairs(msgs) do
          local id = tonumber(msg.value:sub(2))
          at[msg.partition] = at[msg.partition] or {}
          at[msg.partition][msg.offset] = id
          if seen[id] then
            dups = dups + 1
          else
            seen[id] = true
            got = got + 1
            local k = msg.key
            if key_of[id] ~= k then reordered = reordered + 1 end
            if last_of_key[k] and last_of_key[k] > id then reordered = reordered + 1 end
            last_of_key[k] = id
          end
        end
      end
      local t_chaos_end = now() + 4000
      local poll_errors = 0
      while now() < t_chaos_end and got < N do
        local msgs, _, _, _, errs = c:poll(100)
        if msgs then take(msgs) end
        poll_errors = poll_errors + #(errs or (msgs and msgs.errors) or {})
        tick()
      end
      chaos = false
      while down do
        client.sleep(50)
      end
      local ends = {}
      for part = 0, PARTS - 1 do ends[part] = assert(client:list_offsets("soak", part, "latest")) end
      local deadline = now() + 30000
      while now() < deadline do
        local done = true
        for part = 0, PARTS - 1 do
          if (c:position("soak", part) or 0) < ends[part] then done = false end
        end
        if done then break end
        local msgs = c:poll(200)
        if msgs then take(msgs) end
      end
      -- every report's offset holds its message
      local misplaced = 0
      for _, r in ipairs(reports) do
        if not r.err and not (at[r.partition] and at[r.partition][r.offset] == r.id) then misplaced = misplaced + 1 end
      end
      local lost = N - got
      local kcat_ids
      if have_kcat() then
        -- a kcat read right after the chaos ended early twice in make test
        -- (15,350 and 18,300 of 50,000 ids, our consumer had all; not seen
        -- when the spec runs alone; cause not found): kcat reads again, up
        -- to 3 times, until it has every id; data really missing from the
        -- log stays missing in every read
        local ids = {}
        kcat_ids = 0
        for _ = 1, 3 do
          local f = assert(io.popen(("timeout -k 5 60 kcat -C -b %s -t soak -o beginning -e -q -f '%%s\\n' 2>/dev/null")
            :format(m.bootstrap)))
          for line in f:lines() do
            local id = tonumber(line:sub(2))
            if id and not ids[id] then
              ids[id] = true
              kcat_ids = kcat_ids + 1
            end
          end
          f:close()
          if kcat_ids == N then break end
          io.stderr:write(("  [kcat: %d distinct ids after a read, reading again]\n"):format(kcat_ids))
        end
      end
      print(("\nsoak: %d messages, %d failed, %d delivered, %d lost, %d reordered, %d duplicates, %d misplaced; "
        .. "kcat read %s distinct ids; faults: %d down, %d leader moves, %d produce errors, %d fetch errors; "
        .. "%d partition errors reported by poll; produced in %.1f s, total %.1f s")
        :format(N, failed, delivered, lost, reordered, dups, misplaced, tostring(kcat_ids), faults.down, faults.leader,
          faults.produce_err, faults.fetch_err, poll_errors, (t_produced - t_start) / 1000, (now() - t_start) / 1000))
      assert.are.equal(N, #reports)
      assert.are.equal(0, failed)
      assert.are.equal(N, delivered)
      assert.are.equal(0, lost)
      assert.are.equal(0, reordered)
      assert.are.equal(0, misplaced)
      if kcat_ids then assert.are.equal(N, kcat_ids) end
      assert.is_true(faults.down >= 5 and faults.leader >= 5 and faults.produce_err >= 5)
    end)
    client:close()
    m:stop()
    assert(ok, err)
  end)
end)
