--- kafka.group: a consumer's membership in a consumer group. One object per
-- member, with a named state, driven from the consumer's calls (poll,
-- commit, ...): nothing runs in the background and nothing waits except on
-- a socket, bounded by the caller's deadline. Group requests go over the
-- member's own connection to the coordinator (a JoinGroup the broker holds
-- open never delays a commit or another member sharing the client).
--
-- The protocol parts are kafka.group.classic (JoinGroup/SyncGroup/
-- Heartbeat/LeaveGroup, client-side assignors in kafka.group.assignors)
-- and kafka.group.consumer_protocol (KIP-848: ConsumerGroupHeartbeat,
-- server-side assignment). This module holds what both share: the
-- subscription, the partitions the member owns, the rebalance callbacks
-- (errors contained), the poll interval, the identity commits carry.
--
-- States:
--   unjoined     not in the group (yet, or again after a loss): joins at the next step
--   joining      JoinGroup (classic) or the first heartbeat (consumer) in flight
--   assigning    classic: JoinGroup answered; the leader's metadata for its assignment (or
--                the SyncGroup's send) is pending, the next step goes on
--   syncing      classic: SyncGroup in flight (the leader sent the assignment)
--   stable       a member with an assignment; heartbeats every interval
--   reconciling  consumer protocol: revoking/assigning toward the target assignment
--   leaving      LeaveGroup / the leave heartbeat in flight (close, poll interval exceeded)
--   fenced       another member took this group_instance_id: poll fails with code "fenced"
--   failed       a fatal group error (e.g. INCONSISTENT_GROUP_PROTOCOL): poll fails with code "group"
--   closed       after close()
-- @module kafka.group
local proto = require "kafka.proto"

local errors = proto.errors
local API_FIND, API_METADATA = proto.api.FindCoordinator, proto.api.Metadata
local setmetatable, ipairs, pairs, tostring, xpcall, next = setmetatable, ipairs, pairs, tostring, xpcall, next
local table, string, os, math = table, string, os, math
local traceback = debug.traceback

local _M = {}

local function key(topic, partition) return topic .. "\0" .. partition end
_M.key = key

local function tp_less(a, b)
  if a.topic ~= b.topic then return a.topic < b.topic end
  return a.partition < b.partition
end
_M.tp_less = tp_less

-- sorted copy of a list of {topic=, partition=}
local function sorted(list)
  local t = {}
  for i, tp in ipairs(list) do t[i] = { topic = tp.topic, partition = tp.partition } end
  table.sort(t, tp_less)
  return t
end
_M.sorted = sorted

