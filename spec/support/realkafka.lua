-- Real Apache Kafka brokers and Kafka's Java client for the specs, through
-- spec/support/kafka/harness.sh (Maven resolves the jars into ~/.m2 once).
--
--   local rk = require "support.realkafka"
--   for _, v in ipairs(rk.versions()) do ... end       -- KAFKA_VERSIONS, e.g. "4.1.2,3.9.1"
--   local k = rk.cluster("4.1.2", 1)                    -- started once per suite run, then shared
--   k.bootstrap.PLAINTEXT, k.bootstrap.SASL_SSL, k.dir .. "/ca.pem"
--   k:kill(2); k:restart(2)                             -- 3-node clusters: one node at a time
--   k:kill(2); local h = k:restart_bg(2); ...; h.wait()  -- restart while clients work
--   rk.java{"consume", topic, n, 30}                    -- Kafka's Java client (spec/support/kafka/Peer.java)
--
-- Brokers belong to LK_KAFKA_OWNER (set by `make test` around all the Lua
-- runs, so they start once) or else to this process; the harness's
-- watchdog kills them when their owner is gone, also when busted is
-- interrupted.
local io, os, string, table = io, os, string, table
local ipairs, pairs, tostring, error, setmetatable = ipairs, pairs, tostring, error, setmetatable
local H = require "support.helpers"

local _M = {}
local mt = { __index = _M }

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/support/") or "."
local harness = root .. "/spec/support/kafka/harness.sh"
_M.MAIN = "4.4.0"

-- sh(cmd) -> ok, output. The exit status is read from the output: Lua
-- 5.1's and LuaJIT's popen close() does not return it.
local function sh(cmd)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"__rc=$?\""))
  local out = p:read("*a")
  p:close()
  local rc = out:match("__rc=(%d+)%s*$")
  out = out:gsub("__rc=%d+%s*$", "")
  return rc == "0", out
end

local function my_pid()
  local _, out = sh("echo $PPID")
  return out:match("%d+")
end

local owner = os.getenv("LK_KAFKA_OWNER")
local started = {}      -- names this process started (and stops)
local clusters = {}     -- name -> cluster object

