-- kafka.proto: the wire codec (C, kafka.core) plus the constants and the
-- error table. See README.md for the API and the error contract.
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

return _M
