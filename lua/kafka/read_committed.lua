-- kafka.read_committed: the consumer's read_committed filter. A Fetch at isolation level 1 returns
-- records up to the last stable offset plus the list of aborted
-- transactions that overlap them ({producer_id=, first_offset=}); the
-- consumer drops the records of those transactions, as Kafka's clients do:
-- walking the batches in offset order, a transaction becomes aborted at its
-- first offset and stays so for its producer until that producer's next
-- control batch (the abort marker); a transactional batch of a producer
-- whose transaction is aborted is dropped. Control batches themselves are
-- never messages.
--
--   local read_committed = require "kafka.read_committed"
--   read_committed.drop_aborted(messages, from, batches, aborted_transactions)
--
-- (The producer's transactions are kafka.producer's; this module was named
-- kafka.txn before, which stays as an alias.)
local table, ipairs = table, ipairs

local _M = {}

-- The offset ranges {first, last} of the batches of aborted transactions,
-- in offset order (nil when none). batches: the decoder's batch list
-- (base_offset, last_offset_delta, producer_id, transactional, control);
-- aborted: the Fetch response's aborted_transactions.
local function aborted_ranges(batches, aborted)
  if not aborted or not aborted[1] or not batches then return nil end
  local list = {}
  for i, a in ipairs(aborted) do list[i] = a end
  table.sort(list, function(a, b) return a.first_offset < b.first_offset end)
  local drop, nd = {}, 0
  local open, ai = {}, 1
  for _, b in ipairs(batches) do
    local last = b.base_offset + (b.last_offset_delta or 0)
    while list[ai] and list[ai].first_offset <= last do
      open[list[ai].producer_id] = true
      ai = ai + 1
    end
    local pid = b.producer_id
    if b.control then
      open[pid] = nil -- the marker ends the producer's transaction
    elseif b.transactional and open[pid] then
      nd = nd + 1
      drop[nd] = { b.base_offset, last }
    end
  end
  if nd == 0 then return nil end
  return drop
end

-- drop_aborted(out, from, batches, aborted) -> out: removes from out[from+1..]
-- the messages of aborted transactions.
function _M.drop_aborted(out, from, batches, aborted)
  local drop = aborted_ranges(batches, aborted)
  if not drop then return out end
  local j, k = from, 1
  for i = from + 1, #out do
    local m = out[i]
    local off = m.offset
    while drop[k] and drop[k][2] < off do k = k + 1 end
    local r = drop[k]
    if not (r and off >= r[1] and off <= r[2]) then
      j = j + 1
      out[j] = m
    end
  end
  for i = #out, j + 1, -1 do out[i] = nil end
  return out
end

local COLUMNS = { "offsets", "timestamps", "keys", "values", "raw_headers" }

-- drop_aborted_columns(b, from, batches, aborted) -> b: the same for a
-- columns table (proto.decode_records' columns mode; consumer:poll_batch):
-- the records from+1..b.count of aborted transactions leave every column.
function _M.drop_aborted_columns(b, from, batches, aborted)
  local drop = aborted_ranges(batches, aborted)
  if not drop then return b end
  local offs, n = b.offsets, b.count
  local j, k = from, 1
  for i = from + 1, n do
    local off = offs[i]
    while drop[k] and drop[k][2] < off do k = k + 1 end
    local r = drop[k]
    if not (r and off >= r[1] and off <= r[2]) then
      j = j + 1
      if j ~= i then
        for _, name in ipairs(COLUMNS) do
          local col = b[name]
          col[j] = col[i] -- (nil moves too: keys, values and headers are sparse)
        end
      end
    end
  end
  for _, name in ipairs(COLUMNS) do
    local col = b[name]
    for i = n, j + 1, -1 do col[i] = nil end
  end
  b.count = j
  return b
end

return _M
