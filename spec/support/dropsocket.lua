-- A fault between the client and a real broker, at the transport seam
-- (kafka.socket's interface, over luasocket TCP): the broker gets every
-- request and acts on it, but the answer to the next `n` Produce requests
-- is thrown away and the connection closed, as when a broker wrote a batch
-- and the network died before its answer came back. (A separate TCP proxy
-- process would need to rewrite every Metadata answer to keep the client
-- on it; the socket seam sits at the same place on the wire path.)
--
--   local drop = require "support.dropsocket"
--   local d = drop.new()
--   local client = kafka.client.new { brokers = ..., socket = d.factory }
--   d:drop_produce(1)        -- the next Produce answer is lost
--   d.dropped                -- how many were
--   d:count("AddPartitionsToTxn") -- requests of an API sent through it (every version)
--   d:count("Produce", 12)        -- of one version
local ksocket = require "kafka.socket"
local proto = require "kafka.proto"

local _M = {}
local mt = { __index = _M }

local function be32(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

function _M.new()
  local self = setmetatable({ armed = 0, dropped = 0, sent = {} }, mt)
  self.factory = function() return self:_wrap(ksocket.luasocket_tcp()) end
  return self
end

function _M:drop_produce(n) self.armed = self.armed + (n or 1) end

-- count(api [, version]) -> how many requests of the API (of that version) were sent
function _M:count(api, version)
  local by = self.sent[proto.api_key(api)] or {}
  if version then return by[version] or 0 end
  local n = 0
  for _, k in pairs(by) do n = n + k end
  return n
end

local w_mt = {}
w_mt.__index = w_mt

function _M:_wrap(s)
  return setmetatable({ s = s, d = self, acc = "", ready = "", targets = {} }, w_mt)
end

function w_mt:settimeout(ms) return self.s:settimeout(ms) end
function w_mt:connect(host, port) return self.s:connect(host, port) end
function w_mt:close() return self.s:close() end

function w_mt:send(data)
  if self.dead then return nil, "closed" end
  -- a request frame: size, api_key, api_version, correlation_id
  if #data >= 12 then
    local key = data:byte(5) * 256 + data:byte(6)
    local version = data:byte(7) * 256 + data:byte(8)
    local by = self.d.sent[key]
    if not by then
      by = {}
      self.d.sent[key] = by
    end
    by[version] = (by[version] or 0) + 1
    if key == 0 and self.d.armed > 0 then
      self.d.armed = self.d.armed - 1
      self.targets[be32(data, 9)] = true
    end
  end
  return self.s:send(data)
end

-- reads whole response frames into self.ready; a targeted one closes the connection
function w_mt:_pump()
  while true do
    local want
    if #self.acc < 4 then want = 4 - #self.acc else want = 4 + be32(self.acc, 1) - #self.acc end
    if want == 0 then
      local frame = self.acc
      self.acc = ""
      if self.targets[be32(frame, 5)] then
        self.d.dropped = self.d.dropped + 1
        self.dead = true
        self.s:close()
        return nil, "closed"
      end
      self.ready = self.ready .. frame
      return true
    end
    local got, err, part = self.s:receive(want)
    if not got then
      self.acc = self.acc .. (part or "")
      return nil, err
    end
    self.acc = self.acc .. got
  end
end

function w_mt:receive(n)
  while #self.ready < n do
    if self.dead then return nil, "closed", "" end
    local ok, err = self:_pump()
    if not ok then return nil, err, "" end
  end
  local out = self.ready:sub(1, n)
  self.ready = self.ready:sub(n + 1)
  return out
end

return _M
