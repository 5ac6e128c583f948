-- support.nginx: nginx with lua-nginx-module running a copy of
-- examples/openresty/nginx.conf (docs/openresty.md's config; only paths,
-- the port, spec/nginx/locations.conf and root's user filled in), for the
-- specs that put load on it. Stopped by :stop() (also after a failure:
-- call it from teardown).
--
--   local ngx_h = require "support.nginx"
--   local n = ngx_h.start { KAFKA_BROKERS = "127.0.0.1:9092", KAFKA_TOPIC = "t" }
--   n:get("/stats")            -- the body (errors on a non-200)
--   n:ab(1000, 4, "/chaos?topic=t")  -- ab, blocking: {complete=, failed=, non2xx=}
--   n:errlog()                 -- the error log's text
--   n:quit()                   -- nginx -s quit, waited for (the directory stays)
--   n:stop()
local H = require "support.helpers"
local socket = require "socket"
local http = require "socket.http"

local _M = {}
local mt = { __index = _M }

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/support/") or "."
if root:sub(1, 1) ~= "/" then root = os.getenv("PWD") .. "/" .. root end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- available() -> true when nginx with lua-nginx-module and ab are installed
function _M.available()
  local f = io.open("/usr/lib/nginx/modules/ngx_http_lua_module.so")
  if f then f:close() end
  return f ~= nil and sh("command -v nginx >/dev/null 2>&1") and sh("command -v ab >/dev/null 2>&1")
end

-- start(env [, opts]) -> a running nginx (two workers) with env's variables set
-- (KAFKA_BROKERS, KAFKA_TOPIC, KAFKA_CONSUME_TOPIC); opts.conf: a config of
-- the spec's own instead of the example (a path; @ROOT@, @PORT@ and @USER@
-- filled in, e.g. spec/nginx/share.conf.in)
function _M.start(env, opts)
  local s = socket.bind("127.0.0.1", 0)
  local _, p = s:getsockname()
  s:close()
  local self = setmetatable({ port = tonumber(p), prefix = os.tmpname() }, mt)
  os.remove(self.prefix)
  assert(sh(("mkdir -p %s/logs"):format(self.prefix)))
  local conf
  if opts and opts.conf then
    conf = read(opts.conf)
    assert(conf:find("@PORT@", 1, true), opts.conf)
    conf = conf:gsub("@ROOT@", root):gsub("@PORT@", tostring(self.port))
      :gsub("@USER@", H.is_root() and "user root;" or "")
  else
    conf = read(root .. "/examples/openresty/nginx.conf")
    assert(conf:find("listen 127.0.0.1:8080;", 1, true))
    conf = conf:gsub("%$prefix/%.%./%.%.", root):gsub('"%$prefix/%?%.lua', '"' .. root .. "/examples/openresty/?.lua")
    conf = conf:gsub("listen 127%.0%.0%.1:8080;", ("listen 127.0.0.1:%d;\n    include %s/spec/nginx/locations.conf;")
      :format(self.port, root))
    if H.is_root() then conf = "user root;\n" .. conf end
  end
  local f = assert(io.open(self.prefix .. "/nginx.conf", "w"))
  f:write(conf)
  f:close()
  local vars = {}
  for k, v in pairs(env) do vars[#vars + 1] = ("%s=%s"):format(k, v) end
  table.sort(vars)
  self.cmd = ("%s nginx -p %s -c nginx.conf -e logs/error.log"):format(table.concat(vars, " "), self.prefix)
  assert(sh(self.cmd), "nginx did not start: " .. self:errlog())
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local c = socket.tcp()
    c:settimeout(0.2)
    local ok = c:connect("127.0.0.1", self.port)
    c:close()
    if ok then return self end
    socket.sleep(0.05)
  end
  self:stop()
  error("nginx does not listen: " .. self:errlog())
end

function _M:errlog() return read(self.prefix .. "/logs/error.log") end

-- get(path) -> the body of a 200 answer (raises otherwise)
function _M:get(path)
  local body, code = http.request(("http://127.0.0.1:%d%s"):format(self.port, path))
  assert(body, code)
  if code ~= 200 then error(("HTTP %s for %s: %s\n%s"):format(tostring(code), path, body, self:errlog())) end
  return body
end

-- ab(n, c, path) -> {complete=, failed=, non2xx=}: n requests, c at a time
-- over keep-alive connections, blocking (ab's own timeout: 30 s per
-- request). Keep-alive matters: a connection per request cycles the
-- ephemeral ports fast enough to take a killed broker's port before its
-- restart binds it again.
function _M:ab(n, c, path)
  local f = assert(io.popen(("%s timeout -k 5 300 ab -k -q -r -n %d -c %d 'http://127.0.0.1:%d%s' 2>&1")
    :format(H.closefds, n, c, self.port, path)))
  local out = f:read("*a")
  f:close()
  return { complete = tonumber(out:match("Complete requests:%s+(%d+)")) or 0,
    failed = tonumber(out:match("Failed requests:%s+(%d+)")) or -1,
    non2xx = tonumber(out:match("Non%-2xx responses:%s+(%d+)") or "0"), out = out }
end

-- quit([seconds]) -> true once nginx exited after `nginx -s quit` (graceful:
-- each worker ends its timers first), false at the deadline (default 20 s);
-- its directory (errlog()) stays until stop()
function _M:quit(seconds)
  if self.stopped or self.exited then return true end
  sh(self.cmd .. " -s quit 2>/dev/null")
  local deadline = socket.gettime() + (seconds or 20)
  while socket.gettime() < deadline and read(self.prefix .. "/logs/nginx.pid") ~= "" do socket.sleep(0.05) end
  self.exited = read(self.prefix .. "/logs/nginx.pid") == ""
  return self.exited
end

-- stop(): nginx stopped (quit: the workers send what is buffered first),
-- waited for (at most 20 s, then a fast stop), its directory removed
function _M:stop()
  if not self.cmd or self.stopped then return end
  self.stopped = true
  if not self.exited then sh(self.cmd .. " -s quit 2>/dev/null") end
  local deadline = socket.gettime() + 20
  while socket.gettime() < deadline and read(self.prefix .. "/logs/nginx.pid") ~= "" do socket.sleep(0.05) end
  if read(self.prefix .. "/logs/nginx.pid") ~= "" then
    sh(self.cmd .. " -s stop 2>/dev/null")
    socket.sleep(1)
  end
  if os.getenv("SPEC_KEEP_NGINX") == nil then sh("rm -rf " .. self.prefix) end
end

return _M
