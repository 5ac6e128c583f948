-- kafka.mock.transport: the two ways a client reaches the mock cluster.
-- In-process: socket objects with kafka.socket's cosocket interface, served
-- inside the client's own send/receive calls (no thread, no port). TCP:
-- listening ports on 127.0.0.1 (or a given host), served by step()/run().
-- These functions become the cluster's methods (kafka.mock).
local serve = require "kafka.mock.serve"

local math, table = math, table
local error, type, pairs, ipairs, tostring, tonumber, setmetatable, assert =
  error, type, pairs, ipairs, tostring, tonumber, setmetatable, assert

local open = serve.open

local function caller_error(fname, msg) error("kafka.mock: " .. fname .. ": " .. msg, 3) end

local _M = {}
--------------------------------------------------------------------------
-- in-process transport

local S = {}
S.__index = S

-- socket_factory() -> function returning socket objects for kafka.client's `socket` option
function _M:socket_factory()
  return function()
    -- total_timeout: the timeout bounds a whole receive (0 looks at what is
    -- there without waiting), as kafka.socket's luasocket wrapper
    return setmetatable({ cluster = self, timeout = nil, rbuf = "", rpos = 1, total_timeout = true }, S)
  end
end

function S:settimeout(ms)
  self.timeout = ms
end

function S:connect(host, port)
  local b = self.cluster.addr[tostring(host) .. ":" .. tostring(port)]
  if not b then return nil, "host not found" end
  if not b.up then return nil, "connection refused" end
  if self.conn then self.conn:close() end
  self.conn = open(self.cluster, b, "inproc", "in-process")
  self.rbuf, self.rpos = "", 1
  return 1
end

function S:send(data)
  local c = self.conn
  if not c or c.closed then return nil, "closed" end
  c:feed(data)
  if c.close_after then c:close() end
  return #data
end

function S:receive(n)
  local c = self.conn
  if not c then return nil, "closed", "" end
  local cl = self.cluster
  local deadline = self.timeout and (cl.now() + self.timeout)
  while true do
    local avail = #self.rbuf - self.rpos + 1
    if avail >= n then
      local s = self.rbuf:sub(self.rpos, self.rpos + n - 1)
      self.rpos = self.rpos + n
      if self.rpos > #self.rbuf then self.rbuf, self.rpos = "", 1 end
      return s
    end
    local now = cl.now()
    cl:tick(now)
    local item = c:_due(now)
    local function rest()
      local r = self.rbuf:sub(self.rpos)
      self.rbuf, self.rpos = "", 1
      return r
    end
    if item then
      table.remove(c.outq, 1)
      if item.close then
        c:close()
      else
        self.rbuf = self.rbuf:sub(self.rpos) .. item.frame
        self.rpos = 1
      end
    elseif c.closed then
      return nil, "closed", rest()
    else
      local wake = cl:_next_deadline()
      if deadline and now >= deadline then return nil, "timeout", rest() end
      if not wake and not deadline then return nil, "timeout", rest() end
      local target = wake and deadline and math.min(wake, deadline) or wake or deadline
      cl.sleep(math.max(target - now, 1))
    end
  end
end

function S:close()
  if self.conn then
    self.conn:close()
    self.conn = nil
  end
  return 1
end

--------------------------------------------------------------------------
-- TCP transport

local luasocket

function _M:_bind(b, port)
  -- tcp4/tcp6 make the descriptor now (tcp() waits for bind, and loses the
  -- option): up(id) binds the port again while its old connections linger
  local make = self.listen_host:find(":", 1, true) and luasocket.tcp6 or luasocket.tcp4
  local s = assert((make or luasocket.tcp)())
  assert(s:setoption("reuseaddr", true))
  local ok, err = s:bind(self.listen_host, port or 0)
  if not ok then
    s:close()
    return nil, err
  end
  assert(s:listen(128))
  s:settimeout(0)
  local _, p = s:getsockname()
  b.server = s
  b.port = tonumber(p)
  b.host = self.listen_host
  self.addr[b.host .. ":" .. b.port] = b
  return true
end

