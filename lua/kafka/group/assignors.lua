-- kafka.group.assignors: the classic protocol's client-side assignors, run
-- by the group leader. Each takes
--   members: {{member_id=, instance_id=, topics = {names}, owned = {{topic=, partition=}...},
--              generation=}...}
--   counts:  {[topic] = number of partitions}
-- and returns {[member_id] = {{topic=, partition=}...}} (sorted by topic,
-- then partition). Members are ordered as Kafka's Java client orders them:
-- by group_instance_id when both have one, else by member_id.
--   range               per topic, consecutive ranges; the first members get one more
--   roundrobin          every partition of every topic in turn, skipping members
--                       not subscribed to its topic
--   cooperative-sticky  balanced, keeps what each member owns where it can; a
--                       partition that moves to another member is left out of this
--                       assignment (its owner revokes it and rejoins; the
--                       follow-up rebalance gives it to its new member)
local table, ipairs, pairs = table, ipairs, pairs

local _M = {}

local function member_less(a, b)
  if a.instance_id and b.instance_id and a.instance_id ~= b.instance_id then return a.instance_id < b.instance_id end
  return a.member_id < b.member_id
end

local function tp_less(a, b)
  if a.topic ~= b.topic then return a.topic < b.topic end
  return a.partition < b.partition
end

local function key(topic, partition) return topic .. "\0" .. partition end

local function sorted_members(members)
  local list = {}
  for i, m in ipairs(members) do list[i] = m end
  table.sort(list, member_less)
  return list
end

local function subscribed(m, topic)
  if not m.topic_set then
    m.topic_set = {}
    for _, t in ipairs(m.topics) do m.topic_set[t] = true end
  end
  return m.topic_set[topic]
end

local function empty_result(members)
  local out = {}
  for _, m in ipairs(members) do out[m.member_id] = {} end
  return out
end

local function finish(out)
  for _, list in pairs(out) do table.sort(list, tp_less) end
  return out
end

local function all_topics(members, counts)
  local set, list = {}, {}
  for _, m in ipairs(members) do
    for _, t in ipairs(m.topics) do
      if counts[t] and not set[t] then
        set[t] = true
        list[#list + 1] = t
      end
    end
  end
  table.sort(list)
  return list
end

function _M.range(members, counts)
  local out = empty_result(members)
  local sorted = sorted_members(members)
  for _, topic in ipairs(all_topics(members, counts)) do
    local subs = {}
    for _, m in ipairs(sorted) do
      if subscribed(m, topic) then subs[#subs + 1] = m end
    end
    local n, k = counts[topic], #subs
    local per = math.floor(n / k)
    local extra = n - per * k
    local p = 0
    for i, m in ipairs(subs) do
      local len = per + (i <= extra and 1 or 0)
      for _ = 1, len do
        local l = out[m.member_id]
        l[#l + 1] = { topic = topic, partition = p }
        p = p + 1
      end
    end
  end
  return finish(out)
end

function _M.roundrobin(members, counts)
  local out = empty_result(members)
  local sorted = sorted_members(members)
  local i = 0
  for _, topic in ipairs(all_topics(members, counts)) do
    for p = 0, counts[topic] - 1 do
      -- the next member (circularly) subscribed to this topic
      for _ = 1, #sorted do
        i = i % #sorted + 1
        local m = sorted[i]
        if subscribed(m, topic) then
          local l = out[m.member_id]
          l[#l + 1] = { topic = topic, partition = p }
          break
        end
      end
    end
  end
  return finish(out)
end

-- The sticky assignment: what each member owns stays where the balance
-- allows (a partition claimed by two members goes to the one with the
-- newer generation), the rest goes to the least loaded subscribed member.
local function sticky(members, counts)
  local sorted = sorted_members(members)
  local out = empty_result(members)
  local load = {}
  local total, eligible = 0, 0
  local all = {}
  for _, topic in ipairs(all_topics(members, counts)) do
    for p = 0, counts[topic] - 1 do
      all[#all + 1] = { topic = topic, partition = p }
      total = total + 1
    end
  end
  for _, m in ipairs(sorted) do
    load[m.member_id] = 0
    if #m.topics > 0 then eligible = eligible + 1 end
  end
  -- who owns what (the newest generation wins a conflict)
  local owner = {}
  for _, m in ipairs(sorted) do
    for _, tp in ipairs(m.owned or {}) do
      if counts[tp.topic] and tp.partition < counts[tp.topic] and subscribed(m, tp.topic) then
        local k = key(tp.topic, tp.partition)
        local o = owner[k]
        if not o or (m.generation or -1) > (o.generation or -1) then owner[k] = m end
      end
    end
  end
  -- each member keeps up to its quota: floor(total / eligible), and the
  -- first (total % eligible) members by owned count keep one more
  local floor_q = eligible > 0 and math.floor(total / eligible) or 0
  local extra = total - floor_q * eligible
  local kept = {}
  local by_owned = {}
  for _, m in ipairs(sorted) do
    local list = {}
    for _, tp in ipairs(all) do
      if owner[key(tp.topic, tp.partition)] == m then list[#list + 1] = tp end
    end
    kept[m] = list
    by_owned[#by_owned + 1] = m
  end
  table.sort(by_owned, function(a, b)
    if #kept[a] ~= #kept[b] then return #kept[a] > #kept[b] end
    return member_less(a, b)
  end)
  local quota = {}
  for _, m in ipairs(by_owned) do
    local q = floor_q
    if #m.topics > 0 and extra > 0 and #kept[m] > floor_q then
      q = floor_q + 1
      extra = extra - 1
    end
    quota[m] = q
  end
  -- members that did not get an extra slot by what they own get the rest
  for _, m in ipairs(by_owned) do
    if extra > 0 and #m.topics > 0 and quota[m] == floor_q then
      quota[m] = floor_q + 1
      extra = extra - 1
    end
  end
  local taken = {}
  for _, m in ipairs(sorted) do
    local l = out[m.member_id]
    for _, tp in ipairs(kept[m]) do
      if #l < quota[m] then
        l[#l + 1] = tp
        taken[key(tp.topic, tp.partition)] = true
      end
    end
    load[m.member_id] = #l
  end
  -- the rest to the least loaded subscribed member (ties: member order)
  for _, tp in ipairs(all) do
    if not taken[key(tp.topic, tp.partition)] then
      local best
      for _, m in ipairs(sorted) do
        if subscribed(m, tp.topic) and (not best or load[m.member_id] < load[best.member_id]) then best = m end
      end
      if best then
        local l = out[best.member_id]
        l[#l + 1] = tp
        load[best.member_id] = load[best.member_id] + 1
      end
    end
  end
  return out, owner
end

_M.sticky = function(members, counts) return finish((sticky(members, counts))) end

_M["cooperative-sticky"] = function(members, counts)
  local out, owner = sticky(members, counts)
  -- a partition another member owns now is not handed over in this
  -- rebalance: its owner gives it up first
  for id, list in pairs(out) do
    local keep = {}
    for _, tp in ipairs(list) do
      local o = owner[key(tp.topic, tp.partition)]
      if not o or o.member_id == id then keep[#keep + 1] = tp end
    end
    out[id] = keep
  end
  return finish(out)
end

-- Strategies whose members keep their partitions through a rebalance.
_M.COOPERATIVE = { ["cooperative-sticky"] = true }
_M.NAMES = { "range", "roundrobin", "cooperative-sticky" }

return _M
