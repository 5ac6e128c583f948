-- kafka.cli.data: `lua-kafka produce` and `lua-kafka consume` (docs/cli.md).
local type, ipairs, pairs, tostring, tonumber, pcall, require = type, ipairs, pairs, tostring, tonumber, pcall, require
local table, math, io = table, math, io

local _M = {}

local function cli() return require "kafka.cli" end

---------------------------------------------------------------- produce

local PRODUCE = {
  { "-t", "--topic", arg = "TOPIC", doc = "the topic (required)" },
  { "-p", "--partition", arg = "N", doc = "every message to this partition (default: by key, murmur2 as Java's client)" },
  { "-k", "--key-separator", arg = "SEP", doc = "each line is KEY SEP VALUE (split at its first SEP; a line without it has no key)" },
  { "-H", "--header", arg = "NAME=VALUE", multi = true, doc = "a header on every message (repeatable)" },
  { "-z", "--compression", arg = "CODEC", doc = "none, gzip, snappy, lz4 or zstd (default none)" },
  { "-a", "--acks", arg = "ACKS", doc = "all (-1, default: idempotent), 1 or 0 (both without idempotence)" },
  { "-f", "--file", arg = "FILE", doc = "read the lines from FILE instead of stdin" },
}

-- lines(reader) -> an iterator over lines without their "\n" (a last line
-- without one counts; "\r\n" keeps its "\r": values are bytes)
local function lines(r)
  return function() return r:read("*l") end
end

_M.FLUSH_EVERY = 10000

