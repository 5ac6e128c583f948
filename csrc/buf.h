/*
 * buf.h - bounds-checked reader and growable writer for the Kafka wire format.
 *
 * The reader is a cursor with a sticky error: once a read fails every later
 * read returns zero and leaves the error in place, so callers check once per
 * structure.  Every bounds check is written as `need <= remaining`.
 *
 * The writer grows by realloc; callers remember OFFSETS (never pointers) of
 * length and CRC slots and back-patch them with kf_w_patch_*.
 */
#ifndef KF_BUF_H
#define KF_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Error codes shared by the whole C core. */
enum {
  KF_OK = 0,
  KF_EINCOMPLETE = 1, /* more bytes needed (short frame) */
  KF_ECORRUPT = 2,    /* bytes that cannot be valid */
  KF_EUNSUPPORTED = 3,/* valid but not handled (unknown api/version/codec) */
  KF_ENOMEM = 4,      /* allocation failed */
  KF_ELIMIT = 5,      /* a configured limit was exceeded */
  KF_EVALUE = 6       /* a value to encode does not fit its wire type */
};

typedef struct kf_err {
  int code;
  char msg[256];
} kf_err;

/* An empty error without clearing msg: a zeroing initializer costs a
 * 256-byte store on every call, about a tenth of an append. */
#define KF_ERR_INIT(e) ((e).code = 0, (e).msg[0] = '\0')

