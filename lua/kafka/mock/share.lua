-- kafka.mock.share: share groups (KIP-932, "Kafka queues") for kafka.mock:
-- the coordinator's side (ShareGroupHeartbeat, ShareGroupDescribe, the
-- group configs of IncrementalAlterConfigs) and the partition leader's
-- (share sessions, ShareFetch, ShareAcknowledge, acquisition locks), as
-- Kafka 4.4.0 does them:
--   * a member joins with epoch 0 and its own member id; each change of the
--     membership or a subscription moves the group epoch on, and a member's
--     next heartbeat takes it (and its assignment, sent when it changed; the
--     first answer carries it). Partitions are spread over the members
--     subscribed to their topic in join order; with more members than
--     partitions several members share one.
--   * a share partition starts at the high watermark at its first ShareFetch
--     (the group config share.auto.offset.reset "earliest": the log start);
--     ShareFetch acquires whole batches of available records for the member
--     until max_records (share_acquire_mode 1: exactly max_records), each
--     under a lock of share.record.lock.duration.ms (30 s) on the cluster's
--     clock, its delivery count one more;
--   * accept: done; release, or a lock running out: available again, unless
--     delivered share.delivery.count.limit (5) times: archived; reject and
--     gap: archived; renew (ShareAcknowledge v2, is_renew_ack): the lock
--     starts again. A record not acquired by the member: INVALID_RECORD_STATE;
--   * share sessions per (group, member) on each broker: epoch 0 opens one
--     (acknowledgements in it: INVALID_REQUEST for the whole request), then
--     1, 2, ...; a wrong epoch INVALID_SHARE_SESSION_EPOCH, none
--     SHARE_SESSION_NOT_FOUND; epoch -1 closes it and releases at once what
--     the member holds there, as does the connection closing. Leaving the
--     group (heartbeat epoch -1) releases nothing: the locks run out.
local proto = require "kafka.proto"

local math, table = math, table
local pairs, ipairs, tonumber, tostring, next = pairs, ipairs, tonumber, tostring, next

local E = proto.errors
local API = proto.api

local GROUP_RESOURCE, TOPIC_RESOURCE = 32, 2
local ACCEPT, RELEASE, REJECT, RENEW, GAP = 1, 2, 3, 4, 0
local MAX_EPOCH = 2147483647

local H = {}
local _M = { handlers = H }

-- the cluster's share state, made at first use
local function state(self)
  local s = self.share
  if not s then
    s = { groups = {}, configs = {}, sessions = {}, parts = {} }
    self.share = s
  end
  return s
end
_M.state = state

local function group_config(self, gid, name)
  local c = state(self).configs[gid]
  return c and c[name]
end

local function lock_ms(self, gid)
  return tonumber(group_config(self, gid, "share.record.lock.duration.ms")) or self.group_share_record_lock_duration_ms
end

local function delivery_limit(self, gid)
  return tonumber(group_config(self, gid, "share.delivery.count.limit")) or self.group_share_delivery_count_limit
end

local function topic_by_id(self, id)
  for name, t in pairs(self.topics) do if t.id == id then return t, name end end
end

--------------------------------------------------------------------------
-- the coordinator: members, epochs, assignment

local function coordinator_error(self, conn, gid, key)
  if not gid or gid == "" then return E.INVALID_GROUP_ID end
  local f = self:_take_fault(key, {})
  if f then return f.code end
  if self:coordinator(gid) ~= conn.broker.id then return E.NOT_COORDINATOR end
  return 0
end

