-- bench/group.lua: one lua-kafka consumer group member of `make bench`
-- (bench/run.lua starts several, each its own process, and reads what
-- they print). It subscribes to TOPIC in GROUP and polls until STOPFILE
-- exists (checked every 100 ms) or MAX_SECS pass (then it fails).
--   lua5.4 bench/group.lua BROKERS TOPIC GROUP PROTOCOL COMMIT STOPFILE MAX_SECS
-- PROTOCOL: "classic" or "consumer"; COMMIT: "commit" (auto commit, the
-- default) or "nocommit" (enable_auto_commit = false: partitions moved to
-- a new member start from the beginning, so it has messages at once).
-- Prints (wall clock seconds, flushed at once):
--   JOINED t            just before subscribe
--   FIRST t             when the first message arrived
--   ASSIGNED n          each time the number of owned partitions changes
--   POS p:next:t ...    every 100 ms: partitions whose highest offset seen
--                       moved (next = highest + 1), t when it moved there
--   LAST t count        the last message's time, messages received
--   DONE
local kafka = require "kafka"
local socket = require "socket"

local brokers, topic, gid, protocol, commit, stopfile, max_secs = arg[1], arg[2], arg[3], arg[4], arg[5], arg[6],
  tonumber(arg[7])
assert(protocol == "classic" or protocol == "consumer", "PROTOCOL: classic or consumer")
assert(commit == "commit" or commit == "nocommit", "COMMIT: commit or nocommit")
assert(stopfile and max_secs, "usage: group.lua BROKERS TOPIC GROUP PROTOCOL COMMIT STOPFILE MAX_SECS")

local function say(line)
  io.stdout:write(line, "\n")
  io.stdout:flush()
end

local client = kafka.client.new { brokers = brokers, client_id = "bench-group" }
-- defaults but for where to start, and fetch_max_wait_ms as bench/e2e.lua
local c = kafka.consumer.new(client, { group_id = gid, group_protocol = protocol, auto_offset_reset = "earliest",
  fetch_max_wait_ms = 100, enable_auto_commit = commit == "commit" })
local now = socket.gettime
local t_start = now()
say(("JOINED %.6f"):format(t_start))
assert(c:subscribe { topic })

local count, first, last = 0, nil, nil
local pos, moved = {}, {} -- partition -> next offset; partition -> time it moved (not yet printed)
local assigned = -1
local next_check = t_start
local function stop_requested()
  local f = io.open(stopfile, "rb")
  if f then f:close() return true end
  return false
end

local ok, err = pcall(function()
  while true do
    local msgs, perr, code = c:poll(100)
    if not msgs and code ~= "timeout" then error("poll: " .. tostring(perr) .. " " .. tostring(code)) end
    local t = now()
    if msgs and #msgs > 0 then
      if not first then
        first = t
        say(("FIRST %.6f"):format(t))
      end
      last = t
      count = count + #msgs
      for i = 1, #msgs do
        local m = msgs[i]
        local p = m.partition
        if not pos[p] or m.offset >= pos[p] then
          pos[p] = m.offset + 1
          moved[p] = t
        end
      end
    end
    local a = #c:assignment()
    if a ~= assigned then
      assigned = a
      say("ASSIGNED " .. a)
    end
    if t >= next_check then
      next_check = t + 0.1
      local parts = {}
      for p, mt in pairs(moved) do parts[#parts + 1] = ("%d:%d:%.6f"):format(p, pos[p], mt) end
      if #parts > 0 then say("POS " .. table.concat(parts, " ")) end
      moved = {}
      if stop_requested() then break end
      if t - t_start > max_secs then error(("no stop after %d s"):format(max_secs)) end
    end
  end
end)
local parts = {}
for p, mt in pairs(moved) do parts[#parts + 1] = ("%d:%d:%.6f"):format(p, pos[p], mt) end
if #parts > 0 then say("POS " .. table.concat(parts, " ")) end
say(("LAST %.6f %d"):format(last or 0, count))
c:close()
client:close()
if not ok then
  io.stderr:write("bench/group.lua: ", tostring(err), "\n")
  os.exit(1)
end
say("DONE")
