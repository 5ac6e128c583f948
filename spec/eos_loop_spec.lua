-- Exactly-once processing (issue 14) end to end: two consume-transform-
-- produce worker processes (spec/support/eos_worker.lua: a group consumer
-- at read_committed plus a transactional producer, offsets sent with the
-- transaction) on a real broker, killed with SIGKILL inside their
-- transactions and started again with the same transactional_id (which
-- fences the dead instance and aborts its open transaction). The output
-- must hold every input message exactly once for read_committed readers:
-- ours and Kafka's Java client. The loops run in the full tier only
-- (about 17 s each: session timeouts and rebalances), on the main Kafka
-- version only; the require_stable case at the end runs in every tier.
local kafka = require "kafka"
local socket = require "socket"
local H = require "support.helpers"
local rk = require "support.realkafka"
local rt = require "support.realtools"

-- The steps of a run, one input chunk each (after a first one): "sent" and
-- "offsets" kill the first worker to reach that point of a transaction,
-- "moment" kills one at a seeded moment after a BEGIN, "stall" makes one
-- sleep past its session timeout inside a transaction (a zombie member).
-- The consumer protocol's run is shorter (its session timeout is longer).
local PLANS = { classic = { "sent", "offsets", "moment", "stall" },
                consumer = { "sent", "offsets", "stall" } }
local CHUNK, IN_PARTS, OUT_PARTS = 3000, 6, 3

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."

