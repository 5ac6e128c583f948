-- The fast chaos suite (issue 27 item 4): spec/chaos_spec.lua's schedule on
-- kafka.mock, in-process on a virtual clock (no JVM, no port, a few
-- seconds), inside `make test` on every Lua. A 3-node cluster, a topic of
-- replication factor 3 and min.insync.replicas 2, a producer at its default
-- options (idempotent, acks all) and a group consumer (auto commit) while
-- six faults apply one node at a time, each twice: a partition leader down
-- then up 5 s later (down/up: the controller fences it at once), a node
-- frozen for 5 s (freeze/thaw: under broker.session.timeout.ms, so not
-- fenced), the active controller killed (kill_controller: no controller for
-- 3 s, so no leader moves; the node up again 5 s later).
-- Checked exactly, read back from the mock's log (cluster:records): every
-- message acknowledged, none lost or written twice, none where its report
-- said it is not, no per-key reordering, the producer never fatal, the
-- group reads every acknowledged message, its committed offsets never go
-- back and end at the log's end; after the last fault the flush and the
-- group's catch-up finish within RECOVERY_MS of the virtual clock, and
-- after each fault's end every message sent before it is acknowledged and
-- read within RECOVERY_MS. Produce and OffsetCommit answers take ACK_MS and
-- each fault begins while a round's answers are on their way, so a kill
-- takes written batches' answers with it (retried: DUPLICATE_SEQUENCE_NUMBER).
-- The figures are printed.
local kafka = require "kafka"
local mock = require "kafka.mock"

