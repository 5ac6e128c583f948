-- The classic protocol's assignors (kafka.group.assignors) with exact
-- results, and the group options and calls checked at the door.
local assignors = require "kafka.group.assignors"
local kafka = require "kafka"

local function m(id, topics, owned, generation, instance)
  local o = {}
  for _, x in ipairs(owned or {}) do o[#o + 1] = { topic = x[1], partition = x[2] } end
  return { member_id = id, topics = topics, owned = o, generation = generation, instance_id = instance }
end

-- {member = {"t:p", ...}} for comparing
local function flat(result)
  local out = {}
  for id, list in pairs(result) do
    local t = {}
    for i, tp in ipairs(list) do t[i] = tp.topic .. ":" .. tp.partition end
    out[id] = t
  end
  return out
end

local function range(topic, a, b)
  local t = {}
  for p = a, b do t[#t + 1] = topic .. ":" .. p end
  return t
end

local function owned(topic, list)
  local t = {}
  for i, p in ipairs(list) do t[i] = { topic, p } end
  return t
end

describe("assignors", function()
  it("range: consecutive ranges per topic, the first members one more", function()
    local r = assignors.range({ m("m2", { "t" }), m("m1", { "t" }), m("m3", { "t" }) }, { t = 12 })
    assert.are.same({ m1 = range("t", 0, 3), m2 = range("t", 4, 7), m3 = range("t", 8, 11) }, flat(r))
    r = assignors.range({ m("b", { "t1", "t2" }), m("a", { "t1", "t2" }) }, { t1 = 5, t2 = 3 })
    assert.are.same({ a = { "t1:0", "t1:1", "t1:2", "t2:0", "t2:1" }, b = { "t1:3", "t1:4", "t2:2" } }, flat(r))
  end)

  it("range orders static members by group_instance_id, as Java does", function()
    local r = assignors.range({ m("a", { "t" }, nil, nil, "z"), m("b", { "t" }, nil, nil, "y") }, { t = 4 })
    assert.are.same({ b = range("t", 0, 1), a = range("t", 2, 3) }, flat(r))
  end)

  it("range and roundrobin skip topics a member is not subscribed to, and missing topics", function()
    local r = assignors.range({ m("a", { "t1" }), m("b", { "t1", "t2", "gone" }) }, { t1 = 2, t2 = 2 })
    assert.are.same({ a = { "t1:0" }, b = { "t1:1", "t2:0", "t2:1" } }, flat(r))
    r = assignors.roundrobin({ m("a", { "t1" }), m("b", { "t1", "t2" }) }, { t1 = 3, t2 = 2 })
    assert.are.same({ a = { "t1:0", "t1:2" }, b = { "t1:1", "t2:0", "t2:1" } }, flat(r))
  end)

  it("roundrobin: every partition of every topic in turn", function()
    local r = assignors.roundrobin({ m("m1", { "t1", "t2" }), m("m2", { "t1", "t2" }) }, { t1 = 5, t2 = 3 })
    assert.are.same({ m1 = { "t1:0", "t1:2", "t1:4", "t2:1" }, m2 = { "t1:1", "t1:3", "t2:0", "t2:2" } }, flat(r))
  end)

  it("cooperative-sticky: the owner keeps its share; what moves is handed over in the follow-up rebalance", function()
    local coop = assignors["cooperative-sticky"]
    local all = {}
    for p = 0, 11 do all[#all + 1] = p end
    -- m1 owned everything: it keeps 4, nothing moves to m2/m3 yet
    local r = coop({ m("m1", { "t" }, owned("t", all), 1), m("m2", { "t" }), m("m3", { "t" }) }, { t = 12 })
    assert.are.same({ m1 = range("t", 0, 3), m2 = {}, m3 = {} }, flat(r))
    -- the follow-up: m1 revoked 4-11, they go to m2 and m3
    r = coop({ m("m1", { "t" }, owned("t", { 0, 1, 2, 3 }), 2), m("m2", { "t" }), m("m3", { "t" }) }, { t = 12 })
    assert.are.same({ m1 = range("t", 0, 3), m2 = { "t:4", "t:6", "t:8", "t:10" }, m3 = { "t:5", "t:7", "t:9", "t:11" } },
      flat(r))
    -- a third member: both owners keep 4 of their 6
    r = coop({ m("m1", { "t" }, owned("t", { 0, 1, 2, 3, 4, 5 }), 3), m("m2", { "t" }, owned("t", { 6, 7, 8, 9, 10, 11 }), 3),
      m("m3", { "t" }) }, { t = 12 })
    assert.are.same({ m1 = range("t", 0, 3), m2 = range("t", 6, 9), m3 = {} }, flat(r))
    r = assignors.sticky({ m("m1", { "t" }, owned("t", { 0, 1, 2, 3, 4, 5 }), 3),
      m("m2", { "t" }, owned("t", { 6, 7, 8, 9, 10, 11 }), 3), m("m3", { "t" }) }, { t = 12 })
    assert.are.same({ m1 = range("t", 0, 3), m2 = range("t", 6, 9), m3 = { "t:4", "t:5", "t:10", "t:11" } }, flat(r))
  end)

  it("cooperative-sticky: a partition claimed by two members stays with the newer generation", function()
    local r = assignors["cooperative-sticky"]({ m("m1", { "t" }, owned("t", { 0, 1 }), 5), m("m2", { "t" }, owned("t", { 0 }), 4) },
      { t = 2 })
    assert.are.same({ m1 = { "t:0" }, m2 = {} }, flat(r))
  end)

  it("every assignor gives each partition to exactly one member", function()
    for _, name in ipairs(assignors.NAMES) do
      local members = {}
      for i = 1, 5 do members[i] = m("m" .. i, i % 2 == 0 and { "a", "b" } or { "a", "b", "c" }) end
      local r = assignors[name](members, { a = 7, b = 3, c = 5 })
      local seen, n = {}, 0
      for id, list in pairs(r) do
        for _, tp in ipairs(list) do
          local k = tp.topic .. ":" .. tp.partition
          assert.is_nil(seen[k], name .. ": " .. k .. " twice")
          seen[k] = id
          n = n + 1
        end
      end
      assert.equal(15, n, name)
    end
  end)
end)

describe("group options and calls at the door", function()
  local client = kafka.client.new { brokers = "127.0.0.1:1" }
  local new = kafka.consumer.new

  it("rejects wrong options", function()
    assert.has_error(function() new(client, { group_id = "g", partition_assignment_strategy = "sticky" }) end,
      'kafka.consumer.new: partition_assignment_strategy[1] must be one of "range", "roundrobin", '
      .. '"cooperative-sticky" (got "sticky")')
    assert.has_error(function() new(client, { group_id = "g", group_protocol = "new" }) end,
      'kafka.consumer.new: group_protocol must be one of "classic", "consumer" (got "new")')
    assert.has_error(function() new(client, { group_id = "g", session_timeout_ms = 1000, heartbeat_interval_ms = 1000 }) end,
      "kafka.consumer.new: heartbeat_interval_ms (1000) must be lower than session_timeout_ms (1000)")
    assert.has_error(function() new(client, { group_id = "g", on_assign = "f" }) end,
      'kafka.consumer.new: on_assign must be a function (got "f")')
    assert.has_error(function() new(client, { group_id = "g", enable_auto_commit = 1 }) end,
      "kafka.consumer.new: enable_auto_commit must be a boolean (got 1)")
    assert.has_error(function() new(client, { group_id = "g", group_instance_id = "" }) end,
      'kafka.consumer.new: group_instance_id must be a non-empty string (got "")')
  end)

  it("accepts a strategy list and a comma-separated string", function()
    local c = new(client, { group_id = "g", partition_assignment_strategy = "cooperative-sticky, range" })
    assert.are.same({ "cooperative-sticky", "range" }, c.group_cfg.partition_assignment_strategy)
    assert.are.same({ "range", "cooperative-sticky" }, new(client, { group_id = "g" }).group_cfg.partition_assignment_strategy)
  end)

  it("subscribe checks its argument and the consumer's mode", function()
    local c = new(client, { group_id = "g", group_protocol = "classic" })
    assert.has_error(function() new(client, {}):subscribe { "t" } end, "subscribe: the consumer has no group_id")
    assert.has_error(function() c:subscribe {} end)
    assert.has_error(function() c:subscribe { 5 } end, "subscribe: topics[1] must be a topic name (got 5)")
    assert.has_error(function() c:subscribe { pattern = "[" } end)
    assert.has_error(function() c:subscribe { regex = "logs-.*" } end)
    assert.is_true(c:subscribe { "b", "a", "b" })
    assert.are.same({ "a", "b" }, c.group.sub.topics)
    assert.equal("unjoined", c:group_state().state)
    assert.has_error(function() c:assign { { topic = "t", partition = 0 } } end,
      "assign: the consumer is subscribed to a group (close it, or use another consumer)")
  end)

  it("a commit for a partition the member does not own fails with code rebalance", function()
    local c = new(client, { group_id = "g", group_protocol = "classic" })
    c:subscribe { "t" }
    local ok, err, code = c:commit { { topic = "t", partition = 0, offset = 5 } }
    assert.is_nil(ok)
    assert.equal("rebalance", code)
    assert.matches("not owned", err)
  end)
end)
