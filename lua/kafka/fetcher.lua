-- kafka.fetcher: the fetch half of a consumer: the partitions it reads
-- (one state each: position, high watermark, paused), the fetched data not
-- decoded yet, and the fetch loop (one Fetch per leader, all brokers at
-- once, over the consumer's own connections; a Fetch not answered by a
-- poll's deadline stays in flight for the next poll). kafka.consumer owns
-- one; the group module adds and removes partitions through it.
--
-- Pipelining: when an answer comes, the next Fetch to that broker goes out
-- before the answer is decoded (the broker works while Lua decodes). So a
-- partition has two positions: st.offset, the next offset poll delivers
-- (what a commit stores), and st.fetch_offset, where its next Fetch starts
-- (read from the batch headers of the undecoded answer, proto.records_end;
-- nil while only decoding can tell). st.epoch counts position changes
-- (seek, reset, a dropped answer): an answer or pending data fetched under
-- another epoch is dropped, so data comes in order, never twice, never
-- skipped. At most one undecoded answer per broker waits beside the Fetch
-- in flight: no answer is read while earlier ones are pending.
local proto = require "kafka.proto"
local read_committed = require "kafka.read_committed"
local consumer_batch = require "kafka.consumer_batch"

local errors = proto.errors
local API = proto.api
local math, table = math, table
local setmetatable, tostring, ipairs, pairs, type = setmetatable, tostring, ipairs, pairs, type

local _M = {}
local mt = { __index = _M }

local function pkey(topic, partition) return topic .. "\0" .. partition end
local NO_ID = string.rep("\0", 16) -- the null topic id (a broker without topic ids)
_M.key = pkey

-- A poll's output: poll's array of messages, or poll_batch's list of
-- per-partition batches (kafka.consumer_batch) with nmsg, the messages in
-- them, and by, partition state -> its batch in this poll.
local function count(out) return out.nmsg or #out end
_M.count = count

-- batches_out() -> an empty poll_batch output (count() 0)
function _M.batches_out() return { nmsg = 0, by = {} } end

-- finish(out) -> out without its bookkeeping (poll_batch's result)
function _M.finish(out)
  out.nmsg, out.by = nil, nil
  return out
end

-- new(client, o): o holds the consumer's validated options
function _M.new(client, o)
  local decode_txn -- decode_opts with the batch list (read_committed with aborted transactions)
  if o.isolation_level == 1 then
    decode_txn = {}
    for k, v in pairs(o.decode_opts) do decode_txn[k] = v end
    decode_txn.batches = true
  end
  return setmetatable({
    client = client,
    auto_offset_reset = o.auto_offset_reset,
    fetch_max_wait_ms = o.fetch_max_wait_ms,
    fetch_min_bytes = o.fetch_min_bytes,
    fetch_max_bytes = o.fetch_max_bytes,
    max_partition_fetch_bytes = o.max_partition_fetch_bytes,
    isolation_level = o.isolation_level,
    decode_opts = o.decode_opts,
    decode_txn = decode_txn,
    -- records are decoded per partition (see _partition_result), from
    -- views into the answer's frame (kafka.bytes: no copy)
    fetch_decode = { raw_records = "view" },
    retry_backoff_ms = o.retry_backoff_ms,
    max_poll_records = o.max_poll_records,
    pending = nil, -- fetched partitions not decoded yet: {st=, pr=, epoch=}
    parts = {},   -- array of partition states
    index = {},   -- "topic\0partition" -> state
    pool = {},    -- node id -> this consumer's Fetch connection (see client:broker)
    fetches = {}, -- connection -> the Fetch in flight to it: {conn=, corr=, parts = {st...}, offsets = {[st]=},
                  -- epochs = {[st]=}}
    flist = {},   -- the same, oldest first
  }, mt)
end

-- list_offsets(topic, partition, time) -> offset | nil, err, code: every
-- offset this consumer resolves ("latest", "earliest", a reset) is asked
-- at its isolation level: read_committed starts at the last stable offset,
-- not past records whose transaction is still open.
function _M:list_offsets(topic, partition, time)
  return self.client:list_offsets(topic, partition, time, self.isolation_level)
end

-- state(topic, partition, offset) -> a new partition state (not added)
function _M:new_state(topic, partition, offset)
  return { topic = topic, partition = partition, offset = offset, fetch_offset = offset, epoch = 0,
           fetch_bytes = self.max_partition_fetch_bytes, high_watermark = -1, paused = false,
           set = { topic = topic, partition = partition } }
end

-- set_position(st, offset): the partition is read from offset on (seek, a
-- reset, its first position); what was fetched for the old one, pending or
-- in flight, is dropped (a new epoch).
function _M.set_position(_, st, offset)
  st.offset, st.fetch_offset, st.epoch = offset, offset, st.epoch + 1
end

-- Undecoded data of st was dropped while st stays assigned: fetch again
-- from the delivered position (the data fetched past it is dropped too).
local function rewind(st)
  st.fetch_offset, st.epoch = st.offset, st.epoch + 1
end

-- drop_pending(): forgets the fetched data not decoded yet (pause/resume);
-- its partitions are fetched again from their positions.
function _M:drop_pending()
  for _, it in ipairs(self.pending or {}) do
    if it.st.epoch == it.epoch then rewind(it.st) end
  end
  self.pending = nil
end

-- get(topic, partition) -> the state | nil
function _M:get(topic, partition) return self.index[pkey(topic, partition)] end

-- replace(states): the partitions read from now on (fetches in flight dropped)
function _M:replace(states)
  local index = {}
  for _, st in ipairs(states) do index[pkey(st.topic, st.partition)] = st end
  self:_abandon_fetches()
  self.parts, self.index, self.pending = states, index, nil
end

-- add(states): more partitions (those already there are replaced)
function _M:add(states)
  for _, st in ipairs(states) do
    local k = pkey(st.topic, st.partition)
    local old = self.index[k]
    if old then
      for i, x in ipairs(self.parts) do
        if x == old then
          self.parts[i] = st
          break
        end
      end
    else
      self.parts[#self.parts + 1] = st
    end
    self.index[k] = st
  end
end

-- remove(list of {topic=, partition=}): those partitions are not read any
-- more (an answer in flight or pending for them is dropped when it comes)
function _M:remove(list)
  local drop = {}
  for _, p in ipairs(list) do
    local k = pkey(p.topic, p.partition)
    if self.index[k] then drop[self.index[k]] = true end
    self.index[k] = nil
  end
  local keep = {}
  for _, st in ipairs(self.parts) do
    if not drop[st] then keep[#keep + 1] = st end
  end
  self.parts = keep
end

-- Drops every Fetch in flight (their answers are not wanted any more).
function _M:_abandon_fetches()
  for _, f in ipairs(self.flist) do
    f.conn:abandon(f.corr)
    for _, st in ipairs(f.parts) do st.fetch = nil end
  end
  self.fetches, self.flist = {}, {}
end

-- Handles one partition's fetch result; appends messages to out.
-- Returns nil, err, code, kafka_code for errors the caller must see.
function _M:_partition_result(st, pr, out, room)
  local ec = pr.error_code
  if ec ~= errors.NONE then
    local e = errors.info(ec)
    if ec == errors.OFFSET_OUT_OF_RANGE then
      if self.auto_offset_reset == "error" then
        return nil, ("%s/%d: offset %d out of range"):format(st.topic, st.partition, st.offset), "offset_out_of_range",
          ec
      end
      local off, err, code = self:list_offsets(st.topic, st.partition, self.auto_offset_reset)
      if not off then return nil, err, code end
      self:set_position(st, off)
      return true
    end
    if e.retriable then
      self.client:invalidate(st.topic)
      return true
    end
    return nil, ("%s/%d: %s (%s)"):format(st.topic, st.partition, e.name, e.message), "kafka", ec
  end
  st.high_watermark = pr.high_watermark
  local raw = pr.records
  if not raw or #raw == 0 then return true end
  -- decoded in C straight into `out`: records below the position (a
  -- compressed batch starts early) and control records are left out,
  -- topic/partition/high_watermark set in every message
  local aborted = self.isolation_level == 1 and pr.aborted_transactions
  local opts = aborted and aborted[1] and self.decode_txn or self.decode_opts
  local set = st.set
  set.high_watermark = pr.high_watermark
  -- at most room messages (a rest is left in info.rest), unless aborted
  -- transactions are to be dropped: kafka.read_committed reads a fetch's aborted list
  -- against all of its batches at once
  opts.min_offset = st.offset
  opts.max_records = opts ~= self.decode_txn and room or nil
  local b = out.by and out.by[st] -- poll_batch: records go into the partition's columns
  if out.by and not b then b = consumer_batch.new(st.topic, st.partition, pr.high_watermark) end
  if b then
    b.high_watermark = pr.high_watermark
    opts.columns = b
  else
    opts.into, opts.set = out, set
  end
  local before = b and b.count or #out
  -- (nil, message, code: the framing is broken)
  local res, info, code = proto.decode_records(raw, opts)
  opts.into, opts.set, opts.columns = nil, nil, nil
  pr.rest = res and info.rest
  if not res then
    -- the records' framing is broken: nothing in them is delivered
    if b then
      consumer_batch.truncate(b, before)
    else
      for i = #out, before + 1, -1 do out[i] = nil end
    end
    return nil, ("%s/%d at offset %d: %s"):format(st.topic, st.partition, st.offset, tostring(info)), code or "corrupt"
  end
  if opts == self.decode_txn then -- read_committed
    if b then
      read_committed.drop_aborted_columns(b, before, info.batches, aborted)
    else
      read_committed.drop_aborted(out, before, info.batches, aborted)
    end
  end
  local added = (b and b.count or #out) - before
  if b and added > 0 then
    if not out.by[st] then
      out.by[st] = b
      out[#out + 1] = b
    end
    out.nmsg = out.nmsg + added
  end
  local next_pos = info.next_offset
  if next_pos and next_pos > st.offset then
    st.offset = next_pos
  elseif info.partial and added == 0 then
    -- the first batch is larger than we asked for (old brokers): ask for more
    st.fetch_bytes = math.min(st.fetch_bytes * 2, self.fetch_max_bytes)
  end
  if info.errors then
    -- the batches before a corrupt one are delivered (stop_at_error ends
    -- the messages there), the position stops at it: a corrupt batch is
    -- never skipped silently, and every poll reports it
    return nil, ("%s/%d at offset %d: %s"):format(st.topic, st.partition, st.offset, tostring(info.errors[1])), "corrupt"
  end
  return true
end

-- One error per partition and poll (the latest).
local function add_error(errs, st, err, code, kcode)
  local e
  for i = 1, #errs do
    if errs[i].topic == st.topic and errs[i].partition == st.partition then e = errs[i] end
  end
  if not e then
    e = { topic = st.topic, partition = st.partition }
    errs[#errs + 1] = e
  end
  e.err, e.code, e.kafka_code = err, code, kcode
end

-- A partition whose topic the metadata now gives another id was deleted
-- and created again (KIP-516): its position belongs to a log that is gone.
-- It is reset as auto_offset_reset says ("error": not read until a seek),
-- and errs says so (code "topic_recreated"); the data fetched for the old
-- topic is dropped (the epoch moves).
function _M:_check_topic_ids(errs)
  local topics = self.client.topics
  for _, st in ipairs(self.parts) do
    local t = topics[st.topic]
    local id = t and t.topic_id
    if id and id ~= NO_ID and st.topic_id ~= id then
      if not st.topic_id then
        st.topic_id = id
      else
        local what = ("%s/%d: the topic was deleted and created again (topic id %s, was %s)"):format(st.topic,
          st.partition, tostring(proto.uuid_text(id)), tostring(proto.uuid_text(st.topic_id)))
        if self.auto_offset_reset == "error" then
          st.topic_id, st.fetch_offset, st.epoch = id, nil, st.epoch + 1
          add_error(errs, st, what .. '; auto_offset_reset is "error": seek to read it', "topic_recreated")
        else
          local off, err, code = self:list_offsets(st.topic, st.partition, self.auto_offset_reset)
          if off then
            st.topic_id = id
            self:set_position(st, off)
            add_error(errs, st, ("%s; position reset to %s (offset %s)"):format(what, self.auto_offset_reset,
              tostring(off)), "topic_recreated")
          else
            add_error(errs, st, what .. "; resetting the position failed: " .. tostring(err), code)
          end
        end
      end
    end
  end
end

-- A Fetch answer's frame is released (proto.release: the inbox reads a
-- later answer into the same memory, not into fresh pages) once its last
-- partition is decoded: hold counts its partitions kept for later polls.
local function unhold(hold)
  hold.n = hold.n - 1
  if hold.n == 0 and hold.frame then proto.release(hold.frame) end
end

function _M:_keep(st, pr, hold)
  local p = self.pending or {}
  p[#p + 1] = { st = st, pr = pr, epoch = st.epoch, hold = hold }
  hold.n = hold.n + 1
  self.pending = p
end

-- Decodes one partition's fetch result into out, or keeps it for the next
-- poll once out holds max_poll_records: a poll's messages all stay alive
-- until the caller drops them, and a big live set makes Lua's GC slow.
function _M:_settle(st, pr, out, errs, hold)
  local n = count(out)
  if n >= self.max_poll_records then
    self:_keep(st, pr, hold)
    return
  end
  local ok, err, code, kcode = self:_partition_result(st, pr, out, self.max_poll_records - n)
  if not ok then add_error(errs, st, err, code, kcode) end
  local rest = pr.rest
  if rest then
    -- the decoder paused at max_poll_records (inside a batch, maybe): the
    -- rest waits for the next poll (the partition's next Fetch, pipelined
    -- or not, is read only once it is decoded)
    pr.rest = nil
    if ok then
      local rpr = {}
      for k, v in pairs(pr) do rpr[k] = v end
      rpr.records = rest
      self:_keep(st, rpr, hold)
      return
    end
  end
  local sent = pr.fetched_to
  if sent and st.offset ~= sent and st.fetch_offset == sent then
    -- the next Fetch went out from where the headers said these records
    -- end, and decoding ended elsewhere (a corrupt batch stopped it): the
    -- answer to that Fetch is dropped, the partition fetched from st.offset
    rewind(st)
  elseif not st.fetch_offset then
    st.fetch_offset = st.offset -- not pipelined: fetched once decoded
  end
end

-- Decodes what earlier fetches left (dropped when the partition was
-- reassigned or sought meanwhile). Once out is full the items left wait as
-- they are: a poll costs what it decodes, not a new table per partition
-- still pending (an 8 MiB answer holds 67 of them).
function _M:_drain(out, errs)
  local pend = self.pending
  self.pending = nil
  local max = self.max_poll_records
  for i, it in ipairs(pend) do
    if count(out) >= max then
      local p = self.pending or {}
      for j = i, #pend do p[#p + 1] = pend[j] end
      self.pending = p
      return
    end
    local st = it.st
    if self.index[pkey(st.topic, st.partition)] == st and st.epoch == it.epoch then
      if st.paused then rewind(st) else self:_settle(st, it.pr, out, errs, it.hold) end
    end
    unhold(it.hold)
  end
end

-- Sends a Fetch to every leader of assigned partitions that has none in
-- flight (partitions already in a Fetch wait for its answer; partitions in
-- skip are left out until the time given). Partitions whose leader cannot
-- be reached get an error in errs and are tried again after
-- retry_backoff_ms. With only (a Fetch's partitions), just those that are
-- still assigned, and those the metadata now has on node (the broker that
-- answered): the pipelined Fetch to it. (Without them a partition whose
-- leader moved to a broker with data flowing was left out for good: a
-- pipelined Fetch is always in flight there.)
function _M:_send_fetches(deadline, errs, skip, only, node)
  local client = self.client
  local items = {}
  local tnow = client.now()
  local cands = only or self.parts
  if only and node then
    cands = {}
    local inset = {}
    for _, st in ipairs(only) do
      cands[#cands + 1] = st
      inset[st] = true
    end
    for _, st in ipairs(self.parts) do
      local t = not inset[st] and not st.fetch and client.topics[st.topic]
      local p = t and t.partitions[st.partition]
      if p and p.leader == node then cands[#cands + 1] = st end
    end
  end
  for _, st in ipairs(cands) do
    if not st.fetch and not st.paused and st.fetch_offset and not (skip[st] and skip[st] > tnow)
      and (not only or self.index[pkey(st.topic, st.partition)] == st) then
      items[#items + 1] = st
    end
  end
  if #items == 0 then return end
  local groups, failed = client:group(items, deadline, self.pool)
  -- (the metadata is fresh here: a topic created again shows its new id
  -- before a Fetch could ask it for the old topic's offsets)
  self:_check_topic_ids(errs)
  for _, f in ipairs(failed) do
    if f.code == "timeout" and client.now() >= deadline then
      -- the poll's time ran out while the leader's connection negotiates (it
      -- goes on at the next poll): nothing failed
      skip[f.item] = deadline
    else
      add_error(errs, f.item, f.err, f.code)
      skip[f.item] = tnow + self.retry_backoff_ms
      if f.code ~= "backoff" then client:invalidate(f.item.topic) end
    end
  end
  local wait = math.floor(math.max(0, math.min(deadline - client.now(), self.fetch_max_wait_ms)))
  for _, g in ipairs(groups) do
    local conn = g.conn
    -- (a partition whose topic was created again under "error" waits for a seek)
    local gitems = {}
    for _, st in ipairs(g.items) do if st.fetch_offset then gitems[#gitems + 1] = st end end
    g.items = gitems
    if not self.fetches[conn] and #gitems > 0 then
      local topics, list, offsets, epochs = {}, {}, {}, {}
      local v, err, code = conn:version(API.Fetch)
      local names = {} -- topic id -> name (Fetch v13+ answers by id)
      for _, st in ipairs(g.items) do
        local t = topics[st.topic]
        if not t then
          local md = client.topics[st.topic]
          t = { topic = st.topic, topic_id = md and md.topic_id, partitions = {} }
          topics[st.topic] = t
          list[#list + 1] = t
          -- by id (KIP-516: a topic deleted and created again is not read
          -- as the old one) where the metadata gave every topic its id
          if t.topic_id and t.topic_id ~= NO_ID then names[t.topic_id] = st.topic
          elseif v and v > 12 then v = 12 end
        end
        t.partitions[#t.partitions + 1] = { partition = st.partition, fetch_offset = st.fetch_offset,
          partition_max_bytes = st.fetch_bytes, current_leader_epoch = -1, log_start_offset = -1,
          last_fetched_epoch = -1 }
        offsets[st], epochs[st] = st.fetch_offset, st.epoch
      end
      local corr
      if v then
        corr, err, code = conn:send(API.Fetch, v, { replica_id = -1, max_wait_ms = wait, min_bytes = self.fetch_min_bytes,
          max_bytes = self.fetch_max_bytes, isolation_level = self.isolation_level, session_id = 0,
          session_epoch = -1, topics = list, forgotten_topics_data = {}, rack_id = "" },
          { timeout_ms = wait, decode = self.fetch_decode, deadline = deadline })
      end
      if corr then
        local f = { conn = conn, corr = corr, parts = g.items, offsets = offsets, epochs = epochs, wait = wait,
          names = names }
        self.fetches[conn] = f
        self.flist[#self.flist + 1] = f
        for _, st in ipairs(g.items) do st.fetch = f end
      else
        for _, st in ipairs(g.items) do
          add_error(errs, st, err, code)
          skip[st] = tnow + self.retry_backoff_ms
        end
        client:invalidate()
      end
    end
  end
end

function _M:_fetch_done(f)
  self.fetches[f.conn] = nil
  for i, x in ipairs(self.flist) do
    if x == f then
      table.remove(self.flist, i)
      break
    end
  end
  for _, st in ipairs(f.parts) do
    if st.fetch == f then st.fetch = nil end
  end
end

-- Reads the answer to Fetch f until the deadline. Returns false while it
-- is still in flight. A partition that failed is not fetched again in this
-- poll (skip), so a stuck partition cannot make a poll spin. The next
-- Fetch to the broker goes out before the answer's records are decoded.
function _M:_collect(f, deadline, out, errs, skip)
  local resp, err, code = f.conn:receive(f.corr, deadline)
  if not resp and code == "timeout" and f.conn:waiting(f.corr) then return false end
  self:_fetch_done(f)
  local current, asked = {}, {}
  for _, st in ipairs(f.parts) do
    -- only partitions still assigned and not sought since the Fetch was sent
    if self.index[pkey(st.topic, st.partition)] == st and st.epoch == f.epochs[st]
      and st.fetch_offset == f.offsets[st] and not st.paused then
      current[st] = true
      asked[#asked + 1] = st
    end
  end
  local t = self.client.now()
  if not resp then
    for st in pairs(current) do
      add_error(errs, st, err, code)
      skip[st] = t + self.retry_backoff_ms
    end
    self.client:invalidate()
    return true
  end
  if resp.error_code and resp.error_code ~= errors.NONE then
    local e = errors.info(resp.error_code)
    if e.retriable then
      self.client:invalidate()
    else
      for st in pairs(current) do add_error(errs, st, "Fetch: " .. e.name, "kafka", e.code) end
    end
  end
  -- where each partition's next Fetch starts, from its batch headers
  local got, piped, frame = {}, false, nil
  for _, tr in ipairs(resp.responses or {}) do
    for _, pr in ipairs(tr.partitions or {}) do
      local st = self.index[pkey(tr.topic or f.names[tr.topic_id] or "", pr.partition_index)]
      if st and current[st] then
        current[st] = nil -- once: a partition listed twice is taken the first time
        got[#got + 1] = st
        got[#got + 1] = pr
        local raw = pr.records
        if not frame and type(raw) == "userdata" then frame = raw end
        if pr.error_code ~= errors.NONE then
          st.fetch_offset = nil -- set once handled (a reset moves it)
        elseif raw and #raw > 0 then
          local to = proto.records_end(raw)
          if to and to > st.fetch_offset then
            st.fetch_offset, pr.fetched_to, piped = to, to, true
          else
            st.fetch_offset = nil -- a partial batch alone, bad framing: decoding tells
          end
        end
      end
    end
  end
  if piped then self:_send_fetches(self.deadline, errs, skip, f.parts, f.conn.node_id) end
  local nerr, nout = #errs, count(out)
  -- (one hold more while the answer's partitions are settled)
  local hold = { n = 1, frame = frame }
  for i = 1, #got, 2 do
    local st = got[i]
    self:_settle(st, got[i + 1], out, errs, hold)
    if #errs > nerr then
      skip[st] = math.huge
      nerr = #errs
    end
  end
  unhold(hold)
  if count(out) == nout and f.wait == 0 then
    -- an empty answer to a Fetch that asked the broker not to wait: do not
    -- ask again at once (the poll would spin on the network)
    for _, st in ipairs(asked) do
      if not skip[st] then skip[st] = t + self.retry_backoff_ms end
    end
  end
  return true
end

-- fetch(deadline, out, errs [, wake]): the fetch loop of a poll. Appends
-- messages to out and partition errors to errs; returns when out has
-- messages, at the deadline, or at wake (the group's next heartbeat), so
-- the caller can run the group and call again.
function _M:fetch(deadline, out, errs, wake)
  local client = self.client
  local now = client.now
  local stop = deadline
  if wake and wake < stop then stop = wake end
  if self.pending then
    -- answer from what was fetched already; fetch again only when it is used up
    self:_drain(out, errs)
    if count(out) > 0 or self.pending then return end
  end
  local skip = self.skip or {}
  self.skip = skip
  self.deadline = deadline
  while true do
    self:_send_fetches(deadline, errs, skip)
    -- every answer already there, from any broker, until one leaves data
    -- pending (the answers after it wait: one undecoded answer per broker)
    local flist = self.flist
    for i = #flist, 1, -1 do
      local f = flist[i]
      if self.pending then break end
      if f then self:_collect(f, now(), out, errs, skip) end
    end
    -- messages end the poll; errors alone wait for the deadline (the
    -- healthy partitions may still bring messages, and a caller polling in
    -- a loop must not spin)
    local t = now()
    if count(out) > 0 or t >= stop then return end
    local f = self.flist[1]
    if not f then
      -- an answer dropped (a seek, a rewind) leaves partitions to fetch now
      self:_send_fetches(deadline, errs, skip)
      f = self.flist[1]
    end
    if not f then
      -- nothing in flight: try the unreachable leaders again after a backoff
      local wake_t = stop
      for _, until_t in pairs(skip) do
        if until_t < wake_t then wake_t = until_t end
      end
      client.sleep(math.max(1, math.ceil(math.min(wake_t, stop) - t)))
    else
      -- wait on the oldest Fetch; with several in flight, in short slices so
      -- an answer from another broker is not held up behind it
      local until_t = stop
      if #self.flist > 1 and t + 20 < stop then until_t = t + 20 end
      self:_collect(f, until_t, out, errs, skip)
    end
  end
end

-- end_poll(): forgets the per-poll backoffs of failed partitions
function _M:end_poll() self.skip = nil end

function _M.pause(_, st) st.paused = true end
function _M.resume(_, st) st.paused = false end

function _M:close()
  self:_abandon_fetches()
  for _, conn in pairs(self.pool) do conn:close("consumer closed") end
  self.pool = {}
  self.parts, self.index, self.pending = {}, {}, nil
end

return _M