describe("chaos on kafka.mock (virtual clock)", function()
  local P, KEYS, PER_ROUND, ROUND_MS = 6, 60, 20, 50
  local TRAFFIC_ROUNDS, FAULT_ROUNDS, OUTAGE_MS, ELECTION_MS = 60, 100, 5000, 3000
  local ACK_MS = 10
  local RECOVERY_MS = 1000 -- the stated bound: after a fault ends, everything sent acknowledged and read
  local topic = "chaos"

  it("a default producer and a group consumer through six faults: nothing lost, duplicated, reordered or fatal",
    function()
    -- the virtual clock: a sleep runs the events due in it, at their time
    local t, events = 0, {}
    local function now() return t end
    local function sleep(ms)
      local target = t + math.max(ms or 0, 0)
      while events[1] and events[1].at <= target do
        local e = table.remove(events, 1)
        if e.at > t then t = e.at end
        e.fn()
      end
      t = target
    end
    local function at(ms, fn)
      local e = { at = t + ms, fn = fn }
      local i = #events + 1
      while i > 1 and events[i - 1].at > e.at do i = i - 1 end
      table.insert(events, i, e)
      return e
    end

    local cluster = mock.new { brokers = 3, now = now, sleep = sleep }
    -- a broker's answer to acks all takes ACK_MS (the followers'
    -- fetch): a fault can take a written batch's answer with it
    cluster:delay("Produce", ACK_MS)
    cluster:delay("OffsetCommit", ACK_MS)
    cluster:create_topic(topic, P, { replication_factor = 3, configs = { ["min.insync.replicas"] = "2" } })
    local function client(id)
      return kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(), now = now,
        sleep = sleep, client_id = id }
    end
    local pclient, cclient = client("chaos-producer"), client("chaos-consumer")
    local p = kafka.producer.new(pclient, {}) -- the defaults: idempotent, acks all, delivery_timeout_ms 120 s
    local c = kafka.consumer.new(cclient, { group_id = "chaos-group", auto_offset_reset = "earliest" })
    assert(c:subscribe { topic })
    -- every acknowledged commit, per partition: they must never go back
    local commits, went_back = {}, 0
    local committed = c._committed
    c._committed = function(self, list, react, ok, ...)
      if ok then
        for _, x in ipairs(list) do
          local last = commits[x.partition]
          if last and x.offset < last then went_back = went_back + 1 end
          commits[x.partition] = x.offset
        end
      end
      return committed(self, list, react, ok, ...)
    end

    local sent, acked, n_acked, n_failed, first_err, send_errors = 0, {}, 0, 0, nil, 0
    local function settle(reports)
      for _, r in ipairs(reports or {}) do
        if r.err then n_failed, first_err = n_failed + 1, first_err or r.err
        else acked[r.id] = r; n_acked = n_acked + 1 end
      end
    end
    local seen, n_seen, dup_reads, poll_errors, slowest_poll = {}, 0, 0, 0, 0
    local function consume(ms)
      local t0 = t
      local msgs, err = c:poll(ms)
      slowest_poll = math.max(slowest_poll, t - t0)
      if not msgs then poll_errors = poll_errors + 1; first_err = first_err or err; return end
      for _, m in ipairs(msgs) do
        local id = tonumber(m.value:match("^m(%d+)$"))
        if seen[id] then dup_reads = dup_reads + 1 else seen[id] = true; n_seen = n_seen + 1 end
      end
    end
    -- a round: PER_ROUND keyed messages, a flush (no timeout: each message
    -- has its delivery_timeout_ms), a poll, ROUND_MS of the application's pace
    local function round()
      for _ = 1, PER_ROUND do
        local id, err = p:send(topic, "m" .. (sent + 1), { key = "key" .. (sent % KEYS) })
        if id then sent = id else send_errors = send_errors + 1; first_err = first_err or err end
      end
      settle(p:flush())
      consume(100)
      sleep(ROUND_MS)
    end
    -- per fault: when every message sent before it began was acknowledged
    -- and read by the group (the outage as the clients saw it), and every
    -- message sent before it ended (the recovery)
    local watch, done_upto = {}, 0
    local function check()
      while acked[done_upto + 1] and seen[done_upto + 1] do done_upto = done_upto + 1 end
      for _, w in ipairs(watch) do
        if not w.outage and w.applied and done_upto >= w.sent_applied then w.outage = t - w.applied end
        if not w.recovery and w.ended and done_upto >= w.sent_ended then w.recovery = t - w.ended end
      end
    end
    local function rounds(n) for _ = 1, n do round(); check() end end

    -- the schedule: FAULT_ROUNDS of traffic while each fault lasts (it ends
    -- on the clock, whatever a round waits for), TRAFFIC_ROUNDS between
    local faults, log, fault_end = {}, {}, 0
    local function fault(kind, apply, undo)
      local node, over
      local w = { kind = kind }
      watch[#watch + 1] = w
      -- applied while the first round's Produce answers are on their way
      at(ACK_MS / 2, function() node, w.applied, w.sent_applied = apply(), t, sent end)
      local e = at(OUTAGE_MS, function() undo(node); over, w.ended, w.sent_ended = true, t, sent end)
      rounds(FAULT_ROUNDS)
      while not over do sleep(1) end -- (the rounds were faster than the outage)
      faults[kind] = (faults[kind] or 0) + 1
      fault_end = e.at
      rounds(TRAFFIC_ROUNDS)
      log[#log + 1] = ("%s node %d at %.3f s: outage %.3f s, caught up %.3f s after its end"):format(kind, node,
        w.applied / 1000, (w.outage or -1) / 1000, (w.recovery or -1) / 1000)
    end
    rounds(TRAFFIC_ROUNDS)
    for _ = 1, 2 do
      fault("leader killed", function()
        local node = cluster:leader(topic, 0)
        cluster:down(node)
        return node
      end, function(node) cluster:up(node) end)
      fault("frozen", function()
        local node = cluster:leader(topic, 1)
        cluster:freeze(node)
        return node
      end, function(node) cluster:thaw(node) end)
      fault("controller killed", function() return cluster:kill_controller(ELECTION_MS) end,
        function(node) cluster:up(node) end)
    end

    -- after the last fault's traffic: everything acknowledged, the group caught up
    local faults_end = t
    settle(p:flush(120000))
    local flushed = t
    local missing
    repeat
      consume(200)
      missing = 0
      for id in pairs(acked) do if not seen[id] then missing = missing + 1 end end
    until missing == 0 or t > flushed + 120000
    local caught_up = t
    local slowest_recovery = 0
    for _, w in ipairs(watch) do slowest_recovery = math.max(slowest_recovery, w.recovery or math.huge) end
    p:close()
    c:close() -- (commits the positions)

    -- the log: each acknowledged message once, where its report said, ids rising per key
    local in_log, lost, dups, reordered, misplaced, unacked = {}, 0, 0, 0, 0, 0
    local end_offsets = {}
    for part = 0, P - 1 do
      local last = {}
      for _, m in ipairs(cluster:records(topic, part)) do
        local id = tonumber(m.value:match("^m(%d+)$"))
        if in_log[id] then dups = dups + 1 else in_log[id] = true end
        local r = acked[id]
        if not r then unacked = unacked + 1
        elseif r.partition ~= part or r.offset ~= m.offset then misplaced = misplaced + 1 end
        if last[m.key] and id < last[m.key] then reordered = reordered + 1 end
        last[m.key] = id
      end
      local _, hw = cluster:offsets(topic, part)
      end_offsets[part] = hw
    end
    for id in pairs(acked) do if not in_log[id] then lost = lost + 1 end end
    local final = cluster:committed("chaos-group")[topic]
    print(("\n  mock chaos (3 nodes, virtual clock): %d messages sent, %d acknowledged, %d failed, %d refused by send; "
      .. "faults: %d leader kills, %d freezes, %d controller kills; %d lost, %d written twice, %d reordered, "
      .. "%d misplaced, %d in the log unacknowledged; the group read %d (%d again), %d poll errors, the slowest poll "
      .. "%.1f s; commits went back %d times; after the last fault (%.1f s): flush %.1f s, the group caught up %.1f s "
      .. "later; after each fault the clients caught up within %.3f s; %.1f s of virtual time\n  %s"):format(
      sent, n_acked, n_failed, send_errors,
      faults["leader killed"] or 0, faults.frozen or 0, faults["controller killed"] or 0, lost, dups, reordered,
      misplaced, unacked, n_seen, dup_reads, poll_errors, slowest_poll / 1000, went_back, fault_end / 1000,
      (flushed - faults_end) / 1000, (caught_up - flushed) / 1000, slowest_recovery / 1000, t / 1000,
      table.concat(log, ";\n  ")))
    local total = (TRAFFIC_ROUNDS + 6 * (FAULT_ROUNDS + TRAFFIC_ROUNDS)) * PER_ROUND
    assert.are.same({ failed = 0, refused = 0, first_err = nil, fatal = nil }, { failed = n_failed,
      refused = send_errors, first_err = first_err, fatal = p.fatal_err })
    assert.are.same({ sent = total, acked = total, read = total }, { sent = sent, acked = n_acked, read = n_seen })
    assert.are.same({ lost = 0, dups = 0, reordered = 0, misplaced = 0, unacked = 0, missing = 0, went_back = 0,
      poll_errors = 0, read_again = 0 }, { lost = lost, dups = dups, reordered = reordered, misplaced = misplaced, unacked = unacked,
      missing = missing, went_back = went_back, poll_errors = poll_errors, read_again = dup_reads })
    assert.are.same(end_offsets, final)
    assert.are.same({ 2, 2, 2 }, { faults["leader killed"], faults.frozen, faults["controller killed"] })
    -- the stated bound: after each fault's end, everything acknowledged and read within RECOVERY_MS
    assert.is_true(slowest_recovery <= RECOVERY_MS and caught_up - faults_end <= RECOVERY_MS,
      ("recovery %s ms, %d ms at the end: over %d ms"):format(tostring(slowest_recovery), caught_up - faults_end,
        RECOVERY_MS))
    pclient:close()
    cclient:close()
    cluster:close()
  end)
end)
