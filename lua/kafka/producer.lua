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
-- Delivery is at least once: a request whose response is lost is retried,
-- so a retried batch can be written twice. Retries never reorder messages
-- within a partition: one batch per partition is in flight at a time.
local proto = require "kafka.proto"
local client_mod = require "kafka.client"
local check = require "kafka.check"

local errors = proto.errors
local PRODUCE = proto.api.Produce
local math, table, debug = math, table, debug
local setmetatable, tostring, type, ipairs, pairs, error, xpcall = setmetatable, tostring, type, ipairs, pairs,
  error, xpcall

local _M = {}
local mt = { __index = _M }

local WHERE = "kafka.producer.new"
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
  return setmetatable({
    client = client,
    own_client = own,
    acks = check.oneof(WHERE, "acks", opts.acks, -1, { -1, 0, 1 }),
    codec = codec,
    linger_ms = int(WHERE, "linger_ms", opts.linger_ms, 100, 0),
    batch_size = int(WHERE, "batch_size", opts.batch_size, 1048576, 1),
    max_retries = int(WHERE, "max_retries", opts.max_retries, nil, 0),
    retry_backoff_ms = backoff,
    retry_backoff_max_ms = int(WHERE, "retry_backoff_max_ms", opts.retry_backoff_max_ms,
      math.max(backoff, client.retry_backoff_max_ms), 0),
    delivery_timeout_ms = int(WHERE, "delivery_timeout_ms", opts.delivery_timeout_ms, 120000, 1),
    partitioner = partitioner,
    max_buffered = int(WHERE, "max_buffered", opts.max_buffered, 100000, 1),
    max_buffered_bytes = int(WHERE, "max_buffered_bytes", opts.max_buffered_bytes, 64 * 1048576, 1),
    flush_on_full = check.bool(WHERE, "flush_on_full", opts.flush_on_full, true),
    max_message_bytes = int(WHERE, "max_message_bytes", opts.max_message_bytes, 1000000, 1),
    max_request_bytes = int(WHERE, "max_request_bytes", opts.max_request_bytes, 1048576, 1),
    timeout_ms = int(WHERE, "timeout_ms", opts.timeout_ms, 30000, 0),
    on_delivery = opts.on_delivery,
    -- decided from the broker's Produce version on first use
    magic = check.oneof(WHERE, "magic", opts.magic, nil, { 0, 1, 2 }),
    queues = {},        -- topic -> partition -> array of batches (FIFO)
    order = {},         -- topic -> partition -> true, in first-seen order
    sticky = {},        -- topic -> partition for unkeyed messages
    last_sticky = {},   -- topic -> the previous sticky partition
    nbuf = 0,
    nbytes = 0,
    first_time = nil,
    seq = 0,
    reports = {},
    only_errors = check.oneof(WHERE, "delivery_reports", opts.delivery_reports, "all", { "all", "errors" })
      == "errors",
    delivered = 0,
    callback_errors = 0,
    in_flight = {},     -- Produce requests sent, answers not read yet (oldest first)
    pcount = {},        -- topic -> partition count (cached for 4096 sends)
    ptime = {},
    rng = math.random,
  }, mt)
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

