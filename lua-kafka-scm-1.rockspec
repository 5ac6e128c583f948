rockspec_format = "3.0"
package = "lua-kafka"
version = "scm-1"
source = {
  url = "git+https://example.invalid/lua-kafka.git",
}
description = {
  summary = "Kafka wire protocol for Lua: every API version, every record format and codec, in C",
  detailed = [[
A Kafka wire-protocol codec in C (requests and responses of every API and
version Kafka defines, message sets magic 0/1 and RecordBatch v2, gzip,
snappy, lz4 and zstd) exposed to Lua as kafka.proto, for Lua 5.1-5.4 and
LuaJIT/OpenResty.]],
  license = "Apache-2.0",
  labels = { "kafka", "protocol", "openresty" },
}
dependencies = {
  "lua >= 5.1",
  "luasocket", -- the default transport outside OpenResty (kafka.socket)
  -- TLS outside OpenResty is in kafka.core (libssl); luasec only for ssl_transport = "luasec"
}
external_dependencies = {
  ZLIB = { header = "zlib.h", library = "z" },
  SNAPPY = { header = "snappy-c.h", library = "snappy" },
  LZ4 = { header = "lz4frame.h", library = "lz4" },
  ZSTD = { header = "zstd.h", library = "zstd" },
  OPENSSL = { header = "openssl/ssl.h", library = "ssl" }, -- libssl: TLS (csrc/tls.c); libcrypto: SCRAM
}
build = {
  type = "builtin",
  modules = {
    ["kafka.core"] = {
      sources = { "csrc/buf.c", "csrc/crc.c", "csrc/compress.c", "csrc/records.c", "csrc/schema.c",
                  "csrc/apis.c", "csrc/crypto.c", "csrc/tls.c", "csrc/lua_kafka.c", "csrc/lua_glue.c", "csrc/lua_schema.c",
                  "csrc/lua_records.c", "csrc/lua_batch.c", "csrc/lua_crypto.c", "csrc/lua_producer.c", "csrc/lua_bytes.c", "csrc/lua_inbox.c",
                  "csrc/lua_tls.c" },
      defines = { "_GNU_SOURCE" },
      incdirs = { "csrc", "$(ZLIB_INCDIR)", "$(SNAPPY_INCDIR)", "$(LZ4_INCDIR)", "$(ZSTD_INCDIR)", "$(OPENSSL_INCDIR)" },
      libdirs = { "$(ZLIB_LIBDIR)", "$(SNAPPY_LIBDIR)", "$(LZ4_LIBDIR)", "$(ZSTD_LIBDIR)", "$(OPENSSL_LIBDIR)" },
      libraries = { "z", "snappy", "lz4", "zstd", "ssl", "crypto" },
    },
    ["kafka"] = "lua/kafka/init.lua",
    ["kafka.proto"] = "lua/kafka/proto.lua",
    ["kafka.errors"] = "lua/kafka/errors.lua",
    ["kafka.check"] = "lua/kafka/check.lua",
    ["kafka.socket"] = "lua/kafka/socket.lua",
    ["kafka.sasl"] = "lua/kafka/sasl.lua",
    ["kafka.read_committed"] = "lua/kafka/read_committed.lua",
    ["kafka.consumer_batch"] = "lua/kafka/consumer_batch.lua",
    ["kafka.txn"] = "lua/kafka/txn.lua",
    ["kafka.fetcher"] = "lua/kafka/fetcher.lua",
    ["kafka.offsets"] = "lua/kafka/offsets.lua",
    ["kafka.group"] = "lua/kafka/group.lua",
    ["kafka.group.classic"] = "lua/kafka/group/classic.lua",
    ["kafka.group.consumer_protocol"] = "lua/kafka/group/consumer_protocol.lua",
    ["kafka.group.assignors"] = "lua/kafka/group/assignors.lua",
    ["kafka.connection"] = "lua/kafka/connection.lua",
    ["kafka.client"] = "lua/kafka/client.lua",
    ["kafka.producer"] = "lua/kafka/producer.lua",
    ["kafka.producer.accumulator"] = "lua/kafka/producer/accumulator.lua",
    ["kafka.producer.sink"] = "lua/kafka/producer/sink.lua",
    ["kafka.producer.idempotence"] = "lua/kafka/producer/idempotence.lua",
    ["kafka.producer.txnmgr"] = "lua/kafka/producer/txnmgr.lua",
    ["kafka.producer.background"] = "lua/kafka/producer/background.lua",
    ["kafka.consumer"] = "lua/kafka/consumer.lua",
    ["kafka.share_consumer"] = "lua/kafka/share_consumer.lua",
    ["kafka.share.membership"] = "lua/kafka/share/membership.lua",
    ["kafka.share.session"] = "lua/kafka/share/session.lua",
    ["kafka.options"] = "lua/kafka/options.lua",
    ["kafka.admin"] = "lua/kafka/admin.lua",
    ["kafka.admin.base"] = "lua/kafka/admin/base.lua",
    ["kafka.admin.groups"] = "lua/kafka/admin/groups.lua",
    ["kafka.admin.records"] = "lua/kafka/admin/records.lua",
    ["kafka.admin.transactions"] = "lua/kafka/admin/transactions.lua",
    ["kafka.admin.security"] = "lua/kafka/admin/security.lua",
    ["kafka.admin.cluster"] = "lua/kafka/admin/cluster.lua",
    ["kafka.admin.replicas"] = "lua/kafka/admin/replicas.lua",
    ["kafka.cli"] = "lua/kafka/cli.lua",
    ["kafka.cli.data"] = "lua/kafka/cli/data.lua",
    ["kafka.cli.admin"] = "lua/kafka/cli/admin.lua",
    ["kafka.cli.security"] = "lua/kafka/cli/security.lua",
    ["kafka.mock"] = "lua/kafka/mock.lua",
    ["kafka.mock.log"] = "lua/kafka/mock/log.lua",
    ["kafka.mock.group"] = "lua/kafka/mock/group.lua",
    ["kafka.mock.handlers"] = "lua/kafka/mock/handlers.lua",
    ["kafka.mock.serve"] = "lua/kafka/mock/serve.lua",
    ["kafka.mock.transport"] = "lua/kafka/mock/transport.lua",
    ["kafka.mock.share"] = "lua/kafka/mock/share.lua",
  },
  install = {
    bin = { ["kafka-mock"] = "bin/kafka-mock", ["lua-kafka"] = "bin/lua-kafka" },
  },
}
test = {
  type = "command",
  command = "make test",
}
