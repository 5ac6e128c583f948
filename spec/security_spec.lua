-- TLS and SASL against a real Apache Kafka broker (the main version of
-- KAFKA_VERSIONS; the legacy SASL framing against 3.9 when it is listed):
-- every mechanism over SASL_PLAINTEXT and SASL_SSL, SSL with and without a
-- client certificate, the refusals (host name mismatch, untrusted CA,
-- missing client certificate, wrong password, unknown user, TLS/plaintext
-- mix-ups) with their error codes, KIP-368 re-authentication with requests
-- in flight, an OAUTHBEARER token expiring mid-run, and Kafka's Java client
-- on the same SASL_SSL listener.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local ksocket = require "kafka.socket"
local options = require "kafka.options"
local connection = require "kafka.connection"
local proto = require "kafka.proto"
local socket = require "socket"
local slow_it = require("support.helpers").min() and pending or it -- see helpers.min()

local MECHS = { "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER" }

local function b64url(s) return (proto.crypto.b64_encode(s):gsub("+", "-"):gsub("/", "_"):gsub("=", "")) end

-- An unsecured JWS (alg none) as Kafka's unsecured validator takes it,
-- and its remaining lifetime in ms. iat and exp are NumericDates with
-- milliseconds (the validator reads fractions): with whole seconds a 2 s
-- token could have 1.0 s left, the re-authentication came within a second
-- of the last one, and the broker refuses that (ILLEGAL_SASL_STATE: at
-- most one re-authentication a second, KafkaChannel).
local function jws(sub, lifetime_s)
  local now = math.floor(socket.gettime() * 1000) / 1000
  return b64url('{"alg":"none"}') .. "." .. b64url(('{"sub":"%s","iat":%.3f,"exp":%.3f}'):format(sub, now,
    now + lifetime_s)) .. ".", math.floor(lifetime_s * 1000)
end

-- a socket factory counting connects; redirect dials another address
-- while TLS still checks the name the client was given
local function counting(counter, redirect)
  return function()
    local s = ksocket.luasocket_tcp()
    local connect = s.connect
    s.connect = function(self, host, port)
      counter.n = counter.n + 1
      return connect(self, redirect or host, port)
    end
    return s
  end
end

local function value(i) return ("secure-%d-"):format(i) .. ("z"):rep(i % 13 * 7) end

local version = rk.main()
if not version then return end

