-- bench/codec.lua: the codec from Lua. Runs under lua5.4 and luajit; prints
-- "op<TAB>size<TAB>codec<TAB>msgs_per_sec" lines, each the median of RUNS
-- runs after a warm-up, 10,000 messages per run.
local proto = require "kafka.proto"
local clock = os.clock
local N = 10000
local RUNS = tonumber(os.getenv("BENCH_RUNS")) or 7
local TS = 1700000000000

local function median(f)
  f()
  local t = {}
  for i = 1, RUNS do
    collectgarbage() -- every run starts from a clean heap
    local t0 = clock()
    f()
    t[i] = clock() - t0
  end
  table.sort(t)
  return N / t[math.floor((RUNS + 1) / 2)]
end

local function values(size)
  local v = {}
  for i = 1, N do
    local id = tostring(i)
    v[i] = id .. ("x"):rep(size - #id)
  end
  return v
end

local function emit(op, size, codec, rate)
  io.write(("%s\t%d\t%s\t%.0f\n"):format(op, size, codec, rate))
  io.flush()
end

for _, size in ipairs({ 100, 1024 }) do
  local vals = values(size)
  local msgs = {}
  for i = 1, N do msgs[i] = { value = vals[i], timestamp = TS } end
  for _, codec in ipairs({ "none", "gzip", "snappy", "lz4", "zstd" }) do
    local b = proto.batch { compression = codec }
    emit("encode_batch", size, codec, median(function()
      b:clear()
      for i = 1, N do b:append(vals[i], nil, nil, TS) end
      return b:encode()
    end))
    if codec == "none" then
      emit("encode_request", size, codec, median(function()
        return proto.encode_request("Produce", 7, { correlation_id = 1, client_id = "bench" }, { acks = -1,
          timeout_ms = 1000, topic_data = { { name = "t", partition_data = { { index = 0, records = msgs } } } } })
      end))
    end
    local recs = proto.encode_records(msgs, { compression = codec })
    local frame = proto.encode_response("Fetch", 11, 1, { responses = { { topic = "t", partitions = {
      { partition_index = 0, high_watermark = N, records = recs } } } } })
    emit("decode_tables", size, codec, median(function() return proto.decode_response("Fetch", 11, frame) end))
    emit("decode_columns", size, codec, median(function() return proto.decode_columns(recs) end))
  end
end
