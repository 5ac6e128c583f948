--- kafka.admin: manage topics, configs, the cluster, consumer groups and
-- records, as Kafka's Java AdminClient does, through the client's routing
-- and retry service. Every batch call returns one result per item, in the
-- order given: the item's own fields plus `error_code` (Kafka's, 0 on
-- success), `error` (nil on success, else "NAME: message") and `code`
-- (nil on success, else the library's code: "kafka", "retriable",
-- "unsupported", "unknown_topic", ...). One failing item never hides the
-- others. A call fails as a whole (nil, err, code) only when no item could
-- be answered (no broker reachable, an API the broker lacks). Misuse raises.
--
--   local admin = kafka.admin.new { brokers = "127.0.0.1:9092" }
--   local res = assert(admin:create_topics { { name = "events", num_partitions = 3, replication_factor = 1 } })
--   if res[1].error then print(res[1].error) end
--   admin:close()
--
-- Guide: docs/admin.md. The calls in their parts: topics, configs and the
-- cluster here; groups in kafka.admin.groups; records (delete_records,
-- list_offsets, describe_producers) in kafka.admin.records; transactions in
-- kafka.admin.transactions; ACLs, SCRAM credentials and quotas in
-- kafka.admin.security; features and log dirs in kafka.admin.cluster;
-- leader elections and partition reassignments in kafka.admin.replicas;
-- shared helpers in kafka.admin.base.
-- @module kafka.admin
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local setmetatable, type, ipairs, pairs, tonumber = setmetatable, type, ipairs, pairs, tonumber
local table = table

local _M = {}
local mt = { __index = _M }

--- Makes an admin client.
-- @param client_or_opts a kafka.client (shared, not closed by close()) or a
-- table of client options (a client made here, closed by close())
-- @treturn table the admin client
-- @usage local admin = kafka.admin.new(client)
function _M.new(client_or_opts)
  local client, owned = client_mod.ensure(client_or_opts, "kafka.admin.new")
  return setmetatable({ client = client, own_client = owned }, mt)
end

--- Closes the client when it was made by new().
function _M:close()
  if self.own_client then self.client:close() end
end

local function timeout_of(self, o)
  return o.timeout_ms or self.client.default_api_timeout_ms
end

-- The answers after which a controller-bound request is sent again, to the
-- controller the refreshed metadata names (Java: NOT_CONTROLLER refreshes
-- and retries; THROTTLING_QUOTA_EXCEEDED is retried too, its
-- retry_on_quota_violation default).
local CONTROLLER_AGAIN = { [errors.NOT_CONTROLLER] = true, [errors.THROTTLING_QUOTA_EXCEEDED] = true }

-- The retriable errors Java's admin completes a topic with at once: the
-- topic is not there (describe, delete, create_partitions).
local FINAL_UNKNOWN = { [errors.UNKNOWN_TOPIC_OR_PARTITION] = true, [errors.UNKNOWN_TOPIC_ID] = true }

-- controller_call(self, api, min, results, build, handle, o): one
-- controller-bound batch; build(pending, v) -> the request body,
-- handle(resp, by_key, retry) settles results
local function controller_call(self, api, min, results, build, handle, o)
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local c, err, code = B.controller(client, deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, api, min)
    if not v then return nil, err, code end
    local resp
    resp, err, code = B.request(c, api, build(pending, v), v, deadline)
    if not resp then return nil, err, code end
    local retry = {}
    handle(resp, pending, retry, v)
    for _, r in ipairs(retry) do
      if r.error_code == errors.NOT_CONTROLLER then client.controller_id = nil end
    end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

-- index(pending, key) -> pending results by their field key
local function index(pending, key)
  local t = {}
  for _, r in ipairs(pending) do
    if r[key] ~= nil then t[r[key]] = r end
  end
  return t
end

-- settle_missing(pending, seen): results the response did not mention
local function settle_missing(pending, seen)
  for _, r in ipairs(pending) do
    if not seen[r] then B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
  end
end

