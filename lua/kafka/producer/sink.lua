-- kafka.producer.sink: the accumulator's batches to the brokers. Send
-- rounds (the due batches of every partition, one Produce request per
-- leader and slot, all sent before any answer is read), the answers
-- settled (delivered, retried after a backoff, split, or failed), and the
-- flush loop of a producer outside nginx (the background sender runs the
-- same rounds in its timer). Unlike franz-go's sink (one per broker, which
-- owns its partitions' buffers) there is one sink per producer: the client
-- groups each round's batches by their leader of the moment, so a
-- partition that moves to another broker keeps its queue.
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local idempotence = require "kafka.producer.idempotence"

local errors = proto.errors
local PRODUCE = proto.api.Produce
local seq_add = idempotence.seq_add
local math, table = math, table
local setmetatable, tostring, ipairs, pairs, assert = setmetatable, tostring, ipairs, pairs, assert

local _M = {}
local mt = { __index = _M }

-- new(p) -> the sink of producer p (its options: acks, timeout_ms,
-- max_in_flight, max_request_bytes, max_retries, retry_backoff_ms,
-- retry_backoff_max_ms, delivery_timeout_ms; its client, accumulator
-- p.acc, idempotence p.idem, transaction manager p.txn). Its state:
--   in_flight  Produce requests sent, answers not read yet (oldest first;
--              the producer's in_flight is the same table)
--   wake       when the last round's next batch is due (linger, backoff)
function _M.new(p)
  return setmetatable({ p = p, in_flight = {}, wake = math.huge }, mt)
end

-- Fails a batch of topic/partition (removed from its queue). With
-- idempotence a sealed batch given up leaves a hole in the partition's
-- sequence (it may or may not have been written): the next batches need a
-- new epoch (KIP-360); in a transaction it makes the transaction abortable.
function _M:fail(tp, batch, err, code, kcode)
  local p = self.p
  p.acc:unqueue(tp, batch)
  if batch.seq and p.idempotent then p.idem:want_bump(tp, batch) end
  if p.txn_state == "in_transaction" or p.txn_state == "committing" then
    p:_txn_error("abortable_error", ("a message of the transaction failed: %s"):format(tostring(err)),
      "abortable", kcode)
  end
  p.acc:done(tp, batch, nil, err, code, kcode)
end

-- Fails every queued batch not in flight (a fatal or abortable state).
function _M:fail_queued(err, code, kcode)
  local p = self.p
  local acc = p.acc
  for _, t in pairs(acc.topics) do
    for _, tp in ipairs(t.order) do
      local q, i = tp.queue, 1
      while q[i] do
        local batch = q[i]
        if batch.state == "in_flight" then
          i = i + 1
        else
          acc:unqueue(tp, batch)
          if batch.seq and p.idempotent then p.idem:want_bump(tp, batch) end
          acc:done(tp, batch, nil, err, code, kcode)
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
-- batch goes when full or linger_ms old, and self.wake says when the
-- next batch is due. (Called as the producer's _send_round: specs wrap it.)
function _M:round(deadline, linger)
  local p = self.p
  local acc, idemp = p.acc, p.idem
  self.wake = math.huge
  local st = p.txn_state
  if st == "fatal_error" or st == "abortable_error" then
    local e = p.txn_error
    self:fail_queued(e.err, e.code, e.kcode)
    return
  end
  if p.idempotent == nil and idemp.mode ~= "off" then
    local ok, err, code = idemp:init()
    if not ok then
      self:fail_queued(err, code)
      return
    end
  end
  -- an idempotent producer's own epoch bump, then a producer id if it has none
  local no_pid = false
  if p.idempotent and not p.transactional_id then
    if idemp.need_bump then idemp:bump_local() end
    if p.producer_id < 0 then
      local ok, err, code, kcode = idemp:acquire_pid()
      if ok == nil then
        self:fail_queued(err, code, kcode)
        return
      end
      no_pid = not ok
    end
  end
  local idem = p.idempotent
  local pid, epoch = p.producer_id, p.producer_epoch
  local now = p.client.now()
  local items = {}
  local wake = no_pid and idemp.pid_retry_at or math.huge
  local maxf = idem and p.max_in_flight or 1
  local n_items = 0
  for _, topic in pairs(acc.topics) do
    for _, tp in ipairs(topic.order) do
      tp.conn_wait = nil
      local q = tp.queue
      local i, n = 1, 0
      while q[i] do
        local batch = q[i]
        if batch.state == "in_flight" then
          n, i = n + 1, i + 1
        elseif now >= batch.expires then
          local why = batch.last_err or (no_pid and idemp.pid_err)
          self:fail(tp, batch, ("delivery_timeout_ms (%d) expired after %d attempts%s"):format(
            p.delivery_timeout_ms, batch.attempts, why and (": " .. tostring(why)) or ""),
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
      if tp.reset and n == 0 and not no_pid and not idemp.need_bump then
        if stale then idemp:restamp(tp) else tp.reset = false end
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
  if idemp.need_bump and idem and not p.transactional_id then wake = now end -- (a batch expired: the bump)
  self.wake = wake
  if #items == 0 then return end
  -- a partition's k-th batch goes into the k-th request to its leader: all
  -- first batches before any second one, so a partition's requests leave in order
  if maxf > 1 then
    table.sort(items, function(a, b)
      if a.slot ~= b.slot then return a.slot < b.slot end
      return a.at < b.at
    end)
  end
  if p.transactional_id then
    local ok = p.txn:add_partitions(items)
    if not ok then
      local e = p.txn_error
      self:fail_queued(e.err, e.code, e.kcode)
      return
    end
  end
  local groups, failed = p.client:group(items, deadline)
  for _, f in ipairs(failed) do
    local it = f.item
    self:retry(it.tp, it.batch, f.err, f.code)
  end
  local reqs = {}
  for _, g in ipairs(groups) do
    local cur = {} -- slot -> the request being filled
    for _, it in ipairs(g.items) do
      local batch = it.batch
      -- sealed: later messages go to a new batch. The builder itself goes
      -- into the request (encoded straight into the frame, no string);
      -- a retry encodes the same bytes again (the same sequence too).
      if batch.state == "open" then acc:seal(it.tp, batch) end
      if p.idempotent and not batch.seq then idemp:stamp(it.tp, batch) end
      -- requests stay under max_request_bytes (at least one batch each):
      -- smaller frames recycle memory instead of faulting in fresh pages
      local req = cur[it.slot]
      if not req or (req.size > 0 and req.size + batch.size > p.max_request_bytes) then
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
    if (per_conn[conn] or 0) >= p.max_in_flight then
      for _, it in ipairs(req.items) do it.tp.conn_wait = true end
    else
      local s = self:send_request(req, deadline)
      if s then
        in_flight[#in_flight + 1] = s
        per_conn[conn] = (per_conn[conn] or 0) + 1
      end
    end
  end
end

-- Sends one Produce request: its in-flight record, or nil when it is
-- settled already (acks 0, or the send failed).
function _M:send_request(req, deadline)
  local p = self.p
  local conn = req.conn
  -- v13 names the topics by id (KIP-516), as Java's producer sends them
  -- where the metadata has every topic's id: a topic deleted (and created
  -- again) since is answered UNKNOWN_TOPIC_ID, retried once the metadata
  -- is fresh, not written to whatever has the name now by an old request
  local ids = p.client:topic_ids(req.items)
  for _, t in ipairs(req.list) do t.topic_id = ids and ids[t.name] end
  local v, err, code = conn:version(PRODUCE, ids and 13 or 12)
  -- transactions v1: Produce at most v11 (v12 is what tells the broker
  -- to add the partition to the transaction itself, KIP-890); v2: v12+
  if v and p.transactional_id and v > 11 and p.txn.version ~= 2 then v = 11 end
  local corr
  if v then
    corr, err, code = conn:send(PRODUCE, v, { transactional_id = p.transactional_id, acks = p.acks,
      timeout_ms = p.timeout_ms, topic_data = req.list }, { no_response = p.acks == 0,
      timeout_ms = p.timeout_ms, deadline = deadline })
  end
  local s = { conn = conn, req = req, corr = corr }
  for _, it in ipairs(req.items) do it.batch.state = "in_flight" end
  if corr and p.acks ~= 0 then return s end
  self:settle(s, corr and { responses = {} } or nil, err, code)
end

-- Reads the answers in flight until the deadline (now: only those already
-- there) and settles their batches: how many requests were settled.
function _M:collect(deadline)
  local in_flight = self.in_flight
  local i, n = 1, #in_flight
  while in_flight[i] do
    local s = in_flight[i]
    local resp, err, code = s.conn:receive(s.corr, deadline)
    if not resp and code == "timeout" and s.conn:waiting(s.corr) then
      i = i + 1
    else
      table.remove(in_flight, i)
      self:settle(s, resp, err, code)
    end
  end
  return n - #in_flight
end

-- Waits for the oldest answer in flight until `until_t`, settles it when it came.
function _M:wait_one(until_t)
  local s = self.in_flight[1]
  local resp, err, code = s.conn:receive(s.corr, until_t)
  if not resp and code == "timeout" and s.conn:waiting(s.corr) then return end
  table.remove(self.in_flight, 1)
  self:settle(s, resp, err, code)
end

-- Produce errors of an idempotent producer that are fatal, as in Kafka's
-- Java client (TransactionManager.maybeTransitionToErrorState): a fenced
-- producer id, and authorization. INVALID_PRODUCER_EPOCH is not (Java's
-- InvalidProducerEpochException, KIP-588): as any other error that is not
-- retriable the batch fails (a stamped one: the epoch is bumped); in a
-- transaction it is abortable.
local FENCED = { [errors.PRODUCER_FENCED] = true }
local FATAL = { [errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] = true, [errors.CLUSTER_AUTHORIZATION_FAILED] = true }

-- The answer to one Produce request (nil: the request failed with err,
-- code): each of its batches delivered, retried, split or failed.
function _M:settle(s, resp, err, code)
  local p = self.p
  local acc = p.acc
  local results = {}
  if resp then
    for _, tr in ipairs(resp.responses or {}) do
      local name = tr.name
      if not name then -- v13: by id
        for _, t in ipairs(s.req.list) do
          if t.topic_id == tr.topic_id then name = t.name end
        end
      end
      for _, pr in ipairs(tr.partition_responses or {}) do results[tostring(name) .. "\0" .. pr.index] = pr end
    end
  end
  for _, it in ipairs(s.req.items) do
    local tp, topic, partition, batch = it.tp, it.topic, it.partition, it.batch
    batch.state = "sealed"
    local q = tp.queue
    if not resp then
      self:retry(tp, batch, err, code)
    elseif p.acks == 0 then
      acc:unqueue(tp, batch)
      acc:done(tp, batch, -1)
    else
      local pr = results[topic .. "\0" .. partition]
      local ec = pr and pr.error_code
      if not pr then
        self:retry(tp, batch, "no result for the partition in the Produce response", "protocol")
      elseif ec == errors.NONE or (ec == errors.DUPLICATE_SEQUENCE_NUMBER and p.idempotent) then
        -- a duplicate: the broker has the batch already (a retry of an attempt whose answer was lost)
        acc:unqueue(tp, batch)
        acc:done(tp, batch, pr.base_offset or -1)
      else
        local e = errors.info(ec)
        local msg = ("%s/%d: %s (%s)%s"):format(topic, partition, e.name, e.message,
          pr.error_message and (": " .. pr.error_message) or "")
        if p.idempotent and (ec == errors.OUT_OF_ORDER_SEQUENCE_NUMBER or ec == errors.UNKNOWN_PRODUCER_ID) then
          if q[1] ~= batch then
            -- an earlier batch of the partition failed: this one is sent again after it
            self:retry(tp, batch, msg, "retriable", ec)
          elseif p.transactional_id then
            self:fail(tp, batch, msg, "abortable", ec)
          else
            -- the broker lost the producer's state or a batch acknowledged
            -- before (unclean leader election, retention): retried, under a
            -- new epoch from sequence 0 (Java's canRetry: always retried)
            p.idem:want_bump(tp, batch)
            self:retry(tp, batch, msg, "retriable", ec)
          end
        elseif p.transactional_id and ec == errors.INVALID_PRODUCER_EPOCH then
          -- a transaction the coordinator ended (its timeout) or a newer
          -- instance's epoch: abortable, as the Java client takes it
          -- (KIP-588); the abort's EndTxn tells fenced from timed out
          self:fail(tp, batch, msg, "abortable", ec)
        elseif p.idempotent and FENCED[ec] then
          p:_txn_error("fatal_error", msg .. " (another producer with this id took over)", "fenced", ec)
          self:fail(tp, batch, msg, "fenced", ec)
        elseif p.idempotent and FATAL[ec] then
          p:_txn_error("fatal_error", msg, "fatal", ec)
          self:fail(tp, batch, msg, "fatal", ec)
        elseif e.retriable then
          self:retry(tp, batch, msg, "retriable", e.code)
        else
          if e.code == errors.MESSAGE_TOO_LARGE and batch.count > 1 then
            self:split(tp, batch)
          else
            self:fail(tp, batch, msg, p.transactional_id and "abortable" or "kafka", e.code)
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
function _M:split(tp, batch)
  local p = self.p
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
    local b = proto.batch { magic = p.magic, compression = p.codec }
    assert(b:append(m.value, m.key, m.headers, m.timestamp))
    local nb = { b = b, state = "sealed", runs = { ids[i], 1 }, first_id = ids[i], count = 1, size = size,
      attempts = batch.attempts, next_try = 0, born = batch.born, expires = batch.expires }
    if batch.seq then
      -- the parts keep the refused batch's id, epoch and sequence range, one number each
      nb.seq, nb.pid, nb.epoch = seq_add(batch.seq, i - 1), batch.pid, batch.epoch
      b:stamp { producer_id = batch.pid, producer_epoch = batch.epoch, base_sequence = nb.seq,
        transactional = p.transactional_id ~= nil }
    end
    table.insert(q, at, nb)
  end
end

-- Forgets the requests in flight (their answers will not be read: a
-- sender's timer ended with its connections); their batches are sent again.
function _M:drop_in_flight()
  local in_flight = self.in_flight
  for i = #in_flight, 1, -1 do
    for _, it in ipairs(in_flight[i].req.items) do it.batch.state = "sealed" end
    in_flight[i] = nil
  end
end

-- At a flush deadline: answers still in flight are abandoned and their
-- messages reported failed (they may have been written: at least once).
function _M:abandon(why)
  local in_flight = self.in_flight
  for _, s in ipairs(in_flight) do
    s.conn:abandon(s.corr)
    for _, it in ipairs(s.req.items) do
      it.batch.state = "sealed"
      self:fail(it.tp, it.batch, (why or "flush timed out") .. " waiting for the broker's answer "
        .. "(the messages may have been written)", "timeout")
    end
  end
  for i = #in_flight, 1, -1 do in_flight[i] = nil end
end

-- What send() does when linger is over: settle the answers already there,
-- send what is due, and return without waiting.
function _M:kick()
  local p = self.p
  self:collect(p.client.now())
  p:_send_round()
  p.first_time = nil
end

-- A failed attempt: the batch waits backoff(attempts) (exponential, up to
-- retry_backoff_max_ms) before it is sent again, until its delivery
-- deadline or max_retries. A broker in reconnect backoff ("backoff") is
-- not an attempt: the batch waits until the broker may be tried again.
-- Non-retriable codes fail the batch at once.
function _M:retry(tp, batch, err, code, kcode)
  local p = self.p
  if p.idempotent then tp.drain = true end
  p.client:invalidate(tp.topic)
  p.acc.topics[tp.topic].n = nil
  p.acc:set_count(tp.topic, nil)
  local now = p.client.now()
  batch.last_err, batch.last_code, batch.last_kcode = err, code, kcode
  if code == "backoff" then
    local t = p.client:next_ready()
    batch.next_try = t < math.huge and t or now + p.retry_backoff_ms
    return
  end
  batch.attempts = batch.attempts + 1
  if not client_mod.RETRIABLE[code] or (p.max_retries and batch.attempts > p.max_retries) then
    -- (a nil code would be a bug: "internal")
    self:fail(tp, batch, ("%s (after %d attempts)"):format(tostring(err), batch.attempts), code or "internal", kcode)
    return
  end
  local b = p.retry_backoff_ms * 2 ^ (batch.attempts - 1)
  if b > p.retry_backoff_max_ms then b = p.retry_backoff_max_ms end
  batch.next_try = now + b
end

-- The earliest time a queued batch not in flight is due (its retry or its
-- delivery deadline). A partition at its bound of batches in flight, or
-- waiting for its connection's, or draining after a failed attempt, is
-- due when an answer comes (flush waits on the answers then: without this
-- it polled them in a busy loop).
function _M:next_due()
  local p = self.p
  local idemp = p.idem
  local t = math.huge
  local idem = p.idempotent
  if idem and idemp.need_bump and not p.transactional_id then return p.client.now() end -- (the bump)
  -- no producer id yet: the next attempt at one, or a deadline
  local no_pid = idem and not p.transactional_id and p.producer_id < 0
  if no_pid then t = idemp.pid_retry_at or 0 end
  local maxf = idem and p.max_in_flight or 1
  local pid, epoch = p.producer_id, p.producer_epoch
  for _, topic in pairs(p.acc.topics) do
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
function _M:flush(timeout_ms, room)
  local p = self.p
  local client, acc = p.client, p.acc
  local deadline = timeout_ms and client.now() + timeout_ms or math.huge
  local max_n, max_bytes = p.max_buffered, p.max_buffered_bytes
  local function done()
    local _, n, bytes = acc:counts()
    return n == 0 or (room and n < max_n and bytes + room <= max_bytes)
  end
  while not done() do
    p:_send_round(deadline)
    -- every answer already there; one settled: its partitions (and those
    -- waiting for its connection) are due at once
    local settled = self:collect(client.now()) > 0
    if done() then break end
    local t = client.now()
    if t >= deadline then break end
    local wake = settled and t or math.min(deadline, self:next_due())
    if self.in_flight[1] then
      -- wait on the oldest answer; with several in flight, in short slices
      -- so the partitions of a fast broker go on while a slow one answers
      if #self.in_flight > 1 and t + 20 < wake then wake = t + 20 end
      self:wait_one(math.max(wake, t))
    elseif wake > t then
      -- everything waits for a retry backoff: sleep until the first is due
      -- (a second at most: a round too many costs little, a lost wake-up a hang)
      client.sleep(math.ceil(math.min(wake - t, 1000)))
    end
  end
  if room then
    p.first_time = nil -- (what was open went out: as after kick)
    return
  end
  if acc:buffered() > 0 then
    -- the deadline passed: answers in flight are given up, the rest was not sent
    self:abandon()
    for _, t in pairs(acc.topics) do
      for _, tp in ipairs(t.order) do
        while tp.queue[1] do self:fail(tp, tp.queue[1], "flush timed out before the message was sent", "timeout") end
      end
    end
  end
  acc:prune()
  p.first_time = nil
end

return _M