void kf_err_set(kf_err *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
const char *kf_err_name(int code);

typedef struct kf_reader {
  const uint8_t *base; /* start of the whole buffer (offsets are relative to it) */
  size_t len;          /* bytes in the buffer */
  size_t pos;          /* cursor */
  int err;             /* sticky: KF_OK or KF_EINCOMPLETE/KF_ECORRUPT */
} kf_reader;

static inline void kf_r_init(kf_reader *r, const void *p, size_t n) {
  r->base = (const uint8_t *)p;
  r->len = n;
  r->pos = 0;
  r->err = KF_OK;
}
static inline size_t kf_r_left(const kf_reader *r) { return r->len - r->pos; }
static inline void kf_r_fail(kf_reader *r, int code) {
  if (r->err == KF_OK) r->err = code;
}
/* Returns a pointer to the next n bytes and advances, or NULL (error set). */
static inline const uint8_t *kf_r_take(kf_reader *r, size_t n) {
  const uint8_t *p;
  if (r->err) return NULL;
  if (!(n <= r->len - r->pos)) {
    kf_r_fail(r, KF_EINCOMPLETE);
    return NULL;
  }
  p = r->base + r->pos;
  r->pos += n;
  return p;
}

/* Wrapping int64 arithmetic (two's complement, as Java's longs): values
 * from the wire must never cause signed overflow. */
static inline int64_t kf_add64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t kf_neg64(int64_t a) { return (int64_t)(0 - (uint64_t)a); }

static inline uint16_t kf_be16(const uint8_t *p) {
  return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}
static inline uint32_t kf_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t kf_be64(const uint8_t *p) {
  return (uint64_t)kf_be32(p) << 32 | kf_be32(p + 4);
}

static inline int8_t kf_r_i8(kf_reader *r) {
  const uint8_t *p = kf_r_take(r, 1);
  return p ? (int8_t)p[0] : 0;
}
static inline int16_t kf_r_i16(kf_reader *r) {
  const uint8_t *p = kf_r_take(r, 2);
  return p ? (int16_t)kf_be16(p) : 0;
}
static inline uint16_t kf_r_u16(kf_reader *r) {
  const uint8_t *p = kf_r_take(r, 2);
  return p ? kf_be16(p) : 0;
}
static inline int32_t kf_r_i32(kf_reader *r) {
  const uint8_t *p = kf_r_take(r, 4);
  return p ? (int32_t)kf_be32(p) : 0;
}
static inline uint32_t kf_r_u32(kf_reader *r) {
  const uint8_t *p = kf_r_take(r, 4);
  return p ? kf_be32(p) : 0;
}
static inline int64_t kf_r_i64(kf_reader *r) {
  const uint8_t *p = kf_r_take(r, 8);
  return p ? (int64_t)kf_be64(p) : 0;
}
double kf_r_f64(kf_reader *r);

/* Unsigned LEB128 varint (at most 5 bytes) / varlong (at most 10 bytes). */
uint32_t kf_r_uvarint(kf_reader *r);
uint64_t kf_r_uvarlong(kf_reader *r);
/* Zig-zag signed varint / varlong, as used inside records. */
int32_t kf_r_varint(kf_reader *r);
int64_t kf_r_varlong(kf_reader *r);

/*
 * Length-prefixed strings/bytes. kind: 16 (int16 len), 32 (int32 len),
 * 'c' (compact: uvarint len+1), 'v' (zig-zag varint len, records).
 * Returns 1 and sets *p (NULL for null) and *n; returns 0 on error.
 * A negative length other than -1 is corrupt.
 */
int kf_r_lenbytes(kf_reader *r, int kind, const uint8_t **p, size_t *n);
/* Array count for kind 32 or 'c'; -1 means null. A count that cannot fit in
 * the bytes left (at least min_elem bytes each) is corrupt. */
int64_t kf_r_count(kf_reader *r, int kind, size_t min_elem);

typedef struct kf_writer {
  uint8_t *buf;
  size_t len;
  size_t cap;
  int err; /* sticky KF_ENOMEM / KF_EVALUE */
} kf_writer;

/* Bytes held by writers (every growable buffer of the core), and the high
 * water mark: how the specs prove that decoding stays bounded. Process-wide,
 * not synchronized (nginx workers are processes). */
void kf_mem_account(long delta);
size_t kf_mem_current(void);
size_t kf_mem_peak(void);
void kf_mem_reset_peak(void);

void kf_w_init(kf_writer *w);
void kf_w_free(kf_writer *w);
/* Makes room for n more bytes; returns pointer to them (not advanced) or NULL. */
uint8_t *kf_w_reserve(kf_writer *w, size_t n);
static inline uint8_t *kf_w_extend(kf_writer *w, size_t n) {
  uint8_t *p;
  if (w->err) return NULL;
  if (!(n <= w->cap - w->len)) {
    if (!kf_w_reserve(w, n)) return NULL;
  }
  p = w->buf + w->len;
  w->len += n;
  return p;
}
static inline void kf_put_be16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static inline void kf_put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static inline void kf_put_be64(uint8_t *p, uint64_t v) {
  kf_put_be32(p, (uint32_t)(v >> 32));
  kf_put_be32(p + 4, (uint32_t)v);
}
static inline void kf_w_bytes(kf_writer *w, const void *src, size_t n) {
  uint8_t *p = kf_w_extend(w, n);
  if (p && n) memcpy(p, src, n);
}
static inline void kf_w_i8(kf_writer *w, int8_t v) {
  uint8_t *p = kf_w_extend(w, 1);
  if (p) p[0] = (uint8_t)v;
}
static inline void kf_w_i16(kf_writer *w, int16_t v) {
  uint8_t *p = kf_w_extend(w, 2);
  if (p) kf_put_be16(p, (uint16_t)v);
}
static inline void kf_w_i32(kf_writer *w, int32_t v) {
  uint8_t *p = kf_w_extend(w, 4);
  if (p) kf_put_be32(p, (uint32_t)v);
}
static inline void kf_w_i64(kf_writer *w, int64_t v) {
  uint8_t *p = kf_w_extend(w, 8);
  if (p) kf_put_be64(p, (uint64_t)v);
}
/* Stores a varint at p (room for 10 bytes reserved) and returns the end. */
static inline uint8_t *kf_put_uvarlong(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}
/* Zig-zag signed varint (records); no shift of a negative value. */
static inline uint64_t kf_zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (v < 0 ? ~(uint64_t)0 : 0u); }
static inline uint8_t *kf_put_varlong(uint8_t *p, int64_t v) { return kf_put_uvarlong(p, kf_zigzag64(v)); }
void kf_w_f64(kf_writer *w, double v);
void kf_w_uvarint(kf_writer *w, uint32_t v);
void kf_w_uvarlong(kf_writer *w, uint64_t v);
void kf_w_varint(kf_writer *w, int32_t v);
void kf_w_varlong(kf_writer *w, int64_t v);
/* Encoded sizes, inline: a record's size is five of them, summed before
 * its bytes are written (kf_batch_record). */
static inline size_t kf_uvarint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}
static inline size_t kf_varlong_size(int64_t v) {
  return kf_uvarint_size(kf_zigzag64(v));
}
/* Writes a length-prefixed string (kind as in kf_r_lenbytes); p == NULL is
 * null. Sets KF_EVALUE when the length does not fit the prefix. */
void kf_w_lenbytes(kf_writer *w, int kind, const void *p, size_t n);
/* Only the length prefix of n bytes (not null) that the caller sends
 * from elsewhere (a request frame in pieces, lua_schema.c). */
void kf_w_lenprefix(kf_writer *w, int kind, size_t n);
/* Array count prefix; null when is_null. */
void kf_w_count(kf_writer *w, int kind, size_t n, int is_null);
/* Reserves a slot of n bytes and returns its offset. */
static inline size_t kf_w_slot(kf_writer *w, size_t n) {
  size_t at = w->len;
  kf_w_extend(w, n);
  return at;
}
static inline void kf_w_patch32(kf_writer *w, size_t at, uint32_t v) {
  if (!w->err) kf_put_be32(w->buf + at, v);
}
/* Inserts n bytes at offset at, moving the tail (used for varint lengths). */
void kf_w_insert(kf_writer *w, size_t at, const void *src, size_t n);

#endif
