-- kafka.group.consumer_protocol: the consumer group protocol of KIP-848
-- (Kafka 4.0+): one ConsumerGroupHeartbeat request carries everything, the
-- coordinator assigns (server side), the member reconciles toward its
-- target assignment. Methods of a kafka.group member (states in
-- kafka.group).
--
--   unjoined --heartbeat(epoch 0)--> joining --> stable
--   each answer may carry the target assignment (topic ids, resolved to names
--   through Metadata): reconciling revokes what is not in it first (auto commit,
--   on_revoke) and acknowledges at once with the next heartbeat (the
--   partitions owned now), then assigns what is new (on_assign)
--   FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: partitions lost (on_lost), rejoin
--     with epoch 0 and the same member id
--   leave: epoch -1 (a static member: -2, it keeps its assignment until its
--     session times out, and the same group_instance_id gets it back)
local proto = require "kafka.proto"
local group = require "kafka.group"
local offsets_mod = require "kafka.offsets"

local errors = proto.errors
local API = proto.api
local ipairs, pairs, tostring = ipairs, pairs, tostring
local math, table = math, table

local _M = { NAME = "consumer" }

local LEAVE, LEAVE_STATIC = -1, -2

function _M.init(m)
  m.member_id = group.uuid()
  m.epoch = 0
  m.req = nil
  m.hb_next = 0
  m.hb_interval = m.cfg.heartbeat_interval_ms
  m.target = nil            -- the last assignment received: {{topic_id=, partitions=}...}
  m.unresolved = false      -- the target names topic ids not in the metadata yet
  m.sent_sub = nil          -- the subscription last sent (sent again only when it changed)
  m.meta_next = 0
end

function _M.cooperative() return true end

function _M.identity(m)
  if m.epoch <= 0 then return nil end
  return { generation = m.epoch, member_id = m.member_id, instance_id = m.instance_id }
end

function _M.rejoin(m)
  m:drop_request("rejoining")
  m.epoch = 0
  m.sent_sub = nil
  m:set_state("unjoined")
  m.retry_at = 0
end

_M.rejoin_fresh = _M.rejoin

function _M.commit_error(m, kcode)
  if kcode == errors.FENCED_MEMBER_EPOCH or kcode == errors.UNKNOWN_MEMBER_ID then
    m:lost()
    _M.rejoin(m)
  elseif kcode == errors.STALE_MEMBER_EPOCH then
    m.hb_next = 0 -- a heartbeat brings the current epoch
  end
end

