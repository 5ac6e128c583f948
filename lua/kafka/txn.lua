-- kafka.txn: the old name of kafka.read_committed (the consumer's
-- read_committed filter), kept so code that requires it goes on working.
return require "kafka.read_committed"
