-- resty.kafka.protocol.consumer (lua-resty-kafka 0.23's API): the
-- ListOffsets timestamps users pass to basic-consumer's list_offset. The
-- encoders and decoders the original keeps here are lua-kafka's codec.
local _M = {}

_M.LIST_OFFSET_TIMESTAMP_LAST = -1  -- the high watermark (next offset)
_M.LIST_OFFSET_TIMESTAMP_FIRST = -2 -- the log start offset
_M.LIST_OFFSET_TIMESTAMP_MAX = -3   -- the offset of the largest timestamp (KIP-734, Kafka 3.0+)

return _M