-- versions() -> the Kafka versions the suite runs against (KAFKA_VERSIONS;
-- "none" runs none).
function _M.versions()
  local s = os.getenv("KAFKA_VERSIONS")
  if not s or s == "" then s = "4.4.0,4.1.2,3.9.1" end
  local t = {}
  if s == "none" then return t end
  for v in s:gmatch("[^,%s]+") do t[#t + 1] = v end
  return t
end

-- main() -> the version the 3-node and Java specs use (the first listed).
function _M.main() return _M.versions()[1] end

-- java_version() -> the kafka-clients version of the Java peers: KAFKA_JAVA_VERSION,
-- else the main version; a main before 4.x takes MAIN's client instead, as
-- Peer.java uses kafka-clients 4.x (the group config resource, the consumer
-- protocol's options).
function _M.java_version()
  local v = os.getenv("KAFKA_JAVA_VERSION")
  if v and v ~= "" then return v end
  v = _M.main()
  if not v or v:match("^[0-3]%.") then return _M.MAIN end
  return v
end

-- api_versions(version) -> the ApiVersions a 1-node cluster of that version
-- answers ({[api_key] = {min =, max =}}, finalized features {[name] = level}),
-- asked once per process (the cluster starts now if it is not running), so
-- specs choose their cases from what the broker serves, not its version string.
local probed = {}
function _M.api_versions(version)
  if not probed[version] then
    local k = _M.cluster(version, 1)
    local client = require("kafka").client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-probe" }
    local c, err = client:any_broker()
    if not c then error("ApiVersions of Kafka " .. version .. ": " .. tostring(err), 2) end
    probed[version] = { c.broker_versions, c.finalized_features or {} }
    client:close()
  end
  return probed[version][1], probed[version][2]
end

-- serves(version, api) -> true when a broker of that version advertises api
-- (a name: "ConsumerGroupHeartbeat"), else false and the reason, for pending()
function _M.serves(version, api)
  local key = require("kafka.proto").api_key(api)
  if _M.api_versions(version)[key] then return true end
  return false, ("Kafka %s does not serve %s (not in its ApiVersions)"):format(version, api)
end

-- consumer_protocol(version) -> true where a broker of that version takes KIP-848's
-- consumer protocol: it serves ConsumerGroupHeartbeat and the cluster finalized
-- group.version 1 (4.x); else false and the reason (3.9 advertises the API as a
-- preview, without the feature, and answers it UNSUPPORTED_VERSION)
function _M.consumer_protocol(version)
  local ok, why = _M.serves(version, "ConsumerGroupHeartbeat")
  if not ok then return false, why end
  local _, ff = _M.api_versions(version)
  if (ff["group.version"] or 0) < 1 then
    return false, ("Kafka %s does not finalize group.version 1 (its ApiVersions)"):format(version)
  end
  return true
end

-- share_groups(version) -> true where a broker of that version serves share
-- groups (KIP-932): it advertises ShareGroupHeartbeat and the cluster
-- finalized share.version 1 (4.2+; 4.1 has them as a preview to enable, 4.0
-- as early access); else false and the reason, for pending()
function _M.share_groups(version)
  local ok, why = _M.serves(version, "ShareGroupHeartbeat")
  if not ok then return false, why end
  local _, ff = _M.api_versions(version)
  if (ff["share.version"] or 0) < 1 then
    return false, ("Kafka %s does not finalize share.version 1 (its ApiVersions)"):format(version)
  end
  return true
end

-- broker_config(version, name) -> the value broker 1 of a 1-node cluster of that
-- version gives config `name` (DescribeConfigs), nil when it does not know it
function _M.broker_config(version, name)
  local k = _M.cluster(version, 1)
  local kafka = require "kafka"
  local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-probe" }
  local admin = kafka.admin.new(client)
  local r, err = admin:describe_configs { { type = "broker", name = "1", names = { name } } }
  client:close()
  if not r or r[1].error_code ~= 0 then error("DescribeConfigs on Kafka " .. version .. ": " .. tostring(err or r[1].error), 2) end
  local c = r[1].configs[name]
  return c and c.value
end

local function read_env(path)
  local f = assert(io.open(path, "rb"))
  local env = {}
  for line in f:lines() do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k then env[k] = v end
  end
  f:close()
  return env
end

-- cluster(version, nodes [, name [, props]]) -> a running cluster, started
-- on first use (name: a cluster of its own, e.g. the benchmarks' broker;
-- props: {["server.property"] = value} for that cluster's brokers, after
-- the harness's defaults; props.cluster_id: the id the nodes are formatted
-- with, 22 characters).
function _M.cluster(version, nodes, name, props)
  nodes = nodes or 1
  name = name or (version .. "-" .. nodes .. "n")
  local c = clusters[name]
  if c and sh(harness .. " status " .. name) then return c end
  local path
  local ok = sh(harness .. " status " .. name)
  if ok then
    path = root .. "/build/kafka/run/" .. name .. "/env"
  else
    local out
    local env = ""
    if props then
      local lines = {}
      for k, v in pairs(props) do
        -- (cluster_id: the id the nodes are formatted with, 22 characters)
        if k == "cluster_id" then env = env .. "LK_KAFKA_CLUSTER_ID='" .. v .. "' "
        else lines[#lines + 1] = k .. "=" .. tostring(v) end
      end
      table.sort(lines)
      env = env .. "LK_KAFKA_PROPS='" .. table.concat(lines, "\n"):gsub("'", "'\\''") .. "' "
    end
    ok, out = sh(env .. table.concat({ harness, "start", name, version, tostring(nodes), owner or my_pid() }, " "))
    if not ok then error("kafka " .. version .. " (" .. nodes .. " nodes) did not start: " .. out, 2) end
    path = out:match("([^\n]+/env)%s*$")
    if not owner then started[#started + 1] = name end
  end
  local env = read_env(path)
  c = setmetatable({ name = name, version = version, nodes = nodes, dir = env.dir, bootstrap = {} }, mt)
  for _, l in ipairs { "PLAINTEXT", "SASL_PLAINTEXT", "SSL", "MTLS", "SASL_SSL" } do c.bootstrap[l] = env[l] end
  c.ports = {}
  for i = 1, nodes do
    local f = assert(io.open(c.dir .. "/node" .. i .. "/ports", "rb"))
    c.ports[i] = {}
    for line in f:lines() do
      local k, v = line:match("^([%w_]+)=(%d+)$")
      if k then c.ports[i][k] = tonumber(v) end
    end
    f:close()
  end
  clusters[name] = c
  return c
end

-- broker(i) -> "127.0.0.1:port" of node i's PLAINTEXT listener
function _M:broker(i) return "127.0.0.1:" .. self.ports[i].PLAINTEXT end

function _M:kill(node)
  local ok, out = sh(harness .. " kill " .. self.name .. " " .. node)
  if not ok then error("kill node " .. node .. ": " .. out, 2) end
end

function _M:restart(node)
  local ok, out = sh(harness .. " restart " .. self.name .. " " .. node)
  if not ok then error("restart node " .. node .. ": " .. out, 2) end
end

-- restart_bg(node) -> a handle for a restart running in the background
-- (clients keep working while the node starts): h.wait([secs]) raises
-- unless the node is ready within secs (default 200; the harness itself
-- gives up after 180 s), h.done() -> true once the restart has finished.
-- restart_bg(node, delay_s) starts the restart delay_s seconds from now.
function _M:restart_bg(node, delay_s)
  local rcf, log = os.tmpname(), os.tmpname()
  os.remove(rcf)
  os.execute(("(sleep %s; %s %s restart %s %d >%s 2>&1; echo $? >%s.tmp; mv %s.tmp %s) &")
    :format(tostring(delay_s or 0), H.closefds, harness, self.name, node, log, rcf, rcf, rcf))
  local h, rc = {}, nil
  local function poll()
    if rc then return true end
    local f = io.open(rcf, "rb")
    if not f then return false end
    rc = tonumber(f:read("*a"):match("%d+"))
    f:close()
    os.remove(rcf)
    return true
  end
  function h.done() return poll() end
  function h.wait(secs)
    local socket = require "socket"
    local stop = socket.gettime() + (secs or 200)
    while not poll() and socket.gettime() < stop do socket.sleep(0.1) end
    local f = io.open(log, "rb")
    local out = f and f:read("*a") or ""
    if f then f:close() end
    if rc ~= 0 then error(("restart node %d: %s"):format(node, rc and out or "not done after " .. (secs or 200) .. " s"), 2) end
    os.remove(log)
  end
  return h
end

-- ensure_running(): every node of the cluster running (a killed one
-- restarted), for the specs after one that kills nodes, also after its failure
function _M:ensure_running()
  for i = 1, self.nodes do
    if not sh(("kill -0 $(cat %s/node%d/pid) 2>/dev/null"):format(self.dir, i)) then pcall(self.restart, self, i) end
  end
end

-- freeze(node, secs) -> a handle: node's JVM stopped with SIGSTOP now and
-- resumed with SIGCONT secs later by a background shell (on time whatever
-- the caller is blocked in); h.done() -> true once resumed, h.wait([secs]).
function _M:freeze(node, secs)
  local f = assert(io.open(("%s/node%d/pid"):format(self.dir, node), "rb"))
  local pid = assert(tonumber(f:read("*l")))
  f:close()
  local donef = os.tmpname()
  os.remove(donef)
  assert(sh(("kill -STOP %d"):format(pid)))
  os.execute(("(sleep %s; kill -CONT %d; echo done >%s) >/dev/null 2>&1 &"):format(tostring(secs), pid, donef))
  local h = {}
  function h.done()
    local d = io.open(donef, "rb")
    if not d then return false end
    d:close()
    os.remove(donef)
    h.done = function() return true end
    return true
  end
  function h.wait(limit)
    local socket = require "socket"
    local stop = socket.gettime() + (limit or secs + 10)
    while not h.done() and socket.gettime() < stop do socket.sleep(0.05) end
    if not h.done() then os.execute(("kill -CONT %d"):format(pid)); error("node " .. node .. " not resumed", 2) end
  end
  return h
end

function _M:stop()
  sh(harness .. " stop " .. self.name)
  clusters[self.name] = nil
end

-- The brokers this process started stop when it closes its state (Lua
-- 5.2+ runs __gc at exit); the watchdog covers Lua 5.1 and kills.
local sentinel = setmetatable({}, { __gc = function()
  for _, name in ipairs(started) do os.execute(harness .. " stop " .. name .. " >/dev/null 2>&1") end
end })
_M._sentinel = sentinel
if _G.newproxy then -- Lua 5.1 / LuaJIT: tables have no __gc there
  local p = _G.newproxy(true)
  getmetatable(p).__gc = function()
    for _, name in ipairs(started) do os.execute(harness .. " stop " .. name .. " >/dev/null 2>&1") end
  end
  _M._proxy = p
end

-- java(args [, opts]) -> lines of stdout: runs Peer.java (compiled once)
-- with the main version's kafka-clients (opts.version: another, e.g.
-- "4.4.0" for the share mode). opts.bootstrap, opts.props (a
-- table written to a properties file), opts.timeout (s, default 120).
-- Raises with the peer's output when it fails.
-- compiled(class [, version]) -> the classpath of spec/support/kafka/<class>.java,
-- compiled once per process against kafka-clients of that version (default
-- java_version(); another version compiles into a directory of its own).
local compiled_cp = {}
function _M.compiled(class, version)
  local ckey = class .. "@" .. tostring(version)
  if compiled_cp[ckey] then return compiled_cp[ckey] end
  local ok, cpfile = sh(harness .. " classpath " .. (version or _M.java_version()))
  if not ok then error("kafka-clients: " .. cpfile, 3) end
  cpfile = cpfile:match("([^\n]+)%s*$")
  local f = assert(io.open(cpfile, "rb"))
  local jars = f:read("*a"):gsub("%s+$", "")
  f:close()
  local dir = root .. "/build/kafka/" .. class:lower() .. (version and ("-" .. version) or "")
  local src = root .. "/spec/support/kafka/" .. class .. ".java"
  local out
  ok, out = sh(("mkdir -p %s && LD_PRELOAD= javac -nowarn -d %s -cp '%s' %s"):format(dir, dir, jars, src))
  if not ok then error("javac " .. class .. ".java: " .. out, 3) end
  compiled_cp[ckey] = dir .. ":" .. jars
  return compiled_cp[ckey]
end

-- java_cmd(class, args [, opts]) -> the shell command running the class
-- (opts.timeout s, default 120; opts.jvm extra JVM arguments; opts.version
-- of kafka-clients)
local function java_cmd(class, args, opts)
  local q = {}
  for i, a in ipairs(args) do q[i] = "'" .. tostring(a) .. "'" end
  return ("LD_PRELOAD= timeout %d java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m -cp '%s' %s %s %s")
    :format(opts.timeout or 120, _M.compiled(class, opts.version), opts.jvm or "", class, table.concat(q, " "))
end

-- run_java(class, args [, opts]) -> lines of stdout, the final "DONE"
-- removed; raises with the program's output when it fails.
function _M.run_java(class, args, opts)
  opts = opts or {}
  local errf = os.tmpname()
  local p = assert(io.popen(java_cmd(class, args, opts) .. " 2>" .. errf))
  local lines = {}
  for line in p:lines() do lines[#lines + 1] = line end
  p:close()
  local ef = io.open(errf, "rb")
  local stderr = ef and ef:read("*a") or ""
  if ef then ef:close() end
  os.remove(errf)
  if lines[#lines] ~= "DONE" then
    error(class .. " " .. table.concat(args, " ") .. " failed:\n" .. table.concat(lines, "\n") .. "\n" .. stderr, 2)
  end
  lines[#lines] = nil
  return lines
end

-- The Java peer's command: opts.bootstrap, opts.props (a table written to
-- a properties file), opts.timeout.
local function peer_opts(opts)
  local props = ""
  if opts.props then
    local name = os.tmpname()
    local f = assert(io.open(name, "wb"))
    for k, v in pairs(opts.props) do f:write(k, "=", v, "\n") end
    f:close()
    props = " -Dprops=" .. name
  end
  return { timeout = opts.timeout, version = opts.version,
    jvm = ("-Dlog4j2.configurationFile=file:%s/spec/support/kafka/peer-log4j2.properties -Dbs=%s%s")
      :format(root, opts.bootstrap or "127.0.0.1:9092", props) }
end

local function peer_cmd(args, opts) return java_cmd("Peer", args, peer_opts(opts)) end

-- java(args [, opts]) -> lines of stdout: Kafka's Java client as a peer (Peer.java)
function _M.java(args, opts)
  return _M.run_java("Peer", args, peer_opts(opts or {}))
end

-- java_chain({args, args, ...} [, opts]) -> {lines, lines, ...}: several
-- Peer.java modes run one after another in one JVM (its start costs about
-- a second), each one's lines apart.
function _M.java_chain(cmds, opts)
  local args = {}
  for i, c in ipairs(cmds) do
    if i > 1 then args[#args + 1] = "+" end
    for _, x in ipairs(c) do args[#args + 1] = x end
  end
  local out, cur = {}, {}
  for _, l in ipairs(_M.java(args, opts)) do
    if l == "NEXT" then out[#out + 1], cur = cur, {} else cur[#cur + 1] = l end
  end
  if #out ~= #cmds or #cur > 0 then error("java peer: " .. #out .. " of " .. #cmds .. " modes ended", 2) end
  return out
end

-- java_bg(args [, opts]) -> a peer running in the background: p:lines()
-- (every line written so far), p:stop() (creates the stop file the
-- "group" mode watches), p:wait([secs]) -> the lines once it printed DONE
-- (raises otherwise), p:kill(). opts as for java(); opts.stopfile is
-- made up and passed as the last argument when args has "%STOP%".
function _M.java_bg(args, opts)
  opts = opts or {}
  local out, errf, pidf = os.tmpname(), os.tmpname(), os.tmpname()
  local stopf = os.tmpname()
  os.remove(stopf)
  local a = {}
  for i, x in ipairs(args) do a[i] = x == "%STOP%" and stopf or x end
  local cmd = peer_cmd(a, opts)
  os.execute(("(%s env %s >%s 2>%s & echo $! >%s)"):format(H.closefds, cmd, out, errf, pidf))
  local f = assert(io.open(pidf, "rb"))
  local pid = f:read("*a"):match("%d+")
  f:close()
  os.remove(pidf)
  local p = { pid = pid, out = out }
  function p.lines()
    local lf = io.open(out, "rb")
    local t = {}
    if lf then
      for line in lf:lines() do t[#t + 1] = line end
      lf:close()
    end
    return t
  end
  function p.stop()
    local sf = assert(io.open(stopf, "wb"))
    sf:close()
  end
  function p.running()
    return H.pid_alive(pid)
  end
  function p.wait(secs)
    local socket = require "socket"
    local stop = socket.gettime() + (secs or 60)
    local lines = p.lines()
    while lines[#lines] ~= "DONE" and socket.gettime() < stop do
      socket.sleep(0.1)
      lines = p.lines()
    end
    os.remove(stopf)
    if lines[#lines] ~= "DONE" then
      p.kill()
      local ef = io.open(errf, "rb")
      local stderr = ef and ef:read("*a") or ""
      if ef then ef:close() end
      error("java peer " .. table.concat(args, " ") .. " failed:\n" .. table.concat(lines, "\n") .. "\n" .. stderr, 2)
    end
    os.remove(out)
    os.remove(errf)
    lines[#lines] = nil
    return lines
  end
  function p.kill()
    os.execute("pkill -P " .. pid .. " 2>/dev/null; kill " .. pid .. " 2>/dev/null")
  end
  return p
end

function _M.hex(s)
  if s == nil then return "-" end
  if s == "" then return "~" end
  return (s:gsub(".", function(ch) return string.format("%02x", ch:byte()) end))
end

function _M.unhex(h)
  if h == "-" then return nil end
  if h == "~" then return "" end
  return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

return _M