function _M:_partition(topic, key, n)
  local p = self.partitioner
  if type(p) == "function" then
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
  local s = self.sticky[topic]
  if not s or s >= n then
    local last = self.last_sticky[topic]
    s = last and (last + 1) % n or self.rng(0, n - 1)
    self.sticky[topic], self.last_sticky[topic] = s, s
  end
  return s
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
  local nbuf = self.nbuf
  if nbuf > 0 then
    if nbuf >= self.max_buffered or self.nbytes + size > self.max_buffered_bytes then
      if not self.flush_on_full then
        return nil, ("producer buffer full (%d messages, %d bytes): flush() first"):format(nbuf, self.nbytes),
          "buffer_full"
      end
      self:_flush()
    elseif nbuf % 64 == 0 and self.first_time and self.client.now() - self.first_time >= self.linger_ms then
      -- the clock is read every 64 messages: linger is not worth a syscall each
      self:_kick()
    end
    nbuf = self.nbuf
  end
  local magic = self.magic
  local err, code
  if not magic then
    magic, err, code = self:_magic()
    if not magic then return nil, err, code end
  end
  -- the partition count, asked of the client at most once every 4096 sends
  local n = self.pcount[topic]
  if not n or self.seq >= self.ptime[topic] then
    n, err, code = self.client:partitions(topic)
    if not n then return nil, err, code end
    self.pcount[topic], self.ptime[topic] = n, self.seq + 4096
  end
  if partition == nil then
    partition = self:_partition(topic, key, n)
  elseif partition >= n then
    return nil, ("topic %s has no partition %d (it has %d)"):format(topic, partition, n), "unknown_partition"
  end
  local tq = self.queues[topic]
  if not tq then
    tq = {}
    self.queues[topic] = tq
    self.order[topic] = {}
  end
  local q = tq[partition]
  if not q then
    q = {}
    tq[partition] = q
    table.insert(self.order[topic], partition)
  end
  local batch = q[#q]
  if not batch or batch.sealed or batch.size + size > self.batch_size then
    -- a full batch ends the sticky choice: the next unkeyed message goes
    -- to a partition picked anew
    if batch and key == nil and not (o and o.partition) then self.sticky[topic] = nil end
    if self.codec == "zstd" and magic < 2 then
      return nil, "zstd needs Produce v3+ (Kafka 0.11+); this cluster speaks magic " .. magic, "unsupported"
    end
    -- the delivery deadline counts from the batch's first message
    batch = { b = proto.batch { magic = magic, compression = self.codec }, runs = {}, count = 0, size = 0,
              attempts = 0, next_try = 0, expires = self.client.now() + self.delivery_timeout_ms }
    q[#q + 1] = batch
  end
  local ok, berr = batch.b:append(value, key, headers, ts)
  if not ok then return nil, berr, "invalid" end
  local seq = self.seq + 1
  self.seq = seq
  -- message ids as runs {first, count, first, count, ...}: consecutive
  -- sends to one partition (sticky or keyed alike) cost no table growth
  local runs = batch.runs
  local nr = #runs
  if nr > 0 and runs[nr - 1] + runs[nr] == seq then
    runs[nr] = runs[nr] + 1
  else
    runs[nr + 1] = seq
    runs[nr + 2] = 1
  end
  batch.count = batch.count + 1
  batch.size = batch.size + size
  self.nbuf = nbuf + 1
  self.nbytes = self.nbytes + size
  if not self.first_time then self.first_time = self.client.now() end
  return seq
end

local traceback = debug.traceback

-- A report: to on_delivery (its errors are caught: the report gets
-- callback_error, flush() counts them, bookkeeping goes on) and to the list
-- flush() returns.
function _M:_report(r)
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
  if r.err or not self.only_errors then self.reports[#self.reports + 1] = r end
end

function _M:_done(topic, partition, batch, base_offset, err, code, kcode)
  local count = batch.count
  if not err then self.delivered = self.delivered + count end
  self.nbuf = self.nbuf - count
  self.nbytes = self.nbytes - batch.size
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

-- Fails the first batch of topic/partition.
function _M:_fail(topic, partition, batch, err, code, kcode)
  table.remove(self.queues[topic][partition], 1)
  self:_done(topic, partition, batch, nil, err, code, kcode)
end

-- Sends one round: the first batch of every partition that is due (not in
-- flight, not waiting for its retry backoff), one request per leader
-- (grouped by the client), every request before any answer is read
-- (brokers work in parallel). Batches past their delivery deadline fail
-- here. The requests join self.in_flight; a partition has one batch in
-- flight at a time, so retries never reorder it, and each partition goes
-- on as soon as its own answer is in (a slow broker holds up only its own
-- partitions).
function _M:_send_round(deadline)
  local now = self.client.now()
  local items = {}
  for topic, tq in pairs(self.queues) do
    for _, partition in ipairs(self.order[topic]) do
      local q = tq[partition]
      local batch = q and q[1]
      while batch and not batch.in_flight and now >= batch.expires do
        self:_fail(topic, partition, batch, ("delivery_timeout_ms (%d) expired after %d attempts%s"):format(
          self.delivery_timeout_ms, batch.attempts, batch.last_err and (": " .. tostring(batch.last_err)) or ""),
          "timeout", batch.last_kcode)
        batch = q[1]
      end
      if batch and not batch.in_flight and now >= batch.next_try then
        items[#items + 1] = { topic = topic, partition = partition, batch = batch }
      end
    end
  end
  if #items == 0 then return end
  local groups, failed = self.client:group(items, deadline)
  for _, f in ipairs(failed) do
    local it = f.item
    self:_retry(it.topic, it.partition, it.batch, f.err, f.code)
  end
  local reqs = {}
  for _, g in ipairs(groups) do
    local req
    for _, it in ipairs(g.items) do
      local batch = it.batch
      -- sealed: later messages go to a new batch. The builder itself goes
      -- into the request (encoded straight into the frame, no string);
      -- a retry encodes the same bytes again.
      batch.sealed = true
      -- requests stay under max_request_bytes (at least one batch each):
      -- smaller frames recycle memory instead of faulting in fresh pages
      if not req or (req.size > 0 and req.size + batch.size > self.max_request_bytes) then
        req = { topics = {}, list = {}, items = {}, size = 0, conn = g.conn }
        reqs[#reqs + 1] = req
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
  -- send every request first, then read the answers: brokers work in parallel
  local in_flight = self.in_flight
  for _, req in ipairs(reqs) do
    local conn = req.conn
    local v, err, code = conn:version(PRODUCE)
    local corr
    if v then
      corr, err, code = conn:send(PRODUCE, v, { transactional_id = nil, acks = self.acks,
        timeout_ms = self.timeout_ms, topic_data = req.list }, { no_response = self.acks == 0,
        timeout_ms = self.timeout_ms, deadline = deadline })
    end
    local s = { conn = conn, req = req, corr = corr }
    for _, it in ipairs(req.items) do it.batch.in_flight = true end
    if corr and self.acks ~= 0 then
      in_flight[#in_flight + 1] = s
    else
      self:_settle(s, corr and { responses = {} } or nil, err, code)
    end
  end
end

-- Reads the answers in flight until the deadline (now: only those already
-- there) and settles their batches.
function _M:_collect(deadline)
  local in_flight = self.in_flight
  local i = 1
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
end

-- Waits for the oldest answer in flight until `until_t`, settles it when it came.
function _M:_wait_one(until_t)
  local s = self.in_flight[1]
  local resp, err, code = s.conn:receive(s.corr, until_t)
  if not resp and code == "timeout" and s.conn:waiting(s.corr) then return end
  table.remove(self.in_flight, 1)
  self:_settle(s, resp, err, code)
end

function _M:_settle(s, resp, err, code)
  local results = {}
  if resp then
    for _, tr in ipairs(resp.responses or {}) do
      for _, pr in ipairs(tr.partition_responses or {}) do results[tr.name .. "\0" .. pr.index] = pr end
    end
  end
  for _, it in ipairs(s.req.items) do
    local topic, partition, batch = it.topic, it.partition, it.batch
    batch.in_flight = nil
    local q = self.queues[topic][partition]
    if not resp then
      self:_retry(topic, partition, batch, err, code)
    elseif self.acks == 0 then
      table.remove(q, 1)
      self:_done(topic, partition, batch, -1)
    else
      local pr = results[topic .. "\0" .. partition]
      if not pr then
        self:_retry(topic, partition, batch, "no result for the partition in the Produce response", "protocol")
      elseif pr.error_code == errors.NONE then
        table.remove(q, 1)
        self:_done(topic, partition, batch, pr.base_offset)
      else
        local e = errors.info(pr.error_code)
        local msg = ("%s/%d: %s (%s)%s"):format(topic, partition, e.name, e.message,
          pr.error_message and (": " .. pr.error_message) or "")
        if e.retriable then
          self:_retry(topic, partition, batch, msg, "retriable", e.code)
        else
          if e.code == errors.MESSAGE_TOO_LARGE and batch.count > 1 then
            self:_split(topic, partition)
          else
            self:_fail(topic, partition, batch, msg, "kafka", e.code)
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
function _M:_split(topic, partition)
  local q = self.queues[topic][partition]
  local batch = table.remove(q, 1)
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
    table.insert(q, 1, { b = b, runs = { ids[i], 1 }, count = 1, size = size, attempts = batch.attempts,
      sealed = true, next_try = 0, expires = batch.expires })
  end
end

-- At a flush deadline: answers still in flight are abandoned and their
-- messages reported failed (they may have been written: at least once).
function _M:_abandon()
  for _, s in ipairs(self.in_flight) do
    s.conn:abandon(s.corr)
    for _, it in ipairs(s.req.items) do
      it.batch.in_flight = nil
      self:_fail(it.topic, it.partition, it.batch, "flush timed out waiting for the broker's answer "
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
function _M:_retry(topic, partition, batch, err, code, kcode)
  self.client:invalidate(topic)
  self.pcount[topic] = nil
  local now = self.client.now()
  batch.last_err, batch.last_code, batch.last_kcode = err, code, kcode
  if code == "backoff" then
    local t = self.client:next_ready()
    batch.next_try = t < math.huge and t or now + self.retry_backoff_ms
    return
  end
  batch.attempts = batch.attempts + 1
  if not client_mod.RETRIABLE[code] or (self.max_retries and batch.attempts > self.max_retries) then
    self:_fail(topic, partition, batch, ("%s (after %d attempts)"):format(tostring(err), batch.attempts),
      code or "failed", kcode)
    return
  end
  local b = self.retry_backoff_ms * 2 ^ (batch.attempts - 1)
  if b > self.retry_backoff_max_ms then b = self.retry_backoff_max_ms end
  batch.next_try = now + b
end

-- The earliest time a queued batch not in flight is due (its retry or its
-- delivery deadline).
function _M:_next_due()
  local t = math.huge
  for _, tq in pairs(self.queues) do
    for _, q in pairs(tq) do
      local b = q[1]
      if b and not b.in_flight then
        local due = b.next_try < b.expires and b.next_try or b.expires
        if due < t then t = due end
      end
    end
  end
  return t
end

function _M:_flush(timeout_ms)
  local client = self.client
  local deadline = timeout_ms and client.now() + timeout_ms or math.huge
  while self.nbuf > 0 do
    self:_send_round(deadline)
    self:_collect(client.now()) -- every answer already there
    if self.nbuf == 0 then break end
    local t = client.now()
    if t >= deadline then break end
    local wake = math.min(deadline, self:_next_due())
    if self.in_flight[1] then
      -- wait on the oldest answer; with several in flight, in short slices
      -- so the partitions of a fast broker go on while a slow one answers
      if #self.in_flight > 1 and t + 20 < wake then wake = t + 20 end
      self:_wait_one(math.max(wake, t))
    elseif wake > t then
      -- everything waits for a retry backoff: sleep until the first is due
      client.sleep(math.ceil(wake - t))
    end
  end
  if self.nbuf > 0 then
    -- the deadline passed: answers in flight are given up, the rest was not sent
    self:_abandon()
    for topic, tq in pairs(self.queues) do
      for partition, q in pairs(tq) do
        while q[1] do
          self:_fail(topic, partition, q[1], "flush timed out before the message was sent", "timeout")
        end
      end
    end
  end
  -- drop emptied queues so topics not used any more cost nothing
  for topic, tq in pairs(self.queues) do
    local empty = true
    for _, q in pairs(tq) do if q[1] then empty = false end end
    if empty then
      self.queues[topic] = nil
      self.order[topic] = nil
    end
  end
  self.first_time = nil
  self.sticky = {}
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
  local id, err, code = self:send(topic, value, o)
  if not id then return nil, err, code end
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

-- buffered() -> messages, bytes waiting to be sent
function _M:buffered()
  return self.nbuf, self.nbytes
end

function _M:close(timeout_ms)
  local reports, failed, delivered, cb_errors = self:flush(timeout_ms)
  if self.own_client then self.client:close() end
  return reports, failed, delivered, cb_errors
end

return _M
