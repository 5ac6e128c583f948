-- kafka.read_committed: the consumer's filter of aborted transactions, on
-- hand-made batch lists shaped as a Fetch at isolation level 1 gives them
-- (Kafka's own rule: a producer's transaction is aborted from the first
-- offset the response lists until that producer's next control batch).
local read_committed = require "kafka.read_committed"

local function msgs(...)
  local out = {}
  for i, off in ipairs({ ... }) do out[i] = { offset = off } end
  return out
end

local function offsets(out)
  local t = {}
  for i, m in ipairs(out) do t[i] = m.offset end
  return t
end

describe("kafka.read_committed", function()
  it("is also kafka.txn, the old name", function()
    assert.equal(read_committed, require "kafka.txn")
  end)

  it("drops an aborted transaction's batches up to its marker, keeps the other producers' and later ones", function()
    -- producer 7 writes 0-2 (aborted, marker at 3), producer 8 writes 4-5
    -- (committed), producer 7 again 6-7 (a new transaction, not aborted)
    local batches = {
      { base_offset = 0, last_offset_delta = 2, producer_id = 7, transactional = true },
      { base_offset = 3, last_offset_delta = 0, producer_id = 7, transactional = true, control = true },
      { base_offset = 4, last_offset_delta = 1, producer_id = 8, transactional = true },
      { base_offset = 6, last_offset_delta = 1, producer_id = 7, transactional = true },
    }
    local out = msgs(0, 1, 2, 4, 5, 6, 7)
    read_committed.drop_aborted(out, 0, batches, { { producer_id = 7, first_offset = 0 } })
    assert.same({ 4, 5, 6, 7 }, offsets(out))
  end)

  it("leaves the messages before from untouched and non-transactional batches of the same producer id", function()
    local batches = {
      { base_offset = 10, last_offset_delta = 1, producer_id = 3, transactional = false },
      { base_offset = 12, last_offset_delta = 1, producer_id = 3, transactional = true },
    }
    local out = msgs(1, 2, 10, 11, 12, 13)
    read_committed.drop_aborted(out, 2, batches, { { producer_id = 3, first_offset = 10 } })
    assert.same({ 1, 2, 10, 11 }, offsets(out))
  end)

  it("opens a transaction only at its first offset, in any order of the aborted list", function()
    local batches = {
      { base_offset = 0, last_offset_delta = 0, producer_id = 5, transactional = true },
      { base_offset = 1, last_offset_delta = 0, producer_id = 6, transactional = true },
      { base_offset = 2, last_offset_delta = 0, producer_id = 5, transactional = true },
      { base_offset = 3, last_offset_delta = 0, producer_id = 6, transactional = true },
    }
    local out = msgs(0, 1, 2, 3)
    read_committed.drop_aborted(out, 0, batches,
      { { producer_id = 6, first_offset = 3 }, { producer_id = 5, first_offset = 2 } })
    assert.same({ 0, 1 }, offsets(out))
  end)

  it("changes nothing without an aborted list", function()
    local out = msgs(0, 1)
    local batches = { { base_offset = 0, last_offset_delta = 1, producer_id = 1, transactional = true } }
    assert.equal(out, read_committed.drop_aborted(out, 0, batches, nil))
    read_committed.drop_aborted(out, 0, batches, {})
    assert.same({ 0, 1 }, offsets(out))
  end)
end)
