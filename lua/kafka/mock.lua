-- kafka.mock: a Kafka broker (a cluster of them) in Lua, for tests.
--
--   local mock = require "kafka.mock"
--   local cluster = mock.new { brokers = 3, topics = { events = 6 } }
--   -- in-process: no TCP, no thread; requests are served inside the client's socket calls
--   local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory() }
--   -- or on TCP ports of 127.0.0.1, served by cluster:run(seconds) / cluster:step(timeout)
--   cluster:listen()
--
-- Faults: fail(api, error_code, count [, topic, partition]), down(id), up(id),
-- freeze(id [, move_leaders]), thaw(id), move_leader(topic, partition, id),
-- kill_controller(election_ms), move_controller(id), delay(api, ms),
-- drop_response(api, count).
-- Inspection: records(topic, partition), committed(group), group(id), offsets(topic, partition),
-- controller().
-- The controller (KRaft, every node a voter as in combined mode): node 1
-- at first. A broker that stops is fenced by the active controller at once
-- (its leaders fail over); while no controller is elected (kill_controller's
-- election_ms) nothing is fenced and no leader changes: a dead node stays
-- registered (listed in Metadata, still named leader of its partitions, its
-- connects refused), a node started again serves only once a controller is
-- elected, CreateTopics/DeleteTopics wait for the election (REQUEST_TIMED_OUT
-- after 60 s, Kafka's forwarding timeout) and Metadata does not auto-create.
-- The election needs a majority of the nodes running; the winner is the
-- first running node after the killed one, by id.
-- See README.md, "Testing your code with kafka.mock".
-- Parts: this file (the cluster: topics, brokers, faults, inspection),
-- kafka.mock.serve (a connection: frames in, answers out in order),
-- kafka.mock.handlers (one per API), kafka.mock.transport (in-process
-- sockets, TCP ports), kafka.mock.log (a partition's log), kafka.mock.group,
-- kafka.mock.share (share groups, KIP-932).
local proto = require "kafka.proto"
local Log = require "kafka.mock.log"
local Group = require "kafka.mock.group"
local handlers = require "kafka.mock.handlers"
local transport = require "kafka.mock.transport"
local share = require "kafka.mock.share"

local math, string, table = math, string, table
local error, type, pairs, ipairs, tostring, tonumber, setmetatable =
  error, type, pairs, ipairs, tostring, tonumber, setmetatable

local E = proto.errors

local _M = { VERSION = "0.1.0" }
local mt = { __index = _M }

-- What the mock implements: api key -> {min, max} (kafka.mock.handlers).
local SUPPORTED = handlers.SUPPORTED
_M.SUPPORTED = SUPPORTED


local function api_key_of(api, fname)
  local key
  if type(api) == "number" then
    key = api
  elseif type(api) == "string" then
    key = proto.api_key(api)
  end
  if not key or not SUPPORTED[key] then
    error(("kafka.mock: %s: unknown or unimplemented api %s"):format(fname, tostring(api)), 3)
  end
  return key
end

local function check_int(v, what, fname, min)
  if type(v) ~= "number" or v ~= math.floor(v) or (min and v < min) then
    error(("kafka.mock: %s: %s must be an integer%s, got %s"):format(fname, what,
      min and (" >= " .. min) or "", tostring(v)), 3)
  end
end

local clock_now, clock_sleep
local function default_clock()
  if not clock_now then
    local socket = require "socket"
    clock_now = function() return socket.gettime() * 1000 end
    clock_sleep = function(ms) if ms > 0 then socket.sleep(ms / 1000) end end
  end
  return clock_now, clock_sleep
end

local uuid_seq = 0
local function new_uuid()
  uuid_seq = uuid_seq + 1
  local t = {}
  for i = 1, 16 do t[i] = string.char(math.random(0, 255)) end
  t[1] = string.char(uuid_seq % 256) -- never the zero uuid
  return table.concat(t)
end

--------------------------------------------------------------------------
-- the cluster

-- mock.new{brokers = 3, topics = {name = partitions | {partitions=, replication_factor=, configs=}},
--          auto_create_topics = true, default_partitions = 1, cluster_id =, now =, sleep =,
--          group_min_session_timeout_ms = 6000, group_max_session_timeout_ms = 1800000,
--          initial_rebalance_delay_ms = 0, min_insync_replicas = 1,
--          share groups (kafka.mock.share; Kafka's broker configs and defaults):
--          group_share_record_lock_duration_ms = 30000, group_share_delivery_count_limit = 5,
--          group_share_heartbeat_interval_ms = 5000, group_share_session_timeout_ms = 45000,
--          group_share_min_record_lock_duration_ms = 15000, group_share_max_record_lock_duration_ms = 60000,
--          group_share_partition_max_record_locks = 2000}
function _M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("kafka.mock.new: options must be a table", 2) end
  local n = opts.brokers or 1
  check_int(n, "brokers", "new", 1)
  if (opts.now == nil) ~= (opts.sleep == nil) then error("kafka.mock.new: now and sleep go together", 2) end
  local now, sleep = opts.now, opts.sleep
  if not now then now, sleep = default_clock() end
  local self = setmetatable({
    brokers = {}, ids = {}, addr = {},
    topics = {}, groups = {},
    auto_create = opts.auto_create_topics ~= false,
    default_partitions = opts.default_partitions or 1,
    cluster_id = opts.cluster_id or "kafka-mock-cluster",
    now = now, sleep = sleep,
    group_min_session_timeout_ms = opts.group_min_session_timeout_ms or 6000,
    group_max_session_timeout_ms = opts.group_max_session_timeout_ms or 1800000,
    initial_rebalance_delay_ms = opts.initial_rebalance_delay_ms or 0,
    min_insync_replicas = opts.min_insync_replicas or 1,
    group_share_record_lock_duration_ms = opts.group_share_record_lock_duration_ms or 30000,
    group_share_delivery_count_limit = opts.group_share_delivery_count_limit or 5,
    group_share_heartbeat_interval_ms = opts.group_share_heartbeat_interval_ms or 5000,
    group_share_session_timeout_ms = opts.group_share_session_timeout_ms or 45000,
    group_share_min_record_lock_duration_ms = opts.group_share_min_record_lock_duration_ms or 15000,
    group_share_max_record_lock_duration_ms = opts.group_share_max_record_lock_duration_ms or 60000,
    group_share_partition_max_record_locks = opts.group_share_partition_max_record_locks or 2000,
    next_pid = 1000, txn_ids = {}, pids = {},
    faults = {}, delays = {}, drops = {},
    conns = {}, parked = {},
    active_controller = 1, election = nil, awaiting_controller = {},
    stats = { requests = {}, closed_bad = 0 },
  }, mt)
  check_int(self.default_partitions, "default_partitions", "new", 1)
  for id = 1, n do
    local b = { id = id, host = "mock", port = 9091 + id, up = true, inproc = "mock:" .. (9091 + id) }
    self.brokers[id] = b
    self.ids[id] = id
    self.addr[b.inproc] = b
  end
  if opts.topics ~= nil and type(opts.topics) ~= "table" then error("kafka.mock.new: topics must be a table", 2) end
  local names = {}
  for name in pairs(opts.topics or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local t = opts.topics[name]
    if type(t) == "number" then t = { partitions = t } end
    if type(t) ~= "table" then error("kafka.mock.new: topics." .. tostring(name) .. " must be a count or a table", 2) end
    local ok, err = self:_create(name, t.partitions or self.default_partitions, t.replication_factor, t.configs)
    if not ok then error("kafka.mock.new: topic " .. tostring(name) .. ": " .. err, 2) end
  end
  return self
end

local function valid_topic_name(name)
  return type(name) == "string" and #name > 0 and #name <= 249 and name ~= "." and name ~= ".."
    and not name:find("[^%w%._%-]")
end
_M._valid_topic_name = valid_topic_name -- Kafka's rule (also CreateTopics')

-- _create(name, partitions, rf, configs, assignments) -> topic | nil, message, error_code
function _M:_create(name, parts, rf, configs, assignments)
  if not valid_topic_name(name) then return nil, "invalid topic name", E.INVALID_TOPIC_EXCEPTION end
  if self.topics[name] then return nil, "topic exists", E.TOPIC_ALREADY_EXISTS end
  local up = {}
  for _, id in ipairs(self.ids) do if self.brokers[id].up then up[#up + 1] = id end end
  if not assignments then
    if type(parts) ~= "number" or parts < 1 or parts ~= math.floor(parts) then
      return nil, "invalid number of partitions", E.INVALID_PARTITIONS
    end
    rf = rf or math.min(3, #self.ids)
    if rf < 1 or rf > #up then return nil, "replication factor " .. rf .. " > available brokers", E.INVALID_REPLICATION_FACTOR end
  end
  local t = { name = name, id = new_uuid(), partitions = {}, count = 0, configs = {} }
  for _, c in ipairs(configs or {}) do t.configs[c.name] = c.value end
  for k, v in pairs(configs or {}) do if type(k) == "string" then t.configs[k] = v end end
  local mmb = tonumber(t.configs["max.message.bytes"])
  local count = assignments and #assignments or parts
  for i = 0, count - 1 do
    local replicas = {}
    if assignments then
      for _, id in ipairs(assignments[i + 1].broker_ids or {}) do
        if not self.brokers[id] then return nil, "unknown broker " .. tostring(id), E.INVALID_REPLICA_ASSIGNMENT end
        replicas[#replicas + 1] = id
      end
      if #replicas == 0 then return nil, "empty assignment", E.INVALID_REPLICA_ASSIGNMENT end
    else
      for r = 0, rf - 1 do replicas[#replicas + 1] = up[(i + r) % #up + 1] end
    end
    t.partitions[i] = { index = i, leader = replicas[1], epoch = 0, replicas = replicas,
      log = Log.new { max_message_bytes = mmb } }
  end
  t.count = count
  self.topics[name] = t
  return t
end

local function caller_error(fname, msg) error("kafka.mock: " .. fname .. ": " .. msg, 3) end

function _M:_partition_arg(fname, topic, partition)
  local t = self.topics[topic]
  if not t then caller_error(fname, "unknown topic " .. tostring(topic)) end
  local p = t.partitions[partition]
  if not p then caller_error(fname, ("topic %s has no partition %s"):format(topic, tostring(partition))) end
  return p, t
end

function _M:_broker_arg(fname, id)
  local b = self.brokers[id]
  if not b then caller_error(fname, "unknown broker id " .. tostring(id)) end
  return b
end

-- create_topic(name, partitions [, {replication_factor=, configs={name=value}}]) -> true; raises on a bad name or count
function _M:create_topic(name, partitions, o)
  if type(name) ~= "string" then caller_error("create_topic", "topic name must be a string") end
  check_int(partitions or self.default_partitions, "partitions", "create_topic", 1)
  local ok, err = self:_create(name, partitions or self.default_partitions, o and o.replication_factor, o and o.configs)
  if not ok then caller_error("create_topic", name .. ": " .. err) end
  return true
end

-- delete_topic(name) -> true: the topic and its logs are gone (a Fetch by
-- its id answers UNKNOWN_TOPIC_ID; create_topic(name) makes a new one with
-- a new id); raises on an unknown topic
function _M:delete_topic(name)
  if not self.topics[name] then caller_error("delete_topic", "unknown topic " .. tostring(name)) end
  self.topics[name] = nil
  return true
end

-- bootstrap() -> "host:port,..." of every broker (TCP addresses once listen() was called)
function _M:bootstrap()
  local t = {}
  for _, id in ipairs(self.ids) do
    local b = self.brokers[id]
    t[#t + 1] = b.host .. ":" .. b.port
  end
  return table.concat(t, ",")
end

local function up_brokers(self)
  local t = {}
  for _, id in ipairs(self.ids) do if self.brokers[id].up then t[#t + 1] = id end end
  return t
end
_M._up_brokers = up_brokers -- the live brokers' ids

-- Registered: running, or stopped but not yet fenced (no controller since).
-- Kafka's metadata lists these brokers and names them leaders.
local function registered(b)
  return b.up or not b.fenced
end
_M._registered = registered

local function registered_brokers(self)
  local t = {}
  for _, id in ipairs(self.ids) do if registered(self.brokers[id]) then t[#t + 1] = id end end
  return t
end
_M._registered_brokers = registered_brokers -- the handlers' Metadata

-- the coordinator of a group or transactional id: a hash over the
-- registered brokers (a dead one stays coordinator until it is fenced, as
-- the leader of its __consumer_offsets partition does)
function _M:coordinator(key)
  local reg = registered_brokers(self)
  if #reg == 0 then return nil end
  return reg[proto.murmur2(key) % #reg + 1]
end

function _M:_close_broker_conns(b)
  for c in pairs(self.conns) do
    if c.broker == b then c:close() end
  end
end

-- The partitions broker id leads move to a live replica that is not frozen.
function _M:_fail_over(id)
  for _, t in pairs(self.topics) do
    for i = 0, t.count - 1 do
      local p = t.partitions[i]
      if p.leader == id then
        for _, r in ipairs(p.replicas) do
          local rb = self.brokers[r]
          if r ~= id and rb.up and not rb.frozen then
            p.leader, p.epoch = r, p.epoch + 1
            break
          end
        end
      end
    end
  end
end

-- The active controller fences a stopped broker: out of the metadata, its
-- partitions to a live replica unless it was stopped with keep_leaders.
function _M:_fence(b)
  b.fenced = true
  if not b.keep_leaders then self:_fail_over(b.id) end
end

-- the process stops: connections closed, connects refused, the port closed
local function stop(self, b)
  b.up, b.frozen = false, nil
  self:_close_broker_conns(b)
  if b.server then
    b.server:close()
    b.server = nil
  end
end

-- down(id [, keep_leaders]): the broker stops (connections closed, connects
-- refused); the controller fences it at once: its partitions fail over to a
-- live replica unless keep_leaders. With no controller elected it stays
-- registered, its leaders kept, until the election. Stopping the active
-- controller is kill_controller(0).
function _M:down(id, keep_leaders)
  local b = self:_broker_arg("down", id)
  if id == self.active_controller then
    b.keep_leaders = keep_leaders and true or nil
    return self:_kill_controller(0)
  end
  b.pending_up = nil
  if not b.up then return true end
  stop(self, b)
  b.keep_leaders = keep_leaders and true or nil
  if self.active_controller then self:_fence(b) end
  return true
end

-- freeze(id [, move_leaders]): the broker stops answering, as a JVM stopped
-- with SIGSTOP: connections and requests are taken (the kernel's buffers)
-- but nothing is served or sent until thaw(id); with move_leaders its
-- partitions fail over at once (or at the election when no controller is
-- elected), as the cluster fences a broker whose heartbeats stopped. (Its
-- groups' timers go on running; what a client sent on a connection it
-- closed meanwhile is dropped with it.)
function _M:freeze(id, move_leaders)
  local b = self:_broker_arg("freeze", id)
  b.frozen = true
  if move_leaders then
    if self.active_controller then self:_fail_over(id) else b.move_on_election = true end
  end
  return true
end

-- thaw(id): a frozen broker serves what it was sent meanwhile, in order
function _M:thaw(id)
  local b = self:_broker_arg("thaw", id)
  b.move_on_election = nil
  if not b.frozen then return true end
  b.frozen = nil
  for c in pairs(self.conns) do
    if c.broker == b then c:feed("") end
  end
  return true
end

-- the broker process runs again and registers: partitions left without a
-- live leader get it back
local function start(self, b)
  b.up, b.fenced, b.pending_up, b.keep_leaders = true, nil, nil, nil
  if self.listening then self:_bind(b, b.port) end
  for _, t in pairs(self.topics) do
    for i = 0, t.count - 1 do
      local p = t.partitions[i]
      if not self.brokers[p.leader].up then
        for _, r in ipairs(p.replicas) do
          if r == b.id then p.leader, p.epoch = r, p.epoch + 1 end
        end
      end
    end
  end
end

-- up(id): the broker comes back (same port); partitions it leads are led
-- again only after move_leader. With no controller elected it serves from
-- the election on (a broker registers with the controller first).
function _M:up(id)
  local b = self:_broker_arg("up", id)
  if b.up then return true end
  if self.active_controller then start(self, b) else
    b.pending_up = true
    self:_check_election()
  end
  return true
end

--------------------------------------------------------------------------
-- the controller

-- controller() -> the active controller's id, or nil while one is elected
function _M:controller()
  return self.active_controller
end

function _M:_kill_controller(ms)
  local id = self.active_controller
  stop(self, self.brokers[id])
  self.active_controller = nil
  self.election = { at = self.now() + ms, after = id }
  self:_check_election()
  return id
end

-- kill_controller(election_ms) -> the id of the node killed: the active
-- controller's node stops as with down(id) (kill -9 of a combined node), and
-- no controller is elected for election_ms on the cluster's clock (Kafka:
-- the quorum's fetch timeout and election, and broker.session.timeout.ms
-- before the new controller fences the dead node: 3 s + 9 s at the
-- defaults); then the first running node after it by id is elected, if a
-- majority of the nodes runs (else at the first tick that has one).
function _M:kill_controller(ms)
  check_int(ms, "election_ms", "kill_controller", 0)
  if not self.active_controller then caller_error("kill_controller", "no controller is elected") end
  self.brokers[self.active_controller].keep_leaders = nil
  return self:_kill_controller(ms)
end

-- move_controller(id): node id is the active controller now (a running node,
-- not frozen): the controller resigned, or an election in progress ends now
function _M:move_controller(id)
  local b = self:_broker_arg("move_controller", id)
  if not (b.up or b.pending_up) or b.frozen then caller_error("move_controller", "broker " .. id .. " is not running") end
  self:_elect(id)
  return true
end

-- the new controller: it fences the stopped nodes, registers the started
-- ones, moves the frozen ones' leaders if asked, and answers the admin
-- requests that waited
function _M:_elect(id)
  self.election = nil
  self.active_controller = id
  for _, bid in ipairs(self.ids) do
    local b = self.brokers[bid]
    if not b.up and not b.fenced then self:_fence(b) end
  end
  for _, bid in ipairs(self.ids) do
    local b = self.brokers[bid]
    if b.pending_up then start(self, b) end
    if b.move_on_election then
      b.move_on_election = nil
      self:_fail_over(bid)
    end
  end
  local waiting = self.awaiting_controller
  self.awaiting_controller = {}
  for _, w in ipairs(waiting) do w.reply(w.run()) end
end

-- the election, once due: a majority of the nodes running (a node started
-- again counts: its controller runs before its broker registers)
function _M:_check_election(now)
  local e = self.election
  if not e or (now or self.now()) < e.at then return end
  local running, n = 0, #self.ids
  local winner
  for _, id in ipairs(self.ids) do
    local b = self.brokers[id]
    if (b.up or b.pending_up) and not b.frozen then running = running + 1 end
  end
  if running * 2 <= n then return end
  for k = 1, n do
    local id = self.ids[(e.after - 1 + k) % n + 1]
    local b = self.brokers[id]
    if (b.up or b.pending_up) and not b.frozen then winner = id; break end
  end
  self:_elect(winner)
end

-- a request only the controller acts on (CreateTopics, DeleteTopics: a
-- broker forwards them) waits for the election: run() gives the answer
-- then; after 60 s (Kafka's forwarding retry timeout) timed_out() does
local FORWARD_TIMEOUT_MS = 60000
function _M:_await_controller(reply, run, timed_out)
  self.awaiting_controller[#self.awaiting_controller + 1] = { reply = reply, run = run, timed_out = timed_out,
    deadline = self.now() + FORWARD_TIMEOUT_MS }
end

function _M:_expire_awaiting(now)
  if #self.awaiting_controller == 0 then return end
  local keep = {}
  for _, w in ipairs(self.awaiting_controller) do
    if now >= w.deadline then w.reply(w.timed_out()) else keep[#keep + 1] = w end
  end
  self.awaiting_controller = keep
end

-- move_leader(topic, partition, broker_id)
function _M:move_leader(topic, partition, id)
  local p = self:_partition_arg("move_leader", topic, partition)
  self:_broker_arg("move_leader", id)
  if p.leader ~= id then
    p.leader, p.epoch = id, p.epoch + 1
    local has = false
    for _, r in ipairs(p.replicas) do if r == id then has = true end end
    if not has then p.replicas[#p.replicas + 1] = id end
  end
  return true
end

-- fail(api, error_code, count [, topic, partition]): the next `count` requests
-- of that api (containing that partition, when given) get error_code (on
-- each partition of the request, or only on the one named).
function _M:fail(api, code, count, topic, partition)
  local key = api_key_of(api, "fail")
  check_int(code, "error_code", "fail")
  if not proto.errors[code] then caller_error("fail", "unknown Kafka error code " .. tostring(code)) end
  check_int(count or 1, "count", "fail", 1)
  if topic ~= nil and type(topic) ~= "string" then caller_error("fail", "topic must be a string") end
  if partition ~= nil then check_int(partition, "partition", "fail", 0) end
  local list = self.faults[key] or {}
  self.faults[key] = list
  list[#list + 1] = { code = code, count = count or 1, topic = topic, partition = partition }
  return true
end

-- delay(api, ms): every answer to that api is held ms milliseconds (0 ends it)
function _M:delay(api, ms)
  local key = api_key_of(api, "delay")
  check_int(ms, "ms", "delay", 0)
  self.delays[key] = ms > 0 and ms or nil
  return true
end

-- drop_response(api, count): the next `count` requests of that api are acted
-- on, their answers are lost and the connection closed
function _M:drop_response(api, count)
  local key = api_key_of(api, "drop_response")
  check_int(count or 1, "count", "drop_response", 1)
  self.drops[key] = (self.drops[key] or 0) + (count or 1)
  return true
end

-- clear_faults(): forgets pending fail/delay/drop_response injections
function _M:clear_faults()
  self.faults, self.delays, self.drops = {}, {}, {}
end

-- takes the first pending fault of api matching the request (count per
-- request): the handlers' side of fail()
function _M:_take_fault(key, pairs_of_request)
  local list = self.faults[key]
  if not list then return nil end
  for i, f in ipairs(list) do
    local match = not f.topic
    if f.topic then
      for _, tp in ipairs(pairs_of_request) do
        if tp[1] == f.topic and (f.partition == nil or f.partition == tp[2]) then match = true end
      end
    end
    if match then
      f.count = f.count - 1
      if f.count <= 0 then table.remove(list, i) end
      if #list == 0 then self.faults[key] = nil end
      return f
    end
  end
  return nil
end

-- records(topic, partition) -> the messages stored there, decoded
-- ({offset=, timestamp=, key=, value=, headers=}), from the log start
function _M:records(topic, partition)
  local p = self:_partition_arg("records", topic, partition)
  return p.log:messages()
end

-- offsets(topic, partition) -> log start offset, high watermark
function _M:offsets(topic, partition)
  local p = self:_partition_arg("offsets", topic, partition)
  return p.log.log_start, p.log.hw
end

-- expire_producers(topic, partition): the partition forgets every
-- idempotent producer's state, as Kafka does after producer.id.expiration.ms
-- (a forgotten producer's next batch is then taken at any sequence)
function _M:expire_producers(topic, partition)
  local p = self:_partition_arg("expire_producers", topic, partition)
  p.log.producers = {}
  return true
end

-- delete_records(topic, partition, offset) -> new log start offset
function _M:delete_records(topic, partition, offset)
  local p = self:_partition_arg("delete_records", topic, partition)
  check_int(offset, "offset", "delete_records", 0)
  return p.log:delete_before(offset)
end

-- leader(topic, partition) -> broker id
function _M:leader(topic, partition)
  return self:_partition_arg("leader", topic, partition).leader
end

-- committed(group) -> {topic = {[partition] = offset}} ({} for an unknown group);
-- committed(group, true) -> {topic = {[partition] = {offset=, metadata=, leader_epoch=}}}
function _M:committed(group, details)
  if type(group) ~= "string" then caller_error("committed", "group must be a string") end
  local g = self.groups[group]
  local out = {}
  if not g then return out end
  for topic, parts in pairs(g.offsets) do
    out[topic] = {}
    for p, o in pairs(parts) do out[topic][p] = details and { offset = o.offset, metadata = o.metadata,
      leader_epoch = o.leader_epoch } or o.offset end
  end
  return out
end

-- group(id) -> {state=, generation=, protocol_type=, protocol=, leader=, members={{member_id=, client_id=,
-- assignment=}}} | nil for an unknown group
function _M:group(id)
  if type(id) ~= "string" then caller_error("group", "group id must be a string") end
  local g = self.groups[id]
  return g and g:describe() or nil
end

function _M:_group(id)
  local g = self.groups[id]
  if not g then
    g = Group.new(self, id)
    self.groups[id] = g
  end
  return g
end


--------------------------------------------------------------------------
-- handlers (kafka.mock.handlers: one per API, keyed by Kafka's API name;
-- kafka.mock.serve decodes each request and calls its handler)

_M.handlers = handlers.handlers
_M._wake_fetches = handlers.wake_fetches

--------------------------------------------------------------------------
-- transports (kafka.mock.transport): in-process sockets and TCP ports

_M.socket_factory = transport.socket_factory
_M.listen = transport.listen
_M.step = transport.step
_M.run = transport.run
_M._bind = transport._bind

--------------------------------------------------------------------------
-- timers

-- tick([now]): the election, session timeouts, join phases, share record locks, Fetch and admin waits
-- (also run by step(), each request served and the in-process sockets)
function _M:tick(now)
  now = now or self.now()
  self:_check_election(now)
  self:_expire_awaiting(now)
  for _, g in pairs(self.groups) do g:tick(now) end
  share.tick(self, now)
  self:_wake_fetches(now)
end

function _M:_next_deadline()
  local t = share.next_deadline(self)
  for _, g in pairs(self.groups) do
    local d = g:next_deadline()
    if d and (not t or d < t) then t = d end
  end
  for _, pk in ipairs(self.parked) do if not t or pk.deadline < t then t = pk.deadline end end
  for _, w in ipairs(self.awaiting_controller) do if not t or w.deadline < t then t = w.deadline end end
  if self.election and (not t or self.election.at < t) then t = self.election.at end
  for c in pairs(self.conns) do
    local item = c:_due()
    if item and (not t or item.at < t) then t = item.at end
  end
  return t
end

-- close(): closes every connection and listening socket
function _M:close()
  for c in pairs(self.conns) do c:close() end
  for _, id in ipairs(self.ids) do
    local b = self.brokers[id]
    if b.server then
      b.server:close()
      b.server = nil
    end
  end
  self.listening = false
end

-- stats() -> {requests = {[api_name] = count}, closed_bad = connections closed for breaking the protocol}
function _M:request_counts()
  local out = {}
  for k, n in pairs(self.stats.requests) do out[proto.api_name(k)] = n end
  return out, self.stats.closed_bad
end

return _M