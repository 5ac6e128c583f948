-- kafka.producer: batching, partitioning, retries and delivery reports.
--
--   local producer = require "kafka.producer"
--   local p = producer.new({brokers = {"127.0.0.1:9092"}}, {acks = -1, compression = "lz4"})
--   local id = assert(p:send("topic", "value", {key = "k", headers = {h = "v"}}))
--   local reports = p:flush()   -- one report per message: {id, topic, partition, offset} or {id, topic, err, code}
--   local partition, offset = p:send_sync("topic", "one-off")
--
-- Options (Kafka's names): acks (-1), compression ("none"), linger_ms (100),
-- batch_size (1048576 bytes per partition batch), max_retries (5),
-- retry_backoff_ms (100), partitioner ("murmur2_random": keyed messages go
-- where the Java client and librdkafka's murmur2_random put them; "murmur2"
-- hashes null keys too; "random"; or a function(key, partition_count,
-- topic)), max_buffered (100000 messages), max_buffered_bytes (64 MiB),
-- flush_on_full (true: a full buffer flushes; false: send returns
-- nil, "buffer full", "buffer_full"), max_message_bytes (1000000),
-- max_request_bytes (1048576: a Produce request carries batches up to this
-- size, more requests are pipelined),
-- timeout_ms (30000, the broker-side produce timeout), on_delivery
-- (function(report), called for every message as its outcome is known),
-- delivery_reports ("all", or "errors": flush() then returns only the
-- failed messages' reports, and successes are just counted - the fast path
-- for high volumes).
--
-- enable_idempotence (nil: on where the cluster supports it and acks is
-- -1), max_in_flight_requests_per_connection (5), transactional_id,
-- transaction_timeout_ms (60000).
--
-- Delivery: idempotent by default (a producer id, per-partition sequence
-- numbers stamped when a batch is sealed: a retried batch the broker has
-- already is answered DUPLICATE_SEQUENCE_NUMBER, not written twice; up to
-- 5 batches per partition in flight, kept in order by the broker's
-- sequence checks). With enable_idempotence = false (or acks 0/1) at least
-- once: a retried batch can be written twice, and one batch per partition
-- is in flight so retries never reorder. Transactions: init_transactions,
-- begin_transaction, send, send_offsets_to_transaction,
-- commit_transaction, abort_transaction (README: Transactions).
--
-- background (default: true inside nginx when the client uses cosockets,
-- false elsewhere): see "In nginx" below; exit_flush_timeout_ms (5000).
--
-- In nginx (background mode) the network I/O runs in one background timer
-- per producer and worker, the sender, which owns every connection it uses
-- (a private clone of the client: no cosocket is shared with request
-- handlers or other timers). send() from any phase only validates,
-- partitions (with the cached partition count; messages of a topic whose
-- count is not known yet wait unpartitioned for the sender) and buffers,
-- then wakes the sender; it never does I/O and never yields. A full buffer
-- is nil, err, "buffer_full" at once. The sender sends each partition's
-- batch when it is full or linger_ms old, pipelines, retries, and calls
-- on_delivery. flush() (where nginx can yield) waits until everything sent
-- before it is settled. At worker exit (reload, quit) the sender sends
-- what is buffered within exit_flush_timeout_ms and reports the rest
-- failed (on_delivery and the error log); _M.exit_worker() in
-- exit_worker_by_lua does the same on a fast stop. States (p:state()):
-- "starting", "idle", "lingering", "sending", "waiting", "backoff",
-- "draining", "stopped", "crashed"; "sync" outside background mode.
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"
local ksocket = require "kafka.socket"
local ngx = ngx -- luacheck: ignore (nil outside OpenResty)

local errors = proto.errors
local API = proto.api
local PRODUCE = API.Produce
local math, table, debug = math, table, debug
local setmetatable, tostring, type, ipairs, pairs, error, xpcall, next, pcall, require, select = setmetatable,
  tostring, type, ipairs, pairs, error, xpcall, next, pcall, require, select

local _M = {}
local mt = { __index = _M }

local WHERE = "kafka.producer.new"
-- the builder's add (append and accounting in one call) and account,
-- called directly (no method lookup per message)
local batch_add, batch_account
-- The accumulator (csrc/lua_producer.c): the message counters (ids, and
-- messages and bytes buffered), a mirror of each topic's partition count,
-- sticky choice and open batches, and send()'s common case in one C call
-- (an append to the chosen partition's open batch, or nothing and send()
-- goes its own way). Its methods are called as locals.
local core = require "kafka.core"
local acc_send, acc_counts, acc_take, acc_release, acc_topic, acc_sticky, acc_open
do
  local m = getmetatable(core.accumulator { partitioner = "murmur2_random" }).__index
  acc_send, acc_counts, acc_take, acc_release = m.send, m.counts, m.take, m.release
  acc_topic, acc_sticky, acc_open = m.topic, m.sticky, m.open
end
local fast = true
-- _fast_send(false): send() never takes the C path (specs compare the two)
function _M._fast_send(on) fast = on end
local function nbuf_of(p)
  local _, n = acc_counts(p.acc)
  return n
end
local function nbytes_of(p)
  local _, _, n = acc_counts(p.acc)
  return n
end
local function seq_of(p) return (acc_counts(p.acc)) end
do
  local b = proto.batch()
  batch_add, batch_account = b.add, b.account
  b:close()
end
local CODECS = { "none", "gzip", "snappy", "lz4", "zstd", 0, 1, 2, 3, 4 }

function _M.new(client_or_opts, opts)
  local client, own = client_mod.ensure(client_or_opts, WHERE)
  opts = check.opts(WHERE, opts)
  local int = check.int
  local codec = check.oneof(WHERE, "compression", opts.compression, "none", CODECS)
  if type(codec) == "number" then codec = proto.compression[codec] end
  local partitioner = opts.partitioner or "murmur2_random"
  if type(partitioner) ~= "function" then
    check.oneof(WHERE, "partitioner", partitioner, nil, { "murmur2_random", "murmur2", "random" })
  end
  check.typed(WHERE, "on_delivery", opts.on_delivery, nil, "function")
  local backoff = int(WHERE, "retry_backoff_ms", opts.retry_backoff_ms, client.retry_backoff_ms, 0)
  local bg = check.bool(WHERE, "background", opts.background, nil)
  if bg == nil then bg = ksocket.in_nginx() and client.opts.socket == nil end
  if bg and not ksocket.in_nginx() then error(WHERE .. ": background = true needs nginx (lua-nginx-module)", 2) end
  local acks = check.oneof(WHERE, "acks", opts.acks, -1, { -1, 0, 1 })
  local txn_id = check.typed(WHERE, "transactional_id", opts.transactional_id, nil, "string")
  if txn_id == "" then check.fail(WHERE, "transactional_id", "a non-empty string", txn_id) end
  local idem = check.bool(WHERE, "enable_idempotence", opts.enable_idempotence, nil)
  if txn_id and idem == false then
    error(WHERE .. ": transactional_id needs enable_idempotence (got false)", 2)
  end
  if txn_id then idem = true end
  if idem == true and acks ~= -1 then
    error(("%s: enable_idempotence needs acks = -1 (got acks = %d)"):format(WHERE, acks), 2)
  end
  -- nil: on where the cluster supports it (InitProducerId, record format v2) and acks is -1
  local idem_mode = idem == true and "on" or (idem == false and "off" or (acks == -1 and "auto" or "off"))
  local max_in_flight = int(WHERE, "max_in_flight_requests_per_connection",
    opts.max_in_flight_requests_per_connection, 5, 1)
  if idem_mode ~= "off" and max_in_flight > 5 then
    error(("%s: max_in_flight_requests_per_connection must be <= 5 with idempotence (got %d)"):format(
      WHERE, max_in_flight), 2)
  end
  local p = setmetatable({
    client = client,
    own_client = own,
    acks = acks,
    -- idempotence and transactions (see the transaction manager below)
    idem_mode = idem_mode,          -- "on", "off", "auto" (decided at the first send round)
    idempotent = nil,               -- true once a producer id is held, false when off
    max_in_flight = max_in_flight,  -- requests per connection in flight; with idempotence also batches per partition (else 1)
    transactional_id = txn_id,
    transaction_timeout_ms = int(WHERE, "transaction_timeout_ms", opts.transaction_timeout_ms, 60000, 1),
    producer_id = -1,
    producer_epoch = -1,
    need_bump = false,              -- an epoch bump (KIP-360) is due once nothing is in flight
    txn_state = txn_id and "uninitialized" or nil,
    txn_error = nil,                -- {err, code, kcode} in "abortable_error" / "fatal_error"
    txn_parts = {},                 -- topic -> partition -> true: added to the transaction
    txn_version = nil,              -- the transaction protocol: 1 (KIP-98) or 2 (KIP-890), from init_transactions
    txn_failed = 0,                 -- messages of the current transaction that failed
    codec = codec,
    linger_ms = int(WHERE, "linger_ms", opts.linger_ms, 100, 0),
    batch_size = int(WHERE, "batch_size", opts.batch_size, 1048576, 1),
    max_retries = int(WHERE, "max_retries", opts.max_retries, nil, 0),
    retry_backoff_ms = backoff,
    retry_backoff_max_ms = int(WHERE, "retry_backoff_max_ms", opts.retry_backoff_max_ms,
      math.max(backoff, client.retry_backoff_max_ms), 0),
    delivery_timeout_ms = int(WHERE, "delivery_timeout_ms", opts.delivery_timeout_ms, 120000, 1),
    partitioner = partitioner,
    -- unkeyed messages go to the topic's sticky partition (see _partition)
    sticky_unkeyed = type(partitioner) ~= "function" and partitioner ~= "murmur2",
    max_buffered = int(WHERE, "max_buffered", opts.max_buffered, 100000, 1),
    max_buffered_bytes = int(WHERE, "max_buffered_bytes", opts.max_buffered_bytes, 64 * 1048576, 1),
    flush_on_full = check.bool(WHERE, "flush_on_full", opts.flush_on_full, true),
    max_message_bytes = int(WHERE, "max_message_bytes", opts.max_message_bytes, 1000000, 1),
    max_request_bytes = int(WHERE, "max_request_bytes", opts.max_request_bytes, 1048576, 1),
    timeout_ms = int(WHERE, "timeout_ms", opts.timeout_ms, 30000, 0),
    on_delivery = opts.on_delivery,
    -- decided from the broker's Produce version on first use
    magic = check.oneof(WHERE, "magic", opts.magic, nil, { 0, 1, 2 }),
    topics = {},        -- topic name -> its object (see _topic): partition count, sticky choice, partitions
    first_time = nil,
    reports = {},
    only_errors = check.oneof(WHERE, "delivery_reports", opts.delivery_reports, "all", { "all", "errors" })
      == "errors",
    delivered = 0,
    callback_errors = 0,
    in_flight = {},     -- Produce requests sent, answers not read yet (oldest first)
    rng = math.random,
    nfailed = 0,        -- failed messages since the last flush (background mode counts them here)
    -- background mode
    bg = bg,
    exit_flush_timeout_ms = int(WHERE, "exit_flush_timeout_ms", opts.exit_flush_timeout_ms, 5000, 0),
    sender_state = bg and "stopped" or "sync",
  }, mt)
  -- the counters, and send()'s path in C
  p.acc = core.accumulator { max_message_bytes = p.max_message_bytes, max_buffered = p.max_buffered,
    max_buffered_bytes = p.max_buffered_bytes,
    partitioner = type(partitioner) == "function" and "function" or partitioner }
  if idem_mode == "off" then p.idempotent = false end
  if bg then p:_bg_init(client) end
  return p
end

-- The record format the cluster takes: magic 2 from Produce v3 on.
function _M:_magic()
  if self.magic then return self.magic end
  local c, err, code = self.client:any_broker()
  if not c then return nil, err, code end
  local v
  v, err, code = c:version(PRODUCE)
  if not v then return nil, err, code end
  self.magic = v >= 3 and 2 or (v == 2 and 1 or 0)
  return self.magic
end

-- The partition of a message without one: the partitioner's choice.
function _M:_partition(t, key, n)
  local p = self.partitioner
  if type(p) == "function" then
    local topic = t.name
    local got = p(key, n, topic)
    if not check.is_int(got) or got < 0 or got >= n then
      error(("send: the partitioner returned %s for topic %s with %d partitions (expected an integer in 0..%d)")
        :format(check.show(got), topic, n, n - 1), 3)
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
    s = last and (last + 1) % n or self.rng(0, n - 1)
    t.sticky, t.last_sticky = s, s
    acc_sticky(self.acc, t.name, s)
  end
  return s
end

-- A topic of the producer: n (its partition count, cached: asked again
-- after 4096 sends, in background mode after PCOUNT_MS, and after a failed
-- attempt), the sticky choice for unkeyed messages, and one object per
-- partition used (parts by number, order as first used).
function _M:_topic(name)
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
function _M._tp(_, t, partition)
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
local function seal(acc, tp, batch)
  sync(batch)
  batch.state = "sealed"
  if tp.open == batch then
    tp.open = nil
    acc_open(acc, tp.topic, tp.partition, nil)
  end
end

local function header_bytes(h)
  local n = 0
  if #h > 0 then
    for _, x in ipairs(h) do n = n + #(x.key or x[1]) + #(x.value or x[2] or "") + 4 end
  else
    for k, v in pairs(h) do n = n + #k + #v + 4 end
  end
  return n
end

-- send(topic, value [, {key=, partition=, headers=, timestamp=}]) -> message id
-- | nil, err, code ("too_large", "buffer_full", "unknown_topic",
-- "unknown_partition", "retriable", ...). Raises on wrong argument types.
function _M:send(topic, value, o)
  local tst = self.txn_state
  -- the common case in C: in sync mode once a linger round is under way;
  -- in background mode while the sender runs, awake, and no message of the
  -- topic waits for its partition count (_bg_send's conditions)
  if fast and (not tst or tst == "in_transaction") and (self.first_time or (self.bg and self.running
      and self.sender_state ~= "idle" and not self.pending[topic])) then
    local id = acc_send(self.acc, topic, value, o)
    if id then return id end
  end
  if tst and tst ~= "in_transaction" then
    local e = self.txn_error
    -- a fatal state that allows it (background mode) is left by the first send after its backoff
    if e and not (e.retry_at and self.client.now() >= e.retry_at and self:_bg_recover()) then
      return nil, e.err, e.code, e.kcode
    end
    if not e then
      error(("send: a transactional producer sends inside a transaction: call %s first (state %q)"):format(
        tst == "uninitialized" and "init_transactions()" or "begin_transaction()", tst), 2)
    end
  end
  if type(topic) ~= "string" or topic == "" then check.fail("send", "topic", "a non-empty string", topic) end
  if value ~= nil and type(value) ~= "string" then check.fail("send", "value", "a string or nil", value) end
  local key, partition, headers, ts
  if o ~= nil then
    if type(o) ~= "table" then check.fail("send", "options", "a table", o) end
    key, partition, headers, ts = o.key, o.partition, o.headers, o.timestamp
    if key ~= nil and type(key) ~= "string" then check.fail("send", "key", "a string or nil", key) end
    if partition ~= nil then check.partition("send", "partition", partition) end
    if headers ~= nil then check.headers("send", "headers", headers) end
    if ts ~= nil then check.int("send", "timestamp", ts, nil) end
  end
  local size = (value and #value or 0) + (key and #key or 0) + 70
  if headers then size = size + header_bytes(headers) end
  if size > self.max_message_bytes then
    return nil, ("message of %d bytes exceeds max_message_bytes (%d)"):format(size, self.max_message_bytes), "too_large"
  end
  if self.bg then return self:_bg_send(topic, value, key, partition, headers, ts, size) end
  local acc = self.acc
  local seq0, nbuf, nbytes = acc_counts(acc)
  if nbuf > 0 then
    if nbuf >= self.max_buffered or nbytes + size > self.max_buffered_bytes then
      if not self.flush_on_full then
        return nil, ("producer buffer full (%d messages, %d bytes): flush() first"):format(nbuf, nbytes),
          "buffer_full"
      end
      self:_flush(nil, size)
    elseif nbuf % 64 == 0 and self.first_time and self.client.now() - self.first_time >= self.linger_ms then
      -- the clock is read every 64 messages: linger is not worth a syscall each
      self:_kick()
    end
    seq0 = acc_counts(acc)
  end
  local magic = self.magic
  local err, code
  if not magic then
    magic, err, code = self:_magic()
    if not magic then return nil, err, code end
  end
  -- the partition count, asked of the client at most once every 4096 sends
  local t = self.topics[topic]
  local n = t and t.n
  if not n or seq0 >= t.ptime then
    n, err, code = self.client:partitions(topic)
    if not n then return nil, err, code end
    t = t or self:_topic(topic)
    t.n, t.ptime = n, seq0 + 4096
    acc_topic(acc, topic, n, t.ptime)
  end
  local explicit = partition ~= nil
  if not explicit then
    partition = key == nil and self.sticky_unkeyed and t.sticky
    if not partition or partition >= n then partition = self:_partition(t, key, n) end
  elseif partition >= n then
    return nil, ("topic %s has no partition %d (it has %d)"):format(topic, partition, n), "unknown_partition"
  end
  local seq = seq0 + 1
  local ok, aerr, acode = self:_append(t, partition, explicit, value, key, headers, ts, size, seq, magic)
  if not ok then return nil, aerr, acode end
  acc_take(acc, size) -- (seq)
  if not self.first_time then self.first_time = self.client.now() end
  return seq
end

-- Appends one message (id seq) to the open batch of partition `partition`
-- of topic object t, or to a new one: true, nil, nil, new_batch | nil,
-- err, code. No I/O.
function _M:_append(t, partition, explicit, value, key, headers, ts, size, seq, magic)
  local tp = t.parts[partition] or self:_tp(t, partition)
  local batch = tp.open
  if batch then
    local ok, berr = batch_add(batch.b, value, key, headers, ts, seq, size)
    if ok then return true, nil, nil, false end
    if ok == nil then return nil, berr, "invalid" end
    seal(self.acc, tp, batch) -- full
  end
  local q = tp.queue
  -- a full batch ends the sticky choice: the next unkeyed message goes
  -- to a partition picked anew
  if q[1] and key == nil and not explicit then
    t.sticky = nil
    acc_sticky(self.acc, t.name, nil)
  end
  if self.codec == "zstd" and magic < 2 then
    return nil, "zstd needs Produce v3+ (Kafka 0.11+); this cluster speaks magic " .. magic, "unsupported"
  end
  -- the delivery deadline counts from the batch's first message
  local now = self.client.now()
  batch = { b = proto.batch { magic = magic, compression = self.codec, limit = self.batch_size }, state = "open",
            first_id = seq, attempts = 0, next_try = 0, born = now, expires = now + self.delivery_timeout_ms }
  local ok, berr = batch_add(batch.b, value, key, headers, ts, seq, size) -- (an empty batch takes any size)
  if not ok then
    batch.b:close()
    return nil, berr, "invalid"
  end
  q[#q + 1] = batch
  tp.open = batch
  acc_open(self.acc, t.name, partition, batch.b)
  return true, nil, nil, #q > 1
end

local traceback = debug.traceback

-- A report: to on_delivery (its errors are caught: the report gets
-- callback_error, flush() counts them, bookkeeping goes on) and to the list
-- flush() returns.
function _M:_report(r)
  local want = self.want
  if want and want[r.id] then want[r.id] = r end -- send_sync in background mode waits for it
  local cb = self.on_delivery
  if cb then
    -- a closure: Lua 5.1's xpcall passes no arguments to the function
    local ok, cerr = xpcall(function() return cb(r) end, traceback)
    if not ok then
      r.callback_error = tostring(cerr)
      self.callback_errors = self.callback_errors + 1
      if not r.err and self.only_errors then self.reports[#self.reports + 1] = r end
    end
  end
  if r.err or not self.only_errors then
    local reports = self.reports
    reports[#reports + 1] = r
    -- in background mode nobody may ever call flush(): the list keeps the
    -- latest max_buffered reports (counts stay exact)
    if self.bg and #reports > self.max_buffered then
      local keep = math.floor(self.max_buffered / 2)
      local t = {}
      for i = #reports - keep + 1, #reports do t[#t + 1] = reports[i] end
      self.reports_dropped = (self.reports_dropped or 0) + #reports - keep
      self.reports = t
    end
  end
end

-- A batch settled (out of its queue): counted and reported.
function _M:_done(tp, batch, base_offset, err, code, kcode)
  local topic, partition = tp.topic, tp.partition
  if batch.state == "open" then sync(batch) end -- (failed before it was sent)
  batch.state = "done"
  local count = batch.count
  if not err then
    self.delivered = self.delivered + count
    self.fatal_attempts = nil -- a fatal cause recovered from: the next one backs off from the start
  else
    self.nfailed = self.nfailed + count
  end
  acc_release(self.acc, count, batch.size)
  if batch.b then batch.b:close() end
  if not err and self.only_errors and not self.on_delivery then return end -- counted, not reported
  local runs, i = batch.runs, 0
  for r = 1, #runs, 2 do
    for id = runs[r], runs[r] + runs[r + 1] - 1 do
      if err then
        self:_report { id = id, topic = topic, partition = partition, err = err, code = code, error_code = kcode }
      else
        self:_report { id = id, topic = topic, partition = partition,
          offset = base_offset >= 0 and base_offset + i or -1 }
      end
      i = i + 1
    end
  end
end

-- Takes a batch out of its partition's queue.
function _M:_unqueue(tp, batch)
  local q = tp.queue
  for i = 1, #q do
    if q[i] == batch then
      table.remove(q, i)
      break
    end
  end
  if tp.open == batch then
    tp.open = nil
    acc_open(self.acc, tp.topic, tp.partition, nil)
  end
end

-- Fails a batch of topic/partition (removed from its queue). With
-- idempotence a sealed batch given up leaves a hole in the partition's
-- sequence (it may or may not have been written): the next batches need a
-- new epoch (KIP-360); in a transaction it makes the transaction abortable.
function _M:_fail(tp, batch, err, code, kcode)
  self:_unqueue(tp, batch)
  if batch.seq and self.idempotent then self:_want_bump(tp, batch) end
  if self.txn_state == "in_transaction" or self.txn_state == "committing" then
    self:_txn_error("abortable_error", ("a message of the transaction failed: %s"):format(tostring(err)),
      "abortable", kcode)
  end
  self:_done(tp, batch, nil, err, code, kcode)
end

local function seq_add(seq, n)
  local x = seq + n
  if x > 2147483647 then x = x - 2147483648 end
  return x
end

-- Stamps a sealed batch with the producer id, epoch and its base sequence.
-- A partition whose sequences count under an older id or epoch (a bump)
-- restarts at 0: the send round stamps a new batch there only once none
-- stamped under the old one is left.
function _M:_stamp(tp, batch)
  local pid, epoch = self.producer_id, self.producer_epoch
  if tp.pid ~= pid or tp.epoch ~= epoch then
    tp.pid, tp.epoch, tp.next_seq = pid, epoch, 0
  end
  batch.seq, batch.pid, batch.epoch = tp.next_seq, pid, epoch
  tp.next_seq = seq_add(tp.next_seq, batch.count)
  batch.b:stamp { producer_id = pid, producer_epoch = epoch, base_sequence = batch.seq,
    transactional = self.transactional_id ~= nil }
end

-- A stamped batch of tp failed, or was refused for its sequence: the
-- broker's sequence for the partition is in doubt. A transactional
-- producer bumps at the transaction's end (need_bump); an idempotent one
-- bumps its epoch locally in the next send round and restarts the
-- partition at 0 (Java's requestIdempotentEpochBumpForPartition). A batch
-- stamped under an older epoch than the producer's (answered after a
-- bump) asks for no second bump: its partition restarts under the current one.
function _M:_want_bump(tp, batch)
  if self.transactional_id then
    self.need_bump = true
    return
  end
  tp.reset, tp.drain = true, true
  if batch.pid == self.producer_id and batch.epoch == self.producer_epoch then self.need_bump = true end
end

-- InitProducerId errors of an idempotent (not transactional) producer,
-- which asks only for a new id: fatal as in Kafka's Java client and
-- librdkafka (rd_kafka_idemp_check_error) - authorization, a fenced id,
-- an unsupported version or message format; everything else is retried
-- after a backoff (librdkafka retries it too; Java's "unexpected error"
-- branch, fatal, is not followed).
local PID_FATAL = { [errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] = true,
  [errors.CLUSTER_AUTHORIZATION_FAILED] = true, [errors.UNSUPPORTED_VERSION] = true,
  [errors.UNSUPPORTED_FOR_MESSAGE_FORMAT] = true }
local PID_FENCED = { [errors.PRODUCER_FENCED] = true, [errors.INVALID_PRODUCER_EPOCH] = true }

local function pid_error(what, ec)
  local e = errors.info(ec)
  local msg = ("%s: %s (%s)"):format(what, e.name, e.message)
  if PID_FENCED[ec] then return msg .. " (another producer with this id took over)", "fenced", ec, false end
  if PID_FATAL[ec] then return msg, "fatal", ec, false end
  return msg, "retriable", ec, true
end

-- One InitProducerId attempt (for client:call) on conn: a new producer id
-- for an idempotent producer.
local function init_pid(c, body, deadline)
  local v, err, code = c:version(API.InitProducerId)
  if not v then return nil, err, code end
  local resp
  resp, err, code = c:request(API.InitProducerId, body, { version = v, deadline = deadline })
  if not resp then return nil, err, code end
  if resp.error_code ~= errors.NONE then
    return nil, pid_error("InitProducerId", resp.error_code)
  end
  return resp
end

-- A new producer id from whichever connected broker answers first (the
-- request goes to all of them at once, the other answers are dropped): a
-- slow broker does not hold up the first send round. false when no broker
-- is connected yet.
function _M:_first_pid(deadline)
  local client = self.client
  local body = { transactional_id = nil, transaction_timeout_ms = 2147483647, producer_id = -1, producer_epoch = -1 }
  local sent = {}
  for _, c in pairs(client.conns) do
    local v = c:is_connected() and c:version(API.InitProducerId)
    if v then
      local corr = c:send(API.InitProducerId, v, body, { deadline = deadline })
      if corr then sent[#sent + 1] = { c = c, corr = corr } end
    end
  end
  if not sent[1] then return false end
  local last_err, last_code = "no answer to InitProducerId", "network"
  while sent[1] and client.now() < deadline do
    local slice = #sent > 1 and math.min(deadline, client.now() + 20) or deadline
    for i = #sent, 1, -1 do
      local x = sent[i]
      local resp, err, code = x.c:receive(x.corr, slice)
      if resp then
        for j, y in ipairs(sent) do if j ~= i then y.c:abandon(y.corr) end end
        if resp.error_code ~= errors.NONE then return nil, pid_error("InitProducerId", resp.error_code) end
        return resp
      end
      if not (code == "timeout" and x.c:waiting(x.corr)) then
        table.remove(sent, i)
        last_err, last_code = err, code
      end
    end
  end
  for _, y in ipairs(sent) do y.c:abandon(y.corr) end
  return nil, last_err, last_code
end

-- Decides idempotence ("auto": on where the cluster has InitProducerId and
-- record format v2). Returns true (the producer id is asked for by
-- _acquire_pid), or nil, err, code (the round's batches then fail with it).
function _M:_init_idempotence()
  local client = self.client
  local magic, err, code = self:_magic()
  if not magic then return nil, err, code end
  local c
  c, err, code = client:any_broker()
  if not c then return nil, err, code end
  local v = c:version(API.InitProducerId)
  if not v or magic < 2 then
    if self.idem_mode == "auto" then
      self.idem_mode, self.idempotent = "off", false
      return true
    end
    return nil, ("enable_idempotence: %s does not support InitProducerId and record format v2 (Kafka 0.11+)")
      :format(c:name()), "unsupported"
  end
  self.idempotent, self.producer_id, self.producer_epoch = true, -1, -1
  return true
end

-- One attempt at a new producer id for an idempotent producer that holds
-- none (the first send round, or an epoch that would overflow), from
-- whichever broker answers first; a failure is tried again after
-- retry_backoff_ms, doubling up to retry_backoff_max_ms, while the
-- batches wait (their delivery deadline fails them, as in Java, where a
-- failed InitProducerId is enqueued again). true: an id is held (or
-- "auto" mode went off on a fatal error at the first id); false: not
-- yet; nil, err, code, kcode: fatal (the producer's state is too).
function _M:_acquire_pid()
  local client = self.client
  if self.pid_retry_at and client.now() < self.pid_retry_at then return false end
  local resp, err, code, kcode = client:call(function(deadline)
    local r, ferr, fcode, fkcode, fretr = self:_first_pid(deadline)
    if r ~= false then return r, ferr, fcode, fkcode, fretr end
    local conn, cerr, ccode = client:any_broker(deadline)
    if not conn then return nil, cerr, ccode end
    return init_pid(conn, { transactional_id = nil, transaction_timeout_ms = 2147483647, producer_id = -1,
      producer_epoch = -1 }, deadline)
  end, { max_retries = 0 })
  if resp then
    self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
    self.pid_attempts, self.pid_retry_at, self.pid_err, self.pid_held = 0, nil, nil, true
    return true
  end
  if code == "fenced" or code == "fatal" then
    if self.idem_mode == "auto" and not self.pid_held then -- e.g. no IdempotentWrite permission
      self.idem_mode, self.idempotent = "off", false
      return true
    end
    self:_txn_error("fatal_error", err, code, kcode)
    return nil, err, code, kcode
  end
  local n = (self.pid_attempts or 0) + 1
  local wait = math.min(self.retry_backoff_ms * 2 ^ (n - 1), self.retry_backoff_max_ms)
  self.pid_attempts, self.pid_retry_at, self.pid_err = n, client.now() + wait, err
  return false
end

-- The epoch bump (KIP-360) of an idempotent producer, local as in Kafka's
-- Java client (TransactionManager.bumpIdempotentProducerEpoch): no
-- request - the broker takes a higher epoch of a producer id it knows
-- when the batch starts at sequence 0, and one it does not know at any
-- sequence. Only when the epoch would overflow is the id dropped and a
-- new one asked for (_acquire_pid). The partitions marked reset restart
-- at 0 once their batches in flight have answered; the others keep their
-- stamped batches (sent again with the old id and epoch, so a duplicate
-- is still found) and restart at 0 after them.
function _M:_bump_local()
  self.need_bump = false
  if self.producer_epoch >= 32767 then
    self.producer_id, self.producer_epoch = -1, -1
  else
    self.producer_epoch = self.producer_epoch + 1
  end
end

-- Stamps tp's stamped batches again from sequence 0 under the producer's
-- id and epoch (nothing of tp in flight).
function _M:_restamp(tp)
  tp.pid, tp.reset = nil, false
  for _, b in ipairs(tp.queue) do
    if b.seq then self:_stamp(tp, b) end
  end
end

-- A new id or epoch for every partition at once (transactions: at
-- init_transactions, at a transaction's end), nothing in flight: every
-- partition restarts at 0 and the batches still queued are stamped again.
function _M:_reset_sequences(pid, epoch)
  self.producer_id, self.producer_epoch = pid, epoch
  self.need_bump = false
  for _, t in pairs(self.topics) do
    for _, tp in ipairs(t.order) do
      tp.drain = false
      self:_restamp(tp)
    end
  end
end

-- Fails every queued batch not in flight (a fatal or abortable state).
function _M:_fail_queued(err, code, kcode)
  for _, t in pairs(self.topics) do
    for _, tp in ipairs(t.order) do
      local q, i = tp.queue, 1
      while q[i] do
        local batch = q[i]
        if batch.state == "in_flight" then
          i = i + 1
        else
          self:_unqueue(tp, batch)
          if batch.seq and self.idempotent then self:_want_bump(tp, batch) end
          self:_done(tp, batch, nil, err, code, kcode)
        end
      end
    end
  end
end

-- Sends one round: the batches of every partition that are due (not in
-- flight, not waiting for their retry backoff), one request per leader
-- (grouped by the client), every request before any answer is read
-- (brokers work in parallel). Batches past their delivery deadline fail
-- here. The requests join self.in_flight. Without idempotence a partition
-- has one batch in flight at a time, so retries never reorder it; with
-- idempotence up to max_in_flight_requests_per_connection (5), in order,
-- one per request (each request carries at most one batch per
-- partition): a failed attempt stops the partition until its batches in
-- flight have answered, then its queue is sent again in order (the
-- broker's sequence checks refuse what would reorder it, and
-- DUPLICATE_SEQUENCE_NUMBER answers what it already has). Each partition
-- goes on as soon as its own answer is in (a slow broker holds up only
-- its own partitions). linger (the background sender): a partition's last
-- batch goes when full or linger_ms old, and self.bg_wake says when the
-- next batch is due.
function _M:_send_round(deadline, linger)
  self.bg_wake = math.huge
  local st = self.txn_state
  if st == "fatal_error" or st == "abortable_error" then
    local e = self.txn_error
    self:_fail_queued(e.err, e.code, e.kcode)
    return
  end
  if self.idempotent == nil and self.idem_mode ~= "off" then
    local ok, err, code = self:_init_idempotence()
    if not ok then
      self:_fail_queued(err, code)
      return
    end
  end
  -- an idempotent producer's own epoch bump, then a producer id if it has none
  local no_pid = false
  if self.idempotent and not self.transactional_id then
    if self.need_bump then self:_bump_local() end
    if self.producer_id < 0 then
      local ok, err, code, kcode = self:_acquire_pid()
      if ok == nil then
        self:_fail_queued(err, code, kcode)
        return
      end
      no_pid = not ok
    end
  end
  local idem = self.idempotent
  local pid, epoch = self.producer_id, self.producer_epoch
  local now = self.client.now()
  local items = {}
  local wake = no_pid and self.pid_retry_at or math.huge
  local maxf = idem and self.max_in_flight or 1
  local n_items = 0
  for _, topic in pairs(self.topics) do
    for _, tp in ipairs(topic.order) do
      tp.conn_wait = nil
      local q = tp.queue
      local i, n = 1, 0
      while q[i] do
        local batch = q[i]
        if batch.state == "in_flight" then
          n, i = n + 1, i + 1
        elseif now >= batch.expires then
          local why = batch.last_err or (no_pid and self.pid_err)
          self:_fail(tp, batch, ("delivery_timeout_ms (%d) expired after %d attempts%s"):format(
            self.delivery_timeout_ms, batch.attempts, why and (": " .. tostring(why)) or ""),
            "timeout", batch.last_kcode)
        else
          i = i + 1
        end
      end
      if tp.drain and n == 0 then tp.drain = false end
      -- after a bump: a partition whose sequences are broken restarts at 0
      -- once nothing of it is in flight; one that is not sends its stamped
      -- batches under the old id and epoch first, then restarts at 0
      local stale = idem and not no_pid and tp.pid and (tp.pid ~= pid or tp.epoch ~= epoch)
      if tp.reset and n == 0 and not no_pid and not self.need_bump then
        if stale then self:_restamp(tp) else tp.reset = false end
        stale = false
      end
      local old = stale and q[1] and q[1].seq and true or false
      if no_pid then
        for k = 1, #q do
          if q[k].state ~= "in_flight" then
            if q[k].expires < wake then wake = q[k].expires end
            break
          end
        end
      elseif q[1] and not (idem and (tp.drain or tp.reset)) then
        local slot = 0
        for k = 1, #q do
          local batch = q[k]
          if batch.state ~= "in_flight" then
            if n >= maxf or (old and not batch.seq) then break end
            if now < batch.next_try then
              if linger then
                local t = batch.next_try < batch.expires and batch.next_try or batch.expires
                if t < wake then wake = t end
              end
              break
            end
            if linger and not q[k + 1] and now < batch.born + linger then
              if batch.born + linger < wake then wake = batch.born + linger end
              break
            end
            n, slot, n_items = n + 1, slot + 1, n_items + 1
            items[#items + 1] = { topic = tp.topic, partition = tp.partition, tp = tp, batch = batch, slot = slot,
                                  at = n_items }
          end
        end
      end
    end
  end
  if self.need_bump and idem and not self.transactional_id then wake = now end -- (a batch expired: the bump)
  self.bg_wake = wake
  if #items == 0 then return end
  -- a partition's k-th batch goes into the k-th request to its leader: all
  -- first batches before any second one, so a partition's requests leave in order
  if maxf > 1 then
    table.sort(items, function(a, b)
      if a.slot ~= b.slot then return a.slot < b.slot end
      return a.at < b.at
    end)
  end
  if self.transactional_id then
    local ok = self:_add_partitions(items)
    if not ok then
      local e = self.txn_error
      self:_fail_queued(e.err, e.code, e.kcode)
      return
    end
  end
  local groups, failed = self.client:group(items, deadline)
  for _, f in ipairs(failed) do
    local it = f.item
    self:_retry(it.tp, it.batch, f.err, f.code)
  end
  local reqs = {}
  for _, g in ipairs(groups) do
    local cur = {} -- slot -> the request being filled
    for _, it in ipairs(g.items) do
      local batch = it.batch
      -- sealed: later messages go to a new batch. The builder itself goes
      -- into the request (encoded straight into the frame, no string);
      -- a retry encodes the same bytes again (the same sequence too).
      if batch.state == "open" then seal(self.acc, it.tp, batch) end
      if self.idempotent and not batch.seq then self:_stamp(it.tp, batch) end
      -- requests stay under max_request_bytes (at least one batch each):
      -- smaller frames recycle memory instead of faulting in fresh pages
      local req = cur[it.slot]
      if not req or (req.size > 0 and req.size + batch.size > self.max_request_bytes) then
        req = { topics = {}, list = {}, items = {}, size = 0, conn = g.conn }
        reqs[#reqs + 1] = req
        cur[it.slot] = req
      end
      req.size = req.size + batch.size
      req.items[#req.items + 1] = it
      local t = req.topics[it.topic]
      if not t then
        t = { name = it.topic, partition_data = {} }
        req.topics[it.topic] = t
        req.list[#req.list + 1] = t
      end
      t.partition_data[#t.partition_data + 1] = { index = it.partition, records = batch.b }
    end
  end
  -- send every request first, then read the answers: brokers work in
  -- parallel. max_in_flight_requests_per_connection bounds the requests
  -- waiting for an answer on each connection, as in Kafka's clients: a
  -- request past it waits for the next round after an answer there (in
  -- order: a partition's later batches are in later requests).
  local in_flight = self.in_flight
  local per_conn = {}
  for _, s in ipairs(in_flight) do per_conn[s.conn] = (per_conn[s.conn] or 0) + 1 end
  for _, req in ipairs(reqs) do
    local conn = req.conn
    if (per_conn[conn] or 0) >= self.max_in_flight then
      for _, it in ipairs(req.items) do it.tp.conn_wait = true end
    else
      local s = self:_send_request(req, deadline)
      if s then
        in_flight[#in_flight + 1] = s
        per_conn[conn] = (per_conn[conn] or 0) + 1
      end
    end
  end
end

-- Sends one Produce request: its in-flight record, or nil when it is
-- settled already (acks 0, or the send failed).
function _M:_send_request(req, deadline)
  local conn = req.conn
  local v, err, code = conn:version(PRODUCE)
  -- transactions v1: Produce at most v11 (v12 is what tells the broker
  -- to add the partition to the transaction itself, KIP-890); v2: v12+
  if v and self.transactional_id and v > 11 and self.txn_version ~= 2 then v = 11 end
  local corr
  if v then
    corr, err, code = conn:send(PRODUCE, v, { transactional_id = self.transactional_id, acks = self.acks,
      timeout_ms = self.timeout_ms, topic_data = req.list }, { no_response = self.acks == 0,
      timeout_ms = self.timeout_ms, deadline = deadline })
  end
  local s = { conn = conn, req = req, corr = corr }
  for _, it in ipairs(req.items) do it.batch.state = "in_flight" end
  if corr and self.acks ~= 0 then return s end
  self:_settle(s, corr and { responses = {} } or nil, err, code)
end

-- Reads the answers in flight until the deadline (now: only those already
-- there) and settles their batches: how many requests were settled.
function _M:_collect(deadline)
  local in_flight = self.in_flight
  local i, n = 1, #in_flight
  while in_flight[i] do
    local s = in_flight[i]
    local resp, err, code = s.conn:receive(s.corr, deadline)
    if not resp and code == "timeout" and s.conn:waiting(s.corr) then
      i = i + 1
    else
      table.remove(in_flight, i)
      self:_settle(s, resp, err, code)
    end
  end
  return n - #in_flight
end

-- Waits for the oldest answer in flight until `until_t`, settles it when it came.
function _M:_wait_one(until_t)
  local s = self.in_flight[1]
  local resp, err, code = s.conn:receive(s.corr, until_t)
  if not resp and code == "timeout" and s.conn:waiting(s.corr) then return end
  table.remove(self.in_flight, 1)
  self:_settle(s, resp, err, code)
end

-- Produce errors of an idempotent producer that are fatal, as in Kafka's
-- Java client (TransactionManager.maybeTransitionToErrorState): a fenced
-- producer id, and authorization. INVALID_PRODUCER_EPOCH is not (Java's
-- InvalidProducerEpochException, KIP-588): as any other error that is not
-- retriable the batch fails (a stamped one: the epoch is bumped); in a
-- transaction it is abortable.
local FENCED = { [errors.PRODUCER_FENCED] = true }
local FATAL = { [errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] = true, [errors.CLUSTER_AUTHORIZATION_FAILED] = true }

function _M:_settle(s, resp, err, code)
  local results = {}
  if resp then
    for _, tr in ipairs(resp.responses or {}) do
      for _, pr in ipairs(tr.partition_responses or {}) do results[tr.name .. "\0" .. pr.index] = pr end
    end
  end
  for _, it in ipairs(s.req.items) do
    local tp, topic, partition, batch = it.tp, it.topic, it.partition, it.batch
    batch.state = "sealed"
    local q = tp.queue
    if not resp then
      self:_retry(tp, batch, err, code)
    elseif self.acks == 0 then
      self:_unqueue(tp, batch)
      self:_done(tp, batch, -1)
    else
      local pr = results[topic .. "\0" .. partition]
      local ec = pr and pr.error_code
      if not pr then
        self:_retry(tp, batch, "no result for the partition in the Produce response", "protocol")
      elseif ec == errors.NONE or (ec == errors.DUPLICATE_SEQUENCE_NUMBER and self.idempotent) then
        -- a duplicate: the broker has the batch already (a retry of an attempt whose answer was lost)
        self:_unqueue(tp, batch)
        self:_done(tp, batch, pr.base_offset or -1)
      else
        local e = errors.info(ec)
        local msg = ("%s/%d: %s (%s)%s"):format(topic, partition, e.name, e.message,
          pr.error_message and (": " .. pr.error_message) or "")
        if self.idempotent and (ec == errors.OUT_OF_ORDER_SEQUENCE_NUMBER or ec == errors.UNKNOWN_PRODUCER_ID) then
          if q[1] ~= batch then
            -- an earlier batch of the partition failed: this one is sent again after it
            self:_retry(tp, batch, msg, "retriable", ec)
          elseif self.transactional_id then
            self:_fail(tp, batch, msg, "abortable", ec)
          else
            -- the broker lost the producer's state or a batch acknowledged
            -- before (unclean leader election, retention): retried, under a
            -- new epoch from sequence 0 (Java's canRetry: always retried)
            self:_want_bump(tp, batch)
            self:_retry(tp, batch, msg, "retriable", ec)
          end
        elseif self.transactional_id and ec == errors.INVALID_PRODUCER_EPOCH then
          -- a transaction the coordinator ended (its timeout) or a newer
          -- instance's epoch: abortable, as the Java client takes it
          -- (KIP-588); the abort's EndTxn tells fenced from timed out
          self:_fail(tp, batch, msg, "abortable", ec)
        elseif self.idempotent and FENCED[ec] then
          self:_txn_error("fatal_error", msg .. " (another producer with this id took over)", "fenced", ec)
          self:_fail(tp, batch, msg, "fenced", ec)
        elseif self.idempotent and FATAL[ec] then
          self:_txn_error("fatal_error", msg, "fatal", ec)
          self:_fail(tp, batch, msg, "fatal", ec)
        elseif e.retriable then
          self:_retry(tp, batch, msg, "retriable", e.code)
        else
          if e.code == errors.MESSAGE_TOO_LARGE and batch.count > 1 then
            self:_split(tp, batch)
          else
            self:_fail(tp, batch, msg, self.transactional_id and "abortable" or "kafka", e.code)
          end
        end
      end
    end
  end
end

-- Splits the first batch of a partition, refused as a whole with
-- MESSAGE_TOO_LARGE (the topic's max.message.bytes limits a batch), into
-- one batch per message, in order: only a message that is too large by
-- itself then fails (the Java client splits batches the same way).
function _M:_split(tp, batch)
  local q = tp.queue
  local at = 1
  for i = 1, #q do if q[i] == batch then at = i end end
  table.remove(q, at)
  local msgs = proto.decode_records(batch.b:encode { base_offset = 0 })
  batch.b:close()
  local ids, runs = {}, batch.runs
  for r = 1, #runs, 2 do
    for id = runs[r], runs[r] + runs[r + 1] - 1 do ids[#ids + 1] = id end
  end
  local left = batch.size
  for i = #msgs, 1, -1 do
    local m = msgs[i]
    local size = i == 1 and left or math.min(left, (m.value and #m.value or 0) + (m.key and #m.key or 0) + 70)
    left = left - size
    local b = proto.batch { magic = self.magic, compression = self.codec }
    assert(b:append(m.value, m.key, m.headers, m.timestamp))
    local nb = { b = b, state = "sealed", runs = { ids[i], 1 }, first_id = ids[i], count = 1, size = size,
      attempts = batch.attempts, next_try = 0, born = batch.born, expires = batch.expires }
    if batch.seq then
      -- the parts keep the refused batch's id, epoch and sequence range, one number each
      nb.seq, nb.pid, nb.epoch = seq_add(batch.seq, i - 1), batch.pid, batch.epoch
      b:stamp { producer_id = batch.pid, producer_epoch = batch.epoch, base_sequence = nb.seq,
        transactional = self.transactional_id ~= nil }
    end
    table.insert(q, at, nb)
  end
end

-- At a flush deadline: answers still in flight are abandoned and their
-- messages reported failed (they may have been written: at least once).
function _M:_abandon(why)
  for _, s in ipairs(self.in_flight) do
    s.conn:abandon(s.corr)
    for _, it in ipairs(s.req.items) do
      it.batch.state = "sealed"
      self:_fail(it.tp, it.batch, (why or "flush timed out") .. " waiting for the broker's answer "
        .. "(the messages may have been written)", "timeout")
    end
  end
  self.in_flight = {}
end

-- What send() does when linger is over: settle the answers already there,
-- send what is due, and return without waiting.
function _M:_kick()
  self:_collect(self.client.now())
  self:_send_round()
  self.first_time = nil
end

-- A failed attempt: the batch waits backoff(attempts) (exponential, up to
-- retry_backoff_max_ms) before it is sent again, until its delivery
-- deadline or max_retries. A broker in reconnect backoff ("backoff") is
-- not an attempt: the batch waits until the broker may be tried again.
-- Non-retriable codes fail the batch at once.
function _M:_retry(tp, batch, err, code, kcode)
  if self.idempotent then tp.drain = true end
  self.client:invalidate(tp.topic)
  self.topics[tp.topic].n = nil
  acc_topic(self.acc, tp.topic, nil)
  local now = self.client.now()
  batch.last_err, batch.last_code, batch.last_kcode = err, code, kcode
  if code == "backoff" then
    local t = self.client:next_ready()
    batch.next_try = t < math.huge and t or now + self.retry_backoff_ms
    return
  end
  batch.attempts = batch.attempts + 1
  if not client_mod.RETRIABLE[code] or (self.max_retries and batch.attempts > self.max_retries) then
    -- (a nil code would be a bug: "internal")
    self:_fail(tp, batch, ("%s (after %d attempts)"):format(tostring(err), batch.attempts), code or "internal", kcode)
    return
  end
  local b = self.retry_backoff_ms * 2 ^ (batch.attempts - 1)
  if b > self.retry_backoff_max_ms then b = self.retry_backoff_max_ms end
  batch.next_try = now + b
end

-- The earliest time a queued batch not in flight is due (its retry or its
-- delivery deadline). A partition at its bound of batches in flight, or
-- waiting for its connection's, or draining after a failed attempt, is
-- due when an answer comes (flush waits on the answers then: without this
-- it polled them in a busy loop).
function _M:_next_due()
  local t = math.huge
  local idem = self.idempotent
  if idem and self.need_bump and not self.transactional_id then return self.client.now() end -- (the bump)
  -- no producer id yet: the next attempt at one, or a deadline
  local no_pid = idem and not self.transactional_id and self.producer_id < 0
  if no_pid then t = self.pid_retry_at or 0 end
  local maxf = idem and self.max_in_flight or 1
  local pid, epoch = self.producer_id, self.producer_epoch
  for _, topic in pairs(self.topics) do
    for _, tp in ipairs(topic.order) do
      local q = tp.queue
      local n = 0
      -- after a bump, an unstamped batch waits for the stamped ones in flight
      local old = idem and tp.pid and (tp.pid ~= pid or tp.epoch ~= epoch) and q[1] and q[1].seq
      for i = 1, #q do
        local b = q[i]
        if b.state == "in_flight" then
          n = n + 1
        else
          if no_pid then
            if b.expires < t then t = b.expires end
          elseif n < maxf and not tp.conn_wait and not (n > 0 and (tp.drain or tp.reset or (old and not b.seq))) then
            local due = b.next_try < b.expires and b.next_try or b.expires
            if due < t then t = due end
          end
          break
        end
      end
    end
  end
  return t
end

-- Everything buffered to the brokers, until it is settled or timeout_ms has
-- passed. With room (a message's accounted size: send() on a full buffer)
-- it returns as soon as that message fits: the answers of the oldest
-- requests make room while the newer ones are still in flight, so the
-- producer does not stall until the whole buffer is acknowledged.
function _M:_flush(timeout_ms, room)
  local client = self.client
  local deadline = timeout_ms and client.now() + timeout_ms or math.huge
  local acc, max_n, max_bytes = self.acc, self.max_buffered, self.max_buffered_bytes
  local function done()
    local _, n, bytes = acc_counts(acc)
    return n == 0 or (room and n < max_n and bytes + room <= max_bytes)
  end
  while not done() do
    self:_send_round(deadline)
    -- every answer already there; one settled: its partitions (and those
    -- waiting for its connection) are due at once
    local settled = self:_collect(client.now()) > 0
    if done() then break end
    local t = client.now()
    if t >= deadline then break end
    local wake = settled and t or math.min(deadline, self:_next_due())
    if self.in_flight[1] then
      -- wait on the oldest answer; with several in flight, in short slices
      -- so the partitions of a fast broker go on while a slow one answers
      if #self.in_flight > 1 and t + 20 < wake then wake = t + 20 end
      self:_wait_one(math.max(wake, t))
    elseif wake > t then
      -- everything waits for a retry backoff: sleep until the first is due
      -- (a second at most: a round too many costs little, a lost wake-up a hang)
      client.sleep(math.ceil(math.min(wake - t, 1000)))
    end
  end
  if room then
    self.first_time = nil -- (what was open went out: as after _kick)
    return
  end
  if nbuf_of(self) > 0 then
    -- the deadline passed: answers in flight are given up, the rest was not sent
    self:_abandon()
    for _, t in pairs(self.topics) do
      for _, tp in ipairs(t.order) do
        while tp.queue[1] do self:_fail(tp, tp.queue[1], "flush timed out before the message was sent", "timeout") end
      end
    end
  end
  self:_prune()
  self.first_time = nil
end

-- After a flush: the next unkeyed message of each topic picks a partition
-- anew, and partitions with nothing queued are dropped so partitions not
-- used any more cost a send round nothing (an idempotent producer keeps
-- those whose sequence numbers have moved: the broker expects the next one).
function _M:_prune()
  for name, t in pairs(self.topics) do
    t.sticky = nil
    acc_sticky(self.acc, name, nil)
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

-- flush([timeout_ms]) -> reports, failed, delivered, callback_errors.
-- reports: every message sent since the last flush, in send order (with
-- delivery_reports = "errors" only the failed ones, and those whose
-- on_delivery raised); failed and delivered: counts; callback_errors: how
-- many on_delivery calls raised (each such report carries callback_error).
-- Blocks until each message is acknowledged or has failed: its delivery
-- deadline (delivery_timeout_ms from its batch's first message) passed,
-- a non-retriable error, max_retries, or timeout_ms (a deadline over the
-- whole call: what is not settled then is reported failed with code
-- "timeout"; a message in flight then may still have been written).
function _M:flush(timeout_ms)
  check.int("flush", "timeout_ms", timeout_ms, nil, 0)
  if self.bg then return self:_bg_flush(timeout_ms) end
  self:_flush(timeout_ms)
  local reports = self.reports
  self.reports = {}
  table.sort(reports, function(a, b) return a.id < b.id end)
  local failed = 0
  for _, r in ipairs(reports) do if r.err then failed = failed + 1 end end
  local delivered, cb_errors = self.delivered, self.callback_errors
  self.delivered, self.callback_errors = 0, 0
  return reports, failed, delivered, cb_errors
end

-- send_sync(topic, value [, opts]) -> partition, offset | nil, err, code
-- (flushes everything buffered, like flush()).
function _M:send_sync(topic, value, o)
  if self.bg then self:_bg_check_wait("send_sync") end
  local id, err, code = self:send(topic, value, o)
  if not id then return nil, err, code end
  if self.bg then return self:_bg_send_sync(id) end
  local only = self.only_errors
  self.only_errors = false -- this one's report is needed
  self:_flush()
  self.only_errors = only
  for i, r in ipairs(self.reports) do
    if r.id == id then
      table.remove(self.reports, i)
      if r.err then return nil, r.err, r.code, r.error_code end
      self.delivered = self.delivered - 1 -- reported here, not by the next flush()
      return r.partition, r.offset
    end
  end
  return nil, "no delivery report", "internal"
end

-- ---------------------------------------------------------------------------
-- The transaction manager. States (Java's names): "uninitialized" ->
-- init_transactions() -> "ready" -> begin_transaction() -> "in_transaction"
-- -> commit_transaction() ("committing") or abort_transaction() ("aborting")
-- -> "ready". A failed message, a refused AddPartitionsToTxn or offsets
-- commit makes it "abortable_error" (abort_transaction() and go on); a
-- newer producer with the same transactional_id (PRODUCER_FENCED;
-- INVALID_PRODUCER_EPOCH from the coordinator - from a partition leader it
-- is abortable, KIP-588: the coordinator may have timed the transaction
-- out, and the abort's EndTxn tells) or an authorization failure makes it
-- "fatal_error": every call then returns nil, err, "fenced" (or "fatal").
--
-- Two protocols, as Kafka's Java client picks them (TransactionManager's
-- isTransactionV2Enabled): where the cluster has finalized the feature
-- transaction.version >= 2 (ApiVersions v3+; the default of clusters
-- formatted by Kafka 4.0+) transactions v2 (KIP-890 part 2): no
-- AddPartitionsToTxn (Produce v12+ makes the partition leader add the
-- partition), no AddOffsetsToTxn (TxnOffsetCommit v5 makes the group
-- coordinator add the offsets), and EndTxn v5, whose answer carries the
-- producer id and epoch of the next transaction (the coordinator bumps the
-- epoch at every end, a new producer id when it overflows): they are used
-- from then on, and the sequences start again at 0. An aborted transaction
-- whose producer state is in doubt needs no InitProducerId bump then: its
-- EndTxn bumps. Elsewhere (Kafka 3.x, or the feature below 2) v1 (KIP-98):
-- AddPartitionsToTxn before a partition's first batch, Produce at most
-- v11, AddOffsetsToTxn then TxnOffsetCommit at most v4, EndTxn at most v4.
-- The version is read at init_transactions() and again at each end of a
-- transaction, for the next one (never inside one); a switch from 1 to 2
-- bumps the epoch first (InitProducerId), as Java does, so nothing added
-- under v1 counts as added under v2. stats().transaction_version says which.

local TXN_RETRIABLE = { [errors.CONCURRENT_TRANSACTIONS] = true, [errors.COORDINATOR_LOAD_IN_PROGRESS] = true,
  [errors.COORDINATOR_NOT_AVAILABLE] = true, [errors.NOT_COORDINATOR] = true, [errors.REQUEST_TIMED_OUT] = true,
  [errors.UNKNOWN_TOPIC_OR_PARTITION] = true }
local TXN_FATAL = { [errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] = true,
  [errors.CLUSTER_AUTHORIZATION_FAILED] = true, [errors.INVALID_TXN_STATE] = true,
  [errors.INVALID_PRODUCER_ID_MAPPING] = true,
  [errors.UNSUPPORTED_VERSION] = true, [errors.UNSUPPORTED_FOR_MESSAGE_FORMAT] = true,
  [errors.INVALID_TRANSACTION_TIMEOUT] = true }
local TXN_FENCED = { [errors.PRODUCER_FENCED] = true, [errors.INVALID_PRODUCER_EPOCH] = true,
  [errors.TRANSACTION_COORDINATOR_FENCED] = true }

-- _kafka_error(what, error_code) -> err, code, kcode, retriable: the code
-- is "retriable", "fenced", "fatal", "abortable" (in a transaction) or "kafka".
function _M:_kafka_error(what, ec)
  local e = errors.info(ec)
  local msg = ("%s: %s (%s)"):format(what, e.name, e.message)
  if TXN_RETRIABLE[ec] or (e.retriable and ec ~= errors.CONCURRENT_TRANSACTIONS) then
    return msg, "retriable", ec, true
  end
  if TXN_FENCED[ec] then return msg .. " (another producer with this id took over)", "fenced", ec, false end
  if TXN_FATAL[ec] then return msg, "fatal", ec, false end
  if self.transactional_id then return msg, "abortable", ec, false end
  return msg, "kafka", ec, false
end

local FATAL_RETRY_MAX_MS = 60000

-- Enters "abortable_error" or "fatal_error" (a fatal state is never left,
-- but by an idempotent producer in background mode: _bg_recover;
-- an abortable one only for a fatal one).
function _M:_txn_error(state, err, code, kcode)
  if state == "fatal_error" then
    if self.txn_state ~= "fatal_error" then
      self.txn_state, self.txn_error = "fatal_error", { err = err, code = code, kcode = kcode }
      if self.bg and not self.transactional_id then
        -- in nginx nothing can make a new producer for the worker: the
        -- first send after retry_backoff_max_ms (doubling per failure in a
        -- row, up to FATAL_RETRY_MAX_MS) asks for a new producer id, so a
        -- fenced id, an ACL or a broker upgrade is recovered from without
        -- a reload
        local n = (self.fatal_attempts or 0) + 1
        self.fatal_attempts = n
        self.txn_error.retry_at = self.client.now()
          + math.min(self.retry_backoff_max_ms * 2 ^ (n - 1), FATAL_RETRY_MAX_MS)
      end
      if self.bg then self.last_error = { state = "fatal", err = err, code = code, kcode = kcode } end
    end
    return
  end
  if not self.transactional_id then return end
  if self.txn_state == "in_transaction" or self.txn_state == "committing" then
    self.txn_state, self.txn_error = "abortable_error", { err = err, code = code, kcode = kcode }
  end
end

-- A request to the transaction coordinator, retried through the client:
-- check(resp) -> true | nil, err, code, kcode, retriable; o: client:call's
-- options.
function _M:_txn_call(api, body, cap, check_resp, o)
  local client = self.client
  return client:call(function(deadline)
    local c = self.txn_coord
    local err, code, kcode, retriable
    if not c or not c:is_connected() then
      c, err, code, kcode, retriable = client:find_coordinator(self.transactional_id, 1, deadline)
      if not c then return nil, err, code, kcode, retriable end
      self.txn_coord = c
    end
    local v
    v, err, code = c:version(api)
    if not v then return nil, err, code end
    if cap and v > cap then v = cap end
    local req, berr, bcode = body(v)
    if not req then return nil, berr, bcode, nil, false end
    local resp
    resp, err, code = c:request(api, req, { version = v, deadline = deadline })
    if not resp then
      self.txn_coord = nil
      return nil, err, code
    end
    local ok
    ok, err, code, kcode, retriable = check_resp(resp)
    if not ok and (kcode == errors.NOT_COORDINATOR or kcode == errors.COORDINATOR_NOT_AVAILABLE) then
      self.txn_coord = nil
    end
    if not ok then return nil, err, code, kcode, retriable end
    return ok
  end, o)
end

-- CONCURRENT_TRANSACTIONS on the first AddPartitionsToTxn of a transaction
-- means the previous one is still writing its markers: tried again after
-- 20 ms, not retry_backoff_ms (as Kafka's Java client does, KAFKA-5482).
local FIRST_ADD_BACKOFF_MS = 20

function _M:_top_error(what)
  return function(resp)
    if resp.error_code ~= errors.NONE then return nil, self:_kafka_error(what, resp.error_code) end
    return resp
  end
end

-- The previous transaction's end, seen from the next one's first add.
-- EndTxn is answered once the outcome is logged (PrepareCommit or
-- PrepareAbort); the markers are written after that (1-8 ms on one Kafka
-- 4.1 broker, measured). A first add inside that window is refused with
-- CONCURRENT_TRANSACTIONS and waits 20 ms: v1's AddPartitionsToTxn here
-- (FIRST_ADD_BACKOFF_MS), v2's Produce inside the broker
-- (add.partitions.to.txn.retry.backoff.ms). Asking the coordinator
-- (DescribeTransactions, Kafka 3.0+) until the markers are written costs the
-- window and no more. Only right after an end (SETTLE_CHECK_MS, else the
-- window has passed and a check is a wasted round trip); asked again after
-- 1 ms, doubling up to 32 ms, for at most SETTLE_MAX_MS (markers that take
-- longer are stuck on something the broker retries anyway). Best effort: an
-- error or an old broker ends the wait. self.txn_settled: the state the
-- last check ended on (stats()).
local SETTLE_CHECK_MS = 100
local SETTLE_MAX_MS = 1000
local SETTLING = { PrepareCommit = true, PrepareAbort = true }

function _M:_await_previous_end()
  local ended = self.txn_ended
  self.txn_ended = nil
  local client = self.client
  local c = self.txn_coord
  if not ended or client.now() - ended > SETTLE_CHECK_MS or not (c and c:is_connected()) then return end
  local v = c:version(API.DescribeTransactions)
  if not v then return end
  local deadline = client.now() + math.min(SETTLE_MAX_MS, c.request_timeout_ms)
  local req = { transactional_ids = { self.transactional_id } }
  local pause = 1
  repeat
    local resp = c:request(API.DescribeTransactions, req, { version = v, deadline = deadline })
    local st = resp and resp.transaction_states and resp.transaction_states[1]
    if not st or st.error_code ~= errors.NONE then return end
    self.txn_settled = st.transaction_state
    if not SETTLING[st.transaction_state] then return end
    self.settle_waits = (self.settle_waits or 0) + 1
    client.sleep(pause)
    pause = math.min(pause * 2, 32)
  until client.now() >= deadline
end

-- A state check: misuse raises; in an error state returns the error.
function _M:_txn_guard(where, ...)
  if not self.transactional_id then error(where .. ": the producer has no transactional_id", 3) end
  local st = self.txn_state
  for i = 1, select("#", ...) do
    if st == select(i, ...) then return true end
  end
  if st == "fatal_error" or st == "abortable_error" then
    local e = self.txn_error
    return nil, e.err, e.code, e.kcode
  end
  error(("%s: not allowed in transaction state %q"):format(where, st), 3)
end

-- init_transactions() -> true | nil, err, code: the producer id and epoch of
-- the transactional_id from its coordinator; an earlier producer with the
-- same id is fenced and its open transaction aborted.
function _M:init_transactions()
  local ok, err, code, kcode = self:_txn_guard("init_transactions", "uninitialized")
  if not ok then return nil, err, code, kcode end
  local magic
  magic, err, code = self:_magic()
  if not magic then return nil, err, code end
  if magic < 2 then return nil, "transactions need record format v2 (Kafka 0.11+)", "unsupported" end
  local resp
  resp, err, code, kcode = self:_txn_call(API.InitProducerId, function()
    return { transactional_id = self.transactional_id, transaction_timeout_ms = self.transaction_timeout_ms,
      producer_id = -1, producer_epoch = -1 }
  end, nil, self:_top_error("InitProducerId " .. self.transactional_id))
  if not resp then
    if code == "fenced" or code == "fatal" then self:_txn_error("fatal_error", err, code, kcode) end
    return nil, err, code, kcode
  end
  self.idempotent, self.idem_mode = true, "on"
  self:_reset_sequences(resp.producer_id, resp.producer_epoch)
  self.txn_version = self:_cluster_txn_version()
  self.txn_state = "ready"
  return true
end

-- The transaction protocol to use now: 2 where the cluster has finalized
-- transaction.version >= 2 and the versions v2 needs are not capped away
-- (max_versions: Produce v12, TxnOffsetCommit v5, EndTxn v5), else 1.
function _M:_cluster_txn_version()
  local level, c = self.client:finalized_feature("transaction.version")
  if level < 2 then return 1 end
  for api, min in pairs { [API.Produce] = 12, [API.TxnOffsetCommit] = 5, [API.EndTxn] = 5 } do
    local v = c:version(api)
    if not v or v < min then return 1 end
  end
  return 2
end

-- begin_transaction() -> true | nil, err, code
function _M:begin_transaction()
  local ok, err, code, kcode = self:_txn_guard("begin_transaction", "ready")
  if not ok then return nil, err, code, kcode end
  self.txn_state, self.txn_parts, self.txn_has_offsets = "in_transaction", {}, false
  return true
end

-- AddPartitionsToTxn for the partitions of a send round not in the
-- transaction yet, in one request. true | nil (the state says why). With
-- transactions v2 the Produce request adds them: they are only noted (the
-- transaction has begun on the cluster once a batch went out).
function _M:_add_partitions(items)
  local parts = self.txn_parts
  if next(parts) == nil then self:_await_previous_end() end
  if self.txn_version == 2 then
    for _, it in ipairs(items) do
      local tp = parts[it.topic]
      if not tp then
        tp = {}
        parts[it.topic] = tp
      end
      tp[it.partition] = true
    end
    return true
  end
  local new, by_topic, n = {}, {}, 0
  for _, it in ipairs(items) do
    local tp = parts[it.topic]
    if not (tp and tp[it.partition]) then
      local t = by_topic[it.topic]
      if not t then
        t = { name = it.topic, partitions = {}, seen = {} }
        by_topic[it.topic] = t
        new[#new + 1] = t
      end
      if not t.seen[it.partition] then
        t.seen[it.partition] = true
        t.partitions[#t.partitions + 1] = it.partition
        n = n + 1
      end
    end
  end
  if n == 0 then return true end
  local topics = {}
  for i, t in ipairs(new) do topics[i] = { name = t.name, partitions = t.partitions } end
  local first_add = next(parts) == nil
  local ok, err, code, kcode = self:_txn_call(API.AddPartitionsToTxn, function()
    return { v3_and_below_transactional_id = self.transactional_id, v3_and_below_producer_id = self.producer_id,
      v3_and_below_producer_epoch = self.producer_epoch, v3_and_below_topics = topics }
  end, 3, function(resp)
    local first
    for _, tr in ipairs(resp.results_by_topic_v3_and_below or {}) do
      for _, pr in ipairs(tr.results_by_partition or {}) do
        local ec = pr.partition_error_code
        -- OPERATION_NOT_ATTEMPTED: refused because another partition was
        if ec ~= errors.NONE and ec ~= errors.OPERATION_NOT_ATTEMPTED then
          if not first or TXN_RETRIABLE[ec] then first = { tr.name, pr.partition_index, ec } end
        end
      end
    end
    if first then
      return nil, self:_kafka_error(("AddPartitionsToTxn %s/%d"):format(first[1], first[2]), first[3])
    end
    return true
  end, first_add and { backoff = function(kc) return kc == errors.CONCURRENT_TRANSACTIONS and FIRST_ADD_BACKOFF_MS end })
  if not ok then
    local fatal = code == "fenced" or code == "fatal"
    self:_txn_error(fatal and "fatal_error" or "abortable_error", err, fatal and code or "abortable", kcode)
    return nil
  end
  for _, t in ipairs(new) do
    local tp = parts[t.name]
    if not tp then
      tp = {}
      parts[t.name] = tp
    end
    for _, p in ipairs(t.partitions) do tp[p] = true end
  end
  return true
end

local function group_meta(where, gm)
  if type(gm) == "string" then return { group_id = gm, generation_id = -1, member_id = "" } end
  if type(gm) ~= "table" or type(gm.group_id) ~= "string" then
    check.fail(where, "group_metadata", "a table {group_id=, generation_id=, member_id=} or a group id", gm)
  end
  check.int(where, "group_metadata.generation_id", gm.generation_id, nil)
  check.typed(where, "group_metadata.member_id", gm.member_id, nil, "string")
  check.typed(where, "group_metadata.group_instance_id", gm.group_instance_id, nil, "string")
  return gm
end

-- send_offsets_to_transaction(offsets, group_metadata) -> true | nil, err, code:
-- the consumer's offsets ({{topic=, partition=, offset=, metadata=}...},
-- the next offsets to read) committed with the transaction
-- (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator with
-- its generation and member id: a zombie member's commit is refused).
function _M:send_offsets_to_transaction(offsets, gm)
  local W = "send_offsets_to_transaction"
  if type(offsets) ~= "table" then check.fail(W, "offsets", "an array of {topic=, partition=, offset=}", offsets) end
  for i, o in ipairs(offsets) do
    if type(o) ~= "table" or type(o.topic) ~= "string" then
      check.fail(W, ("offsets[%d]"):format(i), "a table {topic=, partition=, offset=}", o)
    end
    check.partition(W, ("offsets[%d].partition"):format(i), o.partition)
    check.int(W, ("offsets[%d].offset"):format(i), o.offset, nil, 0)
  end
  gm = group_meta(W, gm)
  local ok, err, code, kcode = self:_txn_guard(W, "in_transaction")
  if not ok then return nil, err, code, kcode end
  local v2 = self.txn_version == 2
  if next(self.txn_parts) == nil and not self.txn_has_offsets then self:_await_previous_end() end
  if v2 then
    ok = true -- TxnOffsetCommit v5 adds the group's offsets to the transaction itself
  else
    ok, err, code, kcode = self:_txn_call(API.AddOffsetsToTxn, function()
      return { transactional_id = self.transactional_id, producer_id = self.producer_id,
        producer_epoch = self.producer_epoch, group_id = gm.group_id }
    end, nil, self:_top_error("AddOffsetsToTxn " .. gm.group_id))
  end
  if ok then
    self.txn_has_offsets = true
    local topics, by = {}, {}
    for _, o in ipairs(offsets) do
      local t = by[o.topic]
      if not t then
        t = { name = o.topic, partitions = {} }
        by[o.topic] = t
        topics[#topics + 1] = t
      end
      t.partitions[#t.partitions + 1] = { partition_index = o.partition, committed_offset = o.offset,
        committed_leader_epoch = o.leader_epoch or -1, committed_metadata = o.metadata or "" }
    end
    local client = self.client
    ok, err, code, kcode = client:call(function(deadline)
      local c, cerr, ccode, ckcode, cretr = client:find_coordinator(gm.group_id, 0, deadline)
      if not c then return nil, cerr, ccode, ckcode, cretr end
      local v
      v, cerr, ccode = c:version(API.TxnOffsetCommit)
      if not v then return nil, cerr, ccode end
      local cap = v2 and 5 or 4 -- v5: the group coordinator adds the offsets to the transaction (v2 only)
      if v > cap then v = cap end
      if v2 and v < 5 then
        return nil, ("%s: TxnOffsetCommit v%d cannot add offsets to a transaction v2 (v5+)"):format(c:name(), v),
          "fatal", nil, false
      end
      local resp
      resp, cerr, ccode = c:request(API.TxnOffsetCommit, { transactional_id = self.transactional_id,
        group_id = gm.group_id, producer_id = self.producer_id, producer_epoch = self.producer_epoch,
        generation_id = gm.generation_id or -1, member_id = gm.member_id or "",
        group_instance_id = gm.group_instance_id, topics = topics }, { version = v, deadline = deadline })
      if not resp then return nil, cerr, ccode end
      for _, tr in ipairs(resp.topics or {}) do
        for _, pr in ipairs(tr.partitions or {}) do
          if pr.error_code ~= errors.NONE then
            return nil, self:_kafka_error(("TxnOffsetCommit %s %s/%d"):format(gm.group_id, tr.name,
              pr.partition_index), pr.error_code)
          end
        end
      end
      return true
    end)
  end
  if not ok then
    local fatal = code == "fenced" or code == "fatal"
    self:_txn_error(fatal and "fatal_error" or "abortable_error", err, fatal and code or "abortable", kcode)
    return nil, err, fatal and code or "abortable", kcode
  end
  return true
end

-- EndTxn (committed or not; none when nothing was added), then the
-- protocol of the next transaction is read again. v2: EndTxn v5 bumps the
-- epoch every time and its answer has the id and epoch to use. v1: after
-- an abort whose producer state is in doubt (a message given up after it
-- was sent), and before a move to v2, the epoch is bumped (InitProducerId
-- with the current id and epoch, KIP-360): after the EndTxn, as Kafka's
-- Java client does - an InitProducerId while the transaction is open
-- aborts it with a new epoch, and its own retry is then refused as fenced.
function _M:_end_txn(commit)
  local touched = self.txn_has_offsets or next(self.txn_parts) ~= nil
  local v2 = self.txn_version == 2
  local ok, err, code, kcode = true, nil, nil, nil
  if touched then
    ok, err, code, kcode = self:_txn_call(API.EndTxn, function(v)
      if v2 and v < 5 then
        return nil, "the transaction coordinator's EndTxn (v" .. v .. ") cannot end a transaction v2 (v5+)", "fatal"
      end
      return { transactional_id = self.transactional_id, producer_id = self.producer_id,
        producer_epoch = self.producer_epoch, committed = commit }
    end, v2 and 5 or 4, self:_top_error((commit and "EndTxn (commit) " or "EndTxn (abort) ") .. self.transactional_id))
    -- v5: the next transaction's producer id and epoch (-1 before v5)
    if ok and ok.producer_id and ok.producer_id >= 0 then self:_reset_sequences(ok.producer_id, ok.producer_epoch) end
  end
  local next_v = ok and self:_cluster_txn_version()
  if ok and not v2 and ((not commit and self.need_bump) or next_v == 2) then
    ok, err, code, kcode = self:_txn_call(API.InitProducerId, function(v)
      if v < 3 then
        return nil, "the transaction coordinator's InitProducerId (v" .. v .. ") cannot bump the epoch (v3+, Kafka "
          .. "2.5+), which a message in doubt needs", "fatal"
      end
      return { transactional_id = self.transactional_id, transaction_timeout_ms = self.transaction_timeout_ms,
        producer_id = self.producer_id, producer_epoch = self.producer_epoch }
    end, nil, self:_top_error("InitProducerId (epoch bump) " .. self.transactional_id))
    if ok then self:_reset_sequences(ok.producer_id, ok.producer_epoch) end
  end
  if not ok then
    if code == "fenced" or code == "fatal" then self:_txn_error("fatal_error", err, code, kcode) end
    return nil, err, code, kcode
  end
  self.txn_version = next_v
  self.txn_state, self.txn_error, self.txn_parts, self.txn_has_offsets = "ready", nil, {}, false
  if touched then self.txn_ended = self.client.now() end
  return true
end

-- commit_transaction([timeout_ms]) -> true | nil, err, code: flushes (every
-- message of the transaction acknowledged, or the transaction is
-- abortable: nil, err, "abortable"), then EndTxn. A commit that gave up
-- on a retriable error may be called again.
function _M:commit_transaction(timeout_ms)
  check.int("commit_transaction", "timeout_ms", timeout_ms, nil, 0)
  local ok, err, code, kcode = self:_txn_guard("commit_transaction", "in_transaction", "committing")
  if not ok then return nil, err, code, kcode end
  self:_flush(timeout_ms)
  if self.txn_state ~= "in_transaction" and self.txn_state ~= "committing" then
    local e = self.txn_error
    return nil, e.err, e.code, e.kcode
  end
  self.txn_state = "committing"
  return self:_end_txn(true)
end

-- abort_transaction([timeout_ms]) -> true | nil, err, code: what is not
-- sent yet fails (code "abortable", "transaction aborted"), answers in
-- flight are waited for, then EndTxn (abort).
function _M:abort_transaction(timeout_ms)
  check.int("abort_transaction", "timeout_ms", timeout_ms, nil, 0)
  local ok, err, code, kcode = self:_txn_guard("abort_transaction", "in_transaction", "abortable_error", "aborting")
  if not ok then return nil, err, code, kcode end
  self.txn_state = "aborting"
  self:_fail_queued("transaction aborted", "abortable")
  local client = self.client
  local deadline = timeout_ms and client.now() + timeout_ms or math.huge
  while self.in_flight[1] and client.now() < deadline do self:_wait_one(deadline) end
  if self.in_flight[1] then self:_abandon() end
  return self:_end_txn(false)
end

-- transaction_state() -> the state's name (nil without transactional_id), and its error
function _M:transaction_state()
  local e = self.txn_error
  if e then return self.txn_state, e.err, e.code, e.kcode end
  return self.txn_state
end

-- buffered() -> messages, bytes waiting to be sent
function _M:buffered()
  local _, nbuf, nbytes = acc_counts(self.acc)
  return nbuf, nbytes
end

function _M:close(timeout_ms)
  if self.bg then return self:_bg_close(timeout_ms) end
  local reports, failed, delivered, cb_errors = self:flush(timeout_ms)
  if self.own_client then self.client:close() end
  return reports, failed, delivered, cb_errors
end

-- state() -> the sender's state (background mode) or "sync", then err,
-- code, kcode when it cannot go on: "fatal" (every send fails with them
-- until a recovery, README) or "crashed" (the Lua error; code "crashed").
function _M:state()
  local e = self.txn_error
  if self.txn_state == "fatal_error" and self.sender_state ~= "sync" then
    return "fatal", e.err, e.code, e.kcode
  end
  if self.sender_state == "crashed" then return "crashed", self.crash_err, "crashed" end
  return self.sender_state
end

-- transport() -> what the producer's connections use ("cosocket",
-- "luasocket", "custom"; see client:transport()): in background mode the
-- sender's own client.
function _M:transport()
  return self.client:transport()
end

-- stats() -> {state, err, code, kcode (as state() returns them), buffered, bytes, in_flight, background,
-- transport, restarts, reports_dropped,
-- transaction_version (1 or 2 once init_transactions() succeeded, else nil), previous_transaction,
-- settle_waits, fast_sends (sends that took the C path, csrc/lua_producer.c), recoveries (fatal
-- states left, background mode), last_error ({state, err, code, kcode}: the last fatal or crash)}
function _M:stats()
  local st, err, code, kcode = self:state()
  return { state = st, err = err, code = code, kcode = kcode, buffered = nbuf_of(self), bytes = nbytes_of(self),
    in_flight = #self.in_flight,
    background = self.bg, transport = (self.client:transport()), restarts = self.restarts or 0,
    reports_dropped = self.reports_dropped or 0, transaction_version = self.txn_version,
    previous_transaction = self.txn_settled, settle_waits = self.settle_waits or 0,
    fast_sends = select(4, acc_counts(self.acc)), recoveries = self.recoveries or 0,
    last_error = self.last_error }
end

-- partition_states() -> {{topic=, partition=, next_seq=, batches =
-- {state, ...}}, ...}, sorted by topic and partition: the state machine of
-- each partition the producer holds (its batches oldest first: "open",
-- "sealed", "in_flight"; next_seq, the next batch's base sequence when
-- idempotent).
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

------------------------------------------------------------------------
-- Background mode (nginx): one sender timer per producer per worker.

local PCOUNT_MS = 10000 -- the sender re-reads cached partition counts this often
local BG_PTIME = 2 ^ 53 -- so the accumulator's send() never asks them itself
local IDLE_S = 1        -- an idle sender looks at the worker's state this often
local IDLE_EXIT_MS = 30000 -- and ends after this long idle (the next send starts it again)
local SLICE_MS = 20     -- waiting on answers, the sender looks at new work this often
local CRASHES_GIVE_UP = 3 -- crashes in a row, nothing settled between them, before the messages fail

local semaphore
local live = setmetatable({}, { __mode = "k" }) -- background producers of this worker

local function exiting()
  return ngx.worker.exiting()
end
local watch_exit

function _M:_bg_init(client)
  if not semaphore then semaphore = require "ngx.semaphore" end
  self.parent = client
  self.client = client:clone() -- the sender's own connections, opened in its timer
  self.sema = semaphore.new()
  self.pending = {}   -- topic -> messages waiting for the topic's partition count (FIFO)
  self.waiters = {}   -- flush() calls waiting: {target = id, sema = }
  self.sleeping = false
  self.running = false
  self.restarts = 0
  live[self] = true
end

-- Wakes the sender when it sleeps on its semaphore.
function _M:_bg_wake()
  if self.sleeping then
    self.sleeping = false
    self.sema:post(1)
  end
end

local bg_timer

-- One pending timer per worker: it runs at once ("premature") when the
-- worker starts exiting and wakes every sender to drain.
local watching = false
local function watcher(premature)
  watching = false
  if premature then
    for p in pairs(live) do p:_bg_wake() end
    return
  end
  for p in pairs(live) do
    if p.running then return watch_exit() end
  end
end
watch_exit = function()
  if watching or exiting() then return end
  watching = ngx.timer.at(3600, watcher) and true or false
end

function _M:_bg_start(delay)
  if self.running then return true end
  if self.closed then return nil, "producer closed" end
  local ok, err = ngx.timer.at(delay or 0, bg_timer, self)
  if not ok then return nil, "cannot start the producer's sender: " .. tostring(err) end
  self.running = true
  self.sender_state = "starting"
  watch_exit()
  return true
end

-- Leaves the fatal state of an idempotent producer in background mode
-- once its backoff is over (send): the next send round asks for a new
-- producer id; a cause still there fails the message and comes back.
function _M:_bg_recover()
  self.txn_state, self.txn_error = nil, nil
  self.producer_id, self.producer_epoch, self.need_bump = -1, -1, false
  self.pid_attempts, self.pid_retry_at, self.pid_err = 0, nil, nil
  self.recoveries = (self.recoveries or 0) + 1
  return true
end

function _M:_bg_send(topic, value, key, partition, headers, ts, size)
  if not self.running then
    local ok, err = self:_bg_start()
    if not ok then return nil, err, "closed" end
  end
  local seq0, nbuf, nbytes = acc_counts(self.acc)
  if nbuf >= self.max_buffered or nbytes + size > self.max_buffered_bytes then
    return nil, ("producer buffer full (%d messages, %d bytes): the sender is behind"):format(nbuf, nbytes),
      "buffer_full"
  end
  local seq = seq0 + 1
  local t, magic = self.topics[topic], self.magic
  local n = t and t.n
  local pq = self.pending[topic]
  local wake = self.sender_state == "idle"
  local explicit = partition ~= nil
  if n and magic and not pq then
    if not explicit then
      partition = self:_partition(t, key, n)
    elseif partition >= n then
      return nil, ("topic %s has no partition %d (it has %d)"):format(topic, partition, n), "unknown_partition"
    end
    local ok, err, code, fresh = self:_append(t, partition, explicit, value, key, headers, ts, size, seq,
      magic)
    if not ok then return nil, err, code end
    if fresh then wake = true end -- a batch is full: it goes now
  else
    -- partitioned by the sender once it has the topic's partition count
    if not pq then
      pq = {}
      self.pending[topic] = pq
    end
    pq[#pq + 1] = { value = value, key = key, partition = partition, headers = headers, ts = ts, size = size,
      id = seq, time = self.client.now() }
    wake = true
  end
  acc_take(self.acc, size) -- (seq)
  if wake then self:_bg_wake() end
  return seq
end

-- One message that never reached a batch fails.
function _M:_bg_fail_pending(topic, e, err, code)
  acc_release(self.acc, 1, e.size)
  self.nfailed = self.nfailed + 1
  self:_report { id = e.id, topic = topic, partition = e.partition, err = err, code = code }
end

-- Messages waiting for metadata go into batches (the sender's context).
function _M:_bg_partition(now)
  if not self.magic then
    local magic, err, code = self:_magic()
    if not magic then
      -- nothing reachable yet: each waits until its delivery deadline
      for topic, pq in pairs(self.pending) do
        while pq[1] and now >= pq[1].time + self.delivery_timeout_ms do
          self:_bg_fail_pending(topic, table.remove(pq, 1), ("delivery_timeout_ms (%d) expired: %s"):format(
            self.delivery_timeout_ms, tostring(err)), "timeout")
        end
        if not pq[1] then self.pending[topic] = nil end
      end
      return nil, code
    end
  end
  local topics = {}
  for topic in pairs(self.pending) do topics[#topics + 1] = topic end
  local waiting = false
  for _, topic in ipairs(topics) do
    local n, err, code = self.client:partitions(topic) -- may yield: sends meanwhile join the list
    now = self.client.now()
    local pq = self.pending[topic]
    if n then
      local t = self:_topic(topic)
      t.n, t.ptime = n, now + PCOUNT_MS
      acc_topic(self.acc, topic, n, BG_PTIME) -- (the sender refreshes counts, not send())
      -- no yield from here to the end of the list: sends see the count
      -- only once the waiting messages are in their batches (key order)
      self.pending[topic] = nil
      for _, e in ipairs(pq) do
        local part, ok, aerr, acode = e.partition, nil, nil, nil
        if part == nil then
          ok, part = pcall(self._partition, self, t, e.key, n)
          if not ok then part, aerr, acode = nil, tostring(part), "invalid" end
        elseif part >= n then
          part, aerr, acode = nil, ("topic %s has no partition %d (it has %d)"):format(topic, part, n),
            "unknown_partition"
        end
        if part then
          ok, aerr, acode = self:_append(t, part, e.partition ~= nil, e.value, e.key, e.headers, e.ts, e.size,
            e.id, self.magic)
        end
        if not ok then self:_bg_fail_pending(topic, e, aerr, acode) end
      end
    elseif not client_mod.RETRIABLE[code] then
      self.pending[topic] = nil
      for _, e in ipairs(pq) do self:_bg_fail_pending(topic, e, err, code) end
    else
      while pq[1] and now >= pq[1].time + self.delivery_timeout_ms do
        self:_bg_fail_pending(topic, table.remove(pq, 1), ("delivery_timeout_ms (%d) expired: %s"):format(
          self.delivery_timeout_ms, tostring(err)), "timeout")
      end
      if not pq[1] then self.pending[topic] = nil else waiting = true end
    end
  end
  -- cached counts are looked at again now and then (a topic can grow)
  local stale = {}
  for name, t in pairs(self.topics) do
    if t.n and now >= t.ptime and not self.pending[name] then stale[#stale + 1] = t end
  end
  for _, t in ipairs(stale) do
    local n = self.client:partitions(t.name) -- (may yield)
    if n then
      t.n = n
      acc_topic(self.acc, t.name, n, BG_PTIME)
    end
    t.ptime = self.client.now() + PCOUNT_MS
  end
  return not waiting
end

-- The smallest message id not settled yet (math.huge: none).
function _M:_bg_min_outstanding()
  local m = math.huge
  for _, t in pairs(self.topics) do
    for _, tp in ipairs(t.order) do
      local b = tp.queue[1]
      local first = b and b.first_id
      if first and first < m then m = first end
    end
  end
  for _, pq in pairs(self.pending) do
    if pq[1] and pq[1].id < m then m = pq[1].id end
  end
  return m
end

-- Wakes the flush() calls whose messages are all settled.
function _M:_bg_notify()
  local waiters = self.waiters
  if not waiters[1] then return end
  local m = nbuf_of(self) == 0 and math.huge or self:_bg_min_outstanding()
  local i = 1
  while waiters[i] do
    local w = waiters[i]
    if w.target < m then
      table.remove(waiters, i)
      w.done = true
      w.sema:post(1)
    else
      i = i + 1
    end
  end
end

-- At the exit deadline (or after CRASHES_GIVE_UP crashes): everything not
-- delivered is reported failed, with code (default "timeout").
function _M:_bg_give_up(why, code)
  code = code or "timeout"
  local n = nbuf_of(self)
  self:_abandon(why)
  for _, t in pairs(self.topics) do
    for _, tp in ipairs(t.order) do
      while tp.queue[1] do self:_fail(tp, tp.queue[1], why .. " before the message was sent", code) end
    end
  end
  for topic, pq in pairs(self.pending) do
    for _, e in ipairs(pq) do self:_bg_fail_pending(topic, e, why .. " before the message was sent", code) end
  end
  self.pending = {}
  return n
end

function _M:_bg_loop()
  local client = self.client
  local sema = self.sema
  local drain_until
  while true do
    local now = client.now()
    if not drain_until and (exiting() or self.closing) then
      drain_until = now + (self.closing and self.close_timeout or self.exit_flush_timeout_ms)
      self.sender_state = "draining"
      self.drain_n = nbuf_of(self)
      if not self.closing then
        ngx.log(ngx.NOTICE, ("kafka producer: worker exiting, sending %d buffered messages (exit_flush_timeout_ms %d)")
          :format(nbuf_of(self), self.exit_flush_timeout_ms))
      end
    end
    if next(self.pending) or next(self.topics) then self:_bg_partition(now) end
    if nbuf_of(self) == 0 then
      self:_bg_notify()
      if drain_until then break end
      if self.sender_state ~= "idle" then self.idle_since = now end
      if now - self.idle_since >= IDLE_EXIT_MS then break end
      self.sender_state = "idle"
      self.sleeping = true
      sema:wait(IDLE_S)
      self.sleeping = false
    else
      local urgent = drain_until or self.waiters[1]
      self.sender_state = "sending"
      self:_send_round(drain_until, not urgent and self.linger_ms or nil)
      local wake = self.bg_wake
      -- answers settled: their partitions' next batches are looked at again at once
      local settled = self:_collect(client.now()) > 0
      if settled then wake = 0 end
      self:_bg_notify()
      now = client.now()
      if drain_until and now >= drain_until and nbuf_of(self) > 0 then
        local why = self.closing and "close() timed out" or
          ("worker exiting: exit_flush_timeout_ms (%d) expired"):format(self.exit_flush_timeout_ms)
        local n = self:_bg_give_up(why)
        ngx.log(ngx.ERR, ("kafka producer: %s: %d messages not delivered, reported failed"):format(why, n))
        self:_bg_notify()
        break
      end
      if nbuf_of(self) > 0 then
        if next(self.pending) then wake = math.min(wake, now + self.retry_backoff_ms) end
        if drain_until and drain_until < wake then wake = drain_until end
        if wake <= now then
          -- go round again; without progress, let nginx run first (a zero backoff must not spin)
          if not settled then ngx.sleep(0.001) end
        elseif self.in_flight[1] then
          self.sender_state = "waiting"
          if wake > now + SLICE_MS then wake = now + SLICE_MS end
          self:_wait_one(math.max(wake, now))
        elseif wake > now then
          self.sender_state = wake == self.bg_wake and not urgent and "lingering" or "backoff"
          self.sleeping = true
          sema:wait(math.min(wake - now, IDLE_S * 1000) / 1000)
          self.sleeping = false
        end
      end
    end
  end
  if self.drain_n and not self.closing then
    ngx.log(ngx.NOTICE, ("kafka producer: worker exiting: %d messages sent before the exit, %d failed")
      :format(self.drain_n, self.nfailed))
  end
  client:close()
  self.sender_state = "stopped"
end

bg_timer = function(premature, self)
  if self.restarts > 0 or self.client_used then
    self.client = self.parent:clone() -- the last sender's connections died with its timer
  end
  self.client_used = true
  local _ = premature -- at worker exit the sender still runs: it drains
  local ok, err = xpcall(self._bg_loop, traceback, self)
  self.running = false
  self.sleeping = false
  if ok then
    self.crash_streak = 0
    return
  end
  err = tostring(err)
  ngx.log(ngx.ERR, "kafka producer: the sender failed: ", err)
  self.sender_state, self.crash_err = "crashed", err
  self.last_error = { state = "crashed", err = err, code = "crashed" }
  self.restarts = self.restarts + 1
  -- requests in flight went with the timer's connections: sent again
  for _, s in ipairs(self.in_flight) do
    for _, it in ipairs(s.req.items) do it.batch.state = "sealed" end
  end
  self.in_flight = {}
  -- a sender that fails again and again with nothing settled meanwhile
  -- would hold its messages until the buffer is full: they fail instead
  local settled = seq_of(self) - nbuf_of(self)
  self.crash_streak = settled == self.crash_settled and (self.crash_streak or 0) + 1 or 1
  self.crash_settled = settled
  if self.crash_streak >= CRASHES_GIVE_UP and nbuf_of(self) > 0 then
    local n = nbuf_of(self)
    local gok, gerr = pcall(self._bg_give_up, self, ("the sender failed %d times in a row (%s)"):format(
      self.crash_streak, err), "crashed")
    ngx.log(ngx.ERR, ("kafka producer: the sender failed %d times in a row: %d messages reported failed%s")
      :format(self.crash_streak, n, gok and "" or (": " .. tostring(gerr))))
    self.crash_settled = seq_of(self) - nbuf_of(self)
    self:_bg_notify()
  end
  if nbuf_of(self) > 0 or self.waiters[1] then
    -- "crashed" (with the error) stays in state() until the restarted sender runs
    local rok, rerr = self:_bg_start(exiting() and 0 or 1)
    if not rok then ngx.log(ngx.ERR, "kafka producer: ", rerr, ": the next send() or flush() starts it") end
    self.sender_state = "crashed"
  end
end

-- Where flush() may wait: not in phases that cannot yield.
local NO_WAIT = { init = true, init_worker = true, set = true, log = true, header_filter = true, body_filter = true,
  balancer = true, exit_worker = true, ssl_session_store = true }

function _M._bg_check_wait(_, what)
  local ph = ksocket.phase()
  if NO_WAIT[ph] then
    error(("%s: cannot wait in nginx's %s phase (it cannot yield); the sender delivers on its own: call %s from "
      .. "rewrite, access, content or a timer"):format(what, ph, what), 3)
  end
end

-- Waits until every message up to id `target` is settled (or the deadline):
-- true | false.
function _M:_bg_wait(target, timeout_ms)
  local deadline = timeout_ms and self.client.now() + timeout_ms or math.huge
  if nbuf_of(self) == 0 or self:_bg_min_outstanding() > target then return true end
  if not self.running then self:_bg_start() end
  local w = { target = target, sema = semaphore.new() }
  self.waiters[#self.waiters + 1] = w
  self:_bg_wake()
  while not w.done do
    local left = deadline - self.client.now()
    if left <= 0 then break end
    w.sema:wait(math.min(left, IDLE_S * 1000) / 1000)
    if not w.done and (nbuf_of(self) == 0 or self:_bg_min_outstanding() > target) then w.done = true end
  end
  for i, x in ipairs(self.waiters) do
    if x == w then
      table.remove(self.waiters, i)
      break
    end
  end
  return w.done
end

-- flush in background mode: reports, failed, delivered, callback_errors,
-- still_buffered (nil when everything sent before the call is settled).
function _M:_bg_flush(timeout_ms)
  self:_bg_check_wait("flush")
  local done = self:_bg_wait(seq_of(self), timeout_ms)
  local reports = self.reports
  self.reports = {}
  table.sort(reports, function(a, b) return a.id < b.id end)
  local failed, delivered, cb_errors = self.nfailed, self.delivered, self.callback_errors
  self.nfailed, self.delivered, self.callback_errors = 0, 0, 0
  return reports, failed, delivered, cb_errors, (not done) and nbuf_of(self) or nil
end

function _M:_bg_send_sync(id)
  self.want = self.want or {}
  self.want[id] = true
  self:_bg_wait(id)
  local r = self.want[id]
  self.want[id] = nil
  if type(r) ~= "table" then return nil, "no delivery report", "internal" end
  for i, x in ipairs(self.reports) do
    if x == r then
      table.remove(self.reports, i)
      break
    end
  end
  if r.err then
    self.nfailed = self.nfailed - 1
    return nil, r.err, r.code, r.error_code
  end
  self.delivered = self.delivered - 1
  return r.partition, r.offset
end

-- close in background mode: sends what is buffered (within timeout_ms,
-- else they are reported failed), stops the sender; then flush's results.
function _M:_bg_close(timeout_ms)
  self:_bg_check_wait("close")
  if self.running then
    self.closing, self.close_timeout = true, timeout_ms or self.delivery_timeout_ms
    self:_bg_wake()
    while self.running do
      local w = { target = seq_of(self), sema = semaphore.new() }
      self.waiters[#self.waiters + 1] = w
      w.sema:wait(0.05)
      for i, x in ipairs(self.waiters) do
        if x == w then table.remove(self.waiters, i) break end
      end
    end
  end
  self.closed = true
  live[self] = nil
  local reports = self.reports
  self.reports = {}
  table.sort(reports, function(a, b) return a.id < b.id end)
  local failed, delivered, cb_errors = self.nfailed, self.delivered, self.callback_errors
  self.nfailed, self.delivered, self.callback_errors = 0, 0, 0
  if self.own_client then self.parent:close() end
  return reports, failed, delivered, cb_errors
end

local EXIT_STOP_MS = 800

-- exit_worker(): for exit_worker_by_lua. After a fast stop (nginx -s stop,
-- SIGTERM: timers never run again) every background producer of the worker
-- sends what is still buffered through luasocket, blocking, within its
-- exit_flush_timeout_ms but at most EXIT_STOP_MS (without luasocket, or
-- past the deadline, the messages are reported failed). After a graceful exit the senders have
-- drained already and nothing is left.
function _M.exit_worker()
  for p in pairs(live) do
    if nbuf_of(p) > 0 then p:_exit_drain() end
  end
end

function _M:_exit_drain()
  local n = nbuf_of(self)
  ngx.log(ngx.WARN, ("kafka producer: worker stopped with %d messages buffered: sending them (blocking, luasocket, "
    .. "exit_flush_timeout_ms %d)"):format(n, self.exit_flush_timeout_ms))
  self.bg = false
  -- the sender's requests in flight went with its timer
  for _, s in ipairs(self.in_flight) do
    for _, it in ipairs(s.req.items) do it.batch.state = "sealed" end
  end
  self.in_flight = {}
  local ok, ls = pcall(require, "socket")
  if ok and type(ls) == "table" and ls.gettime then
    local o = setmetatable({ now = function() return ls.gettime() * 1000 end,
      sleep = function(ms) ls.sleep(ms / 1000) end, socket = ksocket.luasocket_tcp }, { __index = self.parent.opts })
    self.client = client_mod.new(o)
    -- nginx's master kills a worker about a second after TERM
    local deadline = self.client.now() + math.min(self.exit_flush_timeout_ms, EXIT_STOP_MS)
    while next(self.pending) and self.client.now() < deadline do
      if not self:_bg_partition(self.client.now()) then ls.sleep(self.retry_backoff_ms / 1000) end
    end
    -- a producer that never got its id (nothing was sent yet) sends these
    -- without idempotence: InitProducerId would cost a round trip of the
    -- second nginx allows (at least once, as documented for a fast stop)
    if self.idempotent == nil and not self.transactional_id then self.idempotent = false end
    if nbuf_of(self) > 0 then self:_flush(math.max(0, math.floor(deadline - self.client.now()))) end
    self.client:close()
  end
  local left = nbuf_of(self)
  if left > 0 then self:_bg_give_up("worker stopped") end
  if self.nfailed > 0 or left > 0 then
    ngx.log(ngx.ERR, ("kafka producer: worker stopped: %d of %d buffered messages not delivered, reported failed")
      :format(self.nfailed, n))
  else
    ngx.log(ngx.NOTICE, ("kafka producer: worker stopped: the %d buffered messages were sent"):format(n))
  end
end

return _M
