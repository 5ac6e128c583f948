/*
 * lua_glue.h - private to the Lua binding's files, never installed:
 *   lua_kafka.c    registration (luaopen_kafka_core, which calls each
 *                  file's opener), hashes and compression;
 *   lua_glue.c     what every glue file calls back: the box, the error
 *                  contract, option readers, codec names;
 *   lua_schema.c   the schema visitors over Lua tables: frames, data
 *                  structures, introspection;
 *   lua_batch.c    records encoding: message arrays and the builder
 *                  userdata (proto.batch), with their headers;
 *   lua_records.c  records decoding: the row and column decoders, headers
 *                  on demand, rests, records_end/records_cut;
 *   lua_crypto.c   the SASL primitives;
 *   lua_producer.c the producer's accumulator: its counters and send()'s
 *                  fast path (kafka.producer);
 *   lua_bytes.c    kafka.bytes (frames and views the decoders take like
 *                  strings) and kafka.outframe (lua_bytes.h: their struct,
 *                  shared with the inbox);
 *   lua_inbox.c    the inbox that reads frames into them, over TCP or TLS
 *                  (tls.c);
 *   lua_tls.c      TLS contexts (core.tls_context) for the inbox.
 * Error contract: misuse raises; bad or truncated bytes return nil,
 * message, code (kfl_fail).
 */
#ifndef KF_LUA_GLUE_H
#define KF_LUA_GLUE_H

#include "buf.h"
#include "compat.h"
#include "records.h"

#define KFL_DEFAULT_MAX_DECOMPRESSED (256u << 20)

/* Scratch memory of one call, owned by the GC. */
typedef struct box {
  kf_writer w;      /* the output frame */
  kf_writer tmp;    /* records encoded before being length-prefixed */
  kf_batch batch;   /* builder for message arrays */
  kf_rec_scratch s; /* decompression buffers */
  int live;
} box;

/* lua_glue.c */

/* Registers the box's metatable; luaopen_kafka_core calls it first. */
void kfl_open_glue(lua_State *L);
/* Pushes a new box; it stays on the stack for the duration of the call. */
box *kfl_box_new(lua_State *L);
/* Frees a box's buffers once the call's results are pushed. Returns nret. */
int kfl_box_done(box *b, int nret);
/* Pushes nil, message, code (the error contract for bad data); returns 3. */
int kfl_fail(lua_State *L, const kf_err *e);
int kfl_fail_msg(lua_State *L, int code, const char *msg);

/* Option readers of the table at t: an absent option is def; a wrong type raises. */
int kfl_opt_int(lua_State *L, int t, const char *k, int64_t def, int64_t *out);
int kfl_opt_bool(lua_State *L, int t, const char *k, int def);
/* Codec from a name or number at idx (nil: none); raises when unknown. */
int kfl_codec(lua_State *L, int idx);

/* lua_records.c */

/* Options of the records decoders beyond kf_rec_opts. */
typedef struct kfl_rec_extra {
  int into;            /* stack index of a table to append to, or 0 */
  int set;             /* stack index of a table of fields to copy, or 0 */
  int columns;         /* stack index of a columns table to append to (see decode_records), or 0 */
  int skip_control;
  int batches;         /* build the batches array */
  int64_t min_offset;
  int stop_at_error;
  int64_t max_records; /* pause once this many messages are taken (0: no limit) */
  size_t start;        /* where in the blob to begin */
  /* a v2 batch paused inside, decoded first (rleft 0: none): */
  const kf_batch_info *rb;
  const uint8_t *rrecs;
  size_t rlen;
  int32_t rleft;
  /* out: the result of the blob's decoding (rest_in_batch: the pause came
   * inside the batch resumed, the blob was not begun) */
  kf_rec_result res;
  int rest_in_batch;
} kfl_rec_extra;

/* Reads check_crc and max_decompressed from the options table at idx (or
 * none) into o. */
void kfl_rec_opts(lua_State *L, int idx, kf_rec_opts *o);
/* Decodes records into a messages table left on the stack; -1 (nothing
 * pushed, e set) when the framing is corrupt. */
int kfl_push_records(lua_State *L, const uint8_t *p, size_t n, const kf_rec_opts *o, box *bx,
                     kfl_rec_extra *x, int64_t *next, kf_err *e);
/* Sets the decoding functions into the table on top; makes the rests' metatable. */
void kfl_open_records(lua_State *L);

