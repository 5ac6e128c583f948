-- kafka.admin's shared parts: per-item results, the version check that
-- names the API and the broker's range, the batch runner over the
-- client's retry service, the controller and coordinator routes, topic
-- ids in Java's text form. The calls themselves are in kafka.admin,
-- kafka.admin.groups and kafka.admin.records.
local proto = require "kafka.proto"
local check = require "kafka.check"

local errors = proto.errors
local string, table = string, table
local type, ipairs, pairs, tostring, math = type, ipairs, pairs, tostring, math

local _M = {}

local ZERO_UUID = string.rep("\0", 16)
_M.ZERO = ZERO_UUID

_M.uuid_text, _M.uuid_bytes = proto.uuid_text, proto.uuid_bytes

-- fail(res, kcode, msg [, code]): res records Kafka error kcode (the
-- broker's message when it sent one); a local failure (no Kafka code)
-- passes kcode nil and its library code
function _M.fail(res, kcode, msg, code)
  if kcode then
    local e = errors.info(kcode)
    res.error_code = kcode
    res.error = e.name .. ": " .. ((msg ~= nil and msg ~= "") and msg or e.message)
    res.code = code or (e.retriable and "retriable" or "kafka")
  else
    res.error_code = nil
    res.error = msg
    res.code = code
  end
  return res
end

-- ok(res) -> res marked successful (error fields cleared)
function _M.ok(res)
  res.error_code, res.error, res.code = 0, nil, nil
  return res
end

-- settle(res, kcode, msg, retry, again [, final]) -> res: a Kafka error code
-- from a response applied to a result; a retriable one (errors' flag, or
-- listed in again) that is not in final puts res on the retry list
function _M.settle(res, kcode, msg, retry, again, final)
  if kcode == errors.NONE then return _M.ok(res) end
  _M.fail(res, kcode, msg)
  local e = errors.info(kcode)
  if (e.retriable or (again and again[kcode])) and not (final and final[kcode]) then
    res.code = "retriable" -- (what it stays when it outlives its retries)
    retry[#retry + 1] = res
  elseif kcode == errors.UNKNOWN_TOPIC_OR_PARTITION or kcode == errors.UNKNOWN_TOPIC_ID then
    res.code = "unknown_topic"
  else
    res.code = "kafka"
  end
  return res
end

-- version(c, api [, min]) -> the version to use | nil, err, "unsupported":
-- the message names the API, the broker and the range it speaks
function _M.version(c, api, min)
  local key = type(api) == "number" and api or proto.api_key(api)
  local v = c:version(key)
  if v and (not min or v >= min) then return v end
  local b = c.broker_versions and c.broker_versions[key]
  local lo, hi = proto.versions(key)
  local theirs = b and ("v%d-v%d"):format(b.min, b.max) or "none"
  return nil, ("%s: %s speaks %s versions %s; this call needs v%d-v%d"):format(
    proto.api_name(key), c:name(), proto.api_name(key), theirs, min or lo, hi), "unsupported"
end

-- request(c, api, body, v, deadline) -> the response | nil, err, code
function _M.request(c, api, body, v, deadline)
  return c:request(api, body, { version = v, deadline = deadline })
end

-- controller(client, deadline) -> a connection for a controller-bound
-- request: the controller the metadata names (in KRaft a broker, which
-- forwards it to the active controller), else any broker
function _M.controller(client, deadline)
  local id = client.controller_id
  if id == nil or id < 0 or not client.brokers[id] then
    local md, err, code = client:load_metadata({ topics = {} }, deadline)
    if not md then return nil, err, code end
    id = md.controller_id
  end
  if id and id >= 0 and client.brokers[id] then
    local c = client:broker(id, deadline)
    if c then return c end
  end
  return client:any_broker(deadline)
end

-- run(admin, results, attempt, o) -> results | nil, err, code: the batch
-- runner. attempt(pending, deadline) settles the results it was given and
-- returns true, retry (those to try again), or nil, err, code, kcode,
-- retriable when the whole attempt failed. Attempts go through the
-- client's retry service until nothing is pending or o.timeout_ms passes;
-- results still pending then keep their last error. When no result was
-- settled at all the call fails: nil, err, code.
function _M.run(admin, results, attempt, o)
  local pending = {}
  for i, r in ipairs(results) do pending[i] = r end
  local settled = false
  local ok, err, code = admin.client:call(function(deadline)
    if #pending == 0 then return true end
    local done, e, c, kc, retriable = attempt(pending, deadline)
    if not done then return nil, e, c, kc, retriable end
    settled = true
    pending = e or {}
    if #pending == 0 then return true end
    return nil, pending[1].error, "retriable", pending[1].error_code, true
  end, { timeout_ms = o and o.timeout_ms, on_retry = o and o.on_retry })
  if ok then return results end
  if not settled then return nil, err, code end
  for _, r in ipairs(pending) do
    r.error = tostring(err)
    r.code = code
  end
  return results
end

-- opts(where, o) -> o checked: timeout_ms (an integer >= 1) and the booleans named
function _M.opts(where, o, bools)
  o = check.opts(where, o)
  check.int(where, "timeout_ms", o.timeout_ms, nil, 1)
  for _, name in ipairs(bools or {}) do check.bool(where, name, o[name], false) end
  return o
end

-- names(where, arg, list) -> list checked: an array of strings
function _M.names(where, arg, list)
  if type(list) ~= "table" then check.fail(where, arg, "an array of strings", list) end
  for i, n in ipairs(list) do
    if type(n) ~= "string" then check.fail(where, arg .. "[" .. i .. "]", "a string", n) end
  end
  return list
end

-- tp(where, arg, x) -> x checked: {topic = string, partition = integer}
function _M.tp(where, arg, x)
  if type(x) ~= "table" then check.fail(where, arg, "a table {topic=, partition=}", x) end
  if type(x.topic) ~= "string" then check.fail(where, arg .. ".topic", "a string", x.topic) end
  check.partition(where, arg .. ".partition", x.partition)
  return x
end

-- unique_tps(where, arg, list): misuse when a partition is listed twice
-- (the broker's answer has one entry per partition)
function _M.unique_tps(where, arg, list)
  local seen = {}
  for i, x in ipairs(list) do
    local k = x.topic .. "/" .. x.partition
    if seen[k] then check.fail(where, arg .. "[" .. i .. "]", "a partition not listed before", k) end
    seen[k] = true
  end
end

-- sort_tps(list): by topic, then partition
function _M.sort_tps(list)
  table.sort(list, function(a, b)
    if a.topic ~= b.topic then return a.topic < b.topic end
    return a.partition < b.partition
  end)
  return list
end

-- by_topic(items) -> {{name=, partitions={item...}}...} in first-seen order
function _M.by_topic(items)
  local out, idx = {}, {}
  for _, it in ipairs(items) do
    local t = idx[it.topic]
    if not t then
      t = { name = it.topic, items = {} }
      idx[it.topic] = t
      out[#out + 1] = t
    end
    t.items[#t.items + 1] = it
  end
  return out
end

-- ACL operations by code (Java's AclOperation), for authorized_operations bit sets
local ACL_OPS = { [2] = "ALL", [3] = "READ", [4] = "WRITE", [5] = "CREATE", [6] = "DELETE", [7] = "ALTER",
  [8] = "DESCRIBE", [9] = "CLUSTER_ACTION", [10] = "DESCRIBE_CONFIGS", [11] = "ALTER_CONFIGS",
  [12] = "IDEMPOTENT_WRITE", [13] = "CREATE_TOKENS", [14] = "DESCRIBE_TOKENS", [15] = "TWO_PHASE_COMMIT" }

-- operations(bits) -> the sorted names of the operations set in an
-- authorized_operations field, nil when the broker did not say (INT32_MIN)
function _M.operations(bits)
  if bits == nil or bits == -2147483648 then return nil end
  local out = {}
  for code, name in pairs(ACL_OPS) do
    if math.floor(bits / 2 ^ code) % 2 == 1 then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

--- Asks every broker of the cluster, each through the client's retry
-- service (ListGroups, ListTransactions: each broker answers for what it
-- coordinates).
-- @tparam table client the kafka.client
-- @tparam number timeout_ms each broker's deadline
-- @tparam function ask `ask(conn, deadline)`: the response, or nil, err, code, kafka_code, retriable
-- @return `{{id=, resp=}...}` of the brokers that answered (by id) and
-- `{{broker=, error=, code=}...}` of the others, or nil, err, code
function _M.each_broker(client, timeout_ms, ask)
  local md, err, code = client:call(function(deadline) return client:load_metadata({ topics = {} }, deadline) end,
    { timeout_ms = timeout_ms })
  if not md then return nil, err, code end
  local ids = {}
  for _, b in ipairs(md.brokers or {}) do ids[#ids + 1] = b.node_id end
  table.sort(ids)
  local answered, failed = {}, {}
  for _, id in ipairs(ids) do
    local resp
    resp, err, code = client:call(function(deadline)
      local c, e, k = client:broker(id, deadline)
      if not c then return nil, e, k end
      return ask(c, deadline)
    end, { timeout_ms = timeout_ms })
    if resp then
      answered[#answered + 1] = { id = id, resp = resp }
    else
      failed[#failed + 1] = { broker = id, error = err, code = code }
    end
  end
  return answered, failed
end

return _M
