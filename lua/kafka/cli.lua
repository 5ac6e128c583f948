--- kafka.cli: the `lua-kafka` command (bin/lua-kafka is a thin wrapper):
-- argument parsing, the client options of -X and -F, output as text tables
-- or JSON lines, exit codes. The subcommands are in kafka.cli.data
-- (produce, consume), kafka.cli.admin (topics, configs, groups,
-- transactions, cluster, metadata) and kafka.cli.security (acls, users,
-- quotas). Guide: docs/cli.md.
--
--   local code = require("kafka.cli").main(arg)            -- the process' streams
--   local code = require("kafka.cli").main(argv, { stdin = r, stdout = w, stderr = w,
--                                                   client = { socket = cluster:socket_factory() } })
-- @module kafka.cli
local options = require "kafka.options"

local type, pairs, ipairs, tostring, tonumber, error, pcall, xpcall, setmetatable, getmetatable =
  type, pairs, ipairs, tostring, tonumber, error, pcall, xpcall, setmetatable, getmetatable
local string, table, io, os, math, debug = string, table, io, os, math, debug

local _M = {}

--- The exit codes (docs/cli.md).
_M.EXIT = { ok = 0, usage = 1, kafka = 2, internal = 3 }
local EXIT = _M.EXIT

local Failure = {}

-- fail(exit, msg): ends the command with one line on stderr and that exit code
local function fail(exit, msg) error(setmetatable({ exit = exit, msg = msg }, Failure), 0) end
_M.fail = fail
function _M.usage(msg) fail(EXIT.usage, msg) end
function _M.kafka(msg) fail(EXIT.kafka, msg) end

-- JSON ---------------------------------------------------------

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t" }

-- one UTF-8 sequence at i of s, or nil: its length
local function utf8_len(s, i)
  local c = s:byte(i)
  local n, min
  if c < 0x80 then return 1
  elseif c >= 0xC2 and c <= 0xDF then n, min = 2, 0x80
  elseif c >= 0xE0 and c <= 0xEF then n, min = 3, 0x800
  elseif c >= 0xF0 and c <= 0xF4 then n, min = 4, 0x10000
  else return nil end
  local cp = c % (2 ^ (7 - n))
  for k = 1, n - 1 do
    local b = s:byte(i + k)
    if not b or b < 0x80 or b > 0xBF then return nil end
    cp = cp * 64 + (b - 0x80)
  end
  if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return nil end
  return n
end

