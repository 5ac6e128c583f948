-- kafka.admin's partition-leader calls: delete_records, list_offsets,
-- describe_producers and abort_transaction,
-- items grouped by their leader,
-- one request per leader per attempt, the leaders from a Metadata request
-- at each attempt (as Java's PartitionLeaderStrategy looks them up):
-- NOT_LEADER_OR_FOLLOWER and the other retriable answers go to the new
-- leader at the next attempt. Installed into kafka.admin.
local proto = require "kafka.proto"
local check = require "kafka.check"
local client_mod = require "kafka.client"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local type, ipairs, pairs, table = type, ipairs, pairs, table

local _M = {}

local function timeout_of(self, o) return o.timeout_ms or self.client.default_api_timeout_ms end

-- route(client, items, deadline) -> groups {{conn=, items=}...}, failed
-- {{item=, err=, code=}...} | nil, {err, code}: items grouped by their
-- leader from one Metadata request for their topics that never creates a
-- topic (the client's own routing asks with its allow_auto_topic_creation,
-- and an admin call must not create what it names); applied to the cache
local function route(client, items, deadline)
  local names, seen = {}, {}
  for _, it in ipairs(items) do
    if not seen[it.topic] then seen[it.topic] = true; names[#names + 1] = it.topic end
  end
  local md, err, code = client:load_metadata({ topics = names }, deadline)
  if not md then return nil, { err, code } end
  local topics = {}
  for _, t in ipairs(md.topics or {}) do if t.name then topics[t.name] = t end end
  local groups, by_conn, failed = {}, {}, {}
  for _, it in ipairs(items) do
    local t = topics[it.topic]
    local leader, e, c
    if not t or t.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION then
      e, c = "topic " .. it.topic .. " not in the cluster", "unknown_topic"
    elseif t.error_code ~= errors.NONE then
      local info = errors.info(t.error_code)
      e, c = ("topic %s: %s"):format(it.topic, info.name), info.retriable and "retriable" or "kafka"
    else
      for _, p in ipairs(t.partitions or {}) do
        if p.partition_index == it.partition then leader = p.leader_id end
      end
      if leader == nil then e, c = ("topic %s has no partition %d"):format(it.topic, it.partition), "unknown_partition"
      elseif leader < 0 then e, c, leader = ("no leader for %s/%d"):format(it.topic, it.partition), "retriable", nil end
    end
    local conn
    if leader then conn, e, c = client:broker(leader, deadline) end
    if conn then
      local g = by_conn[conn]
      if not g then
        g = { conn = conn, items = {} }
        by_conn[conn] = g
        groups[#groups + 1] = g
      end
      g.items[#g.items + 1] = it
    else
      failed[#failed + 1] = { item = it, err = e, code = c }
    end
  end
  return groups, failed
end

-- leader_call(self, results, api, send, o): send(conn, items, deadline) ->
-- true (items settled, retriable ones appended to retry) | nil, err, code
local function leader_call(self, results, send, o)
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local groups, failed = route(client, pending, deadline)
    if not groups then return nil, failed[1], failed[2] end
    local retry, answered, last = {}, false, nil
    for _, f in ipairs(failed) do
      B.fail(f.item, nil, f.err, f.code)
      if f.code ~= "unknown_topic" and f.code ~= "unknown_partition" then
        if client_mod.RETRIABLE[f.code] then retry[#retry + 1] = f.item end
        last = { f.err, f.code }
      else answered = true end
    end
    for _, g in ipairs(groups) do
      local ok, err, code = send(g.conn, g.items, deadline, retry)
      if ok then answered = true
      else
        last = { err, code }
        for _, r in ipairs(g.items) do
          B.fail(r, nil, err, code)
          if client_mod.RETRIABLE[code] then retry[#retry + 1] = r end
        end
      end
    end
    if not answered and last then return nil, last[1], last[2] end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

-- match(resp_topics, items, fn): fn(item, partition answer) for each item answered
local function match(topics, items, fn)
  local by = {}
  for _, r in ipairs(items) do by[r.topic .. "\0" .. r.partition] = r end
  for _, t in ipairs(topics or {}) do
    for _, p in ipairs(t.partitions or {}) do
      local k = t.name .. "\0" .. p.partition_index
      if by[k] then fn(by[k], p); by[k] = nil end
    end
  end
  for _, r in pairs(by) do B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
end

local function topics_of(items, part)
  local list = {}
  for i, t in ipairs(B.by_topic(items)) do
    local ps = {}
    for j, r in ipairs(t.items) do ps[j] = part(r) end
    list[i] = { name = t.name, partitions = ps }
  end
  return list
end

--- Deletes the records before an offset (DeleteRecords to each partition's leader).
-- @tparam table items `{{topic=, partition=, offset=}...}` (offset -1: the high watermark, everything)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{topic=, partition=, offset=, low_watermark=, error_code=, error=, code=}...}`
function _M:delete_records(items, opts)
  local where = "delete_records"
  local o = B.opts(where, opts)
  if type(items) ~= "table" then check.fail(where, "items", "an array of {topic=, partition=, offset=} tables", items) end
  local results = {}
  for i, x in ipairs(items) do
    B.tp(where, "items[" .. i .. "]", x)
    check.int(where, "items[" .. i .. "].offset", x.offset, nil, -1)
    if x.offset == nil then check.fail(where, "items[" .. i .. "].offset", "an integer >= -1", nil) end
    results[i] = { topic = x.topic, partition = x.partition, offset = x.offset }
  end
  B.unique_tps(where, "items", items)
  local tmo = timeout_of(self, o)
  return leader_call(self, results, function(c, its, deadline, retry)
    local v, err, code = B.version(c, API.DeleteRecords)
    if not v then return nil, err, code end
    local resp
    resp, err, code = B.request(c, API.DeleteRecords, { timeout_ms = tmo,
      topics = topics_of(its, function(r) return { partition_index = r.partition, offset = r.offset } end) }, v, deadline)
    if not resp then return nil, err, code end
    match(resp.topics, its, function(r, p)
      B.settle(r, p.error_code, nil, retry)
      if p.error_code == errors.NONE then r.low_watermark = p.low_watermark end
    end)
    return true
  end, o)
end

local SPECS = { latest = -1, earliest = -2, max_timestamp = -3 }
local ISOLATION = { read_uncommitted = 0, read_committed = 1 }

--- Offsets by time (ListOffsets to each partition's leader).
-- @tparam table items `{{topic=, partition=, spec = "earliest"|"latest"|"max_timestamp"|timestamp ms}...}`
-- @tparam[opt] table opts `isolation_level` ("read_uncommitted", default, or "read_committed"), `timeout_ms`
-- @treturn table `{{topic=, partition=, spec=, offset=, timestamp=, leader_epoch=, error_code=, error=, code=}...}`
-- (for a timestamp: the first offset whose timestamp is >= it, offset -1 when none)
function _M:list_offsets(items, opts)
  local where = "list_offsets"
  local o = B.opts(where, opts)
  local level = ISOLATION[check.oneof(where, "isolation_level", o.isolation_level, "read_uncommitted",
    { "read_uncommitted", "read_committed" })]
  if type(items) ~= "table" then check.fail(where, "items", "an array of {topic=, partition=, spec=} tables", items) end
  local results = {}
  for i, x in ipairs(items) do
    B.tp(where, "items[" .. i .. "]", x)
    local ts = SPECS[x.spec] or (check.is_int(x.spec) and x.spec >= 0 and x.spec) or nil
    if not ts then
      check.fail(where, "items[" .. i .. "].spec", '"earliest", "latest", "max_timestamp" or a timestamp in ms', x.spec)
    end
    results[i] = { topic = x.topic, partition = x.partition, spec = x.spec, _ts = ts }
  end
  B.unique_tps(where, "items", items)
  local out, err, code = leader_call(self, results, function(c, its, deadline, retry)
    local need = 1
    for _, r in ipairs(its) do if r._ts == -3 then need = 7 end end
    local v, verr, vcode = B.version(c, API.ListOffsets, 1)
    if not v then return nil, verr, vcode end
    if need == 7 then
      -- above kafka.connection's usual cap (v3): v7 is the first with max_timestamp
      local b = c.broker_versions and c.broker_versions[API.ListOffsets]
      if not b or b.max < 7 then
        return nil, ("ListOffsets: %s speaks ListOffsets versions %s; max_timestamp needs v7+"):format(
          c:name(), b and ("v%d-v%d"):format(b.min, b.max) or "none"), "unsupported"
      end
      v = 7
    end
    local resp, e, k = B.request(c, API.ListOffsets, { replica_id = -1, isolation_level = level,
      topics = topics_of(its, function(r)
        return { partition_index = r.partition, timestamp = r._ts, current_leader_epoch = -1, max_num_offsets = 1 }
      end) }, v, deadline)
    if not resp then return nil, e, k end
    match(resp.topics, its, function(r, p)
      B.settle(r, p.error_code, nil, retry)
      if p.error_code == errors.NONE then
        r.offset, r.timestamp = p.offset, p.timestamp
        if p.leader_epoch and p.leader_epoch >= 0 then r.leader_epoch = p.leader_epoch end
      end
    end)
    return true
  end, o)
  for _, r in ipairs(results) do r._ts = nil end
  return out, err, code
end

--- The producers writing to partitions (DescribeProducers to each leader), as
-- kafka-transactions.sh describe-producers shows them.
-- @tparam table partitions `{{topic=, partition=}...}`
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{topic=, partition=, producers = {{producer_id=, producer_epoch=, last_sequence=,
-- last_timestamp=, coordinator_epoch=, current_transaction_start_offset=}...}, error_code=, error=, code=}...}`
-- (producers by id; coordinator_epoch and current_transaction_start_offset nil when -1)
function _M:describe_producers(partitions, opts)
  local where = "describe_producers"
  local o = B.opts(where, opts)
  if type(partitions) ~= "table" then check.fail(where, "partitions", "an array of {topic=, partition=} tables", partitions) end
  local results = {}
  for i, x in ipairs(partitions) do
    B.tp(where, "partitions[" .. i .. "]", x)
    results[i] = { topic = x.topic, partition = x.partition }
  end
  B.unique_tps(where, "partitions", partitions)
  return leader_call(self, results, function(c, its, deadline, retry)
    local v, err, code = B.version(c, API.DescribeProducers)
    if not v then return nil, err, code end
    local list = {}
    for i, t in ipairs(B.by_topic(its)) do
      local ps = {}
      for j, r in ipairs(t.items) do ps[j] = r.partition end
      list[i] = { name = t.name, partition_indexes = ps }
    end
    local resp
    resp, err, code = B.request(c, API.DescribeProducers, { topics = list }, v, deadline)
    if not resp then return nil, err, code end
    match(resp.topics, its, function(r, p)
      B.settle(r, p.error_code, p.error_message, retry)
      if p.error_code ~= errors.NONE then return end
      local ps = {}
      for i, a in ipairs(p.active_producers or {}) do
        ps[i] = { producer_id = a.producer_id, producer_epoch = a.producer_epoch, last_sequence = a.last_sequence,
          last_timestamp = a.last_timestamp, coordinator_epoch = a.coordinator_epoch >= 0 and a.coordinator_epoch or nil,
          current_transaction_start_offset = a.current_txn_start_offset >= 0 and a.current_txn_start_offset or nil }
      end
      table.sort(ps, function(a, b) return a.producer_id < b.producer_id end)
      r.producers = ps
    end)
    return true
  end, o)
end

-- The WriteTxnMarkers answers after which Java's abortTransaction looks the
-- leader up again and retries
local MARKER_AGAIN = { [errors.NOT_LEADER_OR_FOLLOWER] = true, [errors.REPLICA_NOT_AVAILABLE] = true,
  [errors.BROKER_NOT_AVAILABLE] = true, [errors.UNKNOWN_TOPIC_OR_PARTITION] = true }

--- Aborts a hanging transaction on one partition (WriteTxnMarkers with an
-- ABORT marker, to the partition's leader), as kafka-transactions.sh abort
-- and Java's abortTransaction do: for a transaction its coordinator no
-- longer completes, which holds back the last stable offset and so every
-- read_committed consumer of the partition.
-- @tparam table spec `{topic=, partition=, start_offset=}` (the producer found
-- with describe_producers: the one whose open transaction starts there), or
-- `{topic=, partition=, producer_id=, producer_epoch=, coordinator_epoch=}`
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{topic=, partition=, producer_id=, producer_epoch=, coordinator_epoch=, error_code=, error=,
-- code=}` (code "invalid" when no open transaction starts at start_offset), or nil, err, code
function _M:abort_transaction(spec, opts)
  local where = "abort_transaction"
  local o = B.opts(where, opts)
  B.tp(where, "spec", spec)
  local r = { topic = spec.topic, partition = spec.partition }
  if spec.start_offset ~= nil then
    check.int(where, "spec.start_offset", spec.start_offset, nil, 0)
    if spec.producer_id ~= nil then check.fail(where, "spec.producer_id", "nil with start_offset", spec.producer_id) end
    local d, err, code = self:describe_producers({ { topic = spec.topic, partition = spec.partition } }, o)
    if not d then return nil, err, code end
    d = d[1]
    if d.error_code ~= errors.NONE then
      r.error_code, r.error, r.code = d.error_code, d.error, d.code
      return r
    end
    for _, p in ipairs(d.producers) do
      if p.current_transaction_start_offset == spec.start_offset then
        r.producer_id, r.producer_epoch, r.coordinator_epoch = p.producer_id, p.producer_epoch, p.coordinator_epoch or -1
      end
    end
    if not r.producer_id then
      return B.fail(r, nil, ("no open transaction starts at offset %d of %s/%d"):format(spec.start_offset, spec.topic,
        spec.partition), "invalid")
    end
  else
    local function need(name, lo, hi)
      local v = check.int(where, "spec." .. name, spec[name], nil, lo, hi)
      if v == nil then check.fail(where, "spec." .. name, "an integer (or give start_offset)", nil) end
      return v
    end
    r.producer_id, r.producer_epoch = need("producer_id", 0), need("producer_epoch", 0, 32767)
    r.coordinator_epoch = need("coordinator_epoch", -1)
  end
  local out, err, code = leader_call(self, { r }, function(c, its, deadline, retry)
    local v, e, k = B.version(c, API.WriteTxnMarkers)
    if not v then return nil, e, k end
    local x = its[1]
    local resp
    resp, e, k = B.request(c, API.WriteTxnMarkers, { markers = { { producer_id = x.producer_id,
      producer_epoch = x.producer_epoch, transaction_result = false, coordinator_epoch = x.coordinator_epoch,
      topics = { { name = x.topic, partition_indexes = { x.partition } } } } } }, v, deadline)
    if not resp then return nil, e, k end
    local m = resp.markers and resp.markers[1]
    if not m or m.producer_id ~= x.producer_id then
      B.fail(x, nil, "WriteTxnMarkers: the answer has no marker for producer " .. x.producer_id, "protocol")
      return true
    end
    match(m.topics, its, function(res, p) B.settle(res, p.error_code, nil, retry, MARKER_AGAIN) end)
    return true
  end, o)
  if not out then return nil, err, code end
  return out[1]
end

return _M
