/*
 * lua_records.c - records decoding in Lua (see lua_glue.h): the row
 * (decode_records, also into columns) and column (decode_columns)
 * decoders over the core's records visitor, headers on demand, the rests
 * a paused decode leaves, records_end and records_cut. The encoding side
 * (message arrays, the builder userdata) is lua_batch.c.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "compat.h"
#include "compress.h"
#include "lua_glue.h"
#include "records.h"


/* ------------------------------------------------------ records decoding */

void kfl_rec_opts(lua_State *L, int idx, kf_rec_opts *o) {
  int64_t lim;
  o->check_crc = 1;
  o->max_decompressed = KFL_DEFAULT_MAX_DECOMPRESSED;
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  o->check_crc = kfl_opt_bool(L, idx, "check_crc", 1);
  kfl_opt_int(L, idx, "max_decompressed", KFL_DEFAULT_MAX_DECOMPRESSED, &lim);
  if (lim < 0) luaL_error(L, "max_decompressed must not be negative");
  o->max_decompressed = (size_t)lim;
}

/* Records visitor: the stack holds messages, batches, errors tables. */
typedef struct lrec {
  lua_State *L;
  int msgs, batches, errors;
  int nmsg, nbatch, nerr;
  /* consumer options (decode_records): */
  int want_batches;    /* build the batches array */
  int set_base, nset;  /* key/value pairs copied into every message */
  int keys;            /* the field names below, pushed once per call (no string lookup per field) */
  int skip_control;    /* leave out control records */
  int64_t min_offset;  /* leave out records below it */
  int64_t next;        /* one past the highest offset seen (0: none) */
  /* stop_at_error: what comes at and after the first problem is left out */
  int stop_at_error, stopped;
  int batch_nmsg;      /* messages before the latest v2 batch */
  int64_t batch_next;  /* next before the latest v2 batch */
  int32_t batch_left;  /* records of the latest v2 batch still to come */
  int64_t max, taken;  /* max_records (0: none), messages taken */
  int cols;            /* columns mode: stack index of the first of the NCOLS arrays (0: rows) */
} lrec;

/* Columns mode (decode_records' columns option): one array per field, in
 * this order, appended at the table's count + 1; headers stay raw bytes
 * (proto.decode_headers) so a record's headers cost one string, and
 * nothing until asked for. */
#define NCOLS 5
static const char *const col_names[NCOLS] = {"offsets", "timestamps", "keys", "values", "raw_headers"};

static int r_batch(void *u, const kf_batch_info *b) {
  lrec *c = (lrec *)u;
  lua_State *L = c->L;
  if (c->stopped) return 0;
  c->batch_nmsg = c->nmsg;
  c->batch_next = c->next;
  c->batch_left = b->magic == 2 ? b->count : 0;
  if (b->magic == 2) {
    int64_t end = kf_add64(b->base_offset, (int64_t)b->last_offset_delta + 1);
    if (end > c->next) c->next = end; /* control and compacted batches move us on too */
  }
  if (!c->want_batches) return 0;
  lua_createtable(L, 0, 16);
  kf_pushi64(L, b->base_offset);
  lua_setfield(L, -2, "base_offset");
  lua_pushinteger(L, b->magic);
  lua_setfield(L, -2, "magic");
  lua_pushstring(L, kf_codec_name(b->codec));
  lua_setfield(L, -2, "compression");
  lua_pushinteger(L, b->timestamp_type);
  lua_setfield(L, -2, "timestamp_type");
  lua_pushboolean(L, b->transactional);
  lua_setfield(L, -2, "transactional");
  lua_pushboolean(L, b->control);
  lua_setfield(L, -2, "control");
  lua_pushinteger(L, b->last_offset_delta);
  lua_setfield(L, -2, "last_offset_delta");
  lua_pushinteger(L, b->partition_leader_epoch);
  lua_setfield(L, -2, "partition_leader_epoch");
  kf_pushi64(L, b->first_timestamp);
  lua_setfield(L, -2, "first_timestamp");
  kf_pushi64(L, b->max_timestamp);
  lua_setfield(L, -2, "max_timestamp");
  kf_pushi64(L, b->producer_id);
  lua_setfield(L, -2, "producer_id");
  lua_pushinteger(L, b->producer_epoch);
  lua_setfield(L, -2, "producer_epoch");
  lua_pushinteger(L, b->base_sequence);
  lua_setfield(L, -2, "base_sequence");
  lua_pushinteger(L, b->count);
  lua_setfield(L, -2, "count");
  kf_pushi64(L, (int64_t)b->crc);
  lua_setfield(L, -2, "crc");
  lua_pushinteger(L, (lua_Integer)b->byte_offset);
  lua_setfield(L, -2, "byte_offset");
  lua_rawseti(L, c->batches, ++c->nbatch);
  return 0;
}

