-- kafka.producer: batching, partitioning, retries and delivery reports.
--
--   local producer = require "kafka.producer"
--   local p = producer.new({brokers = {"127.0.0.1:9092"}}, {acks = -1, compression = "lz4"})
--   local id = assert(p:send("topic", "value", {key = "k", headers = {h = "v"}}))
--   local reports = p:flush()   -- one report per message: {id, topic, partition, offset} or {id, topic, err, code}
--   local partition, offset = p:send_sync("topic", "one-off")
--
-- Options: kafka.options (docs/options.md), read in new().
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
--
-- The producer in its parts (lua/kafka/producer/), each an object made
-- here with its own state, holding the producer (p) for its options, its
-- client and the other parts:
--   accumulator  topics, partitions, batches, the partitioner, the C mirror, reports
--   sink         send rounds, Produce requests, settle/retry/split, the flush loop
--   idempotence  the producer id, sequences, the epoch bump
--   txnmgr       the transaction manager (with a transactional_id)
--   background   the producer in nginx: its sender and its public methods
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"
local options = require "kafka.options"
local accumulator = require "kafka.producer.accumulator"
local sink_mod = require "kafka.producer.sink"
local idempotence = require "kafka.producer.idempotence"
local txnmgr = require "kafka.producer.txnmgr"

local PRODUCE = proto.api.Produce
local math, table, package = math, table, package
local setmetatable, type, ipairs, pairs, error, require = setmetatable, type, ipairs, pairs, error, require

local _M = {}
local mt = { __index = _M }

