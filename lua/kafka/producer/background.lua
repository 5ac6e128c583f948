-- kafka.producer.background: the producer in nginx (background mode).
-- producer.new() makes this object when it decides background mode: the
-- producer's own parts (accumulator, sink, idempotence, transactions) with
-- the public methods below in place of the synchronous ones. The network
-- I/O runs in one background timer per producer and worker, the sender,
-- which owns every connection it uses (a private clone of the client: no
-- cosocket is shared with request handlers or other timers). send() from
-- any phase only validates, partitions (with the cached partition count;
-- messages of a topic whose count is not known yet wait unpartitioned for
-- the sender) and buffers, then wakes the sender; it never does I/O and
-- never yields. flush(), send_sync() and close() wait for the sender
-- (where nginx can yield). exit_worker() sends what a fast stop left
-- buffered, blocking, through luasocket.
local client_mod = require "kafka.client"
local check = require "kafka.check"
local ksocket = require "kafka.socket"
local producer = require "kafka.producer"
local ngx = ngx -- luacheck: ignore (nil outside OpenResty)

local math, table, debug = math, table, debug
local setmetatable, tostring, type, ipairs, pairs, error, xpcall, next, pcall, require = setmetatable,
  tostring, type, ipairs, pairs, error, xpcall, next, pcall, require

local _M = {}
-- the background producer: the producer's methods but those defined here
local B = setmetatable({}, { __index = producer })
local mt = { __index = B }

local PCOUNT_MS = 10000 -- the sender re-reads cached partition counts this often
local BG_PTIME = 2 ^ 53 -- so the accumulator's send() never asks them itself
local IDLE_S = 1        -- an idle sender looks at the worker's state this often
local IDLE_EXIT_MS = 30000 -- and ends after this long idle (the next send starts it again)
local SLICE_MS = 20     -- waiting on answers, the sender looks at new work this often
local CRASHES_GIVE_UP = 3 -- crashes in a row, nothing settled between them, before the messages fail

