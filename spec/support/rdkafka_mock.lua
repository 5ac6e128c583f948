-- support.rdkafka_mock: starts librdkafka's mock cluster (spec/support/mockbroker.c, built by
-- `make mock`) and drives it through its stdin control protocol.
--   local m = mock.start{brokers = 3, topics = {"t:6"}}
--   m.bootstrap -> "127.0.0.1:p1,..."; m:cmd("down 2"); m:stop()
local socket = require "socket"
local io, os = io, os

local _M = {}
local mt = { __index = _M }

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/support/") or "."
_M.binary = root .. "/build/mockbroker"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function _M.start(o)
  o = o or {}
  local file = os.tmpname()
  local log = os.tmpname()
  os.remove(file)
  local args = { _M.binary, "-b", tostring(o.brokers or 1), "-f", file }
  for _, t in ipairs(o.topics or {}) do args[#args + 1] = "-t"; args[#args + 1] = t end
  local p = assert(io.popen("exec " .. table.concat(args, " ") .. " >" .. log .. " 2>&1", "w"))
  local self = setmetatable({ proc = p, file = file, log = log, seq = 0 }, mt)
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local s = read(file)
    if s and s:find("\n") then
      self.bootstrap = s:match("[^\n]+")
      return self
    end
    socket.sleep(0.01)
  end
  error("mock broker did not start: " .. tostring(read(log)))
end

-- cmd(line) -> true | raises: waits until the mock has applied the command
function _M:cmd(line)
  self.seq = self.seq + 1
  self.proc:write(line, "\n")
  self.proc:flush()
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local s = read(self.log) or ""
    if s:find("ok " .. self.seq .. "\n", 1, true) then return true end
    local e = s:match("error " .. self.seq .. " ([^\n]*)")
    if e then error("mock broker: " .. e) end
    socket.sleep(0.005)
  end
  error("mock broker did not answer: " .. line)
end

function _M:stop()
  if self.proc then
    pcall(self.proc.write, self.proc, "quit\n")
    self.proc:close()
    self.proc = nil
    os.remove(self.file)
    os.remove(self.log)
  end
end

return _M
