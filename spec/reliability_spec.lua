-- The client keeps its promises under faults, slow brokers and misuse
-- (issue 10): time-bounded delivery, paced retries, reconnects as soon as a
-- broker is back, no downgrade on one dropped connection, honest polls,
-- timeouts that hold, frames checked before they are read, misuse caught
-- at the door, callback errors contained. Against librdkafka's mock
-- cluster (3 brokers), the misbehaving broker and scripted sockets.
local kafka = require "kafka"
local mock = require "support.rdkafka_mock"
local H = require "support.helpers"
local socket = require "socket"
local proto = kafka.proto

local function gettime() return socket.gettime() * 1000 end

-- A scripted transport: behave(n, req) answers request req on the n-th
-- connection with a frame, or "close" to drop the connection.
local function scripted(behave)
  local conns = 0
  return function()
    conns = conns + 1
    local n, inbox, closed = conns, {}, false
    local s = {}
    function s.settimeout() end
    function s.connect() return true end
    function s.close() closed = true end
    function s.send(_, data)
      if closed then return nil, "closed" end
      local req = assert(proto.decode_request(data))
      local r = behave(n, req)
      if r == "close" then closed = true else inbox[#inbox + 1] = r end
      return #data
    end
    function s.receive(_, k)
      local buf = inbox[1]
      if not buf then return nil, "closed", "" end
      local out = buf:sub(1, k)
      inbox[1] = buf:sub(k + 1)
      if inbox[1] == "" then table.remove(inbox, 1) end
      if #out < k then return nil, "closed", out end
      return out
    end
    return s
  end, function() return conns end
end

local function api_versions_ok(req)
  local keys = {}
  for _, k in ipairs({ 0, 1, 2, 3, 18 }) do
    local lo, hi = proto.versions(k)
    keys[#keys + 1] = { api_key = k, min_version = lo, max_version = math.min(hi, k == 18 and 3 or 7) }
  end
  return proto.encode_response(18, req.api_version, req.correlation_id, { error_code = 0, api_keys = keys })
end

describe("reliability", function()
  local m
  setup(function()
    m = mock.start { brokers = 3, topics = {} }
  end)
  teardown(function()
    m:stop()
  end)

  -- a client whose sleep can run the fault schedule (the tests are single-threaded)
  local function client_with(opts, on_sleep)
    opts = opts or {}
    opts.brokers = m.bootstrap
    opts.now = gettime
    opts.sleep = function(ms)
      socket.sleep(ms / 1000)
      if on_sleep then on_sleep() end
    end
    return kafka.client.new(opts)
  end

  local function leaders(topic, n)
    m:cmd(("topic %s %d"):format(topic, n))
    for p = 0, n - 1 do m:cmd(("leader %s %d %d"):format(topic, p, p % 3 + 1)) end
  end

  describe("1: delivery is bounded by time, not a count of retries", function()
    it("a 600 ms outage of a leader fails nothing with the default options", function()
      leaders("outage", 3)
      local down_at
      local client = client_with({}, function()
        if down_at and gettime() - down_at >= 600 then
          m:cmd("up 2")
          down_at = nil
        end
      end)
      local p = kafka.producer.new(client)
      for i = 1, 3000 do assert(p:send("outage", "v" .. i, { key = "k" .. i })) end
      assert.are.equal(0, select(2, p:flush()))
      m:cmd("down 2")
      down_at = gettime()
      for i = 1, 3000 do assert(p:send("outage", "w" .. i, { key = "k" .. i })) end
      local reports, failed, delivered = p:flush()
      assert.is_nil(down_at) -- the outage happened during the flush and ended
      assert.are.equal(0, failed)
      assert.are.equal(3000, delivered)
      assert.are.equal(3000, #reports)
      client:close()
    end)

    it("retries until delivery_timeout_ms however many attempts that takes; max_retries is an optional cap", function()
      leaders("retrytime", 3)
      local down_at
      local client = client_with({ reconnect_backoff_ms = 0 }, function()
        if down_at and gettime() - down_at >= 800 then
          m:cmd("up 3")
          down_at = nil
        end
      end)
      local p = kafka.producer.new(client, { retry_backoff_ms = 10, retry_backoff_max_ms = 10 })
      assert(p:send_sync("retrytime", "warm", { partition = 2 }))
      m:cmd("down 3")
      down_at = gettime()
      for i = 1, 30 do assert(p:send("retrytime", "v" .. i, { partition = 2 })) end
      local _, failed = p:flush()
      assert.are.equal(0, failed) -- dozens of attempts in 800 ms, none failed for a count
      -- the cap still works, and the deadline fails what it must
      local capped = kafka.producer.new(client, { max_retries = 2, retry_backoff_ms = 10 })
      local timed = kafka.producer.new(client, { delivery_timeout_ms = 300, retry_backoff_ms = 10 })
      m:cmd("down 3")
      assert(capped:send("retrytime", "x", { partition = 2 }))
      local reports
      reports, failed = capped:flush()
      assert.are.equal(1, failed)
      assert.matches("after 3 attempts", reports[1].err)
      assert(timed:send("retrytime", "y", { partition = 2 }))
      local t0 = gettime()
      reports, failed = timed:flush()
      assert.are.equal(1, failed)
      assert.are.equal("timeout", reports[1].code)
      assert.matches("delivery_timeout_ms %(300%) expired", reports[1].err)
      assert.is_true(gettime() - t0 < 300 + 1000)
      m:cmd("up 3")
      client:close()
    end)
  end)

  describe("2: retries started from send() are paced", function()
    it("linger-triggered rounds do not resend a batch before its backoff", function()
      leaders("paced", 3)
      local client = client_with { reconnect_backoff_ms = 0 }
      local fails = {}
      local p = kafka.producer.new(client, { linger_ms = 0, max_retries = 3, retry_backoff_ms = 100,
        on_delivery = function(r) if r.err then fails[#fails + 1] = gettime() end end })
      assert(p:send_sync("paced", "warm", { partition = 1 }))
      m:cmd("down 2")
      local t0 = gettime()
      local n = 0
      -- 400 ms of sends, each 64th one starts a round (linger 0): without
      -- pacing the 3 retries are used up within milliseconds
      while gettime() - t0 < 400 do
        n = n + 1
        assert(p:send("paced", "v" .. n, { partition = 1 }))
        if n % 64 == 0 then socket.sleep(0.002) end
      end
      assert.are.equal(0, #fails) -- the earliest possible failure: 100 + 200 + 400 ms of backoff
      m:cmd("up 2")
      local _, failed = p:flush()
      assert.are.equal(0, failed)
      client:close()
    end)
  end)

  describe("2b: the client's retry service waits exactly its backoff", function()
    it("retry_backoff_ms doubling per attempt up to retry_backoff_max_ms; max_retries counts attempts", function()
      local t, waits = 0, {}
      local client = kafka.client.new { brokers = { "127.0.0.1:1" }, retry_backoff_ms = 10, retry_backoff_max_ms = 50,
        now = function() return t end, sleep = function(ms) waits[#waits + 1] = ms; t = t + ms end }
      local n = 0
      local res = client:call(function(_, attempt)
        n = n + 1
        assert.are.equal(n, attempt)
        if n < 7 then return nil, "not yet", "retriable" end
        return "done"
      end)
      assert.are.equal("done", res)
      assert.are.same({ 10, 20, 40, 50, 50, 50 }, waits)
      -- max_retries = 2: three attempts, two waits, then the last error
      waits, n = {}, 0
      local ok, err, code = client:call(function()
        n = n + 1
        return nil, "still not", "retriable"
      end, { max_retries = 2 })
      assert.is_nil(ok)
      assert.are.equal("still not", err)
      assert.are.equal("retriable", code)
      assert.are.equal(3, n)
      assert.are.same({ 10, 20 }, waits)
      client:close()
    end)
  end)

  describe("2c: the producer's retries wait exactly their backoff, capped (injected clock)", function()
    -- kafka.mock in-process on a virtual clock shared with the client: a
    -- request takes no time, so the Produce attempts' times are the waits
    local function produce_times(popts, fails)
      local kmock = require "kafka.mock"
      local t = 0
      local now, sleep = function() return t end, function(ms) t = t + ms end
      local cluster = kmock.new { brokers = 1, topics = { t = 1 }, now = now, sleep = sleep }
      local factory, times = cluster:socket_factory(), {}
      local function socket_with_log(...)
        local s = factory(...)
        local send = s.send
        s.send = function(self, data, ...)
          local req = proto.decode_request(tostring(data))
          if req and req.api_name == "Produce" then times[#times + 1] = t end
          return send(self, data, ...)
        end
        return s
      end
      local client = kafka.client.new { brokers = cluster:bootstrap(), socket = socket_with_log, now = now,
        sleep = sleep }
      local p = kafka.producer.new(client, popts)
      cluster:fail("Produce", proto.errors.NOT_LEADER_OR_FOLLOWER, fails)
      local res = { p:send_sync("t", "v") }
      client:close()
      cluster:close()
      return times, res
    end

    it("retry_backoff_ms doubling per attempt up to retry_backoff_max_ms", function()
      local times, res = produce_times({ retry_backoff_ms = 10, retry_backoff_max_ms = 50 }, 6)
      assert.are.same({ 0, 0 }, res) -- partition 0, offset 0
      -- waits 10, 20, 40, then 50 (the cap) three times
      assert.are.same({ 0, 10, 30, 70, 120, 170, 220 }, times)
    end)

    it("retry_backoff_max_ms defaults to the client's (1000): a refused partition waits milliseconds", function()
      local times, res = produce_times({ retry_backoff_ms = 100 }, 6)
      assert.are.same({ 0, 0 }, res)
      assert.are.same({ 0, 100, 300, 700, 1500, 2500, 3500 }, times)
    end)
  end)

  describe("3: a broker back is used at once; backoff refusals are not attempts", function()
    it("list_offsets with max_retries = 1 waits out a reconnect backoff instead of failing", function()
      leaders("backon", 3)
      local down_at
      local client = client_with({ max_retries = 1, reconnect_backoff_ms = 300, reconnect_backoff_max_ms = 300 },
        function()
          if down_at and gettime() - down_at >= 100 then
            m:cmd("up 1")
            down_at = nil
          end
        end)
      assert.are.equal(0, client:list_offsets("backon", 0, "latest"))
      m:cmd("down 1")
      client.conns[1]:close("spec")        -- as if the client had seen the broker go
      local _, _, code = client:broker(1) -- a failed connect: 300 ms of backoff
      assert.are.equal("network", code)
      down_at = gettime()
      -- the first attempt fails (broker down) and puts it in a 300 ms backoff;
      -- the broker is up again 100 ms later; refusals while in backoff are waits
      local off, err = client:list_offsets("backon", 0, "latest")
      assert.are.equal(0, off, err)
      client:close()
    end)

    it("a broker listed again by fresh metadata is tried at once; backoff grows only with repeated failures", function()
      local client = kafka.client.new { brokers = "127.0.0.1:1", reconnect_backoff_ms = 100,
        reconnect_backoff_max_ms = 1000, now = function() return 0 end }
      client:_apply_metadata { brokers = { { node_id = 1, host = "127.0.0.1", port = 1 } }, topics = {} }
      local _, _, code = client:broker(1)
      assert.are.equal("network", code)
      local c = client.conns[1]
      assert.are.equal(100, client.down_until[c])
      _, _, code = client:broker(1)
      assert.are.equal("backoff", code) -- nothing tried
      client.down_until[c] = -1         -- expired: tried again at once, backoff doubles
      _, _, code = client:broker(1)
      assert.are.equal("network", code)
      assert.are.equal(200, client.down_until[c])
      -- the broker leaves the metadata and comes back: no backoff left
      client:_apply_metadata { brokers = { { node_id = 2, host = "127.0.0.1", port = 1 } }, topics = {} }
      client:_apply_metadata { brokers = { { node_id = 1, host = "127.0.0.1", port = 1 },
        { node_id = 2, host = "127.0.0.1", port = 1 } }, topics = {} }
      _, _, code = client:broker(1)
      assert.are.equal("network", code) -- tried, not refused
      client:close()
    end)
  end)

  describe("4: one dropped connection does not make a broker old", function()
    it("a close during the first ApiVersions is retried on the next connection", function()
      local factory, count = scripted(function(n, req)
        if req.api_key == 18 then
          if n == 1 then return "close" end
          return api_versions_ok(req)
        end
        return proto.encode_response(3, req.api_version, req.correlation_id, { brokers = {}, topics = {} })
      end)
      local c = kafka.connection.new { host = "fake", port = 1, socket = factory }
      local ok, _, code = c:connect()
      -- the probe's fresh connection with ApiVersions v0 is answered: a new broker after all
      assert.is_true(ok, code)
      assert.are.equal(7, c:version("Produce"))
      assert.are.equal(2, count())
      c:close()
      -- and a reconnect negotiates again (nothing persisted from one failure)
      assert(c:connect())
      assert.are.equal(7, c:version("Produce"))
    end)

    it("a broker that closes on every ApiVersions and answers Metadata v0 is spoken to in the old versions", function()
      local factory = scripted(function(_, req)
        if req.api_key == 18 then return "close" end
        return proto.encode_response(3, 0, req.correlation_id, { brokers = {}, topics = {} })
      end)
      local c = kafka.connection.new { host = "fake", port = 1, socket = factory }
      assert(c:connect())
      assert.are.equal(1, c:version("Produce"))
    end)

    it("a broker that closes every connection is a network error, not an old broker", function()
      local factory = scripted(function() return "close" end)
      local c = kafka.connection.new { host = "fake", port = 1, socket = factory }
      local ok, err, code = c:connect()
      assert.is_nil(ok)
      assert.are.equal("network", code)
      assert.is_string(err)
      assert.is_nil(c.broker_versions)
    end)

    it("against the mock: a broker down at the first connect, then up: Produce v3+ with headers", function()
      leaders("fresh", 3)
      m:cmd("down 1")
      m:cmd("down 2")
      m:cmd("down 3")
      local up = false
      local client = client_with({}, function()
        if not up then
          m:cmd("up -1")
          up = true
        end
      end)
      local part, off = nil, nil
      local ok, err = pcall(function()
        -- the first metadata attempt meets closed connections; the next succeeds
        assert(client:metadata { "fresh" })
        local p = kafka.producer.new(client)
        part, off = p:send_sync("fresh", "v", { partition = 0, headers = { h = "x" } })
      end)
      m:cmd("up -1")
      assert(ok, err)
      assert.are.equal(0, part, off)
      assert.is_true(client:broker(1):version("Produce") >= 3)
      client:close()
    end)
  end)

  describe("5 and 6: poll reports what it could not fetch", function()
    it("every broker down: nil, err, code and one error per partition, in bounded time", function()
      leaders("alldown", 3)
      local client = client_with { reconnect_backoff_ms = 20 }
      local c = kafka.consumer.new(client)
      assert(c:assign { { topic = "alldown", partition = 0, offset = 0 }, { topic = "alldown", partition = 1, offset = 0 },
        { topic = "alldown", partition = 2, offset = 0 } })
      assert(c:poll(50))
      m:cmd("down -1")
      local t0 = gettime()
      local got = {}
      for _ = 1, 5 do
        local msgs, err, code, kcode, errs = c:poll(100)
        assert.is_nil(msgs)
        assert.is_string(err)
        assert.is_string(code)
        assert.is_nil(kcode)
        assert.is_table(errs)
        for _, e in ipairs(errs) do
          assert.are.equal("alldown", e.topic)
          got[e.partition] = e.code
        end
      end
      m:cmd("up -1")
      assert.is_true(gettime() - t0 < 5 * (100 + 1000))
      assert.is_string(got[0])
      assert.is_string(got[1])
      assert.is_string(got[2])
      client:close()
    end)

    it("a partition's error comes with the messages of the others (messages.errors)", function()
      m:cmd("topic mixed 2")
      m:cmd("leader mixed 0 1")
      m:cmd("leader mixed 1 1")
      local client = client_with {}
      local p = kafka.producer.new(client)
      for i = 1, 10 do assert(p:send("mixed", "v" .. i, { partition = 0 })) end
      assert.are.equal(0, select(2, p:flush()))
      local c = kafka.consumer.new(client, { auto_offset_reset = "error" })
      assert(c:assign { { topic = "mixed", partition = 0, offset = 0 }, { topic = "mixed", partition = 1, offset = 1000 } })
      local msgs = assert(c:poll(500))
      assert.are.equal(10, #msgs)
      assert.is_table(msgs.errors)
      assert.are.equal(1, #msgs.errors)
      local e = msgs.errors[1]
      assert.are.equal("mixed", e.topic)
      assert.are.equal(1, e.partition)
      assert.are.equal("offset_out_of_range", e.code)
      assert.are.equal(proto.errors.OFFSET_OUT_OF_RANGE, e.kafka_code)
      -- the partition keeps saying so while it stalls (a poll that ends
      -- before the broker's answer, on a loaded machine, has nothing yet)
      local none, err, code
      for _ = 1, 20 do
        none, err, code = c:poll(200)
        if none == nil then break end
        assert.are.equal(0, #none)
      end
      assert.is_nil(none)
      assert.are.equal("offset_out_of_range", code)
      assert.matches("out of range", err)
      client:close()
    end)
  end)

  describe("7: timeouts are deadlines over the whole call", function()
    it("flush(500) and poll(100) hold against a broker 2 s slow; the other broker's partitions go on", function()
      leaders("slow", 2) -- partition 0 on broker 1, partition 1 on broker 2
      local client = client_with {}
      local p = kafka.producer.new(client)
      assert(p:send_sync("slow", "warm", { partition = 0 }))
      assert(p:send_sync("slow", "warm", { partition = 1 }))
      local c = kafka.consumer.new(client)
      assert(c:assign { { topic = "slow", partition = 0, offset = 2 }, { topic = "slow", partition = 1, offset = 1 } })
      m:cmd("rtt 1 2000")
      local ok, err = pcall(function()
        for i = 1, 100 do assert(p:send("slow", "s" .. i, { partition = i % 2 })) end
        local t0 = gettime()
        local reports, failed, delivered = p:flush(500)
        local took = gettime() - t0
        assert.is_true(took < 500 + 1000, "flush(500) took " .. took .. " ms")
        assert.are.equal(100, #reports)
        assert.are.equal(50, failed)
        assert.are.equal(50, delivered)
        for _, r in ipairs(reports) do
          if r.partition == 0 then
            assert.are.equal("timeout", r.code)
            assert.matches("may have been written", r.err)
          end
        end
        local fast, worst = 0, 0
        for _ = 1, 15 do
          t0 = gettime()
          local msgs = c:poll(100) or {}
          worst = math.max(worst, gettime() - t0)
          for _, msg in ipairs(msgs) do if msg.partition == 1 then fast = fast + 1 end end
        end
        assert.is_true(worst < 100 + 1000, "poll(100) took " .. worst .. " ms")
        assert.are.equal(50, fast) -- broker 2's partition is not held up by broker 1
        -- a flush without a timeout waits for the slow broker, but the fast
        -- broker's partition is settled as soon as its own answer is in
        local at = {}
        local p2 = kafka.producer.new(client, { on_delivery = function(r) at[r.partition] = gettime() end })
        for i = 0, 19 do assert(p2:send("slow", "t" .. i, { partition = i % 2 })) end -- the slow one first
        t0 = gettime()
        assert.are.equal(0, select(2, p2:flush()))
        assert.is_true(at[0] - t0 >= 1500, "slow partition settled after " .. (at[0] - t0) .. " ms")
        assert.is_true(at[1] - t0 < 1000, "fast partition settled after " .. (at[1] - t0) .. " ms")
      end)
      m:cmd("rtt 1 0")
      assert(ok, err)
      client:close()
    end)
  end)

  describe("8: a peer that is not Kafka costs nothing", function()
    it("a wrong correlation id is refused before the frame is read", function()
      local proc, port = H.start_bad("huge_wrong_corr")
      -- a frame cap above the declared size: the correlation id is what stops it
      local c = kafka.connection.new { host = "127.0.0.1", port = port, request_timeout_ms = 5000,
        receive_message_max_bytes = 1073741824 }
      collectgarbage()
      local before = collectgarbage("count")
      local t0 = gettime()
      local body, err, code = c:request("ListOffsets", { replica_id = -1, topics = {} })
      assert.is_nil(body)
      assert.are.equal("protocol", code)
      assert.matches("correlation id mismatch", err)
      assert.is_true(gettime() - t0 < 1000)
      assert.is_true(collectgarbage("count") - before < 1024)
      proc:close()
    end)

    it("a frame larger than receive_message_max_bytes is refused on its size prefix", function()
      local proc, port = H.start_bad("huge_frame")
      local cl = kafka.client.new { brokers = { "127.0.0.1:" .. port }, receive_message_max_bytes = 1048576,
        max_retries = 0, request_timeout_ms = 5000 }
      local t0 = gettime()
      local off, err, code = cl:list_offsets("t", 0, "latest")
      assert.is_nil(off)
      assert.are.equal("limit", code)
      assert.matches("exceeds receive_message_max_bytes %(1048576%)", err)
      assert.is_true(gettime() - t0 < 1000)
      cl:close()
      proc:close()
    end)
  end)

  describe("9: misuse is caught at the door", function()
    local fake = { brokers = "127.0.0.1:1" }
    local client = kafka.client.new(fake)
    local cases = {
      { function() kafka.producer.new(client, { acks = "all" }) end,
        'kafka.producer.new: acks must be one of -1, 0, 1 (got "all")' },
      { function() kafka.producer.new(client, { linger_ms = "x" }) end,
        'kafka.producer.new: linger_ms must be an integer >= 0 (got "x")' },
      { function() kafka.producer.new(client, { compression = "brotli" }) end, "compression must be one of" },
      { function() kafka.producer.new(client, { delivery_timeout_ms = 0 }) end, "delivery_timeout_ms must be" },
      { function() kafka.producer.new(client, { on_delivery = 5 }) end, "on_delivery must be a function" },
      { function() kafka.producer.new(5) end, "kafka.producer.new: the first argument must be a kafka.client" },
      { function() kafka.producer.new(client, 5) end, "kafka.producer.new: options must be a table %(got 5%)" },
      { function() kafka.client.new { brokers = "host:" } end, 'brokers%[1%] must be "host:port"' },
      { function() kafka.client.new { brokers = "host:abc" } end, 'brokers%[1%] must be "host:port"' },
      { function() kafka.client.new { brokers = { "h:1", "h:70000" } } end, "brokers%[2%] must be" },
      { function() kafka.client.new { brokers = "h:1", request_timeout_ms = "x" } end,
        'kafka.client.new: request_timeout_ms must be an integer >= 1 (got "x")' },
      { function() kafka.client.new { brokers = "h:1", max_retries = -1 } end, "max_retries must be" },
      { function() kafka.consumer.new(client, { auto_offset_reset = "begin" }) end, "auto_offset_reset must be one of" },
      { function() kafka.consumer.new(client, { fetch_max_wait_ms = 1.5 }) end, "fetch_max_wait_ms must be" },
      { function() kafka.consumer.new(client):assign { topic = "t", partition = 0 } end, "wrap entries in a list" },
      { function() kafka.consumer.new(client):assign { { topic = "t", partition = 0, offset = 1.5 } } end,
        "assign%[1%]%.offset must be an integer >= 0 or" },
      { function() kafka.consumer.new(client):assign { { topic = "t", partition = "0" } } end,
        'assign%[1%]%.partition must be an integer partition >= 0 %(got "0"%)' },
      { function() kafka.consumer.new(client):seek("t", 0, "middle") end, "seek: offset must be" },
      { function() kafka.consumer.new(client, { group_id = "g" }):commit { { topic = "t", partition = 0 } } end,
        "commit%[1%]%.offset must be" },
      { function() kafka.consumer.new(client):poll("x") end, "poll: timeout_ms must be" },
      { function() client:list_offsets("t", 0.5, "latest") end, "list_offsets: partition must be" },
    }
    for i, case in ipairs(cases) do
      it("case " .. i .. ": " .. case[2], function()
        local ok, err = pcall(case[1])
        assert.is_false(ok)
        err = tostring(err)
        assert(err:find(case[2], 1, true) or err:match(case[2]), err)
      end)
    end

    it("send: wrong arguments raise with the argument's name; a missing partition of a real topic is data", function()
      m:cmd("topic door 2")
      local cl = client_with {}
      local p = kafka.producer.new(cl)
      local function raises(pat, ...)
        local args = { ... }
        local ok, err = pcall(function() return p:send(H.table_unpack(args)) end)
        assert.is_false(ok)
        assert.matches(pat, tostring(err))
      end
      raises("send: headers%[\"h\"%] must be a string %(got 5%)", "door", "v", { headers = { h = 5 } })
      raises("send: headers%[1%]%.value must be a string or nil", "door", "v", { headers = { { key = "h", value = {} } } })
      raises("send: partition must be an integer partition >= 0 %(got 0.5%)", "door", "v", { partition = 0.5 })
      raises('send: partition must be an integer partition >= 0 %(got "1"%)', "door", "v", { partition = "1" })
      raises("send: options must be a table", "door", "v", 5)
      raises("send: topic must be a non%-empty string", 5, "v")
      local ok, err, code = p:send("door", "v", { partition = 7 })
      assert.is_nil(ok)
      assert.are.equal("unknown_partition", code)
      assert.matches("has no partition 7", err)
      -- a partition the cluster does not have is not retried: list_offsets answers at once
      local t0 = gettime()
      ok, err, code = cl:list_offsets("door", 9, "latest")
      assert.is_nil(ok)
      assert.are.equal("unknown_partition", code)
      assert.matches("has no partition 9", err)
      assert.is_true(gettime() - t0 < 500)
      cl:close()
    end)
  end)

  describe("10: a raising on_delivery does not lose the batch's other reports", function()
    it("every report is made; the callback error is counted and kept on its report", function()
      m:cmd("topic cb 1")
      local cl = client_with {}
      local seen = {}
      local p = kafka.producer.new(cl, { on_delivery = function(r)
        seen[#seen + 1] = r.id
        if r.id == 3 then error("boom") end
      end })
      for i = 1, 10 do assert(p:send("cb", "v" .. i)) end
      local reports, failed, delivered, cb_errors = p:flush()
      assert.are.equal(10, #seen)
      assert.are.equal(10, #reports)
      assert.are.equal(0, failed)
      assert.are.equal(10, delivered)
      assert.are.equal(1, cb_errors)
      assert.matches("boom", reports[3].callback_error)
      assert.is_nil(reports[4].callback_error)
      assert.are.equal(0, p:buffered())
      assert.are.equal(0, select(4, p:flush()))
      cl:close()
    end)
  end)
end)