local function sh_ok(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

local function write_file(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- The worker processes of one run: start(slot) (a new incarnation of the
-- slot, same transactional_id), kill(w) (SIGKILL, waits until it is gone),
-- lines(w), reap(w) (a worker that ended by itself), and kill_all() for
-- the end, also on failure.
local function workers(cfg)
  local self = { all = {}, by_slot = {}, incarnation = {} }
  local dir = os.tmpname()
  os.remove(dir)
  assert(sh_ok("mkdir -p " .. dir))
  self.dir = dir
  self.ctl = dir .. "/ctl"
  local parent = assert(H.self_pid(), "no /proc: the workers watch the spec's pid")
  function self.start(slot)
    local inc = (self.incarnation[slot] or 0) + 1
    self.incarnation[slot] = inc
    local tag = ("w%d.%d"):format(slot, inc)
    local w = { slot = slot, tag = tag, out = dir .. "/" .. tag .. ".out", err = dir .. "/" .. tag .. ".err" }
    local args = { cfg.bootstrap, cfg.input, cfg.output, cfg.group, cfg.tid_prefix .. slot, cfg.protocol, tag,
      self.ctl, parent }
    local cmd = ("%s %s %s/spec/support/eos_worker.lua %s >%s 2>%s & echo $! >%s.pid"):format(H.closefds,
      H.lua_interpreter(), root,
      table.concat(args, " "), w.out, w.err, w.out)
    assert(sh_ok(cmd))
    w.pid = assert(read_file(w.out .. ".pid"):match("%d+"), "no worker pid")
    w.mine = H.open_files("self")
    self.all[#self.all + 1] = w
    self.by_slot[slot] = w
    cfg.step_done("started " .. tag .. " (pid " .. w.pid .. ")")
    return w
  end
  function self.alive(w) return H.pid_alive(w.pid) end
  -- a ready worker holds no socket or pipe of the spec (H.closefds): a
  -- pipe's write end held there kept a popen'd peer from its EOF, and a
  -- collection of that peer's handle here waited for the worker (300 s)
  function self.check_files(w)
    local shared = {}
    for what in pairs(H.open_files(w.pid)) do
      if w.mine[what] then shared[#shared + 1] = what .. " (the spec's fd " .. w.mine[what] .. ")" end
    end
    assert.are.same({}, shared, w.tag .. " inherited descriptors of the spec")
  end
  function self.lines(w)
    local t = {}
    for line in read_file(w.out):gmatch("[^\n]+") do t[#t + 1] = line end
    return t
  end
  function self.log(w)
    return ("%s (pid %s):\n%s\nstderr:\n%s"):format(w.tag, w.pid, read_file(w.out), read_file(w.err))
  end
  function self.kill(w)
    sh_ok("kill -9 " .. w.pid .. " 2>/dev/null")
    local deadline = socket.gettime() + 10
    while self.alive(w) and socket.gettime() < deadline do socket.sleep(0.02) end
    assert(not self.alive(w), "worker " .. w.tag .. " outlived SIGKILL")
    w.killed, w.gone = true, true
    cfg.step_done("killed " .. w.tag)
  end
  -- SIGKILL to every worker not known to be gone (a gone one's pid may be
  -- another process's by now)
  function self.kill_all()
    for _, w in ipairs(self.all) do
      if not w.gone then pcall(self.kill, w) end
    end
  end
  -- waits (secs) until a worker that said DONE has exited
  function self.reap(w, secs)
    local deadline = socket.gettime() + secs
    while self.alive(w) and socket.gettime() < deadline do socket.sleep(0.02) end
    if not self.alive(w) then w.gone = true end
  end
  -- the first line of a live worker matching pattern (captures) within secs
  function self.wait_line(list, pattern, secs, from)
    local deadline = socket.gettime() + secs
    repeat
      for _, w in ipairs(list) do
        local ls = self.lines(w)
        for i = (from and from[w] or 0) + 1, #ls do
          local caps = { ls[i]:match(pattern) }
          if caps[1] then
            if caps[1] == "READY" then self.check_files(w) end
            cfg.step_done(w.tag .. ": " .. ls[i])
            return w, caps, i
          end
        end
        if not self.alive(w) then
          w.gone = true
          error("worker exited:\n" .. self.log(w))
        end
      end
      socket.sleep(0.05)
    until socket.gettime() > deadline
    local logs = {}
    for _, w in ipairs(list) do logs[#logs + 1] = self.log(w) end
    error(("no %q from the workers in %d s:\n%s"):format(pattern, secs, table.concat(logs, "\n")))
  end
  function self.cleanup()
    self.kill_all()
    sh_ok("rm -rf " .. dir)
  end
  return self
end

-- every message of topic (read at level) up to the high watermarks taken
-- now: the whole topic, exactly
local function read_all(client, topic, parts, level)
  local c = kafka.consumer.new(client, { auto_offset_reset = "earliest", fetch_max_wait_ms = 100,
    isolation_level = level })
  local list, hw = {}, {}
  for p = 0, parts - 1 do
    list[#list + 1] = { topic = topic, partition = p, offset = "earliest" }
    hw[p] = assert(client:list_offsets(topic, p, "latest"))
  end
  assert(c:assign(list))
  local out = {}
  local deadline = socket.gettime() + 60
  while socket.gettime() < deadline do
    local done = true
    for p = 0, parts - 1 do
      if (c:position(topic, p) or -1) < hw[p] then done = false end
    end
    if done then break end
    for _, m in ipairs(assert(c:poll(200))) do out[#out + 1] = m end
  end
  for p = 0, parts - 1 do
    assert.are.equal(hw[p], c:position(topic, p), ("%s/%d read to its end"):format(topic, p))
  end
  c:close()
  return out
end

-- the group's committed offsets sum, or nil while one is unstable
local function committed_total(client, group, topic, parts)
  local c = kafka.consumer.new(client, { group_id = group })
  local list = {}
  for p = 0, parts - 1 do list[#list + 1] = { topic = topic, partition = p } end
  local got = c:committed(list)
  c:close()
  if not got then return nil end
  local sum = 0
  for _, o in ipairs(got) do sum = sum + math.max(0, o.offset) end
  return sum
end

local function id_counts(values)
  local counts = {}
  for _, v in ipairs(values) do
    local id = tonumber(v:match("^out:(%d+):"))
    counts[id] = (counts[id] or 0) + 1
  end
  return counts
end

-- ids missing and ids seen more than once (the first few of each)
local function exactly_once_problems(counts, N)
  local missing, dup = {}, {}
  for id = 1, N do
    local n = counts[id] or 0
    if n == 0 and #missing < 10 then missing[#missing + 1] = id end
    if n > 1 and #dup < 10 then dup[#dup + 1] = id .. "x" .. n end
  end
  local extra = {}
  for id in pairs(counts) do
    if id < 1 or id > N then extra[#extra + 1] = id end
  end
  return { missing = missing, duplicated = dup, unknown = extra }
end

-- a stall past the session timeout: 3 s (eos_worker.lua's
-- session_timeout_ms) on classic, 6 s (rt.group_session_timeout) on consumer
local STALL_MS = { classic = 5000, consumer = 8000 }

local version = rk.main()
local protocols = { "classic", "consumer" }

describe("exactly-once consume-transform-produce loop on Kafka " .. tostring(version), function()
  if H.lite() or not version then return end
  local k, client
  setup(function()
    k = rk.cluster(version, 1)
    client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-eos-loop" }
  end)
  teardown(function()
    if client then client:close() end
  end)

  for _, protocol in ipairs(protocols) do
    it(("two workers (%s group protocol) killed mid-transaction and restarted: each input once in the output"):format(
      protocol), function()
      local input, output = rt.uniq("eosl-in"), rt.uniq("eosl-out")
      rt.create_topic(client, input, IN_PARTS, 1)
      rt.create_topic(client, output, OUT_PARTS, 1)
      local group = rt.uniq("eosl-g")
      local plan = PLANS[protocol]
      local N = CHUNK * (#plan + 1)
      if protocol == "consumer" then rt.group_session_timeout(client, group, 6000) end
      -- the spec's steps with their times, for a failure's message
      local t0, steps = socket.gettime(), {}
      local function step_done(what) steps[#steps + 1] = ("%6.1f s  %s"):format(socket.gettime() - t0, what) end
      local feed = kafka.producer.new(client, { linger_ms = 5 })
      local fed = 0
      local function produce_chunk()
        for _ = 1, CHUNK do
          fed = fed + 1
          assert(feed:send(input, "in:" .. fed, { partition = fed % IN_PARTS }))
        end
        local reports, failed = feed:flush(60000)
        for _, r in ipairs(reports) do
          if r.err then error(("%d of %d input messages failed, first: %s (%s)"):format(failed, #reports, r.err, r.code)) end
        end
        step_done("input produced to " .. fed)
      end
      local ws = workers { bootstrap = k.bootstrap.PLAINTEXT, input = input, output = output, group = group,
        tid_prefix = rt.uniq("eosl-tid") .. "-", protocol = protocol, step_done = step_done }
      local ok, err = pcall(function()
        produce_chunk()
        ws.start(1)
        ws.start(2)
        ws.wait_line({ ws.by_slot[1], ws.by_slot[2] }, "^READY", 60)
        -- the kills, one per chunk after the first: held at a point inside
        -- a transaction (the first worker there claims the hold), or at a
        -- moment after a BEGIN chosen by a seeded generator
        local rng = H.rng(14)
        local held, stalled = {}, nil
        for step, how in ipairs(plan) do
          local live = { ws.by_slot[1], ws.by_slot[2] }
          local seen = {}
          for _, w in ipairs(live) do seen[w] = #ws.lines(w) end
          local victim
          if how == "stall" then
            -- past the member's session timeout: the group gives its
            -- partitions to the other worker, whose transactions take the
            -- same input; the stalled one's offsets commit is refused (the
            -- coordinator no longer knows the member, KIP-447) and it aborts
            write_file(ws.ctl .. ".hold", "stall " .. STALL_MS[protocol])
            produce_chunk()
            local w, caps, at = ws.wait_line(live, "^STALL (%S+) (%d+)", 60, seen)
            os.remove(ws.ctl .. ".hold." .. w.tag)
            local _, res = ws.wait_line({ w }, "^(%u+) " .. caps[1]:gsub("%p", "%%%0") .. " (.*)", 60,
              { [w] = at })
            stalled = { tag = caps[1], n = tonumber(caps[2]), result = res[1], why = res[2] }
          elseif how == "moment" then
            produce_chunk()
            local w = ws.wait_line(live, "^BEGIN ", 60, seen)
            socket.sleep(rng.int(0, 300) / 1000)
            victim = w
          else
            write_file(ws.ctl .. ".hold", how)
            produce_chunk()
            local w, caps = ws.wait_line(live, "^HOLD (%S+) (%S+) (%d+)", 60, seen)
            assert.are.equal(how, caps[1])
            held[#held + 1] = { tag = caps[2], n = tonumber(caps[3]), step = step }
            victim = w
            os.remove(ws.ctl .. ".hold." .. w.tag)
          end
          if victim then
            ws.kill(victim)
            local again = ws.start(victim.slot)
            ws.wait_line({ again }, "^READY", 60)
          end
        end
        -- every input committed: the group's offsets reach the end of the input
        local deadline = socket.gettime() + 120
        local total
        repeat
          total = committed_total(client, group, input, IN_PARTS)
          if total == N then break end
          socket.sleep(0.2)
        until socket.gettime() > deadline
        assert.are.equal(N, total)
        write_file(ws.ctl .. ".stop", "")
        for _, slot in ipairs { 1, 2 } do
          ws.wait_line({ ws.by_slot[slot] }, "^DONE", 60)
          ws.reap(ws.by_slot[slot], 10)
        end

        -- the committed tags (and their sizes) from the workers' lines
        local committed_n, aborted = {}, {}
        for _, w in ipairs(ws.all) do
          for _, line in ipairs(ws.lines(w)) do
            local t, n = line:match("^COMMIT (%S+) (%d+)")
            if t then committed_n[t] = tonumber(n) end
            t = line:match("^ABORT (%S+)")
            if t then aborted[t] = true end
          end
        end

        local ours = read_all(client, output, OUT_PARTS, "read_committed")
        local values = {}
        for i, m in ipairs(ours) do values[i] = m.value end
        local counts = id_counts(values)
        assert.are.same({ missing = {}, duplicated = {}, unknown = {} }, exactly_once_problems(counts, N))
        assert.are.equal(N, #ours)
        -- whole transactions: each committed round's messages, all of them;
        -- nothing of a round that was not committed (a kill "at a moment"
        -- may have hit after EndTxn, before the COMMIT line)
        local by_tag = {}
        for _, v in ipairs(values) do
          local t = v:match("^out:%d+:(%S+)$")
          by_tag[t] = (by_tag[t] or 0) + 1
        end
        for t, n in pairs(committed_n) do assert.are.equal(n, by_tag[t], "committed round " .. t) end
        for t in pairs(aborted) do assert.is_nil(by_tag[t], "aborted round " .. t) end
        local killed = {}
        for _, w in ipairs(ws.all) do if w.killed then killed[w.tag] = true end end
        for t in pairs(by_tag) do
          assert.is_true(committed_n[t] ~= nil or killed[t:match("^(w%d+%.%d+)%.")] ~= nil, "unknown round " .. t)
        end

        -- the kills hit inside transactions: the held rounds' messages are in
        -- the log (read_uncommitted) and invisible at read_committed
        local all = read_all(client, output, OUT_PARTS, "read_uncommitted")
        local all_by_tag = {}
        for _, m in ipairs(all) do
          local t = m.value:match("^out:%d+:(%S+)$")
          all_by_tag[t] = (all_by_tag[t] or 0) + 1
        end
        local kills = 0
        for _, how in ipairs(plan) do if how == "sent" or how == "offsets" then kills = kills + 1 end end
        assert.are.equal(kills, #held)
        for _, h in ipairs(held) do
          assert.are.equal(h.n, all_by_tag[h.tag], "held round " .. h.tag)
          assert.is_nil(by_tag[h.tag])
        end
        assert.is_true(#all > #ours)
        assert.are.equal("ABORT", stalled.result, stalled.why)
        assert.matches("^abortable TxnOffsetCommit .*: UNKNOWN_MEMBER_ID", stalled.why)
        assert.are.equal(stalled.n, all_by_tag[stalled.tag])
        assert.is_nil(by_tag[stalled.tag])

        -- Kafka's Java client at read_committed reads the same records (once:
        -- the output's transactions look the same with either group protocol)
        if protocol == "classic" then
          local lines = rk.java({ "consume", output, N, 60, "read_committed" }, { bootstrap = k.bootstrap.PLAINTEXT })
          local java, java_pos = {}, {}
          for _, line in ipairs(lines) do
            local part, off, vh = line:match("^REC (%d+) (%d+) %-?%d+ %-?%d+ %S+ (%S+)")
            if vh then
              java[#java + 1] = rk.unhex(vh)
              java_pos[#java_pos + 1] = part .. "/" .. off .. "/" .. java[#java]
            end
          end
          assert.are.same({ missing = {}, duplicated = {}, unknown = {} }, exactly_once_problems(id_counts(java), N))
          assert.are.equal(N, #java)
          local our_pos = {}
          for i, m in ipairs(ours) do our_pos[i] = m.partition .. "/" .. m.offset .. "/" .. m.value end
          assert.are.same(rt.sorted(our_pos), rt.sorted(java_pos))
        end
      end)
      ws.kill_all()
      if not ok then
        local logs = {}
        for _, w in ipairs(ws.all) do logs[#logs + 1] = ws.log(w) end
        ws.cleanup()
        -- the error last: a CI log's tail shows it
        error(("-- worker logs --\n%s\n-- steps --\n%s\n-- failed at %.1f s: %s"):format(table.concat(logs, "\n"),
          table.concat(steps, "\n"), socket.gettime() - t0, tostring(err)), 0)
      end
      ws.cleanup()
    end)
  end
end)

-- KIP-447: offsets a transaction sent but has not ended are not the group's
-- committed offsets yet. A consumer asks with require_stable (as Kafka's
-- Java consumer does) and waits while the transaction is open; without it a
-- member taking over a partition starts from the offset before, reads that
-- transaction's input again once it commits and writes its output twice.
-- Cheap (a second or two): every tier.
describe("committed offsets while a transaction holds offsets for them, on Kafka " .. tostring(version), function()
  if not version then return end
  it("committed() and a member's start position wait for the transaction; then its offsets", function()
    local k = rk.cluster(version, 1)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-eos-stable" }
    local quick = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, default_api_timeout_ms = 1500 }
    local m -- (one finally: busted keeps only the last function given to it)
    finally(function()
      if m then m:close() end
      client:close()
      quick:close()
    end)
    local topic, group = rt.uniq("eosl-stable"), rt.uniq("eosl-stable-g")
    rt.create_topic(client, topic, 1, 1)
    local feed = kafka.producer.new(client)
    for i = 1, 10 do assert(feed:send(topic, "m" .. i)) end
    assert.are.equal(0, select(2, feed:flush()))
    local tp = kafka.producer.new(client, { transactional_id = rt.uniq("tid") })
    assert(tp:init_transactions())
    local tpl = { { topic = topic, partition = 0 } }
    assert(tp:begin_transaction())
    assert(tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 3 } }, group))
    assert(tp:commit_transaction())
    local c = kafka.consumer.new(quick, { group_id = group, isolation_level = "read_committed" })
    assert.are.equal(3, assert(c:committed(tpl))[1].offset) -- the markers may still be on their way: it waits
    assert(tp:begin_transaction())
    assert(tp:send_offsets_to_transaction({ { topic = topic, partition = 0, offset = 7 } }, group))
    local got, err, code, kcode = c:committed(tpl)
    assert.is_nil(got, "committed() returned an offset while a transaction holds one")
    assert.are.equal("kafka", code)
    assert.are.equal(kafka.proto.errors.UNSTABLE_OFFSET_COMMIT, kcode, err)
    -- a group member: no start position while the transaction is open
    m = kafka.consumer.new(client, { group_id = group, isolation_level = "read_committed",
      enable_auto_commit = false, fetch_max_wait_ms = 100 })
    assert(m:subscribe { topic })
    local deadline = socket.gettime() + 30
    while not (m:assignment()[1]) and socket.gettime() < deadline do assert(m:poll(100)) end
    assert.are.equal(1, #m:assignment())
    for _ = 1, 3 do assert.are.same({}, assert(m:poll(100))) end
    assert.is_nil(m:position(topic, 0))
    assert(tp:commit_transaction())
    local msgs = {}
    deadline = socket.gettime() + 30
    while #msgs < 3 and socket.gettime() < deadline do
      for _, x in ipairs(assert(m:poll(100))) do msgs[#msgs + 1] = x.value end
    end
    assert.are.same({ "m8", "m9", "m10" }, msgs)
    assert.are.equal(7, assert(c:committed(tpl))[1].offset)
  end)
end)
