-- kafka.mock.group: the classic consumer group coordinator of the mock
-- broker (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, offsets). A group is
-- Empty, PreparingRebalance, CompletingRebalance or Stable, as in Kafka's
-- GroupCoordinator; a JoinGroup or SyncGroup that has to wait is answered
-- later through its reply function.
local proto = require "kafka.proto"

local table = table
local ipairs, pairs, next, setmetatable = ipairs, pairs, next, setmetatable

local E = proto.errors

local _M = {}
local mt = { __index = _M }

function _M.new(cluster, id)
  return setmetatable({
    cluster = cluster,
    id = id,
    state = "Empty",
    generation = 0,
    protocol_type = nil,
    protocol = nil,
    leader = nil,
    members = {},   -- member id -> member
    order = {},     -- member ids in join order
    pending = {},   -- member ids handed out with MEMBER_ID_REQUIRED -> expiry time
    offsets = {},   -- topic -> partition -> {offset=, metadata=, leader_epoch=}
    deadline = nil, -- end of the current join phase
    seq = 0,
  }, mt)
end

local function remove_id(list, id)
  for i, x in ipairs(list) do
    if x == id then
      table.remove(list, i)
      return
    end
  end
end

function _M:_new_member_id(client_id)
  self.seq = self.seq + 1
  self.cluster.member_seq = (self.cluster.member_seq or 0) + 1
  return ("%s-%08x-%04d"):format(client_id ~= "" and client_id or "member", self.cluster.member_seq * 2654435761 % 4294967296,
    self.seq)
end

function _M:_remove(id, err)
  local m = self.members[id]
  if not m then return end
  self.members[id] = nil
  remove_id(self.order, id)
  if m.join_reply then m.join_reply { error_code = err or E.UNKNOWN_MEMBER_ID, generation_id = -1, member_id = id } end
  if m.sync_reply then m.sync_reply { error_code = err or E.UNKNOWN_MEMBER_ID, assignment = "" } end
  m.join_reply, m.sync_reply = nil, nil
  if self.leader == id then self.leader = nil end
end

-- common protocol: the first of the leader's (or the first member's)
-- protocols that every member supports
function _M:_choose_protocol()
  local first = self.members[self.leader] or self.members[self.order[1]]
  if not first then return nil end
  for _, p in ipairs(first.protocols) do
    local all = true
    for _, m in pairs(self.members) do
      if not m.supports[p.name] then all = false break end
    end
    if all then return p.name end
  end
  return nil
end

function _M:_compatible(protocol_type, protocols)
  if not next(self.members) then return true end
  if protocol_type ~= self.protocol_type then return false end
  for _, p in ipairs(protocols) do
    local all = true
    for _, m in pairs(self.members) do
      if not m.supports[p.name] then all = false break end
    end
    if all then return true end
  end
  return false
end

function _M:_prepare_rebalance(now)
  if self.state == "CompletingRebalance" then
    for _, m in pairs(self.members) do
      if m.sync_reply then
        m.sync_reply { error_code = E.REBALANCE_IN_PROGRESS, assignment = "" }
        m.sync_reply = nil
      end
    end
  end
  local wait = 0
  for _, m in pairs(self.members) do if m.rebalance_ms > wait then wait = m.rebalance_ms end end
  -- a group formed from Empty waits group.initial.rebalance.delay.ms for more members
  self.initial = nil
  if self.state == "Empty" and self.cluster.initial_rebalance_delay_ms > 0 then
    self.initial = now + self.cluster.initial_rebalance_delay_ms
  end
  self.state = "PreparingRebalance"
  self.deadline = now + wait
end

function _M:_maybe_complete_join(now)
  if self.state ~= "PreparingRebalance" then return end
  local all = true
  for _, m in pairs(self.members) do if not m.join_reply then all = false break end end
  if all and self.initial and now < self.initial then all = false end
  if all or now >= self.deadline then self:_complete_join(now) end
end

