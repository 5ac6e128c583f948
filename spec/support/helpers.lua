-- Shared helpers for the specs: hex, deep comparison, a seeded generator
-- and a runner for the kafka-python oracle.
local string, table, io, os = string, table, io, os
local pairs, type, tostring, assert = pairs, type, tostring, assert

local _M = {}

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

-- A small deterministic generator (xorshift), identical on every Lua.
function _M.rng(seed)
  local s = seed or 88172645
  local r = {}
  function r.next()
    s = (s ~ (s << 13)) & 0xffffffff
    s = s ~ (s >> 17)
    s = (s ~ (s << 5)) & 0xffffffff
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

-- The kafka-python oracle: runs spec/support/kp.py with Debian's python.
_M.python = "/usr/bin/python3"

function _M.have_python()
  local ok = os.execute(_M.python .. " -c 'import kafka, snappy, lz4, zstandard' >/dev/null 2>&1")
  return ok == true or ok == 0
end

local function tmpname() return os.tmpname() end

-- kp(cmd, input_bytes, args...) -> output bytes; raises on failure.
function _M.kp(cmd, input, ...)
  local inf, outf = tmpname(), tmpname()
  local f = assert(io.open(inf, "wb"))
  f:write(input or "")
  f:close()
  local args = { ... }
  for i = 1, #args do args[i] = "'" .. tostring(args[i]) .. "'" end
  local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
  local line = string.format("%s %skp.py %s %s %s %s 2>&1", _M.python, dir, cmd, inf, outf, table.concat(args, " "))
  local p = assert(io.popen(line))
  local log = p:read("a")
  local ok = p:close()
  local o = io.open(outf, "rb")
  local out = o and o:read("a")
  if o then o:close() end
  os.remove(inf)
  os.remove(outf)
  if not ok then error("kp.py " .. cmd .. " failed: " .. log) end
  return out
end

-- start_bad(modes) -> process, port: spec/support/badbroker.lua serving
-- the given comma-separated modes (see that file).
function _M.start_bad(modes)
  local socket = require "socket"
  local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/support/") or "."
  local portfile = os.tmpname()
  os.remove(portfile)
  local p = assert(io.popen(("exec lua5.4 %s/spec/support/badbroker.lua %s %s"):format(root, portfile, modes), "r"))
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local f = io.open(portfile)
    if f then
      local port = tonumber(f:read("l"))
      f:close()
      os.remove(portfile)
      if port then return p, port end
    end
    socket.sleep(0.01)
  end
  error("bad broker did not start")
end

return _M
