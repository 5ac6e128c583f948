-- kafka.producer.accumulator: the producer's messages from send() until
-- they are settled. Topics (partition count, sticky choice), their
-- partitions (each a queue of batches), the partitioner, the C mirror of
-- all that (csrc/lua_producer.c: every write of it is here), and the
-- reports: counted, given to on_delivery, kept for flush(). No I/O but
-- the partition count asked of the client (send's path). librdkafka's
-- rdkafka_partition (each toppar's message queue) in one object; franz-go
-- keeps a partition's buffer (recBuf) in its broker's sink, ours stays
-- here whichever broker leads the partition.
local proto = require "kafka.proto"
local check = require "kafka.check"
local core = require "kafka.core"

local math, table, debug = math, table, debug
local setmetatable, tostring, type, ipairs, pairs, error, xpcall, getmetatable = setmetatable, tostring, type,
  ipairs, pairs, error, xpcall, getmetatable

local _M = {}
local mt = { __index = _M }

-- the builder's add (append and accounting in one call) and account,
-- called directly (no method lookup per message)
local batch_add, batch_account
do
  local b = proto.batch()
  batch_add, batch_account = b.add, b.account
  b:close()
end
-- The C mirror (csrc/lua_producer.c): the message counters (ids, and
-- messages and bytes buffered), a mirror of each topic's partition count,
-- sticky choice and open batches, and send()'s common case in one C call
-- (an append to the chosen partition's open batch, or nothing and send()
-- goes its own way). Its methods are called as locals.
local acc_send, acc_counts, acc_take, acc_release, acc_topic, acc_sticky, acc_open
do
  local m = getmetatable(core.accumulator { partitioner = "murmur2_random" }).__index
  acc_send, acc_counts, acc_take, acc_release = m.send, m.counts, m.take, m.release
  acc_topic, acc_sticky, acc_open = m.topic, m.sticky, m.open
end
-- send()'s common case, called by the producer on the accumulator's core
_M.fast_send = acc_send
_M.counts_of = acc_counts

-- new(p) -> the accumulator of producer p (which it reads its options
-- from: partitioner, rng, codec, batch_size, delivery_timeout_ms,
-- on_delivery, only_errors, max_buffered; the client, which changes in
-- background mode). Its state:
--   core            the C mirror (above)
--   topics          topic name -> its object (see topic)
--   sticky_unkeyed  unkeyed messages go to the topic's sticky partition (see partition)
--   reports         the reports flush() returns next
--   delivered, callback_errors, nfailed  counts since the last flush
--                   (nfailed: background mode reports them)
--   reports_dropped reports dropped in background mode (see report)
--   want            background send_sync: id -> true, then its report
function _M.new(p)
  local partitioner = p.partitioner
  return setmetatable({
    p = p,
    core = core.accumulator { max_message_bytes = p.max_message_bytes, max_buffered = p.max_buffered,
      max_buffered_bytes = p.max_buffered_bytes,
      partitioner = type(partitioner) == "function" and "function" or partitioner },
    topics = {},
    sticky_unkeyed = type(partitioner) ~= "function" and partitioner ~= "murmur2",
    reports = {},
    delivered = 0,
    callback_errors = 0,
    nfailed = 0,
    reports_dropped = 0,
    want = nil,
  }, mt)
end

-- counts() -> seq (the last message id), messages and bytes buffered, fast sends
function _M:counts() return acc_counts(self.core) end

-- Messages buffered.
function _M:buffered()
  local _, n = acc_counts(self.core)
  return n
end

-- A message accounted (its id is the next seq).
function _M:take(size) acc_take(self.core, size) end

-- n messages of `bytes` settled or failed before they reached a batch.
function _M:release(n, bytes) acc_release(self.core, n, bytes) end

-- The C mirror's partition count of a topic (nil: unknown, send() goes
-- the Lua way) and the message id up to which it holds.
function _M:set_count(topic, n, ptime) acc_topic(self.core, topic, n, ptime) end

-- The partition of a message without one: the partitioner's choice.
-- level: where a partitioner's bad answer is raised (send's caller).
function _M:partition(t, key, n, level)
  local p = self.p.partitioner
  if type(p) == "function" then
    local topic = t.name
    local got = p(key, n, topic)
    if not check.is_int(got) or got < 0 or got >= n then
      error(("send: the partitioner returned %s for topic %s with %d partitions (expected an integer in 0..%d)")
        :format(check.show(got), topic, n, n - 1), level)
    end
    return got
  end
  if key ~= nil and p ~= "random" then
    return (proto.murmur2(key) % 2147483648) % n
  end
  if p == "murmur2" then return (proto.murmur2("") % 2147483648) % n end
  -- sticky: one partition per batch; the next batch takes the next
  -- partition round-robin (from a random start), which spreads evenly
  local s = t.sticky
  if not s or s >= n then
    local last = t.last_sticky
    s = last and (last + 1) % n or self.p.rng(0, n - 1)
    t.sticky, t.last_sticky = s, s
    acc_sticky(self.core, t.name, s)
  end
  return s
