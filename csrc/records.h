/* records.h - Kafka record formats: message sets (magic 0 and 1) and
 * RecordBatch v2. Decoding walks any mix of them and reports to a visitor;
 * encoding goes through a builder that serializes each record as it is
 * appended, so no per-message structure is kept. */
#ifndef KF_RECORDS_H
#define KF_RECORDS_H

#include "buf.h"

#define KF_MAX_NEST 4 /* compressed wrappers inside wrappers, at most */
#define KF_V2_HEADER 61 /* RecordBatch header bytes */

typedef struct kf_batch_info {
  size_t byte_offset;  /* where the batch/wrapper starts in the records blob */
  int magic;
  int codec;
  int timestamp_type;  /* 0 create time, 1 log append time */
  int transactional;
  int control;
  int64_t base_offset;
  int32_t last_offset_delta;
  int32_t partition_leader_epoch; /* v2, else -1 */
  int64_t first_timestamp, max_timestamp;
  int64_t producer_id;
  int16_t producer_epoch;
  int32_t base_sequence;
  int32_t count;       /* records the header declares (v2) */
  uint32_t crc;
} kf_batch_info;

typedef struct kf_record {
  int64_t offset;
  int64_t timestamp;
  const uint8_t *key; /* NULL: null key */
  size_t key_len;
  const uint8_t *value; /* NULL: null value */
  size_t value_len;
  uint32_t nheaders;        /* v2 only; iterate with kf_headers_next */
  const uint8_t *headers;   /* raw, already validated */
  size_t headers_len;
  int64_t crc;              /* legacy magics: the message CRC; v2: -1 */
  int magic;
  int control;              /* record of a control batch */
} kf_record;

/* A record visitor's answer: this record is taken, stop after it; the
 * decoding can be resumed (kf_rec_result's pause fields say where). */
#define KF_REC_PAUSE 2

typedef struct kf_rec_visitor {
  void *ud;
  /* Each returns 0 to go on, nonzero to stop decoding (with e->code set);
   * record may return KF_REC_PAUSE. */
  int (*batch)(void *ud, const kf_batch_info *b);
  int (*record)(void *ud, const kf_record *r);
  /* A batch was skipped (CRC mismatch, bad compression, bad records). */
  int (*problem)(void *ud, int code, const char *msg);
} kf_rec_visitor;

typedef struct kf_rec_opts {
  size_t max_decompressed; /* per compressed batch */
  int check_crc;
} kf_rec_opts;

typedef struct kf_rec_scratch {
  kf_writer level[KF_MAX_NEST]; /* decompression buffers, one per nesting */
} kf_rec_scratch;

typedef struct kf_rec_result {
  int partial;        /* a truncated trailing batch/message was dropped */
  size_t batches;     /* v2 batches and legacy wrappers seen */
  size_t records;
  size_t problems;
  /* The visitor paused (KF_REC_PAUSE) with more to come: */
  int paused;
  size_t resume_at;   /* bytes of the blob up to the complete entries not begun */
  int32_t rleft;      /* records of the v2 batch paused inside still to read (0: none) */
  kf_batch_info rb;   /* that batch */
  const uint8_t *rrecs; /* its records left: in the blob, or in the scratch (rcompressed) */
  size_t rlen;
  int rcompressed;    /* the batch was compressed: rrecs lie in s->level[0] */
} kf_rec_result;

void kf_rec_scratch_init(kf_rec_scratch *s);
void kf_rec_scratch_free(kf_rec_scratch *s);

/* Decodes a records blob. Returns 0, or -1 with e set when the blob's
 * framing is corrupt (a negative size, an unknown magic) or the visitor
 * stopped. Skipped batches are reported through v->problem, not as errors. */
int kf_records_decode(const uint8_t *p, size_t n, const kf_rec_opts *o, kf_rec_scratch *s,
                      const kf_rec_visitor *v, kf_rec_result *res, kf_err *e);

/* kf_records_decode from byte start of the blob on (start: a resume_at;
 * byte offsets in messages stay the blob's). */
