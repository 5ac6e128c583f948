-- kafka.admin against real Apache Kafka brokers, with Kafka's Java
-- AdminClient as the oracle (spec/support/kafka/Peer.java's admin modes):
-- every effect of our calls is read back by Java, and what Java creates we
-- describe identically. One block per version in KAFKA_VERSIONS (single
-- node), and a 3-node cluster of the main version for replica
-- assignments, ISRs and leader-bound calls spread over the brokers.
-- Runs with SPEC_ADMIN=1 only (`make admin`, which .ci/run calls): its Java
-- calls take about 200 s per version, more than `make test`'s budget.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local H = require "support.helpers"
local kafka = require "kafka"
local proto = require "kafka.proto"
local errors = proto.errors

local function java(k, args) return rk.java(args, { bootstrap = k.bootstrap.PLAINTEXT }) end
local function chain(k, cmds) return rk.java_chain(cmds, { bootstrap = k.bootstrap.PLAINTEXT }) end

local function ids(list)
  if not list or #list == 0 then return "-" end
  local s = {}
  for i, x in ipairs(list) do s[i] = tostring(x) end
  return table.concat(s, ",")
end

-- our describe_topics result in Peer's describe-topic lines
local function topic_lines(t)
  local out = { ("TOPIC %s %s %s"):format(t.name, t.topic_id, tostring(t.internal)) }
  for _, p in ipairs(t.partitions) do
    out[#out + 1] = ("PART %d %d %s %s"):format(p.partition, p.leader, ids(p.replicas), ids(p.isr))
  end
  return out
end

-- our describe_configs result in Peer's describe-configs lines
local function config_lines(r)
  local out = {}
  for name, e in pairs(r.configs) do
    local syn = {}
    for i, s in ipairs(e.synonyms or {}) do syn[i] = s.name .. ":" .. s.source end
    out[#out + 1] = ("CFG %s %s %s %s %s %s %s"):format(name, e.source, tostring(e.read_only), tostring(e.sensitive),
      tostring(e.default), #syn > 0 and table.concat(syn, ",") or "-", e.value == nil and "-" or e.value)
  end
  table.sort(out)
  return out
end

local function result_of(list, key, value)
  for _, r in ipairs(list) do if r[key] == value then return r end end
end

local function produce(k, topic, n)
  return java(k, { "produce", topic, n, "none", "plain" })
end

if os.getenv("SPEC_ADMIN") ~= "1" then
  describe("kafka.admin against real brokers", function()
    pending("runs with SPEC_ADMIN=1 (make admin)")
  end)
  return
end

for _, version in ipairs(rk.versions()) do
  local major = tonumber(version:match("^(%d+)"))

  describe("kafka.admin on Kafka " .. version, function()
    local k, admin
    setup(function()
      k = rk.cluster(version, 1)
      admin = kafka.admin.new { brokers = k.bootstrap.PLAINTEXT, client_id = "admin-spec" }
    end)
    teardown(function() if admin then admin:close() end end)

    it("create_topics: per-topic results, read back by Java; validate_only creates nothing", function()
      local a, b, dup, bad, v = rt.uniq("adm-a"), rt.uniq("adm-b"), rt.uniq("adm-dup"), rt.uniq("adm-bad"), rt.uniq("adm-v")
      java(k, { "create", dup, 1, 1 })
      local res = assert(admin:create_topics({
        { name = a, num_partitions = 3, replication_factor = 1, configs = { ["retention.ms"] = "123456", ["cleanup.policy"] = "compact" } },
        { name = dup, num_partitions = 1 },
        { name = b, replica_assignment = { [0] = { 1 }, [1] = { 1 } } },
        { name = bad, num_partitions = 1, replication_factor = 3 },
      }))
      assert.equal(4, #res)
      assert.same({ a, dup, b, bad }, { res[1].name, res[2].name, res[3].name, res[4].name })
      assert.equal(0, res[1].error_code); assert.is_nil(res[1].error)
      assert.equal(3, res[1].num_partitions); assert.equal(1, res[1].replication_factor)
      assert.equal(errors.TOPIC_ALREADY_EXISTS, res[2].error_code)
      assert.equal("kafka", res[2].code)
      assert.equal("TOPIC_ALREADY_EXISTS: Topic '" .. dup .. "' already exists.", res[2].error)
      assert.equal(0, res[3].error_code)
      assert.equal(errors.INVALID_REPLICATION_FACTOR, res[4].error_code)
      local out = chain(k, { { "describe-topic", a }, { "describe-configs", "topic", a }, { "describe-topic", b },
        { "list-topics" } })
      assert.same({ "TOPIC " .. a .. " " .. res[1].topic_id .. " false", "PART 0 1 1 1", "PART 1 1 1 1", "PART 2 1 1 1" }, out[1])
      local cfg = {}
      for _, l in ipairs(out[2]) do
        local name, source, value = l:match("^CFG (%S+) (%S+) %S+ %S+ %S+ %S+ (.*)$")
        cfg[name] = source .. " " .. value
      end
      assert.equal("DYNAMIC_TOPIC_CONFIG 123456", cfg["retention.ms"])
      assert.equal("DYNAMIC_TOPIC_CONFIG compact", cfg["cleanup.policy"])
      assert.same({ "TOPIC " .. b .. " " .. res[3].topic_id .. " false", "PART 0 1 1 1", "PART 1 1 1 1" }, out[3])
      local listed = table.concat(out[4], "\n")
      assert.falsy(listed:find(bad, 1, true))
      -- validate_only: a result, and no topic
      res = assert(admin:create_topics({ { name = v, num_partitions = 2 } }, { validate_only = true }))
      assert.equal(0, res[1].error_code)
      local d = assert(admin:describe_topics { v })
      assert.equal(errors.UNKNOWN_TOPIC_OR_PARTITION, d[1].error_code)
    end)

    it("describe_topics and list_topics: what Java creates, described as Java describes it", function()
      local t = rt.uniq("adm-j")
      java(k, { "create-topic-assign", t, "0=1", "1=1", "2=1" })
      local d = assert(admin:describe_topics({ t, "adm-missing-topic" }, { include_authorized_operations = true }))
      local j = java(k, { "describe-topic", t })
      assert.same(j, topic_lines(d[1]))
      assert.equal(0, d[1].error_code)
      assert.equal(22, #d[1].topic_id)
      -- no authorizer: every topic operation is allowed
      assert.same({ "ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE" },
        d[1].authorized_operations)
      assert.equal("adm-missing-topic", d[2].name)
      assert.equal(errors.UNKNOWN_TOPIC_OR_PARTITION, d[2].error_code)
      assert.equal("unknown_topic", d[2].code)
      -- list_topics: the same set as Java's listTopics(listInternal), ids and internal flags
      local all = assert(admin:list_topics { internal = true })
      local mine = {}
      for i, x in ipairs(all) do mine[i] = ("TOPIC %s %s %s"):format(x.name, x.topic_id, tostring(x.internal)) end
      assert.same(java(k, { "list-topics" }), mine)
      local plain = assert(admin:list_topics())
      local want = {}
      for _, x in ipairs(all) do if not x.internal then want[#want + 1] = x end end
      assert.same(want, plain)
    end)

    it("create_partitions and delete_topics (by name and by id): per-topic results, read back by Java", function()
      local t, t2, t3 = rt.uniq("adm-p"), rt.uniq("adm-del"), rt.uniq("adm-delid")
      java(k, { "create", t, 2, 1 })
      java(k, { "create", t2, 1, 1 })
      java(k, { "create", t3, 1, 1 })
      local res = assert(admin:create_partitions { { name = t, count = 4 }, { name = "adm-nope", count = 2 },
        { name = t2, count = 1 } })
      assert.equal(0, res[1].error_code)
      assert.equal(errors.UNKNOWN_TOPIC_OR_PARTITION, res[2].error_code)
      assert.equal(errors.INVALID_PARTITIONS, res[3].error_code)
      local j = java(k, { "describe-topic", t })
      assert.equal(5, #j)
      assert.equal("PART 3 1 1 1", j[5])
      local id3 = assert(admin:describe_topics { t3 })[1].topic_id
      local del = assert(admin:delete_topics { t2, "adm-nope", { topic_id = id3 } })
      assert.equal(t2, del[1].name); assert.equal(0, del[1].error_code)
      assert.equal(errors.UNKNOWN_TOPIC_OR_PARTITION, del[2].error_code)
      assert.equal(id3, del[3].topic_id)
      if major >= 3 then assert.equal(0, del[3].error_code) end
      local listed = table.concat(java(k, { "list-topics" }), "\n")
      assert.falsy(listed:find(t2, 1, true))
      assert.falsy(listed:find(t3, 1, true))
      assert.truthy(listed:find(t, 1, true))
    end)

    it("describe_configs (topic, broker, synonyms) equal to Java's; alter_configs set/delete/append/subtract read back by Java",
      function()
      local t = rt.uniq("adm-cfg")
      java(k, { "create", t, 1, 1, "retention.ms=99999" })
      java(k, { "alter-config", "topic", t, "set", "max.message.bytes", "200000" })
      local r = assert(admin:describe_configs({ { type = "topic", name = t }, { type = "broker", name = "1" },
        { type = "topic", name = "adm-no-such" } }, { synonyms = true }))
      assert.equal(0, r[1].error_code)
      assert.same(java(k, { "describe-configs", "topic", t }), config_lines(r[1]))
      assert.same(java(k, { "describe-configs", "broker", "1" }), config_lines(r[2]))
      assert.equal("STATIC_BROKER_CONFIG", r[2].configs["num.partitions"].source)
      assert.equal(errors.UNKNOWN_TOPIC_OR_PARTITION, r[3].error_code)
      -- incremental changes, each read back by Java
      local res = assert(admin:alter_configs {
        { type = "topic", name = t, configs = {
          { name = "retention.ms", op = "delete" },
          { name = "segment.ms", op = "set", value = "7200000" },
          { name = "cleanup.policy", op = "append", value = "compact" },
        } },
        { type = "topic", name = "adm-no-such", configs = { { name = "segment.ms", op = "set", value = "1" } } },
      })
      assert.equal(0, res[1].error_code, res[1].error)
      assert.equal(errors.UNKNOWN_TOPIC_OR_PARTITION, res[2].error_code, res[2].error)
      res = assert(admin:alter_configs { { type = "topic", name = t, configs = {
        { name = "no.such.config", op = "set", value = "1" } } } })
      assert.equal(errors.INVALID_CONFIG, res[1].error_code, res[1].error)
      local function cfg(name)
        for _, l in ipairs(java(k, { "describe-configs", "topic", t })) do
          local n, source, value = l:match("^CFG (%S+) (%S+) %S+ %S+ %S+ %S+ (.*)$")
          if n == name then return source .. " " .. value end
        end
      end
      assert.equal("STATIC_BROKER_CONFIG -1", cfg("retention.ms")) -- the harness's log.retention.ms
      assert.equal("DYNAMIC_TOPIC_CONFIG 7200000", cfg("segment.ms"))
      assert.equal("DYNAMIC_TOPIC_CONFIG delete,compact", cfg("cleanup.policy"))
      res = assert(admin:alter_configs { { type = "topic", name = t, configs = {
        { name = "cleanup.policy", op = "subtract", value = "delete" } } } })
      assert.equal(0, res[1].error_code)
      assert.equal("DYNAMIC_TOPIC_CONFIG compact", cfg("cleanup.policy"))
      -- validate_only changes nothing
      res = assert(admin:alter_configs({ { type = "topic", name = t, configs = {
        { name = "segment.ms", op = "set", value = "1000" } } } }, { validate_only = true }))
      assert.equal(0, res[1].error_code)
      assert.equal("DYNAMIC_TOPIC_CONFIG 7200000", cfg("segment.ms"))
      -- a broker's logger, at that broker
      r = assert(admin:describe_configs { { type = "broker_logger", name = "1" } })
      assert.same(java(k, { "describe-configs", "broker_logger", "1" }), config_lines(r[1]))
    end)

    it("describe_cluster equals Java's", function()
      local c = assert(admin:describe_cluster())
      local lines = { ("CLUSTER %s %d"):format(c.cluster_id, c.controller_id) }
      for _, b in ipairs(c.brokers) do lines[#lines + 1] = ("BROKER %d %s %d %s"):format(b.id, b.host, b.port, b.rack or "-") end
      assert.same(java(k, { "describe-cluster" }), lines)
    end)

    it("list_offsets and delete_records: per partition, equal to Java's answers", function()
      local t = rt.uniq("adm-rec")
      java(k, { "create", t, 2, 1 })
      produce(k, t, 40)
      local specs = { "earliest", "latest", 1700000000010 }
      if major >= 3 then specs[#specs + 1] = "max_timestamp" end
      for _, spec in ipairs(specs) do
        local res = assert(admin:list_offsets { { topic = t, partition = 0, spec = spec }, { topic = t, partition = 1, spec = spec } })
        local j = java(k, { "offsets", t, tostring(spec), 0, 1 })
        for i = 1, 2 do
          assert.equal(0, res[i].error_code)
          assert.equal(j[i], ("OFFSET %d %d %d"):format(i - 1, res[i].offset, res[i].timestamp))
        end
      end
      local ends = assert(admin:list_offsets { { topic = t, partition = 0, spec = "latest" }, { topic = t, partition = 7, spec = "latest" },
        { topic = t, partition = 1, spec = "latest" } })
      assert.equal("unknown_partition", ends[2].code)
      local del = assert(admin:delete_records { { topic = t, partition = 0, offset = 3 }, { topic = t, partition = 1, offset = -1 },
        { topic = t .. "-none", partition = 0, offset = 1 } })
      assert.equal(3, del[1].low_watermark); assert.equal(0, del[1].error_code)
      assert.equal(0, del[2].error_code)
      assert.equal(ends[3].offset, del[2].low_watermark)
      assert.equal("unknown_topic", del[3].code)
      del = assert(admin:delete_records { { topic = t, partition = 0, offset = ends[1].offset + 5 } })
      assert.equal(errors.OFFSET_OUT_OF_RANGE, del[1].error_code)
      local j = java(k, { "offsets", t, "earliest", 0, 1 })
      assert.equal("OFFSET 0 3", j[1]:match("^(OFFSET 0 %d+)"))
      local latest1 = assert(admin:list_offsets { { topic = t, partition = 1, spec = "latest" } })[1].offset
      assert.equal("OFFSET 1 " .. latest1, j[2]:match("^(OFFSET 1 %d+)"))
    end)

    it("groups: list, describe (both protocols), offsets, lag, alter, delete: equal to Java's AdminClient", function()
      local t = rt.uniq("adm-grp")
      java(k, { "create", t, 3, 1 })
      produce(k, t, 60)
      local produced = 60
      local protocols = { "classic:range" }
      if major >= 4 then protocols[#protocols + 1] = "consumer:uniform" end
      for _, protocol in ipairs(protocols) do
        local gid = rt.uniq("adm-g")
        local member = rk.java_bg({ "group", t, gid, protocol, 60, "%STOP%" }, { bootstrap = k.bootstrap.PLAINTEXT })
        local ok, err = pcall(function()
          -- wait until the member has read all 60 and committed (auto commit each second)
          local deadline = os.time() + 40
          local done, n, sum, why = false, 0, 0, nil
          while os.time() < deadline and not done do
            n = 0
            for _, l in ipairs(member.lines()) do if l:match("^REC ") then n = n + 1 end end
            if n >= produced then
              local offs, e = admin:list_group_offsets(gid)
              why = e
              sum = 0
              for _, o in ipairs(offs or {}) do sum = sum + (o.offset or 0) end
              done = sum == produced
            end
            if not done then require("socket").sleep(0.3) end
          end
          assert(done, ("the Java member consumed (%d) and committed (%d, %s)"):format(n, sum, tostring(why)))
          -- describe while the member is active, against Java's describe
          local d = assert(admin:describe_groups { gid, "adm-no-group" })
          local g = d[1]
          assert.equal(0, g.error_code)
          assert.equal(protocol:match("^(%a+)"), g.type)
          local lines = { ("GROUP %s %s %s %s"):format(g.group_id, g.type, g.state, g.protocol) }
          for _, m in ipairs(g.members) do
            local tps = {}
            for i, tp in ipairs(m.assignment) do tps[i] = tp.topic .. ":" .. tp.partition end
            table.sort(tps)
            lines[#lines + 1] = ("MEMBER %s %s %s %s"):format(m.client_id, m.client_host, m.group_instance_id or "-",
              #tps > 0 and table.concat(tps, ",") or "-")
          end
          assert.same(java(k, { "describe-group", gid }), lines)
          assert.equal(errors.GROUP_ID_NOT_FOUND, d[2].error_code)
          -- list_groups: our line for the group equals Java's listConsumerGroups line
          local lg = assert(admin:list_groups())
          local x = assert(result_of(lg, "group_id", gid))
          local jl
          for _, l in ipairs(java(k, { "list-groups" })) do if l:find(" " .. gid .. " ", 1, true) then jl = l end end
          assert.equal(jl, ("GROUP %s %s %s"):format(x.group_id, x.state, x.type or "-"))
          local f = assert(admin:list_groups { states = { "Stable" } })
          assert.truthy(result_of(f, "group_id", gid))
          if major >= 4 then
            f = assert(admin:list_groups { types = { protocol:match("^(%a+)") == "classic" and "consumer" or "classic" } })
            assert.is_nil(result_of(f, "group_id", gid))
          end
          -- delete_groups refuses a group with members
          local dg = assert(admin:delete_groups { gid })
          assert.equal(errors.NON_EMPTY_GROUP, dg[1].error_code)
        end)
        member.stop()
        member.wait(60)
        assert(ok, err)
        -- offsets and lag after the member left: equal to Java's
        local offs = assert(admin:list_group_offsets(gid))
        local lines = {}
        for i, o in ipairs(offs) do
          lines[i] = ("OFF %s %d %d %s"):format(o.topic, o.partition, o.offset, o.metadata == "" and "~" or o.metadata)
        end
        assert.same(java(k, { "list-group-offsets", gid }), lines)
        produce(k, t, 9)
        produced = produced + 9
        local lag = assert(admin:group_lag(gid))
        lines = {}
        for i, r in ipairs(lag) do lines[i] = ("LAG %s %d %d %d %d"):format(r.topic, r.partition, r.offset, r.end_offset, r.lag) end
        assert.same(java(k, { "group-lag", gid }), lines)
        local total = 0
        for _, r in ipairs(lag) do total = total + r.lag end
        assert.equal(9, total)
        -- alter (the group is empty now), read back by Java; Java alters, we list
        local al = assert(admin:alter_group_offsets(gid, { { topic = t, partition = 0, offset = 1, metadata = "m0" },
          { topic = t, partition = 2, offset = 0 } }))
        assert.equal(0, al[1].error_code); assert.equal(0, al[2].error_code)
        local j = java(k, { "list-group-offsets", gid })
        assert.equal("OFF " .. t .. " 0 1 m0", j[1])
        assert.equal("OFF " .. t .. " 2 0 ~", j[3])
        java(k, { "alter-group-offsets", gid, t, 1, 5 })
        offs = assert(admin:list_group_offsets(gid, { { topic = t, partition = 1 }, { topic = t, partition = 0 } }))
        assert.equal(5, offs[2].offset); assert.equal(1, offs[1].offset); assert.equal("m0", offs[1].metadata)
        -- delete one partition's offset; Java no longer lists it
        local dl = assert(admin:delete_group_offsets(gid, { { topic = t, partition = 2 } }))
        assert.equal(0, dl[1].error_code)
        j = java(k, { "list-group-offsets", gid })
        assert.same({ "OFF " .. t .. " 0 1 m0", "OFF " .. t .. " 1 5 ~" }, j)
        -- delete the group; Java no longer lists it
        local dg = assert(admin:delete_groups { gid, "adm-no-group" })
        assert.equal(0, dg[1].error_code)
        assert.equal(errors.GROUP_ID_NOT_FOUND, dg[2].error_code)
        assert.falsy(table.concat(java(k, { "list-groups" }), "\n"):find(gid, 1, true))
        local none, e, c, kc = admin:group_lag(gid)
        assert.is_nil(none)
        assert.equal("kafka", c)
        assert.equal(errors.GROUP_ID_NOT_FOUND, kc)
        assert.truthy(e:find("group_lag " .. gid .. ": GROUP_ID_NOT_FOUND", 1, true), e)
      end
    end)

    it("describe_producers, list_transactions, describe_transactions: equal to Java's", function()
      local t = rt.uniq("adm-txn")
      java(k, { "create", t, 2, 1 })
      chain(k, { { "produce", t, 10, "none", "txn-commit" }, { "produce", t, 6, "none", "idempotent" } })
      local txid = "peer-" .. t .. "-txn-commit"
      local res = assert(admin:describe_producers { { topic = t, partition = 0 }, { topic = t, partition = 1 },
        { topic = t, partition = 9 } })
      local mine = {}
      for i = 1, 2 do
        assert.equal(0, res[i].error_code, res[i].error)
        local lines = {}
        for _, x in ipairs(res[i].producers) do
          lines[#lines + 1] = ("PRODUCER %d %d %d %d %d %s %s"):format(i - 1, x.producer_id, x.producer_epoch, x.last_sequence,
            x.last_timestamp, x.coordinator_epoch or "-", x.current_transaction_start_offset or "-")
        end
        table.sort(lines)
        for _, l in ipairs(lines) do mine[#mine + 1] = l end
      end
      assert.same(java(k, { "describe-producers", t, 0, 1 }), mine)
      assert.truthy(#mine >= 2)
      assert.equal("unknown_partition", res[3].code)
      -- the transactional id: listed and described as Java does
      local lt = assert(admin:list_transactions())
      local x = assert(result_of(lt, "transactional_id", txid))
      local jl
      for _, l in ipairs(java(k, { "list-transactions" })) do if l:find(" " .. txid .. " ", 1, true) then jl = l end end
      assert.equal(jl, ("TXN %s %d %s"):format(x.transactional_id, x.producer_id, x.state))
      assert.equal("CompleteCommit", x.state)
      local f = assert(admin:list_transactions { states = { "Ongoing" } })
      assert.is_nil(result_of(f, "transactional_id", txid))
      local d = assert(admin:describe_transactions { txid, "adm-no-such-txid" })
      local r = d[1]
      assert.equal(0, r.error_code, r.error)
      local tps = {}
      for i, tp in ipairs(r.topic_partitions) do tps[i] = tp.topic .. ":" .. tp.partition end
      assert.same(java(k, { "describe-transaction", txid }), { ("TXN %s %s %d %d %d %s %s"):format(txid, r.state, r.producer_id,
        r.producer_epoch, r.transaction_timeout_ms, r.transaction_start_time_ms or "-", #tps > 0 and table.concat(tps, ",") or "-") })
      assert.equal(errors.TRANSACTIONAL_ID_NOT_FOUND, d[2].error_code, d[2].error)
    end)

    it("abort_transaction: a hanging transaction of Java's producer aborted; Java's read_committed consumer goes on", function()
      local t = rt.uniq("adm-hang")
      java(k, { "create", t, 1, 1 })
      -- Java's transactional producer dies with 3 records in an open transaction (offsets 0-2), then 2 plain ones
      assert.same({ "ACK 0 0 0", "ACK 0 1 1", "ACK 0 2 2" }, java(k, { "produce-hang", t, 3 }))
      assert.same({ "ACK 0 3 0", "ACK 0 4 1" }, produce(k, t, 2))
      local lso = assert(admin:list_offsets({ { topic = t, partition = 0, spec = "latest" } }, { isolation_level = "read_committed" }))
      assert.equal(0, lso[1].offset)
      local hung = assert(admin:describe_producers { { topic = t, partition = 0 } })[1]
      local pid
      for _, x in ipairs(hung.producers) do if x.current_transaction_start_offset == 0 then pid = x end end
      assert.truthy(pid)
      -- no open transaction starts at offset 3: nothing is sent
      local none = assert(admin:abort_transaction { topic = t, partition = 0, start_offset = 3 })
      assert.same({ "invalid", ("no open transaction starts at offset 3 of %s/0"):format(t) }, { none.code, none.error })
      local r = assert(admin:abort_transaction { topic = t, partition = 0, start_offset = 0 })
      assert.equal(0, r.error_code, r.error)
      assert.same({ pid.producer_id, pid.producer_epoch, pid.coordinator_epoch or -1 },
        { r.producer_id, r.producer_epoch, r.coordinator_epoch })
      -- the abort marker at offset 5: the last stable offset is the end again, and Java's read_committed
      -- consumer gets the 2 plain records, not the aborted ones
      lso = assert(admin:list_offsets({ { topic = t, partition = 0, spec = "latest" } }, { isolation_level = "read_committed" }))
      assert.equal(6, lso[1].offset)
      local recs = java(k, { "consume", t, 2, 30, "read_committed" })
      local offs = {}
      for i, l in ipairs(recs) do offs[i] = l:match("^REC 0 (%d+) ") end
      assert.same({ "3", "4" }, offs)
      local after = assert(admin:describe_producers { { topic = t, partition = 0 } })[1]
      for _, x in ipairs(after.producers) do assert.is_nil(x.current_transaction_start_offset) end
      -- an explicit spec for a partition the topic lacks: that call's result
      local bad = assert(admin:abort_transaction { topic = t, partition = 9, producer_id = pid.producer_id,
        producer_epoch = pid.producer_epoch, coordinator_epoch = -1 })
      assert.same({ "unknown_partition", ("topic %s has no partition 9"):format(t) }, { bad.code, bad.error })

      -- lua-kafka transactions abort, kafka-transactions.sh's flags: another hanging transaction
      local t2 = rt.uniq("adm-hang-cli")
      java(k, { "create", t2, 1, 1 })
      assert.same({ "ACK 0 0 0", "ACK 0 1 1" }, java(k, { "produce-hang", t2, 2 }))
      local function cli(argv)
        local outs, errs = {}, {}
        local function w(t_)
          return { write = function(self, ...)
            for i = 1, select("#", ...) do t_[#t_ + 1] = select(i, ...) end
            return self
          end }
        end
        local args = { "-b", k.bootstrap.PLAINTEXT }
        for _, a in ipairs(argv) do args[#args + 1] = a end
        local code = require("kafka.cli").main(args, { stdout = w(outs), stderr = w(errs), getenv = function() return nil end })
        return { code, table.concat(outs), table.concat(errs) }
      end
      assert.same({ 2, "", ("lua-kafka: transactions abort %s/0: no open transaction starts at offset 1 of %s/0\n"):format(t2, t2) },
        cli { "transactions", "abort", "--topic", t2, "--partition", "0", "--start-offset", "1" })
      local p2 = assert(admin:describe_producers { { topic = t2, partition = 0 } })[1].producers[1]
      assert.same({ 0, ("aborted the transaction of producer %d (epoch %d) on %s/0\n"):format(p2.producer_id, p2.producer_epoch, t2), "" },
        cli { "transactions", "abort", "--topic", t2, "--partition", "0", "--start-offset", "0" })
      lso = assert(admin:list_offsets({ { topic = t2, partition = 0, spec = "latest" } }, { isolation_level = "read_committed" }))
      assert.equal(3, lso[1].offset)
    end)

    it("an API the broker lacks: a clear error naming the API and the broker's versions", function()
      local a2 = kafka.admin.new { brokers = k.bootstrap.PLAINTEXT }
      -- every broker's connection answered ApiVersions as a broker that speaks
      -- CreateTopics v0-v3 only (Kafka < 2.4) would: our call needs v4+
      local md = assert(a2.client:load_metadata({ topics = {} }))
      for _, b in ipairs(md.brokers) do
        local conn = assert(a2.client:broker(b.node_id))
        conn.broker_versions[proto.api.CreateTopics] = { min = 0, max = 3 }
      end
      local res, err, code = a2:create_topics { { name = rt.uniq("adm-old") } }
      assert.is_nil(res)
      assert.equal("unsupported", code)
      assert.truthy(err:find("CreateTopics: broker 1 [^ ]+ speaks CreateTopics versions v0%-v3; this call needs v4%-v7"), err)
      a2:close()
    end)

    it("misuse raises, naming the argument", function()
      assert.has_error(function() admin:create_topics { { name = 1 } } end,
        "create_topics: topics[1].name must be a string (got 1)")
      assert.has_error(function() admin:list_offsets { { topic = "t", partition = 0, spec = "soon" } } end,
        'list_offsets: items[1].spec must be "earliest", "latest", "max_timestamp" or a timestamp in ms (got "soon")')
      assert.has_error(function()
        admin:delete_records { { topic = "t", partition = 0, offset = 1 }, { topic = "t", partition = 0, offset = 2 } }
      end,
        'delete_records: items[2] must be a partition not listed before (got "t/0")')
      assert.has_error(function() admin:alter_configs { { type = "topic", name = "t", configs = { { name = "x", op = "put" } } } } end,
        'alter_configs: resources[1].configs[1].op must be one of "set", "delete", "append", "subtract" (got "put")')
      assert.has_error(function() admin:describe_configs { { type = "user", name = "x" } } end,
        'describe_configs: resources[1].type must be one of "topic", "broker", "broker_logger", "group", "client_metrics" (got "user")')
    end)
  end)
end

-- Three brokers: replica assignments and ISRs, calls bound to each broker
-- (a broker's configs) and to each partition's leader (spread over the three).
local three_it = H.lite() and pending or it
describe("kafka.admin on a 3-node Kafka " .. (rk.main() or "-") .. " cluster", function()
  local k, admin
  setup(function()
    if not rk.main() or H.lite() then return end
    k = rk.cluster(rk.main(), 3)
    admin = kafka.admin.new { brokers = k.bootstrap.PLAINTEXT }
  end)
  teardown(function() if admin then admin:close() end end)

  three_it("replica assignments, replicas and ISRs as Java describes them", function()
    local a, j = rt.uniq("adm3-a"), rt.uniq("adm3-j")
    local res = assert(admin:create_topics { { name = a, replica_assignment = { [0] = { 1, 2 }, [1] = { 2, 3 }, [2] = { 3, 1 } } } })
    assert.equal(0, res[1].error_code, res[1].error)
    java(k, { "create", j, 6, 3 })
    local d = assert(admin:describe_topics { a, j })
    local out = chain(k, { { "describe-topic", a }, { "describe-topic", j } })
    assert.same(out[1], topic_lines(d[1]))
    assert.same(out[2], topic_lines(d[2]))
    assert.same({ 1, 2 }, d[1].partitions[1].replicas)
    assert.same({ 3, 1 }, d[1].partitions[3].replicas)
    -- leaders over all three brokers
    local leaders = {}
    for _, p in ipairs(d[2].partitions) do leaders[p.leader] = true end
    assert.same({ [1] = true, [2] = true, [3] = true }, leaders)
  end)

  three_it("alter/list_partition_reassignments and elect_leaders, as Java lists and describes them", function()
    local t = rt.uniq("adm3-move")
    -- partition 0 prefers broker 3, partition 1 lives on 1 and 2
    assert.equal(0, assert(admin:create_topics { { name = t, replica_assignment = { [0] = { 3, 1 }, [1] = { 1, 2 } } } })[1].error_code)
    local socket = require "socket"
    -- wait(pred): pred() true within 60 s
    local function wait(what, pred)
      local stop = socket.gettime() + 60
      while not pred() do
        assert(socket.gettime() < stop, what .. " not within 60 s")
        socket.sleep(0.3)
      end
    end
    -- part(p) -> partition p as described now ({} while the new topic is not in the metadata yet)
    local function part(p)
      local d = admin:describe_topics { t }
      local ps = d and d[1].partitions
      return ps and ps[p + 1] or { isr = {} }
    end
    wait("both partitions led", function() return part(0).leader == 3 and part(1).leader == 1 end)
    k:kill(3)
    local ok, err = pcall(function()
      wait("a new leader for partition 0", function() return part(0).leader == 1 end)
      -- a move that cannot finish while broker 3 is down: listed as Java lists it
      local res = assert(admin:alter_partition_reassignments {
        { topic = t, partition = 1, replicas = { 1, 2, 3 } },
        { topic = t, partition = 0, cancel = true },
      })
      assert.same({ 0, errors.NO_REASSIGNMENT_IN_PROGRESS }, { res[1].error_code, res[2].error_code })
      local list = assert(admin:list_partition_reassignments())
      local mine = {}
      for _, r in ipairs(list) do
        if r.topic == t then
          mine[#mine + 1] = ("REASSIGN %s %d %s %s %s"):format(r.topic, r.partition, ids(r.replicas), ids(r.adding_replicas),
            ids(r.removing_replicas))
        end
      end
      assert.same({ ("REASSIGN %s 1 1,2,3 3 -"):format(t) }, mine)
      local jl = {}
      for _, l in ipairs(java(k, { "list-reassignments" })) do if l:find(" " .. t .. " ", 1, true) then jl[#jl + 1] = l end end
      assert.same(jl, mine)
      local one = assert(admin:list_partition_reassignments { { topic = t, partition = 0 }, { topic = t, partition = 1 } })
      assert.same({ { topic = t, partition = 1, replicas = { 1, 2, 3 }, adding_replicas = { 3 }, removing_replicas = {} } }, one)
      -- cancelled: back to 1,2, as Java describes the topic
      res = assert(admin:alter_partition_reassignments { { topic = t, partition = 1, cancel = true } })
      assert.equal(0, res[1].error_code, res[1].error)
      assert.same({}, assert(admin:list_partition_reassignments { { topic = t, partition = 1 } }))
      local d = assert(admin:describe_topics { t })
      assert.same({ 1, 2 }, d[1].partitions[2].replicas)
      assert.same(java(k, { "describe-topic", t }), topic_lines(d[1]))
    end)
    k:restart(3)
    assert(ok, err)
    wait("broker 3 back in partition 0's ISR", function()
      for _, id in ipairs(part(0).isr) do if id == 3 then return true end end
      return false
    end)
    assert.equal(1, part(0).leader)
    -- the preferred leader again: partition 0 elected, partition 1 already led by its preferred replica
    local res = assert(admin:elect_leaders("preferred", { { topic = t, partition = 0 }, { topic = t, partition = 1 } }))
    assert.same({ 0, errors.ELECTION_NOT_NEEDED }, { res[1].error_code, res[2].error_code })
    wait("broker 3 leads partition 0", function() return part(0).leader == 3 end)
    local d = assert(admin:describe_topics { t })
    assert.same(java(k, { "describe-topic", t }), topic_lines(d[1]))
    res = assert(admin:elect_leaders("preferred", { { topic = t, partition = 0 } }))
    assert.equal(errors.ELECTION_NOT_NEEDED, res[1].error_code)
  end)

  three_it("configs of each broker at that broker; describe_cluster equals Java's", function()
    local r = assert(admin:describe_configs({ { type = "broker", name = "1" }, { type = "broker", name = "2" },
      { type = "broker", name = "3" } }, { synonyms = true }))
    for i = 1, 3 do
      assert.equal(0, r[i].error_code, r[i].error)
      assert.same(java(k, { "describe-configs", "broker", tostring(i) }), config_lines(r[i]))
    end
    local res = assert(admin:alter_configs { { type = "broker", name = "2", configs = {
      { name = "log.cleaner.backoff.ms", op = "set", value = "16000" } } } })
    assert.equal(0, res[1].error_code, res[1].error)
    local found
    for _, l in ipairs(java(k, { "describe-configs", "broker", "2" })) do
      if l:match("^CFG log.cleaner.backoff.ms ") then found = l end
    end
    assert.equal("CFG log.cleaner.backoff.ms DYNAMIC_BROKER_CONFIG false false false "
      .. "log.cleaner.backoff.ms:DYNAMIC_BROKER_CONFIG,log.cleaner.backoff.ms:DEFAULT_CONFIG 16000", found)
    res = assert(admin:alter_configs { { type = "broker", name = "2", configs = {
      { name = "log.cleaner.backoff.ms", op = "delete" } } } })
    assert.equal(0, res[1].error_code, res[1].error)
    local c = assert(admin:describe_cluster())
    -- (a KRaft broker names a random live broker as the controller in
    -- DescribeCluster: Java's and ours asked different brokers, so the
    -- controller is compared as one of the brokers, the rest exactly)
    local lines = { ("CLUSTER %s"):format(c.cluster_id) }
    for _, b in ipairs(c.brokers) do lines[#lines + 1] = ("BROKER %d %s %d %s"):format(b.id, b.host, b.port, b.rack or "-") end
    local theirs = java(k, { "describe-cluster" })
    theirs[1] = theirs[1]:gsub(" %d+$", "")
    assert.same(theirs, lines)
    assert.equal(4, #lines)
    assert.truthy(c.controller_id >= 1 and c.controller_id <= 3, tostring(c.controller_id))
  end)

  three_it("list_offsets and delete_records to each partition's leader", function()
    local t = rt.uniq("adm3-rec")
    java(k, { "create", t, 6, 3 })
    produce(k, t, 120)
    local q, del = {}, {}
    for p = 0, 5 do
      q[#q + 1] = { topic = t, partition = p, spec = "latest" }
      del[#del + 1] = { topic = t, partition = p, offset = p }
    end
    -- the requests each call sends, by API and broker: one per leader (a
    -- misrouted one would be answered NOT_LEADER_OR_FOLLOWER and retried)
    local conn_mod = require "kafka.connection"
    local request = conn_mod.request
    local sent = {}
    conn_mod.request = function(c, api, ...)
      local name = proto.api_name(api)
      sent[#sent + 1] = name .. "@" .. tostring(c.node_id)
      return request(c, api, ...)
    end
    local leaders = {}
    local ok, err = pcall(function()
      local d = assert(admin:describe_topics { t })
      for _, p in ipairs(d[1].partitions) do leaders["@" .. p.leader] = true end
      sent = {}
      local ends = assert(admin:list_offsets(q))
      local j = java(k, { "offsets", t, "latest", 0, 1, 2, 3, 4, 5 })
      for i = 1, 6 do assert.equal(j[i], ("OFFSET %d %d %d"):format(i - 1, ends[i].offset, ends[i].timestamp)) end
      local res = assert(admin:delete_records(del))
      for i = 1, 6 do
        assert.equal(0, res[i].error_code, res[i].error)
        assert.equal(i - 1, res[i].low_watermark)
      end
    end)
    conn_mod.request = request
    assert(ok, err)
    local by = { ListOffsets = {}, DeleteRecords = {} }
    for _, x in ipairs(sent) do
      local api, at = x:match("^(%a+)(@.*)$")
      if by[api] then
        assert.is_nil(by[api][at], "a second " .. x)
        assert.truthy(leaders[at], x .. " is not a leader")
        by[api][at] = true
      end
    end
    assert.same(leaders, by.ListOffsets)
    assert.same(leaders, by.DeleteRecords)
    assert.same({ ["@1"] = true, ["@2"] = true, ["@3"] = true }, leaders)
    local res = assert(admin:delete_records(del))
    for i = 1, 6 do
      assert.equal(0, res[i].error_code, res[i].error)
      assert.equal(i - 1, res[i].low_watermark)
    end
    local j = java(k, { "offsets", t, "earliest", 0, 1, 2, 3, 4, 5 })
    for i = 1, 6 do assert.equal("OFFSET " .. (i - 1) .. " " .. (i - 1), j[i]:match("^(OFFSET %d+ %d+)")) end
  end)
end)
