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
-- delay(api, ms), drop_response(api, count).
-- Inspection: records(topic, partition), committed(group), group(id), offsets(topic, partition).
-- See README.md, "Testing your code with kafka.mock".
local proto = require "kafka.proto"
local Log = require "kafka.mock.log"
local Group = require "kafka.mock.group"

local math, string, table = math, string, table
local error, type, pairs, ipairs, tostring, tonumber, setmetatable, pcall =
  error, type, pairs, ipairs, tostring, tonumber, setmetatable, pcall

local E = proto.errors
local API = proto.api
local i16, i32 = Log.i16, Log.i32

local _M = { VERSION = "0.1.0" }
local mt = { __index = _M }

-- What the mock implements: api key -> {min, max}. ApiVersions advertises exactly this.
local SUPPORTED = {
  [API.Produce] = { 0, 11 },
  [API.Fetch] = { 0, 12 }, -- v13+ addresses topics by id: not implemented
  [API.ListOffsets] = { 0, 10 },
  [API.Metadata] = { 0, 12 },
  [API.OffsetCommit] = { 0, 9 },
  [API.OffsetFetch] = { 0, 9 },
  [API.FindCoordinator] = { 0, 6 },
  [API.JoinGroup] = { 0, 9 },
  [API.Heartbeat] = { 0, 4 },
  [API.LeaveGroup] = { 0, 5 },
  [API.SyncGroup] = { 0, 5 },
  [API.DescribeGroups] = { 0, 5 },
  [API.ListGroups] = { 0, 4 },
  [API.ApiVersions] = { 0, 4 },
  [API.CreateTopics] = { 0, 7 },
  [API.DeleteTopics] = { 0, 6 },
  [API.DeleteRecords] = { 0, 2 },
  [API.InitProducerId] = { 0, 5 },
}
_M.SUPPORTED = SUPPORTED

local MAX_FRAME = 104857600 -- Kafka's socket.request.max.bytes
local RAW = { raw_records = true }
local NO_RESPONSE = {}

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
--          initial_rebalance_delay_ms = 0, min_insync_replicas = 1}
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
    next_pid = 1000, txn_ids = {}, pids = {},
    faults = {}, delays = {}, drops = {},
    conns = {}, parked = {},
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

