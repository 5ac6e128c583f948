-- kafka.share.session: one share session (KIP-932) with one broker, as
-- Kafka's ShareSessionHandler keeps it: the partitions the broker has in
-- the session and the epoch of the next request.
--
--   epoch 0 opens a session (every partition listed, no acknowledgements
--   allowed in it); each answered request moves the epoch on (1, 2, ...,
--   2^31-1, then 1); later requests list only the partitions added, those
--   with acknowledgements, and the ones to forget; epoch -1 closes it.
--   SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH (and any other
--   top-level error or a lost connection): the next request opens a new
--   session (epoch 0).
local ipairs, pairs, setmetatable = ipairs, pairs, setmetatable
local table = table

local _M = {}
local mt = { __index = _M }

local MAX_EPOCH = 2147483647

function _M.new(node_id)
  return setmetatable({
    node_id = node_id,
    epoch = 0,
    parts = {},      -- key -> {topic=, partition=, topic_id=} in the session
    req = nil,       -- the request in flight: {conn=, corr=, api=, acks=, epoch=}
  }, mt)
end

local function key(topic, partition) return topic .. "\0" .. partition end
_M.key = key

-- The session is gone: the next request opens a new one.
function _M:reset()
  self.epoch = 0
  self.parts = {}
end

-- An answer without a top-level error: the next epoch.
function _M:answered()
  if self.epoch == MAX_EPOCH then self.epoch = 1 else self.epoch = self.epoch + 1 end
end

-- Groups [{topic_id=, partition=, ...}] by topic id, in order.
local function by_topic(items, make)
  local out, idx = {}, {}
  for _, it in ipairs(items) do
    local t = idx[it.topic_id]
    if not t then
      t = { topic_id = it.topic_id, partitions = {} }
      idx[it.topic_id] = t
      out[#out + 1] = t
    end
    t.partitions[#t.partitions + 1] = make(it)
  end
  return out
end
_M.by_topic = by_topic

-- topics(want, acks): the ShareFetch topics and forgotten topics for the
-- next request. want: {{topic=, partition=, topic_id=}...} this broker
-- leads and the member is assigned; acks: key -> {topic=, partition=,
-- topic_id=, batches=} (left out of a request that opens a session).
-- Returns topics, forgotten, the acks sent.
function _M:topics(want, acks)
  local items, forgotten = {}, {}
  local wanted = {}
  for _, tp in ipairs(want) do wanted[key(tp.topic, tp.partition)] = tp end
  local sent_acks = {}
  if self.epoch == 0 then
    -- (acknowledgements in a request opening a session: INVALID_REQUEST)
    self.parts = {}
    for k, tp in pairs(wanted) do self.parts[k] = tp end
    for _, tp in ipairs(want) do items[#items + 1] = { topic_id = tp.topic_id, partition = tp.partition } end
  else
    for k, tp in pairs(self.parts) do
      if not wanted[k] then
        forgotten[#forgotten + 1] = { topic_id = tp.topic_id, partition = tp.partition }
        self.parts[k] = nil
      end
    end
    local listed = {}
    for _, tp in ipairs(want) do
      local k = key(tp.topic, tp.partition)
      if not self.parts[k] or acks[k] then
        self.parts[k] = tp
        listed[k] = true
        items[#items + 1] = { topic_id = tp.topic_id, partition = tp.partition, batches = acks[k] and acks[k].batches }
        if acks[k] then sent_acks[k] = acks[k] end
      end
    end
    -- acknowledgements of partitions this member no longer fetches from here
    for k, a in pairs(acks) do
      if not listed[k] and self.parts[k] == nil and a.node_id == self.node_id then
        items[#items + 1] = { topic_id = a.topic_id, partition = a.partition, batches = a.batches }
        sent_acks[k] = a
      end
    end
  end
  local topics = by_topic(items, function(it)
    return { partition_index = it.partition, acknowledgement_batches = it.batches or {} }
  end)
  local fg = {}
  for _, t in ipairs(by_topic(forgotten, function(it) return it.partition end)) do
    fg[#fg + 1] = { topic_id = t.topic_id, partitions = t.partitions }
  end
  table.sort(fg, function(a, b) return a.topic_id < b.topic_id end)
  return topics, fg, sent_acks
end

return _M