--- Groups partitions by topic (the consumer protocol's shape), sorted.
-- @tparam table list `{{topic=, partition=}...}`
-- @treturn table `{{topic=, partitions={...}}...}`
function _M.by_topic(list)
  local out, at = {}, {}
  for _, tp in ipairs(sorted(list)) do
    local t = at[tp.topic]
    if not t then
      t = { topic = tp.topic, partitions = {} }
      at[tp.topic] = t
      out[#out + 1] = t
    end
    t.partitions[#t.partitions + 1] = tp.partition
  end
  return out
end

--- The inverse of by_topic.
-- @tparam table list `{{topic=, partitions={...}}...}`
-- @treturn table `{{topic=, partition=}...}`
function _M.flatten(list)
  local out = {}
  for _, t in ipairs(list or {}) do
    for _, p in ipairs(t.partitions or {}) do out[#out + 1] = { topic = t.topic, partition = p } end
  end
  table.sort(out, tp_less)
  return out
end

-- A member id for protocols where the client makes it (ConsumerGroupHeartbeat
-- v1, KIP-1082): 16 bytes printed as Kafka's Uuid prints them (URL-safe
-- base64, no padding).
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local uuid_n = 0
--- A new member id, for protocols where the client makes it.
-- @treturn string 22 characters (16 bytes as Kafka's Uuid prints them)
function _M.uuid()
  uuid_n = uuid_n + 1
  local seed = tostring(os.time()) .. tostring(os.clock()) .. tostring({}) .. uuid_n
  local bytes = {}
  for i = 1, 4 do
    local h = proto.crc32(seed .. i .. table.concat(bytes, ","))
    for _ = 1, 4 do
      bytes[#bytes + 1] = h % 256
      h = math.floor(h / 256)
    end
  end
  local out, bits, nbits = {}, 0, 0
  for _, b in ipairs(bytes) do
    bits, nbits = bits * 256 + b, nbits + 8
    while nbits >= 6 do
      nbits = nbits - 6
      local v = math.floor(bits / 2 ^ nbits)
      bits = bits - v * 2 ^ nbits
      out[#out + 1] = B64:sub(v + 1, v + 1)
    end
  end
  if nbits > 0 then
    local v = bits * 2 ^ (6 - nbits)
    out[#out + 1] = B64:sub(v + 1, v + 1)
  end
  return table.concat(out)
end

local Member = {}
_M.Member = Member

--- A member of the consumer's group, in state "unjoined".
-- @tparam table consumer the kafka.consumer
-- @tparam table cfg the consumer's group options (group_instance_id, timeouts, callbacks)
-- @tparam table impl kafka.group.classic or kafka.group.consumer_protocol
-- @treturn Member the member
function _M.new(consumer, cfg, impl)
  local m = setmetatable({
    consumer = consumer,
    client = consumer.client,
    offsets = consumer.offsets,
    group_id = consumer.group_id,
    instance_id = cfg.group_instance_id,
    cfg = cfg,
    impl = impl,
    protocol = impl.NAME,
    state = "unjoined",
    pool = {},              -- node id -> the member's own coordinator connection
    asking = {},            -- slot -> {conn=, corr=}: a request whose answer a later step takes (Member:ask)
    owned = {},             -- key -> {topic=, partition=}
    sub = nil,              -- {topics = {...}} | {pattern = "lua pattern"} | {regex = "server-side regex"}
    topics = {},            -- the subscribed topic names now (a pattern resolved)
    last_poll = nil,
    retry_at = 0,           -- no join before this time (a backoff after an error)
    attempts = 0,           -- failed joins in a row (for the backoff)
    error = nil,            -- {msg, code, kcode} of a fatal state
    rebalances = 0,         -- assignments received (a test can see a rebalance happened)
    transitions = {},       -- the last states (newest last), for diagnostics
  }, { __index = function(_, k)
    local f = impl[k]
    if f ~= nil then return f end
    return Member[k]
  end })
  impl.init(m)
  return m
end

--- A consumer's membership in its group: one object per member, driven by
-- the consumer's calls; its protocol's methods (kafka.group.classic or
-- kafka.group.consumer_protocol: step, next_due, leave) come through it.
-- States: see the module's description and docs/internals.md.
-- @type Member

--- Moves to a state, kept in the last 32 transitions.
-- @tparam string s the new state
function Member:set_state(s)
  if self.state == s then return end
  self.state = s
  local tr = self.transitions
  tr[#tr + 1] = s
  if #tr > 32 then table.remove(tr, 1) end
end

--- The partitions the member owns.
-- @treturn table `{{topic=, partition=}...}`, sorted
function Member:owned_list()
  local t = {}
  for _, tp in pairs(self.owned) do t[#t + 1] = tp end
  return sorted(t)
end

--- Whether the member owns a partition.
-- @tparam string topic
-- @tparam integer partition
-- @treturn boolean
function Member:owns(topic, partition) return self.owned[key(topic, partition)] ~= nil end

--- Counts a failed join: no join again before the client's retry backoff.
function Member:backoff()
  self.attempts = self.attempts + 1
  self.retry_at = self.client.now() + self.client:backoff(self.attempts)
end

--- Runs a user callback; its error is kept (reported by the next poll) and
-- never breaks the member.
-- @tparam string name "on_assign", "on_revoke" or "on_lost"
-- @tparam table list the partitions
function Member:callback(name, list)
  local fn = self.cfg[name]
  if not fn or #list == 0 then return end
  local c = self.consumer
  local was = c.in_callback
  c.in_callback = true
  local ok, err = xpcall(function() return fn(c, list) end, traceback)
  c.in_callback = was
  if not ok then
    local ce = self.consumer.callback_errors
    ce[#ce + 1] = ("%s: %s"):format(name, tostring(err))
  end
end

--- The member owns these partitions from now on: their committed offsets
-- (else auto_offset_reset) become the positions, then on_assign runs.
-- @tparam table list `{{topic=, partition=}...}`
function Member:assigned(list)
  list = sorted(list)
  local fresh = {}
  for _, tp in ipairs(list) do
    if not self.owned[key(tp.topic, tp.partition)] then fresh[#fresh + 1] = tp end
  end
  if #fresh == 0 then return end
  for _, tp in ipairs(fresh) do self.owned[key(tp.topic, tp.partition)] = tp end
  self.rebalances = self.rebalances + 1
  self.consumer:_group_add(fresh)
  self:callback("on_assign", fresh)
end

--- Partitions given up in a rebalance: auto commit of their positions,
-- on_revoke (still owned there, so a commit in it goes through), then they
-- are not fetched any more.
-- @tparam table list `{{topic=, partition=}...}`
function Member:revoked(list)
  list = sorted(list)
  local gone = {}
  for _, tp in ipairs(list) do
    if self.owned[key(tp.topic, tp.partition)] then gone[#gone + 1] = tp end
  end
  if #gone == 0 then return end
  self.consumer:_group_auto_commit(gone)
  self:callback("on_revoke", gone)
  for _, tp in ipairs(gone) do self.owned[key(tp.topic, tp.partition)] = nil end
  self.consumer:_group_remove(gone)
end

--- Partitions taken away without a revocation (the session or poll interval
-- expired, the member was fenced): no commit, on_lost.
-- @tparam table list `{{topic=, partition=}...}`
function Member:lost(list)
  list = sorted(list or self:owned_list())
  if #list == 0 then return end
  self:callback("on_lost", list)
  for _, tp in ipairs(list) do self.owned[key(tp.topic, tp.partition)] = nil end
  self.consumer:_group_remove(list)
end

--- A poll started. A gap longer than max_poll_interval_ms means the member
-- was out of the group meanwhile (as Java's background thread would have
-- left it): leave, report the partitions lost, rejoin.
-- @tparam[opt] number deadline the poll's (bounds the LeaveGroup)
function Member:poll_begin(deadline)
  local t = self.client.now()
  local last = self.last_poll
  self.last_poll = t
  if last and t - last > self.cfg.max_poll_interval_ms and self.state ~= "unjoined" and self.state ~= "fenced"
      and self.state ~= "failed" and self.state ~= "closed" then
    self:leave("the poll interval was exceeded", deadline or t + self.client.default_api_timeout_ms)
    self:lost()
    self:rejoin_fresh()
  end
end

--- The member stops; every poll reports it.
-- @tparam string msg the error
-- @tparam string code "group" or "fenced"
-- @tparam[opt] integer kcode the Kafka error code
-- @tparam[opt="failed"] string state "failed" or "fenced"
function Member:fatal(msg, code, kcode, state)
  self.error = { msg = msg, code = code, kcode = kcode }
  self:set_state(state or "failed")
end

--- Forgets the group request in flight (its connection is closed: a
-- JoinGroup held open by the broker is not waited for).
-- @tparam string reason why, for the connection's close
function Member:drop_request(reason)
  if self.req then
    self.req.conn:close(reason or "group request dropped")
    self.req = nil
  end
end

--- A request whose answer may come after until_t: it is sent once, and
-- this call or a later one with the same slot takes the answer. Nothing
-- here waits past until_t: a request still in flight then (or a connection
-- still negotiating) is kept for the next call, never abandoned, so a poll
-- keeps its deadline and a short poll still makes progress (Java's
-- consumer keeps its FindCoordinator, OffsetFetch and metadata requests in
-- flight across polls the same way). Its own end is the connection's:
-- request_timeout_ms after it was sent.
-- @tparam string slot one per purpose ("find", "metadata", "assign", "ids", "positions")
-- @tparam function pick `pick(until_t)`: the connection to send on, or nil, err, code
-- @param api the api
-- @param body the request (used when it is sent), or a function returning it and
-- the highest version it can go at (connection:version's `upto`)
-- @tparam number until_t a time of the client's clock (ms)
-- @return the response, or nil, err, code ("pending" while it is in flight); then the
-- kafka code (nil) and the request body sent
function Member:ask(slot, pick, api, body, until_t)
  local q = self.asking[slot]
  if not q then
    local c, err, code, kcode = pick(until_t)
    if not c then
      if code == "timeout" then code = "pending" end
      return nil, err, code, kcode
    end
    local upto
    if type(body) == "function" then body, upto = body() end
    local v
    v, err, code = c:version(api, upto)
    if not v then return nil, err, code end
    local corr
    corr, err, code = c:send(api, v, body, { deadline = until_t })
    if not corr then return nil, err, code end
    q = { conn = c, corr = corr, body = body }
    self.asking[slot] = q
  end
  local resp, err, code = q.conn:receive(q.corr, until_t)
  if not resp and code == "timeout" and q.conn:waiting(q.corr) then return nil, err, "pending" end
  self.asking[slot] = nil
  return resp, err, code, nil, q.body
end

--- Whether a request of Member:ask is in flight.
-- @treturn boolean
function Member:asking_any() return next(self.asking) ~= nil end

--- The connection to the group's coordinator, found and connected without
-- waiting past until_t (Member:ask).
-- @tparam number until_t a time of the client's clock (ms)
-- @tparam[opt] boolean shared the client's connection instead of the member's own (commits
-- and offset fetches: never behind a JoinGroup the broker holds)
-- @return the connection, or nil, err, code ("pending": ask again later), kafka_code
function Member:coordinator(until_t, shared)
  local offsets, client = self.offsets, self.client
  if not offsets.node then
    local resp, err, code = self:ask("find", function(t) return client:any_broker(t) end, API_FIND,
      offsets:find_body(), until_t)
    if not resp then return nil, err, code end
    local node, kcode
    node, err, code, kcode = offsets:found(resp)
    if not node then return nil, err, code, kcode end
  end
  local c, err, code = client:broker(offsets.node, until_t, not shared and self.pool or nil)
  if not c then
    if code == "timeout" then return nil, err, "pending" end -- the connection negotiates on
    if code ~= "backoff" then offsets:invalidate() end
    return nil, err, code
  end
  return c
end

--- Fresh metadata of the subscription's topics (all topics for a pattern),
-- without waiting past until_t (Member:ask); the client's cache takes it.
-- Each purpose has its own slot, so an answer is never taken for a request
-- of other topics.
-- @tparam string slot "metadata" (the subscription), "assign", "ids"
-- @tparam number until_t a time of the client's clock (ms)
-- @tparam[opt] table names topic names (default: the subscription's)
-- @tparam[opt] table ids topic ids instead of names
-- @return the response, or nil, err, code ("pending": ask again later)
function Member:metadata(slot, until_t, names, ids)
  local client = self.client
  names = names or (not ids and self.sub.topics)
  local req
  if ids then
    req = {}
    for i, id in ipairs(ids) do req[i] = { topic_id = id } end
  elseif names then
    req = {}
    for i, n in ipairs(names) do req[i] = { name = n } end
  end
  local resp, err, code = self:ask(slot, function(t) return client:any_broker(t) end, API_METADATA,
    { topics = req, allow_auto_topic_creation = false }, until_t)
  if not resp then return nil, err, code end
  client:_apply_metadata(resp)
  return resp
end

--- The subscription's topic names in a metadata response (a Lua pattern
-- matched against every topic's name), sorted.
-- @tparam table resp a Metadata response
-- @treturn table the names
function Member:topic_names(resp)
  local sub = self.sub
  if sub.topics then return sub.topics end
  local names = {}
  for _, t in ipairs(resp.topics or {}) do
    if t.name and not t.is_internal and t.error_code == errors.NONE and string.find(t.name, sub.pattern) then
      names[#names + 1] = t.name
    end
  end
  table.sort(names)
  return names
end

--- The partition counts of the named topics that exist in a metadata
-- response.
-- @tparam table resp a Metadata response
-- @tparam table names topic names
-- @treturn table `{[topic] = partitions}`
function Member:topic_counts(resp, names) -- luacheck: ignore 212/self
  local want = {}
  for _, n in ipairs(names) do want[n] = true end
  local counts = {}
  for _, t in ipairs(resp.topics or {}) do
    if t.name and want[t.name] and t.error_code == errors.NONE and #(t.partitions or {}) > 0 then
      counts[t.name] = #t.partitions
    end
  end
  return counts
end

--- Sends a group request over the member's own coordinator connection,
-- answered by a later step; finding and connecting to the coordinator
-- never waits past until_t (Member:coordinator).
-- @param api the api
-- @tparam table body the request
-- @tparam[opt] number extra_ms time the broker may hold it (a JoinGroup's rebalance timeout)
-- @tparam[opt] string what its name in errors
-- @tparam[opt] number until_t a time of the client's clock (ms); default now + request_timeout_ms
-- @return true, or nil, err, code ("pending": the coordinator is being found or connected)
function Member:send(api, body, extra_ms, what, until_t)
  local client = self.client
  local deadline = until_t or (client.now() + client.o.request_timeout_ms)
  local c, err, code, kcode = self:coordinator(deadline)
  if not c then return nil, err, code, kcode end
  local v
  v, err, code = c:version(api)
  if not v then return nil, err, code end
  local corr
  corr, err, code = c:send(api, v, body, { timeout_ms = extra_ms, deadline = deadline })
  if not corr then
    self.offsets:invalidate()
    return nil, err, code
  end
  self.req = { conn = c, corr = corr, api = api, what = what, version = v, sent = client.now() }
  return true
end

--- The answer to the request in flight.
-- @tparam number until_t a time of the client's clock (ms)
-- @return the response, or nil, err, code ("timeout" while it is in flight)
function Member:await(until_t)
  local r = self.req
  local resp, err, code = r.conn:receive(r.corr, until_t)
  if not resp and code == "timeout" and r.conn:waiting(r.corr) then return nil, err, "timeout" end
  self.req = nil
  if not resp then self.offsets:invalidate() end
  return resp, err, code
end

--- A group request answered at once (LeaveGroup, the leave heartbeat).
-- @param api the api
-- @tparam table body the request
-- @tparam number deadline a time of the client's clock (ms)
-- @return the response, or nil, err, code
function Member:request_sync(api, body, deadline)
  local c, err, code = self.offsets:coordinator(deadline, self.pool)
  if not c then return nil, err, code end
  return c:request(api, body, { deadline = deadline })
end

--- Closes the member's own connections.
function Member:close_conns()
  for _, c in pairs(self.pool) do c:close("group member closed") end
  self.pool = {}
  self.asking = {}
end

--- The error a poll reports in a fatal state.
-- @return nil, or the message, code ("fenced" or "group") and Kafka code
function Member:failure()
  if self.state == "fenced" or self.state == "failed" then
    local e = self.error or {}
    return e.msg or ("group member " .. self.state), e.code or "group", e.kcode
  end
end

return _M
