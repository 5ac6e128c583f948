--- kafka.consumer: the consumer façade. Partitions come from a manual
-- assignment (assign) or from a consumer group (subscribe); fetching is
-- kafka.fetcher, committed offsets and the coordinator cache
-- kafka.offsets, group membership kafka.group (classic protocol or
-- KIP-848's consumer protocol).
--
--   local consumer = require "kafka.consumer"
--   local c = consumer.new({brokers = {"127.0.0.1:9092"}}, {group_id = "g"})
--   c:subscribe{"t1", "t2"}         -- or c:assign{{topic = "t", partition = 0, offset = "earliest"}}
--   local msgs, err = c:poll(1000)  -- {topic, partition, offset, key, value, headers, timestamp, high_watermark}...
--   c:commit()                      -- the positions of every owned partition
--   c:close()                       -- commits (enable_auto_commit), revokes, leaves
--
-- Options: kafka.options (docs/options.md); the guide: docs/consumer.md.
-- How poll reports errors: see poll() below and docs/consumer.md.
-- @module kafka.consumer
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"
local options = require "kafka.options"
local fetcher_mod = require "kafka.fetcher"
local offsets_mod = require "kafka.offsets"
local group = require "kafka.group"

local API = proto.api
local errors = proto.errors
local math = math
local setmetatable, tostring, type, ipairs, next, error, require = setmetatable, tostring, type, ipairs, next, error,
  require

local _M = {}
local mt = { __index = _M }

local WHERE = "kafka.consumer.new"
local OFFSET_WORDS = { "earliest", "latest", "committed", -1, -2 }

--- Makes a consumer. Options: docs/options.md (kafka.options); misuse
-- raises, naming the option.
-- @param client_or_opts a kafka.client, or a table of client options (the consumer then
-- owns its client)
-- @tparam[opt] table opts the consumer's options
-- @treturn table the consumer
-- @usage local c = kafka.consumer.new(client, { group_id = "g", auto_offset_reset = "earliest" })
function _M.new(client_or_opts, opts)
  local client, own = client_mod.ensure(client_or_opts, WHERE)
  local o = options.consumer(opts, client)
  local self = setmetatable({
    client = client,
    own_client = own,
    group_id = o.group_id,
    auto_offset_reset = o.auto_offset_reset,
    fetch_max_wait_ms = o.fetch_max_wait_ms,
    fetch_min_bytes = o.fetch_min_bytes,
    fetch_max_bytes = o.fetch_max_bytes,
    max_partition_fetch_bytes = o.max_partition_fetch_bytes,
    isolation_level = o.isolation_level,
    decode_opts = { check_crc = o.check_crcs, max_decompressed = o.max_decompressed,
                    skip_control = true, batches = false, stop_at_error = true },
    retry_backoff_ms = o.retry_backoff_ms,
    -- 500, Kafka's max.poll.records: a poll's messages then die young in
    -- Lua 5.4's generational collector (10000 survived its minor
    -- collections and went through its full ones: 1.3x slower consuming)
    max_poll_records = o.max_poll_records,
    enable_auto_commit = o.enable_auto_commit,
    auto_commit_interval_ms = o.auto_commit_interval_ms,
    callback_errors = {},
    in_callback = false,
    group = nil,
  }, mt)
  self.group_cfg = {
    group_protocol = o.group_protocol,
    partition_assignment_strategy = o.partition_assignment_strategy,
    group_remote_assignor = o.group_remote_assignor,
    session_timeout_ms = o.session_timeout_ms,
    heartbeat_interval_ms = o.heartbeat_interval_ms,
    max_poll_interval_ms = o.max_poll_interval_ms,
    rebalance_timeout_ms = o.rebalance_timeout_ms,
    group_instance_id = o.group_instance_id,
    on_assign = o.on_assign,
    on_revoke = o.on_revoke,
    on_lost = o.on_lost,
  }
  self.fetcher = fetcher_mod.new(client, self)
  self.offsets = self.group_id and offsets_mod.new(client, self.group_id) or nil
  self.next_auto_commit = client.now() + self.auto_commit_interval_ms
  self.auto_commit_req = nil  -- the automatic OffsetCommit in flight: {conn, corr, list}
  self.auto_commits = 0       -- automatic commits answered
  self.auto_commit_error = nil -- {err, code, kafka_code} of the last automatic commit refused or failed
  return self
