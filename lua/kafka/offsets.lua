--- kafka.offsets: a consumer's committed offsets and its group coordinator.
-- The coordinator is found once (FindCoordinator) and cached; the cache is
-- dropped on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
-- COORDINATOR_LOAD_IN_PROGRESS (and when the coordinator cannot be
-- reached), and the next request looks it up again. commit() carries the
-- group identity the caller gives (generation and member id on the classic
-- protocol, the member epoch on the consumer protocol; -1 and "" for a
-- consumer without a group membership).
-- @module kafka.offsets
local proto = require "kafka.proto"

local errors = proto.errors
local API = proto.api
local setmetatable, ipairs = setmetatable, ipairs

local _M = {}
local mt = { __index = _M }

-- Answers that send us to look the coordinator up again.
local COORDINATOR_MOVED = {
  [errors.NOT_COORDINATOR] = true,
  [errors.COORDINATOR_NOT_AVAILABLE] = true,
  [errors.COORDINATOR_LOAD_IN_PROGRESS] = true,
}
_M.COORDINATOR_MOVED = COORDINATOR_MOVED

-- Commit answers that mean the member's view of the group is out of date.
local REBALANCE = {
  [errors.ILLEGAL_GENERATION] = "rebalance",
  [errors.UNKNOWN_MEMBER_ID] = "rebalance",
  [errors.REBALANCE_IN_PROGRESS] = "rebalance",
  [errors.FENCED_MEMBER_EPOCH] = "rebalance",
  [errors.STALE_MEMBER_EPOCH] = "rebalance",
  [errors.FENCED_INSTANCE_ID] = "fenced",
}
_M.REBALANCE = REBALANCE

--- The committed offsets of one group, through a kafka.client (kafka.consumer
-- makes one per consumer with a group_id).
-- @tparam table client a kafka.client
-- @tparam string group_id the group
-- @treturn table the offsets object
function _M.new(client, group_id)
  return setmetatable({ client = client, group_id = group_id, node = nil, lookups = 0 }, mt)
end

-- One FindCoordinator attempt -> node id | nil, err, code, kcode, retriable
function _M:_find(deadline)
  local client = self.client
  local c, err, code = client:any_broker(deadline)
  if not c then return nil, err, code end
  local v
  v, err, code = c:version(API.FindCoordinator)
  if not v then return nil, err, code end
  local resp
  resp, err, code = c:request(API.FindCoordinator, self:find_body(), { version = v, deadline = deadline })
  if not resp then return nil, err, code end
  return self:found(resp)
end

--- The FindCoordinator request of the group.
-- @treturn table the body
function _M:find_body() return { key = self.group_id, key_type = 0 } end

--- Takes a FindCoordinator answer (one asked here, or by a group member
-- that asks without waiting): the coordinator is cached.
-- @tparam table resp the response
-- @return the node id, or nil, err, code, kafka_code, retriable
function _M:found(resp)
  local client = self.client
  self.lookups = self.lookups + 1
  if resp.error_code ~= errors.NONE then
    local e = errors.info(resp.error_code)
    return nil, ("FindCoordinator %s: %s"):format(self.group_id, e.name), e.retriable and "retriable" or "kafka",
      e.code, e.retriable
  end
  local b = client.brokers[resp.node_id]
  if not b or b.host ~= resp.host or b.port ~= resp.port then
    client.brokers[resp.node_id] = { host = resp.host, port = resp.port }
  end
  self.node = resp.node_id
  return resp.node_id
end

--- The group coordinator's connection, found once (FindCoordinator) and
-- cached. One attempt: callers retry through client:call.
-- @tparam number deadline a time of the client's clock (ms)
-- @tparam[opt] table pool connections owned by the caller (see client:broker)
-- @return the kafka.connection, or nil, err, code, kafka_code, retriable
function _M:coordinator(deadline, pool)
  if not self.node then
    local node, err, code, kcode, retriable = self:_find(deadline)
    if not node then return nil, err, code, kcode, retriable end
    self.node = node
  end
  local c, err, code = self.client:broker(self.node, deadline, pool)
  if not c then
    if code ~= "backoff" then self.node = nil end
    return nil, err, code
  end
  return c
end

--- Forgets the cached coordinator: the next request looks it up again.
function _M:invalidate() self.node = nil end

