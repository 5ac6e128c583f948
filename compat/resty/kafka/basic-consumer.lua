-- resty.kafka.basic-consumer (lua-resty-kafka 0.23's API) on kafka.client
-- and kafka.proto: list_offset and fetch of one partition, no group. The
-- records are lua-kafka's decoding (message sets v0/v1 and RecordBatch v2,
-- every codec, headers). What differs from the original: docs/migrating.md.
--
--   local bconsumer = require "resty.kafka.basic-consumer"
--   local c = bconsumer:new(broker_list)
--   local offset = c:list_offset("topic", 0, protocol_consumer.LIST_OFFSET_TIMESTAMP_FIRST)
--   local result = c:fetch("topic", 0, offset)   -- result.records = {{offset=, timestamp=, key=, value=}...}
local proto = require "kafka.proto"
local client = require "resty.kafka.client"
local Errors = require "resty.kafka.errors"
local producer = require "resty.kafka.producer"
local protocol_consumer = require "resty.kafka.protocol.consumer"

local setmetatable, tonumber, tostring, type, ipairs = setmetatable, tonumber, tostring, type, ipairs

local API = proto.api
local ll = producer._ll

local _M = { _VERSION = "0.23" }
local mt = { __index = _M }

local MAX_BYTES = 10 * 1024 * 1024 -- the original's Fetch max_bytes and partition_max_bytes
local MAX_WAIT_MS = 100

-- new(broker_list [, client_config]): client_config also takes
-- isolation_level (0, or 1: read_committed) and client_rack
function _M.new(_, broker_list, client_config)
  local opts = client_config or {}
  local cli = client:new(broker_list, client_config)
  return setmetatable({
    client = cli,
    isolation_level = opts.isolation_level or 0,
    client_rack = opts.client_rack or "default",
  }, mt)
end

local function kafka_error(kcode)
  return (Errors[kcode] or Errors[-1]).msg
end

-- an offset as users pass it back: a number, cdata LL, or the "42LL"
-- strings list_offset returns
local function to_number(v)
  if type(v) == "number" then return v end
  if type(v) == "string" then return tonumber((v:gsub("[LlUu]+$", ""))) end
  return tonumber(v)
end

-- list_offset(topic, partition [, timestamp]) -> the offset as the
-- original returns it (tostring of the int64: "42LL" under LuaJIT) | nil, err.
-- timestamp: ms, or protocol_consumer.LIST_OFFSET_TIMESTAMP_FIRST (default)
-- / _LAST / _MAX
function _M.list_offset(self, topic, partition, timestamp)
  timestamp = timestamp or protocol_consumer.LIST_OFFSET_TIMESTAMP_FIRST
  local conf, err = self.client:choose_broker(topic, partition)
  if not conf then return nil, err end
  local off, code, kcode
  off, err, code, kcode = self.client.kc:list_offsets(topic, partition, to_number(timestamp), self.isolation_level)
  if not off then
    if code == "kafka" or kcode then return nil, kafka_error(kcode) end
    return nil, tostring(err)
  end
  return tostring(ll(off))
end

-- fetch(topic, partition, offset) -> result | nil, err: one Fetch (at most
-- 100 ms, 10 MiB) from offset on. result = {records = {{offset=, timestamp=,
-- key=, value=, headers=}...}, errcode=, high_watermark=,
-- last_stable_offset=, log_start_offset=, aborted_transactions=,
-- preferred_read_replica=}, offsets as cdata LL under LuaJIT
function _M.fetch(self, topic, partition, offset)
  local cli = self.client
  local conf, err = cli:choose_broker(topic, partition)
  if not conf then return nil, err end
  local from = to_number(offset)
  if not from then return nil, "bad offset " .. tostring(offset) end
  local kc = cli.kc
  local c
  c, err = kc:route(topic, partition)
  if not c then return nil, tostring(err) end
  local v
  v, err = c:version(API.Fetch)
  if not v then return nil, tostring(err) end
  -- v13+ name the topic by its id (the metadata's; none: by name, v12)
  local md = kc.topics[topic]
  local id = md and proto.uuid_text(md.topic_id) and md.topic_id
  if not id and v > 12 then v = 12 end
  local resp
  resp, err = c:request(API.Fetch, { replica_id = -1, max_wait_ms = MAX_WAIT_MS, min_bytes = 0, max_bytes = MAX_BYTES,
    isolation_level = self.isolation_level, session_id = 0, session_epoch = -1,
    topics = { { topic = topic, topic_id = id, partitions = { { partition = partition, fetch_offset = from, current_leader_epoch = -1,
      log_start_offset = -1, last_fetched_epoch = -1, partition_max_bytes = MAX_BYTES } } } },
    forgotten_topics_data = {}, rack_id = self.client_rack },
    { version = v, timeout_ms = MAX_WAIT_MS, decode = { raw_records = true } })
  if not resp then return nil, tostring(err) end
  if resp.error_code and resp.error_code ~= 0 then return nil, kafka_error(resp.error_code) end
  local pr = resp.responses and resp.responses[1] and resp.responses[1].partitions
    and resp.responses[1].partitions[1]
  if not pr then return nil, "Fetch response without the partition" end
  if pr.error_code ~= 0 then
    if pr.error_code == proto.errors.NOT_LEADER_OR_FOLLOWER then kc:invalidate(topic) end
    return nil, kafka_error(pr.error_code)
  end
  local records = {}
  local raw = pr.records
  if raw and #raw > 0 then
    local msgs, info = proto.decode_records(raw, { min_offset = from, skip_control = true })
    if not msgs then return nil, tostring(info) end
    for i, m in ipairs(msgs) do
      records[i] = { offset = ll(m.offset), timestamp = ll(m.timestamp or 0), key = m.key, value = m.value,
        headers = m.headers }
    end
  end
  local aborted
  if v >= 4 then
    aborted = {}
    for i, a in ipairs(pr.aborted_transactions or {}) do
      aborted[i] = { producer_id = ll(a.producer_id), first_offset = ll(a.first_offset) }
    end
  end
  return {
    records = records,
    errcode = pr.error_code,
    high_watermark = ll(pr.high_watermark),
    last_stable_offset = v >= 4 and ll(pr.last_stable_offset) or nil,
    log_start_offset = v >= 5 and ll(pr.log_start_offset) or nil,
    aborted_transactions = aborted,
    preferred_read_replica = v >= 11 and pr.preferred_read_replica or nil,
  }
end

return _M
