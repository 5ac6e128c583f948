rockspec_format = "3.0"
package = "lua-resty-kafka-compat"
version = "scm-1"
source = {
  url = "git+https://example.invalid/lua-kafka.git",
}
description = {
  summary = "lua-resty-kafka's API on lua-kafka: APISIX's and Kong's Kafka plugins on Kafka 4.x by swapping one rock",
  detailed = [[
The modules of lua-resty-kafka 0.23 (resty.kafka.client, resty.kafka.producer,
resty.kafka.basic-consumer, resty.kafka.errors, resty.kafka.protocol.consumer)
with its API and results, implemented on lua-kafka: RecordBatch v2,
compression, idempotence, every Kafka version from 0.8 to 4.x, the nginx
background sender. Remove lua-resty-kafka, install this; the calling code
stays as it is. Differences from the original: docs/migrating.md.]],
  license = "Apache-2.0",
  labels = { "kafka", "openresty", "nginx" },
}
dependencies = {
  "lua-kafka",
}
build = {
  type = "builtin",
  modules = {
    ["resty.kafka.client"] = "compat/resty/kafka/client.lua",
    ["resty.kafka.producer"] = "compat/resty/kafka/producer.lua",
    ["resty.kafka.basic-consumer"] = "compat/resty/kafka/basic-consumer.lua",
    ["resty.kafka.errors"] = "compat/resty/kafka/errors.lua",
    ["resty.kafka.protocol.consumer"] = "compat/resty/kafka/protocol/consumer.lua",
  },
}