local function produce(ctx, o, pos)
  local C = cli()
  if #pos > 0 then C.usage(("produce: unexpected argument %q"):format(pos[1])) end
  if not o.topic then C.usage("produce: -t TOPIC is required") end
  local partition = o.partition and C.int("produce: -p", o.partition, 0, 2147483647)
  local headers
  for _, h in ipairs(o.header or {}) do
    local k, v = h:match("^([^=]+)=(.*)$")
    if not k then C.usage(("produce: -H takes name=value (got %q)"):format(h)) end
    headers = headers or {}
    headers[#headers + 1] = { key = k, value = v }
  end
  local popts = {}
  for k, v in pairs(ctx.conf.producer) do popts[k] = v end
  if o.compression then C.set_option({ client = {}, producer = popts, consumer = {} }, "produce: -z", "compression", o.compression) end
  if o.acks then
    C.set_option({ client = {}, producer = popts, consumer = {} }, "produce: -a", "acks", o.acks)
    if popts.acks ~= -1 and popts.enable_idempotence == nil then popts.enable_idempotence = false end
  end
  local input = ctx.stdin
  if o.file then
    local f, err = io.open(o.file, "rb")
    if not f then C.kafka("produce: " .. tostring(err)) end
    input = f
  end
  local client = ctx:client()
  local n = ctx:partitions("produce", o.topic)
  if partition and partition >= n then
    C.kafka(("produce: topic %s has %d partition%s: no partition %d"):format(o.topic, n, n == 1 and "" or "s", partition))
  end
  local kafka = require "kafka"
  local ok, p = pcall(kafka.producer.new, client, popts)
  if not ok then C.usage(tostring(p)) end
  local sep = o.key_separator
  if sep == "" then C.usage("produce: -k needs a non-empty separator") end
  -- drain(): the reports so far (a flush every FLUSH_EVERY lines bounds what is held)
  local line_of = {}  -- message id -> its line, until its report
  local function drain()
    for _, r in ipairs((p:flush())) do
      local at = line_of[r.id]
      line_of[r.id] = nil
      if r.err then
        ctx:item_error(("produce: line %d: %s"):format(at or -1, tostring(r.err)))
      else
        ctx:emit({ topic = r.topic, partition = r.partition, offset = r.offset })
      end
    end
  end
  local count = 0
  for line in lines(input) do
    local key, value = nil, line
    if sep then
      local i, j = line:find(sep, 1, true)
      if i then key, value = line:sub(1, i - 1), line:sub(j + 1) end
    end
    count = count + 1
    local id, err = p:send(o.topic, value, { key = key, partition = partition, headers = headers })
    if id then line_of[id] = count else ctx:item_error(("produce: line %d: %s"):format(count, tostring(err))) end
    if count % _M.FLUSH_EVERY == 0 then drain() end
    ctx:progress("produced", count)
  end
  if input ~= ctx.stdin then input:close() end
  drain()
  p:close()
  ctx:progress("produced", count, true)
end

---------------------------------------------------------------- consume

local CONSUME = {
  { "-t", "--topic", arg = "TOPIC", multi = true, doc = "a topic (repeatable; required)" },
  { "-p", "--partition", arg = "N", doc = "only this partition (not with -g)" },
  { "-o", "--offset", arg = "WHERE", doc = "beginning, end (default), N, -N (N before the end) or s@TIMESTAMP_MS; "
    .. "with -g: beginning or end, for partitions without a committed offset" },
  { "-e", "--exit", doc = "exit at the end of every partition (its end when reached: the high watermark then)" },
  { "-g", "--group", arg = "GROUP", doc = "consume as a member of this consumer group (commits its offsets)" },
  { "-c", "--count", arg = "N", doc = "exit after N messages" },
  { "-f", "--format", arg = "FORMAT", doc = "each message's output: %t topic, %p partition, %o offset, %k key, %s value, "
    .. "%K/%S their lengths, %h headers (n=v,...), %T timestamp (ms), %%, \\n \\t \\r \\\\ (default \"%s\\n\")" },
  { nil, "--timeout", arg = "MS", doc = "exit 2 when no message came for MS milliseconds" },
}

local DIRECTIVE = { t = true, p = true, o = true, k = true, s = true, K = true, S = true, h = true, T = true }
local ESCAPE = { n = "\n", t = "\t", r = "\r", ["\\"] = "\\" }

--- Compiles a kcat-like format string -> a list of literals and
-- directive letters; raises a usage failure naming the byte of a bad one.
function _M.compile_format(f)
  local C = cli()
  local parts, lit = {}, {}
  local i = 1
  while i <= #f do
    local c = f:sub(i, i)
    if c == "%" or c == "\\" then
      local d = f:sub(i + 1, i + 1)
      if c == "%" and d == "%" then lit[#lit + 1] = "%"
      elseif c == "%" and DIRECTIVE[d] then
        if #lit > 0 then parts[#parts + 1] = table.concat(lit); lit = {} end
        parts[#parts + 1] = { d }
      elseif c == "\\" and ESCAPE[d] then lit[#lit + 1] = ESCAPE[d]
      else
        C.usage(("consume: -f: unknown %s%s at byte %d of the format"):format(c, d, i))
      end
      i = i + 2
    else
      lit[#lit + 1] = c
      i = i + 1
    end
  end
  if #lit > 0 then parts[#parts + 1] = table.concat(lit) end
  return parts
end

local function headers_text(h)
  local out = {}
  for i, x in ipairs(h or {}) do out[i] = (x.key or x[1]) .. "=" .. (x.value or x[2] or "") end
  return table.concat(out, ",")
end

local function render(parts, m)
  local out = {}
  for i, p in ipairs(parts) do
    if type(p) == "string" then out[i] = p
    else
      local d = p[1]
      out[i] = d == "t" and m.topic or d == "p" and tostring(m.partition) or d == "o" and tostring(m.offset)
        or d == "k" and (m.key or "") or d == "s" and (m.value or "")
        or d == "K" and tostring(m.key and #m.key or -1) or d == "S" and tostring(m.value and #m.value or -1)
        or d == "h" and headers_text(m.headers) or d == "T" and ("%d"):format(m.timestamp or -1) or ""
    end
  end
  return table.concat(out)
end

local function message_json(m)
  local C = cli()
  local h = {}
  for i, x in ipairs(m.headers or {}) do
    local v = x.value or x[2]
    h[i] = { x.key or x[1], v == nil and C.null or v }
  end
  return { topic = m.topic, partition = m.partition, offset = m.offset, timestamp = m.timestamp,
    key = m.key == nil and C.null or m.key, value = m.value == nil and C.null or m.value, headers = h }
end

-- start_offset(client, topic, partition, where) -> the offset -o names
local function start_offset(ctx, topic, partition, where)
  local C = cli()
  local client = ctx:client()
  local what = ("consume: %s/%d"):format(topic, partition)
  if where == "beginning" then return ctx:check(what, client:list_offsets(topic, partition, "earliest"))
  elseif where == "end" then return ctx:check(what, client:list_offsets(topic, partition, "latest")) end
  local ts = where:match("^s@(%d+)$")
  if ts then
    local off = ctx:check(what, client:list_offsets(topic, partition, tonumber(ts)))
    if off == -1 then off = ctx:check(what, client:list_offsets(topic, partition, "latest")) end
    return off
  end
  local back = where:match("^%-(%d+)$")
  if back then
    local first = ctx:check(what, client:list_offsets(topic, partition, "earliest"))
    local last = ctx:check(what, client:list_offsets(topic, partition, "latest"))
    return math.max(first, last - tonumber(back))
  end
  return C.int("consume: -o", where, 0)
end

local function consume(ctx, o, pos)
  local C = cli()
  if #pos > 0 then C.usage(("consume: unexpected argument %q"):format(pos[1])) end
  if not o.topic then C.usage("consume: -t TOPIC is required") end
  local where = o.offset or "end"
  if not (where == "beginning" or where == "end" or where:match("^s@%d+$") or where:match("^%-?%d+$")) then
    C.usage(("consume: -o takes beginning, end, N, -N or s@TIMESTAMP_MS (got %q)"):format(where))
  end
  if o.group and not (where == "beginning" or where == "end") then
    C.usage("consume: with -g, -o is beginning or end (where a partition without a committed offset starts)")
  end
  if o.group and o.partition then C.usage("consume: -p and -g exclude each other (the group assigns the partitions)") end
  local partition = o.partition and C.int("consume: -p", o.partition, 0, 2147483647)
  local count = o.count and C.int("consume: -c", o.count, 1)
  local idle = o.timeout and C.int("consume: --timeout", o.timeout, 1)
  local parts = _M.compile_format(o.format or "%s\\n")
  local client = ctx:client()
  for _, t in ipairs(o.topic) do
    local n = ctx:partitions("consume", t)
    if partition and partition >= n then
      C.kafka(("consume: topic %s has %d partition%s: no partition %d"):format(t, n, n == 1 and "" or "s", partition))
    end
  end
  local copts = {}
  for k, v in pairs(ctx.conf.consumer) do copts[k] = v end
  if o.group then
    copts.group_id = o.group
    if copts.auto_offset_reset == nil then copts.auto_offset_reset = where == "beginning" and "earliest" or "latest" end
  end
  local kafka = require "kafka"
  local ok, c = pcall(kafka.consumer.new, client, copts)
  if not ok then C.usage(tostring(c)) end
  local ends = {}   -- "topic/partition" -> the end -e stops at
  if o.group then
    ctx:check("consume: subscribe", c:subscribe(o.topic))
  else
    local list = {}
    for _, t in ipairs(o.topic) do
      local n = client:partitions(t)
      for p = 0, n - 1 do
        if not partition or p == partition then
          list[#list + 1] = { topic = t, partition = p, offset = start_offset(ctx, t, p, where) }
        end
      end
    end
    ctx:check("consume: assign", c:assign(list))
  end
  -- at_end() -> whether every assigned partition's position reached its end
  local function at_end()
    local asg = c:assignment()
    if #asg == 0 then return false end
    for _, a in ipairs(asg) do
      local k = a.topic .. "/" .. a.partition
      if not ends[k] then ends[k] = ctx:check("consume: " .. k, client:list_offsets(a.topic, a.partition, "latest")) end
      local position = c:position(a.topic, a.partition)
      if not position or position < ends[k] then return false end
    end
    return true
  end
  local got = 0
  local last = client.now()
  local result_err
  while true do
    if count and got >= count then break end
    if o.exit and at_end() then break end
    if idle and client.now() - last >= idle then
      result_err = ("consume: no message for %d ms"):format(idle)
      break
    end
    local msgs, err, code = c:poll(idle and math.min(500, idle) or 500)
    if not msgs and code ~= "timeout" and code ~= "backoff" and code ~= "network" and code ~= "retriable" then
      result_err = "consume: " .. tostring(err)
      break
    end
    msgs = msgs or {}
    for i, m in ipairs(msgs) do
      last = client.now()
      if ctx.json then ctx:write(C.json(message_json(m)), "\n")
      else ctx:write(render(parts, m)) end
      got = got + 1
      ctx:progress("consumed", got)
      if count and got >= count then
        -- the poll's messages not written: each partition back to its first
        -- one, so that the group's commit stores only what was written
        local back = {}
        for j = i + 1, #msgs do
          local x = msgs[j]
          local k = x.topic .. "/" .. x.partition
          if not back[k] then back[k] = true; c:seek(x.topic, x.partition, x.offset) end
        end
        break
      end
    end
    if ctx.stdout.flush then ctx.stdout:flush() end
  end
  c:close()
  ctx:progress("consumed", got, true)
  if result_err then C.kafka(result_err) end
end

_M.commands = {
  { name = "produce", summary = "send lines of stdin (or -f FILE) as messages", options = PRODUCE, run = produce,
    usage = "produce -t TOPIC [-k SEP] [-H NAME=VALUE]... [-p N] [-z CODEC] [-a ACKS] [-f FILE]" },
  { name = "consume", summary = "write messages to stdout, formatted (-f) or as JSON lines (--json)",
    options = CONSUME, run = consume,
    usage = "consume -t TOPIC [-p N] [-o WHERE] [-e] [-g GROUP] [-c N] [-f FORMAT] [--timeout MS]" },
}

return _M