local function configs_list(where, arg, cfg)
  if cfg == nil then return {} end
  if type(cfg) ~= "table" then check.fail(where, arg, "a table {name = value}", cfg) end
  local names = {}
  for k, v in pairs(cfg) do
    if type(k) ~= "string" then check.fail(where, arg .. " key", "a string", k) end
    if type(v) ~= "string" then check.fail(where, arg .. "." .. k, "a string", v) end
    names[#names + 1] = k
  end
  table.sort(names)
  local out = {}
  for i, k in ipairs(names) do out[i] = { name = k, value = cfg[k] } end
  return out
end

-- replica_assignment {[partition] = {broker ids}} -> CreateTopics' assignments, by partition
local function assignments_of(where, arg, ra)
  if type(ra) ~= "table" then check.fail(where, arg, "a table {[partition] = {broker ids}}", ra) end
  local parts = {}
  for p, ids in pairs(ra) do
    check.partition(where, arg .. " key", p)
    if type(ids) ~= "table" or #ids == 0 then check.fail(where, arg .. "[" .. p .. "]", "an array of broker ids", ids) end
    for _, id in ipairs(ids) do check.int(where, arg .. "[" .. p .. "] broker id", id, nil, 0) end
    parts[#parts + 1] = p
  end
  table.sort(parts)
  local out = {}
  for i, p in ipairs(parts) do out[i] = { partition_index = p, broker_ids = ra[p] } end
  return out
end

--- Creates topics (CreateTopics, to the controller).
-- @tparam table topics `{{name=, num_partitions=, replication_factor=, replica_assignment=, configs=}...}`:
-- num_partitions and replication_factor default to the broker's; replica_assignment
-- `{[partition] = {broker ids}}` replaces both; configs `{["name"] = "value"}`
-- @tparam[opt] table opts `validate_only`, `timeout_ms`
-- @treturn table `{{name=, topic_id=, num_partitions=, replication_factor=, error_code=, error=, code=}...}`
function _M:create_topics(topics, opts)
  local where = "create_topics"
  local o = B.opts(where, opts, { "validate_only" })
  if type(topics) ~= "table" then check.fail(where, "topics", "an array of tables", topics) end
  local specs, results = {}, {}
  for i, t in ipairs(topics) do
    local arg = "topics[" .. i .. "]"
    if type(t) ~= "table" then check.fail(where, arg, "a table", t) end
    if type(t.name) ~= "string" then check.fail(where, arg .. ".name", "a string", t.name) end
    local s = { name = t.name, num_partitions = check.int(where, arg .. ".num_partitions", t.num_partitions, -1, 1),
      replication_factor = check.int(where, arg .. ".replication_factor", t.replication_factor, -1, 1, 32767),
      assignments = {}, configs = configs_list(where, arg .. ".configs", t.configs) }
    if t.replica_assignment ~= nil then
      if t.num_partitions or t.replication_factor then
        check.fail(where, arg .. ".replica_assignment", "alone (without num_partitions and replication_factor)",
          t.replica_assignment)
      end
      s.assignments = assignments_of(where, arg .. ".replica_assignment", t.replica_assignment)
    end
    specs[t.name] = s
    results[i] = { name = t.name }
  end
  local tmo = timeout_of(self, o)
  return controller_call(self, API.CreateTopics, 4, results, function(pending)
    local list = {}
    for i, r in ipairs(pending) do list[i] = specs[r.name] end
    return { topics = list, timeout_ms = tmo, validate_only = o.validate_only }
  end, function(resp, pending, retry)
    local by, seen = index(pending, "name"), {}
    for _, t in ipairs(resp.topics or {}) do
      local r = by[t.name]
      if r then
        seen[r] = true
        B.settle(r, t.error_code, t.error_message, retry, CONTROLLER_AGAIN)
        if t.error_code == errors.NONE then
          r.topic_id = B.uuid_text(t.topic_id)
          if t.num_partitions and t.num_partitions >= 0 then r.num_partitions = t.num_partitions end
          if t.replication_factor and t.replication_factor >= 0 then r.replication_factor = t.replication_factor end
        end
      end
    end
    settle_missing(pending, seen)
  end, o)
end

--- Deletes topics (DeleteTopics, to the controller), by name or by topic id.
-- @tparam table topics names, or `{topic_id = "..."}` tables (ids in Java's text form, as describe_topics gives them)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{name=, topic_id=, error_code=, error=, code=}...}`
function _M:delete_topics(topics, opts)
  local where = "delete_topics"
  local o = B.opts(where, opts)
  if type(topics) ~= "table" then check.fail(where, "topics", "an array of names or {topic_id=} tables", topics) end
  local results, by_id = {}, false
  for i, t in ipairs(topics) do
    if type(t) == "string" then
      results[i] = { name = t }
    elseif type(t) == "table" and B.uuid_bytes(t.topic_id) then
      results[i] = { topic_id = t.topic_id, _id = B.uuid_bytes(t.topic_id) }
      by_id = true
    else
      check.fail(where, "topics[" .. i .. "]", "a name or a {topic_id = <22-character id>} table", t)
    end
  end
  local tmo = timeout_of(self, o)
  local out, err, code = controller_call(self, API.DeleteTopics, by_id and 6 or 0, results, function(pending, v)
    if v >= 6 then
      local list = {}
      for i, r in ipairs(pending) do list[i] = { name = r.name, topic_id = r._id or B.ZERO } end
      return { topics = list, timeout_ms = tmo }
    end
    local names = {}
    for i, r in ipairs(pending) do names[i] = r.name end
    return { topic_names = names, timeout_ms = tmo }
  end, function(resp, pending, retry)
    local by_name, by_uuid, seen = index(pending, "name"), index(pending, "_id"), {}
    for _, t in ipairs(resp.responses or {}) do
      local r = (t.topic_id and by_uuid[t.topic_id]) or (t.name and by_name[t.name])
      if r and not seen[r] then
        seen[r] = true
        r.name = r.name or t.name
        r.topic_id = r.topic_id or B.uuid_text(t.topic_id)
        B.settle(r, t.error_code, t.error_message, retry, CONTROLLER_AGAIN, FINAL_UNKNOWN)
      end
    end
    settle_missing(pending, seen)
  end, o)
  for _, r in ipairs(results) do r._id = nil end
  return out, err, code
end

--- Adds partitions to topics (CreatePartitions, to the controller).
-- @tparam table topics `{{name=, count=, assignments=}...}`: count is the new total; assignments
-- (optional) `{{broker ids}...}`, one per new partition
-- @tparam[opt] table opts `validate_only`, `timeout_ms`
-- @treturn table `{{name=, error_code=, error=, code=}...}`
function _M:create_partitions(topics, opts)
  local where = "create_partitions"
  local o = B.opts(where, opts, { "validate_only" })
  if type(topics) ~= "table" then check.fail(where, "topics", "an array of {name=, count=} tables", topics) end
  local specs, results = {}, {}
  for i, t in ipairs(topics) do
    local arg = "topics[" .. i .. "]"
    if type(t) ~= "table" or type(t.name) ~= "string" then check.fail(where, arg, "a {name=, count=} table", t) end
    local s = { name = t.name, count = check.int(where, arg .. ".count", t.count, nil, 1) }
    if s.count == nil then check.fail(where, arg .. ".count", "an integer >= 1", nil) end
    if t.assignments ~= nil then
      if type(t.assignments) ~= "table" then check.fail(where, arg .. ".assignments", "an array of arrays", t.assignments) end
      s.assignments = {}
      for j, ids in ipairs(t.assignments) do
        if type(ids) ~= "table" then check.fail(where, arg .. ".assignments[" .. j .. "]", "an array of broker ids", ids) end
        s.assignments[j] = { broker_ids = ids }
      end
    end
    specs[t.name] = s
    results[i] = { name = t.name }
  end
  local tmo = timeout_of(self, o)
  return controller_call(self, API.CreatePartitions, 0, results, function(pending)
    local list = {}
    for i, r in ipairs(pending) do list[i] = specs[r.name] end
    return { topics = list, timeout_ms = tmo, validate_only = o.validate_only or false }
  end, function(resp, pending, retry)
    local by, seen = index(pending, "name"), {}
    for _, t in ipairs(resp.results or {}) do
      local r = by[t.name]
      if r then
        seen[r] = true
        B.settle(r, t.error_code, t.error_message, retry, CONTROLLER_AGAIN, FINAL_UNKNOWN)
      end
    end
    settle_missing(pending, seen)
  end, o)
end

-- metadata(self, body, deadline) -> a Metadata response from any broker
local function metadata(self, body, deadline, min)
  local c, err, code = self.client:any_broker(deadline)
  if not c then return nil, err, code end
  local v
  v, err, code = B.version(c, API.Metadata, min)
  if not v then return nil, err, code end
  return B.request(c, API.Metadata, body, v, deadline)
end

--- The cluster's topics (Metadata).
-- @tparam[opt] table opts `internal` (include internal topics such as __consumer_offsets), `timeout_ms`
-- @treturn table `{{name=, topic_id=, internal=}...}` sorted by name, or nil, err, code
function _M:list_topics(opts)
  local o = B.opts("list_topics", opts, { "internal" })
  local resp, err, code = self.client:call(function(deadline)
    return metadata(self, { topics = nil, allow_auto_topic_creation = false }, deadline)
  end, { timeout_ms = timeout_of(self, o) })
  if not resp then return nil, err, code end
  local out = {}
  for _, t in ipairs(resp.topics or {}) do
    if t.name and t.error_code == errors.NONE and (o.internal or not t.is_internal) then
      out[#out + 1] = { name = t.name, topic_id = B.uuid_text(t.topic_id), internal = t.is_internal or false }
    end
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

--- Describes topics (Metadata): partitions with leader, replicas, ISR.
-- @tparam {string,...} names the topics
-- @tparam[opt] table opts `include_authorized_operations`, `timeout_ms`
-- @treturn table `{{name=, topic_id=, internal=, partitions = {{partition=, leader=, leader_epoch=,
-- replicas={}, isr={}, offline_replicas={}}...}, authorized_operations=, error_code=, error=, code=}...}`
-- (partitions sorted; authorized_operations: sorted operation names, when asked for)
function _M:describe_topics(names, opts)
  local where = "describe_topics"
  local o = B.opts(where, opts, { "include_authorized_operations" })
  B.names(where, "names", names)
  local results = {}
  for i, n in ipairs(names) do results[i] = { name = n } end
  return B.run(self, results, function(pending, deadline)
    local req = {}
    for i, r in ipairs(pending) do req[i] = { name = r.name } end
    local resp, err, code = metadata(self, { topics = req, allow_auto_topic_creation = false,
      include_topic_authorized_operations = o.include_authorized_operations }, deadline,
      o.include_authorized_operations and 8 or nil)
    if not resp then return nil, err, code end
    local by, seen, retry = index(pending, "name"), {}, {}
    for _, t in ipairs(resp.topics or {}) do
      local r = t.name and by[t.name]
      if r then
        seen[r] = true
        B.settle(r, t.error_code, nil, retry, nil, FINAL_UNKNOWN)
        if t.error_code == errors.NONE then
          r.topic_id = B.uuid_text(t.topic_id)
          r.internal = t.is_internal or false
          local parts = {}
          for _, p in ipairs(t.partitions or {}) do
            parts[#parts + 1] = { partition = p.partition_index, leader = p.leader_id, leader_epoch = p.leader_epoch,
              replicas = p.replica_nodes or {}, isr = p.isr_nodes or {}, offline_replicas = p.offline_replicas or {},
              error_code = p.error_code }
          end
          table.sort(parts, function(a, b) return a.partition < b.partition end)
          r.partitions = parts
          if o.include_authorized_operations then r.authorized_operations = B.operations(t.topic_authorized_operations) end
        end
      end
    end
    settle_missing(pending, seen)
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

--- The cluster: id, controller, brokers (DescribeCluster; Metadata on brokers before Kafka 2.8).
-- @tparam[opt] table opts `include_authorized_operations`, `timeout_ms`
-- @treturn table `{cluster_id=, controller_id=, brokers = {{id=, host=, port=, rack=}...} (by id),
-- authorized_operations=}`, or nil, err, code
function _M:describe_cluster(opts)
  local o = B.opts("describe_cluster", opts, { "include_authorized_operations" })
  local ops = o.include_authorized_operations
  return self.client:call(function(deadline)
    local c, err, code = self.client:any_broker(deadline)
    if not c then return nil, err, code end
    local out = {}
    local resp
    local v = c:version(API.DescribeCluster)
    if v then
      resp, err, code = B.request(c, API.DescribeCluster, { include_cluster_authorized_operations = ops,
        endpoint_type = 1, include_fenced_brokers = false }, v, deadline)
      if not resp then return nil, err, code end
      if resp.error_code ~= errors.NONE then
        local e = errors.info(resp.error_code)
        return nil, ("DescribeCluster: %s: %s"):format(e.name, resp.error_message or e.message),
          e.retriable and "retriable" or "kafka", e.code, e.retriable
      end
      out.cluster_id, out.controller_id = resp.cluster_id, resp.controller_id
      out.brokers = {}
      for i, b in ipairs(resp.brokers or {}) do out.brokers[i] = { id = b.broker_id, host = b.host, port = b.port, rack = b.rack } end
    else
      v, err, code = B.version(c, API.Metadata, ops and 8 or 1)
      if not v then return nil, err, code end
      resp, err, code = B.request(c, API.Metadata, { topics = {}, allow_auto_topic_creation = false,
        include_cluster_authorized_operations = ops }, v, deadline)
      if not resp then return nil, err, code end
      out.cluster_id, out.controller_id = resp.cluster_id, resp.controller_id
      out.brokers = {}
      for i, b in ipairs(resp.brokers or {}) do out.brokers[i] = { id = b.node_id, host = b.host, port = b.port, rack = b.rack } end
    end
    table.sort(out.brokers, function(a, b) return a.id < b.id end)
    if ops then out.authorized_operations = B.operations(resp.cluster_authorized_operations) end
    return out
  end, { timeout_ms = timeout_of(self, o) })
end

-- Config resource types (Java's ConfigResource.Type), sources
-- (ConfigEntry.ConfigSource) and value types (ConfigEntry.ConfigType)
local RESOURCE = { topic = 2, broker = 4, broker_logger = 8, client_metrics = 16, group = 32 }
local RESOURCE_NAME = {}
for k, v in pairs(RESOURCE) do RESOURCE_NAME[v] = k end
local RESOURCE_LIST = { "topic", "broker", "broker_logger", "group", "client_metrics" }
local SOURCE = { [0] = "UNKNOWN", "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG",
  "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG", "CLIENT_METRICS_CONFIG", "GROUP_CONFIG" }
local CONFIG_TYPE = { [0] = "UNKNOWN", "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD" }
local OPS = { set = 0, delete = 1, append = 2, subtract = 3 }

local function resource(where, arg, r)
  if type(r) ~= "table" then check.fail(where, arg, "a {type=, name=} table", r) end
  check.oneof(where, arg .. ".type", r.type, nil, RESOURCE_LIST)
  if r.type == nil then check.fail(where, arg .. ".type", '"topic", "broker", "broker_logger", "group" or "client_metrics"', nil) end
  if type(r.name) ~= "string" then check.fail(where, arg .. ".name", "a string", r.name) end
end

-- config_route(r) -> the broker id a config resource goes to: a broker's
-- own configs and loggers to that broker (Java does the same), the rest to any
local function config_route(r)
  if (r.type == "broker" or r.type == "broker_logger") and r.name ~= "" then return tonumber(r.name) end
end

-- per_broker(self, results, send, o): results grouped by the broker they
-- go to (config_route), one request per group per attempt
local function config_call(self, api, min, results, build, handle, o)
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local groups, order = {}, {}
    for _, r in ipairs(pending) do
      local id = config_route(r) or "any"
      if not groups[id] then groups[id] = {}; order[#order + 1] = id end
      table.insert(groups[id], r)
    end
    local retry, any_ok, last = {}, false, nil
    for _, id in ipairs(order) do
      local c, err, code
      if id == "any" then c, err, code = client:any_broker(deadline)
      else
        c, err, code = client:broker(id, deadline)
        if not c and code == "metadata" then
          client:load_metadata({ topics = {} }, deadline)
          c, err, code = client:broker(id, deadline)
        end
      end
      local v, resp
      if c then v, err, code = B.version(c, api, min) end
      if v then resp, err, code = B.request(c, api, build(groups[id], v), v, deadline) end
      if resp then
        any_ok = true
        handle(resp, groups[id], retry)
      else
        last = { err, code }
        for _, r in ipairs(groups[id]) do
          B.fail(r, nil, err, code)
          if client_mod.RETRIABLE[code] then retry[#retry + 1] = r end
        end
      end
    end
    if not any_ok and last then return nil, last[1], last[2] end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

local function config_results(where, resources)
  if type(resources) ~= "table" then check.fail(where, "resources", "an array of {type=, name=} tables", resources) end
  local results = {}
  for i, r in ipairs(resources) do
    resource(where, "resources[" .. i .. "]", r)
    results[i] = { type = r.type, name = r.name }
  end
  return results
end

local function match_results(pending, list, handle_one)
  local seen = {}
  for _, x in ipairs(list or {}) do
    for _, r in ipairs(pending) do
      if not seen[r] and RESOURCE[r.type] == x.resource_type and r.name == x.resource_name then
        seen[r] = true
        handle_one(r, x)
        break
      end
    end
  end
  settle_missing(pending, seen)
end

--- Describes configs (DescribeConfigs): a broker's own to that broker, the rest to any.
-- @tparam table resources `{{type = "topic"|"broker"|"broker_logger"|"group"|"client_metrics", name=,
-- names = {config names} (optional: all)}...}`
-- @tparam[opt] table opts `synonyms`, `documentation`, `timeout_ms`
-- @treturn table `{{type=, name=, configs = {[name] = {name=, value=, source=, read_only=, sensitive=,
-- default=, synonyms = {{name=, value=, source=}...}, type=, documentation=}}, error_code=, error=, code=}...}`
function _M:describe_configs(resources, opts)
  local where = "describe_configs"
  local o = B.opts(where, opts, { "synonyms", "documentation" })
  local results = config_results(where, resources)
  local keys = {}
  for i, r in ipairs(resources) do
    if r.names ~= nil then keys[results[i]] = B.names(where, "resources[" .. i .. "].names", r.names) end
  end
  return config_call(self, API.DescribeConfigs, (o.documentation and 3) or (o.synonyms and 1) or 0, results,
    function(pending)
      local list = {}
      for i, r in ipairs(pending) do
        list[i] = { resource_type = RESOURCE[r.type], resource_name = r.name, configuration_keys = keys[r] }
      end
      return { resources = list, include_synonyms = o.synonyms, include_documentation = o.documentation }
    end, function(resp, pending, retry)
      match_results(pending, resp.results, function(r, x)
        B.settle(r, x.error_code, x.error_message, retry)
        if x.error_code ~= errors.NONE then return end
        local cfg = {}
        for _, c in ipairs(x.configs or {}) do
          local e = { name = c.name, value = c.value, read_only = c.read_only, sensitive = c.is_sensitive,
            source = SOURCE[c.config_source] or (c.is_default and "DEFAULT_CONFIG") or "UNKNOWN",
            type = c.config_type and CONFIG_TYPE[c.config_type] or nil,
            documentation = c.documentation }
          e.default = e.source == "DEFAULT_CONFIG"
          if o.synonyms then
            e.synonyms = {}
            for j, s in ipairs(c.synonyms or {}) do
              e.synonyms[j] = { name = s.name, value = s.value, source = SOURCE[s.source] or "UNKNOWN" }
            end
          end
          cfg[c.name] = e
        end
        r.configs = cfg
      end)
    end, o)
end

--- Changes configs incrementally (IncrementalAlterConfigs): a broker's own to that broker, the rest to any.
-- @tparam table resources `{{type=, name=, configs = {{name=, op = "set"|"delete"|"append"|"subtract",
-- value=}...}}...}` (value: not for "delete"; for append/subtract one list element)
-- @tparam[opt] table opts `validate_only`, `timeout_ms`
-- @treturn table `{{type=, name=, error_code=, error=, code=}...}`
function _M:alter_configs(resources, opts)
  local where = "alter_configs"
  local o = B.opts(where, opts, { "validate_only" })
  local results = config_results(where, resources)
  local ops = {}
  for i, r in ipairs(resources) do
    local arg = "resources[" .. i .. "].configs"
    if type(r.configs) ~= "table" then check.fail(where, arg, "an array of {name=, op=, value=} tables", r.configs) end
    local list = {}
    for j, c in ipairs(r.configs) do
      local a = arg .. "[" .. j .. "]"
      if type(c) ~= "table" or type(c.name) ~= "string" then check.fail(where, a, "a {name=, op=, value=} table", c) end
      check.oneof(where, a .. ".op", c.op, nil, { "set", "delete", "append", "subtract" })
      local op = OPS[c.op or "set"]
      if op ~= 1 and type(c.value) ~= "string" then check.fail(where, a .. ".value", "a string", c.value) end
      list[j] = { name = c.name, config_operation = op, value = op ~= 1 and c.value or nil }
    end
    ops[results[i]] = list
  end
  return config_call(self, API.IncrementalAlterConfigs, 0, results, function(pending)
    local list = {}
    for i, r in ipairs(pending) do
      list[i] = { resource_type = RESOURCE[r.type], resource_name = r.name, configs = ops[r] }
    end
    return { resources = list, validate_only = o.validate_only }
  end, function(resp, pending, retry)
    match_results(pending, resp.responses, function(r, x) B.settle(r, x.error_code, x.error_message, retry) end)
  end, o)
end

_M.RESOURCE_NAME = RESOURCE_NAME

for _, part in ipairs { "kafka.admin.groups", "kafka.admin.records", "kafka.admin.transactions",
  "kafka.admin.security", "kafka.admin.cluster", "kafka.admin.replicas" } do
  for k, f in pairs(require(part)) do _M[k] = f end
end

return _M
