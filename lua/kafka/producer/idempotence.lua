-- kafka.producer.idempotence: the idempotent producer's id, epoch and
-- sequences. Decides idempotence ("auto"), asks for a producer id
-- (InitProducerId), stamps sealed batches with it, their epoch and base
-- sequence, and bumps the epoch (KIP-360) when a partition's sequence is
-- in doubt. The id and epoch themselves are the producer's identity
-- (p.producer_id, p.producer_epoch, p.idempotent: every part reads them,
-- as librdkafka's rk_eid); this object and the transaction manager write them.
-- librdkafka's rdkafka_idempotence draws the same seam; franz-go keeps
-- the id in producer.go and the sequences in sink.go. Here the epoch bump
-- touches the partitions' sequences and the id at once, so both are in
-- one place; the drain before a bump is the sink's per-partition check.
local proto = require "kafka.proto"

local errors = proto.errors
local API = proto.api
local math, table = math, table
local setmetatable, ipairs, pairs = setmetatable, ipairs, pairs

local _M = {}
local mt = { __index = _M }

-- new(p, mode) -> the idempotence of producer p. Its state:
--   mode          "on", "off", "auto" (decided at the first send round: init)
--   need_bump     an epoch bump (KIP-360) is due once nothing is in flight
--   pid_attempts, pid_retry_at, pid_err  failed InitProducerId attempts in a
--                 row, when the next may be made, the last one's error
--   pid_held      a producer id was held once ("auto" stays on after that)
function _M.new(p, mode)
  return setmetatable({
    p = p,
    mode = mode,
    need_bump = false,
    pid_attempts = 0,
    pid_retry_at = nil,
    pid_err = nil,
    pid_held = nil,
  }, mt)
end

-- seq_add(seq, n): a sequence number n further (they wrap at 2^31)
local function seq_add(seq, n)
  local x = seq + n
  if x > 2147483647 then x = x - 2147483648 end
  return x
end
_M.seq_add = seq_add

-- Stamps a sealed batch with the producer id, epoch and its base sequence.
-- A partition whose sequences count under an older id or epoch (a bump)
-- restarts at 0: the send round stamps a new batch there only once none
-- stamped under the old one is left.
function _M:stamp(tp, batch)
  local p = self.p
  local pid, epoch = p.producer_id, p.producer_epoch
  if tp.pid ~= pid or tp.epoch ~= epoch then
    tp.pid, tp.epoch, tp.next_seq = pid, epoch, 0
  end
  batch.seq, batch.pid, batch.epoch = tp.next_seq, pid, epoch
  tp.next_seq = seq_add(tp.next_seq, batch.count)
  batch.b:stamp { producer_id = pid, producer_epoch = epoch, base_sequence = batch.seq,
    transactional = p.transactional_id ~= nil }
end

-- A stamped batch of tp failed, or was refused for its sequence: the
-- broker's sequence for the partition is in doubt. A transactional
-- producer bumps at the transaction's end (need_bump); an idempotent one
-- bumps its epoch locally in the next send round and restarts the
-- partition at 0 (Java's requestIdempotentEpochBumpForPartition). A batch
-- stamped under an older epoch than the producer's (answered after a
-- bump) asks for no second bump: its partition restarts under the current one.
function _M:want_bump(tp, batch)
  local p = self.p
  if p.transactional_id then
    self.need_bump = true
    return
  end
  tp.reset, tp.drain = true, true
  if batch.pid == p.producer_id and batch.epoch == p.producer_epoch then self.need_bump = true end
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
function _M:first_pid(deadline)
  local client = self.p.client
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
-- acquire_pid), or nil, err, code (the round's batches then fail with it).
function _M:init()
  local p = self.p
  local client = p.client
  local magic, err, code = p:_magic()
  if not magic then return nil, err, code end
  local c
  c, err, code = client:any_broker()
  if not c then return nil, err, code end
  local v = c:version(API.InitProducerId)
  if not v or magic < 2 then
    if self.mode == "auto" then
      self.mode, p.idempotent = "off", false
      return true
    end
    return nil, ("enable_idempotence: %s does not support InitProducerId and record format v2 (Kafka 0.11+)")
      :format(c:name()), "unsupported"
  end
  p.idempotent, p.producer_id, p.producer_epoch = true, -1, -1
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
function _M:acquire_pid()
  local p = self.p
  local client = p.client
  if self.pid_retry_at and client.now() < self.pid_retry_at then return false end
  local resp, err, code, kcode = client:call(function(deadline)
    local r, ferr, fcode, fkcode, fretr = self:first_pid(deadline)
    if r ~= false then return r, ferr, fcode, fkcode, fretr end
    local conn, cerr, ccode = client:any_broker(deadline)
    if not conn then return nil, cerr, ccode end
    return init_pid(conn, { transactional_id = nil, transaction_timeout_ms = 2147483647, producer_id = -1,
      producer_epoch = -1 }, deadline)
  end, { max_retries = 0 })
  if resp then
    p.producer_id, p.producer_epoch = resp.producer_id, resp.producer_epoch
    self.pid_attempts, self.pid_retry_at, self.pid_err, self.pid_held = 0, nil, nil, true
    return true
  end
  if code == "fenced" or code == "fatal" then
    if self.mode == "auto" and not self.pid_held then -- e.g. no IdempotentWrite permission
      self.mode, p.idempotent = "off", false
      return true
    end
    p:_txn_error("fatal_error", err, code, kcode)
    return nil, err, code, kcode
  end
  local n = self.pid_attempts + 1
  local wait = math.min(p.retry_backoff_ms * 2 ^ (n - 1), p.retry_backoff_max_ms)
  self.pid_attempts, self.pid_retry_at, self.pid_err = n, client.now() + wait, err
  return false
end

-- The epoch bump (KIP-360) of an idempotent producer, local as in Kafka's
-- Java client (TransactionManager.bumpIdempotentProducerEpoch): no
-- request - the broker takes a higher epoch of a producer id it knows
-- when the batch starts at sequence 0, and one it does not know at any
-- sequence. Only when the epoch would overflow is the id dropped and a
-- new one asked for (acquire_pid). The partitions marked reset restart
-- at 0 once their batches in flight have answered; the others keep their
-- stamped batches (sent again with the old id and epoch, so a duplicate
-- is still found) and restart at 0 after them.
function _M:bump_local()
  local p = self.p
  self.need_bump = false
  if p.producer_epoch >= 32767 then
    p.producer_id, p.producer_epoch = -1, -1
  else
    p.producer_epoch = p.producer_epoch + 1
  end
end

-- Stamps tp's stamped batches again from sequence 0 under the producer's
-- id and epoch (nothing of tp in flight).
function _M:restamp(tp)
  tp.pid, tp.reset = nil, false
  for _, b in ipairs(tp.queue) do
    if b.seq then self:stamp(tp, b) end
  end
end

-- A new id or epoch for every partition at once (transactions: at
-- init_transactions, at a transaction's end), nothing in flight: every
-- partition restarts at 0 and the batches still queued are stamped again.
function _M:reset_sequences(pid, epoch)
  local p = self.p
  p.producer_id, p.producer_epoch = pid, epoch
  self.need_bump = false
  for _, t in pairs(p.acc.topics) do
    for _, tp in ipairs(t.order) do
      tp.drain = false
      self:restamp(tp)
    end
  end
end

-- A fatal state left (background mode, see the producer's _recover): the
-- next send round asks for a new producer id.
function _M:forget_pid()
  local p = self.p
  p.producer_id, p.producer_epoch, self.need_bump = -1, -1, false
  self.pid_attempts, self.pid_retry_at, self.pid_err = 0, nil, nil
end

return _M
