-- Interop with a real client: kcat (librdkafka) against the same mock
-- cluster. What kcat produces, every codec, with headers, we consume; what
-- we produce, kcat consumes (checking CRCs); keyed messages land where
-- librdkafka's murmur2_random partitioner puts them.
local kafka = require "kafka"
local mock = require "support.mock"
local proto = kafka.proto

local function have_kcat()
  local ok = os.execute("command -v kcat >/dev/null 2>&1")
  return ok == true or ok == 0
end

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function consume(client, topic, want)
  local c = kafka.consumer.new(client, {})
  local n = assert(client:partitions(topic))
  local a = {}
  for p = 0, n - 1 do a[#a + 1] = { topic = topic, partition = p, offset = "earliest" } end
  assert(c:assign(a))
  local out = {}
  local deadline = client.now() + 20000
  while #out < want and client.now() < deadline do
    for _, m in ipairs(assert(c:poll(300))) do out[#out + 1] = m end
  end
  return out
end

describe("kcat interop", function()
  it("kcat is installed", function()
    assert.is_true(have_kcat(), "install kcat (see .ci/run)")
  end)
  if not have_kcat() then return end

  local m, client
  setup(function()
    m = mock.start { brokers = 3 }
    client = kafka.client.new { brokers = m.bootstrap, retry_backoff_ms = 20 }
  end)
  teardown(function()
    client:close()
    m:stop()
  end)

  local function value_of(i) return ("kcat-%04d|"):format(i) .. ("abcdefghij"):rep(30) end

  for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
    it("what kcat produces with " .. codec .. " and headers, we consume", function()
      local topic = "from-kcat-" .. codec
      m:cmd("topic " .. topic .. " 4")
      local N = 400
      local p = assert(io.popen(("kcat -b %s -P -t %s -z %s -K '\\t' -H trace=t-%s -H empty= "
        .. "-X partitioner=murmur2_random -X linger.ms=5 2>&1"):format(m.bootstrap, topic, codec, codec), "w"))
      for i = 1, N do p:write("key-", i % 37, "\t", value_of(i), "\n") end
      assert(p:close())
      local got = consume(client, topic, N)
      assert.are.equal(N, #got)
      local seen = {}
      for _, msg in ipairs(got) do
        local i = tonumber(msg.value:match("^kcat%-(%d+)|"))
        assert.are.equal(value_of(i), msg.value)
        assert.are.equal("key-" .. (i % 37), msg.key)
        assert.are.same({ { key = "trace", value = "t-" .. codec }, { key = "empty", value = "" } }, msg.headers)
        -- librdkafka's murmur2_random puts the key where ours does
        assert.are.equal((proto.murmur2(msg.key) % 2147483648) % 4, msg.partition)
        seen[i] = true
      end
      for i = 1, N do assert(seen[i], "missing " .. i) end
    end)

    it("what we produce with " .. codec .. " and headers, kcat consumes with CRC checks", function()
      local topic = "to-kcat-" .. codec
      m:cmd("topic " .. topic .. " 3")
      local p = kafka.producer.new(client, { compression = codec })
      local N = 300
      for i = 1, N do
        assert(p:send(topic, value_of(i), { key = "k" .. i, headers = { { key = "n", value = tostring(i) } } }))
      end
      local reports, failed = p:flush()
      assert.are.equal(0, failed)
      local where = {}
      for _, r in ipairs(reports) do where[r.id] = r end
      local cmd = ("kcat -b %s -C -t %s -o beginning -e -q -X check.crcs=true -f %s 2>&1"):format(
        m.bootstrap, topic, sh_quote("%p\\t%o\\t%k\\t%s\\t%h\\n"))
      local h = assert(io.popen(cmd))
      local out = h:read("*a")
      assert(h:close(), out)
      local n = 0
      for part, off, key, value, hdrs in out:gmatch("(%d+)\t(%d+)\t([^\t]*)\t([^\t]*)\t([^\n]*)\n") do
        n = n + 1
        local i = tonumber(key:match("^k(%d+)$"))
        assert.are.equal(value_of(i), value)
        assert.are.equal("n=" .. i, hdrs)
        assert.are.equal(where[i].partition, tonumber(part))
        assert.are.equal(where[i].offset, tonumber(off))
      end
      assert.are.equal(N, n)
    end)
  end
end)
