--- kafka.client: the cluster. Bootstraps from seed brokers, keeps a metadata
-- cache (refreshed on retriable errors and when older than
-- metadata_max_age_ms), routes to partition leaders, keeps one connection
-- per broker and reconnects with backoff when a broker comes back. It is
-- also the one routing and retry service of the library: group(items)
-- groups topic-partitions by leader connection (the producer, the consumer
-- and list_offsets route through it), call(fn) retries an operation
-- through retriable errors with exponential backoff until its deadline
-- (metadata, list_offsets, coordinator and group requests use it).
--
--   local client = require("kafka.client").new{brokers = {"127.0.0.1:9092"}, client_id = "me"}
--   local md = client:metadata{"topic"}          -- {brokers = {[id] = {host=,port=}}, topics = {...}}
--   local off = client:list_offsets("topic", 0, "latest")
--
-- Options: kafka.options (docs/options.md).
--
-- A broker in its reconnect backoff is refused with code "backoff" (nothing
-- was tried): retry loops wait for it without counting an attempt.
-- @module kafka.client
local proto = require "kafka.proto"
local connection = require "kafka.connection"
local ksocket = require "kafka.socket"
local check = require "kafka.check"
local options = require "kafka.options"

local errors = proto.errors
local API = proto.api
local math, table = math, table
local setmetatable, getmetatable = setmetatable, getmetatable
local tostring, type, ipairs, pairs, next = tostring, type, ipairs, pairs, next

local _M = {}
local mt = { __index = _M }

--- Makes a client: nothing is connected until the first request needs a broker.
-- Options: docs/options.md (kafka.options); misuse raises, naming the option.
-- @tparam table opts the client's options (`brokers` required)
-- @treturn table the client
-- @usage local client = kafka.client.new { brokers = "127.0.0.1:9092", client_id = "me" }
function _M.new(opts)
  local o, bootstrap, security = options.client(opts)
  local now, sleep = ksocket.clock(opts)
  return setmetatable({
    opts = opts,
    o = o,               -- the options, checked, with their defaults (kafka.options)
    client_id = o.client_id,
    bootstrap = bootstrap,
    conns = {},          -- node id -> connection
    boot_conns = {},     -- index -> connection (bootstrap brokers)
    down_until = {},     -- connection -> time before which no reconnect is tried
    fails = {},          -- connection -> connect failures in a row
    brokers = {},        -- node id -> {host=, port=, rack=}
    topics = {},         -- name -> {error_code=, partitions = {[i] = {leader=, error_code=, ...}}, count=}
    wanted = {},         -- topics the cache should cover
    meta_time = -math.huge,
    refresh_time = -math.huge, -- the last refresh attempt
    metadata_max_age_ms = o.metadata_max_age_ms,
    default_api_timeout_ms = o.default_api_timeout_ms,
    retry_backoff_ms = o.retry_backoff_ms,
    retry_backoff_max_ms = o.retry_backoff_max_ms,
    max_retries = o.max_retries,
    reconnect_backoff_ms = o.reconnect_backoff_ms,
    reconnect_backoff_max_ms = o.reconnect_backoff_max_ms,
    auto_create = o.allow_auto_topic_creation,
    security = security, -- TLS and SASL settings (kafka.options), nil for PLAINTEXT
    now = now,
    sleep = sleep,
    cluster_id = nil,
    controller_id = nil,
    recovery = o.metadata_recovery_strategy, -- "rebootstrap" or "none"
    rebootstraps = 0,    -- times the client started over from the bootstrap brokers
    transports = {},     -- kind ("cosocket", "luasocket", "custom") -> sockets its connections opened
  }, mt)
end

--- A new client with the same options and nothing else: its own
-- connections and metadata cache (in nginx a producer's background sender
-- works through one, so no connection is shared with request handlers or
-- other timers).
-- @treturn table the new client
function _M:clone()
  return _M.new(self.opts)
end

