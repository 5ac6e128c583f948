-- One declaration per option (lua/kafka/options.lua): docs/options.md is
-- generated from the declarations and must be fresh; the declarations are
-- what the constructors validate and default from.
local options = require "kafka.options"
local check = require "kafka.check"

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("docs/options.md", function()
  it("is what tools/options-doc.lua makes from the declarations (run make options-doc)", function()
    local render = assert(loadfile(root .. "/tools/options-doc.lua"))("render")
    local want = render()
    local have = read(root .. "/docs/options.md")
    if have ~= want then
      local i = 1
      while have:sub(i, i) == want:sub(i, i) do i = i + 1 end
      error(("docs/options.md is stale from byte %d: %q (generated: %q); run make options-doc"):format(i,
        have:sub(i, i + 60), want:sub(i, i + 60)), 0)
    end
  end)

  it("lists every declared option once, with its Kafka name", function()
    local doc = read(root .. "/docs/options.md")
    for _, decl in ipairs(options.ALL) do
      for _, d in ipairs(decl) do
        local row = "\n| `" .. d.name .. "` |"
        local at = doc:find(row, 1, true)
        assert(at, d.name .. " missing")
        if d.kafka then assert(doc:find("`" .. d.kafka .. "`", 1, true), d.kafka) end
      end
    end
  end)
end)

describe("the declarations", function()
  local client = { retry_backoff_ms = 250 }

  it("give the consumer its defaults, some from the options before them or the client", function()
    local o = options.consumer({ max_poll_interval_ms = 7000 }, client)
    assert.same({
      auto_offset_reset = "latest", fetch_max_wait_ms = 500, fetch_min_bytes = 1, fetch_max_bytes = 8388608,
      max_partition_fetch_bytes = 1048576, isolation_level = 0, check_crcs = true, retry_backoff_ms = 250,
      max_poll_records = 500, enable_auto_commit = true, auto_commit_interval_ms = 5000,
      partition_assignment_strategy = { "range", "cooperative-sticky" }, session_timeout_ms = 45000,
      heartbeat_interval_ms = 3000, max_poll_interval_ms = 7000, rebalance_timeout_ms = 7000,
    }, o)
    assert.equal(1, options.consumer({ isolation_level = "read_committed" }, client).isolation_level)
    assert.same({ "roundrobin", "range" },
      options.consumer({ partition_assignment_strategy = "roundrobin, range" }, client).partition_assignment_strategy)
  end)

  it("give the client its defaults, the backoff caps from the backoffs", function()
    local o, bootstrap, sec = options.client { brokers = "a:1,[::1]:2,b", retry_backoff_ms = 1500 }
    assert.same({ { host = "a", port = 1 }, { host = "::1", port = 2 }, { host = "b", port = 9092 } }, bootstrap)
    assert.is_nil(sec)
    assert.same({ brokers = "a:1,[::1]:2,b", client_id = "lua-kafka", request_timeout_ms = 30000,
      connect_timeout_ms = 10000, default_api_timeout_ms = 60000, metadata_max_age_ms = 300000,
      retry_backoff_ms = 1500, retry_backoff_max_ms = 1500, reconnect_backoff_ms = 100,
      reconnect_backoff_max_ms = 1000, receive_message_max_bytes = 100000000, allow_auto_topic_creation = true,
      api_versions = true, metadata_recovery_strategy = "rebootstrap" }, o)
  end)

  it("give the producer its defaults and decide idempotence", function()
    local c = { retry_backoff_ms = 100, retry_backoff_max_ms = 1000, opts = {} }
    local o = options.producer({ compression = 3, retry_backoff_ms = 2000 }, c)
    assert.same({ compression = "lz4", partitioner = "murmur2_random", retry_backoff_ms = 2000, background = false,
      acks = -1, max_in_flight_requests_per_connection = 5, transaction_timeout_ms = 60000, linger_ms = 100,
      batch_size = 1048576, retry_backoff_max_ms = 2000, delivery_timeout_ms = 120000, max_buffered = 100000,
      max_buffered_bytes = 67108864, flush_on_full = true, max_message_bytes = 1000000, max_request_bytes = 1048576,
      timeout_ms = 30000, delivery_reports = "all", exit_flush_timeout_ms = 5000, idem_mode = "auto" }, o)
    assert.equal("off", options.producer({ acks = 1 }, c).idem_mode)
    assert.equal("on", options.producer({ transactional_id = "t" }, c).idem_mode)
    local ok, err = pcall(options.producer, { acks = 0, enable_idempotence = true }, c)
    assert.is_false(ok)
    assert.truthy(err:find("kafka.producer.new: enable_idempotence needs acks = -1 (got acks = 0)", 1, true), err)
  end)

  it("raise on misuse, naming the constructor, the option and what it must be", function()
    local function raises(msg, f)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.equal(msg, (tostring(err):gsub("^[^:]*:%d+: ", "")))
    end
    raises("kafka.consumer.new: fetch_max_wait_ms must be an integer >= 0 (got -1)",
      function() options.consumer({ fetch_max_wait_ms = -1 }, client) end)
    raises('kafka.consumer.new: auto_offset_reset must be one of "latest", "earliest", "error" (got "first")',
      function() options.consumer({ auto_offset_reset = "first" }, client) end)
    raises("kafka.consumer.new: on_assign must be a function (got true)",
      function() options.consumer({ on_assign = true }, client) end)
    raises("kafka.consumer.new: heartbeat_interval_ms (3000) must be lower than session_timeout_ms (2000)",
      function() options.consumer({ session_timeout_ms = 2000 }, client) end)
    raises("kafka.client.new: connect_timeout_ms must be an integer >= 1 (got 0)",
      function() options.client { brokers = "a:1", connect_timeout_ms = 0 } end)
    raises("kafka.client.new: allow_auto_topic_creation must be a boolean (got 1)",
      function() options.client { brokers = "a:1", allow_auto_topic_creation = 1 } end)
  end)

  it("blame the caller of the constructor", function()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() require("kafka.consumer").new({ brokers = "a:1" }, { max_poll_records = 0 }) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("options_doc_spec.lua:" .. line .. ":", 1, true), err)
  end)

  it("refuse a bad declaration when the module loads", function()
    assert.has_error(function() check.declare("x", { { name = "a", type = "int" } }) end,
      "kafka.check.declare: x option 1 (a): bad doc")
    assert.has_error(function() check.declare("x", { { name = "a", type = "number", doc = "" } }) end,
      "kafka.check.declare: x option 1 (a): bad type")
  end)
end)