function _M:_complete_join(now)
  local ids = {}
  for i, id in ipairs(self.order) do ids[i] = id end
  for _, id in ipairs(ids) do
    if not self.members[id].join_reply then self:_remove(id) end
  end
  self.generation = self.generation + 1
  if not next(self.members) then
    self.state, self.protocol, self.protocol_type, self.leader, self.deadline = "Empty", nil, nil, nil, nil
    return
  end
  if not self.leader then self.leader = self.order[1] end
  self.protocol = self:_choose_protocol()
  self.state = "CompletingRebalance"
  self.deadline = nil
  local list = {}
  for _, id in ipairs(self.order) do
    local m = self.members[id]
    local meta = ""
    for _, p in ipairs(m.protocols) do if p.name == self.protocol then meta = p.metadata end end
    list[#list + 1] = { member_id = id, group_instance_id = m.instance_id, metadata = meta }
  end
  for _, id in ipairs(self.order) do
    local m = self.members[id]
    m.assignment = nil
    m.last_seen = now
    local reply = m.join_reply
    m.join_reply = nil
    reply { error_code = 0, generation_id = self.generation, protocol_type = self.protocol_type,
      protocol_name = self.protocol, leader = self.leader, member_id = id,
      members = (id == self.leader) and list or {} }
  end
end

-- join(body, version, client_id, client_host, reply, now)
function _M:join(b, version, client_id, client_host, reply, now)
  local c = self.cluster
  local fail = function(code, member_id)
    reply { error_code = code, generation_id = -1, member_id = member_id or b.member_id or "",
      protocol_name = version >= 7 and nil or "", leader = "" }
  end
  local session = b.session_timeout_ms
  if session < c.group_min_session_timeout_ms or session > c.group_max_session_timeout_ms then
    return fail(E.INVALID_SESSION_TIMEOUT)
  end
  local protocols = b.protocols or {}
  if (b.protocol_type or "") == "" or #protocols == 0 then return fail(E.INCONSISTENT_GROUP_PROTOCOL) end
  if not self:_compatible(b.protocol_type, protocols) then return fail(E.INCONSISTENT_GROUP_PROTOCOL) end
  local id = b.member_id or ""
  local m
  if id == "" then
    id = self:_new_member_id(client_id)
    if version >= 4 and not b.group_instance_id then
      self.pending[id] = now + session
      return fail(E.MEMBER_ID_REQUIRED, id)
    end
  else
    m = self.members[id]
    if not m then
      if not self.pending[id] then return fail(E.UNKNOWN_MEMBER_ID) end
      self.pending[id] = nil
    end
  end
  local supports = {}
  for _, p in ipairs(protocols) do supports[p.name] = true end
  local same = false
  if m then
    same = #m.protocols == #protocols
    for i, p in ipairs(protocols) do
      if not m.protocols[i] or m.protocols[i].name ~= p.name or m.protocols[i].metadata ~= p.metadata then same = false end
    end
  else
    m = { id = id, client_id = client_id, client_host = client_host }
    self.members[id] = m
    self.order[#self.order + 1] = id
  end
  m.instance_id = b.group_instance_id
  m.session_ms = session
  m.rebalance_ms = version >= 1 and b.rebalance_timeout_ms or session
  m.protocols, m.supports = protocols, supports
  m.last_seen = now
  self.protocol_type = b.protocol_type
  if m.join_reply then -- a second JoinGroup while the first waits: the first is answered as Kafka does
    m.join_reply { error_code = E.UNKNOWN_MEMBER_ID, generation_id = -1, member_id = id }
  end
  m.join_reply = reply
  if self.state == "Stable" and same and id ~= self.leader then
    -- an unchanged follower rejoining a stable group gets the current generation back
    m.join_reply = nil
    return reply { error_code = 0, generation_id = self.generation, protocol_type = self.protocol_type,
      protocol_name = self.protocol, leader = self.leader, member_id = id, members = {} }
  end
  if self.state ~= "PreparingRebalance" then self:_prepare_rebalance(now) end
  self:_maybe_complete_join(now)
end

function _M:sync(b, version, reply, now)
  local fail = function(code) reply { error_code = code, assignment = "" } end
  local m = self.members[b.member_id]
  if not m then return fail(E.UNKNOWN_MEMBER_ID) end
  if b.generation_id ~= self.generation then return fail(E.ILLEGAL_GENERATION) end
  if version >= 5 and ((b.protocol_type and b.protocol_type ~= self.protocol_type)
      or (b.protocol_name and b.protocol_name ~= self.protocol)) then
    return fail(E.INCONSISTENT_GROUP_PROTOCOL)
  end
  m.last_seen = now
  if self.state == "PreparingRebalance" then return fail(E.REBALANCE_IN_PROGRESS) end
  local ok = function(a) reply { error_code = 0, protocol_type = self.protocol_type, protocol_name = self.protocol,
    assignment = a or "" } end
  if self.state == "Stable" then return ok(m.assignment) end
  -- CompletingRebalance: wait for the leader's assignment
  m.sync_reply = ok
  if b.member_id == self.leader then
    local given = {}
    for _, a in ipairs(b.assignments or {}) do given[a.member_id] = a.assignment end
    self.state = "Stable"
    for _, id in ipairs(self.order) do
      local x = self.members[id]
      x.assignment = given[id] or ""
      if x.sync_reply then
        local r = x.sync_reply
        x.sync_reply = nil
        r(x.assignment)
      end
    end
  end
end

function _M:heartbeat(b, now)
  local m = self.members[b.member_id]
  if not m then return E.UNKNOWN_MEMBER_ID end
  if b.generation_id ~= self.generation then return E.ILLEGAL_GENERATION end
  m.last_seen = now
  if self.state == "PreparingRebalance" then return E.REBALANCE_IN_PROGRESS end
  return 0
end

-- leave(ids, now) -> error per id (0 or UNKNOWN_MEMBER_ID)
function _M:leave(ids, now)
  local out = {}
  for i, id in ipairs(ids) do
    if self.members[id] then
      self:_remove(id)
      out[i] = 0
    elseif self.pending[id] then
      self.pending[id] = nil
      out[i] = 0
    else
      out[i] = E.UNKNOWN_MEMBER_ID
    end
  end
  if next(self.members) then
    if self.state ~= "PreparingRebalance" then self:_prepare_rebalance(now) end
    self:_maybe_complete_join(now)
  elseif self.state ~= "Empty" then
    self.generation = self.generation + 1
    self.state, self.protocol, self.protocol_type, self.leader, self.deadline = "Empty", nil, nil, nil, nil
  end
  return out
end

-- commit_check(generation, member_id) -> 0 or the error code for the whole commit
function _M:commit_check(generation, member_id)
  if generation < 0 and self.state == "Empty" then return 0 end
  if generation < 0 and (member_id or "") == "" and not next(self.members) then return 0 end
  if not self.members[member_id] then return E.UNKNOWN_MEMBER_ID end
  if generation ~= self.generation then return E.ILLEGAL_GENERATION end
  if self.state == "CompletingRebalance" then return E.REBALANCE_IN_PROGRESS end
  self.members[member_id].last_seen = self.cluster.now()
  return 0
end

-- tick(now): session timeouts, the end of a join phase, expired pending member ids
function _M:tick(now)
  for id, t in pairs(self.pending) do if now >= t then self.pending[id] = nil end end
  local expired = {}
  for _, id in ipairs(self.order) do
    local m = self.members[id]
    if not m.join_reply and now >= m.last_seen + m.session_ms then expired[#expired + 1] = id end
  end
  if #expired > 0 then
    for _, id in ipairs(expired) do self:_remove(id) end
    if next(self.members) then
      if self.state ~= "PreparingRebalance" then self:_prepare_rebalance(now) end
    elseif self.state ~= "Empty" then
      self.generation = self.generation + 1
      self.state, self.protocol, self.protocol_type, self.leader, self.deadline = "Empty", nil, nil, nil, nil
    end
  end
  self:_maybe_complete_join(now)
end

-- next_deadline() -> the earliest time tick() has something to do, or nil
function _M:next_deadline()
  local t
  local function min(x) if x and (not t or x < t) then t = x end end
  if self.state == "PreparingRebalance" then min(self.deadline); min(self.initial) end
  for _, m in pairs(self.members) do if not m.join_reply then min(m.last_seen + m.session_ms) end end
  for _, x in pairs(self.pending) do min(x) end
  return t
end

function _M:describe()
  local members = {}
  for _, id in ipairs(self.order) do
    local m = self.members[id]
    members[#members + 1] = { member_id = id, client_id = m.client_id, client_host = m.client_host,
      group_instance_id = m.instance_id, assignment = m.assignment }
  end
  return { state = self.state, generation = self.generation, protocol_type = self.protocol_type,
    protocol = self.protocol, leader = self.leader, members = members }
end

return _M
