-- One consume-transform-produce worker of spec/eos_loop_spec.lua: a group
-- consumer (read_committed, no auto commit) and a transactional producer
-- in one process, looping poll -> begin_transaction -> send the transformed
-- messages -> send_offsets_to_transaction(consumer:group_metadata()) ->
-- commit_transaction. The spec kills it with SIGKILL and starts it again.
--
--   lua5.x|luajit eos_worker.lua BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PROTOCOL TAG CTL PARENT_PID
--
-- An input value "in:<id>" becomes "out:<id>:<TAG>.<round>" (keyed by the
-- input value) on OUTPUT. Lines on stdout, flushed as written:
--   READY                            subscribed, init_transactions done
--   BEGIN <tag> <n>                  a transaction for n polled messages
--   HOLD <point> <tag> <n>           stopped inside the transaction (see CTL)
--   STALL <tag> <n>                  sleeping inside the transaction (see CTL)
--   COMMIT <tag> <n>                 committed
--   ABORT <tag> <code> <err>         aborted (a rebalance, a refused offsets commit), positions rewound
--   POLLERR <code> <err>
--   DONE                             CTL.stop seen: consumer and producer closed
-- CTL is a path prefix: while the file CTL.hold holds a point's name
-- ("sent": the transaction's messages are in the log; "offsets": its
-- offsets were sent too), the first worker there stops and waits to be
-- killed; "stall MS" at "sent": it sleeps MS (no heartbeats: a zombie
-- member once its session times out), then goes on (STALL <tag> <n>);
-- CTL.stop ends the loop. The worker exits by itself when PARENT_PID is
-- gone or after 300 s.
local root = arg[0]:match("^(.*)/spec/support/")
package.path = root .. "/lua/?.lua;" .. root .. "/spec/?.lua;" .. package.path
local kafka = require "kafka"
local socket = require "socket"

local bootstrap, input, output, group_id, tid, protocol, tag, ctl, parent = arg[1], arg[2], arg[3], arg[4], arg[5],
  arg[6], arg[7], arg[8], arg[9]
assert(parent, "usage: eos_worker.lua BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PROTOCOL TAG CTL PARENT_PID")

local function say(...)
  io.stdout:write(table.concat({ ... }, " "), "\n")
  io.stdout:flush()
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local stop_at = socket.gettime() + 300
local next_check = 0
-- false once the spec is gone (or the lifetime is over): a worker never outlives its spec
local function spec_alive()
  local t = socket.gettime()
  if t > stop_at then return false end
  if t < next_check then return true end
  next_check = t + 2
  local ok = os.execute("kill -0 " .. parent .. " 2>/dev/null")
  return ok == true or ok == 0
end

-- CTL.hold's words after the point's name ("" for none) when the file
-- names this point and this worker claimed it (renamed it to CTL.hold.TAG:
-- one worker takes each hold file), else nil
local function claim(point)
  local h = read_file(ctl .. ".hold")
  if not h or h:match("^%S+") ~= point then return nil end
  if not os.rename(ctl .. ".hold", ctl .. ".hold." .. tag) then return nil end
  return h:match("^%S+%s*(.-)%s*$")
end

-- waits for the SIGKILL
local function hold(point, t, n)
  say("HOLD", point, t, n)
  while spec_alive() do socket.sleep(0.05) end
  os.exit(3)
end

local client = kafka.client.new { brokers = bootstrap, client_id = tag }
local p = kafka.producer.new(client, { transactional_id = tid, linger_ms = 1e9, transaction_timeout_ms = 60000 })
local ok, err, code = p:init_transactions()
if not ok then
  say("FATAL", tostring(code), tostring(err))
  os.exit(2)
end
-- small fetches (4 KiB a partition): many rounds of a few hundred messages
local c = kafka.consumer.new(client, { group_id = group_id, group_protocol = protocol,
  isolation_level = "read_committed", enable_auto_commit = false, auto_offset_reset = "earliest",
  max_poll_records = 500, max_partition_fetch_bytes = 4096, fetch_max_wait_ms = 100, session_timeout_ms = 3000,
  heartbeat_interval_ms = 500 })
assert(c:subscribe { input })
say("READY")

-- After an abort the positions go back to the committed offsets: the
-- aborted round's messages are read (and transformed) again.
local function rewind()
  for _, a in ipairs(c:assignment()) do
    local sok, serr, scode = c:seek(a.topic, a.partition, "committed")
    if not sok then say("SEEKERR", tostring(scode), tostring(serr)) end
  end
end

-- One round: the polled messages' transformed copies and their offsets in
-- one transaction. true | nil, err, code
local function round(ms, gm, t)
  assert(p:begin_transaction())
  say("BEGIN", t, #ms)
  local next_offset, order = {}, {}
  for _, m in ipairs(ms) do
    local id = assert(m.value:match("^in:(%d+)$"), m.value)
    local sok, serr, scode = p:send(output, "out:" .. id .. ":" .. t, { key = m.value })
    if not sok then return nil, serr, scode end
    local k = m.topic .. "\0" .. m.partition
    if not next_offset[k] then order[#order + 1] = { topic = m.topic, partition = m.partition, k = k } end
    next_offset[k] = m.offset + 1
  end
  if claim("sent") then
    p:flush()
    hold("sent", t, #ms)
  end
  local stall = claim("stall")
  if stall then -- a member that stops polling: the group moves on without it
    p:flush()
    say("STALL", t, #ms)
    socket.sleep(tonumber(stall) / 1000)
  end
  local offsets = {}
  for i, o in ipairs(order) do offsets[i] = { topic = o.topic, partition = o.partition, offset = next_offset[o.k] } end
  local sok, serr, scode = p:send_offsets_to_transaction(offsets, gm)
  if not sok then return nil, serr, scode end
  if claim("offsets") then
    p:flush()
    hold("offsets", t, #ms)
  end
  sok, serr, scode = p:commit_transaction()
  if not sok then return nil, serr, scode end
  return true
end

local rounds = 0
while spec_alive() and not read_file(ctl .. ".stop") do
  local ms, perr, pcode = c:poll(200)
  if not ms then
    say("POLLERR", tostring(pcode), tostring(perr))
    if pcode == "fenced" or pcode == "group" then os.exit(4) end
  elseif #ms > 0 then
    local gm = c:group_metadata() -- the member's generation when these messages were fetched
    rounds = rounds + 1
    local t = tag .. "." .. rounds
    local rok, rerr, rcode = round(ms, gm, t)
    if rok then
      say("COMMIT", t, #ms)
    else
      if rcode == "fenced" or rcode == "fatal" then
        say("FATAL", tostring(rcode), tostring(rerr))
        os.exit(5)
      end
      local aok, aerr, acode = p:abort_transaction()
      if not aok then
        say("FATAL", tostring(acode), "abort: " .. tostring(aerr))
        os.exit(6)
      end
      say("ABORT", t, tostring(rcode), tostring(rerr))
      rewind()
    end
  end
end
local stopped = read_file(ctl .. ".stop") ~= nil
c:close()
p:close()
client:close()
if stopped then say("DONE") else say("DONE", "(not told to: the spec is gone or 300 s passed)") end
