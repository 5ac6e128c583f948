/* crc.h - CRC-32 (IEEE, for magic 0/1 messages), CRC-32C (Castagnoli,
 * for RecordBatch v2), and Kafka's murmur2 (the default partitioner's
 * hash of keys). */
#ifndef KF_CRC_H
#define KF_CRC_H

#include <stddef.h>
#include <stdint.h>

uint32_t kf_crc32(uint32_t crc, const void *p, size_t n);
/* Dispatches to the SSE4.2 instruction when the CPU has it. */
uint32_t kf_crc32c(uint32_t crc, const void *p, size_t n);
/* The two implementations, exported so tests can compare them. */
uint32_t kf_crc32c_sw(uint32_t crc, const void *p, size_t n);
uint32_t kf_crc32c_hw(uint32_t crc, const void *p, size_t n); /* sw when no hw */
int kf_crc32c_has_hw(void);
/* The CRC-32C of A followed by B (len2 bytes), from the CRCs of each: a
 * batch's records are summed as they are appended, while in cache, and
 * joined with its header's when it is sealed. */
uint32_t kf_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2);
/* murmur2 as Kafka's Java client and librdkafka compute it (seed 0x9747b28c). */
uint32_t kf_murmur2(const void *p, size_t n);

#endif