--- Drops the cached coordinator when a Kafka error code says it moved
-- (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS).
-- @tparam integer code a Kafka error code
-- @treturn boolean true when it did
function _M:answer(code)
  if COORDINATOR_MOVED[code] then
    self.node = nil
    return true
  end
  return false
end

--- A request to the coordinator through the client's retry service (the
-- coordinator found again while the answer says it moved).
-- @param api the api (key or name)
-- @tparam function make `make()` returns the request and the highest version it can go at
-- (built again for each attempt: an id found stale goes by name the next time)
-- @tparam function check_resp `check_resp(resp, body)` returns the result, or nil, err, code,
-- kafka_code, retriable
-- @return check_resp's result, or nil, err, code, kafka_code
function _M:request(api, make, check_resp)
  local client = self.client
  return client:call(function(deadline)
    local c, err, code, kcode, retriable = self:coordinator(deadline)
    if not c then return nil, err, code, kcode, retriable end
    local body, upto = make()
    local resp
    resp, err, code = c:request(api, body, { deadline = deadline, upto = upto })
    if not resp then
      self.node = nil
      return nil, err, code
    end
    return check_resp(resp, body)
  end)
end

local function kafka_error(self, what, code)
  local e = errors.info(code)
  local moved = self:answer(code)
  local lua_code = REBALANCE[code] or "kafka"
  return nil, what .. ": " .. e.name, lua_code, e.code, e.retriable or moved
end

