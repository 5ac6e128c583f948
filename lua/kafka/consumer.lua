-- kafka.consumer: assigned partitions, a fetch loop, committed offsets.
--
--   local consumer = require "kafka.consumer"
--   local c = consumer.new({brokers = {"127.0.0.1:9092"}}, {group_id = "g"})
--   c:assign{{topic = "t", partition = 0, offset = "earliest"}, {topic = "t", partition = 1}}
--   local msgs, err = c:poll(1000)  -- {topic, partition, offset, key, value, headers, timestamp, high_watermark}...
--   c:commit()                      -- the positions of every assigned partition
--   c:close()
--
-- Options: group_id (for commit/committed), auto_offset_reset ("latest",
-- "earliest" or "error": where to go when an offset is out of range or
-- nothing is committed), fetch_max_wait_ms (500), fetch_min_bytes (1),
-- fetch_max_bytes (8388608 per broker: smaller than Kafka's 50 MB, since a
-- Lua socket reads a response into one string), max_partition_fetch_bytes (1048576),
-- max_poll_records (10000: a poll decodes partitions until it holds this
-- many messages and keeps the rest of the fetch for the next polls),
-- isolation_level (0: read uncommitted; 1: read committed), check_crcs
-- (true), max_decompressed (bytes per batch), retry_backoff_ms (100).
-- One Fetch per broker covers all its assigned partitions; brokers are
-- asked in parallel. Group membership (JoinGroup/SyncGroup) is not here yet:
-- commits use generation -1, as a consumer with manual assignment does.
local proto = require "kafka.proto"
local client_mod = require "kafka.client"

local errors = proto.errors
local math = math
local setmetatable, tostring, type, ipairs, error = setmetatable, tostring, type, ipairs, error

local _M = {}
local mt = { __index = _M }

function _M.new(client_or_opts, opts)
  opts = opts or {}
  local client, own = client_mod.ensure(client_or_opts)
  local reset = opts.auto_offset_reset or "latest"
  if reset ~= "latest" and reset ~= "earliest" and reset ~= "error" then
    error("kafka.consumer.new: auto_offset_reset must be latest, earliest or error", 2)
  end
  return setmetatable({
    client = client,
    own_client = own,
    group_id = opts.group_id,
    auto_offset_reset = reset,
    fetch_max_wait_ms = opts.fetch_max_wait_ms or 500,
    fetch_min_bytes = opts.fetch_min_bytes or 1,
    fetch_max_bytes = opts.fetch_max_bytes or 8388608,
    max_partition_fetch_bytes = opts.max_partition_fetch_bytes or 1048576,
    isolation_level = opts.isolation_level or 0,
    decode_opts = { check_crc = opts.check_crcs ~= false, max_decompressed = opts.max_decompressed,
                    skip_control = true, batches = false },
    fetch_decode = { raw_records = true }, -- records are decoded per partition, see _partition_result
    retry_backoff_ms = opts.retry_backoff_ms or 100,
    max_poll_records = opts.max_poll_records or 10000,
    pending = nil, -- fetched partitions not decoded yet: {st=, pr=, offset=}
    parts = {},   -- array of partition states
    index = {},   -- "topic\0partition" -> state
  }, mt)
end

local function pkey(topic, partition) return topic .. "\0" .. partition end

-- Resolves a start offset: a number, "earliest", "latest" or "committed".
function _M:_resolve(topic, partition, offset)
  if type(offset) == "number" and offset >= 0 then return offset end
  if offset == "committed" then
    if not self.group_id then return nil, "offset 'committed' needs a group_id", "invalid" end
    local c, err, code = self:committed { { topic = topic, partition = partition } }
    if not c then return nil, err, code end
    if c[1].offset and c[1].offset >= 0 then return c[1].offset end
    if self.auto_offset_reset == "error" then
      return nil, ("no committed offset for %s/%d"):format(topic, partition), "no_offset"
    end
    offset = self.auto_offset_reset
  end
  if offset == nil then offset = self.auto_offset_reset == "error" and "latest" or self.auto_offset_reset end
  if offset == "earliest" or offset == -2 or offset == "latest" or offset == -1 then
    return self.client:list_offsets(topic, partition, offset)
  end
  return nil, "bad offset " .. tostring(offset), "invalid"
end

