-- kafka.options: every option of the library, declared once (as
-- librdkafka's rdkafka_conf.c holds one table of every property): name,
-- type, default, range, the Kafka or librdkafka name it mirrors, one line
-- of doc. kafka.check validates from these lists; tools/options-doc.lua
-- makes docs/options.md from them (spec/options_doc_spec.lua fails when
-- that file is stale). The rules between options (one needs another) are
-- the functions below the lists.
--
--   local o = options.client(opts)            -- client.new: values, bootstrap brokers, security settings
--   local o = options.consumer(opts, client)  -- consumer.new (defaults may come from the client)
--   local o = options.producer(opts, client)  -- producer.new
local check = require "kafka.check"
local ksocket = require "kafka.socket"

local error, type, tostring, tonumber, ipairs, pairs = error, type, tostring, tonumber, ipairs, pairs
local math, io = math, io

local _M = {}

---------------------------------------------------------------- client

local PORT_TEXT = '"host:port" (or "host", port 9092) with a port in 1..65535'

-- A bootstrap broker: "host:port", "host" (port 9092), "[v6]:port", a
-- bare IPv6 address, or {host=, port=} -> {host=, port=} | nil
local function parse_broker(b)
  local host, port
  if type(b) == "table" then
    host, port = b.host or b[1], b.port or b[2] or 9092
    if type(port) == "string" and port:match("^%d+$") then port = tonumber(port) end
  elseif type(b) == "string" then
    if b:sub(1, 1) == "[" then
      local rest
      host, rest = b:match("^%[([^%]]+)%](.*)$")
      if rest == "" then port = 9092 elseif rest then port = tonumber(rest:match("^:(%d+)$")) end
    else
      local _, colons = b:gsub(":", "")
      if colons == 0 then
        host, port = b, 9092
      elseif colons == 1 then
        host, port = b:match("^([^:]+):(%d+)$")
        port = tonumber(port)
      else
        host, port = b, 9092 -- a bare IPv6 address
      end
    end
  end
  if type(host) ~= "string" or host == "" or not check.is_int(port) or port < 1 or port > 65535 then return nil end
  return { host = host, port = port }
end

local CLIENT = check.declare("kafka.client.new", {
  { name = "brokers", type = { "string", "table" }, kafka = "bootstrap.servers",
    doc = 'required: the bootstrap brokers, a list or a comma-separated string of "host:port", "[ipv6]:port", '
      .. '"host" (port 9092) or {host=, port=}' },
  { name = "client_id", type = "string", default = "lua-kafka", kafka = "client.id",
    doc = "sent with every request (the brokers' logs and quotas)" },
  { name = "request_timeout_ms", type = "int", default = 30000, min = 1, kafka = "request.timeout.ms",
    doc = "each request's own deadline, plus the broker-side wait it asks for" },
  { name = "connect_timeout_ms", type = "int", default = 10000, min = 1, kafka = "socket.connection.setup.timeout.ms",
    doc = "a new connection's TCP connect, and its TLS handshake" },
  { name = "default_api_timeout_ms", type = "int", default = 60000, min = 1, kafka = "default.api.timeout.ms",
    doc = "the deadline of metadata, list_offsets, coordinator, group calls, commit and committed" },
  { name = "metadata_max_age_ms", type = "int", default = 300000, min = 0, kafka = "metadata.max.age.ms",
    doc = "metadata older than this is refreshed before use" },
  { name = "metadata_recovery_strategy", type = "oneof", values = { "rebootstrap", "none" }, default = "rebootstrap",
    kafka = "metadata.recovery.strategy", doc = '"rebootstrap": when no broker the metadata lists answers, or a'
      .. ' broker says REBOOTSTRAP_REQUIRED (it is not the node of the cluster the metadata named: KIP-1242), the'
      .. ' client forgets the cluster and starts over from brokers (KIP-899, KIP-1102); "none": brokers is used'
      .. ' only until the first metadata' },
  { name = "retry_backoff_ms", type = "int", default = 100, min = 0, kafka = "retry.backoff.ms",
    doc = "the wait before a retry, doubling per attempt" },
  { name = "retry_backoff_max_ms", type = "int", min = 0, kafka = "retry.backoff.max.ms",
    default = function(v) return math.max(1000, v.retry_backoff_ms) end,
    default_doc = "1000 (or retry_backoff_ms when larger)", doc = "the cap of the doubling retry wait" },
  { name = "max_retries", type = "int", min = 0,
    doc = "nil: retried until the deadline; a number caps the attempts" },
  { name = "reconnect_backoff_ms", type = "int", default = 100, min = 0, kafka = "reconnect.backoff.ms",
    doc = "a broker whose connect failed is not tried again before this, doubling per failed connect in a row" },
  { name = "reconnect_backoff_max_ms", type = "int", min = 0, kafka = "reconnect.backoff.max.ms",
    default = function(v) return math.max(1000, v.reconnect_backoff_ms) end,
    default_doc = "1000 (or reconnect_backoff_ms when larger)", doc = "the cap of the reconnect backoff" },
  { name = "receive_message_max_bytes", type = "int", default = 100000000, min = 1,
    kafka = "receive.message.max.bytes", librdkafka = true,
    doc = "a response frame larger than this is refused on its size prefix, before anything is allocated" },
  { name = "allow_auto_topic_creation", type = "bool", default = true, kafka = "allow.auto.create.topics",
    doc = "Metadata requests let the broker create unknown topics" },
  { name = "api_versions", type = "bool", default = true,
    doc = "negotiate versions with ApiVersions (false: none sent, the fixed versions of brokers before 0.10)" },
  { name = "max_versions", type = "table", doc = "{[api name or key] = version}: caps on the negotiated versions" },
  { name = "socket", type = "function",
    doc = "a socket factory (cosocket interface); default: nginx's cosockets inside nginx, else LuaSocket" },
  { name = "now", type = "function", doc = "an injected clock in ms (tests); given with sleep" },
  { name = "sleep", type = "function", doc = "sleep(ms) for the injected clock" },
  -- security (the rules between them: security() below)
  { name = "security_protocol", rules = true, type = "string", default = "PLAINTEXT", kafka = "security.protocol",
    doc = '"PLAINTEXT", "SSL", "SASL_PLAINTEXT" or "SASL_SSL" (any case)' },
  { name = "sasl_mechanism", rules = true, type = "string", kafka = "sasl.mechanism",
    doc = '"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512" or "OAUTHBEARER"; required with SASL' },
  { name = "sasl_username", rules = true, type = "string", kafka = "sasl.username", librdkafka = true, doc = "PLAIN and SCRAM" },
  { name = "sasl_password", rules = true, type = "string", kafka = "sasl.password", librdkafka = true, doc = "PLAIN and SCRAM" },
  { name = "sasl_oauthbearer_token", rules = true, type = "function",
    doc = "OAUTHBEARER: function() return token, lifetime_ms [, extensions] end, called again at 80% of lifetime_ms" },
  { name = "ssl_ca_location", rules = true, type = "string", kafka = "ssl.ca.location", librdkafka = true,
    doc = "CA file or directory (PEM); default: the system's bundle" },
  { name = "ssl_certificate_location", rules = true, type = "string", kafka = "ssl.certificate.location", librdkafka = true,
    doc = "mutual TLS: the client certificate (PEM); needs ssl_key_location" },
  { name = "ssl_key_location", rules = true, type = "string", kafka = "ssl.key.location", librdkafka = true,
    doc = "mutual TLS: the client certificate's key (PEM)" },
  { name = "ssl_key_password", rules = true, type = "string", kafka = "ssl.key.password", librdkafka = true,
    doc = "the key's password when it is encrypted" },
  { name = "ssl_endpoint_identification", rules = true, type = "string", default = "https",
    kafka = "ssl.endpoint.identification.algorithm",
    doc = '"https": the broker\'s certificate must name the host connected to; "none": chain verified, name not' },
  { name = "enable_ssl_certificate_verification", rules = true, type = "bool", default = true,
    kafka = "enable.ssl.certificate.verification", librdkafka = true,
    doc = "false: the broker's certificate is not verified at all (encrypted, not authenticated)" },
  { name = "ssl_transport", rules = true, type = "oneof", values = { "openssl", "luasec" }, default = "openssl",
    doc = '"openssl": TLS in C on luasocket\'s descriptor, records decrypted straight into the response frames;'
      .. ' "luasec": through LuaSec (the earlier transport); nginx\'s cosockets do their own TLS either way' },
})
CLIENT.intro = "The client's options; consumer.new and producer.new take them too, in place of a client. " ..
  "The security options (security_protocol, sasl_*, ssl_*, enable_ssl_certificate_verification) are " ..
  "checked by their rules: each only with a protocol that uses it, a certificate with its key, readable " ..
  "files, what the mechanism needs."
_M.CLIENT = CLIENT

local WHERE = "kafka.client.new"

local PROTOCOLS = { PLAINTEXT = { false, false }, SSL = { true, false }, SASL_PLAINTEXT = { false, true },
                    SASL_SSL = { true, true } }
local MECHANISMS = { PLAIN = true, ["SCRAM-SHA-256"] = true, ["SCRAM-SHA-512"] = true, OAUTHBEARER = true }
local KNOWN = {}
for _, d in ipairs(CLIENT) do KNOWN[d.name] = true end

local function fail_opt(name, msg) error(WHERE .. ": " .. name .. " " .. msg, 5) end

local function opt_string(opts, name)
  local v = opts[name]
  if v ~= nil and (type(v) ~= "string" or v == "") then fail_opt(name, "must be a non-empty string") end
  return v
end

local function opt_file(opts, name)
  local v = opt_string(opts, name)
  if v then
    local f, err = io.open(v, "rb")
    if not f then fail_opt(name, "cannot be read: " .. tostring(err)) end
    f:close()
  end
  return v
end

-- security(opts) -> the TLS and SASL settings every connection of a client
-- uses ({protocol, now, tls = {ca, certificate, key, key_password,
-- verify_host}, sasl = {mechanism, username, password | token_fn}}), nil
-- for PLAINTEXT. The options' rules: each ssl_*/sasl_* option only with a
-- protocol that uses it, a certificate with its key, readable files, what
-- each mechanism needs.
local function security(opts)
  local proto_name = opts.security_protocol
  if proto_name ~= nil and type(proto_name) ~= "string" then fail_opt("security_protocol", "must be a string") end
  proto_name = proto_name and proto_name:upper() or "PLAINTEXT"
  local kind = PROTOCOLS[proto_name]
  if not kind then
    fail_opt("security_protocol", ("must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (got %q)"):format(proto_name))
  end
  local use_tls, use_sasl = kind[1], kind[2]
  local verify = opts.enable_ssl_certificate_verification
  if verify ~= nil and type(verify) ~= "boolean" then fail_opt("enable_ssl_certificate_verification", "must be a boolean") end
  if verify ~= nil and not use_tls then
    fail_opt("enable_ssl_certificate_verification", "is set but security_protocol is " .. proto_name
      .. " (SSL or SASL_SSL use it)")
  end
  for k in pairs(opts) do
    if type(k) == "string" then
      if (k:match("^sasl_") or k:match("^ssl_")) and not KNOWN[k] then
        fail_opt(k, "is not an option (a typo?)")
      elseif k:match("^sasl_") and not use_sasl then
        fail_opt(k, "is set but security_protocol is " .. proto_name .. " (SASL_PLAINTEXT or SASL_SSL use it)")
      elseif k:match("^ssl_") and not use_tls then
        fail_opt(k, "is set but security_protocol is " .. proto_name .. " (SSL or SASL_SSL use it)")
      end
    end
  end
  if not use_tls and not use_sasl then return nil end
  local sec = { protocol = proto_name }
  sec.now = ksocket.clock(opts)
  if use_tls then
    local tls = { protocol = proto_name }
    tls.ca = opt_file(opts, "ssl_ca_location")
    tls.certificate = opt_file(opts, "ssl_certificate_location")
    tls.key = opt_file(opts, "ssl_key_location")
    tls.key_password = opt_string(opts, "ssl_key_password")
    if (tls.certificate == nil) ~= (tls.key == nil) then
      fail_opt(tls.certificate and "ssl_key_location" or "ssl_certificate_location",
        "is required with " .. (tls.certificate and "ssl_certificate_location" or "ssl_key_location"))
    end
    if tls.key_password and not tls.key then fail_opt("ssl_key_password", "needs ssl_key_location") end
    local ident = opts.ssl_endpoint_identification
    if ident == nil then ident = "https" end
    if type(ident) ~= "string" then fail_opt("ssl_endpoint_identification", 'must be "https" or "none"') end
    ident = ident:lower()
    if ident ~= "https" and ident ~= "none" and ident ~= "" then
      fail_opt("ssl_endpoint_identification", ('must be "https" or "none" (got %q)'):format(ident))
    end
    tls.verify_chain = verify ~= false
    tls.verify_host = ident == "https" and tls.verify_chain
    local transport = opts.ssl_transport
    if transport ~= nil and transport ~= "openssl" and transport ~= "luasec" then
      fail_opt("ssl_transport", ('must be "openssl" or "luasec" (got %s)'):format(tostring(transport)))
    end
    tls.transport = transport or "openssl"
    sec.tls = tls
  end
  if use_sasl then
    local mech = opts.sasl_mechanism
    if mech == nil then
      fail_opt("sasl_mechanism", "is required with " .. proto_name .. " (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
    end
    if type(mech) ~= "string" or not MECHANISMS[mech:upper()] then
      fail_opt("sasl_mechanism", ("must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (got %s)"):format(
        tostring(mech)))
    end
    mech = mech:upper()
    local s = { mechanism = mech }
    if mech == "OAUTHBEARER" then
      if type(opts.sasl_oauthbearer_token) ~= "function" then
        fail_opt("sasl_oauthbearer_token", "must be a function returning token, lifetime_ms [, extensions]")
      end
      if opts.sasl_username ~= nil or opts.sasl_password ~= nil then
        fail_opt(opts.sasl_username ~= nil and "sasl_username" or "sasl_password",
          "is not used by OAUTHBEARER (sasl_oauthbearer_token gives the token)")
      end
      s.token_fn = opts.sasl_oauthbearer_token
    else
      if opts.sasl_oauthbearer_token ~= nil then
        fail_opt("sasl_oauthbearer_token", "is only used with sasl_mechanism OAUTHBEARER")
      end
      if type(opts.sasl_username) ~= "string" or opts.sasl_username == "" then
        fail_opt("sasl_username", "is required with " .. mech .. " (a non-empty string)")
      end
      if type(opts.sasl_password) ~= "string" then
        fail_opt("sasl_password", "is required with " .. mech .. " (a string)")
      end
      s.username, s.password = opts.sasl_username, opts.sasl_password
    end
    sec.sasl = s
  end
  return sec
end
_M.security = security

-- client(opts) -> values, bootstrap ({host=, port=} list), security
-- settings (nil for PLAINTEXT); raises on misuse. The security options
-- are checked by security() (rules = true), the others by their
-- declarations.
function _M.client(opts)
  opts = check.opts(WHERE, opts)
  local list = opts.brokers
  if type(list) == "string" then
    local t = {}
    for b in list:gmatch("[^,%s]+") do t[#t + 1] = b end
    list = t
  end
  if type(list) ~= "table" or #list == 0 then error(WHERE .. ": brokers is required", 3) end
  local bootstrap = {}
  for i, b in ipairs(list) do
    bootstrap[i] = parse_broker(b)
    if not bootstrap[i] then error(("%s: brokers[%d] must be %s (got %s)"):format(WHERE, i, PORT_TEXT,
      check.show(b)), 3) end
  end
  local sec = security(opts)
  local values = check.options(CLIENT, opts, nil, 2)
  return values, bootstrap, sec
end
---------------------------------------------------------------- consumer

local STRATEGIES = { "range", "roundrobin", "cooperative-sticky" }

local CONSUMER = check.declare("kafka.consumer.new", {
  { name = "group_id", type = "string", kafka = "group.id",
    doc = "the consumer group (subscribe, commit, committed); nil: assign() only" },
  { name = "auto_offset_reset", type = "oneof", values = { "latest", "earliest", "error" }, default = "latest",
    kafka = "auto.offset.reset", doc = "where a partition without a committed (or with an out of range) offset starts" },
  { name = "fetch_max_wait_ms", type = "int", default = 500, min = 0, kafka = "fetch.max.wait.ms",
    doc = "how long a broker may hold a Fetch for fetch_min_bytes; also poll's default timeout" },
  { name = "fetch_min_bytes", type = "int", default = 1, min = 0, kafka = "fetch.min.bytes",
    doc = "the bytes a broker waits for before answering a Fetch" },
  { name = "fetch_max_bytes", type = "int", default = 8388608, min = 1, kafka = "fetch.max.bytes",
    doc = "per broker and Fetch (below Kafka's 50 MB: a Lua socket reads a whole response into one string)" },
  { name = "max_partition_fetch_bytes", type = "int", default = 1048576, min = 1,
    kafka = "max.partition.fetch.bytes", doc = "per partition and Fetch" },
  { name = "isolation_level", type = "oneof", values = { 0, 1, "read_uncommitted", "read_committed" }, default = 0,
    kafka = "isolation.level",
    doc = '"read_committed" (1): up to the last stable offset, aborted transactions dropped' },
  { name = "check_crcs", type = "bool", default = true, kafka = "check.crcs", doc = "verify each batch's CRC" },
  { name = "max_decompressed", type = "int", min = 0, default_doc = "256 MiB (the codec's)",
    doc = "the most bytes one compressed batch may decompress to" },
  { name = "retry_backoff_ms", type = "int", min = 0, kafka = "retry.backoff.ms",
    default = function(_, client) return client.retry_backoff_ms end, default_doc = "the client's",
    doc = "the wait before a failed fetch of a partition is tried again" },
  { name = "max_poll_records", type = "int", default = 500, min = 1, kafka = "max.poll.records",
    doc = "the most messages one poll (or poll_batch, over its batches) returns (the rest of a fetch waits for the next polls)" },
  { name = "enable_auto_commit", type = "bool", default = true, kafka = "enable.auto.commit",
    doc = "commit the positions every auto_commit_interval_ms from poll (asynchronously), and at close" },
  { name = "auto_commit_interval_ms", type = "int", default = 5000, min = 0, kafka = "auto.commit.interval.ms",
    doc = "how often the automatic commit runs" },
  { name = "group_protocol", type = "oneof", values = { "classic", "consumer" }, kafka = "group.protocol",
    doc = '"classic" or "consumer" (KIP-848); nil: "consumer" where a broker offers ConsumerGroupHeartbeat v1+ (Kafka 4.0+)' },
  { name = "partition_assignment_strategy", type = { "string", "table" },
    kafka = "partition.assignment.strategy", default_doc = '{"range", "cooperative-sticky"}',
    default = function() return { "range", "cooperative-sticky" } end,
    doc = 'classic: the assignors offered, in order: "range", "roundrobin", "cooperative-sticky" (a list or a comma-separated string)' },
  { name = "group_remote_assignor", type = "string", kafka = "group.remote.assignor",
    doc = "consumer protocol: the broker-side assignor to ask for (nil: the broker's default)" },
  { name = "session_timeout_ms", type = "int", default = 45000, min = 1, kafka = "session.timeout.ms",
    doc = "classic: a member silent this long is removed (the consumer protocol's is the broker's)" },
  { name = "heartbeat_interval_ms", type = "int", default = 3000, min = 1, kafka = "heartbeat.interval.ms",
    doc = "classic: below session_timeout_ms (the consumer protocol's comes from the coordinator)" },
  { name = "max_poll_interval_ms", type = "int", default = 300000, min = 1, kafka = "max.poll.interval.ms",
    doc = "a member that does not poll this long leaves the group" },
  { name = "rebalance_timeout_ms", type = "int", min = 1,
    default = function(v) return v.max_poll_interval_ms end, default_doc = "max_poll_interval_ms",
    doc = "classic: how long the coordinator waits for members to rejoin" },
  { name = "group_instance_id", type = "string", nonempty = true, kafka = "group.instance.id",
    doc = "static membership (KIP-345)" },
  { name = "on_assign", type = "function", doc = "function(consumer, partitions): partitions given" },
  { name = "on_revoke", type = "function", doc = "function(consumer, partitions): partitions taken back (commit here)" },
  { name = "on_lost", type = "function", doc = "function(consumer, partitions): partitions lost without a revoke" },
})
CONSUMER.intro = "kafka.consumer.new(client_or_client_opts, opts): these go in opts. heartbeat_interval_ms " ..
  "must be below session_timeout_ms."
_M.CONSUMER = CONSUMER

local function strategies(where, v)
  local list = v
  if type(v) == "string" then
    list = {}
    for s in v:gmatch("[^,%s]+") do list[#list + 1] = s end
  end
  if #list == 0 then
    check.fail(where, "partition_assignment_strategy", 'a name or a list of "range", "roundrobin", '
      .. '"cooperative-sticky"', v)
  end
  for i, s in ipairs(list) do
    check.oneof(where, ("partition_assignment_strategy[%d]"):format(i), s, nil, STRATEGIES)
  end
  return list
end

local ISOLATION = { [0] = 0, [1] = 1, read_uncommitted = 0, read_committed = 1 }

-- consumer(opts, client) -> values (isolation_level as 0 or 1); raises on misuse
function _M.consumer(opts, client)
  local where = CONSUMER.where
  opts = check.opts(where, opts)
  local o = check.options(CONSUMER, opts, client, 2)
  o.isolation_level = ISOLATION[o.isolation_level]
  o.partition_assignment_strategy = strategies(where, o.partition_assignment_strategy)
  if o.heartbeat_interval_ms >= o.session_timeout_ms then
    error(("%s: heartbeat_interval_ms (%d) must be lower than session_timeout_ms (%d)"):format(where,
      o.heartbeat_interval_ms, o.session_timeout_ms), 3)
  end
  return o
end

---------------------------------------------------------------- producer

local MiB = 1048576
local PARTITIONERS = { "murmur2_random", "murmur2", "random" }
local PARTITIONER_TEXT = 'one of "murmur2_random", "murmur2", "random" or a function'

local PRODUCER = check.declare("kafka.producer.new", {
  { name = "compression", type = "oneof", values = { "none", "gzip", "snappy", "lz4", "zstd", 0, 1, 2, 3, 4 },
    default = "none", kafka = "compression.type", doc = "the codec of every batch (a name or Kafka's number)" },
  { name = "partitioner", type = { "string", "function" }, default = "murmur2_random", kafka = "partitioner",
    librdkafka = true,
    validate = function(v)
      if type(v) == "function" then return v end
      for _, n in ipairs(PARTITIONERS) do if v == n then return v end end
      return nil, PARTITIONER_TEXT
    end,
    doc = '"murmur2_random": keys placed as the Java client and librdkafka place them, unkeyed messages '
      .. 'sticking to one partition per batch; "murmur2" (null keys hashed too); "random"; or function(key, n, topic)' },
  { name = "on_delivery", type = "function", doc = "function(report), called for every message as its outcome is known" },
  { name = "retry_backoff_ms", type = "int", min = 0, kafka = "retry.backoff.ms",
    default = function(_, client) return client.retry_backoff_ms end, default_doc = "the client's",
    doc = "the wait before a batch is sent again, doubling per attempt" },
  { name = "background", type = "bool", default_doc = "true inside nginx when the client has no socket option",
    doc = "the nginx background sender (true outside nginx raises)" },
  { name = "acks", type = "oneof", values = { -1, 0, 1 }, default = -1, kafka = "acks",
    doc = "-1: every in-sync replica; 1: the leader; 0: no answer" },
  { name = "transactional_id", type = "string", nonempty = true, kafka = "transactional.id",
    doc = "makes the producer transactional (needs idempotence)" },
  { name = "enable_idempotence", type = "bool", kafka = "enable.idempotence",
    default_doc = "nil: on where the cluster supports it and acks is -1",
    doc = "producer id and sequence numbers: a retried batch is never written twice; true needs acks -1" },
  { name = "max_in_flight_requests_per_connection", type = "int", default = 5, min = 1,
    kafka = "max.in.flight.requests.per.connection",
    doc = "Produce requests unanswered per connection; with idempotence also batches per partition (at most 5)" },
  { name = "transaction_timeout_ms", type = "int", default = 60000, min = 1, kafka = "transaction.timeout.ms",
    doc = "the coordinator aborts a transaction open longer than this" },
  { name = "linger_ms", type = "int", default = 100, min = 0, kafka = "linger.ms",
    doc = "a partition's batch is sent when full or this old" },
  { name = "batch_size", type = "int", default = MiB, min = 1, kafka = "batch.size",
    doc = "the bytes of one partition's batch" },
  { name = "max_retries", type = "int", min = 0, kafka = "retries",
    doc = "nil: retried until delivery_timeout_ms; a number fails a batch after that many failed attempts" },
  { name = "retry_backoff_max_ms", type = "int", min = 0, kafka = "retry.backoff.max.ms",
    default = function(v, client) return math.max(v.retry_backoff_ms, client.retry_backoff_max_ms) end,
    default_doc = "the client's (or retry_backoff_ms when larger)", doc = "the cap of the doubling retry wait" },
  { name = "delivery_timeout_ms", type = "int", default = 120000, min = 1, kafka = "delivery.timeout.ms",
    doc = "a message not delivered this long after its batch opened is reported failed (code \"timeout\")" },
  { name = "max_buffered", type = "int", default = 100000, min = 1, kafka = "queue.buffering.max.messages",
    librdkafka = true, doc = "the messages buffered at most" },
  { name = "max_buffered_bytes", type = "int", default = 64 * MiB, min = 1, kafka = "buffer.memory",
    doc = "the bytes buffered at most" },
  { name = "flush_on_full", type = "bool", default = true,
    doc = 'a send() that finds the buffer full sends and waits for room; false: nil, err, "buffer_full"' },
  { name = "max_message_bytes", type = "int", default = 1000000, min = 1,
    doc = 'a larger message is refused by send() (code "too_large"), as a topic\'s max.message.bytes would' },
  { name = "max_request_bytes", type = "int", default = MiB, min = 1, kafka = "max.request.size",
    doc = "the batches one Produce request carries; more requests are pipelined" },
  { name = "timeout_ms", type = "int", default = 30000, min = 0, kafka = "request.timeout.ms", librdkafka = true,
    doc = "the broker-side produce timeout sent in each Produce request" },
  { name = "magic", type = "oneof", values = { 0, 1, 2 }, default_doc = "from the broker's Produce version",
    doc = "the record format (2 from Kafka 0.11 on)" },
  { name = "delivery_reports", type = "oneof", values = { "all", "errors" }, default = "all",
    doc = '"errors": flush() returns only the failed messages\' reports, successes are counted' },
  { name = "exit_flush_timeout_ms", type = "int", default = 5000, min = 0,
    doc = "background: how long the sender sends what is buffered when the nginx worker exits" },
})
PRODUCER.intro = "kafka.producer.new(client_or_client_opts, opts): these go in opts. transactional_id needs " ..
  "idempotence (not false); enable_idempotence = true needs acks -1; with idempotence " ..
  "max_in_flight_requests_per_connection is at most 5."
_M.PRODUCER = PRODUCER

local CODEC_NAMES = { [0] = "none", "gzip", "snappy", "lz4", "zstd" }

-- producer(opts, client) -> values, with compression as a name, background
-- decided, enable_idempotence as idem_mode ("on", "off" or "auto": decided
-- at the first send round); raises on misuse
function _M.producer(opts, client)
  local where = PRODUCER.where
  opts = check.opts(where, opts)
  local o = check.options(PRODUCER, opts, client, 2)
  if type(o.compression) == "number" then o.compression = CODEC_NAMES[o.compression] end
  if o.background == nil then o.background = ksocket.in_nginx() and client.opts.socket == nil end
  if o.background and not ksocket.in_nginx() then error(where .. ": background = true needs nginx (lua-nginx-module)", 3) end
  local idem = o.enable_idempotence
  if o.transactional_id and idem == false then
    error(where .. ": transactional_id needs enable_idempotence (got false)", 3)
  end
  if o.transactional_id then idem = true end
  if idem == true and o.acks ~= -1 then
    error(("%s: enable_idempotence needs acks = -1 (got acks = %d)"):format(where, o.acks), 3)
  end
  -- nil: on where the cluster supports it (InitProducerId, record format v2) and acks is -1
  o.idem_mode = idem == true and "on" or (idem == false and "off" or (o.acks == -1 and "auto" or "off"))
  if o.idem_mode ~= "off" and o.max_in_flight_requests_per_connection > 5 then
    error(("%s: max_in_flight_requests_per_connection must be <= 5 with idempotence (got %d)"):format(
      where, o.max_in_flight_requests_per_connection), 3)
  end
  return o
end

-- every declaration list, in the order docs/options.md shows them
_M.ALL = { CLIENT, CONSUMER, PRODUCER }

return _M
