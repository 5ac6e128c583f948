/* crc.c - CRC-32 through zlib; CRC-32C with SSE4.2 or slicing-by-8 tables. */
#include "crc.h"

#include <string.h>
#include <zlib.h>

uint32_t kf_crc32(uint32_t crc, const void *p, size_t n) {
  const Bytef *b = (const Bytef *)p;
  /* zlib takes uInt lengths: feed huge buffers in pieces. */
  while (n > 0x40000000u) {
    crc = (uint32_t)crc32(crc, b, 0x40000000u);
    b += 0x40000000u;
    n -= 0x40000000u;
  }
  return (uint32_t)crc32(crc, b, (uInt)n);
}

static uint32_t crc32c_table[8][256];
static int crc32c_ready;

static void crc32c_init(void) {
  uint32_t i, j, c;
  for (i = 0; i < 256; i++) {
    c = i;
    for (j = 0; j < 8; j++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    crc32c_table[0][i] = c;
  }
  for (i = 0; i < 256; i++) {
    c = crc32c_table[0][i];
    for (j = 1; j < 8; j++) {
      c = crc32c_table[0][c & 0xff] ^ (c >> 8);
      crc32c_table[j][i] = c;
    }
  }
  crc32c_ready = 1;
}

uint32_t kf_crc32c_sw(uint32_t crc, const void *p, size_t n) {
  const uint8_t *b = (const uint8_t *)p;
  uint32_t c = ~crc;
  if (!crc32c_ready) crc32c_init(); /* idempotent: a race writes equal values */
  while (n >= 8) {
    uint32_t lo = c ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                       (uint32_t)b[3] << 24);
    uint32_t hi = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 |
                  (uint32_t)b[7] << 24;
    c = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
        crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
        crc32c_table[3][hi & 0xff] ^ crc32c_table[2][(hi >> 8) & 0xff] ^
        crc32c_table[1][(hi >> 16) & 0xff] ^ crc32c_table[0][hi >> 24];
    b += 8;
    n -= 8;
  }
  while (n--) c = crc32c_table[0][(c ^ *b++) & 0xff] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The CRC register (not inverted) after n bytes of p from reg. */
__attribute__((target("sse4.2"))) static uint64_t crc32c_raw(uint64_t reg, const uint8_t *b, size_t n) {
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, b, 8);
    reg = __builtin_ia32_crc32di(reg, v);
    b += 8;
    n -= 8;
  }
  while (n--) reg = __builtin_ia32_crc32qi((uint32_t)reg, *b++);
  return reg;
}

/* The crc32 instruction has a latency of 3 cycles and a throughput of one a
 * cycle: three streams over three adjacent blocks keep it busy (a 1 KiB
 * consume spent 8 % of its time in one stream). A block's register is
 * carried over the blocks after it by shift tables: the register after
 * SHIFT_BLK (or twice that) zero bytes, linear in the register. */
#define SHIFT_BLK 1024
static uint32_t shift1[4][256], shift2[4][256];
static int shift_ready;

static void shift_tables(uint32_t t[4][256], size_t zeros) {
  static const uint8_t zero[SHIFT_BLK * 2];
  uint32_t basis[32];
  int bit, k, v;
  for (bit = 0; bit < 32; bit++) basis[bit] = (uint32_t)crc32c_raw((uint64_t)1 << bit, zero, zeros);
  for (k = 0; k < 4; k++)
    for (v = 0; v < 256; v++) {
      uint32_t r = 0;
      for (bit = 0; bit < 8; bit++)
        if (v & (1 << bit)) r ^= basis[8 * k + bit];
      t[k][v] = r;
    }
}