--- What the sockets this client's connections opened actually are
-- (checked on the socket objects).
-- @treturn ?string "cosocket", "luasocket" or "custom" (several joined by "+"), nil before any
-- @treturn table the counts of sockets opened, by kind
function _M:transport()
  local kinds = {}
  for k in pairs(self.transports) do kinds[#kinds + 1] = k end
  if #kinds == 0 then return nil, self.transports end
  table.sort(kinds)
  return table.concat(kinds, "+"), self.transports
end

function _M:_new_conn(host, port, node_id)
  local o = self.o
  return connection.new {
    host = host, port = port, node_id = node_id, client_id = self.client_id,
    cluster_id = node_id and self.cluster_id or nil, av_max = self.av_max,
    request_timeout_ms = o.request_timeout_ms, connect_timeout_ms = o.connect_timeout_ms,
    receive_message_max_bytes = o.receive_message_max_bytes, now = self.now,
    socket = o.socket, api_versions = o.api_versions, max_versions = o.max_versions,
    security = self.security,
    transports = self.transports,
  }
end

--- The wait before retry number `attempt`: retry_backoff_ms doubling up to
-- retry_backoff_max_ms.
-- @tparam integer attempt 1, 2, ...
-- @treturn number ms
function _M:backoff(attempt)
  local b = self.retry_backoff_ms * 2 ^ ((attempt or 1) - 1)
  if b > self.retry_backoff_max_ms then b = self.retry_backoff_max_ms end
  return math.floor(b)
end

-- Connects c unless it is in its reconnect backoff (then nil, err,
-- "backoff": nothing was tried). A failed connect sets the backoff:
-- reconnect_backoff_ms, doubled for each further failure in a row, up to
-- reconnect_backoff_max_ms; a success resets it. Once the backoff expired
-- the next request that needs the broker connects at once.
function _M:_ready(c, deadline)
  if c:is_connected() then return c end
  local t = self.now()
  local du = self.down_until[c]
  if du and t < du and not c.sock then
    local why = tostring(c.closed_reason or "unreachable")
    return nil, ("%s is down (%s); next attempt in %d ms"):format(c:name(), why, math.ceil(du - t)), "backoff"
  end
  local ok, err, code = c:connect(deadline)
  if not ok then
    if code == "timeout" and c.sock then return nil, err, code end -- negotiation goes on at the next call
    local fails = (self.fails[c] or 0) + 1
    local b = self.reconnect_backoff_ms * 2 ^ (fails - 1)
    if b > self.reconnect_backoff_max_ms then b = self.reconnect_backoff_max_ms end
    self.fails[c] = fails
    self.down_until[c] = self.now() + b
    c.closed_reason = err
    return nil, ("%s; next attempt in %d ms"):format(tostring(err), math.ceil(b)), code
  end
  self.fails[c], self.down_until[c] = nil, nil
  -- the ApiVersions versions this cluster's brokers take: a connection to a
  -- known node asks v5 (the cluster check) only where a broker offered it
  local av = c.broker_versions and c.broker_versions[API.ApiVersions]
  if av then self.av_max = av.max end
  return c
end

--- The earliest time a broker now in reconnect backoff may be tried again.
-- @treturn number a time of the client's clock (ms)
function _M:next_ready()
  local t, now = math.huge, self.now()
  for _, du in pairs(self.down_until) do
    if du > now and du < t then t = du end
  end
  return t
end

--- A connected connection to one broker.
-- @tparam integer node_id the broker's id, as the metadata lists it
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @tparam[opt] table pool node id -> connection, owned by the caller (the consumer
-- keeps its Fetch connections apart, so a Fetch waiting on the broker never holds
-- up other requests); default: the client's own connections
-- @return the kafka.connection, or nil, err, code ("metadata" for an unknown id)
function _M:broker(node_id, deadline, pool)
  local b = self.brokers[node_id]
  if not b then return nil, "unknown broker id " .. tostring(node_id), "metadata" end
  local conns = pool or self.conns
  local c = conns[node_id]
  if c and (c.host ~= b.host or c.port ~= b.port or c.cluster_id ~= self.cluster_id) then
    c:close("broker address changed")
    c = nil
  end
  if not c then
    c = self:_new_conn(b.host, b.port, node_id)
    conns[node_id] = c
  end
  local r, err, code = self:_ready(c, deadline)
  -- not the node the metadata named (KIP-1242): the metadata is stale
  if not r and code == "rebootstrap" and self.recovery == "rebootstrap" then self:_rebootstrap(err) end
  return r, err, code
end

-- Forgets the cluster (its brokers, connections, topics and id) so the
-- next request starts over from the bootstrap brokers (KIP-899/KIP-1102):
-- after REBOOTSTRAP_REQUIRED, or metadata naming another cluster.
function _M:_rebootstrap(reason)
  for _, c in pairs(self.conns) do c:close("rebootstrap: " .. tostring(reason)) end
  self.conns, self.brokers, self.topics, self.down_until, self.fails = {}, {}, {}, {}, {}
  self.cluster_id, self.controller_id, self.meta_time = nil, nil, -math.huge
  self.rebootstraps = self.rebootstraps + 1
end

-- Calls fn(conn) for each reachable broker (known brokers first, from a
-- rotating start, then the bootstrap list, so a cluster whose brokers all
-- moved is found again: metadata_recovery_strategy "rebootstrap") until fn
-- returns a value. Returns it, or nil, err, code: "backoff" when every
-- broker was refused for its backoff.
function _M:_each_broker(deadline, fn)
  local last_err, last_code, all_backoff = "no brokers", "network", true
  local function try(c, err, code)
    if c then
      local r
      r, err, code = fn(c)
      if r then return r end
    end
    last_err, last_code = err, code
    if code ~= "backoff" then all_backoff = false end
  end
  local ids = {}
  for id in pairs(self.brokers) do ids[#ids + 1] = id end
  table.sort(ids)
  local start = #ids > 0 and (math.floor(self.now()) % #ids) or 0
  for i = 1, #ids do
    local r = try(self:broker(ids[(start + i - 1) % #ids + 1], deadline))
    if r then return r end
    if last_code == "rebootstrap" and self.recovery == "rebootstrap" then
      if next(self.brokers) then self:_rebootstrap(last_err) end -- (broker() may have)
      break
    end
    if deadline and self.now() >= deadline then break end
  end
  if #ids > 0 and self.recovery == "none" then
    return nil, "no broker reachable: " .. tostring(last_err), all_backoff and "backoff" or last_code
  end
  for i, b in ipairs(self.bootstrap) do
    local c = self.boot_conns[i]
    if not c then
      c = self:_new_conn(b.host, b.port)
      self.boot_conns[i] = c
    end
    local r = try(self:_ready(c, deadline))
    if r then return r end
    if deadline and self.now() >= deadline then break end
  end
  return nil, "no broker reachable: " .. tostring(last_err), all_backoff and "backoff" or last_code
end

--- Some connected connection (bootstrap or known broker).
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @return a kafka.connection, or nil, err, code
function _M:any_broker(deadline)
  return self:_each_broker(deadline, function(c) return c end)
end

--- One Metadata request for the given topics plus every topic already
-- cached, to the first broker that answers (one pass over the brokers, no
-- waiting).
-- @tparam[opt] {string,...} topics topics to add
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @return true, or nil, err, code
function _M:refresh(topics, deadline)
  for _, t in ipairs(topics or {}) do self.wanted[t] = true end
  local names = {}
  for t in pairs(self.wanted) do names[#names + 1] = t end
  table.sort(names)
  self.refresh_time = self.now()
  local req_topics = {}
  for i, n in ipairs(names) do req_topics[i] = { name = n } end
  local body = { topics = req_topics, allow_auto_topic_creation = self.auto_create }
  local ok, err, code = self:_each_broker(deadline, function(c)
    local v, verr, vcode = c:version(API.Metadata)
    if not v then return nil, verr, vcode end
    local resp, rerr, rcode = c:request(API.Metadata, body, { version = v, deadline = deadline })
    if not resp then return nil, rerr, rcode end
    if resp.error_code and resp.error_code ~= errors.NONE then -- v13+: a top-level error
      local e = errors.info(resp.error_code)
      local kind = e.retriable and "retriable" or "kafka"
      if e.code == errors.REBOOTSTRAP_REQUIRED and c.node_id then kind = "rebootstrap" end
      return nil, ("Metadata from %s: %s"):format(c:name(), e.name), kind, e.code
    end
    self:_apply_metadata(resp)
    return true
  end)
  if ok then return true end
  return nil, err, code
end

-- load_metadata(o [, deadline]) -> the Metadata response (applied to the
-- cache) | nil, err, code: one request to the first broker that answers,
-- for o.topics (names), o.topic_ids (16-byte ids) or, with neither, every
-- topic; o.auto_create (default false) asks the broker to create missing
-- topics. Unlike refresh(), the topics are not added to the ones the
-- cache follows (the group module uses it for subscriptions).
function _M:load_metadata(o, deadline)
  local req
  if o and o.topics then
    req = {}
    for i, n in ipairs(o.topics) do req[i] = { name = n } end
  elseif o and o.topic_ids then
    req = {}
    for i, id in ipairs(o.topic_ids) do req[i] = { topic_id = id } end
  end
  local body = { topics = req, allow_auto_topic_creation = (o and o.auto_create) or false }
  local got
  local ok, err, code = self:_each_broker(deadline, function(c)
    local v, verr, vcode = c:version(API.Metadata)
    if not v then return nil, verr, vcode end
    local resp, rerr, rcode = c:request(API.Metadata, body, { version = v, deadline = deadline })
    if not resp then return nil, rerr, rcode end
    self:_apply_metadata(resp)
    got = resp
    return true
  end)
  if ok then return got end
  return nil, err, code
end

local NO_ID = string.rep("\0", 16)

-- topic_ids(items) -> name -> 16-byte id for the topics of items ({{topic=}...})
-- when the metadata has a current id for each, else nil. OffsetCommit v10,
-- OffsetFetch v10 and TxnOffsetCommit v6 name topics by id only (KIP-516), and
-- Java's client sends them where it can; a topic without an id, unknown or
-- invalidated (an UNKNOWN_TOPIC_ID answer) sends the whole request by name.
function _M:topic_ids(items)
  local ids = {}
  for _, it in ipairs(items) do
    local t = self.topics[it.topic]
    local id = t and t.time ~= -math.huge and t.topic_id
    if not id or id == NO_ID then return nil end
    ids[it.topic] = id
  end
  return ids
end

-- topic_name(id) -> the cached name of a topic id | nil
function _M:topic_name(id)
  for name, t in pairs(self.topics) do
    if t.topic_id == id then return name end
  end
end

function _M:_apply_metadata(resp)
  local brokers = {}
  for _, b in ipairs(resp.brokers or {}) do
    brokers[b.node_id] = { host = b.host, port = b.port, rack = b.rack }
  end
  -- metadata of another cluster than the one known (its brokers all moved,
  -- the bootstrap names now point elsewhere): nothing of the old one is kept
  if self.cluster_id and resp.cluster_id and resp.cluster_id ~= self.cluster_id then
    self:_rebootstrap("the cluster id changed from " .. self.cluster_id .. " to " .. resp.cluster_id)
  end
  if next(brokers) then self.brokers = brokers end
  -- connections to brokers that left the cluster are closed, their backoff
  -- forgotten: listed again, a broker is connected at once
  for id, c in pairs(self.conns) do
    if not brokers[id] then
      c:close("broker left the cluster")
      self.conns[id], self.down_until[c], self.fails[c] = nil, nil, nil
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

-- The codes a retry can cure (I/O, a broker in backoff, a retriable Kafka
-- error, a broker id not in the metadata yet).
local RETRIABLE = { network = true, timeout = true, backoff = true, retriable = true, closed = true,
                    protocol = true, metadata = true, rebootstrap = true }
_M.RETRIABLE = RETRIABLE

--- The retry service: runs fn until it returns a result or a non-retriable
-- error. Retries wait `backoff(attempt)`; a "backoff" refusal waits for the
-- broker's backoff to end and is not counted as an attempt.
-- @tparam function fn `fn(deadline, attempt)` returns a result, or nil, err, code,
-- kafka_code, retriable (retriable defaults to whether code is a retriable one)
-- @tparam[opt] table o `timeout_ms` (default default_api_timeout_ms), `max_retries`
-- (default the client's: nil, unlimited), `on_retry(code)` (runs before each
-- retry), `backoff(kafka_code, attempt)` -> ms or nil (overrides a retry's wait)
-- @return fn's result, or nil, err, code, kafka_code
function _M:call(fn, o)
  local deadline = self.now() + (o and o.timeout_ms or self.default_api_timeout_ms)
  local max = self.max_retries
  if o and o.max_retries ~= nil then max = o.max_retries end
  local attempts = 0
  while true do
    local res, err, code, kcode, retriable = fn(deadline, attempts + 1)
    if res ~= nil then return res end
    if retriable == nil then retriable = RETRIABLE[code] or false end
    if not retriable then return nil, err, code, kcode end
    local wait
    if code == "backoff" then
      wait = math.max(1, math.ceil(self:next_ready() - self.now()))
    else
      attempts = attempts + 1
      if max and attempts > max then return nil, err, code, kcode end
      wait = o and o.backoff and o.backoff(kcode, attempts) or self:backoff(attempts)
    end
    if o and o.on_retry then o.on_retry(code) end
    local left = deadline - self.now()
    if left <= 0 or wait > left then
      return nil, ("%s (gave up at the deadline after %d attempts)"):format(tostring(err), attempts), code, kcode
    end
    self.sleep(wait)
  end
end

--- Refreshes the metadata and returns the cluster's view.
-- @tparam[opt] {string,...} topics the topics to describe (nil: all cached ones)
-- @treturn table `{brokers = {[id] = {host, port, rack}}, topics = {[name] = ...},
-- cluster_id, controller_id}`, or nil, err, code
-- @usage local md = assert(client:metadata { "events" })
function _M:metadata(topics)
  if topics ~= nil and type(topics) ~= "table" then check.fail("metadata", "topics", "an array of names", topics) end
  local ok, err, code = self:call(function(deadline) return self:refresh(topics, deadline) end)
  if not ok then return nil, err, code end
  local view = { brokers = self.brokers, topics = {}, cluster_id = self.cluster_id, controller_id = self.controller_id }
  for _, name in ipairs(topics or {}) do view.topics[name] = self.topics[name] end
  if not topics then view.topics = self.topics end
  return view
end

--- The cached topic, refreshed when missing, errored or stale (at most once
-- per retry_backoff_ms while a view is cached).
-- @tparam string name the topic
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @treturn table the topic's metadata, or nil, err, code ("unknown_topic" when the cluster
-- does not have it)
function _M:topic(name, deadline)
  local t = self.topics[name]
  local now = self.now()
  local fresh = t and (now - t.time) < self.metadata_max_age_ms
  if not t or ((not fresh or t.error_code ~= 0 or t.count == 0)
      and now - self.refresh_time >= self.retry_backoff_ms) then
    local ok, err, code = self:refresh({ name }, deadline)
    if not ok then
      if t then return t end -- keep serving the old view when the cluster is unreachable
      return nil, err, code
    end
    t = self.topics[name]
    -- A real broker creates the topic asynchronously and answers the
    -- Metadata request that asked for it with UNKNOWN_TOPIC_OR_PARTITION
    -- (KRaft) or LEADER_NOT_AVAILABLE (ZooKeeper mode, Kafka 2.x: created,
    -- no leader yet; librdkafka's mock creates it at once): ask again for a while.
    local wait = self.retry_backoff_ms
    for _ = 1, 6 do
      local e = t and t.error_code
      if not (self.auto_create and (e == errors.UNKNOWN_TOPIC_OR_PARTITION or e == errors.LEADER_NOT_AVAILABLE)) then break end
      if deadline and self.now() + wait > deadline then break end
      self.sleep(wait)
      wait = wait * 2
      if not self:refresh({ name }, deadline) then break end
      t = self.topics[name]
    end
  end
  if not t then return nil, "topic " .. name .. " not in metadata", "unknown_topic" end
  if t.error_code ~= 0 then
    local e = errors.info(t.error_code)
    return nil, ("topic %s: %s (%s)"):format(name, e.name, e.message),
      e.code == errors.UNKNOWN_TOPIC_OR_PARTITION and "unknown_topic" or (e.retriable and "retriable" or "kafka"), e.code
  end
  if t.count == 0 then return nil, "topic " .. name .. " has no partitions", "retriable" end
  return t
end

--- The number of partitions of a topic (from the cache, refreshed when stale).
-- @tparam string name the topic
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @treturn integer the count, or nil, err, code ("unknown_topic")
function _M:partitions(name, deadline)
  if type(name) ~= "string" then check.fail("partitions", "topic", "a string", name) end
  local t, err, code = self:topic(name, deadline)
  if not t then return nil, err, code end
  return t.count
end

--- The leader of a partition.
-- @tparam string name the topic
-- @tparam integer partition the partition
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @treturn integer the leader's node id, or nil, err, code ("unknown_partition", "retriable")
function _M:leader(name, partition, deadline)
  local t, err, code = self:topic(name, deadline)
  if not t then return nil, err, code end
  local p = t.partitions[partition]
  if not p then
    return nil, ("topic %s has no partition %s"):format(name, tostring(partition)), "unknown_partition"
  end
  if p.leader == nil or p.leader < 0 then return nil, ("no leader for %s/%d"):format(name, partition), "retriable" end
  return p.leader
end

--- The connection to a partition's leader.
-- @tparam string topic the topic
-- @tparam integer partition the partition
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @tparam[opt] table pool see `broker`
-- @return the kafka.connection, or nil, err, code
function _M:route(topic, partition, deadline, pool)
  local leader, err, code = self:leader(topic, partition, deadline)
  if not leader then return nil, err, code end
  return self:broker(leader, deadline, pool)
end

--- Groups topic-partitions by their leader's connection, in first-seen order:
-- the one grouping the producer, the consumer and list_offsets share.
-- @tparam table items `{{topic=, partition=, ...}...}`
-- @tparam[opt] number deadline a time of the client's clock (ms)
-- @tparam[opt] table pool see `broker`
-- @treturn table groups `{{conn=, items={...}}...}`
-- @treturn table failed `{{item=, err=, code=}...}` for items with no reachable leader
-- (code "backoff" when its broker is in reconnect backoff)
function _M:group(items, deadline, pool)
  local groups, by_conn, failed = {}, {}, {}
  for _, it in ipairs(items) do
    local conn, err, code = self:route(it.topic, it.partition, deadline, pool)
    if conn then
      local g = by_conn[conn]
      if not g then
        g = { conn = conn, items = {} }
        by_conn[conn] = g
        groups[#groups + 1] = g
      end
      g.items[#g.items + 1] = it
    else
      failed[#failed + 1] = { item = it, err = err, code = code }
    end
  end
  return groups, failed
end

--- The level the cluster has finalized for a feature (such as
-- "transaction.version"), as the connection whose ApiVersions answer had the
-- newest feature epoch tells it (the view Kafka's Java client takes).
-- @tparam string name the feature
-- @treturn integer the level (0 when none, e.g. before Kafka 3.x or with the feature off)
-- @return the connection that told it, nil when none has
function _M:finalized_feature(name)
  local best, epoch = nil, -math.huge
  for _, set in ipairs { self.conns, self.boot_conns } do
    for _, c in pairs(set) do
      if c.finalized_features and c.features_epoch > epoch then best, epoch = c, c.features_epoch end
    end
  end
  return best and best.finalized_features[name] or 0, best
end

--- Forgets cached metadata so the next lookup refreshes it.
-- @tparam[opt] string name a topic (nil: every topic)
function _M:invalidate(name)
  if name and self.topics[name] then self.topics[name].time = -math.huge
  elseif not name then
    for _, t in pairs(self.topics) do t.time = -math.huge end
  end
end

local TIMES = { latest = -1, earliest = -2, max_timestamp = -3 }

local ISOLATION = { [0] = 0, [1] = 1, read_uncommitted = 0, read_committed = 1 }

--- The offset of a partition at a time.
-- @tparam string topic the topic
-- @tparam integer partition the partition
-- @param time "earliest", "latest", -2, -1, "max_timestamp"/-3 (the offset of the
-- message with the largest timestamp, KIP-734, Kafka 3.0+), or a timestamp in ms
-- (the first offset whose timestamp is >= it; -1 when there is none)
-- @param[opt] isolation_level 0/"read_uncommitted" (default: "latest" is the high
-- watermark) or 1/"read_committed" ("latest" is the last stable offset, the first
-- offset of the oldest transaction not decided yet)
-- @treturn integer the offset, or nil, err, code
-- @usage local high = assert(client:list_offsets("events", 0, "latest"))
function _M:list_offsets(topic, partition, time, isolation_level)
  if type(topic) ~= "string" then check.fail("list_offsets", "topic", "a string", topic) end
  check.partition("list_offsets", "partition", partition)
  local ts = TIMES[time] or (check.is_int(time) and time >= -3 and time) or nil
  if not ts then
    check.fail("list_offsets", "time", '"earliest", "latest", "max_timestamp" or a timestamp in ms', time)
  end
  local level = ISOLATION[check.oneof("list_offsets", "isolation_level", isolation_level, 0,
    { 0, 1, "read_uncommitted", "read_committed" })]
  return self:call(function(deadline)
    local c, err, code = self:route(topic, partition, deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = c:version(API.ListOffsets)
    if not v then return nil, err, code end
    if ts == -3 then
      -- above the usual cap (v3: see kafka.connection's DEFAULT_CAPS): v7 is the first with it
      local b = c.broker_versions and c.broker_versions[API.ListOffsets]
      if not b or b.max < 7 then
        return nil, ("list_offsets max_timestamp needs ListOffsets v7 (Kafka 3.0+), which %s does not speak"):format(
          c:name()), "unsupported"
      end
      v = 7
    end
    local part = { partition_index = partition, timestamp = ts, max_num_offsets = 1, current_leader_epoch = -1 }
    local resp
    resp, err, code = c:request(API.ListOffsets, { replica_id = -1, isolation_level = level,
      topics = { { name = topic, partitions = { part } } } }, { version = v, deadline = deadline })
    if not resp then return nil, err, code end
    local p = resp.topics and resp.topics[1] and resp.topics[1].partitions and resp.topics[1].partitions[1]
    if not p then return nil, "ListOffsets response without the partition", "protocol" end
    if p.error_code == errors.NONE then
      if v == 0 then return (p.old_style_offsets or {})[1] or -1 end
      return p.offset
    end
    local e = errors.info(p.error_code)
    return nil, ("list_offsets %s/%d: %s"):format(topic, partition, e.name), "kafka", e.code, e.retriable
  end, { on_retry = function() self:invalidate(topic) end })
end

-- One FindCoordinator attempt: the coordinator's connection | nil, err, code, kcode, retriable
function _M:find_coordinator(key, key_type, deadline)
  local c, err, code = self:any_broker(deadline)
  if not c then return nil, err, code end
  local v
  v, err, code = c:version(API.FindCoordinator)
  if not v then return nil, err, code end
  local resp
  resp, err, code = c:request(API.FindCoordinator, { key = key, key_type = key_type or 0 }, { version = v, deadline = deadline })
  if not resp then return nil, err, code end
  if resp.error_code ~= errors.NONE then
    local e = errors.info(resp.error_code)
    return nil, ("FindCoordinator %s: %s"):format(key, e.name), e.retriable and "retriable" or "kafka", e.code,
      e.retriable
  end
  if not self.brokers[resp.node_id] then
    self.brokers[resp.node_id] = { host = resp.host, port = resp.port }
  end
  return self:broker(resp.node_id, deadline)
end

--- The connection to a coordinator, found with FindCoordinator (retried).
-- @tparam string key a group id, or a transactional id
-- @tparam[opt=0] integer key_type 0 (group) or 1 (transaction)
-- @return the kafka.connection, or nil, err, code
function _M:coordinator(key, key_type)
  if type(key) ~= "string" then check.fail("coordinator", "key", "a string", key) end
  check.oneof("coordinator", "key_type", key_type, 0, { 0, 1 })
  return self:call(function(deadline) return self:find_coordinator(key, key_type, deadline) end)
end

--- A client passed in is used as it is; options make a new client that the
-- caller owns (and closes). What producer.new and consumer.new take.
-- @param x a client, or a table of client options
-- @tparam string where the caller's name, for its misuse errors
-- @treturn table the client
-- @treturn boolean owned: true when made here
function _M.ensure(x, where)
  if type(x) == "table" and getmetatable(x) == mt then return x, false end
  if x ~= nil and type(x) ~= "table" then
    error(("%s: the first argument must be a kafka.client or a table of client options (got %s)"):format(
      where or "kafka.client.ensure", check.show(x)), 3)
  end
  return _M.new(x), true
end

--- Closes every connection of the client (a closed client connects again
-- when used).
function _M:close()
  for _, c in pairs(self.conns) do c:close("client closed") end
  for _, c in pairs(self.boot_conns) do c:close("client closed") end
  self.conns, self.boot_conns = {}, {}
end

return _M
