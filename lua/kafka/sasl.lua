-- kafka.sasl: the SASL mechanisms (the security options and their rules
-- are kafka.options').
--
--   local m, err = sasl.start(sec.sasl, now) -- a fresh state machine for one exchange
--
-- Mechanisms are small state machines: the connection (kafka.connection,
-- which owns the exchange and KIP-368 re-authentication) sends m:start(),
-- then m:step(server_bytes) returns the next client bytes, true when the
-- exchange is complete, or nil, err. PLAIN (RFC 4616), SCRAM-SHA-256/512
-- (RFC 5802, RFC 7677; SHA-1 too for the RFC's test vector), OAUTHBEARER
-- (RFC 7628, Kafka's KIP-255/KIP-342 framing; the token from
-- sasl_oauthbearer_token, refreshed at 80% of its lifetime).
local proto = require "kafka.proto"

local crypto = proto.crypto
local math, table = math, table
local error, ipairs, pairs, pcall, setmetatable = error, ipairs, pairs, pcall, setmetatable
local tostring, tonumber, type = tostring, tonumber, type

local _M = {}

---------------------------------------------------------------- mechanisms

local b64, unb64 = crypto.b64_encode, crypto.b64_decode

-- PLAIN (RFC 4616): one message, authzid empty.
local plain = {}
plain.__index = plain
function plain.new(s) return setmetatable({ s = s }, plain) end
function plain:start() return "\0" .. self.s.username .. "\0" .. self.s.password end
function plain.step() return true end

-- SCRAM (RFC 5802): client-first, server-first, client-final, server-final.
local scram = {}
scram.__index = scram
local SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 1000000

local function saslname(u) return (u:gsub("=", "=3D"):gsub(",", "=2C")) end

-- new(settings, alg, opts): opts.nonce fixes the client nonce (tests only)
function scram.new(s, alg, opts)
  local nonce = opts and opts.nonce or b64(crypto.random_bytes(24))
  return setmetatable({ s = s, alg = alg, nonce = nonce, state = "first" }, scram)
end

function scram:start()
  self.first_bare = "n=" .. saslname(self.s.username) .. ",r=" .. self.nonce
  return "n,," .. self.first_bare
end

-- RFC 5802 5.1: an "m=" attribute must fail the exchange
local MEXT = "the server sent a mandatory extension (m=), which SCRAM does not define"

-- A SCRAM message's attributes: comma-separated "k=value" parts, the first
-- of each name kept (a value may hold "=", as base64 padding does).
local function attrs(msg)
  local t = {}
  for part in (msg .. ","):gmatch("([^,]*),") do
    local k, v = part:match("^(%a)=(.*)$")
    if k and t[k] == nil then t[k] = v end
  end
  return t
end

function scram:step(msg)
  local alg = self.alg
  if self.state == "first" then
    local a = attrs(msg)
    if a.e then return nil, "server error: " .. a.e end
    if a.m then return nil, MEXT end
    local r, salt, i = a.r, a.s and unb64(a.s), tonumber(a.i)
    if not r or not salt or not i then return nil, "malformed server-first-message" end
    if r:sub(1, #self.nonce) ~= self.nonce or #r <= #self.nonce then
      return nil, "the server nonce does not extend the client nonce"
    end
    if i < SCRAM_MIN_ITERATIONS or i > SCRAM_MAX_ITERATIONS or i ~= math.floor(i) then
      return nil, ("iteration count %s outside %d-%d"):format(a.i, SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS)
    end
    local salted = crypto.pbkdf2(alg, self.s.password, salt, i)
    local client_key = crypto.hmac(alg, salted, "Client Key")
    local stored_key = crypto.digest(alg, client_key)
    local without_proof = "c=biws,r=" .. r -- biws: base64("n,,")
    local auth_message = self.first_bare .. "," .. msg .. "," .. without_proof
    local proof = crypto.xor(client_key, crypto.hmac(alg, stored_key, auth_message))
    self.server_signature = crypto.hmac(alg, crypto.hmac(alg, salted, "Server Key"), auth_message)
    self.state = "final"
    return without_proof .. ",p=" .. b64(proof)
  elseif self.state == "final" then
    local a = attrs(msg)
    if a.e then return nil, "server error: " .. a.e end
    if a.m then return nil, MEXT end
    local v = a.v and unb64(a.v)
    if not v then return nil, "malformed server-final-message" end
    if v ~= self.server_signature then
      return nil, "the server signature is wrong: the broker does not know the password (or the exchange was tampered with)"
    end
    self.state = "done"
    return true
  end
  return nil, "SCRAM exchange already complete"
end

-- OAUTHBEARER (RFC 7628): the GS2 header, auth=Bearer <token>, then the
-- extensions, each \1-separated. A non-empty server reply is the error
-- JSON: answered with \1, after which the broker fails the exchange.
local oauth = {}
oauth.__index = oauth
function oauth.new(s, _, opts) return setmetatable({ s = s, token = opts.token, ext = opts.extensions }, oauth) end
function oauth:start()
  local parts = { "n,,", "auth=Bearer " .. self.token }
  local keys = {}
  for k in pairs(self.ext or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(self.ext[k]) end
  return table.concat(parts, "\1") .. "\1\1"
end
function oauth:step(msg)
  if msg and #msg > 0 and not self.server_error then
    self.server_error = msg
    return "\1"
  end
  if self.server_error then return nil, "broker refused the token: " .. self.server_error end
  return true
end

local ALGS = { ["SCRAM-SHA-256"] = "sha256", ["SCRAM-SHA-512"] = "sha512", ["SCRAM-SHA-1"] = "sha1" }

-- mechanism(name, settings, opts) -> a new state machine (also for specs:
-- opts.nonce for SCRAM, opts.token / opts.extensions for OAUTHBEARER)
function _M.mechanism(name, s, opts)
  if name == "PLAIN" then return plain.new(s) end
  if ALGS[name] then return scram.new(s, ALGS[name], opts) end
  if name == "OAUTHBEARER" then return oauth.new(s, nil, opts or {}) end
  error("unknown SASL mechanism " .. tostring(name), 2)
end

---------------------------------------------------------------- tokens

local EXT_KEY, EXT_VALUE = "^%a+$", "^[\33-\126 \t\r\n]*$"

-- The OAUTHBEARER token, refreshed once 80% of its lifetime has passed.
local function token(s, now)
  local t = now()
  if s.tok and t < s.tok_refresh then return s.tok, s.tok_ext end
  local ok, tok, lifetime, ext = pcall(s.token_fn)
  if not ok then return nil, "sasl_oauthbearer_token raised: " .. tostring(tok) end
  if type(tok) ~= "string" or tok == "" then
    return nil, "sasl_oauthbearer_token returned no token" .. (lifetime and (": " .. tostring(lifetime)) or "")
  end
  if tok:find("[%c ]") then return nil, "sasl_oauthbearer_token: the token has a space or a control byte" end
  lifetime = tonumber(lifetime)
  if not lifetime or lifetime <= 0 then return nil, "sasl_oauthbearer_token must return the token's lifetime_ms (> 0)" end
  if ext ~= nil and type(ext) ~= "table" then return nil, "sasl_oauthbearer_token: extensions must be a table" end
  for k, v in pairs(ext or {}) do
    if type(k) ~= "string" or not k:match(EXT_KEY) or k == "auth" or not tostring(v):match(EXT_VALUE) then
      return nil, "sasl_oauthbearer_token: bad extension " .. tostring(k)
    end
  end
  s.tok, s.tok_ext, s.tok_refresh, s.tok_expiry = tok, ext, t + lifetime * 0.8, t + lifetime
  return tok, ext
end

-- start(s, now) -> a new state machine for one exchange with the settings
-- of kafka.options.security (s = sec.sasl), or nil, err when the token cannot be had
function _M.start(s, now)
  local opts
  if s.mechanism == "OAUTHBEARER" then
    local tok, ext = token(s, now)
    if not tok then return nil, ext end
    opts = { token = tok, extensions = ext }
  end
  return _M.mechanism(s.mechanism, s, opts)
end

return _M
