-- spec/nginx/share_worker.lua: a queue worker in nginx (docs/share.md's
-- pattern): one kafka.share_consumer per worker process, made in its own
-- long-lived timer (its cosockets belong to that timer), the share group
-- and topic from the environment. Jobs are handled by their value:
--   "job N"      accepted
--   "poison N"   rejected (never delivered again)
--   "release N"  released on its first delivery (handed out again), accepted on the next
--   "hold N"     held without an acknowledgement (a job still running when
--                the worker stops: close() releases it)
-- Every delivery and every acknowledgement outcome goes to the shared dict
-- `queue` (GET /queue lists them); close()'s outcome goes to the error log,
-- as nginx stops listening before the worker exits.
local share = require "kafka.share_consumer"
local ksocket = require "kafka.socket"

local ngx = ngx -- luacheck: ignore 113 (nginx's global)
local os, table, ipairs, pcall, tostring, error = os, table, ipairs, pcall, tostring, error

local _M = {}

local BROKERS = os.getenv("KAFKA_BROKERS")
local TOPIC = os.getenv("KAFKA_SHARE_TOPIC")
local GROUP = os.getenv("KAFKA_SHARE_GROUP")
local MODE = os.getenv("KAFKA_SHARE_TIMER") -- "every": ngx.timer.every, else one long-lived timer

-- appends one line to the workers' log
local function event(line)
  local dict = ngx.shared.queue
  local n = dict:incr("n", 1, 0)
  dict:set("e" .. n, line)
end

-- what to do with a record: the acknowledge type, or "hold"
local function action(rec)
  local kind = rec.value:match("^(%a+) ")
  if kind == "poison" then return "reject" end
  if kind == "release" then return rec.delivery_count == 1 and "release" or "accept" end
  if kind == "hold" then return "hold" end
  return "accept"
end

-- this worker's share consumer: explicit acknowledgements, outcomes logged
local function consumer(wid)
  local c = share.new({ brokers = BROKERS, client_id = "nginx-queue-" .. wid }, {
    group_id = GROUP, share_acknowledgement_mode = "explicit", max_poll_records = 5, fetch_max_wait_ms = 200,
    on_acknowledgement_commit = function(results)
      for _, x in ipairs(results) do event(("ack %d %d %d"):format(wid, x.offsets, x.error_code)) end
    end,
  })
  c:subscribe { TOPIC }
  return c
end

-- one poll's records handled and acknowledged (sent with the next poll)
local function poll(c, wid)
  local recs, perr, code = c:poll(500)
  if not recs then error(("poll: %s (%s)"):format(tostring(perr), tostring(code))) end
  if perr then ngx.log(ngx.WARN, "queue worker ", wid, ": ", perr, " (", tostring(code), ")") end
  for _, r in ipairs(recs) do
    local a = action(r)
    ngx.sleep(0.005) -- the job's work
    if a ~= "hold" then c:acknowledge(r, a) end
    event(("rec %d %d %d %s"):format(r.offset, r.delivery_count, wid, a))
  end
  ngx.shared.queue:set("state" .. wid, (c:state()))
end

-- close() releases what is held; its outcome goes to the error log
local function close(c, wid)
  local res = c:close(5000)
  local parts = {}
  for _, x in ipairs(res) do parts[#parts + 1] = ("%s/%d %d %d"):format(x.topic, x.partition, x.offsets, x.error_code) end
  ngx.log(ngx.NOTICE, "queue worker ", wid, " closed: [", table.concat(parts, ", "), "] ", (c:state()))
end

-- The worker's loop: poll, handle, acknowledge, until nginx stops the
-- worker (quit, reload); then close() releases what is held.
function _M.run(premature)
  if premature then return end
  local wid = ngx.worker.id()
  local c = consumer(wid)
  local ok, err = pcall(function()
    while not ngx.worker.exiting() do poll(c, wid) end
  end)
  if not ok then ngx.log(ngx.ERR, "queue worker ", wid, " failed: ", err) end
  close(c, wid)
end

-- The same with ngx.timer.every: one poll per tick, the consumer kept
-- across the ticks. Each tick is a timer of its own, whose cosockets nginx
-- closes when it ends (and the broker the share session on them): the
-- acknowledgements are committed within the tick. ngx.timer.every starts a
-- tick while the last one still runs: busy makes those return at once (at
-- the worker's exit the running tick closes the consumer).
local ticking, busy, closed, last_ctx
function _M.tick(premature)
  if busy or closed then return end
  busy = true
  local wid = ngx.worker.id()
  -- each tick is a context of its own for kafka.socket (which owns the cosockets)
  local ctx = ksocket.context()
  ngx.shared.queue:incr((ctx == last_ctx and "same_ctx" or "ticks") .. wid, 1, 0)
  last_ctx = ctx
  if not ticking then ticking = consumer(wid) end
  local ok, err = pcall(function()
    if not premature then
      poll(ticking, wid)
      ticking:commit_sync(5000)
    end
    if premature or ngx.worker.exiting() then
      closed = true
      close(ticking, wid)
    end
  end)
  busy = false
  if not ok then ngx.log(ngx.ERR, "queue worker ", wid, " failed: ", err) end
end

function _M.init_worker()
  if MODE == "every" then
    assert(ngx.timer.every(0.01, _M.tick))
  else
    assert(ngx.timer.at(0, _M.run))
  end
end

-- GET /queue: the workers' log and states
function _M.report()
  local dict = ngx.shared.queue
  for i = 1, dict:get("n") or 0 do
    local line = dict:get("e" .. i) -- (nil: its worker is writing it)
    if line then ngx.say(line) end
  end
  for w = 0, 1 do
    ngx.say("state ", w, " ", tostring(dict:get("state" .. w)))
    ngx.say("ticks ", w, " ", dict:get("ticks" .. w) or 0, " ", dict:get("same_ctx" .. w) or 0)
  end
end

return _M
