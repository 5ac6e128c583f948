-- An independent oracle for the flexible versions (issue 16 item 2) and
-- the versions and APIs new in Kafka 4.4 (issue 30): kafka-clients
-- 4.4.0's own generated message classes
-- (org.apache.kafka.common.message.*Data, through their JsonConverters)
-- write the same bodies as lua-kafka, in one JVM run
-- (spec/support/kafka/CodecPeer.java). 4.4.0's definitions hold every
-- version 4.1.2's did, unchanged (tools/gen-apis.py checks that), so one
-- oracle serves the old cases and the new. Bodies are defined once, here:
-- the codec's body generator (nulls, empty and long strings, arrays,
-- records, tagged fields) makes a table, which becomes Kafka's JSON form
-- for Java. Then, for every vector: our encoding == Java's bytes exactly
-- (header included), our decoding of Java's bytes == the table, and
-- Java's classes read our bytes (every byte) back to the same message.
-- Kafka's error table (Errors) is compared with kafka.errors as well.
local proto = require "kafka.proto"
local core = require "kafka.core"
local gen = require "support.gen"
local H = require "support.helpers"
local cp = require "support.codecpeer"
local errors = require "kafka.errors"
local string, table, math = string, table, math
local ipairs, pairs, type, tostring, tonumber, select = ipairs, pairs, type, tostring, tonumber, select

-- The requests the client sends by default, in every flexible version
-- (and the non-flexible SASL ones), with their responses; then every API
-- with a version new in Kafka 4.4 (its flexible versions up to the new
-- ones), the two new APIs, and the share group APIs.
local APIS = {
  { "ApiVersions", 3, 5 }, { "Metadata", 9, 13 }, { "Produce", 9, 13 }, { "Fetch", 12, 18 },
  { "ListOffsets", 6, 11 }, { "OffsetCommit", 8, 10 }, { "OffsetFetch", 6, 10 },
  { "FindCoordinator", 3, 6 }, { "JoinGroup", 6, 9 }, { "SyncGroup", 4, 5 }, { "Heartbeat", 4, 4 },
  { "LeaveGroup", 4, 5 }, { "InitProducerId", 2, 5 }, { "CreateTopics", 5, 7 },
  { "SaslHandshake", 0, 1 }, { "SaslAuthenticate", 0, 2 }, { "ConsumerGroupHeartbeat", 0, 1 },
  -- new in 4.4
  { "TxnOffsetCommit", 3, 6 }, { "DeleteGroups", 2, 3 }, { "WriteTxnMarkers", 1, 2 },
  { "DescribeLogDirs", 2, 5 }, { "BrokerHeartbeat", 0, 2 }, { "AddRaftVoter", 0, 1 },
  { "ShareFetch", 1, 2 }, { "ShareAcknowledge", 1, 2 }, { "DescribeShareGroupOffsets", 0, 1 },
  { "WriteShareGroupState", 0, 1 }, { "ReadShareGroupStateSummary", 0, 1 },
  { "StreamsGroupHeartbeat", 0, 1 }, { "StreamsGroupDescribe", 0, 1 },
  { "StreamsGroupTopologyDescriptionUpdate", 0, 0 }, { "UnregisterController", 0, 0 },
  -- share groups (KIP-932)
  { "ShareGroupHeartbeat", 1, 1 }, { "ShareGroupDescribe", 1, 1 },
  { "AlterShareGroupOffsets", 0, 0 }, { "DeleteShareGroupOffsets", 0, 0 },
}
local DATA = {
  { "ConsumerProtocolSubscription", 0, 3 }, { "ConsumerProtocolAssignment", 0, 3 },
  { "EndTxnMarker", 0, 0 }, { "LeaderChangeMessage", 0, 1, bare = true },
  { "AbortedTxn", 0, 0 }, { "ControlRecordTypeSchema", 0, 0 },
}
local BODIES = 3 -- per api, version and direction

local function present(f, v) return f.vmin <= v and v <= f.vmax end
local function tagged(f, v) return f.tag >= 0 and f.tmin <= v and v <= f.tmax end

-- Whether val is the field's default: Java writes a tagged field only when
-- it is not, so the bodies leave default tagged values out.
local function is_default(f, val, v)
  if val == nil then return true end
  if f.array then return #val == 0 and not f.default_null end
  if f.default_null then return false end
  if f.type == "struct" then
    for _, g in ipairs(f.child.fields) do
      if present(g, v) and not is_default(g, val[g.name], v) then return false end
    end
    return true
  end
  if f.type == "uuid" then return val == ("\0"):rep(16) end
  if f.type == "bytes" or f.type == "records" then return val == "" end
  return val == f.default
end

