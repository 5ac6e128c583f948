-- kafka.cli.security: `lua-kafka acls|users|quotas` over kafka.admin's
-- security calls (docs/cli.md): ACLs with kafka-acls.sh's flags, SCRAM
-- credentials as kafka-configs.sh --entity-type users sets them, client
-- quotas. Every failed item is one line on stderr and makes the command
-- exit 2; the items that succeeded are still written.
local ipairs, pairs, tostring, tonumber, require, pcall = ipairs, pairs, tostring, tonumber, require, pcall
local table = table

local _M = {}

local function cli() return require "kafka.cli" end

-- call(where, f, ...) -> f's results; misuse kafka.admin raises (a bad
-- operation name, say) becomes a usage failure naming it
local function call(where, f, ...)
  local ok, a, b, c = pcall(f, ...)
  if not ok then cli().usage(where .. ": " .. (tostring(a):gsub("^[^:]+:%d+: ", ""))) end
  return a, b, c
end

-- action(pos, actions, cmd) -> the action word (first positional), removed from pos
local function action(pos, actions, cmd)
  local a = table.remove(pos, 1)
  if not a then cli().usage(("%s needs an action: %s"):format(cmd, table.concat(actions, ", "))) end
  for _, x in ipairs(actions) do if x == a then return a end end
  cli().usage(("%s: unknown action %q (one of %s)"):format(cmd, a, table.concat(actions, ", ")))
end

local function no_more(pos, where)
  if #pos > 0 then cli().usage(("%s: unexpected argument %q"):format(where, pos[1])) end
end

---------------------------------------------------------------- acls

local ACLS = {
  { nil, "--topic", arg = "TOPIC", multi = true, doc = "a topic resource (repeatable; \"*\": every topic)" },
  { nil, "--group", arg = "GROUP", multi = true, doc = "a group resource (repeatable)" },
  { nil, "--transactional-id", arg = "ID", multi = true, doc = "a transactional id resource (repeatable)" },
  { nil, "--cluster", doc = "the cluster resource" },
  { nil, "--resource-pattern-type", arg = "TYPE",
    doc = "create: literal (default) or prefixed; list/delete: any (default), match, literal, prefixed" },
  { nil, "--allow-principal", arg = "PRINCIPAL", multi = true, doc = "create/delete: an ALLOW principal, e.g. User:alice" },
  { nil, "--deny-principal", arg = "PRINCIPAL", multi = true, doc = "create/delete: a DENY principal" },
  { nil, "--allow-host", arg = "HOST", multi = true, doc = "create/delete: the hosts of the ALLOW entries (default *)" },
  { nil, "--deny-host", arg = "HOST", multi = true, doc = "create/delete: the hosts of the DENY entries (default *)" },
  { nil, "--operation", arg = "OP", multi = true,
    doc = "create/delete: Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
      .. "IdempotentWrite, All, ... (repeatable)" },
  { nil, "--principal", arg = "PRINCIPAL", doc = "list: only this principal's ACLs" },
}

local ACL_COLUMNS = { { "RESOURCE-TYPE", "resource_type" }, { "NAME", "resource_name" }, { "PATTERN", "pattern_type" },
  { "PRINCIPAL", "principal" }, { "HOST", "host" }, { "OPERATION", "operation" }, { "PERMISSION", "permission_type" } }

-- kafka-acls.sh's operation names (DescribeConfigs) or Java's (DESCRIBE_CONFIGS)
local function op_name(s) return (s:gsub("(%l)(%u)", "%1_%2"):upper()) end

