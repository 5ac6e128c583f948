-- kafka.check: argument and option validation at the door. Misuse raises
-- here, with the caller's name, the option's name and what was expected:
--   kafka.producer.new: acks must be one of -1, 0, 1 (got "all")
-- Every constructor and method that takes user input checks it with these
-- helpers, so nothing wrong reaches the request encoders (where it would
-- raise from deep inside flush, send or poll).
local error, type, tostring, pairs, ipairs = error, type, tostring, pairs, ipairs
local math, table, string = math, table, string

local _M = {}

local LEVEL = 3 -- the caller of the function that calls a check

-- show(v) -> v as it appears in a message: strings quoted
local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end
_M.show = show

local function fail(where, name, expected, got, level)
  error(("%s: %s must be %s (got %s)"):format(where, name, expected, show(got)), level or LEVEL + 1)
end
_M.fail = function(where, name, expected, got) fail(where, name, expected, got) end

local function is_int(v)
  return type(v) == "number" and v == v and v % 1 == 0 and v > -math.huge and v < math.huge
end
_M.is_int = is_int

-- opts(where, t) -> t or {}: an options table or nil
function _M.opts(where, t)
  if t == nil then return {} end
  if type(t) ~= "table" then
    error(("%s: options must be a table (got %s)"):format(where, show(t)), LEVEL)
  end
  return t
end

local function range_text(lo, hi)
  if lo and hi then return ("an integer in %s..%s"):format(tostring(lo), tostring(hi)) end
  if lo then return ("an integer >= %s"):format(tostring(lo)) end
  return "an integer"
end

-- The checks below take the error level last, so check.options (one call
-- deeper) blames the same caller as a direct check does.
local function int(where, name, v, default, lo, hi, level)
  if v == nil then return default end
  if not is_int(v) or (lo and v < lo) or (hi and v > hi) then fail(where, name, range_text(lo, hi), v, level) end
  return v
end

local function oneof_text(list)
  local shown = {}
  for i = 1, #list do shown[i] = type(list[i]) == "string" and show(list[i]) or tostring(list[i]) end
  return "one of " .. table.concat(shown, ", ")
end

local function oneof(where, name, v, default, list, level)
  if v == nil then return default end
  for i = 1, #list do
    if list[i] == v then return v end
  end
  fail(where, name, oneof_text(list), v, level)
end

local function typed(where, name, v, default, types, level)
  if v == nil then return default end
  local tv = type(v)
  for i = 1, #types do
    if tv == types[i] then return v end
  end
  fail(where, name, "a " .. table.concat(types, " or a "), v, level)
end

local function bool(where, name, v, default, level)
  if v == nil then return default end
  if type(v) ~= "boolean" then fail(where, name, "a boolean", v, level) end
  return v
end

-- int(where, name, v, default, lo, hi) -> v (or default when nil)
function _M.int(where, name, v, default, lo, hi)
  local r = int(where, name, v, default, lo, hi, LEVEL + 2) -- not a tail call: that would shift the level
  return r
end

-- oneof(where, name, v, default, list) -> v (or default)
function _M.oneof(where, name, v, default, list)
  local r = oneof(where, name, v, default, list, LEVEL + 2)
  return r
end

-- typed(where, name, v, default, ...types) -> v (or default)
function _M.typed(where, name, v, default, ...)
  local r = typed(where, name, v, default, { ... }, LEVEL + 2)
  return r
end

-- bool(where, name, v, default) -> boolean
function _M.bool(where, name, v, default)
  local r = bool(where, name, v, default, LEVEL + 2)
  return r
end

-- partition(where, name, v) -> v: a partition number (integer 0..2^31-1)
function _M.partition(where, name, v)
  if not is_int(v) or v < 0 or v > 2147483647 then fail(where, name, "an integer partition >= 0", v) end
  return v
end

-- offset(where, name, v, words) -> v: an integer offset >= 0, or one of words
function _M.offset(where, name, v, words)
  if is_int(v) and v >= 0 then return v end
  for i = 1, #(words or {}) do
    if v == words[i] then return v end
  end
  local shown = { "an integer >= 0" }
  for i = 1, #(words or {}) do shown[#shown + 1] = show(words[i]) end
  fail(where, name, table.concat(shown, " or "), v)
end

