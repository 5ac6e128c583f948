-- Shared helpers for the specs: hex, deep comparison, a seeded generator
-- and a runner for the kafka-python oracle.
local string, table, io, os = string, table, io, os
local pairs, type, tostring, assert = pairs, type, tostring, assert

local _M = {}

-- closefds: a command prefix (spec/support/closefds.sh) for a process a
-- spec leaves running in the background: it starts without this process's
-- descriptors above 2, so it holds no spec socket and no write end of a
-- popen'd peer's stdin (a mock told to stop by EOF would wait for it).
_M.closefds = (debug.getinfo(1, "S").source:match("^@(.*)/spec/support/") or ".") .. "/spec/support/closefds.sh"

-- is_root() -> true when this process runs as root (its pipe closed at once)
function _M.is_root()
  local p = assert(io.popen("id -u"))
  local uid = p:read("*l")
  p:close()
  return uid == "0"
end

function _M.hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

function _M.unhex(h)
  h = h:gsub("%s+", "")
  assert(#h % 2 == 0, "odd hex length")
  return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

-- deep_diff(a, b) -> nil when equal, else a path describing the first difference
function _M.deep_diff(a, b, path)
  path = path or "$"
  if type(a) ~= type(b) then
    return path .. ": " .. type(a) .. " vs " .. type(b) .. " (" .. tostring(a) .. " / " .. tostring(b) .. ")"
  end
  if type(a) ~= "table" then
    if a ~= b then
      -- NaN compares unequal to itself
      if a ~= a and b ~= b then return nil end
      return path .. ": " .. tostring(a) .. " vs " .. tostring(b)
    end
    return nil
  end
  for k, v in pairs(a) do
    local d = _M.deep_diff(v, b[k], path .. "." .. tostring(k))
    if d then return d end
  end
  for k, v in pairs(b) do
    if a[k] == nil then return path .. "." .. tostring(k) .. ": missing on the left (" .. tostring(v) .. ")" end
  end
  return nil
end

-- Portability: the specs run on Lua 5.4, 5.3, 5.1 and LuaJIT 2.1, so no
-- bitwise operators, no //, no string.pack where the Lua lacks it.

-- The version-specific names, looked up here only (luacheck checks the specs
-- against the names every Lua has).
-- luacheck: push std max
-- Whether Lua numbers include 64-bit integers (5.3/5.4). Without them int64
-- fields are doubles, exact up to 2^53 (docs/client.md, "64-bit values").
_M.int64 = math.type ~= nil
_M.maxinteger, _M.mininteger = math.maxinteger, math.mininteger
_M.table_unpack = table.unpack or unpack
local string_pack, string_unpack = string.pack, string.unpack
local is_luajit = jit ~= nil
-- luacheck: pop

-- The interpreter running the specs, for child Lua processes (the module in
-- LUA_CPATH is built for it): the command line's interpreter, else by version.
function _M.lua_interpreter()
  local i, exe = -1, nil
  while arg and arg[i] do exe, i = arg[i], i - 1 end
  if exe then return exe end
  if is_luajit then return "luajit" end
  return "lua" .. _VERSION:match("%d+%.%d+")
end

-- Exclusive or of two 32-bit non-negative numbers, by bytes through a table.
local XOR8 = {}
for a = 0, 255 do
  for b = 0, 255 do
    local x, y, r, bit = a, b, 0, 1
    for _ = 1, 8 do
      if x % 2 ~= y % 2 then r = r + bit end
      x, y, bit = math.floor(x / 2), math.floor(y / 2), bit * 2
    end
    XOR8[a * 256 + b] = r
  end
end
local floor = math.floor
local function bxor32(a, b)
  local r, m = 0, 1
  for _ = 1, 4 do
    local a8, b8 = a % 256, b % 256
    r = r + XOR8[a8 * 256 + b8] * m
    a, b, m = floor(a / 256), floor(b / 256), m * 256
  end
  return r
end
_M.bxor32 = bxor32

-- byte with bit k (0-7) flipped
function _M.flip_bit(byte, k)
  local bit = 2 ^ k
  if floor(byte / bit) % 2 == 1 then return floor(byte - bit) end
  return floor(byte + bit)
end

-- A small deterministic generator (xorshift32: s ^= s << 13; s ^= s >> 17;
-- s ^= s << 5), in arithmetic exact on every Lua: the same sequence on 5.4,
-- 5.3, 5.1 and LuaJIT, and the same as the bitwise version it replaces.
function _M.rng(seed)
  local s = seed or 88172645
  local r = {}
  function r.next()
    s = bxor32(s, (s % 524288) * 8192)  -- << 13, mod 2^32
    s = bxor32(s, floor(s / 131072))    -- >> 17
    s = bxor32(s, (s % 134217728) * 32) -- << 5, mod 2^32
    return s
  end
  function r.int(lo, hi) return lo + r.next() % (hi - lo + 1) end
  function r.bytes(n)
    local t = {}
    for i = 1, n do t[i] = string.char(r.next() % 256) end
    return table.concat(t)
  end
  return r
end

-- Big-endian pack/unpack for the formats the specs use (">" with i1 i2 i4
-- i8 I4 s4): string.pack/unpack where the Lua has them, else arithmetic
-- (int64 values exact up to 2^53, as the codec's own 64-bit policy).
local function uint_bytes(v, n)
  local t = {}
  for i = n, 1, -1 do
    local b = v % 256
    t[i] = string.char(b)
    v = (v - b) / 256
  end
  return table.concat(t)
end

local function pack(fmt, ...)
  assert(fmt:sub(1, 1) == ">", "big-endian formats only")
  local out, i = {}, 0
  for kind, size in fmt:sub(2):gmatch("([iIs])(%d)") do
    i = i + 1
    local v = select(i, ...)
    size = tonumber(size)
    if kind == "s" then
      out[#out + 1] = uint_bytes(#v, size) .. v
    else
      assert(v == floor(v), "integer expected")
      if size == 8 then
        local hi = floor(v / 4294967296)
        out[#out + 1] = uint_bytes(hi % 4294967296, 4) .. uint_bytes(v - hi * 4294967296, 4)
      else
        out[#out + 1] = uint_bytes(v % 2 ^ (8 * size), size)
      end
    end
  end
  return table.concat(out)
end

local function uint_at(s, pos, n)
  local v = 0
  for j = pos, pos + n - 1 do v = v * 256 + s:byte(j) end
  return v
end

local function unpack(fmt, s, pos)
  assert(fmt:sub(1, 1) == ">", "big-endian formats only")
  pos = pos or 1
  local out = {}
  for kind, size in fmt:sub(2):gmatch("([iIs])(%d)") do
    size = tonumber(size)
    assert(pos + size - 1 <= #s, "data string too short")
    local v
    if kind == "s" then
      local n = uint_at(s, pos, size)
      v = s:sub(pos + size, pos + size + n - 1)
      pos = pos + size + n
    else
      if size == 8 then
        local hi = uint_at(s, pos, 4)
        if hi >= 2147483648 then hi = hi - 4294967296 end
        v = hi * 4294967296 + uint_at(s, pos + 4, 4)
      else
        v = uint_at(s, pos, size)
        if kind == "i" and v >= 2 ^ (8 * size - 1) then v = v - 2 ^ (8 * size) end
      end
      pos = pos + size
    end
    out[#out + 1] = v
  end
  out[#out + 1] = pos
  return _M.table_unpack(out)
end

_M.pack = string_pack or pack
_M.unpack = string_unpack or unpack
_M.portable_pack, _M.portable_unpack = pack, unpack

-- The kafka-python oracle: runs spec/support/kp.py with Debian's python.
_M.python = "/usr/bin/python3"

function _M.have_python()
  local ok = os.execute(_M.python .. " -c 'import kafka, snappy, lz4, zstandard' >/dev/null 2>&1")
  return ok == true or ok == 0
end

local function tmpname() return os.tmpname() end

-- bytes_diff(want, got [, theirs]) -> nil when equal, else where the two
-- byte strings first differ, in hex with some context (theirs: the name of
-- want's writer, "the peer" by default).
function _M.bytes_diff(want, got, theirs)
  if want == got then return nil end
  local i = 1
  while i <= #want and want:byte(i) == got:byte(i) do i = i + 1 end
  local from = i > 8 and i - 8 or 1
  return ("%d bytes from %s, %d from lua-kafka; first difference at byte %d: theirs ...%s... ours ...%s..."):format(
    #want, theirs or "the peer", #got, i - 1, _M.hex(want:sub(from, i + 8)), _M.hex(got:sub(from, i + 8)))
end

-- kp_pack_msgs(msgs) / kp_unpack_msgs(bytes): messages in kp.py's format
-- (int64 offset, int64 timestamp, int32-prefixed key and value, -1 null,
-- int32 header count, int32-prefixed header keys and values).
function _M.kp_pack_msgs(msgs)
  local pk = _M.pack
  local out = {}
  local function lb(s)
    if s == nil then return pk(">i4", -1) end
    return pk(">i4", #s) .. s
  end
  for i, m in ipairs(msgs) do
    local hs = m.headers or {}
    local parts = { pk(">i8i8", m.offset or (i - 1), m.timestamp or -1), lb(m.key), lb(m.value),
      pk(">i4", #hs) }
    for _, h in ipairs(hs) do parts[#parts + 1] = lb(h.key) .. lb(h.value) end
    out[#out + 1] = table.concat(parts)
  end
  return table.concat(out)
end

function _M.kp_unpack_msgs(s)
  local upk = _M.unpack
  local msgs, pos = {}, 1
  local function lb()
    local n
    n, pos = upk(">i4", s, pos)
    if n < 0 then return nil end
    local v = s:sub(pos, pos + n - 1)
    pos = pos + n
    return v
  end
  while pos <= #s do
    local m = {}
    m.offset, m.timestamp, pos = upk(">i8i8", s, pos)
    m.key = lb()
    m.value = lb()
    local nh
    nh, pos = upk(">i4", s, pos)
    if nh > 0 then
      m.headers = {}
      for j = 1, nh do m.headers[j] = { key = lb(), value = lb() } end
    end
    msgs[#msgs + 1] = m
  end
  return msgs
end

-- kp(cmd, input_bytes, args...) -> output bytes; raises on failure.
function _M.kp(cmd, input, ...)
  local inf, outf = tmpname(), tmpname()
  local f = assert(io.open(inf, "wb"))
  f:write(input or "")
  f:close()
  local args = { ... }
  for i = 1, #args do args[i] = "'" .. tostring(args[i]) .. "'" end
  local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
  -- the exit status is echoed: Lua 5.1's pipe close does not report it
  local line = string.format("%s %skp.py %s %s %s %s 2>&1; echo \"kp-exit=$?\"", _M.python, dir, cmd, inf, outf,
    table.concat(args, " "))
  local p = assert(io.popen(line))
  local log = p:read("*a")
  p:close()
  local status
  log = log:gsub("kp%-exit=(%d+)\n$", function(x) status = tonumber(x); return "" end)
  local ok = status == 0
  local o = io.open(outf, "rb")
  local out = o and o:read("*a")
  if o then o:close() end
  os.remove(inf)
  os.remove(outf)
  if not ok then error("kp.py " .. cmd .. " failed: " .. log) end
  return out
end

-- start_bad(modes [, tlsdir [, idle]]) -> process, port: spec/support/
-- badbroker.lua serving the given comma-separated modes (see that file),
-- over TLS with tlsdir's cert.pem and key.pem when given, exiting after
-- idle seconds (1) without a connection.
function _M.start_bad(modes, tlsdir, idle)
  local socket = require "socket"
  local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/support/") or "."
  local portfile = os.tmpname()
  os.remove(portfile)
  local p = assert(io.popen(("exec %s %s/spec/support/badbroker.lua %s %s %s %s"):format(_M.lua_interpreter(), root,
    portfile, modes ~= "" and modes or "ok", tlsdir or "-", tostring(idle or 1)), "r"))
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local f = io.open(portfile)
    if f then
      local port = tonumber(f:read("*l"))
      f:close()
      os.remove(portfile)
      if port then return p, port end
    end
    socket.sleep(0.01)
  end
  error("bad broker did not start")
end

-- mock_client(cluster [, opts]) -> a kafka.client on an in-process
-- kafka.mock cluster, with short backoffs (the specs' clocks are fast)
function _M.mock_client(cluster, o)
  o = o or {}
  o.brokers = cluster:bootstrap()
  o.socket = cluster:socket_factory()
  o.retry_backoff_ms = o.retry_backoff_ms or 1
  o.reconnect_backoff_ms = o.reconnect_backoff_ms or 1
  o.reconnect_backoff_max_ms = o.reconnect_backoff_max_ms or 4
  o.client_id = o.client_id or "spec"
  return require("kafka").client.new(o)
end

-- mock_conn(cluster, id [, opts]) -> a raw kafka.connection to one broker of
-- an in-process kafka.mock cluster, connected (opts.now: the connection
-- keeps time on that clock, the cluster's injected one)
function _M.mock_conn(cluster, id, opts)
  local b = cluster.brokers[id]
  local c = require("kafka.connection").new { host = b.host, port = b.port, socket = cluster:socket_factory(),
    request_timeout_ms = 5000, max_versions = opts and opts.max_versions, client_id = opts and opts.client_id or "spec",
    now = opts and opts.now }
  assert(c:connect())
  return c
end

-- mock_consume_all(client, topic, want) -> {[partition] = {messages}}, count:
-- every partition of topic read from the earliest offset until want
-- messages are in (at most 2,000 polls of 10 ms)
function _M.mock_consume_all(client, topic, want)
  local c = require("kafka").consumer.new(client, { fetch_max_wait_ms = 0 })
  local n = assert(client:partitions(topic))
  local a = {}
  for p = 0, n - 1 do a[#a + 1] = { topic = topic, partition = p, offset = "earliest" } end
  assert(c:assign(a))
  local by_part, got = {}, 0
  for _ = 1, 2000 do -- (a poll holds max_poll_records, 500)
    if got >= want then break end
    for _, m in ipairs(assert(c:poll(10))) do
      by_part[m.partition] = by_part[m.partition] or {}
      table.insert(by_part[m.partition], m)
      got = got + 1
    end
  end
  return by_part, got
end

-- Whether process pid runs. A process killed whose parent has not reaped
-- it yet (a zombie: an orphan waits for the machine's init) answers
-- kill -0 as if it ran; /proc tells, where there is one.
function _M.pid_alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat", "rb")
  if f then
    local st = f:read("*a") or ""
    f:close()
    local state = st:match("^%d+ %b() (%a)")
    return state ~= nil and state ~= "Z" and state ~= "X"
  end
  local self_stat = io.open("/proc/self/stat", "rb")
  if self_stat then -- a /proc without the pid: gone
    self_stat:close()
    return false
  end
  local ok = os.execute("kill -0 " .. pid .. " 2>/dev/null")
  return ok == true or ok == 0
end

-- self_pid() -> this process's id (read from /proc/self by this process,
-- not by a child), nil without /proc
function _M.self_pid()
  local f = io.open("/proc/self/stat", "rb")
  if not f then return nil end
  local pid = f:read("*a"):match("^%d+")
  f:close()
  return pid
end

-- the sockets and pipes `ls` lists in dir (a /proc/PID/fd), as /proc
-- names them: {["socket:[inode]"] = fd, ["pipe:[inode]"] = fd, ...}
local function ls_files(dir)
  local p = assert(io.popen("ls -l " .. dir .. " 2>/dev/null"))
  local t = {}
  for line in p:lines() do
    local fd, what = line:match(" (%d+) %-> ((%a+):%[%d+%])$")
    if fd and (what:match("^socket") or what:match("^pipe")) then t[what] = tonumber(fd) end
  end
  p:close()
  return t
end

-- open_files(pid) -> the sockets and pipes process pid has open ("self":
-- this one), as ls_files gives them; {} without /proc.
function _M.open_files(pid)
  if pid == "self" then pid = _M.self_pid() or "self" end
  return ls_files("/proc/" .. pid .. "/fd")
end

-- open_files_of_child() -> the same of a program this process starts
-- (what it inherited: /proc/self is the child `ls` there)
function _M.open_files_of_child() return ls_files("/proc/self/fd") end

-- lite() -> true on the Luas after the first in `make test` (SPEC_TIER=lite
-- or min): specs whose subject is another implementation or a broker
-- version run their full matrix once, on the first Lua, and a
-- representative part here.
function _M.lite()
  local t = os.getenv("SPEC_TIER")
  return t == "lite" or t == "min"
end

-- min() -> true on Lua 5.3 and 5.1 in `make test` (SPEC_TIER=min): the lite
-- tier without the slow real-broker cases whose subject is the brokers'
-- behaviour over time (restarts, session lifetimes, token expiry, a Java
-- peer's codec matrix), not the Lua: those run on the first Lua and on
-- LuaJIT (OpenResty's). A spec marks them `local slow_it = H.min() and
-- pending or it`, so they show as pending, never as passed.
function _M.min() return os.getenv("SPEC_TIER") == "min" end

return _M
