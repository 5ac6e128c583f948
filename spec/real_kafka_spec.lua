-- The client against real Apache Kafka brokers (KRaft, single node), one
-- block per version in KAFKA_VERSIONS (default 4.4.0, 4.1.2, 3.9.1):
-- every codec with keys, headers and timestamps, key placement equal to
-- the Java client's partitioner, the batches the broker stores, acks,
-- LogAppendTime, list_offsets, commits, auto topic creation, message size
-- limits and version negotiation (legacy formats on 3.9).
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local proto = require "kafka.proto"

local CODECS = { "none", "gzip", "snappy", "lz4", "zstd" }

-- the message of id i: every field derived from i, so a consumer can check it
local function message(i)
  -- keys of every length 0-16 (so every tail of murmur2), many distinct ones of each
  local key = ("%08x%08x"):format(i * 2654435761 % 4294967296, i):sub(1, i % 17)
  local value = ("v%d-"):format(i) .. ("abcdefgh"):rep(i % 9 * 8)
  return key, value, { { key = "i", value = tostring(i) }, { key = "empty", value = "" } }, 1700000000000 + i
end

local function java_partitions(keys, nparts, bootstrap)
  local hexes, seen = {}, {}
  for _, k in ipairs(keys) do
    if not seen[k] then seen[k] = true; hexes[#hexes + 1] = rk.hex(k) end
  end
  local args = { "partition", nparts }
  for _, h in ipairs(hexes) do args[#args + 1] = h end
  local out = {}
  for _, line in ipairs(rk.java(args, { bootstrap = bootstrap })) do
    local h, p = line:match("^PART (%S+) (%d+)$")
    out[rk.unhex(h)] = tonumber(p)
  end
  return out
end

for _, version in ipairs(rk.versions()) do
  local major = tonumber(version:match("^(%d+)"))

  describe("Kafka " .. version .. " broker", function()
    local k, client

    setup(function()
      k = rk.cluster(version, 1)
      client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, client_id = "spec-real" }
    end)

    teardown(function()
      if client then client:close() end
    end)

    for _, codec in ipairs(CODECS) do
      it("produces and consumes " .. codec .. " with keys, headers and timestamps, placed as the Java client places keys", function()
        local topic = rt.uniq("codec-" .. codec)
        rt.create_topic(client, topic, 4, 1)
        local p = kafka.producer.new(client, { compression = codec, linger_ms = 5 })
        local N = 600
        local keys = {}
        for i = 1, N do
          local key, value, headers, ts = message(i)
          keys[i] = key
          local id = assert(p:send(topic, value, { key = key, headers = headers, timestamp = ts }))
          assert.equal(i, id)
        end
        local reports, failed = p:flush()
        assert.equal(0, failed)
        assert.equal(N, #reports)
        local where = {}
        for _, r in ipairs(reports) do
          assert.is_nil(r.err)
          where[r.id] = { r.partition, r.offset }
        end
        local placement = java_partitions(keys, 4, k.bootstrap.PLAINTEXT)
        local by, total = rt.consume_all(client, topic, 4, N)
        assert.equal(N, total)
        local seen = 0
        for part = 0, 3 do
          local last = -1
          for _, m in ipairs(by[part]) do
            local i = tonumber(m.value:match("^v(%d+)-"))
            local key, value, headers, ts = message(i)
            assert.equal(where[i][1], part)
            assert.equal(where[i][2], m.offset)
            assert.equal(placement[key], part)
            assert.equal(key, m.key)
            assert.equal(value, m.value)
            assert.equal(ts, m.timestamp)
            assert.same(headers, m.headers)
            assert.is_true(m.offset > last)
            last = m.offset
            seen = seen + 1
          end
          -- the broker stores what the producer wrote: v2 batches of this codec
          local batches = rt.stored_batches(client, topic, part)
          assert.is_true(#batches > 0)
          for _, b in ipairs(batches) do
            assert.equal(2, b.magic)
            assert.equal(codec, b.compression)
          end
        end
        assert.equal(N, seen)
        p:close()
      end)
    end

    it("keeps the broker's timestamps on a LogAppendTime topic", function()
      local topic = rt.uniq("append-time")
      rt.create_topic(client, topic, 1, 1, { ["message.timestamp.type"] = "LogAppendTime" })
      local before = math.floor(require("socket").gettime() * 1000) - 1000
      local p = kafka.producer.new(client, { linger_ms = 0 })
      for i = 1, 5 do assert(p:send(topic, "m" .. i, { timestamp = 1000 + i })) end
      local reports, failed = p:flush()
      assert.equal(0, failed)
      assert.equal(5, #reports)
      local by = rt.consume_all(client, topic, 1, 5)
      assert.equal(5, #by[0])
      local after = math.floor(require("socket").gettime() * 1000) + 1000
      for i, m in ipairs(by[0]) do
        assert.equal("m" .. i, m.value)
        assert.is_true(m.timestamp >= before and m.timestamp <= after, "timestamp " .. m.timestamp)
      end
      local batches = rt.stored_batches(client, topic, 0)
      for _, b in ipairs(batches) do assert.equal(1, b.timestamp_type) end
    end)

    it("delivers with acks 0, 1 and all", function()
      for _, acks in ipairs { 0, 1, -1 } do
        local topic = rt.uniq("acks")
        rt.create_topic(client, topic, 2, 1)
        local p = kafka.producer.new(client, { acks = acks, linger_ms = 5 })
        for i = 1, 200 do assert(p:send(topic, "a" .. i, { key = tostring(i) })) end
        local reports, failed = p:flush()
        assert.equal(0, failed)
        assert.equal(200, #reports)
        local by, total = rt.consume_all(client, topic, 2, 200)
        assert.equal(200, total)
        local values = {}
        for part = 0, 1 do for _, m in ipairs(by[part]) do values[#values + 1] = m.value end end
        table.sort(values)
        local want = {}
        for i = 1, 200 do want[i] = "a" .. i end
        table.sort(want)
        assert.same(want, values)
        p:close()
      end
    end)

    it("lists offsets: earliest, latest and by timestamp", function()
      local topic = rt.uniq("offsets")
      rt.create_topic(client, topic, 1, 1)
      local p = kafka.producer.new(client, { linger_ms = 0 })
      for i = 0, 9 do assert(p:send(topic, "t" .. i, { timestamp = 1600000000000 + i * 1000 })) end
      local _, failed = p:flush()
      assert.equal(0, failed)
      assert.equal(0, client:list_offsets(topic, 0, "earliest"))
      assert.equal(10, client:list_offsets(topic, 0, "latest"))
      assert.equal(4, client:list_offsets(topic, 0, 1600000000000 + 3500))
      assert.equal(0, client:list_offsets(topic, 0, 1))
      assert.equal(-1, client:list_offsets(topic, 0, 1600000000000 + 99000))
    end)

    it("commits and reads back committed offsets with metadata", function()
      local topic = rt.uniq("commit")
      rt.create_topic(client, topic, 3, 1)
      local group = rt.uniq("group")
      local c = kafka.consumer.new(client, { group_id = group })
      c:assign { { topic = topic, partition = 0, offset = 0 }, { topic = topic, partition = 1, offset = 0 },
        { topic = topic, partition = 2, offset = 0 } }
      local ok, err = c:commit { { topic = topic, partition = 0, offset = 17, metadata = "m0" },
        { topic = topic, partition = 2, offset = 5, metadata = "" } }
      assert.truthy(ok, err)
      local got = assert(c:committed())
      table.sort(got, function(a, b) return a.partition < b.partition end)
      assert.equal(3, #got)
      assert.same({ topic, 0, 17, "m0" }, { got[1].topic, got[1].partition, got[1].offset, got[1].metadata })
      assert.same({ topic, 1, -1 }, { got[2].topic, got[2].partition, got[2].offset })
      assert.same({ topic, 2, 5, "" }, { got[3].topic, got[3].partition, got[3].offset, got[3].metadata })
      -- a second consumer of the group starts where the first committed
      local c2 = kafka.consumer.new(client, { group_id = group })
      c2:assign { { topic = topic, partition = 0, offset = "committed" } }
      assert.equal(17, c2:position(topic, 0))
      c:close(); c2:close()
    end)

    it("creates topics on first use only when allowed", function()
      local topic = rt.uniq("auto")
      local p = kafka.producer.new(client, { linger_ms = 0 })
      assert(p:send(topic, "first"))
      local reports, failed = p:flush()
      assert.equal(0, failed)
      assert.equal(0, reports[1].offset)
      local strict = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, allow_auto_topic_creation = false }
      local missing = rt.uniq("missing")
      local p2 = kafka.producer.new(strict, { linger_ms = 0 })
      local id, err, code = p2:send(missing, "x")
      assert.is_nil(id)
      assert.equal("unknown_topic", code, err)
      -- and it was not created
      local md = assert(strict:metadata { missing })
      assert.equal(proto.errors.UNKNOWN_TOPIC_OR_PARTITION, md.topics[missing].error_code)
      strict:close()
    end)

    it("refuses a message beyond the topic's max.message.bytes and delivers the rest", function()
      local topic = rt.uniq("big")
      rt.create_topic(client, topic, 1, 1, { ["max.message.bytes"] = 20000 })
      local p = kafka.producer.new(client, { linger_ms = 1000 })
      local near = ("n"):rep(19000)
      local ids = {}
      ids.a = assert(p:send(topic, "small-1"))
      ids.big = assert(p:send(topic, ("b"):rep(30000)))
      ids.b = assert(p:send(topic, "small-2"))
      ids.near = assert(p:send(topic, near))
      -- beyond the producer's own max_message_bytes: refused at the door
      local p2 = kafka.producer.new(client, { max_message_bytes = 1000 })
      local none, err, code = p2:send(topic, ("c"):rep(2000))
      assert.is_nil(none)
      assert.equal("too_large", code, err)
      local reports, failed = p:flush()
      assert.equal(4, #reports)
      assert.equal(1, failed)
      for _, r in ipairs(reports) do
        if r.id == ids.big then
          assert.equal("kafka", r.code, r.err)
          assert.equal(proto.errors.MESSAGE_TOO_LARGE, r.error_code)
        else
          assert.is_nil(r.err)
        end
      end
      local by = rt.consume_all(client, topic, 1, 3)
      local values = {}
      for _, m in ipairs(by[0]) do values[#values + 1] = m.value end
      assert.same({ "small-1", "small-2", near }, values)
    end)

    it("uses only versions the broker serves", function()
      local c = assert(client:any_broker())
      local bv = c.broker_versions
      assert.is_table(bv)
      for _, api in ipairs { "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
        "FindCoordinator", "ApiVersions", "CreateTopics" } do
        local key = proto.api_key(api)
        local v = assert(c:version(api))
        assert.is_true(v >= bv[key].min and v <= bv[key].max, api .. " v" .. v)
      end
      if major >= 4 then
        assert.is_true(c:version("Produce") >= 3)
        -- Produce v2 is advertised by 4.x but closes the connection: refused here first
        local old = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, max_versions = { Produce = 2 } }
        local p = kafka.producer.new(old, { linger_ms = 0 })
        local id, err, code = p:send(rt.uniq("old"), "x")
        if id then
          local reports = p:flush()
          err, code = reports[1].err, reports[1].code
        end
        assert.equal("unsupported", code, err)
        old:close()
      end
    end)

    if major <= 3 then -- (the message formats v0 and v1 are gone from Kafka 4, KIP-724)
      for _, case in ipairs { { produce = 2, magic = 1 }, { produce = 0, magic = 0 } } do
        it("takes Produce v" .. case.produce .. " (magic " .. case.magic .. ") and serves it back at old and new Fetch versions", function()
          local topic = rt.uniq("legacy")
          rt.create_topic(client, topic, 1, 1)
          local old = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, max_versions = { Produce = case.produce } }
          local p = kafka.producer.new(old, { linger_ms = 5, compression = "gzip" })
          for i = 1, 50 do assert(p:send(topic, "legacy-" .. i, { key = "k" .. i, timestamp = 1650000000000 + i })) end
          local reports, failed = p:flush()
          assert.equal(0, failed)
          assert.equal(50, #reports)
          assert.equal(case.magic, p.magic)
          for _, fetch in ipairs { 12, 4, 3, 1 } do
            local reader = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, max_versions = { Fetch = fetch } }
            local by = rt.consume_all(reader, topic, 1, 50)
            assert.equal(50, #by[0])
            for i, m in ipairs(by[0]) do
              assert.equal(i - 1, m.offset)
              assert.equal("legacy-" .. i, m.value)
              assert.equal("k" .. i, m.key)
              if case.magic == 1 and fetch >= 2 then assert.equal(1650000000000 + i, m.timestamp) end
            end
            reader:close()
          end
          old:close()
        end)
      end
    end
  end)
end
