-- resty.kafka.errors (lua-resty-kafka 0.23's API, on lua-kafka): Kafka's
-- error codes as the original's table, code -> {msg = NAME, retriable =
-- boolean}, made from kafka.errors (every code Kafka 4.x has, not the
-- original's hand-kept list).
local errors = require "kafka.errors"

local pairs, type = pairs, type

local _M = {}

for code, e in pairs(errors) do
  if type(code) == "number" and type(e) == "table" then
    _M[code] = { msg = e.name, retriable = e.retriable }
  end
end

return _M