int kf_records_decode_at(const uint8_t *p, size_t n, size_t start, const kf_rec_opts *o, kf_rec_scratch *s,
                         const kf_rec_visitor *v, kf_rec_result *res, kf_err *e);

/* Does a complete entry (batch or message) start at byte pos of the blob,
 * or framing the decoder will report as broken? A pause leaves a rest only
 * then: a lone partial batch after it must not look like a batch larger
 * than the fetch asked for. */
int kf_records_entry_follows(const uint8_t *p, size_t n, size_t pos);

/* Goes on with the records of a v2 batch paused inside (res->rb, rrecs,
 * rlen, rleft of an earlier call); the visitor may pause again. The batch
 * callback is not called again. Returns 0, or -1 as kf_records_decode. */
int kf_records_resume(const kf_batch_info *b, const uint8_t *recs, size_t n, int32_t left,
                      const kf_rec_visitor *v, kf_rec_result *res, kf_err *e);

/* Reads only a records blob's framing (no CRC, no records) to find where
 * the next Fetch can start before the blob is decoded: *next gets one past
 * the highest offset of its complete batches (v2: base_offset +
 * last_offset_delta; magic 0/1: the message's offset, a compressed
 * wrapper's being its last inner one), *batches how many there are (0 when
 * none is complete; a truncated trailing batch is normal). Returns 0, or
 * -1 with e set (KF_ECORRUPT) for broken framing. With cut: *cut gets the
 * bytes of the leading whole batches that hold at most want records, at
 * least one batch (v2: the header's record count; magic 0/1: one a
 * message), 0 when the complete batches hold no more than want. */
int kf_records_scan(const uint8_t *p, size_t n, int64_t *next, size_t *batches, int64_t want, size_t *cut,
                    kf_err *e);

/* Iterates validated v2 headers: returns 1 and fills k/v (v NULL = null). */
int kf_headers_next(kf_reader *r, const uint8_t **k, size_t *kl, const uint8_t **v, size_t *vl);

typedef struct kf_batch {
  int magic;
  int codec;
  kf_writer body;     /* records/messages, uncompressed */
  int32_t count;
  int64_t first_ts;
  int64_t max_ts;
  size_t rec_start;   /* offset of the record being built (v2) */
  uint32_t crc;       /* CRC-32C of body[0..crc_len), summed at each append */
  size_t crc_len;
} kf_batch;

typedef struct kf_batch_opts {
  int64_t base_offset;
  int64_t producer_id;
  int16_t producer_epoch;
  int32_t base_sequence;
  int32_t partition_leader_epoch;
  int transactional;
  int control;
} kf_batch_opts;

void kf_batch_opts_default(kf_batch_opts *o);
void kf_batch_init(kf_batch *b, int magic, int codec);
void kf_batch_free(kf_batch *b);
void kf_batch_clear(kf_batch *b);
/* Encoded size of one v2 header (added up by callers for record_begin). */
size_t kf_v2_header_size(size_t klen, const void *v, size_t vlen);
/* Starts a record. key/value NULL = null. For v2, headers_size is the sum
 * of kf_v2_header_size over the nheaders headers that follow; legacy
 * magics take no headers. Returns 0 or -1 (e set). */
int kf_batch_record(kf_batch *b, int64_t ts, const void *key, size_t klen, const void *value,
                    size_t vlen, uint32_t nheaders, size_t headers_size, kf_err *e);
void kf_batch_header(kf_batch *b, const void *k, size_t kl, const void *v, size_t vl);
/* Appends the finished batch (header, compression, CRCs) to out. An empty
 * builder appends nothing. */
int kf_batch_encode(kf_batch *b, const kf_batch_opts *o, kf_writer *out, kf_err *e);
/* Appends only the header of b's batch (magic 2, uncompressed, not empty):
 * its size and CRC cover b->body, which the caller sends right after it
 * without copying it into out (a request frame in pieces). */
int kf_batch_encode_head(kf_batch *b, const kf_batch_opts *o, kf_writer *out, kf_err *e);

int64_t kf_now_ms(void);

#endif
