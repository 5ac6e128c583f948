-- The lua-kafka command (kafka.cli, bin/lua-kafka; docs/cli.md).
-- (a) kafka.mock in-process (every Lua, about a second): produce and
--     consume round trips read back from the mock's log, the format string,
--     JSON lines, groups reset, every bad input's exact line and exit code;
--     bin/lua-kafka as a process against bin/kafka-mock (exit codes).
-- (b) a real Kafka broker (the first of KAFKA_VERSIONS, first Lua of
--     `make test` only) with Kafka's Java client as the oracle: topics made
--     by the CLI described by Java's AdminClient, messages of the CLI read by
--     Java's consumer and Java's read by the CLI, lag as Java computes it,
--     offsets reset by the CLI read back by Java.
local cli = require "kafka.cli"
local mock = require "kafka.mock"
local kafka = require "kafka"
local H = require "support.helpers"

-- buffers standing for the process' streams
local function writer()
  local w = { parts = {} }
  function w.write(self, ...)
    for i = 1, select("#", ...) do self.parts[#self.parts + 1] = select(i, ...) end
    return self
  end
  function w.text(self) return table.concat(self.parts) end
  return w
end

local function reader(s)
  local pos = 1
  return { read = function(_, fmt)
    assert(fmt == "*l")
    if pos > #s then return nil end
    local nl = s:find("\n", pos, true)
    local line = s:sub(pos, (nl or #s + 1) - 1)
    pos = (nl or #s) + 1
    return line
  end }
end

-- run(cluster, argv [, stdin]) -> exit code, stdout, stderr of cli.main in-process on the mock
local function run_on(cluster, argv, input)
  local out, err = writer(), writer()
  local args = { "-b", cluster and cluster:bootstrap() or "127.0.0.1:1" }
  for _, a in ipairs(argv) do args[#args + 1] = a end
  local code = cli.main(args, { stdin = reader(input or ""), stdout = out, stderr = err,
    getenv = function() return nil end,
    client = cluster and { socket = cluster:socket_factory(), retry_backoff_ms = 1, reconnect_backoff_ms = 1,
      reconnect_backoff_max_ms = 4 } or nil })
  return code, out:text(), err:text()
end

describe("lua-kafka on kafka.mock", function()
  local cluster
  local function run(argv, input) return run_on(cluster, argv, input) end

  before_each(function()
    cluster = mock.new { brokers = 1, topics = { events = 2, one = 1 }, auto_create_topics = true }
  end)

  it("produce: lines, keys split at the first separator, headers, a partition; read back from the log", function()
    local code, out, err = run({ "produce", "-t", "events", "-p", "1", "-k", "::", "-H", "h1=a=b", "-H", "h2=",
      "-z", "gzip" }, "k1::v1\nno key here\n::empty key\nk4::v::4\n\nlast without newline")
    assert.same({ 0, "", "" }, { code, out, err })
    local got = {}
    for i, r in ipairs(cluster:records("events", 1)) do
      local hs = {}
      for j, h in ipairs(r.headers or {}) do hs[j] = h.key .. "=" .. tostring(h.value) end
      got[i] = tostring(r.key) .. "|" .. r.value .. "|" .. table.concat(hs, ",")
    end
    assert.same({ "k1|v1|h1=a=b,h2=", "nil|no key here|h1=a=b,h2=", "|empty key|h1=a=b,h2=", "k4|v::4|h1=a=b,h2=",
      "nil||h1=a=b,h2=", "nil|last without newline|h1=a=b,h2=" }, got)
    assert.same({}, cluster:records("events", 0))
    -- --json: one delivery report a line
    code, out, err = run({ "--json", "produce", "-t", "one" }, "a\nb\n")
    assert.same({ 0, '{"offset":0,"partition":0,"topic":"one"}\n{"offset":1,"partition":0,"topic":"one"}\n', "" },
      { code, out, err })
  end)

  it("--progress: the count and rate on stderr at most once a second and at the end; a terminal turns it on", function()
    -- a clock 400 ms on at each look
    local function run_clocked(argv, input, isatty)
      local out, err = writer(), writer()
      local t = 0
      local args = { "-b", cluster:bootstrap() }
      for _, a in ipairs(argv) do args[#args + 1] = a end
      local code = cli.main(args, { stdin = reader(input), stdout = out, stderr = err,
        getenv = function() return nil end, isatty = function() return isatty end,
        now = function() t = t + 400; return t end,
        client = { socket = cluster:socket_factory(), retry_backoff_ms = 1 } })
      return code, out:text(), err:text()
    end
    assert.same({ 0, "", "\rproduced 1 messages (0 msg/s)\rproduced 4 messages (3 msg/s)"
      .. "\rproduced 5 messages in 2.0 s (3 msg/s)\n" },
      { run_clocked({ "--progress", "produce", "-t", "one" }, "a\nb\nc\nd\ne\n", false) })
    -- a terminal: on by default; --no-progress turns it off
    assert.same({ 0, "a\nb\n", "\rconsumed 1 messages (0 msg/s)\rconsumed 2 messages in 0.8 s (3 msg/s)\n" },
      { run_clocked({ "consume", "-t", "one", "-o", "beginning", "-c", "2" }, "", true) })
    assert.same({ 0, "a\nb\n", "" },
      { run_clocked({ "--no-progress", "consume", "-t", "one", "-o", "beginning", "-c", "2" }, "", true) })
    assert.same({ 1, "", "lua-kafka: --progress and --no-progress exclude each other\n" },
      { run_clocked({ "--progress", "--no-progress", "consume", "-t", "one" }, "", false) })
  end)

  it("produce: a message not delivered is a line on stderr naming its line, exit 2; the others delivered", function()
    local errors = require("kafka.proto").errors
    cluster:fail(require("kafka.proto").api.Produce, errors.TOPIC_AUTHORIZATION_FAILED, 1)
    local code, out, err = run({ "produce", "-t", "one" }, "a\nb\n")
    assert.same({ 2, "", "lua-kafka: produce: line 1: one/0: TOPIC_AUTHORIZATION_FAILED (topic authorization failed)\n"
      .. "lua-kafka: produce: line 2: one/0: TOPIC_AUTHORIZATION_FAILED (topic authorization failed)\n" }, { code, out, err })
    code, out, err = run({ "produce", "-t", "one" }, "c\n")
    assert.same({ 0, "", "" }, { code, out, err })
    assert.same({ "c" }, { cluster:records("one", 0)[1].value, cluster:records("one", 0)[2] })
  end)

  it("a write to stdout that fails ends the command: exit 2, one line", function()
    local err = writer()
    local out = { write = function() return nil, "No space left on device" end }
    local code = cli.main({ "-b", cluster:bootstrap(), "topics", "list" }, { stdout = out, stderr = err,
      getenv = function() return nil end, client = { socket = cluster:socket_factory() } })
    assert.same({ 2, "lua-kafka: stdout: No space left on device\n" }, { code, err:text() })
  end)

  it("produce | consume: the round trip exact, keys placed as the producer places them", function()
    local lines = {}
    for i = 1, 50 do lines[i] = "key" .. (i % 7) .. "\t" .. "value " .. i end
    local code, out, err = run({ "produce", "-t", "events", "-k", "\t" }, table.concat(lines, "\n") .. "\n")
    assert.same({ 0, "", "" }, { code, out, err })
    code, out, err = run({ "consume", "-t", "events", "-o", "beginning", "-e", "-f", "%p %k\t%s\n" })
    assert.equal(0, code)
    assert.equal("", err)
    -- the log of each partition in order, as the mock stores it
    local want = {}
    for p = 0, 1 do
      for _, r in ipairs(cluster:records("events", p)) do want[#want + 1] = p .. " " .. r.key .. "\t" .. r.value .. "\n" end
    end
    assert.equal(50, #want)
    local got = {}
    for l in out:gmatch("[^\n]*\n") do got[#got + 1] = l end
    table.sort(got); table.sort(want)
    assert.same(want, got)
    -- and every line came back
    local values = {}
    for l in out:gmatch("\t([^\n]*)\n") do values[#values + 1] = l end
    table.sort(values)
    local sent = {}
    for i = 1, 50 do sent[i] = "value " .. i end
    table.sort(sent)
    assert.same(sent, values)
  end)

  describe("consume", function()
    before_each(function()
      local client = H.mock_client(cluster)
      local p = kafka.producer.new(client, { linger_ms = 0 })
      for i = 0, 4 do
        assert(p:send_sync("one", "v" .. i, { key = i ~= 2 and ("k" .. i) or nil, timestamp = 1700000000000 + i,
          headers = i == 1 and { { key = "a", value = "x" }, { key = "n" } } or nil }))
      end
      assert(p:send_sync("events", "p1", { partition = 1, timestamp = 1700000000100 }))
      p:close()
      client:close()
    end)

    it("the format string: every directive, escapes, %%", function()
      local code, out, err = run({ "consume", "-t", "one", "-o", "beginning", "-e",
        "-f", "%t|%p|%o|%k|%s|%K|%S|%h|%T|100%%\\t\\\\\\r\\n" })
      assert.same({ 0, "" }, { code, err })
      assert.equal(
        "one|0|0|k0|v0|2|2||1700000000000|100%\t\\\r\n" ..
        "one|0|1|k1|v1|2|2|a=x,n=|1700000000001|100%\t\\\r\n" ..
        "one|0|2||v2|-1|2||1700000000002|100%\t\\\r\n" ..
        "one|0|3|k3|v3|2|2||1700000000003|100%\t\\\r\n" ..
        "one|0|4|k4|v4|2|2||1700000000004|100%\t\\\r\n", out)
    end)

    it("--json: one object a line, null key and header value", function()
      local code, out, err = run({ "--json", "consume", "-t", "one", "-o", "1", "-c", "2" })
      assert.same({ 0, "" }, { code, err })
      assert.equal(
        '{"headers":[["a","x"],["n",null]],"key":"k1","offset":1,"partition":0,"timestamp":1700000000001,' ..
        '"topic":"one","value":"v1"}\n' ..
        '{"headers":[],"key":null,"offset":2,"partition":0,"timestamp":1700000000002,"topic":"one","value":"v2"}\n', out)
    end)

    it("-o: N, -N, s@timestamp, end; -p; several topics", function()
      local function offsets(args)
        local code, out, err = run(args)
        assert.same({ 0, "" }, { code, err })
        return out
      end
      assert.equal("3 4 ", offsets({ "consume", "-t", "one", "-o", "-2", "-e", "-f", "%o " }))
      assert.equal("0 1 2 3 4 ", offsets({ "consume", "-t", "one", "-o", "-9", "-e", "-f", "%o " }))
      assert.equal("2 3 4 ", offsets({ "consume", "-t", "one", "-o", "s@1700000000002", "-e", "-f", "%o " }))
      assert.equal("", offsets({ "consume", "-t", "one", "-o", "s@1800000000000", "-e", "-f", "%o " }))
      assert.equal("", offsets({ "consume", "-t", "one", "-e" }))
      -- nothing new: --timeout ends it, exit 2
      local code, quiet, err = run({ "consume", "-t", "one", "--timeout", "50", "-X", "fetch_max_wait_ms=10" })
      assert.same({ 2, "", "lua-kafka: consume: no message for 50 ms\n" }, { code, quiet, err })
      assert.equal("events/1/0 ", offsets({ "consume", "-t", "events", "-p", "1", "-o", "beginning", "-e", "-f", "%t/%p/%o " }))
      local out = offsets({ "consume", "-t", "one", "-t", "events", "-o", "beginning", "-e", "-f", "%t/%p/%o " })
      assert.equal("one/0/0 one/0/1 one/0/2 one/0/3 one/0/4 events/1/0 ", out)
    end)

    it("-g: a group member commits what it wrote; groups describe shows the lag, --json with nulls", function()
      local code, out, err = run({ "consume", "-t", "one", "-g", "g1", "-o", "beginning", "-c", "3", "-f", "%o\\n" })
      assert.same({ 0, "0\n1\n2\n", "" }, { code, out, err })
      assert.same({ one = { [0] = 3 } }, cluster:committed("g1"))
      code, out, err = run({ "groups", "describe", "g1" })
      assert.same({ 0, "" }, { code, err })
      assert.equal(
        "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n" ..
        "g1    one   0         3              5              2   -           -    -\n", out)
      code, out, err = run({ "--json", "groups", "describe", "g1" })
      assert.same({ 0, "" }, { code, err })
      assert.equal('{"client_host":null,"client_id":null,"end_offset":5,"group":"g1","lag":2,"member_id":null,' ..
        '"offset":3,"partition":0,"topic":"one"}\n', out)
      -- a second run goes on from the committed offset
      code, out = run({ "consume", "-t", "one", "-g", "g1", "-e", "-f", "%o\\n" })
      assert.same({ 0, "3\n4\n" }, { code, out })
      assert.same({ one = { [0] = 5 } }, cluster:committed("g1"))
    end)

    it("groups reset: a dry run by default commits nothing; --execute commits, kept within the log", function()
      assert.equal(0, (run({ "consume", "-t", "one", "-t", "events", "-g", "g2", "-o", "beginning", "-c", "6",
        "-f", "" })))
      assert.same({ one = { [0] = 5 }, events = { [0] = 0, [1] = 1 } }, cluster:committed("g2"))
      local code, out, err = run({ "groups", "reset", "g2", "--all-topics", "--to-offset", "2" })
      assert.same({ 0, "lua-kafka: dry run: nothing committed (--execute commits these offsets)\n" }, { code, err })
      assert.equal("GROUP TOPIC  PARTITION NEW-OFFSET\ng2    events 0         0\ng2    events 1         1\n" ..
        "g2    one    0         2\n", out)
      assert.same({ one = { [0] = 5 }, events = { [0] = 0, [1] = 1 } }, cluster:committed("g2"))
      code, out, err = run({ "--json", "groups", "reset", "g2", "-t", "one", "--shift-by", "-4", "--execute" })
      assert.same({ 0, '{"executed":true,"group":"g2","offset":1,"partition":0,"topic":"one"}\n', "" }, { code, out, err })
      assert.same({ one = { [0] = 1 }, events = { [0] = 0, [1] = 1 } }, cluster:committed("g2"))
      code, out, err = run({ "groups", "reset", "g2", "-t", "events:1", "--to-earliest", "--execute" })
      assert.same({ 0, "GROUP TOPIC  PARTITION NEW-OFFSET\ng2    events 1         0\n", "" }, { code, out, err })
      code = run({ "groups", "reset", "g2", "-t", "one", "--to-timestamp", "1700000000003", "--execute" })
      assert.equal(0, code)
      assert.same({ one = { [0] = 3 }, events = { [0] = 0, [1] = 0 } }, cluster:committed("g2"))
      code = run({ "groups", "reset", "g2", "-t", "one", "--to-latest", "--execute" })
      assert.equal(0, code)
      assert.same({ one = { [0] = 5 }, events = { [0] = 0, [1] = 0 } }, cluster:committed("g2"))
      -- groups list, then delete
      code, out, err = run({ "groups", "list" })
      assert.same({ 0, "GROUP TYPE STATE\ng2    -    Empty\n", "" }, { code, out, err })
      -- the mock lacks DeleteGroups: a Kafka error, exit 2 (deleted on a real broker below)
      code, out, err = run({ "groups", "delete", "g2" })
      assert.same({ 2, "", "lua-kafka: groups delete: DeleteGroups: broker 1 mock:9092 speaks DeleteGroups versions none; "
        .. "this call needs v0-v3\n" }, { code, out, err })
    end)
  end)

  it("topics, cluster, metadata: text and --json", function()
    local code, out, err = run({ "topics", "create", "new-t", "--partitions", "3", "--replication-factor", "1" })
    assert.same({ 0, "created topic new-t (3 partitions, replication factor 1)\n", "" }, { code, out, err })
    code, out, err = run({ "topics", "list" })
    assert.same({ 0, "events\nnew-t\none\n", "" }, { code, out, err })
    local id = cluster.topics["one"].id and require("kafka.admin.base").uuid_text(cluster.topics["one"].id)
    code, out, err = run({ "topics", "describe", "one" })
    assert.same({ 0, "" }, { code, err })
    assert.equal(("Topic: one\tTopicId: %s\tPartitionCount: 1\tReplicationFactor: 1\n" ..
      "\tTopic: one\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n"):format(tostring(id)), out)
    code, out, err = run({ "--json", "topics", "describe", "-t", "one" })
    assert.same({ 0, ('{"internal":false,"name":"one","partitions":[{"isr":[1],"leader":1,"partition":0,"replicas":[1]}],' ..
      '"topic_id":"%s"}\n'):format(tostring(id)), "" }, { code, out, err })
    code, out, err = run({ "topics", "delete", "new-t", "missing-t" })
    assert.equal(2, code)
    assert.equal("deleted topic new-t\n", out)
    assert.equal("lua-kafka: topic missing-t: UNKNOWN_TOPIC_OR_PARTITION: this broker does not host the topic-partition\n", err)
    code, out, err = run({ "metadata" })
    assert.same({ 0, ("Cluster: %s\tController: 1\n\tBroker: 1\tmock:9092\n"):format(tostring(cluster.cluster_id)) ..
      ("Topic: events\tTopicId: %s\tPartitionCount: 2\tReplicationFactor: 1\n"):format(
        require("kafka.admin.base").uuid_text(cluster.topics["events"].id)) ..
      "\tTopic: events\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n" ..
      "\tTopic: events\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\n" ..
      ("Topic: one\tTopicId: %s\tPartitionCount: 1\tReplicationFactor: 1\n"):format(tostring(id)) ..
      "\tTopic: one\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n", "" }, { code, out, err })
    code, out, err = run({ "--json", "cluster" })
    assert.same({ 0, ('{"brokers":[{"host":"mock","id":1,"port":9092}],"cluster_id":"%s","controller_id":1}\n')
      :format(tostring(cluster.cluster_id)), "" }, { code, out, err })
  end)

  it("bad input: one line on stderr, exit 1 for usage, 2 for Kafka", function()
    local cases = {
      { {}, 1, "lua-kafka: no command (lua-kafka --help lists them)\n" },
      { { "frob" }, 1, 'lua-kafka: unknown command "frob" (lua-kafka --help lists them)\n' },
      { { "--bogus" }, 1, "lua-kafka: unknown option --bogus (see --help)\n" },
      { { "topics", "list", "--bogus" }, 1, "lua-kafka: topics: unknown option --bogus (see --help)\n" },
      { { "topics" }, 1, "lua-kafka: topics needs an action: list, describe, create, delete, add-partitions, alter-configs\n" },
      { { "topics", "explode" }, 1,
        'lua-kafka: topics: unknown action "explode" (one of list, describe, create, delete, add-partitions, alter-configs)\n' },
      { { "-X", "linger_ms", "topics", "list" }, 1, 'lua-kafka: -X takes key=value (got "linger_ms")\n' },
      { { "-X", "no.such=1", "topics", "list" }, 1,
        'lua-kafka: -X: unknown option "no.such" (the names are in docs/options.md)\n' },
      { { "-X", "linger.ms=soon", "topics", "list" }, 1, 'lua-kafka: -X: linger_ms must be an integer (got "soon")\n' },
      { { "-X", "enable.idempotence=yes", "topics", "list" }, 1,
        'lua-kafka: -X: enable_idempotence must be true or false (got "yes")\n' },
      { { "-X", "security.protocol=CARRIER_PIGEON", "topics", "list" }, 1,
        'lua-kafka: kafka.client.new: security_protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (got "CARRIER_PIGEON")\n' },
      { { "-F", "/nonexistent/client.properties", "topics", "list" }, 2,
        "lua-kafka: -F: /nonexistent/client.properties: No such file or directory\n" },
      { { "produce" }, 1, "lua-kafka: produce: -t TOPIC is required\n" },
      { { "produce", "-t" }, 1, "lua-kafka: produce: -t needs a value (TOPIC)\n" },
      { { "produce", "-t", "nope" }, 2, "lua-kafka: produce: topic nope does not exist\n" },
      { { "produce", "-t", "one", "-p", "3" }, 2, "lua-kafka: produce: topic one has 1 partition: no partition 3\n" },
      { { "produce", "-t", "one", "-p", "x" }, 1, 'lua-kafka: produce: -p must be an integer in 0..2147483647 (got "x")\n' },
      { { "produce", "-t", "one", "-H", "novalue" }, 1, 'lua-kafka: produce: -H takes name=value (got "novalue")\n' },
      { { "produce", "-t", "one", "-z", "brotli" }, 1,
        'lua-kafka: produce: -z: compression must be one of none, gzip, snappy, lz4, zstd, 0, 1, 2, 3, 4 (got "brotli")\n' },
      { { "produce", "-t", "one", "-a", "2" }, 1, 'lua-kafka: produce: -a: acks must be one of -1, 0, 1 (got "2")\n' },
      { { "consume", "-t", "nope", "-e" }, 2, "lua-kafka: consume: topic nope does not exist\n" },
      { { "consume", "-t", "one", "-o", "middle" }, 1,
        'lua-kafka: consume: -o takes beginning, end, N, -N or s@TIMESTAMP_MS (got "middle")\n' },
      { { "consume", "-t", "one", "-f", "%s %x" }, 1, "lua-kafka: consume: -f: unknown %x at byte 4 of the format\n" },
      { { "consume", "-t", "one", "-g", "g", "-p", "0" }, 1,
        "lua-kafka: consume: -p and -g exclude each other (the group assigns the partitions)\n" },
      { { "consume", "-t", "one", "-c", "0" }, 1, 'lua-kafka: consume: -c must be an integer >= 1 (got "0")\n' },
      { { "groups", "reset", "g", "-t", "nope", "--to-earliest" }, 2, "lua-kafka: groups reset: topic nope does not exist\n" },
      { { "groups", "reset", "g", "-t", "one" }, 1,
        "lua-kafka: groups reset needs one of --to-earliest, --to-latest, --to-offset, --to-timestamp, --shift-by\n" },
      { { "groups", "reset", "g", "-t", "one:0,7", "--to-earliest" }, 2,
        "lua-kafka: groups reset: topic one has 1 partitions: no partition 7\n" },
      { { "groups", "describe", "nobody" }, 2, "lua-kafka: groups describe nobody: GROUP_ID_NOT_FOUND: group id not found\n" },
      { { "configs", "describe" }, 1, "lua-kafka: configs describe needs one of --topic, --broker, --group\n" },
      { { "topics", "create", "x", "--partitions", "0" }, 1,
        'lua-kafka: topics create: --partitions must be an integer >= 1 (got "0")\n' },
    }
    for _, c in ipairs(cases) do
      local code, out, err = run(c[1])
      local what = table.concat(c[1], " ")
      assert.are.equal(c[2], code, what .. ": " .. err)
      if c[3] then assert.are.equal(c[3], err, what) end
      if code ~= 0 then assert.are.equal(1, select(2, err:gsub("\n", "\n")), what .. ": one line") end
      if code ~= 0 then assert.are.equal("", out, what) end
    end
    -- a broker that is not there: exit 2 at once (the topic's metadata is asked once)
    local code, out, err = run_on(nil, { "consume", "-t", "x" })
    assert.same({ 2, "", "lua-kafka: consume: topic x: no broker reachable: connect to 127.0.0.1:1 failed: connection refused; "
      .. "next attempt in 100 ms\n" }, { code, out, err })
    -- no brokers anywhere
    out, err = writer(), writer()
    assert.equal(1, cli.main({ "topics", "list" }, { stdout = out, stderr = err, getenv = function() return nil end }))
    assert.equal("lua-kafka: no brokers: give -b host:port (or bootstrap.servers in -F, or $KAFKA_BROKERS)\n", err:text())
  end)

  it("--help: every command, and each command's options; exit 0", function()
    local code, out, err = run({ "--help" })
    assert.same({ 0, "" }, { code, err })
    for _, c in ipairs({ "produce", "consume", "topics", "configs", "groups", "transactions", "cluster", "metadata",
      "acls", "users", "quotas" }) do
      assert.truthy(out:find("\n  " .. c .. " ", 1, true), c)
      local code2, out2 = run({ c, "--help" })
      assert.equal(0, code2)
      assert.equal(c, out2:match("^usage: lua%-kafka (%S+)"))
    end
    assert.truthy(out:find("exit codes: 0 ok, 1 usage error, 2 Kafka or I/O error, 3 internal error", 1, true))
  end)
end)

describe("kafka.cli's parts", function()
  it("-X and -F names: kafka.options' names, Kafka's properties, dots as underscores", function()
    local conf = { client = {}, producer = {}, consumer = {} }
    cli.set_option(conf, "-X", "bootstrap.servers", "h:1")
    cli.set_option(conf, "-X", "security.protocol", "SASL_SSL")
    cli.set_option(conf, "-X", "sasl_mechanism", "SCRAM-SHA-512")
    cli.set_option(conf, "-X", "compression.type", "lz4")
    cli.set_option(conf, "-X", "retries", "3")
    cli.set_option(conf, "-X", "acks", "all")
    cli.set_option(conf, "-X", "retry.backoff.ms", "7")
    cli.set_option(conf, "-X", "enable.auto.commit", "false")
    cli.set_option(conf, "-X", "ssl.ca.location", "/ca.pem")
    cli.set_option(conf, "-X", "api.versions", "false") -- no Kafka name: its dots as underscores
    cli.set_option(conf, "-X", "sasl.jaas.config",
      'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3 cret";')
    assert.same({ brokers = "h:1", security_protocol = "SASL_SSL", sasl_mechanism = "SCRAM-SHA-512", retry_backoff_ms = 7,
      ssl_ca_location = "/ca.pem", sasl_username = "alice", sasl_password = "s3 cret", api_versions = false }, conf.client)
    assert.same({ compression = "lz4", max_retries = 3, acks = -1, retry_backoff_ms = 7 }, conf.producer)
    assert.same({ retry_backoff_ms = 7, enable_auto_commit = false }, conf.consumer)
  end)

  it("properties files as Java reads them", function()
    local props = cli.parse_properties(table.concat({
      "# a comment", "! another", "", "bootstrap.servers=h1:9092,\\", "    h2:9092",
      "security.protocol : SASL_SSL", "sasl.mechanism PLAIN", "  client.id=a\\=b\\tc", "k\\:x=1", "empty=", "trail\\\\" }, "\n"))
    assert.same({ { "bootstrap.servers", "h1:9092,h2:9092", 4 }, { "security.protocol", "SASL_SSL", 6 },
      { "sasl.mechanism", "PLAIN", 7 }, { "client.id", "a=b\tc", 8 }, { "k:x", "1", 9 }, { "empty", "", 10 },
      { "trail\\", "", 11 } }, props)
    -- a bad line names the file and the line
    local f = os.tmpname()
    local h = assert(io.open(f, "wb"))
    h:write("bootstrap.servers=127.0.0.1:1\n\nlinger.ms=x\n")
    h:close()
    local out, err = writer(), writer()
    assert.equal(1, cli.main({ "-F", f, "topics", "list" }, { stdout = out, stderr = err, getenv = function() return nil end }))
    os.remove(f)
    assert.equal(("lua-kafka: -F %s:3: linger_ms must be an integer (got \"x\")\n"):format(f), err:text())
  end)

  it("JSON: strings escaped, invalid UTF-8 bytes as \\u00XX, integers, arrays, sorted objects", function()
    assert.equal('"a\\"b\\\\c\\n\\t\\u0001\\u007f"', cli.json('a"b\\c\n\t\1\127'))
    assert.equal('"\226\130\172 \\u00ff\\u00c3("', cli.json("\226\130\172 \255\195("))
    assert.equal('"\\u00ed\\u00a0\\u0080"', cli.json("\237\160\128")) -- a surrogate is not UTF-8
    assert.equal('[1,-2,1700000000001,0.5,true,null]', cli.json({ 1, -2, 1700000000001, 0.5, true, cli.null }))
    assert.equal('{"a":[],"b":{"c":"d"},"z":1}', cli.json({ z = 1, a = {}, b = { c = "d" } }))
  end)
end)

-- bin/lua-kafka as a process, against bin/kafka-mock as a process: the exit codes reach the shell
describe("bin/lua-kafka", function()
  it("produces, consumes and fails with its exit codes as a process", function()
    local port_file = os.tmpname()
    os.remove(port_file)
    local pid_file = os.tmpname()
    local lua = H.lua_interpreter and H.lua_interpreter() or "lua5.4"
    os.execute(("%s bin/kafka-mock --topic t:1 --no-auto-create --port-file %s --seconds 60 >/dev/null 2>&1 & echo $! > %s")
      :format(lua, port_file, pid_file))
    local pid = assert(io.open(pid_file)):read("*l")
    local ok, e = pcall(function()
      local bs
      for _ = 1, 200 do
        local f = io.open(port_file)
        if f then bs = f:read("*l"); f:close() end
        if bs and bs ~= "" then break end
        os.execute("sleep 0.05")
      end
      assert(bs and bs ~= "", "kafka-mock did not start")
      local function sh(cmd)
        local p = io.popen(("(%s) 2>&1; echo \"rc=$?\""):format((cmd:gsub("LK", lua .. " bin/lua-kafka -b " .. bs))))
        local out = p:read("*a")
        p:close()
        return out
      end
      assert.equal("rc=0\n", sh("printf 'a=1\\nb=2\\n' | LK produce -t t -k ="))
      assert.equal("a 1\nb 2\nrc=0\n", sh("LK consume -t t -o beginning -e -f '%k %s\\n'"))
      assert.equal("lua-kafka: unknown command \"x\" (lua-kafka --help lists them)\nrc=1\n", sh("LK x"))
      assert.equal("lua-kafka: consume: topic u does not exist\nrc=2\n", sh("LK consume -t u"))
    end)
    os.execute("kill " .. pid .. " 2>/dev/null")
    os.remove(port_file); os.remove(pid_file)
    assert(ok, e)
  end)
end)

-- (b) a real broker, Kafka's Java client as the oracle: first Lua only (its
-- peer's JVM starts are not worth repeating per Lua), the main version
local rk = require "support.realkafka"
local rt = require "support.realtools"
local versions = rk.versions()
if #versions > 0 and H.lite() then
  describe("lua-kafka on a real broker", function()
    pending("runs on the first Lua of make test (SPEC_TIER unset)")
  end)
elseif #versions > 0 then
  local version = versions[1]

  describe("lua-kafka on Kafka " .. version .. ", read back by Kafka's Java client", function()
    local k
    setup(function() k = rk.cluster(version, 1) end)

    -- run(argv [, stdin [, bootstrap]]) -> exit code, stdout, stderr of cli.main in-process
    local function run(argv, input, bootstrap)
      local out, err = writer(), writer()
      local args = { "-b", bootstrap or k.bootstrap.PLAINTEXT }
      for _, a in ipairs(argv) do args[#args + 1] = a end
      local code = cli.main(args, { stdin = reader(input or ""), stdout = out, stderr = err,
        getenv = function() return nil end })
      return code, out:text(), err:text()
    end
    local function hex(s) return s == nil and "-" or s == "" and "~" or rt.hex(s) end

    it("topics, configs, produce, consume, cluster over SASL_SSL from -F, transactions, groups describe, reset and delete",
      function()
      local t, t2, t3, g = rt.uniq("cli-t"), rt.uniq("cli-j"), rt.uniq("cli-x"), rt.uniq("cli-g")
      local txid = "peer-" .. t3 .. "-txn-commit"
      local code, out, err = run({ "topics", "create", t, "--partitions", "3", "--replication-factor", "1",
        "--config", "retention.ms=123456" })
      assert.same({ 0, ("created topic %s (3 partitions, replication factor 1)\n"):format(t), "" }, { code, out, err })
      local lines = {}
      for i = 1, 30 do lines[i] = "key" .. (i % 5) .. ":value " .. i .. (i % 4 == 0 and ":x" or "") end
      code, out, err = run({ "--json", "produce", "-t", t, "-k", ":", "-H", "src=cli", "-z", "lz4" },
        table.concat(lines, "\n") .. "\n")
      assert.same({ 0, "" }, { code, err })
      -- what Java's consumer must read at each reported partition and offset
      local want = {}
      local i = 0
      for o, p in out:gmatch('{"offset":(%d+),"partition":(%d+),"topic":"[^"]+"}\n') do
        i = i + 1
        local key, value = lines[i]:match("^([^:]*):(.*)$")
        want[#want + 1] = ("REC %s %s %s %s %s=%s"):format(o, p, hex(key), hex(value), hex("src"), hex("cli"))
      end
      assert.equal(30, i)
      -- a properties file as Java reads it: SASL_SSL with SCRAM, a PEM trust store
      local props = rt.java_sasl_ssl(k)
      local pf = os.tmpname()
      local f = assert(io.open(pf, "wb"))
      for key, v in pairs(props) do f:write(key, "=", v, "\n") end
      f:close()
      local java = rk.java_chain({ { "describe-topic", t }, { "describe-configs", "topic", t }, { "consume", t, 30, 60 },
        { "create", t2, 2, 1 }, { "produce", t2, 20, "none", "idem" }, { "describe-cluster" },
        { "create", t3, 1, 1 }, { "produce", t3, 3, "none", "txn-commit" } },
        { bootstrap = k.bootstrap.PLAINTEXT, timeout = 180 })
      -- topics describe: Java's partitions, leaders, replicas, ISRs and id
      local id = java[1][1]:match("^TOPIC %S+ (%S+) false$")
      local text = { ("Topic: %s\tTopicId: %s\tPartitionCount: 3\tReplicationFactor: 1\n"):format(t, id) }
      for j = 2, #java[1] do
        local p, l, r, isr = java[1][j]:match("^PART (%d+) (%d+) (%S+) (%S+)$")
        text[#text + 1] = ("\tTopic: %s\tPartition: %s\tLeader: %s\tReplicas: %s\tIsr: %s\n"):format(t, p, l, r, isr)
      end
      assert.equal(4, #text)
      code, out, err = run({ "topics", "describe", t })
      assert.same({ 0, table.concat(text), "" }, { code, out, err })
      -- configs describe: every config not at its default, as Java lists it
      local cfg = {}
      for _, l in ipairs(java[2]) do
        local name, source, ro, sens, value = l:match("^CFG (%S+) (%S+) (%S+) (%S+) %S+ %S+ (.*)$")
        if source ~= "DEFAULT_CONFIG" then
          cfg[#cfg + 1] = cli.json({ name = name, source = source, read_only = ro == "true", sensitive = sens == "true",
            value = value == "-" and cli.null or value }) .. "\n"
        end
      end
      assert.truthy(table.concat(cfg):find('"name":"retention.ms","read_only":false,"sensitive":false,'
        .. '"source":"DYNAMIC_TOPIC_CONFIG","value":"123456"', 1, true))
      code, out, err = run({ "--json", "configs", "describe", "--topic", t })
      assert.same({ 0, table.concat(cfg), "" }, { code, out, err })
      -- Java's consumer read every message the CLI wrote, where its reports said
      local got = {}
      for _, l in ipairs(java[3]) do
        local p, o, kh, vh, hh = l:match("^REC (%d+) (%d+) %d+ 0 (%S+) (%S+) (%S+)$")
        got[#got + 1] = ("REC %s %s %s %s %s"):format(o, p, kh, vh, hh)
      end
      table.sort(got); table.sort(want)
      assert.same(want, got)
      -- the CLI reads what Java's idempotent producer wrote: every field
      local jw = {}
      for _, l in ipairs(java[5]) do
        local p, o, n = l:match("^ACK (%d+) (%d+) (%d+)$")
        n = tonumber(n)
        jw[#jw + 1] = ("%s %s k%d v%d-%s %d i=%d,n=\n"):format(p, o, n, n, ("x"):rep(n % 7 * 40), 1700000000000 + n, n)
      end
      assert.equal(20, #jw)
      code, out, err = run({ "consume", "-t", t2, "-o", "beginning", "-e", "-f", "%p %o %k %s %T %h\\n" })
      assert.same({ 0, "" }, { code, err })
      got = {}
      for l in out:gmatch("[^\n]*\n") do got[#got + 1] = l end
      table.sort(got); table.sort(jw)
      assert.same(jw, got)
      -- cluster over SASL_SSL with SCRAM-SHA-512, configured by Java's own properties file
      local cid = java[6][1]:match("^CLUSTER (%S+) %d+$")
      code, out, err = run({ "-F", pf, "cluster" }, nil, k.bootstrap.SASL_SSL)
      os.remove(pf)
      assert.same({ 0, "" }, { code, err })
      assert.equal(("Cluster: %s\tController: 1\n\tBroker: 1\t127.0.0.1:%s\n"):format(cid,
        k.bootstrap.SASL_SSL:match(":(%d+)$")), out)
      -- a group member writes 10 messages and commits them; the lag is Java's
      code, out, err = run({ "consume", "-t", t, "-g", g, "-o", "beginning", "-c", "10", "-f", "%p %o\\n" })
      assert.same({ 0, "" }, { code, err })
      local printed = {}
      for p, o in out:gmatch("(%d+) (%d+)\n") do
        p, o = tonumber(p), tonumber(o)
        printed[p] = math.max(printed[p] or 0, o + 1)
      end
      local lag = rk.java({ "group-lag", g }, { bootstrap = k.bootstrap.PLAINTEXT })
      local rows, ends, committed = {}, {}, {}
      for _, l in ipairs(lag) do
        local p, o, e, d = l:match("^LAG %S+ (%d+) (%d+) (%d+) (%-?%d+)$")
        p = tonumber(p)
        ends[p], committed[p] = tonumber(e), tonumber(o)
        rows[#rows + 1] = cli.json({ client_host = cli.null, client_id = cli.null, member_id = cli.null, group = g,
          topic = t, partition = p, offset = tonumber(o), end_offset = tonumber(e), lag = tonumber(d) }) .. "\n"
      end
      -- what the group committed is exactly what it wrote
      for p, o in pairs(printed) do assert.equal(o, committed[p], "partition " .. p) end
      code, out, err = run({ "--json", "groups", "describe", g })
      assert.same({ 0, table.concat(rows), "" }, { code, out, err })
      -- reset, dry run then executed: Java reads the new offsets back
      local dry
      code, dry, err = run({ "groups", "reset", g, "-t", t .. ":0,2", "--to-offset", "2" })
      assert.same({ 0, "lua-kafka: dry run: nothing committed (--execute commits these offsets)\n" }, { code, err })
      assert.equal(3, select(2, dry:gsub("\n", "")))
      code = run({ "groups", "reset", g, "-t", t .. ":0,2", "--to-offset", "2", "--execute" })
      assert.equal(0, code)
      -- (the transaction is described here, seconds after its commit: right after it, it may still be PrepareCommit)
      local j3 = rk.java_chain({ { "list-group-offsets", g }, { "describe-transaction", txid } },
        { bootstrap = k.bootstrap.PLAINTEXT })
      local offs = j3[1]
      local want_offs = {}
      for p = 0, 2 do
        local o = (p == 1) and committed[1] or math.min(2, ends[p] or 0)
        if o then want_offs[#want_offs + 1] = ("OFF %s %d %d ~"):format(t, p, o) end
      end
      assert.same(want_offs, offs)
      -- transactions: Java's transaction as Java's AdminClient describes it
      local state, pid, epoch, tmo, start, tps =
        j3[2][1]:match("^TXN %S+ (%S+) (%d+) (%d+) (%d+) (%S+) (%S+)$")
      assert.equal("CompleteCommit", state)
      local tp_list = {}
      for x in tps:gmatch("[^,]+") do if x ~= "-" then tp_list[#tp_list + 1] = x end end
      code, out, err = run({ "--json", "transactions", "describe", txid })
      assert.same({ 0, cli.json({ transactional_id = txid, state = state, producer_id = tonumber(pid),
        producer_epoch = tonumber(epoch), transaction_timeout_ms = tonumber(tmo),
        transaction_start_time_ms = start == "-" and cli.null or tonumber(start),
        topic_partitions = tp_list, coordinator = 1 }) .. "\n", "" }, { code, out, err })
      code, out, err = run({ "--json", "transactions", "list" })
      assert.same({ 0, "" }, { code, err })
      assert.truthy(out:find(cli.json({ coordinator = 1, producer_id = tonumber(pid), state = state,
        transactional_id = txid }), 1, true), out)
      -- add-partitions, alter-configs, groups delete, topics delete: read back by Java
      code, out, err = run({ "topics", "add-partitions", t, "--partitions", "4" })
      assert.same({ 0, ("topic %s now has 4 partitions\n"):format(t), "" }, { code, out, err })
      code, out, err = run({ "topics", "alter-configs", t, "--set", "cleanup.policy=compact", "--delete", "retention.ms" })
      assert.same({ 0, ("altered 2 configs of topic %s\n"):format(t), "" }, { code, out, err })
      code, out, err = run({ "groups", "delete", g })
      assert.same({ 0, ("deleted group %s\n"):format(g), "" }, { code, out, err })
      code, out, err = run({ "topics", "delete", t2 })
      assert.same({ 0, ("deleted topic %s\n"):format(t2), "" }, { code, out, err })
      java = rk.java_chain({ { "describe-topic", t }, { "describe-configs", "topic", t }, { "list-groups" },
        { "list-topics" } }, { bootstrap = k.bootstrap.PLAINTEXT, timeout = 120 })
      assert.equal(5, #java[1])
      assert.equal("PART 3 1 1 1", java[1][5])
      local sources = {}
      for _, l in ipairs(java[2]) do
        local name, source, value = l:match("^CFG (%S+) (%S+) %S+ %S+ %S+ %S+ (.*)$")
        sources[name] = source .. " " .. value
      end
      assert.equal("DYNAMIC_TOPIC_CONFIG compact", sources["cleanup.policy"])
      assert.falsy(sources["retention.ms"]:find("DYNAMIC_TOPIC_CONFIG", 1, true))
      assert.falsy(table.concat(java[3], "\n"):find(g, 1, true))
      local listed = table.concat(java[4], "\n")
      assert.falsy(listed:find(t2, 1, true))
      assert.truthy(listed:find(t, 1, true))
    end)
  end)
end
