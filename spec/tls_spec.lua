-- TLS in C on the luasocket transport (csrc/tls.c, the inbox's starttls)
-- against peers that are not ours: Python's ssl module scripted to split
-- records across reads, cut a record, send close_notify, speak no TLS or
-- stay silent (spec/support/tlspeer.py), and `openssl s_server` for a TLS
-- 1.2 renegotiation and a TLS 1.3 key update. The verification at the
-- handshake: the chain, the host name (whole-label wildcards only, IP
-- addresses against IP SANs), each refused with its exact message; the
-- contexts and inboxes closed twice. The real-broker cases are
-- spec/security_spec.lua (which runs on this transport by default).
local ksocket = require "kafka.socket"
local options = require "kafka.options"
local connection = require "kafka.connection"
local socket = require "socket"

local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."
local PAYLOAD = 100000

local function payload(n)
  local t = {}
  for i = 0, n - 1 do t[#t + 1] = string.char((i * 7 + 3) % 251) end
  return table.concat(t)
end

-- a self-signed certificate naming b*.example.com, whole.test and
-- 127.0.0.1 (peer), another one (other: an untrusted CA), an encrypted key
local dir
local function certs()
  if dir then return dir end
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute(("mkdir -p %s && cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem "
    .. "-days 2 -subj /CN=cn.test -addext 'subjectAltName=DNS:b*.example.com,DNS:whole.test,IP:127.0.0.1' 2>/dev/null "
    .. "&& openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other "
    .. "2>/dev/null && openssl pkey -in key.pem -aes128 -passout pass:right -out enc.key"):format(dir, dir)))
  return dir
end

-- the peer serving mode (tlspeer.py) -> process, port, pid
local function start_peer(mode, idle)
  local portfile = os.tmpname()
  os.remove(portfile)
  local p = assert(io.popen(("exec python3 %s/spec/support/tlspeer.py %s %s %s %s"):format(ROOT, mode, certs(),
    portfile, tostring(idle or 1))))
  local deadline = socket.gettime() + 10
  while socket.gettime() < deadline do
    local f = io.open(portfile)
    if f then
      local port, pid = tonumber(f:read("*l")), tonumber(f:read("*l"))
      f:close()
      if port then
        os.remove(portfile)
        return p, port, pid
      end
    end
    socket.sleep(0.01)
  end
  p:close()
  error("tlspeer.py did not start")
end

local function tls_settings(extra)
  local o = { security_protocol = "SSL", ssl_ca_location = certs() .. "/cert.pem" }
  for k, v in pairs(extra or {}) do o[k] = v end
  return options.security(o).tls
end

-- a luasocket object connected to port with TLS as extra says, as host
local function dial(port, host, extra)
  local s = ksocket.luasocket_tcp()
  s:settimeout(5000)
  assert(s:connect("127.0.0.1", port))
  local ok, err = ksocket.tls(s, host or "127.0.0.1", port, tls_settings(extra), 5000)
  return s, ok, err
end

describe("TLS in C (the inbox)", function()
  teardown(function()
    if dir then os.execute("rm -rf " .. dir) end
  end)

  -- runs fn(port) against a peer of mode; the peer is stopped after (killed:
  -- it would wait out its idle time, a silent one its 8 s)
  local function with_peer(mode, fn, idle)
    local p, port, pid = start_peer(mode, idle)
    local ok, err = pcall(fn, port)
    if pid then os.execute(("kill %d 2>/dev/null"):format(pid)) end
    p:close()
    assert(ok, err)
  end

  it("reads a frame whose records arrive split across reads, headers byte by byte", function()
    with_peer("split", function(port)
      local s, ok, err = dial(port)
      assert(ok, err)
      assert.equal("openssl", s.tls_transport)
      local v = s.inbox:tls()
      assert.equal("TLSv1.3", v)
      local corr, frame = s:read_frame(10000, 1e8)
      assert.equal(7, corr)
      assert.equal(PAYLOAD, #frame)
      assert.equal(payload(PAYLOAD), tostring(frame))
      s:close()
    end)
  end)

  it("a peer closing inside a record: closed, mid-frame (a fresh connection's matter, not a TLS error)", function()
    with_peer("cut", function(port)
      local s, ok, err = dial(port)
      assert(ok, err)
      assert.are.same({ nil, "closed", true }, { s:read_frame(10000, 1e8) })
      assert.is_nil(s.tls_error)
      s:close()
    end)
  end)

  it("close_notify after a frame: the frame whole, then closed", function()
    with_peer("close_notify", function(port)
      local s, ok, err = dial(port)
      assert(ok, err)
      local corr, frame = s:read_frame(10000, 1e8)
      assert.equal(7, corr)
      assert.equal(payload(PAYLOAD), tostring(frame))
      assert.are.same({ nil, "closed", false }, { s:read_frame(10000, 1e8) })
      s:close()
      s:close() -- idempotent
    end)
  end)

  it("a peer that does not speak TLS fails the connect with code ssl, naming a plaintext listener", function()
    with_peer("notls", function(port)
      local c = connection.new { host = "127.0.0.1", port = port, connect_timeout_ms = 5000,
        security = options.security { security_protocol = "SSL", ssl_ca_location = certs() .. "/cert.pem" } }
      local ok, err, code = c:connect()
      c:close()
      assert.are.same({ nil, ("connect to 127.0.0.1:%d failed: TLS handshake with 127.0.0.1:%d failed: wrong version "
        .. "number (is it a PLAINTEXT or SASL_PLAINTEXT listener?)"):format(port, port), "ssl" }, { ok, err, code })
    end)
  end)

  it("a silent peer: the handshake times out at connect_timeout_ms with code ssl", function()
    with_peer("silent", function(port)
      local c = connection.new { host = "127.0.0.1", port = port, connect_timeout_ms = 300,
        security = options.security { security_protocol = "SSL", ssl_ca_location = certs() .. "/cert.pem" } }
      local ok, err, code = c:connect()
      c:close()
      assert.are.same({ nil, ("connect to 127.0.0.1:%d failed: TLS handshake with 127.0.0.1:%d timed out (is it a TLS "
        .. "listener?)"):format(port, port), "ssl" }, { ok, err, code })
    end)
  end)

  for _, tr in ipairs { "openssl", "luasec" } do
    it("verifies the host name (" .. tr .. "): whole-label wildcards, IP addresses against IP SANs", function()
      with_peer("handshake", function(port)
        local function refused(host)
          local s, ok, err = dial(port, host, { ssl_transport = tr })
          s:close()
          assert.are.same({ nil, ('TLS: host name mismatch: the certificate of %s:%d is not valid for "%s" '
            .. '(ssl_endpoint_identification = "none" turns the check off)'):format(host, port, host) }, { ok, err })
        end
        local function accepted(host, extra)
          extra = extra or {}
          extra.ssl_transport = tr
          local s, ok, err = dial(port, host, extra)
          s:close()
          assert.are.same({ true }, { ok, err }, host)
        end
        refused("b1.example.com") -- b*.example.com: a partial label never matches
        refused("cn.test")        -- the CN is not a name when there are DNS SANs
        refused("a.whole.test")
        refused("127.0.0.2")
        accepted("whole.test")
        accepted("WHOLE.test")
        accepted("127.0.0.1")
        accepted("b1.example.com", { ssl_endpoint_identification = "none" })
      end, 2)
    end)

    it("refuses an untrusted certificate, naming the reason; verification off takes it (" .. tr .. ")", function()
      with_peer("handshake", function(port)
        local s, ok, err = dial(port, "127.0.0.1", { ssl_ca_location = certs() .. "/other.pem", ssl_transport = tr })
        s:close()
        assert.are.same({ nil, ("TLS: the certificate of 127.0.0.1:%d is not trusted: self-signed certificate (depth %d) "
          .. "(ssl_ca_location: %s/other.pem)"):format(port, tr == "luasec" and 1 or 0, certs()) }, { ok, err })
        -- (OpenSSL counts the broker's own certificate as depth 0, LuaSec's table from 1)
        s, ok, err = dial(port, "wrong.invalid", { ssl_ca_location = certs() .. "/other.pem",
          enable_ssl_certificate_verification = false, ssl_transport = tr })
        assert.are.same({ true }, { ok, err })
        assert.equal(tr, s.tls_transport)
        s:close()
      end, 2)
    end)
  end

  it("sends the server name (SNI) of a host name, none for an IP address", function()
    with_peer("sni", function(port)
      for _, case in ipairs { { "whole.test", "whole.test" }, { "127.0.0.1", "-" } } do
        local s, ok, err = dial(port, case[1])
        assert(ok, err)
        local corr, frame = s:read_frame(10000, 1e8)
        s:close()
        assert.are.same({ 7, case[2] }, { corr, tostring(frame) })
      end
    end, 2)
  end)

  it("an encrypted client key: loaded with its password, a wrong one refused as the configuration", function()
    local d = certs()
    local core = require "kafka.core"
    local ctx = assert(core.tls_context { cafile = d .. "/cert.pem", certificate = d .. "/cert.pem", key = d .. "/enc.key",
      key_password = "right", verify_chain = true })
    ctx:close()
    ctx:close() -- idempotent
    assert.has_error(function() ctx.close(nil) end)
    local none, err = core.tls_context { cafile = d .. "/cert.pem", certificate = d .. "/cert.pem", key = d .. "/enc.key",
      key_password = "wrong", verify_chain = true }
    assert.are.same({ nil, "bad decrypt" }, { none, err })
    -- no password for an encrypted key: refused, never a prompt on the terminal
    none, err = core.tls_context { cafile = d .. "/cert.pem", certificate = d .. "/cert.pem", key = d .. "/enc.key",
      verify_chain = true }
    assert.is_nil(none)
    assert.equal("string", type(err))
    -- and through a connection: code ssl, "TLS configuration"
    with_peer("handshake", function(port)
      local c = connection.new { host = "127.0.0.1", port = port, security = options.security {
        security_protocol = "SSL", ssl_ca_location = d .. "/cert.pem", ssl_certificate_location = d .. "/cert.pem",
        ssl_key_location = d .. "/enc.key", ssl_key_password = "wrong" } }
      local ok, cerr, code = c:connect()
      c:close()
      assert.are.same({ nil, ("connect to 127.0.0.1:%d failed: TLS configuration: bad decrypt"):format(port), "ssl" },
        { ok, cerr, code })
    end)
  end)

  -- openssl s_server: commands on its stdin (r: renegotiate, k: key update)
  local function s_server(args)
    local ls = assert(socket.bind("127.0.0.1", 0))
    local _, port = ls:getsockname()
    ls:close()
    local log, pidfile = os.tmpname(), os.tmpname()
    local d = certs()
    local p = assert(io.popen(("echo $$ >%s; exec openssl s_server -naccept 1 -accept 127.0.0.1:%d -cert %s/cert.pem "
      .. "-key %s/key.pem %s >%s 2>&1"):format(pidfile, port, d, d, args, log), "w"))
    local deadline, pid = socket.gettime() + 10
    repeat -- listening once it says ACCEPT
      socket.sleep(0.05)
      local f = io.open(log)
      local out = f and f:read("*a") or ""
      if f then f:close() end
      f = io.open(pidfile)
      pid = f and tonumber(f:read("*l")) or pid
      if f then f:close() end
    until out:find("ACCEPT", 1, true) or socket.gettime() > deadline
    os.remove(pidfile)
    return p, tonumber(port), log, pid
  end

  for _, case in ipairs { { "-tls1_2", "r", "TLSv1.2", "renegotiation" }, { "-tls1_3", "k", "TLSv1.3", "key update" } } do
    it("goes on reading across a " .. case[3] .. " " .. case[4] .. " from the server", function()
      local p, port, log, pid = s_server(case[1])
      local ok, err = pcall(function()
        local s, hok, herr = dial(port)
        assert(hok, herr)
        assert.equal(case[3], (s.inbox:tls()))
        p:write("first\n")
        p:flush()
        assert.equal("first\n", s:receive(6))
        p:write(case[2] .. "\n")
        p:flush()
        socket.sleep(0.2)
        p:write("after\n")
        p:flush()
        assert.equal("after\n", s:receive(6))
        assert(s:send("from client\n"))
        socket.sleep(0.3) -- read by the server before our close_notify
        s:close()
      end)
      -- after the client's close it exits (-naccept 1); when the case failed before, it is killed
      if not ok and pid then os.execute("kill " .. pid .. " 2>/dev/null") end -- it may wait for a connection
      p:close()
      local f = io.open(log)
      local out = f and f:read("*a") or ""
      if f then f:close() end
      os.remove(log)
      assert(ok, tostring(err) .. "\n" .. out)
      assert.matches("from client", out)
      assert.matches("SSL_do_handshake %-> 1", out) -- the server did start it
      if case[2] == "r" then assert.matches("\n +[1-9]%d* server renegotiates", out) end
    end)
  end

  it("LuaSec stays as ssl_transport = \"luasec\" (and without direct reads)", function()
    with_peer("close_notify", function(port)
      local s, ok, err = dial(port, "127.0.0.1", { ssl_transport = "luasec" })
      assert(ok, err)
      assert.equal("luasec", s.tls_transport)
      assert.is_nil(s.read_frame)
      assert.equal(string.char(0, 1, 0x86, 0xa4, 0, 0, 0, 7), s:receive(8))
      s:close()
    end)
    assert.has_error(function() options.security { security_protocol = "SSL", ssl_transport = "gnutls" } end,
      'kafka.client.new: ssl_transport must be "openssl" or "luasec" (got gnutls)')
    assert.has_error(function() options.security { ssl_transport = "luasec" } end,
      "kafka.client.new: ssl_transport is set but security_protocol is PLAINTEXT (SSL or SASL_SSL use it)")
  end)
end)
