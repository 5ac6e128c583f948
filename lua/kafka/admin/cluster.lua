-- kafka.admin's cluster calls beyond describe_cluster: describe_features
-- (ApiVersions v3+ to any broker, as Java's describeFeatures),
-- update_features (UpdateFeatures to the controller) and describe_log_dirs
-- (DescribeLogDirs to each broker named: a broker answers for its own
-- disks). Installed into kafka.admin.
local proto = require "kafka.proto"
local check = require "kafka.check"
local client_mod = require "kafka.client"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local type, ipairs, tostring = type, ipairs, tostring
local table = table

local _M = {}

local function timeout_of(self, o) return o.timeout_ms or self.client.default_api_timeout_ms end

-- whole(name, resp) -> nil, err, code, kcode, retriable for a response's
-- top-level error (the client's retry service retries the retriable ones)
local function whole(name, code_, msg)
  local e = errors.info(code_)
  return nil, ("%s: %s: %s"):format(name, e.name, msg or e.message), e.retriable and "retriable" or "kafka", e.code,
    e.retriable
end

--- The cluster's feature flags (ApiVersions v3+: Kafka 2.7+), as Java's describeFeatures gives them.
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{finalized_features = {[name] = {min_version_level=, max_version_level=}},
-- finalized_features_epoch=, supported_features = {[name] = {min_version=, max_version=}}}`
-- (finalized_features_epoch nil when the broker has none), or nil, err, code
function _M:describe_features(opts)
  local o = B.opts("describe_features", opts)
  local client = self.client
  return client:call(function(deadline)
    local c, err, code = client:any_broker(deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, API.ApiVersions, 3)
    if not v then return nil, err, code end
    local resp
    resp, err, code = B.request(c, API.ApiVersions, { client_software_name = "lua-kafka",
      client_software_version = "1" }, v, deadline)
    if not resp then return nil, err, code end
    if resp.error_code ~= errors.NONE then return whole("ApiVersions", resp.error_code) end
    local out = { finalized_features = {}, supported_features = {},
      finalized_features_epoch = (resp.finalized_features_epoch or -1) >= 0 and resp.finalized_features_epoch or nil }
    for _, f in ipairs(resp.finalized_features or {}) do
      out.finalized_features[f.name] = { min_version_level = f.min_version_level, max_version_level = f.max_version_level }
    end
    for _, f in ipairs(resp.supported_features or {}) do
      out.supported_features[f.name] = { min_version = f.min_version, max_version = f.max_version }
    end
    return out
  end, { timeout_ms = timeout_of(self, o) })
end

-- Java's FeatureUpdate.UpgradeType codes
local UPGRADE = { upgrade = 1, safe_downgrade = 2, unsafe_downgrade = 3 }

--- Changes feature flags' finalized levels (UpdateFeatures, to the controller; Kafka 2.7+).
-- @tparam table updates `{{feature=, max_version_level=, upgrade_type = "upgrade"|"safe_downgrade"|
-- "unsafe_downgrade"}...}` (upgrade_type default "upgrade"; level 0 removes the feature)
-- @tparam[opt] table opts `validate_only` (UpdateFeatures v1+), `timeout_ms`
-- @treturn table one result per update: `{feature=, error_code=, error=, code=}`
function _M:update_features(updates, opts)
  local where = "update_features"
  local o = B.opts(where, opts, { "validate_only" })
  if type(updates) ~= "table" then check.fail(where, "updates", "an array of {feature=, max_version_level=} tables", updates) end
  local results, body, seen = {}, {}, {}
  for i, u in ipairs(updates) do
    local a = "updates[" .. i .. "]"
    if type(u) ~= "table" or type(u.feature) ~= "string" or u.feature == "" then
      check.fail(where, a, "a {feature=, max_version_level=} table", u)
    end
    if seen[u.feature] then check.fail(where, a .. ".feature", "a feature not listed before", u.feature) end
    seen[u.feature] = true
    local level = check.int(where, a .. ".max_version_level", u.max_version_level, nil, 0, 32767)
    if level == nil then check.fail(where, a .. ".max_version_level", "an integer in 0..32767", nil) end
    check.oneof(where, a .. ".upgrade_type", u.upgrade_type, nil, { "upgrade", "safe_downgrade", "unsafe_downgrade" })
    local ut = UPGRADE[u.upgrade_type or "upgrade"]
    results[i] = { feature = u.feature }
    body[results[i]] = { feature = u.feature, max_version_level = level, allow_downgrade = ut ~= 1, upgrade_type = ut }
  end
  local client, tmo = self.client, timeout_of(self, o)
  return B.run(self, results, function(pending, deadline)
    local c, err, code = B.controller(client, deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, API.UpdateFeatures, o.validate_only and 1 or 0)
    if not v then return nil, err, code end
    local list = {}
    for i, r in ipairs(pending) do list[i] = body[r] end
    local resp
    resp, err, code = B.request(c, API.UpdateFeatures, { timeout_ms = tmo, feature_updates = list,
      validate_only = o.validate_only or false }, v, deadline)
    if not resp then return nil, err, code end
    local retry, again = {}, { [errors.NOT_CONTROLLER] = true }
    if resp.error_code ~= errors.NONE or v >= 2 then
      -- the top-level error applies to every update (v2+ has no per-feature results)
      for _, r in ipairs(pending) do B.settle(r, resp.error_code, resp.error_message, retry, again) end
    else
      local by = {}
      for _, x in ipairs(resp.results or {}) do by[x.feature] = x end
      for _, r in ipairs(pending) do
        local x = by[r.feature]
        if x then B.settle(r, x.error_code, x.error_message, retry, again)
        else B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
      end
    end
    if resp.error_code == errors.NOT_CONTROLLER then client.controller_id = nil end
    return true, retry
  end, { timeout_ms = tmo })
end

--- The log directories of brokers (DescribeLogDirs to each broker; Kafka 1.0+).
-- @tparam {number,...} brokers broker ids
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table one result per broker: `{broker=, log_dirs = {{log_dir=, total_bytes=, usable_bytes=,
-- partitions = {{topic=, partition=, size=, offset_lag=, is_future=}...}, error_code=, error=, code=}...},
-- error_code=, error=, code=}`, log dirs by path, partitions by topic and partition (total_bytes and
-- usable_bytes nil before DescribeLogDirs v4, Kafka 3.3)
function _M:describe_log_dirs(brokers, opts)
  local where = "describe_log_dirs"
  local o = B.opts(where, opts)
  if type(brokers) ~= "table" then check.fail(where, "brokers", "an array of broker ids", brokers) end
  local results = {}
  for i, id in ipairs(brokers) do
    check.int(where, "brokers[" .. i .. "]", id, nil, 0)
    results[i] = { broker = id }
  end
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local retry, answered, last = {}, false, nil
    for _, r in ipairs(pending) do
      local c, err, code = client:broker(r.broker, deadline)
      if not c and code == "metadata" then
        client:load_metadata({ topics = {} }, deadline)
        c, err, code = client:broker(r.broker, deadline)
      end
      local v, resp
      if c then v, err, code = B.version(c, API.DescribeLogDirs) end
      if v then resp, err, code = B.request(c, API.DescribeLogDirs, { topics = nil }, v, deadline) end
      if resp and (resp.error_code or 0) ~= errors.NONE then
        answered = true
        B.settle(r, resp.error_code, nil, retry)
      elseif resp then
        answered = true
        B.ok(r)
        local dirs = {}
        for i, d in ipairs(resp.results or {}) do
          local parts = {}
          for _, t in ipairs(d.topics or {}) do
            for _, p in ipairs(t.partitions or {}) do
              parts[#parts + 1] = { topic = t.name, partition = p.partition_index, size = p.partition_size,
                offset_lag = p.offset_lag, is_future = p.is_future_key }
            end
          end
          dirs[i] = { log_dir = d.log_dir, partitions = B.sort_tps(parts),
            total_bytes = (d.total_bytes or -1) >= 0 and d.total_bytes or nil,
            usable_bytes = (d.usable_bytes or -1) >= 0 and d.usable_bytes or nil }
          if d.error_code == errors.NONE then B.ok(dirs[i]) else B.fail(dirs[i], d.error_code) end
        end
        table.sort(dirs, function(a, b) return a.log_dir < b.log_dir end)
        r.log_dirs = dirs
      else
        B.fail(r, nil, tostring(err), code)
        if client_mod.RETRIABLE[code] then retry[#retry + 1] = r end
        last = { err, code }
      end
    end
    if not answered and last then return nil, last[1], last[2] end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

return _M
