-- kafka.mock.handlers: kafka.mock's request handlers, one per API, keyed
-- by Kafka's API name (H.Produce, H.Fetch, ...):
--   handler(cluster, conn, body, version, reply, request, item) -> a body
--   to answer with, nil when it answers later through reply (a Fetch that
--   waits, a JoinGroup waiting for its round), or NO_RESPONSE (acks 0).
-- kafka.mock.serve decodes each request and queues the answer; handlers
-- take injected faults (cluster:_take_fault) and read and change the
-- cluster's topics, logs (kafka.mock.log) and groups (kafka.mock.group).
local proto = require "kafka.proto"
local Log = require "kafka.mock.log"

local math, table = math, table
local pairs, ipairs, tonumber = pairs, ipairs, tonumber

local E = proto.errors
local API = proto.api

local H = {}
local _M = { handlers = H }

-- What the mock implements: api key -> {min, max}. ApiVersions advertises exactly this.
local SUPPORTED = {
  [API.Produce] = { 0, 11 },
  [API.Fetch] = { 0, 18 }, -- v13+ address topics by id
  [API.ListOffsets] = { 0, 10 },
  [API.Metadata] = { 0, 12 },
  [API.OffsetCommit] = { 0, 10 }, -- v10 addresses topics by id
  [API.OffsetFetch] = { 0, 10 },  -- v10 too
  [API.FindCoordinator] = { 0, 6 },
  [API.JoinGroup] = { 0, 9 },
  [API.Heartbeat] = { 0, 4 },
  [API.LeaveGroup] = { 0, 5 },
  [API.SyncGroup] = { 0, 5 },
  [API.DescribeGroups] = { 0, 5 },
  [API.ListGroups] = { 0, 4 },
  [API.ApiVersions] = { 0, 4 },
  [API.CreateTopics] = { 0, 7 },
  [API.DeleteTopics] = { 0, 6 },
  [API.DeleteRecords] = { 0, 2 },
  [API.InitProducerId] = { 0, 5 },
  -- share groups (kafka.mock.share), Kafka 4.4.0's versions
  [API.IncrementalAlterConfigs] = { 0, 1 },
  [API.ShareGroupHeartbeat] = { 1, 1 },
  [API.ShareGroupDescribe] = { 1, 1 },
  [API.ShareFetch] = { 1, 2 },
  [API.ShareAcknowledge] = { 1, 2 },
}
_M.SUPPORTED = SUPPORTED

