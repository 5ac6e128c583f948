-- kafka.admin's group calls: list_groups (every broker), describe_groups,
-- delete_groups, list_group_offsets, alter_group_offsets,
-- delete_group_offsets and group_lag (each through the group's
-- coordinator, found with FindCoordinator at every attempt, as Java's
-- CoordinatorStrategy does after NOT_COORDINATOR). Installed into
-- kafka.admin's methods.
local proto = require "kafka.proto"
local check = require "kafka.check"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local type, ipairs, pairs, require = type, ipairs, pairs, require
local table = table

local _M = {}

-- The group-level errors after which Java's admin asks again: a coordinator
-- that moved, is not there yet or is loading (and, for commits, a rebalance)
local COORD_AGAIN = { [errors.NOT_COORDINATOR] = true, [errors.COORDINATOR_NOT_AVAILABLE] = true,
  [errors.COORDINATOR_LOAD_IN_PROGRESS] = true }

local function timeout_of(self, o) return o.timeout_ms or self.client.default_api_timeout_ms end

-- group_error(kcode, msg, what) -> nil, err, code, kcode, retriable: a group-level error
local function group_error(kcode, msg, what)
  local e = errors.info(kcode)
  local retriable = COORD_AGAIN[kcode] or e.retriable
  return nil, ("%s: %s: %s"):format(what, e.name, (msg ~= nil and msg ~= "") and msg or e.message),
    retriable and "retriable" or "kafka", kcode, retriable
end

-- coord(self, group, api, min, deadline) -> conn, version | nil, err, code, kcode, retriable
local function coord(self, group, api, min, deadline)
  local c, err, code, kcode, retriable = self.client:find_coordinator(group, 0, deadline)
  if not c then return nil, err, code, kcode, retriable end
  local v
  v, err, code = B.version(c, api, min)
  if not v then return nil, err, code end
  return c, v
end

