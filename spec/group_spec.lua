-- Consumer groups against real Kafka brokers (issue 13): lua-kafka members
-- driven round-robin in one process (each poll with a small timeout) while
-- a producer writes. What is checked, exactly, from the rebalance
-- callbacks' log and the messages each member got:
--   * every message produced is consumed;
--   * a partition has one owner at a time (assign/revoke/lost in order);
--   * duplicates are exactly the messages a crashed member had consumed
--     past its last commit (none from clean leaves and rebalances);
--   * a static member restarts without a rebalance (the others' callbacks
--     stay silent, the generation/epoch does not move);
--   * Java KafkaConsumers (classic range, classic cooperative-sticky,
--     consumer protocol) and lua-kafka members split one group's
--     partitions and consume every message once;
--   * subscribing to a topic created later, and partitions added to it.
-- Classic protocol on every version, KIP-848's consumer protocol on 4.x.
-- Speed (group throughput, rebalance latency) is measured by `make bench`
-- (bench/group.lua, bench/run.lua), never here.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local socket = require "socket"

local PARTS = 12
-- messages arriving at 1500/s during the membership scenarios (fewer on the lite Luas)
local GROUP_N = require("support.helpers").lite() and 15000 or 30000
local full_it = require("support.helpers").lite() and pending or it -- the first Lua only

local function now() return socket.gettime() end

