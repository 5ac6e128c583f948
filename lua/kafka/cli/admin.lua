-- kafka.cli.admin: `lua-kafka topics|configs|groups|transactions|cluster|metadata`
-- over kafka.admin (docs/cli.md). Every failed item is one line on stderr
-- and makes the command exit 2; the items that succeeded are still written.
local ipairs, pairs, tostring, require = ipairs, pairs, tostring, require
local table, math = table, math

local _M = {}

local function cli() return require "kafka.cli" end

-- names(o, pos, what) -> the names given as arguments and -t options
local function names(o, pos, what, need)
  local out = {}
  for _, n in ipairs(o.topic or {}) do out[#out + 1] = n end
  for _, n in ipairs(pos) do out[#out + 1] = n end
  if need and #out == 0 then cli().usage(what .. " needs at least one name") end
  return out
end

-- kv(list, what) -> {{name, value}...} of "k=v" texts
local function kvs(list, what)
  local out = {}
  for _, x in ipairs(list or {}) do
    local k, v = x:match("^([^=]+)=(.*)$")
    if not k then cli().usage(("%s takes name=value (got %q)"):format(what, x)) end
    out[#out + 1] = { k, v }
  end
  return out
end

-- action(pos, actions, cmd) -> the action word (first positional), removed from pos
local function action(pos, actions, cmd)
  local a = table.remove(pos, 1)
  if not a then cli().usage(("%s needs an action: %s"):format(cmd, table.concat(actions, ", "))) end
  for _, x in ipairs(actions) do if x == a then return a end end
  cli().usage(("%s: unknown action %q (one of %s)"):format(cmd, a, table.concat(actions, ", ")))
end

-- items(ctx, what, results, key) -> the results without error; errors to stderr
local function settled(ctx, what, results, key)
  local ok = {}
  for _, r in ipairs(results) do
    if r.error then ctx:item_error(("%s %s: %s"):format(what, tostring(r[key]), r.error))
    else ok[#ok + 1] = r end
  end
  return ok
end

local function ids(list)
  local s = {}
  for i, x in ipairs(list or {}) do s[i] = tostring(x) end
  return table.concat(s, ",")
end

---------------------------------------------------------------- topics

local TOPICS = {
  { "-t", "--topic", arg = "TOPIC", multi = true, doc = "a topic (repeatable; or give the names as arguments)" },
  { nil, "--partitions", arg = "N", doc = "create: the partition count (default: the broker's); add-partitions: the new total" },
  { nil, "--replication-factor", arg = "N", doc = "create: the replication factor (default: the broker's)" },
  { nil, "--config", arg = "NAME=VALUE", multi = true, doc = "create: a topic config (repeatable)" },
  { nil, "--set", arg = "NAME=VALUE", multi = true, doc = "alter-configs: set a config (repeatable)" },
  { nil, "--delete", arg = "NAME", multi = true, doc = "alter-configs: back to the default (repeatable)" },
  { nil, "--internal", doc = "list: internal topics too (__consumer_offsets, ...)" },
}

local function describe_topic_lines(ctx, t)
  local rf = t.partitions[1] and #t.partitions[1].replicas or 0
  local rec = { name = t.name, topic_id = t.topic_id, internal = t.internal, partitions = {} }
  local out = { ("Topic: %s\tTopicId: %s\tPartitionCount: %d\tReplicationFactor: %d"):format(
    t.name, tostring(t.topic_id), #t.partitions, rf) }
  for i, p in ipairs(t.partitions) do
    rec.partitions[i] = { partition = p.partition, leader = p.leader, replicas = p.replicas, isr = p.isr }
    out[#out + 1] = ("\tTopic: %s\tPartition: %d\tLeader: %s\tReplicas: %s\tIsr: %s"):format(
      t.name, p.partition, p.leader == -1 and "none" or tostring(p.leader), ids(p.replicas), ids(p.isr))
  end
  ctx:emit(rec, table.concat(out, "\n"))
end

local function alter_configs(ctx, type_, name, o)
  local C = cli()
  local ops = {}
  for _, kv in ipairs(kvs(o.set, "--set")) do ops[#ops + 1] = { name = kv[1], op = "set", value = kv[2] } end
  for _, kv in ipairs(kvs(o.append, "--append")) do ops[#ops + 1] = { name = kv[1], op = "append", value = kv[2] } end
  for _, kv in ipairs(kvs(o.subtract, "--subtract")) do ops[#ops + 1] = { name = kv[1], op = "subtract", value = kv[2] } end
  for _, n in ipairs(o.delete or {}) do ops[#ops + 1] = { name = n, op = "delete" } end
  if #ops == 0 then C.usage("alter needs --set, --delete, --append or --subtract") end
  local res = ctx:check("alter configs", ctx:admin():alter_configs { { type = type_, name = name, configs = ops } })
  for _, r in ipairs(settled(ctx, "alter configs of " .. type_, res, "name")) do
    ctx:emit({ type = r.type, name = r.name, altered = #ops }, ("altered %d config%s of %s %s"):format(
      #ops, #ops == 1 and "" or "s", r.type, r.name))
  end
end

local function topics(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "list", "describe", "create", "delete", "add-partitions", "alter-configs" }, "topics")
  local admin = ctx:admin()
  if act == "list" then
    local list = ctx:check("topics list", admin:list_topics { internal = o.internal or nil })
    for _, t in ipairs(list) do ctx:emit({ name = t.name, topic_id = t.topic_id, internal = t.internal }, t.name) end
  elseif act == "describe" then
    local want = names(o, pos, "topics describe")
    if #want == 0 then
      for _, t in ipairs(ctx:check("topics describe", admin:list_topics { internal = o.internal or nil })) do
        want[#want + 1] = t.name
      end
    end
    if #want == 0 then return end
    local res = ctx:check("topics describe", admin:describe_topics(want))
    for _, t in ipairs(settled(ctx, "topic", res, "name")) do describe_topic_lines(ctx, t) end
  elseif act == "create" then
    local want = names(o, pos, "topics create", true)
    local np = o.partitions and C.int("topics create: --partitions", o.partitions, 1)
    local rf = o.replication_factor and C.int("topics create: --replication-factor", o.replication_factor, 1, 32767)
    local cfg
    for _, kv in ipairs(kvs(o.config, "topics create: --config")) do cfg = cfg or {}; cfg[kv[1]] = kv[2] end
    local specs = {}
    for i, n in ipairs(want) do specs[i] = { name = n, num_partitions = np, replication_factor = rf, configs = cfg } end
    local res = ctx:check("topics create", admin:create_topics(specs))
    for _, r in ipairs(settled(ctx, "topic", res, "name")) do
      ctx:emit({ name = r.name, topic_id = r.topic_id, num_partitions = r.num_partitions,
        replication_factor = r.replication_factor }, ("created topic %s (%s partitions, replication factor %s)"):format(
        r.name, tostring(r.num_partitions), tostring(r.replication_factor)))
    end
  elseif act == "delete" then
    local want = names(o, pos, "topics delete", true)
    local res = ctx:check("topics delete", admin:delete_topics(want))
    for _, r in ipairs(settled(ctx, "topic", res, "name")) do
      ctx:emit({ name = r.name, deleted = true }, "deleted topic " .. r.name)
    end
  elseif act == "add-partitions" then
    local want = names(o, pos, "topics add-partitions", true)
    if not o.partitions then C.usage("topics add-partitions needs --partitions N (the new total)") end
    local n = C.int("topics add-partitions: --partitions", o.partitions, 1)
    local specs = {}
    for i, x in ipairs(want) do specs[i] = { name = x, count = n } end
    local res = ctx:check("topics add-partitions", admin:create_partitions(specs))
    for _, r in ipairs(settled(ctx, "topic", res, "name")) do
      ctx:emit({ name = r.name, partitions = n }, ("topic %s now has %d partitions"):format(r.name, n))
    end
  else
    local want = names(o, pos, "topics alter-configs", true)
    for _, n in ipairs(want) do alter_configs(ctx, "topic", n, o) end
  end
end

---------------------------------------------------------------- configs

local CONFIGS = {
  { nil, "--topic", arg = "TOPIC", doc = "the topic's configs" },
  { nil, "--broker", arg = "ID", doc = "a broker's configs (\"\": the cluster-wide defaults)" },
  { nil, "--group", arg = "GROUP", doc = "a group's configs" },
  { nil, "--all", doc = "describe: every config, the defaults too (else only those set)" },
  { nil, "--set", arg = "NAME=VALUE", multi = true, doc = "alter: set (repeatable)" },
  { nil, "--delete", arg = "NAME", multi = true, doc = "alter: back to the default (repeatable)" },
  { nil, "--append", arg = "NAME=VALUE", multi = true, doc = "alter: add to a list config (repeatable)" },
  { nil, "--subtract", arg = "NAME=VALUE", multi = true, doc = "alter: remove from a list config (repeatable)" },
}

local function configs(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "describe", "alter" }, "configs")
  if #pos > 0 then C.usage(("configs: unexpected argument %q"):format(pos[1])) end
  local given = (o.topic and 1 or 0) + (o.broker and 1 or 0) + (o.group and 1 or 0)
  if given ~= 1 then C.usage("configs " .. act .. " needs one of --topic, --broker, --group") end
  local type_ = o.topic and "topic" or o.broker and "broker" or "group"
  local name = o.topic or o.broker or o.group
  if act == "alter" then return alter_configs(ctx, type_, name, o) end
  local res = ctx:check("configs describe", ctx:admin():describe_configs { { type = type_, name = name } })
  local rows = {}
  for _, r in ipairs(settled(ctx, "configs of " .. type_, res, "name")) do
    for cname, e in pairs(r.configs) do
      if o.all or e.source ~= "DEFAULT_CONFIG" then
        rows[#rows + 1] = { name = cname, value = e.value == nil and C.null or e.value, source = e.source,
          read_only = e.read_only, sensitive = e.sensitive }
      end
    end
  end
  table.sort(rows, function(a, b) return a.name < b.name end)
  ctx:table({ { "NAME", "name" }, { "VALUE", "value" }, { "SOURCE", "source" } }, rows)
end

---------------------------------------------------------------- groups

local GROUPS = {
  { "-t", "--topic", arg = "TOPIC[:P,P...]", multi = true, doc = "reset: the topic (or its partitions listed)" },
  { nil, "--all-topics", doc = "reset: every partition the group committed" },
  { nil, "--to-earliest", doc = "reset: to the log start" },
  { nil, "--to-latest", doc = "reset: to the log end" },
  { nil, "--to-offset", arg = "N", doc = "reset: to offset N (kept within the log's start and end)" },
  { nil, "--to-timestamp", arg = "MS", doc = "reset: to the first offset at or after MS (the log end when none)" },
  { nil, "--shift-by", arg = "N", doc = "reset: the committed offset plus N (kept within the log)" },
  { nil, "--dry-run", doc = "reset: show the new offsets only (the default)" },
  { nil, "--execute", doc = "reset: commit the new offsets (the group must have no active members)" },
}

local LAG_COLUMNS = { { "GROUP", "group" }, { "TOPIC", "topic" }, { "PARTITION", "partition" },
  { "CURRENT-OFFSET", "offset" }, { "LOG-END-OFFSET", "end_offset" }, { "LAG", "lag" },
  { "CONSUMER-ID", "member_id" }, { "HOST", "client_host" }, { "CLIENT-ID", "client_id" } }

-- reset_partitions(ctx, group, o) -> {{topic=, partition=, current=}...}
local function reset_partitions(ctx, group, o)
  local C = cli()
  local admin = ctx:admin()
  local committed = ctx:check("groups reset " .. group, admin:list_group_offsets(group, nil))
  local current = {}
  for _, c in ipairs(committed) do
    if c.offset and c.offset >= 0 then current[c.topic .. "/" .. c.partition] = c.offset end
  end
  local out = {}
  if o.all_topics then
    if o.topic then C.usage("groups reset: --all-topics and -t exclude each other") end
    for _, c in ipairs(committed) do out[#out + 1] = { topic = c.topic, partition = c.partition } end
  else
    if not o.topic then C.usage("groups reset needs -t TOPIC[:P,...] or --all-topics") end
    for _, spec in ipairs(o.topic) do
      local t, plist = spec:match("^([^:]+):(.+)$")
      t = t or spec
      local n = ctx:partitions("groups reset", t)
      if plist then
        for p in (plist .. ","):gmatch("([^,]*),") do
          local x = C.int("groups reset: partition of -t " .. spec, p, 0)
          if x >= n then C.kafka(("groups reset: topic %s has %d partitions: no partition %d"):format(t, n, x)) end
          out[#out + 1] = { topic = t, partition = x }
        end
      else
        for p = 0, n - 1 do out[#out + 1] = { topic = t, partition = p } end
      end
    end
  end
  for _, x in ipairs(out) do x.current = current[x.topic .. "/" .. x.partition] end
  return out
end

local function reset(ctx, group, o)
  local C = cli()
  local n = (o.to_earliest and 1 or 0) + (o.to_latest and 1 or 0) + (o.to_offset and 1 or 0)
    + (o.to_timestamp and 1 or 0) + (o.shift_by and 1 or 0)
  if n ~= 1 then C.usage("groups reset needs one of --to-earliest, --to-latest, --to-offset, --to-timestamp, --shift-by") end
  if o.execute and o.dry_run then C.usage("groups reset: --dry-run and --execute exclude each other") end
  local to_offset = o.to_offset and C.int("groups reset: --to-offset", o.to_offset, 0)
  local to_ts = o.to_timestamp and C.int("groups reset: --to-timestamp", o.to_timestamp, 0)
  local shift = o.shift_by and C.int("groups reset: --shift-by", o.shift_by)
  local parts = reset_partitions(ctx, group, o)
  if #parts == 0 then C.kafka("groups reset " .. group .. ": no partitions (the group committed none)") end
  local admin = ctx:admin()
  local function offsets(spec)
    local q = {}
    for i, p in ipairs(parts) do q[i] = { topic = p.topic, partition = p.partition, spec = spec } end
    local res = ctx:check("groups reset: list offsets", admin:list_offsets(q))
    for _, r in ipairs(res) do
      if r.error then C.kafka(("groups reset: %s/%d: %s"):format(r.topic, r.partition, r.error)) end
    end
    return res
  end
  local first, last = offsets("earliest"), offsets("latest")
  local at = to_ts and offsets(to_ts)
  local plan = {}
  for i, p in ipairs(parts) do
    local lo, hi = first[i].offset, last[i].offset
    local new
    if o.to_earliest then new = lo
    elseif o.to_latest then new = hi
    elseif to_offset then new = to_offset
    elseif at then new = at[i].offset == -1 and hi or at[i].offset
    else new = (p.current or hi) + shift end
    new = math.max(lo, math.min(hi, new))
    plan[i] = { group = group, topic = p.topic, partition = p.partition, offset = new }
  end
  if o.execute then
    local list = {}
    for i, p in ipairs(plan) do list[i] = { topic = p.topic, partition = p.partition, offset = p.offset } end
    local res = ctx:check("groups reset " .. group, admin:alter_group_offsets(group, list))
    local done = {}
    for i, r in ipairs(res) do
      if r.error then ctx:item_error(("groups reset %s: %s/%d: %s"):format(group, r.topic, r.partition, r.error))
      else done[#done + 1] = plan[i] end
    end
    plan = done
  end
  local cols = { { "GROUP", "group" }, { "TOPIC", "topic" }, { "PARTITION", "partition" }, { "NEW-OFFSET", "offset" } }
  for _, p in ipairs(plan) do p.executed = o.execute and true or false end
  ctx:table(cols, plan)
  if not o.execute then ctx.stderr:write("lua-kafka: dry run: nothing committed (--execute commits these offsets)\n") end
end

local function groups(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "list", "describe", "reset", "delete" }, "groups")
  local admin = ctx:admin()
  if act == "list" then
    if #pos > 0 then C.usage(("groups list: unexpected argument %q"):format(pos[1])) end
    local list, failed = ctx:check("groups list", admin:list_groups())
    for _, f in ipairs(failed or {}) do ctx:item_error(("groups list: broker %s: %s"):format(tostring(f.broker), f.error)) end
    local rows = {}
    for i, g in ipairs(list) do rows[i] = { group = g.group_id, type = g.type, state = g.state,
      protocol_type = g.protocol_type, coordinator = g.coordinator } end
    ctx:table({ { "GROUP", "group" }, { "TYPE", "type" }, { "STATE", "state" } }, rows)
  elseif act == "describe" then
    local want = names({}, pos, "groups describe", true)
    local rows = {}
    for _, g in ipairs(want) do
      local lag, err = admin:group_lag(g)
      -- (kafka.admin's message starts with the call and the group: said once here)
      if not lag then ctx:item_error(("groups describe %s: %s"):format(g, (tostring(err):gsub("^group_lag %S+: ", ""))))
      else
        for _, r in ipairs(lag) do
          if r.error then ctx:item_error(("group %s: %s/%d: %s"):format(g, r.topic, r.partition, r.error)) end
          rows[#rows + 1] = { group = g, topic = r.topic, partition = r.partition, offset = r.offset,
            end_offset = r.end_offset, lag = r.lag, member_id = r.member_id, client_host = r.client_host,
            client_id = r.client_id }
        end
      end
    end
    ctx:table(LAG_COLUMNS, rows)
  elseif act == "reset" then
    local want = names({}, pos, "groups reset", true)
    if #want ~= 1 then C.usage("groups reset takes one group") end
    reset(ctx, want[1], o)
  else
    local want = names({}, pos, "groups delete", true)
    local res = ctx:check("groups delete", admin:delete_groups(want))
    for _, r in ipairs(settled(ctx, "group", res, "group_id")) do
      ctx:emit({ group = r.group_id, deleted = true }, "deleted group " .. r.group_id)
    end
  end
end

---------------------------------------------------------------- transactions, cluster, metadata

local TRANSACTIONS = {
  { nil, "--topic", arg = "TOPIC", doc = "abort: the partition's topic" },
  { nil, "--partition", arg = "P", doc = "abort: the partition" },
  { nil, "--start-offset", arg = "OFFSET", doc = "abort: the offset where the hanging transaction starts "
    .. "(its producer found with describe_producers)" },
  { nil, "--producer-id", arg = "ID", doc = "abort: the producer id (instead of --start-offset)" },
  { nil, "--producer-epoch", arg = "EPOCH", doc = "abort: with --producer-id" },
  { nil, "--coordinator-epoch", arg = "EPOCH", doc = "abort: with --producer-id" },
}

-- abort(ctx, o): kafka-transactions.sh abort
local function abort(ctx, o)
  local C = cli()
  if not o.topic or not o.partition then C.usage("transactions abort needs --topic and --partition") end
  local spec = { topic = o.topic, partition = C.int("transactions abort: --partition", o.partition, 0) }
  if o.start_offset then
    if o.producer_id then C.usage("transactions abort: --start-offset and --producer-id exclude each other") end
    spec.start_offset = C.int("transactions abort: --start-offset", o.start_offset, 0)
  elseif o.producer_id and o.producer_epoch and o.coordinator_epoch then
    spec.producer_id = C.int("transactions abort: --producer-id", o.producer_id, 0)
    spec.producer_epoch = C.int("transactions abort: --producer-epoch", o.producer_epoch, 0, 32767)
    spec.coordinator_epoch = C.int("transactions abort: --coordinator-epoch", o.coordinator_epoch, -1)
  else
    C.usage("transactions abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")
  end
  local r = ctx:check("transactions abort", ctx:admin():abort_transaction(spec))
  if r.error then
    ctx:item_error(("transactions abort %s/%d: %s"):format(r.topic, r.partition, r.error))
    return
  end
  ctx:emit({ topic = r.topic, partition = r.partition, producer_id = r.producer_id, producer_epoch = r.producer_epoch,
    coordinator_epoch = r.coordinator_epoch, aborted = true },
    ("aborted the transaction of producer %d (epoch %d) on %s/%d"):format(r.producer_id, r.producer_epoch, r.topic,
      r.partition))
end

local function transactions(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "list", "describe", "abort" }, "transactions")
  if act == "abort" then
    if #pos > 0 then C.usage(("transactions abort: unexpected argument %q"):format(pos[1])) end
    return abort(ctx, o)
  end
  local admin = ctx:admin()
  if act == "list" then
    if #pos > 0 then C.usage(("transactions list: unexpected argument %q"):format(pos[1])) end
    local list, failed = ctx:check("transactions list", admin:list_transactions())
    for _, f in ipairs(failed or {}) do ctx:item_error(("transactions list: broker %s: %s"):format(tostring(f.broker), f.error)) end
    local rows = {}
    for i, t in ipairs(list) do rows[i] = { transactional_id = t.transactional_id, producer_id = t.producer_id,
      state = t.state, coordinator = t.coordinator } end
    ctx:table({ { "TRANSACTIONAL-ID", "transactional_id" }, { "PRODUCER-ID", "producer_id" }, { "STATE", "state" },
      { "COORDINATOR", "coordinator" } }, rows)
  else
    local want = names({}, pos, "transactions describe", true)
    local res = ctx:check("transactions describe", admin:describe_transactions(want))
    local rows = {}
    for _, t in ipairs(settled(ctx, "transaction", res, "transactional_id")) do
      local tps = {}
      for i, tp in ipairs(t.topic_partitions or {}) do tps[i] = tp.topic .. ":" .. tp.partition end
      rows[#rows + 1] = { transactional_id = t.transactional_id, producer_id = t.producer_id,
        producer_epoch = t.producer_epoch, state = t.state, transaction_timeout_ms = t.transaction_timeout_ms,
        transaction_start_time_ms = t.transaction_start_time_ms, coordinator = t.coordinator,
        topic_partitions = ctx.json and tps or (#tps > 0 and table.concat(tps, ",") or nil) }
    end
    ctx:table({ { "TRANSACTIONAL-ID", "transactional_id" }, { "PRODUCER-ID", "producer_id" },
      { "EPOCH", "producer_epoch" }, { "STATE", "state" }, { "TIMEOUT-MS", "transaction_timeout_ms" },
      { "START-MS", "transaction_start_time_ms" }, { "COORDINATOR", "coordinator" }, { "PARTITIONS", "topic_partitions" } },
      rows)
  end
end

local function cluster(ctx, o, pos)
  local C = cli()
  if #pos > 0 then C.usage(("unexpected argument %q"):format(pos[1])) end
  local admin = ctx:admin()
  local d = ctx:check("cluster", admin:describe_cluster())
  local brokers = {}
  for i, b in ipairs(d.brokers) do brokers[i] = { id = b.id, host = b.host, port = b.port, rack = b.rack } end
  local text = { ("Cluster: %s\tController: %s"):format(tostring(d.cluster_id), tostring(d.controller_id)) }
  for _, b in ipairs(brokers) do
    text[#text + 1] = ("\tBroker: %d\t%s:%d%s"):format(b.id, b.host, b.port, b.rack and ("\track: " .. b.rack) or "")
  end
  ctx:emit({ cluster_id = d.cluster_id, controller_id = d.controller_id, brokers = brokers }, table.concat(text, "\n"))
  if ctx.command == "metadata" then
    local list = ctx:check("metadata", admin:list_topics { internal = o.internal or nil })
    local want = {}
    for i, t in ipairs(list) do want[i] = t.name end
    if #want == 0 then return end
    local res = ctx:check("metadata", admin:describe_topics(want))
    for _, t in ipairs(settled(ctx, "topic", res, "name")) do describe_topic_lines(ctx, t) end
  end
end

local function metadata(ctx, o, pos)
  ctx.command = "metadata"
  return cluster(ctx, o, pos)
end

_M.commands = {
  { name = "topics", summary = "list, describe, create, delete topics; add partitions; alter their configs",
    options = TOPICS, run = topics,
    usage = "topics list [--internal] | describe [TOPIC...] | create TOPIC... [--partitions N] "
      .. "[--replication-factor N] [--config NAME=VALUE]... | delete TOPIC... | add-partitions TOPIC... --partitions N"
      .. " | alter-configs TOPIC... [--set NAME=VALUE]... [--delete NAME]..." },
  { name = "configs", summary = "describe or alter the configs of a topic, broker or group", options = CONFIGS,
    run = configs,
    usage = "configs describe|alter --topic T|--broker ID|--group G [--all] [--set N=V]... [--delete N]..." },
  { name = "groups", summary = "list, describe (with lag), reset offsets of (dry run by default), delete groups",
    options = GROUPS, run = groups,
    usage = "groups list | describe GROUP... | reset GROUP (-t TOPIC[:P,...]... | --all-topics) (--to-earliest | "
      .. "--to-latest | --to-offset N | --to-timestamp MS | --shift-by N) [--execute] | delete GROUP..." },
  { name = "transactions", summary = "list, describe or abort (a hanging one) transactions", options = TRANSACTIONS,
    run = transactions,
    usage = "transactions list | describe TRANSACTIONAL_ID... | abort --topic T --partition P (--start-offset N | "
      .. "--producer-id ID --producer-epoch E --coordinator-epoch C)" },
  { name = "cluster", summary = "the cluster id, the controller and the brokers", options = {}, run = cluster,
    usage = "cluster" },
  { name = "metadata", summary = "the cluster and every topic's partitions, leaders, replicas and ISRs",
    options = { { nil, "--internal", doc = "internal topics too" } }, run = metadata, usage = "metadata [--internal]" },
}

return _M
