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

local errors = proto.errors
local math, table = math, table
local setmetatable, tostring, type, ipairs, pairs, error = setmetatable, tostring, type, ipairs, pairs, error

local _M = {}
local mt = { __index = _M }

function _M.new(client_or_opts, opts)
  opts = opts or {}
  local client, own = client_mod.ensure(client_or_opts)
  local codec = opts.compression or "none"
  if not proto.compression[codec] then error("kafka.producer.new: unknown compression " .. tostring(codec), 2) end
  if type(codec) == "number" then codec = proto.compression[codec] end
  local partitioner = opts.partitioner or "murmur2_random"
  if type(partitioner) ~= "function" and partitioner ~= "murmur2_random" and partitioner ~= "murmur2"
    and partitioner ~= "random" then
    error("kafka.producer.new: unknown partitioner " .. tostring(partitioner), 2)
  end
  return setmetatable({
    client = client,
    own_client = own,
    acks = opts.acks or -1,
    codec = codec,
    linger_ms = opts.linger_ms or 100,
    batch_size = opts.batch_size or 1048576,
    max_retries = opts.max_retries or 5,
    retry_backoff_ms = opts.retry_backoff_ms or 100,
    partitioner = partitioner,
    max_buffered = opts.max_buffered or 100000,
    max_buffered_bytes = opts.max_buffered_bytes or 64 * 1048576,
    flush_on_full = opts.flush_on_full ~= false,
    max_message_bytes = opts.max_message_bytes or 1000000,
    max_request_bytes = opts.max_request_bytes or 1048576,
    timeout_ms = opts.timeout_ms or 30000,
    on_delivery = opts.on_delivery,
    magic = opts.magic, -- decided from the broker's Produce version on first use
    queues = {},        -- topic -> partition -> array of batches (FIFO)
    order = {},         -- topic -> partition -> true, in first-seen order
    sticky = {},        -- topic -> partition for unkeyed messages
    last_sticky = {},   -- topic -> the previous sticky partition
    nbuf = 0,
    nbytes = 0,
    first_time = nil,
    seq = 0,
    reports = {},
    only_errors = opts.delivery_reports == "errors",
    delivered = 0,
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
  v, err, code = c:version(0)
  if not v then return nil, err, code end
  self.magic = v >= 3 and 2 or (v == 2 and 1 or 0)
  return self.magic
end

function _M:_partition(topic, key, n)
  local p = self.partitioner
  if type(p) == "function" then return p(key, n, topic) end
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
  if h then
    if #h > 0 then
      for _, x in ipairs(h) do n = n + #(x.key or x[1] or "") + #(x.value or x[2] or "") + 4 end
    else
      for k, v in pairs(h) do n = n + #k + #v + 4 end
    end
  end
  return n
end

-- send(topic, value [, {key=, partition=, headers=, timestamp=}]) -> message id
-- | nil, err, code ("too_large", "buffer_full", "unknown_topic",
-- "unknown_partition", "retriable", ...). Raises on wrong argument types.
function _M:send(topic, value, o)
  if type(topic) ~= "string" then error("send: topic must be a string", 2) end
  if value ~= nil and type(value) ~= "string" then error("send: value must be a string or nil", 2) end
  local key, partition, headers, ts
  if o then
    key, partition, headers, ts = o.key, o.partition, o.headers, o.timestamp
    if key ~= nil and type(key) ~= "string" then error("send: key must be a string or nil", 2) end
    if headers ~= nil and type(headers) ~= "table" then error("send: headers must be a table", 2) end
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
  elseif type(partition) ~= "number" or partition < 0 or partition >= n or partition % 1 ~= 0 then
    return nil, ("topic %s has no partition %s (it has %d)"):format(topic, tostring(partition), n), "unknown_partition"
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
    batch = { b = proto.batch { magic = magic, compression = self.codec }, runs = {}, count = 0, size = 0,
              attempts = 0 }
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

function _M:_report(r)
  if self.on_delivery then self.on_delivery(r) end
  self.reports[#self.reports + 1] = r
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

-- Sends one round: the first batch of every partition, one request per
-- leader, every request before any answer is read (brokers work in
-- parallel). A batch whose leader is unknown counts an attempt. Returns
-- the requests sent, and true when something waits for a retry.
function _M:_send_round()
  local by_leader, reqs = {}, {}
  local retry = false
  for topic, tq in pairs(self.queues) do
    for _, partition in ipairs(self.order[topic]) do
      local q = tq[partition]
      local batch = q and q[1]
      if batch then
        local leader, err, code = self.client:leader(topic, partition)
        local conn
        if leader then conn, err, code = self.client:broker(leader) end
        if conn then
          -- sealed: later messages go to a new batch. The builder itself goes
          -- into the request (encoded straight into the frame, no string);
          -- a retry encodes the same bytes again.
          batch.sealed = true
          -- requests stay under max_request_bytes (at least one batch each):
          -- smaller frames recycle memory instead of faulting in fresh pages
          local req = by_leader[conn]
          if not req or (req.size > 0 and req.size + batch.size > self.max_request_bytes) then
            req = { topics = {}, list = {}, size = 0, conn = conn }
            by_leader[conn] = req
            reqs[#reqs + 1] = req
          end
          req.size = req.size + batch.size
          local t = req.topics[topic]
          if not t then
            t = { name = topic, partition_data = {} }
            req.topics[topic] = t
            req.list[#req.list + 1] = t
          end
          t.partition_data[#t.partition_data + 1] = { index = partition, records = batch.b }
        else
          retry = self:_retry(topic, partition, batch, err, code) or retry
        end
      end
    end
  end
  -- send every request first, then read the answers: brokers work in parallel
  local sent = {}
  for _, req in ipairs(reqs) do
    local conn = req.conn
    local v, err, code = conn:version(0)
    local corr
    if v then
      corr, err, code = conn:send(0, v, { transactional_id = nil, acks = self.acks,
        timeout_ms = self.timeout_ms, topic_data = req.list }, { no_response = self.acks == 0,
        timeout_ms = self.timeout_ms })
    end
    sent[#sent + 1] = { conn = conn, req = req, corr = corr, err = err, code = code }
  end
  return sent, retry
end

-- Reads the answers to a round and settles its batches. Returns true when
-- something is left to retry.
function _M:_collect(sent)
  local retry = false
  for _, s in ipairs(sent) do
    local resp, err, code = nil, s.err, s.code
    if s.corr then
      if self.acks == 0 then resp = { responses = {} } else resp, err, code = s.conn:receive(s.corr) end
    end
    local results = {}
    if resp then
      for _, tr in ipairs(resp.responses or {}) do
        for _, pr in ipairs(tr.partition_responses or {}) do results[tr.name .. "\0" .. pr.index] = pr end
      end
    end
    for _, t in ipairs(s.req.list) do
      for _, pd in ipairs(t.partition_data) do
        local q = self.queues[t.name][pd.index]
        local batch = q[1]
        if not resp then
          retry = self:_retry(t.name, pd.index, batch, err, code) or retry
        elseif self.acks == 0 then
          table.remove(q, 1)
          self:_done(t.name, pd.index, batch, -1)
        else
          local pr = results[t.name .. "\0" .. pd.index]
          if not pr then
            retry = self:_retry(t.name, pd.index, batch, "no result for the partition in the Produce response",
              "protocol") or retry
          elseif pr.error_code == 0 then
            table.remove(q, 1)
            self:_done(t.name, pd.index, batch, pr.base_offset)
          else
            local e = errors.info(pr.error_code)
            local msg = ("%s/%d: %s (%s)%s"):format(t.name, pd.index, e.name, e.message,
              pr.error_message and (": " .. pr.error_message) or "")
            if e.retriable then
              retry = self:_retry(t.name, pd.index, batch, msg, "retriable", e.code) or retry
            elseif e.code == errors.MESSAGE_TOO_LARGE and batch.count > 1 then
              self:_split(t.name, pd.index)
              retry = true
            else
              table.remove(q, 1)
              self:_done(t.name, pd.index, batch, nil, msg, "kafka", e.code)
            end
          end
        end
      end
    end
  end
  return retry
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
      sealed = true })
  end
end

-- Fails everything still queued when the flush deadline has passed.
function _M:_expire(deadline)
  if self.client.now() > deadline then
    -- not sent in time: report every remaining message as not delivered
    for topic, tq in pairs(self.queues) do
      for partition, q in pairs(tq) do
        while q[1] do
          local batch = table.remove(q, 1)
          self:_done(topic, partition, batch, nil, "flush timed out before the message was sent", "timeout")
        end
      end
    end
    return true
  end
  return false
end


-- What send() does when linger is over: read the answers to the round in
-- flight (normally already there), then send the next round and return
-- without waiting. A partition's next batch goes out only after the
-- previous one is settled, so retries never reorder a partition.
function _M:_kick()
  if self.in_flight then
    self:_collect(self.in_flight)
    self.in_flight = nil
  end
  self.in_flight = self:_send_round()
  self.first_time = nil
end

-- Counts an attempt; fails the batch after max_retries. Returns true while
-- the batch is to be retried.
function _M:_retry(topic, partition, batch, err, code, kcode)
  self.client:invalidate(topic)
  self.pcount[topic] = nil
  batch.attempts = batch.attempts + 1
  batch.last_err, batch.last_code, batch.last_kcode = err, code, kcode
  if batch.attempts > self.max_retries or code == "unknown_partition" or code == "unsupported" then
    table.remove(self.queues[topic][partition], 1)
    self:_done(topic, partition, batch, nil, ("%s (after %d attempts)"):format(tostring(err), batch.attempts),
      code or "failed", kcode)
    return false
  end
  return true
end

function _M:_flush(timeout_ms)
  local deadline = self.client.now() + (timeout_ms or (self.timeout_ms + 30000))
  if self.in_flight then
    self:_collect(self.in_flight)
    self.in_flight = nil
  end
  while self.nbuf > 0 do
    local sent, retry = self:_send_round()
    retry = self:_collect(sent) or retry
    if self:_expire(deadline) then break end
    if retry then self.client.sleep(self.retry_backoff_ms) end
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

-- flush([timeout_ms]) -> reports (every message sent since the last flush,
-- in send order; with delivery_reports = "errors" only the failed ones),
-- number failed, number delivered. Blocks until each message is
-- acknowledged or has failed (after retries, or at the timeout).
function _M:flush(timeout_ms)
  self:_flush(timeout_ms)
  local reports = self.reports
  self.reports = {}
  table.sort(reports, function(a, b) return a.id < b.id end)
  local failed = 0
  for _, r in ipairs(reports) do if r.err then failed = failed + 1 end end
  local delivered = self.delivered
  self.delivered = 0
  return reports, failed, delivered
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
      if r.err then return nil, r.err, r.code end
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
  local reports, failed = self:flush(timeout_ms)
  if self.own_client then self.client:close() end
  return reports, failed
end

return _M