local traceback = debug.traceback
local acc_send = require("kafka.producer.accumulator").fast_send
local base_send = producer.send
local fast = producer._fast_sending()
-- (the producer's _fast_send, followed)
function _M._fast_send(on) fast = on end
local semaphore
local live = setmetatable({}, { __mode = "k" }) -- background producers of this worker

local function nbuf_of(p) return p.acc:buffered() end
local function seq_of(p) return (p.acc:counts()) end

local function exiting()
  return ngx.worker.exiting()
end
local watch_exit

-- new(p, client) -> p made the background producer (client: the one it
-- was made with). Its state, besides the producer's:
--   parent        that client; client is the sender's own clone of it
--   sema          the semaphore the sender sleeps on (see _bg_wake)
--   pending       topic -> messages waiting for the topic's partition count (FIFO)
--   waiters       flush() calls waiting: {target = id, sema =, done =}
--   sleeping      the sender sleeps on sema
--   running       a sender timer is pending or running
--   sender_state  what it does (see the producer's header; state())
--   restarts, crash_streak, crash_settled, crash_err  its crashes: how
--                 many, in a row with nothing settled, messages settled
--                 at the last one, its Lua error
--   client_used   a sender ran with client (the next gets a fresh clone)
--   idle_since    when the sender went idle
--   drain_n       messages buffered when the worker's exit began
--   closing, close_timeout, closed  close() asked, its timeout, done
function _M.new(p, client)
  if not semaphore then semaphore = require "ngx.semaphore" end
  p.parent = client
  p.client = client:clone() -- the sender's own connections, opened in its timer
  p.sema = semaphore.new()
  p.pending = {}
  p.waiters = {}
  p.sleeping = false
  p.running = false
  p.sender_state = "stopped"
  p.restarts = 0
  p.crash_streak, p.crash_settled, p.crash_err = 0, nil, nil
  p.client_used = false
  p.idle_since = nil
  p.drain_n = nil
  p.closing, p.close_timeout, p.closed = nil, nil, nil
  live[p] = true
  return setmetatable(p, mt)
end

-- Wakes the sender when it sleeps on its semaphore.
function B:_bg_wake()
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

function B:_bg_start(delay)
  if self.running then return true end
  if self.closed then return nil, "producer closed" end
  local ok, err = ngx.timer.at(delay or 0, bg_timer, self)
  if not ok then return nil, "cannot start the producer's sender: " .. tostring(err) end
  self.running = true
  self.sender_state = "starting"
  watch_exit()
  return true
end

-- send(): the common case in C while the sender runs, awake, and no
-- message of the topic waits for its partition count; else the
-- producer's send (a tail call: its misuse errors name send's caller),
-- which comes back to _enqueue below.
function B:send(topic, value, o)
  local tst = self.txn_state
  if fast and (not tst or tst == "in_transaction") and self.running and self.sender_state ~= "idle"
      and not self.pending[topic] then
    local id = acc_send(self.core, topic, value, o)
    if id then return id end
  end
  return base_send(self, topic, value, o)
end

-- send()'s way after its checks in background mode: partitioned and
-- buffered now when the topic's partition count is known, else left for
-- the sender; the sender woken when it must act. No I/O, no yield.
function B:_enqueue(topic, value, key, partition, headers, ts, size)
  if not self.running then
    local ok, err = self:_bg_start()
    if not ok then return nil, err, "closed" end
  end
  local acc = self.acc
  local seq0, nbuf, nbytes = acc:counts()
  if nbuf >= self.max_buffered or nbytes + size > self.max_buffered_bytes then
    return nil, ("producer buffer full (%d messages, %d bytes): the sender is behind"):format(nbuf, nbytes),
      "buffer_full"
  end
  local seq = seq0 + 1
  local t, magic = acc.topics[topic], self.magic
  local n = t and t.n
  local pq = self.pending[topic]
  local wake = self.sender_state == "idle"
  local explicit = partition ~= nil
  if n and magic and not pq then
    if not explicit then
      partition = acc:partition(t, key, n, 4) -- (raised at send's caller)
    elseif partition >= n then
      return nil, ("topic %s has no partition %d (it has %d)"):format(topic, partition, n), "unknown_partition"
    end
    local ok, err, code, fresh = acc:append(t, partition, explicit, value, key, headers, ts, size, seq, magic)
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
  acc:take(size) -- (seq)
  if wake then self:_bg_wake() end
  return seq
end

-- One message that never reached a batch fails.
function B:_bg_fail_pending(topic, e, err, code)
  local acc = self.acc
  acc:release(1, e.size)
  acc.nfailed = acc.nfailed + 1
  acc:report { id = e.id, topic = topic, partition = e.partition, err = err, code = code }
end

-- Messages waiting for metadata go into batches (the sender's context).
function B:_bg_partition(now)
  local acc = self.acc
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
      local t = acc:topic(topic)
      t.n, t.ptime = n, now + PCOUNT_MS
      acc:set_count(topic, n, BG_PTIME) -- (the sender refreshes counts, not send())
      -- no yield from here to the end of the list: sends see the count
      -- only once the waiting messages are in their batches (key order)
      self.pending[topic] = nil
      for _, e in ipairs(pq) do
        local part, ok, aerr, acode = e.partition, nil, nil, nil
        if part == nil then
          ok, part = pcall(acc.partition, acc, t, e.key, n, 3)
          if not ok then part, aerr, acode = nil, tostring(part), "invalid" end
        elseif part >= n then
          part, aerr, acode = nil, ("topic %s has no partition %d (it has %d)"):format(topic, part, n),
            "unknown_partition"
        end
        if part then
          ok, aerr, acode = acc:append(t, part, e.partition ~= nil, e.value, e.key, e.headers, e.ts, e.size,
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
  for name, t in pairs(acc.topics) do
    if t.n and now >= t.ptime and not self.pending[name] then stale[#stale + 1] = t end
  end
  for _, t in ipairs(stale) do
    local n = self.client:partitions(t.name) -- (may yield)
    if n then
      t.n = n
      acc:set_count(t.name, n, BG_PTIME)
    end
    t.ptime = self.client.now() + PCOUNT_MS
  end
  return not waiting
end

-- The smallest message id not settled yet (math.huge: none).
function B:_bg_min_outstanding()
  local m = math.huge
  for _, t in pairs(self.acc.topics) do
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
function B:_bg_notify()
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
function B:_bg_give_up(why, code)
  code = code or "timeout"
  local sink = self.sink
  local n = nbuf_of(self)
  sink:abandon(why)
  for _, t in pairs(self.acc.topics) do
    for _, tp in ipairs(t.order) do
      while tp.queue[1] do sink:fail(tp, tp.queue[1], why .. " before the message was sent", code) end
    end
  end
  for topic, pq in pairs(self.pending) do
    for _, e in ipairs(pq) do self:_bg_fail_pending(topic, e, why .. " before the message was sent", code) end
  end
  self.pending = {}
  return n
end

-- The sender: send rounds (through the producer's _send_round: specs wrap
-- it) while anything is buffered, sleeping on the semaphore in between;
-- at the worker's exit or close() it drains and ends.
function B:_bg_loop()
  local client = self.client
  local sema = self.sema
  local sink = self.sink
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
    if next(self.pending) or next(self.acc.topics) then self:_bg_partition(now) end
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
      local wake = sink.wake
      -- answers settled: their partitions' next batches are looked at again at once
      local settled = sink:collect(client.now()) > 0
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
        elseif sink.in_flight[1] then
          self.sender_state = "waiting"
          if wake > now + SLICE_MS then wake = now + SLICE_MS end
          sink:wait_one(math.max(wake, now))
        elseif wake > now then
          self.sender_state = wake == sink.wake and not urgent and "lingering" or "backoff"
          self.sleeping = true
          sema:wait(math.min(wake - now, IDLE_S * 1000) / 1000)
          self.sleeping = false
        end
      end
    end
  end
  if self.drain_n and not self.closing then
    ngx.log(ngx.NOTICE, ("kafka producer: worker exiting: %d messages sent before the exit, %d failed")
      :format(self.drain_n, self.acc.nfailed))
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
  self.sink:drop_in_flight()
  -- a sender that fails again and again with nothing settled meanwhile
  -- would hold its messages until the buffer is full: they fail instead
  local settled = seq_of(self) - nbuf_of(self)
  self.crash_streak = settled == self.crash_settled and self.crash_streak + 1 or 1
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

function B._bg_check_wait(_, what)
  local ph = ksocket.phase()
  if NO_WAIT[ph] then
    error(("%s: cannot wait in nginx's %s phase (it cannot yield); the sender delivers on its own: call %s from "
      .. "rewrite, access, content or a timer"):format(what, ph, what), 3)
  end
end

-- Waits until every message up to id `target` is settled (or the deadline):
-- true | false.
function B:_bg_wait(target, timeout_ms)
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

-- The reports and counts since the last call (flush, close).
local function take_reports(self)
  local acc = self.acc
  local reports, delivered, cb_errors = acc:take_reports()
  local failed = acc.nfailed
  acc.nfailed = 0
  return reports, failed, delivered, cb_errors
end

-- flush([timeout_ms]) in background mode: waits for the sender (where
-- nginx can yield) until everything sent before the call is settled:
-- reports, failed, delivered, callback_errors, still_buffered (nil when
-- everything sent before the call is settled).
function B:flush(timeout_ms)
  check.int("flush", "timeout_ms", timeout_ms, nil, 0)
  return self:_bg_flush(timeout_ms)
end

function B:_bg_flush(timeout_ms)
  self:_bg_check_wait("flush")
  local done = self:_bg_wait(seq_of(self), timeout_ms)
  local reports, failed, delivered, cb_errors = take_reports(self)
  return reports, failed, delivered, cb_errors, (not done) and nbuf_of(self) or nil
end

-- send_sync(topic, value [, opts]) in background mode: sent by the sender,
-- waited for.
function B:send_sync(topic, value, o)
  self:_bg_check_wait("send_sync")
  local id, err, code = self:send(topic, value, o)
  if not id then return nil, err, code end
  return self:_bg_send_sync(id)
end

function B:_bg_send_sync(id)
  local acc = self.acc
  acc.want = acc.want or {}
  acc.want[id] = true
  self:_bg_wait(id)
  local r = acc.want[id]
  acc.want[id] = nil
  if type(r) ~= "table" then return nil, "no delivery report", "internal" end
  for i, x in ipairs(acc.reports) do
    if x == r then
      table.remove(acc.reports, i)
      break
    end
  end
  if r.err then
    acc.nfailed = acc.nfailed - 1
    return nil, r.err, r.code, r.error_code
  end
  acc.delivered = acc.delivered - 1
  return r.partition, r.offset
end

-- close([timeout_ms]) in background mode: sends what is buffered (within
-- timeout_ms, else they are reported failed), stops the sender; then
-- flush's results.
function B:close(timeout_ms)
  return self:_bg_close(timeout_ms)
end

function B:_bg_close(timeout_ms)
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
  local reports, failed, delivered, cb_errors = take_reports(self)
  if self.own_client then self.parent:close() end
  return reports, failed, delivered, cb_errors
end

-- state() -> the sender's state, then err, code, kcode when it cannot go
-- on: "fatal" (every send fails with them until a recovery, README) or
-- "crashed" (the Lua error; code "crashed").
function B:state()
  local e = self.txn_error
  if self.txn_state == "fatal_error" and self.sender_state ~= "sync" then
    return "fatal", e.err, e.code, e.kcode
  end
  if self.sender_state == "crashed" then return "crashed", self.crash_err, "crashed" end
  return self.sender_state
end

local EXIT_STOP_MS = 800

-- exit_worker() (the producer's, for exit_worker_by_lua). After a fast
-- stop (nginx -s stop, SIGTERM: timers never run again) every background
-- producer of the worker sends what is still buffered through luasocket,
-- blocking, within its exit_flush_timeout_ms but at most EXIT_STOP_MS
-- (without luasocket, or past the deadline, the messages are reported
-- failed). After a graceful exit the senders have drained already and
-- nothing is left.
function _M.exit_worker()
  for p in pairs(live) do
    if nbuf_of(p) > 0 then p:_exit_drain() end
  end
end

function B:_exit_drain()
  local n = nbuf_of(self)
  ngx.log(ngx.WARN, ("kafka producer: worker stopped with %d messages buffered: sending them (blocking, luasocket, "
    .. "exit_flush_timeout_ms %d)"):format(n, self.exit_flush_timeout_ms))
  self.bg = false
  -- the sender's requests in flight went with its timer
  self.sink:drop_in_flight()
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
    if nbuf_of(self) > 0 then self.sink:flush(math.max(0, math.floor(deadline - self.client.now()))) end
    self.client:close()
  end
  local left = nbuf_of(self)
  if left > 0 then self:_bg_give_up("worker stopped") end
  local nfailed = self.acc.nfailed
  if nfailed > 0 or left > 0 then
    ngx.log(ngx.ERR, ("kafka producer: worker stopped: %d of %d buffered messages not delivered, reported failed")
      :format(nfailed, n))
  else
    ngx.log(ngx.NOTICE, ("kafka producer: worker stopped: the %d buffered messages were sent"):format(n))
  end
end

return _M