/* Pushes the headers hr reads as an array of {key=, value=} (value absent
 * when null); hr stops at the first that does not decode (hr->err, or
 * bytes left). Returns how many were read; *at: where the next one began. */
static int push_header_list(lua_State *L, kf_reader *hr, int nhint, size_t *at) {
  const uint8_t *k, *v;
  size_t kl, vl;
  int i = 0;
  *at = hr->pos;
  lua_createtable(L, nhint, 0);
  while (kf_headers_next(hr, &k, &kl, &v, &vl)) {
    lua_createtable(L, 0, 2);
    lua_pushlstring(L, (const char *)k, kl);
    lua_setfield(L, -2, "key");
    if (v) {
      lua_pushlstring(L, (const char *)v, vl);
      lua_setfield(L, -2, "value");
    }
    lua_rawseti(L, -2, ++i);
    *at = hr->pos;
  }
  return i;
}

/* Pushes a record's headers (push_header_list; the record was checked). */
static void push_headers(lua_State *L, const kf_record *r) {
  kf_reader hr;
  size_t at;
  kf_r_init(&hr, r->headers, r->headers_len);
  (void)push_header_list(L, &hr, (int)r->nheaders, &at);
}

/* The message fields' names, in the order of the stack slots from
 * lrec.keys. */
enum { K_OFFSET, K_TIMESTAMP, K_KEY, K_VALUE, K_HEADERS, K_CRC, K_CONTROL, K_COUNT };
static const char *const rec_keys[K_COUNT] = {"offset", "timestamp", "key", "value", "headers", "crc", "control"};

/* Pushes field name k (the value follows it, then lua_rawset). */
#define PUSH_KEY(L, c, k) lua_pushvalue((L), (c)->keys + (k))