end

-- Resolves a start offset: a number, "earliest", "latest" or "committed".
function _M:_resolve(topic, partition, offset)
  if type(offset) == "number" and offset >= 0 then return offset end
  if offset == "committed" then
    if not self.group_id then return nil, "offset 'committed' needs a group_id", "invalid" end
    local c, err, code = self.offsets:committed { { topic = topic, partition = partition } }
    if not c then return nil, err, code end
    if c[1].offset and c[1].offset >= 0 then return c[1].offset end
    if self.auto_offset_reset == "error" then
      return nil, ("no committed offset for %s/%d"):format(topic, partition), "no_offset"
    end
    offset = self.auto_offset_reset
  end
  if offset == nil then offset = self.auto_offset_reset == "error" and "latest" or self.auto_offset_reset end
  if offset == "earliest" or offset == -2 or offset == "latest" or offset == -1 then
    return self.fetcher:list_offsets(topic, partition, offset)
  end
  return nil, "bad offset " .. tostring(offset), "invalid"
end

--- Replaces the assignment (manual assignment, no group).
-- @tparam table list `{{topic=, partition=, offset=}...}`; offset is a number, "earliest",
-- "latest" or "committed" (default: committed with a group_id, else auto_offset_reset)
-- @return true, or nil, err, code
-- @usage c:assign { { topic = "events", partition = 0, offset = "earliest" } }
function _M:assign(list)
  if self.group then error("assign: the consumer is subscribed to a group (close it, or use another consumer)", 2) end
  if type(list) ~= "table" then check.fail("assign", "the assignment", "an array of {topic=, partition=, offset=}", list) end
  if #list == 0 and next(list) ~= nil then
    error("assign: expected an array of {topic=, partition=, offset=} (got a single entry or a map: "
      .. "wrap entries in a list)", 2)
  end
  for i, a in ipairs(list) do
    local name = ("assign[%d]"):format(i)
    if type(a) ~= "table" then check.fail("assign", name, "a {topic=, partition=, offset=} table", a) end
    if type(a.topic) ~= "string" then check.fail("assign", name .. ".topic", "a string", a.topic) end
    check.partition("assign", name .. ".partition", a.partition)
    if a.offset ~= nil then check.offset("assign", name .. ".offset", a.offset, OFFSET_WORDS) end
  end
  local states = {}
  for _, a in ipairs(list) do
    local n, err, code = self.client:partitions(a.topic)
    if not n then return nil, err, code end
    if a.partition >= n then
      return nil, ("topic %s has no partition %d"):format(a.topic, a.partition), "unknown_partition"
    end
    local start = a.offset
    if start == nil and self.group_id then start = "committed" end
    local off
    off, err, code = self:_resolve(a.topic, a.partition, start)
    if not off then return nil, err, code end
    states[#states + 1] = self.fetcher:new_state(a.topic, a.partition, off)
  end
  self.fetcher:replace(states)
  self.manual = #states > 0
  return true
end

-- A turn of the group from a call other than poll (heartbeats keep going).
function _M:_tick()
  local g = self.group
  if g and not self.in_callback then g:step(self.client.now()) end
end

--- The partitions assigned (in a group: owned), with their positions.
-- @treturn table `{{topic=, partition=, offset=, paused=}...}`
function _M:assignment()
  self:_tick()
  local t = {}
  for i, st in ipairs(self.fetcher.parts) do
    t[i] = { topic = st.topic, partition = st.partition, offset = st.offset, paused = st.paused or nil }
  end
  return t
end

--- The next offset poll will return for a partition (what commit stores).
-- @tparam string topic the topic
-- @tparam integer partition the partition
-- @treturn ?integer the offset, nil while it is not known yet or the partition is not assigned
function _M:position(topic, partition)
  local st = self.fetcher:get(tostring(topic), tostring(partition))
  return st and st.offset
end

--- Moves a partition's position; what was fetched for the old one is dropped.
-- @tparam string topic the topic
-- @tparam integer partition an assigned partition
-- @param offset a number, "earliest", "latest" or "committed"
-- @return true, or nil, err, code
function _M:seek(topic, partition, offset)
  if type(topic) ~= "string" then check.fail("seek", "topic", "a string", topic) end
  check.partition("seek", "partition", partition)
  check.offset("seek", "offset", offset, OFFSET_WORDS)
  local st = self.fetcher:get(topic, partition)
  if not st then return nil, ("%s/%d is not assigned"):format(topic, partition), "invalid" end
  local off, err, code = self:_resolve(topic, partition, offset)
  if not off then return nil, err, code end
  self.fetcher:set_position(st, off) -- what was fetched for the old position is dropped
  st.reset_error = nil
  return true
end

local function check_list(where, list, with_offset)
  if list == nil then return end
  if type(list) ~= "table" or (#list == 0 and next(list) ~= nil) then
    check.fail(where, "the partitions", "an array of {topic=, partition=" .. (with_offset and ", offset=}" or "}"), list)
  end
  for i, o in ipairs(list) do
    local name = ("%s[%d]"):format(where, i)
    if type(o) ~= "table" then check.fail(where, name, "a table", o) end
    if type(o.topic) ~= "string" then check.fail(where, name .. ".topic", "a string", o.topic) end
    check.partition(where, name .. ".partition", o.partition)
    if with_offset then
      check.int(where, name .. ".offset", o.offset, nil, -1)
      if o.offset == nil then check.fail(where, name .. ".offset", "an integer >= -1", nil) end
      check.typed(where, name .. ".metadata", o.metadata, nil, "string")
    end
  end
end

-- pause(partitions) / resume(partitions): paused partitions stay assigned
-- (and owned in a group) but are not fetched. A reassignment resumes them.
local function set_paused(self, where, list, paused)
  if list == nil then check.fail(where, "the partitions", "an array of {topic=, partition=}", nil) end
  check_list(where, list, false)
  for _, p in ipairs(list) do
    local st = self.fetcher:get(p.topic, p.partition)
    if not st then return nil, ("%s/%d is not assigned"):format(p.topic, p.partition), "invalid" end
  end
  for _, p in ipairs(list) do self.fetcher:get(p.topic, p.partition).paused = paused end
  self.fetcher:drop_pending() -- what was fetched for them is fetched again when they resume
  self:_tick()
  return true
end

--- Stops fetching partitions: they stay assigned (and owned in a group). A
-- reassignment resumes them.
-- @tparam table list `{{topic=, partition=}...}`
-- @return true, or nil, err, "invalid" (a partition not assigned)
function _M:pause(list) return set_paused(self, "pause", list, true) end
--- Fetches paused partitions again.
-- @tparam table list `{{topic=, partition=}...}`
-- @return true, or nil, err, "invalid" (a partition not assigned)
function _M:resume(list) return set_paused(self, "resume", list, false) end

--- Subscribes as a group member (needs group_id); joining happens in poll().
-- Names are exact; a pattern is a Lua pattern matched by the client against
-- the cluster's topics (both protocols, checked again every
-- metadata_max_age_ms); a regex is a Java (RE2J) regular expression the
-- coordinator matches (the consumer protocol, Kafka 4.0+).
-- @tparam table sub `{"t1", "t2"}`, `{pattern = "^logs%-"}` or `{regex = "logs-.*"}`
-- @return true, or nil, err, code
-- @usage assert(c:subscribe { "orders", "refunds" })
function _M:subscribe(sub)
  if not self.group_id then error("subscribe: the consumer has no group_id", 2) end
  if self.manual then error("subscribe: the consumer has a manual assignment (assign{} first)", 2) end
  if type(sub) ~= "table" then check.fail("subscribe", "the subscription", 'a list of topics, {pattern=} or {regex=}', sub) end
  local s
  if sub.pattern ~= nil then
    if type(sub.pattern) ~= "string" or sub.pattern == "" then
      check.fail("subscribe", "pattern", "a non-empty Lua pattern", sub.pattern)
    end
    local ok, perr = pcall(string.find, "", sub.pattern)
    if not ok then error("subscribe: bad Lua pattern: " .. tostring(perr), 2) end
    s = { pattern = sub.pattern }
  elseif sub.regex ~= nil then
    if type(sub.regex) ~= "string" or sub.regex == "" then
      check.fail("subscribe", "regex", "a non-empty regular expression", sub.regex)
    end
    if self.group_cfg.group_protocol == "classic" then
      error("subscribe: a regex is matched by the coordinator (group_protocol \"consumer\"); "
        .. "use {pattern = <Lua pattern>} with the classic protocol", 2)
    end
    s = { regex = sub.regex }
  else
    if #sub == 0 then check.fail("subscribe", "the subscription", "a non-empty list of topics, {pattern=} or {regex=}", sub) end
    local names, seen = {}, {}
    for i, t in ipairs(sub) do
      if type(t) ~= "string" or t == "" then check.fail("subscribe", ("topics[%d]"):format(i), "a topic name", t) end
      if not seen[t] then
        seen[t] = true
        names[#names + 1] = t
      end
    end
    table.sort(names)
    s = { topics = names }
  end
  local g = self.group
  if not g then
    local proto_name = self.group_cfg.group_protocol
    if not proto_name then
      local err, code
      proto_name, err, code = self:_detect_protocol()
      if not proto_name then return nil, err, code end
    end
    if s.regex and proto_name ~= "consumer" then
      return nil, "subscribe: a regex needs the consumer group protocol (this cluster speaks classic only)",
        "unsupported"
    end
    local impl = require(proto_name == "consumer" and "kafka.group.consumer_protocol" or "kafka.group.classic")
    g = group.new(self, self.group_cfg, impl)
    self.group = g
  elseif s.regex and g.protocol ~= "consumer" then
    return nil, "subscribe: a regex needs the consumer group protocol", "unsupported"
  end
  local changed = g.sub ~= nil
  g.sub = s
  if s.topics then g.topics = s.topics end
  if changed and g.state ~= "unjoined" then
    if g.protocol == "classic" then
      g.join_reason = "subscription changed"
      g:rejoin()
    else
      g.meta_next, g.hb_next = 0, 0
    end
  end
  return true
end

-- The consumer protocol where a broker offers ConsumerGroupHeartbeat v1+
-- (Kafka 4.0+, where KIP-848 is generally available; 3.9 offers v0 as an
-- early-access preview), else classic.
function _M:_detect_protocol()
  local client = self.client
  local c, err, code = client:call(function(deadline) return client:any_broker(deadline) end)
  if not c then return nil, err, code end
  local v = c:version(API.ConsumerGroupHeartbeat)
  if v and v >= 1 then return "consumer" end
  return "classic"
end

--- What a transactional producer's send_offsets_to_transaction needs to
-- commit offsets as this member (generation -1 and member "" without a
-- group membership). Raises without a group_id.
-- @treturn table `{group_id=, generation_id=, member_id=, group_instance_id=}`
function _M:group_metadata()
  local g = self.group
  if not self.group_id then error("group_metadata: the consumer has no group_id", 2) end
  if not g then return { group_id = self.group_id, generation_id = -1, member_id = "" } end
  return { group_id = self.group_id, member_id = g.member_id or "",
           generation_id = (g.protocol == "classic" and g.generation or g.epoch) or -1,
           group_instance_id = g.instance_id }
end

--- The group member's state (see docs/internals.md for the state machine).
-- @treturn ?table `{state=, protocol=, member_id=, generation=, rebalances=, leader=,
-- transitions=, auto_commit = {in_flight=, commits=, last_error=}}`, nil without subscribe
function _M:group_state()
  local g = self.group
  if not g then return nil end
  return { state = g.state, protocol = g.protocol, member_id = g.member_id,
           generation = g.protocol == "classic" and g.generation or g.epoch, rebalances = g.rebalances,
           leader = g.leader_id and g.leader_id == g.member_id or nil, transitions = g.transitions,
           auto_commit = { in_flight = self.auto_commit_req ~= nil, commits = self.auto_commits,
                           last_error = self.auto_commit_error } }
end

-- Called by the group member: partitions it owns from now on (positions
-- resolved by the next poll: committed offset, else auto_offset_reset).
function _M:_group_add(list)
  local states, stale = {}, {}
  local client = self.client
  for i, tp in ipairs(list) do
    states[i] = self.fetcher:new_state(tp.topic, tp.partition, nil)
    -- partitions added to a topic reach the assignment before this
    -- client's metadata: look again before routing to them
    local t = client.topics[tp.topic]
    if not (t and t.partitions[tp.partition]) and not stale[tp.topic] then
      stale[tp.topic] = true
      stale[#stale + 1] = tp.topic
    end
  end
  if #stale > 0 then
    client:load_metadata({ topics = stale }, client.now() + client.default_api_timeout_ms)
    for _, name in ipairs(stale) do client:invalidate(name) end
  end
  self.fetcher:add(states)
  self.need_positions = true
end

function _M:_group_remove(list)
  self.fetcher:remove(list)
end

-- Positions of the partitions that have none yet: one OffsetFetch for all,
-- then auto_offset_reset for those without a committed offset. Errors go
-- into errs (tried again by the next poll). While a transaction holds
-- offsets for one of them (UNSTABLE_OFFSET_COMMIT) they wait without a
-- position and without an error, asked again after retry_backoff_ms, as
-- in Java's consumer (a poll never blocks on another producer's transaction).
function _M:_positions(errs, deadline)
  local want = self.positions_want
  if not (self.need_positions or want) then return end
  local now = self.client.now()
  if self.unstable_until and now < self.unstable_until then return end
  if not want then
    want = {}
    for _, st in ipairs(self.fetcher.parts) do
      if not st.offset then want[#want + 1] = { topic = st.topic, partition = st.partition, st = st } end
    end
    self.need_positions = false
    if #want == 0 then return end
  end
  local got, err, code, kcode, retriable
  local g = self.group
  if g then
    -- asked without waiting past the poll's deadline (Member:ask): an
    -- answer not in yet is taken by a later poll, for the same partitions
    self.positions_want = want
    local resp, body
    resp, err, code, kcode, body = g:ask("positions", function(t) return g:coordinator(t, true) end, API.OffsetFetch,
      function() return self.offsets:committed_body(want) end, deadline or now + self.client.default_api_timeout_ms)
    if not resp and code == "pending" then return end
    self.positions_want = nil
    if resp then
      got, err, code, kcode, retriable = self.offsets:committed_result(want, resp, false, body)
    else
      self.offsets:invalidate()
      retriable = client_mod.RETRIABLE[code]
    end
  else
    got, err, code, kcode = self.offsets:committed(want, { unstable_now = true })
  end
  if not got then
    self.need_positions = true
    if kcode == errors.UNSTABLE_OFFSET_COMMIT or retriable then
      -- (a coordinator moved or down, an open transaction's offsets: asked
      -- again after the backoff, as Java's consumer does, not reported)
      self.unstable_until = self.client.now() + self.retry_backoff_ms
    else
      errs[#errs + 1] = { topic = want[1].topic, partition = want[1].partition, err = err, code = code,
        kafka_code = kcode }
    end
    return
  end
  for i, w in ipairs(want) do
    local st = w.st
    if self.fetcher:get(st.topic, st.partition) == st and not st.offset then
      local off = got[i].offset
      if off == nil or off < 0 then
        if self.auto_offset_reset == "error" then
          off, err, code = nil, ("no committed offset for %s/%d"):format(st.topic, st.partition), "no_offset"
        else
          off, err, code = self.fetcher:list_offsets(st.topic, st.partition, self.auto_offset_reset)
        end
      end
      if off then
        self.fetcher:set_position(st, off)
      else
        if code ~= "no_offset" then self.need_positions = true end
        errs[#errs + 1] = { topic = st.topic, partition = st.partition, err = err, code = code }
      end
    end
  end
end

-- Positions of owned partitions worth committing (moved since the last commit).
local function positions(self, list, all)
  local out = {}
  for _, tp in ipairs(list) do
    local st = self.fetcher:get(tp.topic, tp.partition)
    if st and st.offset and (all or st.offset ~= st.committed) then
      out[#out + 1] = { topic = st.topic, partition = st.partition, offset = st.offset, st = st }
    end
  end
  return out
end

-- A commit of list answered (ok) or refused: the positions it carried are
-- committed, or the group reacts to the refusal (react).
function _M:_committed(list, react, ok, err, code, kcode)
  if ok then
    for _, o in ipairs(list) do
      local st = self.fetcher:get(o.topic, o.partition)
      if st and st.offset == o.offset then st.committed = o.offset end
    end
    self.last_commit = list
    return true
  end
  if kcode and react and not self.in_callback then self.group:commit_error(kcode) end
  return nil, err, code, kcode
end

function _M:_commit_group(list, react)
  local g = self.group
  local id = g:identity()
  if not id then return nil, "not a member of the group now (" .. g.state .. ")", "rebalance" end
  return self:_committed(list, react, self.offsets:commit(list, id))
end

-- Auto commit of partitions being revoked (called by the group member).
function _M:_group_auto_commit(list)
  if not self.enable_auto_commit then return end
  local offs = positions(self, list, false)
  if #offs == 0 then return end
  local ok, err, code, kcode = self:_commit_group(offs, false)
  if not ok then self.auto_commit_error = { err = err, code = code, kafka_code = kcode } end
end

-- The automatic commit of a poll goes out asynchronously, as Java's
-- (maybeAutoCommitOffsetsAsync): sent when due, its answer taken by this
-- or a later poll, so poll keeps its deadline whatever the coordinator
-- does (a commit waited for took a poll(200) to 4 s with a node frozen).
-- One at a time; finding the coordinator and connecting never wait past
-- the poll's deadline (Member:coordinator: a later poll goes on with them).
function _M:_auto_commit(deadline)
  local g = self.group
  if not (g and self.enable_auto_commit) then return end
  self:_auto_commit_answer()
  local t = self.client.now()
  if self.auto_commit_req or t < self.next_auto_commit then return end
  self.next_auto_commit = t + self.auto_commit_interval_ms
  local id = g.state == "stable" and g:identity()
  if not id then return end
  local offs = positions(self, g:owned_list(), false)
  if #offs == 0 then return end
  local c, err, code, kcode = g:coordinator(deadline, true)
  if not c and code == "pending" then
    self.next_auto_commit = t -- the coordinator is being found or connected: the next poll sends it
    return
  end
  local body, upto = self.offsets:commit_body(offs, id)
  local v
  if c then v, err, code = c:version(API.OffsetCommit, upto) end
  local corr
  if v then corr, err, code = c:send(API.OffsetCommit, v, body, { deadline = deadline }) end
  if not corr then
    if c then self.offsets:invalidate() end
    self.auto_commit_error = { err = err, code = code, kafka_code = kcode }
    return
  end
  self.auto_commit_req = { conn = c, corr = corr, list = offs, body = body }
end

-- Takes the automatic commit's answer when it is there (waits until
-- until_t, default now): the positions committed, or the error kept for
-- group_state() and the group's reaction (a rebalance, a fence).
function _M:_auto_commit_answer(until_t)
  local r = self.auto_commit_req
  if not r then return end
  local resp, err, code = r.conn:receive(r.corr, until_t or self.client.now())
  if not resp and code == "timeout" and r.conn:waiting(r.corr) then return end
  self.auto_commit_req = nil
  local ok, kcode
  if resp then
    ok, err, code, kcode = self.offsets:commit_result(resp, r.body)
  else
    self.offsets:invalidate()
  end
  if self:_committed(r.list, true, ok, err, code, kcode) then
    self.auto_commits = self.auto_commits + 1
    self.auto_commit_error = nil
  else
    self.auto_commit_error = { err = err, code = code, kafka_code = kcode }
  end
end

local function result(self, out, errs)
  local ce = self.callback_errors
  if #ce > 0 then self.callback_errors = {} end
  if #errs == 0 then
    if #ce > 0 then out.callback_errors = ce end
    return out
  end
  if #out > 0 then
    out.errors = errs
    if #ce > 0 then out.callback_errors = ce end
    return out
  end
  for _, m in ipairs(ce) do errs[#errs + 1] = { err = m, code = "callback" } end
  local e = errs[1]
  local msg = e.err
  if #errs > 1 then msg = ("%s (and %d more partition errors)"):format(tostring(msg), #errs - 1) end
  return nil, msg, e.code, e.kafka_code, errs
end

local function fetchable(self)
  for _, st in ipairs(self.fetcher.parts) do
    if st.offset and not st.paused then return true end
  end
  return false
end

--- Fetches messages; a subscribed consumer runs its group here (joins,
-- heartbeats, rebalances and their callbacks, auto commits).
-- A partition that could not be fetched (leader unreachable, I/O error, a
-- non-retriable Kafka error, a corrupt batch, an offset out of range with
-- auto_offset_reset = "error") gives an entry `{topic=, partition=, err=,
-- code=, kafka_code=}`: with messages from other partitions the entries come
-- as messages.errors; with no messages at all poll returns nil, the first
-- error's message, code and kafka_code, and the whole list. Retriable Kafka
-- errors (a leader moved) are handled inside and not reported. A member
-- fenced or failed makes poll return nil, err, "fenced" or "group". Errors
-- raised by rebalance callbacks come as messages.callback_errors.
-- @tparam[opt] integer timeout_ms a deadline over the whole call (default fetch_max_wait_ms)
-- @treturn table messages `{topic=, partition=, offset=, key=, value=, headers=, timestamp=,
-- high_watermark=}...`, or nil, err, code, kafka_code, errors
-- @usage local msgs, err, code = c:poll(1000)
-- for _, m in ipairs(msgs or {}) do print(m.offset, m.value) end
function _M:poll(timeout_ms)
  timeout_ms = check.int("poll", "timeout_ms", timeout_ms, self.fetch_max_wait_ms, 0)
  return self:_poll(timeout_ms, proto.new_array(math.min(self.fetcher.max_poll_records, 65536)))
end

--- Fetches as poll does (the same group work, errors, positions and
-- max_poll_records), returning the records as one batch per partition:
-- columns instead of a table per message (kafka.consumer_batch). The
-- positions move exactly as if poll had returned the same records, so
-- poll and poll_batch may be mixed.
-- @tparam[opt] integer timeout_ms a deadline over the whole call (default fetch_max_wait_ms)
-- @treturn table batches `{topic=, partition=, count=, high_watermark=, offsets=, timestamps=,
-- keys=, values=}...` with `b:offset(i)`, `b:key(i)`, `b:value(i)`, `b:timestamp(i)`,
-- `b:headers(i)` (i = 1..count), and `errors`, `callback_errors` as poll's; or nil, err,
-- code, kafka_code, errors
-- @usage for _, b in ipairs(c:poll_batch(1000) or {}) do
--   for i = 1, b.count do print(b.topic, b.partition, b:offset(i), b:value(i)) end
-- end
function _M:poll_batch(timeout_ms)
  timeout_ms = check.int("poll_batch", "timeout_ms", timeout_ms, self.fetch_max_wait_ms, 0)
  local out, err, code, kcode, errs = self:_poll(timeout_ms, fetcher_mod.batches_out())
  if not out then return nil, err, code, kcode, errs end
  return fetcher_mod.finish(out)
end

-- poll and poll_batch: out is where the fetcher puts what it decodes (see
-- kafka.fetcher's count).
function _M:_poll(timeout_ms, out)
  local client = self.client
  local now = client.now
  local deadline = now() + timeout_ms
  local errs = {}
  local g = self.group
  if not g then
    if #self.fetcher.parts == 0 then
      client.sleep(timeout_ms)
      return out
    end
    self.fetcher:fetch(deadline, out, errs)
    self.fetcher:end_poll()
    return result(self, out, errs)
  end
  local msg, code, kcode = g:failure()
  if msg then return nil, msg, code, kcode end
  g:poll_begin(deadline)
  self:_auto_commit(deadline)
  while true do
    local can_fetch = fetchable(self)
    g:step(can_fetch and now() or deadline)
    msg, code, kcode = g:failure()
    if msg then return nil, msg, code, kcode end
    self:_auto_commit_answer()
    self:_positions(errs, deadline)
    if fetchable(self) then
      -- (also past the deadline: a poll(0) takes what is buffered or
      -- answered and sends the next Fetches, as the consumer without a group)
      self.fetcher:fetch(deadline, out, errs, g:next_due())
      if fetcher_mod.count(out) > 0 then break end
    else
      local t = now()
      if t >= deadline then break end
      local wake = math.min(deadline, g:next_due())
      if wake > t then client.sleep(math.max(1, math.ceil(wake - t))) end
    end
    if now() >= deadline then break end
  end
  self.fetcher:end_poll()
  return result(self, out, errs)
end

--- Commits offsets. In a group the commit carries the member's generation
-- (or epoch); a partition the member does not own, or a member between
-- generations, gives nil, err, "rebalance".
-- @tparam[opt] table offsets `{{topic=, partition=, offset=, metadata=}...}`; default: the
-- position of every assigned (owned) partition
-- @return true, or nil, err, code, kafka_code
function _M:commit(offsets)
  if not self.group_id then error("commit: the consumer has no group_id", 2) end
  check_list("commit", offsets, true)
  local g = self.group
  self:_tick()
  if g then
    if not offsets then
      offsets = positions(self, g:owned_list(), true)
      if #offsets == 0 then return true end
    else
      for _, o in ipairs(offsets) do
        if not g:owns(o.topic, o.partition) then
          return nil, ("commit: %s/%d is not owned by this member (%s)"):format(o.topic, o.partition, g.state),
            "rebalance"
        end
      end
    end
    return self:_commit_group(offsets, true)
  end
  if not offsets then
    offsets = {}
    for i, st in ipairs(self.fetcher.parts) do offsets[i] = { topic = st.topic, partition = st.partition, offset = st.offset } end
  end
  return self.offsets:commit(offsets)
end

--- The committed offsets (asked with require_stable: an open transaction's
-- offsets are waited for, up to the client's default_api_timeout_ms).
-- @tparam[opt] table partitions `{{topic=, partition=}...}`; default: the assigned ones
-- @treturn table `{{topic=, partition=, offset=, metadata=}...}` (offset -1 when none is
-- committed), or nil, err, code
function _M:committed(partitions)
  if not self.group_id then error("committed: the consumer has no group_id", 2) end
  check_list("committed", partitions, false)
  self:_tick()
  partitions = partitions or self:assignment()
  return self.offsets:committed(partitions)
end

--- Closes the consumer: a group member commits its positions
-- (enable_auto_commit), revokes its partitions (on_revoke) and leaves the
-- group (a static member keeps its place until its session times out on the
-- classic protocol, or leaves with epoch -2 on the consumer protocol); the
-- consumer's connections are closed.
function _M:close()
  local g = self.group
  if g and g.state ~= "closed" then
    local deadline = self.client.now() + self.client.default_api_timeout_ms
    if g.state ~= "fenced" and g.state ~= "failed" then
      g:revoked(g:owned_list())
      g:leave("the consumer is closing", deadline)
    end
    g:drop_request("closed")
    g:close_conns()
    g:set_state("closed")
  end
  self.fetcher:close()
  if self.own_client then self.client:close() end
end

return _M
