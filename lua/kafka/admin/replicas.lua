-- kafka.admin's replica calls, each to the controller (as Java's
-- ControllerNodeProvider; in KRaft clusters a broker forwards them):
-- elect_leaders (ElectLeaders), alter_partition_reassignments and
-- list_partition_reassignments. Installed into kafka.admin.
local proto = require "kafka.proto"
local check = require "kafka.check"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local type, ipairs, pairs = type, ipairs, pairs

local _M = {}

local function timeout_of(self, o) return o.timeout_ms or self.client.default_api_timeout_ms end

local AGAIN = { [errors.NOT_CONTROLLER] = true }

-- controller_request(self, api, min, body, deadline) -> the response | nil, err, code
local function controller_request(self, api, min, body, deadline)
  local c, err, code = B.controller(self.client, deadline)
  if not c then return nil, err, code end
  local v
  v, err, code = B.version(c, api, min)
  if not v then return nil, err, code end
  return B.request(c, api, body(v), v, deadline)
end

-- by_topic(list, name_key, parts_key) -> {{topic or name=, partitions=}...} by topic, in first-seen order
local function by_topic(list, name_key, parts_key)
  local out = {}
  for i, t in ipairs(B.by_topic(list)) do
    local ps = {}
    for j, r in ipairs(t.items) do ps[j] = r.partition end
    out[i] = { [name_key] = t.name, [parts_key] = ps }
  end
  return out
end

-- partitions_arg(where, list) -> results {{topic=, partition=}...} of a partition list (checked)
local function partitions_arg(where, list)
  if type(list) ~= "table" then check.fail(where, "partitions", "an array of {topic=, partition=} tables", list) end
  local results = {}
  for i, x in ipairs(list) do
    B.tp(where, "partitions[" .. i .. "]", x)
    results[i] = { topic = x.topic, partition = x.partition }
  end
  B.unique_tps(where, "partitions", list)
  return results
end

-- settle_parts(pending, topics, name_key, parts_key, index_key, retry): per-partition answers
local function settle_parts(pending, topics, name_key, parts_key, index_key, retry)
  local by = {}
  for _, r in ipairs(pending) do by[r.topic .. "\0" .. r.partition] = r end
  for _, t in ipairs(topics or {}) do
    for _, p in ipairs(t[parts_key] or {}) do
      local r = by[t[name_key] .. "\0" .. p[index_key]]
      if r then
        by[t[name_key] .. "\0" .. p[index_key]] = nil
        B.settle(r, p.error_code, p.error_message, retry, AGAIN)
      end
    end
  end
  for _, r in pairs(by) do B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
end

