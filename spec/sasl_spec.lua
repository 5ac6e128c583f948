-- kafka.sasl and kafka.proto.crypto without a broker: the crypto
-- primitives on published test vectors, SCRAM byte-exact on the example
-- exchanges of RFC 5802 (SCRAM-SHA-1) and RFC 7677 (SCRAM-SHA-256) with
-- their nonces injected, the server signature check, PLAIN and OAUTHBEARER
-- messages, and the validation of the client's security options.
local sasl = require "kafka.sasl"
local proto = require "kafka.proto"
local kafka = require "kafka"

local crypto = proto.crypto

local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end

describe("kafka.proto.crypto (libcrypto)", function()
  it("digests, HMAC and PBKDF2 on published vectors", function()
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", hex(crypto.digest("sha256", "abc")))
    assert.equal("ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd"
      .. "454d4423643ce80e2a9ac94fa54ca49f", hex(crypto.digest("SHA-512", "abc")))
    assert.equal("a9993e364706816aba3e25717850c26c9cd0d89d", hex(crypto.digest("sha1", "abc")))
    -- RFC 4231 test case 2
    assert.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      hex(crypto.hmac("sha256", "Jefe", "what do ya want for nothing?")))
    assert.equal("164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fd"
      .. "caeab1a34d4a6b4b636e070a38bce737", hex(crypto.hmac("sha512", "Jefe", "what do ya want for nothing?")))
    -- RFC 6070
    assert.equal("0c60c80f961f0e71f3a9b524af6012062fe037a6", hex(crypto.pbkdf2("sha1", "password", "salt", 1, 20)))
    assert.equal("4b007901b765489abead49d926f721d065a429c1", hex(crypto.pbkdf2("sha1", "password", "salt", 4096, 20)))
  end)

  it("random bytes, xor and base64", function()
    local a, b = crypto.random_bytes(32), crypto.random_bytes(32)
    assert.equal(32, #a)
    assert.are_not.equal(a, b)
    assert.equal("\3\3", crypto.xor("ab", "ba"))
    assert.equal("\0\255", crypto.xor("\1\254", "\1\1"))
    for _, s in ipairs { "", "f", "fo", "foo", "foob", "fooba", "foobar", "\0\255\1" } do
      assert.equal(s, crypto.b64_decode(crypto.b64_encode(s)))
    end
    assert.equal("Zm9vYmE=", crypto.b64_encode("fooba"))
    local ok, err = crypto.b64_decode("Zm9*")
    assert.is_nil(ok)
    assert.equal("invalid base64", err)
    assert.is_nil((crypto.b64_decode("abc")))
  end)

  it("raises on misuse", function()
    assert.has_error(function() crypto.digest("md5", "x") end)
    assert.has_error(function() crypto.xor("a", "bc") end)
    assert.has_error(function() crypto.pbkdf2("sha256", "p", "s", 0) end)
    assert.has_error(function() crypto.random_bytes(-1) end)
  end)

  it("checks host names as RFC 6125 says (OpenSSL's X509_check_host / X509_check_ip_asc)", function()
    -- a certificate made for this spec: SAN DNS:*.example.com, DNS:broker.test, IP:10.1.2.3
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute(("mkdir -p %s && cd %s && printf 'subjectAltName=DNS:*.example.com,DNS:broker.test,IP:10.1.2.3\\n' > e "
      .. "&& openssl req -x509 -newkey rsa:2048 -nodes -keyout k -out c.pem -days 2 -subj /CN=cn.test "
      .. "-addext 'subjectAltName=DNS:*.example.com,DNS:broker.test,IP:10.1.2.3' 2>/dev/null"):format(dir, dir)))
    local f = assert(io.open(dir .. "/c.pem", "rb"))
    local pem = f:read("*a")
    f:close()
    os.execute("rm -rf " .. dir)
    assert.is_true(crypto.check_host(pem, "broker.test"))
    assert.is_true(crypto.check_host(pem, "BROKER.test"))
    assert.is_true(crypto.check_host(pem, "b1.example.com"))
    assert.is_false(crypto.check_host(pem, "a.b1.example.com")) -- a wildcard is one label
    assert.is_false(crypto.check_host(pem, "example.com"))
    assert.is_true(crypto.check_host(pem, "10.1.2.3"))
    assert.is_false(crypto.check_host(pem, "10.1.2.4"))
    assert.is_false(crypto.check_host(pem, "cn.test")) -- the CN is ignored when there are DNS SANs
    assert.is_false(crypto.check_host(pem, "other.test"))
    assert.is_nil((crypto.check_host("not a pem", "broker.test")))
  end)

  -- RFC 6125 6.4.3: a wildcard is the whole left-most label, matches one
  -- label, and never a partial label (b*.example.com), a label other than
  -- the left-most (a.*.mid.test), a public suffix's only label (*.com) or
  -- an IDN A-label (xn--*). Java's HostnameChecker refuses each too. With no
  -- DNS name in the SAN, the subject's CN is the name (RFC 2818, Java).
  local function cert(dir, subj, san)
    assert(os.execute(("mkdir -p %s && cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout k -out c.pem -days 2 "
      .. "-subj %s %s 2>/dev/null"):format(dir, dir, subj, san and ("-addext 'subjectAltName=%s'"):format(san) or "")))
    local f = assert(io.open(dir .. "/c.pem", "rb"))
    local pem = f:read("*a")
    f:close()
    os.execute("rm -rf " .. dir)
    return pem
  end

  it("refuses partial-label, inner, single-label and IDN wildcards (RFC 6125 6.4.3), accepts each name whole", function()
    local dir = os.tmpname()
    os.remove(dir)
    local pem = cert(dir, "/CN=cn.test", "DNS:b*.example.com,DNS:*x.part.test,DNS:a.*.mid.test,DNS:*.com,"
      .. "DNS:xn--*.idn.test,DNS:*.*.two.test,DNS:whole.test")
    for _, host in ipairs { "b1.example.com", "b.example.com", "bx.example.com", "x.part.test", "ax.part.test",
      "a.b.mid.test", "a.x.mid.test", "example.com", "xn--abc.idn.test", "a.b.two.test", "cn.test", "b1.test" } do
      assert.is_false(crypto.check_host(pem, host), host)
    end
    assert.is_true(crypto.check_host(pem, "whole.test"))
    assert.is_true(crypto.check_host(pem, "WHOLE.TEST"))
    assert.is_false(crypto.check_host(pem, "a.whole.test"))
    assert.is_false(crypto.check_host(pem, "whole.test.evil"))
  end)

  it("takes the subject's CN when the certificate has no DNS name, and only then", function()
    local dir = os.tmpname()
    os.remove(dir)
    local pem = cert(dir, "/CN=only-cn.test")
    assert.is_true(crypto.check_host(pem, "only-cn.test"))
    assert.is_false(crypto.check_host(pem, "other.test"))
    assert.is_false(crypto.check_host(pem, "x.only-cn.test"))
    -- an IP SAN alone leaves the CN as the DNS name; the IP is still checked as an IP
    pem = cert(dir, "/CN=ipcn.test", "IP:10.9.8.7")
    assert.is_true(crypto.check_host(pem, "ipcn.test"))
    assert.is_true(crypto.check_host(pem, "10.9.8.7"))
    assert.is_false(crypto.check_host(pem, "10.9.8.6"))
  end)