-- headers(where, name, h): {name = value} or {{key=, value=}...} with string
-- keys and string (or nil) values
function _M.headers(where, name, h)
  if h == nil then return nil end
  if type(h) ~= "table" then fail(where, name, "a table", h) end
  if #h > 0 then
    for i = 1, #h do
      local x = h[i]
      if type(x) ~= "table" then fail(where, ("%s[%d]"):format(name, i), "a {key=, value=} table", x) end
      local k, v = x.key or x[1], x.value or x[2]
      if type(k) ~= "string" then fail(where, ("%s[%d].key"):format(name, i), "a string", k) end
      if v ~= nil and type(v) ~= "string" then fail(where, ("%s[%d].value"):format(name, i), "a string or nil", v) end
    end
  else
    for k, v in pairs(h) do
      if type(k) ~= "string" then fail(where, name .. " key", "a string", k) end
      if type(v) ~= "string" then fail(where, ("%s[%s]"):format(name, show(k)), "a string", v) end
    end
  end
  return h
end

---------------------------------------------------------------- declarations

-- Every module declares its options once, in one list (docs/options.md is
-- generated from these lists by tools/options-doc.lua):
--   { name = "linger_ms", type = "int", default = 5, min = 0, max = nil,
--     kafka = "linger.ms", doc = "one line" }
-- type: "int" (min, max), "bool", "string" (nonempty = true refuses ""),
-- "function", "table", "oneof" (values = {...}), or a list of types.
-- default: a value, or function(values, ctx) -> value computed from the
-- options declared before it (default_doc says it in words for the docs).
-- validate(v, values, ctx) -> value | nil, expected: what the types cannot
-- say (called for a non-nil v after the type check).
-- rules = true: the option is checked (and defaulted) by its module's rule
-- code instead, its messages saying what is missing; the declaration then
-- documents it. Cross-option rules (one option requires another) are code
-- too, after check.options.
local TYPES = { int = true, bool = true, string = true, ["function"] = true, table = true, oneof = true }

-- declare(where, list) -> the list, checked: a bad declaration raises at load
function _M.declare(where, list)
  local seen = {}
  for i, d in ipairs(list) do
    local bad = type(d.name) ~= "string" and "name" or seen[d.name] and "name (twice)"
      or type(d.doc) ~= "string" and "doc"
      or (type(d.type) == "string" and not TYPES[d.type]) and "type"
      or (type(d.type) ~= "string" and type(d.type) ~= "table") and "type"
      or (d.type == "oneof" and type(d.values) ~= "table") and "values"
      or (type(d.default) == "function" and type(d.default_doc) ~= "string") and "default_doc"
    if bad then error(("kafka.check.declare: %s option %d (%s): bad %s"):format(where, i, tostring(d.name), bad), 2) end
    seen[d.name] = true
  end
  list.where = where
  return list
end

local function option(where, d, v, values, ctx, level)
  local default = d.default
  if type(default) == "function" then default = default(values, ctx) end
  local t = d.type
  local r
  if t == "int" then
    r = int(where, d.name, v, default, d.min, d.max, level)
  elseif t == "bool" then
    r = bool(where, d.name, v, default, level)
  elseif t == "oneof" then
    r = oneof(where, d.name, v, default, d.values, level)
  else
    r = typed(where, d.name, v, default, type(t) == "table" and t or { t }, level)
    if t == "string" and d.nonempty and r == "" then fail(where, d.name, "a non-empty string", r, level) end
  end
  if v ~= nil and d.validate then
    local ok, expected = d.validate(r, values, ctx)
    if ok == nil then fail(where, d.name, expected, v, level) end
    r = ok
  end
  return r
end

-- options(decl, opts [, ctx [, depth]]) -> values: every declared option
-- of opts, checked, with its default when absent (defaults and validate
-- get ctx: the client, for options whose default is the client's). Options
-- not declared are left alone: a producer's table also carries its
-- client's. depth: calls between this one and the caller to blame
-- (default 1: the constructor calls check.options itself).
function _M.options(decl, opts, ctx, depth)
  local level = LEVEL + 2 + (depth or 1) -- fail <- check <- option <- here <- (depth calls) <- the caller
  local values = {}
  for _, d in ipairs(decl) do
    if not d.rules then values[d.name] = option(decl.where, d, opts[d.name], values, ctx, level) end
  end
  return values
end

return _M
