-- Share consumers as queue workers in nginx (docs/share.md's pattern):
-- Debian's nginx with lua-nginx-module runs spec/nginx/share.conf.in, two
-- worker processes, each with one kafka.share_consumer in a timer loop over
-- cosockets (spec/nginx/share_worker.lua), both in one share group on one
-- topic of a real Kafka broker (share_consumer_spec's broker of its own,
-- 4.4.0 or KAFKA_SHARE_VERSION). Jobs are produced from this process
-- (lua-kafka's producer, luasocket); the workers accept, reject ("poison"),
-- release once ("release") or hold ("hold") them, and log every delivery
-- and acknowledgement outcome in a shared dict read through GET /queue.
-- At `nginx -s quit` each worker's close() releases what it holds: a
-- member in this process gets those records at once, not after their 30 s
-- lock. The first Lua of make test runs it (nginx loads the LuaJIT build).
local H = require "support.helpers"
local rk = require "support.realkafka"
local ngx_h = require "support.nginx"
local kafka = require "kafka"
local share = require "kafka.share_consumer"
local socket = require "socket"

local V = os.getenv("KAFKA_SHARE_VERSION") or "4.4.0"
local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."
if root:sub(1, 1) ~= "/" then root = os.getenv("PWD") .. "/" .. root end

describe("share consumers as queue workers in nginx (two workers, cosockets, Kafka " .. V .. ")", function()
  if not ngx_h.available() then
    pending("nginx with lua-nginx-module (and ab) are not installed: tools/deps.sh")
    return
  end
  if not rk.main() then
    pending("KAFKA_VERSIONS=none: no real broker")
    return
  end
  if H.lite() then
    pending("the first Lua of make test runs it (the share spec's broker of its own)")
    return
  end

  local k, bs, n, client, topic, group
  local N = 60
  local kinds        -- offset -> "job" | "poison" | "release" | "hold"

  -- a fresh topic and share group, and nginx running its two queue workers
  -- on them (mode "loop": one long-lived timer each; "every": ngx.timer.every)
  local function start(mode)
    topic = ("queue-%s-%d-%d"):format(mode, os.time(), math.random(1e6))
    group = "nginx-" .. topic
    kinds = {}
    -- the topic and the group's configs by Java's AdminClient: records from
    -- the earliest offset, each acquisition locked for 30 s
    rk.java({ "create", topic, 1, 1, "+", "alter-config", "group", group, "set", "share.auto.offset.reset",
      "earliest", "+", "alter-config", "group", group, "set", "share.record.lock.duration.ms", "30000" },
      { bootstrap = bs, version = V })
    n = ngx_h.start({ KAFKA_BROKERS = bs, KAFKA_SHARE_TOPIC = topic, KAFKA_SHARE_GROUP = group,
      KAFKA_SHARE_TIMER = mode }, { conf = root .. "/spec/nginx/share.conf.in" })
  end

  setup(function()
    -- the broker share_consumer_spec starts (same name and settings: one broker for both)
    k = rk.cluster(V, 1, V .. "-share", { ["group.share.heartbeat.interval.ms"] = "1000",
      ["group.share.min.heartbeat.interval.ms"] = "1000", ["group.share.min.record.lock.duration.ms"] = "1000" })
    bs = k.bootstrap.PLAINTEXT
    client = kafka.client.new { brokers = bs, client_id = "spec-queue" }
    start("loop")
  end)
  teardown(function()
    if n then n:stop() end
    if client then client:close() end
  end)

  -- The workers' log: recs (offset -> {"dc wid action"...}), acks (wid ->
  -- {ok offsets, errors}), by (wid -> deliveries), states (wid -> state).
  local function queue()
    local q = { recs = {}, acks = { [0] = { 0, 0 }, [1] = { 0, 0 } }, by = { [0] = 0, [1] = 0 }, states = {}, ticks = {}, n = 0 }
    for line in n:get("/queue"):gmatch("[^\n]+") do
      local o, dc, w, a = line:match("^rec (%d+) (%d+) (%d) (%a+)$")
      if o then
        o = tonumber(o)
        q.recs[o] = q.recs[o] or {}
        table.insert(q.recs[o], dc .. " " .. w .. " " .. a)
        q.by[tonumber(w)] = q.by[tonumber(w)] + 1
        q.n = q.n + 1
      end
      local aw, offs, ec = line:match("^ack (%d) (%d+) (%d+)$")
      if aw then
        local x = q.acks[tonumber(aw)]
        if ec == "0" then x[1] = x[1] + tonumber(offs) else x[2] = x[2] + 1 end
      end
      local sw, st = line:match("^state (%d) (%S+)$")
      if sw then q.states[tonumber(sw)] = st end
      local tw, ticks, same = line:match("^ticks (%d) (%d+) (%d+)$")
      if tw then q.ticks[tonumber(tw)] = { tonumber(ticks), tonumber(same) } end
    end
    return q
  end

  -- waits (deadline secs) until ok(q) holds; returns the last q
  local function wait_queue(secs, ok, what)
    local stop, q = socket.gettime() + secs
    repeat
      q = queue()
      if ok(q) then return q end
      socket.sleep(0.1)
    until socket.gettime() > stop
    error(("%s: not within %d s\n%s"):format(what, secs, n:get("/queue")))
  end

  -- the members of the group the coordinator has assigned a partition (ShareGroupDescribe)
  local function assigned_members()
    local conn = assert(client:coordinator(group))
    local resp = assert(conn:request("ShareGroupDescribe", { group_ids = { group }, include_authorized_operations = false }))
    local m = 0
    for _, x in ipairs(resp.groups[1].members or {}) do
      if x.assignment and #(x.assignment.topic_partitions or {}) > 0 then m = m + 1 end
    end
    return m
  end

  -- produces values in batches of 5 (several fetches' worth, so both workers
  -- get some); records each offset's kind
  local function produce(values)
    local p = kafka.producer.new(client, { linger_ms = 0 })
    local of = {} -- message id -> value
    for i = 1, #values, 5 do
      for j = i, math.min(i + 4, #values) do of[assert(p:send(topic, values[j], { key = "k" .. j }))] = values[j] end
      for _, r in ipairs(p:flush(10000)) do
        assert(r.offset, r.err)
        kinds[r.offset] = of[r.id]:match("^%a+")
      end
    end
    p:close()
  end

  -- N jobs (every 10th poison, every 10th released once) through the two
  -- workers: each accepted exactly once, the log clean
  local function jobs(mode)
    -- both workers in the group, each assigned the partition, before any job
    local stop = socket.gettime() + 30
    while assigned_members() < 2 and socket.gettime() < stop do socket.sleep(0.2) end
    assert.are.equal(2, assigned_members())
    local values = {}
    for i = 0, N - 1 do
      values[#values + 1] = ((i % 10 == 3) and "poison " or (i % 10 == 7) and "release " or "job ") .. i
    end
    local t0 = socket.gettime()
    produce(values)
    local releases = N / 10
    local want_acked = N + releases -- each delivery acknowledged once
    local q = wait_queue(30, function(x) return x.acks[0][1] + x.acks[1][1] + x.acks[0][2] + x.acks[1][2] >= want_acked
      and x.n >= want_acked end, "every delivery handled and acknowledged")
    local took = socket.gettime() - t0
    for o = 0, N - 1 do
      local kind = kinds[o]
      local got = {}
      for _, e in ipairs(q.recs[o] or {}) do got[#got + 1] = e:gsub(" %d ", " ") end
      local want = ({ job = { "1 accept" }, poison = { "1 reject" }, release = { "1 release", "2 accept" } })[kind]
      assert.are.same(want, got, ("offset %d (%s)"):format(o, tostring(kind)))
    end
    assert.are.equal(want_acked, q.n)
    assert.are.same({ 0, 0 }, { q.acks[0][2], q.acks[1][2] }, "acknowledgements refused")
    assert.are.equal(want_acked, q.acks[0][1] + q.acks[1][1])
    -- each worker's acknowledgements answered for exactly what it handled
    assert.are.same({ q.by[0], q.by[1] }, { q.acks[0][1], q.acks[1][1] })
    -- (which member a fetch's records go to is the broker's choice; with one
    -- long-lived fetch loop each, both get some: a worker busy with its 5
    -- records leaves the next batch to the other's waiting fetch)
    if mode == "loop" then
      assert.is_true(q.by[0] > 0 and q.by[1] > 0, ("both workers took part: %d and %d"):format(q.by[0], q.by[1]))
    end
    assert.are.same({ [0] = "stable", [1] = "stable" }, q.states)
    if mode == "every" then
      -- kafka.socket tells each tick from the last (nginx gives a worker's
      -- ticks the same request address, tick after tick)
      for w = 0, 1 do
        assert.is_true(q.ticks[w][1] > 1, "ticks")
        assert.are.equal(0, q.ticks[w][2], ("worker %d: ticks taken for the last one's context"):format(w))
      end
    end
    -- (a Lua error in a worker's loop or tick is logged: none)
    assert.is_nil(n:errlog():find("%[error%]"), n:errlog())
    print(("    %s: %d jobs in %.1f s, worker 0 %d deliveries, worker 1 %d"):format(mode, N, took, q.by[0], q.by[1]))
  end

  it("every job accepted exactly once across the two workers, poison rejected, released ones again "
    .. "with delivery_count 2", function()
    jobs("loop")
  end)

  it("nginx -s quit: each worker's close() releases what it holds; a member here gets it at once "
    .. "(delivery_count 2, not after the 30 s lock), nothing else is left for the group", function()
    local H_N = 6
    local n0 = queue().n
    local values = {}
    for i = 1, H_N do values[i] = "hold " .. i end
    produce(values)
    local held = {}
    for o, kind in pairs(kinds) do if kind == "hold" then held[#held + 1] = o end end
    table.sort(held)
    assert.are.equal(H_N, #held)
    local q = wait_queue(20, function(x)
      for _, o in ipairs(held) do if not x.recs[o] then return false end end
      return true
    end, "the hold records delivered")
    local by = { [0] = 0, [1] = 0 }
    for _, o in ipairs(held) do
      assert.are.equal(1, #q.recs[o])
      local w = assert(q.recs[o][1]:match("^1 (%d) hold$"), q.recs[o][1])
      by[tonumber(w)] = by[tonumber(w)] + 1
    end
    -- a member of this process joins: the workers hold everything, it gets nothing
    local acked = {}
    local c = share.new({ brokers = bs, client_id = "spec-queue-after" },
      { group_id = group, share_acknowledgement_mode = "explicit", on_acknowledgement_commit = function(res)
        for _, x in ipairs(res) do acked[#acked + 1] = x.offsets .. " " .. x.error_code end
      end })
    local ok, err = pcall(function()
      c:subscribe { topic }
      local stop = socket.gettime() + 20
      while assigned_members() < 3 and socket.gettime() < stop do assert.are.same({}, assert(c:poll(200))) end
      assert.are.equal(3, assigned_members())
      local t = socket.gettime() + 1
      while socket.gettime() < t do assert.are.same({}, assert(c:poll(200))) end
      -- the workers' log before the quit (nginx stops answering at the quit):
      -- nothing handled twice, nothing beyond the jobs and the holds
      local before = queue()
      assert.are.equal(n0 + H_N, before.n)
      local t0 = socket.gettime()
      assert.is_true(n:quit(20), "nginx did not exit")
      -- each worker says what its close() released: at least what it held
      -- (a worker still polling can take what the other released first:
      -- then it holds that too, and releases it at its own close)
      local log = n:errlog()
      assert.is_nil(log:find("queue worker %d failed"), log)
      local released = {}
      for w = 0, 1 do
        local x = log:match("queue worker " .. w .. " closed: (%b[] %a+)")
        released[w] = by[w] == 0 and x == "[] left" and 0 or tonumber((x or ""):match("^%[" .. topic:gsub("%-", "%%-")
          .. "/0 (%d+) 0%] left$"))
        assert(released[w] and released[w] >= by[w], ("worker %d held %d, its close: %s\n%s"):format(w, by[w],
          tostring(x), log))
      end
      -- the held records come to this member within 10 s of the quit
      -- (their lock: 30 s), each once, its delivery count one more than the
      -- workers' deliveries of it: every one ended in a close's release
      local again, extra = {}, 0
      stop = t0 + 10
      while #again < H_N do
        assert(socket.gettime() < stop, ("the held records did not come back within 10 s: %d of %d")
          :format(#again, H_N))
        for _, r in ipairs(assert(c:poll(200))) do
          again[#again + 1] = r.offset
          assert.is_true(r.delivery_count >= 2, r.offset .. "/" .. r.delivery_count)
          extra = extra + r.delivery_count - 1
          c:acknowledge(r, "accept")
        end
      end
      local back = socket.gettime() - t0
      table.sort(again)
      assert.are.same(held, again)
      assert.are.equal(released[0] + released[1], extra)
      -- nothing else is left: no job, no poison, nothing released twice
      local t2 = socket.gettime() + 2
      while socket.gettime() < t2 do assert.are.same({}, assert(c:poll(300))) end
      -- (its accepts went with those polls)
      c:commit_sync(5000)
      assert.are.same({ H_N .. " 0" }, acked)
      print(("    quit: the workers held %d and %d, released %d and %d, back here %.1f s after the quit")
        :format(by[0], by[1], released[0], released[1], back))
    end)
    c:close()
    assert(ok, err)
  end)

  it("the same with ngx.timer.every (a tick a poll, the acknowledgements committed in the tick), each "
    .. "worker's consumer kept across the ticks; quit closes them", function()
    assert.is_true(n:quit(20), "nginx did not exit")
    n:stop()
    start("every")
    jobs("every")
    assert.is_true(n:quit(20), "nginx did not exit")
    local log = n:errlog()
    for w = 0, 1 do assert.are.equal("[] left", log:match("queue worker " .. w .. " closed: (%b[] %a+)"), log) end
    assert.is_nil(log:find("%[error%]"), log)
  end)
end)
