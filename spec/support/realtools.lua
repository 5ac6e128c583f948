-- Helpers of the real-broker specs: topics made with CreateTopics, reading
-- a whole topic back, the batches a broker stores, unique names.
local kafka = require "kafka"
local proto = require "kafka.proto"
local socket = require "socket"
local assert, ipairs, pairs, tostring, error = assert, ipairs, pairs, tostring, error
local os, string, table, math = os, string, table, math

local _M = {}

local n = 0
-- uniq(prefix) -> a topic or group name no earlier run used
function _M.uniq(prefix)
  n = n + 1
  return ("%s-%d-%d-%d"):format(prefix, os.time(), math.random(1, 1e6), n)
end

-- create_topic(client, name, partitions, rf [, configs]): CreateTopics,
-- then waits (deadline 30 s) until the metadata shows a leader for every
-- partition.
function _M.create_topic(client, name, partitions, rf, configs)
  local cfg = {}
  for k, v in pairs(configs or {}) do cfg[#cfg + 1] = { name = k, value = tostring(v) } end
  local c = assert(client:any_broker())
  local resp = assert(c:request(proto.api_key("CreateTopics"), {
    topics = { { name = name, num_partitions = partitions, replication_factor = rf or 1,
      assignments = {}, configs = cfg } },
    timeout_ms = 30000,
  }))
  local t = resp.topics[1]
  if t.error_code ~= 0 then
    error(("CreateTopics %s: %s %s"):format(name, proto.errors.info(t.error_code).name, tostring(t.error_message)), 2)
  end
  local deadline = socket.gettime() + 30
  while socket.gettime() < deadline do
    client:invalidate(name)
    local md = client:metadata { name }
    local tp = md and md.topics[name]
    if tp and tp.error_code == 0 and tp.count == partitions then
      local all = true
      for p = 0, partitions - 1 do
        if not tp.partitions[p] or (tp.partitions[p].leader or -1) < 0 then all = false end
      end
      -- the leader answers for the partition (metadata can run ahead of
      -- the leader's log): ListOffsets gets an offset, not NOT_LEADER
      for p = 0, partitions - 1 do
        if all and client:list_offsets(name, p, "latest") ~= 0 then all = false end
      end
      if all then return end
    end
    socket.sleep(0.1)
  end
  error("topic " .. name .. " has no leaders after 30 s", 2)
end

-- group_session_timeout(client, group, ms): the consumer protocol's
-- session timeout is the group's (IncrementalAlterConfigs on the GROUP
-- resource), the broker's 10 s unless the group sets one; 6 s (the
-- brokers' minimum) moves a killed member's partitions sooner.
local GROUP_RESOURCE = 32 -- ConfigResource.Type.GROUP (KIP-848)
function _M.group_session_timeout(client, group, ms)
  local c = assert(client:any_broker())
  local resp = assert(c:request(proto.api_key("IncrementalAlterConfigs"), { validate_only = false,
    resources = { { resource_type = GROUP_RESOURCE, resource_name = group,
      configs = { { name = "consumer.session.timeout.ms", config_operation = 0, value = tostring(ms) } } } } }))
  local r = resp.responses[1]
  assert(r.error_code == 0, tostring(r.error_message))
end

-- consume_all(client, topic, partitions, count [, opts]) -> messages by
-- partition ({[p] = {msg...}}), total: reads from the earliest offset
-- until count messages or the deadline (opts.seconds, 30).
function _M.consume_all(client, topic, partitions, count, opts)
  opts = opts or {}
  local c = kafka.consumer.new(client, { auto_offset_reset = "earliest", fetch_max_wait_ms = 200,
    isolation_level = opts.isolation_level })
  local list = {}
  for p = 0, partitions - 1 do list[#list + 1] = { topic = topic, partition = p, offset = "earliest" } end
  assert(c:assign(list))
  local starts = {} -- where assign put each partition, for the message of a short count
  for p = 0, partitions - 1 do starts[#starts + 1] = tostring(c:position(topic, p)) end
  local by, total = {}, 0
  for p = 0, partitions - 1 do by[p] = {} end
  local deadline = socket.gettime() + (opts.seconds or 30)
  local last_err -- what the polls said, for the failure message of a short count
  while total < count and socket.gettime() < deadline do
    local ms, err, code = c:poll(200)
    if not ms then
      last_err = ("%s (%s)"):format(tostring(err), tostring(code))
      if opts.on_error then opts.on_error(err, code) end
    end
    for _, pe in ipairs(ms and ms.errors or {}) do last_err = ("%s/%d: %s (%s)"):format(topic, pe.partition,
      tostring(pe.err), tostring(pe.code)) end
    for _, m in ipairs(ms or {}) do
      local t = by[m.partition]
      t[#t + 1] = m
      total = total + 1
    end
  end
  local ends = {}
  for p = 0, partitions - 1 do ends[#ends + 1] = tostring(c:position(topic, p)) end
  c:close()
  if total < count then
    io.stderr:write(("consume_all %s: %d of %d; positions after assign %s, at the end %s; the last error: %s\n")
      :format(topic, total, count, table.concat(starts, ","), table.concat(ends, ","), tostring(last_err)))
  end
  return by, total
end

-- stored_batches(client, topic, partition) -> the batches the broker
-- holds below the high watermark ({magic=, compression=, control=, ...}
-- each), read by Fetch requests from offset 0 and decoded here. A broker
-- may answer with fewer batches than it has below the high watermark, so
-- this asks again from where the last answer ended.
function _M.stored_batches(client, topic, partition)
  local leader = assert(client:leader(topic, partition))
  local c = assert(client:broker(leader))
  local fetch = proto.api_key("Fetch")
  local v = assert(c:version(fetch))
  local all, offset = {}, 0
  for _ = 1, 1000 do
    local resp = assert(c:request(fetch, {
      replica_id = -1, max_wait_ms = 0, min_bytes = 1, max_bytes = 64 * 1048576, isolation_level = 0,
      session_id = 0, session_epoch = -1,
      -- (by name and id: v13+ reads the id, older versions the name)
      topics = { { topic = topic, topic_id = client.topics[topic].topic_id, partitions = { { partition = partition,
        fetch_offset = offset,
        log_start_offset = -1, partition_max_bytes = 64 * 1048576, current_leader_epoch = -1 } } } },
      forgotten_topics_data = {}, rack_id = "",
    }, { version = v, decode = { raw_records = true } }))
    local p = resp.responses[1].partitions[1]
    assert(p.error_code == 0, "fetch error " .. tostring(p.error_code))
    local _, info = proto.decode_records(p.records or "")
    for _, b in ipairs(info.batches) do
      all[#all + 1] = b
      offset = b.base_offset + (b.last_offset_delta or 0) + 1
    end
    if offset >= p.high_watermark or #info.batches == 0 then return all end
  end
  error("stored_batches: no end to " .. topic .. "/" .. partition)
end

-- java_sasl_ssl(k [, mechanism]) -> the Java client's settings for the
-- cluster's SASL_SSL listener as alice (SCRAM-SHA-512 unless given; the
-- CA as a PEM trust store), for rk.java's props
function _M.java_sasl_ssl(k, mechanism)
  mechanism = mechanism or "SCRAM-SHA-512"
  local module = mechanism == "PLAIN" and "org.apache.kafka.common.security.plain.PlainLoginModule"
    or "org.apache.kafka.common.security.scram.ScramLoginModule"
  return {
    ["security.protocol"] = "SASL_SSL", ["sasl.mechanism"] = mechanism,
    ["sasl.jaas.config"] = module .. ' required username="alice" password="alice-secret";',
    ["ssl.truststore.type"] = "PEM", ["ssl.truststore.location"] = k.dir .. "/ca.pem",
  }
end

-- keys_hex(list) -> the hex of every key, for the Java partitioner
function _M.hex(s)
  return (s:gsub(".", function(ch) return string.format("%02x", ch:byte()) end))
end

-- sorted(t) -> t sorted in place and returned
function _M.sorted(t)
  table.sort(t)
  return t
end

return _M
