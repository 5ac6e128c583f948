-- Kafka's Java client (kafka-clients, spec/support/kafka/Peer.java) and
-- lua-kafka on one real broker (the first of KAFKA_VERSIONS): Java writes
-- every codec with its default idempotent producer and in transactions,
-- lua-kafka reads; lua-kafka writes every codec, Java's consumer reads
-- with its CRC checks on. Every field compared, offsets included.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"

-- every codec on the first Lua of `make test`, two on the others (SPEC_TIER=lite)
local CODECS = require("support.helpers").lite() and { "none", "zstd" } or { "none", "gzip", "snappy", "lz4", "zstd" }

-- what Peer.java's producer writes as record i
local function java_record(i)
  return "k" .. i, "v" .. i .. "-" .. ("x"):rep(i % 7 * 40), 1700000000000 + i
end

-- parse_acks(lines) -> {[i] = {partition, offset}}
local function parse_acks(lines)
  local acks, n = {}, 0
  for _, l in ipairs(lines) do
    local p, o, i = l:match("^ACK (%d+) (%d+) (%d+)$")
    if p then acks[tonumber(i)] = { tonumber(p), tonumber(o) }; n = n + 1 end
  end
  return acks, n
end

local versions = rk.versions()
if #versions > 0 then
  local version = versions[1]

  describe("Kafka's Java client (" .. version .. " broker)", function()
    local k, client

    setup(function()
      k = rk.cluster(version, 1)
      client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-java" }
    end)

    teardown(function()
      if client then client:close() end
    end)

    -- once(fn) -> a function returning fn()'s table, run on the first call
    -- (a failure raises again on every call without running fn again)
    local function once(fn)
      local r, err
      return function()
        if not r and not err then
          local ok, v = pcall(fn)
          if ok then r = v else err = v end
        end
        if err then error(err, 0) end
        return r
      end
    end

    -- What Java wrote, by codec and by "txn": one JVM runs every producer
    -- (a JVM and kafka-clients take a second to start).
    local N = 300
    local java_wrote = once(function()
      local cmds, names = {}, {}
      for _, codec in ipairs(CODECS) do
        local topic = rt.uniq("java-" .. codec)
        rt.create_topic(client, topic, 3, 1)
        cmds[#cmds + 1], names[#names + 1] = { "produce", topic, N, codec, "idempotent" }, codec
      end
      local topic = rt.uniq("java-txn")
      rt.create_topic(client, topic, 3, 1)
      cmds[#cmds + 1], names[#names + 1] = { "produce", topic, 40, "lz4", "txn-commit" }, "txn-commit"
      cmds[#cmds + 1], names[#names + 1] = { "produce", topic, 40, "none", "txn-abort" }, "txn-abort"
      local out = rk.java_chain(cmds, { bootstrap = k.bootstrap.PLAINTEXT, timeout = 240 })
      local r = {}
      for i, name in ipairs(names) do r[name] = { topic = cmds[i][2], lines = out[i] } end
      return r
    end)

    for _, codec in ipairs(CODECS) do
      it("Java's idempotent producer writes " .. codec .. ", lua-kafka reads every record exactly", function()
        local w = java_wrote()[codec]
        local topic = w.topic
        local acks, n = parse_acks(w.lines)
        assert.equal(N, n)
        local by, total = rt.consume_all(client, topic, 3, N)
        assert.equal(N, total)
        local seen = {}
        for part = 0, 2 do
          for _, m in ipairs(by[part]) do
            local i = tonumber(m.key:match("^k(%d+)$"))
            local key, value, ts = java_record(i)
            assert.is_nil(seen[i])
            seen[i] = true
            assert.same(acks[i], { part, m.offset })
            assert.equal(key, m.key)
            assert.equal(value, m.value)
            assert.equal(ts, m.timestamp)
            assert.same({ { key = "i", value = tostring(i) }, { key = "n" } }, m.headers)
          end
          -- Java's idempotent batches carry a producer id and sequences
          for _, b in ipairs(rt.stored_batches(client, topic, part)) do
            assert.is_true(b.producer_id >= 0)
            assert.is_true(b.base_sequence >= 0)
            assert.equal(codec, b.compression)
          end
        end
      end)
    end

    it("reads a committed and an aborted Java transaction with isolation_level 0, control batches skipped", function()
      local topic = java_wrote()["txn-commit"].topic
      local committed = parse_acks(java_wrote()["txn-commit"].lines)
      local aborted = parse_acks(java_wrote()["txn-abort"].lines)
      local want = {}
      for i = 0, 39 do
        want[#want + 1] = ("%d:%d"):format(committed[i][1], committed[i][2])
        want[#want + 1] = ("%d:%d"):format(aborted[i][1], aborted[i][2])
      end
      table.sort(want)
      local by, total = rt.consume_all(client, topic, 3, 80)
      assert.equal(80, total)
      local got = {}
      for part = 0, 2 do
        for _, m in ipairs(by[part]) do
          assert.is_nil(m.control)
          local i = tonumber(m.key:match("^k(%d+)$"))
          local _, value = java_record(i)
          assert.equal(value, m.value)
          got[#got + 1] = ("%d:%d"):format(part, m.offset)
        end
      end
      table.sort(got)
      assert.same(want, got)
      -- the markers are there: each transaction left one control batch per partition it wrote
      local controls = 0
      for part = 0, 2 do
        for _, b in ipairs(rt.stored_batches(client, topic, part)) do
          if b.control then controls = controls + 1; assert.is_true(b.transactional) end
        end
      end
      local parts_written = {}
      for i = 0, 39 do parts_written["c" .. committed[i][1]] = true; parts_written["a" .. aborted[i][1]] = true end
      local expected = 0
      for _ in pairs(parts_written) do expected = expected + 1 end
      assert.equal(expected, controls)
    end)

    -- What lua-kafka wrote in every codec, and what one JVM's consumers
    -- read of each: {[codec] = {where = {["p:offset"] = id}, lines = ...}}
    local java_read = once(function()
      local r, cmds = {}, {}
      for _, codec in ipairs(CODECS) do
        local topic = rt.uniq("lua-" .. codec)
        rt.create_topic(client, topic, 3, 1)
        local p = kafka.producer.new(client, { compression = codec, linger_ms = 5 })
        for i = 1, N do
          local headers = { { key = "i", value = tostring(i) }, { key = "null" }, { key = "e", value = "" } }
          local key
          if i % 10 ~= 0 then key = "key" .. i end -- every tenth is null
          local value = i % 25 == 0 and "" or ("value-" .. i .. ("\0\255"):rep(i % 13 * 20))
          assert(p:send(topic, value, { key = key, headers = headers, timestamp = 1710000000000 + i }))
        end
        local reports, failed = p:flush()
        assert.equal(0, failed)
        p:close()
        local where = {}
        for _, x in ipairs(reports) do where[("%d:%d"):format(x.partition, x.offset)] = x.id end
        r[codec] = { where = where }
        cmds[#cmds + 1] = { "consume", topic, N, 120 }
      end
      local out = rk.java_chain(cmds, { bootstrap = k.bootstrap.PLAINTEXT, timeout = 300 })
      for i, codec in ipairs(CODECS) do r[codec].lines = out[i] end
      return r
    end)

    for _, codec in ipairs(CODECS) do
      it("lua-kafka writes " .. codec .. ", Java's consumer reads every record with its CRC checks", function()
        local where, lines = java_read()[codec].where, java_read()[codec].lines
        local n = 0
        for _, l in ipairs(lines) do
          local part, off, ts, tstype, kh, vh, hh = l:match("^REC (%d+) (%d+) (%-?%d+) (%d+) (%S+) (%S+) (%S+)$")
          assert.truthy(part, l)
          local i = where[part .. ":" .. off]
          assert.truthy(i, "record at " .. part .. ":" .. off .. " was not sent")
          n = n + 1
          assert.equal(1710000000000 + i, tonumber(ts))
          assert.equal("0", tstype)
          assert.equal(i % 10 == 0 and "-" or rk.hex("key" .. i), kh)
          assert.equal(rk.hex(i % 25 == 0 and "" or ("value-" .. i .. ("\0\255"):rep(i % 13 * 20))), vh)
          assert.equal(rk.hex("i") .. "=" .. rk.hex(tostring(i)) .. "," .. rk.hex("null") .. "=-," .. rk.hex("e") .. "=~", hh)
        end
        assert.equal(N, n)
      end)
    end
  end)
end
