-- kafka.connection: one broker connection. Frames requests with kafka.proto,
-- checks every response's correlation id, keeps several requests in flight
-- (Kafka answers in order per connection), negotiates versions with
-- ApiVersions, and closes itself after any mid-frame error or timeout:
-- a connection that saw one is never reused.
--
--   local c = connection.new{host=, port=, client_id=, request_timeout_ms=,
--                            connect_timeout_ms=, socket=, api_versions=, max_versions=}
--   assert(c:connect())
--   local body, err, code = c:request("Metadata", {topics = {}})
--   local corr = c:send("Fetch", version, body) ... c:receive(corr)
--
-- Errors are nil, message, code with code one of "network", "timeout",
-- "protocol" (a peer that breaks the protocol), "unsupported", "closed".
local proto = require "kafka.proto"
local ksocket = require "kafka.socket"
local sasl = require "kafka.sasl"

local math, table = math, table
local setmetatable, tostring, tonumber, type, pairs, ipairs = setmetatable, tostring, tonumber, type, pairs, ipairs

-- Big-endian int32 at byte i (no string.unpack on LuaJIT).
local function be32(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  if n >= 2147483648 then n = n - 4294967296 end
  return n
end

local _M = { VERSION = "0.1.0" }
local mt = { __index = _M }

local API_VERSIONS = 18
local UNSIZED = { unsized = true } -- frames are read without their size prefix

-- Versions to use against a broker that has no ApiVersions (Kafka < 0.10):
-- the 0.8/0.9 protocol.
local FALLBACK = { [0] = 1, [1] = 1, [2] = 0, [3] = 0, [8] = 2, [9] = 1, [10] = 0, [11] = 0, [12] = 0,
                   [13] = 0, [14] = 0, [15] = 0, [16] = 0 }

-- Caps where a newer version changes the shape the client writes or needs
-- state we do not keep (Fetch v13+ addresses topics by id; OffsetFetch v8+
-- batches groups; FindCoordinator v4+ batches keys; ListOffsets v4+ only adds
-- leader epochs, which librdkafka 2.0.2's mock broker writes as int64).
-- Every broker from 2.1 to 4.x accepts these versions.
local DEFAULT_CAPS = { [1] = 12, [2] = 3, [9] = 7, [10] = 3 }
local PRODUCE, FETCH = proto.api_key("Produce"), proto.api_key("Fetch")

function _M.new(opts)
  return setmetatable({
    host = opts.host,
    port = tonumber(opts.port),
    node_id = opts.node_id,
    client_id = opts.client_id or "lua-kafka",
    request_timeout_ms = opts.request_timeout_ms or 30000,
    connect_timeout_ms = opts.connect_timeout_ms or 10000,
    factory = ksocket.factory(opts),
    security = opts.security, -- kafka.sasl.config(): TLS and SASL settings, nil for PLAINTEXT
    use_api_versions = opts.api_versions ~= false,
    max_versions = opts.max_versions or {},
    fallback_versions = opts.fallback_versions or FALLBACK,
    sock = nil,
    corr = 0,
    inflight = {},   -- FIFO of {corr, api, version, opts}
    first = 1,
    last = 0,
    ready = {},      -- corr -> decoded body, for responses read ahead
    noreply = {},    -- corr of acks=0 produce: a reply (the mock sends one) is dropped
    broker_versions = nil, -- api key -> {min, max}; false: the broker has no ApiVersions
    closed_reason = nil,
  }, mt)
end

function _M:name()
  return (self.node_id and ("broker " .. self.node_id .. " ") or "") .. self.host .. ":" .. tostring(self.port)
end

-- close(reason): drops the socket; every request in flight fails with reason.
function _M:close(reason)
  if self.sock then
    self.sock:close()
    self.sock = nil
  end
  self.closed_reason = reason or "closed"
  self.inflight, self.first, self.last = {}, 1, 0
  self.ready = {}
  self.noreply = {}
end

function _M:is_connected()
  return self.sock ~= nil
end

local function fail(self, msg, code)
  self:close(msg)
  return nil, msg, code
end

-- Reads one whole frame; any error or timeout closes the connection.
function _M:_read_frame(timeout_ms)
  local sock = self.sock
  sock:settimeout(timeout_ms)
  local head, err, partial = sock:receive(4)
  if not head then
    local what = (partial and #partial > 0) and "mid-frame " or ""
    return fail(self, self:name() .. ": " .. what .. "receive failed: " .. tostring(err),
      err == "timeout" and "timeout" or "network")
  end
  local total, ferr = proto.frame_length(head)
  if not total then return fail(self, self:name() .. ": bad frame size: " .. tostring(ferr), "protocol") end
  if total < 8 then return fail(self, self:name() .. ": frame too short for a response header", "protocol") end
  local rest
  rest, err = sock:receive(total - 4)
  if not rest then
    return fail(self, self:name() .. ": mid-frame receive failed: " .. tostring(err),
      err == "timeout" and "timeout" or "network")
  end
  return rest -- the frame without its size: decoded with {unsized = true}, no copy
end

-- Raw round trip used during negotiation: returns the response frame.
function _M:_raw(api, version, body)
  local corr, err, code = self:send(api, version, body)
  if not corr then return nil, err, code end
  local frame
  frame, err, code = self:_read_frame(self.request_timeout_ms)
  if not frame then return nil, err, code end
  self.inflight[self.first] = nil
  self.first = self.first + 1
  local got = be32(frame, 1)
  if got ~= corr then
    return fail(self, ("%s: correlation id mismatch: sent %d, got %d"):format(self:name(), corr, got), "protocol")
  end
  return frame
end

-- ApiVersions, with the fallback rules: a broker that does not know the
-- version asked answers error 35 with a v0 body (carrying its own range
-- since Kafka 2.4): retry with that range's max, else v0.
function _M:_negotiate()
  local _, ours = proto.versions(API_VERSIONS)
  local try = { math.min(ours, 3) }
  local seen = {}
  while #try > 0 do
    local v = table.remove(try, 1)
    if not seen[v] then
      seen[v] = true
      local frame, err, code = self:_raw(API_VERSIONS, v, { client_software_name = "lua-kafka",
        client_software_version = _M.VERSION })
      if not frame then return nil, err, code end
      local ok, body = proto.decode_response(API_VERSIONS, v, frame, UNSIZED)
      if not ok then body = nil end
      if body and body.error_code == 0 then
        local bv = {}
        for _, k in ipairs(body.api_keys or {}) do bv[k.api_key] = { min = k.min_version, max = k.max_version } end
        self.broker_versions = bv
        return true
      end
      -- error 35 comes with a v0 body: read it for the broker's own range
      local ok0, v0 = proto.decode_response(API_VERSIONS, 0, frame, UNSIZED)
      if not ok0 then v0 = nil end
      local max
      if v0 and v0.error_code == 35 then
        for _, k in ipairs(v0.api_keys or {}) do
          if k.api_key == API_VERSIONS then max = k.max_version end
        end
      elseif body and body.error_code ~= 35 then
        return nil, ("%s: ApiVersions failed: %s"):format(self:name(), proto.errors.info(body.error_code).name), "protocol"
      end
      if max and max < v then try[#try + 1] = max end
      if v > 2 then try[#try + 1] = 2 end
      try[#try + 1] = 0
    end
  end
  return nil, self:name() .. ": ApiVersions negotiation failed", "unsupported"
end

-- connect() -> true | nil, err, code. Opens the socket and negotiates
-- versions (once per broker; a broker that closes on ApiVersions is
-- treated as Kafka < 0.10 and spoken to in the old versions).
function _M:connect()
  if self.sock then return true end
  local sock, err = self.factory()
  if not sock then return nil, "cannot create socket: " .. tostring(err), "network" end
  sock:settimeout(self.connect_timeout_ms)
  local ok
  ok, err = sock:connect(self.host, self.port)
  if not ok then
    sock:close()
    return nil, ("connect to %s failed: %s"):format(self:name(), tostring(err)), "network"
  end
  ok, err = ksocket.secure(sock, self.host, self.port, self.security, self.connect_timeout_ms)
  if not ok then
    sock:close()
    return nil, ("connect to %s failed: %s"):format(self:name(), tostring(err)), "ssl"
  end
  self.sock = sock
  self.closed_reason = nil
  self.inflight, self.first, self.last, self.ready, self.noreply = {}, 1, 0, {}, {}
  if self.use_api_versions and self.broker_versions == nil then
    local code
    ok, err, code = self:_negotiate()
    if not ok then
      if ksocket.tls_error(sock) then return nil, err, "ssl" end -- a TLS alert or a TLS/plaintext mix-up
      if code == "network" then
        -- closed on ApiVersions: a pre-0.10 broker. Reconnect without it.
        self.broker_versions = false
        return self:connect()
      end
      self:close(err)
      return nil, err, code
    end
  elseif not self.use_api_versions then
    self.broker_versions = false
  end
  local code
  ok, err, code = sasl.authenticate(self)
  if not ok then
    self:close(err)
    return nil, err, code
  end
  return true
end

-- version(api) -> the highest version both sides support, or nil, err.
function _M:version(api)
  local key = type(api) == "number" and api or proto.api_key(api)
  if not key then return nil, "unknown api " .. tostring(api), "unsupported" end
  local lo, hi = proto.versions(key)
  local cap = self.max_versions[key] or self.max_versions[proto.api_name(key)] or DEFAULT_CAPS[key]
  if cap and cap < hi then hi = cap end
  local bv = self.broker_versions
  if bv == false then
    local fb = self.fallback_versions[key]
    if not fb then return nil, self:name() .. " (pre-0.10) does not support " .. proto.api_name(key), "unsupported" end
    return math.min(fb, hi)
  end
  if bv then
    local b = bv[key]
    if not b then return nil, self:name() .. " does not support " .. proto.api_name(key), "unsupported" end
    if b.max < hi then hi = b.max end
    if b.min > lo then lo = b.min end
    -- Kafka 4.x advertises Produce from v0 (KAFKA-18659) but closes the
    -- connection on v0-2 (KIP-896); it is the broker whose Fetch starts at v4.
    if key == PRODUCE and lo < 3 and bv[FETCH] and bv[FETCH].min >= 4 then lo = 3 end
  end
  if hi < lo then return nil, self:name() .. ": no common version of " .. proto.api_name(key), "unsupported" end
  return hi
end

-- send(api, version, body [, opts]) -> correlation id | nil, err, code.
-- opts.no_response: the broker sends none (Produce with acks=0).
-- opts.timeout_ms: how long receive() waits for this response.
function _M:send(api, version, body, opts)
  if not self.sock then
    local ok, err, code = self:connect()
    if not ok then return nil, err, code end
  end
  if self.reauth_at then -- KIP-368: re-authenticate before the session ends
    local ok, err, code = sasl.maybe_reauthenticate(self)
    if not ok then return nil, err, code end
  end
  local corr = self.corr + 1
  if corr > 0x7fffffff then corr = 1 end
  self.corr = corr
  local frame = proto.encode_request(api, version, { correlation_id = corr, client_id = self.client_id }, body)
  self.sock:settimeout(self.request_timeout_ms)
  local ok, err = self.sock:send(frame)
  if not ok then
    return fail(self, ("%s: send failed: %s"):format(self:name(), tostring(err)),
      err == "timeout" and "timeout" or "network")
  end
  if opts and opts.no_response then
    self.noreply[corr] = true
  else
    self.last = self.last + 1
    self.inflight[self.last] = { corr = corr, api = api, version = version, opts = opts }
  end
  return corr
end

-- receive(corr) -> decoded response body | nil, err, code. Reads responses
-- in order; ones for other requests in flight are kept for their receive().
function _M:receive(corr)
  local body = self.ready[corr]
  if body then
    self.ready[corr] = nil
    return body
  end
  while true do
    local head = self.inflight[self.first]
    if not head then
      return nil, ("%s: no request %d in flight (%s)"):format(self:name(), corr,
        self.closed_reason or "already received"), "closed"
    end
    if not self.sock then return nil, self.closed_reason, "closed" end
    local timeout = self.request_timeout_ms + (head.opts and head.opts.timeout_ms or 0)
    local frame, err, code = self:_read_frame(timeout)
    if not frame then return nil, err, code end
    local got = be32(frame, 1)
    if self.noreply[got] then
      self.noreply[got] = nil
    elseif got ~= head.corr then
      return fail(self, ("%s: correlation id mismatch: expected %d, got %d"):format(self:name(), head.corr, got),
        "protocol")
    else
      self.inflight[self.first] = nil
      self.first = self.first + 1
      local dopts = UNSIZED
      if head.opts and head.opts.decode then
        dopts = { unsized = true }
        for k, x in pairs(head.opts.decode) do dopts[k] = x end
      end
      local c, decoded, derr = proto.decode_response(head.api, head.version, frame, dopts)
      if not c then
        return fail(self, ("%s: bad %s v%d response: %s (%s)"):format(self:name(), tostring(head.api), head.version,
          tostring(decoded), tostring(derr)), "protocol")
      end
      if head.corr == corr then return decoded end
      self.ready[head.corr] = decoded
    end
  end
end

-- request(api, body [, opts]) -> body | nil, err, code: send + receive at
-- the negotiated version (opts.version forces one).
function _M:request(api, body, opts)
  if not self.sock then
    local ok, err, code = self:connect()
    if not ok then return nil, err, code end
  end
  local v = opts and opts.version
  if not v then
    local err, code
    v, err, code = self:version(api)
    if not v then return nil, err, code end
  end
  local corr, err, code = self:send(api, v, body, opts)
  if not corr then return nil, err, code end
  if opts and opts.no_response then return {} end
  return self:receive(corr)
end

_M.in_flight = function(self) return self.last - self.first + 1 end

return _M
