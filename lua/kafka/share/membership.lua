-- kafka.share.membership: a share group member (KIP-932), driven by
-- ShareGroupHeartbeat alone: the coordinator assigns (server side, several
-- members may share a partition), the member takes the assignment as it
-- comes (no revocation round: records are acquired per fetch, not owned
-- per partition).
--
--   unjoined --heartbeat(epoch 0)--> joining --answer--> stable
--   stable --heartbeat every heartbeat_interval_ms (the coordinator's)--> stable
--     (an answer with an assignment replaces the assigned partitions)
--   FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: fenced -> unjoined (rejoin with
--     epoch 0 and the same member id, the assignment dropped)
--   NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS
--     and other retriable errors: the coordinator is looked up again after a backoff
--   leave(): leaving --heartbeat(epoch -1)--> left
--   anything else (GROUP_AUTHORIZATION_FAILED, ...): failed (poll reports it)
local proto = require "kafka.proto"
local group = require "kafka.group"

local errors = proto.errors
local API = proto.api
local ipairs, tostring, setmetatable = ipairs, tostring, setmetatable
local math = math

local _M = {}
local mt = { __index = _M }

local LEAVE = -1
local COORDINATOR_MOVED = { [errors.NOT_COORDINATOR] = true, [errors.COORDINATOR_NOT_AVAILABLE] = true }

-- new(client, group_id, opts): opts.heartbeat_interval_ms (until the coordinator
-- says), opts.on_state(old, new) (tests watch the machine through it)
function _M.new(client, group_id, opts)
  return setmetatable({
    client = client,
    group_id = group_id,
    member_id = group.uuid(), -- the member makes its id (ShareGroupHeartbeat v1)
    epoch = 0,
    state = "unjoined",
    topics = nil,        -- the subscription
    sent_topics = nil,   -- the subscription the coordinator has (sent only when it changed)
    assignment = {},     -- {{topic=, partition=}...}, resolved from topic ids
    target = nil,        -- the last assignment received (topic ids)
    unresolved = false,  -- a topic id of the target not in the metadata yet
    conn = nil,          -- the coordinator's connection
    req = nil,           -- the heartbeat in flight: {conn=, corr=}
    hb_next = 0,
    hb_interval = opts.heartbeat_interval_ms or 5000,
    retry_at = 0,
    attempts = 0,
    error = nil,         -- {err, code, kafka_code} once failed
    fenced = 0,          -- times fenced (rejoined)
    on_state = opts.on_state,
  }, mt)
end

function _M:set_state(s)
  if s == self.state then return end
  local old = self.state
  self.state = s
  if self.on_state then self.on_state(old, s) end
end

function _M:subscribe(topics)
  self.topics = topics
  self.hb_next = 0
end

local function backoff(self)
  self.attempts = self.attempts + 1
  self.retry_at = self.client.now() + self.client:backoff(self.attempts)
  self.hb_next = self.retry_at
end

local function drop_conn(self)
  self.conn = nil
  self.req = nil
end

local function body(self, epoch)
  local b = { group_id = self.group_id, member_id = self.member_id, member_epoch = epoch }
  if epoch ~= LEAVE then
    local key = self.topics and table.concat(self.topics, ",")
    if epoch == 0 or self.sent_topics ~= key then
      b.subscribed_topic_names = self.topics
      self.pending_topics = key
    end
  end
  return b
end

-- Resolves the target's topic ids (Metadata by id for the unknown ones).
local function resolve(self, deadline)
  local client = self.client
  local missing = {}
  for _, t in ipairs(self.target) do
    if not client:topic_name(t.topic_id) then missing[#missing + 1] = t.topic_id end
  end
  if #missing > 0 then client:load_metadata({ topic_ids = missing }, deadline) end
  local list, unresolved = {}, false
  for _, t in ipairs(self.target) do
    local name = client:topic_name(t.topic_id)
    if name then
      for _, p in ipairs(t.partitions or {}) do list[#list + 1] = { topic = name, partition = p } end
    else
      unresolved = true
    end
  end
  table.sort(list, function(a, b)
    if a.topic ~= b.topic then return a.topic < b.topic end
    return a.partition < b.partition
  end)
  self.assignment, self.unresolved = list, unresolved
end

-- reset_conn(): the heartbeat in flight is forgotten and its connection
-- closed (in nginx: opened by a request or timer that ended), the next
-- heartbeat sent at the next step
function _M:reset_conn()
  if self.req then
    -- its answer is lost, and with it maybe a new epoch and the assignment
    -- (the coordinator sends an assignment once): the next heartbeat joins
    -- again (epoch 0, same member id), answered with the whole assignment
    self.resync = true
    self.sent_topics = nil
    self.hb_next = 0
  end
  if self.conn then self.conn:close("its nginx request or timer ended") end
  drop_conn(self)
end

-- rejoin(): epoch 0, same member id, nothing assigned until the answer
function _M:rejoin()
  self.fenced = self.fenced + 1
  drop_conn(self)
  self.epoch = 0
  self.sent_topics = nil
  self.assignment, self.target = {}, nil
  self:set_state("fenced")
  self:set_state("unjoined")
  self.hb_next = 0
end

local function on_answer(self, resp, deadline)
  local ec = resp.error_code
  if ec == errors.NONE then
    self.attempts = 0
    self.resync = nil
    self.epoch = resp.member_epoch
    self.sent_topics = self.pending_topics or self.sent_topics
    if resp.heartbeat_interval_ms and resp.heartbeat_interval_ms > 0 then self.hb_interval = resp.heartbeat_interval_ms end
    self.hb_next = self.hb_sent + self.hb_interval
    if resp.assignment then
      self.target = resp.assignment.topic_partitions or {}
      resolve(self, deadline)
    elseif self.unresolved then
      resolve(self, deadline)
    end
    self:set_state("stable")
    return
  end
  local e = errors.info(ec)
  if ec == errors.FENCED_MEMBER_EPOCH or ec == errors.UNKNOWN_MEMBER_ID then return self:rejoin() end
  if COORDINATOR_MOVED[ec] or e.retriable then
    if COORDINATOR_MOVED[ec] then drop_conn(self) end
    backoff(self)
    if self.state == "joining" then self:set_state("unjoined") end
    return
  end
  self.error = { ("ShareGroupHeartbeat: %s (%s)"):format(e.name, tostring(resp.error_message or e.message)),
    "group", ec }
  self.assignment = {}
  self:set_state("failed")
end

local function send(self, deadline, epoch)
  local client = self.client
  if not self.conn or not self.conn:is_connected() then
    local c, err, code = client:find_coordinator(self.group_id, 0, deadline)
    if not c then return nil, err, code end
    self.conn = c
  end
  local v, err, code = self.conn:version(API.ShareGroupHeartbeat)
  if not v then return nil, err, code end
  self.hb_sent = client.now()
  local corr
  corr, err, code = self.conn:send(API.ShareGroupHeartbeat, v, body(self, epoch), { deadline = deadline })
  if not corr then return nil, err, code end
  self.req = { conn = self.conn, corr = corr }
  return true
end

-- step(deadline): one turn: reads the heartbeat's answer if it came (waiting
-- for it until deadline while joining), sends the next heartbeat when due.
function _M:step(deadline)
  local st = self.state
  if st == "failed" or st == "left" or st == "leaving" or not self.topics then return end
  local client = self.client
  if self.req then
    local r = self.req
    local wait = (st == "joining") and deadline or client.now()
    local resp, _, code = r.conn:receive(r.corr, wait)
    if not resp then
      if code == "timeout" and r.conn:waiting(r.corr) then return end
      drop_conn(self)
      backoff(self)
      if self.state == "joining" then self:set_state("unjoined") end
      return
    end
    self.req = nil
    on_answer(self, resp, deadline)
  end
  local now = client.now()
  if not self.req and now >= self.hb_next and now >= self.retry_at and self.state ~= "failed" then
    local ok = send(self, deadline, self.resync and 0 or self.epoch)
    if not ok then
      drop_conn(self)
      backoff(self)
      return
    end
    if self.state == "unjoined" then
      self:set_state("joining")
      return self:step(deadline)
    end
  end
end

-- next_due(): when step has something to do
function _M:next_due()
  if self.req then return self.client.now() + 10 end
  return math.max(self.hb_next, self.retry_at)
end

-- leave(deadline): the leave heartbeat (epoch -1); the coordinator releases
-- what the member still holds and gives its partitions to the others
function _M:leave(deadline)
  if self.req then
    self.req.conn:receive(self.req.corr, deadline)
    self.req = nil
  end
  local ok = true
  if self.epoch > 0 then
    self:set_state("leaving")
    local conn = self.conn
    if not conn then conn = self.client:find_coordinator(self.group_id, 0, deadline) end
    local resp = conn and conn:request(API.ShareGroupHeartbeat, body(self, LEAVE), { deadline = deadline })
    self.left = resp and resp.error_code or false
    ok = resp ~= nil
  end
  self.epoch = 0
  self.assignment = {}
  self:set_state("left")
  return ok
end

return _M
