-- kafka: the package. Submodules load on first use, so requiring "kafka"
-- costs nothing for what you do not use.
local require, rawset, setmetatable = require, rawset, setmetatable

local modules = {
  proto = "kafka.proto",
  errors = "kafka.errors",
  check = "kafka.check",
  client = "kafka.client",
  producer = "kafka.producer",
  consumer = "kafka.consumer",
  connection = "kafka.connection",
  socket = "kafka.socket",
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