static int r_record(void *u, const kf_record *r) {
  lrec *c = (lrec *)u;
  lua_State *L = c->L;
  int j;
  if (c->stopped) return 0;
  if (r->magic == 2 && c->batch_left > 0) c->batch_left--;
  if (r->offset >= c->next) c->next = kf_add64(r->offset, 1);
  if (r->offset < c->min_offset || (c->skip_control && r->control)) return 0;
  if (c->cols) {
    int i;
    if (r->control) return 0; /* columns never hold control records */
    i = ++c->nmsg;
    kf_pushi64(L, r->offset);
    lua_rawseti(L, c->cols, i);
    kf_pushi64(L, r->timestamp);
    lua_rawseti(L, c->cols + 1, i);
    if (r->key) {
      lua_pushlstring(L, (const char *)r->key, r->key_len);
      lua_rawseti(L, c->cols + 2, i);
    }
    if (r->value) {
      lua_pushlstring(L, (const char *)r->value, r->value_len);
      lua_rawseti(L, c->cols + 3, i);
    }
    if (r->nheaders) {
      lua_pushlstring(L, (const char *)r->headers, r->headers_len);
      lua_rawseti(L, c->cols + 4, i);
    }
    goto taken;
  }
  /* the exact field count: a hash part one size too big doubles the table */
  lua_createtable(L, 0, 2 + (r->key != NULL) + (r->value != NULL) + (r->nheaders > 0) + (r->crc >= 0) +
                            r->control + c->nset);
  for (j = 0; j < c->nset; j++) {
    lua_pushvalue(L, c->set_base + 2 * j);
    lua_pushvalue(L, c->set_base + 2 * j + 1);
    lua_rawset(L, -3);
  }
  PUSH_KEY(L, c, K_OFFSET);
  kf_pushi64(L, r->offset);
  lua_rawset(L, -3);
  PUSH_KEY(L, c, K_TIMESTAMP);
  kf_pushi64(L, r->timestamp);
  lua_rawset(L, -3);
  if (r->key) {
    PUSH_KEY(L, c, K_KEY);
    lua_pushlstring(L, (const char *)r->key, r->key_len);
    lua_rawset(L, -3);
  }
  if (r->value) {
    PUSH_KEY(L, c, K_VALUE);
    lua_pushlstring(L, (const char *)r->value, r->value_len);
    lua_rawset(L, -3);
  }
  if (r->nheaders) {
    PUSH_KEY(L, c, K_HEADERS);
    push_headers(L, r);
    lua_rawset(L, -3);
  }
  if (r->crc >= 0) {
    PUSH_KEY(L, c, K_CRC);
    kf_pushi64(L, r->crc);
    lua_rawset(L, -3);
  }
  if (r->control) {
    PUSH_KEY(L, c, K_CONTROL);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
  }
  lua_rawseti(L, c->msgs, ++c->nmsg);
taken:
  if (c->max && ++c->taken >= c->max) {
    /* inside a v2 batch the position is this record's: the batch goes on in the rest */
    if (r->magic == 2 && c->batch_left > 0) c->next = kf_add64(r->offset, 1);
    return KF_REC_PAUSE;
  }
  return 0;
}

/* A problem is listed in errors. With stop_at_error the messages end
 * before it: a v2 batch it interrupts is taken back whole (a consumer's
 * position must never land inside a batch it did not deliver), and
 * nothing after it is added. */
static int r_problem(void *u, int code, const char *msg) {
  lrec *c = (lrec *)u;
  (void)code;
  if (c->stop_at_error && !c->stopped) {
    c->stopped = 1;
    if (c->batch_left > 0) {
      while (c->nmsg > c->batch_nmsg) {
        if (c->cols) {
          int k;
          for (k = 0; k < NCOLS; k++) {
            lua_pushnil(c->L);
            lua_rawseti(c->L, c->cols + k, c->nmsg);
          }
        } else {
          lua_pushnil(c->L);
          lua_rawseti(c->L, c->msgs, c->nmsg);
        }
        c->nmsg--;
      }
      c->next = c->batch_next;
    }
  }
  lua_pushstring(c->L, msg);
  lua_rawseti(c->L, c->errors, ++c->nerr);
  return 0;
}

/* Decodes records into a messages table left on the stack (x->into, or a
 * new one), with fields batches, partial (when true) and errors (when
 * any). Returns 0, or -1 (nothing pushed) when the blob's framing is
 * corrupt. *next gets one past the highest offset seen (0: none). */
