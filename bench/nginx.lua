-- bench/nginx.lua: lua-kafka inside nginx (Debian's nginx + lua-nginx-module,
-- LuaJIT), run by bench/run.lua or alone:
--   LUA_PATH=... lua5.4 bench/nginx.lua      (BENCH_ROOT, BENCH_NGINX_N, BENCH_NGINX_SECONDS)
-- Prints "op\tsize\tcase\trate" lines:
--   nginx_rps 200 plain|kafka   requests/s of a location without Kafka and of
--                               the same location sending one 200-byte message
--                               (examples/openresty's per-worker producer), and
--   nginx_rps 200 compat         of the same message through the lua-resty-kafka
--                               drop-in's async producer (compat/): wrk,
--                               1 thread, 20 connections (keep-alive), BENCH_NGINX_SECONDS
--                               (5) per run after a 2 s warm-up, nginx with 1 worker
--   produce 100 nginx_bg|nginx_sync  N x 100 B through a producer in a content
--                               handler (background mode / synchronous on the
--                               request's cosockets), first send to flush
--   produce 100 luajit          bench/e2e.lua's produce rate on plain LuaJIT
-- against librdkafka's 3-broker mock cluster (200 partitions per topic).
local mock = require "support.rdkafka_mock"
local socket = require "socket"
local http = require "socket.http"

local ROOT = os.getenv("BENCH_ROOT") or "."
if ROOT:sub(1, 1) ~= "/" then ROOT = os.getenv("PWD") .. "/" .. ROOT end
local N = tonumber(os.getenv("BENCH_NGINX_N")) or tonumber(os.getenv("BENCH_E2E_N")) or 1000000
local RUNS = tonumber(os.getenv("BENCH_E2E_RUNS")) or 5
local SECONDS = tonumber(os.getenv("BENCH_NGINX_SECONDS")) or 5

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function lines(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  return out
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

local m = mock.start { brokers = 3 }
m:cmd("topic bench-rps 6")
local s = socket.bind("127.0.0.1", 0)
local _, port = s:getsockname()
s:close()
local prefix = os.tmpname()
os.remove(prefix)
assert(sh("mkdir -p " .. prefix .. "/logs"))
local conf = read(ROOT .. "/examples/openresty/nginx.conf")
conf = conf:gsub("%$prefix/%.%./%.%.", ROOT):gsub('"%$prefix/%?%.lua', '"' .. ROOT .. "/examples/openresty/?.lua")
conf = conf:gsub("listen 127%.0%.0%.1:8080;", ("listen 127.0.0.1:%d;\n    include %s/bench/nginx_locations.conf;")
  :format(port, ROOT))
conf = conf:gsub('lua_package_path "', 'lua_package_path "' .. ROOT .. "/compat/?.lua;")
conf = conf:gsub("worker_processes 2;", "worker_processes 1;"):gsub("access_log logs/access.log kafka;", "access_log off;")
if lines("id -u"):match("^0") then conf = "user root;\n" .. conf end
local f = assert(io.open(prefix .. "/nginx.conf", "w"))
f:write(conf)
f:close()
local nginx = ("KAFKA_BROKERS=%s nginx -p %s -c nginx.conf -e logs/error.log"):format(m.bootstrap, prefix)
assert(sh(nginx), read(prefix .. "/logs/error.log"))
socket.sleep(0.3)

local function get(path)
  local body, code = http.request(("http://127.0.0.1:%s%s"):format(port, path))
  assert(code == 200, tostring(body) .. " " .. tostring(code))
  return body
end

local ok, err = pcall(function()
  local function wrk(path, seconds)
    local out = lines(("wrk -t1 -c20 -d%ds http://127.0.0.1:%s%s 2>&1"):format(seconds, port, path))
    local rate = out:match("Requests/sec:%s+([%d.]+)")
    assert(rate, out)
    assert(not out:find("Non%-2xx"), out)
    return tonumber(rate)
  end
  for _, case in ipairs { "plain", "kafka", "compat" } do
    wrk("/bench/" .. case, 2) -- warm-up
    for _ = 1, 3 do print(("nginx_rps\t200\t%s\t%.0f"):format(case, wrk("/bench/" .. case, SECONDS))) end
    io.stdout:flush()
  end
  for r = 0, RUNS do
    for _, bg in ipairs { "1", "0" } do
      local topic = ("nginx-produce-%s-%d"):format(bg, r)
      m:cmd("topic " .. topic .. " 200")
      local body = get(("/bench/produce?topic=%s&n=%d&size=100&bg=%s"):format(topic, N, bg))
      local rate, delivered = body:match("^(%d+) (%d+)")
      assert(tonumber(delivered) == N, body)
      if r > 0 then print(("produce\t100\t%s\t%s"):format(bg == "1" and "nginx_bg" or "nginx_sync", rate)) end
    end
    io.stdout:flush()
  end
  -- plain LuaJIT beside it (bench/e2e.lua, produce and consume)
  for r = 0, RUNS do m:cmd("topic e2e-jit-" .. r .. " 200") end
  local env = ("LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' LUA_CPATH='%s/build/luajit/?.so;;'"):format(ROOT, ROOT, ROOT)
  local out = lines(("%s luajit %s/bench/e2e.lua %s e2e-jit- %d %d 100"):format(env, ROOT, m.bootstrap, N, RUNS))
  for rate in out:gmatch("produce\t100\tnone\t([%d.]+)") do print(("produce\t100\tluajit\t%s"):format(rate)) end
  io.stdout:flush()
end)
sh(nginx .. " -s quit")
local deadline = socket.gettime() + 10
while read(prefix .. "/logs/nginx.pid") ~= "" and socket.gettime() < deadline do socket.sleep(0.05) end
m:stop()
local log = read(prefix .. "/logs/error.log")
sh("rm -rf " .. prefix)
if not ok then error(tostring(err) .. "\n" .. log) end
