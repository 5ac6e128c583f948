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

local ngx = ngx -- luacheck: ignore 113 (nginx's global)
local os, table, ipairs, pcall, tostring, error = os, table, ipairs, pcall, tostring, error

local _M = {}

local BROKERS = os.getenv("KAFKA_BROKERS")
local TOPIC = os.getenv("KAFKA_SHARE_TOPIC")
local GROUP = os.getenv("KAFKA_SHARE_GROUP")

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

-- The worker's loop: poll, handle, acknowledge, until nginx stops the
-- worker (quit, reload); then close() releases what is held.
function _M.run(premature)
  if premature then return end
  local wid = ngx.worker.id()
  local c = share.new({ brokers = BROKERS, client_id = "nginx-queue-" .. wid }, {
    group_id = GROUP, share_acknowledgement_mode = "explicit", max_poll_records = 5, fetch_max_wait_ms = 200,
    on_acknowledgement_commit = function(results)
      for _, x in ipairs(results) do event(("ack %d %d %d"):format(wid, x.offsets, x.error_code)) end
    end,
  })
  local ok, err = pcall(function()
    c:subscribe { TOPIC }
    while not ngx.worker.exiting() do
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
  end)
  if not ok then ngx.log(ngx.ERR, "queue worker ", wid, " failed: ", err) end
  local res = c:close(5000)
  local parts = {}
  for _, x in ipairs(res) do parts[#parts + 1] = ("%s/%d %d %d"):format(x.topic, x.partition, x.offsets, x.error_code) end
  ngx.log(ngx.NOTICE, "queue worker ", wid, " closed: [", table.concat(parts, ", "), "] ", (c:state()))
end

function _M.init_worker()
  assert(ngx.timer.at(0, _M.run))
end

-- GET /queue: the workers' log and states
function _M.report()
  local dict = ngx.shared.queue
  for i = 1, dict:get("n") or 0 do
    local line = dict:get("e" .. i) -- (nil: its worker is writing it)
    if line then ngx.say(line) end
  end
  for w = 0, 1 do ngx.say("state ", w, " ", tostring(dict:get("state" .. w))) end
end

return _M
