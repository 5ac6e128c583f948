-- kafka.producer.txnmgr: the transaction manager of a producer with a
-- transactional_id (the consumer's side, the aborted-transaction filter,
-- is kafka.read_committed). States (Java's names, kept in the producer's
-- txn_state: send() reads it): "uninitialized" -> init_transactions() ->
-- "ready" -> begin_transaction() -> "in_transaction" ->
-- commit_transaction() ("committing") or abort_transaction() ("aborting")
-- -> "ready". A failed message, a refused AddPartitionsToTxn or offsets
-- commit makes it "abortable_error" (abort_transaction() and go on); a
-- newer producer with the same transactional_id (PRODUCER_FENCED;
-- INVALID_PRODUCER_EPOCH from the coordinator - from a partition leader it
-- is abortable, KIP-588: the coordinator may have timed the transaction
-- out, and the abort's EndTxn tells) or an authorization failure makes it
-- "fatal_error": every call then returns nil, err, "fenced" (or "fatal").
--
-- Two protocols, as Kafka's Java client picks them (TransactionManager's
-- isTransactionV2Enabled): where the cluster has finalized the feature
-- transaction.version >= 2 (ApiVersions v3+; the default of clusters
-- formatted by Kafka 4.0+) transactions v2 (KIP-890 part 2): no
-- AddPartitionsToTxn (Produce v12+ makes the partition leader add the
-- partition), no AddOffsetsToTxn (TxnOffsetCommit v5 makes the group
-- coordinator add the offsets), and EndTxn v5, whose answer carries the
-- producer id and epoch of the next transaction (the coordinator bumps the
-- epoch at every end, a new producer id when it overflows): they are used
-- from then on, and the sequences start again at 0. An aborted transaction
-- whose producer state is in doubt needs no InitProducerId bump then: its
-- EndTxn bumps. Elsewhere (Kafka 3.x, or the feature below 2) v1 (KIP-98):
-- AddPartitionsToTxn before a partition's first batch, Produce at most
-- v11, AddOffsetsToTxn then TxnOffsetCommit at most v4, EndTxn at most v4.
-- The version is read at init_transactions() and again at each end of a
-- transaction, for the next one (never inside one); a switch from 1 to 2
-- bumps the epoch first (InitProducerId), as Java does, so nothing added
-- under v1 counts as added under v2. stats().transaction_version says which.
--
-- The producer's public transaction methods check their arguments and
-- call these (misuse is raised at their caller: error level 4 here).
-- As librdkafka's rdkafka_txnmgr and franz-go's txn.go (without its
-- GroupTransactSession: a consume-transform-produce loop is the
-- caller's, spec/eos_loop_spec.lua). The sink asks add_partitions before
-- a round's Produce requests, where franz-go's sink asks too.
local proto = require "kafka.proto"

local errors = proto.errors
local API = proto.api
local math = math
local setmetatable, ipairs, pairs, error, next, select = setmetatable, ipairs, pairs, error, next, select

local _M = {}
local mt = { __index = _M }

-- new(p) -> the transaction manager of producer p (its transactional_id,
-- transaction_timeout_ms, client, identity; its sink and idempotence).
-- Its state:
--   parts        topic -> partition -> true: added to the transaction
--   has_offsets  offsets were added to the transaction
--   version      the transaction protocol: 1 (KIP-98) or 2 (KIP-890), from init
--   coord        the transaction coordinator's connection (nil: find it)
--   ended        when the last transaction that touched anything ended (see await_previous_end)
--   settled      the state the last DescribeTransactions check ended on (stats())
--   settle_waits how many times a first add waited for the previous markers (stats())
function _M.new(p)
  return setmetatable({
    p = p,
    parts = {},
    has_offsets = false,
    version = nil,
    coord = nil,
    ended = nil,
    settled = nil,
    settle_waits = 0,
  }, mt)
end

local TXN_RETRIABLE = { [errors.CONCURRENT_TRANSACTIONS] = true, [errors.COORDINATOR_LOAD_IN_PROGRESS] = true,
  [errors.COORDINATOR_NOT_AVAILABLE] = true, [errors.NOT_COORDINATOR] = true, [errors.REQUEST_TIMED_OUT] = true,
  [errors.UNKNOWN_TOPIC_OR_PARTITION] = true }
local TXN_FATAL = { [errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] = true,
  [errors.CLUSTER_AUTHORIZATION_FAILED] = true, [errors.INVALID_TXN_STATE] = true,
  [errors.INVALID_PRODUCER_ID_MAPPING] = true,
  [errors.UNSUPPORTED_VERSION] = true, [errors.UNSUPPORTED_FOR_MESSAGE_FORMAT] = true,
  [errors.INVALID_TRANSACTION_TIMEOUT] = true }
local TXN_FENCED = { [errors.PRODUCER_FENCED] = true, [errors.INVALID_PRODUCER_EPOCH] = true,
  [errors.TRANSACTION_COORDINATOR_FENCED] = true }

-- kafka_error(what, error_code) -> err, code, kcode, retriable: the code
-- is "retriable", "fenced", "fatal" or "abortable" (in a transaction).
function _M.kafka_error(_, what, ec)
  local e = errors.info(ec)
  local msg = ("%s: %s (%s)"):format(what, e.name, e.message)
  if TXN_RETRIABLE[ec] or (e.retriable and ec ~= errors.CONCURRENT_TRANSACTIONS) then
    return msg, "retriable", ec, true
  end
  if TXN_FENCED[ec] then return msg .. " (another producer with this id took over)", "fenced", ec, false end
  if TXN_FATAL[ec] then return msg, "fatal", ec, false end
  return msg, "abortable", ec, false
end

-- A request to the transaction coordinator, retried through the client:
-- check(resp) -> true | nil, err, code, kcode, retriable; o: client:call's
-- options.
function _M:call(api, body, cap, check_resp, o)
  local p = self.p
  local client = p.client
  return client:call(function(deadline)
    local c = self.coord
    local err, code, kcode, retriable
    if not c or not c:is_connected() then
      c, err, code, kcode, retriable = client:find_coordinator(p.transactional_id, 1, deadline)
      if not c then return nil, err, code, kcode, retriable end
      self.coord = c
    end
    local v
    v, err, code = c:version(api)
    if not v then return nil, err, code end
    if cap and v > cap then v = cap end
    local req, berr, bcode = body(v)
    if not req then return nil, berr, bcode, nil, false end
    local resp
    resp, err, code = c:request(api, req, { version = v, deadline = deadline })
    if not resp then
      self.coord = nil
      return nil, err, code
    end
    local ok
    ok, err, code, kcode, retriable = check_resp(resp)
    if not ok and (kcode == errors.NOT_COORDINATOR or kcode == errors.COORDINATOR_NOT_AVAILABLE) then
      self.coord = nil
    end
    if not ok then return nil, err, code, kcode, retriable end
    return ok
  end, o)
end

-- CONCURRENT_TRANSACTIONS on the first AddPartitionsToTxn of a transaction
-- means the previous one is still writing its markers: tried again after
-- 20 ms, not retry_backoff_ms (as Kafka's Java client does, KAFKA-5482).
local FIRST_ADD_BACKOFF_MS = 20

-- A check for call(): the answer's top-level error_code.
function _M:top_error(what)
  return function(resp)
    if resp.error_code ~= errors.NONE then return nil, self:kafka_error(what, resp.error_code) end
    return resp
  end
end

-- The previous transaction's end, seen from the next one's first add.
-- EndTxn is answered once the outcome is logged (PrepareCommit or
-- PrepareAbort); the markers are written after that (1-8 ms on one Kafka
-- 4.1 broker, measured). A first add inside that window is refused with
-- CONCURRENT_TRANSACTIONS and waits 20 ms: v1's AddPartitionsToTxn here
-- (FIRST_ADD_BACKOFF_MS), v2's Produce inside the broker
-- (add.partitions.to.txn.retry.backoff.ms). Asking the coordinator
-- (DescribeTransactions, Kafka 3.0+) until the markers are written costs the
-- window and no more. Only right after an end (SETTLE_CHECK_MS, else the
-- window has passed and a check is a wasted round trip); asked again after
-- 1 ms, doubling up to 32 ms, for at most SETTLE_MAX_MS (markers that take
-- longer are stuck on something the broker retries anyway). Best effort: an
-- error or an old broker ends the wait. self.settled: the state the
-- last check ended on (stats()).
local SETTLE_CHECK_MS = 100
local SETTLE_MAX_MS = 1000
local SETTLING = { PrepareCommit = true, PrepareAbort = true }

function _M:await_previous_end()
  local ended = self.ended
  self.ended = nil
  local p = self.p
  local client = p.client
  local c = self.coord
  if not ended or client.now() - ended > SETTLE_CHECK_MS or not (c and c:is_connected()) then return end
  local v = c:version(API.DescribeTransactions)
  if not v then return end
  local deadline = client.now() + math.min(SETTLE_MAX_MS, c.request_timeout_ms)
  local req = { transactional_ids = { p.transactional_id } }
  local pause = 1
  repeat
    local resp = c:request(API.DescribeTransactions, req, { version = v, deadline = deadline })
    local st = resp and resp.transaction_states and resp.transaction_states[1]
    if not st or st.error_code ~= errors.NONE then return end
    self.settled = st.transaction_state
    if not SETTLING[st.transaction_state] then return end
    self.settle_waits = self.settle_waits + 1
    client.sleep(pause)
    pause = math.min(pause * 2, 32)
  until client.now() >= deadline
end

-- A state check: misuse raises (at the caller of the producer's method);
-- in an error state returns the error.
function _M:guard(where, ...)
  local p = self.p
  local st = p.txn_state
  for i = 1, select("#", ...) do
    if st == select(i, ...) then return true end
  end
  if st == "fatal_error" or st == "abortable_error" then
    local e = p.txn_error
    return nil, e.err, e.code, e.kcode
  end
  error(("%s: not allowed in transaction state %q"):format(where, st), 4)
end

-- init_transactions() (see the producer's)
function _M:init()
  local p = self.p
  local ok, err, code, kcode = self:guard("init_transactions", "uninitialized")
  if not ok then return nil, err, code, kcode end
  local magic
  magic, err, code = p:_magic()
  if not magic then return nil, err, code end
  if magic < 2 then return nil, "transactions need record format v2 (Kafka 0.11+)", "unsupported" end
  local resp
  resp, err, code, kcode = self:call(API.InitProducerId, function()
    return { transactional_id = p.transactional_id, transaction_timeout_ms = p.transaction_timeout_ms,
      producer_id = -1, producer_epoch = -1 }
  end, nil, self:top_error("InitProducerId " .. p.transactional_id))
  if not resp then
    if code == "fenced" or code == "fatal" then p:_txn_error("fatal_error", err, code, kcode) end
    return nil, err, code, kcode
  end
  p.idempotent, p.idem.mode = true, "on"
  p.idem:reset_sequences(resp.producer_id, resp.producer_epoch)
  self.version = self:cluster_version()
  p.txn_state = "ready"
  return true
end

-- The transaction protocol to use now: 2 where the cluster has finalized
-- transaction.version >= 2 and the versions v2 needs are not capped away
-- (max_versions: Produce v12, TxnOffsetCommit v5, EndTxn v5), else 1.
function _M:cluster_version()
  local level, c = self.p.client:finalized_feature("transaction.version")
  if level < 2 then return 1 end
  for api, min in pairs { [API.Produce] = 12, [API.TxnOffsetCommit] = 5, [API.EndTxn] = 5 } do
    local v = c:version(api)
    if not v or v < min then return 1 end
  end
  return 2
end

-- begin_transaction() (see the producer's)
function _M:begin()
  local ok, err, code, kcode = self:guard("begin_transaction", "ready")
  if not ok then return nil, err, code, kcode end
  self.p.txn_state, self.parts, self.has_offsets = "in_transaction", {}, false
  return true
end

-- AddPartitionsToTxn for the partitions of a send round not in the
-- transaction yet, in one request. true | nil (the state says why). With
-- transactions v2 the Produce request adds them: they are only noted (the
-- transaction has begun on the cluster once a batch went out).
function _M:add_partitions(items)
  local p = self.p
  local parts = self.parts
  if next(parts) == nil then self:await_previous_end() end
  if self.version == 2 then
    for _, it in ipairs(items) do
      local tp = parts[it.topic]
      if not tp then
        tp = {}
        parts[it.topic] = tp
      end
      tp[it.partition] = true
    end
    return true
  end
  local new, by_topic, n = {}, {}, 0
  for _, it in ipairs(items) do
    local tp = parts[it.topic]
    if not (tp and tp[it.partition]) then
      local t = by_topic[it.topic]
      if not t then
        t = { name = it.topic, partitions = {}, seen = {} }
        by_topic[it.topic] = t
        new[#new + 1] = t
      end
      if not t.seen[it.partition] then
        t.seen[it.partition] = true
        t.partitions[#t.partitions + 1] = it.partition
        n = n + 1
      end
    end
  end
  if n == 0 then return true end
  local topics = {}
  for i, t in ipairs(new) do topics[i] = { name = t.name, partitions = t.partitions } end
  local first_add = next(parts) == nil
  local ok, err, code, kcode = self:call(API.AddPartitionsToTxn, function()
    return { v3_and_below_transactional_id = p.transactional_id, v3_and_below_producer_id = p.producer_id,
      v3_and_below_producer_epoch = p.producer_epoch, v3_and_below_topics = topics }
  end, 3, function(resp)
    local first
    for _, tr in ipairs(resp.results_by_topic_v3_and_below or {}) do
      for _, pr in ipairs(tr.results_by_partition or {}) do
        local ec = pr.partition_error_code
        -- OPERATION_NOT_ATTEMPTED: refused because another partition was
        if ec ~= errors.NONE and ec ~= errors.OPERATION_NOT_ATTEMPTED then
          if not first or TXN_RETRIABLE[ec] then first = { tr.name, pr.partition_index, ec } end
        end
      end
    end
    if first then
      return nil, self:kafka_error(("AddPartitionsToTxn %s/%d"):format(first[1], first[2]), first[3])
    end
    return true
  end, first_add and { backoff = function(kc) return kc == errors.CONCURRENT_TRANSACTIONS and FIRST_ADD_BACKOFF_MS end })
  if not ok then
    local fatal = code == "fenced" or code == "fatal"
    p:_txn_error(fatal and "fatal_error" or "abortable_error", err, fatal and code or "abortable", kcode)
    return nil
  end
  for _, t in ipairs(new) do
    local tp = parts[t.name]
    if not tp then
      tp = {}
      parts[t.name] = tp
    end
    for _, x in ipairs(t.partitions) do tp[x] = true end
  end
  return true
end

-- send_offsets_to_transaction(offsets, group_metadata) (see the
-- producer's, which checks both): AddOffsetsToTxn (v1), then
-- TxnOffsetCommit to the group's coordinator.
function _M:send_offsets(offsets, gm)
  local p = self.p
  local ok, err, code, kcode = self:guard("send_offsets_to_transaction", "in_transaction")
  if not ok then return nil, err, code, kcode end
  local v2 = self.version == 2
  if next(self.parts) == nil and not self.has_offsets then self:await_previous_end() end
  if v2 then
    ok = true -- TxnOffsetCommit v5 adds the group's offsets to the transaction itself
  else
    ok, err, code, kcode = self:call(API.AddOffsetsToTxn, function()
      return { transactional_id = p.transactional_id, producer_id = p.producer_id,
        producer_epoch = p.producer_epoch, group_id = gm.group_id }
    end, nil, self:top_error("AddOffsetsToTxn " .. gm.group_id))
  end
  if ok then
    self.has_offsets = true
    local topics, by = {}, {}
    for _, o in ipairs(offsets) do
      local t = by[o.topic]
      if not t then
        t = { name = o.topic, partitions = {} }
        by[o.topic] = t
        topics[#topics + 1] = t
      end
      t.partitions[#t.partitions + 1] = { partition_index = o.partition, committed_offset = o.offset,
        committed_leader_epoch = o.leader_epoch or -1, committed_metadata = o.metadata or "" }
    end
    local client = p.client
    ok, err, code, kcode = client:call(function(deadline)
      local c, cerr, ccode, ckcode, cretr = client:find_coordinator(gm.group_id, 0, deadline)
      if not c then return nil, cerr, ccode, ckcode, cretr end
      -- v5: the group coordinator adds the offsets to the transaction (v2
      -- only); v6 names the topics by id, where the metadata has them all
      -- (an UNKNOWN_TOPIC_ID answer forgets them: the retry goes by name)
      local ids = v2 and client:topic_ids(offsets)
      for _, t in ipairs(topics) do t.topic_id = ids and ids[t.name] end
      local v
      v, cerr, ccode = c:version(API.TxnOffsetCommit, v2 and (ids and 6 or 5) or 4)
      if not v then return nil, cerr, ccode end
      if v2 and v < 5 then
        return nil, ("%s: TxnOffsetCommit v%d cannot add offsets to a transaction v2 (v5+)"):format(c:name(), v),
          "fatal", nil, false
      end
      local resp
      resp, cerr, ccode = c:request(API.TxnOffsetCommit, { transactional_id = p.transactional_id,
        group_id = gm.group_id, producer_id = p.producer_id, producer_epoch = p.producer_epoch,
        generation_id_or_member_epoch = gm.generation_id or -1, member_id = gm.member_id or "",
        group_instance_id = gm.group_instance_id, topics = topics }, { version = v, deadline = deadline })
      if not resp then return nil, cerr, ccode end
      for _, tr in ipairs(resp.topics or {}) do
        local name = tr.name
        for _, t in ipairs(topics) do
          if not name and t.topic_id == tr.topic_id then name = t.name end
        end
        for _, pr in ipairs(tr.partitions or {}) do
          if pr.error_code ~= errors.NONE then
            if pr.error_code == errors.UNKNOWN_TOPIC_ID then client:invalidate(name) end
            return nil, self:kafka_error(("TxnOffsetCommit %s %s/%d"):format(gm.group_id, tostring(name),
              pr.partition_index), pr.error_code)
          end
        end
      end
      return true
    end)
  end
  if not ok then
    local fatal = code == "fenced" or code == "fatal"
    p:_txn_error(fatal and "fatal_error" or "abortable_error", err, fatal and code or "abortable", kcode)
    return nil, err, fatal and code or "abortable", kcode
  end
  return true
end

-- EndTxn (committed or not; none when nothing was added), then the
-- protocol of the next transaction is read again. v2: EndTxn v5 bumps the
-- epoch every time and its answer has the id and epoch to use. v1: after
-- an abort whose producer state is in doubt (a message given up after it
-- was sent), and before a move to v2, the epoch is bumped (InitProducerId
-- with the current id and epoch, KIP-360): after the EndTxn, as Kafka's
-- Java client does - an InitProducerId while the transaction is open
-- aborts it with a new epoch, and its own retry is then refused as fenced.
function _M:end_txn(commit)
  local p = self.p
  local idemp = p.idem
  local touched = self.has_offsets or next(self.parts) ~= nil
  local v2 = self.version == 2
  local ok, err, code, kcode = true, nil, nil, nil
  if touched then
    ok, err, code, kcode = self:call(API.EndTxn, function(v)
      if v2 and v < 5 then
        return nil, "the transaction coordinator's EndTxn (v" .. v .. ") cannot end a transaction v2 (v5+)", "fatal"
      end
      return { transactional_id = p.transactional_id, producer_id = p.producer_id,
        producer_epoch = p.producer_epoch, committed = commit }
    end, v2 and 5 or 4, self:top_error((commit and "EndTxn (commit) " or "EndTxn (abort) ") .. p.transactional_id))
    -- v5: the next transaction's producer id and epoch (-1 before v5)
    if ok and ok.producer_id and ok.producer_id >= 0 then idemp:reset_sequences(ok.producer_id, ok.producer_epoch) end
  end
  local next_v = ok and self:cluster_version()
  if ok and not v2 and ((not commit and idemp.need_bump) or next_v == 2) then
    ok, err, code, kcode = self:call(API.InitProducerId, function(v)
      if v < 3 then
        return nil, "the transaction coordinator's InitProducerId (v" .. v .. ") cannot bump the epoch (v3+, Kafka "
          .. "2.5+), which a message in doubt needs", "fatal"
      end
      return { transactional_id = p.transactional_id, transaction_timeout_ms = p.transaction_timeout_ms,
        producer_id = p.producer_id, producer_epoch = p.producer_epoch }
    end, nil, self:top_error("InitProducerId (epoch bump) " .. p.transactional_id))
    if ok then idemp:reset_sequences(ok.producer_id, ok.producer_epoch) end
  end
  if not ok then
    if code == "fenced" or code == "fatal" then p:_txn_error("fatal_error", err, code, kcode) end
    return nil, err, code, kcode
  end
  self.version = next_v
  p.txn_state, p.txn_error, self.parts, self.has_offsets = "ready", nil, {}, false
  if touched then self.ended = p.client.now() end
  return true
end

-- commit_transaction([timeout_ms]) (see the producer's)
function _M:commit(timeout_ms)
  local p = self.p
  local ok, err, code, kcode = self:guard("commit_transaction", "in_transaction", "committing")
  if not ok then return nil, err, code, kcode end
  p.sink:flush(timeout_ms)
  if p.txn_state ~= "in_transaction" and p.txn_state ~= "committing" then
    local e = p.txn_error
    return nil, e.err, e.code, e.kcode
  end
  p.txn_state = "committing"
  return self:end_txn(true)
end

-- abort_transaction([timeout_ms]) (see the producer's)
function _M:abort(timeout_ms)
  local p = self.p
  local sink = p.sink
  local ok, err, code, kcode = self:guard("abort_transaction", "in_transaction", "abortable_error", "aborting")
  if not ok then return nil, err, code, kcode end
  p.txn_state = "aborting"
  sink:fail_queued("transaction aborted", "abortable")
  local client = p.client
  local deadline = timeout_ms and client.now() + timeout_ms or math.huge
  while sink.in_flight[1] and client.now() < deadline do sink:wait_one(deadline) end
  if sink.in_flight[1] then sink:abandon() end
  return self:end_txn(false)
end

return _M
