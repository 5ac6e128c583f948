-- kafka.admin's cluster calls (describe_features, update_features,
-- describe_log_dirs) against a real Kafka broker, Kafka's Java AdminClient
-- as the oracle: what we describe equals what Java describes, what we
-- change Java reads back. Runs with SPEC_ADMIN=1 only (`make admin`; it
-- shares spec/admin_spec.lua's single-node cluster there).
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local proto = require "kafka.proto"
local errors = proto.errors

if os.getenv("SPEC_ADMIN") ~= "1" then
  describe("kafka.admin cluster calls against a real broker", function()
    pending("runs with SPEC_ADMIN=1 (make admin)")
  end)
  return
end

local version = rk.main()

describe("kafka.admin cluster calls on Kafka " .. version, function()
  local k, admin
  setup(function()
    k = rk.cluster(version, 1)
    admin = kafka.admin.new { brokers = k.bootstrap.PLAINTEXT, client_id = "admin-cluster-spec" }
  end)
  teardown(function() if admin then admin:close() end end)

  local function java(args) return rk.java(args, { bootstrap = k.bootstrap.PLAINTEXT }) end

  -- same(java_lines, ours): equal but for the epoch (KRaft's last metadata
  -- offset, which grows while the cluster runs): ours, read first, is at most Java's
  local function same(j, ours)
    local je, oe = tonumber(j[1]:match("^EPOCH (%d+)$")), tonumber(ours[1]:match("^EPOCH (%d+)$"))
    assert.truthy(je and oe and oe <= je, j[1] .. " / " .. ours[1])
    local a, b = {}, {}
    for i = 2, #j do a[#a + 1] = j[i] end
    for i = 2, #ours do b[#b + 1] = ours[i] end
    assert.same(a, b)
  end

  local function feature_lines(f)
    local out = { "EPOCH " .. (f.finalized_features_epoch or "-") }
    local lines = {}
    for name, x in pairs(f.finalized_features) do
      lines[#lines + 1] = ("FIN %s %d %d"):format(name, x.min_version_level, x.max_version_level)
    end
    for name, x in pairs(f.supported_features) do
      lines[#lines + 1] = ("SUP %s %d %d"):format(name, x.min_version, x.max_version)
    end
    table.sort(lines)
    for _, l in ipairs(lines) do out[#out + 1] = l end
    return out
  end

  it("describe_features equals Java's; update_features: validate_only, a refused level, a change Java reads back", function()
    local f = assert(admin:describe_features())
    same(java { "describe-features" }, feature_lines(f))
    assert.truthy(f.finalized_features["metadata.version"])
    -- a feature whose finalized level can move: its supported range's top, or back from there
    local name = "eligible.leader.replicas.version"
    local sup = assert(f.supported_features[name], "no " .. name)
    local cur = f.finalized_features[name] and f.finalized_features[name].max_version_level or 0
    local res = assert(admin:update_features({ { feature = name, max_version_level = sup.max_version + 1 } }))
    assert.equal(errors.INVALID_UPDATE_VERSION, res[1].error_code)
    assert.equal("kafka", res[1].code)
    local target = cur == sup.max_version and sup.min_version or sup.max_version
    local kind = target < cur and "safe_downgrade" or "upgrade"
    res = assert(admin:update_features({ { feature = name, max_version_level = target, upgrade_type = kind } },
      { validate_only = true }))
    assert.equal(0, res[1].error_code, res[1].error)
    local after = assert(admin:describe_features())
    assert.same(feature_lines(f)[2], feature_lines(after)[2]) -- validate_only: unchanged
    res = assert(admin:update_features({ { feature = name, max_version_level = target, upgrade_type = kind } }))
    assert.equal(0, res[1].error_code, res[1].error)
    local seen
    for _, l in ipairs(java { "describe-features" }) do
      if l:find("^FIN " .. name:gsub("%.", "%%.") .. " ") then seen = l end
    end
    if target == 0 then assert.is_nil(seen) else assert.equal(("FIN %s 1 %d"):format(name, target), seen) end
    -- and back, as Java would
    java { "update-feature", name, tostring(cur), cur < target and "SAFE_DOWNGRADE" or "UPGRADE" }
    local ours = feature_lines(assert(admin:describe_features()))
    same(java { "describe-features" }, ours)
  end)

  it("describe_log_dirs equals Java's: the broker's log dir, a topic's partitions with their sizes", function()
    local t = rt.uniq("adm-dirs")
    java { "create", t, 2, 1 }
    rk.java({ "produce", t, 20, "none", "plain" }, { bootstrap = k.bootstrap.PLAINTEXT })
    local res = assert(admin:describe_log_dirs { 1, 99 })
    local r = res[1]
    assert.equal(0, r.error_code, r.error)
    local lines = {}
    for _, d in ipairs(r.log_dirs) do
      lines[#lines + 1] = ("DIR %s %s %s"):format(d.log_dir, d.error_code == 0 and "-" or d.error, d.total_bytes or "-")
      for _, p in ipairs(d.partitions) do
        if p.topic == t then
          lines[#lines + 1] = ("PART %s %s %d %d %d %s"):format(d.log_dir, p.topic, p.partition, p.size, p.offset_lag,
            tostring(p.is_future))
        end
      end
    end
    assert.same(java { "describe-log-dirs", 1, t }, lines)
    local total = 0
    for _, d in ipairs(r.log_dirs) do for _, p in ipairs(d.partitions) do if p.topic == t then total = total + p.size end end end
    assert.truthy(total > 0)
    -- a broker the cluster does not have: that broker's result alone
    assert.equal(99, res[2].broker)
    assert.equal("metadata", res[2].code)
  end)
end)
