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
-- asked in parallel, and a Fetch not answered by the poll's deadline stays
-- in flight for the next poll (a slow broker never holds up the others).
-- Fetches go over the consumer's own connections, so a Fetch waiting on a
-- broker never delays a producer or a commit sharing the client.
-- Group membership (JoinGroup/SyncGroup) is not here yet: commits use
-- generation -1, as a consumer with manual assignment does.
--
-- How poll reports errors: see poll() below and the README.
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"
local txn = require "kafka.txn"

local errors = proto.errors
local API = proto.api
local math, table = math, table
local setmetatable, tostring, type, ipairs, pairs, next, error = setmetatable, tostring, type, ipairs, pairs, next, error

local _M = {}
local mt = { __index = _M }

local WHERE = "kafka.consumer.new"
local ISOLATION = { [0] = 0, [1] = 1, read_uncommitted = 0, read_committed = 1 }
local OFFSET_WORDS = { "earliest", "latest", "committed", -1, -2 }

function _M.new(client_or_opts, opts)
  local client, own = client_mod.ensure(client_or_opts, WHERE)
  opts = check.opts(WHERE, opts)
  local int = check.int
  local self = setmetatable({
    client = client,
    own_client = own,
    group_id = check.typed(WHERE, "group_id", opts.group_id, nil, "string"),
    auto_offset_reset = check.oneof(WHERE, "auto_offset_reset", opts.auto_offset_reset, "latest",
      { "latest", "earliest", "error" }),
    fetch_max_wait_ms = int(WHERE, "fetch_max_wait_ms", opts.fetch_max_wait_ms, 500, 0),
    fetch_min_bytes = int(WHERE, "fetch_min_bytes", opts.fetch_min_bytes, 1, 0),
    fetch_max_bytes = int(WHERE, "fetch_max_bytes", opts.fetch_max_bytes, 8388608, 1),
    max_partition_fetch_bytes = int(WHERE, "max_partition_fetch_bytes", opts.max_partition_fetch_bytes, 1048576, 1),
    isolation_level = ISOLATION[check.oneof(WHERE, "isolation_level", opts.isolation_level, 0,
      { 0, 1, "read_uncommitted", "read_committed" })],
    decode_opts = { check_crc = check.bool(WHERE, "check_crcs", opts.check_crcs, true),
                    max_decompressed = int(WHERE, "max_decompressed", opts.max_decompressed, nil, 0),
                    skip_control = true, batches = false },
    decode_txn = nil, -- decode_opts with the batch list (read_committed with aborted transactions)
    fetch_decode = { raw_records = true }, -- records are decoded per partition, see _partition_result
    retry_backoff_ms = int(WHERE, "retry_backoff_ms", opts.retry_backoff_ms, client.retry_backoff_ms, 0),
    max_poll_records = int(WHERE, "max_poll_records", opts.max_poll_records, 10000, 1),
    pending = nil, -- fetched partitions not decoded yet: {st=, pr=, offset=}
    parts = {},   -- array of partition states
    index = {},   -- "topic\0partition" -> state
    pool = {},    -- node id -> this consumer's Fetch connection (see client:broker)
    fetches = {}, -- connection -> the Fetch in flight to it: {conn=, corr=, parts = {st...}, offsets = {[st]=}}
    flist = {},   -- the same, oldest first
  }, mt)
  if self.isolation_level == 1 then
    self.decode_txn = {}
    for k, v in pairs(self.decode_opts) do self.decode_txn[k] = v end
    self.decode_txn.batches = true
  end
  return self
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

-- Drops every Fetch in flight (their answers are not wanted any more).
function _M:_abandon_fetches()
  for _, f in ipairs(self.flist) do
    f.conn:abandon(f.corr)
    for _, st in ipairs(f.parts) do st.fetch = nil end
  end
  self.fetches, self.flist = {}, {}
end

