-- kafka.admin's security calls against a real Kafka broker with an
-- authorizer (StandardAuthorizer; User:ANONYMOUS, the PLAINTEXT listener's
-- principal, is a super user), with Kafka's Java AdminClient and clients as
-- the oracle: ACLs we create are enforced for alice (SASL_PLAINTEXT PLAIN)
-- and listed by Java as we list them, and the reverse; SCRAM credentials we
-- create log Java's client in, and describe as Java describes them.
-- Runs with SPEC_ADMIN=1 only (`make admin`), like spec/admin_spec.lua.
local rk = require "support.realkafka"
local rt = require "support.realtools"
local kafka = require "kafka"
local proto = require "kafka.proto"
local errors = proto.errors
local cli = require "kafka.cli"

-- cli_run(bootstrap, argv [, stdin]) -> exit code, stdout, stderr of the lua-kafka command in-process
local function cli_run(bootstrap, argv, input)
  local function writer()
    local w = { parts = {} }
    function w.write(self, ...)
      for i = 1, select("#", ...) do self.parts[#self.parts + 1] = select(i, ...) end
      return self
    end
    return w
  end
  local out, err = writer(), writer()
  local args = { "-b", bootstrap }
  for _, a in ipairs(argv) do args[#args + 1] = a end
  local lines = {}
  for l in (input or ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
  local stdin = { read = function() return table.remove(lines, 1) end }
  local code = cli.main(args, { stdin = stdin, stdout = out, stderr = err, getenv = function() return nil end })
  return code, table.concat(out.parts), table.concat(err.parts)
end

if os.getenv("SPEC_ADMIN") ~= "1" then
  describe("kafka.admin security against a real broker", function()
    pending("runs with SPEC_ADMIN=1 (make admin)")
  end)
  return
end

local version = rk.main()

-- only(lines, names...) -> the lines naming one of this test's resources or
-- entities (a test killed by a mutant leaves its ACLs and quotas behind: the
-- next run's checks must not see them)
local function only(lines, ...)
  local out = {}
  for _, l in ipairs(lines) do
    for i = 1, select("#", ...) do
      local n = select(i, ...)
      if l:find(" " .. n .. " ", 1, true) or l:find("[" .. n .. "]", 1, true) then out[#out + 1] = l; break end
    end
  end
  return out
end

-- our bindings in Peer's describe-acls lines
local function acl_lines(list)
  local out = {}
  for i, b in ipairs(list) do
    out[i] = ("ACL %s %s %s %s %s %s %s"):format(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host,
      b.operation, b.permission_type)
  end
  table.sort(out)
  return out
end

describe("kafka.admin security on Kafka " .. version .. " with an authorizer", function()
  local k, admin
  setup(function()
    k = rk.cluster(version, 1, "acl-cluster", {
      ["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
      ["super.users"] = "User:ANONYMOUS;User:admin",
    })
    admin = kafka.admin.new { brokers = k.bootstrap.PLAINTEXT, client_id = "admin-security-spec" }
  end)
  teardown(function() if admin then admin:close() end end)

  local function java(args, o)
    o = o or {}
    return rk.java(args, { bootstrap = o.bootstrap or k.bootstrap.PLAINTEXT, props = o.props })
  end

  -- produce_as(topic) -> the offset of one record sent by our producer as
  -- alice (SASL_PLAINTEXT PLAIN), or nil, err, code (a topic alice may not
  -- describe fails at send; one she may not write to at delivery)
  local function produce_as(topic)
    local client = kafka.client.new { brokers = k.bootstrap.SASL_PLAINTEXT, security_protocol = "SASL_PLAINTEXT",
      sasl_mechanism = "PLAIN", sasl_username = "alice", sasl_password = "alice-secret", client_id = "alice" }
    local p = kafka.producer.new(client, { linger_ms = 1, delivery_timeout_ms = 8000, enable_idempotence = false })
    local ok, err, code = p:send(topic, "v", { key = "k" })
    if ok then
      local reports, failed = p:flush()
      if failed == 0 then ok = reports[1].offset else ok, err, code = nil, tostring(reports[1].err), reports[1].code end
    end
    client:close()
    return ok, err, code
  end

  it("ACLs: alice denied, allowed after create_acls, denied again after delete_acls; Java lists them as we do", function()
    local t, prefix = rt.uniq("acl-t"), rt.uniq("acl-p")
    local created = assert(admin:create_topics { { name = t, num_partitions = 1, replication_factor = 1 } })
    assert.equal(0, created[1].error_code)

    -- no ACL: alice may not describe the topic, so not produce to it
    assert.same({ nil, "topic " .. t .. ": TOPIC_AUTHORIZATION_FAILED (topic authorization failed)", "kafka" },
      { produce_as(t) })

    local res = assert(admin:create_acls {
      { resource_type = "topic", resource_name = t, principal = "User:alice", operation = "write", permission_type = "allow" },
      { resource_type = "TOPIC", resource_name = t, pattern_type = "LITERAL", principal = "User:alice", host = "*",
        operation = "DESCRIBE", permission_type = "ALLOW" },
      { resource_type = "group", resource_name = prefix, pattern_type = "prefixed", principal = "User:bob",
        host = "127.0.0.1", operation = "read", permission_type = "deny" },
      { resource_type = "TOPIC", resource_name = t, pattern_type = "LITERAL", principal = "alice-without-type",
        operation = "READ", permission_type = "ALLOW" },
    })
    assert.equal(4, #res)
    assert.same({ 0, 0, 0 }, { res[1].error_code, res[2].error_code, res[3].error_code })
    assert.same({ "TOPIC", t, "LITERAL", "User:alice", "*", "WRITE", "ALLOW" }, { res[1].resource_type,
      res[1].resource_name, res[1].pattern_type, res[1].principal, res[1].host, res[1].operation, res[1].permission_type })
    -- a principal without its type: the broker refuses that binding alone
    assert.equal(errors.INVALID_REQUEST, res[4].error_code)
    assert.equal("kafka", res[4].code)
    assert.matches("^INVALID_REQUEST: ", res[4].error)

    -- Java creates one; both sides list the same four
    java { "create-acl", "TRANSACTIONAL_ID", prefix, "PREFIXED", "User:alice", "*", "WRITE", "ALLOW" }
    local ours = assert(admin:describe_acls())
    local want = {
      ("ACL GROUP %s PREFIXED User:bob 127.0.0.1 READ DENY"):format(prefix),
      ("ACL TOPIC %s LITERAL User:alice * DESCRIBE ALLOW"):format(t),
      ("ACL TOPIC %s LITERAL User:alice * WRITE ALLOW"):format(t),
      ("ACL TRANSACTIONAL_ID %s PREFIXED User:alice * WRITE ALLOW"):format(prefix),
    }
    assert.same(want, only(acl_lines(ours), t, prefix))
    assert.same(want, only(java { "describe-acls" }, t, prefix))

    -- filters: by principal and operation; MATCH finds the prefixed one for a name under it
    local own = assert(admin:describe_acls { principal = "User:alice", operation = "WRITE", resource_type = "topic" })
    assert.same({ want[3] }, only(acl_lines(own), t, prefix))
    local match = assert(admin:describe_acls { resource_type = "GROUP", resource_name = prefix .. "-x", pattern_type = "MATCH" })
    assert.same({ want[1] }, acl_lines(match))
    assert.same({}, assert(admin:describe_acls { resource_type = "GROUP", resource_name = prefix .. "-x", pattern_type = "LITERAL" }))

    -- allowed now
    assert.same({ 0 }, { produce_as(t) })

    -- delete alice's WRITE on the topic, and the transactional-id one; a filter matching nothing
    local del = assert(admin:delete_acls {
      { resource_type = "TOPIC", resource_name = t, pattern_type = "LITERAL", principal = "User:alice", operation = "WRITE" },
      { resource_type = "TRANSACTIONAL_ID", pattern_type = "ANY" },
      { resource_type = "TOPIC", resource_name = "no-such-" .. t },
    })
    assert.equal(3, #del)
    assert.same({ 0, 0, 0 }, { del[1].error_code, del[2].error_code, del[3].error_code })
    assert.same({ want[3] }, acl_lines(del[1].matching_acls))
    assert.equal(0, del[1].matching_acls[1].error_code)
    assert.same({ want[4] }, acl_lines(del[2].matching_acls))
    assert.same({}, del[3].matching_acls)
    assert.same({ want[1], want[2] }, only(java { "describe-acls" }, t, prefix))

    -- denied again: DESCRIBE alone lets alice see the topic, not write to it
    local off, err, code = produce_as(t)
    assert.is_nil(off)
    assert.equal("kafka", code)
    assert.matches("TOPIC_AUTHORIZATION_FAILED", err)

    -- clean up the rest
    del = assert(admin:delete_acls { {} })
    assert.same({ want[1], want[2] }, only(acl_lines(del[1].matching_acls), t, prefix))
    assert.same({}, only(java { "describe-acls" }, t, prefix))
  end)

  it("ACL misuse raises, naming the field; an API the broker lacks fails naming it", function()
    assert.has_error(function()
      admin:create_acls { { resource_type = "topic", resource_name = "x", principal = "User:a", operation = "any",
        permission_type = "allow" } }
    end, "create_acls: bindings[1].operation must be one of ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, "
      .. "CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS, "
      .. "TWO_PHASE_COMMIT (got \"any\")")
    assert.has_error(function() admin:describe_acls { pattern_type = "glob" } end,
      "describe_acls: filter.pattern_type must be one of ANY, MATCH, LITERAL, PREFIXED (got \"glob\")")
    -- a broker without the API (as Kafka before 2.0 for CreateAcls v1, before 2.7 for the SCRAM ones):
    -- the call fails as a whole, naming the API and the broker's versions
    local a2 = kafka.admin.new { brokers = k.bootstrap.PLAINTEXT }
    local md = assert(a2.client:load_metadata({ topics = {} }))
    local conn = assert(a2.client:broker(md.brokers[1].node_id))
    conn.broker_versions[proto.api.CreateAcls] = { min = 0, max = 0 }
    conn.broker_versions[proto.api.AlterUserScramCredentials] = nil
    local res, err, code = a2:create_acls { { resource_type = "TOPIC", resource_name = "x", principal = "User:a",
      operation = "READ", permission_type = "ALLOW" } }
    assert.same({ nil, "unsupported" }, { res, code })
    assert.truthy(err:find("^CreateAcls: broker 1 [^ ]+ speaks CreateAcls versions v0%-v0; this call needs v1%-v3$"), err)
    res, err, code = a2:alter_user_scram_credentials { { user = "x", mechanism = "SCRAM-SHA-256", password = "p" } }
    assert.same({ nil, "unsupported" }, { res, code })
    assert.truthy(err:find("AlterUserScramCredentials versions none; this call needs v0%-v0$"), err)
    a2:close()
  end)

  it("SCRAM credentials: ours log Java's client in; described as Java describes them", function()
    local carol, dave = rt.uniq("carol"), rt.uniq("dave")
    local res = assert(admin:alter_user_scram_credentials {
      { user = carol, mechanism = "SCRAM-SHA-512", password = "carol-pw", iterations = 8192 },
      { user = carol, mechanism = "SCRAM-SHA-256", password = "carol-pw-256" },
    })
    assert.same({ 0, 0 }, { res[1].error_code, res[2].error_code })
    java { "alter-scram", dave, "SCRAM-SHA-256", "5000", "dave-pw" }

    local d = assert(admin:describe_user_scram_credentials { carol, dave, "nobody-" .. carol })
    assert.same({ user = carol, error_code = 0, credentials = {
      { mechanism = "SCRAM-SHA-256", iterations = 4096 }, { mechanism = "SCRAM-SHA-512", iterations = 8192 } } }, d[1])
    assert.same({ { mechanism = "SCRAM-SHA-256", iterations = 5000 } }, d[2].credentials)
    assert.equal(errors.RESOURCE_NOT_FOUND, d[3].error_code)
    assert.equal("kafka", d[3].code)
    local lines = {}
    for _, r in ipairs(d) do
      for _, c in ipairs(r.credentials or {}) do lines[#lines + 1] = ("SCRAM %s %s %d"):format(r.user, c.mechanism, c.iterations) end
    end
    table.sort(lines)
    assert.same(lines, java { "describe-scram", carol, dave })
    -- every user: alice (written at format time) among them
    local all = assert(admin:describe_user_scram_credentials())
    local users = {}
    for _, r in ipairs(all) do users[r.user] = #r.credentials end
    assert.same({ 2, 2, 1 }, { users.alice, users[carol], users[dave] })

    -- Java's client logs in with the credentials we salted, each mechanism; a wrong password fails
    local function login(mech, user, pw)
      return pcall(java, { "describe-cluster" }, { bootstrap = k.bootstrap.SASL_PLAINTEXT, props = {
        ["security.protocol"] = "SASL_PLAINTEXT", ["sasl.mechanism"] = mech,
        ["sasl.jaas.config"] = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";')
          :format(user, pw) } })
    end
    assert.is_true((login("SCRAM-SHA-512", carol, "carol-pw")))
    assert.is_true((login("SCRAM-SHA-256", carol, "carol-pw-256")))
    assert.is_false((login("SCRAM-SHA-256", carol, "carol-pw")))
    -- and our own client, with the credentials Java salted
    local c = kafka.client.new { brokers = k.bootstrap.SASL_PLAINTEXT, security_protocol = "SASL_PLAINTEXT",
      sasl_mechanism = "SCRAM-SHA-256", sasl_username = dave, sasl_password = "dave-pw" }
    assert(c:metadata {})
    c:close()

    -- deletion: one mechanism goes, the other stays; Java agrees
    res = assert(admin:alter_user_scram_credentials { { user = carol, mechanism = "SCRAM-SHA-256", delete = true } })
    assert.equal(0, res[1].error_code)
    assert.same({ "SCRAM " .. carol .. " SCRAM-SHA-512 8192" }, java { "describe-scram", carol })
    assert.is_false((login("SCRAM-SHA-256", carol, "carol-pw-256")))
    -- a deletion of what is not there is the user's error alone
    res = assert(admin:alter_user_scram_credentials {
      { user = dave, mechanism = "SCRAM-SHA-512", delete = true },
      { user = carol, mechanism = "SCRAM-SHA-512", delete = true },
    })
    assert.equal(errors.RESOURCE_NOT_FOUND, res[1].error_code)
    assert.equal(0, res[2].error_code)
  end)

  -- our describe_client_quotas result in Peer's describe-quotas lines
  local function quota_lines(list)
    local out = {}
    for _, e in ipairs(list) do
      local parts = {}
      for i, x in ipairs(e.entity) do
        parts[i] = x.entity_type .. "=" .. (x.entity_name and "[" .. x.entity_name .. "]" or "<default>")
      end
      for key, v in pairs(e.values) do out[#out + 1] = ("QUOTA %s %s %.3f"):format(table.concat(parts, ","), key, v) end
    end
    table.sort(out)
    return out
  end

  it("client quotas: ours read back by Java, Java's described as Java does; filters; removal", function()
    local u, cid = rt.uniq("quser"), rt.uniq("qclient")
    local res = assert(admin:alter_client_quotas {
      { entity = { { entity_type = "user", entity_name = u } },
        ops = { { key = "producer_byte_rate", value = 1024 }, { key = "consumer_byte_rate", value = 2048 } } },
      { entity = { { entity_type = "user", entity_name = u }, { entity_type = "client-id", entity_name = cid } },
        ops = { { key = "request_percentage", value = 12.5 } } },
      { entity = { { entity_type = "user" } }, ops = { { key = "producer_byte_rate", value = 999 } } },
      { entity = { { entity_type = "user", entity_name = "x" .. u } }, ops = { { key = "no_such_quota", value = 1 } } },
    })
    assert.same({ 0, 0, 0 }, { res[1].error_code, res[2].error_code, res[3].error_code })
    assert.equal(errors.INVALID_REQUEST, res[4].error_code)
    java { "alter-quota", "client-id", cid, "consumer_byte_rate", "4096" }
    local want = {
      ("QUOTA client-id=[%s] consumer_byte_rate 4096.000"):format(cid),
      ("QUOTA client-id=[%s],user=[%s] request_percentage 12.500"):format(cid, u),
      "QUOTA user=<default> producer_byte_rate 999.000",
      ("QUOTA user=[%s] consumer_byte_rate 2048.000"):format(u),
      ("QUOTA user=[%s] producer_byte_rate 1024.000"):format(u),
    }
    table.sort(want)
    local function mine(lines)
      local out = {}
      for _, l in ipairs(lines) do
        if l:find("[" .. u .. "]", 1, true) or l:find("[" .. cid .. "]", 1, true) or l:find("user=<default>", 1, true) then
          out[#out + 1] = l
        end
      end
      return out
    end
    assert.same(want, mine(java { "describe-quotas" }))
    assert.same(want, mine(quota_lines(assert(admin:describe_client_quotas()))))
    -- filters: the user exactly (strict: not the user+client-id one), the default user, any client-id
    assert.same({ want[4], want[5] }, quota_lines(assert(admin:describe_client_quotas {
      components = { { entity_type = "user", match_type = "exact", match = u } }, strict = true })))
    assert.same({ want[3] }, quota_lines(assert(admin:describe_client_quotas {
      components = { { entity_type = "user", match_type = "default" } } })))
    assert.same({ want[1], want[2] }, mine(quota_lines(assert(admin:describe_client_quotas {
      components = { { entity_type = "client-id", match_type = "specified" } } }))))
    -- removal; validate_only changes nothing
    res = assert(admin:alter_client_quotas({ { entity = { { entity_type = "user" } },
      ops = { { key = "producer_byte_rate", remove = true } } } }, { validate_only = true }))
    assert.equal(0, res[1].error_code)
    res = assert(admin:alter_client_quotas {
      { entity = { { entity_type = "user", entity_name = u } }, ops = { { key = "producer_byte_rate", remove = true } } },
      { entity = { { entity_type = "user" } }, ops = { { key = "producer_byte_rate", remove = true } } },
      { entity = { { entity_type = "user", entity_name = u }, { entity_type = "client-id", entity_name = cid } },
        ops = { { key = "request_percentage", remove = true } } },
      { entity = { { entity_type = "client-id", entity_name = cid } }, ops = { { key = "consumer_byte_rate", remove = true } } },
    })
    for i = 1, 4 do assert.equal(0, res[i].error_code, res[i].error) end
    assert.same({ want[4] }, mine(java { "describe-quotas" }))
    assert.has_error(function()
      admin:alter_client_quotas { { entity = { { entity_type = "user" } }, ops = { { key = "k", value = "1" } } } }
    end, 'alter_client_quotas: entries[1].ops[1].value must be a number (got "1")')
  end)

  it("lua-kafka acls, users, quotas: read back by Java; bad input is one line and exit 1", function()
    local function run(argv, input) return cli_run(k.bootstrap.PLAINTEXT, argv, input) end
    local t, g, u = rt.uniq("cli-acl"), rt.uniq("cli-g"), rt.uniq("cliuser")
    local code, out, err = run({ "acls", "create", "--topic", t, "--group", g, "--allow-principal", "User:alice",
      "--operation", "Read", "--operation", "DescribeConfigs" })
    assert.same({ 0, "" }, { code, err })
    assert.equal(5, select(2, out:gsub("\n", ""))) -- the header and the 4 ACLs created
    local want = {
      ("ACL GROUP %s LITERAL User:alice * DESCRIBE_CONFIGS ALLOW"):format(g),
      ("ACL GROUP %s LITERAL User:alice * READ ALLOW"):format(g),
      ("ACL TOPIC %s LITERAL User:alice * DESCRIBE_CONFIGS ALLOW"):format(t),
      ("ACL TOPIC %s LITERAL User:alice * READ ALLOW"):format(t),
    }
    assert.same(want, only(java { "describe-acls" }, t, g))
    code, out, err = run({ "acls", "list", "--topic", t })
    assert.same({ 0, "" }, { code, err })
    local pad = (" "):rep(#t - 4)
    assert.equal("RESOURCE-TYPE NAME" .. pad .. " PATTERN PRINCIPAL  HOST OPERATION        PERMISSION\n"
      .. "TOPIC         " .. t .. " LITERAL User:alice *    DESCRIBE_CONFIGS ALLOW\n"
      .. "TOPIC         " .. t .. " LITERAL User:alice *    READ             ALLOW\n", out)
    code, out, err = run({ "--json", "acls", "delete", "--topic", t, "--group", g, "--operation", "Read" })
    assert.same({ 0, "" }, { code, err })
    assert.equal(2, select(2, out:gsub("\n", "")))
    assert.truthy(out:find('"operation":"READ"', 1, true))
    assert.same({ want[1], want[3] }, only(java { "describe-acls" }, t, g))
    code, out, err = run({ "acls", "delete", "--topic", t, "--group", g })
    assert.same({ 0, "" }, { code, err })
    assert.equal(3, select(2, out:gsub("\n", ""))) -- the header and the 2 ACLs deleted
    assert.same({}, only(java { "describe-acls" }, t, g))
    -- bad input: one clear line, exit 1
    assert.same({ 1, "", "lua-kafka: acls create: create_acls: bindings[1].operation must be one of ALL, READ, WRITE, "
      .. "CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, "
      .. "CREATE_TOKENS, DESCRIBE_TOKENS, TWO_PHASE_COMMIT (got \"SING\")\n" },
      { run({ "acls", "create", "--topic", t, "--allow-principal", "User:a", "--operation", "Sing" }) })
    assert.same({ 1, "", "lua-kafka: acls delete needs a resource: --topic, --group, --transactional-id or --cluster\n" },
      { run({ "acls", "delete" }) })

    -- users: the password from stdin; Java's client logs in with it
    code, out, err = run({ "users", "set", u, "--mechanism", "SCRAM-SHA-256", "--iterations", "4500" }, "s3cret\n")
    assert.same({ 0, "set SCRAM-SHA-256 credentials of " .. u .. "\n", "" }, { code, out, err })
    assert.same({ "SCRAM " .. u .. " SCRAM-SHA-256 4500" }, java { "describe-scram", u })
    assert.same({ 0, "USER" .. (" "):rep(#u - 4) .. " MECHANISM     ITERATIONS\n" .. u .. " SCRAM-SHA-256 4500\n", "" },
      { run({ "users", "describe", u }) })
    java({ "describe-cluster" }, { bootstrap = k.bootstrap.SASL_PLAINTEXT, props = {
      ["security.protocol"] = "SASL_PLAINTEXT", ["sasl.mechanism"] = "SCRAM-SHA-256",
      ["sasl.jaas.config"] = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="s3cret";')
        :format(u) } })
    assert.same({ 0, "deleted SCRAM-SHA-256 credentials of " .. u .. "\n", "" },
      { run({ "users", "delete", u, "--mechanism", "SCRAM-SHA-256" }) })
    assert.same({}, java { "describe-scram" , u })
    assert.same({ 2, "", "lua-kafka: users delete " .. u
      .. ": RESOURCE_NOT_FOUND: Attempt to delete a user credential that does not exist\n" },
      { run({ "users", "delete", u, "--mechanism", "SCRAM-SHA-256" }) })

    -- quotas
    assert.same({ 0, "altered the quotas of user=" .. u .. "\n", "" },
      { run({ "quotas", "alter", "--user", u, "--set", "producer_byte_rate=2048", "--set", "request_percentage=50" }) })
    assert.same({ ("QUOTA user=[%s] producer_byte_rate 2048.000"):format(u), ("QUOTA user=[%s] request_percentage 50.000"):format(u) },
      only(java { "describe-quotas" }, u))
    code, out, err = run({ "--json", "quotas", "describe", "--user", u })
    assert.same({ 0, "" }, { code, err })
    assert.equal(('{"entity":"user=%s","key":"producer_byte_rate","value":2048}\n'
      .. '{"entity":"user=%s","key":"request_percentage","value":50}\n'):format(u, u), out)
    assert.same({ 0, "altered the quotas of user=" .. u .. "\n", "" },
      { run({ "quotas", "alter", "--user", u, "--delete", "producer_byte_rate", "--delete", "request_percentage" }) })
    assert.same({}, only(java { "describe-quotas" }, u))
  end)
end)
