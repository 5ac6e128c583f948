-- Kafka's own generated message classes as an oracle for the codec
-- (spec/support/kafka/CodecPeer.java, compiled once per process with the
-- kafka-clients jars that spec/support/kafka/harness.sh resolves).
--
--   local cp = require "support.codecpeer"
--   local out = cp.run(cases)        -- one JVM: {[id] = bytes | {err = msg}}
--   local lines = cp.java{"murmur2", "616263"}
--   cp.json(value), cp.base64(s), cp.base64url(s), cp.camel("client_id")
local io, os, string, table, math = io, os, string, table, math
local ipairs, pairs, type, tostring, error, setmetatable, tonumber, pcall =
  ipairs, pairs, type, tostring, error, setmetatable, tonumber, pcall

local _M = {}

_M.KAFKA = "4.4.0" -- the kafka-clients version whose classes are the oracle (its definitions include 4.1.2's)

local rk = require "support.realkafka"

-- java(args) -> lines of stdout (the final DONE removed); raises when the
-- program fails.
function _M.java(args)
  return rk.run_java("CodecPeer", args, { version = _M.KAFKA })
end

local function unhex(h)
  return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

-- run(cases) -> {[id] = bytes or {err = message}}: every case in one JVM.
function _M.run(cases)
  local inf, outf = os.tmpname(), os.tmpname()
  local f = assert(io.open(inf, "wb"))
  f:write('{"cases":[')
  for i, c in ipairs(cases) do
    if i > 1 then f:write(",\n") end
    f:write(_M.json(c))
  end
  f:write("]}\n")
  f:close()
  local ok, err = pcall(_M.java, { inf, outf })
  os.remove(inf)
  if not ok then
    os.remove(outf)
    error(err, 2)
  end
  local res = {}
  f = assert(io.open(outf, "rb"))
  for line in f:lines() do
    local id, rest = line:match("^(%S+) (.*)$")
    if id then
      local msg = rest:match("^ERR (.*)$")
      res[id] = msg and { err = msg } or unhex(rest)
    end
  end
  f:close()
  os.remove(outf)
  return res
end

-- ------------------------------------------------------------- JSON

-- A JSON array: json{...} emits a Lua sequence as an array when it has
-- the ARRAY marker or is empty and marked so; plain tables are objects.
local ARRAY = {}
function _M.array(t) t[ARRAY] = true; return t end
local NULL = setmetatable({}, { __tostring = function() return "null" end })
_M.null = NULL

local function jstr(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

-- A number as JSON: integers exactly (Lua 5.3+ integers up to 2^63,
-- doubles exact up to 2^53), others with 17 digits.
local function jnum(x)
  if math.type and math.type(x) == "integer" then return string.format("%d", x) end
  if x == math.floor(x) and x > -2 ^ 63 and x < 2 ^ 63 then return string.format("%.0f", x) end
  return string.format("%.17g", x)
end
_M.number = jnum

function _M.json(v)
  local t = type(v)
  if v == NULL or v == nil then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then return jnum(v) end
  if t == "string" then return jstr(v) end
  if t == "table" and v.raw_json then return v.raw_json end
  if t == "table" and (v[ARRAY] or v[1] ~= nil) then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = _M.json(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = jstr(k) .. ":" .. _M.json(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64(s, url)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = { math.floor(n / 262144), math.floor(n / 4096) % 64, math.floor(n / 64) % 64, n % 64 }
    local k = c and 4 or b and 3 or 2
    for j = 1, 4 do
      if j <= k then out[#out + 1] = B64:sub(q[j] + 1, q[j] + 1)
      elseif not url then out[#out + 1] = "=" end
    end
  end
  local r = table.concat(out)
  if url then r = r:gsub("%+", "-"):gsub("/", "_") end
  return r
end
function _M.base64(s) return b64(s, false) end
-- base64url without padding: Kafka's Uuid.toString
function _M.base64url(s) return b64(s, true) end

-- camel("client_software_name") -> "clientSoftwareName", the JSON
-- converters' names (lowerCamelCase of the definitions' names).
function _M.camel(name)
  return (name:gsub("_(%w)", function(c) return c:upper() end))
end

return _M
