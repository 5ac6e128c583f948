-- kafka.group.classic: the classic group protocol (JoinGroup, SyncGroup,
-- Heartbeat, LeaveGroup) with client-side assignment by the leader.
-- Methods of a kafka.group member (see kafka.group for the states).
--
--   unjoined --JoinGroup--> joining --(leader assigns)--> SyncGroup --> syncing --> stable
--   assigning: the JoinGroup answered, the leader's metadata for its assignment (or the
--           SyncGroup's send) pending: the next step goes on
--   joining: MEMBER_ID_REQUIRED (KIP-394): join again at once with the member id given
--   stable: Heartbeat every heartbeat_interval_ms; REBALANCE_IN_PROGRESS -> rejoin
--           (eager strategies revoke everything first, cooperative ones keep their
--           partitions and revoke only those the new assignment moves, then rejoin
--           once more so the moved partitions reach their new member)
--   ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: the partitions are lost (on_lost), rejoin
--           (UNKNOWN_MEMBER_ID with a new member id)
--   FENCED_INSTANCE_ID: fenced (another member has this group_instance_id)
local proto = require "kafka.proto"
local group = require "kafka.group"
local assignors = require "kafka.group.assignors"
local offsets_mod = require "kafka.offsets"

local errors = proto.errors
local API = proto.api
local ipairs, pairs, tostring = ipairs, pairs, tostring
local math = math

local _M = { NAME = "classic" }

local SUB_VERSION = 3       -- ConsumerProtocolSubscription: topics, user_data, owned partitions, generation, rack
local ASSIGN_VERSION = 3

function _M.init(m)
  m.member_id = ""
  m.generation = -1
  m.protocol_name = nil
  m.leader_id = nil
  m.req = nil
  m.hb_next = 0
  m.need_rejoin = false
  m.snapshot = nil          -- {[topic] = partitions} the member's subscription had when it joined
  m.join_meta = nil         -- the metadata of the join under way (kept while the coordinator is found)
  m.join_resp = nil         -- the leader's JoinGroup answer while its assignment waits for metadata
  m.meta_next = 0
  m.strategies = m.cfg.partition_assignment_strategy
end

function _M.cooperative(m)
  local name = m.protocol_name or m.strategies[1]
  return assignors.COOPERATIVE[name] or false
end

-- identity() -> what a commit carries (nil when the member has no generation)
function _M.identity(m)
  if m.generation < 0 then return nil end
  return { generation = m.generation, member_id = m.member_id, instance_id = m.instance_id }
end

-- rejoin(): join again at the next step (eager strategies revoke first, in _join)
function _M.rejoin(m)
  m:drop_request("rejoining")
  m.join_meta, m.join_resp = nil, nil
  m:set_state("unjoined")
  m.retry_at = 0
end

-- rejoin_fresh(): forget the generation (and the member id) and join again
function _M.rejoin_fresh(m, keep_member_id)
  m.generation = -1
  if not keep_member_id then m.member_id = "" end
  _M.rejoin(m)
end

-- A commit answered with a generation error tells the member to rejoin.
function _M.commit_error(m, kcode)
  if kcode == errors.REBALANCE_IN_PROGRESS then
    if m.state == "stable" then _M.rejoin(m) end
  elseif kcode == errors.ILLEGAL_GENERATION or kcode == errors.UNKNOWN_MEMBER_ID then
    m:lost()
    _M.rejoin_fresh(m, kcode == errors.ILLEGAL_GENERATION)
  end
end

local function subscription(m, topics)
  local owned = {}
  if _M.cooperative(m) then owned = group.by_topic(m:owned_list()) end
  return proto.encode_data("ConsumerProtocolSubscription", SUB_VERSION, {
    topics = topics, owned_partitions = owned, generation_id = m.generation,
  })
end

