-- kafka.admin's transaction calls: list_transactions (ListTransactions to
-- every broker, each lists the transactional ids it coordinates, as Java
-- does) and describe_transactions (DescribeTransactions to each id's
-- transaction coordinator, found with FindCoordinator key type 1 at every
-- attempt). Installed into kafka.admin.
local proto = require "kafka.proto"
local check = require "kafka.check"
local client_mod = require "kafka.client"
local B = require "kafka.admin.base"

local errors = proto.errors
local API = proto.api
local type, ipairs = type, ipairs
local table = table

local _M = {}

local function timeout_of(self, o) return o.timeout_ms or self.client.default_api_timeout_ms end

local COORD_AGAIN = { [errors.NOT_COORDINATOR] = true, [errors.COORDINATOR_NOT_AVAILABLE] = true,
  [errors.COORDINATOR_LOAD_IN_PROGRESS] = true }

--- The transactions of every broker (ListTransactions), as kafka-transactions.sh list shows them.
-- @tparam[opt] table opts `states` ({"Ongoing", "CompleteCommit", ...}), `producer_ids`, `duration_ms`
-- (running longer than, v1+), `transactional_id_pattern` (a regular expression, v2+), `timeout_ms`
-- @treturn table `{{transactional_id=, producer_id=, state=, coordinator=}...}` sorted by transactional id
-- @treturn table the brokers that did not answer: `{{broker=, error=, code=}...}`
function _M:list_transactions(opts)
  local where = "list_transactions"
  local o = B.opts(where, opts)
  if o.states ~= nil then B.names(where, "states", o.states) end
  if o.producer_ids ~= nil then
    if type(o.producer_ids) ~= "table" then check.fail(where, "producer_ids", "an array of integers", o.producer_ids) end
    for i, id in ipairs(o.producer_ids) do check.int(where, "producer_ids[" .. i .. "]", id, nil, 0) end
  end
  check.int(where, "duration_ms", o.duration_ms, nil, 0)
  check.typed(where, "transactional_id_pattern", o.transactional_id_pattern, nil, "string")
  local min = (o.transactional_id_pattern and 2) or (o.duration_ms and 1) or 0
  local answered, failed, code = B.each_broker(self.client, timeout_of(self, o), function(c, deadline)
    local v, e, k = B.version(c, API.ListTransactions, min)
    if not v then return nil, e, k end
    local r
    r, e, k = B.request(c, API.ListTransactions, { state_filters = o.states or {}, producer_id_filters = o.producer_ids or {},
      duration_filter = o.duration_ms or -1, transactional_id_pattern = o.transactional_id_pattern }, v, deadline)
    if not r then return nil, e, k end
    if r.error_code ~= errors.NONE then
      local info = errors.info(r.error_code)
      local again = COORD_AGAIN[r.error_code] or info.retriable
      return nil, "ListTransactions: " .. info.name, again and "retriable" or "kafka", r.error_code, again
    end
    return r
  end)
  if not answered then return nil, failed, code end
  local out = {}
  for _, a in ipairs(answered) do
    for _, t in ipairs(a.resp.transaction_states or {}) do
      out[#out + 1] = { transactional_id = t.transactional_id, producer_id = t.producer_id, state = t.transaction_state,
        coordinator = a.id }
    end
  end
  table.sort(out, function(a, b) return a.transactional_id < b.transactional_id end)
  return out, failed
end

--- Describes transactions (DescribeTransactions to each transactional id's coordinator).
-- @tparam {string,...} ids transactional ids
-- @tparam[opt] table opts `timeout_ms`
-- @treturn table `{{transactional_id=, state=, producer_id=, producer_epoch=, transaction_timeout_ms=,
-- transaction_start_time_ms=, topic_partitions = {{topic=, partition=}...}, coordinator=, error_code=, error=,
-- code=}...}` (transaction_start_time_ms nil when no transaction is open)
function _M:describe_transactions(ids, opts)
  local where = "describe_transactions"
  local o = B.opts(where, opts)
  B.names(where, "ids", ids)
  local results = {}
  for i, id in ipairs(ids) do results[i] = { transactional_id = id } end
  local client = self.client
  return B.run(self, results, function(pending, deadline)
    local retry, answered, last = {}, false, nil
    for _, r in ipairs(pending) do
      local c, err, code, kcode, retriable = client:find_coordinator(r.transactional_id, 1, deadline)
      local v, resp
      if c then v, err, code = B.version(c, API.DescribeTransactions) end
      if v then resp, err, code = B.request(c, API.DescribeTransactions, { transactional_ids = { r.transactional_id } }, v, deadline) end
      local t = resp and resp.transaction_states and resp.transaction_states[1]
      if resp and not t then err, code = "DescribeTransactions: no transaction in the answer", "protocol" end
      if t then
        answered = true
        r.coordinator = c.node_id
        B.settle(r, t.error_code, nil, retry, COORD_AGAIN)
        if t.error_code == errors.NONE then
          r.state, r.producer_id, r.producer_epoch = t.transaction_state, t.producer_id, t.producer_epoch
          r.transaction_timeout_ms = t.transaction_timeout_ms
          r.transaction_start_time_ms = t.transaction_start_time_ms >= 0 and t.transaction_start_time_ms or nil
          local tps = {}
          for _, x in ipairs(t.topics or {}) do
            for _, p in ipairs(x.partitions or {}) do tps[#tps + 1] = { topic = x.topic, partition = p } end
          end
          r.topic_partitions = B.sort_tps(tps)
        end
      elseif kcode then
        answered = true
        B.settle(r, kcode, nil, retry, COORD_AGAIN)
      else
        B.fail(r, nil, err, code)
        if retriable or client_mod.RETRIABLE[code] then retry[#retry + 1] = r end
        last = { err, code }
      end
    end
    if not answered and last then return nil, last[1], last[2] end
    return true, retry
  end, { timeout_ms = timeout_of(self, o) })
end

return _M
