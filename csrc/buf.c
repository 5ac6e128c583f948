/* buf.c - reader/writer primitives (see buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void kf_err_set(kf_err *e, int code, const char *fmt, ...) {
  va_list ap;
  if (!e || e->code) return; /* keep the first (innermost) error */
  e->code = code;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
}

const char *kf_err_name(int code) {
  switch (code) {
  case KF_OK: return "ok";
  case KF_EINCOMPLETE: return "incomplete";
  case KF_ECORRUPT: return "corrupt";
  case KF_EUNSUPPORTED: return "unsupported";
  case KF_ENOMEM: return "nomem";
  case KF_ELIMIT: return "limit";
  case KF_EVALUE: return "value";
  default: return "error";
  }
}

double kf_r_f64(kf_reader *r) {
  uint64_t u = (uint64_t)kf_r_i64(r);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

uint64_t kf_r_uvarlong(kf_reader *r) {
  uint64_t v = 0;
  unsigned shift = 0;
  for (;;) {
    const uint8_t *p = kf_r_take(r, 1);
    if (!p) return 0;
    if (shift == 63 && (p[0] & 0x7e)) break; /* overflows 64 bits */
    v |= (uint64_t)(p[0] & 0x7f) << shift;
    if (!(p[0] & 0x80)) return v;
    shift += 7;
    if (shift > 63) break;
  }
  kf_r_fail(r, KF_ECORRUPT);
  return 0;
}

uint32_t kf_r_uvarint(kf_reader *r) {
  uint32_t v = 0;
  unsigned shift = 0;
  for (;;) {
    const uint8_t *p = kf_r_take(r, 1);
    if (!p) return 0;
    if (shift == 28 && (p[0] & 0xf0)) break; /* more than 32 bits */
    v |= (uint32_t)(p[0] & 0x7f) << shift;
    if (!(p[0] & 0x80)) return v;
    shift += 7;
    if (shift > 28) break;
  }
  kf_r_fail(r, KF_ECORRUPT);
  return 0;
}

int32_t kf_r_varint(kf_reader *r) {
  uint32_t u = kf_r_uvarint(r);
  return (int32_t)((u >> 1) ^ (~(u & 1) + 1));
}

int64_t kf_r_varlong(kf_reader *r) {
  uint64_t u = kf_r_uvarlong(r);
  return (int64_t)((u >> 1) ^ (~(u & 1) + 1));
}

int kf_r_lenbytes(kf_reader *r, int kind, const uint8_t **p, size_t *n) {
  int64_t len;
  switch (kind) {
  case 16: len = kf_r_i16(r); break;
  case 32: len = kf_r_i32(r); break;
  case 'c': len = (int64_t)kf_r_uvarint(r) - 1; break;
  default: len = kf_r_varint(r); break;
  }
  if (r->err) return 0;
  if (len == -1) {
    *p = NULL;
    *n = 0;
    return 1;
  }
  if (len < 0) {
    kf_r_fail(r, KF_ECORRUPT);
    return 0;
  }
  *p = kf_r_take(r, (size_t)len);
  *n = (size_t)len;
  if (!*p) return 0;
  return 1;
}

int64_t kf_r_count(kf_reader *r, int kind, size_t min_elem) {
  int64_t n = kind == 'c' ? (int64_t)kf_r_uvarint(r) - 1 : (int64_t)kf_r_i32(r);
  if (r->err) return 0;
  if (n == -1) return -1;
  if (n < 0) {
    kf_r_fail(r, KF_ECORRUPT);
    return 0;
  }
  if (min_elem == 0) min_elem = 1;
  if (!((uint64_t)n <= kf_r_left(r) / min_elem)) {
    /* Claims more elements than the remaining bytes could hold. */
    kf_r_fail(r, KF_EINCOMPLETE);
    return 0;
  }
  return n;
}

static size_t mem_current, mem_peak;

void kf_mem_account(long delta) {
  if (delta < 0 && (size_t)-delta > mem_current) mem_current = 0;
  else mem_current = (size_t)((long)mem_current + delta);
  if (mem_current > mem_peak) mem_peak = mem_current;
}
size_t kf_mem_current(void) { return mem_current; }
size_t kf_mem_peak(void) { return mem_peak; }
void kf_mem_reset_peak(void) { mem_peak = mem_current; }

/*
 * Freed large buffers are kept for the next writers. Without it every
 * call that builds a big frame gets fresh pages from the kernel (glibc
 * trims its heap on free; under LuaJIT nothing else lives there) and the
 * page faults cost more than the encoding. The producer's builders (one
 * per partition, up to 1 MiB each, freed once acknowledged) are the main
 * users: with 3 slots, sending 1 KiB messages to 200 partitions spent 11 %
 * of its time clearing fresh pages, with 32 slots 4 %. Per thread, at most
 * CACHE_SLOTS buffers of CACHE_MIN..CACHE_MAX bytes, CACHE_TOTAL in all.
 */
#define CACHE_SLOTS 32
#define CACHE_MIN (64u << 10)
#define CACHE_MAX (32u << 20)
#define CACHE_TOTAL (32u << 20)
static __thread uint8_t *cache_buf[CACHE_SLOTS];
static __thread size_t cache_cap[CACHE_SLOTS];
static __thread size_t cache_total;

/* Takes the largest cached buffer, or NULL. */
static uint8_t *cache_take(size_t *cap) {
  int i, best = -1;
  uint8_t *b;
  for (i = 0; i < CACHE_SLOTS; i++)
    if (cache_buf[i] && (best < 0 || cache_cap[i] > cache_cap[best])) best = i;
  if (best < 0) return NULL;
  b = cache_buf[best];
  *cap = cache_cap[best];
  cache_buf[best] = NULL;
  cache_total -= *cap;
  return b;
}

/* Keeps buf for reuse when it is worth it (in place of a smaller one when
 * full); returns 1 when kept. */
static int cache_put(uint8_t *buf, size_t cap) {
  int i, small = -1;
  if (cap < CACHE_MIN || cap > CACHE_MAX) return 0;
  for (i = 0; i < CACHE_SLOTS; i++) {
    if (!cache_buf[i]) {
      small = i;
      break;
    }
    if (small < 0 || cache_cap[i] < cache_cap[small]) small = i;
  }
  if (cache_buf[small]) {
    if (cache_cap[small] >= cap) return 0;
    free(cache_buf[small]);
    cache_total -= cache_cap[small];
    cache_buf[small] = NULL;
  }
  if (cap > CACHE_TOTAL - cache_total) return 0;
  cache_buf[small] = buf;
  cache_cap[small] = cap;
  cache_total += cap;
  return 1;
}

void kf_w_init(kf_writer *w) {
  w->buf = NULL;
  w->len = w->cap = 0;
  w->err = KF_OK;
}

void kf_w_free(kf_writer *w) {
  if (w->buf) {
    kf_mem_account(-(long)w->cap);
    if (!cache_put(w->buf, w->cap)) free(w->buf);
  }
  kf_w_init(w);
}

uint8_t *kf_w_reserve(kf_writer *w, size_t n) {
  size_t need, cap;
  uint8_t *nb;
  if (w->err) return NULL;
  if (n <= w->cap - w->len) return w->buf + w->len;
  if (!(n <= SIZE_MAX / 2 - w->len)) {
    w->err = KF_ENOMEM;
    return NULL;
  }
  need = w->len + n;
  if (!w->buf) {
    size_t ccap = 0;
    uint8_t *cb = cache_take(&ccap);
    if (cb) {
      kf_mem_account((long)ccap);
      w->buf = cb;
      w->cap = ccap;
      if (n <= w->cap - w->len) return w->buf + w->len;
    }
  }
  cap = w->cap ? w->cap : 256;
  while (cap < need) cap *= 2;
  nb = (uint8_t *)realloc(w->buf, cap);
  if (!nb) {
    w->err = KF_ENOMEM;
    return NULL;
  }
  kf_mem_account((long)(cap - w->cap));
  w->buf = nb;
  w->cap = cap;
  return w->buf + w->len;
}

void kf_w_f64(kf_writer *w, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  kf_w_i64(w, (int64_t)u);
}

void kf_w_uvarlong(kf_writer *w, uint64_t v) {
  uint8_t *p = kf_w_reserve(w, 10);
  if (p) w->len += (size_t)(kf_put_uvarlong(p, v) - p);
}

void kf_w_uvarint(kf_writer *w, uint32_t v) {
  if (v < 0x80) {
    uint8_t *p = kf_w_extend(w, 1);
    if (p) p[0] = (uint8_t)v;
    return;
  }
  kf_w_uvarlong(w, v);
}

/* Zig-zag without shifting negative values (implementation-defined in C). */
static uint32_t zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (v < 0 ? 0xffffffffu : 0u); }