-- listen([{host = "127.0.0.1", ports = {p1, p2, ...}}]) -> bootstrap string.
-- Brokers then advertise these addresses (the in-process sockets accept them too).
function _M:listen(o)
  if o ~= nil and type(o) ~= "table" then caller_error("listen", "options must be a table") end
  o = o or {}
  if self.listening then caller_error("listen", "already listening") end
  luasocket = luasocket or require "socket"
  self.listen_host = o.host or "127.0.0.1"
  for i, id in ipairs(self.ids) do
    local b = self.brokers[id]
    if b.up then
      local ok, err = self:_bind(b, o.ports and o.ports[i] or 0)
      if not ok then caller_error("listen", ("broker %d: cannot listen on %s:%s: %s"):format(id, self.listen_host,
        tostring(o.ports and o.ports[i] or 0), tostring(err))) end
    end
  end
  self.listening = true
  return self:bootstrap()
end

local TCP_READ = 65536

-- reads what the socket has (bounded, so one busy client cannot starve the rest)
local function tcp_read(self)
  for _ = 1, 64 do
    local data, err, partial = self.sock:receive(TCP_READ)
    data = data or partial
    if data and #data > 0 then self:feed(data) end
    if self.closed then return end
    if err == "closed" then return self:close() end
    if err then return end
  end
end

-- moves due responses into the write queue and writes what the socket takes
local function tcp_write(self, now)
  local q = self.outq
  self.wq = self.wq or {}
  while self:_due(now) do
    local item = table.remove(q, 1)
    if item.close then
      self.close_pending = true
      break
    end
    self.wq[#self.wq + 1] = item.frame
  end
  while self.wq[1] do
    local data = self.wq[1]
    local i, err, last = self.sock:send(data, self.wpos or 1)
    if i then
      table.remove(self.wq, 1)
      self.wpos = nil
    else
      if err == "timeout" then
        self.wpos = last + 1
        return
      end
      return self:close()
    end
  end
  if self.close_pending or self.close_after then self:close() end
end

-- step([timeout_s]) -> true: serves what is ready, waiting at most timeout
-- seconds (default 0) for something to happen
function _M:step(timeout)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0) then
    caller_error("step", "timeout must be a number of seconds >= 0")
  end
  if not self.listening then caller_error("step", "call listen() first") end
  local now = self.now()
  self:tick(now)
  local rd, wr, servers = {}, {}, {}
  for _, id in ipairs(self.ids) do
    local b = self.brokers[id]
    if b.server then
      rd[#rd + 1] = b.server
      servers[b.server] = b
    end
  end
  local tcp = {}
  for c in pairs(self.conns) do
    if c.transport == "tcp" then
      tcp[#tcp + 1] = c
      rd[#rd + 1] = c.sock
      if c.wq and c.wq[1] then wr[#wr + 1] = c.sock end
      if c:_due(now) then wr[#wr + 1] = c.sock end
    end
  end
  local wait = timeout or 0
  local d = self:_next_deadline()
  if d then wait = math.min(wait, math.max(0, (d - now) / 1000)) end
  local r = luasocket.select(rd, wr, wait)
  for s, b in pairs(servers) do
    if r[s] then
      for _ = 1, 32 do
        local cs = s:accept()
        if not cs then break end
        cs:settimeout(0)
        cs:setoption("tcp-nodelay", true)
        local peer = cs:getpeername()
        local c = open(self, b, "tcp", peer)
        c.sock = cs
        tcp[#tcp + 1] = c
      end
    end
  end
  for _, c in ipairs(tcp) do
    if not c.closed and c.sock and r[c.sock] then tcp_read(c) end
  end
  now = self.now()
  self:tick(now)
  for _, c in ipairs(tcp) do
    if not c.closed and c.sock then tcp_write(c, now) end
  end
  return true
end

-- run(seconds [, until_fn]): serves for that long (math.huge: forever), or until until_fn() is true
function _M:run(seconds, until_fn)
  if type(seconds) ~= "number" or seconds < 0 then caller_error("run", "seconds must be a number >= 0") end
  if until_fn ~= nil and type(until_fn) ~= "function" then caller_error("run", "until must be a function") end
  local stop = self.now() + seconds * 1000
  repeat
    self:step(math.min(0.05, math.max(0, (stop - self.now()) / 1000)))
    if until_fn and until_fn() then return true end
  until self.now() >= stop
  return true
end

return _M