-- assign{{topic=, partition=, offset=}} -> true | nil, err, code. Replaces
-- the assignment; offset is a number, "earliest", "latest" or "committed"
-- (default: committed with a group_id, else auto_offset_reset).
function _M:assign(list)
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
  local parts, index = {}, {}
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
    local st = { topic = a.topic, partition = a.partition, offset = off, fetch_bytes = self.max_partition_fetch_bytes,
                 high_watermark = -1, set = { topic = a.topic, partition = a.partition } }
    parts[#parts + 1] = st
    index[pkey(a.topic, a.partition)] = st
  end
  self:_abandon_fetches()
  self.parts, self.index, self.pending = parts, index, nil
  return true
end

function _M:assignment()
  local t = {}
  for i, st in ipairs(self.parts) do t[i] = { topic = st.topic, partition = st.partition, offset = st.offset } end
  return t
end

-- position(topic, partition) -> the next offset poll will return
function _M:position(topic, partition)
  local st = self.index[pkey(tostring(topic), tostring(partition))]
  return st and st.offset
end

-- seek(topic, partition, offset) -> true | nil, err, code
function _M:seek(topic, partition, offset)
  if type(topic) ~= "string" then check.fail("seek", "topic", "a string", topic) end
  check.partition("seek", "partition", partition)
  check.offset("seek", "offset", offset, OFFSET_WORDS)
  local st = self.index[pkey(topic, partition)]
  if not st then return nil, ("%s/%d is not assigned"):format(topic, partition), "invalid" end
  local off, err, code = self:_resolve(topic, partition, offset)
  if not off then return nil, err, code end
  st.offset = off
  return true
end

-- Handles one partition's fetch result; appends messages to out.
-- Returns nil, err, code, kafka_code for errors the caller must see.
function _M:_partition_result(st, pr, out)
  local ec = pr.error_code
  if ec ~= errors.NONE then
    local e = errors.info(ec)
    if ec == errors.OFFSET_OUT_OF_RANGE then
      if self.auto_offset_reset == "error" then
        return nil, ("%s/%d: offset %d out of range"):format(st.topic, st.partition, st.offset), "offset_out_of_range",
          ec
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
  local aborted = self.isolation_level == 1 and pr.aborted_transactions
  local opts = aborted and aborted[1] and self.decode_txn or self.decode_opts
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
  if opts == self.decode_txn then txn.drop_aborted(out, before, info.batches, aborted) end -- read_committed
  local next_pos = info.next_offset
  if next_pos and next_pos > st.offset then
    st.offset = next_pos
  elseif info.partial and #out == before then
    -- the first batch is larger than we asked for (old brokers): ask for more
    st.fetch_bytes = math.min(st.fetch_bytes * 2, self.fetch_max_bytes)
  end
  return true
end

-- One error per partition and poll (the latest).
local function add_error(errs, st, err, code, kcode)
  local e
  for i = 1, #errs do
    if errs[i].topic == st.topic and errs[i].partition == st.partition then e = errs[i] end
  end
  if not e then
    e = { topic = st.topic, partition = st.partition }
    errs[#errs + 1] = e
  end
  e.err, e.code, e.kafka_code = err, code, kcode
end

-- Decodes one partition's fetch result into out, or keeps it for the next
-- poll once out holds max_poll_records: a poll's messages all stay alive
-- until the caller drops them, and a big live set makes Lua's GC slow.
function _M:_settle(st, pr, out, errs)
  if #out >= self.max_poll_records then
    local p = self.pending or {}
    p[#p + 1] = { st = st, pr = pr, offset = st.offset }
    self.pending = p
    return
  end
  local ok, err, code, kcode = self:_partition_result(st, pr, out)
  if not ok then add_error(errs, st, err, code, kcode) end
end

-- Decodes what earlier fetches left (dropped when the partition was
-- reassigned or sought meanwhile).
function _M:_drain(out, errs)
  local pend = self.pending
  self.pending = nil
  for _, it in ipairs(pend) do
    local st = it.st
    if self.index[pkey(st.topic, st.partition)] == st and st.offset == it.offset then
      self:_settle(st, it.pr, out, errs)
    end
  end
end

-- Sends a Fetch to every leader of assigned partitions that has none in
-- flight (partitions already in a Fetch wait for its answer; partitions in
-- skip are left out until the time given). Partitions whose leader cannot
-- be reached get an error in errs and are tried again after
-- retry_backoff_ms.
function _M:_send_fetches(deadline, errs, skip)
  local client = self.client
  local items = {}
  local tnow = client.now()
  for _, st in ipairs(self.parts) do
    if not st.fetch and not (skip[st] and skip[st] > tnow) then items[#items + 1] = st end
  end
  if #items == 0 then return end
  local groups, failed = client:group(items, deadline, self.pool)
  for _, f in ipairs(failed) do
    add_error(errs, f.item, f.err, f.code)
    skip[f.item] = tnow + self.retry_backoff_ms
    if f.code ~= "backoff" then client:invalidate(f.item.topic) end
  end
  local wait = math.floor(math.max(0, math.min(deadline - client.now(), self.fetch_max_wait_ms)))
  for _, g in ipairs(groups) do
    local conn = g.conn
    if not self.fetches[conn] then
      local topics, list, offsets = {}, {}, {}
      for _, st in ipairs(g.items) do
        local t = topics[st.topic]
        if not t then
          t = { topic = st.topic, partitions = {} }
          topics[st.topic] = t
          list[#list + 1] = t
        end
        t.partitions[#t.partitions + 1] = { partition = st.partition, fetch_offset = st.offset,
          partition_max_bytes = st.fetch_bytes, current_leader_epoch = -1, log_start_offset = -1,
          last_fetched_epoch = -1 }
        offsets[st] = st.offset
      end
      local v, err, code = conn:version(API.Fetch)
      local corr
      if v then
        corr, err, code = conn:send(API.Fetch, v, { replica_id = -1, max_wait_ms = wait, min_bytes = self.fetch_min_bytes,
          max_bytes = self.fetch_max_bytes, isolation_level = self.isolation_level, session_id = 0,
          session_epoch = -1, topics = list, forgotten_topics_data = {}, rack_id = "" },
          { timeout_ms = wait, decode = self.fetch_decode, deadline = deadline })
      end
      if corr then
        local f = { conn = conn, corr = corr, parts = g.items, offsets = offsets, wait = wait }
        self.fetches[conn] = f
        self.flist[#self.flist + 1] = f
        for _, st in ipairs(g.items) do st.fetch = f end
      else
        for _, st in ipairs(g.items) do
          add_error(errs, st, err, code)
          skip[st] = tnow + self.retry_backoff_ms
        end
        client:invalidate()
      end
    end
  end
end

function _M:_fetch_done(f)
  self.fetches[f.conn] = nil
  for i, x in ipairs(self.flist) do
    if x == f then
      table.remove(self.flist, i)
      break
    end
  end
  for _, st in ipairs(f.parts) do
    if st.fetch == f then st.fetch = nil end
  end
end

-- Reads the answer to Fetch f until the deadline. Returns false while it
-- is still in flight. A partition that failed is not fetched again in this
-- poll (skip), so a stuck partition cannot make a poll spin.
function _M:_collect(f, deadline, out, errs, skip)
  local resp, err, code = f.conn:receive(f.corr, deadline)
  if not resp and code == "timeout" and f.conn:waiting(f.corr) then return false end
  self:_fetch_done(f)
  local current = {}
  for _, st in ipairs(f.parts) do
    -- only partitions still assigned and not sought since the Fetch was sent
    if self.index[pkey(st.topic, st.partition)] == st and st.offset == f.offsets[st] then current[st] = true end
  end
  local t = self.client.now()
  if not resp then
    for st in pairs(current) do
      add_error(errs, st, err, code)
      skip[st] = t + self.retry_backoff_ms
    end
    self.client:invalidate()
    return true
  end
  if resp.error_code and resp.error_code ~= errors.NONE then
    local e = errors.info(resp.error_code)
    if e.retriable then
      self.client:invalidate()
    else
      for st in pairs(current) do add_error(errs, st, "Fetch: " .. e.name, "kafka", e.code) end
    end
  end
  local nerr, nout = #errs, #out
  for _, tr in ipairs(resp.responses or {}) do
    for _, pr in ipairs(tr.partitions or {}) do
      local st = self.index[pkey(tr.topic, pr.partition_index)]
      if st and current[st] then
        self:_settle(st, pr, out, errs)
        if #errs > nerr then
          skip[st] = math.huge
          nerr = #errs
        end
      end
    end
  end
  if #out == nout and f.wait == 0 then
    -- an empty answer to a Fetch that asked the broker not to wait: do not
    -- ask again at once (the poll would spin on the network)
    for st in pairs(current) do
      if not skip[st] then skip[st] = t + self.retry_backoff_ms end
    end
  end
  return true
end

local function result(out, errs)
  if #errs == 0 then return out end
  if #out > 0 then
    out.errors = errs
    return out
  end
  local e = errs[1]
  local msg = e.err
  if #errs > 1 then msg = ("%s (and %d more partition errors)"):format(tostring(msg), #errs - 1) end
  return nil, msg, e.code, e.kafka_code, errs
end

-- poll([timeout_ms]) -> messages | nil, err, code, kafka_code, errors.
-- Each message: topic, partition, offset, key, value, headers (when any),
-- timestamp, high_watermark. timeout_ms (default fetch_max_wait_ms) is a
-- deadline over the whole call. A partition that could not be fetched
-- (leader unreachable, I/O error, a non-retriable Kafka error, a corrupt
-- batch, an offset out of range with auto_offset_reset = "error") gives an
-- entry {topic=, partition=, err=, code=, kafka_code=} in errors: with
-- messages from other partitions they come as messages.errors; with no
-- messages at all poll returns nil, the first error's message, code and
-- kafka_code, and the whole list as the fifth value. Retriable Kafka
-- errors (a leader moved) are handled inside (metadata refreshed) and not
-- reported.
function _M:poll(timeout_ms)
  timeout_ms = check.int("poll", "timeout_ms", timeout_ms, self.fetch_max_wait_ms, 0)
  local client = self.client
  local now = client.now
  local deadline = now() + timeout_ms
  local out, errs = {}, {}
  if #self.parts == 0 then
    client.sleep(timeout_ms)
    return out
  end
  if self.pending then
    -- answer from what was fetched already; fetch again only when it is used up
    self:_drain(out, errs)
    if #out > 0 or self.pending then return result(out, errs) end
  end
  local skip = {}
  while true do
    self:_send_fetches(deadline, errs, skip)
    -- every answer already there, from any broker
    local flist = self.flist
    for i = #flist, 1, -1 do
      local f = flist[i]
      if f then self:_collect(f, now(), out, errs, skip) end
    end
    -- messages end the poll; errors alone wait for the deadline (the
    -- healthy partitions may still bring messages, and a caller polling in
    -- a loop must not spin)
    local t = now()
    if #out > 0 or t >= deadline then return result(out, errs) end
    local f = self.flist[1]
    if not f then
      -- nothing in flight: try the unreachable leaders again after a backoff
      local wake = deadline
      for _, until_t in pairs(skip) do
        if until_t < wake then wake = until_t end
      end
      client.sleep(math.max(1, math.ceil(math.min(wake, deadline) - t)))
    else
      -- wait on the oldest Fetch; with several in flight, in short slices so
      -- an answer from another broker is not held up behind it
      local until_t = deadline
      if #self.flist > 1 and t + 20 < deadline then until_t = t + 20 end
      self:_collect(f, until_t, out, errs, skip)
    end
  end
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

-- Sends a request to the group coordinator through the client's retry
-- service: the coordinator is found again (and the request retried) while
-- the answer is retriable. check_resp(resp) returns the result, or nil,
-- err, code, kafka_code, retriable.
function _M:_group_request(api, body, check_resp)
  local client = self.client
  return client:call(function(deadline)
    local c, err, code, kcode, retriable = client:find_coordinator(self.group_id, 0, deadline)
    if not c then return nil, err, code, kcode, retriable end
    local resp
    resp, err, code = c:request(api, body, { deadline = deadline })
    if not resp then return nil, err, code end
    return check_resp(resp)
  end)
end

-- NOT_COORDINATOR and the retriable codes send us to the coordinator again.
local function kafka_error(what, code)
  local e = errors.info(code)
  return nil, what .. ": " .. e.name, "kafka", e.code, e.retriable or e.code == errors.NOT_COORDINATOR
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

-- commit([offsets]) -> true | nil, err, code. offsets: {{topic=, partition=,
-- offset=, metadata=}}; default: the position of every assigned partition.
function _M:commit(offsets)
  if not self.group_id then error("commit: the consumer has no group_id", 2) end
  check_list("commit", offsets, true)
  if not offsets then
    offsets = {}
    for i, st in ipairs(self.parts) do offsets[i] = { topic = st.topic, partition = st.partition, offset = st.offset } end
  end
  local list = by_topic(offsets, "partitions", function(o)
    return { partition_index = o.partition, committed_offset = o.offset, committed_leader_epoch = -1,
             commit_timestamp = -1, committed_metadata = o.metadata or "" }
  end)
  return self:_group_request(API.OffsetCommit, { group_id = self.group_id, generation_id_or_member_epoch = -1, member_id = "",
    retention_time_ms = -1, topics = list }, function(resp)
    for _, tr in ipairs(resp.topics or {}) do
      for _, pr in ipairs(tr.partitions or {}) do
        if pr.error_code ~= errors.NONE then
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
  check_list("committed", partitions, false)
  partitions = partitions or self:assignment()
  local list = by_topic(partitions, "partition_indexes", function(p) return p.partition end)
  return self:_group_request(API.OffsetFetch, { group_id = self.group_id, topics = list, require_stable = false }, function(resp)
    if resp.error_code and resp.error_code ~= errors.NONE then return kafka_error("committed", resp.error_code) end
    local found = {}
    for _, tr in ipairs(resp.topics or {}) do
      for _, pr in ipairs(tr.partitions or {}) do
        if pr.error_code ~= errors.NONE then
          local _, err, code, kcode = kafka_error(("committed %s/%d"):format(tr.name, pr.partition_index),
            pr.error_code)
          return nil, err, code, kcode, false
        end
        found[pkey(tr.name, pr.partition_index)] = pr
      end
    end
    local result_list = {}
    for i, p in ipairs(partitions) do
      local pr = found[pkey(p.topic, p.partition)]
      result_list[i] = { topic = p.topic, partition = p.partition, offset = pr and pr.committed_offset or -1,
                         metadata = pr and pr.metadata }
    end
    return result_list
  end)
end

function _M:close()
  self:_abandon_fetches()
  for _, conn in pairs(self.pool) do conn:close("consumer closed") end
  self.pool = {}
  self.parts, self.index, self.pending = {}, {}, nil
  if self.own_client then self.client:close() end
end

return _M