-- assign{{topic=, partition=, offset=}} -> true | nil, err, code. Replaces
-- the assignment; offset is a number, "earliest", "latest" or "committed"
-- (default: committed with a group_id, else auto_offset_reset).
function _M:assign(list)
  if type(list) ~= "table" then error("assign: expected an array of {topic=, partition=, offset=}", 2) end
  local parts, index = {}, {}
  for _, a in ipairs(list) do
    if type(a.topic) ~= "string" or type(a.partition) ~= "number" then
      error("assign: every entry needs topic (string) and partition (number)", 2)
    end
    local n, err, code = self.client:partitions(a.topic)
    if not n then return nil, err, code end
    if a.partition < 0 or a.partition >= n then
      return nil, ("topic %s has no partition %d"):format(a.topic, a.partition), "unknown_partition"
    end
    local start = a.offset
    if start == nil and self.group_id then start = "committed" end
    local off
    off, err, code = self:_resolve(a.topic, a.partition, start)
    if not off then return nil, err, code end
    local st = { topic = a.topic, partition = a.partition, offset = off, fetch_bytes = self.max_partition_fetch_bytes,
                 high_watermark = -1, set = { topic = a.topic, partition = a.partition } }
    parts[#parts + 1] = st
    index[pkey(a.topic, a.partition)] = st
  end
  self.parts, self.index = parts, index
  return true
end

function _M:assignment()
  local t = {}
  for i, st in ipairs(self.parts) do t[i] = { topic = st.topic, partition = st.partition, offset = st.offset } end
  return t
end

-- position(topic, partition) -> the next offset poll will return
function _M:position(topic, partition)
  local st = self.index[pkey(topic, partition)]
  return st and st.offset
end

-- seek(topic, partition, offset) -> true | nil, err, code
function _M:seek(topic, partition, offset)
  local st = self.index[pkey(topic, partition)]
  if not st then return nil, ("%s/%d is not assigned"):format(topic, partition), "invalid" end
  local off, err, code = self:_resolve(topic, partition, offset)
  if not off then return nil, err, code end
  st.offset = off
  return true
end

-- Handles one partition's fetch result; appends messages to out.
-- Returns nil, err, code for errors the caller must see.
function _M:_partition_result(st, pr, out)
  local ec = pr.error_code
  if ec ~= 0 then
    local e = errors.info(ec)
    if ec == 1 then -- OFFSET_OUT_OF_RANGE
      if self.auto_offset_reset == "error" then
        return nil, ("%s/%d: offset %d out of range"):format(st.topic, st.partition, st.offset), "offset_out_of_range"
      end
      local off, err, code = self.client:list_offsets(st.topic, st.partition, self.auto_offset_reset)
      if not off then return nil, err, code end
      st.offset = off
      return true
    end
    if e.retriable then
      self.client:invalidate(st.topic)
      return true
    end
    return nil, ("%s/%d: %s (%s)"):format(st.topic, st.partition, e.name, e.message), "kafka", ec
  end
  st.high_watermark = pr.high_watermark
  local raw = pr.records
  if not raw or #raw == 0 then return true end
  -- decoded in C straight into `out`: records below the position (a
  -- compressed batch starts early) and control records are left out,
  -- topic/partition/high_watermark set in every message
  local opts = self.decode_opts
  local set = st.set
  set.high_watermark = pr.high_watermark
  opts.into, opts.set, opts.min_offset = out, set, st.offset
  local before = #out
  local _, info, code = proto.decode_records(raw, opts)
  opts.into, opts.set = nil, nil
  if not info or (type(info) == "table" and info.errors) then
    -- a corrupt batch is never skipped silently: the position stays put
    for i = #out, before + 1, -1 do out[i] = nil end
    local msg = type(info) == "table" and info.errors[1] or info
    return nil, ("%s/%d at offset %d: %s"):format(st.topic, st.partition, st.offset, tostring(msg)), code or "corrupt"
  end
  local next_pos = info.next_offset
  if next_pos and next_pos > st.offset then
    st.offset = next_pos
  elseif info.partial and #out == before then
    -- the first batch is larger than we asked for (old brokers): ask for more
    st.fetch_bytes = math.min(st.fetch_bytes * 2, self.fetch_max_bytes)
  end
  return true
end

-- Decodes one partition's fetch result into out, or keeps it for the next
-- poll once out holds max_poll_records: a poll's messages all stay alive
-- until the caller drops them, and a big live set makes Lua's GC slow.
function _M:_settle(st, pr, out)
  if #out >= self.max_poll_records then
    local p = self.pending or {}
    p[#p + 1] = { st = st, pr = pr, offset = st.offset }
    self.pending = p
    return true
  end
  return self:_partition_result(st, pr, out)
end

-- Decodes what earlier fetches left (dropped when the partition was
-- reassigned or sought meanwhile). Returns the first error, if any.
function _M:_drain(out)
  local pend = self.pending
  self.pending = nil
  local first_err, first_code, first_kcode
  for _, it in ipairs(pend) do
    local st = it.st
    if self.index[pkey(st.topic, st.partition)] == st and st.offset == it.offset then
      local ok, err, code, kcode = self:_settle(st, it.pr, out)
      if not ok and not first_err then first_err, first_code, first_kcode = err, code, kcode end
    end
  end
  return first_err, first_code, first_kcode
end

-- poll(timeout_ms) -> array of messages (maybe empty) | nil, err, code.
-- Each message: topic, partition, offset, key, value, headers (when any),
-- timestamp, high_watermark.
function _M:poll(timeout_ms)
  timeout_ms = timeout_ms or self.fetch_max_wait_ms
  local out = {}
  if #self.parts == 0 then
    self.client.sleep(timeout_ms)
    return out
  end
  if self.pending then
    -- answer from what was fetched already; fetch again only when it is used up
    local err, code, kcode = self:_drain(out)
    if #out == 0 and err then return nil, err, code, kcode end
    if #out > 0 or self.pending then return out end
  end
  local by_leader, order = {}, {}
  local unreachable = false
  for _, st in ipairs(self.parts) do
    local leader = self.client:leader(st.topic, st.partition)
    local conn
    if leader then conn = self.client:broker(leader) end
    if conn then
      local req = by_leader[conn]
      if not req then
        req = { topics = {}, list = {} }
        by_leader[conn] = req
        order[#order + 1] = conn
      end
      local t = req.topics[st.topic]
      if not t then
        t = { topic = st.topic, partitions = {} }
        req.topics[st.topic] = t
        req.list[#req.list + 1] = t
      end
      t.partitions[#t.partitions + 1] = { partition = st.partition, fetch_offset = st.offset,
        partition_max_bytes = st.fetch_bytes, current_leader_epoch = -1, log_start_offset = -1,
        last_fetched_epoch = -1 }
    else
      unreachable = true
      self.client:invalidate(st.topic)
    end
  end
  local wait = math.min(timeout_ms, self.fetch_max_wait_ms)
  local sent = {}
  for _, conn in ipairs(order) do
    local req = by_leader[conn]
    local v = conn:version(1)
    local corr
    if v then
      corr = conn:send(1, v, { replica_id = -1, max_wait_ms = wait, min_bytes = self.fetch_min_bytes,
        max_bytes = self.fetch_max_bytes, isolation_level = self.isolation_level, session_id = 0,
        session_epoch = -1, topics = req.list, forgotten_topics_data = {}, rack_id = "" },
        { timeout_ms = wait, decode = self.fetch_decode })
    end
    sent[#sent + 1] = { conn = conn, corr = corr }
  end
  local first_err, first_code, first_kcode
  for _, s in ipairs(sent) do
    local resp
    if s.corr then resp = s.conn:receive(s.corr) end
    if not resp then
      unreachable = true
      self.client:invalidate()
    else
      if resp.error_code and resp.error_code ~= 0 then
        local e = errors.info(resp.error_code)
        if e.retriable then
          self.client:invalidate()
        elseif not first_err then
          first_err, first_code, first_kcode = "Fetch: " .. e.name, "kafka", e.code
        end
      end
      for _, tr in ipairs(resp.responses or {}) do
        for _, pr in ipairs(tr.partitions or {}) do
          local st = self.index[pkey(tr.topic, pr.partition_index)]
          if st then
            local ok, err, code, kcode = self:_settle(st, pr, out)
            if not ok and not first_err then first_err, first_code, first_kcode = err, code, kcode end
          end
        end
      end
    end
  end
  if #out == 0 and first_err then return nil, first_err, first_code, first_kcode end
  if #out == 0 and unreachable and #sent == 0 then
    -- nothing could be asked: do not spin
    self.client.sleep(math.min(timeout_ms, self.retry_backoff_ms))
  end
  return out
end

-- Groups items by their topic: an array of {name = topic, [field] = {...}}
-- whose lists hold make(item), in first-seen order (the shape of the
-- OffsetCommit and OffsetFetch requests).
local function by_topic(items, field, make)
  local topics, list = {}, {}
  for _, it in ipairs(items) do
    local t = topics[it.topic]
    if not t then
      t = { name = it.topic, [field] = {} }
      topics[it.topic] = t
      list[#list + 1] = t
    end
    local l = t[field]
    l[#l + 1] = make(it)
  end
  return list
end

-- Sends a request to the group coordinator, finding it again (and retrying)
-- while the answer is retriable. check(resp) returns the result, or nil,
-- err, code, kafka_code, retriable.
function _M:_group_request(api, body, check)
  local last_err, last_code, last_kcode
  for attempt = 0, self.client.max_retries do
    if attempt > 0 then self.client.sleep(self.retry_backoff_ms) end
    local c, err, code = self.client:coordinator(self.group_id, 0)
    local kcode, retriable
    if c then
      local resp
      resp, err, code = c:request(api, body)
      if resp then
        local result
        result, err, code, kcode, retriable = check(resp)
        if result then return result end
        if not retriable then return nil, err, code, kcode end
      end
    end
    last_err, last_code, last_kcode = err, code, kcode
  end
  return nil, last_err, last_code, last_kcode
end

-- NOT_COORDINATOR (16) and the retriable codes send us to the coordinator again.
local function kafka_error(what, code)
  local e = errors.info(code)
  return nil, what .. ": " .. e.name, "kafka", e.code, e.retriable or e.code == 16
end

-- commit([offsets]) -> true | nil, err, code. offsets: {{topic=, partition=,
-- offset=, metadata=}}; default: the position of every assigned partition.
function _M:commit(offsets)
  if not self.group_id then error("commit: the consumer has no group_id", 2) end
  if not offsets then
    offsets = {}
    for i, st in ipairs(self.parts) do offsets[i] = { topic = st.topic, partition = st.partition, offset = st.offset } end
  end
  local list = by_topic(offsets, "partitions", function(o)
    return { partition_index = o.partition, committed_offset = o.offset, committed_leader_epoch = -1,
             commit_timestamp = -1, committed_metadata = o.metadata or "" }
  end)
  return self:_group_request(8, { group_id = self.group_id, generation_id_or_member_epoch = -1, member_id = "",
    retention_time_ms = -1, topics = list }, function(resp)
    for _, tr in ipairs(resp.topics or {}) do
      for _, pr in ipairs(tr.partitions or {}) do
        if pr.error_code ~= 0 then
          return kafka_error(("commit %s/%d"):format(tr.name, pr.partition_index), pr.error_code)
        end
      end
    end
    return true
  end)
end

-- committed(partitions) -> {{topic=, partition=, offset=, metadata=}} (offset
-- -1 when none is committed) | nil, err, code
function _M:committed(partitions)
  if not self.group_id then error("committed: the consumer has no group_id", 2) end
  partitions = partitions or self:assignment()
  local list = by_topic(partitions, "partition_indexes", function(p) return p.partition end)
  return self:_group_request(9, { group_id = self.group_id, topics = list, require_stable = false }, function(resp)
    if resp.error_code and resp.error_code ~= 0 then return kafka_error("committed", resp.error_code) end
    local found = {}
    for _, tr in ipairs(resp.topics or {}) do
      for _, pr in ipairs(tr.partitions or {}) do
        if pr.error_code ~= 0 then
          local _, err, code, kcode = kafka_error(("committed %s/%d"):format(tr.name, pr.partition_index),
            pr.error_code)
          return nil, err, code, kcode, false
        end
        found[pkey(tr.name, pr.partition_index)] = pr
      end
    end
    local result = {}
    for i, p in ipairs(partitions) do
      local pr = found[pkey(p.topic, p.partition)]
      result[i] = { topic = p.topic, partition = p.partition, offset = pr and pr.committed_offset or -1,
                    metadata = pr and pr.metadata }
    end
    return result
  end)
end

function _M:close()
  self.parts, self.index = {}, {}
  if self.own_client then self.client:close() end
end

return _M
