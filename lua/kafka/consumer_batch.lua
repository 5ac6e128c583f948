--- kafka.consumer_batch: what kafka.consumer's poll_batch returns, one
-- object per partition: the records it delivers from that partition, in
-- offset order, as columns (one array per field) instead of a table per
-- message. Fields: `topic`, `partition`, `count`, `high_watermark`, and
-- the columns `offsets`, `timestamps`, `keys`, `values` (arrays 1..count;
-- keys and values are nil where the record's is null, so iterate with
-- `for i = 1, b.count`, not ipairs). Headers stay the record's raw bytes
-- until `b:headers(i)` decodes them.
--
--   for _, b in ipairs(c:poll_batch(1000) or {}) do
--     local offsets, values = b.offsets, b.values
--     for i = 1, b.count do handle(b.topic, b.partition, offsets[i], values[i]) end
--   end
-- @module kafka.consumer_batch
local proto = require "kafka.proto"

local decode_headers = proto.decode_headers
local error, setmetatable, tostring, ipairs = error, setmetatable, tostring, ipairs

local _M = {}
local batch = {}
_M.methods = batch
local mt = { __index = batch }

-- A new empty batch of a partition (the decoder fills its columns).
function _M.new(topic, partition, high_watermark)
  return setmetatable({ topic = topic, partition = partition, high_watermark = high_watermark, count = 0,
                        offsets = {}, timestamps = {}, keys = {}, values = {}, raw_headers = {} }, mt)
end

local COLUMNS = { "offsets", "timestamps", "keys", "values", "raw_headers" }

-- truncate(b, n): only the first n records stay (a decode that failed
-- half-way may have filled columns past b.count)
function _M.truncate(b, n)
  local offs = b.offsets
  local last = #offs
  if last < b.count then last = b.count end
  for _, name in ipairs(COLUMNS) do
    local col = b[name]
    for i = last, n + 1, -1 do col[i] = nil end
  end
  b.count = n
end

-- Raises for an index that is not one of the batch's records (misuse).
local function bad_index(self, where, i)
  error(("%s: record index %s out of 1..%d"):format(where, tostring(i), self.count), 3)
end

--- The i-th record's offset.
-- @tparam integer i 1..count
-- @treturn integer
function batch:offset(i)
  local o = self.offsets[i]
  if o == nil then bad_index(self, "offset", i) end
  return o
end

--- The i-th record's timestamp (ms).
-- @tparam integer i 1..count
-- @treturn integer
function batch:timestamp(i)
  local t = self.timestamps[i]
  if t == nil then bad_index(self, "timestamp", i) end
  return t
end

--- The i-th record's key.
-- @tparam integer i 1..count
-- @treturn ?string nil when the key is null
function batch:key(i)
  local k = self.keys[i]
  if k == nil and self.offsets[i] == nil then bad_index(self, "key", i) end
  return k
end

--- The i-th record's value.
-- @tparam integer i 1..count
-- @treturn ?string nil when the value is null (a tombstone)
function batch:value(i)
  local v = self.values[i]
  if v == nil and self.offsets[i] == nil then bad_index(self, "value", i) end
  return v
end

--- The i-th record's headers, decoded at each call (as poll's `headers`).
-- @tparam integer i 1..count
-- @treturn ?table `{{key=, value=}...}` (value nil when null), nil when the record has none
function batch:headers(i)
  local raw = self.raw_headers[i]
  if raw == nil then
    if self.offsets[i] == nil then bad_index(self, "headers", i) end
    return nil
  end
  return decode_headers(raw)
end

return _M
