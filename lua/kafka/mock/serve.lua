-- kafka.mock.serve: one client connection to a mock broker, whatever the
-- transport: bytes in, whole frames decoded and handed to the handler of
-- their API, answers queued in request order (held by delays, freezes and
-- waiting handlers) for the transport to send.
local proto = require "kafka.proto"
local Log = require "kafka.mock.log"
local handlers = require "kafka.mock.handlers"
local share = require "kafka.mock.share"

local table = table
local ipairs, setmetatable, pcall = ipairs, setmetatable, pcall

local API = proto.api
local E = proto.errors
local i16, i32 = Log.i16, Log.i32

local SUPPORTED = handlers.SUPPORTED
local NO_RESPONSE = handlers.NO_RESPONSE
local api_versions_body = handlers.api_versions_body
local MAX_FRAME = 104857600 -- Kafka's socket.request.max.bytes
local RAW = { raw_records = true }

local _M = {}

local Conn = {}
Conn.__index = Conn
_M.Conn = Conn

-- open(cluster, broker, transport, host) -> a connection the cluster tracks
-- (cluster.conns) until it closes. Fields: cluster, broker, transport
-- ("inproc" | "tcp"), host (the peer: a group member's client_host), chunks/have
-- (bytes received, not yet a whole frame), outq (answers in request order:
-- {corr, api, version, at, frame | close, drop, done}), closed; the
-- TCP transport adds sock, wq/wpos, close_pending; a handler sets
-- close_after (acks 0 with an error: Kafka closes the connection).
function _M.open(cluster, b, transport, host)
  local c = setmetatable({ cluster = cluster, broker = b, transport = transport, chunks = {}, have = 0,
    outq = {}, closed = false, host = host or "127.0.0.1" }, Conn)
  cluster.conns[c] = true
  return c
end

function Conn:close()
  if self.closed then return end
  self.closed = true
  self.outq = {}
  self.cluster.conns[self] = nil
  for i = #self.cluster.parked, 1, -1 do
    if self.cluster.parked[i].conn == self then table.remove(self.cluster.parked, i) end
  end
  -- its share sessions end (what their members hold is released)
  share.conn_closed(self.cluster, self)
  if self.sock then
    self.sock:close()
    self.sock = nil
  end
end

local serve

-- feed(data): bytes from the client; whole frames are served at once
function Conn:feed(data)
  if self.closed then return end
  if #data > 0 then
    self.chunks[#self.chunks + 1] = data
    self.have = self.have + #data
  end
  while not self.closed and not self.broker.frozen and self.have >= 4 do
    local buf = #self.chunks == 1 and self.chunks[1] or table.concat(self.chunks)
    self.chunks = { buf }
    local size = i32(buf, 1)
    if size < 8 or size > MAX_FRAME then
      self.cluster.stats.closed_bad = self.cluster.stats.closed_bad + 1
      return self:close()
    end
    if self.have < size + 4 then return end
    local frame = buf:sub(1, size + 4)
    local rest = buf:sub(size + 5)
    self.chunks = rest ~= "" and { rest } or {}
    self.have = #rest
    serve(self.cluster, self, frame)
  end
end

-- The answer the connection may send next (by now, when given), if any:
-- none while its broker is frozen
function Conn:_due(now)
  local item = self.outq[1]
  if item and (item.frame or item.close) and not self.broker.frozen and (not now or item.at <= now) then return item end
end

function Conn:_push(item)
  self.outq[#self.outq + 1] = item
end

-- A request answered with nothing (acks 0) leaves the queue; a dropped one
-- still closes the connection in its turn
function Conn:_unpush(item)
  for i, x in ipairs(self.outq) do
    if x == item then
      table.remove(self.outq, i)
      if item.drop then self.outq[#self.outq + 1] = { close = true, at = item.at } end
      return
    end
  end
end

-- The answer to item is ready: encoded now, sent when it is first in line
local function finish(item, body)
  if item.done then return end
  item.done = true
  if item.drop then
    item.close = true
    return
  end
  item.frame = proto.encode_response(item.api, item.version, item.corr, body)
end

local function bad_client(conn)
  conn.cluster.stats.closed_bad = conn.cluster.stats.closed_bad + 1
  conn:close()
end

-- serve(cluster, conn, frame): one request frame, answered now, later
-- (reply) or never (NO_RESPONSE); a version the mock does not speak
-- closes the connection as Kafka does, except ApiVersions
function serve(self, conn, frame)
  local key, version = i16(frame, 5), i16(frame, 7)
  local corr = i32(frame, 9)
  local range = SUPPORTED[key]
  local now = self.now()
  self:_check_election(now) -- (an election due while no socket waited)
  if key == API.ApiVersions and range and version > range[2] then
    -- an ApiVersions the mock does not know: error 35 with a v0 body, as Kafka does
    local body = api_versions_body(E.UNSUPPORTED_VERSION)
    conn:_push({ corr = corr, at = now, frame = proto.encode_response(API.ApiVersions, 0, corr, body) })
    return
  end
  if not range or version < range[1] or version > range[2] then return bad_client(conn) end
  local ok, req = pcall(proto.decode_request, frame, RAW)
  if not ok or not req then return bad_client(conn) end
  self.stats.requests[key] = (self.stats.requests[key] or 0) + 1
  local item = { corr = corr, api = key, version = version, at = now + (self.delays[key] or 0) }
  if (self.drops[key] or 0) > 0 then
    self.drops[key] = self.drops[key] - 1
    if self.drops[key] == 0 then self.drops[key] = nil end
    item.drop = true
  end
  conn:_push(item)
  local reply = function(body) finish(item, body) end
  local h = self.handlers[proto.api_name(key)]
  local body = h(self, conn, req.body or {}, version, reply, req, item)
  if body == NO_RESPONSE then
    conn:_unpush(item)
  elseif body then
    reply(body)
  end
end
_M.serve = serve

return _M
