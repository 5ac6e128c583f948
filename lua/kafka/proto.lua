--- kafka.proto: the wire codec (C, kafka.core) plus the constants and the
-- error table. See docs/codec.md for the guide and the error contract:
-- misuse raises, bad data returns nil, message, code.
-- @module kafka.proto
-- @field api api name -> key: `proto.api.Produce == 0` (what the client uses instead of numbers)
-- @field errors kafka.errors: Kafka's error codes (`proto.errors.NAME` -> code)
-- @field compression codec name <-> number (`none` 0 .. `zstd` 4)
-- @field OFFSET_LATEST -1
-- @field OFFSET_EARLIEST -2
-- @field ACKS_ALL -1 (also ACKS_NONE 0, ACKS_LEADER 1)
-- @field COMPRESSION_NONE 0 (also COMPRESSION_GZIP 1, _SNAPPY 2, _LZ4 3, _ZSTD 4)
-- @field crypto libcrypto helpers for SASL and TLS (digest, hmac, pbkdf2, random_bytes, ...)
local core = require "kafka.core"
local errors = require "kafka.errors"
local ipairs = ipairs

local _M = {
  encode_request = core.encode_request,
  decode_request = core.decode_request,
  encode_response = core.encode_response,
  decode_response = core.decode_response,
  frame_length = core.frame_length,
  encode_data = core.encode_data,
  decode_data = core.decode_data,
  datas = core.datas,
  encode_records = core.encode_records,
  decode_records = core.decode_records,
  decode_columns = core.decode_columns,
  decode_headers = core.decode_headers,
  records_end = core.records_end,
  records_cut = core.records_cut,
  bytes = core.bytes,
  release = core.release,
  new_array = core.new_array,
  batch = core.batch,
  api_key = core.api_key,
  api_name = core.api_name,
  versions = core.versions,
  apis = core.apis,
  schema = core.schema,
  mem_stats = core.mem_stats,
  murmur2 = core.murmur2,
  crc32 = core.crc32,
  crc32c = core.crc32c,
  compress = core.compress,
  decompress = core.decompress,
  crypto = core.crypto, -- digest, hmac, pbkdf2, random_bytes, xor, b64_encode/decode, check_host (libcrypto)

  errors = errors,
  api = {}, -- api name -> key: proto.api.Produce == 0 (what the client uses instead of numbers)

  OFFSET_LATEST = -1,
  OFFSET_EARLIEST = -2,
  ACKS_NONE = 0,
  ACKS_LEADER = 1,
  ACKS_ALL = -1,
  COMPRESSION_NONE = 0,
  COMPRESSION_GZIP = 1,
  COMPRESSION_SNAPPY = 2,
  COMPRESSION_LZ4 = 3,
  COMPRESSION_ZSTD = 4,
  compression = { none = 0, gzip = 1, snappy = 2, lz4 = 3, zstd = 4,
                  [0] = "none", [1] = "gzip", [2] = "snappy", [3] = "lz4", [4] = "zstd" },
}

for _, a in ipairs(core.apis()) do _M.api[a.name] = a.key end

--- Encodes a request frame (the 4-byte size included).
-- @function encode_request
-- @param api the key number or the name ("Produce" or "produce")
-- @tparam integer version the api version
-- @tparam table header `{correlation_id=, client_id=}`
-- @tparam table body the request, Kafka's field names in snake_case
-- @tparam[opt] table opts `{gather = true}`: a Produce as a kafka.outframe (its
-- uncompressed records left in their builders)
-- @treturn string the frame (raises on misuse: a wrong type or a value out of range)
-- @usage local frame = proto.encode_request("Metadata", 12, { correlation_id = 1, client_id = "me" }, { topics = {} })

