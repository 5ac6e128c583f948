/* records.c - message sets (magic 0/1) and RecordBatch v2. */
#include "records.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "compress.h"
#include "crc.h"

int64_t kf_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kf_rec_scratch_init(kf_rec_scratch *s) {
  int i;
  for (i = 0; i < KF_MAX_NEST; i++) kf_w_init(&s->level[i]);
}

void kf_rec_scratch_free(kf_rec_scratch *s) {
  int i;
  for (i = 0; i < KF_MAX_NEST; i++) kf_w_free(&s->level[i]);
}

/* ------------------------------------------------------------------ */
/* Decoding                                                            */

typedef struct dctx {
  const kf_rec_opts *o;
  kf_rec_scratch *s;
  const kf_rec_visitor *v;
  kf_rec_result *res;
  kf_err *e;
  int pause; /* the visitor paused at the last record of an entry */
} dctx;

/* What inner messages of a compressed legacy wrapper inherit from it. */
typedef struct wrap {
  int active;
  int magic;
  int64_t offset;   /* the wrapper's offset = the last inner message's */
  int64_t last_rel; /* magic 1: relative offset of the last inner message */
  int ts_type;
  int64_t timestamp;
} wrap;

static int problem(dctx *c, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int problem(dctx *c, int code, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->res->problems++;
  if (c->v->problem && c->v->problem(c->v->ud, code, msg)) {
    kf_err_set(c->e, KF_ECORRUPT, "%s", msg);
    return -1;
  }
  return 0;
}

static int decode_set(dctx *c, const uint8_t *p, size_t n, int depth, const wrap *w,
                      size_t at0);
static int v2_records(dctx *c, const kf_batch_info *b, kf_reader *r, int32_t from);

int kf_headers_next(kf_reader *r, const uint8_t **k, size_t *kl, const uint8_t **v, size_t *vl) {
  if (kf_r_left(r) == 0 || r->err) return 0;
  if (!kf_r_lenbytes(r, 'v', k, kl) || !*k) return 0;
  if (!kf_r_lenbytes(r, 'v', v, vl)) return 0;
  return 1;
}

/* Parses one v2 record from r (positioned at its length varint). */
static int v2_record(kf_reader *r, const kf_batch_info *b, kf_record *rec) {
  int32_t len = kf_r_varint(r);
  int32_t i, nh;
  const uint8_t *body;
  kf_reader rr;
  if (r->err || len < 0) return -1;
  body = kf_r_take(r, (size_t)len);
  if (!body) return -1;
  kf_r_init(&rr, body, (size_t)len); /* the record cannot read past its length */
  (void)kf_r_i8(&rr);                /* attributes: unused by Kafka */
  /* Deltas wrap like Java's longs: hostile values must not be UB. */
  rec->timestamp = kf_add64(b->first_timestamp, kf_r_varlong(&rr));
  rec->offset = kf_add64(b->base_offset, kf_r_varint(&rr));
  if (!kf_r_lenbytes(&rr, 'v', &rec->key, &rec->key_len)) return -1;
  if (!kf_r_lenbytes(&rr, 'v', &rec->value, &rec->value_len)) return -1;
  nh = kf_r_varint(&rr);
  if (rr.err || nh < 0 || (size_t)nh > kf_r_left(&rr) / 2) return -1;
  rec->headers = rr.base + rr.pos;
  for (i = 0; i < nh; i++) {
    const uint8_t *hk, *hv;
    size_t hkl, hvl;
    if (!kf_r_lenbytes(&rr, 'v', &hk, &hkl) || !hk) return -1;
    if (!kf_r_lenbytes(&rr, 'v', &hv, &hvl)) return -1;
  }
  if (rr.err || kf_r_left(&rr) != 0) return -1;
  rec->headers_len = (size_t)(rr.base + rr.pos - rec->headers);
  rec->nheaders = (uint32_t)nh;
  if (b->timestamp_type == 1) rec->timestamp = b->max_timestamp;
  return 0;
}

static int decode_v2(dctx *c, const uint8_t *p, size_t n, int depth, size_t at) {
  kf_batch_info b;
  kf_reader r;
  const uint8_t *recs;
  size_t nrecs;
  int16_t attr;
  int rc;
  if (depth > 0) return problem(c, KF_ECORRUPT, "record batch inside a legacy wrapper at byte %zu", at);
  if (n < KF_V2_HEADER)
    return problem(c, KF_ECORRUPT, "record batch at byte %zu is %zu bytes, shorter than its header", at, n);
  memset(&b, 0, sizeof b);
  b.byte_offset = at;
  b.magic = 2;
  b.base_offset = (int64_t)kf_be64(p);
  b.partition_leader_epoch = (int32_t)kf_be32(p + 12);
  b.crc = kf_be32(p + 17);
  attr = (int16_t)kf_be16(p + 21);
  b.codec = attr & 7;
  b.timestamp_type = (attr >> 3) & 1;
  b.transactional = (attr >> 4) & 1;
  b.control = (attr >> 5) & 1;
  b.last_offset_delta = (int32_t)kf_be32(p + 23);
  b.first_timestamp = (int64_t)kf_be64(p + 27);
  b.max_timestamp = (int64_t)kf_be64(p + 35);
  b.producer_id = (int64_t)kf_be64(p + 43);
  b.producer_epoch = (int16_t)kf_be16(p + 51);
  b.base_sequence = (int32_t)kf_be32(p + 53);
  b.count = (int32_t)kf_be32(p + 57);
  if (c->o->check_crc) {
    uint32_t crc = kf_crc32c(0, p + 21, n - 21);
    if (crc != b.crc)
      return problem(c, KF_ECORRUPT,
                     "crc mismatch in record batch at byte %zu (offset %lld): stored %08x, computed %08x",
                     at, (long long)b.base_offset, b.crc, crc);
  }
  if (b.count < 0)
    return problem(c, KF_ECORRUPT, "negative record count in batch at byte %zu", at);
  recs = p + KF_V2_HEADER;
  nrecs = n - KF_V2_HEADER;
  if (b.codec != KF_CODEC_NONE) {
    kf_writer *sw = &c->s->level[depth];
    kf_err de;
    KF_ERR_INIT(de);
    sw->len = 0;
    if (kf_decompress(b.codec, recs, nrecs, sw, c->o->max_decompressed, &de))
      return problem(c, de.code, "record batch at byte %zu (offset %lld): %s", at,
                     (long long)b.base_offset, de.msg);
    recs = sw->buf;
    nrecs = sw->len;
  }
  if ((size_t)b.count > nrecs / 7) /* the smallest record is 7 bytes */
    return problem(c, KF_ECORRUPT, "record batch at byte %zu declares %d records in %zu bytes", at,
                   (int)b.count, nrecs);
  c->res->batches++;
  if (c->v->batch && c->v->batch(c->v->ud, &b)) return -1;
  kf_r_init(&r, recs, nrecs);
  rc = v2_records(c, &b, &r, 0);
  if (rc > 0) c->res->rcompressed = b.codec != KF_CODEC_NONE;
  return rc;
}

/* The records of v2 batch b from record `from` on (r at it). Returns 0,
 * -1, or 1 when the visitor paused before the batch's end (the rest of the
 * batch saved in c->res; a pause at its last record is c->pause). */
static int v2_records(dctx *c, const kf_batch_info *b, kf_reader *r, int32_t from) {
  int32_t i;
  for (i = from; i < b->count; i++) {
    kf_record rec;
    int rc;
    rec.crc = -1;
    rec.magic = 2;
    rec.control = b->control;
    if (v2_record(r, b, &rec))
      return problem(c, KF_ECORRUPT, "record %d of the batch at byte %zu (offset %lld) is malformed",
                     (int)i, b->byte_offset, (long long)b->base_offset);
    c->res->records++;
    rc = c->v->record(c->v->ud, &rec);
    if (rc == KF_REC_PAUSE) {
      if (i + 1 < b->count) {
        kf_rec_result *res = c->res;
        res->paused = 1;
        res->rleft = b->count - i - 1;
        res->rb = *b;
        res->rrecs = r->base + r->pos;
        res->rlen = kf_r_left(r);
        return 1;
      }
      c->pause = 1;
    } else if (rc) {
      return -1;
    }
  }
  return 0;
}

int kf_records_resume(const kf_batch_info *b, const uint8_t *recs, size_t n, int32_t left,
                      const kf_rec_visitor *v, kf_rec_result *res, kf_err *e) {
  dctx c;
  kf_reader r;
  memset(res, 0, sizeof *res);
  memset(&c, 0, sizeof c);
  c.v = v;
  c.res = res;
  c.e = e;
  if (left <= 0 || left > b->count) {
    kf_err_set(e, KF_EVALUE, "resume: %d records left of a batch of %d", (int)left, (int)b->count);
    return -1;
  }
  kf_r_init(&r, recs, n);
  if (v2_records(&c, b, &r, b->count - left) < 0) return -1;
  if (c.pause) res->paused = 1; /* at the batch's last record: rleft 0 */
  return 0;
}

/* Relative offset of the last complete message of a legacy inner set. */
static int64_t last_inner_offset(const uint8_t *p, size_t n) {
  size_t pos = 0;
  int64_t last = 0;
  while (12 <= n - pos) {
    int32_t sz = (int32_t)kf_be32(p + pos + 8);
    if (sz < 0 || !((size_t)sz <= n - pos - 12)) break;
    last = (int64_t)kf_be64(p + pos);
    pos += 12 + (size_t)sz;
  }
  return last;
}

static int decode_legacy(dctx *c, const uint8_t *p, size_t n, int depth, const wrap *w,
                         size_t at) {
  int magic = p[16], attr, codec;
  int64_t offset = (int64_t)kf_be64(p), ts = -1;
  uint32_t crc = kf_be32(p + 12);
  kf_reader r;
  kf_record rec;
  size_t minsz = magic == 1 ? 34 : 26; /* 12 + crc, magic, attr, [ts], key len, value len */
  if (n < minsz)
    return problem(c, KF_ECORRUPT, "message at byte %zu is %zu bytes, too short for magic %d", at, n,
                   magic);
  if (c->o->check_crc) {
    uint32_t calc = kf_crc32(0, p + 16, n - 16);
    if (calc != crc)
      return problem(c, KF_ECORRUPT,
                     "crc mismatch in message at byte %zu (offset %lld): stored %08x, computed %08x",
                     at, (long long)offset, crc, calc);
  }
  attr = p[17];
  codec = attr & 7;
  kf_r_init(&r, p, n);
  r.pos = 18;
  if (magic == 1) ts = kf_r_i64(&r);
  memset(&rec, 0, sizeof rec);
  if (!kf_r_lenbytes(&r, 32, &rec.key, &rec.key_len) ||
      !kf_r_lenbytes(&r, 32, &rec.value, &rec.value_len))
    return problem(c, KF_ECORRUPT, "message at byte %zu (offset %lld) has bad key/value lengths", at,
                   (long long)offset);
  if (codec == KF_CODEC_NONE) {
    rec.offset = offset;
    rec.timestamp = ts;
    if (w->active) {
      /* Like Kafka's readers: a wrapper written by a producer (offset 0)
       * gives a negative base; then the relative offsets stand. */
      int64_t base = kf_add64(w->offset, kf_neg64(w->last_rel));
      if (w->magic == 1 && magic == 1 && base >= 0) rec.offset = kf_add64(base, offset);
      if (w->magic == 1 && w->ts_type == 1) rec.timestamp = w->timestamp;
    }
    rec.crc = crc;
    rec.magic = magic;
    c->res->records++;
    {
      int rc = c->v->record(c->v->ud, &rec);
      if (rc == KF_REC_PAUSE) c->pause = 1; /* inside a wrapper: after the wrapper */
      else if (rc) return -1;
    }
    return 0;
  } else {
    kf_batch_info b;
    kf_writer *sw;
    kf_err de;
    KF_ERR_INIT(de);
    wrap inner;
    if (depth + 1 >= KF_MAX_NEST)
      return problem(c, KF_ELIMIT, "compressed messages nested more than %d deep at byte %zu",
                     KF_MAX_NEST - 1, at);
    if (!rec.value) return problem(c, KF_ECORRUPT, "compressed message at byte %zu has a null value", at);
    memset(&b, 0, sizeof b);
    b.byte_offset = at;
    b.magic = magic;
    b.codec = codec;
    b.timestamp_type = (attr >> 3) & 1;
    b.base_offset = offset;
    b.first_timestamp = b.max_timestamp = ts;
    b.partition_leader_epoch = -1;
    b.producer_id = -1;
    b.producer_epoch = -1;
    b.base_sequence = -1;
    b.crc = crc;
    sw = &c->s->level[depth];
    sw->len = 0;
    if (kf_decompress(codec, rec.value, rec.value_len, sw, c->o->max_decompressed, &de))
      return problem(c, de.code, "message at byte %zu (offset %lld): %s", at, (long long)offset, de.msg);
    c->res->batches++;
    if (c->v->batch && c->v->batch(c->v->ud, &b)) return -1;
    inner.active = 1;
    inner.magic = magic;
    inner.offset = offset;
    inner.last_rel = last_inner_offset(sw->buf, sw->len);
    inner.ts_type = b.timestamp_type;
    inner.timestamp = ts;
    return decode_set(c, sw->buf, sw->len, depth + 1, &inner, at);
  }
}

static int decode_set_from(dctx *c, const uint8_t *p, size_t n, size_t pos, int depth, const wrap *w,
                           size_t at0);
static int decode_set(dctx *c, const uint8_t *p, size_t n, int depth, const wrap *w,
                      size_t at0) {
  return decode_set_from(c, p, n, 0, depth, w, at0);
}

static int decode_set_from(dctx *c, const uint8_t *p, size_t n, size_t pos, int depth, const wrap *w,
                           size_t at0) {
  while (pos < n) {
    size_t left = n - pos, at = depth ? at0 : pos;
    int32_t size;
    int magic;
    if (left < 17) { /* offset, size, crc/epoch, magic */
      if (depth == 0) c->res->partial = 1;
      else return problem(c, KF_ECORRUPT, "truncated inner message in the wrapper at byte %zu", at0);
      break;
    }
    size = (int32_t)kf_be32(p + pos + 8);
    if (size < 0) {
      if (depth) return problem(c, KF_ECORRUPT, "negative inner message size in the wrapper at byte %zu", at0);
      kf_err_set(c->e, KF_ECORRUPT, "corrupt records: negative batch size %d at byte %zu",
                 (int)size, pos + 8);
      return -1;
    }
    if (!((size_t)size <= left - 12)) {
      if (depth == 0) c->res->partial = 1;
      else return problem(c, KF_ECORRUPT, "truncated inner message in the wrapper at byte %zu", at0);
      break;
    }
    magic = p[pos + 16];
    if (magic == 2) {
      int rc = decode_v2(c, p + pos, 12 + (size_t)size, depth, at);
      if (rc < 0) return -1;
      if (rc > 0) {
        c->res->resume_at = pos + 12 + (size_t)size;
        return 0;
      }
    } else if (magic == 0 || magic == 1) {
      if (decode_legacy(c, p + pos, 12 + (size_t)size, depth, w, at)) return -1;
    } else {
      if (depth) return problem(c, KF_ECORRUPT, "unknown magic %d inside the wrapper at byte %zu", magic, at0);
      kf_err_set(c->e, KF_ECORRUPT, "corrupt records: unknown magic %d at byte %zu", magic, pos + 16);
      return -1;
    }
    pos += 12 + (size_t)size;
    if (c->pause && depth == 0) {
      /* paused at an entry's end: worth a rest only if a complete entry follows */
      c->pause = 0;
      if (!kf_records_entry_follows(p, n, pos)) continue;
      c->res->paused = 1;
      c->res->resume_at = pos;
      return 0;
    }
  }
  return 0;
}

int kf_records_entry_follows(const uint8_t *p, size_t n, size_t pos) {
  size_t more;
  int32_t size;
  if (pos > n) return 0;
  more = n - pos;
  if (more < 17) return 0; /* offset, size, crc/epoch, magic */
  size = (int32_t)kf_be32(p + pos + 8);
  return size < 0 || (size_t)size <= more - 12; /* (a negative size: the decoder reports it) */
}

int kf_records_decode(const uint8_t *p, size_t n, const kf_rec_opts *o, kf_rec_scratch *s,
                      const kf_rec_visitor *v, kf_rec_result *res, kf_err *e) {
  return kf_records_decode_at(p, n, 0, o, s, v, res, e);
}

int kf_records_decode_at(const uint8_t *p, size_t n, size_t start, const kf_rec_opts *o, kf_rec_scratch *s,
                         const kf_rec_visitor *v, kf_rec_result *res, kf_err *e) {
  dctx c;
  wrap none;
  memset(res, 0, sizeof *res);
  memset(&none, 0, sizeof none);
  c.pause = 0;
  c.o = o;
  c.s = s;
  c.v = v;
  c.res = res;
  c.e = e;
  if (start > n) start = n;
  return decode_set_from(&c, p, n, start, 0, &none, 0);
}

int kf_records_scan(const uint8_t *p, size_t n, int64_t *next, size_t *batches, int64_t want, size_t *cut,
                    kf_err *e) {
  size_t pos = 0;
  int64_t count = 0;
  *next = 0;
  *batches = 0;
  if (cut) *cut = 0;
  /* the same walk as decode_set's top level: offset, size, epoch, magic */
  while (17 <= n - pos) {
    size_t left = n - pos;
    int32_t size = (int32_t)kf_be32(p + pos + 8);
    int magic = p[pos + 16];
    int64_t end;
    if (size < 0) {
      kf_err_set(e, KF_ECORRUPT, "corrupt records: negative batch size %d at byte %zu", (int)size, pos + 8);
      return -1;
    }
    if (!((size_t)size <= left - 12)) break; /* the trailing partial batch */
    if (magic == 0 || magic == 1) {
      /* a message, or a compressed wrapper carrying its last inner offset
       * (as brokers write them) */
      end = kf_add64((int64_t)kf_be64(p + pos), 1);
    } else if (magic != 2) {
      kf_err_set(e, KF_ECORRUPT, "corrupt records: unknown magic %d at byte %zu", magic, pos + 16);
      return -1;
    } else if (!(KF_V2_HEADER <= 12 + (size_t)size)) {
      kf_err_set(e, KF_ECORRUPT, "record batch at byte %zu is %zu bytes, shorter than its header", pos,
                 12 + (size_t)size);
      return -1;
    } else {
      end = kf_add64((int64_t)kf_be64(p + pos), (int64_t)(int32_t)kf_be32(p + pos + 23) + 1);
    }
    if (cut && !*cut) {
      int32_t nrec = magic == 2 ? (int32_t)kf_be32(p + pos + 57) : 1;
      if (nrec < 0) nrec = 0;
      if (count > 0 && count + nrec > want) {
        *cut = pos; /* the batches before this one */
      } else {
        count += nrec;
      }
    }
    if (*batches == 0 || end > *next) *next = end; /* as the decoder's next_offset: the highest end */
    (*batches)++;
    pos += 12 + (size_t)size;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Encoding                                                            */

void kf_batch_opts_default(kf_batch_opts *o) {
  o->base_offset = 0;
  o->producer_id = -1;
  o->producer_epoch = -1;
  o->base_sequence = -1;
  o->partition_leader_epoch = -1;
  o->transactional = 0;
  o->control = 0;
}

void kf_batch_init(kf_batch *b, int magic, int codec) {
  b->magic = magic;
  b->codec = codec;
  kf_w_init(&b->body);
  b->count = 0;
  b->first_ts = b->max_ts = 0;
  b->rec_start = 0;
  b->crc = 0;
  b->crc_len = 0;
}

void kf_batch_free(kf_batch *b) {
  kf_w_free(&b->body);
  b->crc = 0; /* an empty body: its sum must not cover bytes of the old one */
  b->crc_len = 0;
}

void kf_batch_clear(kf_batch *b) {
  b->crc = 0;
  b->crc_len = 0;
  b->body.len = 0;
  b->body.err = KF_OK;
  b->count = 0;
  b->first_ts = b->max_ts = 0;
}

static size_t zz_size(int64_t v) { return kf_varlong_size(v); }

size_t kf_v2_header_size(size_t klen, const void *v, size_t vlen) {
  return zz_size((int64_t)klen) + klen + (v ? zz_size((int64_t)vlen) + vlen : 1);
}

/* Carries the body's CRC over the bytes appended since: the CRC of a v2
 * batch covers its records, and summing them when sealed read 1 MiB of
 * memory gone cold (an uncompressed batch is sent from the body itself).
 * kf_batch_record sums every SUM_LAG bytes, not every record: a 100 B
 * record is too short for the three-stream CRC (3 KiB blocks) and ran at a
 * third of its speed, while 12 KiB are still in L1. */
#define SUM_LAG 12288
static uint32_t body_sum(kf_batch *b) {
  if (b->crc_len < b->body.len) {
    b->crc = kf_crc32c(b->crc, b->body.buf + b->crc_len, b->body.len - b->crc_len);
    b->crc_len = b->body.len;
  }
  return b->crc;
}

int kf_batch_record(kf_batch *b, int64_t ts, const void *key, size_t klen, const void *value,
                    size_t vlen, uint32_t nheaders, size_t headers_size, kf_err *e) {
  kf_writer *w = &b->body;
  if (b->count == INT32_MAX || klen > INT32_MAX || vlen > INT32_MAX) {
    kf_err_set(e, KF_EVALUE, "record too large or too many records");
    return -1;
  }
  if (b->count == 0) b->first_ts = b->max_ts = ts;
  if (ts > b->max_ts) b->max_ts = ts;
  if (b->magic == 2) {
    int64_t tsd = kf_add64(ts, kf_neg64(b->first_ts));
    if (w->len - b->crc_len >= SUM_LAG) body_sum(b); /* the records before: complete (headers included), in cache */
    size_t size = 1 + zz_size(tsd) + zz_size(b->count) +
                  (key ? zz_size((int64_t)klen) + klen : 1) +
                  (value ? zz_size((int64_t)vlen) + vlen : 1) + zz_size(nheaders) + headers_size;
    /* The hot path: one reservation, then plain stores. */
    uint8_t *p = kf_w_reserve(w, size + 10), *start = p;
    if (!p) goto oom;
    p = kf_put_varlong(p, (int64_t)size);
    *p++ = 0; /* attributes */
    p = kf_put_varlong(p, tsd);
    p = kf_put_varlong(p, b->count);
    if (key) {
      p = kf_put_varlong(p, (int64_t)klen);
      memcpy(p, key, klen);
      p += klen;
    } else {
      *p++ = 1; /* zig-zag -1: null */
    }
    if (value) {
      p = kf_put_varlong(p, (int64_t)vlen);
      memcpy(p, value, vlen);
      p += vlen;
    } else {
      *p++ = 1;
    }
    p = kf_put_varlong(p, nheaders);
    w->len += (size_t)(p - start);
  } else {
    size_t start = w->len, size;
    if (nheaders) {
      kf_err_set(e, KF_EVALUE, "record headers need magic 2 (message format v2)");
      return -1;
    }
    kf_w_i64(w, b->count); /* relative offset; kf_batch_encode rebases */
    kf_w_slot(w, 8);       /* size, crc */
    kf_w_i8(w, (int8_t)b->magic);
    kf_w_i8(w, 0);
    if (b->magic == 1) kf_w_i64(w, ts);
    kf_w_lenbytes(w, 32, key, klen);
    kf_w_lenbytes(w, 32, value, vlen);
    if (w->err) goto oom;
    size = w->len - start - 12;
    kf_put_be32(w->buf + start + 8, (uint32_t)size);
    kf_put_be32(w->buf + start + 12, kf_crc32(0, w->buf + start + 16, size - 4));
  }
  if (w->err) goto oom;
  b->count++;
  return 0;
oom:
  kf_err_set(e, KF_ENOMEM, "out of memory building a record batch");
  return -1;
}

void kf_batch_header(kf_batch *b, const void *k, size_t kl, const void *v, size_t vl) {
  kf_w_lenbytes(&b->body, 'v', k, kl);
  kf_w_lenbytes(&b->body, 'v', v, vl);
}

/* The v2 header, its size and CRC slots left for v2_seal. */
static void v2_head(const kf_batch *b, const kf_batch_opts *o, kf_writer *out) {
  int16_t attr = (int16_t)(b->codec | (o->transactional ? 0x10 : 0) | (o->control ? 0x20 : 0));
  kf_w_i64(out, o->base_offset);
  kf_w_slot(out, 4);
  kf_w_i32(out, o->partition_leader_epoch);
  kf_w_i8(out, 2);
  kf_w_slot(out, 4);
  kf_w_i16(out, attr);
  kf_w_i32(out, b->count - 1);
  kf_w_i64(out, b->first_ts);
  kf_w_i64(out, b->max_ts);
  kf_w_i64(out, o->producer_id);
  kf_w_i16(out, o->producer_epoch);
  kf_w_i32(out, o->base_sequence);
  kf_w_i32(out, b->count);
}

/* Patches size and CRC of the batch at start: its bytes in out, then
 * tn more (whose CRC-32C is tail_crc) that follow them on the wire but
 * are not in out. */
static int v2_seal(kf_writer *out, size_t start, uint32_t tail_crc, size_t tn, kf_err *e) {
  size_t size;
  uint32_t crc;
  if (out->err) {
    kf_err_set(e, KF_ENOMEM, "out of memory encoding a record batch");
    return -1;
  }
  size = out->len - start - 12;
  if (!(size <= (size_t)INT32_MAX && tn <= (size_t)INT32_MAX - size)) {
    kf_err_set(e, KF_EVALUE, "record batch larger than 2 GiB");
    return -1;
  }
  crc = kf_crc32c(0, out->buf + start + 21, out->len - start - 21);
  if (tn) crc = kf_crc32c_combine(crc, tail_crc, tn);
  kf_w_patch32(out, start + 8, (uint32_t)(size + tn));
  kf_w_patch32(out, start + 17, crc);
  return 0;
}

static int encode_v2(kf_batch *b, const kf_batch_opts *o, kf_writer *out, kf_err *e) {
  size_t start = out->len;
  v2_head(b, o, out);
  if (out->err || b->codec != KF_CODEC_NONE) {
    if (!out->err && kf_compress(b->codec, b->body.buf, b->body.len, out, 0, e)) return -1;
    return v2_seal(out, start, 0, 0, e);
  }
  /* uncompressed: the records' CRC is summed already */
  if (v2_seal(out, start, body_sum(b), b->body.len, e)) return -1;
  kf_w_bytes(out, b->body.buf, b->body.len);
  if (out->err) {
    kf_err_set(e, KF_ENOMEM, "out of memory encoding a record batch");
    return -1;
  }
  return 0;
}

int kf_batch_encode_head(kf_batch *b, const kf_batch_opts *o, kf_writer *out, kf_err *e) {
  size_t start = out->len;
  if (b->body.err) {
    kf_err_set(e, b->body.err, "record batch builder failed earlier (%s)", kf_err_name(b->body.err));
    return -1;
  }
  if (b->magic != 2 || b->codec != KF_CODEC_NONE || b->count == 0) {
    kf_err_set(e, KF_EVALUE, "only a non-empty uncompressed v2 batch is encoded apart from its records");
    return -1;
  }
  v2_head(b, o, out);
  return v2_seal(out, start, body_sum(b), b->body.len, e);
}

static int encode_legacy(kf_batch *b, const kf_batch_opts *o, kf_writer *out, kf_err *e) {
  size_t start = out->len, vlen_at, size;
  if (b->codec == KF_CODEC_NONE) {
    size_t pos;
    int64_t i = 0;
    kf_w_bytes(out, b->body.buf, b->body.len);
    if (out->err) goto oom;
    for (pos = start; pos < out->len; i++) {
      kf_put_be64(out->buf + pos, (uint64_t)o->base_offset + (uint64_t)i);
      pos += 12 + kf_be32(out->buf + pos + 8);
    }
    return 0;
  }
  /* One wrapper message whose value is the compressed inner set; its offset
   * is the last inner message's (inner offsets stay relative: 0..n-1). */
  kf_w_i64(out, kf_add64(o->base_offset, b->count - 1));
  kf_w_slot(out, 8);
  kf_w_i8(out, (int8_t)b->magic);
  kf_w_i8(out, (int8_t)b->codec);
  if (b->magic == 1) kf_w_i64(out, b->max_ts);
  kf_w_i32(out, -1);
  vlen_at = kf_w_slot(out, 4);
  if (out->err) goto oom;
  if (kf_compress(b->codec, b->body.buf, b->body.len, out, b->magic == 0, e)) return -1;
  if (out->err) goto oom;
  size = out->len - start - 12;
  if (size > INT32_MAX) {
    kf_err_set(e, KF_EVALUE, "message set larger than 2 GiB");
    return -1;
  }
  kf_w_patch32(out, vlen_at, (uint32_t)(out->len - vlen_at - 4));
  kf_w_patch32(out, start + 8, (uint32_t)size);
  kf_w_patch32(out, start + 12, kf_crc32(0, out->buf + start + 16, size - 4));
  return 0;
oom:
  kf_err_set(e, KF_ENOMEM, "out of memory encoding a message set");
  return -1;
}

int kf_batch_encode(kf_batch *b, const kf_batch_opts *o, kf_writer *out, kf_err *e) {
  if (b->body.err) {
    kf_err_set(e, b->body.err, "record batch builder failed earlier (%s)", kf_err_name(b->body.err));
    return -1;
  }
  if (b->count == 0) return 0;
  if (b->magic == 2) return encode_v2(b, o, out, e);
  if (b->codec == KF_CODEC_ZSTD) {
    kf_err_set(e, KF_EVALUE, "zstd needs magic 2 (message format v2)");
    return -1;
  }
  return encode_legacy(b, o, out, e);
}