-- The target assignment: each subscribed topic's partitions over its
-- subscribers in join order (more members than partitions: shared).
-- member id -> {{topic_id=, name=, partitions={...}}...}
local function assign(self, g)
  local out = {}
  for _, id in ipairs(g.order) do out[id] = {} end
  local names = {}
  for _, id in ipairs(g.order) do
    for _, n in ipairs(g.members[id].topics) do names[n] = true end
  end
  local sorted = {}
  for n in pairs(names) do sorted[#sorted + 1] = n end
  table.sort(sorted)
  for _, n in ipairs(sorted) do
    local t = self.topics[n]
    if t then
      local subs = {}
      for _, id in ipairs(g.order) do
        for _, x in ipairs(g.members[id].topics) do if x == n then subs[#subs + 1] = id end end
      end
      local per = {}
      if #subs <= t.count then
        for p = 0, t.count - 1 do
          local id = subs[p % #subs + 1]
          per[id] = per[id] or {}
          per[id][#per[id] + 1] = p
        end
      else
        for i, id in ipairs(subs) do per[id] = { (i - 1) % t.count } end
      end
      for _, id in ipairs(subs) do
        if per[id] then out[id][#out[id] + 1] = { topic_id = t.id, name = n, partitions = per[id] } end
      end
    end
  end
  return out
end

local function assignment_key(list)
  local parts = {}
  for _, t in ipairs(list) do parts[#parts + 1] = t.topic_id .. ":" .. table.concat(t.partitions, ",") end
  return table.concat(parts, ";")
end

-- the group's epoch moves on when the membership, a subscription or a
-- subscribed topic's partitions change
local function refresh(self, g)
  local target = assign(self, g)
  local keys = {}
  for _, id in ipairs(g.order) do keys[#keys + 1] = id .. "=" .. assignment_key(target[id]) end
  local key = table.concat(keys, "|")
  if key ~= g.target_key then
    g.target_key = key
    g.epoch = g.epoch + 1
  end
  g.target = target
end

local function remove_member(self, g, id)
  g.members[id] = nil
  for i, x in ipairs(g.order) do if x == id then table.remove(g.order, i) break end end
  refresh(self, g)
end

local function share_group(self, gid)
  local s = state(self)
  local g = s.groups[gid]
  if not g then
    g = { id = gid, epoch = 0, members = {}, order = {}, target = {} }
    s.groups[gid] = g
  end
  return g
end

H.ShareGroupHeartbeat = function(self, conn, b, _, _, req)
  local function fail(code, msg)
    return { throttle_time_ms = 0, error_code = code, error_message = msg, member_id = b.member_id, member_epoch = -1,
      heartbeat_interval_ms = 0 }
  end
  local code = coordinator_error(self, conn, b.group_id, API.ShareGroupHeartbeat)
  if code ~= 0 then return fail(code) end
  if self.groups[b.group_id] then return fail(E.GROUP_ID_NOT_FOUND, "the group is not a share group") end
  local id, epoch = b.member_id or "", b.member_epoch
  if id == "" then return fail(E.INVALID_REQUEST, "MemberId can't be empty.") end
  local g = share_group(self, b.group_id)
  local m = g.members[id]
  local now = self.now()
  if epoch == -1 then
    if not m then return fail(E.UNKNOWN_MEMBER_ID) end
    -- what it holds stays acquired until the locks run out
    remove_member(self, g, id)
    return { throttle_time_ms = 0, error_code = 0, member_id = id, member_epoch = -1, heartbeat_interval_ms = 0 }
  end
  if epoch == 0 then
    if not b.subscribed_topic_names or #b.subscribed_topic_names == 0 then
      return fail(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    end
    if not m then
      m = { id = id, client_id = req.client_id or "", client_host = conn.host }
      g.members[id] = m
      g.order[#g.order + 1] = id
    end
    m.sent = nil
  elseif not m then
    return fail(E.UNKNOWN_MEMBER_ID)
  elseif epoch ~= m.epoch then
    return fail(E.FENCED_MEMBER_EPOCH)
  end
  if b.subscribed_topic_names then
    local list = {}
    for i, n in ipairs(b.subscribed_topic_names) do list[i] = n end
    table.sort(list)
    m.topics = list
  end
  m.deadline = now + self.group_share_session_timeout_ms
  refresh(self, g)
  m.epoch = g.epoch
  local mine = g.target[id] or {}
  local key = assignment_key(mine)
  local assignment
  if key ~= m.sent then
    m.sent = key
    local tps = {}
    for i, t in ipairs(mine) do tps[i] = { topic_id = t.topic_id, partitions = t.partitions } end
    assignment = { topic_partitions = tps }
  end
  m.assigned = mine
  return { throttle_time_ms = 0, error_code = 0, member_id = id, member_epoch = m.epoch,
    heartbeat_interval_ms = self.group_share_heartbeat_interval_ms, assignment = assignment }
end

H.ShareGroupDescribe = function(self, conn, b)
  local out = {}
  for _, gid in ipairs(b.group_ids or {}) do
    local code = coordinator_error(self, conn, gid, API.ShareGroupDescribe)
    local g = state(self).groups[gid]
    if code == 0 and not g then code = E.GROUP_ID_NOT_FOUND end
    if code ~= 0 then
      out[#out + 1] = { error_code = code, group_id = gid, group_state = "Dead", group_epoch = -1, assignment_epoch = -1,
        assignor_name = "", members = {}, authorized_operations = -2147483648 }
    else
      local members = {}
      for _, id in ipairs(g.order) do
        local m = g.members[id]
        local tps = {}
        for i, t in ipairs(m.assigned or {}) do
          tps[i] = { topic_id = t.topic_id, topic_name = t.name, partitions = t.partitions }
        end
        members[#members + 1] = { member_id = id, member_epoch = m.epoch, client_id = m.client_id,
          client_host = m.client_host, subscribed_topic_names = m.topics, assignment = { topic_partitions = tps } }
      end
      out[#out + 1] = { error_code = 0, group_id = gid, group_state = #g.order > 0 and "Stable" or "Empty",
        group_epoch = g.epoch, assignment_epoch = g.epoch, assignor_name = "simple", members = members,
        authorized_operations = -2147483648 }
    end
  end
  return { throttle_time_ms = 0, groups = out }
end

--------------------------------------------------------------------------
-- group configs (IncrementalAlterConfigs on a GROUP resource) and topic configs

local GROUP_CONFIGS = {
  ["share.auto.offset.reset"] = function(v) return v == "earliest" or v == "latest" end,
  ["share.record.lock.duration.ms"] = function(v, self)
    local n = tonumber(v)
    return n and n == math.floor(n) and n >= self.group_share_min_record_lock_duration_ms
      and n <= self.group_share_max_record_lock_duration_ms
  end,
  ["share.delivery.count.limit"] = function(v)
    local n = tonumber(v)
    return n and n == math.floor(n) and n >= 2 and n <= 10
  end,
  ["share.isolation.level"] = function(v) return v == "read_uncommitted" or v == "read_committed" end,
}

H.IncrementalAlterConfigs = function(self, _, b)
  local f = self:_take_fault(API.IncrementalAlterConfigs, {})
  local out = {}
  for _, r in ipairs(b.resources or {}) do
    local code, msg = f and f.code or 0, nil
    local target
    if code ~= 0 then
      target = nil
    elseif r.resource_type == GROUP_RESOURCE then
      target = state(self).configs[r.resource_name] or {}
      for _, c in ipairs(r.configs or {}) do
        local check = GROUP_CONFIGS[c.name]
        if not check then code, msg = E.INVALID_CONFIG, "Unknown group config name: " .. c.name
        elseif c.config_operation == 0 and not check(c.value or "", self) then
          code, msg = E.INVALID_CONFIG, ("Invalid value %s for configuration %s"):format(tostring(c.value), c.name)
        elseif c.config_operation ~= 0 and c.config_operation ~= 1 then
          code, msg = E.INVALID_CONFIG, "only SET and DELETE for " .. c.name
        end
      end
    elseif r.resource_type == TOPIC_RESOURCE then
      local t = self.topics[r.resource_name]
      if not t then code = E.UNKNOWN_TOPIC_OR_PARTITION else target = t.configs end
    else
      code, msg = E.INVALID_REQUEST, "kafka.mock alters TOPIC and GROUP configs only"
    end
    if code == 0 and not b.validate_only then
      for _, c in ipairs(r.configs or {}) do
        if c.config_operation == 1 then target[c.name] = nil else target[c.name] = c.value end
      end
      if r.resource_type == GROUP_RESOURCE then state(self).configs[r.resource_name] = target end
    end
    out[#out + 1] = { error_code = code, error_message = msg, resource_type = r.resource_type,
      resource_name = r.resource_name }
  end
  return { throttle_time_ms = 0, responses = out }
end

--------------------------------------------------------------------------
-- share partitions: record states, locks, delivery counts

-- The share partition of (group, topic, partition), started at its first
-- fetch: the high watermark, or the log start ("earliest").
local function share_partition(self, gid, t, p)
  local s = state(self)
  local key = gid .. "\0" .. t.id .. "\0" .. p
  local sp = s.parts[key]
  if not sp then
    local log = t.partitions[p].log
    local earliest = group_config(self, gid, "share.auto.offset.reset") == "earliest"
    sp = { gid = gid, log = log, spso = earliest and log.log_start or log.hw, st = {} }
    s.parts[key] = sp
  end
  return sp
end

-- the start offset moves past what is done (acknowledged, archived, deleted)
local function advance(sp)
  local st, start = sp.st, sp.log.log_start
  while true do
    local r = st[sp.spso]
    if sp.spso < start or (r and (r.state == "acknowledged" or r.state == "archived")) then
      st[sp.spso] = nil
      sp.spso = sp.spso + 1
    else
      break
    end
  end
end

-- back to the others: available, or archived after the delivery count limit
local function make_available(self, sp, r)
  r.member, r.lock_until = nil, nil
  if r.count >= delivery_limit(self, sp.gid) then r.state = "archived" else r.state = "available" end
end

-- acquire(sp, member, max_records, max_bytes, exact, now) -> the acquired
-- ranges {{first_offset=, last_offset=, delivery_count=}...}, the record
-- bytes (the whole batches holding them), the count
local function acquire(self, sp, member, max_records, max_bytes, exact, now)
  local log = sp.log
  advance(sp)
  local i = log:find(sp.spso)
  local ranges, bytes, n, size = {}, {}, 0, 0
  local limit = sp.spso + self.group_share_partition_max_record_locks
  local until_ = now + lock_ms(self, sp.gid)
  while i and log.entries[i] and n < max_records do
    local e = log.entries[i]
    if #bytes > 0 and size + e.size > max_bytes then break end
    local got = 0
    for o = math.max(e.base, sp.spso), e.last do
      if o >= limit or (exact and n >= max_records) then break end
      local r = sp.st[o]
      if e.control and not r then
        sp.st[o] = { state = "archived", count = 0 } -- (a transaction marker is never delivered)
      elseif not r or r.state == "available" then
        if not r then
          r = { count = 0 }
          sp.st[o] = r
        end
        r.state, r.member, r.lock_until, r.count = "acquired", member, until_, r.count + 1
        local last = ranges[#ranges]
        if last and last.last_offset == o - 1 and last.delivery_count == r.count then
          last.last_offset = o
        else
          ranges[#ranges + 1] = { first_offset = o, last_offset = o, delivery_count = r.count }
        end
        n, got = n + 1, got + 1
      end
    end
    if got > 0 then
      bytes[#bytes + 1] = e.bytes
      size = size + e.size
    end
    i = i + 1
  end
  advance(sp)
  return ranges, table.concat(bytes), n
end

-- acknowledge(sp, member, batches, renew_ok, now) -> 0 or an error code
-- (nothing applied then: every offset is checked first)
local function acknowledge(self, sp, member, batches, renew_ok, now)
  local plan = {}
  for _, bt in ipairs(batches or {}) do
    local first, last, types = bt.first_offset, bt.last_offset, bt.acknowledge_types or {}
    if last < first or (#types ~= 1 and #types ~= last - first + 1) then return E.INVALID_REQUEST end
    for o = first, last do
      local t = types[#types == 1 and 1 or (o - first + 1)]
      if t < GAP or t > RENEW or (t == RENEW and not renew_ok) then return E.INVALID_REQUEST end
      if o >= sp.spso then
        local r = sp.st[o]
        if not r or r.state ~= "acquired" or r.member ~= member then return E.INVALID_RECORD_STATE end
        plan[#plan + 1] = { r, t }
      end
    end
  end
  for _, x in ipairs(plan) do
    local r, t = x[1], x[2]
    if t == ACCEPT then
      r.state, r.member, r.lock_until = "acknowledged", nil, nil
    elseif t == RELEASE then
      make_available(self, sp, r)
    elseif t == REJECT or t == GAP then
      r.state, r.member, r.lock_until = "archived", nil, nil
    elseif t == RENEW then
      r.lock_until = now + lock_ms(self, sp.gid)
    end
  end
  advance(sp)
  return 0
end

-- releases what member holds in the share partitions of group gid (keys:
-- a set of share partition keys, or nil for all of the group's)
local function release_member(self, gid, member, keys)
  for key, sp in pairs(state(self).parts) do
    if sp.gid == gid and (not keys or keys[key]) then
      for _, r in pairs(sp.st) do
        if r.state == "acquired" and r.member == member then make_available(self, sp, r) end
      end
      advance(sp)
    end
  end
end

--------------------------------------------------------------------------
-- share sessions, ShareFetch, ShareAcknowledge

local function session_key(conn, gid, member) return conn.broker.id .. "\0" .. gid .. "\0" .. member end

local function next_epoch(e) if e == MAX_EPOCH then return 1 end return e + 1 end

-- the session's share partitions on this broker: their share partition keys
local function session_part_keys(s)
  local keys = {}
  for k, tp in pairs(s.parts) do keys[tp.gid .. "\0" .. tp.topic_id .. "\0" .. tp.partition] = k end
  return keys
end

local function close_session(self, skey)
  local s = state(self).sessions[skey]
  if not s then return end
  state(self).sessions[skey] = nil
  release_member(self, s.gid, s.member, session_part_keys(s))
end

-- a connection closing ends the share sessions opened on it
function _M.conn_closed(self, conn)
  if not self.share then return end
  for skey, s in pairs(self.share.sessions) do
    if s.conn == conn then close_session(self, skey) end
  end
  self:_wake_fetches()
end

local function has_acks(topics)
  for _, t in ipairs(topics or {}) do
    for _, p in ipairs(t.partitions or {}) do
      if p.acknowledgement_batches and #p.acknowledgement_batches > 0 then return true end
    end
  end
  return false
end

-- the partition's checks on this broker: 0, the partition, its topic
local function part_error(self, conn, topic_id, p)
  local t = topic_by_id(self, topic_id)
  if not t then return E.UNKNOWN_TOPIC_ID end
  local pp = t.partitions[p]
  if not pp then return E.UNKNOWN_TOPIC_OR_PARTITION end
  if pp.leader ~= conn.broker.id then return E.NOT_LEADER_OR_FOLLOWER end
  return 0, pp, t
end

-- acknowledgements of a request: "topic_id\0partition" -> error code
local function apply_acks(self, conn, gid, member, topics, renew_ok)
  local codes = {}
  local now = self.now()
  for _, rt in ipairs(topics or {}) do
    for _, rp in ipairs(rt.partitions or {}) do
      local batches = rp.acknowledgement_batches
      if batches and #batches > 0 then
        local code, _, t = part_error(self, conn, rt.topic_id, rp.partition_index)
        if code == 0 then code = acknowledge(self, share_partition(self, gid, t, rp.partition_index), member, batches,
          renew_ok, now) end
        codes[rt.topic_id .. "\0" .. rp.partition_index] = code
      end
    end
  end
  return codes
end

-- the session's state for a request (nil, top-level error code on refusal)
local function open_session(self, conn, b, fetch)
  local gid, member, epoch = b.group_id or "", b.member_id or "", b.share_session_epoch
  if gid == "" or member == "" then return nil, E.INVALID_REQUEST end
  local s_all = state(self).sessions
  local skey = session_key(conn, gid, member)
  local s = s_all[skey]
  if epoch == 0 then
    if not fetch then return nil, E.INVALID_SHARE_SESSION_EPOCH end
    if has_acks(b.topics) then return nil, E.INVALID_REQUEST end
    if s then close_session(self, skey) end
    s = { gid = gid, member = member, epoch = 0, parts = {}, conn = conn, key = skey }
    s_all[skey] = s
  elseif epoch == -1 then
    if not s then return nil, E.SHARE_SESSION_NOT_FOUND end
    if fetch then
      for _, t in ipairs(b.topics or {}) do
        for _, p in ipairs(t.partitions or {}) do
          if not p.acknowledgement_batches or #p.acknowledgement_batches == 0 then return nil, E.INVALID_REQUEST end
        end
      end
    end
  else
    if not s then return nil, E.SHARE_SESSION_NOT_FOUND end
    if s.epoch ~= epoch then return nil, E.INVALID_SHARE_SESSION_EPOCH end
  end
  return s
end

local function top_error(code, v2_ack)
  return { throttle_time_ms = 0, error_code = code, acquisition_lock_timeout_ms = v2_ack and 0 or nil, responses = {},
    node_endpoints = {} }
end

-- the answer of a ShareFetch: acknowledgement outcomes, then records
-- acquired from the session's partitions
local function fetch_answer(self, conn, s, b, codes, exact)
  local now = self.now()
  local by_topic, order = {}, {}
  local function part(topic_id, p)
    local t = by_topic[topic_id]
    if not t then
      t = { topic_id = topic_id, partitions = {}, idx = {} }
      by_topic[topic_id] = t
      order[#order + 1] = topic_id
    end
    local r = t.idx[p]
    if not r then
      r = { partition_index = p, error_code = 0, acknowledge_error_code = 0, records = "", acquired_records = {},
        current_leader = { leader_id = -1, leader_epoch = -1 } }
      t.idx[p] = r
      t.partitions[#t.partitions + 1] = r
    end
    return r
  end
  for k, code in pairs(codes) do
    local tid, p = k:match("^(.*)%z(%d+)$")
    part(tid, tonumber(p)).acknowledge_error_code = code
  end
  local total, max_records = 0, b.max_records or 500
  if max_records <= 0 then max_records = 500 end
  local keys = {}
  for k in pairs(s.parts) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local tp = s.parts[k]
    local code, pp, t = part_error(self, conn, tp.topic_id, tp.partition)
    if code ~= 0 then
      part(tp.topic_id, tp.partition).error_code = code
    elseif total < max_records then
      local sp = share_partition(self, s.gid, t, tp.partition)
      local ranges, bytes, n = acquire(self, sp, s.member, max_records - total, b.max_bytes or 52428800, exact, now)
      if n > 0 then
        local r = part(tp.topic_id, tp.partition)
        r.acquired_records, r.records = ranges, bytes
        r.current_leader = { leader_id = pp.leader, leader_epoch = pp.epoch }
        total = total + n
      end
    end
  end
  local responses = {}
  for _, tid in ipairs(order) do
    local t = by_topic[tid]
    responses[#responses + 1] = { topic_id = tid, partitions = t.partitions }
  end
  return { throttle_time_ms = 0, error_code = 0, acquisition_lock_timeout_ms = lock_ms(self, s.gid),
    responses = responses, node_endpoints = {} }, total
end

H.ShareFetch = function(self, conn, b, version, reply)
  local f = self:_take_fault(API.ShareFetch, {})
  if f then return top_error(f.code) end
  local s, code = open_session(self, conn, b, true)
  if not s then return top_error(code) end
  local codes = apply_acks(self, conn, s.gid, s.member, b.topics, false)
  if next(codes) ~= nil then self:_wake_fetches() end
  if b.share_session_epoch == -1 then
    close_session(self, s.key)
    local body = fetch_answer(self, conn, { gid = s.gid, member = s.member, parts = {} }, b, codes)
    return body
  end
  for _, t in ipairs(b.topics or {}) do
    for _, p in ipairs(t.partitions or {}) do
      s.parts[t.topic_id .. "\0" .. p.partition_index] = { gid = s.gid, topic_id = t.topic_id, partition = p.partition_index }
    end
  end
  for _, t in ipairs(b.forgotten_topics_data or {}) do
    for _, p in ipairs(t.partitions or {}) do s.parts[t.topic_id .. "\0" .. p] = nil end
  end
  s.epoch = next_epoch(s.epoch)
  local exact = version >= 2 and b.share_acquire_mode == 1
  local body, n = fetch_answer(self, conn, s, b, codes, exact)
  if n > 0 or (b.max_wait_ms or 0) <= 0 or next(codes) ~= nil then return body end
  -- nothing to hand out: wait for records (a Produce, a release, a lock
  -- running out) until max_wait_ms, as the broker's delayed share fetch does
  self.parked[#self.parked + 1] = { conn = conn, reply = reply, deadline = self.now() + b.max_wait_ms,
    run = function()
      if state(self).sessions[s.key] ~= s then return top_error(E.SHARE_SESSION_NOT_FOUND), true end
      local bd, k = fetch_answer(self, conn, s, b, {}, exact)
      return bd, k > 0
    end }
  return nil
end

H.ShareAcknowledge = function(self, conn, b, version)
  local v2 = version >= 2
  local f = self:_take_fault(API.ShareAcknowledge, {})
  if f then return top_error(f.code, v2) end
  local s, code = open_session(self, conn, b, false)
  if not s then return top_error(code, v2) end
  local codes = apply_acks(self, conn, s.gid, s.member, b.topics, v2 and b.is_renew_ack)
  if b.share_session_epoch == -1 then close_session(self, s.key) else s.epoch = next_epoch(s.epoch) end
  self:_wake_fetches() -- (released records for the fetches waiting)
  local responses = {}
  for _, rt in ipairs(b.topics or {}) do
    local parts = {}
    for _, rp in ipairs(rt.partitions or {}) do
      parts[#parts + 1] = { partition_index = rp.partition_index,
        error_code = codes[rt.topic_id .. "\0" .. rp.partition_index] or 0,
        current_leader = { leader_id = -1, leader_epoch = -1 } }
    end
    responses[#responses + 1] = { topic_id = rt.topic_id, partitions = parts }
  end
  return { throttle_time_ms = 0, error_code = 0, acquisition_lock_timeout_ms = v2 and lock_ms(self, s.gid) or nil,
    responses = responses, node_endpoints = {} }
end

--------------------------------------------------------------------------
-- timers: locks running out, members whose session timed out

function _M.tick(self, now)
  local s = self.share
  if not s then return end
  for _, sp in pairs(s.parts) do
    local changed = false
    for _, r in pairs(sp.st) do
      if r.state == "acquired" and r.lock_until <= now then
        make_available(self, sp, r)
        changed = true
      end
    end
    if changed then advance(sp) end
  end
  for _, g in pairs(s.groups) do
    local ids = {}
    for i, id in ipairs(g.order) do ids[i] = id end
    for _, id in ipairs(ids) do
      local m = g.members[id]
      if m and m.deadline <= now then remove_member(self, g, id) end
    end
  end
end

function _M.next_deadline(self)
  local s = self.share
  if not s then return nil end
  local t
  for _, sp in pairs(s.parts) do
    for _, r in pairs(sp.st) do
      if r.state == "acquired" and (not t or r.lock_until < t) then t = r.lock_until end
    end
  end
  for _, g in pairs(s.groups) do
    for _, m in pairs(g.members) do if not t or m.deadline < t then t = m.deadline end end
  end
  return t
end

return _M