--- Decodes a request frame (a broker's view).
-- @function decode_request
-- @param frame a string or a kafka.bytes
-- @tparam[opt] table opts `raw_records`, `check_crc`, `max_decompressed`
-- @treturn table `{api_key=, api_name=, api_version=, correlation_id=, client_id=, body=}`,
-- or nil, message, code ("incomplete", "corrupt", "unsupported", "limit")

--- Encodes a response frame (a broker's view).
-- @function encode_response
-- @param api the key number or the name
-- @tparam integer version the api version
-- @tparam integer correlation_id the request's
-- @tparam table body the response
-- @treturn string the frame

--- Decodes a response frame.
-- @function decode_response
-- @param api the key number or the name
-- @tparam integer version the version the request was sent in
-- @param frame a string or a kafka.bytes
-- @tparam[opt] table opts `raw_records` (true, or "view": kafka.bytes views), `check_crc`,
-- `max_decompressed`, `unsized` (the frame without its size prefix)
-- @return correlation_id, body; or nil, message, code
-- @usage local corr, body = assert(proto.decode_response("Produce", 9, frame))

--- The whole frame's length once its 4 size bytes are there.
-- @function frame_length
-- @param buf a string or a kafka.bytes
-- @tparam[opt] integer max the largest size accepted
-- @return the length (prefix included), nil while fewer than 4 bytes are there,
-- or nil, message, code for a negative or too large size

--- Encodes one of Kafka's data structures (ConsumerProtocolSubscription,
-- EndTxnMarker, LeaderChangeMessage, ...): the int16 version, then the struct.
-- @function encode_data
-- @tparam string name the structure
-- @tparam integer version its version
-- @tparam table value the fields
-- @tparam[opt] table opts `{bare = true}`: the struct alone, no version
-- @treturn string the bytes

--- Decodes one of Kafka's data structures; a version above the newest known
-- decodes its known prefix.
-- @function decode_data
-- @tparam string name the structure
-- @param bytes a string or a kafka.bytes
-- @tparam[opt] table opts `{version = v}` for a bare struct
-- @return version, value; or nil, message, code

--- The data structures the codec knows.
-- @function datas
-- @treturn table `{{name=, min=, max=, flexible=}...}`

--- Encodes messages into record bytes (one batch, or a message set).
-- @function encode_records
-- @tparam table messages `{{key=, value=, headers=, timestamp=}...}` or values
-- @tparam[opt] table opts `magic`, `compression`, `base_offset`, `producer_id`, `producer_epoch`,
-- `base_sequence`, `transactional`
-- @treturn string the bytes

--- Decodes record bytes (batches of every magic, mixed).
-- @function decode_records
-- @param bytes a string, a kafka.bytes or a records rest
-- @tparam[opt] table opts `check_crc`, `max_decompressed`, `into`, `set`, `min_offset`,
-- `skip_control`, `batches`, `stop_at_error`, `max_records`, `columns` (a table: the
-- records go into its arrays `offsets`, `timestamps`, `keys`, `values` (nil where null) and
-- `raw_headers` (a record's header bytes, nil without headers: `decode_headers`) from its
-- `count` + 1 on, `count` is updated, control records are left out; kafka.consumer's poll_batch)
-- @treturn table messages `{offset=, timestamp=, key=, value=, headers=...}...` (the columns table
-- with `columns`)
-- @treturn table info `{batches=, partial=, errors=, count=, next_offset=, rest=}`

--- Decodes record bytes into one array per field instead of a table per message.
-- @function decode_columns
-- @param bytes a string or a kafka.bytes
-- @tparam[opt] table opts as decode_records
-- @treturn table `{n=, offset={}, timestamp={}, key={}, value={}, headers={}}`
-- @treturn table info

--- A record's raw header bytes (decode_records' `columns` mode) as an array.
-- @function decode_headers
-- @param raw a string or a kafka.bytes
-- @treturn table `{{key=, value=}...}` (value nil when null), or nil, message, "corrupt"

--- One past the highest offset of the complete batches, from the batch
-- headers alone (no CRC, no records).
-- @function records_end
-- @param bytes a string or a kafka.bytes
-- @return next_offset, batches; or nil, message, code ("incomplete", "corrupt")

--- The bytes of the leading whole batches that hold at most n records (at
-- least one batch).
-- @function records_cut
-- @param bytes a string or a kafka.bytes
-- @tparam integer n records
-- @return the bytes, or nil when the complete batches hold no more than n

--- A kafka.bytes view of s:sub(i, j), keeping s alive: no copy.
-- @function bytes
-- @tparam string s
-- @tparam[opt] integer i
-- @tparam[opt] integer j
-- @return the kafka.bytes (`#b` its length, `tostring(b)` a copy)

--- Hands a frame back to the connection that read it (its memory is reused
-- for a later frame; every view into it raises from then on), or frees a
-- kafka.outframe.
-- @function release
-- @param b a kafka.bytes frame or view, or a kafka.outframe
-- @treturn boolean false when the frame is not kept (below 64 KiB)

--- An empty table with room for n array items.
-- @function new_array
-- @tparam integer n
-- @treturn table

--- A record batch builder (userdata): no Lua table per message.
-- Methods: `append(value, key, headers, timestamp)`, `add(value, key, headers,
-- timestamp, message_id, size)`, `account()`, `bytes_size()`, `encode(opts)`,
-- `clear()`, `close()`; `#b` the records.
-- @function batch
-- @tparam table opts `compression`, `magic`, `limit` (bytes, for add)
-- @return the builder
-- @usage local b = proto.batch { compression = "lz4" }
-- b:append("value", "key")
-- local bytes = b:encode { base_offset = 0 }

--- An api's key.
-- @function api_key
-- @tparam string name Kafka's name ("Produce")
-- @treturn integer

--- An api's name.
-- @function api_name
-- @tparam integer key
-- @treturn string

--- The versions the codec has for an api.
-- @function versions
-- @param api the key number or the name
-- @return min, max, the first flexible version (or nil)

--- Every api the codec has.
-- @function apis
-- @treturn table `{{key=, name=, min=, max=}...}`

--- The field tree the codec walks.
-- @function schema
-- @param api an api (key or name), or a data structure's name
-- @tparam string kind "request", "response" or "data"
-- @treturn table

--- The C core's memory.
-- @function mem_stats
-- @tparam[opt] boolean reset start a new high-water mark
-- @return bytes held now, the high-water mark since the last reset

--- Kafka's partitioning hash (the Java client's murmur2).
-- @function murmur2
-- @tparam string key
-- @treturn integer

--- CRC-32 (message sets of magic 0/1).
-- @function crc32
-- @tparam string s
-- @treturn integer

--- CRC-32C (RecordBatch v2).
-- @function crc32c
-- @tparam string s
-- @treturn integer

--- Compresses bytes.
-- @function compress
-- @tparam string codec "gzip", "snappy", "lz4" or "zstd"
-- @tparam string s
-- @treturn string

--- Decompresses bytes, up to a limit.
-- @function decompress
-- @tparam string codec "gzip", "snappy", "lz4" or "zstd"
-- @tparam string s
-- @tparam[opt] integer limit the largest output
-- @return the bytes, or nil, message, code ("limit", "corrupt")

local ZERO_UUID = string.rep("\0", 16)

--- A topic id as Java's Uuid.toString() writes it (base64url, no padding).
-- @tparam string u the 16 bytes
-- @return the text, nil for the zero uuid (no id)
function _M.uuid_text(u)
  if u == nil or u == ZERO_UUID then return nil end
  return (_M.crypto.b64_encode(u):gsub("=+$", ""):gsub("[+/]", { ["+"] = "-", ["/"] = "_" }))
end

--- The 16 bytes of a topic id in Java's text form.
-- @tparam string s the text
-- @return the bytes, nil when s is not one
function _M.uuid_bytes(s)
  if type(s) ~= "string" or not s:match("^[%w_-]+$") or #s ~= 22 then return nil end
  local b = _M.crypto.b64_decode((s:gsub("[-_]", { ["-"] = "+", ["_"] = "/" })) .. "==")
  if not b or #b ~= 16 then return nil end
  return b
end

return _M
