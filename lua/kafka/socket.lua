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
local pcall, require, setmetatable, getmetatable, type = pcall, require, setmetatable, getmetatable, type

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

-- in_nginx() -> true inside lua-nginx-module (its timers, cosockets and
-- phases are there).
local function in_nginx()
  return type(ngx) == "table" and type(ngx.socket) == "table" and ngx.get_phase ~= nil and type(ngx.timer) == "table"
end
_M.in_nginx = in_nginx

-- The nginx phases without cosockets. In init, init_worker and exit_worker
-- (no request is served, blocking is harmless) the client falls back to
-- luasocket; in the others a connect fails: a producer sends from its
-- background timer there, anything else goes through ngx.timer.at.
local NO_COSOCKET = { init = "luasocket", init_worker = "luasocket", exit_worker = "luasocket",
  set = false, log = false, header_filter = false, body_filter = false, balancer = false,
  ssl_session_store = false }

local function phase()
  local ok, ph = pcall(ngx.get_phase)
  return ok and ph or "unknown"
end
_M.phase = function() return in_nginx() and phase() or nil end

-- nginx_tcp() -> a cosocket (ngx.socket.tcp), picked when the socket is made
-- (a client made in init_worker still gets cosockets in the timer that uses it)
function _M.nginx_tcp()
  local ph = phase()
  local fallback = NO_COSOCKET[ph]
  if fallback == nil then return ngx.socket.tcp() end
  if fallback then return _M.luasocket_tcp() end
  return nil, "no cosockets in nginx's " .. ph .. " phase (a producer in background mode sends from its own timer;"
    .. " other I/O goes through ngx.timer.at)"
end

-- factory(opts) -> a function returning new socket objects: opts.socket
-- when given (a function), else cosockets inside nginx, else luasocket.
function _M.factory(opts)
  if opts and opts.socket then return opts.socket end
  if in_nginx() then return _M.nginx_tcp end
  return _M.luasocket_tcp
end

-- kind(sock) -> "luasocket", "cosocket" or "custom": what a socket object
-- actually is (looked at on the object, not on how it was asked for).
function _M.kind(sock)
  if getmetatable(sock) == ls_mt then return "luasocket" end
  if in_nginx() and type(sock) == "table" and type(sock.setkeepalive) == "function"
      and type(sock.getreusedtimes) == "function" then
    return "cosocket"
  end
  return "custom"
end

local get_request -- resty.core's, loaded on first use (false: not there)

-- context() -> inside nginx, the request (or timer) running now: a
-- cosocket belongs to the one that created it. nil elsewhere.
function _M.context()
  if get_request == nil then
    get_request = false
    if in_nginx() then
      local ok, base = pcall(require, "resty.core.base")
      if ok and type(base) == "table" and base.get_request then get_request = base.get_request end
    end
  end
  return get_request and get_request() or nil
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
