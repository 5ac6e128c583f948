/* crc.h - CRC-32 (IEEE, for magic 0/1 messages) and CRC-32C (Castagnoli,
 * for RecordBatch v2). */
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

#endif
