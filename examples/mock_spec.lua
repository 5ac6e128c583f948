-- examples/mock_spec.lua: testing your own code with kafka.mock, in busted.
--   lua5.4 /usr/bin/busted examples/mock_spec.lua     (from the repository root, after `make`)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/" .. (rawget(_G, "jit") and "luajit" or ("lua" .. _VERSION:match("%d+%.%d+"))) .. "/?.so;"
  .. package.cpath
local kafka = require "kafka"
local mock = require "kafka.mock"

-- the code under test: records an order, keyed by customer
local function record_order(producer, order)
  return producer:send_sync("orders", order.item, { key = order.customer, headers = { source = "shop" } })
end

describe("record_order", function()
  local cluster, client

  before_each(function()
    cluster = mock.new { brokers = 3, topics = { orders = 6 } }
    -- in-process: no ports, no threads; the mock answers inside the client's socket calls
    client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(),
      retry_backoff_ms = 1 }
  end)

  it("writes the order to the customer's partition", function()
    local producer = kafka.producer.new(client)
    local partition, offset = record_order(producer, { customer = "alice", item = "book" })
    assert.are.equal(0, offset)
    local stored = cluster:records("orders", partition)
    assert.are.equal(1, #stored)
    assert.are.equal("book", stored[1].value)
    assert.are.equal("alice", stored[1].key)
    assert.are.same({ { key = "source", value = "shop" } }, stored[1].headers)
  end)

  it("survives a leader change and a retriable error", function()
    local producer = kafka.producer.new(client, { retry_backoff_ms = 1 })
    local partition = record_order(producer, { customer = "bob", item = "pen" })
    cluster:move_leader("orders", partition, cluster:leader("orders", partition) % 3 + 1)
    cluster:fail("Produce", kafka.proto.errors.REQUEST_TIMED_OUT, 1)
    local _, offset = record_order(producer, { customer = "bob", item = "ink" })
    assert.are.equal(1, offset)
    assert.are.equal(2, #cluster:records("orders", partition))
  end)

  it("reports a broker that stays down", function()
    local producer = kafka.producer.new(client, { max_retries = 1, retry_backoff_ms = 1 })
    for id = 1, 3 do cluster:down(id) end
    local ok, err = record_order(producer, { customer = "carol", item = "cup" })
    assert.is_nil(ok)
    assert.is_string(err)
  end)

  it("serves any client over TCP: kcat here", function()
    local bootstrap = cluster:listen() -- free ports on 127.0.0.1
    local done = os.tmpname()
    os.remove(done)
    os.execute("(echo 'from kcat' | kcat -q -b " .. bootstrap .. " -P -t orders -p 2; touch " .. done .. ") &")
    -- serve until kcat has finished (at most 10 s)
    cluster:run(10, function() return io.open(done) ~= nil end)
    os.remove(done)
    cluster:close()
    assert.are.equal("from kcat", cluster:records("orders", 2)[1].value)
  end)
end)