-- ApiVersions' body: exactly SUPPORTED
local function api_versions_body(code)
  local keys = {}
  local ks = {}
  for k in pairs(SUPPORTED) do ks[#ks + 1] = k end
  table.sort(ks)
  for _, k in ipairs(ks) do keys[#keys + 1] = { api_key = k, min_version = SUPPORTED[k][1], max_version = SUPPORTED[k][2] } end
  return { error_code = code or 0, api_keys = keys, throttle_time_ms = 0 }
end

_M.api_versions_body = api_versions_body

-- whether an injected fault (of a Produce or Fetch) names this partition
local function fault_hits(f, topic, partition)
  return f and (not f.topic or (f.topic == topic and (f.partition == nil or f.partition == partition)))
end


-- the answer of a request that gets none (Produce with acks 0)
local NO_RESPONSE = {}
_M.NO_RESPONSE = NO_RESPONSE

local function partition_error(self, conn, topic, partition, check_leader)
  local t = self.topics[topic]
  if not t then return E.UNKNOWN_TOPIC_OR_PARTITION end
  local p = t.partitions[partition]
  if not p then return E.UNKNOWN_TOPIC_OR_PARTITION end
  if check_leader and p.leader ~= conn.broker.id then return E.NOT_LEADER_OR_FOLLOWER end
  return 0, p, t
end

local function epoch_error(p, current)
  if current and current >= 0 then
    if current < p.epoch then return E.FENCED_LEADER_EPOCH end
    if current > p.epoch then return E.UNKNOWN_LEADER_EPOCH end
  end
  return 0
end

-- ApiVersions
H.ApiVersions = function()
  return api_versions_body(0)
end

-- Metadata
local function topic_metadata(self, t, version)
  local parts = {}
  for i = 0, t.count - 1 do
    local p = t.partitions[i]
    local isr, offline = {}, {}
    -- (Kafka's KRaft metadata cache: a stopped broker the controller has not
    -- fenced yet is still in the ISR and named leader)
    for _, r in ipairs(p.replicas) do
      if self._registered(self.brokers[r]) then isr[#isr + 1] = r else offline[#offline + 1] = r end
    end
    local lup = self._registered(self.brokers[p.leader])
    parts[#parts + 1] = { error_code = lup and 0 or E.LEADER_NOT_AVAILABLE, partition_index = i,
      leader_id = lup and p.leader or -1, leader_epoch = p.epoch, replica_nodes = p.replicas, isr_nodes = isr,
      offline_replicas = offline }
  end
  return { error_code = 0, name = t.name, topic_id = t.id, is_internal = false, partitions = parts,
    topic_authorized_operations = version >= 8 and -2147483648 or nil }
end

H.Metadata = function(self, _, b, version)
  local brokers = {}
  local reg = self:_registered_brokers()
  for _, id in ipairs(reg) do
    local br = self.brokers[id]
    brokers[#brokers + 1] = { node_id = id, host = br.host, port = br.port }
  end
  local topics = {}
  local req = b.topics
  if version == 0 and req and #req == 0 then req = nil end
  local pairs_req = {}
  for _, t in ipairs(req or {}) do pairs_req[#pairs_req + 1] = { t.name } end
  local f = self:_take_fault(API.Metadata, pairs_req)
  if not req then
    local names = {}
    for name in pairs(self.topics) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do topics[#topics + 1] = topic_metadata(self, self.topics[name], version) end
  else
    for _, rt in ipairs(req) do
      local name = rt.name
      local t = name and self.topics[name]
      local auto = not t and name and self.auto_create and (version < 4 or b.allow_auto_topic_creation)
      if auto and not self.active_controller then
        -- the creation goes to the controller: none is elected
        topics[#topics + 1] = { error_code = E.LEADER_NOT_AVAILABLE, name = name, partitions = {} }
      elseif auto then
        t = self:_create(name, self.default_partitions)
        if not t then
          topics[#topics + 1] = { error_code = self._valid_topic_name(name) and E.INVALID_REPLICATION_FACTOR
            or E.INVALID_TOPIC_EXCEPTION, name = name, partitions = {} }
        end
      end
      if t then
        topics[#topics + 1] = topic_metadata(self, t, version)
      elseif not (not self._valid_topic_name(name or "") and self.auto_create) then
        topics[#topics + 1] = { error_code = E.UNKNOWN_TOPIC_OR_PARTITION, name = name, topic_id = rt.topic_id,
          partitions = {} }
      end
    end
  end
  if f then
    for _, t in ipairs(topics) do if fault_hits(f, t.name, nil) then t.error_code = f.code end end
  end
  -- controller_id: in KRaft a registered broker, not the controller (KIP-590:
  -- clients' admin requests go to any broker, which forwards them); here the lowest
  return { brokers = brokers, cluster_id = self.cluster_id, controller_id = reg[1] or -1, topics = topics,
    cluster_authorized_operations = (version >= 8 and version <= 10) and -2147483648 or nil }
end

local function request_pairs(list, tname, plist, pname)
  local out = {}
  for _, t in ipairs(list or {}) do
    for _, p in ipairs(t[plist] or {}) do out[#out + 1] = { t[tname], p[pname] } end
  end
  return out
end

-- Produce
H.Produce = function(self, conn, b, version)
  local f = self:_take_fault(API.Produce, request_pairs(b.topic_data, "name", "partition_data", "index"))
  local acks = b.acks
  local now = self.now()
  local responses, any_error = {}, false
  for _, td in ipairs(b.topic_data or {}) do
    local prs = {}
    for _, pd in ipairs(td.partition_data or {}) do
      local r = { index = pd.index, error_code = 0, base_offset = -1, log_append_time_ms = -1, log_start_offset = -1 }
      prs[#prs + 1] = r
      local code, p, t = partition_error(self, conn, td.name, pd.index, true)
      if code == 0 and acks ~= 0 and acks ~= 1 and acks ~= -1 then code = E.INVALID_REQUIRED_ACKS end
      if code == 0 and fault_hits(f, td.name, pd.index) then code = f.code end
      local list, msg
      if code == 0 then
        list, code, msg = Log.parse(pd.records or "", version)
        if list then code = 0 end
      end
      if code == 0 then
        for _, e in ipairs(list) do
          if e.size > p.log.max_message_bytes then code, msg = E.MESSAGE_TOO_LARGE, "batch larger than max.message.bytes" end
        end
      end
      if code == 0 and acks == -1 then
        local isr = 0
        for _, rid in ipairs(p.replicas) do if self.brokers[rid].up then isr = isr + 1 end end
        local min_isr = tonumber(t.configs["min.insync.replicas"]) or self.min_insync_replicas
        if isr < min_isr then code = E.NOT_ENOUGH_REPLICAS end
      end
      if code == 0 then
        local dup_base
        code, msg, dup_base = p.log:check_producer(list)
        if code then
          if dup_base then r.base_offset = dup_base end
        else
          code = 0
          r.base_offset = p.log:append(list, now)
        end
      end
      r.error_code = code
      if code ~= 0 then
        any_error = true
        if version >= 8 then r.error_message = msg end
      else
        r.log_start_offset = p.log.log_start
      end
      if p then r.log_start_offset = p.log.log_start end
    end
    responses[#responses + 1] = { name = td.name, partition_responses = prs }
  end
  self:_wake_fetches()
  if acks == 0 then
    -- no answer; an error closes the connection, as Kafka signals it
    if any_error then conn.close_after = true end
    return NO_RESPONSE
  end
  return { responses = responses, throttle_time_ms = 0 }
end

-- the name of the topic with this id now (nil: none, deleted)
local function topic_by_id(self, id)
  for name, t in pairs(self.topics) do if t.id == id then return name end end
end

-- Fetch: the answer, and the record bytes it carries
local function fetch_body(self, conn, b, version, f)
  local total, limit = 0, version >= 3 and b.max_bytes or 2147483647
  local magic_limit = version <= 1 and 0 or (version <= 3 and 1 or nil)
  local responses = {}
  for _, ft in ipairs(b.topics or {}) do
    local parts = {}
    -- v13+: by id, as Kafka: an id no topic has now (deleted, or deleted and
    -- created again under its name) is UNKNOWN_TOPIC_ID
    local name = ft.topic
    if version >= 13 then name = topic_by_id(self, ft.topic_id) end
    for _, fp in ipairs(ft.partitions or {}) do
      local r = { partition_index = fp.partition, error_code = 0, high_watermark = -1, last_stable_offset = -1,
        log_start_offset = -1, preferred_read_replica = -1, records = "" }
      if version >= 4 then r.aborted_transactions = {} end
      parts[#parts + 1] = r
      local code, p = partition_error(self, conn, name or "", fp.partition, true)
      if not name then code = E.UNKNOWN_TOPIC_ID end
      if code == 0 then code = epoch_error(p, fp.current_leader_epoch) end
      if code == 0 and fault_hits(f, name, fp.partition) then code = f.code end
      if code == 0 then
        local log = p.log
        r.high_watermark, r.last_stable_offset, r.log_start_offset = log.hw, log.hw, log.log_start
        local off = fp.fetch_offset
        if off < log.log_start or off > log.hw then
          code = E.OFFSET_OUT_OF_RANGE
        elseif off < log.hw then
          -- whole batches up to both limits; the first batch of the response always (KIP-74)
          local bytes = log:read(off, math.min(fp.partition_max_bytes, limit - total), magic_limit, total == 0)
          r.records = bytes
          total = total + #bytes
        end
      end
      r.error_code = code
    end
    responses[#responses + 1] = { topic = ft.topic, topic_id = ft.topic_id, partitions = parts }
  end
  return { throttle_time_ms = 0, error_code = 0, session_id = 0, responses = responses }, total
end

H.Fetch = function(self, conn, b, version, reply)
  if version >= 7 and (b.session_id or 0) ~= 0 then
    return { error_code = E.FETCH_SESSION_ID_NOT_FOUND, session_id = 0, responses = {} }
  end
  if version >= 13 then -- (faults name topics)
    for _, ft in ipairs(b.topics or {}) do ft.topic = topic_by_id(self, ft.topic_id) end
  end
  local f = self:_take_fault(API.Fetch, request_pairs(b.topics, "topic", "partitions", "partition"))
  local body, total = fetch_body(self, conn, b, version, f)
  if f or total >= (b.min_bytes or 1) or (b.max_wait_ms or 0) <= 0 then return body end
  -- wait for min_bytes until max_wait_ms, as a broker does; in-process too:
  -- the client's receive sleeps on the cluster's clock until then (answered
  -- at once, an empty poll spun, and never ended on an injected clock)
  self.parked[#self.parked + 1] = { conn = conn, b = b, version = version, reply = reply,
    deadline = self.now() + b.max_wait_ms }
  return nil
end

-- wake_fetches(cluster [, now]): answers the parked Fetches that have
-- enough bytes now or whose wait is over
function _M.wake_fetches(self, now)
  if #self.parked == 0 then return end
  now = now or self.now()
  local keep = {}
  for _, pk in ipairs(self.parked) do
    if pk.run then -- a ShareFetch (kafka.mock.share): ready when it acquired records
      local body, ready = pk.run()
      if ready or now >= pk.deadline then pk.reply(body) else keep[#keep + 1] = pk end
    else
      local body, total = fetch_body(self, pk.conn, pk.b, pk.version)
      if total >= (pk.b.min_bytes or 1) or now >= pk.deadline then pk.reply(body) else keep[#keep + 1] = pk end
    end
  end
  self.parked = keep
end

-- ListOffsets
H.ListOffsets = function(self, conn, b, version)
  local f = self:_take_fault(API.ListOffsets, request_pairs(b.topics, "name", "partitions", "partition_index"))
  local topics = {}
  for _, lt in ipairs(b.topics or {}) do
    local parts = {}
    for _, lp in ipairs(lt.partitions or {}) do
      local r = { partition_index = lp.partition_index, error_code = 0, timestamp = -1, offset = -1, leader_epoch = -1 }
      parts[#parts + 1] = r
      local code, p = partition_error(self, conn, lt.name, lp.partition_index, true)
      if code == 0 then code = epoch_error(p, lp.current_leader_epoch) end
      if code == 0 and fault_hits(f, lt.name, lp.partition_index) then code = f.code end
      if code == 0 then
        local log, ts = p.log, lp.timestamp
        local off, when
        if ts == -1 or ts == -5 then off, when = log.hw, -1
        elseif ts == -2 or ts == -4 then off, when = log.log_start, -1
        elseif ts == -3 then off, when = log:max_timestamp()
        else off, when = log:offset_for_time(ts) end
        r.offset, r.timestamp, r.leader_epoch = off, when, p.epoch
        if version == 0 then r.old_style_offsets = off >= 0 and { off } or {} end
      end
      r.error_code = code
    end
    topics[#topics + 1] = { name = lt.name, partitions = parts }
  end
  return { throttle_time_ms = 0, topics = topics }
end

-- FindCoordinator
H.FindCoordinator = function(self, conn, b, version)
  local f = self:_take_fault(API.FindCoordinator, {})
  local function one(key)
    if f then return { key = key, error_code = f.code, node_id = -1, host = "", port = -1 } end
    if (b.key_type or 0) > 1 then return { key = key, error_code = E.INVALID_REQUEST, node_id = -1, host = "", port = -1 } end
    local id = self:coordinator(key)
    if not id then return { key = key, error_code = E.COORDINATOR_NOT_AVAILABLE, node_id = -1, host = "", port = -1 } end
    local br = self.brokers[id]
    return { key = key, error_code = 0, node_id = id, host = br.host, port = br.port }
  end
  local _ = conn
  if version >= 4 then
    local list = {}
    for i, k in ipairs(b.coordinator_keys or {}) do list[i] = one(k) end
    return { throttle_time_ms = 0, coordinators = list }
  end
  local r = one(b.key)
  return { throttle_time_ms = 0, error_code = r.error_code, node_id = r.node_id, host = r.host, port = r.port }
end

-- the group coordinator checks: 0 or an error code
local function group_error(self, conn, group_id, key)
  if not group_id or group_id == "" then return E.INVALID_GROUP_ID end
  local f = self:_take_fault(key, {})
  if f then return f.code end
  if self:coordinator(group_id) ~= conn.broker.id then return E.NOT_COORDINATOR end
  return 0
end

-- JoinGroup
H.JoinGroup = function(self, conn, b, version, reply, req)
  local code = group_error(self, conn, b.group_id, 11)
  if code ~= 0 then return { error_code = code, generation_id = -1, member_id = b.member_id or "", leader = "",
    protocol_name = version < 7 and "" or nil, members = {} } end
  local g = self:_group(b.group_id)
  local function answer(body)
    if body.members == nil then body.members = {} end
    if body.leader == nil then body.leader = "" end
    if version < 7 and body.protocol_name == nil then body.protocol_name = "" end
    reply(body)
  end
  g:join(b, version, req.client_id or "", conn.host, answer, self.now())
  return nil
end

-- SyncGroup
H.SyncGroup = function(self, conn, b, version, reply)
  local code = group_error(self, conn, b.group_id, 14)
  if code ~= 0 then return { error_code = code, assignment = "" } end
  self:_group(b.group_id):sync(b, version, reply, self.now())
  return nil
end

-- Heartbeat
H.Heartbeat = function(self, conn, b)
  local code = group_error(self, conn, b.group_id, 12)
  if code ~= 0 then return { error_code = code } end
  local g = self.groups[b.group_id]
  if not g then return { error_code = E.UNKNOWN_MEMBER_ID } end
  return { error_code = g:heartbeat(b, self.now()) }
end

-- LeaveGroup
H.LeaveGroup = function(self, conn, b, version)
  local code = group_error(self, conn, b.group_id, 13)
  if code ~= 0 then return { error_code = code, members = {} } end
  local g = self.groups[b.group_id]
  local ids = {}
  if version >= 3 then
    for i, m in ipairs(b.members or {}) do ids[i] = m.member_id end
  else
    ids[1] = b.member_id
  end
  local errs
  if g then errs = g:leave(ids, self.now()) else errs = {} for i = 1, #ids do errs[i] = E.UNKNOWN_MEMBER_ID end end
  if version < 3 then return { error_code = errs[1] } end
  local members = {}
  for i, m in ipairs(b.members or {}) do
    members[i] = { member_id = m.member_id, group_instance_id = m.group_instance_id, error_code = errs[i] }
  end
  return { error_code = 0, members = members }
end

-- DescribeGroups
H.DescribeGroups = function(self, conn, b)
  local out = {}
  for _, id in ipairs(b.groups or {}) do
    local code = group_error(self, conn, id, 15)
    local g = self.groups[id]
    if code ~= 0 then
      out[#out + 1] = { error_code = code, group_id = id, group_state = "", protocol_type = "", protocol_data = "", members = {} }
    elseif not g then
      out[#out + 1] = { error_code = 0, group_id = id, group_state = "Dead", protocol_type = "", protocol_data = "", members = {} }
    else
      local d = g:describe()
      local members = {}
      for _, m in ipairs(d.members) do
        local meta = ""
        for _, p in ipairs(g.members[m.member_id].protocols or {}) do if p.name == d.protocol then meta = p.metadata end end
        members[#members + 1] = { member_id = m.member_id, group_instance_id = m.group_instance_id, client_id = m.client_id,
          client_host = m.client_host, member_metadata = meta, member_assignment = m.assignment or "" }
      end
      out[#out + 1] = { error_code = 0, group_id = id, group_state = d.state, protocol_type = d.protocol_type or "",
        protocol_data = d.protocol or "", members = members, authorized_operations = -2147483648 }
    end
  end
  return { groups = out }
end

-- ListGroups (the groups this broker coordinates)
H.ListGroups = function(self, conn)
  local out = {}
  local ids = {}
  for id in pairs(self.groups) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    if self:coordinator(id) == conn.broker.id then
      local g = self.groups[id]
      out[#out + 1] = { group_id = id, protocol_type = g.protocol_type or "", group_state = g.state, group_type = "classic" }
    end
  end
  return { error_code = 0, groups = out }
end

-- OffsetCommit
H.OffsetCommit = function(self, conn, b, version)
  local code = group_error(self, conn, b.group_id, 8)
  local g
  if code == 0 then
    g = self:_group(b.group_id)
    local gen = version >= 1 and b.generation_id_or_member_epoch or -1
    code = g:commit_check(gen, version >= 1 and b.member_id or "")
  end
  local topics = {}
  for _, t in ipairs(b.topics or {}) do
    local parts = {}
    -- v10: by id, as Kafka: an id no topic has now is UNKNOWN_TOPIC_ID
    local name = t.name
    if version >= 10 then name = topic_by_id(self, t.topic_id) end
    for _, p in ipairs(t.partitions or {}) do
      local c = code
      if c == 0 then
        local tt = name and self.topics[name]
        if not name then c = E.UNKNOWN_TOPIC_ID
        elseif not tt or not tt.partitions[p.partition_index] then c = E.UNKNOWN_TOPIC_OR_PARTITION
        elseif p.committed_metadata and #p.committed_metadata > 4096 then c = E.OFFSET_METADATA_TOO_LARGE
        else
          g.offsets[name] = g.offsets[name] or {}
          g.offsets[name][p.partition_index] = { offset = p.committed_offset, metadata = p.committed_metadata or "",
            leader_epoch = p.committed_leader_epoch or -1 }
        end
      end
      parts[#parts + 1] = { partition_index = p.partition_index, error_code = c }
    end
    topics[#topics + 1] = { name = t.name, topic_id = t.topic_id, partitions = parts }
  end
  return { throttle_time_ms = 0, topics = topics }
end

-- OffsetFetch
local function fetch_offsets(self, conn, group_id, topics, per_partition_error, by_id)
  local code = group_error(self, conn, group_id, 9)
  local g = self.groups[group_id]
  local out = {}
  if code == 0 then
    local list = topics
    if not list then -- every committed partition
      list = {}
      local names = {}
      for name in pairs(g and g.offsets or {}) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do
        local idx = {}
        for p in pairs(g.offsets[name]) do idx[#idx + 1] = p end
        table.sort(idx)
        list[#list + 1] = { name = name, topic_id = self.topics[name] and self.topics[name].id, partition_indexes = idx }
      end
    end
    for _, t in ipairs(list) do
      local parts = {}
      -- v10: by id (by_id); an id no topic has now is UNKNOWN_TOPIC_ID
      local name = t.name
      if by_id and topics then name = topic_by_id(self, t.topic_id) end
      for _, p in ipairs(t.partition_indexes or {}) do
        local o = name and g and g.offsets[name] and g.offsets[name][p]
        parts[#parts + 1] = { partition_index = p, committed_offset = o and o.offset or -1,
          committed_leader_epoch = o and o.leader_epoch or -1, metadata = o and o.metadata or "",
          error_code = name and 0 or E.UNKNOWN_TOPIC_ID }
      end
      out[#out + 1] = { name = t.name, topic_id = t.topic_id, partitions = parts }
    end
  elseif per_partition_error then
    for _, t in ipairs(topics or {}) do
      local parts = {}
      for _, p in ipairs(t.partition_indexes or {}) do
        parts[#parts + 1] = { partition_index = p, committed_offset = -1, committed_leader_epoch = -1, metadata = "",
          error_code = code }
      end
      out[#out + 1] = { name = t.name, partitions = parts }
    end
  end
  return out, code
end

H.OffsetFetch = function(self, conn, b, version)
  if version >= 8 then
    local groups = {}
    for _, rg in ipairs(b.groups or {}) do
      local topics, code = fetch_offsets(self, conn, rg.group_id, rg.topics, false, version >= 10)
      groups[#groups + 1] = { group_id = rg.group_id, topics = topics, error_code = code }
    end
    return { throttle_time_ms = 0, groups = groups }
  end
  local topics, code = fetch_offsets(self, conn, b.group_id, b.topics, version < 2)
  return { throttle_time_ms = 0, topics = topics, error_code = code }
end

-- InitProducerId (idempotent producers; a transactional id gets an id and a new epoch)
H.InitProducerId = function(self, _, b)
  local f = self:_take_fault(API.InitProducerId, {})
  if f then return { throttle_time_ms = 0, error_code = f.code, producer_id = -1, producer_epoch = -1 } end
  local tid = b.transactional_id
  if tid then
    local st = self.txn_ids[tid]
    if not st then
      st = { pid = self.next_pid, epoch = -1 }
      self.next_pid = self.next_pid + 1
      self.txn_ids[tid] = st
    end
    st.epoch = st.epoch + 1
    return { throttle_time_ms = 0, error_code = 0, producer_id = st.pid, producer_epoch = st.epoch }
  end
  local pid, epoch = b.producer_id or -1, b.producer_epoch or -1
  if pid >= 0 and self.pids[pid] then
    if self.pids[pid] ~= epoch then
      return { throttle_time_ms = 0, error_code = E.INVALID_PRODUCER_EPOCH, producer_id = -1, producer_epoch = -1 }
    end
    self.pids[pid] = epoch + 1
    return { throttle_time_ms = 0, error_code = 0, producer_id = pid, producer_epoch = epoch + 1 }
  end
  pid = self.next_pid
  self.next_pid = pid + 1
  self.pids[pid] = 0
  return { throttle_time_ms = 0, error_code = 0, producer_id = pid, producer_epoch = 0 }
end

-- CreateTopics and DeleteTopics: the broker forwards them to the
-- controller; with none elected they wait for the election (or time out)
local function forwarded(handler, timed_out)
  return function(self, conn, b, version, reply)
    if self.active_controller then return handler(self, conn, b, version) end
    self:_await_controller(reply, function() return handler(self, conn, b, version) end,
      function() return timed_out(b, version) end)
    return nil
  end
end

-- CreateTopics
local function create_topics(self, _, b, version)
  local f = self:_take_fault(API.CreateTopics, {})
  local out = {}
  for _, ct in ipairs(b.topics or {}) do
    local r = { name = ct.name, error_code = 0, num_partitions = -1, replication_factor = -1, configs = {} }
    local nparts = ct.num_partitions
    if nparts == -1 then nparts = self.default_partitions end
    local rf = ct.replication_factor
    if rf == -1 then rf = math.min(3, #self.ids) end
    local assignments = (ct.assignments and #ct.assignments > 0) and ct.assignments or nil
    if assignments then table.sort(assignments, function(x, y) return x.partition_index < y.partition_index end) end
    if f then
      r.error_code = f.code
    elseif b.validate_only then
      if self.topics[ct.name] then r.error_code = E.TOPIC_ALREADY_EXISTS
      elseif not self._valid_topic_name(ct.name) then r.error_code = E.INVALID_TOPIC_EXCEPTION end
    else
      local t, msg, code = self:_create(ct.name, nparts, rf, ct.configs, assignments)
      if not t then
        r.error_code = code
        if version >= 1 then r.error_message = msg end
      else
        r.topic_id = t.id
        r.num_partitions = t.count
        r.replication_factor = #t.partitions[0].replicas
      end
    end
    out[#out + 1] = r
  end
  return { throttle_time_ms = 0, topics = out }
end

H.CreateTopics = forwarded(create_topics, function(b, version)
  local out = {}
  for _, ct in ipairs(b.topics or {}) do
    out[#out + 1] = { name = ct.name, error_code = E.REQUEST_TIMED_OUT, num_partitions = -1, replication_factor = -1,
      configs = {}, error_message = version >= 1 and "timed out waiting for the controller" or nil }
  end
  return { throttle_time_ms = 0, topics = out }
end)

-- DeleteTopics
local function delete_topics(self, _, b, version)
  local f = self:_take_fault(API.DeleteTopics, {})
  local list = {}
  if version >= 6 then
    for _, t in ipairs(b.topics or {}) do list[#list + 1] = { name = t.name, topic_id = t.topic_id } end
  else
    for _, n in ipairs(b.topic_names or {}) do list[#list + 1] = { name = n } end
  end
  local out = {}
  for _, d in ipairs(list) do
    local name = d.name
    if not name and d.topic_id then
      for n, t in pairs(self.topics) do if t.id == d.topic_id then name = n end end
    end
    local r = { name = name, topic_id = d.topic_id, error_code = 0 }
    local t = name and self.topics[name]
    if f then r.error_code = f.code
    elseif not t then r.error_code = (d.topic_id and not d.name) and E.UNKNOWN_TOPIC_ID or E.UNKNOWN_TOPIC_OR_PARTITION
    else
      r.topic_id = t.id
      self.topics[name] = nil
    end
    out[#out + 1] = r
  end
  return { throttle_time_ms = 0, responses = out }
end

H.DeleteTopics = forwarded(delete_topics, function(b, version)
  local out = {}
  if version >= 6 then
    for _, t in ipairs(b.topics or {}) do out[#out + 1] = { name = t.name, topic_id = t.topic_id,
      error_code = E.REQUEST_TIMED_OUT } end
  else
    for _, n in ipairs(b.topic_names or {}) do out[#out + 1] = { name = n, error_code = E.REQUEST_TIMED_OUT } end
  end
  return { throttle_time_ms = 0, responses = out }
end)

-- DeleteRecords
H.DeleteRecords = function(self, conn, b)
  local f = self:_take_fault(API.DeleteRecords, request_pairs(b.topics, "name", "partitions", "partition_index"))
  local topics = {}
  for _, t in ipairs(b.topics or {}) do
    local parts = {}
    for _, p in ipairs(t.partitions or {}) do
      local code, pp = partition_error(self, conn, t.name, p.partition_index, true)
      if code == 0 and fault_hits(f, t.name, p.partition_index) then code = f.code end
      local low = -1
      if code == 0 then
        local off = p.offset == -1 and pp.log.hw or p.offset
        if off < 0 or off > pp.log.hw then code = E.OFFSET_OUT_OF_RANGE else low = pp.log:delete_before(off) end
      end
      parts[#parts + 1] = { partition_index = p.partition_index, low_watermark = low, error_code = code }
    end
    topics[#topics + 1] = { name = t.name, partitions = parts }
  end
  return { throttle_time_ms = 0, topics = topics }
end

for name, h in pairs(require("kafka.mock.share").handlers) do H[name] = h end

return _M