local stats = { tagged = 0, null = 0, long_string = 0, empty_string = 0, empty_array = 0, records = 0, uuid = 0 }

-- Drops default tagged values (in place) and counts what the bodies hold.
local function prepare(s, t, v)
  for _, f in ipairs(s.fields) do
    if present(f, v) then
      local val = t[f.name]
      if tagged(f, v) and val ~= nil and is_default(f, val, v) then
        t[f.name] = nil
        val = nil
      elseif tagged(f, v) and val ~= nil then
        stats.tagged = stats.tagged + 1
      end
      if val == nil then
        if not tagged(f, v) then stats.null = stats.null + 1 end
      elseif f.array then
        if #val == 0 then stats.empty_array = stats.empty_array + 1 end
        if f.type == "struct" then
          for _, x in ipairs(val) do prepare(f.child, x, v) end
        end
      elseif f.type == "struct" then
        prepare(f.child, val, v)
      elseif f.type == "string" then
        if #val > 200 then stats.long_string = stats.long_string + 1 end
        if val == "" then stats.empty_string = stats.empty_string + 1 end
      elseif f.type == "records" then
        stats.records = stats.records + 1
      elseif f.type == "uuid" then
        stats.uuid = stats.uuid + 1
      end
    end
  end
end

-- The table as the JsonConverters' JSON.
local to_json
local function json_value(f, x, v)
  if f.type == "struct" then return to_json(f.child, x, v) end
  if f.type == "bytes" or f.type == "records" then return cp.base64(x) end
  if f.type == "uuid" then return cp.base64url(x) end
  return x
end
to_json = function(s, t, v)
  local o = {}
  for _, f in ipairs(s.fields) do
    local val = t[f.name]
    if present(f, v) and not (tagged(f, v) and val == nil) then
      local k = cp.camel(f.name)
      if val == nil then
        o[k] = cp.null
      elseif f.array then
        local a = cp.array {}
        for i, x in ipairs(val) do a[i] = json_value(f, x, v) end
        o[k] = a
      else
        o[k] = json_value(f, val, v)
      end
    end
  end
  return o
end

