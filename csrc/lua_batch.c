/*
 * lua_batch.c - records encoding in Lua (see lua_glue.h): message arrays
 * (encode_records) and the builder userdata (proto.batch, the producer's
 * batches) encoded through the core's kf_batch, with their headers.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "compat.h"
#include "compress.h"
#include "lua_glue.h"
#include "records.h"

#define BATCH_MT KFL_BATCH_MT
/* --------------------------------------------------------------- headers */

/* Reads a header key/value pair at the top two stack slots (k at -2). */
static void header_kv(lua_State *L, const char **k, size_t *kl, const char **v, size_t *vl) {
  if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "record header keys must be strings");
  *k = lua_tolstring(L, -2, kl);
  if (lua_isnil(L, -1)) {
    *v = NULL;
    *vl = 0;
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    *v = lua_tolstring(L, -1, vl);
  } else {
    luaL_error(L, "record header values must be strings or nil");
  }
}

/* Walks the headers table at idx: an array of {key=, value=} (or {k, v})
 * or a map name -> value. With b == NULL it only counts and sizes them. */
static uint32_t headers_walk(lua_State *L, int idx, kf_batch *b, size_t *size) {
  uint32_t n = 0;
  size_t total = 0, len;
  const char *k, *v;
  size_t kl, vl;
  luaL_checkstack(L, 4, "headers");
  len = lua_rawlen(L, idx);
  if (len > 0) {
    size_t i;
    for (i = 1; i <= len; i++) {
      lua_rawgeti(L, idx, (int)i);
      if (lua_type(L, -1) != LUA_TTABLE) luaL_error(L, "record header %d must be a table", (int)i);
      lua_getfield(L, -1, "key");
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
      } else {
        lua_getfield(L, -2, "value");
      }
      header_kv(L, &k, &kl, &v, &vl);
      if (b) kf_batch_header(b, k, kl, v, vl);
      total += kf_v2_header_size(kl, v, vl);
      n++;
      lua_pop(L, 3);
    }
  } else {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      header_kv(L, &k, &kl, &v, &vl);
      if (b) kf_batch_header(b, k, kl, v, vl);
      total += kf_v2_header_size(kl, v, vl);
      n++;
      lua_pop(L, 1);
    }
  }
  *size = total;
  return n;
}

/* Appends one record to b. Stack args: value, key, headers (table index or
 * 0), timestamp (absent: now, or the time given: KF_NOW reads the clock).
 * Raises on wrong types. */
#define KF_NOW INT64_MIN
static int batch_add_at(lua_State *L, kf_batch *b, int vi, int ki, int hi, int ti, int64_t now, kf_err *e) {
  const char *val = NULL, *key = NULL;
  size_t vl = 0, kl = 0, hsize = 0;
  uint32_t nh = 0;
  int64_t ts = -1;
  int t = lua_type(L, vi); /* one type query per argument: each costs a call */
  if (t == LUA_TSTRING) {
    val = lua_tolstring(L, vi, &vl);
  } else if (t > LUA_TNIL) {
    luaL_error(L, "record value must be a string or nil");
  }
  t = ki ? lua_type(L, ki) : LUA_TNIL;
  if (t == LUA_TSTRING) {
    key = lua_tolstring(L, ki, &kl);
  } else if (t > LUA_TNIL) {
    luaL_error(L, "record key must be a string or nil");
  }
  if (ti && lua_type(L, ti) > LUA_TNIL) {
    if (!kf_toi64(L, ti, &ts)) luaL_error(L, "record timestamp must be an integer (ms)");
  } else if (b->magic == 0) {
    ts = -1;
  } else {
    ts = now == KF_NOW ? kf_now_ms() : now;
  }
  t = hi ? lua_type(L, hi) : LUA_TNIL;
  if (t == LUA_TTABLE) {
    nh = headers_walk(L, hi, NULL, &hsize);
  } else if (t > LUA_TNIL) {
    luaL_error(L, "record headers must be a table");
  }
  if (kf_batch_record(b, ts, key, kl, val, vl, nh, hsize, e)) return -1;
  if (nh) headers_walk(L, hi, b, &hsize);
  return 0;
}

static int batch_add(lua_State *L, kf_batch *b, int vi, int ki, int hi, int ti, kf_err *e) {
  return batch_add_at(L, b, vi, ki, hi, ti, KF_NOW, e);
}

/* Fills b from the message array at idx (strings are values; tables have
 * key, value, headers, timestamp). */