-- resources(o) -> {{resource_type=, resource_name=}...} of the resource flags
local function resources(o)
  local out = {}
  for _, t in ipairs(o.topic or {}) do out[#out + 1] = { resource_type = "TOPIC", resource_name = t } end
  for _, g in ipairs(o.group or {}) do out[#out + 1] = { resource_type = "GROUP", resource_name = g } end
  for _, x in ipairs(o.transactional_id or {}) do out[#out + 1] = { resource_type = "TRANSACTIONAL_ID", resource_name = x } end
  if o.cluster then out[#out + 1] = { resource_type = "CLUSTER", resource_name = "kafka-cluster" } end
  return out
end

-- entries(o) -> {{principal=, host=, permission_type=}...} of the principal and host flags
local function entries(o)
  local out = {}
  for _, side in ipairs { { "allow_principal", "allow_host", "ALLOW" }, { "deny_principal", "deny_host", "DENY" } } do
    for _, p in ipairs(o[side[1]] or {}) do
      for _, h in ipairs(o[side[2]] or { "*" }) do out[#out + 1] = { principal = p, host = h, permission_type = side[3] } end
    end
  end
  return out
end

local function acls(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "list", "create", "delete" }, "acls")
  no_more(pos, "acls " .. act)
  local admin = ctx:admin()
  local res = resources(o)
  local pattern = o.resource_pattern_type
  if act == "list" then
    local filters = #res > 0 and res or { {} }
    local rows = {}
    for _, r in ipairs(filters) do
      local list = ctx:check("acls list", call("acls list", admin.describe_acls, admin, { resource_type = r.resource_type,
        resource_name = r.resource_name, pattern_type = pattern, principal = o.principal }))
      for _, b in ipairs(list) do rows[#rows + 1] = b end
    end
    ctx:table(ACL_COLUMNS, rows)
    return
  end
  if #res == 0 then C.usage("acls " .. act .. " needs a resource: --topic, --group, --transactional-id or --cluster") end
  local ents = entries(o)
  if act == "create" then
    if #ents == 0 then C.usage("acls create needs --allow-principal or --deny-principal") end
    if not o.operation then C.usage("acls create needs --operation") end
    local bindings = {}
    for _, r in ipairs(res) do
      for _, e in ipairs(ents) do
        for _, op in ipairs(o.operation) do
          bindings[#bindings + 1] = { resource_type = r.resource_type, resource_name = r.resource_name,
            pattern_type = pattern, principal = e.principal, host = e.host, operation = op_name(op),
            permission_type = e.permission_type }
        end
      end
    end
    local out = ctx:check("acls create", call("acls create", admin.create_acls, admin, bindings))
    local rows = {}
    for _, b in ipairs(out) do
      if b.error then
        ctx:item_error(("acls create %s %s %s %s %s: %s"):format(b.resource_type, b.resource_name, b.principal,
          b.operation, b.permission_type, b.error))
      else
        b.error_code = nil
        rows[#rows + 1] = b
      end
    end
    ctx:table(ACL_COLUMNS, rows)
    return
  end
  -- delete: each resource with each entry and operation given (none given: any)
  local filters = {}
  if #ents == 0 then ents = { {} } end
  for _, r in ipairs(res) do
    for _, e in ipairs(ents) do
      for _, op in ipairs(o.operation or { "ANY" }) do
        filters[#filters + 1] = { resource_type = r.resource_type, resource_name = r.resource_name,
          pattern_type = pattern or "LITERAL", principal = e.principal, host = e.host,
          permission_type = e.permission_type, operation = op_name(op) }
      end
    end
  end
  local out = ctx:check("acls delete", call("acls delete", admin.delete_acls, admin, filters))
  local rows = {}
  for _, f in ipairs(out) do
    if f.error then ctx:item_error(("acls delete %s %s: %s"):format(f.filter.resource_type, f.filter.resource_name, f.error)) end
    for _, b in ipairs(f.matching_acls or {}) do
      if b.error then
        ctx:item_error(("acls delete %s %s %s %s: %s"):format(b.resource_type, b.resource_name, b.principal, b.operation, b.error))
      else
        b.error_code = nil
        rows[#rows + 1] = b
      end
    end
  end
  ctx:table(ACL_COLUMNS, rows)
end

---------------------------------------------------------------- users (SCRAM)

local USERS = {
  { nil, "--mechanism", arg = "MECH", doc = "set/delete: SCRAM-SHA-256 or SCRAM-SHA-512" },
  { nil, "--password", arg = "PASSWORD", doc = "set: the password (else the first line of stdin: not in ps' output)" },
  { nil, "--iterations", arg = "N", doc = "set: the iteration count (default 4096, at most 16384)" },
}

local function users(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "describe", "set", "delete" }, "users")
  local admin = ctx:admin()
  if act == "describe" then
    local want = #pos > 0 and pos or nil
    local out = ctx:check("users describe", admin:describe_user_scram_credentials(want))
    local rows = {}
    for _, u in ipairs(out) do
      if u.error then ctx:item_error(("users describe %s: %s"):format(u.user, u.error))
      else
        for _, c in ipairs(u.credentials) do
          rows[#rows + 1] = { user = u.user, mechanism = c.mechanism, iterations = c.iterations }
        end
      end
    end
    ctx:table({ { "USER", "user" }, { "MECHANISM", "mechanism" }, { "ITERATIONS", "iterations" } }, rows)
    return
  end
  if #pos == 0 then C.usage("users " .. act .. " needs a user name") end
  if not o.mechanism then C.usage("users " .. act .. " needs --mechanism SCRAM-SHA-256|SCRAM-SHA-512") end
  local alts = {}
  if act == "set" then
    local pw = o.password
    if pw == nil then
      pw = ctx.stdin:read("*l")
      if pw == nil or pw == "" then C.usage("users set: no --password and no password on stdin") end
    end
    local it = o.iterations and C.int("users set: --iterations", o.iterations, 4096, 16384)
    for i, u in ipairs(pos) do alts[i] = { user = u, mechanism = o.mechanism, password = pw, iterations = it } end
  else
    for i, u in ipairs(pos) do alts[i] = { user = u, mechanism = o.mechanism, delete = true } end
  end
  local out = ctx:check("users " .. act, call("users " .. act, admin.alter_user_scram_credentials, admin, alts))
  for _, r in ipairs(out) do
    if r.error then ctx:item_error(("users %s %s: %s"):format(act, r.user, r.error))
    else
      ctx:emit({ user = r.user, mechanism = r.mechanism, [act == "set" and "set" or "deleted"] = true },
        ("%s %s credentials of %s"):format(act == "set" and "set" or "deleted", r.mechanism, r.user))
    end
  end
end

---------------------------------------------------------------- quotas

local QUOTAS = {
  { nil, "--user", arg = "USER", doc = "the user entity" },
  { nil, "--user-defaults", doc = "the default user entity" },
  { nil, "--client-id", arg = "ID", doc = "the client-id entity" },
  { nil, "--client-defaults", doc = "the default client-id entity" },
  { nil, "--ip", arg = "IP", doc = "the ip entity" },
  { nil, "--set", arg = "KEY=VALUE", multi = true, doc = "alter: set a quota, e.g. producer_byte_rate=1048576 (repeatable)" },
  { nil, "--delete", arg = "KEY", multi = true, doc = "alter: remove a quota (repeatable)" },
}

local function quotas(ctx, o, pos)
  local C = cli()
  local act = action(pos, { "describe", "alter" }, "quotas")
  no_more(pos, "quotas " .. act)
  local admin = ctx:admin()
  if o.user and o.user_defaults then C.usage("quotas: --user and --user-defaults exclude each other") end
  if o.client_id and o.client_defaults then C.usage("quotas: --client-id and --client-defaults exclude each other") end
  local ent = {}
  if o.user or o.user_defaults then ent[#ent + 1] = { entity_type = "user", entity_name = o.user or nil } end
  if o.client_id or o.client_defaults then ent[#ent + 1] = { entity_type = "client-id", entity_name = o.client_id or nil } end
  if o.ip then ent[#ent + 1] = { entity_type = "ip", entity_name = o.ip } end
  if act == "describe" then
    local comps = {}
    for i, e in ipairs(ent) do
      comps[i] = { entity_type = e.entity_type, match_type = e.entity_name and "exact" or "default", match = e.entity_name }
    end
    local out = ctx:check("quotas describe", admin:describe_client_quotas { components = comps })
    local rows = {}
    for _, e in ipairs(out) do
      local parts = {}
      for i, x in ipairs(e.entity) do parts[i] = x.entity_type .. "=" .. (x.entity_name or "<default>") end
      local keys = {}
      for k in pairs(e.values) do keys[#keys + 1] = k end
      table.sort(keys)
      for _, k in ipairs(keys) do rows[#rows + 1] = { entity = table.concat(parts, ","), key = k, value = e.values[k] } end
    end
    ctx:table({ { "ENTITY", "entity" }, { "QUOTA", "key" }, { "VALUE", "value" } }, rows)
    return
  end
  if #ent == 0 then C.usage("quotas alter needs an entity: --user, --user-defaults, --client-id, --client-defaults, --ip") end
  local ops = {}
  for _, kv in ipairs(o.set or {}) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if not k or not tonumber(v) then C.usage(("quotas alter: --set takes key=number (got %q)"):format(kv)) end
    ops[#ops + 1] = { key = k, value = tonumber(v) }
  end
  for _, k in ipairs(o.delete or {}) do ops[#ops + 1] = { key = k, remove = true } end
  if #ops == 0 then C.usage("quotas alter needs --set or --delete") end
  local out = ctx:check("quotas alter", admin:alter_client_quotas { { entity = ent, ops = ops } })
  local parts = {}
  for i, x in ipairs(out[1].entity) do parts[i] = x.entity_type .. "=" .. (x.entity_name or "<default>") end
  local name = table.concat(parts, ",")
  if out[1].error then ctx:item_error(("quotas alter %s: %s"):format(name, out[1].error))
  else ctx:emit({ entity = name, altered = true }, "altered the quotas of " .. name) end
end

_M.commands = {
  { name = "acls", summary = "list, create or delete ACLs (kafka-acls.sh's flags)", options = ACLS, run = acls,
    usage = "acls list [RESOURCE...] [--resource-pattern-type T] [--principal P] | create|delete RESOURCE... "
      .. "(--allow-principal P | --deny-principal P)... [--allow-host H]... [--deny-host H]... --operation OP... "
      .. "[--resource-pattern-type T]   (RESOURCE: --topic T, --group G, --transactional-id ID, --cluster)" },
  { name = "users", summary = "describe, set or delete users' SCRAM credentials", options = USERS, run = users,
    usage = "users describe [USER...] | set USER... --mechanism M [--password P] [--iterations N] | "
      .. "delete USER... --mechanism M" },
  { name = "quotas", summary = "describe or alter client quotas", options = QUOTAS, run = quotas,
    usage = "quotas describe [ENTITY] | alter ENTITY [--set KEY=VALUE]... [--delete KEY]...   (ENTITY: --user U | "
      .. "--user-defaults, --client-id C | --client-defaults, --ip IP)" },
}

return _M