int kfl_push_records(lua_State *L, const uint8_t *p, size_t n, const kf_rec_opts *o, box *bx,
                        kfl_rec_extra *x, int64_t *next, kf_err *e) {
  lrec c;
  kf_rec_visitor v;
  kf_rec_result res;
  int base = lua_gettop(L);
  luaL_checkstack(L, 3 + 2 * 16 + K_COUNT + NCOLS + 8, "records");
  if (x && x->columns) lua_pushvalue(L, x->columns);
  else if (x && x->into) lua_pushvalue(L, x->into);
  else lua_newtable(L);
  lua_newtable(L);
  lua_newtable(L);
  c.L = L;
  c.msgs = base + 1;
  c.batches = base + 2;
  c.errors = base + 3;
  c.nmsg = (int)lua_rawlen(L, base + 1);
  c.cols = 0;
  if (x && x->columns) {
    lua_Integer have;
    lua_getfield(L, base + 1, "count");
    have = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (have < 0 || have > INT32_MAX) luaL_error(L, "decode_records: columns.count must be a count");
    c.nmsg = (int)have;
  }
  c.nbatch = c.nerr = 0;
  c.want_batches = x ? x->batches : 1;
  c.skip_control = x ? x->skip_control : 0;
  c.min_offset = x ? x->min_offset : INT64_MIN;
  c.stop_at_error = x ? x->stop_at_error : 0;
  c.stopped = 0;
  c.batch_nmsg = c.nmsg;
  c.batch_next = 0;
  c.batch_left = 0;
  c.next = 0;
  c.max = x ? x->max_records : 0;
  c.taken = 0;
  c.set_base = base + 4;
  c.nset = 0;
  if (x && x->set) {
    lua_pushnil(L);
    while (lua_next(L, x->set)) {
      if (c.nset == 16) luaL_error(L, "decode_records: at most 16 fields in 'set'");
      lua_pushvalue(L, -2);
      lua_insert(L, -2); /* key, value, key -> keep key and value, next key on top */
      lua_pushvalue(L, -2);
      lua_remove(L, -3);
      c.nset++;
    }
  }
  c.keys = lua_gettop(L) + 1;
  {
    int k;
    for (k = 0; k < K_COUNT; k++) lua_pushstring(L, rec_keys[k]);
  }
  if (x && x->columns) {
    int k;
    c.cols = lua_gettop(L) + 1;
    for (k = 0; k < NCOLS; k++) {
      lua_getfield(L, base + 1, col_names[k]);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, base + 1, col_names[k]);
      } else if (!lua_istable(L, -1)) {
        luaL_error(L, "decode_records: columns.%s must be a table", col_names[k]);
      }
    }
  }
  v.ud = &c;
  v.batch = r_batch;
  v.record = r_record;
  v.problem = r_problem;
  memset(&res, 0, sizeof res);
  if (x && x->rleft > 0) {
    /* first the batch paused in: as r_batch would have begun it */
    int64_t end = kf_add64(x->rb->base_offset, (int64_t)x->rb->last_offset_delta + 1);
    c.batch_left = x->rleft;
    if (end > c.next) c.next = end;
    if (kf_records_resume(x->rb, x->rrecs, x->rlen, x->rleft, &v, &res, e)) {
      lua_settop(L, base);
      return -1;
    }
    /* paused at the batch's end: a rest only if a complete entry follows */
    if (res.paused && res.rleft == 0 && !kf_records_entry_follows(p, n, x->start)) res.paused = 0;
    x->rest_in_batch = res.paused;
  }
  if (!res.paused && !c.stopped && (!x || x->start < n)) {
    if (kf_records_decode_at(p, n, x ? x->start : 0, o, &bx->s, &v, &res, e)) {
      lua_settop(L, base);
      return -1;
    }
  }
  if (x) x->res = res;
  if (c.want_batches) {
    lua_pushvalue(L, base + 2);
    lua_setfield(L, base + 1, "batches");
  }
  if (c.nerr) {
    lua_pushvalue(L, base + 3);
    lua_setfield(L, base + 1, "errors");
  }
  if (res.partial) {
    lua_pushboolean(L, 1);
    lua_setfield(L, base + 1, "partial");
  }
  if (c.cols) {
    lua_pushinteger(L, c.nmsg);
    lua_setfield(L, base + 1, "count");
  }
  lua_settop(L, base + 1);
  if (next) *next = c.next;
  return 0;
}

/* ------------------------------------------------------------ rests */

/* The rest of a records blob a decode_records with max_records paused in:
 * decode_records takes it where it takes the blob and goes on from there.
 * A v2 batch paused inside keeps its records: in the blob, or (it was
 * compressed) decompressed once into own, so a poll of 500 messages out of
 * a batch of 8,000 does not decompress the batch 16 times. */
#define CURSOR_MT "kafka.records_rest"
typedef struct lcursor {
  size_t start;          /* the blob's bytes before this are done with */
  size_t len;            /* the blob's length */
  kf_batch_info b;       /* the batch paused inside (rleft > 0) */
  const uint8_t *rrecs;  /* its records still to read: in the blob or in own */
  size_t rlen;
  int32_t rleft;
  kf_writer own;         /* the batch's records decompressed (empty when it was not compressed) */
} lcursor;