-- The owned partitions by topic id (what the coordinator checks revocations by).
local function owned_by_id(m)
  local out = {}
  for _, t in ipairs(group.by_topic(m:owned_list())) do
    local info = m.client.topics[t.topic]
    if info and info.topic_id then out[#out + 1] = { topic_id = info.topic_id, partitions = t.partitions } end
  end
  return out
end

local function heartbeat_body(m, leaving)
  local body = { group_id = m.group_id, member_id = m.member_id, member_epoch = leaving or m.epoch,
    instance_id = m.instance_id }
  if leaving then return body end
  local sub = m.sub
  local key = (sub.regex and ("re:" .. sub.regex)) or ("t:" .. table.concat(m.topics, ","))
  if m.epoch == 0 or m.sent_sub ~= key then
    -- the first heartbeat (and any after a change) says everything
    body.rebalance_timeout_ms = m.cfg.rebalance_timeout_ms
    body.server_assignor = m.cfg.group_remote_assignor
    if sub.regex then
      body.subscribed_topic_regex = sub.regex
    else
      body.subscribed_topic_names = m.topics
    end
    m.pending_sub = key
  end
  body.topic_partitions = owned_by_id(m)
  return body
end

-- (a pattern's topics are asked without waiting past until_t: pending,
-- the heartbeat goes with the names known, but the first one waits for them)
local function send_heartbeat(m, now, until_t)
  if m.sub and not m.sub.regex and (m.epoch == 0 or now >= m.meta_next) and m.sub.pattern then
    local resp, _, code = m:metadata("metadata", until_t)
    if resp then m.topics = m:topic_names(resp) end
    if code == "pending" and m.epoch == 0 then
      m.hb_next = now + 10
      if m.state == "unjoined" then m.retry_at = m.hb_next end
      return false
    end
    if code ~= "pending" then m.meta_next = now + m.client.metadata_max_age_ms end
  elseif m.sub and m.sub.topics then
    m.topics = m.sub.topics
  end
  m.hb_sent = now
  local ok, _, code = m:send(API.ConsumerGroupHeartbeat, heartbeat_body(m), 0, "heartbeat", until_t)
  if not ok then
    if code == "pending" then
      m.hb_next = now + 10
      if m.state == "unjoined" then m.retry_at = m.hb_next end
    else
      m:backoff()
      m.hb_next = m.retry_at
    end
    return false
  end
  if m.state == "unjoined" then m:set_state("joining") end
  return true
end

-- Resolves the target's topic ids to names (Metadata by id when unknown,
-- asked without waiting past until_t: the names still unknown then are
-- "unresolved", and the next heartbeat's answer tries again).
local function resolve(m, target, until_t)
  local client = m.client
  local names, missing = {}, {}
  for _, t in ipairs(target) do
    local name = client:topic_name(t.topic_id)
    if name then names[t.topic_id] = name else missing[#missing + 1] = t.topic_id end
  end
  if #missing > 0 then
    m:metadata("ids", until_t, nil, missing)
    for _, t in ipairs(target) do
      if not names[t.topic_id] then names[t.topic_id] = client:topic_name(t.topic_id) end
    end
  end
  local list, unresolved = {}, false
  for _, t in ipairs(target) do
    local name = names[t.topic_id]
    if name then
      for _, p in ipairs(t.partitions or {}) do list[#list + 1] = { topic = name, partition = p } end
    else
      unresolved = true
    end
  end
  return list, unresolved
end

-- reconcile(): revoke what the target no longer has, acknowledge, assign
-- what it adds.
local function reconcile(m, until_t)
  local list, unresolved = resolve(m, m.target, until_t)
  m.unresolved = unresolved
  local want = {}
  for _, tp in ipairs(list) do want[group.key(tp.topic, tp.partition)] = tp end
  local revoked = {}
  for k, tp in pairs(m.owned) do
    if not want[k] then revoked[#revoked + 1] = tp end
  end
  if #revoked > 0 then
    m:set_state("reconciling")
    m:revoked(revoked)
  end
  local added = {}
  for k, tp in pairs(want) do
    if not m.owned[k] then added[#added + 1] = tp end
  end
  if #added > 0 then
    m:set_state("reconciling")
    m:assigned(added)
  end
  -- the coordinator learns what the member owns now at once
  if #revoked > 0 or #added > 0 then m.hb_next = 0 end
  m:set_state("stable")
end

local function on_heartbeat(m, resp, until_t)
  local ec = resp.error_code
  if ec == errors.NONE then
    m.attempts = 0
    if resp.member_id and resp.member_id ~= "" then m.member_id = resp.member_id end
    m.epoch = resp.member_epoch
    m.sent_sub = m.pending_sub or m.sent_sub
    if resp.heartbeat_interval_ms and resp.heartbeat_interval_ms > 0 then m.hb_interval = resp.heartbeat_interval_ms end
    m.hb_next = m.hb_sent + m.hb_interval
    if m.state == "joining" then m:set_state("stable") end
    if resp.assignment then
      m.target = resp.assignment.topic_partitions or {}
      reconcile(m, until_t)
    elseif m.unresolved and m.target then
      reconcile(m, until_t)
    end
    return
  end
  local e = errors.info(ec)
  if ec == errors.FENCED_MEMBER_EPOCH or ec == errors.UNKNOWN_MEMBER_ID then
    m:lost()
    return _M.rejoin(m)
  end
  if ec == errors.UNRELEASED_INSTANCE_ID then
    -- the previous holder of this group_instance_id has not left yet
    m:set_state("unjoined")
    m:backoff()
    return
  end
  if ec == errors.FENCED_INSTANCE_ID then
    m:lost()
    return m:fatal("ConsumerGroupHeartbeat: FENCED_INSTANCE_ID", "fenced", ec, "fenced")
  end
  if offsets_mod.COORDINATOR_MOVED[ec] or e.retriable then
    m.offsets:answer(ec)
    m:backoff()
    m.hb_next = m.retry_at
    if m.state == "joining" then m:set_state("unjoined") end
    return
  end
  m:lost()
  m:fatal(("ConsumerGroupHeartbeat: %s (%s)"):format(e.name, tostring(resp.error_message or e.message)), "group", ec)
end

function _M.step(m, until_t)
  local client = m.client
  local now = client.now()
  local st = m.state
  if st == "fenced" or st == "failed" or st == "closed" or st == "leaving" then return end
  if st == "unjoined" and (not m.sub or now < m.retry_at) then return end
  if m.req then
    local resp, _, code = m:await(st == "joining" and until_t or now)
    if not resp then
      if code ~= "timeout" then
        m:backoff()
        m.hb_next = m.retry_at
        if m.state == "joining" then m:set_state("unjoined") end
      end
      return
    end
    on_heartbeat(m, resp, until_t)
    now = client.now()
  end
  if m.state == "unjoined" and now >= m.retry_at and m.sub then
    send_heartbeat(m, now, until_t)
    if m.state == "joining" then return _M.step(m, until_t) end
    return
  end
  if (m.state == "stable") and not m.req and now >= m.hb_next then send_heartbeat(m, now, until_t) end
end

function _M.next_due(m)
  local st = m.state
  local now = m.client.now()
  if m.req or m:asking_any() then return now + 10 end
  if st == "stable" then return m.hb_next end
  if st == "unjoined" then return m.sub and math.max(now, m.retry_at) or math.huge end
  return math.huge
end

-- leave(reason, deadline): the leave heartbeat (epoch -1, static members -2)
function _M.leave(m, _, deadline)
  if m.req then
    -- the heartbeat in flight is answered first (its answer is not used)
    m:await(deadline)
  end
  if m.epoch > 0 or m.state ~= "unjoined" then
    m:set_state("leaving")
    local resp = m:request_sync(API.ConsumerGroupHeartbeat,
      heartbeat_body(m, m.instance_id and LEAVE_STATIC or LEAVE), deadline)
    m.left = resp and resp.error_code or false
  end
  m.epoch = 0
  m.sent_sub = nil
  m:set_state("unjoined")
end

return _M
