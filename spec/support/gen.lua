-- Generates bodies for any (api, version) from the codec's own schema
-- tree, with nulls, empties, long strings and tagged fields present or
-- absent, plus a positional JSON form for kafka-python.
local proto = require "kafka.proto"
local H = require "support.helpers"
local string, table, math = string, table, math
local ipairs, tostring = ipairs, tostring

local _M = {}

local ranges = {
  int8 = { -128, 127 }, int16 = { -32768, 32767 }, uint16 = { 0, 65535 },
  int32 = { -2147483648, 2147483647 }, uint32 = { 0, 4294967295 },
  -- without Lua integers (5.1, LuaJIT) int64 values are doubles, exact to 2^53
  int64 = H.int64 and { H.mininteger, H.maxinteger } or { -2 ^ 53, 2 ^ 53 },
}


local function ascii(r, n)
  local t = {}
  for i = 1, n do t[i] = string.char(97 + r.next() % 26) end
  return table.concat(t)
end

local function gen_int(r, ty)
  local lo, hi = ranges[ty][1], ranges[ty][2]
  local c = r.next() % 6
  if c == 0 then return lo elseif c == 1 then return hi elseif c == 2 then return 0 end
  if c == 3 and lo < 0 then return -1 end
  if ty == "int64" then
    -- (a << 31) ~ b, in arithmetic: 63 bits with integers, 53 without
    local a, b = r.next(), r.next()
    local top = math.floor(a / 2)
    if not H.int64 then top = top % 2097152 end
    return top * 4294967296 + ((a + math.floor(b / 2147483648)) % 2) * 2147483648 + b % 2147483648
  end
  return lo + r.next() % (hi - lo + 1)
end

local gen_struct

-- One scalar or struct value of field f.
local function gen_value(f, v, flex, r, o, depth)
  local ty = f.type
  if ranges[ty] then return gen_int(r, ty) end
  if ty == "bool" then return r.next() % 2 == 0 end
  if ty == "float64" then return (r.next() % 2000 - 1000) / 8 end
  if ty == "uuid" then return r.bytes(16) end
  if ty == "string" then
    local c = r.next() % 5
    if c == 0 then return "" end
    if c == 1 and not o.short then return ascii(r, 200 + r.next() % 300) end
    return o.ascii and ascii(r, r.next() % 12) or r.bytes(r.next() % 12)
  end
  if ty == "bytes" then
    if r.next() % 4 == 0 then return "" end
    return r.bytes(r.next() % 40)
  end
  if ty == "records" then
    return proto.encode_records({ { key = "k" .. r.next() % 10, value = r.bytes(r.next() % 30), timestamp = 1700000000000 } })
  end
  if ty == "struct" then return gen_struct(f.child, v, flex, r, o, depth + 1) end
  error("unknown type " .. ty)
end

local function nullable(f, v) return f.nmin <= v and v <= f.nmax end
local function present(f, v) return f.vmin <= v and v <= f.vmax end
local function tagged(f, v) return f.tmin <= v and v <= f.tmax end

gen_struct = function(s, v, flex, r, o, depth)
  local t = {}
  for _, f in ipairs(s.fields) do
    if present(f, v) and not (tagged(f, v) and (not flex or r.next() % 2 == 0)) then
      local val
      if nullable(f, v) and r.next() % 4 == 0 then
        val = nil
      elseif f.array then
        val = {}
        local n = depth < 4 and r.next() % 3 or 0
        for i = 1, n do val[i] = gen_value(f, v, flex, r, o, depth) end
      else
        val = gen_value(f, v, flex, r, o, depth)
      end
      t[f.name] = val
    end
  end
  return t
end

-- body(api, version, kind, rng, opts) -> a random body table; kind
-- "request", "response" or "data" (api is then a data structure's name)
function _M.body(api, version, kind, r, o)
  local s = proto.schema(api, kind)
  if kind == "data" then
    local flex
    for _, d in ipairs(require("kafka.core").datas()) do
      if d.name == api then flex = d.flexible ~= nil and version >= d.flexible end
    end
    return gen_struct(s, version, flex, r, o or {}, 0), flex
  end
  local _, _, flex_req = proto.versions(api)
  local flex
  if kind == "request" then flex = flex_req ~= nil and version >= flex_req
  else flex = _M.resp_flexible(api, version) end
  return gen_struct(s, version, flex, r, o or {}, 0), flex
end

-- Response flexibility: the first version whose response header is v1
-- equals the request's first flexible version for every api.
function _M.resp_flexible(api, version)
  local _, _, f = proto.versions(api)
  return f ~= nil and version >= f
end

local function hexs(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

local function json_value(f, val, v)
  if val == nil then return "null" end
  local ty = f.type
  if ty == "struct" then return _M.positional(f.child, val, v) end
  if ty == "string" then return '{"t":"' .. hexs(val) .. '"}' end
  if ty == "bytes" or ty == "records" or ty == "uuid" then return '{"b":"' .. hexs(val) .. '"}' end
  if ty == "bool" then return tostring(val) end
  if ty == "float64" then return string.format("%.17g", val) end
  return string.format("%d", val)
end

-- positional(struct, table, version) -> JSON of the values in wire order
function _M.positional(s, t, v)
  local parts = {}
  for _, f in ipairs(s.fields) do
    if present(f, v) and not tagged(f, v) then
      local val = t[f.name]
      if f.array and val ~= nil then
        local items = {}
        for i, x in ipairs(val) do items[i] = json_value(f, x, v) end
        parts[#parts + 1] = "[" .. table.concat(items, ",") .. "]"
      else
        parts[#parts + 1] = json_value(f, val, v)
      end
    end
  end
  return '{"s":[' .. table.concat(parts, ",") .. "]}"
end


return _M