static int l_rest_gc(lua_State *L) {
  lcursor *c = (lcursor *)luaL_checkudata(L, 1, CURSOR_MT);
  kf_w_free(&c->own);
  c->rleft = 0;
  c->start = c->len;
  return 0;
}

/* #rest: the bytes still to decode (of the batch paused in, and after it). */
static int l_rest_len(lua_State *L) {
  lcursor *c = (lcursor *)luaL_checkudata(L, 1, CURSOR_MT);
  lua_pushinteger(L, (lua_Integer)((c->rleft > 0 ? c->rlen : 0) + (c->len - c->start)));
  return 1;
}

/* decode_records(bytes [, opts]) -> messages, info {batches, partial, errors,
 * count, next_offset}. Besides the decode options, opts may hold the
 * consumer's: into (append to this table), set (fields copied into every
 * message), min_offset (leave out records below it), skip_control (leave
 * out control records), batches = false (no batches array), stop_at_error
 * (the messages end before the first problem; next_offset is then where
 * it starts), columns (a table: the records are appended to its arrays
 * offsets, timestamps, keys, values and raw_headers from its count + 1,
 * and count is updated; control records are left out; the table is the
 * first result). */
static int l_decode_records(lua_State *L) {
  size_t n;
  const uint8_t *p;
  kf_err e;
  KF_ERR_INIT(e);
  kf_rec_opts ro;
  box *bx;
  kfl_rec_extra x;
  int64_t next = 0;
  lcursor *from = (lcursor *)luaL_testudata(L, 1, CURSOR_MT);
  memset(&x, 0, sizeof x);
  x.batches = 1;
  x.min_offset = INT64_MIN;
  kfl_rec_opts(L, 2, &ro);
  lua_settop(L, 2);
  if (from) {
    /* a rest: its blob (3), from where it stopped */
    kf_pushlink(L, 1);
    p = kfl_checkbytes(L, 3, &n);
    x.start = from->start;
    x.rb = &from->b;
    x.rrecs = from->rrecs;
    x.rlen = from->rlen;
    x.rleft = from->rleft;
  } else {
    p = kfl_checkbytes(L, 1, &n);
  }
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "into");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_istable(L, -1), 2, "'into' must be a table");
      x.into = lua_gettop(L);
    }
    lua_getfield(L, 2, "columns");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_istable(L, -1), 2, "'columns' must be a table");
      x.columns = lua_gettop(L);
    }
    lua_getfield(L, 2, "set");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_istable(L, -1), 2, "'set' must be a table");
      x.set = lua_gettop(L);
    }
    kfl_opt_int(L, 2, "min_offset", INT64_MIN, &x.min_offset);
    x.skip_control = kfl_opt_bool(L, 2, "skip_control", 0);
    x.batches = kfl_opt_bool(L, 2, "batches", 1);
    x.stop_at_error = kfl_opt_bool(L, 2, "stop_at_error", 0);
    kfl_opt_int(L, 2, "max_records", 0, &x.max_records);
    luaL_argcheck(L, x.max_records >= 0, 2, "'max_records' must not be negative");
  }
  bx = kfl_box_new(L);
  if (kfl_push_records(L, p, n, &ro, bx, &x, &next, &e)) return kfl_box_done(bx, kfl_fail(L, &e));
  lua_createtable(L, 0, 7);
  if (x.res.paused || from) {
    lcursor *cur = from;
    if (!cur) {
      cur = (lcursor *)kf_newuserdata_uv(L, sizeof(lcursor));
      memset(cur, 0, sizeof *cur);
      kf_w_init(&cur->own);
      luaL_setmetatable(L, CURSOR_MT);
      lua_pushvalue(L, 1); /* the blob: kept alive */
      kf_setlink(L, -2);
    } else {
      lua_pushvalue(L, 1);
    }
    cur->len = n;
    if (!x.res.paused) {
      /* all of it decoded */
      cur->rleft = 0;
      cur->start = n;
      kf_w_free(&cur->own);
    } else if (x.rest_in_batch) {
      /* still inside the batch resumed (or at its end): its records (and buffer) go on */
      cur->rrecs = x.res.rrecs;
      cur->rlen = x.res.rlen;
      cur->rleft = x.res.rleft;
      if (cur->rleft == 0) kf_w_free(&cur->own);
    } else {
      cur->start = x.res.resume_at;
      cur->rleft = x.res.rleft;
      cur->b = x.res.rb;
      cur->rrecs = x.res.rrecs;
      cur->rlen = x.res.rlen;
      kf_w_free(&cur->own);
      if (x.res.rleft > 0 && x.res.rcompressed) {
        /* the batch's records were decompressed into the call's scratch: kept */
        cur->own = bx->s.level[0];
        kf_w_init(&bx->s.level[0]);
      }
    }
    if (x.res.paused) lua_setfield(L, -2, "rest");
    else lua_pop(L, 1);
  }
  lua_getfield(L, -2, "batches");
  lua_setfield(L, -2, "batches");
  lua_getfield(L, -2, "errors");
  lua_setfield(L, -2, "errors");
  lua_getfield(L, -2, "partial");
  lua_pushboolean(L, lua_toboolean(L, -1));
  lua_setfield(L, -3, "partial");
  lua_pop(L, 1);
  if (x.columns) lua_getfield(L, -2, "count");
  else lua_pushinteger(L, (lua_Integer)lua_rawlen(L, -2));
  lua_setfield(L, -2, "count");
  if (next) {
    kf_pushi64(L, next);
    lua_setfield(L, -2, "next_offset");
  }
  if (x.into || x.columns) {
    /* the messages were appended to 'into' (or 'columns'): their fields stay out of it */
    lua_pushnil(L);
    lua_setfield(L, -3, "batches");
    lua_pushnil(L);
    lua_setfield(L, -3, "errors");
    lua_pushnil(L);
    lua_setfield(L, -3, "partial");
  }
  return kfl_box_done(bx, 2);
}

