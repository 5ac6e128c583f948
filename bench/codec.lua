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

local function check_rows(rows, vals, what)
  assert(rows and #rows == N and not rows.errors, what .. ": wrong record count")
  for i = 1, N do
    local r = rows[i]
    if r.offset ~= i - 1 or r.value ~= vals[i] or r.timestamp ~= TS or r.key ~= nil then
      error(("%s: record %d decoded wrong"):format(what, i))
    end
  end
end

local function check_columns(cols, vals, what)
  assert(cols and cols.n == N, what .. ": wrong record count")
  for i = 1, N do
    if cols.offset[i] ~= i - 1 or cols.value[i] ~= vals[i] or cols.timestamp[i] ~= TS then
      error(("%s: record %d decoded wrong"):format(what, i))
    end
  end
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
      -- the same batch from an array of values in one call (no Lua call
      -- per message: what a per-message call costs shows beside the row above)
      local enc = proto.encode_records(vals, { compression = codec })
      local cols = proto.decode_columns(enc)
      assert(cols.n == N, "encode_values: wrong record count")
      for i = 1, N do assert(cols.value[i] == vals[i] and cols.offset[i] == i - 1, "encode_values: record decoded wrong") end
      emit("encode_values", size, codec, median(function()
        return proto.encode_records(vals, { compression = codec })
      end))
      -- the call alone in encode_batch's row (its bound at 100 B): a
      -- builder method called with b:append's arguments that checks its
      -- builder and returns, doing no work
      emit("call_floor", size, codec, median(function()
        for i = 1, N do b:bytes_size(vals[i], nil, nil, TS) end
      end))
      emit("encode_request", size, codec, median(function()
        return proto.encode_request("Produce", 7, { correlation_id = 1, client_id = "bench" }, { acks = -1,
          timeout_ms = 1000, topic_data = { { name = "t", partition_data = { { index = 0, records = msgs } } } } })
      end))
    end
    local recs = proto.encode_records(msgs, { compression = codec })
    local frame = proto.encode_response("Fetch", 11, 1, { responses = { { topic = "t", partitions = {
      { partition_index = 0, high_watermark = N, records = recs } } } } })
    -- what is timed is checked once per run: every message back, exact
    local corr, body = proto.decode_response("Fetch", 11, frame)
    check_rows(corr == 1 and body.responses[1].partitions[1].records, vals, "decode_tables " .. codec)
    emit("decode_tables", size, codec, median(function() return proto.decode_response("Fetch", 11, frame) end))
    if codec == "none" then
      -- for scale beside the row above and a consumer: the messages alone,
      -- made in Lua with nothing decoded, one table and one fresh value
      -- string each: the decoder's 3 fields (offset, timestamp, value),
      -- then a consumer's 6 (topic, partition, high_watermark beside them)
      local blob = table.concat(vals)
      emit("alloc_floor", size, codec, median(function()
        local out = {}
        for i = 1, N do
          out[i] = { offset = i - 1, timestamp = TS, value = blob:sub((i - 1) * size + 1, i * size) }
        end
        return out
      end))
      emit("alloc_floor_consumer", size, codec, median(function()
        local out = {}
        for i = 1, N do
          out[i] = { topic = "t", partition = 0, high_watermark = N, offset = i - 1, timestamp = TS,
            value = blob:sub((i - 1) * size + 1, i * size) }
        end
        return out
      end))
    end
    check_columns(proto.decode_columns(recs), vals, "decode_columns " .. codec)
    emit("decode_columns", size, codec, median(function() return proto.decode_columns(recs) end))
    if codec == "none" then
      -- what a consumer's poll and poll_batch decode a fetched partition
      -- with (kafka.fetcher): the same records and options, into a message
      -- table each (topic, partition, high_watermark set in every one) or
      -- into poll_batch's columns (headers left raw)
      local set = { topic = "t", partition = 0, high_watermark = N }
      local ropts = { set = set, skip_control = true, batches = false, stop_at_error = true, min_offset = 0 }
      local copts = { skip_control = true, batches = false, stop_at_error = true, min_offset = 0 }
      local function rows()
        ropts.into = proto.new_array(N)
        local out = proto.decode_records(recs, ropts)
        ropts.into = nil
        return out
      end
      local function columns()
        copts.columns = { count = 0 }
        local out = proto.decode_records(recs, copts)
        copts.columns = nil
        return out
      end
      check_rows(rows(), vals, "decode_poll_rows")
      local c = columns()
      assert(c.count == N, "decode_poll_columns: wrong record count")
      for i = 1, N do
        assert(c.offsets[i] == i - 1 and c.values[i] == vals[i] and c.timestamps[i] == TS, "decode_poll_columns: wrong")
      end
      emit("decode_poll_rows", size, codec, median(rows))
      emit("decode_poll_columns", size, codec, median(columns))
    end
  end
end
