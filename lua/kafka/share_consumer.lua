--- kafka.share_consumer: a share group member (KIP-932, "Kafka queues",
-- Kafka 4.2+). The members of a share group read the same partitions
-- together: the broker hands each fetch's records to one member at a time
-- (acquired, under a lock of group.share.record.lock.duration.ms), the
-- member acknowledges each one (accept, release: deliver again, reject:
-- never again) and there are no offsets to commit or seek.
--
--   local share = require "kafka.share_consumer"
--   local c = share.new({brokers = {"127.0.0.1:9092"}}, {group_id = "workers"})
--   c:subscribe{"jobs"}
--   local recs = c:poll(1000)   -- {topic, partition, offset, key, value, headers, timestamp, delivery_count}...
--   -- implicit mode (the default): the next poll accepts these records
--   c:close()                   -- acknowledges, closes the share sessions, leaves the group
--
-- Explicit mode (`share_acknowledgement_mode = "explicit"`): each record is
-- acknowledged with c:acknowledge(rec, "accept" | "release" | "reject");
-- the acknowledgements go with the next ShareFetch, or with
-- commit_sync/commit_async (ShareAcknowledge). The guide: docs/share.md.
-- @module kafka.share_consumer
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"
local membership = require "kafka.share.membership"
local session_mod = require "kafka.share.session"
local ksocket = require "kafka.socket"

local API = proto.api
local errors = proto.errors
local math, table = math, table
local setmetatable, tostring, type, ipairs, pairs, next, error = setmetatable, tostring, type, ipairs, pairs, next,
  error

local _M = {}
local mt = { __index = _M }

local WHERE = "kafka.share_consumer.new"
local RAW = { raw_records = true } -- records decoded here, against the acquired ranges

--- The acknowledge types of the protocol (AcknowledgeTypes: 0 is a gap,
-- an offset with no record, which the consumer acknowledges itself).
_M.ACK = { gap = 0, accept = 1, release = 2, reject = 3, renew = 4 }
local ACK = _M.ACK

-- Partition errors after which the partition's leader is looked up again.
local REROUTE = {
  [errors.NOT_LEADER_OR_FOLLOWER] = true, [errors.FENCED_LEADER_EPOCH] = true,
  [errors.UNKNOWN_LEADER_EPOCH] = true, [errors.UNKNOWN_TOPIC_OR_PARTITION] = true,
  [errors.UNKNOWN_TOPIC_ID] = true, [errors.LEADER_NOT_AVAILABLE] = true,
  [errors.KAFKA_STORAGE_ERROR] = true,
}
-- Top-level ShareFetch/ShareAcknowledge errors that end the share session.
local SESSION_GONE = {
  [errors.SHARE_SESSION_NOT_FOUND] = true, [errors.INVALID_SHARE_SESSION_EPOCH] = true,
}

local OPTS = {
  group_id = "string", share_acknowledgement_mode = "string", fetch_max_wait_ms = "number",
  fetch_min_bytes = "number", fetch_max_bytes = "number", max_poll_records = "number",
  heartbeat_interval_ms = "number", on_acknowledgement_commit = "function", on_state = "function",
}

