-- kafka.mock.log: one partition's log for the mock broker. Batches are
-- stored as the producer wrote them; only the base offset (and, for
-- compressed magic 0/1 wrappers, the wrapper offset) is rewritten, as a
-- Kafka broker does. Plain arithmetic on bytes (no string.pack, no bitwise
-- operators): runs on Lua 5.1-5.4 and LuaJIT.
local proto = require "kafka.proto"

local math, string, table = math, string, table
local ipairs, setmetatable = ipairs, setmetatable

local _M = {}
local mt = { __index = _M }

local E = proto.errors

-- big-endian readers (i is 1-based)
local function u32(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
local function i32(s, i)
  local n = u32(s, i)
  if n >= 2147483648 then n = n - 4294967296 end
  return n
end
local function i16(s, i)
  local a, b = s:byte(i, i + 1)
  local n = a * 256 + b
  if n >= 32768 then n = n - 65536 end
  return n
end
local function i64(s, i)
  return i32(s, i) * 4294967296 + u32(s, i + 4)
end

local function be32(n)
  if n < 0 then n = n + 4294967296 end
  local d = n % 256
  n = math.floor(n / 256)
  local c = n % 256
  n = math.floor(n / 256)
  local b = n % 256
  local a = math.floor(n / 256)
  return string.char(a, b, c, d)
end
local function be64(n)
  local hi = math.floor(n / 4294967296)
  return be32(hi) .. be32(n - hi * 4294967296)
end

_M.i16, _M.i32, _M.u32, _M.i64, _M.be32, _M.be64 = i16, i32, u32, i64, be32, be64

function _M.new(opts)
  return setmetatable({
    entries = {},      -- {base=, last=, bytes=, magic=, max_ts=, count=, size=}
    log_start = 0,
    hw = 0,            -- next offset (high watermark: every replica is in sync)
    bytes = 0,
    producers = {},    -- producer id -> {epoch=, last_seq=, recent = {{first=, last=, base=}...}}
    max_message_bytes = opts and opts.max_message_bytes or 1048588,
  }, mt)
end

-- parse(blob, produce_version) -> list of parsed entries | nil, error_code, message.
-- Checks framing and CRCs; nothing is stored.
function _M.parse(blob, version)
  local list, i, n = {}, 1, #blob
  if n == 0 then return nil, E.INVALID_RECORD, "empty records" end
  while i <= n do
    if n - i + 1 < 17 then return nil, E.CORRUPT_MESSAGE, "truncated batch header" end
    local len = i32(blob, i + 8)
    local magic = blob:byte(i + 16)
    if len < 14 or i + 11 + len > n then return nil, E.CORRUPT_MESSAGE, "batch length " .. len .. " past the end" end
    local bytes = blob:sub(i, i + 11 + len)
    local e = { bytes = bytes, magic = magic, size = #bytes }
    if magic == 2 then
      if len < 49 then return nil, E.CORRUPT_MESSAGE, "record batch too short" end
      if proto.crc32c(bytes:sub(22)) ~= u32(bytes, 18) then return nil, E.CORRUPT_MESSAGE, "record batch CRC mismatch" end
      local attr = i16(bytes, 22)
      e.compression = attr % 8
      e.transactional = math.floor(attr / 16) % 2 == 1
      e.control = math.floor(attr / 32) % 2 == 1
      e.count = i32(bytes, 24) + 1
      local records = i32(bytes, 58)
      if records ~= e.count or e.count < 1 then
        return nil, E.INVALID_RECORD, ("record count %d and last offset delta %d disagree"):format(records, e.count - 1)
      end
      e.max_ts = i64(bytes, 36)
      e.producer_id = i64(bytes, 44)
      e.producer_epoch = i16(bytes, 52)
      e.base_sequence = i32(bytes, 54)
    elseif magic == 0 or magic == 1 then
      if proto.crc32(bytes:sub(17)) ~= u32(bytes, 13) then return nil, E.CORRUPT_MESSAGE, "message CRC mismatch" end
      if len < (magic == 1 and 22 or 14) then return nil, E.CORRUPT_MESSAGE, "message too short" end
      e.compression = bytes:byte(18) % 8
      e.max_ts = magic == 1 and i64(bytes, 19) or -1
      e.producer_id = -1
      if e.compression == 0 then
        e.count = 1
      else
        local msgs, info = proto.decode_records(bytes)
        if not msgs or (info.errors and #info.errors > 0) or #msgs == 0 then
          return nil, E.CORRUPT_MESSAGE, "compressed message set does not decode"
        end
        e.count = #msgs
        if magic == 0 then e.inner = msgs end
        local mx = -1
        for _, m in ipairs(msgs) do if m.timestamp and m.timestamp > mx then mx = m.timestamp end end
        if magic == 1 then e.max_ts = mx end
      end
    else
      return nil, E.CORRUPT_MESSAGE, "unknown magic " .. magic
    end
    if version and version >= 3 and magic ~= 2 then
      return nil, E.INVALID_RECORD, "Produce v3+ takes record batches (magic 2) only"
    end
    list[#list + 1] = e
    i = i + 12 + len
  end
  if version and version >= 3 and #list ~= 1 then
    return nil, E.INVALID_RECORD, "Produce v3+ takes exactly one record batch per partition"
  end
  return list
end

local function in_sequence(last, first)
  return first == last + 1 or (first == 0 and last == 2147483647)
end

local function seq_add(seq, n)
  local s = seq + n
  if s > 2147483647 then s = s - 2147483648 end
  return s
end

-- check_producer(entries) -> nil (ok) | error_code, message, original_base_offset.
-- The idempotent producer's checks (one producer per batch in Produce v3+).
function _M:check_producer(list)
  local e = list[1]
  if #list ~= 1 or e.magic ~= 2 or e.producer_id < 0 then return nil end
  local st = self.producers[e.producer_id]
  local first, last = e.base_sequence, seq_add(e.base_sequence, e.count - 1)
  if not st then return nil end
  if e.producer_epoch < st.epoch then
    return E.INVALID_PRODUCER_EPOCH, ("producer epoch %d is older than %d"):format(e.producer_epoch, st.epoch)
  end
  if e.producer_epoch > st.epoch then
    if first ~= 0 then
      return E.OUT_OF_ORDER_SEQUENCE_NUMBER, ("new epoch %d must start at sequence 0, got %d"):format(e.producer_epoch, first)
    end
    return nil
  end
  for _, r in ipairs(st.recent) do
    if r.first == first and r.last == last then
      return E.DUPLICATE_SEQUENCE_NUMBER, ("batch %d..%d already written at offset %d"):format(first, last, r.base), r.base
    end
  end
  if not in_sequence(st.last_seq, first) then
    return E.OUT_OF_ORDER_SEQUENCE_NUMBER, ("sequence %d after %d"):format(first, st.last_seq)
  end
  return nil
end

-- append(entries, now_ms) -> base offset of the first entry. Rewrites base offsets.
function _M:append(list, now)
  local base0 = self.hw
  for _, e in ipairs(list) do
    local base = self.hw
    local bytes = e.bytes
    if e.magic == 2 then
      bytes = be64(base) .. bytes:sub(9)
    elseif e.compression == 0 then
      bytes = be64(base) .. bytes:sub(9)
    elseif e.magic == 1 then
      -- the wrapper carries the last inner offset; inner offsets stay relative
      bytes = be64(base + e.count - 1) .. bytes:sub(9)
    else
      -- magic 0 inner offsets are absolute: the set is written again, as Kafka does
      local msgs = {}
      for k, m in ipairs(e.inner) do msgs[k] = { key = m.key, value = m.value } end
      local inner = proto.encode_records(msgs, { magic = 0, base_offset = base })
      local z = proto.compress(proto.compression[e.compression], inner)
      local body = "\0" .. string.char(e.compression) .. "\255\255\255\255" .. be32(#z) .. z
      body = be32(proto.crc32(body)) .. body
      bytes = be64(base + e.count - 1) .. be32(#body) .. body
    end
    local entry = { base = base, last = base + e.count - 1, bytes = bytes, magic = e.magic, max_ts = e.max_ts,
      count = e.count, size = #bytes, control = e.control, append_time = now }
    self.entries[#self.entries + 1] = entry
    self.bytes = self.bytes + #bytes
    self.hw = base + e.count
    if e.magic == 2 and e.producer_id >= 0 then
      local st = self.producers[e.producer_id]
      if not st or e.producer_epoch > st.epoch then
        st = { epoch = e.producer_epoch, recent = {} }
        self.producers[e.producer_id] = st
      end
      st.last_seq = seq_add(e.base_sequence, e.count - 1)
      table.insert(st.recent, { first = e.base_sequence, last = st.last_seq, base = base })
      if #st.recent > 5 then table.remove(st.recent, 1) end
    end
  end
  return base0
end

-- index of the first entry whose last offset >= offset (binary search)
function _M:find(offset)
  local es = self.entries
  local lo, hi = 1, #es
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if es[mid].last < offset then lo = mid + 1 else hi = mid end
  end
  if es[lo] and es[lo].last >= offset then return lo end
  return nil
end

-- read(offset, max_bytes, magic_limit, first) -> bytes (whole batches from the one
-- holding offset up to max_bytes; with `first`, at least one batch). magic_limit
-- (0 or 1) down-converts newer batches for old Fetch versions.
function _M:read(offset, max_bytes, magic_limit, first)
  local i = self:find(offset)
  if not i then return "" end
  local parts, size = {}, 0
  local es = self.entries
  while es[i] do
    local e = es[i]
    local bytes = e.bytes
    if magic_limit and e.magic > magic_limit then
      if e.control then
        bytes = ""
      else
        local msgs = proto.decode_records(bytes)
        local out = {}
        for k, m in ipairs(msgs or {}) do
          out[k] = { key = m.key, value = m.value, timestamp = m.timestamp }
        end
        bytes = #out > 0 and proto.encode_records(out, { magic = magic_limit, base_offset = e.base }) or ""
      end
    end
    if (#parts > 0 or not first) and size + #bytes > max_bytes then break end
    parts[#parts + 1] = bytes
    size = size + #bytes
    if size >= max_bytes then break end
    i = i + 1
  end
  return table.concat(parts)
end

-- bytes_from(offset) -> bytes stored at or after offset (for min_bytes)
function _M:bytes_from(offset)
  local i = self:find(offset)
  if not i then return 0 end
  local n = 0
  for k = i, #self.entries do n = n + self.entries[k].size end
  return n
end

-- offset_for_time(ts) -> the first offset whose timestamp >= ts, and its timestamp; -1 when none
function _M:offset_for_time(ts)
  for _, e in ipairs(self.entries) do
    if e.max_ts >= ts and e.last >= self.log_start then
      local msgs = proto.decode_records(e.bytes)
      for _, m in ipairs(msgs or {}) do
        if m.offset >= self.log_start and (m.timestamp or -1) >= ts then return m.offset, m.timestamp end
      end
    end
  end
  return -1, -1
end

-- max_timestamp() -> offset and timestamp of the record with the largest timestamp (ListOffsets -3)
function _M:max_timestamp()
  local best, off = -1, -1
  for _, e in ipairs(self.entries) do
    if e.max_ts > best then
      local msgs = proto.decode_records(e.bytes)
      for _, m in ipairs(msgs or {}) do
        if (m.timestamp or -1) > best then best, off = m.timestamp, m.offset end
      end
    end
  end
  return off, best
end

-- delete_before(offset): moves the log start (DeleteRecords); whole batches below it are dropped
function _M:delete_before(offset)
  if offset > self.hw then offset = self.hw end
  if offset <= self.log_start then return self.log_start end
  self.log_start = offset
  local keep = {}
  for _, e in ipairs(self.entries) do
    if e.last >= offset then keep[#keep + 1] = e else self.bytes = self.bytes - e.size end
  end
  self.entries = keep
  return offset
end

-- messages() -> every message from the log start, decoded
function _M:messages()
  local out = {}
  for _, e in ipairs(self.entries) do
    local msgs = proto.decode_records(e.bytes)
    for _, m in ipairs(msgs or {}) do
      if m.offset >= self.log_start and not m.control then out[#out + 1] = m end
    end
  end
  return out
end

return _M