end)

-- Runs a mechanism against a scripted server: returns the client's messages.
local function run(mech, server)
  local sent = { mech:start() }
  for _, s in ipairs(server) do
    local nxt, err = mech:step(s)
    if nxt == true then return sent end
    if not nxt then return sent, err end
    sent[#sent + 1] = nxt
  end
  return sent, "server script ended"
end

describe("SCRAM", function()
  it("is byte-exact on RFC 7677's SCRAM-SHA-256 example", function()
    local m = sasl.mechanism("SCRAM-SHA-256", { username = "user", password = "pencil" },
      { nonce = "rOprNGfwEbeRWgbNEkqO" })
    local sent, err = run(m, {
      "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
      "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    })
    assert.is_nil(err)
    assert.same({
      "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
      "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    }, sent)
  end)

  it("is byte-exact on RFC 5802's SCRAM-SHA-1 example", function()
    local m = sasl.mechanism("SCRAM-SHA-1", { username = "user", password = "pencil" },
      { nonce = "fyko+d2lbbFgONRv9qkxdawL" })
    local sent, err = run(m, {
      "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
      "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
    })
    assert.is_nil(err)
    assert.same({ "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
      "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=" }, sent)
  end)

  local first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
  local function m256() return sasl.mechanism("SCRAM-SHA-256", { username = "user", password = "pencil" },
    { nonce = "rOprNGfwEbeRWgbNEkqO" }) end

  it("refuses a wrong server signature", function()
    local _, err = run(m256(), { first, "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" })
    assert.matches("server signature is wrong", err)
    _, err = run(m256(), { first, "x=nothing" })
    assert.matches("malformed server%-final", err)
    _, err = run(m256(), { first, "e=invalid-proof" })
    assert.matches("server error: invalid%-proof", err)
  end)

  -- RFC 5802 section 5 / RFC 7677: the signature is the whole HMAC; one that
  -- is a prefix of it (a short or truncated v=), longer, empty, or not
  -- base64 is refused, as is an "m=" mandatory extension in either server
  -- message (RFC 5802 5.1: its presence must fail the exchange).
  it("refuses a server signature that is short, long, empty or not base64 (only the whole HMAC passes)", function()
    local good = crypto.b64_decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert.equal(32, #good)
    for _, sig in ipairs { good:sub(1, 31), good:sub(1, 16), good:sub(1, 1), good .. "\0", good .. good } do
      local sent, err = run(m256(), { first, "v=" .. crypto.b64_encode(sig) })
      assert.are.equal(2, #sent)
      assert.are.equal("the server signature is wrong: the broker does not know the password "
        .. "(or the exchange was tampered with)", err)
    end
    local _, err = run(m256(), { first, "v=" })
    assert.matches("server signature is wrong", err)
    _, err = run(m256(), { first, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4" }) -- padding cut
    assert.are.equal("malformed server-final-message", err)
    _, err = run(m256(), { first, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,m=x" })
    assert.are.equal("the server sent a mandatory extension (m=), which SCRAM does not define", err)
    _, err = run(m256(), { "m=x," .. first })
    assert.are.equal("the server sent a mandatory extension (m=), which SCRAM does not define", err)
    -- "=" inside a value (a nonce may hold it, base64 ends with it) is no attribute
    local sent
    sent, err = run(m256(), { "r=rOprNGfwEbeRWgbNEkqOe=x;m=y,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "v=AAAA" })
    assert.are.equal(2, #sent)
    assert.are.equal("c=biws,r=rOprNGfwEbeRWgbNEkqOe=x;m=y,p=", sent[2]:sub(1, 39))
    assert.matches("server signature is wrong", err)
    -- an attribute's name is one letter at the start of its part: "xv=" is not v=
    _, err = run(m256(), { first, "xv=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" })
    assert.are.equal("malformed server-final-message", err)
    -- the good one passes, with extensions after it (RFC 5802 allows them)
    sent, err = run(m256(), { first, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,x=ext" })
    assert.is_nil(err)
    assert.are.equal(2, #sent)
  end)

  it("refuses a server nonce that does not extend the client's, and low iteration counts", function()
    local _, err = run(m256(), { "r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" })
    assert.matches("nonce", err)
    _, err = run(m256(), { "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" })
    assert.matches("nonce", err)
    _, err = run(m256(), { "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1" })
    assert.matches("iteration count 1", err)
    _, err = run(m256(), { "r=rOprNGfwEbeRWgbNEkqOxyz,i=4096" })
    assert.matches("malformed", err)
  end)

  it("makes a fresh CSPRNG nonce per exchange and escapes = and , in the user name", function()
    local a = sasl.mechanism("SCRAM-SHA-512", { username = "a=b,c", password = "p" }):start()
    local b = sasl.mechanism("SCRAM-SHA-512", { username = "a=b,c", password = "p" }):start()
    assert.matches("^n,,n=a=3Db=2Cc,r=[%w+/]+=*$", a)
    assert.are_not.equal(a, b)
    assert.equal(32, #a:match("r=(.*)$")) -- 24 random bytes in base64
  end)
end)

describe("PLAIN and OAUTHBEARER messages", function()
  it("PLAIN is authzid NUL user NUL password", function()
    assert.same({ "\0alice\0alice-secret" }, (run(sasl.mechanism("PLAIN", { username = "alice",
      password = "alice-secret" }), { "" })))
  end)

  it("OAUTHBEARER is the GS2 header, auth=Bearer and the extensions (RFC 7628)", function()
    local m = sasl.mechanism("OAUTHBEARER", {}, { token = "t.o.k", extensions = { traceId = "123", a = "b" } })
    assert.equal("n,,\1auth=Bearer t.o.k\1a=b\1traceId=123\1\1", m:start())
    assert.is_true(m:step(""))
    -- an error challenge is answered with \1, then the exchange fails with it
    m = sasl.mechanism("OAUTHBEARER", {}, { token = "t" })
    m:start()
    assert.equal("\1", m:step('{"status":"invalid_token"}'))
    local ok, err = m:step("")
    assert.is_nil(ok)
    assert.matches("invalid_token", err)
  end)
end)

describe("security options", function()
  local B = { brokers = "127.0.0.1:9092" }
  local function new(extra)
    local o = {}
    for k, v in pairs(B) do o[k] = v end
    for k, v in pairs(extra) do o[k] = v end
    return kafka.client.new(o)
  end
  local function raises(pattern, extra)
    local ok, err = pcall(new, extra)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.matches(pattern, tostring(err))
  end
  local cert = os.tmpname() -- any readable file passes the file checks

  it("PLAINTEXT needs nothing and sets no security", function()
    assert.is_nil(new({}).security)
    assert.is_nil(new({ security_protocol = "plaintext" }).security)
  end)

  it("raises on misuse, naming the option", function()
    raises("security_protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", { security_protocol = "TLS" })
    raises("sasl_mechanism is required with SASL_SSL", { security_protocol = "SASL_SSL" })
    raises("sasl_mechanism must be PLAIN", { security_protocol = "SASL_PLAINTEXT", sasl_mechanism = "GSSAPI" })
    raises("sasl_username is required with SCRAM%-SHA%-512",
      { security_protocol = "SASL_SSL", sasl_mechanism = "SCRAM-SHA-512", sasl_password = "x" })
    raises("sasl_password is required with PLAIN",
      { security_protocol = "SASL_SSL", sasl_mechanism = "PLAIN", sasl_username = "x" })
    raises("sasl_oauthbearer_token must be a function",
      { security_protocol = "SASL_SSL", sasl_mechanism = "OAUTHBEARER", sasl_oauthbearer_token = "tok" })
    raises("sasl_username is not used by OAUTHBEARER", { security_protocol = "SASL_SSL", sasl_mechanism = "OAUTHBEARER",
      sasl_oauthbearer_token = function() end, sasl_username = "u" })
    raises("sasl_mechanism is set but security_protocol is SSL", { security_protocol = "SSL", sasl_mechanism = "PLAIN" })
    raises("ssl_ca_location is set but security_protocol is PLAINTEXT", { ssl_ca_location = cert })
    raises("ssl_ca_location is set but security_protocol is SASL_PLAINTEXT", { security_protocol = "SASL_PLAINTEXT",
      sasl_mechanism = "PLAIN", sasl_username = "u", sasl_password = "p", ssl_ca_location = cert })
    raises("ssl_ca_location cannot be read", { security_protocol = "SSL", ssl_ca_location = "/nonexistent/ca.pem" })
    raises("ssl_key_location is required with ssl_certificate_location",
      { security_protocol = "SSL", ssl_certificate_location = cert })
    raises("ssl_key_password needs ssl_key_location", { security_protocol = "SSL", ssl_key_password = "x" })
    raises("ssl_ca_locaton is not an option", { security_protocol = "SSL", ssl_ca_locaton = cert })
    raises('ssl_endpoint_identification must be "https" or "none"',
      { security_protocol = "SSL", ssl_endpoint_identification = "yes" })
    raises("enable_ssl_certificate_verification is set but security_protocol is PLAINTEXT",
      { enable_ssl_certificate_verification = false })
    raises("enable_ssl_certificate_verification must be a boolean",
      { security_protocol = "SSL", enable_ssl_certificate_verification = "no" })
  end)

  it("keeps what every connection needs", function()
    local c = new { security_protocol = "sasl_ssl", sasl_mechanism = "scram-sha-512", sasl_username = "u",
      sasl_password = "p", ssl_ca_location = cert, ssl_endpoint_identification = "none" }
    assert.equal("SASL_SSL", c.security.protocol)
    assert.equal("SCRAM-SHA-512", c.security.sasl.mechanism)
    assert.equal(cert, c.security.tls.ca)
    assert.is_false(c.security.tls.verify_host)
    assert.is_true(new({ security_protocol = "SSL" }).security.tls.verify_host)
    assert.is_true(new({ security_protocol = "SSL" }).security.tls.verify_chain)
    -- no chain verification: no host name check either
    local nv = new({ security_protocol = "SSL", enable_ssl_certificate_verification = false }).security.tls
    assert.is_false(nv.verify_chain)
    assert.is_false(nv.verify_host)
    -- the connections the client makes carry them (bootstrap and learned ones)
    assert.equal(c.security, c:_new_conn("h", 1).security)
    assert.equal(c.security, c:_new_conn("h", 2, 7).security)
    os.remove(cert)
  end)
end)