/* decode_headers(raw) -> {{key=, value=}...} | nil, message, "corrupt":
 * a record's raw header bytes (decode_records' columns mode keeps them so)
 * as push_headers gives them. Checked again: raw may come from anywhere. */
static int l_decode_headers(lua_State *L) {
  size_t n;
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  kf_reader hr;
  size_t at; /* where the header that did not decode starts */
  int i;
  kf_r_init(&hr, p, n);
  i = push_header_list(L, &hr, 0, &at);
  if (hr.err || kf_r_left(&hr) != 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "corrupt record headers: header %d at byte %d", i + 1, (int)at);
    lua_pushliteral(L, "corrupt");
    return 3;
  }
  return 1;
}

/* records_end(bytes) -> next_offset, batches | nil, message, code: where
 * the next Fetch can start, read from the batch headers alone (a consumer
 * sends it before decoding). "incomplete" when no batch is complete,
 * "corrupt" for bad framing. */
static int l_records_end(lua_State *L) {
  size_t n, batches;
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  kf_err e;
  KF_ERR_INIT(e);
  int64_t next;
  if (kf_records_scan(p, n, &next, &batches, 0, NULL, &e)) return kfl_fail(L, &e);
  if (batches == 0) return kfl_fail_msg(L, KF_EINCOMPLETE, "no complete record batch");
  kf_pushi64(L, next);
  lua_pushinteger(L, (lua_Integer)batches);
  return 2;
}

/* records_cut(bytes, n) -> the bytes of the leading whole batches that
 * hold at most n records (at least one batch), or nil when the complete
 * batches hold no more than n (or the framing is broken: the decoder
 * reports that). A consumer decodes that much in a poll, the rest in the
 * next ones. */
static int l_records_cut(lua_State *L) {
  size_t n, batches, cut;
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  lua_Integer want = luaL_checkinteger(L, 2);
  kf_err e;
  int64_t next;
  KF_ERR_INIT(e);
  if (kf_records_scan(p, n, &next, &batches, want, &cut, &e) || cut == 0) return 0;
  lua_pushinteger(L, (lua_Integer)cut);
  return 1;
}

