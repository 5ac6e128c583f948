-- OpenResty-like host: Debian's nginx + lua-nginx-module (LuaJIT 2.1) runs
-- the client through ngx.socket.tcp cosockets against the mock cluster.
-- Needs the LuaJIT build of the module (make LUA=luajit; `make test` does it).
local mock = require "support.mock"
local socket = require "socket"
local http = require "socket.http"

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."
if root:sub(1, 1) ~= "/" then root = os.getenv("PWD") .. "/" .. root end

local function have_nginx()
  local f = io.open("/usr/lib/nginx/modules/ngx_http_lua_module.so")
  if f then f:close() end
  local ok = os.execute("command -v nginx >/dev/null 2>&1")
  return f ~= nil and (ok == true or ok == 0)
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

describe("nginx cosockets", function()
  it("nginx with lua-nginx-module is installed", function()
    assert.is_true(have_nginx(), "install nginx libnginx-mod-http-lua lua-resty-core (see .ci/run)")
  end)
  if not have_nginx() then return end

  local prefix, port, m
  setup(function()
    local s = socket.bind("127.0.0.1", 0)
    local _, p = s:getsockname()
    port = tonumber(p)
    s:close()
    prefix = os.tmpname()
    os.remove(prefix)
    assert(sh(("mkdir -p %s/conf %s/logs %s/tmp"):format(prefix, prefix, prefix)))
    local conf = assert(io.open(root .. "/spec/nginx/nginx.conf.in")):read("*a")
    local user = io.popen("id -u"):read("*l") == "0" and "user root;" or ""
    conf = conf:gsub("@ROOT@", root):gsub("@PORT@", tostring(port)):gsub("@USER@", user)
    local f = assert(io.open(prefix .. "/conf/nginx.conf", "w"))
    f:write(conf)
    f:close()
    assert(sh(("nginx -p %s -c conf/nginx.conf -e logs/error.log"):format(prefix)),
      "nginx did not start: " .. tostring(io.open(prefix .. "/logs/error.log") and io.open(prefix .. "/logs/error.log"):read("*a")))
    m = mock.start { brokers = 3 }
  end)
  teardown(function()
    if prefix then sh(("nginx -p %s -c conf/nginx.conf -e logs/error.log -s stop 2>/dev/null"):format(prefix)) end
    if m then m:stop() end
    socket.sleep(0.1)
    if prefix then sh("rm -rf " .. prefix) end
  end)

  local function get(path)
    local body, code = http.request(("http://127.0.0.1:%d%s"):format(port, path))
    assert(body, code)
    if code ~= 200 then
      local log = io.open(prefix .. "/logs/error.log")
      error(("HTTP %s: %s\n%s"):format(tostring(code), body, log and log:read("*a") or ""))
    end
    return body
  end

  for _, codec in ipairs { "none", "snappy", "zstd" } do
    it("produces and consumes through cosockets (" .. codec .. ")", function()
      local topic = "nginx-" .. codec
      m:cmd("topic " .. topic .. " 3")
      local q = ("brokers=%s&topic=%s&n=2000&codec=%s"):format(m.bootstrap, topic, codec)
      assert.are.equal("2000 0 true\n", get("/produce?" .. q))
      assert.are.equal("2000 true nginx\n", get("/consume?" .. q))
    end)
  end
end)