static int batch_fill(lua_State *L, int idx, kf_batch *b, kf_err *e) {
  size_t i, n = lua_rawlen(L, idx);
  /* messages without a timestamp get the call's: one clock read, not one each */
  int64_t now = kf_now_ms();
  luaL_checkstack(L, 8, "messages");
  for (i = 1; i <= n; i++) {
    int top = lua_gettop(L), rc;
    lua_rawgeti(L, idx, (int)i);
    if (lua_type(L, -1) == LUA_TSTRING) {
      rc = batch_add_at(L, b, top + 1, 0, 0, 0, now, e);
    } else if (lua_type(L, -1) == LUA_TTABLE) {
      lua_getfield(L, top + 1, "value");
      lua_getfield(L, top + 1, "key");
      lua_getfield(L, top + 1, "headers");
      lua_getfield(L, top + 1, "timestamp");
      rc = batch_add_at(L, b, top + 2, top + 3, top + 4, top + 5, now, e);
    } else {
      return luaL_error(L, "message %d must be a table or a string", (int)i);
    }
    lua_settop(L, top);
    if (rc) return -1;
  }
  return 0;
}

/* Reads encode options from the table at idx into o (base_offset,
 * producer_id, producer_epoch, base_sequence, partition_leader_epoch,
 * transactional, control). */
static void batch_opts(lua_State *L, int idx, kf_batch_opts *o) {
  int64_t v;
  kf_batch_opts_default(o);
  if (!idx || lua_type(L, idx) != LUA_TTABLE) return;
  kfl_opt_int(L, idx, "base_offset", 0, &v);
  o->base_offset = v;
  kfl_opt_int(L, idx, "producer_id", -1, &v);
  o->producer_id = v;
  kfl_opt_int(L, idx, "producer_epoch", -1, &v);
  o->producer_epoch = (int16_t)v;
  kfl_opt_int(L, idx, "base_sequence", -1, &v);
  o->base_sequence = (int32_t)v;
  kfl_opt_int(L, idx, "partition_leader_epoch", -1, &v);
  o->partition_leader_epoch = (int32_t)v;
  o->transactional = kfl_opt_bool(L, idx, "transactional", 0);
  o->control = kfl_opt_bool(L, idx, "control", 0);
}

static int read_magic(lua_State *L, int idx, int def) {
  int64_t m;
  kfl_opt_int(L, idx, "magic", def, &m);
  if (m < 0 || m > 2) luaL_error(L, "magic must be 0, 1 or 2");
  return (int)m;
}

/* Encodes the message array at idx (with its own options) into out. */
static int encode_messages(lua_State *L, int idx, int magic, box *bx, kf_writer *out, kf_err *e) {
  kf_batch_opts o;
  int codec;
  magic = read_magic(L, idx, magic);
  lua_getfield(L, idx, "compression");
  codec = kfl_codec(L, -1);
  lua_pop(L, 1);
  kf_batch_free(&bx->batch);
  kf_batch_init(&bx->batch, magic, codec);
  if (batch_fill(L, idx, &bx->batch, e)) return -1;
  batch_opts(L, idx, &o);
  return kf_batch_encode(&bx->batch, &o, out, e);
}

/* ---------------------------------------------------- the batch builder */

/* The builder at argument 1. The methods carry the metatable as upvalue 1,
 * so the check is a pointer comparison, not a registry lookup by name. */
static lbatch *check_batch(lua_State *L) {
  lbatch *lb = (lbatch *)lua_touserdata(L, 1);
  if (!lb || !lua_getmetatable(L, 1) || !lua_rawequal(L, -1, lua_upvalueindex(1)))
    luaL_argerror(L, 1, "kafka.batch expected");
  lua_pop(L, 1);
  if (!lb->live) luaL_error(L, "record batch builder is closed");
  return lb;
}

/* proto.batch{compression=, magic=, limit=} -> builder userdata (limit:
 * the accounted bytes b:add stops at; 0, the default: none). */
static int l_batch(lua_State *L) {
  int magic = 2, codec = 0;
  int64_t limit = 0;
  lbatch *lb;
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    magic = read_magic(L, 1, 2);
    lua_getfield(L, 1, "compression");
    codec = kfl_codec(L, -1);
    lua_pop(L, 1);
    if (codec == KF_CODEC_ZSTD && magic < 2) luaL_error(L, "zstd needs magic 2");
  }
  if (!lua_isnoneornil(L, 1)) kfl_opt_int(L, 1, "limit", 0, &limit);
  if (limit < 0) luaL_error(L, "limit must not be negative");
  lb = (lbatch *)kf_newuserdata(L, sizeof(lbatch));
  kf_batch_init(&lb->b, magic, codec);
  kf_w_init(&lb->out);
  kf_batch_opts_default(&lb->stamp);
  lb->acc = 0;
  lb->limit = limit;
  lb->runs = NULL;
  lb->nruns = lb->capruns = 0;
  lb->clears = 0;
  lb->live = 1;
  luaL_setmetatable(L, BATCH_MT);
  return 1;
}