/* lua_batch.c */

/* A records field's value at idx: a message array or a builder? */
int kfl_is_records(lua_State *L, int idx);
/* Encodes the records value at idx (see kfl_is_records) into out; magic is
 * the format the request version implies. */
int kfl_encode_records_value(lua_State *L, int idx, int magic, box *bx, kf_writer *out, kf_err *e);
/* Sets encode_records and batch into the table on top; makes the builder's metatable. */
void kfl_open_batch(lua_State *L);

/* The builder userdata (proto.batch). */
#define KFL_BATCH_MT "kafka.core.batch"
typedef struct lbatch {
  kf_batch b;
  kf_writer out;
  kf_batch_opts stamp; /* the options a request encodes it with (b:stamp) */
  int live;
  /* the producer's accounting (b:add): its size estimate of what was
   * added, the limit b:add stops at, and the message ids as runs */
  int64_t acc, limit;
  int64_t *runs;       /* first, count, first, count, ... */
  size_t nruns, capruns; /* int64 slots used, allocated */
  unsigned clears;     /* b:clear()s so far: a frame in pieces checks its builders are unchanged */
} lbatch;
/* The builder at idx when a frame in pieces can send its records as they
 * are (magic 2, uncompressed, not empty), else NULL. */
lbatch *kfl_batch_gatherable(lua_State *L, int idx);
/* Appends a message to lb with the producer's accounting: 1 added, 0 full
 * (nothing added), -1 bad data (e set). Stack indices of value, key,
 * headers, timestamp (0: absent). Raises on misuse. */
int kfl_batch_add(lua_State *L, lbatch *lb, int vi, int ki, int hi, int ti, int64_t id, int64_t size, kf_err *e);

/* lua_producer.c: sets accumulator (the producer's counters and send()'s
 * fast path) into the table on top; after kfl_open_records (acc:open
 * checks builders against their metatable). */
void kfl_open_producer(lua_State *L);

/* lua_bytes.c: the bytes at idx, a string or a kafka.bytes (NULL when
 * neither; kfl_checkbytes raises). */
const uint8_t *kfl_tobytes(lua_State *L, int idx, size_t *n);
const uint8_t *kfl_checkbytes(lua_State *L, int idx, size_t *n);
/* Pushes a kafka.bytes view of p[0..n), which lies inside the string or
 * kafka.bytes at owner (kept alive by the view). */
void kfl_push_view(lua_State *L, const uint8_t *p, size_t n, int owner);
/* A request frame in pieces (encode_request's gather option), the
 * inbox's counterpart: its own bytes in w, and after byte at of them the
 * records of a builder, sent from the builder's memory with sendmsg()
 * (an uncompressed Produce was copied twice more: into the frame, and
 * the frame into a Lua string). The builders are kept alive by the
 * frame's user value and must not change until it is sent. */
typedef struct kfl_piece {
  size_t at;          /* where in w the piece goes */
  const lbatch *lb;   /* its builder, and the state it was taken in: */
  const uint8_t *p;
  size_t n;
  unsigned clears;
} kfl_piece;
typedef struct kfl_outframe {
  kf_writer w;
  kfl_piece *pieces;
  size_t npieces, cap;
  size_t ext; /* bytes in the pieces */
} kfl_outframe;
/* Pushes a new, empty frame in pieces. */
kfl_outframe *kfl_outframe_new(lua_State *L);
/* Adds the records of the builder lb at stack index bidx after what of->w
 * holds now (of at stack index ofidx). Raises when out of memory. */
void kfl_outframe_add(lua_State *L, int ofidx, int bidx, kfl_outframe *of, const lbatch *lb);
/* Sets bytes and inbox into the table on top; makes their metatables. */
void kfl_open_bytes(lua_State *L);
/* lua_inbox.c: sets inbox (kafka.inbox: frames read without copies, TLS) into the table on top. */
void kfl_open_inbox(lua_State *L);

/* lua_tls.c: sets tls_context into the table on top; makes its metatable. */
void kfl_open_tls(lua_State *L);
/* The TLS context at idx (raises when it is not one, or closed). */
struct kf_tls_ctx *kfl_checktlsctx(lua_State *L, int idx);

/* lua_schema.c: sets the schema functions into the table on top. */
void kfl_open_schema(lua_State *L);

#endif
