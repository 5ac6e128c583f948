--- kafka: the package. Submodules load on first use, so requiring "kafka"
-- costs nothing for what you do not use.
-- @module kafka
-- @usage local kafka = require "kafka"
-- local client = kafka.client.new { brokers = "127.0.0.1:9092" }
-- local p = kafka.producer.new(client)
-- @field proto kafka.proto, the codec
-- @field errors kafka.errors, the error codes
-- @field check kafka.check, the validation at the door
-- @field client kafka.client, the cluster
-- @field producer kafka.producer
-- @field consumer kafka.consumer
-- @field share_consumer kafka.share_consumer, a share group member (KIP-932, docs/share.md)
-- @field connection kafka.connection, one broker connection
-- @field socket kafka.socket, the transport seam
-- @field admin kafka.admin, topics, configs, groups, records (docs/admin.md)
-- @field _VERSION "lua-kafka scm"
local require, rawset, setmetatable = require, rawset, setmetatable

local modules = {
  proto = "kafka.proto",
  errors = "kafka.errors",
  check = "kafka.check",
  client = "kafka.client",
  producer = "kafka.producer",
  consumer = "kafka.consumer",
  share_consumer = "kafka.share_consumer",
  connection = "kafka.connection",
  socket = "kafka.socket",
  admin = "kafka.admin",
}

local _M = { _VERSION = "lua-kafka scm" }

return setmetatable(_M, {
  __index = function(t, k)
    local name = modules[k]
    if not name then return nil end
    local m = require(name)
    rawset(t, k, m)
    return m
  end,
})