describe("TLS and SASL, Kafka " .. version, function()
  local k, plain, dir

  setup(function()
    k = rk.cluster(version, 1)
    dir = k.dir
    plain = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-security-admin" }
  end)
  teardown(function() if plain then plain:close() end end)

  local function opts(listener, extra)
    local o = { brokers = k.bootstrap[listener], client_id = "spec-security", connect_timeout_ms = 5000,
      request_timeout_ms = 10000 }
    o.security_protocol = listener == "MTLS" and "SSL" or listener
    if listener == "SSL" or listener == "MTLS" or listener == "SASL_SSL" then o.ssl_ca_location = dir .. "/ca.pem" end
    for key, v in pairs(extra or {}) do o[key] = v end
    return o
  end

  local function creds(mech)
    if mech == "OAUTHBEARER" then
      return { sasl_mechanism = mech, sasl_oauthbearer_token = function() return jws("alice", 600) end }
    end
    return { sasl_mechanism = mech, sasl_username = "alice", sasl_password = "alice-secret" }
  end

  -- produces n exact values into a new 2-partition topic and reads them
  -- back, both through the secured client; returns that client
  local function roundtrip(o, n)
    local topic = rt.uniq("sec")
    rt.create_topic(plain, topic, 2, 1)
    local client = kafka.client.new(o)
    local p = kafka.producer.new(client, { linger_ms = 2 })
    for i = 1, n do assert(p:send(topic, value(i), { key = "k" .. i })) end
    local reports, failed = p:flush()
    assert.equal(0, failed, failed > 0 and tostring(reports[1].err) or nil)
    assert.equal(n, #reports)
    local by, total = rt.consume_all(client, topic, 2, n)
    assert.equal(n, total)
    local seen = {}
    for part = 0, 1 do
      for _, m in ipairs(by[part]) do
        local i = tonumber(m.key:match("^k(%d+)$"))
        assert.equal(value(i), m.value)
        assert.is_nil(seen[i])
        seen[i] = true
      end
    end
    for i = 1, n do assert.is_true(seen[i], "message " .. i) end
    -- the connection learned from metadata used the same security
    local c = assert(client.conns[next(client.brokers)])
    if o.security_protocol:match("^SASL") then assert.is_true((c.sasl_authenticated or 0) >= 1) end
    if o.security_protocol:match("SSL$") then assert.is_true(c.sock.tls) end
    return client
  end

  local lite = require("support.helpers").lite()
  for _, listener in ipairs { "SASL_PLAINTEXT", "SASL_SSL" } do
    for mi, mech in ipairs(MECHS) do
      -- lite: each mechanism once, alternating listeners
      if not lite or (mi % 2 == 0) == (listener == "SASL_SSL") then
        it(mech .. " over " .. listener .. ": 300 messages there and back", function()
          roundtrip(opts(listener, creds(mech)), 300):close()
        end)
      end
    end
  end

  it("SSL without a client certificate; mutual TLS with one (plain and encrypted key)", function()
    roundtrip(opts("SSL"), 200):close()
    roundtrip(opts("MTLS", { ssl_certificate_location = dir .. "/client.pem", ssl_key_location = dir .. "/client.key" }),
      200):close()
    roundtrip(opts("MTLS", { ssl_certificate_location = dir .. "/client.pem", ssl_key_location = dir .. "/client-enc.key",
      ssl_key_password = "client-pass" }), 200):close()
  end)

  local function refused(o, code, pattern)
    local client = kafka.client.new(o)
    local t0 = socket.gettime()
    local md, err, c = client:metadata {}
    local dt = (socket.gettime() - t0) * 1000
    client:close()
    assert.is_nil(md)
    assert.equal(code, c, err)
    assert.matches(pattern, err)
    return err, dt
  end

  it("refuses a missing client certificate on the mTLS listener and a wrong key password", function()
    -- Kafka 2.x's TLS layer (2.8.2 on Java 17) ends the handshake without a
    -- certificate alert: the client reads a broken record ("decryption failed
    -- or bad record mac"), refused as "ssl" without the reason (no answer of
    -- the broker tells this apart: the version decides)
    refused(opts("MTLS"), "ssl", version:match("^2%.") and "TLS: decryption failed" or "requires a client certificate")
    refused(opts("MTLS", { ssl_certificate_location = dir .. "/client.pem", ssl_key_location = dir .. "/client-enc.key",
      ssl_key_password = "wrong" }), "ssl", "TLS configuration")
  end)

  it("refuses an untrusted CA, naming the reason", function()
    refused(opts("SSL", { ssl_ca_location = dir .. "/other-ca.pem" }), "ssl",
      "not trusted: self%-signed certificate in certificate chain")
    refused(opts("SASL_SSL", { ssl_ca_location = dir .. "/other-ca.pem", sasl_mechanism = "PLAIN",
      sasl_username = "alice", sasl_password = "alice-secret" }), "ssl", "not trusted")
  end)

  it("with enable_ssl_certificate_verification = false takes any certificate (lua-resty-kafka's ssl_verify = false)", function()
    -- the same untrusted CA and a name outside the certificate: encrypted, not verified
    local port = k.ports[1].SSL
    local c = kafka.client.new(opts("SSL", { brokers = "wrong.invalid:" .. port, ssl_ca_location = dir .. "/other-ca.pem",
      socket = counting({ n = 0 }, "127.0.0.1"), enable_ssl_certificate_verification = false }))
    local md, err = c:metadata {}
    assert.truthy(md, err)
    assert.is_true(c.boot_conns[1].sock.tls) -- it did speak TLS
    c:close()
  end)

  it("checks the host name: a name or address outside the certificate is refused unless identification is none", function()
    local port = k.ports[1].SSL
    local n = { n = 0 }
    for _, host in ipairs { "wrong.invalid", "127.0.0.2" } do
      refused(opts("SSL", { brokers = host .. ":" .. port, socket = counting(n, "127.0.0.1") }), "ssl",
        "host name mismatch: the certificate of " .. host:gsub("%p", "%%%0") .. ":%d+ is not valid for")
    end
    -- the same connection with the check off; and by the certificate's DNS name
    local c = kafka.client.new(opts("SSL", { brokers = "wrong.invalid:" .. port, socket = counting(n, "127.0.0.1"),
      ssl_endpoint_identification = "none" }))
    assert.truthy(c:metadata {})
    c:close()
    c = kafka.client.new(opts("SSL", { brokers = "localhost:" .. port }))
    assert.truthy(c:metadata {})
    c:close()
  end)

  it("refuses a wrong password and an unknown user as auth errors, with bounded, backed-off retries", function()
    for _, mech in ipairs { "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512" } do
      for _, who in ipairs { { "alice", "wrong" }, { "mallory", "alice-secret" } } do
        local n = { n = 0 }
        local err, dt = refused(opts("SASL_SSL", { sasl_mechanism = mech, sasl_username = who[1], sasl_password = who[2],
          socket = counting(n), reconnect_backoff_ms = 100 }), "auth", "SASL " .. mech:gsub("%-", "%%-")
          .. " authentication failed: .*[Aa]uthentication failed")
        assert.matches("SASL_AUTHENTICATION_FAILED", err)
        -- metadata tries the bootstrap broker a bounded number of times, with backoff between
        assert.is_true(n.n >= 1 and n.n <= 4, "connects: " .. n.n)
        if n.n > 1 then assert.is_true(dt >= 100 * (n.n - 1), "no backoff: " .. dt .. " ms") end
      end
    end
    -- OAUTHBEARER: a token the unsecured validator refuses (no "sub" claim)
    refused(opts("SASL_PLAINTEXT", { sasl_mechanism = "OAUTHBEARER", sasl_oauthbearer_token = function()
      return b64url('{"alg":"none"}') .. "." .. b64url(('{"exp":%d}'):format(os.time() + 60)) .. ".", 60000
    end }), "auth", "SASL OAUTHBEARER authentication failed")
  end)

  it("fails the TLS/plaintext mix-ups clearly and well within the connect timeout", function()
    local cases = {
      { opts("SSL", { brokers = k.bootstrap.PLAINTEXT }), "PLAINTEXT or SASL_PLAINTEXT listener" },
      { opts("SASL_SSL", { brokers = k.bootstrap.SASL_PLAINTEXT, sasl_mechanism = "PLAIN", sasl_username = "alice",
        sasl_password = "alice-secret" }), "PLAINTEXT or SASL_PLAINTEXT listener" },
      { opts("PLAINTEXT", { brokers = k.bootstrap.SSL, ssl_ca_location = false }), "answered with TLS" },
      { opts("SASL_PLAINTEXT", { brokers = k.bootstrap.SASL_SSL, ssl_ca_location = false, sasl_mechanism = "PLAIN",
        sasl_username = "alice", sasl_password = "alice-secret" }), "answered with TLS" },
    }
    for _, case in ipairs(cases) do
      if case[1].ssl_ca_location == false then case[1].ssl_ca_location = nil end
      case[1].max_retries = 0
      local _, dt = refused(case[1], "ssl", case[2])
      assert.is_true(dt < 5000, "took " .. dt .. " ms")
    end
  end)

  slow_it("re-authenticates before the session the broker gives ends (KIP-368), requests in flight unharmed", function()
    -- SCRAM-SHA-256 sessions on SASL_PLAINTEXT last 2 s (the harness's connections.max.reauth.ms)
    local o = opts("SASL_PLAINTEXT", creds("SCRAM-SHA-256"))
    local n = { n = 0 }
    local host, port = k.bootstrap.SASL_PLAINTEXT:match("^(.*):(%d+)$")
    local c = connection.new { host = host, port = port, security = options.security(o), socket = counting(n),
      request_timeout_ms = 10000 }
    assert(c:connect())
    assert.is_true(c.session_lifetime_ms > 1500 and c.session_lifetime_ms <= 2000, tostring(c.session_lifetime_ms))
    local life = c.session_lifetime_ms / 1000
    local v = assert(c:version("Metadata"))
    local corrs = {}
    for i = 1, 3 do corrs[i] = assert(c:send("Metadata", v, { topics = {}, allow_auto_topic_creation = false })) end
    socket.sleep((c.reauth_at - socket.gettime() * 1000) / 1000 + 0.05)
    corrs[4] = assert(c:send("Metadata", v, { topics = {}, allow_auto_topic_creation = false })) -- re-authenticates first
    assert.equal(1, c.sasl_reauthenticated)
    for i = 1, 4 do assert.truthy(c:receive(corrs[i]).brokers[1]) end
    -- past the first session's end: without the re-authentication the broker would have closed it
    socket.sleep(0.4 * life)
    assert.truthy(c:request("Metadata", { topics = {}, allow_auto_topic_creation = false }))
    assert.equal(1, n.n)
    -- idle past the session's end: the next request goes over a new, authenticated connection
    socket.sleep(1.05 * life)
    assert.truthy(c:request("Metadata", { topics = {}, allow_auto_topic_creation = false }))
    assert.equal(1, c.sasl_reconnected)
    assert.equal(2, n.n)
    c:close()

    -- a producer sending for 6 s through several sessions: no failures, no reconnects
    n.n = 0
    o.socket = counting(n)
    local client = kafka.client.new(o)
    local topic = rt.uniq("reauth")
    rt.create_topic(plain, topic, 1, 1)
    local p = kafka.producer.new(client, { linger_ms = 5 })
    local sent, t_end = 0, socket.gettime() + 6
    while socket.gettime() < t_end do
      for _ = 1, 50 do
        sent = sent + 1
        assert(p:send(topic, value(sent), { key = "k" .. sent }))
      end
      local _, failed = p:flush()
      assert.equal(0, failed)
      socket.sleep(0.1)
    end
    local bc = client.conns[next(client.brokers)]
    assert.is_true(bc.sasl_reauthenticated >= 2, tostring(bc.sasl_reauthenticated))
    -- the bootstrap connection and the broker's; any other connect replaced a session
    -- that ended while idle (a gap between rounds across the 85-95% window), never a failure
    assert.equal(2 + (bc.sasl_reconnected or 0), n.n)
    local _, total = rt.consume_all(client, topic, 1, sent)
    assert.equal(sent, total)
    client:close()
  end)

  it("a session too short for the broker's second between re-authentications is replaced by a new connection", function()
    -- 1 s tokens: the first re-authentication comes at 85-95% of the session, the second
    -- less than a second after it, which the broker refuses (ILLEGAL_SASL_STATE)
    local n = { n = 0 }
    local o = opts("SASL_PLAINTEXT", { sasl_mechanism = "OAUTHBEARER", sasl_oauthbearer_token = function()
      return jws("alice", 1)
    end })
    local host, port = k.bootstrap.SASL_PLAINTEXT:match("^(.*):(%d+)$")
    local c = connection.new { host = host, port = port, security = options.security(o), socket = counting(n),
      request_timeout_ms = 10000 }
    finally(function() c:close() end)
    assert(c:connect())
    assert.is_true(c.session_lifetime_ms > 800 and c.session_lifetime_ms <= 1000, tostring(c.session_lifetime_ms))
    local function meta_after_reauth_at()
      socket.sleep(math.max(0, (c.reauth_at - socket.gettime() * 1000) / 1000 + 0.005))
      assert.truthy(assert(c:request("Metadata", { topics = {}, allow_auto_topic_creation = false })).brokers[1])
    end
    meta_after_reauth_at() -- the first re-authentication: allowed
    assert.equal(1, c.sasl_reauthenticated)
    assert.equal(1, n.n)
    meta_after_reauth_at() -- the second would come too soon: a new connection instead
    assert.equal(1, c.sasl_reauthenticated)
    assert.equal(1, c.sasl_reconnected)
    assert.equal(2, n.n)
    meta_after_reauth_at() -- the new connection's first re-authentication: allowed again
    assert.equal(2, c.sasl_reauthenticated)
    assert.equal(2, n.n)
  end)

  slow_it("OAUTHBEARER: a token expiring mid-run is replaced and the session re-authenticated", function()
    for _, listener in ipairs(require("support.helpers").lite() and { "SASL_SSL" } or { "SASL_PLAINTEXT", "SASL_SSL" }) do
      local calls, n = 0, { n = 0 }
      local o = opts(listener, { sasl_mechanism = "OAUTHBEARER", socket = counting(n),
        sasl_oauthbearer_token = function()
          calls = calls + 1
          local tok, life = jws("alice", 2)
          return tok, life, { traceId = "call" .. calls }
        end })
      local client = kafka.client.new(o)
      local topic = rt.uniq("oauth")
      rt.create_topic(plain, topic, 1, 1)
      local p = kafka.producer.new(client, { linger_ms = 5 })
      local sent, t_end = 0, socket.gettime() + 5.5
      while socket.gettime() < t_end do
        for _ = 1, 20 do
          sent = sent + 1
          assert(p:send(topic, value(sent)))
        end
        local _, failed = p:flush()
        assert.equal(0, failed)
        socket.sleep(0.1)
      end
      local bc = client.conns[next(client.brokers)]
      -- the session lasts as long as the 2 s token: several tokens, several re-authentications
      assert.is_true(bc.session_lifetime_ms <= 2000, tostring(bc.session_lifetime_ms))
      assert.is_true(bc.sasl_reauthenticated >= 2, tostring(bc.sasl_reauthenticated))
      assert.is_true(calls >= 3, "token calls " .. calls)
      assert.equal(2 + (bc.sasl_reconnected or 0), n.n)
      local _, total = rt.consume_all(client, topic, 1, sent)
      assert.equal(sent, total)
      client:close()
    end
  end)

  slow_it("interoperates with Kafka's Java client on the same SASL_SSL listener (SCRAM-SHA-512)", function()
    local props = rt.java_sasl_ssl(k)
    local o = opts("SASL_SSL", creds("SCRAM-SHA-512"))
    local N = 200
    -- Java writes, lua-kafka reads
    local topic = rt.uniq("java-sasl")
    rt.create_topic(plain, topic, 2, 1)
    rk.java({ "produce", topic, N, "none", "plain" }, { bootstrap = k.bootstrap.SASL_SSL, props = props })
    local client = kafka.client.new(o)
    local by, total = rt.consume_all(client, topic, 2, N)
    assert.equal(N, total)
    for part = 0, 1 do
      for _, m in ipairs(by[part]) do
        local i = tonumber(m.key:match("^k(%d+)$"))
        assert.equal("v" .. i .. "-" .. ("x"):rep(i % 7 * 40), m.value)
      end
    end
    -- lua-kafka writes, Java reads
    local topic2 = rt.uniq("lua-sasl")
    rt.create_topic(plain, topic2, 1, 1)
    local p = kafka.producer.new(client, { linger_ms = 2 })
    for i = 1, N do assert(p:send(topic2, value(i), { key = "k" .. i })) end
    local _, failed = p:flush()
    assert.equal(0, failed)
    local lines = rk.java({ "consume", topic2, N, 30 }, { bootstrap = k.bootstrap.SASL_SSL, props = props })
    local got = 0
    for _, line in ipairs(lines) do
      local keyhex, valhex = line:match("^REC %d+ %d+ %-?%d+ %d+ (%S+) (%S+)")
      if keyhex then
        got = got + 1
        local i = tonumber(rk.unhex(keyhex):match("^k(%d+)$"))
        assert.equal(value(i), rk.unhex(valhex))
      end
    end
    assert.equal(N, got)
    client:close()
  end)
end)

-- The legacy framing (SaslHandshake v0, then raw size-prefixed tokens, as
-- brokers before SaslAuthenticate speak it): Kafka 3.9 still takes it.
local legacy
for _, v in ipairs(rk.versions()) do if v:match("^3%.") then legacy = v end end
if legacy then
  describe("SASL legacy framing, Kafka " .. legacy, function()
    it("PLAIN and SCRAM-SHA-512 with SaslHandshake v0 and raw tokens; a wrong password is an auth error", function()
      local k = rk.cluster(legacy, 1)
      local plain = kafka.client.new { brokers = k.bootstrap.PLAINTEXT }
      for _, mech in ipairs { "PLAIN", "SCRAM-SHA-512" } do
        local o = { brokers = k.bootstrap.SASL_PLAINTEXT, security_protocol = "SASL_PLAINTEXT", sasl_mechanism = mech,
          sasl_username = "alice", sasl_password = "alice-secret", max_versions = { SaslHandshake = 0 } }
        local topic = rt.uniq("legacy")
        rt.create_topic(plain, topic, 1, 1)
        local client = kafka.client.new(o)
        local p = kafka.producer.new(client, { linger_ms = 2 })
        for i = 1, 100 do assert(p:send(topic, value(i))) end
        local _, failed = p:flush()
        assert.equal(0, failed)
        local by, total = rt.consume_all(client, topic, 1, 100)
        assert.equal(100, total)
        for i, m in ipairs(by[0]) do assert.equal(value(i), m.value) end
        client:close()
        o.sasl_password = "wrong"
        o.max_retries = 0
        client = kafka.client.new(o)
        local md, err, code = client:metadata {}
        assert.is_nil(md)
        assert.equal("auth", code, err)
        assert.matches("SASL " .. mech:gsub("%-", "%%-") .. " authentication failed", err)
        client:close()
      end
      plain:close()
    end)
  end)
end
