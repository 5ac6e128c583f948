-- resty.kafka.client (lua-resty-kafka 0.23's API) on kafka.client: the
-- broker list and client_config of the original become kafka.client's
-- options; metadata, versions and connections are lua-kafka's. What
-- differs from the original: docs/migrating.md.
--
--   local client = require "resty.kafka.client"
--   local cli = client:new({{host = "127.0.0.1", port = 9092}}, {refresh_interval = 30000})
--   local brokers, partitions = cli:fetch_metadata("topic")
local kclient = require "kafka.client"
local ksocket = require "kafka.socket"

local setmetatable, ipairs, pairs, type, error, next = setmetatable, ipairs, pairs, type, error, next
local ngx = ngx

local _M = { _VERSION = "0.23" }
local mt = { __index = _M }

-- A socket factory whose sockets connect to resolver(host) (or host): the
-- original resolves the bootstrap brokers and the ones metadata lists.
-- Every other method is the inner socket's.
local function resolving(resolver)
  local make = ksocket.factory({})
  return function()
    local s, err = make()
    if not s then return nil, err end
    local w = {}
    function w.connect(_, host, ...)
      local ip = resolver(host)
      return s:connect(ip or host, ...)
    end
    return setmetatable(w, { __index = function(_, k)
      local v = s[k]
      if type(v) ~= "function" then return v end
      return function(_, ...) return v(s, ...) end
    end })
  end
end

-- kafka_options(broker_list, client_config) -> kafka.client's options for
-- the original's arguments (exposed for resty.kafka.producer and the specs)
function _M.kafka_options(broker_list, config)
  if type(broker_list) ~= "table" or #broker_list == 0 then
    error("resty.kafka.client: broker_list must be a list of {host=, port=}", 3)
  end
  config = config or {}
  local brokers, sasl = {}, nil
  for i, b in ipairs(broker_list) do
    if type(b) ~= "table" or type(b.host) ~= "string" then
      error(("resty.kafka.client: broker_list[%d] must be {host=, port=}"):format(i), 3)
    end
    brokers[i] = { host = b.host, port = b.port or 9092 }
    sasl = sasl or b.sasl_config -- one SASL identity per client (the original allows one per broker)
  end
  local timeout = config.socket_timeout or 3000
  local o = {
    brokers = brokers,
    client_id = config.client_id or ("worker" .. ngx.worker.pid()),
    request_timeout_ms = timeout,
    connect_timeout_ms = timeout,
    -- refresh_interval: the original refreshes on a timer; here metadata
    -- older than it is refreshed at its next use (and on errors, always)
    metadata_max_age_ms = config.refresh_interval,
  }
  if config.resolver then o.socket = resolving(config.resolver) end
  if config.ssl then
    o.security_protocol = sasl and "SASL_SSL" or "SSL"
    if not config.ssl_verify then o.enable_ssl_certificate_verification = false end
  elseif sasl then
    o.security_protocol = "SASL_PLAINTEXT"
  end
  if sasl then
    o.sasl_mechanism = sasl.mechanism or "PLAIN"
    o.sasl_username = sasl.user
    o.sasl_password = sasl.password
  end
  return o
end

function _M.new(_, broker_list, client_config)
  local kc = kclient.new(_M.kafka_options(broker_list, client_config))
  return setmetatable({
    kc = kc,                -- the kafka.client underneath
    broker_list = broker_list,
    sasl_config = broker_list[1].sasl_config,
    brokers = {},           -- node id -> {host=, port=, rack=, sasl_config=}: the last metadata seen
    topic_partitions = {},  -- topic -> {errcode=, num=, [id] = {errcode=, id=, leader=, replicas=, isr=}}
    api_versions = {},      -- api key -> {min_version=, max_version=}
    client_id = kc.client_id,
  }, mt)
end

-- the original's shape of what kafka.client's cache holds
local function view(self)
  local kc = self.kc
  local brokers = {}
  for id, b in pairs(kc.brokers) do
    brokers[id] = { host = b.host, port = b.port, rack = b.rack, sasl_config = self.sasl_config }
  end
  local topics = {}
  for name, t in pairs(kc.topics) do
    local info = { errcode = t.error_code, num = t.count }
    for id, p in pairs(t.partitions) do
      info[id] = { errcode = p.error_code, id = id, leader = p.leader, replicas = p.replicas or {}, isr = p.isr or {} }
    end
    topics[name] = info
  end
  self.brokers, self.topic_partitions = brokers, topics
  -- the versions of a broker connected to (the original's: of the one that answered Metadata)
  for _, list in ipairs { kc.conns, kc.boot_conns } do
    for _, c in pairs(list) do
      if c.broker_versions then
        local av = {}
        for key, r in pairs(c.broker_versions) do av[key] = { min_version = r.min, max_version = r.max } end
        self.api_versions = av
        return brokers, topics
      end
    end
  end
  return brokers, topics
end

-- refresh() -> brokers, topic_partitions, api_versions: metadata of every
-- topic fetched before | nil, err
function _M.refresh(self)
  local names = {}
  for name in pairs(self.kc.topics) do names[#names + 1] = name end
  if #names == 0 then return nil, "not topic" end
  local md, err = self.kc:metadata(names)
  if not md then return nil, err end
  local brokers, topics = view(self)
  return brokers, topics, self.api_versions
end

-- fetch_metadata(topic) -> brokers, partitions (of topic) | nil, err
function _M.fetch_metadata(self, topic)
  local md, err, code = self.kc:metadata({ topic })
  if not md and code ~= "unknown_topic" then return nil, err end
  local brokers, topics = view(self)
  local parts = topics[topic]
  if parts and parts.num and parts.num > 0 then return brokers, parts end
  return nil, "not found topic"
end

-- choose_broker(topic, partition_id) -> {host=, port=, sasl_config=} of its leader | nil, err
function _M.choose_broker(self, topic, partition_id)
  local brokers, partitions = self:fetch_metadata(topic)
  if not brokers then return nil, partitions end
  local partition = partitions[partition_id]
  if not partition then return nil, "not found partition" end
  local config = brokers[partition.leader]
  if not config then return nil, "not found broker" end
  return config
end

-- choose_api_version(api_key, min_version, max_version) -> the highest
-- version both sides take within [min, max], -1 when none (or no broker
-- answered ApiVersions yet), as the original chooses
function _M.choose_api_version(self, api_key, min_version, max_version)
  if not next(self.api_versions) then view(self) end
  local v = self.api_versions[api_key]
  if not v then return -1 end
  local lo, hi = v.min_version, v.max_version
  if min_version and max_version then
    if hi < max_version then
      if hi < min_version then return -1 end
      return hi
    elseif lo > max_version then
      return -1
    end
    return max_version
  end
  return hi
end

function _M.close(self)
  self.kc:close()
end

return _M