-- Our bytes of a case (the frame without its size), or nil when our
-- encoder refuses it (the comparison with Java's bytes says so then).
local function our_bytes(c)
  local b
  if c.kind == "request" then
    b = proto.encode_request(c.name, c.version, { correlation_id = c.corr, client_id = c.client_id }, c.lua_body)
  elseif c.kind == "response" then
    b = proto.encode_response(c.name, c.version, c.corr, c.lua_body)
  else
    return core.encode_data(c.name, c.version, c.lua_body, { bare = c.bare })
  end
  return b and b:sub(5)
end

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

-- The first difference of two byte strings, in hex with some context.
local function bytes_diff(want, got) return H.bytes_diff(want, got, "Java") end

describe("the codec against kafka-clients " .. cp.KAFKA .. "'s generated message classes", function()
  local r = H.rng(20260224)
  local cases, by_group, results = {}, {}, nil
  local client_ids = { "lua-kafka", "", nil, ("c"):rep(300) }

  local function add(group, c)
    cases[#cases + 1] = c
    by_group[group] = by_group[group] or {}
    table.insert(by_group[group], c)
  end

  for _, a in ipairs(APIS) do
    local name, lo, hi = a[1], a[2], a[3]
    local key = proto.api_key(name)
    for v = lo, hi do
      for i = 1, BODIES do
        for _, kind in ipairs { "request", "response" } do
          local body = gen.body(name, v, kind, r, { ascii = true })
          prepare(proto.schema(name, kind), body, v)
          local corr = r.int(0, 2147483647)
          local c = { id = ("%s/%s/%d/%d"):format(name, kind, v, i), kind = kind, name = name, key = key,
                      version = v, lua_body = body, corr = corr,
                      body = to_json(proto.schema(name, kind), body, v) }
          if kind == "request" then
            c.client_id = client_ids[(i + v) % #client_ids + 1]
            c.header = { requestApiKey = key, requestApiVersion = v, correlationId = corr,
                         clientId = c.client_id == nil and cp.null or c.client_id }
          else
            c.header = { correlationId = corr }
          end
          c.ours = our_bytes(c)
          add(name, c)
        end
      end
    end
  end
  for _, d in ipairs(DATA) do
    local name, lo, hi = d[1], d[2], d[3]
    for v = lo, hi do
      for i = 1, BODIES do
        local body = gen.body(name, v, "data", r, { ascii = true })
        prepare(proto.schema(name, "data"), body, v)
        local c = { id = ("%s/data/%d/%d"):format(name, v, i), kind = "data", name = name, version = v,
                    bare = d.bare or nil, lua_body = body, body = to_json(proto.schema(name, "data"), body, v) }
        c.ours = our_bytes(c)
        add(name, c)
      end
    end
  end

  -- Lengths and counts at every width of their unsigned varint (issue 28):
  -- a compact string, bytes or array writes n + 1, so n + 1 = 1, 127/128,
  -- 16383/16384 and 2^21 - 1/2^21 are the edges; a tagged field's size
  -- varint crosses them with its content. ApiVersions v3 responses carry a
  -- compact array (api_keys) and a tagged one (supported_features, tag 0)
  -- of compact strings; Metadata v12 requests compact strings in an array;
  -- SaslAuthenticate v2 requests compact bytes. Strings stop at 32767 bytes
  -- (Java refuses longer ones, compact or not, and so do we), so the 3- and
  -- 4-byte widths are met by counts and bytes. (The 5-byte width, 2^28,
  -- would need a 256 MiB body: records' varints cross it against
  -- kafka-python.)
  local EDGES = { 0, 1, 125, 126, 127, 128, 16381, 16382, 16383, 16384, 2097150, 2097151, 2097152 }
  local function boundary(kind, name, v, n, body)
    prepare(proto.schema(name, kind), body, v)
    local key = proto.api_key(name)
    local c = { id = ("%s/%s/%d/edge-%d"):format(name, kind, v, n), kind = kind, name = name, key = key, version = v,
                lua_body = body, corr = n, body = to_json(proto.schema(name, kind), body, v) }
    if kind == "request" then
      c.client_id = "edges"
      c.header = { requestApiKey = key, requestApiVersion = v, correlationId = n, clientId = "edges" }
    else
      c.header = { correlationId = n }
    end
    c.ours = our_bytes(c)
    add("varint edges", c)
  end
  for _, n in ipairs(EDGES) do
    if n <= 16384 then -- a count: n api keys of 7 bytes each
      local keys = {}
      for i = 1, n do keys[i] = { api_key = i % 32768, min_version = 0, max_version = i % 100 } end
      boundary("response", "ApiVersions", 3, n, { error_code = 0, api_keys = keys, throttle_time_ms = 0,
        supported_features = {}, finalized_features_epoch = -1, finalized_features = {}, zk_migration_ready = false })
    end
    -- a length: a feature name (inside the tagged field) and a topic name of
    -- n bytes, and n bytes of SASL
    local text = ("abcdefghij"):rep(math.ceil(n / 10) + 1):sub(1, n)
    if n <= 32767 then
      boundary("response", "ApiVersions", 4, n, { error_code = 0, api_keys = { { api_key = 18, min_version = 0,
        max_version = 4 } }, throttle_time_ms = 0, supported_features = { { name = text, min_version = 1,
        max_version = 2 } }, finalized_features_epoch = -1, finalized_features = {}, zk_migration_ready = false })
      boundary("request", "Metadata", 12, n, { topics = { { topic_id = ("\0"):rep(16), name = text } },
        allow_auto_topic_creation = true, include_topic_authorized_operations = false })
    end
    boundary("request", "SaslAuthenticate", 2, n, { auth_bytes = text })
  end

  -- Java's bytes for every case, in one JVM run (the first test that needs them)
  local function java()
    if not results then
      local wire = {}
      for i, c in ipairs(cases) do
        wire[i] = { id = c.id, kind = c.kind, name = c.name, key = c.key, version = c.version,
                    header = c.header, body = c.body, bare = c.bare, ours = c.ours and H.hex(c.ours) }
      end
      results = cp.run(wire)
    end
    return results
  end

  it("has every version it is meant to cover, and bodies that exercise the formats", function()
    for _, a in ipairs(APIS) do
      local lo, hi = proto.versions(a[1])
      assert(lo <= a[2] and a[3] <= hi, a[1] .. " lacks versions " .. a[2] .. "-" .. a[3])
    end
    assert.are.equal(18, select(2, proto.versions("Fetch")))
    assert.are.equal(13, select(2, proto.versions("Produce")))
    -- the newest versions are Kafka 4.4's (an API that gains one must join APIS)
    for _, a in ipairs(APIS) do
      if a[1] ~= "InitProducerId" then -- v6 is unstable in 4.4.0
        assert.are.equal(a[3], select(2, proto.versions(a[1])), a[1])
      end
    end
    for k, n in pairs(stats) do assert(n > 0, "no " .. k .. " in the bodies") end
    assert.is_true(#cases > 350)
  end)

  local function check(c, got, reread)
    if type(got) == "table" then return "Java could not write it: " .. got.err end
    if got == nil then return "no answer from Java" end
    -- Java's classes read our bytes, every one, and write the same message again
    if type(reread) == "table" then return "Java could not read ours: " .. reread.err end
    if reread == nil then return "Java did not read ours" end
    local rd = bytes_diff(c.ours, reread)
    if rd then return "Java reading ours: " .. rd end
    local ours, dec, err, d
    if c.kind == "request" then
      local hdr = { correlation_id = c.corr, client_id = c.client_id }
      ours = proto.encode_request(c.name, c.version, hdr, c.lua_body):sub(5)
      d = bytes_diff(got, ours)
      if d then return "encoding: " .. d end
      dec, err = proto.decode_request(be32(#got) .. got, { raw_records = true })
      if not dec then return "decoding Java's bytes: " .. tostring(err) end
      if dec.correlation_id ~= c.corr or dec.client_id ~= c.client_id then return "decoding Java's header" end
      dec = dec.body
    elseif c.kind == "response" then
      ours = proto.encode_response(c.name, c.version, c.corr, c.lua_body):sub(5)
      d = bytes_diff(got, ours)
      if d then return "encoding: " .. d end
      local corr
      corr, dec = proto.decode_response(c.name, c.version, be32(#got) .. got, { raw_records = true })
      if not corr then return "decoding Java's bytes: " .. tostring(dec) end
      if corr ~= c.corr then return "decoding Java's header" end
    else
      ours = core.encode_data(c.name, c.version, c.lua_body, { bare = c.bare })
      d = bytes_diff(got, ours)
      if d then return "encoding: " .. d end
      local v
      v, dec = core.decode_data(c.name, got, c.bare and { version = c.version } or nil)
      if not v then return "decoding Java's bytes: " .. tostring(dec) end
      if v ~= c.version then return "decoded version " .. tostring(v) end
    end
    d = H.deep_diff(c.lua_body, dec)
    if d then return "decoding Java's bytes: " .. tostring(d) end
    return nil
  end

  local groups = {}
  for _, a in ipairs(APIS) do groups[#groups + 1] = { a[1], a[2], a[3] } end
  for _, d in ipairs(DATA) do groups[#groups + 1] = { d[1], d[2], d[3] } end
  it("lengths and counts at every width edge of their varints (1, 2, 3 and 4 bytes): Java's bytes = ours, "
    .. "and ours decode them", function()
    local res = java()
    local bad, widths = {}, {}
    for _, c in ipairs(by_group["varint edges"]) do
      local problem = check(c, res[c.id], res[c.id .. "~read"])
      if problem then bad[#bad + 1] = c.id .. ": " .. problem end
    end
    assert(#bad == 0, #bad .. " of " .. #by_group["varint edges"] .. " vectors differ:\n" .. table.concat(bad, "\n"))
    -- the edges really are there: each width of n + 1 on both sides of it
    for _, n in ipairs(EDGES) do
      local w = n + 1 < 128 and 1 or n + 1 < 16384 and 2 or n + 1 < 2097152 and 3 or 4
      widths[w] = (widths[w] or 0) + 1
    end
    assert.are.same({ 4, 4, 3, 2 }, widths)
    -- 10 counts (n <= 16384), 10 edges x 2 strings (n <= 32767), 13 bytes
    assert.are.equal(43, #by_group["varint edges"])
  end)
  it("kafka.errors is Kafka " .. cp.KAFKA .. "'s error table: every code with its name, retriable as its "
    .. "exception is a RetriableException, and no other code", function()
    local n, ours_n = 0, 0
    for _, l in ipairs(cp.java { "errors" }) do
      local code, name, kind = l:match("^(%-?%d+) (%S+) (%a+)$")
      assert(code, "a line of Java's table: " .. l)
      code = tonumber(code)
      local e = errors[code]
      assert(e, ("%s (%d) is not in kafka.errors"):format(name, code))
      assert.are.same({ code, name, kind == "retriable" }, { e.code, e.name, e.retriable })
      n = n + 1
    end
    for k in pairs(errors) do if type(k) == "number" then ours_n = ours_n + 1 end end
    assert.are.equal(n, ours_n)
    assert.are.equal(138, n) -- -1 .. 136
  end)

  for _, g in ipairs(groups) do
    it(("%s v%d-%d: Java's bytes = ours, and ours decode them"):format(g[1], g[2], g[3]), function()
      local res = java()
      local bad = {}
      for _, c in ipairs(by_group[g[1]]) do
        local problem = check(c, res[c.id], res[c.id .. "~read"])
        if problem then bad[#bad + 1] = c.id .. ": " .. problem end
      end
      assert(#bad == 0, #bad .. " of " .. #by_group[g[1]] .. " vectors differ:\n" .. table.concat(bad, "\n"))
    end)
  end
end)
