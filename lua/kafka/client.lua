-- kafka.client: the cluster. Bootstraps from seed brokers, keeps a metadata
-- cache (refreshed on retriable errors and when older than
-- metadata_max_age_ms), routes to partition leaders, keeps one connection
-- per broker and reconnects with backoff when a broker comes back.
--
--   local client = require("kafka.client").new{brokers = {"127.0.0.1:9092"}, client_id = "me"}
--   local md = client:metadata{"topic"}          -- {brokers = {[id] = {host=,port=}}, topics = {...}}
--   local off = client:list_offsets("topic", 0, "latest")
--
-- Options: brokers (list of "host:port" or {host=,port=}), client_id,
-- request_timeout_ms (30000), connect_timeout_ms (10000),
-- metadata_max_age_ms (300000), retry_backoff_ms (100), max_retries (5),
-- reconnect_backoff_ms (100) .. reconnect_backoff_max_ms (10000),
-- allow_auto_topic_creation (true), api_versions (true), max_versions
-- ({[api] = version}), socket (factory), now/sleep (clock, ms).
local proto = require "kafka.proto"
local connection = require "kafka.connection"
local ksocket = require "kafka.socket"
local sasl = require "kafka.sasl"

local errors = proto.errors
local math, table = math, table
local setmetatable, getmetatable = setmetatable, getmetatable
local tostring, tonumber, type, ipairs, pairs, next = tostring, tonumber, type, ipairs, pairs, next

local _M = {}
local mt = { __index = _M }

local function parse_broker(b)
  if type(b) == "table" then return { host = b.host or b[1], port = tonumber(b.port or b[2]) } end
  local host, port = tostring(b):match("^%[?([^%]]+)%]?:(%d+)$")
  if not host then host, port = tostring(b), 9092 end
  return { host = host, port = tonumber(port) }
end