end

-- A topic of the producer: n (its partition count, cached: asked again
-- after 4096 sends, in background mode after the sender's PCOUNT_MS, and
-- after a failed attempt), the sticky choice for unkeyed messages, and one
-- object per partition used (parts by number, order as first used).
function _M:topic(name)
  local t = self.topics[name]
  if not t then
    t = { name = name, n = nil, ptime = 0, sticky = nil, last_sticky = nil, parts = {}, order = {} }
    self.topics[name] = t
  end
  return t
end

-- One topic-partition of the producer, the unit of its state machine:
--   queue     its batches, oldest first; a batch's state is "open" (takes
--             messages: the last one, also tp.open), "sealed" (full or
--             sent once: takes no more; stamped with the producer id,
--             epoch and base sequence when idempotent), "in_flight" (in a
--             Produce request not answered yet; back to "sealed" when the
--             attempt failed and is retried) or "done" (settled: reported,
--             out of the queue)
--   next_seq  the next batch's base sequence (idempotence)
--   drain     after a failed attempt nothing more of the partition is
--             sent until its batches in flight have answered; then the
--             queue is sent again in order
--   pid, epoch  the producer id and epoch next_seq counts under (nil:
--             nothing stamped yet); older than the producer's after an
--             epoch bump until the partition restarts at sequence 0
--   reset     (idempotence) the partition's sequences are broken: once its
--             batches in flight have answered, its stamped batches are
--             stamped again from 0 under the producer's id and epoch
--   conn_wait (the sink) its connection is at its bound of requests in flight
function _M.tp(_, t, partition)
  local tp = t.parts[partition]
  if not tp then
    tp = { topic = t.name, partition = partition, queue = {}, open = nil, next_seq = 0, drain = false }
    t.parts[partition] = tp
    t.order[#t.order + 1] = tp
  end
  return tp
end

-- An open batch's builder keeps its count, accounted size and message
-- ids (as runs {first, count, ...}: consecutive sends to one partition
-- cost nothing); sealing copies them into the batch table, where the
-- send rounds and the reports read them.
local function sync(batch)
  batch.count, batch.size, batch.runs = batch_account(batch.b)
end

-- Seals the open batch of tp: it takes no more messages.
function _M:seal(tp, batch)
  sync(batch)
  batch.state = "sealed"
  if tp.open == batch then
    tp.open = nil
    acc_open(self.core, tp.topic, tp.partition, nil)
  end
end

-- The Lua way of send() in sync mode, after its checks: the message
-- (accounted size `size`, id seq0 + 1) into its partition's batch, the
-- partition count asked of the client at most once every 4096 sends:
-- its id | nil, err, code.
function _M:add(topic, value, key, partition, headers, ts, size, seq0, magic)
  local acc = self.core
  local err, code
  local t = self.topics[topic]
  local n = t and t.n
  if not n or seq0 >= t.ptime then
    n, err, code = self.p.client:partitions(topic)
    if not n then return nil, err, code end
    t = t or self:topic(topic)
    t.n, t.ptime = n, seq0 + 4096
    acc_topic(acc, topic, n, t.ptime)
  end
  local explicit = partition ~= nil
  if not explicit then
    partition = key == nil and self.sticky_unkeyed and t.sticky
    -- (raised at send's caller: partition, add, the producer's _enqueue, send)
    if not partition or partition >= n then partition = self:partition(t, key, n, 5) end
  elseif partition >= n then
    return nil, ("topic %s has no partition %d (it has %d)"):format(topic, partition, n), "unknown_partition"
  end
  local seq = seq0 + 1
  local ok, aerr, acode = self:append(t, partition, explicit, value, key, headers, ts, size, seq, magic)
  if not ok then return nil, aerr, acode end
  acc_take(acc, size) -- (seq)
  return seq
end

-- Appends one message (id seq) to the open batch of partition `partition`
-- of topic object t, or to a new one: true, nil, nil, new_batch | nil,
-- err, code. No I/O.
function _M:append(t, partition, explicit, value, key, headers, ts, size, seq, magic)
  local p = self.p
  local tp = t.parts[partition] or self:tp(t, partition)
  local batch = tp.open
  if batch then
    local ok, berr = batch_add(batch.b, value, key, headers, ts, seq, size)
    if ok then return true, nil, nil, false end
    if ok == nil then return nil, berr, "invalid" end
    self:seal(tp, batch) -- full
  end
  local q = tp.queue
  -- a full batch ends the sticky choice: the next unkeyed message goes
  -- to a partition picked anew
  if q[1] and key == nil and not explicit then
    t.sticky = nil
    acc_sticky(self.core, t.name, nil)
  end
  if p.codec == "zstd" and magic < 2 then
    return nil, "zstd needs Produce v3+ (Kafka 0.11+); this cluster speaks magic " .. magic, "unsupported"
  end
  -- the delivery deadline counts from the batch's first message
  local now = p.client.now()
  batch = { b = proto.batch { magic = magic, compression = p.codec, limit = p.batch_size }, state = "open",
            first_id = seq, attempts = 0, next_try = 0, born = now, expires = now + p.delivery_timeout_ms }
  local ok, berr = batch_add(batch.b, value, key, headers, ts, seq, size) -- (an empty batch takes any size)
  if not ok then
    batch.b:close()
    return nil, berr, "invalid"
  end
  q[#q + 1] = batch
  tp.open = batch
  acc_open(self.core, t.name, partition, batch.b)
  return true, nil, nil, #q > 1
end

local traceback = debug.traceback

-- A report: to on_delivery (its errors are caught: the report gets
-- callback_error, flush() counts them, bookkeeping goes on) and to the list
-- flush() returns.
function _M:report(r)
  local p = self.p
  local want = self.want
  if want and want[r.id] then want[r.id] = r end -- send_sync in background mode waits for it
  local cb = p.on_delivery
  if cb then
    -- a closure: Lua 5.1's xpcall passes no arguments to the function
    local ok, cerr = xpcall(function() return cb(r) end, traceback)
    if not ok then
      r.callback_error = tostring(cerr)
      self.callback_errors = self.callback_errors + 1
      if not r.err and p.only_errors then self.reports[#self.reports + 1] = r end
    end
  end
  if r.err or not p.only_errors then
    local reports = self.reports
    reports[#reports + 1] = r
    -- in background mode nobody may ever call flush(): the list keeps the
    -- latest max_buffered reports (counts stay exact)
    if p.bg and #reports > p.max_buffered then
      local keep = math.floor(p.max_buffered / 2)
      local t = {}
      for i = #reports - keep + 1, #reports do t[#t + 1] = reports[i] end
      self.reports_dropped = self.reports_dropped + #reports - keep
      self.reports = t
    end
  end
end

-- A batch settled (out of its queue): counted and reported.
function _M:done(tp, batch, base_offset, err, code, kcode)
  local p = self.p
  local topic, partition = tp.topic, tp.partition
  if batch.state == "open" then sync(batch) end -- (failed before it was sent)
  batch.state = "done"
  local count = batch.count
  if not err then
    self.delivered = self.delivered + count
    p.fatal_attempts = nil -- a fatal cause recovered from: the next one backs off from the start
  else
    self.nfailed = self.nfailed + count
  end
  acc_release(self.core, count, batch.size)
  if batch.b then batch.b:close() end
  if not err and p.only_errors and not p.on_delivery then return end -- counted, not reported
  local runs, i = batch.runs, 0
  for r = 1, #runs, 2 do
    for id = runs[r], runs[r] + runs[r + 1] - 1 do
      if err then
        self:report { id = id, topic = topic, partition = partition, err = err, code = code, error_code = kcode }
      else
        self:report { id = id, topic = topic, partition = partition,
          offset = base_offset >= 0 and base_offset + i or -1 }
      end
      i = i + 1
    end
  end
end

-- Takes a batch out of its partition's queue.
function _M:unqueue(tp, batch)
  local q = tp.queue
  for i = 1, #q do
    if q[i] == batch then
      table.remove(q, i)
      break
    end
  end
  if tp.open == batch then
    tp.open = nil
    acc_open(self.core, tp.topic, tp.partition, nil)
  end
end

-- After a flush: the next unkeyed message of each topic picks a partition
-- anew, and partitions with nothing queued are dropped so partitions not
-- used any more cost a send round nothing (an idempotent producer keeps
-- those whose sequence numbers have moved: the broker expects the next one).
function _M:prune()
  for name, t in pairs(self.topics) do
    t.sticky = nil
    acc_sticky(self.core, name, nil)
    local keep, dropped = {}, false
    for _, tp in ipairs(t.order) do
      if tp.queue[1] or tp.next_seq ~= 0 then
        keep[#keep + 1] = tp
      else
        t.parts[tp.partition] = nil
        dropped = true
      end
    end
    if dropped then t.order = keep end
  end
end

-- The reports since the last call, in id order, and the counts since
-- then: reports, delivered, callback_errors (flush and close; the failed
-- count is the caller's: the reports' or, in background mode, nfailed).
function _M:take_reports()
  local reports = self.reports
  self.reports = {}
  table.sort(reports, function(a, b) return a.id < b.id end)
  local delivered, cb_errors = self.delivered, self.callback_errors
  self.delivered, self.callback_errors = 0, 0
  return reports, delivered, cb_errors
end

-- partition_states() (see the producer's)
function _M:partition_states()
  local out = {}
  for _, t in pairs(self.topics) do
    for _, tp in ipairs(t.order) do
      local states = {}
      for i, b in ipairs(tp.queue) do states[i] = b.state end
      out[#out + 1] = { topic = tp.topic, partition = tp.partition, next_seq = tp.next_seq, batches = states }
    end
  end
  table.sort(out, function(a, b)
    if a.topic ~= b.topic then return a.topic < b.topic end
    return a.partition < b.partition
  end)
  return out
end

return _M