-- _join(m, until_t): fresh metadata of the subscription, then JoinGroup.
-- Neither waits past until_t: "pending" leaves the member unjoined, and
-- the next step goes on where this one stopped (Member:ask).
function _M._join(m, until_t)
  local client = m.client
  local now = client.now()
  until_t = until_t or now + client.default_api_timeout_ms
  if not _M.cooperative(m) then
    -- eager: everything is given up before joining (Java's onJoinPrepare)
    m:revoked(m:owned_list())
  end
  local resp = m.join_meta
  if not resp then
    local err, code
    resp, err, code = m:metadata("metadata", until_t)
    if not resp then
      if code == "pending" then m.retry_at = now + 10 else m:backoff() end
      return nil, err, code
    end
    m.join_meta = resp
  end
  local topics = m:topic_names(resp)
  m.topics = topics
  local counts = m:topic_counts(resp, topics)
  m.snapshot = counts
  m.meta_next = now + client.metadata_max_age_ms
  local protocols = {}
  local meta = subscription(m, topics)
  for i, name in ipairs(m.strategies) do protocols[i] = { name = name, metadata = meta } end
  local ok, err, code = m:send(API.JoinGroup, {
    group_id = m.group_id, session_timeout_ms = m.cfg.session_timeout_ms,
    rebalance_timeout_ms = m.cfg.rebalance_timeout_ms, member_id = m.member_id,
    group_instance_id = m.instance_id, protocol_type = "consumer", protocols = protocols,
    reason = m.join_reason,
  }, m.cfg.rebalance_timeout_ms + 5000, "join", until_t)
  if not ok then
    if code == "pending" then
      m.retry_at = now + 10
    else
      m.join_meta = nil
      m:backoff()
    end
    return nil, err, code
  end
  m:set_state("joining")
  return true
end

-- The leader's assignment: every member's subscription decoded, fresh
-- metadata for all their topics (asked without waiting past until_t; a
-- partition count from the join's metadata may be a rebalance old), the
-- chosen assignor.
local function assign(m, resp, until_t)
  local members, all, seen = {}, {}, {}
  for _, mm in ipairs(resp.members or {}) do
    local _, sub = proto.decode_data("ConsumerProtocolSubscription", mm.metadata or "")
    sub = sub or { topics = {} }
    local owned = {}
    for _, t in ipairs(sub.owned_partitions or {}) do
      for _, p in ipairs(t.partitions or {}) do owned[#owned + 1] = { topic = t.topic, partition = p } end
    end
    members[#members + 1] = { member_id = mm.member_id, instance_id = mm.group_instance_id, topics = sub.topics or {},
      owned = owned, generation = sub.generation_id }
    for _, t in ipairs(sub.topics or {}) do
      if not seen[t] then
        seen[t] = true
        all[#all + 1] = t
      end
    end
  end
  local meta, err, code = m:metadata("assign", until_t, all)
  if not meta then return nil, err, code end
  local counts = m:topic_counts(meta, all)
  local fn = assignors[resp.protocol_name]
  if not fn then return nil, "unknown assignor " .. tostring(resp.protocol_name), "group" end
  local result = fn(members, counts)
  local list = {}
  for _, mm in ipairs(members) do
    list[#list + 1] = { member_id = mm.member_id, assignment = proto.encode_data("ConsumerProtocolAssignment",
      ASSIGN_VERSION, { assigned_partitions = group.by_topic(result[mm.member_id] or {}) }) }
  end
  return list
end

-- lost_membership(m, ec, api) -> true when ec ended this member's
-- membership (SyncGroup and Heartbeat alike): an old generation or an
-- unknown member id rejoins afresh, a fenced static member stops for good.
local function lost_membership(m, ec, api)
  if ec == errors.UNKNOWN_MEMBER_ID or ec == errors.ILLEGAL_GENERATION then
    m:lost()
    _M.rejoin_fresh(m, ec == errors.ILLEGAL_GENERATION)
    return true
  end
  if ec == errors.FENCED_INSTANCE_ID then
    m:lost()
    m:fatal(api .. ": FENCED_INSTANCE_ID", "fenced", ec, "fenced")
    return true
  end
  return false
end

local function coordinator_moved(m, ec)
  if offsets_mod.COORDINATOR_MOVED[ec] then
    m.offsets:invalidate()
    m:drop_request("coordinator moved")
    return true
  end
  return false
end

-- The leader's assignment (when this member leads) and SyncGroup; the
-- JoinGroup answer stays in m.join_resp, in state "assigning", while the
-- assignment's metadata or the coordinator's connection is pending.
local function finish_join(m, until_t)
  local resp = m.join_resp
  local assignments = {}
  if resp.leader == resp.member_id and not resp.skip_assignment then
    local err, code
    assignments, err, code = assign(m, resp, until_t)
    if not assignments then
      if code == "pending" then return m:set_state("assigning") end
      m.join_resp = nil
      m:set_state("unjoined")
      m:backoff()
      return nil, err, code
    end
  end
  local ok, err, code = m:send(API.SyncGroup, {
    group_id = m.group_id, generation_id = m.generation, member_id = m.member_id, group_instance_id = m.instance_id,
    protocol_type = "consumer", protocol_name = m.protocol_name, assignments = assignments,
  }, 0, "sync", until_t)
  if not ok and code == "pending" then return m:set_state("assigning") end
  m.join_resp = nil
  if not ok then
    m:set_state("unjoined")
    m:backoff()
    return nil, err, code
  end
  m:set_state("syncing")
end

local function on_join(m, resp, until_t)
  local ec = resp.error_code
  if ec == errors.MEMBER_ID_REQUIRED then
    m.member_id = resp.member_id
    m:set_state("unjoined")
    m.retry_at = 0
    return _M._join(m, until_t) -- (with the join's metadata, kept for it)
  end
  m.join_meta = nil
  if ec == errors.UNKNOWN_MEMBER_ID then
    m.member_id = ""
    m:set_state("unjoined")
    m.retry_at = 0
    return
  end
  if ec == errors.FENCED_INSTANCE_ID then
    m:lost()
    return m:fatal("JoinGroup: FENCED_INSTANCE_ID (another member has group_instance_id " .. tostring(m.instance_id)
      .. ")", "fenced", ec, "fenced")
  end
  if ec ~= errors.NONE then
    local e = errors.info(ec)
    if coordinator_moved(m, ec) or e.retriable or ec == errors.REBALANCE_IN_PROGRESS then
      m:set_state("unjoined")
      m:backoff()
      return
    end
    m:lost()
    return m:fatal("JoinGroup: " .. e.name .. " (" .. e.message .. ")", "group", ec)
  end
  m.attempts = 0
  m.member_id = resp.member_id
  m.generation = resp.generation_id
  m.protocol_name = resp.protocol_name
  m.leader_id = resp.leader
  m.join_resp = resp
  return finish_join(m, until_t)
end

local function on_sync(m, resp)
  local ec = resp.error_code
  if ec == errors.REBALANCE_IN_PROGRESS then
    m:set_state("unjoined")
    m.retry_at = 0
    return
  end
  if lost_membership(m, ec, "SyncGroup") then return end
  if ec ~= errors.NONE then
    coordinator_moved(m, ec)
    m:set_state("unjoined")
    m:backoff()
    return
  end
  local list = {}
  if resp.assignment and #resp.assignment > 0 then
    local _, a = proto.decode_data("ConsumerProtocolAssignment", resp.assignment)
    list = group.flatten(a and a.assigned_partitions)
  end
  local now = m.client.now()
  m:set_state("stable")
  m.hb_next = now + m.cfg.heartbeat_interval_ms
  local new = {}
  for _, tp in ipairs(list) do new[group.key(tp.topic, tp.partition)] = tp end
  local revoked = {}
  for k, tp in pairs(m.owned) do
    if not new[k] then revoked[#revoked + 1] = tp end
  end
  if #revoked > 0 then
    -- cooperative: the moved partitions are given up, then a rejoin hands them over
    m:revoked(revoked)
    m.need_rejoin = true
  end
  m:assigned(list)
  if m.need_rejoin then
    m.need_rejoin = false
    m.join_reason = "partitions revoked"
    _M.rejoin(m)
  end
end

local function on_heartbeat(m, resp)
  local ec = resp.error_code
  local now = m.client.now()
  if ec == errors.NONE then
    m.hb_next = m.hb_sent + m.cfg.heartbeat_interval_ms
    return
  end
  if ec == errors.REBALANCE_IN_PROGRESS then
    m.join_reason = "rebalance in progress"
    return _M.rejoin(m)
  end
  if lost_membership(m, ec, "Heartbeat") then return end
  coordinator_moved(m, ec)
  m.hb_next = now + m.client:backoff(1)
end

-- The subscription's topics or partition counts changed: rejoin.
-- (its metadata asked without waiting past until_t: pending, the next
-- step takes the answer)
local function metadata_changed(m, now, until_t)
  if now < m.meta_next then return false end
  local client = m.client
  local resp, _, code = m:metadata("metadata", until_t)
  if not resp and code == "pending" then return false end
  m.meta_next = now + client.metadata_max_age_ms
  if not resp then return false end
  local topics = m:topic_names(resp)
  local counts = m:topic_counts(resp, topics)
  local old = m.snapshot or {}
  for t, n in pairs(counts) do
    if old[t] ~= n then return true end
  end
  for t in pairs(old) do
    if not counts[t] then return true end
  end
  return false
end

-- step(until_t): one turn of the state machine; waits on a group request
-- in flight until until_t at most.
function _M.step(m, until_t)
  local client = m.client
  local now = client.now()
  local st = m.state
  if st == "unjoined" then
    if not m.sub or now < m.retry_at then return end
    _M._join(m, until_t)
    st = m.state
  end
  if st == "assigning" then
    -- the leader's assignment or the SyncGroup is pending (finish_join)
    finish_join(m, until_t)
    if m.state == "syncing" then return _M.step(m, until_t) end
    return
  end
  if st == "joining" or st == "syncing" then
    local resp, _, code = m:await(until_t)
    if not resp then
      if code ~= "timeout" then
        m.join_meta = nil
        m:set_state("unjoined")
        m:backoff()
      end
      return
    end
    if st == "joining" then on_join(m, resp, until_t) else on_sync(m, resp) end
    if m.state == "joining" or m.state == "syncing" then return _M.step(m, until_t) end
    return
  end
  if st == "stable" then
    if m.req then
      local resp, _, code = m:await(now)
      if resp then
        on_heartbeat(m, resp)
      elseif code ~= "timeout" then
        m.hb_next = now + client:backoff(1)
      end
      if m.state ~= "stable" then return _M.step(m, until_t) end
      return
    end
    if metadata_changed(m, now, until_t) then
      m.join_reason = "metadata changed"
      _M.rejoin(m)
      return _M.step(m, until_t)
    end
    if now >= m.hb_next then
      m.hb_sent = now
      local ok, _, code = m:send(API.Heartbeat, { group_id = m.group_id, generation_id = m.generation,
        member_id = m.member_id, group_instance_id = m.instance_id }, 0, "heartbeat", until_t)
      -- (pending: the coordinator is being found or connected; tried again shortly)
      if not ok then m.hb_next = now + (code == "pending" and 10 or client:backoff(1)) end
    end
  end
end

-- next_due() -> when the member needs the next step
function _M.next_due(m)
  local st = m.state
  local now = m.client.now()
  if m:asking_any() then return now + 10 end -- an answer a later step takes (Member:ask)
  if st == "stable" then
    if m.req then return now + 10 end
    return math.min(m.hb_next, m.meta_next)
  end
  if st == "unjoined" then return m.sub and math.max(now, m.retry_at) or math.huge end
  if st == "joining" or st == "syncing" or st == "assigning" then return now + 10 end
  return math.huge
end

-- leave(reason, deadline): LeaveGroup (dynamic members only: a static
-- member keeps its place until its session times out, as Java's does)
function _M.leave(m, reason, deadline)
  m:drop_request("leaving")
  if m.member_id ~= "" and not m.instance_id then
    m:set_state("leaving")
    local resp = m:request_sync(API.LeaveGroup, { group_id = m.group_id, member_id = m.member_id,
      members = { { member_id = m.member_id, group_instance_id = m.instance_id, reason = reason } } }, deadline)
    m.left = resp and resp.error_code or false
  end
  m.generation = -1
  m.member_id = ""
  m:set_state("unjoined")
end

return _M
