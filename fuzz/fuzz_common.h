/* fuzz_common.h - visitors that walk everything and keep nothing, so the
 * harnesses exercise the whole decoder (records included) without Lua. */
#ifndef KF_FUZZ_COMMON_H
#define KF_FUZZ_COMMON_H

#include <stdint.h>
#include <string.h>

#include "../csrc/buf.h"
#include "../csrc/records.h"
#include "../csrc/schema.h"

/* Folds every value into a checksum so nothing is optimized away. */
static uint64_t fz_sink;

static int fz_batch(void *u, const kf_batch_info *b) {
  (void)u;
  fz_sink += (uint64_t)b->base_offset + (uint64_t)b->count;
  return 0;
}

static int fz_record(void *u, const kf_record *r) {
  kf_reader hr;
  const uint8_t *k, *v;
  size_t kl, vl;
  (void)u;
  fz_sink += (uint64_t)r->offset + r->key_len + r->value_len;
  if (r->key_len) fz_sink += r->key[0];
  if (r->value_len) fz_sink += r->value[r->value_len - 1];
  kf_r_init(&hr, r->headers, r->headers_len);
  while (kf_headers_next(&hr, &k, &kl, &v, &vl)) fz_sink += kl + vl;
  return 0;
}

static int fz_problem(void *u, int code, const char *msg) {
  (void)u;
  fz_sink += (uint64_t)code + strlen(msg);
  return 0;
}

static kf_rec_scratch fz_scratch;
static int fz_scratch_ready;

static void fz_records(const uint8_t *p, size_t n, int check_crc) {
  kf_rec_visitor v = {NULL, fz_batch, fz_record, fz_problem};
  kf_rec_opts o;
  kf_rec_result res;
  kf_err e = {0, {0}};
  if (!fz_scratch_ready) {
    kf_rec_scratch_init(&fz_scratch);
    fz_scratch_ready = 1;
  }
  o.max_decompressed = 1u << 20;
  o.check_crc = check_crc;
  kf_records_decode(p, n, &o, &fz_scratch, &v, &res, &e);
  fz_sink += res.records + res.batches;
}

/* Pauses after every k-th record (KF_REC_PAUSE). */
static unsigned fz_every, fz_seen;
static int fz_record_pausing(void *u, const kf_record *r) {
  fz_record(u, r);
  return ++fz_seen % fz_every == 0 ? KF_REC_PAUSE : 0;
}

/* The same blob decoded pausing every k records and resuming (what a
 * consumer's max_records does): the records seen must be the same count
 * as in one go (abort() otherwise, so the fuzzer reports it). */
static void fz_records_paused(const uint8_t *p, size_t n, int check_crc, unsigned k) {
  kf_rec_visitor v = {NULL, fz_batch, fz_record_pausing, fz_problem};
  kf_rec_visitor whole = {NULL, fz_batch, fz_record, fz_problem};
  kf_rec_opts o;
  kf_rec_result res, res0;
  kf_err e = {0, {0}};
  size_t start = 0, records = 0, rounds = 0;
  int rc0, rc;
  if (!fz_scratch_ready) {
    kf_rec_scratch_init(&fz_scratch);
    fz_scratch_ready = 1;
  }
  o.max_decompressed = 1u << 20;
  o.check_crc = check_crc;
  rc0 = kf_records_decode(p, n, &o, &fz_scratch, &whole, &res0, &e);
  fz_every = k ? k : 1;
  fz_seen = 0;
  for (;;) {
    size_t at;
    rc = kf_records_decode_at(p, n, start, &o, &fz_scratch, &v, &res, &e);
    records += res.records;
    if (rc || !res.paused) break;
    at = res.resume_at; /* (a resume's result has none: it ends at the batch) */
    while (res.paused && res.rleft > 0) {
      kf_batch_info b = res.rb;
      const uint8_t *rr = res.rrecs;
      size_t rl = res.rlen;
      int32_t left = res.rleft;
      rc = kf_records_resume(&b, rr, rl, left, &v, &res, &e);
      records += res.records;
      if (rc) break;
    }
    if (rc) break;
    if (at <= start && start) abort(); /* must move on */
    start = at;
    if (++rounds > n + 1) abort();
  }
  if (rc0 == 0 && rc == 0 && records != res0.records) abort();
}

static void d_int(void *u, const kf_field *f, size_t idx, int64_t v) { (void)u, (void)f, (void)idx; fz_sink += (uint64_t)v; }
static void d_num(void *u, const kf_field *f, size_t idx, double v) { (void)u, (void)f, (void)idx; fz_sink += (uint64_t)(v == v); }
static void d_bool(void *u, const kf_field *f, size_t idx, int v) { (void)u, (void)f, (void)idx; fz_sink += (uint64_t)v; }
static void d_bytes(void *u, const kf_field *f, size_t idx, const uint8_t *p, size_t n) {
  (void)u, (void)f, (void)idx;
  fz_sink += n + (n ? p[0] : 0);
}
static void d_nil(void *u, const kf_field *f, size_t idx) { (void)u, (void)f, (void)idx; fz_sink++; }
static void d_begin(void *u, const kf_field *f, size_t idx, size_t n) { (void)u, (void)f, (void)idx; fz_sink += n; }
static void d_end(void *u, const kf_field *f, size_t idx) { (void)u, (void)f, (void)idx; }
static int d_records(void *u, const kf_field *f, const uint8_t *p, size_t n, size_t at, kf_err *e) {
  (void)u, (void)f, (void)at, (void)e;
  if (p) fz_records(p, n, 1);
  return 0;
}

static const kf_dec_ops fz_dec_ops = {d_int, d_num, d_bool, d_bytes, d_nil, d_begin, d_end, d_records};

#endif