/* b:append(value, key, headers, timestamp) -> count; raises on misuse.
 * (No settop: batch_add_at reads an absent argument's LUA_TNONE as nil.) */
static int l_batch_append(lua_State *L) {
  lbatch *lb = check_batch(L);
  kf_err e;
  KF_ERR_INIT(e);
  if (batch_add(L, &lb->b, 2, 3, 4, 5, &e)) return kfl_fail(L, &e);
  lua_pushinteger(L, lb->b.count);
  return 1;
}

/* The producer's append and accounting (b:add, and the send() fast path
 * of lua_producer.c): 1 added, 0 full (the batch has records and size
 * would take its accounting past the limit: nothing added), -1 bad data
 * (e set). The value, key, headers and timestamp are at the stack indices
 * given (0: absent). Raises on misuse and out of memory. */
int kfl_batch_add(lua_State *L, lbatch *lb, int vi, int ki, int hi, int ti, int64_t id, int64_t size, kf_err *e) {
  if (lb->limit > 0 && lb->b.count > 0 && size > lb->limit - lb->acc) return 0;
  /* room for a new run first: nothing changes when this raises */
  if (lb->nruns + 2 > lb->capruns) {
    size_t cap = lb->capruns ? lb->capruns * 2 : 8;
    int64_t *r = (int64_t *)realloc(lb->runs, cap * sizeof(int64_t));
    if (!r) luaL_error(L, "out of memory");
    lb->runs = r;
    lb->capruns = cap;
  }
  if (batch_add(L, &lb->b, vi, ki, hi, ti, e)) return -1;
  lb->acc += size;
  if (lb->nruns > 0 && lb->runs[lb->nruns - 2] + lb->runs[lb->nruns - 1] == id) {
    lb->runs[lb->nruns - 1]++;
  } else {
    lb->runs[lb->nruns++] = id;
    lb->runs[lb->nruns++] = 1;
  }
  return 1;
}

/* b:add(value, key, headers, timestamp, id, size) -> true | false (full:
 * nothing added) | nil, err, code (see kfl_batch_add): size is the
 * caller's estimate of the message, id its message id (kept as runs of
 * consecutive ids). Raises on misuse. */
static int l_batch_add(lua_State *L) {
  lbatch *lb = check_batch(L);
  kf_err e;
  KF_ERR_INIT(e);
  int64_t id = 0, size = 0;
  int rc;
  lua_settop(L, 7);
  if (!kf_toi64(L, 6, &id)) luaL_argerror(L, 6, "message id must be an integer");
  if (!kf_toi64(L, 7, &size) || size < 0) luaL_argerror(L, 7, "size must be an integer >= 0");
  rc = kfl_batch_add(L, lb, 2, 3, 4, 5, id, size, &e);
  if (rc < 0) return kfl_fail(L, &e);
  lua_pushboolean(L, rc);
  return 1;
}

/* b:account() -> count, size, runs: the records, the accounted size and
 * the ids as {first, count, first, count, ...} (see b:add). */
