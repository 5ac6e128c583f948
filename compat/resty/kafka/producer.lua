-- resty.kafka.producer (lua-resty-kafka 0.23's API) on kafka.producer:
-- "sync" sends each message and waits for its offset (kafka.producer's
-- send_sync, in the calling request); "async" is one producer per nginx
-- worker and cluster_name on kafka.producer's background sender (its own
-- timer and connections, RecordBatch v2, compression, idempotence with
-- required_acks = -1). What differs from the original: docs/migrating.md.
--
--   local producer = require "resty.kafka.producer"
--   local p = producer:new(broker_list, {producer_type = "async", flush_time = 100})
--   local ok, err = p:send("topic", key, message)   -- true | nil, "buffer overflow"
local kproducer = require "kafka.producer"
local client = require "resty.kafka.client"
local Errors = require "resty.kafka.errors"

local setmetatable, pairs, ipairs, type, tostring, pcall = setmetatable, pairs, ipairs, type, tostring, pcall
local ngx = ngx

local _M = { _VERSION = "0.23" }
local mt = { __index = _M }

-- int64 as the original returns offsets: cdata LL under LuaJIT (tostring
-- gives "42LL", tonumber the number), a number elsewhere
local ll = function(n) return n end
do
  local ok, ffi = pcall(require, "ffi")
  if ok then
    local I64 = ffi.typeof("int64_t")
    ll = function(n) return I64(n) end
  end
end
_M._ll = ll

-- the original's partitioner (crc32 of the key, round robin by a counter
-- for keyless messages): partitioner = producer.legacy_partitioner keeps
-- the placement of messages the original sent
function _M.legacy_partitioner(key, num, correlation_id)
  local id = key and ngx.crc32_short(key) or correlation_id
  return id % num
end

local cluster_inited = {} -- async producers: cluster_name -> producer (one per worker)
local DEFAULT_CLUSTER_NAME = 1

local YIELDABLE = { rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
  ssl_session_fetch = true, preread = true, ssl_client_hello = true }

-- the original's error strings: Kafka's error name, or its "not found ..." texts
local function error_text(err, code, kcode)
  if kcode and kcode ~= 0 then return (Errors[kcode] or Errors[-1]).msg end
  if code == "unknown_topic" then return "not found topic" end
  if code == "unknown_partition" then return "not found partition" end
  return tostring(err)
end