-- A group under test: members by name, the callbacks' log, what was consumed.
local function new_world(client, topic, gid, base_opts, parts)
  local w = { client = client, topic = topic, gid = gid, members = {}, order = {}, log = {}, got = {},
              count = 0, by = {}, crashes = {}, parts = parts or PARTS, poll_errors = 0 }
  local function logger(name, kind)
    return function(_, ps)
      for _, tp in ipairs(ps) do w.log[#w.log + 1] = { member = name, kind = kind, p = tp.partition } end
    end
  end
  function w.add(name, extra)
    local o = {}
    for k, v in pairs(base_opts) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    o.group_id = gid
    o.on_assign, o.on_revoke, o.on_lost = logger(name, "assign"), logger(name, "revoke"), logger(name, "lost")
    local c = kafka.consumer.new(client, o)
    if w.track_commits then
      -- every acknowledged commit goes into the log (what a new owner must
      -- resume from): synchronous and automatic ones both end in _committed
      local committed = c._committed
      c._committed = function(self, list, react, ok, ...)
        if ok then
          for _, x in ipairs(list) do w.log[#w.log + 1] = { member = name, kind = "commit", p = x.partition, offset = x.offset } end
        end
        return committed(self, list, react, ok, ...)
      end
    end
    assert(c:subscribe(o.subscription or { topic }))
    w.members[name] = c
    w.order[#w.order + 1] = name
    return c
  end
  function w.remove(name)
    w.members[name] = nil
    for i, n in ipairs(w.order) do
      if n == name then table.remove(w.order, i) break end
    end
  end
  function w.leave(name)
    w.members[name]:close()
    w.log[#w.log + 1] = { member = name, kind = "closed" }
    w.remove(name)
  end
  -- a crash: no commit, no LeaveGroup; the member's sockets closed
  function w.crash(name)
    local c = w.members[name]
    local owned = c:assignment()
    local committed = assert(c.offsets:committed(owned))
    local crash = {}
    for i, st in ipairs(owned) do
      crash[st.partition] = { from = math.max(committed[i].offset, 0), to = st.offset }
      w.log[#w.log + 1] = { member = name, kind = "crashing: committed", p = st.partition,
                            offset = committed[i].offset .. ", position " .. tostring(st.offset) }
    end
    w.crashes[#w.crashes + 1] = crash
    c.fetcher:close()
    c.group:close_conns()
    w.log[#w.log + 1] = { member = name, kind = "crash" }
    w.remove(name)
  end
  -- redelivered(): every message a crashed member read past its last
  -- commit has been read again (by the partition's next owner)
  function w.redelivered()
    for _, crash in ipairs(w.crashes) do
      for p, r in pairs(crash) do
        for o = r.from, r.to - 1 do
          if (w.got[p .. ":" .. o] or 0) < 2 then return false end
        end
      end
    end
    return true
  end
  function w.poll_all(ms)
    for _, name in ipairs(w.order) do
      local c = w.members[name]
      local msgs, err, code = c:poll(ms)
      if not msgs and code ~= "timeout" then
        -- (w.tolerant: a broker is down, its partitions' fetches fail for a while)
        if not w.tolerant or code == "fenced" or code == "group" then
          error(name .. ": poll: " .. tostring(err) .. " " .. tostring(code))
        end
        w.poll_errors = w.poll_errors + 1
      end
      for _, m in ipairs(msgs or {}) do
        local k = m.partition .. ":" .. m.offset
        if w.track_commits then w.log[#w.log + 1] = { member = name, kind = "msg", p = m.partition, offset = m.offset } end
        w.got[k] = (w.got[k] or 0) + 1
        w.count = w.count + 1
      end
      if msgs and msgs.callback_errors then error(name .. ": " .. msgs.callback_errors[1]) end
    end
  end
  -- drive(secs, until_fn): polls every member in turn (and feeds the producer)
  function w.drive(secs, until_fn)
    local stop = now() + secs
    repeat
      if w.feed then w.feed() end
      w.poll_all(10)
      if until_fn and until_fn() then return true end
    until now() >= stop
    return until_fn == nil
  end
  -- owners() -> {[partition] = member} from the log (asserting one owner at a time)
  function w.owners()
    local owner = {}
    for i, e in ipairs(w.log) do
      if e.kind == "assign" then
        assert(owner[e.p] == nil, ("log %d: %s assigned p%d still owned by %s"):format(i, e.member, e.p,
          tostring(owner[e.p])))
        owner[e.p] = e.member
      elseif e.kind == "revoke" or e.kind == "lost" then
        assert(owner[e.p] == e.member, ("log %d: %s gave up p%d owned by %s"):format(i, e.member, e.p,
          tostring(owner[e.p])))
        owner[e.p] = nil
      elseif e.kind == "crash" or e.kind == "closed" then
        for p, m in pairs(owner) do
          if m == e.member then owner[p] = nil end
        end
      end
    end
    return owner
  end
  function w.balanced(n)
    if #w.order ~= n then return false end
    local total = 0
    for _, name in ipairs(w.order) do
      local c = w.members[name]
      local s = c:group_state()
      if s.state ~= "stable" then return false end
      local a = #c:assignment()
      if a < math.floor(w.parts / n) or a > math.ceil(w.parts / n) then return false end
      total = total + a
    end
    return total == w.parts
  end
  return w
end

-- a producer writing f.total messages (`total`; a spec may lower it) at
-- `rate` per second (nil: as fast as rounds go) while the group runs, so
-- every rebalance happens while messages arrive
local function feeder(client, topic, total, per_round, rate)
  local p = kafka.producer.new(client, { linger_ms = 0 })
  local f = { sent = 0, produced = {}, total = total }
  local t0
  function f.feed()
    if f.sent >= f.total then return end
    t0 = t0 or now()
    local n = math.min(per_round, f.total - f.sent)
    if rate then n = math.min(n, math.floor((now() - t0) * rate) - f.sent) end
    if n <= 0 then return end
    for i = 1, n do assert(p:send(topic, "v" .. (f.sent + i), { key = tostring(f.sent + i) })) end
    f.sent = f.sent + n
    local reports, failed = p:flush()
    assert(failed == 0, "produce failed")
    for _, r in ipairs(reports) do f.produced[r.partition .. ":" .. r.offset] = true end
  end
  return f
end

local function expect_exact(w, produced)
  local missing, dups = {}, {}
  for k in pairs(produced) do
    if not w.got[k] then missing[#missing + 1] = k end
  end
  for k, n in pairs(w.got) do
    assert(produced[k], "consumed a message never produced: " .. k)
    if n > 1 then dups[#dups + 1] = k end
  end
  table.sort(missing)
  table.sort(dups)
  local want = {}
  for _, crash in ipairs(w.crashes) do
    for p, r in pairs(crash) do
      for o = r.from, r.to - 1 do want[#want + 1] = p .. ":" .. o end
    end
  end
  table.sort(want)
  -- (a short message: which keys differ, not two long lists)
  local function diff(a, b)
    local in_b, out = {}, {}
    for _, k in ipairs(b) do in_b[k] = true end
    for _, k in ipairs(a) do if not in_b[k] then out[#out + 1] = k end end
    return out
  end
  assert(#missing == 0, ("%d produced messages never consumed: %s"):format(#missing,
    table.concat(missing, " ", 1, math.min(#missing, 40))))
  local extra, absent = diff(dups, want), diff(want, dups)
  if (#extra > 0 or #absent > 0) and w.track_commits then
    -- what happened to the partitions that differ, in order: who owned,
    -- committed and read what (runs of offsets)
    local seen = {}
    for _, k in ipairs(extra) do seen[tonumber(k:match("^(%d+)"))] = true end
    for _, k in ipairs(absent) do seen[tonumber(k:match("^(%d+)"))] = true end
    for p in pairs(seen) do
      local t, run = {}, nil
      for _, e in ipairs(w.log) do
        if e.kind == "msg" and e.p == p then
          if run and run.member == e.member and run.to + 1 == e.offset then
            run.to = e.offset
          else
            run = { member = e.member, from = e.offset, to = e.offset }
            t[#t + 1] = run
          end
        elseif e.p == p or e.kind == "crash" or e.kind == "closed" then
          run = nil
          t[#t + 1] = e
        end
      end
      local lines = {}
      for _, e in ipairs(t) do
        lines[#lines + 1] = e.kind and (e.member .. " " .. e.kind .. (e.offset and (" " .. e.offset) or ""))
          or (e.member .. " read " .. e.from .. ".." .. e.to)
      end
      io.stderr:write(("partition %d: %s\n"):format(p, table.concat(lines, "; ")))
    end
  end
  assert(#extra == 0 and #absent == 0, ("%d duplicates, %d expected (the crashed members' uncommitted ranges): "
    .. "%d unexpected: %s; %d expected but read once: %s"):format(#dups, #want, #extra,
    table.concat(extra, " ", 1, math.min(#extra, 40)), #absent, table.concat(absent, " ", 1, math.min(#absent, 40))))
  assert.are.same(want, dups)
end

local OPTS = { auto_offset_reset = "earliest", session_timeout_ms = 6000, heartbeat_interval_ms = 300,
               fetch_max_wait_ms = 20, auto_commit_interval_ms = 500, max_poll_records = 500 }

local function scenario(version, protocol, strategy, n)
  n = n or GROUP_N
  return function()
    local k = rk.cluster(version, 1)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, metadata_max_age_ms = 1000 }
    local topic = rt.uniq("grp-" .. protocol)
    rt.create_topic(client, topic, PARTS, 1)
    local o = { group_protocol = protocol, partition_assignment_strategy = strategy }
    for kk, v in pairs(OPTS) do o[kk] = v end
    local gid = rt.uniq("g")
    -- the consumer protocol's crash is noticed after the group's session
    -- timeout: 6 s, as the classic members' session_timeout_ms
    if protocol == "consumer" then rt.group_session_timeout(client, gid, OPTS.session_timeout_ms) end
    local w = new_world(client, topic, gid, o)
    w.track_commits = true -- (a failure tells the story of the partitions that differ)
    local f = feeder(client, topic, n, 300, 2500)
    w.feed = f.feed
    w.add("a")
    assert(w.drive(30, function() return w.balanced(1) end), "a alone")
    w.add("b")
    w.add("c")
    assert(w.drive(30, function() return w.balanced(3) end), "a, b, c")
    w.drive(1)
    w.leave("b")                      -- clean leave: commit, revoke, LeaveGroup
    assert(w.drive(30, function() return w.balanced(2) end), "b left")
    w.add("d")
    assert(w.drive(30, function() return w.balanced(3) end), "d joined")
    w.drive(1)
    w.crash("c")                      -- no LeaveGroup: its session times out
    assert(w.drive(40, function() return w.balanced(2) end), "c crashed")
    -- everything read, and what the crashed member read past its last
    -- commit read again by the partitions' new owners (read once only
    -- when the test stopped too early: that raced in CI)
    assert(w.drive(40, function() return f.sent == f.total and w.count >= f.total and next(w.got) ~= nil
      and (function()
        for key in pairs(f.produced) do if not w.got[key] then return false end end
        return w.redelivered()
      end)() end), "everything consumed, the crashed member's uncommitted messages again")
    local owners = w.owners()
    local nowned = 0
    for _ in pairs(owners) do nowned = nowned + 1 end
    assert.equal(PARTS, nowned)
    expect_exact(w, f.produced)
    for _, name in ipairs(w.order) do w.members[name]:close() end
    client:close()
  end
end

-- A static member restarts without a rebalance.
local function static_restart(version, protocol)
  return function()
    local k = rk.cluster(version, 1)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, metadata_max_age_ms = 1000 }
    local topic = rt.uniq("grp-static")
    rt.create_topic(client, topic, PARTS, 1)
    local o = { group_protocol = protocol }
    for kk, v in pairs(OPTS) do o[kk] = v end
    o.session_timeout_ms = 20000
    local w = new_world(client, topic, rt.uniq("g"), o)
    local f = feeder(client, topic, 6000, 200, 1000)
    w.feed = f.feed
    w.add("a", { group_instance_id = "static-a" })
    w.add("b", { group_instance_id = "static-b" })
    assert(w.drive(30, function() return w.balanced(2) end), "a, b")
    local before = w.members.b:assignment()
    local gen = w.members.a:group_state().generation
    w.leave("b")
    local mark = #w.log
    w.add("b2", { group_instance_id = "static-b" })
    assert(w.drive(20, function() return w.balanced(2) end), "b back")
    assert(w.drive(30, function()
      for key in pairs(f.produced) do if not w.got[key] then return false end end
      return f.sent == f.total
    end), "everything consumed")
    -- the other member saw nothing; b2 got b's partitions back
    for i = mark + 1, #w.log do assert.are_not.equal("a", w.log[i].member) end
    local after = w.members.b2:assignment()
    local pb, pa = {}, {}
    for i, x in ipairs(before) do pb[i] = x.partition end
    for i, x in ipairs(after) do pa[i] = x.partition end
    table.sort(pb)
    table.sort(pa)
    assert.are.same(pb, pa)
    assert.equal(gen, w.members.a:group_state().generation)
    w.owners()
    expect_exact(w, f.produced)
    for _, name in ipairs(w.order) do w.members[name]:close() end
    client:close()
  end
end

-- Java members beside lua-kafka members in one group.
local function mixed(version, java_protocol, lua_protocol, strategy)
  return function()
    local k = rk.cluster(version, 1)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, metadata_max_age_ms = 1000 }
    local topic = rt.uniq("grp-mixed")
    rt.create_topic(client, topic, PARTS, 1)
    local gid = rt.uniq("g")
    local o = { group_protocol = lua_protocol, partition_assignment_strategy = strategy }
    for kk, v in pairs(OPTS) do o[kk] = v end
    local w = new_world(client, topic, gid, o)
    -- 2000 messages a second until 2 s after the three members split (20000 at most)
    local f = feeder(client, topic, 20000, 200, 2000)
    local jv = rk.java_bg({ "group", topic, gid, java_protocol, 90, "%STOP%" }, { bootstrap = k.bootstrap.PLAINTEXT })
    local ok, err = pcall(function()
      -- the Java member first, then two lua-kafka members
      local deadline = now() + 60
      local function java_has(prefix)
        for _, l in ipairs(jv.lines()) do if l:sub(1, #prefix) == prefix then return true end end
      end
      while not java_has("ASSIGNED") and now() < deadline do socket.sleep(0.1) end
      assert(java_has("ASSIGNED"), "the Java member joined")
      w.add("a")
      w.add("b")
      w.feed = f.feed
      local function java_got()
        local n, owned = 0, {}
        for _, l in ipairs(jv.lines()) do
          if l:match("^REC ") then n = n + 1 end
          local a = l:match("^ASSIGNED (.*)$")
          if a then for x in a:gmatch("%d+") do owned[tonumber(x)] = true end end
          local r = l:match("^REVOKED (.*)$") or l:match("^LOST (.*)$")
          if r then for x in r:gmatch("%d+") do owned[tonumber(x)] = nil end end
        end
        local c = 0
        for _ in pairs(owned) do c = c + 1 end
        return n, c
      end
      assert(w.drive(60, function()
        local _, jc = java_got()
        local lc = #w.members.a:assignment() + #w.members.b:assignment()
        return jc == 4 and lc == 8 and w.members.a:group_state().state == "stable"
          and w.members.b:group_state().state == "stable"
      end), "three members split the partitions")
      w.drive(2)
      f.total = f.sent
      assert(w.drive(60, function()
        local jn = java_got()
        return f.sent == f.total and w.count + jn >= f.total
      end), "everything consumed")
      w.drive(1)
      for _, name in ipairs(w.order) do w.members[name]:close() end
      jv.stop()
      local lines = jv.wait(30)
      for _, l in ipairs(lines) do
        local p, off = l:match("^REC (%d+) (%d+)$")
        if p then
          local key = p .. ":" .. off
          w.got[key] = (w.got[key] or 0) + 1
        end
      end
      expect_exact(w, f.produced)
    end)
    if not ok then jv.kill() end
    client:close()
    if not ok then error(err, 0) end
  end
end

-- A subscription to a topic that does not exist yet; partitions added later.
local function later_topic(version, protocol)
  return function()
    local k = rk.cluster(version, 1)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, metadata_max_age_ms = 500 }
    local topic = rt.uniq("grp-later")
    local o = { group_protocol = protocol }
    for kk, v in pairs(OPTS) do o[kk] = v end
    local w = new_world(client, topic, rt.uniq("g"), o)
    w.add("a")
    w.add("b")
    w.drive(2)
    assert.equal(0, #w.members.a:assignment() + #w.members.b:assignment())
    rt.create_topic(client, topic, 4, 1)
    assert(w.drive(30, function()
      return #w.members.a:assignment() + #w.members.b:assignment() == 4
    end), "the new topic's 4 partitions assigned")
    local c = assert(client:any_broker())
    local resp = assert(c:request(kafka.proto.api.CreatePartitions, { topics = { { name = topic, count = 8 } },
      timeout_ms = 30000, validate_only = false }))
    assert.equal(0, resp.results[1].error_code)
    assert(w.drive(40, function()
      return #w.members.a:assignment() == 4 and #w.members.b:assignment() == 4
    end), "8 partitions after CreatePartitions")
    local f = feeder(client, topic, 800, 800)
    f.feed()
    assert(w.drive(30, function()
      for key in pairs(f.produced) do if not w.got[key] then return false end end
      return true
    end), "everything consumed")
    w.owners()
    expect_exact(w, f.produced)
    for _, name in ipairs(w.order) do w.members[name]:close() end
    client:close()
  end
end

-- replay(w) -> duplicate reads: the log replayed per partition. Each
-- ownership period resumes at the last acknowledged commit of the
-- partition (the earliest offset before any) and reads on without a gap;
-- what a period reads again is what an earlier one read past that commit.
local function replay(w)
  local committed, open, read_to, dups = {}, {}, {}, 0
  for i, e in ipairs(w.log) do
    if e.kind == "assign" then
      open[e.p] = { member = e.member, start = committed[e.p] or 0 }
    elseif e.kind == "revoke" or e.kind == "lost" then
      open[e.p] = nil
    elseif e.kind == "closed" or e.kind == "crash" then
      for p, per in pairs(open) do if per.member == e.member then open[p] = nil end end
    elseif e.kind == "commit" then
      committed[e.p] = e.offset
    elseif e.kind == "msg" then
      local per = open[e.p]
      assert(per and per.member == e.member, ("log %d: %s read p%d it does not own"):format(i, e.member, e.p))
      local want = per.last and per.last + 1 or per.start
      assert(want == e.offset, ("log %d: %s read p%d at %d, expected %d (%s)"):format(i, e.member, e.p, e.offset,
        want, per.last and "the next offset" or "the last acknowledged commit"))
      per.last = e.offset
      if e.offset < (read_to[e.p] or 0) then dups = dups + 1 else read_to[e.p] = e.offset + 1 end
    end
  end
  return dups
end

-- The group's coordinator killed (SIGKILL) in a 3-node cluster while the
-- members consume a replicated topic (__consumer_offsets has replication
-- factor 3 there) that a producer keeps writing: a classic group and, on
-- 4.x, a consumer-protocol group with the same coordinator (group ids
-- chosen so), 3 members each. The members find the new coordinator (their
-- requests fail, FindCoordinator names the new leader of the group's
-- __consumer_offsets partition), keep their group (no rebalance: same
-- generation or epoch, no callback), commit there; the node comes back.
-- Every message is consumed, each period of ownership resumes at the last
-- acknowledged commit, so the duplicates are exactly what was read past
-- it (counted, not bounded).
local function coordinator_killed(version)
  return function()
    local k = rk.cluster(version, 3)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, metadata_max_age_ms = 1000,
      request_timeout_ms = 4000, connect_timeout_ms = 1000, reconnect_backoff_max_ms = 1000 }
    local P = 6
    local topic = rt.uniq("grp-coord")
    rt.create_topic(client, topic, P, 3, { ["min.insync.replicas"] = 2 })
    local protocols = { "classic" }
    if rk.consumer_protocol(version) then protocols[2] = "consumer" end
    -- group ids whose coordinator is the same node
    -- (COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists)
    local function finder(gid)
      local stop = now() + 60
      while true do
        local node, ferr = require("kafka.offsets").new(client, gid):_find(client.now() + 10000)
        if node or now() > stop then return assert(node, ferr) end
        socket.sleep(0.2)
      end
    end
    local gids, victim = {}, nil
    for i, _ in ipairs(protocols) do
      for _ = 1, 50 do
        local gid = rt.uniq("g-coord")
        local node = finder(gid)
        if not victim or node == victim then
          victim = node
          gids[i] = gid
          break
        end
      end
      assert(gids[i], "no group id with coordinator " .. tostring(victim))
    end
    local worlds = {}
    for i, protocol in ipairs(protocols) do
      local o = { group_protocol = protocol }
      for kk, v in pairs(OPTS) do o[kk] = v end
      o.session_timeout_ms = 10000
      local w = new_world(client, topic, gids[i], o, P)
      w.track_commits, w.tolerant, w.protocol = true, true, protocol
      worlds[i] = w
    end
    -- 300 messages a second from before the kill until a second after the
    -- restart (f.total is cut then; 9000 at most)
    local f = feeder(client, topic, 9000, 100, 300)
    local function drive(secs, until_fn)
      local stop = now() + secs
      repeat
        f.feed()
        for _, w in ipairs(worlds) do w.poll_all(10) end
        if until_fn and until_fn() then return true end
      until now() >= stop
      return until_fn == nil
    end
    local function all(fn)
      for _, w in ipairs(worlds) do if not fn(w) then return false end end
      return true
    end
    local restarting
    local ok, err = pcall(function()
      for _, w in ipairs(worlds) do
        w.add("a")
        w.add("b")
        w.add("c")
      end
      assert(drive(60, function() return all(function(w) return w.balanced(3) end) end), "3 members each")
      drive(2)
      local before = {}
      for i, w in ipairs(worlds) do
        before[i] = {}
        for _, name in ipairs(w.order) do
          local m = w.members[name]
          assert.equal(victim, m.offsets.node)
          before[i][name] = m:group_state().generation
        end
      end
      local marks = {}
      for i, w in ipairs(worlds) do marks[i] = #w.log end
      local t_kill = now()
      k:kill(victim)
      -- every member of both groups commits at the new coordinator
      local function committed_since_kill(w, i)
        local by = {}
        for j = marks[i] + 1, #w.log do
          local e = w.log[j]
          if e.kind == "commit" then by[e.member] = true end
        end
        for _, name in ipairs(w.order) do
          local m = w.members[name]
          if not by[name] or m.offsets.node == nil or m.offsets.node == victim then return false end
        end
        return true
      end
      assert(drive(90, function()
        for i, w in ipairs(worlds) do if not committed_since_kill(w, i) then return false end end
        return true
      end), "the members commit at the new coordinator")
      local failover = now() - t_kill
      restarting = k:restart_bg(victim)
      assert(drive(180, function() return restarting.done() end), "node " .. victim .. " restarted")
      restarting.wait(1) -- raises when the restart failed
      restarting = nil
      drive(1)
      f.total = f.sent
      assert(drive(90, function()
        return f.sent == f.total and all(function(w)
          for key in pairs(f.produced) do if not w.got[key] then return false end end
          return true
        end)
      end), "everything consumed")
      for i, w in ipairs(worlds) do
        -- the same group all along: no callback since the kill, the same generation/epoch
        for j = marks[i] + 1, #w.log do
          local e = w.log[j]
          assert(e.kind == "commit" or e.kind == "msg", ("%s: %s %s p%d after the kill"):format(w.protocol, e.member,
            e.kind, e.p or -1))
        end
        for _, name in ipairs(w.order) do
          assert.equal(before[i][name], w.members[name]:group_state().generation)
        end
        w.owners()
        for _, name in ipairs(w.order) do w.members[name]:close() end
        local dups = replay(w)
        local reads, n = 0, 0
        for key, c in pairs(w.got) do
          assert(f.produced[key], "consumed a message never produced: " .. key)
          reads, n = reads + c, n + 1
        end
        assert.equal(f.total, n)
        assert.equal(reads - n, dups)
        local lookups = 0
        for _, name in ipairs(w.order) do lookups = lookups + w.members[name].offsets.lookups end
        io.stderr:write(("\n[group coordinator killed] Kafka %s %s: node %d, new coordinator found and committed to "
          .. "in %.1f s (%d FindCoordinator), %d duplicate reads, %d poll errors\n"):format(version, w.protocol, victim,
          failover, lookups, dups, w.poll_errors))
      end
    end)
    -- every node running again for the next spec, also after a failure
    if restarting then pcall(restarting.wait) end
    for i = 1, 3 do
      if not os.execute(("kill -0 $(cat %s/node%d/pid) 2>/dev/null"):format(k.dir, i)) then pcall(k.restart, k, i) end
    end
    client:close()
    if not ok then error(err, 0) end
  end
end

-- The poll interval exceeded: the member leaves, the next poll reports the
-- partitions lost and rejoins; a raising callback is contained.
local function poll_interval(version, protocol)
  return function()
    local k = rk.cluster(version, 1)
    local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, metadata_max_age_ms = 1000 }
    local topic = rt.uniq("grp-interval")
    rt.create_topic(client, topic, 4, 1)
    local o = { group_protocol = protocol, max_poll_interval_ms = 1500, rebalance_timeout_ms = 10000 }
    for kk, v in pairs(OPTS) do o[kk] = v end
    local w = new_world(client, topic, rt.uniq("g"), o)
    local raised = 0
    local c = w.add("a")
    local assign = c.group_cfg.on_assign
    c.group_cfg.on_assign = function(cc, ps)
      assign(cc, ps)
      raised = raised + 1
      error("on_assign raised")
    end
    local errs = {}
    local function poll_a()
      -- (a 10 ms poll on a loaded machine may end before a new fetch
      -- connection is ready: code "timeout", as in poll_all)
      local msgs, err, code, _, list = c:poll(10)
      if not msgs then
        assert(code == "timeout", tostring(err))
        for _, e in ipairs(list or {}) do
          if e.code == "callback" then errs[#errs + 1] = e.err end
        end
        return
      end
      for _, e in ipairs(msgs.callback_errors or {}) do errs[#errs + 1] = e end
    end
    local stop = now() + 20
    -- (the callback may run inside assignment()'s turn of the group: its
    -- error is reported by the next poll)
    while (#c:assignment() < 4 or #errs == 0) and now() < stop do poll_a() end
    assert.equal(4, #c:assignment())
    assert.equal(1, #errs)
    assert.matches("on_assign: .*on_assign raised", errs[1])
    socket.sleep(2)                                 -- past max_poll_interval_ms
    poll_a()
    local lost = {}
    for _, e in ipairs(w.log) do if e.kind == "lost" then lost[#lost + 1] = e.p end end
    table.sort(lost)
    assert.are.same({ 0, 1, 2, 3 }, lost)
    stop = now() + 20
    while #c:assignment() < 4 and now() < stop do poll_a() end
    assert.equal(4, #c:assignment())
    assert.equal(2, raised)
    w.owners()
    c:close()
    client:close()
  end
end

local versions = rk.versions()
if #versions > 0 and not require("support.helpers").lite() then
  describe("consumer groups on a 3-node Kafka " .. versions[1] .. " cluster", function()
    it("the coordinator's node killed and restarted: the members keep their group, nothing is lost",
      coordinator_killed(versions[1]))
  end)
end
for vi, version in ipairs(versions) do
  -- KIP-848's consumer protocol where the broker takes it (its ApiVersions: 4.x)
  local kip848, why = rk.consumer_protocol(version)
  local main = vi == 1 and not require("support.helpers").lite()
  -- the other versions' scenarios: the same steps over half the messages
  -- (the membership changes, not the volume, are what differs by version)
  local n = vi == 1 and GROUP_N or GROUP_N / 2
  describe("consumer groups on Kafka " .. version, function()
    it(("classic (range): 3 members join, leave, crash while %d messages are produced"):format(n),
      scenario(version, "classic", nil, n))
    if main then
      it("classic (cooperative-sticky): the same", scenario(version, "classic", "cooperative-sticky"))
      it("classic: a static member restarts without a rebalance", static_restart(version, "classic"))
      it("classic: a topic created later, partitions added", later_topic(version, "classic"))
      it("classic: the poll interval exceeded, on_lost, rejoin; a raising callback", poll_interval(version, "classic"))
      it("classic range: a Java KafkaConsumer and two lua-kafka members", mixed(version, "classic:range", "classic"))
      it("classic cooperative-sticky: a Java KafkaConsumer and two lua-kafka members",
        mixed(version, "classic:cooperative-sticky", "classic", "cooperative-sticky"))
    end
    if not kip848 then
      pending("consumer protocol: " .. why)
    else
      full_it(("consumer protocol: 3 members join, leave, crash while %d messages are produced"):format(n),
        scenario(version, "consumer", nil, n))
      -- the other Luas run the consumer protocol's cheaper case (the 3-member
      -- scenario is about the broker's protocol, run on the first Lua)
      if vi == 1 then
        it("consumer protocol: a topic created later, partitions added", later_topic(version, "consumer"))
      end
      if main then
        it("consumer protocol: a static member restarts without a rebalance", static_restart(version, "consumer"))
        it("consumer protocol: the poll interval exceeded, on_lost, rejoin; a raising callback",
          poll_interval(version, "consumer"))
        it("consumer protocol: a Java KafkaConsumer and two lua-kafka members",
          mixed(version, "consumer:uniform", "consumer"))
      end
    end
  end)
end
