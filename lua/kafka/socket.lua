-- kafka.socket: the transport seam. Everything above talks to objects with
-- the cosocket interface (timeouts in milliseconds):
--   sock:settimeout(ms)  sock:connect(host, port)  sock:send(data)
--   sock:receive(n) -> data | nil, err, partial     sock:close()
-- (a timeout returns the bytes read so far as `partial`: the connection
-- keeps them and goes on reading later)
-- ngx.socket.tcp objects have it natively; luasocket's are wrapped here;
-- any other object with these methods can be injected (TLS goes here
-- later: a wrapper whose connect also does the handshake).
local ngx = ngx -- luacheck: ignore (nil outside OpenResty)
local pcall, require, setmetatable, type = pcall, require, setmetatable, type

local _M = {}

local luasocket -- loaded on first use

local ls_mt = {}
ls_mt.__index = ls_mt

-- A timeout bounds each whole call (luasocket's "t" mode), not each wait
-- inside it: a peer trickling bytes cannot stretch a receive past it.
function ls_mt:settimeout(ms)
  self.sock:settimeout(ms and ms / 1000 or nil, "t")
end

function ls_mt:connect(host, port)
  return self.sock:connect(host, port)
end

function ls_mt:send(data)
  local n, err, last = self.sock:send(data)
  if not n then return nil, err, last end
  return n
end

function ls_mt:receive(n)
  return self.sock:receive(n)
end

function ls_mt:close()
  return self.sock:close()
end

-- luasocket_tcp() -> a luasocket TCP object behind the cosocket interface
function _M.luasocket_tcp()
  if not luasocket then luasocket = require "socket" end
  local s, err = luasocket.tcp()
  if not s then return nil, err end
  s:setoption("tcp-nodelay", true)
  -- total_timeout: settimeout bounds a whole receive, so big frames are read
  -- in one call (other sockets are read in 1 MiB pieces, each bounded)
  return setmetatable({ sock = s, total_timeout = true }, ls_mt)
end

-- True inside an nginx phase where cosockets work.
local function in_cosocket_phase()
  if type(ngx) ~= "table" or not ngx.socket or not ngx.get_phase then return false end
  local ok, phase = pcall(ngx.get_phase)
  if not ok then return false end
  return phase ~= "init" and phase ~= "init_worker" and phase ~= "log" and phase ~= "header_filter"
    and phase ~= "body_filter" and phase ~= "set"
end

-- factory(opts) -> a function returning new socket objects: opts.socket
-- when given (a function), else ngx.socket.tcp inside nginx, else luasocket.
function _M.factory(opts)
  if opts and opts.socket then return opts.socket end
  if in_cosocket_phase() then return ngx.socket.tcp end
  return _M.luasocket_tcp
end

-- clock(opts) -> now_ms(), sleep_ms(ms): injected, else nginx's or luasocket's.
function _M.clock(opts)
  if opts and opts.now then
    return opts.now, opts.sleep or function() end
  end
  if type(ngx) == "table" and ngx.now and ngx.sleep then
    return function()
      ngx.update_time()
      return ngx.now() * 1000
    end, function(ms) ngx.sleep(ms / 1000) end
  end
  if not luasocket then luasocket = require "socket" end
  return function() return luasocket.gettime() * 1000 end,
    function(ms) luasocket.sleep(ms / 1000) end
end

return _M