static uint32_t shift(const uint32_t t[4][256], uint32_t reg) {
  return t[0][reg & 0xff] ^ t[1][(reg >> 8) & 0xff] ^ t[2][(reg >> 16) & 0xff] ^ t[3][reg >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *p,
                                                               size_t n) {
  const uint8_t *b = (const uint8_t *)p;
  uint64_t c = ~crc;
  if (n >= 3 * SHIFT_BLK) {
    if (!shift_ready) { /* idempotent: a race writes equal values */
      shift_tables(shift1, SHIFT_BLK);
      shift_tables(shift2, 2 * SHIFT_BLK);
      shift_ready = 1;
    }
    while (n >= 3 * SHIFT_BLK) {
      uint64_t c1 = 0, c2 = 0;
      const uint8_t *e = b + SHIFT_BLK;
      while (b < e) {
        uint64_t v0, v1, v2;
        memcpy(&v0, b, 8);
        memcpy(&v1, b + SHIFT_BLK, 8);
        memcpy(&v2, b + 2 * SHIFT_BLK, 8);
        c = __builtin_ia32_crc32di(c, v0);
        c1 = __builtin_ia32_crc32di(c1, v1);
        c2 = __builtin_ia32_crc32di(c2, v2);
        b += 8;
      }
      c = shift(shift2, (uint32_t)c) ^ shift(shift1, (uint32_t)c1) ^ (uint32_t)c2;
      b += 2 * SHIFT_BLK;
      n -= 3 * SHIFT_BLK;
    }
  }
  return ~(uint32_t)crc32c_raw(c, b, n);
}

int kf_crc32c_has_hw(void) {
  static int has = -1;
  if (has < 0) {
    __builtin_cpu_init();
    has = __builtin_cpu_supports("sse4.2") ? 1 : 0;
  }
  return has;
}

uint32_t kf_crc32c_hw(uint32_t crc, const void *p, size_t n) {
  return kf_crc32c_has_hw() ? crc32c_sse42(crc, p, n) : kf_crc32c_sw(crc, p, n);
}
#else
int kf_crc32c_has_hw(void) { return 0; }
uint32_t kf_crc32c_hw(uint32_t crc, const void *p, size_t n) { return kf_crc32c_sw(crc, p, n); }
#endif

uint32_t kf_crc32c(uint32_t crc, const void *p, size_t n) { return kf_crc32c_hw(crc, p, n); }

/* a(x) * b(x) modulo the CRC-32C polynomial, both bit-reflected as the
 * CRC register is (bit 31 holds x^0): b times x is a right shift, and the
 * x^32 that falls out comes back as the polynomial's low terms. */
static uint32_t gf2_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  int i;
  for (i = 0; i < 32; i++) {
    if (a & (0x80000000u >> i)) p ^= b;
    b = (b >> 1) ^ (0x82F63B78u & (0u - (b & 1)));
  }
  return p;
}

/* CRC(A || B) from CRC(A) and CRC(B): A's register carried over |B| zero
 * bytes is A times x^(8|B|) (by squaring); the conditioning of both
 * cancels as in zlib's crc32_combine. */
uint32_t kf_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2) {
  uint32_t xn = 0x80000000u, sq = 0x00800000u; /* x^0, x^8 */
  while (len2) {
    if (len2 & 1) xn = gf2_mul(xn, sq);
    sq = gf2_mul(sq, sq);
    len2 >>= 1;
  }
  return gf2_mul(xn, crc1) ^ crc2;
}

uint32_t kf_murmur2(const void *p, size_t n) {
  const uint8_t *d = (const uint8_t *)p;
  const uint32_t m = 0x5bd1e995u;
  uint32_t h = 0x9747b28cu ^ (uint32_t)n;
  size_t i;
  for (i = 0; i + 4 <= n; i += 4) {
    uint32_t k = (uint32_t)d[i] | (uint32_t)d[i + 1] << 8 | (uint32_t)d[i + 2] << 16 |
                 (uint32_t)d[i + 3] << 24;
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  switch (n & 3) {
  case 3: h ^= (uint32_t)d[i + 2] << 16; /* fall through */
  case 2: h ^= (uint32_t)d[i + 1] << 8;  /* fall through */
  case 1: h ^= d[i]; h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return h;
}