-- Groups items by their topic: an array of {name = topic, topic_id = id,
-- [field] = {...}} whose lists hold make(item), in first-seen order (the
-- shape of the OffsetCommit and OffsetFetch requests); ids (name -> id) or nil.
local function by_topic(items, field, make, ids)
  local topics, list = {}, {}
  for _, it in ipairs(items) do
    local t = topics[it.topic]
    if not t then
      t = { name = it.topic, topic_id = ids and ids[it.topic], [field] = {} }
      topics[it.topic] = t
      list[#list + 1] = t
    end
    local l = t[field]
    l[#l + 1] = make(it)
  end
  return list
end

-- The topic name of a response's topic (by name up to the versions above, by id from them).
local function topic_name(self, tr, ids)
  if tr.name then return tr.name end
  for name, id in pairs(ids or {}) do
    if id == tr.topic_id then return name end
  end
  return self.client:topic_name(tr.topic_id) or ("topic id " .. tostring(proto.uuid_text(tr.topic_id or "")))
end

-- An UNKNOWN_TOPIC_ID answer: the metadata's id is stale (the topic was
-- deleted, or deleted and created again): forgotten, so the next attempt
-- goes by name and the next metadata request learns the new id.
local function unknown_id(self, code, name)
  if code == errors.UNKNOWN_TOPIC_ID then self.client:invalidate(name) end
end

--- Commits offsets (OffsetCommit), with the member's identity.
-- @tparam table offsets `{{topic=, partition=, offset=, metadata=}...}`
-- @tparam[opt] table identity `{generation=, member_id=, instance_id=}` (generation is the
-- member epoch on the consumer protocol); default -1 and "": no group membership
-- @return true, or nil, err, code, kafka_code: "rebalance" (the group moved on: the
-- generation or epoch is old, or a rebalance is in progress), "fenced" (another
-- member has this group_instance_id), "kafka"
function _M:commit(offsets, identity)
  return self:request(API.OffsetCommit, function() return self:commit_body(offsets, identity) end,
    function(resp, body) return self:commit_result(resp, body) end)
end

--- The OffsetCommit request commit() sends (the consumer's asynchronous auto
-- commit sends it itself), and the highest version it can go at: 10 (topic
-- ids) where the metadata has every topic's id, else 9 (names).
-- @tparam table offsets as commit
-- @tparam[opt] table identity as commit
-- @treturn table the request body
-- @treturn integer the highest version (connection:version's `upto`)
function _M:commit_body(offsets, identity)
  local ids = self.client:topic_ids(offsets)
  local list = by_topic(offsets, "partitions", function(o)
    return { partition_index = o.partition, committed_offset = o.offset, committed_leader_epoch = -1,
             commit_timestamp = -1, committed_metadata = o.metadata or "" }
  end, ids)
  -- (ids is no field of the request: commit_result names the answer's topics by it)
  return { group_id = self.group_id, generation_id_or_member_epoch = identity and identity.generation or -1,
    member_id = identity and identity.member_id or "", group_instance_id = identity and identity.instance_id,
    retention_time_ms = -1, topics = list, ids = ids }, ids and 10 or 9
end

--- Reads an OffsetCommit answer (the first partition error).
-- @tparam table resp the decoded response
-- @tparam[opt] table body the request (its topics' ids name the answer's topics from v10)
-- @return true, or nil, err, code, kafka_code, retriable
function _M:commit_result(resp, body)
  for _, tr in ipairs(resp.topics or {}) do
    for _, pr in ipairs(tr.partitions or {}) do
      if pr.error_code ~= errors.NONE then
        local name = topic_name(self, tr, body and body.ids)
        unknown_id(self, pr.error_code, name)
        return kafka_error(self, ("commit %s/%d"):format(name, pr.partition_index), pr.error_code)
      end
    end
  end
  return true
end

local function pkey(topic, partition) return topic .. "\0" .. partition end

--- The committed offsets (OffsetFetch). Asks with require_stable (KIP-447),
-- as Kafka's Java consumer does: offsets an open transaction sent are not
-- committed yet, and the coordinator answers UNSTABLE_OFFSET_COMMIT instead
-- of the offsets from before that transaction; retried until the deadline.
-- @tparam table partitions `{{topic=, partition=}...}`
-- @tparam[opt] table o `unstable_now`: return UNSTABLE_OFFSET_COMMIT at once instead of retrying
-- @treturn table `{{topic=, partition=, offset=, metadata=}...}` (offset -1 when none is
-- committed), or nil, err, code, kafka_code
function _M:committed(partitions, o)
  local wait_unstable = not (o and o.unstable_now)
  return self:request(API.OffsetFetch, function() return self:committed_body(partitions) end,
    function(resp, body) return self:committed_result(partitions, resp, wait_unstable, body) end)
end

--- The OffsetFetch request for partitions (require_stable, as committed()),
-- in both shapes: one group (v1-7, names) and a list of groups (v8+, ids from
-- v10), and the highest version it can go at: 10 where the metadata has
-- every topic's id, else 7.
-- @tparam table partitions `{{topic=, partition=}...}`
-- @treturn table the body
-- @treturn integer the highest version (connection:version's `upto`)
function _M:committed_body(partitions)
  local ids = self.client:topic_ids(partitions)
  local list = by_topic(partitions, "partition_indexes", function(p) return p.partition end, ids)
  local body = { group_id = self.group_id, topics = list, require_stable = true, ids = ids }
  if ids then body.groups = { { group_id = self.group_id, member_epoch = -1, topics = list } } end
  return body, ids and 10 or 7
end

--- An OffsetFetch answer as committed() returns it (one asked here, or by a
-- consumer's poll that asks without waiting).
-- @tparam table partitions `{{topic=, partition=}...}` (the request's)
-- @tparam table resp the response
-- @tparam boolean wait_unstable UNSTABLE_OFFSET_COMMIT is retriable
-- @tparam[opt] table body the request (its topics' ids name the answer's topics from v10)
-- @return the list, or nil, err, code, kafka_code, retriable
function _M:committed_result(partitions, resp, wait_unstable, body)
  local g = resp.groups and resp.groups[1] or resp -- v8+: one group asked, one answered
  if g.error_code and g.error_code ~= errors.NONE then return kafka_error(self, "committed", g.error_code) end
  local found = {}
  for _, tr in ipairs(g.topics or {}) do
    local name = topic_name(self, tr, body and body.ids)
    for _, pr in ipairs(tr.partitions or {}) do
      if pr.error_code ~= errors.NONE then
        unknown_id(self, pr.error_code, name)
        local _, err, code, kcode, retriable = kafka_error(self, ("committed %s/%d"):format(name,
          pr.partition_index), pr.error_code)
        if pr.error_code == errors.UNSTABLE_OFFSET_COMMIT then retriable = wait_unstable end
        return nil, err, code, kcode, retriable
      end
      found[pkey(name, pr.partition_index)] = pr
    end
  end
  local result_list = {}
  for i, p in ipairs(partitions) do
    local pr = found[pkey(p.topic, p.partition)]
    result_list[i] = { topic = p.topic, partition = p.partition, offset = pr and pr.committed_offset or -1,
                       metadata = pr and pr.metadata }
  end
  return result_list
end

return _M