local WHERE = "kafka.producer.new"
local acc_send, acc_counts = accumulator.fast_send, accumulator.counts_of
local fast = true
-- _fast_send(false): send() never takes the C path (specs compare the two;
-- the background producer's send follows)
function _M._fast_send(on)
  fast = on
  local bg = package.loaded["kafka.producer.background"]
  if bg then bg._fast_send(on) end
end
function _M._fast_sending() return fast end

-- new(client_or_opts, opts): every option read here. The producer's own
-- state (the parts read it through p):
--   client, own_client  the client (in background mode the sender's clone)
--                and whether close() closes it
--   the options  acks, codec, linger_ms, batch_size, max_retries, ...
--                (fields named as the options, Kafka's names)
--   magic        the record format, from the broker's Produce version on first use
--   rng          the sticky partitioner's random start
--   identity     producer_id, producer_epoch (-1: none), idempotent (nil:
--                not decided yet - the first send round -, true: on, false:
--                off): written by the idempotence and the transaction
--                manager, read by every part (the Produce request, stamps)
--   txn_state, txn_error  the state machine of the transaction manager
--                (Java's names; {err, code, kcode} in "abortable_error" /
--                "fatal_error"), also an idempotent producer's fatal_error
--   fatal_attempts, recoveries, last_error  fatal states in a row
--                (background mode backs off by them), left, and the last
--                fatal or crash ({state, err, code, kcode}: stats())
--   first_time   sync mode: when the first message since the last round
--                was sent (linger: send() kicks a round after linger_ms)
--   bg, sender_state  background mode; "sync" outside it
--   acc (core, topics), sink (in_flight), idem, txn  the parts (core,
--                topics and in_flight are theirs, here for send()'s
--                common case and for specs)
function _M.new(client_or_opts, opts)
  local client, own = client_mod.ensure(client_or_opts, WHERE)
  local o = options.producer(opts, client)
  local p = setmetatable({
    client = client,
    own_client = own,
    acks = o.acks,
    -- requests per connection in flight; with idempotence also batches per partition (else 1)
    max_in_flight = o.max_in_flight_requests_per_connection,
    transactional_id = o.transactional_id,
    transaction_timeout_ms = o.transaction_timeout_ms,
    codec = o.compression,
    linger_ms = o.linger_ms,
    batch_size = o.batch_size,
    max_retries = o.max_retries,
    retry_backoff_ms = o.retry_backoff_ms,
    retry_backoff_max_ms = o.retry_backoff_max_ms,
    delivery_timeout_ms = o.delivery_timeout_ms,
    partitioner = o.partitioner,
    max_buffered = o.max_buffered,
    max_buffered_bytes = o.max_buffered_bytes,
    flush_on_full = o.flush_on_full,
    max_message_bytes = o.max_message_bytes,
    max_request_bytes = o.max_request_bytes,
    timeout_ms = o.timeout_ms,
    on_delivery = o.on_delivery,
    only_errors = o.delivery_reports == "errors",
    exit_flush_timeout_ms = o.exit_flush_timeout_ms,
    -- decided from the broker's Produce version on first use
    magic = o.magic,
    rng = math.random,
    producer_id = -1,
    producer_epoch = -1,
    idempotent = nil,
    txn_state = o.transactional_id and "uninitialized" or nil,
    txn_error = nil,
    fatal_attempts = nil,
    recoveries = 0,
    last_error = nil,
    first_time = nil,
    bg = o.background,
    sender_state = "sync",
  }, mt)
  if o.idem_mode == "off" then p.idempotent = false end
  p.acc = accumulator.new(p)
  p.core, p.topics = p.acc.core, p.acc.topics
  p.idem = idempotence.new(p, o.idem_mode)
  p.sink = sink_mod.new(p)
  p.in_flight = p.sink.in_flight
  if o.transactional_id then p.txn = txnmgr.new(p) end
  if o.background then return require("kafka.producer.background").new(p, client) end
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

-- One send round (the sink's); called through the producer so that specs
-- can wrap it on the instance (p._send_round = ...).
function _M:_send_round(deadline, linger)
  return self.sink:round(deadline, linger)
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
  -- the common case in C once a linger round is under way (background
  -- mode: its send takes it in its own conditions, then comes here)
  if fast and (not tst or tst == "in_transaction") and self.first_time then
    local id = acc_send(self.core, topic, value, o)
    if id then return id end
  end
  if tst and tst ~= "in_transaction" then
    local e = self.txn_error
    -- a fatal state that allows it (background mode) is left by the first send after its backoff
    if e and not (e.retry_at and self.client.now() >= e.retry_at and self:_recover()) then
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
  local id, err, code = self:_enqueue(topic, value, key, partition, headers, ts, size)
  return id, err, code
end

-- send()'s way after its checks outside nginx: a full buffer is flushed
-- (or refused), a linger round due is kicked, the message goes into its
-- partition's batch (the accumulator's add).
function _M:_enqueue(topic, value, key, partition, headers, ts, size)
  local core = self.core
  local seq0, nbuf, nbytes = acc_counts(core)
  if nbuf > 0 then
    if nbuf >= self.max_buffered or nbytes + size > self.max_buffered_bytes then
      if not self.flush_on_full then
        return nil, ("producer buffer full (%d messages, %d bytes): flush() first"):format(nbuf, nbytes),
          "buffer_full"
      end
      self.sink:flush(nil, size)
    elseif nbuf % 64 == 0 and self.first_time and self.client.now() - self.first_time >= self.linger_ms then
      -- the clock is read every 64 messages: linger is not worth a syscall each
      self.sink:kick()
    end
    seq0 = acc_counts(core)
  end
  local magic = self.magic
  local err, code
  if not magic then
    magic, err, code = self:_magic()
    if not magic then return nil, err, code end
  end
  local seq
  seq, err, code = self.acc:add(topic, value, key, partition, headers, ts, size, seq0, magic)
  if not seq then return nil, err, code end
  if not self.first_time then self.first_time = self.client.now() end
  return seq
end

local FATAL_RETRY_MAX_MS = 60000

-- Enters "abortable_error" or "fatal_error" (a fatal state is never left,
-- but by an idempotent producer in background mode: _recover;
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

-- Leaves the fatal state of an idempotent producer in background mode
-- once its backoff is over (send): the next send round asks for a new
-- producer id; a cause still there fails the message and comes back.
function _M:_recover()
  self.txn_state, self.txn_error = nil, nil
  self.idem:forget_pid()
  self.recoveries = self.recoveries + 1
  return true
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
  self.sink:flush(timeout_ms)
  local reports, delivered, cb_errors = self.acc:take_reports()
  local failed = 0
  for _, r in ipairs(reports) do if r.err then failed = failed + 1 end end
  return reports, failed, delivered, cb_errors
end

-- send_sync(topic, value [, opts]) -> partition, offset | nil, err, code
-- (flushes everything buffered, like flush()).
function _M:send_sync(topic, value, o)
  local id, err, code = self:send(topic, value, o)
  if not id then return nil, err, code end
  local acc = self.acc
  local only = self.only_errors
  self.only_errors = false -- this one's report is needed
  self.sink:flush()
  self.only_errors = only
  for i, r in ipairs(acc.reports) do
    if r.id == id then
      table.remove(acc.reports, i)
      if r.err then return nil, r.err, r.code, r.error_code end
      acc.delivered = acc.delivered - 1 -- reported here, not by the next flush()
      return r.partition, r.offset
    end
  end
  return nil, "no delivery report", "internal"
end

-- The transaction manager of the producer (txnmgr.lua), or a raise at the
-- caller of its public method.
local function txn_of(p, where)
  local t = p.txn
  if not t then error(where .. ": the producer has no transactional_id", 3) end
  return t
end

-- init_transactions() -> true | nil, err, code: the producer id and epoch of
-- the transactional_id from its coordinator; an earlier producer with the
-- same id is fenced and its open transaction aborted.
function _M:init_transactions()
  local ok, err, code, kcode = txn_of(self, "init_transactions"):init()
  return ok, err, code, kcode
end

-- begin_transaction() -> true | nil, err, code
function _M:begin_transaction()
  local ok, err, code, kcode = txn_of(self, "begin_transaction"):begin()
  return ok, err, code, kcode
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
  local ok, err, code, kcode = txn_of(self, W):send_offsets(offsets, gm)
  return ok, err, code, kcode
end

-- commit_transaction([timeout_ms]) -> true | nil, err, code: flushes (every
-- message of the transaction acknowledged, or the transaction is
-- abortable: nil, err, "abortable"), then EndTxn. A commit that gave up
-- on a retriable error may be called again.
function _M:commit_transaction(timeout_ms)
  check.int("commit_transaction", "timeout_ms", timeout_ms, nil, 0)
  local ok, err, code, kcode = txn_of(self, "commit_transaction"):commit(timeout_ms)
  return ok, err, code, kcode
end

-- abort_transaction([timeout_ms]) -> true | nil, err, code: what is not
-- sent yet fails (code "abortable", "transaction aborted"), answers in
-- flight are waited for, then EndTxn (abort).
function _M:abort_transaction(timeout_ms)
  check.int("abort_transaction", "timeout_ms", timeout_ms, nil, 0)
  local ok, err, code, kcode = txn_of(self, "abort_transaction"):abort(timeout_ms)
  return ok, err, code, kcode
end

-- transaction_state() -> the state's name (nil without transactional_id), and its error
function _M:transaction_state()
  local e = self.txn_error
  if e then return self.txn_state, e.err, e.code, e.kcode end
  return self.txn_state
end

-- buffered() -> messages, bytes waiting to be sent
function _M:buffered()
  local _, nbuf, nbytes = acc_counts(self.core)
  return nbuf, nbytes
end

-- close([timeout_ms]) -> flush()'s results; closes the client the
-- producer made.
function _M:close(timeout_ms)
  local reports, failed, delivered, cb_errors = self:flush(timeout_ms)
  if self.own_client then self.client:close() end
  return reports, failed, delivered, cb_errors
end

-- state() -> "sync" (background mode: the sender's state, background.lua)
function _M:state()
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
  local _, nbuf, nbytes, fast_sends = acc_counts(self.core)
  local txn = self.txn
  return { state = st, err = err, code = code, kcode = kcode, buffered = nbuf, bytes = nbytes,
    in_flight = #self.sink.in_flight,
    background = self.bg, transport = (self.client:transport()), restarts = self.restarts or 0,
    reports_dropped = self.acc.reports_dropped, transaction_version = txn and txn.version,
    previous_transaction = txn and txn.settled, settle_waits = txn and txn.settle_waits or 0,
    fast_sends = fast_sends, recoveries = self.recoveries,
    last_error = self.last_error }
end

-- partition_states() -> {{topic=, partition=, next_seq=, batches =
-- {state, ...}}, ...}, sorted by topic and partition: the state machine of
-- each partition the producer holds (its batches oldest first: "open",
-- "sealed", "in_flight"; next_seq, the next batch's base sequence when
-- idempotent).
function _M:partition_states()
  return self.acc:partition_states()
end

-- exit_worker(): for exit_worker_by_lua (background.lua): after a fast
-- stop every background producer of the worker sends what is still
-- buffered, blocking. Nothing to do where none was made.
function _M.exit_worker()
  local bg = package.loaded["kafka.producer.background"]
  if bg then bg.exit_worker() end
end

return _M
