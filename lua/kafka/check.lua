-- kafka.check: argument and option validation at the door. Misuse raises
-- here, with the caller's name, the option's name and what was expected:
--   kafka.producer.new: acks must be one of -1, 0, 1 (got "all")
-- Every constructor and method that takes user input checks it with these
-- helpers, so nothing wrong reaches the request encoders (where it would
-- raise from deep inside flush, send or poll).
local error, type, tostring, select, pairs = error, type, tostring, select, pairs
local math, table, string = math, table, string

local _M = {}

local LEVEL = 3 -- the caller of the function that calls a check

-- show(v) -> v as it appears in a message: strings quoted
local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end
_M.show = show

local function fail(where, name, expected, got)
  error(("%s: %s must be %s (got %s)"):format(where, name, expected, show(got)), LEVEL + 1)
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

-- int(where, name, v, default, lo, hi) -> v (or default when nil)
function _M.int(where, name, v, default, lo, hi)
  if v == nil then return default end
  if not is_int(v) or (lo and v < lo) or (hi and v > hi) then fail(where, name, range_text(lo, hi), v) end
  return v
end

-- oneof(where, name, v, default, list) -> v (or default)
function _M.oneof(where, name, v, default, list)
  if v == nil then return default end
  for i = 1, #list do
    if list[i] == v then return v end
  end
  local shown = {}
  for i = 1, #list do shown[i] = type(list[i]) == "string" and show(list[i]) or tostring(list[i]) end
  fail(where, name, "one of " .. table.concat(shown, ", "), v)
end

-- typed(where, name, v, default, ...types) -> v (or default)
function _M.typed(where, name, v, default, ...)
  if v == nil then return default end
  local tv = type(v)
  local n = select("#", ...)
  for i = 1, n do
    if tv == select(i, ...) then return v end
  end
  local names = { ... }
  fail(where, name, "a " .. table.concat(names, " or a "), v)
end

-- bool(where, name, v, default) -> boolean
function _M.bool(where, name, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then fail(where, name, "a boolean", v) end
  return v
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

return _M