--- Makes a share consumer. Misuse raises, naming the option.
-- @param client_or_opts a kafka.client, or a table of client options (then owned and closed)
-- @tparam table opts `group_id` (required), `share_acknowledgement_mode` ("implicit", the
-- default, or "explicit"), `max_poll_records` (500), `fetch_max_wait_ms` (500), `fetch_min_bytes`
-- (1), `fetch_max_bytes` (52428800), `on_acknowledgement_commit(results)` (the outcome of
-- acknowledgements sent with a ShareFetch or commit_async), `on_state(old, new)` (the membership's states)
-- @treturn table the share consumer
function _M.new(client_or_opts, opts)
  if type(opts) ~= "table" then check.fail(WHERE, "opts", "a table with group_id", opts) end
  for k, v in pairs(opts) do
    local want = OPTS[k]
    if not want then error(("%s: unknown option %s"):format(WHERE, tostring(k)), 2) end
    if type(v) ~= want then check.fail(WHERE, k, "a " .. want, v) end
  end
  if type(opts.group_id) ~= "string" or opts.group_id == "" then
    check.fail(WHERE, "group_id", "a non-empty string", opts.group_id)
  end
  local mode = opts.share_acknowledgement_mode or "implicit"
  if mode ~= "implicit" and mode ~= "explicit" then
    check.fail(WHERE, "share_acknowledgement_mode", '"implicit" or "explicit"', mode)
  end
  for _, k in ipairs { "fetch_max_wait_ms", "fetch_max_bytes", "max_poll_records" } do
    if opts[k] and (opts[k] < 1 or opts[k] ~= math.floor(opts[k])) then check.fail(WHERE, k, "a positive integer", opts[k]) end
  end
  local client, own = client_mod.ensure(client_or_opts, WHERE)
  local self = setmetatable({
    client = client,
    own_client = own,
    group_id = opts.group_id,
    mode = mode,
    max_poll_records = opts.max_poll_records or 500,
    fetch_max_wait_ms = opts.fetch_max_wait_ms or 500,
    fetch_min_bytes = opts.fetch_min_bytes or 1,
    fetch_max_bytes = opts.fetch_max_bytes or 52428800,
    on_ack_commit = opts.on_acknowledgement_commit,
    sessions = {},    -- node id -> kafka.share.session
    pool = {},        -- node id -> connection: share sessions on connections of their own
    held = {},        -- partition key -> {info=, offsets = {[offset] = true}}: delivered, not acknowledged
    pending = {},     -- partition key -> {info=, acks = {[offset] = type}}: acknowledged, not sent yet
    renews = {},      -- the same for renewals (still held)
    buffered = {},    -- records acquired but not returned yet (a fetch answered during commit)
    last = nil,       -- the records of the last poll (implicit mode accepts them at the next)
    closed = false,
  }, mt)
  self.member = membership.new(client, self.group_id,
    { heartbeat_interval_ms = opts.heartbeat_interval_ms, on_state = opts.on_state })
  return self
end

--- Subscribes to topics (replaces the subscription).
-- @tparam {string,...} topics the topic names
function _M:subscribe(topics)
  if self.closed then error("subscribe: the share consumer is closed", 2) end
  if type(topics) ~= "table" or #topics == 0 then check.fail("subscribe", "topics", "a non-empty array of names", topics) end
  local list = {}
  for i, t in ipairs(topics) do
    if type(t) ~= "string" or t == "" then check.fail("subscribe", ("topics[%d]"):format(i), "a topic name", t) end
    list[i] = t
  end
  table.sort(list)
  self.member:subscribe(list)
  self.client:load_metadata({ topics = list, auto_create = self.client.auto_create })
end

--- The membership's state ("unjoined", "joining", "stable", "fenced", "leaving", "left", "failed"),
-- the member id and epoch, and the assigned partitions.
-- @treturn string state
-- @treturn table `{member_id=, member_epoch=, assignment = {{topic=, partition=}...}}`
function _M:state()
  local m = self.member
  return m.state, { member_id = m.member_id, member_epoch = m.epoch, assignment = m.assignment }
end

local function pkey(topic, partition) return session_mod.key(topic, partition) end

-- Queues an acknowledgement (the record leaves `held`; a renewal keeps it
-- there and waits in `renews`, sent in a request of its own).
local function queue_ack(self, info, offset, t)
  local k = pkey(info.topic, info.partition)
  local map = t == ACK.renew and self.renews or self.pending
  local p = map[k]
  if not p then
    p = { info = info, acks = {} }
    map[k] = p
  end
  p.acks[offset] = t
  if t == ACK.renew then return end
  local h = self.held[k]
  if h then
    h.offsets[offset] = nil
    if next(h.offsets) == nil then self.held[k] = nil end
  end
end

-- The acknowledgement batches of one partition: consecutive offsets of
-- one type in one batch.
local function batches(acks)
  local offs = {}
  for o in pairs(acks) do offs[#offs + 1] = o end
  table.sort(offs)
  local out, cur = {}, nil
  for _, o in ipairs(offs) do
    local t = acks[o]
    if cur and o == cur.last_offset + 1 and cur.acknowledge_types[1] == t then
      cur.last_offset = o
    else
      cur = { first_offset = o, last_offset = o, acknowledge_types = { t } }
      out[#out + 1] = cur
    end
  end
  return out
end
_M._batches = batches

-- The acknowledgements waiting for one node, taken out of map (`pending`
-- or `renews`): key -> {topic=, partition=, topic_id=, node_id=, batches=, acks=}.
local function take_acks(map, node_id)
  local out = {}
  for k, p in pairs(map) do
    if p.info.node_id == node_id then
      out[k] = { topic = p.info.topic, partition = p.info.partition, topic_id = p.info.topic_id,
        node_id = node_id, batches = batches(p.acks), acks = p.acks, info = p.info }
      map[k] = nil
    end
  end
  return out
end

-- Acknowledgements whose request failed go back to map (unless newer ones replaced them).
local function requeue(map, sent)
  for k, a in pairs(sent) do
    local p = map[k]
    if not p then
      p = { info = a.info, acks = {} }
      map[k] = p
    end
    for o, t in pairs(a.acks) do
      if p.acks[o] == nil then p.acks[o] = t end
    end
  end
end

-- The outcome goes to the callback, and to the commit_sync/close that sent it (collect).
local function report(self, results, collect)
  if #results == 0 then return end
  if collect then for _, x in ipairs(results) do collect[#collect + 1] = x end end
  if self.on_ack_commit then self.on_ack_commit(results) end
end

-- The outcome of acknowledgements sent: per partition {topic=, partition=, offsets=n, error_code=, error=}.
local function ack_results(sent, codes)
  local out = {}
  for k, a in pairs(sent) do
    local n = 0
    for _ in pairs(a.acks) do n = n + 1 end
    local ec = codes[k] or errors.NONE
    out[#out + 1] = { topic = a.topic, partition = a.partition, offsets = n, error_code = ec,
      error = ec ~= errors.NONE and errors.info(ec).name or nil }
  end
  table.sort(out, function(x, y)
    if x.topic ~= y.topic then return x.topic < y.topic end
    return x.partition < y.partition
  end)
  return out
end

-- The assigned partitions this member fetches, by leader node:
-- node id -> {{topic=, partition=, topic_id=, node_id=}...}
local function by_leader(self, deadline)
  local client = self.client
  local out = {}
  for _, tp in ipairs(self.member.assignment) do
    local t = client:topic(tp.topic, deadline)
    local leader = t and client:leader(tp.topic, tp.partition, deadline)
    if leader then
      local l = out[leader]
      if not l then
        l = {}
        out[leader] = l
      end
      l[#l + 1] = { topic = tp.topic, partition = tp.partition, topic_id = t.topic_id, node_id = leader }
    end
  end
  return out
end

-- Records of one partition's answer: those inside the acquired ranges, with
-- their delivery count; offsets acquired without a record (control records,
-- compacted away) are acknowledged as gaps.
local function take_records(self, info, pr, out)
  local acquired = pr.acquired_records
  if not acquired or #acquired == 0 then return true end
  local recs = {}
  local raw = pr.records
  if raw and #raw > 0 then
    local res, err = proto.decode_records(raw, { check_crc = true, skip_control = true })
    if not res then
      -- nothing of it is delivered: the records go back to the others
      for _, a in ipairs(acquired) do
        for o = a.first_offset, a.last_offset do queue_ack(self, info, o, ACK.release) end
      end
      return nil, ("%s/%d: %s"):format(info.topic, info.partition, tostring(err)), "corrupt"
    end
    for _, r in ipairs(res) do recs[r.offset] = r end
  end
  local k = pkey(info.topic, info.partition)
  for _, a in ipairs(acquired) do
    for o = a.first_offset, a.last_offset do
      local r = recs[o]
      if r then
        r.topic, r.partition, r.delivery_count = info.topic, info.partition, a.delivery_count
        out[#out + 1] = r
        local h = self.held[k]
        if not h then
          h = { info = info, offsets = {} }
          self.held[k] = h
        end
        h.offsets[o] = true
      else
        queue_ack(self, info, o, ACK.gap)
      end
    end
  end
  return true
end

-- Opens (when needed) the connection of a node's share session.
local function conn_of(self, node_id, deadline)
  local c, err, code = self.client:broker(node_id, deadline, self.pool)
  if not c then return nil, err, code end
  return c
end

-- Handles an answer (or a failure) of the request in flight on a session.
local function answered(self, s, resp, err, code, out)
  local r = s.req
  s.req = nil
  if not resp then
    -- the connection failed: the broker dropped the session with it
    s:reset()
    requeue(r.map, r.acks)
    self.fetch_error = { err, code }
    return
  end
  local ec = resp.error_code
  if ec ~= errors.NONE then
    s:reset()
    requeue(r.map, r.acks)
    if not SESSION_GONE[ec] then
      if ec == errors.UNKNOWN_MEMBER_ID or ec == errors.FENCED_MEMBER_EPOCH then self.member.hb_next = 0 end
      self.fetch_error = { ("%s: %s"):format(r.api_name, errors.info(ec).name), "kafka", ec }
    end
    return
  end
  s:answered()
  if r.closing then s:reset() end
  local client = self.client
  local codes = {}
  for _, t in ipairs(resp.responses or {}) do
    local topic = client:topic_name(t.topic_id)
    for _, pr in ipairs(t.partitions or {}) do
      if topic then
        local k = pkey(topic, pr.partition_index)
        local aec = pr.acknowledge_error_code
        if r.api == API.ShareAcknowledge then aec = pr.error_code end
        if r.acks[k] and aec and aec ~= errors.NONE then codes[k] = aec end
        if r.api == API.ShareFetch then
          local pec = pr.error_code
          if pec ~= errors.NONE then
            if REROUTE[pec] then client:invalidate(topic) end
            self.fetch_error = { ("ShareFetch %s/%d: %s"):format(topic, pr.partition_index, errors.info(pec).name),
              "kafka", pec }
          else
            local info = { topic = topic, partition = pr.partition_index, topic_id = t.topic_id, node_id = s.node_id }
            local ok, derr, dcode = take_records(self, info, pr, out)
            if not ok then self.fetch_error = { derr, dcode } end
          end
        elseif REROUTE[pr.error_code] then
          client:invalidate(topic)
        end
      end
    end
  end
  local results = ack_results(r.acks, codes)
  r.results = results
  report(self, results, r.collect)
end

-- Sends one request on a session: ShareFetch (fetch true) or ShareAcknowledge.
local function send(self, s, want, deadline, o)
  local conn, err, code = conn_of(self, s.node_id, deadline)
  if not conn then
    -- the broker is unreachable: its session is gone
    s:reset()
    return nil, err, code
  end
  local map = o.renew and self.renews or self.pending
  local acks = take_acks(map, s.node_id)
  local topics, forgotten, sent
  -- (ShareAcknowledge forgets nothing: want is what the session has)
  topics, forgotten, sent = s:topics(want, acks)
  if not o.fetch then forgotten = nil end
  -- acknowledgements not sent (their partition is not in this request, or
  -- the request opens a session: the broker refuses them there) stay pending
  local rest = {}
  for k, a in pairs(acks) do if not sent[k] then rest[k] = a end end
  requeue(map, rest)
  local api = o.fetch and API.ShareFetch or API.ShareAcknowledge
  local v
  v, err, code = conn:version(api)
  if not v then
    requeue(map, sent)
    return nil, err, code
  end
  local epoch = o.closing and -1 or s.epoch
  local body
  if o.fetch then
    body = { group_id = self.group_id, member_id = self.member.member_id, share_session_epoch = epoch,
      max_wait_ms = o.max_wait_ms, min_bytes = self.fetch_min_bytes, max_bytes = self.fetch_max_bytes,
      max_records = self.max_poll_records, batch_size = self.max_poll_records, share_acquire_mode = 0,
      is_renew_ack = false, topics = topics, forgotten_topics_data = forgotten }
  else
    body = { group_id = self.group_id, member_id = self.member.member_id, share_session_epoch = epoch,
      is_renew_ack = o.renew or false, topics = topics }
  end
  local corr
  corr, err, code = conn:send(api, v, body, { deadline = deadline, timeout_ms = o.fetch and o.max_wait_ms or 0,
    decode = RAW })
  if not corr then
    requeue(map, sent)
    s:reset()
    return nil, err, code
  end
  s.req = { conn = conn, corr = corr, api = api, api_name = o.fetch and "ShareFetch" or "ShareAcknowledge",
    acks = sent, closing = o.closing, map = map, collect = o.collect }
  return s.req
end

local function session(self, node_id)
  local s = self.sessions[node_id]
  if not s then
    s = session_mod.new(node_id)
    self.sessions[node_id] = s
  end
  return s
end

-- Waits for the answer of a session's request until deadline.
local function await(self, s, deadline, out)
  local r = s.req
  local resp, err, code = r.conn:receive(r.corr, deadline)
  if not resp and code == "timeout" and r.conn:waiting(r.corr) then return false end
  answered(self, s, resp, err, code, out)
  return true, r
end

-- Renewals go in a ShareAcknowledge of their own (is_renew_ack: the broker
-- extends the records' locks, they stay acquired), answered before the next fetch.
local function send_renews(self, deadline, out, collect)
  if next(self.renews) == nil then return end
  local nodes = {}
  for _, p in pairs(self.renews) do nodes[p.info.node_id] = true end
  for node_id in pairs(nodes) do
    local s = session(self, node_id)
    if s.req then await(self, s, deadline, out) end
    if not s.req and s.epoch > 0 then
      local want = {}
      for _, tp in pairs(s.parts) do want[#want + 1] = tp end
      if send(self, s, want, deadline, { renew = true, collect = collect }) then await(self, s, deadline, out) end
    end
  end
end

-- One fetch round: a ShareFetch to each leader of an assigned partition
-- (and to each broker whose session holds partitions no longer wanted),
-- the answers read until deadline. Returns whether a request was waited for.
local function fetch_round(self, deadline, out)
  local want = by_leader(self, deadline)
  local wait = math.max(0, math.min(self.fetch_max_wait_ms, math.floor(deadline - self.client.now())))
  for node_id, list in pairs(want) do
    local s = session(self, node_id)
    if not s.req then send(self, s, list, deadline, { fetch = true, max_wait_ms = wait }) end
  end
  for node_id, s in pairs(self.sessions) do
    if not want[node_id] and not s.req and next(s.parts) ~= nil then
      send(self, s, {}, deadline, { fetch = true, max_wait_ms = 0 })
    end
  end
  local waited = false
  for _, s in pairs(self.sessions) do
    if s.req then
      waited = true
      await(self, s, deadline, out)
    end
  end
  return waited
end

-- Implicit mode: the records of the last poll are accepted.
local function accept_last(self)
  if self.mode == "implicit" and self.last then
    for _, r in ipairs(self.last) do
      local h = self.held[pkey(r.topic, r.partition)]
      if h and h.offsets[r.offset] then queue_ack(self, h.info, r.offset, ACK.accept) end
    end
  end
  self.last = nil
end

-- Inside nginx a cosocket belongs to the request or timer that opened it
-- and is closed when that one ends (ngx.timer.every: each tick is a timer
-- of its own); the broker then ends the share sessions on those connections
-- and releases what they acquired. Used from another request or timer, the
-- consumer forgets what was in flight there and opens its sessions and
-- sends its heartbeat anew (acknowledgements of records from the old
-- sessions are refused: acknowledge, then commit_sync, in one timer).
local function adopt(self)
  local ctx = ksocket.context()
  if ctx == self.ctx then return end
  self.ctx = ctx
  for _, s in pairs(self.sessions) do
    if s.req then requeue(s.req.map, s.req.acks) end
    s.req = nil
    s:reset()
  end
  for _, c in pairs(self.pool) do c:close("its nginx request or timer ended") end
  self.member:reset_conn()
  -- the client's own: one with a request or its version negotiation in
  -- flight there would refuse this timer every call ("in use by another nginx
  -- request or timer"), as a client shared by two live timers must
  local client = self.client
  for _, set in ipairs { client.conns, client.boot_conns } do
    for _, c in pairs(set) do
      if c.owner and c.owner ~= ctx then c:close("its nginx request or timer ended") end
    end
  end
end

--- Fetches records. In implicit mode the records of the previous poll are
-- accepted first (sent with this poll's ShareFetch).
-- @tparam[opt=0] integer timeout_ms how long to wait for records
-- @treturn table records `{topic=, partition=, offset=, key=, value=, headers=, timestamp=,
-- delivery_count=}...` (empty when none came), or nil, err, code (the group failed: code
-- "group"; or a fetch error when no record came: "kafka" with the Kafka error code as a 4th value)
function _M:poll(timeout_ms)
  if self.closed then error("poll: the share consumer is closed", 2) end
  if not self.member.topics then error("poll: subscribe first", 2) end
  timeout_ms = timeout_ms or 0
  if type(timeout_ms) ~= "number" or timeout_ms < 0 then check.fail("poll", "timeout_ms", "a number >= 0", timeout_ms) end
  local client = self.client
  local deadline = client.now() + timeout_ms
  adopt(self)
  accept_last(self)
  local out = self.buffered
  self.buffered = {}
  self.fetch_error = nil
  send_renews(self, deadline, out)
  local m = self.member
  repeat
    m:step(deadline)
    if m.state == "failed" then return nil, m.error[1], m.error[2], m.error[3] end
    if #out > 0 then break end
    local waited = m.state == "stable" and fetch_round(self, deadline, out)
    if not waited then
      -- nothing to fetch from (no assignment yet, or no leader reachable): wait
      -- for the membership's next step, or a retry backoff
      local t = math.min(deadline, m:next_due(), self.client.now() + self.client.retry_backoff_ms)
      local left = t - client.now()
      if left > 0 then client.sleep(math.min(left, 50)) end
    end
  until #out > 0 or client.now() >= deadline
  self.last = out
  if #out == 0 and self.fetch_error then
    local e = self.fetch_error
    return out, e[1], e[2], e[3]
  end
  return out
end

--- Acknowledges a record of a poll (explicit mode): "accept" (done), "release"
-- (deliver it again, to this member or another), "reject" (never deliver it again),
-- "renew" (keep it longer: its acquisition lock starts again; brokers with
-- ShareAcknowledge v2, Kafka 4.2+; the record stays to be acknowledged).
-- Sent with the next poll's ShareFetch (renewals: a ShareAcknowledge before it),
-- or commit_sync/commit_async.
-- @tparam table rec a record poll returned
-- @tparam[opt="accept"] string ack_type
-- @return true, or nil, err, "unsupported" (renew, on a broker without it)
function _M:acknowledge(rec, ack_type)
  if self.closed then error("acknowledge: the share consumer is closed", 2) end
  if self.mode ~= "explicit" then
    error("acknowledge: the share consumer is in implicit mode (share_acknowledgement_mode = \"explicit\" to acknowledge)", 2)
  end
  ack_type = ack_type or "accept"
  local t = ACK[ack_type]
  if not t or t == ACK.gap then check.fail("acknowledge", "type", '"accept", "release", "reject" or "renew"', ack_type) end
  if type(rec) ~= "table" or type(rec.topic) ~= "string" or type(rec.offset) ~= "number" then
    check.fail("acknowledge", "record", "a record poll returned", rec)
  end
  local h = self.held[pkey(rec.topic, rec.partition)]
  if not h or not h.offsets[rec.offset] then
    error(("acknowledge: %s/%s offset %s is not held by this consumer (acknowledged already, or not from a poll)")
      :format(rec.topic, tostring(rec.partition), tostring(rec.offset)), 2)
  end
  if t == ACK.renew then
    local c = self.pool[h.info.node_id]
    local v = c and c:is_connected() and c:version(API.ShareAcknowledge)
    if not v or v < 2 then
      return nil, ("acknowledge: renew needs ShareAcknowledge v2 (Kafka 4.2+), which %s does not speak"):format(
        c and c:name() or ("broker " .. tostring(h.info.node_id))), "unsupported"
    end
  end
  queue_ack(self, h.info, rec.offset, t)
  return true
end

-- Sends the pending acknowledgements with ShareAcknowledge (closing: epoch
-- -1, the sessions end); returns the requests sent, by session.
local function flush(self, deadline, closing, out, collect)
  -- a request in flight is answered first (the epochs go in order)
  for _, s in pairs(self.sessions) do
    if s.req then
      if not await(self, s, deadline, out) then
        -- no answer in time: the session's state is unknown, start anew
        s.req.conn:close("share session request timed out")
        s.req = nil
        s:reset()
      end
    end
  end
  local nodes = {}
  for _, p in pairs(self.pending) do nodes[p.info.node_id] = true end
  if closing then for node_id, s in pairs(self.sessions) do if s.epoch > 0 then nodes[node_id] = true end end end
  local sent, failed = {}, {}
  for node_id in pairs(nodes) do
    local s = session(self, node_id)
    if s.epoch == 0 then
      -- no session with this broker (it was lost): the acknowledgements cannot go
      local acks = take_acks(self.pending, node_id)
      if not closing then requeue(self.pending, acks) end
      for _, x in ipairs(ack_results(acks, setmetatable({}, { __index = function() return errors.SHARE_SESSION_NOT_FOUND end }))) do
        failed[#failed + 1] = x
      end
    else
      local want = {}
      for _, tp in pairs(s.parts) do want[#want + 1] = tp end
      local r = send(self, s, want, deadline, { fetch = false, closing = closing, collect = collect })
      if r then sent[#sent + 1] = { s = s, r = r } end
    end
  end
  return sent, failed
end

--- Sends the acknowledgements not sent yet (ShareAcknowledge) and waits for the outcome.
-- @tparam[opt] integer timeout_ms (default the client's default_api_timeout_ms)
-- @treturn table per partition `{topic=, partition=, offsets=, error_code=, error=}` (error nil,
-- error_code 0 when accepted; an acknowledgement in flight when the time ran out: error "timeout")
function _M:commit_sync(timeout_ms)
  if self.closed then error("commit_sync: the share consumer is closed", 2) end
  adopt(self)
  local deadline = self.client.now() + (timeout_ms or self.client.default_api_timeout_ms)
  accept_last(self)
  local results = {}
  send_renews(self, deadline, self.buffered, results)
  local sent, failed = flush(self, deadline, false, self.buffered, results)
  for _, x in ipairs(failed) do results[#results + 1] = x end
  for _, q in ipairs(sent) do
    if q.s.req == q.r and not await(self, q.s, deadline, self.buffered) then
      for _, x in ipairs(ack_results(q.r.acks, setmetatable({}, { __index = function() return -1 end }))) do
        x.error = "timeout"
        results[#results + 1] = x
      end
    end
  end
  table.sort(results, function(x, y)
    if x.topic ~= y.topic then return x.topic < y.topic end
    return x.partition < y.partition
  end)
  return results
end

--- Sends the acknowledgements not sent yet without waiting; their outcome goes
-- to on_acknowledgement_commit when the answers are read (next poll, commit or close).
-- @treturn boolean true
function _M:commit_async()
  if self.closed then error("commit_async: the share consumer is closed", 2) end
  adopt(self)
  accept_last(self)
  for node_id, s in pairs(self.sessions) do
    local has = false
    for _, p in pairs(self.pending) do if p.info.node_id == node_id then has = true end end
    if has and not s.req and s.epoch > 0 then
      local want = {}
      for _, tp in pairs(s.parts) do want[#want + 1] = tp end
      send(self, s, want, self.client.now() + self.client.default_api_timeout_ms, { fetch = false })
    end
  end
  return true
end

--- Releases what the consumer holds (implicit mode: accepts the last poll's
-- records, as a next poll would; explicit mode: releases the records not
-- acknowledged), closes the share sessions (ShareAcknowledge, epoch -1) and
-- leaves the group (ShareGroupHeartbeat, epoch -1). The consumer cannot be used after.
-- @tparam[opt] integer timeout_ms (default the client's default_api_timeout_ms)
-- @treturn table the acknowledgements' outcome, as commit_sync
function _M:close(timeout_ms)
  if self.closed then return {} end
  adopt(self)
  local deadline = self.client.now() + (timeout_ms or self.client.default_api_timeout_ms)
  accept_last(self)
  local results = {}
  local late = {}
  -- a fetch in flight is answered first: what it acquired is released too
  for _, s in pairs(self.sessions) do
    if s.req and not await(self, s, deadline, late) then
      s.req.conn:close("share consumer closed")
      s.req = nil
      s:reset()
    end
  end
  for _, r in ipairs(self.buffered) do late[#late + 1] = r end
  self.buffered = {}
  self.renews = {} -- what is held is released below
  for k, h in pairs(self.held) do
    for o in pairs(h.offsets) do queue_ack(self, h.info, o, ACK.release) end
    self.held[k] = nil
  end
  local sent, failed = flush(self, deadline, true, late, results)
  for _, x in ipairs(failed) do results[#results + 1] = x end
  for _, q in ipairs(sent) do
    if q.s.req == q.r then await(self, q.s, deadline, late) end
  end
  self.member:leave(deadline)
  self.closed = true
  for _, c in pairs(self.pool) do c:close("share consumer closed") end
  self.pool = {}
  if self.own_client then self.client:close() end
  return results
end

return _M