-- Failed messages reach error_handle (or the error log) in a timer of
-- their own, grouped by topic-partition as the original's send buffers:
-- queue = {key1, msg1, key2, msg2, ...} (a nil key as ""), index = #queue.
local function deliver_failures(premature, self)
  self.failing = false
  local list = self.failed
  self.failed = {}
  local groups, order = {}, {}
  for _, f in ipairs(list) do
    local k = f.topic .. "\0" .. tostring(f.partition)
    local g = groups[k]
    if not g then
      g = { topic = f.topic, partition = f.partition, queue = {}, index = 0, err = f.err, retryable = f.retryable }
      groups[k] = g
      order[#order + 1] = g
    end
    g.queue[g.index + 1] = f.key or ""
    g.queue[g.index + 2] = f.msg
    g.index = g.index + 2
    g.retryable = g.retryable and f.retryable
  end
  for _, g in ipairs(order) do
    if self.error_handle then
      local ok, err = pcall(self.error_handle, g.topic, g.partition, g.queue, g.index, g.err, g.retryable)
      if not ok then ngx.log(ngx.ERR, "failed to callback error_handle: ", err) end
    else
      ngx.log(ngx.ERR, "buffered messages send to kafka err: ", g.err, ", retryable: ", g.retryable,
        ", topic: ", g.topic, ", partition_id: ", g.partition, ", length: ", g.index / 2)
    end
  end
  if premature and #self.failed > 0 then return deliver_failures(true, self) end
end

local function failures_timer(self)
  if self.failing then return end
  local ok = ngx.timer.at(0, deliver_failures, self)
  if ok then
    self.failing = true
  else
    deliver_failures(false, self) -- no timer (worker exiting): here
  end
end

-- on_delivery of the async producer: offsets as the original counts them
-- (the next offset of each partition), failures to error_handle
local function on_delivery(self, r)
  local held = self.held
  local key, msg
  if held then
    local h = held[r.id]
    if h then key, msg = h[1], h[2] end
    held[r.id] = nil
  end
  if not r.err then
    local t = self.offsets[r.topic]
    if not t then
      t = {}
      self.offsets[r.topic] = t
    end
    local next_offset = r.offset + 1
    if not t[r.partition] or t[r.partition] < next_offset then t[r.partition] = next_offset end
    return
  end
  -- a Kafka error in the answer: the broker did not append the batch (the
  -- original's "surely not committed"); a timeout or lost connection may have
  self.failed[#self.failed + 1] = { topic = r.topic, partition = r.partition or -1, key = key, msg = msg or "",
    err = error_text(r.err, r.code, r.error_code), retryable = (r.error_code or 0) ~= 0 }
  failures_timer(self)
end

-- producer_config -> kafka.producer's options
local function kafka_options(self, opts, async)
  local o = {
    background = async,
    acks = opts.required_acks or 1,
    timeout_ms = opts.request_timeout or 2000,
    max_retries = opts.max_retry or 3,
    retry_backoff_ms = opts.retry_backoff or 100,
    linger_ms = async and (opts.flush_time or 1000) or 0,
    batch_size = opts.batch_size or 1048576,
    max_buffered = opts.max_buffering or 50000,
    flush_on_full = not async,
    compression = opts.compression, -- lua-kafka's option (the original has no codec)
  }
  local part = opts.partitioner
  if part then
    -- the original passes a counter where lua-kafka passes the topic
    o.partitioner = function(key, n)
      self.correlation_id = (self.correlation_id + 1) % 1073741824
      return part(key, n, self.correlation_id)
    end
  end
  if async then
    o.delivery_reports = "errors"
    o.on_delivery = function(r) on_delivery(self, r) end
  end
  return o
end

-- new(broker_list [, producer_config [, cluster_name]]) -> producer; an
-- async producer is made once per worker and cluster_name
function _M.new(_, broker_list, producer_config, cluster_name)
  local name = cluster_name or DEFAULT_CLUSTER_NAME
  local opts = producer_config or {}
  local async = opts.producer_type == "async"
  if async and cluster_inited[name] then return cluster_inited[name] end
  local cli = client:new(broker_list, producer_config)
  local self = setmetatable({
    client = cli,
    async = async,
    correlation_id = 1,
    error_handle = opts.error_handle,
    wait_on_buffer_full = opts.wait_on_buffer_full or false,
    wait_buffer_timeout = opts.wait_buffer_timeout or 5, -- seconds
    offsets = {},    -- topic -> partition -> the next offset (what offset() sums)
    failed = {},     -- failed messages waiting for error_handle's timer
    failing = false, -- that timer is scheduled
    held = nil,      -- message id -> {key, message} until reported (async with error_handle)
  }, mt)
  if async and opts.error_handle then self.held = {} end
  self.kp = kproducer.new(cli.kc, kafka_options(self, opts, async))
  if async then cluster_inited[name] = self end
  return self
end

local function wait_room(self, topic, key, message)
  local phase = ngx.get_phase()
  if not YIELDABLE[phase] then return nil, "buffer overflow" end
  local deadline = ngx.now() + self.wait_buffer_timeout
  local id, err, code
  repeat
    ngx.sleep(0.005)
    id, err, code = self.kp:send(topic, message, { key = key })
  until id or code ~= "buffer_full" or ngx.now() >= deadline
  if id then return id end
  if code == "buffer_full" then return nil, "buffer overflow timeout" end
  return nil, error_text(err, code)
end

-- send(topic, key, message): sync -> the next offset of the partition
-- after this message (cdata LL, as the original) | nil, err; async -> true
-- | nil, "buffer overflow"
function _M.send(self, topic, key, message)
  if self.async then
    local id, err, code = self.kp:send(topic, message, { key = key })
    if not id then
      if code ~= "buffer_full" then return nil, error_text(err, code) end
      if not self.wait_on_buffer_full then return nil, "buffer overflow" end
      id, err = wait_room(self, topic, key, message)
      if not id then return nil, err end
    end
    if self.held then self.held[id] = { key, message } end
    return true
  end
  local partition, offset, code, kcode = self.kp:send_sync(topic, message, { key = key })
  if not partition then return nil, error_text(offset, code, kcode) end
  local t = self.offsets[topic]
  if not t then
    t = {}
    self.offsets[topic] = t
  end
  t[partition] = offset + 1
  return ll(offset + 1)
end

-- flush() -> true: an async producer waits for what it buffered where
-- nginx can wait (elsewhere its sender goes on by itself)
function _M.flush(self)
  if self.async and YIELDABLE[ngx.get_phase()] then self.kp:flush() end
  return true
end

-- offset() -> sum, details: the next offsets of every partition sent to
-- ({topic = {[partition] = offset}}) and their sum (cdata LL under LuaJIT)
function _M.offset(self)
  local sum, details = 0, {}
  for topic, parts in pairs(self.offsets) do
    details[topic] = {}
    for partition, off in pairs(parts) do
      sum = sum + off
      details[topic][partition] = ll(off)
    end
  end
  if type(sum) == "number" and sum ~= 0 then sum = ll(sum) end
  return sum, details
end

return _M
