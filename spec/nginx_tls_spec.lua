-- TLS and SASL inside nginx (Debian's nginx + lua-nginx-module, LuaJIT 2.1)
-- against the real broker (support.realkafka; nothing runs with
-- KAFKA_VERSIONS=none): TLS through the cosocket's sslhandshake, verified
-- against lua_ssl_trusted_certificate (the broker's CA), SCRAM and PLAIN
-- over it (spec/nginx/tls.conf.in). Needs the LuaJIT build of the module
-- (make LUA=luajit; `make test` does it).
local H = require "support.helpers"
local rk = require "support.realkafka"
local socket = require "socket"
local http = require "socket.http"
local url = require "socket.url"

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

if not rk.main() then return end

describe("nginx cosockets over SASL_SSL", function()
  it("nginx with lua-nginx-module is installed", function()
    assert.is_true(have_nginx(), "install nginx libnginx-mod-http-lua lua-resty-core (see .ci/run)")
  end)
  if not have_nginx() then return end

  local prefix, port, k
  setup(function()
    k = rk.cluster(rk.main(), 1)
    local s = socket.bind("127.0.0.1", 0)
    local _, p = s:getsockname()
    port = tonumber(p)
    s:close()
    prefix = os.tmpname()
    os.remove(prefix)
    assert(sh(("mkdir -p %s/conf %s/logs %s/tmp"):format(prefix, prefix, prefix)))
    local conf = assert(io.open(root .. "/spec/nginx/tls.conf.in")):read("*a")
    local user = H.is_root() and "user root;" or ""
    local ca = k and (k.dir .. "/ca.pem") or "/etc/ssl/certs/ca-certificates.crt"
    local other = k and (k.dir .. "/other-ca.pem") or ca
    conf = conf:gsub("@ROOT@", root):gsub("@PORT@", tostring(port)):gsub("@USER@", user):gsub("@CA@", ca)
      :gsub("@OTHER_CA@", other)
    local f = assert(io.open(prefix .. "/conf/nginx.conf", "w"))
    f:write(conf)
    f:close()
    assert(sh(("nginx -p %s -c conf/nginx.conf -e logs/error.log"):format(prefix)),
      "nginx did not start: " .. tostring(io.open(prefix .. "/logs/error.log") and io.open(prefix .. "/logs/error.log"):read("*a")))
  end)
  teardown(function()
    if prefix then sh(("nginx -p %s -c conf/nginx.conf -e logs/error.log -s stop 2>/dev/null"):format(prefix)) end
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

  local function query(t)
    local q = {}
    for key, v in pairs(t) do q[#q + 1] = key .. "=" .. url.escape(tostring(v)) end
    table.sort(q)
    return table.concat(q, "&")
  end

  for _, mech in ipairs { "SCRAM-SHA-512", "PLAIN" } do
    it("produces and consumes over SASL_SSL with " .. mech .. " through cosockets", function()
      local topic = "nginx-sasl-" .. mech .. "-" .. os.time()
      local q = query { brokers = k.bootstrap.SASL_SSL, topic = topic, n = 500, codec = "lz4",
        security_protocol = "SASL_SSL", sasl_mechanism = mech, sasl_username = "alice", sasl_password = "alice-secret",
        -- the broker advertises 127.0.0.1, and nginx checks DNS names only: the chain is still verified
        ssl_endpoint_identification = "none" }
      -- the bootstrap connection and the leader's: both authenticated over TLS
      assert.are.equal("500 0 true 1\n", get("/produce?" .. q))
      assert.are.equal("500 true nginx\n", get("/consume?" .. q))
    end)
  end

  it("refuses over SASL_SSL in nginx: a wrong password (auth), an untrusted CA, an IP address"
    .. " checked as a host name, TLS to a plaintext listener (ssl)", function()
    local base = { brokers = k.bootstrap.SASL_SSL, security_protocol = "SASL_SSL", sasl_mechanism = "SCRAM-SHA-256",
      sasl_username = "alice", sasl_password = "wrong", ssl_endpoint_identification = "none" }
    assert.matches("^err auth .*SASL SCRAM%-SHA%-256 authentication failed", get("/metadata?" .. query(base)))
    base.sasl_password = "alice-secret"
    assert.matches("^ok 1", get("/metadata?" .. query(base)))
    -- the chain is verified: a location trusting another CA refuses the broker
    assert.matches("^err ssl .*TLS handshake with 127%.0%.0%.1:%d+ failed: .*self%-signed certificate in certificate chain",
      get("/metadata_other_ca?" .. query(base)))
    base.ssl_endpoint_identification = nil
    assert.matches("^err ssl .*against an IP address", get("/metadata?" .. query(base)))
    base.ssl_endpoint_identification = "none"
    base.brokers = k.bootstrap.SASL_PLAINTEXT
    assert.matches("^err ssl .*TLS handshake", get("/metadata?" .. query(base)))
  end)
end)