static int l_batch_account(lua_State *L) {
  lbatch *lb = check_batch(L);
  size_t i;
  lua_pushinteger(L, lb->b.count);
  kf_pushi64(L, lb->acc);
  lua_createtable(L, (int)lb->nruns, 0);
  for (i = 0; i < lb->nruns; i++) {
    kf_pushi64(L, lb->runs[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 3;
}

static int l_batch_len(lua_State *L) {
  lua_pushinteger(L, check_batch(L)->b.count);
  return 1;
}

/* Uncompressed size the encoded batch will have (header included). */
static int l_batch_bytes(lua_State *L) {
  lbatch *lb = check_batch(L);
  size_t n = lb->b.body.len;
  if (lb->b.count) n += lb->b.magic == 2 ? KF_V2_HEADER : (lb->b.codec ? 34 : 0);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* b:encode{base_offset=, producer_id=, ...} -> bytes (the builder keeps
 * its records; call b:clear() to reuse it). */
static int l_batch_encode(lua_State *L) {
  lbatch *lb = check_batch(L);
  kf_batch_opts o;
  kf_err e;
  KF_ERR_INIT(e);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  batch_opts(L, lua_isnoneornil(L, 2) ? 0 : 2, &o);
  lb->out.len = 0;
  lb->out.err = 0;
  if (kf_batch_encode(&lb->b, &o, &lb->out, &e)) return kfl_fail(L, &e);
  lua_pushlstring(L, lb->out.len ? (const char *)lb->out.buf : "", lb->out.len);
  return 1;
}

/* b:stamp{producer_id=, producer_epoch=, base_sequence=, transactional=}
 * -> b: the options the builder is encoded with when it goes into a request
 * (a Produce's records field); without a stamp, the defaults. */
static int l_batch_stamp(lua_State *L) {
  lbatch *lb = check_batch(L);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  batch_opts(L, lua_isnoneornil(L, 2) ? 0 : 2, &lb->stamp);
  lua_settop(L, 1);
  return 1;
}

static int l_batch_clear(lua_State *L) {
  lbatch *lb = check_batch(L);
  kf_batch_clear(&lb->b);
  lb->clears++;
  lb->acc = 0;
  lb->nruns = 0;
  lua_settop(L, 1);
  return 1;
}

static int l_batch_close(lua_State *L) {
  lbatch *lb = (lbatch *)luaL_checkudata(L, 1, BATCH_MT);
  if (lb->live) {
    kf_batch_free(&lb->b);
    kf_w_free(&lb->out);
    free(lb->runs);
    lb->runs = NULL;
    lb->nruns = lb->capruns = 0;
    lb->live = 0;
  }
  return 0;
}

static int l_batch_tostring(lua_State *L) {
  lbatch *lb = (lbatch *)luaL_checkudata(L, 1, BATCH_MT);
  lua_pushfstring(L, "kafka.batch(magic %d, %s, %d records)", lb->b.magic,
                  kf_codec_name(lb->b.codec), lb->live ? (int)lb->b.count : 0);
  return 1;
}
/* A records field's value at idx: a message array or a builder? */
int kfl_is_records(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TTABLE || luaL_testudata(L, idx, BATCH_MT) != NULL;
}

/* Encodes the records value at idx: a message array with its own options,
 * or a builder with its stamp (b:stamp). */
int kfl_encode_records_value(lua_State *L, int idx, int magic, box *bx, kf_writer *out, kf_err *e) {
  lbatch *lb;
  if (lua_type(L, idx) == LUA_TTABLE) return encode_messages(L, idx, magic, bx, out, e);
  lb = (lbatch *)luaL_checkudata(L, idx, BATCH_MT);
  if (!lb->live) luaL_error(L, "record batch builder is closed");
  return kf_batch_encode(&lb->b, &lb->stamp, out, e);
}

lbatch *kfl_batch_gatherable(lua_State *L, int idx) {
  lbatch *lb = (lbatch *)luaL_testudata(L, idx, BATCH_MT);
  if (!lb || !lb->live || lb->b.magic != 2 || lb->b.codec != KF_CODEC_NONE) return NULL;
  return lb->b.count > 0 && !lb->b.body.err ? lb : NULL;
}

/* encode_records(messages [, opts]) -> bytes. opts override the fields of
 * the messages table (magic, compression, base_offset, producer_id, ...). */
static int l_encode_records(lua_State *L) {
  kf_err e;
  KF_ERR_INIT(e);
  kf_batch_opts o;
  box *bx;
  int magic, codec, oi;
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  oi = lua_isnil(L, 2) ? 1 : 2;
  magic = read_magic(L, oi, oi == 2 ? read_magic(L, 1, 2) : 2);
  lua_getfield(L, oi, "compression");
  if (lua_isnil(L, -1) && oi == 2) {
    lua_pop(L, 1);
    lua_getfield(L, 1, "compression");
  }
  codec = kfl_codec(L, -1);
  lua_pop(L, 1);
  bx = kfl_box_new(L);
  kf_batch_free(&bx->batch);
  kf_batch_init(&bx->batch, magic, codec);
  if (batch_fill(L, 1, &bx->batch, &e)) return kfl_box_done(bx, kfl_fail(L, &e));
  batch_opts(L, oi, &o);
  if (kf_batch_encode(&bx->batch, &o, &bx->w, &e)) return kfl_box_done(bx, kfl_fail(L, &e));
  if (bx->w.err) return kfl_box_done(bx, kfl_fail_msg(L, bx->w.err, "out of memory"));
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return kfl_box_done(bx, 1);
}

static const luaL_Reg batch_funcs[] = {
  {"encode_records", l_encode_records},
  {"batch", l_batch},
  {NULL, NULL}
};

static const luaL_Reg batch_methods[] = {
  {"append", l_batch_append},
  {"add", l_batch_add},
  {"account", l_batch_account},
  {"bytes_size", l_batch_bytes},
  {"encode", l_batch_encode},
  {"clear", l_batch_clear},
  {"stamp", l_batch_stamp},
  {"close", l_batch_close},
  {NULL, NULL}
};

void kfl_open_batch(lua_State *L) {
  luaL_newmetatable(L, BATCH_MT);
  lua_pushcfunction(L, l_batch_close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_batch_close);
  lua_setfield(L, -2, "__close");
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, l_batch_len, 1);
  lua_setfield(L, -2, "__len");
  lua_pushcfunction(L, l_batch_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlibtable(L, batch_methods);
  lua_pushvalue(L, -2);
  luaL_setfuncs(L, batch_methods, 1); /* upvalue 1: the metatable */
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_setfuncs(L, batch_funcs, 0);
}
