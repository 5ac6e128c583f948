--- kafka.errors: every Kafka error code with its name, whether a retry can
-- succeed, and a short description. One table; everything else maps
-- through it.
--   errors[6]                      --> {code=6, name="NOT_LEADER_OR_FOLLOWER", retriable=true, message=...}
--   errors.NOT_LEADER_OR_FOLLOWER  --> 6
--   errors.info(code)              --> the entry, or a synthetic one for unknown codes
-- @module kafka.errors
-- @field codes the library's own error codes (the third value of `nil, message, code`):
-- code -> its meaning, as docs/codec.md's table lists them
local ipairs, setmetatable, tostring, type = ipairs, setmetatable, tostring, type

local _M = {}

-- { code, name, retriable, message }
local list = {
  { -1, "UNKNOWN_SERVER_ERROR", false, "unexpected error on the server" },
  { 0, "NONE", false, "no error" },
  { 1, "OFFSET_OUT_OF_RANGE", false, "offset outside the range the broker keeps" },
  { 2, "CORRUPT_MESSAGE", true, "message failed its CRC, size or key checks" },
  { 3, "UNKNOWN_TOPIC_OR_PARTITION", true, "this broker does not host the topic-partition" },
  { 4, "INVALID_FETCH_SIZE", false, "invalid fetch size" },
  { 5, "LEADER_NOT_AVAILABLE", true, "no leader for the partition (election in progress)" },
  { 6, "NOT_LEADER_OR_FOLLOWER", true, "this broker is not the leader (or a replica) of the partition" },
  { 7, "REQUEST_TIMED_OUT", true, "the request timed out on the broker" },
  { 8, "BROKER_NOT_AVAILABLE", false, "the broker is not available" },
  { 9, "REPLICA_NOT_AVAILABLE", true, "the replica is not available" },
  { 10, "MESSAGE_TOO_LARGE", false, "a message is larger than the broker accepts" },
  { 11, "STALE_CONTROLLER_EPOCH", false, "the controller moved" },
  { 12, "OFFSET_METADATA_TOO_LARGE", false, "offset commit metadata too large" },
  { 13, "NETWORK_EXCEPTION", true, "the server disconnected before answering" },
  { 14, "COORDINATOR_LOAD_IN_PROGRESS", true, "the coordinator is still loading" },
  { 15, "COORDINATOR_NOT_AVAILABLE", true, "the coordinator is not available" },
  { 16, "NOT_COORDINATOR", true, "this broker is not the coordinator" },
  { 17, "INVALID_TOPIC_EXCEPTION", false, "invalid topic" },
  { 18, "RECORD_LIST_TOO_LARGE", false, "batch larger than the segment size" },
  { 19, "NOT_ENOUGH_REPLICAS", true, "fewer in-sync replicas than required" },
  { 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", true, "written, but to fewer in-sync replicas than required" },
  { 21, "INVALID_REQUIRED_ACKS", false, "invalid acks value" },
  { 22, "ILLEGAL_GENERATION", false, "invalid group generation id" },
  { 23, "INCONSISTENT_GROUP_PROTOCOL", false, "group protocols incompatible with the group's" },
  { 24, "INVALID_GROUP_ID", false, "invalid group id" },
  { 25, "UNKNOWN_MEMBER_ID", false, "the coordinator does not know this member" },
  { 26, "INVALID_SESSION_TIMEOUT", false, "session timeout outside the broker's allowed range" },
  { 27, "REBALANCE_IN_PROGRESS", false, "the group is rebalancing: rejoin" },
  { 28, "INVALID_COMMIT_OFFSET_SIZE", false, "invalid offset commit size" },
  { 29, "TOPIC_AUTHORIZATION_FAILED", false, "topic authorization failed" },
  { 30, "GROUP_AUTHORIZATION_FAILED", false, "group authorization failed" },
  { 31, "CLUSTER_AUTHORIZATION_FAILED", false, "cluster authorization failed" },
  { 32, "INVALID_TIMESTAMP", false, "timestamp out of the accepted range" },
  { 33, "UNSUPPORTED_SASL_MECHANISM", false, "SASL mechanism not supported" },
  { 34, "ILLEGAL_SASL_STATE", false, "request not valid in the current SASL state" },
  { 35, "UNSUPPORTED_VERSION", false, "api version not supported" },
  { 36, "TOPIC_ALREADY_EXISTS", false, "topic already exists" },
  { 37, "INVALID_PARTITIONS", false, "invalid number of partitions" },
  { 38, "INVALID_REPLICATION_FACTOR", false, "invalid replication factor" },
  { 39, "INVALID_REPLICA_ASSIGNMENT", false, "invalid replica assignment" },
  { 40, "INVALID_CONFIG", false, "invalid configuration" },
  { 41, "NOT_CONTROLLER", true, "this broker is not the controller" },
  { 42, "INVALID_REQUEST", false, "malformed request or incompatible broker" },
  { 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", false, "the broker's message format does not support this request" },
  { 44, "POLICY_VIOLATION", false, "request violates the configured policy" },
  { 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, "out of order sequence number" },
  { 46, "DUPLICATE_SEQUENCE_NUMBER", false, "duplicate sequence number" },
  { 47, "INVALID_PRODUCER_EPOCH", false, "producer epoch is old" },
  { 48, "INVALID_TXN_STATE", false, "transactional operation in an invalid state" },
  { 49, "INVALID_PRODUCER_ID_MAPPING", false, "producer id not assigned to this transactional id" },
  { 50, "INVALID_TRANSACTION_TIMEOUT", false, "transaction timeout larger than allowed" },
  { 51, "CONCURRENT_TRANSACTIONS", true, "another operation on the transaction is in progress" },
  { 52, "TRANSACTION_COORDINATOR_FENCED", false, "transaction coordinator fenced" },
  { 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false, "transactional id authorization failed" },
  { 54, "SECURITY_DISABLED", false, "security features are disabled" },
  { 55, "OPERATION_NOT_ATTEMPTED", false, "operation not attempted" },
  { 56, "KAFKA_STORAGE_ERROR", true, "disk error on the broker" },
  { 57, "LOG_DIR_NOT_FOUND", false, "log directory not found" },
  { 58, "SASL_AUTHENTICATION_FAILED", false, "SASL authentication failed" },
  { 59, "UNKNOWN_PRODUCER_ID", false, "the broker has no state for this producer id" },
  { 60, "REASSIGNMENT_IN_PROGRESS", false, "partition reassignment in progress" },
  { 61, "DELEGATION_TOKEN_AUTH_DISABLED", false, "delegation tokens disabled" },
  { 62, "DELEGATION_TOKEN_NOT_FOUND", false, "delegation token not found" },
  { 63, "DELEGATION_TOKEN_OWNER_MISMATCH", false, "delegation token owner mismatch" },
  { 64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", false, "delegation token requests not allowed here" },
  { 65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", false, "delegation token authorization failed" },
  { 66, "DELEGATION_TOKEN_EXPIRED", false, "delegation token expired" },
  { 67, "INVALID_PRINCIPAL_TYPE", false, "principal type not supported" },
  { 68, "NON_EMPTY_GROUP", false, "the group is not empty" },
  { 69, "GROUP_ID_NOT_FOUND", false, "group id not found" },
  { 70, "FETCH_SESSION_ID_NOT_FOUND", true, "fetch session id not found" },
  { 71, "INVALID_FETCH_SESSION_EPOCH", true, "invalid fetch session epoch" },
  { 72, "LISTENER_NOT_FOUND", true, "no matching listener on the leader" },
  { 73, "TOPIC_DELETION_DISABLED", false, "topic deletion is disabled" },
  { 74, "FENCED_LEADER_EPOCH", true, "leader epoch older than the broker's" },
  { 75, "UNKNOWN_LEADER_EPOCH", true, "leader epoch newer than the broker's" },
  { 76, "UNSUPPORTED_COMPRESSION_TYPE", false, "compression type not supported for this request" },
  { 77, "STALE_BROKER_EPOCH", false, "broker epoch changed" },
  { 78, "OFFSET_NOT_AVAILABLE", true, "offset not yet available after a leader election" },
  { 79, "MEMBER_ID_REQUIRED", false, "join again with the member id given" },
  { 80, "PREFERRED_LEADER_NOT_AVAILABLE", true, "preferred leader not available" },
  { 81, "GROUP_MAX_SIZE_REACHED", false, "the group is full" },
  { 82, "FENCED_INSTANCE_ID", false, "static member fenced by another with the same instance id" },
  { 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", true, "no eligible leaders" },
  { 84, "ELECTION_NOT_NEEDED", true, "leader election not needed" },
  { 85, "NO_REASSIGNMENT_IN_PROGRESS", false, "no reassignment in progress" },
  { 86, "GROUP_SUBSCRIBED_TO_TOPIC", false, "the group is subscribed to the topic" },
  { 87, "INVALID_RECORD", false, "record rejected by broker validation" },
  { 88, "UNSTABLE_OFFSET_COMMIT", true, "unstable offsets pending" },
  { 89, "THROTTLING_QUOTA_EXCEEDED", true, "throttling quota exceeded" },
  { 90, "PRODUCER_FENCED", false, "a newer producer with the same transactional id exists" },
  { 91, "RESOURCE_NOT_FOUND", false, "resource not found" },
  { 92, "DUPLICATE_RESOURCE", false, "resource named twice" },
  { 93, "UNACCEPTABLE_CREDENTIAL", false, "credential not acceptable" },
  { 94, "INCONSISTENT_VOTER_SET", false, "inconsistent voter set" },
  { 95, "INVALID_UPDATE_VERSION", false, "invalid update version" },
  { 96, "FEATURE_UPDATE_FAILED", false, "feature update failed" },
  { 97, "PRINCIPAL_DESERIALIZATION_FAILURE", false, "principal deserialization failed" },
  { 98, "SNAPSHOT_NOT_FOUND", false, "snapshot not found" },
  { 99, "POSITION_OUT_OF_RANGE", false, "snapshot position out of range" },
  { 100, "UNKNOWN_TOPIC_ID", true, "this broker does not host the topic id" },
  { 101, "DUPLICATE_BROKER_REGISTRATION", false, "broker id already in use" },
  { 102, "BROKER_ID_NOT_REGISTERED", false, "broker id not registered" },
  { 103, "INCONSISTENT_TOPIC_ID", true, "topic id does not match the log's" },
  { 104, "INCONSISTENT_CLUSTER_ID", false, "cluster id does not match" },
  { 105, "TRANSACTIONAL_ID_NOT_FOUND", false, "transactional id not found" },
  { 106, "FETCH_SESSION_TOPIC_ID_ERROR", true, "inconsistent topic id use in the fetch session" },
  { 107, "INELIGIBLE_REPLICA", false, "ineligible replica in the new ISR" },
  { 108, "NEW_LEADER_ELECTED", false, "a new leader was elected" },
  { 109, "OFFSET_MOVED_TO_TIERED_STORAGE", false, "offset moved to tiered storage" },
  { 110, "FENCED_MEMBER_EPOCH", false, "member epoch fenced: rejoin" },
  { 111, "UNRELEASED_INSTANCE_ID", false, "instance id still in use" },
  { 112, "UNSUPPORTED_ASSIGNOR", false, "assignor not supported" },
  { 113, "STALE_MEMBER_EPOCH", false, "member epoch is stale" },
  { 114, "MISMATCHED_ENDPOINT_TYPE", false, "wrong endpoint type" },
  { 115, "UNSUPPORTED_ENDPOINT_TYPE", false, "endpoint type not supported" },
  { 116, "UNKNOWN_CONTROLLER_ID", false, "unknown controller id" },
  { 117, "UNKNOWN_SUBSCRIPTION_ID", false, "unknown telemetry subscription id" },
  { 118, "TELEMETRY_TOO_LARGE", false, "telemetry push too large" },
  { 119, "INVALID_REGISTRATION", false, "invalid broker registration" },
  { 120, "TRANSACTION_ABORTABLE", false, "transaction failed: abort it to go on" },
  { 121, "INVALID_RECORD_STATE", false, "invalid record state" },
  { 122, "SHARE_SESSION_NOT_FOUND", true, "share session not found" },
  { 123, "INVALID_SHARE_SESSION_EPOCH", true, "invalid share session epoch" },
  { 124, "FENCED_STATE_EPOCH", false, "share group state epoch fenced" },
  { 125, "INVALID_VOTER_KEY", false, "invalid voter key" },
  { 126, "DUPLICATE_VOTER", false, "duplicate voter" },
  { 127, "VOTER_NOT_FOUND", false, "voter not found" },
  { 128, "INVALID_REGULAR_EXPRESSION", false, "invalid regular expression" },
  { 129, "REBOOTSTRAP_REQUIRED", false, "client metadata is stale: rebootstrap" },
  { 130, "STREAMS_INVALID_TOPOLOGY", false, "the supplied streams topology is invalid" },
  { 131, "STREAMS_INVALID_TOPOLOGY_EPOCH", false, "the supplied streams topology epoch is invalid" },
  { 132, "STREAMS_TOPOLOGY_FENCED", false, "the supplied streams topology epoch is outdated" },
  { 133, "SHARE_SESSION_LIMIT_REACHED", true, "the limit of share sessions has been reached" },
  { 134, "GROUP_DELETION_FAILED", false, "DeleteGroups could not complete (see the per-group error message)" },
  { 135, "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", false,
    "the broker could not process the topology description update (see the error message)" },
  { 136, "CONTROLLER_ID_NOT_REGISTERED", false, "the given controller id was not registered" },
}

for _, e in ipairs(list) do
  local entry = { code = e[1], name = e[2], retriable = e[3], message = e[4] }
  _M[e[1]] = entry
  _M[e[2]] = e[1]
end

local unknown_cache = setmetatable({}, { __mode = "v" })

-- The library's own error codes, the third value of `nil, message, code`
-- (Kafka's codes above are data inside responses): one list,
-- docs/codec.md's table of error codes shows the same
-- (spec/error_codes_spec.lua checks both against each other and against
-- the code strings in lua/kafka/).
_M.codes = {
  -- the codec (kafka.proto)
  incomplete = "the frame is shorter than its size prefix: read more",
  corrupt = "bytes that cannot be valid (a bad batch, a broken frame, a corrupt fetch)",
  unsupported = "an api or version one side does not have",
  limit = "a configured limit: decompressed size, receive_message_max_bytes",
  nomem = "out of memory",
  -- I/O
  network = "connect, send or receive failed; the connection is replaced",
  timeout = "a deadline passed: the request's own, or the caller's (flush, poll, default_api_timeout_ms)",
  protocol = "a peer broke the protocol: wrong correlation id, undecodable frame, missing result",
  closed = "the connection was closed while the request was in flight",
  backoff = "the broker is in its reconnect backoff: nothing was tried",
  auth = "SASL authentication refused (the message names the mechanism and the broker's text)",
  ssl = "TLS failed: untrusted certificate, host name mismatch, missing client certificate, TLS/plaintext mix-up",
  -- Kafka errors and cluster state
  kafka = "a non-retriable Kafka error (the Kafka error code is the fourth value)",
  retriable = "a retriable Kafka error that outlived its retries",
  metadata = "a broker id the metadata does not list",
  unknown_topic = "the cluster does not have the topic",
  unknown_partition = "the topic does not have the partition",
  topic_recreated = "a poll error entry: the partition's topic was deleted and created again (a new topic id);"
    .. " its position was reset per auto_offset_reset (or, with \"error\", waits for a seek)",
  rebootstrap = "the broker is not the node of the cluster the metadata named (KIP-1242), or the cluster"
    .. " asked the client to start over from its bootstrap brokers (retried from them)",
  -- producer and consumer
  too_large = "a message larger than max_message_bytes",
  buffer_full = "the producer's buffer is full (flush_on_full = false, or in nginx)",
  crashed = "the background sender failed again and again (a bug, logged): its buffered messages fail",
  invalid = "an argument the operation cannot use now (a partition not assigned, 'committed' without a group_id)",
  offset_out_of_range = "the position is outside the log and auto_offset_reset is \"error\"",
  no_offset = "no committed offset to start from",
  -- idempotence and transactions
  fenced = "fatal: a newer producer with the same transactional id took over, or another group member has"
    .. " this group_instance_id",
  fatal = "fatal producer error (authorization, invalid transaction state, an epoch that cannot be bumped)",
  abortable = "the transaction must be aborted, then the producer goes on",
  -- consumer groups
  rebalance = "a commit the group refused: partition not owned, old generation or epoch, rebalance in progress",
  group = "a fatal consumer group error (the Kafka code as the fourth value)",
  callback = "an error raised by a rebalance callback (in poll's error list)",
  pending = "a group member's request still in flight at the poll's deadline (internal: a later poll takes"
    .. " the answer; no public call returns it)",
  internal = "a bug in lua-kafka: please report it",
}

--- The entry of any Kafka error code: unknown codes get a synthetic,
-- non-retriable entry, so callers never index nil.
-- @tparam integer code a Kafka error code (the error_code of a response)
-- @treturn table `{code=, name=, retriable=, message=}`
-- @usage local e = errors.info(resp.error_code)
-- if e.retriable then ... end
function _M.info(code)
  local e = _M[code]
  if type(e) == "table" then return e end
  e = unknown_cache[code]
  if not e then
    e = { code = code, name = "UNKNOWN_ERROR_" .. tostring(code), retriable = false,
          message = "error code " .. tostring(code) .. " unknown to this client" }
    unknown_cache[code] = e
  end
  return e
end

--- Whether a retry can succeed after this Kafka error code.
-- @tparam integer code a Kafka error code
-- @treturn boolean
function _M.is_retriable(code)
  return _M.info(code).retriable
end

return _M