--- Elects partition leaders (ElectLeaders, to the controller; Kafka 2.4+ for unclean).
-- @tparam string election_type "preferred" (the first replica, when in the ISR) or "unclean" (any live
-- replica, when no ISR member is)
-- @tparam[opt] table partitions `{{topic=, partition=}...}`, or nil: every partition that needs it
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table one result per partition `{topic=, partition=, error_code=, error=, code=}`
-- (ELECTION_NOT_NEEDED: the leader is already the one asked for); for nil partitions the ones
-- the controller elected, by topic and partition; or nil, err, code
function _M:elect_leaders(election_type, partitions, opts)
  local where = "elect_leaders"
  local o = B.opts(where, opts)
  check.oneof(where, "election_type", election_type, nil, { "preferred", "unclean" })
  if election_type == nil then check.fail(where, "election_type", '"preferred" or "unclean"', nil) end
  local et = election_type == "preferred" and 0 or 1
  local tmo = timeout_of(self, o)
  if partitions == nil then
    return self.client:call(function(deadline)
      local resp, err, code = controller_request(self, API.ElectLeaders, et == 1 and 1 or 0, function()
        return { election_type = et, topic_partitions = nil, timeout_ms = tmo }
      end, deadline)
      if not resp then return nil, err, code end
      if (resp.error_code or 0) ~= errors.NONE then
        local e = errors.info(resp.error_code)
        return nil, "ElectLeaders: " .. e.name, e.retriable and "retriable" or "kafka", e.code, e.retriable
      end
      local out = {}
      for _, t in ipairs(resp.replica_election_results or {}) do
        for _, p in ipairs(t.partition_result or {}) do
          local r = { topic = t.topic, partition = p.partition_id }
          if p.error_code == errors.NONE then B.ok(r) else B.fail(r, p.error_code, p.error_message) end
          out[#out + 1] = r
        end
      end
      return B.sort_tps(out)
    end, { timeout_ms = tmo })
  end
  local results = partitions_arg(where, partitions)
  return B.run(self, results, function(pending, deadline)
    local resp, err, code = controller_request(self, API.ElectLeaders, et == 1 and 1 or 0, function()
      return { election_type = et, topic_partitions = by_topic(pending, "topic", "partitions"), timeout_ms = tmo }
    end, deadline)
    if not resp then return nil, err, code end
    local retry = {}
    if (resp.error_code or 0) ~= errors.NONE then
      for _, r in ipairs(pending) do B.settle(r, resp.error_code, nil, retry, AGAIN) end
    else
      settle_parts(pending, resp.replica_election_results, "topic", "partition_result", "partition_id", retry)
    end
    if #retry > 0 and retry[1].error_code == errors.NOT_CONTROLLER then self.client.controller_id = nil end
    return true, retry
  end, { timeout_ms = tmo })
end

--- Moves partitions' replicas, or cancels a move (AlterPartitionReassignments, to the controller; Kafka 2.4+).
-- @tparam table reassignments `{{topic=, partition=, replicas = {broker ids}}...}` (the target replicas,
-- the first the preferred leader) or `{topic=, partition=, cancel = true}` (back to the replicas before)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table one result per partition `{topic=, partition=, error_code=, error=, code=}`
-- (NO_REASSIGNMENT_IN_PROGRESS: a cancel with nothing to cancel)
function _M:alter_partition_reassignments(reassignments, opts)
  local where = "alter_partition_reassignments"
  local o = B.opts(where, opts)
  local results = partitions_arg(where, reassignments)
  local target = {}
  for i, x in ipairs(reassignments) do
    local a = "reassignments[" .. i .. "]"
    check.bool(where, a .. ".cancel", x.cancel, false)
    if x.cancel then
      if x.replicas ~= nil then check.fail(where, a .. ".replicas", "nil with cancel = true", x.replicas) end
    else
      if type(x.replicas) ~= "table" or #x.replicas == 0 then
        check.fail(where, a .. ".replicas", "an array of broker ids (or cancel = true)", x.replicas)
      end
      for j, id in ipairs(x.replicas) do check.int(where, a .. ".replicas[" .. j .. "]", id, nil, 0) end
      target[results[i]] = x.replicas
    end
  end
  local tmo = timeout_of(self, o)
  return B.run(self, results, function(pending, deadline)
    local resp, err, code = controller_request(self, API.AlterPartitionReassignments, 0, function()
      local topics = {}
      for i, t in ipairs(B.by_topic(pending)) do
        local ps = {}
        for j, r in ipairs(t.items) do ps[j] = { partition_index = r.partition, replicas = target[r] } end
        topics[i] = { name = t.name, partitions = ps }
      end
      return { timeout_ms = tmo, allow_replication_factor_change = true, topics = topics }
    end, deadline)
    if not resp then return nil, err, code end
    local retry = {}
    if resp.error_code ~= errors.NONE then
      for _, r in ipairs(pending) do B.settle(r, resp.error_code, resp.error_message, retry, AGAIN) end
    else
      settle_parts(pending, resp.responses, "name", "partitions", "partition_index", retry)
    end
    if #retry > 0 and retry[1].error_code == errors.NOT_CONTROLLER then self.client.controller_id = nil end
    return true, retry
  end, { timeout_ms = tmo })
end

--- The reassignments in progress (ListPartitionReassignments, to the controller; Kafka 2.4+).
-- @tparam[opt] table partitions `{{topic=, partition=}...}`, or nil: every partition being reassigned
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{topic=, partition=, replicas = {}, adding_replicas = {}, removing_replicas = {}}...}` by
-- topic and partition (only the partitions being reassigned), or nil, err, code
function _M:list_partition_reassignments(partitions, opts)
  local where = "list_partition_reassignments"
  local o = B.opts(where, opts)
  local topics
  if partitions ~= nil then topics = by_topic(partitions_arg(where, partitions), "name", "partition_indexes") end
  local tmo = timeout_of(self, o)
  return self.client:call(function(deadline)
    local resp, err, code = controller_request(self, API.ListPartitionReassignments, 0, function()
      return { timeout_ms = tmo, topics = topics }
    end, deadline)
    if not resp then return nil, err, code end
    if resp.error_code ~= errors.NONE then
      local e = errors.info(resp.error_code)
      if resp.error_code == errors.NOT_CONTROLLER then self.client.controller_id = nil end
      return nil, ("ListPartitionReassignments: %s: %s"):format(e.name, resp.error_message or e.message),
        (e.retriable or AGAIN[e.code]) and "retriable" or "kafka", e.code, e.retriable or AGAIN[e.code]
    end
    local out = {}
    for _, t in ipairs(resp.topics or {}) do
      for _, p in ipairs(t.partitions or {}) do
        out[#out + 1] = { topic = t.name, partition = p.partition_index, replicas = p.replicas or {},
          adding_replicas = p.adding_replicas or {}, removing_replicas = p.removing_replicas or {} }
      end
    end
    return B.sort_tps(out)
  end, { timeout_ms = tmo })
end

return _M