/* Columnar records visitor: one array per field instead of a table per
 * message (the fast way to read big fetches). The stack holds, from base:
 * result, offset, timestamp, key, value, headers, errors. */
typedef struct lcol {
  lua_State *L;
  int base;
  int n;
  int nerr;
} lcol;

static int c_record(void *u, const kf_record *r) {
  lcol *c = (lcol *)u;
  lua_State *L = c->L;
  int i = ++c->n;
  kf_pushi64(L, r->offset);
  lua_rawseti(L, c->base + 1, i);
  kf_pushi64(L, r->timestamp);
  lua_rawseti(L, c->base + 2, i);
  if (r->key) {
    lua_pushlstring(L, (const char *)r->key, r->key_len);
    lua_rawseti(L, c->base + 3, i);
  }
  if (r->value) {
    lua_pushlstring(L, (const char *)r->value, r->value_len);
    lua_rawseti(L, c->base + 4, i);
  }
  if (r->nheaders || r->control) {
    push_headers(L, r);
    if (r->control) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "control");
    }
    lua_rawseti(L, c->base + 5, i);
  }
  return 0;
}

static int c_problem(void *u, int code, const char *msg) {
  lcol *c = (lcol *)u;
  (void)code;
  lua_pushstring(c->L, msg);
  lua_rawseti(c->L, c->base + 6, ++c->nerr);
  return 0;
}

/* decode_columns(bytes [, opts]) -> {n=, offset={}, timestamp={}, key={},
 * value={}, headers={}}, info {partial, batches, errors} | nil, err, code.
 * key, value and headers are sparse (nil where null or absent); a control
 * record has headers[i].control = true. */
static int l_decode_columns(lua_State *L) {
  size_t n;
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  static const char *const cols[] = {"offset", "timestamp", "key", "value", "headers"};
  kf_err e;
  KF_ERR_INIT(e);
  kf_rec_visitor v;
  kf_rec_result res;
  kf_rec_opts ro;
  lcol c;
  box *bx;
  int i;
  kfl_rec_opts(L, 2, &ro);
  lua_settop(L, 2);
  bx = kfl_box_new(L);
  luaL_checkstack(L, 12, "columns");
  c.L = L;
  c.base = lua_gettop(L) + 1;
  c.n = c.nerr = 0;
  lua_createtable(L, 0, 6);
  for (i = 0; i < 5; i++) lua_createtable(L, i < 2 ? (int)(n / 64) : 0, 0);
  lua_newtable(L);
  v.ud = &c;
  v.batch = NULL;
  v.record = c_record;
  v.problem = c_problem;
  if (kf_records_decode(p, n, &ro, &bx->s, &v, &res, &e)) return kfl_box_done(bx, kfl_fail(L, &e));
  for (i = 0; i < 5; i++) {
    lua_pushvalue(L, c.base + 1 + i);
    lua_setfield(L, c.base, cols[i]);
  }
  lua_pushinteger(L, c.n);
  lua_setfield(L, c.base, "n");
  lua_createtable(L, 0, 3);
  lua_pushboolean(L, res.partial);
  lua_setfield(L, -2, "partial");
  lua_pushinteger(L, (lua_Integer)res.batches);
  lua_setfield(L, -2, "batches");
  if (c.nerr) {
    lua_pushvalue(L, c.base + 6);
    lua_setfield(L, -2, "errors");
  }
  lua_replace(L, c.base + 1);
  lua_settop(L, c.base + 1);
  return kfl_box_done(bx, 2);
}
static const luaL_Reg records_funcs[] = {
  {"decode_records", l_decode_records},
  {"decode_columns", l_decode_columns},
  {"records_end", l_records_end},
  {"decode_headers", l_decode_headers},
  {"records_cut", l_records_cut},
  {NULL, NULL}
};

void kfl_open_records(lua_State *L) {
  luaL_newmetatable(L, CURSOR_MT);
  lua_pushcfunction(L, l_rest_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_rest_len);
  lua_setfield(L, -2, "__len");
  lua_pop(L, 1);
  luaL_setfuncs(L, records_funcs, 0);
}
