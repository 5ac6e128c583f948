-- kafka.admin's security calls: ACLs (CreateAcls, DescribeAcls,
-- DeleteAcls, each to any broker, as Java's AdminClient sends them to the
-- least loaded node; the broker forwards them to the controller) and SCRAM
-- credentials (DescribeUserScramCredentials to any broker,
-- AlterUserScramCredentials to the controller, the salted password
-- computed here as Java's ScramFormatter does) and client quotas
-- (DescribeClientQuotas, AlterClientQuotas, to any broker). Enums are Java's names
-- (AclBinding's ResourceType, PatternType, AclOperation,
-- AclPermissionType), taken in any case, given back in upper case.
-- Installed into kafka.admin.
local proto = require "kafka.proto"
local check = require "kafka.check"
local client_mod = require "kafka.client"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local crypto = proto.crypto
local type, ipairs, tostring, math = type, ipairs, tostring, math
local string, table = string, table

local _M = {}

local function timeout_of(self, o) return o.timeout_ms or self.client.default_api_timeout_ms end

-- Java's enums by code (org.apache.kafka.common.resource / acl)
local RESOURCE_TYPE = { [0] = "UNKNOWN", "ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER" }
local PATTERN_TYPE = { [0] = "UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED" }
local OPERATION = { [0] = "UNKNOWN", "ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
  "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS",
  "TWO_PHASE_COMMIT" }
local PERMISSION = { [0] = "UNKNOWN", "ANY", "DENY", "ALLOW" }

local function codes(names)
  local t = {}
  for code = 0, #names do t[names[code]] = code end
  return t
end
local RT, PT, OP, PERM = codes(RESOURCE_TYPE), codes(PATTERN_TYPE), codes(OPERATION), codes(PERMISSION)

-- enum(where, arg, v, default, codes_by_name, allowed) -> the code of a
-- Java enum name (any case) among the allowed ones; misuse raises
local function enum(where, arg, v, default, by_name, allowed)
  if v == nil then v = default end
  local name = type(v) == "string" and v:upper() or nil
  local ok = false
  for _, a in ipairs(allowed) do if a == name then ok = true end end
  if not ok then
    check.fail(where, arg, "one of " .. table.concat(allowed, ", "), v)
  end
  return by_name[name]
end

local CONCRETE_TYPES = { "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER" }
local CONCRETE_OPS = { "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
  "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS", "TWO_PHASE_COMMIT" }

local function with_any(list)
  local t = { "ANY" }
  for _, x in ipairs(list) do t[#t + 1] = x end
  return t
end

-- binding(where, arg, b) -> the CreateAcls creation of an AclBinding table
local function binding(where, arg, b)
  if type(b) ~= "table" then check.fail(where, arg, "a table {resource_type=, resource_name=, principal=, ...}", b) end
  local c = {
    resource_type = enum(where, arg .. ".resource_type", b.resource_type, nil, RT, CONCRETE_TYPES),
    resource_pattern_type = enum(where, arg .. ".pattern_type", b.pattern_type, "LITERAL", PT, { "LITERAL", "PREFIXED" }),
    operation = enum(where, arg .. ".operation", b.operation, nil, OP, CONCRETE_OPS),
    permission_type = enum(where, arg .. ".permission_type", b.permission_type, nil, PERM, { "ALLOW", "DENY" }),
  }
  for _, f in ipairs { "resource_name", "principal" } do
    if type(b[f]) ~= "string" or b[f] == "" then check.fail(where, arg .. "." .. f, "a non-empty string", b[f]) end
  end
  check.typed(where, arg .. ".host", b.host, nil, "string")
  c.resource_name, c.principal, c.host = b.resource_name, b.principal, b.host or "*"
  return c
end

-- filter(where, arg, f) -> the DescribeAcls/DeleteAcls filter of an
-- AclBindingFilter table: every field optional, nil matching any
local function filter(where, arg, f)
  if f == nil then f = {} end
  if type(f) ~= "table" then check.fail(where, arg, "a filter table {resource_type=, resource_name=, ...}", f) end
  for _, k in ipairs { "resource_name", "principal", "host" } do check.typed(where, arg .. "." .. k, f[k], nil, "string") end
  return {
    resource_type_filter = enum(where, arg .. ".resource_type", f.resource_type, "ANY", RT, with_any(CONCRETE_TYPES)),
    resource_name_filter = f.resource_name,
    pattern_type_filter = enum(where, arg .. ".pattern_type", f.pattern_type, "ANY", PT,
      { "ANY", "MATCH", "LITERAL", "PREFIXED" }),
    principal_filter = f.principal,
    host_filter = f.host,
    operation = enum(where, arg .. ".operation", f.operation, "ANY", OP, with_any(CONCRETE_OPS)),
    permission_type = enum(where, arg .. ".permission_type", f.permission_type, "ANY", PERM, { "ANY", "ALLOW", "DENY" }),
  }
end

-- named(x, pattern_field) -> a binding table with Java's enum names
local function named(rtype, rname, ptype, a)
  return { resource_type = RESOURCE_TYPE[rtype] or "UNKNOWN", resource_name = rname,
    pattern_type = PATTERN_TYPE[ptype or 3] or "UNKNOWN", principal = a.principal, host = a.host,
    operation = OPERATION[a.operation] or "UNKNOWN", permission_type = PERMISSION[a.permission_type] or "UNKNOWN" }
end

local ORDER = { "resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type" }

-- sort_bindings(list): by every field in AclBinding's order
local function sort_bindings(list)
  table.sort(list, function(a, b)
    for _, k in ipairs(ORDER) do
      if a[k] ~= b[k] then return tostring(a[k]) < tostring(b[k]) end
    end
    return false
  end)
  return list
end

-- any_call(self, api, min, results, build, handle, o): one batch to any
-- broker; build(pending) -> the body, handle(resp, pending, retry)
local function any_call(self, api, min, results, build, handle, o)
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local c, err, code = client:any_broker(deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, api, min)
    if not v then return nil, err, code end
    local resp
    resp, err, code = B.request(c, api, build(pending, v), v, deadline)
    if not resp then return nil, err, code end
    local retry = {}
    handle(resp, pending, retry)
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

--- Creates ACLs (CreateAcls, v1+: Kafka 2.0+, to any broker).
-- @tparam table bindings `{{resource_type=, resource_name=, pattern_type=, principal=, host=, operation=,
-- permission_type=}...}`: resource_type "TOPIC", "GROUP", "CLUSTER" (name "kafka-cluster"),
-- "TRANSACTIONAL_ID", "DELEGATION_TOKEN" or "USER"; pattern_type "LITERAL" (default) or "PREFIXED";
-- principal "User:alice"; host default "*"; operation "READ", "WRITE", "DESCRIBE", "ALL", ...;
-- permission_type "ALLOW" or "DENY" (any case)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table one result per binding: the binding with Java's names plus `error_code=, error=, code=`
function _M:create_acls(bindings, opts)
  local where = "create_acls"
  local o = B.opts(where, opts)
  if type(bindings) ~= "table" then check.fail(where, "bindings", "an array of binding tables", bindings) end
  local results, creation = {}, {}
  for i, b in ipairs(bindings) do
    local c = binding(where, "bindings[" .. i .. "]", b)
    results[i] = named(c.resource_type, c.resource_name, c.resource_pattern_type, c)
    creation[results[i]] = c
  end
  return any_call(self, API.CreateAcls, 1, results, function(pending)
    local list = {}
    for i, r in ipairs(pending) do list[i] = creation[r] end
    return { creations = list }
  end, function(resp, pending, retry)
    local list = resp.results or {}
    for i, r in ipairs(pending) do
      local x = list[i]
      if x then B.settle(r, x.error_code, x.error_message, retry)
      else B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
    end
  end, o)
end

--- Lists the ACLs a filter matches (DescribeAcls, v1+, to any broker).
-- @tparam[opt] table f an AclBindingFilter: `{resource_type=, resource_name=, pattern_type=, principal=, host=,
-- operation=, permission_type=}`, each optional (nil: any); pattern_type "ANY" (default), "MATCH" (the
-- ACLs that apply to the named resource: literal, wildcard and prefixed), "LITERAL" or "PREFIXED"
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table the bindings `{{resource_type=, resource_name=, pattern_type=, principal=, host=, operation=,
-- permission_type=}...}`, sorted by those fields, or nil, err, code (e.g. SECURITY_DISABLED: no authorizer)
function _M:describe_acls(f, opts)
  local where = "describe_acls"
  local o = B.opts(where, opts)
  local body = filter(where, "filter", f)
  local client = self.client
  return client:call(function(deadline)
    local c, err, code = client:any_broker(deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, API.DescribeAcls, 1)
    if not v then return nil, err, code end
    local resp
    resp, err, code = B.request(c, API.DescribeAcls, body, v, deadline)
    if not resp then return nil, err, code end
    if resp.error_code ~= errors.NONE then
      local e = errors.info(resp.error_code)
      return nil, ("DescribeAcls: %s: %s"):format(e.name, resp.error_message or e.message),
        e.retriable and "retriable" or "kafka", e.code, e.retriable
    end
    local out = {}
    for _, r in ipairs(resp.resources or {}) do
      for _, a in ipairs(r.acls or {}) do
        out[#out + 1] = named(r.resource_type, r.resource_name, r.pattern_type, a)
      end
    end
    return sort_bindings(out)
  end, { timeout_ms = timeout_of(self, o) })
end

--- Deletes the ACLs filters match (DeleteAcls, v1+, to any broker).
-- @tparam table filters `{filter...}` as describe_acls takes them (an empty filter matches every ACL)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table one result per filter: `{filter = the filter given, matching_acls = {{binding fields...,
-- error_code=, error=, code=}...} (sorted), error_code=, error=, code=}`
function _M:delete_acls(filters, opts)
  local where = "delete_acls"
  local o = B.opts(where, opts)
  if type(filters) ~= "table" then check.fail(where, "filters", "an array of filter tables", filters) end
  local results, bodies = {}, {}
  for i, f in ipairs(filters) do
    bodies[i] = filter(where, "filters[" .. i .. "]", f)
    results[i] = { filter = f }
  end
  local pos = {}
  for i, r in ipairs(results) do pos[r] = i end
  return any_call(self, API.DeleteAcls, 1, results, function(pending)
    local list = {}
    for i, r in ipairs(pending) do list[i] = bodies[pos[r]] end
    return { filters = list }
  end, function(resp, pending, retry)
    local list = resp.filter_results or {}
    for i, r in ipairs(pending) do
      local x = list[i]
      if not x then
        B.fail(r, nil, "the broker's answer did not mention it", "protocol")
      else
        B.settle(r, x.error_code, x.error_message, retry)
        if x.error_code == errors.NONE then
          local m = {}
          for j, a in ipairs(x.matching_acls or {}) do
            m[j] = named(a.resource_type, a.resource_name, a.pattern_type, a)
            if a.error_code == errors.NONE then B.ok(m[j]) else B.fail(m[j], a.error_code, a.error_message) end
          end
          r.matching_acls = sort_bindings(m)
        end
      end
    end
  end, o)
end

---------------------------------------------------------------- SCRAM

-- Mechanisms by ScramMechanism code, and their digests
local MECHANISM = { [1] = "SCRAM-SHA-256", [2] = "SCRAM-SHA-512" }
local MECH_CODE = { ["SCRAM-SHA-256"] = 1, ["SCRAM-SHA-512"] = 2 }
local DIGEST = { ["SCRAM-SHA-256"] = "sha256", ["SCRAM-SHA-512"] = "sha512" }
local MIN_ITERATIONS = { ["SCRAM-SHA-256"] = 4096, ["SCRAM-SHA-512"] = 4096 }

-- salt() -> a fresh salt as Java's ScramFormatter makes it: the bytes of a
-- random 130-bit number written in base 36
local function salt()
  local r = crypto.random_bytes(17)
  -- 130 bits: the top 6 bits of the first byte cleared
  local digits = { r:byte(1, -1) }
  digits[1] = digits[1] % 4
  local out = {}
  -- repeated division of the big-endian base-256 number by 36
  while true do
    local rem, nonzero = 0, false
    for i = 1, #digits do
      local cur = rem * 256 + digits[i]
      digits[i] = math.floor(cur / 36)
      rem = cur % 36
      if digits[i] ~= 0 then nonzero = true end
    end
    out[#out + 1] = ("0123456789abcdefghijklmnopqrstuvwxyz"):sub(rem + 1, rem + 1)
    if not nonzero then break end
  end
  return string.reverse(table.concat(out))
end

--- The users' SCRAM credentials (DescribeUserScramCredentials, to any broker; Kafka 2.7+).
-- @tparam[opt] {string,...} users user names (nil: every user with credentials)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{user=, credentials = {{mechanism = "SCRAM-SHA-256"|"SCRAM-SHA-512", iterations=}...},
-- error_code=, error=, code=}...}`: one per user asked for, in that order (RESOURCE_NOT_FOUND for a user
-- without credentials), or every user sorted by name when users is nil; or nil, err, code
function _M:describe_user_scram_credentials(users, opts)
  local where = "describe_user_scram_credentials"
  local o = B.opts(where, opts)
  if users ~= nil then B.names(where, "users", users) end
  local client = self.client
  return client:call(function(deadline)
    local c, err, code = client:any_broker(deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, API.DescribeUserScramCredentials)
    if not v then return nil, err, code end
    local req
    if users then
      req = {}
      for i, u in ipairs(users) do req[i] = { name = u } end
    end
    local resp
    resp, err, code = B.request(c, API.DescribeUserScramCredentials, { users = req }, v, deadline)
    if not resp then return nil, err, code end
    if resp.error_code ~= errors.NONE then
      local e = errors.info(resp.error_code)
      return nil, ("DescribeUserScramCredentials: %s: %s"):format(e.name, resp.error_message or e.message),
        e.retriable and "retriable" or "kafka", e.code, e.retriable
    end
    local by, all = {}, {}
    for _, x in ipairs(resp.results or {}) do
      local r = { user = x.user }
      if x.error_code == errors.NONE then
        B.ok(r)
        r.credentials = {}
        for j, ci in ipairs(x.credential_infos or {}) do
          r.credentials[j] = { mechanism = MECHANISM[ci.mechanism] or "UNKNOWN", iterations = ci.iterations }
        end
        table.sort(r.credentials, function(a, b) return a.mechanism < b.mechanism end)
      else
        B.fail(r, x.error_code, x.error_message)
      end
      by[x.user] = r
      all[#all + 1] = r
    end
    if not users then
      table.sort(all, function(a, b) return a.user < b.user end)
      return all
    end
    local out = {}
    for i, u in ipairs(users) do
      out[i] = by[u] or B.fail({ user = u }, nil, "the broker's answer did not mention it", "protocol")
    end
    return out
  end, { timeout_ms = timeout_of(self, o) })
end

--- Adds, replaces or deletes users' SCRAM credentials (AlterUserScramCredentials, to the controller;
-- Kafka 2.7+). The salted password is computed here, as Java's AdminClient does: the password never
-- travels.
-- @tparam table alterations `{{user=, mechanism = "SCRAM-SHA-256"|"SCRAM-SHA-512", password=, iterations=}...}`
-- (an upsertion; iterations default 4096) or `{user=, mechanism=, delete = true}` (a deletion)
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table one result per alteration: `{user=, mechanism=, error_code=, error=, code=}`
function _M:alter_user_scram_credentials(alterations, opts)
  local where = "alter_user_scram_credentials"
  local o = B.opts(where, opts)
  if type(alterations) ~= "table" then check.fail(where, "alterations", "an array of tables", alterations) end
  local results, body = {}, {}
  for i, a in ipairs(alterations) do
    local arg = "alterations[" .. i .. "]"
    if type(a) ~= "table" then check.fail(where, arg, "a {user=, mechanism=, ...} table", a) end
    if type(a.user) ~= "string" or a.user == "" then check.fail(where, arg .. ".user", "a non-empty string", a.user) end
    check.oneof(where, arg .. ".mechanism", a.mechanism, nil, { "SCRAM-SHA-256", "SCRAM-SHA-512" })
    if a.mechanism == nil then check.fail(where, arg .. ".mechanism", '"SCRAM-SHA-256" or "SCRAM-SHA-512"', nil) end
    check.bool(where, arg .. ".delete", a.delete, false)
    local b = { name = a.user, mechanism = MECH_CODE[a.mechanism] }
    if a.delete then
      if a.password ~= nil then check.fail(where, arg .. ".password", "nil with delete = true", a.password) end
      b.delete = true
    else
      if type(a.password) ~= "string" or a.password == "" then
        check.fail(where, arg .. ".password", "a non-empty string", a.password)
      end
      b.iterations = check.int(where, arg .. ".iterations", a.iterations, 4096, MIN_ITERATIONS[a.mechanism], 16384)
      b.salt = salt()
      b.salted_password = crypto.pbkdf2(DIGEST[a.mechanism], a.password, b.salt, b.iterations)
    end
    results[i] = { user = a.user, mechanism = a.mechanism }
    body[results[i]] = b
  end
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local c, err, code = B.controller(client, deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, API.AlterUserScramCredentials)
    if not v then return nil, err, code end
    -- the broker refuses a user named twice in one request (DUPLICATE_RESOURCE):
    -- a user's second alteration goes in a second request, and so on
    local rounds, seen = {}, {}
    for _, r in ipairs(pending) do
      local n = (seen[r.user] or 0) + 1
      seen[r.user] = n
      rounds[n] = rounds[n] or {}
      table.insert(rounds[n], r)
    end
    local retry, answered = {}, false
    for _, round in ipairs(rounds) do
      local del, ups = {}, {}
      for _, r in ipairs(round) do
        local b = body[r]
        if b.delete then del[#del + 1] = { name = b.name, mechanism = b.mechanism }
        else ups[#ups + 1] = { name = b.name, mechanism = b.mechanism, iterations = b.iterations, salt = b.salt,
          salted_password = b.salted_password } end
      end
      local resp
      resp, err, code = B.request(c, API.AlterUserScramCredentials, { deletions = del, upsertions = ups }, v, deadline)
      if not resp then
        if not answered then return nil, err, code end
        for _, r in ipairs(round) do
          B.fail(r, nil, err, code)
          if client_mod.RETRIABLE[code] then retry[#retry + 1] = r end
        end
      else
        answered = true
        local by = {}
        for _, x in ipairs(resp.results or {}) do by[x.user] = x end
        for _, r in ipairs(round) do
          local x = by[r.user]
          if x then
            B.settle(r, x.error_code, x.error_message, retry, { [errors.NOT_CONTROLLER] = true })
            if x.error_code == errors.NOT_CONTROLLER then client.controller_id = nil end
          else
            B.fail(r, nil, "the broker's answer did not mention it", "protocol")
          end
        end
      end
    end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

---------------------------------------------------------------- quotas

-- entity(where, arg, e) -> the protocol's entity list of a quota entity
-- `{{entity_type=, entity_name=}...}` (entity_name nil: the default entity)
local function quota_entity(where, arg, e)
  if type(e) ~= "table" or #e == 0 then check.fail(where, arg, "an array of {entity_type=, entity_name=} tables", e) end
  local out, seen = {}, {}
  for i, x in ipairs(e) do
    local a = arg .. "[" .. i .. "]"
    if type(x) ~= "table" or type(x.entity_type) ~= "string" then check.fail(where, a, "a {entity_type=, entity_name=} table", x) end
    check.typed(where, a .. ".entity_name", x.entity_name, nil, "string")
    if seen[x.entity_type] then check.fail(where, a .. ".entity_type", "a type not listed before", x.entity_type) end
    seen[x.entity_type] = true
    out[i] = { entity_type = x.entity_type, entity_name = x.entity_name }
  end
  return out
end

local function sort_entity(list)
  table.sort(list, function(a, b) return a.entity_type < b.entity_type end)
  return list
end

-- entity_key(list) -> a text naming an entity, for matching answers to requests
local function entity_key(list)
  local parts = {}
  for i, x in ipairs(list) do parts[i] = x.entity_type .. "=" .. (x.entity_name and ("[" .. x.entity_name .. "]") or "<default>") end
  table.sort(parts)
  return table.concat(parts, ",")
end

local MATCH_TYPE = { exact = 0, default = 1, specified = 2 }

--- The client quotas a filter matches (DescribeClientQuotas, to any broker; Kafka 2.6+).
-- @tparam[opt] table qf the filter, `{components = {{entity_type=, match_type = "exact"|"default"|"specified", match=}...},
-- strict=}` as Java's ClientQuotaFilter: "exact" the entity named match, "default" the default entity,
-- "specified" any named entity; strict: only entities with no other component
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{entity = {{entity_type=, entity_name=}...}, values = {[key] = number}}...}`, entity parts by
-- type (entity_name nil for a default entity), entries sorted by entity; or nil, err, code
function _M:describe_client_quotas(qf, opts)
  local where = "describe_client_quotas"
  local o = B.opts(where, opts)
  if qf == nil then qf = {} end
  if type(qf) ~= "table" then check.fail(where, "filter", "a {components=, strict=} table", qf) end
  check.bool(where, "filter.strict", qf.strict, false)
  local comps = {}
  for i, c in ipairs(qf.components or {}) do
    local a = "filter.components[" .. i .. "]"
    if type(c) ~= "table" or type(c.entity_type) ~= "string" then check.fail(where, a, "a {entity_type=, match_type=, match=} table", c) end
    check.oneof(where, a .. ".match_type", c.match_type, nil, { "exact", "default", "specified" })
    local mt = MATCH_TYPE[c.match_type or (c.match ~= nil and "exact" or "specified")]
    if mt == 0 and type(c.match) ~= "string" then check.fail(where, a .. ".match", "a string", c.match) end
    comps[i] = { entity_type = c.entity_type, match_type = mt, match = mt == 0 and c.match or nil }
  end
  local client = self.client
  return client:call(function(deadline)
    local c, err, code = client:any_broker(deadline)
    if not c then return nil, err, code end
    local v
    v, err, code = B.version(c, API.DescribeClientQuotas)
    if not v then return nil, err, code end
    local resp
    resp, err, code = B.request(c, API.DescribeClientQuotas, { components = comps, strict = qf.strict or false }, v, deadline)
    if not resp then return nil, err, code end
    if resp.error_code ~= errors.NONE then
      local e = errors.info(resp.error_code)
      return nil, ("DescribeClientQuotas: %s: %s"):format(e.name, resp.error_message or e.message),
        e.retriable and "retriable" or "kafka", e.code, e.retriable
    end
    local out = {}
    for i, x in ipairs(resp.entries or {}) do
      local ent, vals = {}, {}
      for j, en in ipairs(x.entity or {}) do ent[j] = { entity_type = en.entity_type, entity_name = en.entity_name } end
      for _, kv in ipairs(x.values or {}) do vals[kv.key] = kv.value end
      out[i] = { entity = sort_entity(ent), values = vals }
    end
    table.sort(out, function(a, b) return entity_key(a.entity) < entity_key(b.entity) end)
    return out
  end, { timeout_ms = timeout_of(self, o) })
end

--- Sets and removes client quotas (AlterClientQuotas, to any broker; Kafka 2.6+).
-- @tparam table entries `{{entity = {{entity_type = "user"|"client-id"|"ip", entity_name=}...},
-- ops = {{key=, value=}|{key=, remove = true}...}}...}` (entity_name nil: the default entity; keys such as
-- "producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
-- @tparam[opt] table opts `validate_only`, `timeout_ms`
-- @treturn table one result per entry: `{entity=, error_code=, error=, code=}`
function _M:alter_client_quotas(entries, opts)
  local where = "alter_client_quotas"
  local o = B.opts(where, opts, { "validate_only" })
  if type(entries) ~= "table" then check.fail(where, "entries", "an array of {entity=, ops=} tables", entries) end
  local results, body, keys = {}, {}, {}
  for i, en in ipairs(entries) do
    local a = "entries[" .. i .. "]"
    if type(en) ~= "table" then check.fail(where, a, "an {entity=, ops=} table", en) end
    local ent = quota_entity(where, a .. ".entity", en.entity)
    if type(en.ops) ~= "table" then check.fail(where, a .. ".ops", "an array of {key=, value=} or {key=, remove = true} tables", en.ops) end
    local ops = {}
    for j, op in ipairs(en.ops) do
      local oa = a .. ".ops[" .. j .. "]"
      if type(op) ~= "table" or type(op.key) ~= "string" then check.fail(where, oa, "a {key=, value=} table", op) end
      check.bool(where, oa .. ".remove", op.remove, false)
      if op.remove then
        if op.value ~= nil then check.fail(where, oa .. ".value", "nil with remove = true", op.value) end
      elseif type(op.value) ~= "number" then
        check.fail(where, oa .. ".value", "a number", op.value)
      end
      ops[j] = { key = op.key, value = op.value or 0, remove = op.remove or false }
    end
    local key = entity_key(ent)
    if keys[key] then check.fail(where, a .. ".entity", "an entity not listed before", key) end
    keys[key] = true
    results[i] = { entity = sort_entity(quota_entity(where, a .. ".entity", en.entity)) }
    body[results[i]] = { entity = ent, ops = ops, key = key }
  end
  return any_call(self, API.AlterClientQuotas, 0, results, function(pending)
    local list = {}
    for i, r in ipairs(pending) do list[i] = { entity = body[r].entity, ops = body[r].ops } end
    return { entries = list, validate_only = o.validate_only or false }
  end, function(resp, pending, retry)
    local by = {}
    for _, x in ipairs(resp.entries or {}) do by[entity_key(x.entity or {})] = x end
    for _, r in ipairs(pending) do
      local x = by[body[r].key]
      if x then B.settle(r, x.error_code, x.error_message, retry)
      else B.fail(r, nil, "the broker's answer did not mention it", "protocol") end
    end
  end, o)
end

return _M