-- per_group(self, results, one, o): one(r, deadline) settles one group's
-- result or returns nil, err, code, kcode, retriable (r then carries the
-- error; retried when retriable). The call fails as a whole only when no
-- group got an answer and the failure was not a Kafka error.
local function per_group(self, results, one, o)
  return B.run(self, results, function(pending, deadline)
    local retry, answered, last = {}, false, nil
    for _, r in ipairs(pending) do
      local ok, err, code, kcode, retriable = one(r, deadline)
      if ok then answered = true
      else
        if kcode then answered = true; B.fail(r, kcode, err:match("^[^:]+: [%u_]+: (.*)$") or err, code)
        else B.fail(r, nil, err, code); last = { err, code, retriable } end
        if retriable == nil then retriable = require("kafka.client").RETRIABLE[code] end
        if retriable then r.code = r.code == "kafka" and "retriable" or r.code; retry[#retry + 1] = r end
      end
    end
    if not answered and last then return nil, last[1], last[2], nil, last[3] end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

--- The groups of every broker (ListGroups to each, as Java does).
-- @tparam[opt] table opts `types` ({"classic", "consumer", "share", ...}), `states` ({"Stable", "Empty", ...}), `timeout_ms`
-- @treturn table `{{group_id=, protocol_type=, state=, type=, coordinator=}...}` sorted by group_id
-- @treturn table the brokers that did not answer: `{{broker=, error=, code=}...}`
function _M:list_groups(opts)
  local where = "list_groups"
  local o = B.opts(where, opts)
  if o.types ~= nil then B.names(where, "types", o.types) end
  if o.states ~= nil then B.names(where, "states", o.states) end
  local answered, failed, code = B.each_broker(self.client, timeout_of(self, o), function(c, deadline)
    local v, e, k = B.version(c, API.ListGroups, (o.types and 5) or (o.states and 4) or 0)
    if not v then return nil, e, k end
    local r
    r, e, k = B.request(c, API.ListGroups, { states_filter = o.states or {}, types_filter = o.types or {} }, v, deadline)
    if not r then return nil, e, k end
    if r.error_code ~= errors.NONE then return group_error(r.error_code, nil, "ListGroups") end
    return r
  end)
  if not answered then return nil, failed, code end
  local out = {}
  for _, a in ipairs(answered) do
    for _, g in ipairs(a.resp.groups or {}) do
      out[#out + 1] = { group_id = g.group_id, protocol_type = g.protocol_type, state = g.group_state,
        type = g.group_type, coordinator = a.id }
    end
  end
  table.sort(out, function(a, b) return a.group_id < b.group_id end)
  return out, failed
end

local function tps_of(list)
  local out = {}
  for _, t in ipairs(list or {}) do
    for _, p in ipairs(t.partitions or {}) do out[#out + 1] = { topic = t.topic_name or t.topic, partition = p } end
  end
  return B.sort_tps(out)
end

-- classic(self, r, c, v, deadline): DescribeGroups for one group
local function describe_classic(r, c, deadline, ops)
  local v, err, code = B.version(c, API.DescribeGroups, ops and 3 or 0)
  if not v then return nil, err, code end
  local resp
  resp, err, code = B.request(c, API.DescribeGroups, { groups = { r.group_id }, include_authorized_operations = ops }, v, deadline)
  if not resp then return nil, err, code end
  local g = resp.groups and resp.groups[1]
  if not g then return nil, "DescribeGroups: no group in the answer", "protocol" end
  if g.error_code ~= errors.NONE then return group_error(g.error_code, g.error_message, "DescribeGroups") end
  if g.group_state == "Dead" then return group_error(errors.GROUP_ID_NOT_FOUND, nil, "DescribeGroups") end
  r.type, r.state, r.protocol_type, r.protocol = "classic", g.group_state, g.protocol_type, g.protocol_data
  r.members = {}
  for i, m in ipairs(g.members or {}) do
    local a = {}
    if (g.protocol_type == "consumer" or g.protocol_type == "") and m.member_assignment and #m.member_assignment > 0 then
      local _, d = proto.decode_data("ConsumerProtocolAssignment", m.member_assignment)
      if d then a = tps_of(d.assigned_partitions) end
    end
    r.members[i] = { member_id = m.member_id, group_instance_id = m.group_instance_id, client_id = m.client_id,
      client_host = m.client_host, assignment = a }
  end
  if ops then r.authorized_operations = B.operations(g.authorized_operations) end
  return B.ok(r)
end

--- Describes groups: ConsumerGroupDescribe first where the coordinator has it, DescribeGroups
-- for classic groups (Java's order: GROUP_ID_NOT_FOUND from the first means a classic group).
-- @tparam {string,...} ids the group ids
-- @tparam[opt] table opts `include_authorized_operations`, `timeout_ms`
-- @treturn table `{{group_id=, type = "classic"|"consumer", state=, protocol_type=, protocol=,
-- group_epoch=, assignment_epoch=, coordinator=, members = {{member_id=, group_instance_id=, client_id=,
-- client_host=, assignment = {{topic=, partition=}...}, target_assignment=, member_epoch=}...},
-- authorized_operations=, error_code=, error=, code=}...}`
function _M:describe_groups(ids, opts)
  local where = "describe_groups"
  local o = B.opts(where, opts, { "include_authorized_operations" })
  B.names(where, "ids", ids)
  local ops = o.include_authorized_operations
  local results = {}
  for i, id in ipairs(ids) do results[i] = { group_id = id } end
  return per_group(self, results, function(r, deadline)
    local c, err, code, kcode, retriable = self.client:find_coordinator(r.group_id, 0, deadline)
    if not c then return nil, err, code, kcode, retriable end
    r.coordinator = c.node_id
    if not c:version(API.ConsumerGroupDescribe) then return describe_classic(r, c, deadline, ops) end
    local v = c:version(API.ConsumerGroupDescribe)
    local resp
    resp, err, code = B.request(c, API.ConsumerGroupDescribe, { group_ids = { r.group_id },
      include_authorized_operations = ops }, v, deadline)
    if not resp then return nil, err, code end
    local g = resp.groups and resp.groups[1]
    if not g then return nil, "ConsumerGroupDescribe: no group in the answer", "protocol" end
    if g.error_code == errors.GROUP_ID_NOT_FOUND or g.error_code == errors.UNSUPPORTED_VERSION then
      return describe_classic(r, c, deadline, ops)
    end
    if g.error_code ~= errors.NONE then return group_error(g.error_code, g.error_message, "ConsumerGroupDescribe") end
    r.type, r.state, r.protocol_type, r.protocol = "consumer", g.group_state, "consumer", g.assignor_name
    r.group_epoch, r.assignment_epoch = g.group_epoch, g.assignment_epoch
    r.members = {}
    for i, m in ipairs(g.members or {}) do
      r.members[i] = { member_id = m.member_id, group_instance_id = m.instance_id, client_id = m.client_id,
        client_host = m.client_host, member_epoch = m.member_epoch, rack = m.rack_id,
        assignment = tps_of(m.assignment and m.assignment.topic_partitions),
        target_assignment = tps_of(m.target_assignment and m.target_assignment.topic_partitions) }
    end
    if ops then r.authorized_operations = B.operations(g.authorized_operations) end
    return B.ok(r)
  end, o)
end

--- Deletes groups (DeleteGroups to each group's coordinator); a group with members is refused (NON_EMPTY_GROUP).
-- @tparam {string,...} ids the group ids
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{group_id=, error_code=, error=, code=}...}`
function _M:delete_groups(ids, opts)
  local where = "delete_groups"
  local o = B.opts(where, opts)
  B.names(where, "ids", ids)
  local results = {}
  for i, id in ipairs(ids) do results[i] = { group_id = id } end
  return per_group(self, results, function(r, deadline)
    local c, v, code, kcode, retriable = coord(self, r.group_id, API.DeleteGroups, 0, deadline)
    if not c then return nil, v, code, kcode, retriable end
    local resp, err
    resp, err, code = B.request(c, API.DeleteGroups, { groups_names = { r.group_id } }, v, deadline)
    if not resp then return nil, err, code end
    local x = resp.results and resp.results[1]
    if not x then return nil, "DeleteGroups: no group in the answer", "protocol" end
    if x.error_code ~= errors.NONE then return group_error(x.error_code, x.error_message, "DeleteGroups") end
    return B.ok(r)
  end, o)
end

local function tp_list(where, arg, list)
  if type(list) ~= "table" then check.fail(where, arg, "an array of {topic=, partition=} tables", list) end
  for i, x in ipairs(list) do B.tp(where, arg .. "[" .. i .. "]", x) end
  B.unique_tps(where, arg, list)
  return list
end

--- A group's committed offsets (OffsetFetch to its coordinator).
-- @tparam string group the group id
-- @tparam[opt] table partitions `{{topic=, partition=}...}` (nil: every partition the group committed)
-- @tparam[opt] table opts `require_stable` (wait for pending transactional commits), `timeout_ms`
-- @treturn table `{{topic=, partition=, offset=, leader_epoch=, metadata=, error_code=, error=, code=}...}`
-- sorted by topic and partition (offset -1: nothing committed), or nil, err, code
function _M:list_group_offsets(group, partitions, opts)
  local where = "list_group_offsets"
  if type(group) ~= "string" then check.fail(where, "group", "a string", group) end
  local o = B.opts(where, opts, { "require_stable" })
  local topics
  if partitions ~= nil then
    tp_list(where, "partitions", partitions)
    topics = {}
    for i, t in ipairs(B.by_topic(partitions)) do
      local ps = {}
      for j, it in ipairs(t.items) do ps[j] = it.partition end
      topics[i] = { name = t.name, partition_indexes = ps }
    end
  end
  return self.client:call(function(deadline)
    local c, v, code, kcode, retriable = coord(self, group, API.OffsetFetch, o.require_stable and 7 or 1, deadline)
    if not c then return nil, v, code, kcode, retriable end
    local resp, err
    resp, err, code = B.request(c, API.OffsetFetch, { group_id = group, topics = topics,
      require_stable = o.require_stable }, v, deadline)
    if not resp then return nil, err, code end
    if resp.error_code and resp.error_code ~= errors.NONE then return group_error(resp.error_code, nil, "OffsetFetch") end
    local out = {}
    for _, t in ipairs(resp.topics or {}) do
      for _, p in ipairs(t.partitions or {}) do
        local r = { topic = t.name, partition = p.partition_index, offset = p.committed_offset,
          leader_epoch = (p.committed_leader_epoch or -1) >= 0 and p.committed_leader_epoch or nil,
          metadata = p.metadata }
        if p.error_code ~= errors.NONE then
          if COORD_AGAIN[p.error_code] or p.error_code == errors.UNSTABLE_OFFSET_COMMIT then
            return group_error(p.error_code, nil, "OffsetFetch")
          end
          B.fail(r, p.error_code)
        else B.ok(r) end
        out[#out + 1] = r
      end
    end
    return B.sort_tps(out)
  end, { timeout_ms = timeout_of(self, o) })
end

-- offsets_call(self, group, results, api, build, o): a coordinator-bound
-- request whose answer has topics/partitions with error codes (OffsetCommit,
-- OffsetDelete); group-level errors settle every partition (retried when
-- Java retries them)
local function offsets_call(self, group, results, api, min, build, again, o)
  return B.run(self, results, function(pending, deadline)
    local c, v, code, kcode, retriable = coord(self, group, api, min, deadline)
    if not c then return nil, v, code, kcode, retriable end
    local resp, err
    resp, err, code = B.request(c, api, build(pending), v, deadline)
    if not resp then return nil, err, code end
    local retry = {}
    if resp.error_code and resp.error_code ~= errors.NONE then
      for _, r in ipairs(pending) do B.settle(r, resp.error_code, nil, retry, again) end
      return true, retry
    end
    local by = {}
    for _, r in ipairs(pending) do by[r.topic .. "\0" .. r.partition] = r end
    for _, t in ipairs(resp.topics or {}) do
      for _, p in ipairs(t.partitions or {}) do
        local r = by[t.name .. "\0" .. p.partition_index]
        if r then
          by[t.name .. "\0" .. p.partition_index] = nil
          B.settle(r, p.error_code, nil, retry, again)
        end
      end
    end
    for _, r in pairs(by) do B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

local function topics_of(pending, part)
  local list = {}
  for i, t in ipairs(B.by_topic(pending)) do
    local ps = {}
    for j, r in ipairs(t.items) do ps[j] = part(r) end
    list[i] = { name = t.name, partitions = ps }
  end
  return list
end

--- Sets a group's committed offsets (OffsetCommit as an admin: no member, generation -1);
-- the group must have no active members (else UNKNOWN_MEMBER_ID).
-- @tparam string group the group id
-- @tparam table offsets `{{topic=, partition=, offset=, leader_epoch=, metadata=}...}`
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{topic=, partition=, offset=, error_code=, error=, code=}...}`
function _M:alter_group_offsets(group, offsets, opts)
  local where = "alter_group_offsets"
  if type(group) ~= "string" then check.fail(where, "group", "a string", group) end
  local o = B.opts(where, opts)
  tp_list(where, "offsets", offsets)
  local results = {}
  for i, x in ipairs(offsets) do
    check.int(where, "offsets[" .. i .. "].offset", x.offset, nil, 0)
    if x.offset == nil then check.fail(where, "offsets[" .. i .. "].offset", "an integer >= 0", nil) end
    check.int(where, "offsets[" .. i .. "].leader_epoch", x.leader_epoch, nil, -1)
    check.typed(where, "offsets[" .. i .. "].metadata", x.metadata, nil, "string")
    results[i] = { topic = x.topic, partition = x.partition, offset = x.offset, _epoch = x.leader_epoch,
      _meta = x.metadata }
  end
  local again = { [errors.REBALANCE_IN_PROGRESS] = true }
  for k in pairs(COORD_AGAIN) do again[k] = true end
  local out, err, code = offsets_call(self, group, results, API.OffsetCommit, 2, function(pending)
    return { group_id = group, generation_id_or_member_epoch = -1, member_id = "", retention_time_ms = -1,
      topics = topics_of(pending, function(r)
        return { partition_index = r.partition, committed_offset = r.offset, committed_leader_epoch = r._epoch or -1,
          committed_metadata = r._meta or "" }
      end) }
  end, again, o)
  for _, r in ipairs(results) do r._epoch, r._meta = nil, nil end
  return out, err, code
end

--- Deletes a group's committed offsets (OffsetDelete); refused per partition
-- (GROUP_SUBSCRIBED_TO_TOPIC) while a member is subscribed to the topic.
-- @tparam string group the group id
-- @tparam table partitions `{{topic=, partition=}...}`
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{topic=, partition=, error_code=, error=, code=}...}`
function _M:delete_group_offsets(group, partitions, opts)
  local where = "delete_group_offsets"
  if type(group) ~= "string" then check.fail(where, "group", "a string", group) end
  local o = B.opts(where, opts)
  tp_list(where, "partitions", partitions)
  local results = {}
  for i, x in ipairs(partitions) do results[i] = { topic = x.topic, partition = x.partition } end
  return offsets_call(self, group, results, API.OffsetDelete, 0, function(pending)
    return { group_id = group, topics = topics_of(pending, function(r) return { partition_index = r.partition } end) }
  end, COORD_AGAIN, o)
end

--- A group's lag, as kafka-consumer-groups --describe prints it: the
-- partitions it committed and the ones its members are assigned, each with
-- the committed offset, the log end offset (high watermark) and the lag.
-- @tparam string group the group id
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{topic=, partition=, offset=, end_offset=, lag=, member_id=, client_id=, client_host=,
-- error=, code=}...}` by topic and partition (offset and lag nil when nothing is committed), or nil, err, code
-- (code "kafka" with GROUP_ID_NOT_FOUND for a group that does not exist)
function _M:group_lag(group, opts)
  local where = "group_lag"
  if type(group) ~= "string" then check.fail(where, "group", "a string", group) end
  local o = B.opts(where, opts)
  local committed, err, code = self:list_group_offsets(group, nil, o)
  if not committed then return nil, err, code end
  local rows, by = {}, {}
  local function row(topic, partition)
    local k = topic .. "\0" .. partition
    if not by[k] then
      by[k] = { topic = topic, partition = partition }
      rows[#rows + 1] = by[k]
    end
    return by[k]
  end
  for _, c in ipairs(committed) do
    local r = row(c.topic, c.partition)
    if c.offset and c.offset >= 0 then r.offset = c.offset end
  end
  local d = self:describe_groups({ group }, o)
  local g = d and d[1]
  if g and not g.error then
    for _, m in ipairs(g.members or {}) do
      for _, tp in ipairs(m.assignment or {}) do
        local r = row(tp.topic, tp.partition)
        r.member_id, r.client_id, r.client_host = m.member_id, m.client_id, m.client_host
      end
    end
  end
  B.sort_tps(rows)
  if #rows == 0 then
    -- nothing committed, no members: a group that does not exist is an error (as Java's tool says it)
    if g and g.error_code == errors.GROUP_ID_NOT_FOUND then return nil, "group_lag " .. group .. ": " .. g.error, "kafka", g.error_code end
    return rows
  end
  local q = {}
  for i, r in ipairs(rows) do q[i] = { topic = r.topic, partition = r.partition, spec = "latest" } end
  local ends
  ends, err, code = self:list_offsets(q, o)
  if not ends then return nil, err, code end
  for i, r in ipairs(rows) do
    local e = ends[i]
    if e.error then r.error, r.code = e.error, e.code
    else
      r.end_offset = e.offset
      if r.offset then r.lag = e.offset - r.offset end
    end
  end
  return rows
end

return _M
