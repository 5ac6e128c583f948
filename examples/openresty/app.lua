-- examples/openresty/app.lua: lua-kafka in nginx (lua-nginx-module), the
-- per-worker producer pattern (see nginx.conf next to it and
-- docs/openresty.md).
--
--   app.init_worker()   in init_worker_by_lua: this worker's producer, and
--                       a consumer timer in worker 0 when KAFKA_CONSUME_TOPIC is set
--   app.send(value)     from any phase (set, rewrite, access, content,
--                       header_filter, body_filter, log, timers): buffers
--                       and returns at once; the producer's sender delivers
--   app.producer()      the producer (flush, stats)
local kafka = require "kafka"

local ngx = ngx -- luacheck: ignore 113 (nginx's global)
local os, tostring, tonumber, ipairs, pcall = os, tostring, tonumber, ipairs, pcall

local _M = {}

local BROKERS = os.getenv("KAFKA_BROKERS") or "127.0.0.1:9092"
local TOPIC = os.getenv("KAFKA_TOPIC") or "nginx-requests"
local CONSUME = os.getenv("KAFKA_CONSUME_TOPIC")

local producer -- this worker's: one per worker, shared by every request
local headers  -- every message says which worker sent it

function _M.init_worker()
  -- no I/O happens here: the producer's sender (a timer, started by the
  -- first send) opens its own connections
  headers = { pid = tostring(ngx.worker.pid()) }
  local client = kafka.client.new { brokers = BROKERS, client_id = "nginx-" .. ngx.worker.pid() }
  producer = kafka.producer.new(client, {
    acks = -1,
    linger_ms = 20,                -- a partition's batch goes when it is 20 ms old (or full)
    max_buffered = 50000,          -- beyond that send() returns nil, err, "buffer_full" at once
    exit_flush_timeout_ms = 5000,  -- at reload / quit, buffered messages get this long to go out
    delivery_reports = "errors",   -- flush() lists the failures only and counts the rest
    on_delivery = function(r)      -- runs in the sender's timer
      if r.err then ngx.log(ngx.ERR, "kafka: message ", r.id, " to ", r.topic, " failed: ", r.err) end
    end,
  })
  -- every worker publishes its producer's state for /stats (any worker answers it)
  assert(ngx.timer.every(0.5, _M.publish))
  if CONSUME and ngx.worker.id() == 0 then
    assert(ngx.timer.at(0, _M.consume, CONSUME))
  end
end

function _M.producer()
  return producer
end

-- The topic of a request: ?topic= (letters, digits, ., _, -) or KAFKA_TOPIC.
local function topic_of(t)
  if t and t:match("^[%w._-]+$") then return t end
  return TOPIC
end
_M.topic_of = topic_of

-- send(value [, topic]) -> id | nil, err, code. Never yields, never does I/O.
function _M.send(value, topic)
  local id, err, code = producer:send(topic_of(topic), value, { headers = headers })
  if not id then
    -- back-pressure (buffer_full) or a message too large: the caller's choice;
    -- here it is logged and the request goes on
    ngx.log(ngx.WARN, "kafka: message not buffered (", code, "): ", err)
  end
  return id, err, code
end

-- A consumer in its own timer: one long-lived loop (its client is made
-- here, so its connections belong to this timer; ngx.timer.every would
-- start every tick in a new context). Positions are kept in a shared dict,
-- so a new worker (after a reload) goes on from there.
function _M.consume(premature, topic)
  if premature then return end
  local dict = ngx.shared.kafka_stats
  local client = kafka.client.new { brokers = BROKERS, client_id = "nginx-consumer" }
  local c = kafka.consumer.new(client, { fetch_max_wait_ms = 200 })
  local ok, err = pcall(function()
    local n
    while not ngx.worker.exiting() do
      n = client:partitions(topic)
      if n then break end
      ngx.sleep(0.5)
    end
    if not n then return end
    local parts = {}
    for p = 0, n - 1 do
      parts[#parts + 1] = { topic = topic, partition = p, offset = dict:get("offset:" .. topic .. ":" .. p) or "earliest" }
    end
    assert(c:assign(parts))
    while not ngx.worker.exiting() do
      local msgs, perr, code = c:poll(500)
      if msgs then
        for _, m in ipairs(msgs) do dict:set("offset:" .. topic .. ":" .. m.partition, m.offset + 1) end
        if #msgs > 0 then dict:incr("consumed:" .. topic, #msgs, 0) end
      else
        ngx.log(ngx.WARN, "kafka consumer: ", perr, " (", code, ")") -- poll waited its 500 ms: no spinning
      end
    end
  end)
  dict:set("consumer_transport", tostring((client:transport())))
  c:close()
  client:close()
  if not ok then
    ngx.log(ngx.ERR, "kafka consumer failed: ", err)
    if not ngx.worker.exiting() then ngx.timer.at(1, _M.consume, topic) end
  end
end

local function line()
  local s = producer:stats()
  -- a sender that cannot go on says why ("fatal" / "crashed": docs/openresty.md)
  return ("pid=%d state=%s buffered=%d in_flight=%d transport=%s background=%s%s"):format(ngx.worker.pid(), s.state,
    s.buffered, s.in_flight, tostring(s.transport), tostring(s.background),
    s.code and (" code=%s err=%s"):format(s.code, tostring(s.err):match("[^\n]*")) or "")
end

function _M.publish(premature)
  if premature then return end
  ngx.shared.kafka_stats:set("worker:" .. ngx.worker.pid(), line(), 2) -- gone 2 s after its worker
end

-- GET /stats: this worker's producer, every worker's (as published), the consumer's count.
function _M.stats()
  local dict = ngx.shared.kafka_stats
  local topic = topic_of(ngx.var.arg_topic)
  ngx.say(line(), " consumed=", tonumber(dict:get("consumed:" .. topic)) or 0,
    " consumer_transport=", tostring(dict:get("consumer_transport")))
  for _, k in ipairs(dict:get_keys(100)) do
    if k:match("^worker:") then ngx.say("worker ", dict:get(k) or "gone") end
  end
end

return _M