void kf_w_varint(kf_writer *w, int32_t v) { kf_w_uvarint(w, zigzag32(v)); }

void kf_w_varlong(kf_writer *w, int64_t v) { kf_w_uvarlong(w, kf_zigzag64(v)); }

/* The prefix (null when p is NULL), then the bytes when copy. */
static void lenbytes(kf_writer *w, int kind, const void *p, size_t n, int copy) {
  if (w->err) return;
  switch (kind) {
  case 16:
    if (!p) { kf_w_i16(w, -1); return; }
    if (n > 32767) { w->err = KF_EVALUE; return; }
    kf_w_i16(w, (int16_t)n);
    break;
  case 32:
    if (!p) { kf_w_i32(w, -1); return; }
    if (n > INT32_MAX) { w->err = KF_EVALUE; return; }
    kf_w_i32(w, (int32_t)n);
    break;
  case 'c':
    if (!p) { kf_w_uvarint(w, 0); return; }
    if (n >= INT32_MAX) { w->err = KF_EVALUE; return; }
    kf_w_uvarint(w, (uint32_t)n + 1);
    break;
  default:
    if (!p) { kf_w_varint(w, -1); return; }
    if (n > INT32_MAX) { w->err = KF_EVALUE; return; }
    kf_w_varint(w, (int32_t)n);
    break;
  }
  if (copy) kf_w_bytes(w, p, n);
}

void kf_w_lenbytes(kf_writer *w, int kind, const void *p, size_t n) { lenbytes(w, kind, p, n, 1); }

/* The length prefix of n bytes that are not null; the bytes go elsewhere. */
void kf_w_lenprefix(kf_writer *w, int kind, size_t n) { lenbytes(w, kind, "", n, 0); }

void kf_w_count(kf_writer *w, int kind, size_t n, int is_null) {
  if (kind == 'c') {
    if (is_null) kf_w_uvarint(w, 0);
    else if (n >= INT32_MAX) w->err = w->err ? w->err : KF_EVALUE;
    else kf_w_uvarint(w, (uint32_t)n + 1);
  } else {
    if (is_null) kf_w_i32(w, -1);
    else if (n > INT32_MAX) w->err = w->err ? w->err : KF_EVALUE;
    else kf_w_i32(w, (int32_t)n);
  }
}

void kf_w_insert(kf_writer *w, size_t at, const void *src, size_t n) {
  size_t tail;
  if (w->err || !kf_w_reserve(w, n)) return;
  tail = w->len - at;
  memmove(w->buf + at + n, w->buf + at, tail);
  memcpy(w->buf + at, src, n);
  w->len += n;
}
