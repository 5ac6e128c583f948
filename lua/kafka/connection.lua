--- kafka.connection: one broker connection. Frames requests with kafka.proto,
-- checks every response's correlation id, keeps several requests in flight
-- (Kafka answers in order per connection), negotiates versions with
-- ApiVersions, and closes itself after any mid-frame error or timeout:
-- a connection that saw one is never reused.
--
--   local c = connection.new{host=, port=, client_id=, request_timeout_ms=,
--                            connect_timeout_ms=, socket=, api_versions=, max_versions=}
--   assert(c:connect())
--   local body, err, code = c:request("Metadata", {topics = {}})
--   local corr = c:send("Fetch", version, body) ... c:receive(corr [, deadline])
--
-- Errors are nil, message, code with code one of "network", "timeout",
-- "protocol" (a peer that breaks the protocol), "limit" (a frame larger than
-- receive_message_max_bytes), "unsupported", "closed".
--
-- Time: every request has its own deadline (request_timeout_ms, plus the
-- broker-side wait it asked for, from when it was sent); when it passes the
-- connection is closed. Callers pass their own deadline (a time in ms of
-- the injected clock) to connect/send/receive: when that passes first, the
-- call returns nil, msg, "timeout" and the request stays in flight (a
-- partly read frame is kept), so a later receive() picks the answer up.
-- waiting(corr) tells whether it is still in flight; abandon(corr) drops
-- its answer when it comes.
-- @module kafka.connection
local proto = require "kafka.proto"
local ksocket = require "kafka.socket"
local sasl = require "kafka.sasl"

local errors = proto.errors
local math, string, table = math, string, table
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

local API = proto.api
local API_VERSIONS, METADATA = API.ApiVersions, API.Metadata
local CHUNK = 1048576 -- largest read on sockets whose timeout is not a deadline per call
-- largest read on luasocket: its receive(n) gathers n bytes 8 KiB at a time
-- in a luaL_Buffer, which LuaJIT builds by concatenating strings; a frame in
-- 64 KiB pieces, joined once, consumed 100,000 x 1 KiB (uncompressed, the
-- mock) 1.6x faster on LuaJIT than one read per frame, 1.1x on Lua 5.4
local LUASOCKET_PIECE = 65536

-- Versions to use against a broker that has no ApiVersions (Kafka < 0.10):
-- the 0.8/0.9 protocol.
local FALLBACK = { [0] = 1, [1] = 1, [2] = 0, [3] = 0, [8] = 2, [9] = 1, [10] = 0, [11] = 0, [12] = 0,
                   [13] = 0, [14] = 0, [15] = 0, [16] = 0 }

