-- A misbehaving broker for the connection specs. Serves one connection at a
-- time on loopback; answers ApiVersions and Metadata correctly and breaks
-- its answers to ListOffsets as told, one mode per ListOffsets request:
--   lua5.x|luajit badbroker.lua PORTFILE MODE[,MODE...] [TLSDIR|-] [IDLE] (the specs' interpreter)
-- Modes: ok, close_mid_frame, garbage, wrong_corr, silent (no answer),
-- short_frame (a 2-byte frame), huge_frame (declares 256 MiB with the right
-- correlation id, then trickles bytes), huge_wrong_corr (the same with a
-- wrong correlation id), delay_MS (the right answer, MS ms after the
-- request: a broker-side wait). After the list it answers ok.
-- TLSDIR (a folder with cert.pem and key.pem): every connection is TLS
-- (LuaSec, server side), so the client reads through its TLS path.
-- IDLE: it exits once no connection was open for IDLE seconds (1).
local root = arg[0]:match("^(.*)/spec/support/")
package.path = root .. "/lua/?.lua;" .. root .. "/spec/?.lua;" .. package.path
local socket = require "socket"
local proto = require "kafka.proto"
local H = require "support.helpers"
local pack, unpack = H.pack, H.table_unpack

local portfile, modes, tlsdir = arg[1], {}, arg[3] ~= "-" and arg[3] or nil
local idle = tonumber(arg[4]) or 1
for m in (arg[2] or ""):gmatch("[^,]+") do modes[#modes + 1] = m end
local tls_params = tlsdir and { mode = "server", protocol = "any", key = tlsdir .. "/key.pem",
  certificate = tlsdir .. "/cert.pem", options = { "all" } }

local server = assert(socket.bind("127.0.0.1", 0))
local _, port = server:getsockname()
port = tonumber(port)
local f = assert(io.open(portfile .. ".tmp", "w"))
f:write(port, "\n")
f:close()
os.rename(portfile .. ".tmp", portfile)
server:settimeout(0)

local served = 0
local later = {} -- answers due at a time: {conn, frame, at}
local function answer(conn, req)
  local key, v, corr = req.api_key, req.api_version, req.correlation_id
  if key == 18 then
    local keys = {}
    for _, k in ipairs({ 2, 3, 18 }) do
      local lo, hi = proto.versions(k)
      keys[#keys + 1] = { api_key = k, min_version = lo, max_version = math.min(hi, k == 3 and 4 or 2) }
    end
    return conn:send(proto.encode_response(18, v, corr, { error_code = 0, api_keys = keys }))
  elseif key == 3 then
    return conn:send(proto.encode_response(3, v, corr, {
      brokers = { { node_id = 0, host = "127.0.0.1", port = port } }, controller_id = 0,
      topics = { { error_code = 0, name = "t", partitions = { { error_code = 0, partition_index = 0, leader_id = 0,
        replica_nodes = { 0 }, isr_nodes = { 0 } } } } } }))
  elseif key == 2 then
    served = served + 1
    local mode = modes[served] or "ok"
    local frame = proto.encode_response(2, v, corr, { topics = { { name = "t", partitions = {
      { partition_index = 0, error_code = 0, timestamp = -1, offset = 42, old_style_offsets = { 42 } } } } } })
    if mode == "ok" then return conn:send(frame) end
    local delay = mode:match("^delay_(%d+)$")
    if delay then -- answered from the serving loop, which goes on meanwhile
      later[#later + 1] = { conn = conn, frame = frame, at = socket.gettime() + tonumber(delay) / 1000 }
      return true
    end
    if mode == "close_mid_frame" then conn:send(frame:sub(1, 10)); return nil end
    if mode == "garbage" then
      -- throttle 0, then a topic count of 2^31-1 in a 12-byte frame
      return conn:send(pack(">i4i4", 12, corr) .. pack(">i4i4", 0, 0x7fffffff))
    end
    if mode == "wrong_corr" then return conn:send(frame:sub(1, 4) .. pack(">i4", corr + 1000) .. frame:sub(9)) end
    if mode == "short_frame" then return conn:send(pack(">i4", 2) .. "\0\0") end
    if mode == "silent" then return true end
    if mode == "huge_frame" or mode == "huge_wrong_corr" then
      -- a peer that is not Kafka: a 256 MiB frame, streamed slowly (1 KiB
      -- every 10 ms for up to 3 s, or until the client hangs up)
      local c = mode == "huge_frame" and corr or corr + 7
      if not conn:send(pack(">i4i4", 256 * 1048576, c)) then return nil end
      local chunk = ("\0"):rep(1024)
      local stop = socket.gettime() + 3
      while socket.gettime() < stop do
        if not conn:send(chunk) then return nil end
        socket.sleep(0.01)
      end
      return nil
    end
  end
  return nil
end

-- Serves every connection (select loop); exits when no connection is open
-- and none comes for IDLE s, so a driver's pclose returns soon.
local clients = {}
local idle_since = socket.gettime()
while true do
  -- (a TLS connection may hold a request LuaSec has read already: dirty)
  local readable = {}
  for _, c in ipairs(clients) do
    if c.dirty and c:dirty() then readable[#readable + 1] = c end
  end
  local wait = 0.2
  for _, l in ipairs(later) do wait = math.max(0, math.min(wait, l.at - socket.gettime())) end
  if not readable[1] then readable = socket.select({ server, unpack(clients) }, nil, wait) end
  for i = #later, 1, -1 do
    if later[i].at <= socket.gettime() then
      later[i].conn:send(later[i].frame) -- (to a connection the client may have closed: ignored)
      table.remove(later, i)
    end
  end
  for _, s in ipairs(readable) do
    if s == server then
      local conn = server:accept()
      if conn then
        conn:settimeout(5)
        if tls_params then
          conn = require("ssl").wrap(conn, tls_params)
          if conn and not conn:dohandshake() then conn:close() conn = nil end
        end
        if conn then clients[#clients + 1] = conn end
      end
    else
      local ok = false
      local head = s:receive(4)
      if head then
        local rest = s:receive(proto.frame_length(head) - 4)
        local req = rest and proto.decode_request(head .. rest)
        ok = req and answer(s, req)
      end
      if not ok then
        s:close()
        for i, c in ipairs(clients) do
          if c == s then table.remove(clients, i) break end
        end
      end
    end
  end
  if #clients > 0 then idle_since = socket.gettime()
  elseif socket.gettime() - idle_since > idle then break end
end