-- json_string(s): valid UTF-8 as it is; a byte that is not part of one is
-- written as \u00XX (that byte read as Latin-1), so any value is valid JSON
local function json_string(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:sub(i, i)
    local b = s:byte(i)
    if ESC[c] then out[#out + 1] = ESC[c]; i = i + 1
    elseif b < 0x20 or b == 0x7F then out[#out + 1] = ("\\u%04x"):format(b); i = i + 1
    else
      local len = utf8_len(s, i)
      if len then out[#out + 1] = s:sub(i, i + len - 1); i = i + len
      else out[#out + 1] = ("\\u%04x"):format(b); i = i + 1 end
    end
  end
  return '"' .. table.concat(out) .. '"'
end

local function is_array(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  for i = 1, n do if t[i] == nil then return false end end
  return true
end

--- Encodes a value as JSON: strings, numbers (integers without a
-- fraction), booleans, nil and cli.null as null, a table without holes
-- from 1 as an array (an empty table: []), else an object with its keys
-- sorted.
function _M.json(v)
  local t = type(v)
  if v == nil or v == _M.null then return "null"
  elseif t == "string" then return json_string(v)
  elseif t == "boolean" then return tostring(v)
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if v == math.floor(v) and v > -2 ^ 63 and v < 2 ^ 63 then return ("%d"):format(v) end
    return ("%.17g"):format(v)
  elseif t == "table" then
    local parts = {}
    if is_array(v) then
      for i = 1, #v do parts[i] = _M.json(v[i]) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    for i, k in ipairs(keys) do
      local x = v[k]
      if x == nil then x = v[tonumber(k)] end
      parts[i] = json_string(k) .. ":" .. _M.json(x)
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  error("kafka.cli.json: cannot encode a " .. t)
end
_M.null = setmetatable({}, { __tostring = function() return "null" end })

-- client options (-X, -F) --------------------------------------

-- every declared option by its name, and by the Kafka name it mirrors:
-- name -> {declarations}
local BY_NAME, BY_KAFKA = {}, {}
for _, list in ipairs(options.ALL) do
  for _, d in ipairs(list) do
    BY_NAME[d.name] = BY_NAME[d.name] or {}
    table.insert(BY_NAME[d.name], { decl = d, list = list })
    if d.kafka then
      BY_KAFKA[d.kafka] = BY_KAFKA[d.kafka] or {}
      table.insert(BY_KAFKA[d.kafka], { decl = d, list = list })
    end
  end
end

local KIND = { [options.CLIENT] = "client", [options.CONSUMER] = "consumer", [options.PRODUCER] = "producer" }

-- convert(where, d, s) -> the option's value from its text
local function convert(where, d, s)
  local t = d.type
  if t == "int" then
    local n = tonumber(s)
    if not n or n ~= math.floor(n) or not s:match("^%s*[-+]?%d+%s*$") then
      fail(EXIT.usage, ("%s: %s must be an integer (got %q)"):format(where, d.name, s))
    end
    return math.floor(n)
  elseif t == "bool" then
    local l = s:lower()
    if l == "true" then return true elseif l == "false" then return false end
    fail(EXIT.usage, ("%s: %s must be true or false (got %q)"):format(where, d.name, s))
  elseif t == "oneof" then
    for _, v in ipairs(d.values) do if tostring(v) == s then return v end end
    if d.name == "acks" and s == "all" then return -1 end
    local vs = {}
    for i, v in ipairs(d.values) do vs[i] = tostring(v) end
    fail(EXIT.usage, ("%s: %s must be one of %s (got %q)"):format(where, d.name, table.concat(vs, ", "), s))
  end
  local types = type(t) == "table" and t or { t }
  for _, x in ipairs(types) do if x == "string" then return s end end
  fail(EXIT.usage, ("%s: %s cannot be set from the command line"):format(where, d.name))
end

-- The username and password of a Java sasl.jaas.config (PlainLoginModule,
-- ScramLoginModule): username="..." password="...".
local function jaas(where, conf, s)
  local u = s:match('username%s*=%s*"([^"]*)"')
  local p = s:match('password%s*=%s*"([^"]*)"')
  if not u or not p then fail(EXIT.usage, where .. ': sasl.jaas.config needs username="..." and password="..."') end
  conf.client.sasl_username, conf.client.sasl_password = u, p
end

--- Sets one option given as key=value text: an option name of
-- kafka.options (client, producer or consumer), or the Kafka property it
-- mirrors (bootstrap.servers, compression.type), or that name with its
-- dots as underscores (security.protocol). Raises a usage failure for an
-- unknown key or a bad value.
-- @tparam table conf `{client = {}, producer = {}, consumer = {}}`
-- @tparam string where "-X" or the file and line
-- @tparam string key the option's name
-- @tparam string value its text
function _M.set_option(conf, where, key, value)
  if key == "sasl.jaas.config" or key == "sasl_jaas_config" then return jaas(where, conf, value) end
  -- Java's PEM trust store is a CA file; JKS and PKCS12 stores are not read
  if key == "ssl.truststore.type" then
    if value:upper() ~= "PEM" then
      fail(EXIT.usage, ("%s: ssl.truststore.type %s is not read: give a PEM CA file (ssl.ca.location)"):format(where, value))
    end
    return
  end
  if key == "ssl.truststore.location" then key = "ssl_ca_location" end
  local found = BY_KAFKA[key] or BY_NAME[key] or BY_NAME[(key:gsub("%.", "_"))]
  if not found then
    fail(EXIT.usage, ("%s: unknown option %q (the names are in docs/options.md)"):format(where, key))
  end
  for _, f in ipairs(found) do
    conf[KIND[f.list]][f.decl.name] = convert(where, f.decl, value)
  end
end

local PROP_ESC = { t = "\t", n = "\n", r = "\r", f = "\f" }

--- Parses a properties file in Java's format (key=value, key: value or
-- key value; # and ! comments; a trailing backslash continues the line;
-- \t \n \r \f \uXXXX escapes) -> `{{key, value, line}...}` in file order.
function _M.parse_properties(text)
  local out, pending, start = {}, nil, nil
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = line:gsub("\r$", "")
    if pending then line = pending .. line:gsub("^%s+", "") else start = n end
    pending = nil
    local bs = #line:match("(\\*)$")
    local stripped = line:gsub("^%s+", "")
    local comment = not pending and (stripped:sub(1, 1) == "#" or stripped:sub(1, 1) == "!")
    if bs % 2 == 1 and not comment then
      pending = line:sub(1, -2)
    elseif stripped ~= "" and not comment then
      local k, v
      local i = 1
      local kb = {}
      while i <= #stripped do
        local c = stripped:sub(i, i)
        if c == "\\" and i < #stripped then kb[#kb + 1] = c .. stripped:sub(i + 1, i + 1); i = i + 2
        elseif c == "=" or c == ":" or c:match("%s") then break
        else kb[#kb + 1] = c; i = i + 1 end
      end
      k = table.concat(kb)
      v = stripped:sub(i):gsub("^%s*", "", 1)
      if v:sub(1, 1) == "=" or v:sub(1, 1) == ":" then v = v:sub(2):gsub("^%s*", "", 1) end
      local function unescape(s)
        return (s:gsub("\\u(%x%x%x%x)", function(h)
          local cp = tonumber(h, 16)
          if cp < 0x80 then return string.char(cp) end
          if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
          return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
        end):gsub("\\(.)", function(c) return PROP_ESC[c] or c end))
      end
      out[#out + 1] = { unescape(k), unescape(v), start }
    end
  end
  return out
end

-- argument parsing ---------------------------------------------

-- The global options, valid before or after the subcommand.
local GLOBAL = {
  { "-b", "--brokers", arg = "HOST:PORT,...", doc = "the bootstrap brokers (else bootstrap.servers of -F, else $KAFKA_BROKERS)" },
  { "-X", "--option", arg = "KEY=VALUE", multi = true,
    doc = "a client, producer or consumer option (docs/options.md; Kafka's dotted names too)" },
  { "-F", "--config-file", arg = "FILE", doc = "a properties file in Kafka's format (client.properties)" },
  { nil, "--json", doc = "output as JSON lines, one object a line" },
  { nil, "--progress", doc = "produce/consume: the count and rate on stderr each second and at the end "
    .. "(default when stdout and stderr are terminals)" },
  { nil, "--no-progress", doc = "no progress lines, even on a terminal" },
  { "-h", "--help", doc = "this help" },
}
_M.GLOBAL = GLOBAL

local function key_of(o) return (o[2]:gsub("^%-%-", ""):gsub("%-", "_")) end

-- parse(argv, specs) -> opts, positional: specs a list of option lists;
-- "-x V", "--xx V", "--xx=V"; "--" ends the options
local function parse(argv, specs, where)
  local by = {}
  for _, list in ipairs(specs) do
    for _, o in ipairs(list) do
      if o[1] then by[o[1]] = o end
      by[o[2]] = o
    end
  end
  local opts, pos = {}, {}
  local i = 1
  local rest = false
  while i <= #argv do
    local a = argv[i]
    if rest or a == "-" or a:sub(1, 1) ~= "-" or a:match("^%-%d") then
      pos[#pos + 1] = a
    elseif a == "--" then
      rest = true
    else
      local name, inline = a:match("^(%-%-[^=]+)=(.*)$")
      name = name or a
      local o = by[name]
      if not o then fail(EXIT.usage, ("%sunknown option %s (see --help)"):format(where, name)) end
      local v = true
      if o.arg then
        if inline then v = inline
        else
          i = i + 1
          v = argv[i]
          if v == nil then fail(EXIT.usage, ("%s%s needs a value (%s)"):format(where, name, o.arg)) end
        end
      elseif inline then
        fail(EXIT.usage, ("%s%s takes no value"):format(where, name))
      end
      local k = key_of(o)
      if o.multi then
        opts[k] = opts[k] or {}
        table.insert(opts[k], v)
      elseif opts[k] ~= nil and o.arg then
        fail(EXIT.usage, ("%s%s given twice"):format(where, name))
      else
        opts[k] = v
      end
    end
    i = i + 1
  end
  return opts, pos
end
_M.parse = parse

-- help text of an option list
local function option_lines(list)
  local out = {}
  for _, o in ipairs(list) do
    local names = (o[1] and (o[1] .. ", ") or "    ") .. o[2] .. (o.arg and (" " .. o.arg) or "")
    out[#out + 1] = ("  %-32s %s"):format(names, o.doc)
  end
  return table.concat(out, "\n")
end
_M.option_lines = option_lines

--- Integer argument of an option, or a usage failure naming it.
function _M.int(name, s, min, max)
  local n = type(s) == "string" and s:match("^[-+]?%d+$") and tonumber(s)
  if not n or (min and n < min) or (max and n > max) then
    local range = min and max and (" in %d..%d"):format(min, max) or min and (" >= %d"):format(min) or ""
    fail(EXIT.usage, ("%s must be an integer%s (got %q)"):format(name, range, tostring(s)))
  end
  return math.floor(n)
end

-- output -------------------------------------------------------

local Ctx = {}
Ctx.__index = Ctx

--- Writes to stdout; a failed write (a full disk, a closed pipe) ends the command with exit 2.
function Ctx:write(...)
  local ok, err = self.stdout:write(...)
  if not ok then fail(EXIT.kafka, "stdout: " .. tostring(err)) end
end

--- Writes a record: a JSON line with --json, else the text line(s) text gives.
function Ctx:emit(record, text)
  if self.json then
    self:write(_M.json(record), "\n")
  elseif text then
    self:write(text, "\n")
  end
end

--- Writes records as a table: columns `{{"HEADER", field}...}`, aligned,
-- missing values as "-" (Kafka's tools' shape); with --json one object per record
-- (a column's missing value as null); no records: nothing, not even the header.
function Ctx:table(columns, records)
  if self.json then
    for _, r in ipairs(records) do
      for _, col in ipairs(columns) do if r[col[2]] == nil then r[col[2]] = _M.null end end
      self:write(_M.json(r), "\n")
    end
    return
  end
  if #records == 0 then return end
  local width, rows = {}, {}
  for c, col in ipairs(columns) do width[c] = #col[1] end
  for i, r in ipairs(records) do
    local row = {}
    for c, col in ipairs(columns) do
      local v = r[col[2]]
      row[c] = (v == nil or v == _M.null) and "-" or tostring(v)
      if #row[c] > width[c] then width[c] = #row[c] end
    end
    rows[i] = row
  end
  local function line(cells)
    local parts = {}
    for c = 1, #columns do
      parts[c] = c == #columns and cells[c] or (cells[c] .. (" "):rep(width[c] - #cells[c]))
    end
    self:write(table.concat(parts, " "), "\n")
  end
  local head = {}
  for c, col in ipairs(columns) do head[c] = col[1] end
  line(head)
  for _, row in ipairs(rows) do line(row) end
end

-- The progress of produce/consume on stderr (--progress, or stdout and stderr
-- terminals): "\r<verb> N messages (R msg/s)" at most once a second, and
-- "<verb> N messages in T s (R msg/s)" at the end (final = true).
function Ctx:progress(verb, n, final)
  if not self.show_progress then return end
  local t = self.env.now()
  self.progress_start = self.progress_start or t
  if not final and self.progress_last and t - self.progress_last < 1000 then return end
  self.progress_last = t
  local dt = (t - self.progress_start) / 1000
  local rate = dt > 0 and math.floor(n / dt + 0.5) or 0
  if final then
    self.stderr:write(("\r%s %d messages in %.1f s (%d msg/s)\n"):format(verb, n, dt, rate))
  else
    self.stderr:write(("\r%s %d messages (%d msg/s)"):format(verb, n, rate))
  end
end

--- Reports one failed item on stderr; the command then exits 2.
function Ctx:item_error(msg)
  self.stderr:write("lua-kafka: ", msg, "\n")
  self.failed = true
end

--- The client, made on first use (a bad option value is a usage failure).
function Ctx:client()
  if not self._client then
    local kafka = require "kafka"
    local ok, c = pcall(kafka.client.new, self.conf.client)
    if not ok then fail(EXIT.usage, tostring(c)) end
    self._client = c
  end
  return self._client
end

--- The admin client over the same client.
function Ctx:admin()
  if not self._admin then self._admin = require("kafka.admin").new(self:client()) end
  return self._admin
end

--- The partition count of a topic; exit 2 when it does not exist.
function Ctx:partitions(where, topic)
  local n, err, code = self:client():partitions(topic)
  if n then return n end
  if code == "unknown_topic" then fail(EXIT.kafka, ("%s: topic %s does not exist"):format(where, topic)) end
  fail(EXIT.kafka, ("%s: topic %s: %s"):format(where, topic, tostring(err)))
end

--- Fails with exit 2 when a call returned nil, err.
function Ctx.check(_, what, v, err, ...)
  if v == nil then fail(EXIT.kafka, ("%s: %s"):format(what, tostring(err))) end
  return v, err, ...
end

-- main ---------------------------------------------------------

local COMMANDS, ORDER = {}, {}
local function register(mod)
  for _, c in ipairs(mod.commands) do
    COMMANDS[c.name] = c
    ORDER[#ORDER + 1] = c
  end
end

local function main_help()
  local out = { "usage: lua-kafka [GLOBAL OPTIONS] COMMAND [ARGS] (lua-kafka COMMAND --help: its options)", "",
    "commands:" }
  for _, c in ipairs(ORDER) do out[#out + 1] = ("  %-13s %s"):format(c.name, c.summary) end
  out[#out + 1] = ""
  out[#out + 1] = "global options:"
  out[#out + 1] = option_lines(GLOBAL)
  out[#out + 1] = ""
  out[#out + 1] = "exit codes: 0 ok, 1 usage error, 2 Kafka or I/O error, 3 internal error (docs/cli.md)"
  return table.concat(out, "\n") .. "\n"
end

local function command_help(c)
  return ("usage: lua-kafka %s\n\n%s\n\noptions:\n%s\n\nglobal options:\n%s\n"):format(
    c.usage, c.summary, option_lines(c.options), option_lines(GLOBAL))
end

-- configure(ctx, g): the client, producer and consumer options of -F, -X, -b
local function configure(ctx, g, env)
  local conf = { client = {}, producer = {}, consumer = {} }
  if g.config_file then
    local f, err = io.open(g.config_file, "rb")
    if not f then fail(EXIT.kafka, "-F: " .. tostring(err)) end
    local text = f:read("*a")
    f:close()
    for _, kv in ipairs(_M.parse_properties(text)) do
      _M.set_option(conf, ("-F %s:%d"):format(g.config_file, kv[3]), kv[1], kv[2])
    end
  end
  for _, x in ipairs(g.option or {}) do
    local k, v = x:match("^([^=]+)=(.*)$")
    if not k then fail(EXIT.usage, ("-X takes key=value (got %q)"):format(x)) end
    _M.set_option(conf, "-X", k, v)
  end
  if g.brokers then conf.client.brokers = g.brokers end
  if conf.client.brokers == nil then conf.client.brokers = env.getenv("KAFKA_BROKERS") end
  if conf.client.brokers == nil or conf.client.brokers == "" then
    fail(EXIT.usage, "no brokers: give -b host:port (or bootstrap.servers in -F, or $KAFKA_BROKERS)")
  end
  -- a topic that does not exist is an error, never created by a Metadata request
  if conf.client.allow_auto_topic_creation == nil then conf.client.allow_auto_topic_creation = false end
  if conf.client.client_id == nil then conf.client.client_id = "lua-kafka-cli" end
  for k, v in pairs(env.client or {}) do conf.client[k] = v end
  ctx.conf = conf
end

-- traced(e) -> a failure as it is, any other error as an internal one with its traceback
local function traced(e)
  if getmetatable(e) == Failure then return e end
  return setmetatable({ exit = EXIT.internal, msg = "internal error: " .. tostring(e) .. "\n" .. debug.traceback() },
    Failure)
end

local function run(argv, env)
  local ctx = setmetatable({ stdin = env.stdin, stdout = env.stdout, stderr = env.stderr, env = env }, Ctx)
  -- the subcommand: the first argument that is neither an option nor a global option's value
  local cmd_at
  local takes = {}
  for _, o in ipairs(GLOBAL) do if o.arg then takes[o[2]] = true; if o[1] then takes[o[1]] = true end end end
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a:sub(1, 1) ~= "-" then cmd_at = i; break end
    if takes[a] then i = i + 1 end
    i = i + 1
  end
  if not cmd_at then
    local g = parse(argv, { GLOBAL }, "")
    if g.help or #argv == 0 then ctx.stdout:write(main_help()); return EXIT.ok end
    fail(EXIT.usage, "no command (lua-kafka --help lists them)")
  end
  local name = argv[cmd_at]
  local c = COMMANDS[name]
  if not c then fail(EXIT.usage, ("unknown command %q (lua-kafka --help lists them)"):format(name)) end
  local rest = {}
  for j = 1, #argv do if j ~= cmd_at then rest[#rest + 1] = argv[j] end end
  local o, pos = parse(rest, { GLOBAL, c.options }, name .. ": ")
  if o.help then ctx.stdout:write(command_help(c)); return EXIT.ok end
  ctx.json = o.json
  if o.progress and o.no_progress then fail(EXIT.usage, "--progress and --no-progress exclude each other") end
  ctx.show_progress = o.progress or (not o.no_progress and env.isatty())
  configure(ctx, o, env)
  local ok, err = xpcall(function() return c.run(ctx, o, pos) end, traced)
  if ctx._client then pcall(ctx._client.close, ctx._client) end
  if not ok then error(err, 0) end
  return ctx.failed and EXIT.kafka or EXIT.ok
end

--- Runs the command line; returns the exit code. env (all optional):
-- stdin, stdout, stderr (objects with read/lines and write), client (options
-- merged into the client's, e.g. an in-process mock's socket), getenv,
-- isatty() (stdout and stderr are terminals), now() (ms, for --progress).
function _M.main(argv, env)
  env = env or {}
  env.stdin = env.stdin or io.stdin
  env.stdout = env.stdout or io.stdout
  env.stderr = env.stderr or io.stderr
  env.getenv = env.getenv or os.getenv
  -- progress by default only on a terminal: the process' own stdout and stderr
  env.isatty = env.isatty or function()
    if env.stdout ~= io.stdout or env.stderr ~= io.stderr then return false end
    local r = os.execute("test -t 1 && test -t 2")
    return r == true or r == 0
  end
  env.now = env.now or function() return require("socket").gettime() * 1000 end
  local args = {}
  for i = 1, #argv do args[i] = argv[i] end
  local ok, code = xpcall(function() return run(args, env) end, traced)
  if ok then return code end
  env.stderr:write("lua-kafka: ", code.msg, "\n")
  return code.exit
end

register(require "kafka.cli.data")
register(require "kafka.cli.admin")
register(require "kafka.cli.security")

return _M