function _M.new(opts)
  opts = opts or {}
  local list = opts.brokers
  if type(list) == "string" then
    local t = {}
    for b in list:gmatch("[^,%s]+") do t[#t + 1] = b end
    list = t
  end
  if type(list) ~= "table" or #list == 0 then error("kafka.client.new: brokers is required", 2) end
  local now, sleep = ksocket.clock(opts)
  local self = setmetatable({
    opts = opts,
    client_id = opts.client_id or "lua-kafka",
    bootstrap = {},
    conns = {},          -- node id -> connection
    boot_conns = {},     -- index -> connection (bootstrap brokers)
    down_until = {},     -- connection -> time before which no reconnect is tried
    backoff = {},        -- connection -> current reconnect backoff
    brokers = {},        -- node id -> {host=, port=, rack=}
    topics = {},         -- name -> {error_code=, partitions = {[i] = {leader=, error_code=, ...}}, count=}
    wanted = {},         -- topics the cache should cover
    meta_time = -math.huge,
    metadata_max_age_ms = opts.metadata_max_age_ms or 300000,
    retry_backoff_ms = opts.retry_backoff_ms or 100,
    max_retries = opts.max_retries or 5,
    reconnect_backoff_ms = opts.reconnect_backoff_ms or 100,
    reconnect_backoff_max_ms = opts.reconnect_backoff_max_ms or 10000,
    auto_create = opts.allow_auto_topic_creation ~= false,
    security = sasl.config(opts), -- security_protocol, sasl_*, ssl_* (README: Security)
    now = now,
    sleep = sleep,
    cluster_id = nil,
    controller_id = nil,
  }, mt)
  for i, b in ipairs(list) do self.bootstrap[i] = parse_broker(b) end
  return self
end

function _M:_new_conn(host, port, node_id)
  local o = self.opts
  return connection.new {
    host = host, port = port, node_id = node_id, client_id = self.client_id,
    request_timeout_ms = o.request_timeout_ms, connect_timeout_ms = o.connect_timeout_ms,
    socket = o.socket, api_versions = o.api_versions, max_versions = o.max_versions,
    security = self.security,
  }
end

-- Connects c unless it is in its reconnect backoff; doubles the backoff on
-- each failure, resets it on success.
function _M:_ready(c)
  if c:is_connected() then return c end
  local t = self.now()
  local du = self.down_until[c]
  if du and t < du then
    return nil, ("%s is down (%s); next attempt in %d ms"):format(c:name(), tostring(c.closed_reason or "unreachable"),
      math.ceil(du - t)), "network"
  end
  local ok, err, code = c:connect()
  if not ok then
    local b = math.min((self.backoff[c] or self.reconnect_backoff_ms / 2) * 2, self.reconnect_backoff_max_ms)
    self.backoff[c] = b
    self.down_until[c] = t + b
    c.closed_reason = err
    return nil, err, code
  end
  self.backoff[c], self.down_until[c] = nil, nil
  return c
end

-- broker(node_id) -> a connected connection to that broker | nil, err, code
function _M:broker(node_id)
  local b = self.brokers[node_id]
  if not b then return nil, "unknown broker id " .. tostring(node_id), "metadata" end
  local c = self.conns[node_id]
  if c and (c.host ~= b.host or c.port ~= b.port) then
    c:close("broker address changed")
    c = nil
  end
  if not c then
    c = self:_new_conn(b.host, b.port, node_id)
    self.conns[node_id] = c
  end
  return self:_ready(c)
end

-- any_broker() -> some connected connection: known brokers first, then the
-- bootstrap list (so a cluster whose brokers all moved is found again).
function _M:any_broker()
  local last_err, last_code = "no brokers", "network"
  local ids = {}
  for id in pairs(self.brokers) do ids[#ids + 1] = id end
  table.sort(ids)
  local start = #ids > 0 and (math.floor(self.now()) % #ids) or 0
  for i = 1, #ids do
    local id = ids[(start + i - 1) % #ids + 1]
    local c, err, code = self:broker(id)
    if c then return c end
    last_err, last_code = err, code
  end
  for i, b in ipairs(self.bootstrap) do
    local c = self.boot_conns[i]
    if not c then
      c = self:_new_conn(b.host, b.port)
      self.boot_conns[i] = c
    end
    local ok, err, code = self:_ready(c)
    if ok then return c end
    last_err, last_code = err, code
  end
  return nil, "no broker reachable: " .. tostring(last_err), last_code
end

-- refresh(topics) -> true | nil, err, code: one Metadata request for the
-- given topics plus every topic already cached.
function _M:refresh(topics)
  for _, t in ipairs(topics or {}) do self.wanted[t] = true end
  local names = {}
  for t in pairs(self.wanted) do names[#names + 1] = t end
  table.sort(names)
  local last_err, last_code
  for _ = 1, 3 do
    local c, err, code = self:any_broker()
    if not c then return nil, err, code end
    local v
    v, err, code = c:version(3)
    if not v then return nil, err, code end
    local req_topics = {}
    for i, n in ipairs(names) do req_topics[i] = { name = n } end
    local body = { topics = req_topics, allow_auto_topic_creation = self.auto_create }
    local resp
    resp, err, code = c:request(3, body, { version = v })
    if resp then
      self:_apply_metadata(resp)
      return true
    end
    last_err, last_code = err, code
  end
  return nil, last_err, last_code
end

function _M:_apply_metadata(resp)
  local brokers = {}
  for _, b in ipairs(resp.brokers or {}) do
    brokers[b.node_id] = { host = b.host, port = b.port, rack = b.rack }
  end
  if next(brokers) then self.brokers = brokers end
  -- connections to brokers that left the cluster are closed
  for id, c in pairs(self.conns) do
    if not brokers[id] then
      c:close("broker left the cluster")
      self.conns[id] = nil
    end
  end
  self.cluster_id = resp.cluster_id
  self.controller_id = resp.controller_id
  local t = self.now()
  for _, tp in ipairs(resp.topics or {}) do
    if tp.name then
      local parts, count = {}, 0
      for _, p in ipairs(tp.partitions or {}) do
        parts[p.partition_index] = { leader = p.leader_id, leader_epoch = p.leader_epoch, error_code = p.error_code,
          replicas = p.replica_nodes, isr = p.isr_nodes }
        count = count + 1
      end
      self.topics[tp.name] = { error_code = tp.error_code, partitions = parts, count = count, time = t,
        topic_id = tp.topic_id, is_internal = tp.is_internal }
    end
  end
  self.meta_time = t
end

-- metadata(topics) -> {brokers = {[id] = {host, port, rack}}, topics = {[name] = {...}},
-- cluster_id, controller_id} after a refresh | nil, err, code
function _M:metadata(topics)
  local ok, err, code = self:refresh(topics)
  if not ok then return nil, err, code end
  local view = { brokers = self.brokers, topics = {}, cluster_id = self.cluster_id, controller_id = self.controller_id }
  for _, name in ipairs(topics or {}) do view.topics[name] = self.topics[name] end
  if not topics then view.topics = self.topics end
  return view
end

-- topic(name) -> the cached topic, refreshed when missing, errored or stale
-- | nil, err, code ("unknown_topic" when the cluster does not have it).
function _M:topic(name)
  local t = self.topics[name]
  local fresh = t and (self.now() - t.time) < self.metadata_max_age_ms
  if not t or not fresh or t.error_code ~= 0 or t.count == 0 then
    local ok, err, code = self:refresh { name }
    if not ok then
      if t then return t end -- keep serving the old view when the cluster is unreachable
      return nil, err, code
    end
    t = self.topics[name]
    -- A real broker creates the topic asynchronously and answers the
    -- Metadata request that asked for it with UNKNOWN_TOPIC_OR_PARTITION
    -- (librdkafka's mock creates it at once): ask again for a while.
    local wait = self.retry_backoff_ms
    for _ = 1, 6 do
      if not (self.auto_create and t and t.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION) then break end
      self.sleep(wait)
      wait = wait * 2
      if not self:refresh { name } then break end
      t = self.topics[name]
    end
  end
  if not t then return nil, "topic " .. name .. " not in metadata", "unknown_topic" end
  if t.error_code ~= 0 then
    local e = errors.info(t.error_code)
    return nil, ("topic %s: %s (%s)"):format(name, e.name, e.message),
      e.code == 3 and "unknown_topic" or (e.retriable and "retriable" or "kafka"), e.code
  end
  if t.count == 0 then return nil, "topic " .. name .. " has no partitions", "retriable" end
  return t
end

-- partitions(topic) -> number of partitions | nil, err, code
function _M:partitions(name)
  local t, err, code = self:topic(name)
  if not t then return nil, err, code end
  return t.count
end

-- leader(topic, partition) -> node id | nil, err, code
function _M:leader(name, partition)
  local t, err, code = self:topic(name)
  if not t then return nil, err, code end
  local p = t.partitions[partition]
  if not p then return nil, ("topic %s has no partition %d"):format(name, partition), "unknown_partition" end
  if p.leader == nil or p.leader < 0 then return nil, ("no leader for %s/%d"):format(name, partition), "retriable" end
  return p.leader
end

-- invalidate(topic): forget cached metadata so the next lookup refreshes.
function _M:invalidate(name)
  if name and self.topics[name] then self.topics[name].time = -math.huge
  elseif not name then
    for _, t in pairs(self.topics) do t.time = -math.huge end
  end
end

local TIMES = { latest = -1, earliest = -2 }

-- list_offsets(topic, partition, time) -> offset | nil, err, code.
-- time: "earliest", "latest", -2, -1, or a timestamp in ms (the first
-- offset whose timestamp is >= it; -1 when there is none).
function _M:list_offsets(topic, partition, time)
  local ts = TIMES[time] or tonumber(time)
  if not ts then error("list_offsets: time must be earliest, latest or a timestamp", 2) end
  local last_err, last_code, kcode
  for attempt = 0, self.max_retries do
    if attempt > 0 then self.sleep(self.retry_backoff_ms) end
    local leader, err, code = self:leader(topic, partition)
    local c
    if leader then c, err, code = self:broker(leader) end
    if c then
      local v
      v, err, code = c:version(2)
      if v then
        local part = { partition_index = partition, timestamp = ts, max_num_offsets = 1, current_leader_epoch = -1 }
        local resp
        resp, err, code = c:request(2, { replica_id = -1, isolation_level = 0,
          topics = { { name = topic, partitions = { part } } } }, { version = v })
        if resp then
          local p = resp.topics and resp.topics[1] and resp.topics[1].partitions and resp.topics[1].partitions[1]
          if not p then return nil, "ListOffsets response without the partition", "protocol" end
          if p.error_code == 0 then
            if v == 0 then return (p.old_style_offsets or {})[1] or -1 end
            return p.offset
          end
          local e = errors.info(p.error_code)
          err, code, kcode = ("list_offsets %s/%d: %s"):format(topic, partition, e.name), "kafka", e.code
          if not e.retriable then return nil, err, code, kcode end
        end
      end
      if code == "unsupported" then return nil, err, code end
    end
    last_err, last_code = err, code
    self:invalidate(topic)
  end
  return nil, last_err, last_code, kcode
end

-- coordinator(key, key_type) -> connection to the group (0) or transaction
-- (1) coordinator | nil, err, code
function _M:coordinator(key, key_type)
  key_type = key_type or 0
  local last_err, last_code
  for attempt = 0, self.max_retries do
    if attempt > 0 then self.sleep(self.retry_backoff_ms) end
    local c, err, code = self:any_broker()
    if c then
      local v
      v, err, code = c:version(10)
      if not v then return nil, err, code end
      local resp
      resp, err, code = c:request(10, { key = key, key_type = key_type }, { version = v })
      if resp then
        if resp.error_code == 0 then
          if not self.brokers[resp.node_id] then
            self.brokers[resp.node_id] = { host = resp.host, port = resp.port }
          end
          return self:broker(resp.node_id)
        end
        local e = errors.info(resp.error_code)
        err, code = ("FindCoordinator %s: %s"):format(key, e.name), e.retriable and "retriable" or "kafka"
        if not e.retriable then return nil, err, code end
      end
    end
    last_err, last_code = err, code
  end
  return nil, last_err, last_code
end

-- ensure(client_or_opts) -> client, owned: a client passed in is used as
-- it is; options make a new client that the caller owns (and closes).
function _M.ensure(x)
  if type(x) == "table" and getmetatable(x) == mt then return x, false end
  return _M.new(x), true
end

function _M:close()
  for _, c in pairs(self.conns) do c:close("client closed") end
  for _, c in pairs(self.boot_conns) do c:close("client closed") end
  self.conns, self.boot_conns = {}, {}
end

return _M