-- the coordinator of a group or transactional id: a hash over the live brokers
function _M:coordinator(key)
  local up = up_brokers(self)
  if #up == 0 then return nil end
  return up[proto.murmur2(key) % #up + 1]
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

-- down(id [, keep_leaders]): the broker stops (connections closed, connects
-- refused); its partitions fail over to a live replica unless keep_leaders.
function _M:down(id, keep_leaders)
  local b = self:_broker_arg("down", id)
  b.up, b.frozen = false, nil
  self:_close_broker_conns(b)
  if b.server then
    b.server:close()
    b.server = nil
  end
  if not keep_leaders then self:_fail_over(id) end
  return true
end

-- freeze(id [, move_leaders]): the broker stops answering, as a JVM stopped
-- with SIGSTOP: connections and requests are taken (the kernel's buffers)
-- but nothing is served or sent until thaw(id); with move_leaders its
-- partitions fail over at once, as the cluster fences a broker whose
-- heartbeats stopped. (Its groups' timers go on running; what a client
-- sent on a connection it closed meanwhile is dropped with it.)
function _M:freeze(id, move_leaders)
  local b = self:_broker_arg("freeze", id)
  b.frozen = true
  if move_leaders then self:_fail_over(id) end
  return true
end

-- thaw(id): a frozen broker serves what it was sent meanwhile, in order
function _M:thaw(id)
  local b = self:_broker_arg("thaw", id)
  if not b.frozen then return true end
  b.frozen = nil
  for c in pairs(self.conns) do
    if c.broker == b then c:feed("") end
  end
  return true
end

-- up(id): the broker comes back (same port); partitions it leads are led again only after move_leader
function _M:up(id)
  local b = self:_broker_arg("up", id)
  if b.up then return true end
  b.up = true
  if self.listening then self:_bind(b, b.port) end
  -- partitions left without a live leader get this one back
  for _, t in pairs(self.topics) do
    for i = 0, t.count - 1 do
      local p = t.partitions[i]
      if not self.brokers[p.leader].up then
        for _, r in ipairs(p.replicas) do
          if r == id then p.leader, p.epoch = r, p.epoch + 1 end
        end
      end
    end
  end
  return true
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
-- serving requests (both transports)

local Conn = {}
Conn.__index = Conn

function _M:_open(b, transport, host)
  local c = setmetatable({ cluster = self, broker = b, transport = transport, chunks = {}, have = 0,
    outq = {}, closed = false, host = host or "127.0.0.1" }, Conn)
  self.conns[c] = true
  return c
end

function Conn:close()
  if self.closed then return end
  self.closed = true
  self.outq = {}
  self.cluster.conns[self] = nil
  for i = #self.cluster.parked, 1, -1 do
    if self.cluster.parked[i].conn == self then table.remove(self.cluster.parked, i) end
  end
  if self.sock then
    self.sock:close()
    self.sock = nil
  end
end

-- feed(data): bytes from the client; whole frames are served at once
function Conn:feed(data)
  if self.closed then return end
  if #data > 0 then
    self.chunks[#self.chunks + 1] = data
    self.have = self.have + #data
  end
  while not self.closed and not self.broker.frozen and self.have >= 4 do
    local buf = #self.chunks == 1 and self.chunks[1] or table.concat(self.chunks)
    self.chunks = { buf }
    local size = i32(buf, 1)
    if size < 8 or size > MAX_FRAME then
      self.cluster.stats.closed_bad = self.cluster.stats.closed_bad + 1
      return self:close()
    end
    if self.have < size + 4 then return end
    local frame = buf:sub(1, size + 4)
    local rest = buf:sub(size + 5)
    self.chunks = rest ~= "" and { rest } or {}
    self.have = #rest
    self.cluster:_serve(self, frame)
  end
end

local finish -- (conn, item, body): the answer to item is ready

local function bad_client(conn)
  conn.cluster.stats.closed_bad = conn.cluster.stats.closed_bad + 1
  conn:close()
end

local function api_versions_body(code)
  local keys = {}
  local ks = {}
  for k in pairs(SUPPORTED) do ks[#ks + 1] = k end
  table.sort(ks)
  for _, k in ipairs(ks) do keys[#keys + 1] = { api_key = k, min_version = SUPPORTED[k][1], max_version = SUPPORTED[k][2] } end
  return { error_code = code or 0, api_keys = keys, throttle_time_ms = 0 }
end

-- takes the first pending fault of api matching the request (count per request)
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

local function fault_hits(f, topic, partition)
  return f and (not f.topic or (f.topic == topic and (f.partition == nil or f.partition == partition)))
end

function _M:_serve(conn, frame)
  local key, version = i16(frame, 5), i16(frame, 7)
  local corr = i32(frame, 9)
  local range = SUPPORTED[key]
  local now = self.now()
  if key == API.ApiVersions and range and version > range[2] then
    -- an ApiVersions the mock does not know: error 35 with a v0 body, as Kafka does
    local body = api_versions_body(E.UNSUPPORTED_VERSION)
    conn:_push({ corr = corr, at = now, frame = proto.encode_response(API.ApiVersions, 0, corr, body) })
    return
  end
  if not range or version < range[1] or version > range[2] then return bad_client(conn) end
  local ok, req = pcall(proto.decode_request, frame, RAW)
  if not ok or not req then return bad_client(conn) end
  self.stats.requests[key] = (self.stats.requests[key] or 0) + 1
  local item = { corr = corr, api = key, version = version, at = now + (self.delays[key] or 0) }
  if (self.drops[key] or 0) > 0 then
    self.drops[key] = self.drops[key] - 1
    if self.drops[key] == 0 then self.drops[key] = nil end
    item.drop = true
  end
  conn:_push(item)
  local reply = function(body) finish(conn, item, body) end
  local h = self.handlers[proto.api_name(key)]
  local body = h(self, conn, req.body or {}, version, reply, req, item)
  if body == NO_RESPONSE then
    conn:_unpush(item)
  elseif body then
    reply(body)
  end
end

-- The answer the connection may send next (by now, when given), if any:
-- none while its broker is frozen
function Conn:_due(now)
  local item = self.outq[1]
  if item and (item.frame or item.close) and not self.broker.frozen and (not now or item.at <= now) then return item end
end

function Conn:_push(item)
  self.outq[#self.outq + 1] = item
end

function Conn:_unpush(item)
  for i, x in ipairs(self.outq) do
    if x == item then
      table.remove(self.outq, i)
      if item.drop then self.outq[#self.outq + 1] = { close = true, at = item.at } end
      return
    end
  end
end

function finish(conn, item, body)
  if item.done then return end
  item.done = true
  if item.drop then
    item.close = true
    return
  end
  item.frame = proto.encode_response(item.api, item.version, item.corr, body)
  if conn.on_ready then conn:on_ready() end
end

--------------------------------------------------------------------------
-- handlers

-- One handler per API, keyed by Kafka's API name (H.Produce, H.Fetch, ...):
-- handler(cluster, conn, body, version, reply, request, item) -> a body to
-- answer with, nil when it answers later through reply, or NO_RESPONSE.
local H = {}
_M.handlers = H

local function partition_error(self, conn, topic, partition, check_leader)
  local t = self.topics[topic]
  if not t then return E.UNKNOWN_TOPIC_OR_PARTITION end
  local p = t.partitions[partition]
  if not p then return E.UNKNOWN_TOPIC_OR_PARTITION end
  if check_leader and p.leader ~= conn.broker.id then return E.NOT_LEADER_OR_FOLLOWER end
  return 0, p, t
end

local function epoch_error(p, current)
  if current and current >= 0 then
    if current < p.epoch then return E.FENCED_LEADER_EPOCH end
    if current > p.epoch then return E.UNKNOWN_LEADER_EPOCH end
  end
  return 0
end

-- ApiVersions
H.ApiVersions = function()
  return api_versions_body(0)
end

-- Metadata
local function topic_metadata(self, t, version)
  local parts = {}
  for i = 0, t.count - 1 do
    local p = t.partitions[i]
    local isr, offline = {}, {}
    for _, r in ipairs(p.replicas) do
      if self.brokers[r].up then isr[#isr + 1] = r else offline[#offline + 1] = r end
    end
    local lup = self.brokers[p.leader].up
    parts[#parts + 1] = { error_code = lup and 0 or E.LEADER_NOT_AVAILABLE, partition_index = i,
      leader_id = lup and p.leader or -1, leader_epoch = p.epoch, replica_nodes = p.replicas, isr_nodes = isr,
      offline_replicas = offline }
  end
  return { error_code = 0, name = t.name, topic_id = t.id, is_internal = false, partitions = parts,
    topic_authorized_operations = version >= 8 and -2147483648 or nil }
end

H.Metadata = function(self, _, b, version)
  local brokers = {}
  for _, id in ipairs(self.ids) do
    local br = self.brokers[id]
    if br.up then brokers[#brokers + 1] = { node_id = id, host = br.host, port = br.port } end
  end
  local up = up_brokers(self)
  local topics = {}
  local req = b.topics
  if version == 0 and req and #req == 0 then req = nil end
  local pairs_req = {}
  for _, t in ipairs(req or {}) do pairs_req[#pairs_req + 1] = { t.name } end
  local f = self:_take_fault(3, pairs_req)
  if not req then
    local names = {}
    for name in pairs(self.topics) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do topics[#topics + 1] = topic_metadata(self, self.topics[name], version) end
  else
    for _, rt in ipairs(req) do
      local name = rt.name
      local t = name and self.topics[name]
      if not t and name and self.auto_create and (version < 4 or b.allow_auto_topic_creation) then
        t = self:_create(name, self.default_partitions)
        if not t then
          topics[#topics + 1] = { error_code = valid_topic_name(name) and E.INVALID_REPLICATION_FACTOR
            or E.INVALID_TOPIC_EXCEPTION, name = name, partitions = {} }
        end
      end
      if t then
        topics[#topics + 1] = topic_metadata(self, t, version)
      elseif not (not valid_topic_name(name or "") and self.auto_create) then
        topics[#topics + 1] = { error_code = E.UNKNOWN_TOPIC_OR_PARTITION, name = name, topic_id = rt.topic_id,
          partitions = {} }
      end
    end
  end
  if f then
    for _, t in ipairs(topics) do if fault_hits(f, t.name, nil) then t.error_code = f.code end end
  end
  return { brokers = brokers, cluster_id = self.cluster_id, controller_id = up[1] or -1, topics = topics,
    cluster_authorized_operations = (version >= 8 and version <= 10) and -2147483648 or nil }
end

local function request_pairs(list, tname, plist, pname)
  local out = {}
  for _, t in ipairs(list or {}) do
    for _, p in ipairs(t[plist] or {}) do out[#out + 1] = { t[tname], p[pname] } end
  end
  return out
end

-- Produce
H.Produce = function(self, conn, b, version)
  local f = self:_take_fault(0, request_pairs(b.topic_data, "name", "partition_data", "index"))
  local acks = b.acks
  local now = self.now()
  local responses, any_error = {}, false
  for _, td in ipairs(b.topic_data or {}) do
    local prs = {}
    for _, pd in ipairs(td.partition_data or {}) do
      local r = { index = pd.index, error_code = 0, base_offset = -1, log_append_time_ms = -1, log_start_offset = -1 }
      prs[#prs + 1] = r
      local code, p, t = partition_error(self, conn, td.name, pd.index, true)
      if code == 0 and acks ~= 0 and acks ~= 1 and acks ~= -1 then code = E.INVALID_REQUIRED_ACKS end
      if code == 0 and fault_hits(f, td.name, pd.index) then code = f.code end
      local list, msg
      if code == 0 then
        list, code, msg = Log.parse(pd.records or "", version)
        if list then code = 0 end
      end
      if code == 0 then
        for _, e in ipairs(list) do
          if e.size > p.log.max_message_bytes then code, msg = E.MESSAGE_TOO_LARGE, "batch larger than max.message.bytes" end
        end
      end
      if code == 0 and acks == -1 then
        local isr = 0
        for _, rid in ipairs(p.replicas) do if self.brokers[rid].up then isr = isr + 1 end end
        local min_isr = tonumber(t.configs["min.insync.replicas"]) or self.min_insync_replicas
        if isr < min_isr then code = E.NOT_ENOUGH_REPLICAS end
      end
      if code == 0 then
        local dup_base
        code, msg, dup_base = p.log:check_producer(list)
        if code then
          if dup_base then r.base_offset = dup_base end
        else
          code = 0
          r.base_offset = p.log:append(list, now)
        end
      end
      r.error_code = code
      if code ~= 0 then
        any_error = true
        if version >= 8 then r.error_message = msg end
      else
        r.log_start_offset = p.log.log_start
      end
      if p then r.log_start_offset = p.log.log_start end
    end
    responses[#responses + 1] = { name = td.name, partition_responses = prs }
  end
  self:_wake_fetches()
  if acks == 0 then
    -- no answer; an error closes the connection, as Kafka signals it
    if any_error then conn.close_after = true end
    return NO_RESPONSE
  end
  return { responses = responses, throttle_time_ms = 0 }
end

-- Fetch: the answer, and the record bytes it carries
local function fetch_body(self, conn, b, version, f)
  local total, limit = 0, version >= 3 and b.max_bytes or 2147483647
  local magic_limit = version <= 1 and 0 or (version <= 3 and 1 or nil)
  local responses = {}
  for _, ft in ipairs(b.topics or {}) do
    local parts = {}
    for _, fp in ipairs(ft.partitions or {}) do
      local r = { partition_index = fp.partition, error_code = 0, high_watermark = -1, last_stable_offset = -1,
        log_start_offset = -1, preferred_read_replica = -1, records = "" }
      if version >= 4 then r.aborted_transactions = {} end
      parts[#parts + 1] = r
      local code, p = partition_error(self, conn, ft.topic, fp.partition, true)
      if code == 0 then code = epoch_error(p, fp.current_leader_epoch) end
      if code == 0 and fault_hits(f, ft.topic, fp.partition) then code = f.code end
      if code == 0 then
        local log = p.log
        r.high_watermark, r.last_stable_offset, r.log_start_offset = log.hw, log.hw, log.log_start
        local off = fp.fetch_offset
        if off < log.log_start or off > log.hw then
          code = E.OFFSET_OUT_OF_RANGE
        elseif off < log.hw then
          -- whole batches up to both limits; the first batch of the response always (KIP-74)
          local bytes = log:read(off, math.min(fp.partition_max_bytes, limit - total), magic_limit, total == 0)
          r.records = bytes
          total = total + #bytes
        end
      end
      r.error_code = code
    end
    responses[#responses + 1] = { topic = ft.topic, partitions = parts }
  end
  return { throttle_time_ms = 0, error_code = 0, session_id = 0, responses = responses }, total
end

H.Fetch = function(self, conn, b, version, reply)
  if version >= 7 and (b.session_id or 0) ~= 0 then
    return { error_code = E.FETCH_SESSION_ID_NOT_FOUND, session_id = 0, responses = {} }
  end
  local f = self:_take_fault(1, request_pairs(b.topics, "topic", "partitions", "partition"))
  local body, total = fetch_body(self, conn, b, version, f)
  if f or total >= (b.min_bytes or 1) or (b.max_wait_ms or 0) <= 0 then return body end
  -- wait for min_bytes until max_wait_ms, as a broker does; in-process too:
  -- the client's receive sleeps on the cluster's clock until then (answered
  -- at once, an empty poll spun, and never ended on an injected clock)
  self.parked[#self.parked + 1] = { conn = conn, b = b, version = version, reply = reply,
    deadline = self.now() + b.max_wait_ms }
  return nil
end

function _M:_wake_fetches(now)
  if #self.parked == 0 then return end
  now = now or self.now()
  local keep = {}
  for _, pk in ipairs(self.parked) do
    local body, total = fetch_body(self, pk.conn, pk.b, pk.version)
    if total >= (pk.b.min_bytes or 1) or now >= pk.deadline then pk.reply(body) else keep[#keep + 1] = pk end
  end
  self.parked = keep
end

-- ListOffsets
H.ListOffsets = function(self, conn, b, version)
  local f = self:_take_fault(2, request_pairs(b.topics, "name", "partitions", "partition_index"))
  local topics = {}
  for _, lt in ipairs(b.topics or {}) do
    local parts = {}
    for _, lp in ipairs(lt.partitions or {}) do
      local r = { partition_index = lp.partition_index, error_code = 0, timestamp = -1, offset = -1, leader_epoch = -1 }
      parts[#parts + 1] = r
      local code, p = partition_error(self, conn, lt.name, lp.partition_index, true)
      if code == 0 then code = epoch_error(p, lp.current_leader_epoch) end
      if code == 0 and fault_hits(f, lt.name, lp.partition_index) then code = f.code end
      if code == 0 then
        local log, ts = p.log, lp.timestamp
        local off, when
        if ts == -1 or ts == -5 then off, when = log.hw, -1
        elseif ts == -2 or ts == -4 then off, when = log.log_start, -1
        elseif ts == -3 then off, when = log:max_timestamp()
        else off, when = log:offset_for_time(ts) end
        r.offset, r.timestamp, r.leader_epoch = off, when, p.epoch
        if version == 0 then r.old_style_offsets = off >= 0 and { off } or {} end
      end
      r.error_code = code
    end
    topics[#topics + 1] = { name = lt.name, partitions = parts }
  end
  return { throttle_time_ms = 0, topics = topics }
end

-- FindCoordinator
H.FindCoordinator = function(self, conn, b, version)
  local f = self:_take_fault(10, {})
  local function one(key)
    if f then return { key = key, error_code = f.code, node_id = -1, host = "", port = -1 } end
    if (b.key_type or 0) > 1 then return { key = key, error_code = E.INVALID_REQUEST, node_id = -1, host = "", port = -1 } end
    local id = self:coordinator(key)
    if not id then return { key = key, error_code = E.COORDINATOR_NOT_AVAILABLE, node_id = -1, host = "", port = -1 } end
    local br = self.brokers[id]
    return { key = key, error_code = 0, node_id = id, host = br.host, port = br.port }
  end
  local _ = conn
  if version >= 4 then
    local list = {}
    for i, k in ipairs(b.coordinator_keys or {}) do list[i] = one(k) end
    return { throttle_time_ms = 0, coordinators = list }
  end
  local r = one(b.key)
  return { throttle_time_ms = 0, error_code = r.error_code, node_id = r.node_id, host = r.host, port = r.port }
end

-- the group coordinator checks: 0 or an error code
local function group_error(self, conn, group_id, key)
  if not group_id or group_id == "" then return E.INVALID_GROUP_ID end
  local f = self:_take_fault(key, {})
  if f then return f.code end
  if self:coordinator(group_id) ~= conn.broker.id then return E.NOT_COORDINATOR end
  return 0
end

-- JoinGroup
H.JoinGroup = function(self, conn, b, version, reply, req)
  local code = group_error(self, conn, b.group_id, 11)
  if code ~= 0 then return { error_code = code, generation_id = -1, member_id = b.member_id or "", leader = "",
    protocol_name = version < 7 and "" or nil, members = {} } end
  local g = self:_group(b.group_id)
  local function answer(body)
    if body.members == nil then body.members = {} end
    if body.leader == nil then body.leader = "" end
    if version < 7 and body.protocol_name == nil then body.protocol_name = "" end
    reply(body)
  end
  g:join(b, version, req.client_id or "", conn.host, answer, self.now())
  return nil
end

-- SyncGroup
H.SyncGroup = function(self, conn, b, version, reply)
  local code = group_error(self, conn, b.group_id, 14)
  if code ~= 0 then return { error_code = code, assignment = "" } end
  self:_group(b.group_id):sync(b, version, reply, self.now())
  return nil
end

-- Heartbeat
H.Heartbeat = function(self, conn, b)
  local code = group_error(self, conn, b.group_id, 12)
  if code ~= 0 then return { error_code = code } end
  local g = self.groups[b.group_id]
  if not g then return { error_code = E.UNKNOWN_MEMBER_ID } end
  return { error_code = g:heartbeat(b, self.now()) }
end

-- LeaveGroup
H.LeaveGroup = function(self, conn, b, version)
  local code = group_error(self, conn, b.group_id, 13)
  if code ~= 0 then return { error_code = code, members = {} } end
  local g = self.groups[b.group_id]
  local ids = {}
  if version >= 3 then
    for i, m in ipairs(b.members or {}) do ids[i] = m.member_id end
  else
    ids[1] = b.member_id
  end
  local errs
  if g then errs = g:leave(ids, self.now()) else errs = {} for i = 1, #ids do errs[i] = E.UNKNOWN_MEMBER_ID end end
  if version < 3 then return { error_code = errs[1] } end
  local members = {}
  for i, m in ipairs(b.members or {}) do
    members[i] = { member_id = m.member_id, group_instance_id = m.group_instance_id, error_code = errs[i] }
  end
  return { error_code = 0, members = members }
end

-- DescribeGroups
H.DescribeGroups = function(self, conn, b)
  local out = {}
  for _, id in ipairs(b.groups or {}) do
    local code = group_error(self, conn, id, 15)
    local g = self.groups[id]
    if code ~= 0 then
      out[#out + 1] = { error_code = code, group_id = id, group_state = "", protocol_type = "", protocol_data = "", members = {} }
    elseif not g then
      out[#out + 1] = { error_code = 0, group_id = id, group_state = "Dead", protocol_type = "", protocol_data = "", members = {} }
    else
      local d = g:describe()
      local members = {}
      for _, m in ipairs(d.members) do
        local meta = ""
        for _, p in ipairs(g.members[m.member_id].protocols or {}) do if p.name == d.protocol then meta = p.metadata end end
        members[#members + 1] = { member_id = m.member_id, group_instance_id = m.group_instance_id, client_id = m.client_id,
          client_host = m.client_host, member_metadata = meta, member_assignment = m.assignment or "" }
      end
      out[#out + 1] = { error_code = 0, group_id = id, group_state = d.state, protocol_type = d.protocol_type or "",
        protocol_data = d.protocol or "", members = members, authorized_operations = -2147483648 }
    end
  end
  return { groups = out }
end

-- ListGroups (the groups this broker coordinates)
H.ListGroups = function(self, conn)
  local out = {}
  local ids = {}
  for id in pairs(self.groups) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    if self:coordinator(id) == conn.broker.id then
      local g = self.groups[id]
      out[#out + 1] = { group_id = id, protocol_type = g.protocol_type or "", group_state = g.state, group_type = "classic" }
    end
  end
  return { error_code = 0, groups = out }
end

-- OffsetCommit
H.OffsetCommit = function(self, conn, b, version)
  local code = group_error(self, conn, b.group_id, 8)
  local g
  if code == 0 then
    g = self:_group(b.group_id)
    local gen = version >= 1 and b.generation_id_or_member_epoch or -1
    code = g:commit_check(gen, version >= 1 and b.member_id or "")
  end
  local topics = {}
  for _, t in ipairs(b.topics or {}) do
    local parts = {}
    for _, p in ipairs(t.partitions or {}) do
      local c = code
      if c == 0 then
        local tt = self.topics[t.name]
        if not tt or not tt.partitions[p.partition_index] then c = E.UNKNOWN_TOPIC_OR_PARTITION
        elseif p.committed_metadata and #p.committed_metadata > 4096 then c = E.OFFSET_METADATA_TOO_LARGE
        else
          g.offsets[t.name] = g.offsets[t.name] or {}
          g.offsets[t.name][p.partition_index] = { offset = p.committed_offset, metadata = p.committed_metadata or "",
            leader_epoch = p.committed_leader_epoch or -1 }
        end
      end
      parts[#parts + 1] = { partition_index = p.partition_index, error_code = c }
    end
    topics[#topics + 1] = { name = t.name, partitions = parts }
  end
  return { throttle_time_ms = 0, topics = topics }
end

-- OffsetFetch
local function fetch_offsets(self, conn, group_id, topics, per_partition_error)
  local code = group_error(self, conn, group_id, 9)
  local g = self.groups[group_id]
  local out = {}
  if code == 0 then
    local list = topics
    if not list then -- every committed partition
      list = {}
      local names = {}
      for name in pairs(g and g.offsets or {}) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do
        local idx = {}
        for p in pairs(g.offsets[name]) do idx[#idx + 1] = p end
        table.sort(idx)
        list[#list + 1] = { name = name, partition_indexes = idx }
      end
    end
    for _, t in ipairs(list) do
      local parts = {}
      for _, p in ipairs(t.partition_indexes or {}) do
        local o = g and g.offsets[t.name] and g.offsets[t.name][p]
        parts[#parts + 1] = { partition_index = p, committed_offset = o and o.offset or -1,
          committed_leader_epoch = o and o.leader_epoch or -1, metadata = o and o.metadata or "", error_code = 0 }
      end
      out[#out + 1] = { name = t.name, partitions = parts }
    end
  elseif per_partition_error then
    for _, t in ipairs(topics or {}) do
      local parts = {}
      for _, p in ipairs(t.partition_indexes or {}) do
        parts[#parts + 1] = { partition_index = p, committed_offset = -1, committed_leader_epoch = -1, metadata = "",
          error_code = code }
      end
      out[#out + 1] = { name = t.name, partitions = parts }
    end
  end
  return out, code
end

H.OffsetFetch = function(self, conn, b, version)
  if version >= 8 then
    local groups = {}
    for _, rg in ipairs(b.groups or {}) do
      local topics, code = fetch_offsets(self, conn, rg.group_id, rg.topics, false)
      groups[#groups + 1] = { group_id = rg.group_id, topics = topics, error_code = code }
    end
    return { throttle_time_ms = 0, groups = groups }
  end
  local topics, code = fetch_offsets(self, conn, b.group_id, b.topics, version < 2)
  return { throttle_time_ms = 0, topics = topics, error_code = code }
end

-- InitProducerId (idempotent producers; a transactional id gets an id and a new epoch)
H.InitProducerId = function(self, _, b)
  local f = self:_take_fault(22, {})
  if f then return { throttle_time_ms = 0, error_code = f.code, producer_id = -1, producer_epoch = -1 } end
  local tid = b.transactional_id
  if tid then
    local st = self.txn_ids[tid]
    if not st then
      st = { pid = self.next_pid, epoch = -1 }
      self.next_pid = self.next_pid + 1
      self.txn_ids[tid] = st
    end
    st.epoch = st.epoch + 1
    return { throttle_time_ms = 0, error_code = 0, producer_id = st.pid, producer_epoch = st.epoch }
  end
  local pid, epoch = b.producer_id or -1, b.producer_epoch or -1
  if pid >= 0 and self.pids[pid] then
    if self.pids[pid] ~= epoch then
      return { throttle_time_ms = 0, error_code = E.INVALID_PRODUCER_EPOCH, producer_id = -1, producer_epoch = -1 }
    end
    self.pids[pid] = epoch + 1
    return { throttle_time_ms = 0, error_code = 0, producer_id = pid, producer_epoch = epoch + 1 }
  end
  pid = self.next_pid
  self.next_pid = pid + 1
  self.pids[pid] = 0
  return { throttle_time_ms = 0, error_code = 0, producer_id = pid, producer_epoch = 0 }
end

-- CreateTopics
H.CreateTopics = function(self, _, b, version)
  local f = self:_take_fault(19, {})
  local out = {}
  for _, ct in ipairs(b.topics or {}) do
    local r = { name = ct.name, error_code = 0, num_partitions = -1, replication_factor = -1, configs = {} }
    local nparts = ct.num_partitions
    if nparts == -1 then nparts = self.default_partitions end
    local rf = ct.replication_factor
    if rf == -1 then rf = math.min(3, #self.ids) end
    local assignments = (ct.assignments and #ct.assignments > 0) and ct.assignments or nil
    if assignments then table.sort(assignments, function(x, y) return x.partition_index < y.partition_index end) end
    if f then
      r.error_code = f.code
    elseif b.validate_only then
      if self.topics[ct.name] then r.error_code = E.TOPIC_ALREADY_EXISTS
      elseif not valid_topic_name(ct.name) then r.error_code = E.INVALID_TOPIC_EXCEPTION end
    else
      local t, msg, code = self:_create(ct.name, nparts, rf, ct.configs, assignments)
      if not t then
        r.error_code = code
        if version >= 1 then r.error_message = msg end
      else
        r.topic_id = t.id
        r.num_partitions = t.count
        r.replication_factor = #t.partitions[0].replicas
      end
    end
    out[#out + 1] = r
  end
  return { throttle_time_ms = 0, topics = out }
end

-- DeleteTopics
H.DeleteTopics = function(self, _, b, version)
  local f = self:_take_fault(20, {})
  local list = {}
  if version >= 6 then
    for _, t in ipairs(b.topics or {}) do list[#list + 1] = { name = t.name, topic_id = t.topic_id } end
  else
    for _, n in ipairs(b.topic_names or {}) do list[#list + 1] = { name = n } end
  end
  local out = {}
  for _, d in ipairs(list) do
    local name = d.name
    if not name and d.topic_id then
      for n, t in pairs(self.topics) do if t.id == d.topic_id then name = n end end
    end
    local r = { name = name, topic_id = d.topic_id, error_code = 0 }
    local t = name and self.topics[name]
    if f then r.error_code = f.code
    elseif not t then r.error_code = (d.topic_id and not d.name) and E.UNKNOWN_TOPIC_ID or E.UNKNOWN_TOPIC_OR_PARTITION
    else
      r.topic_id = t.id
      self.topics[name] = nil
    end
    out[#out + 1] = r
  end
  return { throttle_time_ms = 0, responses = out }
end

-- DeleteRecords
H.DeleteRecords = function(self, conn, b)
  local f = self:_take_fault(21, request_pairs(b.topics, "name", "partitions", "partition_index"))
  local topics = {}
  for _, t in ipairs(b.topics or {}) do
    local parts = {}
    for _, p in ipairs(t.partitions or {}) do
      local code, pp = partition_error(self, conn, t.name, p.partition_index, true)
      if code == 0 and fault_hits(f, t.name, p.partition_index) then code = f.code end
      local low = -1
      if code == 0 then
        local off = p.offset == -1 and pp.log.hw or p.offset
        if off < 0 or off > pp.log.hw then code = E.OFFSET_OUT_OF_RANGE else low = pp.log:delete_before(off) end
      end
      parts[#parts + 1] = { partition_index = p.partition_index, low_watermark = low, error_code = code }
    end
    topics[#topics + 1] = { name = t.name, partitions = parts }
  end
  return { throttle_time_ms = 0, topics = topics }
end

--------------------------------------------------------------------------
-- timers

-- tick([now]): session timeouts, join phases, Fetch waits (also run by step() and the in-process sockets)
function _M:tick(now)
  now = now or self.now()
  for _, g in pairs(self.groups) do g:tick(now) end
  self:_wake_fetches(now)
end

function _M:_next_deadline()
  local t
  for _, g in pairs(self.groups) do
    local d = g:next_deadline()
    if d and (not t or d < t) then t = d end
  end
  for _, pk in ipairs(self.parked) do if not t or pk.deadline < t then t = pk.deadline end end
  for c in pairs(self.conns) do
    local item = c:_due()
    if item and (not t or item.at < t) then t = item.at end
  end
  return t
end

--------------------------------------------------------------------------
-- in-process transport: socket objects with the cosocket interface of kafka.socket

local S = {}
S.__index = S

-- socket_factory() -> function returning socket objects for kafka.client's `socket` option
function _M:socket_factory()
  return function()
    return setmetatable({ cluster = self, timeout = nil, rbuf = "", rpos = 1 }, S)
  end
end

function S:settimeout(ms)
  self.timeout = ms
end

function S:connect(host, port)
  local b = self.cluster.addr[tostring(host) .. ":" .. tostring(port)]
  if not b then return nil, "host not found" end
  if not b.up then return nil, "connection refused" end
  if self.conn then self.conn:close() end
  self.conn = self.cluster:_open(b, "inproc", "in-process")
  self.rbuf, self.rpos = "", 1
  return 1
end

function S:send(data)
  local c = self.conn
  if not c or c.closed then return nil, "closed" end
  c:feed(data)
  if c.close_after then c:close() end
  return #data
end

function S:receive(n)
  local c = self.conn
  if not c then return nil, "closed", "" end
  local cl = self.cluster
  local deadline = self.timeout and (cl.now() + self.timeout)
  while true do
    local avail = #self.rbuf - self.rpos + 1
    if avail >= n then
      local s = self.rbuf:sub(self.rpos, self.rpos + n - 1)
      self.rpos = self.rpos + n
      if self.rpos > #self.rbuf then self.rbuf, self.rpos = "", 1 end
      return s
    end
    local now = cl.now()
    cl:tick(now)
    local item = c:_due(now)
    local function rest()
      local r = self.rbuf:sub(self.rpos)
      self.rbuf, self.rpos = "", 1
      return r
    end
    if item then
      table.remove(c.outq, 1)
      if item.close then
        c:close()
      else
        self.rbuf = self.rbuf:sub(self.rpos) .. item.frame
        self.rpos = 1
      end
    elseif c.closed then
      return nil, "closed", rest()
    else
      local wake = cl:_next_deadline()
      if deadline and now >= deadline then return nil, "timeout", rest() end
      if not wake and not deadline then return nil, "timeout", rest() end
      local target = wake and deadline and math.min(wake, deadline) or wake or deadline
      cl.sleep(math.max(target - now, 1))
    end
  end
end

function S:close()
  if self.conn then
    self.conn:close()
    self.conn = nil
  end
  return 1
end

--------------------------------------------------------------------------
-- TCP transport

local luasocket

function _M:_bind(b, port)
  -- tcp4/tcp6 make the descriptor now (tcp() waits for bind, and loses the
  -- option): up(id) binds the port again while its old connections linger
  local make = self.listen_host:find(":", 1, true) and luasocket.tcp6 or luasocket.tcp4
  local s = assert((make or luasocket.tcp)())
  assert(s:setoption("reuseaddr", true))
  local ok, err = s:bind(self.listen_host, port or 0)
  if not ok then
    s:close()
    return nil, err
  end
  assert(s:listen(128))
  s:settimeout(0)
  local _, p = s:getsockname()
  b.server = s
  b.port = tonumber(p)
  b.host = self.listen_host
  self.addr[b.host .. ":" .. b.port] = b
  return true
end

-- listen([{host = "127.0.0.1", ports = {p1, p2, ...}}]) -> bootstrap string.
-- Brokers then advertise these addresses (the in-process sockets accept them too).
function _M:listen(o)
  if o ~= nil and type(o) ~= "table" then caller_error("listen", "options must be a table") end
  o = o or {}
  if self.listening then caller_error("listen", "already listening") end
  luasocket = luasocket or require "socket"
  self.listen_host = o.host or "127.0.0.1"
  for i, id in ipairs(self.ids) do
    local b = self.brokers[id]
    if b.up then
      local ok, err = self:_bind(b, o.ports and o.ports[i] or 0)
      if not ok then caller_error("listen", ("broker %d: cannot listen on %s:%s: %s"):format(id, self.listen_host,
        tostring(o.ports and o.ports[i] or 0), tostring(err))) end
    end
  end
  self.listening = true
  return self:bootstrap()
end

local TCP_READ = 65536

function Conn:_tcp_read()
  for _ = 1, 64 do
    local data, err, partial = self.sock:receive(TCP_READ)
    data = data or partial
    if data and #data > 0 then self:feed(data) end
    if self.closed then return end
    if err == "closed" then return self:close() end
    if err then return end
  end
end

-- moves due responses into the write queue and writes what the socket takes
function Conn:_tcp_write(now)
  local q = self.outq
  self.wq = self.wq or {}
  while self:_due(now) do
    local item = table.remove(q, 1)
    if item.close then
      self.close_pending = true
      break
    end
    self.wq[#self.wq + 1] = item.frame
  end
  while self.wq[1] do
    local data = self.wq[1]
    local i, err, last = self.sock:send(data, self.wpos or 1)
    if i then
      table.remove(self.wq, 1)
      self.wpos = nil
    else
      if err == "timeout" then
        self.wpos = last + 1
        return
      end
      return self:close()
    end
  end
  if self.close_pending or self.close_after then self:close() end
end

-- step([timeout_s]) -> true: serves what is ready, waiting at most timeout
-- seconds (default 0) for something to happen
function _M:step(timeout)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0) then
    caller_error("step", "timeout must be a number of seconds >= 0")
  end
  if not self.listening then caller_error("step", "call listen() first") end
  local now = self.now()
  self:tick(now)
  local rd, wr, servers = {}, {}, {}
  for _, id in ipairs(self.ids) do
    local b = self.brokers[id]
    if b.server then
      rd[#rd + 1] = b.server
      servers[b.server] = b
    end
  end
  local tcp = {}
  for c in pairs(self.conns) do
    if c.transport == "tcp" then
      tcp[#tcp + 1] = c
      rd[#rd + 1] = c.sock
      if c.wq and c.wq[1] then wr[#wr + 1] = c.sock end
      if c:_due(now) then wr[#wr + 1] = c.sock end
    end
  end
  local wait = timeout or 0
  local d = self:_next_deadline()
  if d then wait = math.min(wait, math.max(0, (d - now) / 1000)) end
  local r = luasocket.select(rd, wr, wait)
  for s, b in pairs(servers) do
    if r[s] then
      for _ = 1, 32 do
        local cs = s:accept()
        if not cs then break end
        cs:settimeout(0)
        cs:setoption("tcp-nodelay", true)
        local peer = cs:getpeername()
        local c = self:_open(b, "tcp", peer)
        c.sock = cs
        tcp[#tcp + 1] = c
      end
    end
  end
  for _, c in ipairs(tcp) do
    if not c.closed and c.sock and r[c.sock] then c:_tcp_read() end
  end
  now = self.now()
  self:tick(now)
  for _, c in ipairs(tcp) do
    if not c.closed and c.sock then c:_tcp_write(now) end
  end
  return true
end

-- run(seconds [, until_fn]): serves for that long (math.huge: forever), or until until_fn() is true
function _M:run(seconds, until_fn)
  if type(seconds) ~= "number" or seconds < 0 then caller_error("run", "seconds must be a number >= 0") end
  if until_fn ~= nil and type(until_fn) ~= "function" then caller_error("run", "until must be a function") end
  local stop = self.now() + seconds * 1000
  repeat
    self:step(math.min(0.05, math.max(0, (stop - self.now()) / 1000)))
    if until_fn and until_fn() then return true end
  until self.now() >= stop
  return true
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