-- Caps where a newer version changes the shape the client writes or needs
-- state we do not keep: the last version whose fields the client fills (an
-- upper bound; the broker's own range still applies). docs/client.md lists them.
local DEFAULT_CAPS = {
  [API.Produce] = 12,         -- v13 addresses topics by id (the producer asks for it where every topic has one)
  [API.Fetch] = 18,           -- (v13+ address topics by id: the fetcher sends ids where the metadata has them)
  [API.ListOffsets] = 3,      -- v4+ adds leader epochs, which librdkafka 2.0.2's mock writes as int64
  [API.OffsetCommit] = 9,     -- v10 addresses topics by id (kafka.offsets asks for it where every topic has one)
  [API.OffsetFetch] = 7,      -- v8+ batches groups, v10 addresses topics by id (kafka.offsets: the same)
  [API.FindCoordinator] = 3,  -- v4+ batches keys
}
-- (TxnOffsetCommit: kafka.producer.txnmgr picks 6 (topic ids), 5 or 4 itself.)
local PRODUCE, FETCH = proto.api_key("Produce"), proto.api_key("Fetch")
local GATHER = { gather = true } -- encode_request's option: a Produce frame in pieces

--- A connection object; nothing is opened until connect() or the first request.
-- @tparam table opts `host`, `port`, `client_id`, `request_timeout_ms`, `connect_timeout_ms`,
-- `socket` (a factory), `api_versions`, `max_versions`, `now`/`sleep`, the
-- security settings (kafka.options.security), `receive_message_max_bytes`
-- @treturn table the connection
function _M.new(opts)
  local now = opts.now or ksocket.clock(opts)
  return setmetatable({
    host = opts.host,
    port = tonumber(opts.port),
    node_id = opts.node_id,
    cluster_id = opts.cluster_id, -- the cluster the metadata named: ApiVersions v5 asks the broker to confirm
    av_max = opts.av_max,         -- the ApiVersions version the cluster's brokers offered (nil: unknown)
    client_id = opts.client_id or "lua-kafka",
    request_timeout_ms = opts.request_timeout_ms or 30000,
    connect_timeout_ms = opts.connect_timeout_ms or 10000,
    receive_message_max_bytes = opts.receive_message_max_bytes or 100000000,
    factory = ksocket.factory(opts),
    now = now,
    security = opts.security, -- kafka.options.security(): TLS and SASL settings, nil for PLAINTEXT
    use_api_versions = opts.api_versions ~= false,
    max_versions = opts.max_versions or {},
    fallback_versions = opts.fallback_versions or FALLBACK,
    sock = nil,
    corr = 0,
    inflight = {},   -- FIFO of {corr, api, version, opts, deadline}
    first = 1,
    last = 0,
    ready = {},      -- corr -> decoded body, for responses read ahead
    noreply = {},    -- corr of acks=0 produce: a reply (the mock sends one) is dropped
    rd = nil,        -- the frame being read: {parts, have, need, size, corr}
    neg = nil,       -- the ApiVersions negotiation in progress on this socket
    broker_versions = nil, -- api key -> {min, max}; false: the broker has no ApiVersions
    finalized_features = nil, -- feature name -> finalized level (ApiVersions v3+)
    features_epoch = -1,      -- the epoch of that view (-1: none)
    closed_reason = nil,
    transport = nil, -- what the last socket opened was: "cosocket", "luasocket" or "custom"
    transports = opts.transports, -- kind -> sockets opened (a table shared by a client's connections)
    owner = nil,     -- in nginx, the request or timer that opened the cosocket
  }, mt)
end

--- "broker ID host:port" (or "host:port" before the id is known), for messages.
-- @treturn string
function _M:name()
  return (self.node_id and ("broker " .. self.node_id .. " ") or "") .. self.host .. ":" .. tostring(self.port)
end

--- Drops the socket; every request in flight fails with reason.
-- @tparam[opt] string reason
function _M:close(reason)
  if self.sock then
    -- a cosocket of another request or timer cannot even be closed from
    -- here: nginx closes it when that one ends
    if not self.owner or self.owner == ksocket.context() then self.sock:close() end
    self.sock = nil
  end
  self.owner = nil
  self.closed_reason = reason or "closed"
  self.inflight, self.first, self.last = {}, 1, 0
  self.ready = {}
  self.noreply = {}
  self.rd, self.neg = nil, nil
end

--- Whether the socket is open and versions negotiated.
-- @treturn boolean
function _M:is_connected()
  return self.sock ~= nil and self.neg == nil
end

local function fail(self, msg, code)
  self:close(msg)
  return nil, msg, code
end

local function join(st)
  local parts = st.parts
  if #parts == 1 then return parts[1] end
  return table.concat(parts)
end

-- Reads until st holds st.need bytes or the deadline passes: true | nil, err.
-- Bytes read before a timeout stay in st (the read resumes later).
local function fill(self, st, deadline)
  local sock = self.sock
  local tried = false
  while st.have < st.need do
    local left = deadline - self.now()
    if left <= 0 and tried then return nil, "timeout" end
    tried = true
    -- no time left: one look at what is there (0 = do not block, where the
    -- socket's timeout is a per-call deadline; others get 1 ms)
    if left < 1 then left = sock.total_timeout and 0 or 1 end
    local want = st.need - st.have
    local piece = sock.total_timeout and LUASOCKET_PIECE or CHUNK
    if want > piece then want = piece end
    sock:settimeout(math.ceil(left))
    local data, err, partial = sock:receive(want)
    data = data or partial
    if data and #data > 0 then
      st.parts[#st.parts + 1] = data
      st.have = st.have + #data
    end
    if err and err ~= "timeout" and st.have < st.need then return nil, err end
  end
  return true
end

local function next_part(st, need)
  st.parts, st.have, st.need = {}, 0, need
end

-- A read that stopped: a timeout before the caller's deadline (soft) keeps
-- the connection and the partial frame; anything else closes it.
function _M:_read_failed(started, err, soft)
  if err == "timeout" and soft then
    return nil, ("%s: no answer yet (deadline reached)"):format(self:name()), "timeout"
  end
  -- a close before any byte of the frame: maybe a broker refusing the request
  self.clean_close = (err == "closed" and not started)
  return fail(self, self:name() .. ": " .. (started and "mid-frame " or "") .. "receive failed: " .. tostring(err),
    err == "timeout" and "timeout" or "network")
end

-- Reads one whole frame whose correlation id must be `expect` (or one whose
-- reply is dropped): the size prefix is checked against
-- receive_message_max_bytes and the correlation id against expect before
-- the rest is read. Returns corr, the frame after the correlation id.
function _M:_read_frame(deadline, soft, expect)
  local sock = self.sock
  if sock.read_frame then return self:_read_whole(sock, deadline, soft, expect) end
  local st = self.rd
  if not st then
    st = { parts = {}, have = 0, need = 4 }
    self.rd = st
  end
  local ok, err
  if not st.size then
    ok, err = fill(self, st, deadline)
    if not ok then return self:_read_failed(st.size ~= nil or st.have > 0, err, soft) end
    local size = be32(join(st), 1)
    if size < 4 or size > self.receive_message_max_bytes then return self:_bad_size(size) end
    st.size = size
    next_part(st, 4)
  end
  if not st.corr then
    ok, err = fill(self, st, deadline)
    if not ok then return self:_read_failed(st.size ~= nil or st.have > 0, err, soft) end
    local got = be32(join(st), 1)
    if got ~= expect and not self.noreply[got] then return self:_bad_corr(expect, got) end
    st.corr = got
    next_part(st, st.size - 4)
  end
  ok, err = fill(self, st, deadline)
  if not ok then return self:_read_failed(st.size ~= nil or st.have > 0, err, soft) end
  self.rd = nil
  return st.corr, st.have > 0 and join(st) or ""
end

function _M:_bad_size(size)
  if size < 0 then return fail(self, self:name() .. ": bad frame size " .. size, "protocol") end
  if size < 4 then return fail(self, self:name() .. ": frame too short for a response header", "protocol") end
  return fail(self, ("%s: frame of %d bytes exceeds receive_message_max_bytes (%d)"):format(self:name(), size,
    self.receive_message_max_bytes), "limit")
end

function _M:_bad_corr(expect, got)
  return fail(self, ("%s: correlation id mismatch: expected %d, got %d"):format(self:name(), expect, got), "protocol")
end

-- _read_frame on a socket that reads whole frames itself (read_frame:
-- kafka.socket's inbox): the frame is a kafka.bytes, the same checks.
function _M:_read_whole(sock, deadline, soft, expect)
  local left = deadline - self.now()
  -- no time left: one look at what is there
  local ms, max = left > 0 and math.ceil(left) or 0, self.receive_message_max_bytes
  local got, frame, other = sock:read_frame(ms, max, expect)
  if got == false and other and self.noreply[other] then
    got, frame, other = sock:read_frame(ms, max, other) -- a reply that is dropped
  end
  if got then return got, frame end
  if got == false then
    if other then return self:_bad_corr(expect, other) end
    return self:_bad_size(frame)
  end
  return self:_read_failed(other, frame, soft)
end

-- The ApiVersions body we send.
local AV_BODY = { client_software_name = "lua-kafka", client_software_version = _M.VERSION }

-- ApiVersions, with the fallback rules: a broker that does not know the
-- version asked answers error 35 with a v0 body (carrying its own range
-- since Kafka 2.4): retry with that range's max, else v0. Resumable: a
-- caller's deadline leaves the request in flight (self.neg keeps where it
-- stands).
function _M:_negotiate(deadline)
  local n = self.neg
  while true do
    if not n.corr then
      local v = table.remove(n.try, 1)
      while v and n.seen[v] do v = table.remove(n.try, 1) end
      if not v then return nil, self:name() .. ": ApiVersions negotiation failed", "unsupported" end
      n.seen[v], n.v = true, v
      local body = AV_BODY
      if v >= 5 and self.cluster_id and self.node_id then
        -- KIP-1242: a broker that is not this node of this cluster (an address
        -- reused by another cluster, a node moved) answers REBOOTSTRAP_REQUIRED
        body = { client_software_name = AV_BODY.client_software_name,
          client_software_version = AV_BODY.client_software_version,
          cluster_id = self.cluster_id, node_id = self.node_id }
      end
      local corr, err, code = self:_send_raw(API_VERSIONS, v, body, { raw = true }, deadline)
      if not corr then return nil, err, code end
      n.corr = corr
    end
    local frame, err, code = self:receive(n.corr, deadline)
    if not frame then return nil, err, code end
    local v = n.v
    n.corr = nil
    local ok, body = proto.decode_response(API_VERSIONS, v, frame, { unsized = true, correlation_id = 0 })
    if not ok then body = nil end
    if body and body.error_code == proto.errors.NONE then
      local bv = {}
      for _, k in ipairs(body.api_keys or {}) do bv[k.api_key] = { min = k.min_version, max = k.max_version } end
      self.broker_versions = bv
      -- the cluster's finalized feature levels (ApiVersions v3+, KIP-584),
      -- e.g. transaction.version; the epoch tells a newer view from an older one
      local ff = {}
      for _, f in ipairs(body.finalized_features or {}) do ff[f.name] = f.max_version_level end
      self.finalized_features, self.features_epoch = ff, body.finalized_features_epoch or -1
      return true
    end
    -- error 35 comes with a v0 body: read it for the broker's own range
    local ok0, v0 = proto.decode_response(API_VERSIONS, 0, frame, { unsized = true, correlation_id = 0 })
    if not ok0 then v0 = nil end
    local max
    if v0 and v0.error_code == proto.errors.UNSUPPORTED_VERSION then
      for _, k in ipairs(v0.api_keys or {}) do
        if k.api_key == API_VERSIONS then max = k.max_version end
      end
    elseif body and body.error_code == proto.errors.REBOOTSTRAP_REQUIRED then
      return nil, ("%s: ApiVersions: REBOOTSTRAP_REQUIRED (not node %s of cluster %s)"):format(self:name(),
        tostring(self.node_id), tostring(self.cluster_id)), "rebootstrap"
    elseif body and body.error_code ~= proto.errors.UNSUPPORTED_VERSION then
      return nil, ("%s: ApiVersions failed: %s"):format(self:name(), proto.errors.info(body.error_code).name), "protocol"
    end
    if max and max < v then n.try[#n.try + 1] = max end
    if v > 2 then n.try[#n.try + 1] = 2 end
    n.try[#n.try + 1] = 0
  end
end

-- Opens the socket (bounded by connect_timeout_ms and the deadline).
function _M:_open(deadline)
  local sock, err = self.factory()
  if not sock then return nil, "cannot create socket: " .. tostring(err), "network" end
  local t = math.min(self.connect_timeout_ms, deadline - self.now())
  sock:settimeout(math.max(1, math.ceil(t)))
  local ok
  ok, err = sock:connect(self.host, self.port)
  if not ok then
    sock:close()
    return nil, ("connect to %s failed: %s"):format(self:name(), tostring(err)),
      err == "timeout" and "timeout" or "network"
  end
  ok, err = ksocket.secure(sock, self.host, self.port, self.security, self.connect_timeout_ms)
  if not ok then
    sock:close()
    return nil, ("connect to %s failed: %s"):format(self:name(), tostring(err)), "ssl"
  end
  self.sock = sock
  local kind = ksocket.kind(sock)
  self.transport = kind
  if self.transports then self.transports[kind] = (self.transports[kind] or 0) + 1 end
  self.owner = kind == "cosocket" and ksocket.context() or nil
  self.closed_reason = nil
  self.inflight, self.first, self.last, self.ready, self.noreply = {}, 1, 0, {}, {}
  self.rd, self.clean_close = nil, nil
  return true
end

-- A broker older than 0.10 closes the connection on ApiVersions (an api it
-- does not know) but answers Metadata v0. One close is not evidence of that
-- (a broker going down closes too): the close must repeat on a fresh
-- connection with ApiVersions v0, and Metadata v0 must then be answered.
function _M:_probe_old(deadline)
  local ok = self:_open(deadline)
  if not ok then return nil end
  self.neg = { try = { 0 }, seen = {} }
  local err, code
  ok, err, code = self:_negotiate(deadline)
  if ok then
    self.neg = nil
    return true
  end
  if not self.clean_close then return nil, err, code end
  self.neg = nil
  if not self:_open(deadline) then return nil end
  local corr = self:_send_raw(METADATA, 0, { topics = {} }, { raw = true }, deadline)
  if not corr or not self:receive(corr, deadline) then return nil end
  self.broker_versions = false
  return true
end

-- A cosocket belongs to the nginx request or timer that opened it: used
-- from another one it raises "bad request". An idle connection opened by
-- another context is dropped here (nginx closes its socket when that
-- context ends) and the next call opens a new one in this context; one
-- with requests in flight for another context is misuse and raises.
function _M:_check_owner()
  local owner = self.owner
  if not owner or owner == ksocket.context() then return end
  if self.first <= self.last or self.rd or self.neg then
    error(("kafka: %s is in use by another nginx request or timer (a cosocket belongs to the one that opened it: "
      .. "give each timer its own client; a producer in background mode has its own connections)"):format(self:name()), 3)
  end
  self:close("opened by another nginx request or timer")
end

--- Opens the socket (TLS and SASL as configured) and negotiates versions, on
-- every new socket (a broker can be upgraded or replaced between
-- connections). With a deadline that passes during the negotiation, nil,
-- err, "timeout" with the negotiation left in flight: the next connect()
-- goes on with it.
-- @tparam[opt] number deadline a time of the connection's clock (ms)
-- @return true, or nil, err, code
function _M:connect(deadline)
  if self.owner then self:_check_owner() end
  if self.sock and not self.neg then return true end
  deadline = deadline or math.huge
  local ok, err, code
  if not self.sock then
    ok, err, code = self:_open(deadline)
    if not ok then return nil, err, code end
    if not self.use_api_versions then
      self.broker_versions = false
      return self:_authenticate()
    end
    local _, ours = proto.versions(API_VERSIONS)
    -- v3 unless the broker can be asked to confirm its cluster and node (v5,
    -- offered by the cluster's brokers): v4 adds nothing we read, and asking
    -- a broker a version it lacks costs a round trip
    local v5 = self.cluster_id and self.node_id and (self.av_max or 0) >= 5
    self.neg = { try = { math.min(ours, v5 and 5 or 3) }, seen = {}, first = true }
  end
  local first, sock = self.neg.first, self.sock
  ok, err, code = self:_negotiate(deadline)
  if ok then
    self.neg = nil
    return self:_authenticate()
  end
  if code == "timeout" and self.sock and self.neg and self.neg.corr and self:waiting(self.neg.corr) then
    return nil, err, code
  end
  -- a TLS alert, or a TLS/plaintext mix-up, is not an old broker (the
  -- failed read may have closed the connection: the socket keeps the error)
  if ksocket.tls_error(sock) then
    self:close(err)
    return nil, err, "ssl"
  end
  local clean = self.clean_close
  self:close(err)
  if first and clean and code == "network" then
    ok = self:_probe_old(deadline)
    if ok then return self:_authenticate() end
    self:close(err)
  end
  return nil, err, code
end

--- The highest version of an api both sides support (capped as configured).
-- @param api the key or the name
-- @tparam[opt] integer upto the highest version the caller's body can be sent at, in place
-- of the default cap (a commit whose topics all have ids goes up to v10)
-- @return the version, or nil, err
function _M:version(api, upto)
  local key = type(api) == "number" and api or proto.api_key(api)
  if not key then return nil, "unknown api " .. tostring(api), "unsupported" end
  local lo, hi = proto.versions(key)
  if upto and upto < hi then hi = upto end
  local cap = self.max_versions[key] or self.max_versions[proto.api_name(key)] or (not upto and DEFAULT_CAPS[key])
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

function _M:_send_raw(api, version, body, opts, deadline)
  local corr = self.corr + 1
  if corr > 0x7fffffff then corr = 1 end
  self.corr = corr
  -- a socket that writes a frame in pieces takes a Produce's uncompressed
  -- records from their builders, not copied into the frame and a string
  local frame, eerr, ecode = proto.encode_request(api, version, { correlation_id = corr, client_id = self.client_id },
    body, self.sock.write_pieces and GATHER or nil)
  if not frame then return nil, eerr, ecode end
  local t = self.now()
  local limit = self.request_timeout_ms
  if deadline and deadline - t < limit then limit = deadline - t end
  self.sock:settimeout(math.max(1, math.ceil(limit)))
  local ok, err = self.sock:send(frame)
  if type(frame) ~= "string" then proto.release(frame) end -- its memory back at once, not at the next collection
  if not ok then
    return fail(self, ("%s: send failed: %s"):format(self:name(), tostring(err)),
      err == "timeout" and "timeout" or "network")
  end
  if opts and opts.no_response then
    self.noreply[corr] = true
  else
    self.last = self.last + 1
    self.inflight[self.last] = { corr = corr, api = api, version = version, opts = opts,
      deadline = t + self.request_timeout_ms + (opts and opts.timeout_ms or 0) }
  end
  return corr
end

--- Sends a request; its answer is read by receive().
-- @param api the key or the name
-- @tparam integer version the version
-- @tparam table body the request
-- @tparam[opt] table opts `no_response` (the broker sends none: Produce with acks=0),
-- `timeout_ms` (how much longer than request_timeout_ms the answer may take: the
-- broker-side wait asked for), `deadline` (the caller's), `decode` (decode options
-- for the response), `raw` (receive() returns the frame after the correlation id)
-- @return the correlation id, or nil, err, code
function _M:send(api, version, body, opts)
  if self.owner then self:_check_owner() end
  local deadline = opts and opts.deadline
  if not self:is_connected() then
    local ok, err, code = self:connect(deadline)
    if not ok then return nil, err, code end
  end
  if self.reauth_at then -- KIP-368: re-authenticate before the session ends
    local ok, err, code = self:_maybe_reauthenticate()
    if not ok then return nil, err, code end
  end
  return self:_send_raw(api, version, body, opts, deadline)
end

--- The number of requests whose answers are awaited.
-- @treturn integer
function _M:in_flight() return self.last - self.first + 1 end

-- ------------------------------------------------------------- SASL

local HANDSHAKE, AUTHENTICATE = proto.api.SaslHandshake, proto.api.SaslAuthenticate

local function auth_fail(conn, msg)
  conn:close(msg)
  return nil, msg, "auth"
end

-- Legacy framing (SaslHandshake v0 without SaslAuthenticate, Kafka 0.10.0-0.10.x
-- and pre-0.10 brokers): raw size-prefixed tokens on the socket.
function _M:_sasl_raw_round(bytes)
  local sock = self.sock
  local n = #bytes
  local head = string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
  sock:settimeout(self.request_timeout_ms)
  local ok, err = sock:send(head .. bytes)
  if not ok then return nil, "send failed: " .. tostring(err) end
  local h
  h, err = sock:receive(4)
  if not h then return nil, "receive failed: " .. tostring(err) .. " (a refused authentication closes the connection)" end
  local total = proto.frame_length(h)
  local len = (total or 0) - 4
  if not total or len < 0 or len > 1048576 then return nil, "bad SASL token size" end
  if len == 0 then return "" end
  return sock:receive(len)
end

-- One SASL exchange with the broker (the mechanism from kafka.sasl).
-- reauth: a KIP-368 re-authentication on a connection that may have
-- requests in flight (their responses are read ahead and kept by receive).
function _M:_sasl_exchange(reauth)
  local sec = self.security
  local s = sec.sasl
  local mech_name = s.mechanism
  local who = ("%s: SASL %s"):format(self:name(), mech_name)
  local hv, err = self:version(HANDSHAKE)
  if not hv then
    if self.broker_versions == false then hv = 0 else return auth_fail(self, who .. ": " .. tostring(err)) end
  end
  local av = self.broker_versions and self.broker_versions[AUTHENTICATE] and self:version(AUTHENTICATE)
  if hv < 1 then av = nil end -- v0 handshake: raw tokens follow
  if reauth and not av then return true end -- KIP-368 needs SaslAuthenticate v1+
  local mech
  mech, err = sasl.start(s, sec.now)
  if not mech then return auth_fail(self, who .. ": " .. tostring(err)) end

  local corr, code
  corr, err, code = self:send(HANDSHAKE, hv, { mechanism = mech_name })
  if not corr then return nil, who .. ": " .. tostring(err), code end
  local resp
  resp, err, code = self:receive(corr)
  if not resp then return nil, who .. ": SaslHandshake: " .. tostring(err), code end
  if resp.error_code ~= 0 then
    local e = errors.info(resp.error_code)
    return auth_fail(self, ("%s: the broker refused the mechanism: %s (enabled: %s)"):format(who, e.name,
      table.concat(resp.mechanisms or {}, ", ")))
  end

  local msg = mech:start()
  local lifetime
  while true do
    local server
    if av then
      corr, err, code = self:send(AUTHENTICATE, av, { auth_bytes = msg })
      if not corr then return nil, who .. ": " .. tostring(err), code end
      resp, err, code = self:receive(corr)
      if not resp then return nil, who .. ": SaslAuthenticate: " .. tostring(err), code end
      if resp.error_code ~= 0 then
        local e = errors.info(resp.error_code)
        return auth_fail(self, ("%s authentication failed: %s (%s)"):format(who,
          tostring(resp.error_message or e.message), e.name))
      end
      server = resp.auth_bytes or ""
      if resp.session_lifetime_ms and resp.session_lifetime_ms > 0 then lifetime = resp.session_lifetime_ms end
    else
      server, err = self:_sasl_raw_round(msg)
      if not server then return auth_fail(self, ("%s authentication failed: %s"):format(who, tostring(err))) end
    end
    local nxt
    nxt, err = mech:step(server)
    if nxt == true then break end
    if not nxt then return auth_fail(self, ("%s authentication failed: %s"):format(who, tostring(err))) end
    msg = nxt
  end
  self.sasl_authenticated = (self.sasl_authenticated or 0) + 1
  if lifetime then
    -- re-authenticate at 85-95% of the session, as Kafka's Java client does
    local t = sec.now()
    self.reauth_at = t + lifetime * (0.85 + 0.1 * math.random())
    self.session_end = t + lifetime
    self.session_lifetime_ms = lifetime
  else
    self.reauth_at = nil
  end
  return true
end

-- After versions are known on a new connection (nothing in flight): SASL
-- when the security settings ask for it; a failure closes the connection.
function _M:_authenticate()
  local sec = self.security
  if not sec or not sec.sasl then return true end
  self._sasl_busy = true
  self.reauth_started = nil -- a new connection: no re-authentication yet
  local ok, err, code = self:_sasl_exchange(false)
  self._sasl_busy = false
  if not ok then
    self:close(err)
    return nil, err, code
  end
  return true
end

-- The broker refuses a re-authentication that starts within a second of
-- the last one on a connection (KafkaChannel: ILLEGAL_SASL_STATE), so a
-- session shorter than that (a token or connections.max.reauth.ms under
-- about 1.2 s) is replaced by a new connection instead; the margin covers
-- the network's jitter between our clock and the broker's receipt.
local MIN_REAUTH_INTERVAL_MS = 1100

-- Re-authenticates once the session is past its re-authentication time
-- (KIP-368). Requests in flight keep going: their responses arrive first
-- and wait in self.ready.
function _M:_maybe_reauthenticate()
  if self._sasl_busy or not self.reauth_at or not self.sock then return true end
  local t = self.security.now()
  if t < self.reauth_at then return true end
  local too_soon = self.reauth_started and t - self.reauth_started < MIN_REAUTH_INTERVAL_MS
  if t >= self.session_end or too_soon then
    -- an idle connection past its session: the broker closes it on the
    -- next request, re-authentication included (and one re-authenticated
    -- less than a second ago would be refused). Responses still due are
    -- read first and kept; then a new connection authenticates afresh.
    local kept = {}
    while self:in_flight() > 0 do
      local head = self.inflight[self.first]
      local body, err, code = self:receive(head.corr)
      if not body then return nil, err, code end
      kept[head.corr] = body
    end
    for corr, body in pairs(self.ready) do kept[corr] = body end
    self:close(too_soon and "SASL session shorter than the broker's interval between re-authentications"
      or "SASL session expired")
    local ok, err, code = self:connect()
    if not ok then return nil, err, code end
    for corr, body in pairs(kept) do self.ready[corr] = body end
    self.sasl_reconnected = (self.sasl_reconnected or 0) + 1
    return true
  end
  self._sasl_busy = true
  self.reauth_started = t
  local ok, err, code = self:_sasl_exchange(true)
  self._sasl_busy = false
  if ok then self.sasl_reauthenticated = (self.sasl_reauthenticated or 0) + 1 end
  return ok, err, code
end

--- Reads responses in order until corr's; ones for other requests in flight
-- are kept for their receive(). When the deadline passes before the
-- answer: nil, err, "timeout" and the request stays in flight (see waiting()).
-- @tparam integer corr a correlation id send() returned
-- @tparam[opt] number deadline a time of the connection's clock (ms)
-- @return the decoded response body, or nil, err, code
function _M:receive(corr, deadline)
  if self.owner then self:_check_owner() end
  local body = self.ready[corr]
  if body ~= nil then
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
    local d, soft = head.deadline, false
    if deadline and deadline < d then d, soft = deadline, true end
    local got, frame, code = self:_read_frame(d, soft, head.corr)
    if not got then return nil, frame, code end
    if got ~= head.corr then
      self.noreply[got] = nil
    else
      self.inflight[self.first] = nil
      self.first = self.first + 1
      local o = head.opts
      local result
      if o and o.raw then
        result = type(frame) == "string" and frame or tostring(frame) -- the frame's bytes, as a string
      elseif not head.abandoned then
        local dopts = { unsized = true, correlation_id = got }
        if o and o.decode then
          for k, x in pairs(o.decode) do dopts[k] = x end
        end
        local c, decoded, derr = proto.decode_response(head.api, head.version, frame, dopts)
        if not c then
          return fail(self, ("%s: bad %s v%d response: %s (%s)"):format(self:name(), tostring(head.api), head.version,
            tostring(decoded), tostring(derr)), "protocol")
        end
        result = decoded
      end
      if head.corr == corr then return result end
      if not head.abandoned then self.ready[head.corr] = result end
    end
  end
end

--- Whether corr's answer is still expected (in flight or read ahead).
-- @tparam integer corr a correlation id
-- @treturn boolean
function _M:waiting(corr)
  if self.ready[corr] ~= nil then return true end
  for i = self.first, self.last do
    local e = self.inflight[i]
    if e and e.corr == corr then return true end
  end
  return false
end

--- Nobody will receive corr's answer: it is dropped when read.
-- @tparam integer corr a correlation id
function _M:abandon(corr)
  if self.ready[corr] ~= nil then
    self.ready[corr] = nil
    return
  end
  for i = self.first, self.last do
    local e = self.inflight[i]
    if e and e.corr == corr then e.abandoned = true end
  end
end

--- send and receive at the negotiated version.
-- @param api the key or the name
-- @tparam table body the request
-- @tparam[opt] table opts `version` forces one, `upto` as version()'s, `deadline` bounds it
-- @return the response body, or nil, err, code
-- @usage local md, err, code = conn:request("Metadata", { topics = {} })
function _M:request(api, body, opts)
  if self.owner then self:_check_owner() end
  local deadline = opts and opts.deadline
  if not self:is_connected() then
    local ok, err, code = self:connect(deadline)
    if not ok then return nil, err, code end
  end
  local v = opts and opts.version
  if not v then
    local err, code
    v, err, code = self:version(api, opts and opts.upto)
    if not v then return nil, err, code end
  end
  local corr, err, code = self:send(api, v, body, opts)
  if not corr then return nil, err, code end
  if opts and opts.no_response then return {} end
  local resp
  resp, err, code = self:receive(corr, deadline)
  if not resp and code == "timeout" and self:waiting(corr) then
    -- the caller gives up: this answer is not wanted any more
    self:abandon(corr)
  end
  return resp, err, code
end

return _M
