/*
 * lua_kafka.c - the Lua binding (module kafka.core). The only C file that
 * includes lua.h: it implements the schema visitors over Lua tables and
 * turns core errors into the error contract:
 *   - misuse (wrong argument or field types, unknown api) raises;
 *   - bad or truncated bytes return nil, message, code.
 * Memory owned by C (writers, decompression scratch, batch builders) lives
 * in userdata with an idempotent __gc, so a raise never leaks.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "compat.h"
#include "compress.h"
#include "crc.h"
#include "lua_crypto.h"
#include "records.h"
#include "schema.h"

#define BOX_MT "kafka.core.box"
#define BATCH_MT "kafka.core.batch"

#define DEFAULT_MAX_DECOMPRESSED (256u << 20)
#define DEFAULT_MAX_FRAME (256u << 20)

/* --------------------------------------------------------------- the box */

/* Scratch memory of one call, owned by the GC. */
typedef struct box {
  kf_writer w;      /* the output frame */
  kf_writer tmp;    /* records encoded before being length-prefixed */
  kf_batch batch;   /* builder for message arrays */
  kf_rec_scratch s; /* decompression buffers */
  int live;
} box;

/* Frees a box's buffers as soon as the call's results are pushed, so the
 * next call reuses warm memory instead of waiting for the GC (LuaJIT's GC
 * does not see C memory at all). Returns nret. */
static int box_done(box *b, int nret) {
  if (b->live) {
    kf_w_free(&b->w);
    kf_w_free(&b->tmp);
    kf_batch_free(&b->batch);
    kf_rec_scratch_free(&b->s);
    b->live = 0;
  }
  return nret;
}

static int box_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  if (b) box_done(b, 0);
  return 0;
}

/* Pushes a new box; it stays on the stack for the duration of the call. */
static box *box_new(lua_State *L) {
  box *b = (box *)kf_newuserdata(L, sizeof(box));
  kf_w_init(&b->w);
  kf_w_init(&b->tmp);
  kf_batch_init(&b->batch, 2, 0);
  kf_rec_scratch_init(&b->s);
  b->live = 1;
  luaL_setmetatable(L, BOX_MT);
  return b;
}

/* Returns nil, message, code (the error contract for bad data). */
static int push_fail(lua_State *L, const kf_err *e) {
  lua_pushnil(L);
  lua_pushstring(L, e->msg[0] ? e->msg : kf_err_name(e->code));
  lua_pushstring(L, kf_err_name(e->code));
  return 3;
}

static int push_fail_msg(lua_State *L, int code, const char *msg) {
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushstring(L, kf_err_name(code));
  return 3;
}

/* ------------------------------------------------------------ api lookup */

/* Reads the api argument (key number or name); raises when unknown. */
static const kf_api *check_api(lua_State *L, int idx) {
  const kf_api *a = NULL;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    int64_t k = 0;
    if (!kf_toi64(L, idx, &k) || k < 0 || k > 32767 || !(a = kf_api_by_key((int)k)))
      luaL_argerror(L, idx, lua_pushfstring(L, "unknown api key %s", lua_tostring(L, idx)));
    return a;
  }
  a = kf_api_by_name(luaL_checkstring(L, idx));
  if (!a) luaL_argerror(L, idx, lua_pushfstring(L, "unknown api '%s'", lua_tostring(L, idx)));
  return a;
}

static int check_version(lua_State *L, int idx, const kf_api *a) {
  lua_Integer v = luaL_checkinteger(L, idx);
  if (v < a->min || v > a->max)
    luaL_argerror(L, idx, lua_pushfstring(L, "%s supports versions %d-%d, not %d", a->name,
                                          (int)a->min, (int)a->max, (int)v));
  return (int)v;
}

/* Message format a version implies for its records fields. */
static int magic_for(const kf_api *a, int version) {
  if (a->key == 0) return version <= 1 ? 0 : version == 2 ? 1 : 2; /* Produce */
  if (a->key == 1) return version <= 1 ? 0 : version <= 3 ? 1 : 2; /* Fetch */
  return 2;
}

static int opt_int(lua_State *L, int t, const char *k, int64_t def, int64_t *out) {
  int ok;
  lua_getfield(L, t, k);
  if (lua_isnil(L, -1)) {
    *out = def;
    ok = 1;
  } else {
    ok = kf_toi64(L, -1, out);
  }
  lua_pop(L, 1);
  if (!ok) luaL_error(L, "option '%s' must be an integer", k);
  return ok;
}

static int opt_bool(lua_State *L, int t, const char *k, int def) {
  int v;
  lua_getfield(L, t, k);
  v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Codec from a name or number at the top of the stack (nil: none). */
static int to_codec(lua_State *L, int idx) {
  int c = -1;
  int64_t n;
  if (lua_isnil(L, idx)) return 0;
  if (lua_type(L, idx) == LUA_TSTRING) c = kf_codec_by_name(lua_tostring(L, idx));
  else if (kf_toi64(L, idx, &n) && n >= 0 && n <= 4) c = (int)n;
  if (c < 0) luaL_error(L, "unknown compression '%s' (none, gzip, snappy, lz4, zstd)",
                        lua_tostring(L, idx) ? lua_tostring(L, idx) : luaL_typename(L, idx));
  return c;
}

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
 * 0), timestamp (absent: now). Raises on wrong types. */
static int batch_add(lua_State *L, kf_batch *b, int vi, int ki, int hi, int ti, kf_err *e) {
  const char *val = NULL, *key = NULL;
  size_t vl = 0, kl = 0, hsize = 0;
  uint32_t nh = 0;
  int64_t ts = -1;
  if (!lua_isnil(L, vi)) {
    if (lua_type(L, vi) != LUA_TSTRING) luaL_error(L, "record value must be a string or nil");
    val = lua_tolstring(L, vi, &vl);
  }
  if (ki && !lua_isnil(L, ki)) {
    if (lua_type(L, ki) != LUA_TSTRING) luaL_error(L, "record key must be a string or nil");
    key = lua_tolstring(L, ki, &kl);
  }
  if (ti && !lua_isnil(L, ti)) {
    if (!kf_toi64(L, ti, &ts)) luaL_error(L, "record timestamp must be an integer (ms)");
  } else {
    ts = b->magic == 0 ? -1 : kf_now_ms();
  }
  if (hi && !lua_isnil(L, hi)) {
    if (lua_type(L, hi) != LUA_TTABLE) luaL_error(L, "record headers must be a table");
    nh = headers_walk(L, hi, NULL, &hsize);
  }
  if (kf_batch_record(b, ts, key, kl, val, vl, nh, hsize, e)) return -1;
  if (nh) headers_walk(L, hi, b, &hsize);
  return 0;
}

/* Fills b from the message array at idx (strings are values; tables have
 * key, value, headers, timestamp). */
static int batch_fill(lua_State *L, int idx, kf_batch *b, kf_err *e) {
  size_t i, n = lua_rawlen(L, idx);
  luaL_checkstack(L, 8, "messages");
  for (i = 1; i <= n; i++) {
    int top = lua_gettop(L), rc;
    lua_rawgeti(L, idx, (int)i);
    if (lua_type(L, -1) == LUA_TSTRING) {
      rc = batch_add(L, b, top + 1, 0, 0, 0, e);
    } else if (lua_type(L, -1) == LUA_TTABLE) {
      lua_getfield(L, top + 1, "value");
      lua_getfield(L, top + 1, "key");
      lua_getfield(L, top + 1, "headers");
      lua_getfield(L, top + 1, "timestamp");
      rc = batch_add(L, b, top + 2, top + 3, top + 4, top + 5, e);
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
  opt_int(L, idx, "base_offset", 0, &v);
  o->base_offset = v;
  opt_int(L, idx, "producer_id", -1, &v);
  o->producer_id = v;
  opt_int(L, idx, "producer_epoch", -1, &v);
  o->producer_epoch = (int16_t)v;
  opt_int(L, idx, "base_sequence", -1, &v);
  o->base_sequence = (int32_t)v;
  opt_int(L, idx, "partition_leader_epoch", -1, &v);
  o->partition_leader_epoch = (int32_t)v;
  o->transactional = opt_bool(L, idx, "transactional", 0);
  o->control = opt_bool(L, idx, "control", 0);
}

static int read_magic(lua_State *L, int idx, int def) {
  int64_t m;
  opt_int(L, idx, "magic", def, &m);
  if (m < 0 || m > 2) luaL_error(L, "magic must be 0, 1 or 2");
  return (int)m;
}

/* Encodes the message array at idx (with its own options) into out. */
static int encode_messages(lua_State *L, int idx, int magic, box *bx, kf_writer *out, kf_err *e) {
  kf_batch_opts o;
  int codec;
  magic = read_magic(L, idx, magic);
  lua_getfield(L, idx, "compression");
  codec = to_codec(L, -1);
  lua_pop(L, 1);
  kf_batch_free(&bx->batch);
  kf_batch_init(&bx->batch, magic, codec);
  if (batch_fill(L, idx, &bx->batch, e)) return -1;
  batch_opts(L, idx, &o);
  return kf_batch_encode(&bx->batch, &o, out, e);
}

/* ---------------------------------------------------- the batch builder */

typedef struct lbatch {
  kf_batch b;
  kf_writer out;
  kf_batch_opts stamp; /* the options a request encodes it with (b:stamp) */
  int live;
} lbatch;

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

/* proto.batch{compression=, magic=} -> builder userdata. */
static int l_batch(lua_State *L) {
  int magic = 2, codec = 0;
  lbatch *lb;
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    magic = read_magic(L, 1, 2);
    lua_getfield(L, 1, "compression");
    codec = to_codec(L, -1);
    lua_pop(L, 1);
    if (codec == KF_CODEC_ZSTD && magic < 2) luaL_error(L, "zstd needs magic 2");
  }
  lb = (lbatch *)kf_newuserdata(L, sizeof(lbatch));
  kf_batch_init(&lb->b, magic, codec);
  kf_w_init(&lb->out);
  kf_batch_opts_default(&lb->stamp);
  lb->live = 1;
  luaL_setmetatable(L, BATCH_MT);
  return 1;
}

/* b:append(value, key, headers, timestamp) -> count; raises on misuse. */
static int l_batch_append(lua_State *L) {
  lbatch *lb = check_batch(L);
  kf_err e = {0, {0}};
  lua_settop(L, 5);
  if (batch_add(L, &lb->b, 2, 3, 4, 5, &e)) return push_fail(L, &e);
  lua_pushinteger(L, lb->b.count);
  return 1;
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
  kf_err e = {0, {0}};
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  batch_opts(L, lua_isnoneornil(L, 2) ? 0 : 2, &o);
  lb->out.len = 0;
  lb->out.err = 0;
  if (kf_batch_encode(&lb->b, &o, &lb->out, &e)) return push_fail(L, &e);
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
  kf_batch_clear(&check_batch(L)->b);
  lua_settop(L, 1);
  return 1;
}

static int l_batch_close(lua_State *L) {
  lbatch *lb = (lbatch *)luaL_checkudata(L, 1, BATCH_MT);
  if (lb->live) {
    kf_batch_free(&lb->b);
    kf_w_free(&lb->out);
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

/* ---------------------------------------------------------- encoding */

typedef struct lenc {
  lua_State *L;
  box *bx;
  int magic; /* records format of the message being encoded */
} lenc;

/* Pushes the value of field f of the current table (or the current array
 * element itself when f is NULL). Pointers taken from pushed strings are
 * used before any further Lua call, so popping them at once is safe. */
static void cur_value(lua_State *L, const kf_field *f) {
  if (!f) lua_pushvalue(L, -1);
  else if (lua_type(L, -1) == LUA_TTABLE) lua_getfield(L, -1, f->name);
  else lua_pushnil(L);
}

static int e_get_int(void *u, const kf_field *f, int64_t *v) {
  lua_State *L = ((lenc *)u)->L;
  int rc;
  cur_value(L, f);
  rc = lua_isnil(L, -1) ? KF_V_NIL : kf_toi64(L, -1, v) ? KF_V_OK : KF_V_BAD;
  lua_pop(L, 1);
  return rc;
}

static int e_get_num(void *u, const kf_field *f, double *v) {
  lua_State *L = ((lenc *)u)->L;
  int rc = KF_V_OK;
  cur_value(L, f);
  if (lua_isnil(L, -1)) rc = KF_V_NIL;
  else if (lua_type(L, -1) == LUA_TNUMBER) *v = (double)lua_tonumber(L, -1);
  else rc = KF_V_BAD;
  lua_pop(L, 1);
  return rc;
}

static int e_get_bool(void *u, const kf_field *f, int *v) {
  lua_State *L = ((lenc *)u)->L;
  int rc = KF_V_OK;
  cur_value(L, f);
  if (lua_isnil(L, -1)) rc = KF_V_NIL;
  else if (lua_type(L, -1) == LUA_TBOOLEAN) *v = lua_toboolean(L, -1);
  else rc = KF_V_BAD;
  lua_pop(L, 1);
  return rc;
}

static int e_get_bytes(void *u, const kf_field *f, const uint8_t **p, size_t *n) {
  lua_State *L = ((lenc *)u)->L;
  int rc = KF_V_OK;
  cur_value(L, f);
  if (lua_isnil(L, -1)) rc = KF_V_NIL;
  else if (lua_type(L, -1) == LUA_TSTRING) *p = (const uint8_t *)lua_tolstring(L, -1, n);
  else rc = KF_V_BAD;
  lua_pop(L, 1);
  return rc;
}

static int e_enter(void *u, const kf_field *f, size_t *n) {
  lua_State *L = ((lenc *)u)->L;
  luaL_checkstack(L, 4, "nesting");
  cur_value(L, f);
  if (lua_isnil(L, -1)) return KF_V_NIL;
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_pop(L, 1);
    return KF_V_BAD;
  }
  if (n) *n = lua_rawlen(L, -1);
  return KF_V_OK;
}

static int e_enter_elem(void *u, size_t i) {
  lua_State *L = ((lenc *)u)->L;
  lua_rawgeti(L, -1, (int)(i + 1));
  return lua_isnil(L, -1) ? KF_V_NIL : KF_V_OK;
}

static void e_leave(void *u) { lua_pop(((lenc *)u)->L, 1); }

static int e_has(void *u, const kf_field *f) {
  lua_State *L = ((lenc *)u)->L;
  int has;
  cur_value(L, f);
  has = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return has;
}

static int e_records(void *u, const kf_field *f, kf_writer *w, int kind, int nullable, kf_err *e) {
  lenc *c = (lenc *)u;
  lua_State *L = c->L;
  int t, rc = 0;
  cur_value(L, f);
  t = lua_type(L, -1);
  if (t == LUA_TNIL) {
    if (nullable) kf_w_lenbytes(w, kind, NULL, 0);
    else kf_w_lenbytes(w, kind, "", 0);
  } else if (t == LUA_TSTRING) {
    size_t n;
    const char *p = lua_tolstring(L, -1, &n);
    kf_w_lenbytes(w, kind, p, n);
  } else if (t == LUA_TTABLE || luaL_testudata(L, -1, BATCH_MT)) {
    /* An int32 length is back-patched: the records go straight into the
     * frame. A compact length is a varint of unknown size: go through tmp. */
    kf_writer *dst = kind == 32 ? w : &c->bx->tmp;
    size_t at = 0;
    if (kind == 32) at = kf_w_slot(w, 4);
    else dst->len = 0;
    if (t == LUA_TTABLE) {
      rc = encode_messages(L, lua_gettop(L), c->magic, c->bx, dst, e);
    } else {
      lbatch *lb = (lbatch *)lua_touserdata(L, -1);
      if (!lb->live) luaL_error(L, "record batch builder is closed");
      rc = kf_batch_encode(&lb->b, &lb->stamp, dst, e);
    }
    if (!rc && kind == 32) {
      if (w->len - at - 4 > INT32_MAX) w->err = KF_EVALUE;
      else kf_w_patch32(w, at, (uint32_t)(w->len - at - 4));
    } else if (!rc) {
      kf_w_lenbytes(w, kind, dst->len ? dst->buf : (const uint8_t *)"", dst->len);
    }
  } else {
    lua_pop(L, 1);
    return -1;
  }
  lua_pop(L, 1);
  return rc;
}

static const kf_enc_ops lua_enc_ops = {e_get_int, e_get_num,  e_get_bool, e_get_bytes, e_enter,
                                       e_enter_elem, e_leave, e_has,      e_records};

/* Encodes the body table at idx; raises on misuse, returns 0 or -1. */
static int encode_body(lua_State *L, int idx, const kf_struct *s, int version, int flex, int magic,
                       box *bx, kf_err *e) {
  lenc c;
  int rc;
  c.L = L;
  c.bx = bx;
  c.magic = magic;
  if (!lua_isnil(L, idx) && lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "body must be a table");
  lua_pushvalue(L, idx);
  rc = kf_schema_encode(s, version, flex, &lua_enc_ops, &c, &bx->w, e);
  lua_pop(L, 1);
  if (rc && (e->code == KF_EVALUE || e->code == KF_EUNSUPPORTED)) return luaL_error(L, "%s", e->msg);
  return rc;
}

static int push_frame(lua_State *L, box *bx, kf_err *e) {
  if (bx->w.err) {
    kf_err_set(e, bx->w.err, "frame encoding failed (%s)", kf_err_name(bx->w.err));
    return push_fail(L, e);
  }
  if (bx->w.len - 4 > INT32_MAX) {
    kf_err_set(e, KF_ELIMIT, "frame larger than 2 GiB");
    return push_fail(L, e);
  }
  kf_w_patch32(&bx->w, 0, (uint32_t)(bx->w.len - 4)); /* the size prefix */
  lua_pushlstring(L, (const char *)bx->w.buf, bx->w.len);
  return 1;
}

/* encode_request(api, version, header, body) -> frame (size included). */
static int l_encode_request(lua_State *L) {
  const kf_api *a = check_api(L, 1);
  int v = check_version(L, 2, a), hv = kf_req_header_version(a, v);
  int64_t corr;
  const char *client = NULL;
  size_t clen = 0;
  kf_err e = {0, {0}};
  box *bx;
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 4);
  opt_int(L, 3, "correlation_id", 0, &corr);
  if (corr < INT32_MIN || corr > INT32_MAX) luaL_error(L, "correlation_id out of int32 range");
  lua_getfield(L, 3, "client_id");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "client_id must be a string");
    client = lua_tolstring(L, -1, &clen);
    if (clen > 32767) luaL_error(L, "client_id longer than 32767 bytes");
  }
  bx = box_new(L); /* keeps client_id (below it) alive */
  kf_w_slot(&bx->w, 4);
  kf_w_i16(&bx->w, a->key);
  kf_w_i16(&bx->w, (int16_t)v);
  kf_w_i32(&bx->w, (int32_t)corr);
  if (hv >= 1) kf_w_lenbytes(&bx->w, 16, client, clen);
  if (hv >= 2) kf_w_uvarint(&bx->w, 0);
  if (encode_body(L, 4, a->req, v, v >= a->req_flex, magic_for(a, v), bx, &e)) return box_done(bx, push_fail(L, &e));
  return box_done(bx, push_frame(L, bx, &e));
}

/* encode_response(api, version, correlation_id, body) -> frame. */
static int l_encode_response(lua_State *L) {
  const kf_api *a = check_api(L, 1);
  int v = check_version(L, 2, a), hv = kf_resp_header_version(a, v);
  lua_Integer corr = luaL_checkinteger(L, 3);
  kf_err e = {0, {0}};
  box *bx;
  lua_settop(L, 4);
  bx = box_new(L);
  kf_w_slot(&bx->w, 4);
  kf_w_i32(&bx->w, (int32_t)corr);
  if (hv >= 1) kf_w_uvarint(&bx->w, 0);
  if (encode_body(L, 4, a->resp, v, v >= a->resp_flex, magic_for(a, v), bx, &e))
    return box_done(bx, push_fail(L, &e));
  return box_done(bx, push_frame(L, bx, &e));
}

/* ---------------------------------------------------------- decoding */

typedef struct ldec {
  lua_State *L;
  box *bx;
  int raw_records;
  int unsized; /* the frame comes without its 4-byte size */
  int has_corr; /* correlation_id given: the frame starts after it */
  int64_t corr;
  kf_rec_opts ro;
} ldec;

static void d_store(lua_State *L, const kf_field *f, size_t idx) {
  if (f) lua_setfield(L, -2, f->name);
  else lua_rawseti(L, -2, (int)(idx + 1));
}

static void d_set_int(void *u, const kf_field *f, size_t idx, int64_t v) {
  lua_State *L = ((ldec *)u)->L;
  kf_pushi64(L, v);
  d_store(L, f, idx);
}

static void d_set_num(void *u, const kf_field *f, size_t idx, double v) {
  lua_State *L = ((ldec *)u)->L;
  lua_pushnumber(L, (lua_Number)v);
  d_store(L, f, idx);
}

static void d_set_bool(void *u, const kf_field *f, size_t idx, int v) {
  lua_State *L = ((ldec *)u)->L;
  lua_pushboolean(L, v);
  d_store(L, f, idx);
}

static void d_set_bytes(void *u, const kf_field *f, size_t idx, const uint8_t *p, size_t n) {
  lua_State *L = ((ldec *)u)->L;
  lua_pushlstring(L, (const char *)p, n);
  d_store(L, f, idx);
}

static void d_set_nil(void *u, const kf_field *f, size_t idx) {
  (void)u, (void)f, (void)idx; /* null is an absent key */
}

static void d_begin(void *u, const kf_field *f, size_t idx, size_t n) {
  lua_State *L = ((ldec *)u)->L;
  (void)idx;
  luaL_checkstack(L, 6, "nesting");
  if (f && f->is_array) lua_createtable(L, n < 1u << 20 ? (int)n : 1 << 20, 0);
  else lua_createtable(L, 0, f && f->child ? f->child->nfields : 4);
}

static void d_end(void *u, const kf_field *f, size_t idx) { d_store(((ldec *)u)->L, f, idx); }

/* Records visitor: the stack holds messages, batches, errors tables. */
typedef struct lrec {
  lua_State *L;
  int msgs, batches, errors;
  int nmsg, nbatch, nerr;
  /* consumer options (decode_records): */
  int want_batches;    /* build the batches array */
  int set_base, nset;  /* key/value pairs copied into every message */
  int skip_control;    /* leave out control records */
  int64_t min_offset;  /* leave out records below it */
  int64_t next;        /* one past the highest offset seen (0: none) */
  /* stop_at_error: what comes at and after the first problem is left out */
  int stop_at_error, stopped;
  int batch_nmsg;      /* messages before the latest v2 batch */
  int64_t batch_next;  /* next before the latest v2 batch */
  int32_t batch_left;  /* records of the latest v2 batch still to come */
} lrec;

/* Options of the records decoders beyond kf_rec_opts. */
typedef struct rec_extra {
  int into;            /* stack index of a table to append to, or 0 */
  int set;             /* stack index of a table of fields to copy, or 0 */
  int skip_control;
  int batches;         /* build the batches array */
  int64_t min_offset;
  int stop_at_error;
} rec_extra;

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

/* Pushes a record's headers as an array of {key=, value=} (value absent
 * when null). */
static void push_headers(lua_State *L, const kf_record *r) {
  kf_reader hr;
  const uint8_t *k, *v;
  size_t kl, vl;
  int i = 0;
  kf_r_init(&hr, r->headers, r->headers_len);
  lua_createtable(L, (int)r->nheaders, 0);
  while (kf_headers_next(&hr, &k, &kl, &v, &vl)) {
    lua_createtable(L, 0, 2);
    lua_pushlstring(L, (const char *)k, kl);
    lua_setfield(L, -2, "key");
    if (v) {
      lua_pushlstring(L, (const char *)v, vl);
      lua_setfield(L, -2, "value");
    }
    lua_rawseti(L, -2, ++i);
  }
}

static int r_record(void *u, const kf_record *r) {
  lrec *c = (lrec *)u;
  lua_State *L = c->L;
  int j;
  if (c->stopped) return 0;
  if (r->magic == 2 && c->batch_left > 0) c->batch_left--;
  if (r->offset >= c->next) c->next = kf_add64(r->offset, 1);
  if (r->offset < c->min_offset || (c->skip_control && r->control)) return 0;
  /* the exact field count: a hash part one size too big doubles the table */
  lua_createtable(L, 0, 2 + (r->key != NULL) + (r->value != NULL) + (r->nheaders > 0) + (r->crc >= 0) +
                            r->control + c->nset);
  for (j = 0; j < c->nset; j++) {
    lua_pushvalue(L, c->set_base + 2 * j);
    lua_pushvalue(L, c->set_base + 2 * j + 1);
    lua_rawset(L, -3);
  }
  kf_pushi64(L, r->offset);
  lua_setfield(L, -2, "offset");
  kf_pushi64(L, r->timestamp);
  lua_setfield(L, -2, "timestamp");
  if (r->key) {
    lua_pushlstring(L, (const char *)r->key, r->key_len);
    lua_setfield(L, -2, "key");
  }
  if (r->value) {
    lua_pushlstring(L, (const char *)r->value, r->value_len);
    lua_setfield(L, -2, "value");
  }
  if (r->nheaders) {
    push_headers(L, r);
    lua_setfield(L, -2, "headers");
  }
  if (r->crc >= 0) {
    kf_pushi64(L, r->crc);
    lua_setfield(L, -2, "crc");
  }
  if (r->control) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "control");
  }
  lua_rawseti(L, c->msgs, ++c->nmsg);
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
        lua_pushnil(c->L);
        lua_rawseti(c->L, c->msgs, c->nmsg--);
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
static int push_records(lua_State *L, const uint8_t *p, size_t n, const kf_rec_opts *o, box *bx,
                        const rec_extra *x, int64_t *next, kf_err *e) {
  lrec c;
  kf_rec_visitor v;
  kf_rec_result res;
  int base = lua_gettop(L);
  luaL_checkstack(L, 40, "records");
  if (x && x->into) lua_pushvalue(L, x->into);
  else lua_newtable(L);
  lua_newtable(L);
  lua_newtable(L);
  c.L = L;
  c.msgs = base + 1;
  c.batches = base + 2;
  c.errors = base + 3;
  c.nmsg = (int)lua_rawlen(L, base + 1);
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
  v.ud = &c;
  v.batch = r_batch;
  v.record = r_record;
  v.problem = r_problem;
  if (kf_records_decode(p, n, o, &bx->s, &v, &res, e)) {
    lua_settop(L, base);
    return -1;
  }
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
  lua_settop(L, base + 1);
  if (next) *next = c.next;
  return 0;
}

static int d_records(void *u, const kf_field *f, const uint8_t *p, size_t n, size_t at, kf_err *e) {
  ldec *c = (ldec *)u;
  lua_State *L = c->L;
  kf_err re = {0, {0}};
  (void)e;
  if (!p) return 0; /* null records: absent */
  if (c->raw_records) {
    lua_pushlstring(L, (const char *)p, n);
  } else if (push_records(L, p, n, &c->ro, c->bx, NULL, NULL, &re)) {
    /* Corrupt framing stays inside this partition: the frame around it is
     * intact, so report it here and go on with the rest. */
    lua_createtable(L, 0, 2);
    lua_createtable(L, 1, 0);
    lua_pushfstring(L, "%s (records start at byte %d of the frame)", re.msg, (int)at);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "errors");
  }
  lua_setfield(L, -2, f ? f->name : "records");
  return 0;
}

static const kf_dec_ops lua_dec_ops = {d_set_int, d_set_num, d_set_bool, d_set_bytes,
                                       d_set_nil, d_begin,   d_end,      d_records};

/* Reads decode options at idx: raw_records, check_crc, max_decompressed. */
static void dec_opts(lua_State *L, int idx, ldec *c) {
  int64_t lim;
  c->raw_records = 0;
  c->unsized = 0;
  c->has_corr = 0;
  c->corr = 0;
  c->ro.check_crc = 1;
  c->ro.max_decompressed = DEFAULT_MAX_DECOMPRESSED;
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  c->raw_records = opt_bool(L, idx, "raw_records", 0);
  c->unsized = opt_bool(L, idx, "unsized", 0);
  lua_getfield(L, idx, "correlation_id");
  c->has_corr = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (c->has_corr) {
    opt_int(L, idx, "correlation_id", 0, &c->corr);
    if (c->corr < INT32_MIN || c->corr > INT32_MAX) luaL_error(L, "correlation_id out of range for int32");
  }
  c->ro.check_crc = opt_bool(L, idx, "check_crc", 1);
  opt_int(L, idx, "max_decompressed", DEFAULT_MAX_DECOMPRESSED, &lim);
  if (lim < 0) luaL_error(L, "max_decompressed must not be negative");
  c->ro.max_decompressed = (size_t)lim;
}

static int decode_body(lua_State *L, const kf_struct *s, int v, int flex, kf_reader *r, ldec *c,
                       kf_err *e) {
  lua_createtable(L, 0, s->nfields);
  if (kf_schema_decode(s, v, flex, &lua_dec_ops, c, r, e)) {
    lua_pop(L, 1);
    return -1;
  }
  return 0;
}

/* decode_response(api, version, frame [, opts]) -> correlation_id, body. */
static int l_decode_response(lua_State *L) {
  const kf_api *a = check_api(L, 1);
  int v = check_version(L, 2, a), hv = kf_resp_header_version(a, v);
  size_t n;
  const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 3, &n);
  kf_err e = {0, {0}};
  kf_reader r;
  ldec c;
  int32_t corr;
  dec_opts(L, 4, &c);
  lua_settop(L, 4);
  c.L = L;
  c.bx = box_new(L);
  kf_r_init(&r, p, n);
  if (!c.unsized) {
    /* sized: exactly one frame; unsized: what follows the size (a socket
     * reader saves concatenating the two; offsets then count from there) */
    if (kf_frame_check(p, n, &e)) return box_done(c.bx, push_fail(L, &e));
    r.pos = 4;
  }
  if (c.has_corr) {
    /* the caller read (and checked) the correlation id: the frame starts after it */
    corr = (int32_t)c.corr;
    if (kf_read_response_header_tail(&r, hv, &e)) return box_done(c.bx, push_fail(L, &e));
  } else if (kf_read_response_header(&r, hv, &corr, &e)) {
    return box_done(c.bx, push_fail(L, &e));
  }
  lua_pushinteger(L, corr);
  if (decode_body(L, a->resp, v, v >= a->resp_flex, &r, &c, &e)) return box_done(c.bx, push_fail(L, &e));
  return box_done(c.bx, 2);
}

/* decode_request(frame [, opts]) -> {api_key, api_version, correlation_id,
 * client_id, body}. An unknown api or version is data: nil, msg,
 * "unsupported". */
static int l_decode_request(lua_State *L) {
  size_t n;
  const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 1, &n);
  kf_err e = {0, {0}};
  kf_reader r;
  ldec c;
  kf_req_header h;
  dec_opts(L, 2, &c);
  lua_settop(L, 2);
  c.L = L;
  c.bx = box_new(L);
  if (kf_frame_check(p, n, &e)) return box_done(c.bx, push_fail(L, &e));
  kf_r_init(&r, p, n);
  r.pos = 4;
  if (kf_read_request_header(&r, &h, &e)) return box_done(c.bx, push_fail(L, &e));
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, h.api_key);
  lua_setfield(L, -2, "api_key");
  lua_pushinteger(L, h.api_version);
  lua_setfield(L, -2, "api_version");
  lua_pushstring(L, h.api->name);
  lua_setfield(L, -2, "api_name");
  lua_pushinteger(L, h.correlation_id);
  lua_setfield(L, -2, "correlation_id");
  if (h.client_id) {
    lua_pushlstring(L, (const char *)h.client_id, h.client_id_len);
    lua_setfield(L, -2, "client_id");
  }
  if (decode_body(L, h.api->req, h.api_version, h.api_version >= h.api->req_flex, &r, &c, &e))
    return box_done(c.bx, push_fail(L, &e));
  lua_setfield(L, -2, "body");
  return box_done(c.bx, 1);
}

/* ---------------------------------------------------- data structures */

static const kf_data *check_data(lua_State *L, int idx) {
  const kf_data *d = kf_data_by_name(luaL_checkstring(L, idx));
  if (!d) luaL_argerror(L, idx, lua_pushfstring(L, "unknown data structure '%s'", lua_tostring(L, idx)));
  return d;
}

/* encode_data(name, version, table [, {bare = true}]) -> bytes: the int16
 * version, then the struct (bare: the struct alone). */
static int l_encode_data(lua_State *L) {
  const kf_data *d = check_data(L, 1);
  lua_Integer v = luaL_checkinteger(L, 2);
  int bare = 0, rc;
  kf_err e = {0, {0}};
  lenc c;
  box *bx;
  if (v < d->min || v > d->max)
    luaL_argerror(L, 2, lua_pushfstring(L, "%s supports versions %d-%d, not %d", d->name, (int)d->min,
                                        (int)d->max, (int)v));
  if (!lua_isnil(L, 3) && lua_type(L, 3) != LUA_TTABLE) luaL_error(L, "body must be a table");
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    bare = opt_bool(L, 4, "bare", 0);
  }
  lua_settop(L, 3);
  bx = box_new(L);
  c.L = L;
  c.bx = bx;
  c.magic = 2;
  lua_pushvalue(L, 3);
  rc = kf_data_encode(d, (int)v, bare, &lua_enc_ops, &c, &bx->w, &e);
  lua_pop(L, 1);
  if (rc && (e.code == KF_EVALUE || e.code == KF_EUNSUPPORTED)) return luaL_error(L, "%s", e.msg);
  if (rc) return box_done(bx, push_fail(L, &e));
  if (bx->w.err) {
    kf_err_set(&e, bx->w.err, "%s encoding failed (%s)", d->name, kf_err_name(bx->w.err));
    return box_done(bx, push_fail(L, &e));
  }
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return box_done(bx, 1);
}

/* decode_data(name, bytes [, {version = v}]) -> version, table | nil, msg,
 * code. Without opts.version the bytes start with the int16 version; a
 * version above the newest known is decoded as the newest (its prefix). */
static int l_decode_data(lua_State *L) {
  const kf_data *d = check_data(L, 1);
  size_t n;
  const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 2, &n);
  int64_t bv = -1;
  int v = 0;
  kf_err e = {0, {0}};
  kf_reader r;
  ldec c;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    opt_int(L, 3, "version", -1, &bv);
    if (bv != -1 && (bv < d->min || bv > d->max))
      luaL_error(L, "%s supports versions %d-%d, not %d", d->name, (int)d->min, (int)d->max, (int)bv);
  }
  lua_settop(L, 3);
  dec_opts(L, 4, &c); /* none there: the defaults */
  c.L = L;
  c.bx = box_new(L);
  kf_r_init(&r, p, n);
  lua_createtable(L, 0, d->s->nfields);
  if (kf_data_decode(d, (int)bv, &lua_dec_ops, &c, &r, &v, &e)) {
    lua_pop(L, 1);
    return box_done(c.bx, push_fail(L, &e));
  }
  lua_pushinteger(L, v);
  lua_insert(L, -2);
  return box_done(c.bx, 2);
}

/* datas() -> array of {name=, min=, max=, flexible= first flexible version or nil}. */
static int l_datas(lua_State *L) {
  size_t i;
  lua_createtable(L, (int)kf_ndatas, 0);
  for (i = 0; i < kf_ndatas; i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, kf_datas[i].name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, kf_datas[i].min);
    lua_setfield(L, -2, "min");
    lua_pushinteger(L, kf_datas[i].max);
    lua_setfield(L, -2, "max");
    if (kf_datas[i].flex <= kf_datas[i].max) {
      lua_pushinteger(L, kf_datas[i].flex);
      lua_setfield(L, -2, "flexible");
    }
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* frame_length(buf [, max]) -> total frame length (prefix included) once
 * 4 bytes are there, else nil; nil, msg, code for a negative or too-large
 * size. */
static int l_frame_length(lua_State *L) {
  size_t n;
  const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 1, &n);
  lua_Integer max = luaL_optinteger(L, 2, DEFAULT_MAX_FRAME);
  int32_t size;
  if (n < 4) {
    lua_pushnil(L);
    return 1;
  }
  size = (int32_t)kf_be32(p);
  if (size < 0) return push_fail_msg(L, KF_ECORRUPT, "negative frame size");
  if ((lua_Integer)size > max) {
    lua_pushnil(L);
    lua_pushfstring(L, "frame of %d bytes exceeds the limit of %d", (int)size, (int)max);
    lua_pushstring(L, "limit");
    return 3;
  }
  lua_pushinteger(L, (lua_Integer)size + 4);
  return 1;
}

/* encode_records(messages [, opts]) -> bytes. opts override the fields of
 * the messages table (magic, compression, base_offset, producer_id, ...). */
static int l_encode_records(lua_State *L) {
  kf_err e = {0, {0}};
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
  codec = to_codec(L, -1);
  lua_pop(L, 1);
  bx = box_new(L);
  kf_batch_free(&bx->batch);
  kf_batch_init(&bx->batch, magic, codec);
  if (batch_fill(L, 1, &bx->batch, &e)) return box_done(bx, push_fail(L, &e));
  batch_opts(L, oi, &o);
  if (kf_batch_encode(&bx->batch, &o, &bx->w, &e)) return box_done(bx, push_fail(L, &e));
  if (bx->w.err) return box_done(bx, push_fail_msg(L, bx->w.err, "out of memory"));
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return box_done(bx, 1);
}

/* decode_records(bytes [, opts]) -> messages, info {batches, partial, errors,
 * count, next_offset}. Besides the decode options, opts may hold the
 * consumer's: into (append to this table), set (fields copied into every
 * message), min_offset (leave out records below it), skip_control (leave
 * out control records), batches = false (no batches array), stop_at_error
 * (the messages end before the first problem; next_offset is then where
 * it starts). */
static int l_decode_records(lua_State *L) {
  size_t n;
  const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 1, &n);
  kf_err e = {0, {0}};
  ldec c;
  box *bx;
  rec_extra x = {0, 0, 0, 1, INT64_MIN, 0};
  int64_t next = 0;
  dec_opts(L, 2, &c);
  lua_settop(L, 2);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "into");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_istable(L, -1), 2, "'into' must be a table");
      x.into = lua_gettop(L);
    }
    lua_getfield(L, 2, "set");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_istable(L, -1), 2, "'set' must be a table");
      x.set = lua_gettop(L);
    }
    opt_int(L, 2, "min_offset", INT64_MIN, &x.min_offset);
    x.skip_control = opt_bool(L, 2, "skip_control", 0);
    x.batches = opt_bool(L, 2, "batches", 1);
    x.stop_at_error = opt_bool(L, 2, "stop_at_error", 0);
  }
  bx = box_new(L);
  if (push_records(L, p, n, &c.ro, bx, &x, &next, &e)) return box_done(bx, push_fail(L, &e));
  lua_createtable(L, 0, 6);
  lua_getfield(L, -2, "batches");
  lua_setfield(L, -2, "batches");
  lua_getfield(L, -2, "errors");
  lua_setfield(L, -2, "errors");
  lua_getfield(L, -2, "partial");
  lua_pushboolean(L, lua_toboolean(L, -1));
  lua_setfield(L, -3, "partial");
  lua_pop(L, 1);
  lua_pushinteger(L, (lua_Integer)lua_rawlen(L, -2));
  lua_setfield(L, -2, "count");
  if (next) {
    kf_pushi64(L, next);
    lua_setfield(L, -2, "next_offset");
  }
  if (x.into) {
    /* the messages were appended to 'into': their fields stay out of it */
    lua_pushnil(L);
    lua_setfield(L, -3, "batches");
    lua_pushnil(L);
    lua_setfield(L, -3, "errors");
    lua_pushnil(L);
    lua_setfield(L, -3, "partial");
  }
  return box_done(bx, 2);
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
  const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 1, &n);
  static const char *const cols[] = {"offset", "timestamp", "key", "value", "headers"};
  kf_err e = {0, {0}};
  kf_rec_visitor v;
  kf_rec_result res;
  ldec d;
  lcol c;
  box *bx;
  int i;
  dec_opts(L, 2, &d);
  lua_settop(L, 2);
  bx = box_new(L);
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
  if (kf_records_decode(p, n, &d.ro, &bx->s, &v, &res, &e)) return box_done(bx, push_fail(L, &e));
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
  return box_done(bx, 2);
}

/* ------------------------------------------------------------- misc */

static int l_api_key(lua_State *L) {
  const kf_api *a = kf_api_by_name(luaL_checkstring(L, 1));
  if (!a) return 0;
  lua_pushinteger(L, a->key);
  return 1;
}

static int l_api_name(lua_State *L) {
  const kf_api *a = kf_api_by_key((int)luaL_checkinteger(L, 1));
  if (!a) return 0;
  lua_pushstring(L, a->name);
  return 1;
}

/* versions(api) -> min, max, first flexible request version (or nil). */
static int l_versions(lua_State *L) {
  const kf_api *a = check_api(L, 1);
  lua_pushinteger(L, a->min);
  lua_pushinteger(L, a->max);
  if (a->req_flex <= a->max) lua_pushinteger(L, a->req_flex);
  else lua_pushnil(L);
  return 3;
}

/* apis() -> array of {key=, name=, min=, max=}. */
static int l_apis(lua_State *L) {
  size_t i;
  lua_createtable(L, (int)kf_napis, 0);
  for (i = 0; i < kf_napis; i++) {
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, kf_apis[i].key);
    lua_setfield(L, -2, "key");
    lua_pushstring(L, kf_apis[i].name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, kf_apis[i].min);
    lua_setfield(L, -2, "min");
    lua_pushinteger(L, kf_apis[i].max);
    lua_setfield(L, -2, "max");
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* murmur2(key) -> Kafka's murmur2 hash (the Java client's and librdkafka's
 * murmur2 partitioners), as a non-negative integer below 2^32. */
static int l_murmur2(lua_State *L) {
  size_t n, i;
  const uint8_t *d = (const uint8_t *)luaL_checklstring(L, 1, &n);
  const uint32_t m = 0x5bd1e995u;
  uint32_t h = 0x9747b28cu ^ (uint32_t)n;
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
  kf_pushi64(L, (int64_t)h);
  return 1;
}

static int l_crc32(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  lua_pushinteger(L, (lua_Integer)kf_crc32(0, p, n));
  return 1;
}

/* crc32c(s [, impl]) with impl "sw" or "hw" to pick an implementation. */
static int l_crc32c(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  const char *impl = luaL_optstring(L, 2, "auto");
  uint32_t c;
  if (strcmp(impl, "sw") == 0) c = kf_crc32c_sw(0, p, n);
  else if (strcmp(impl, "hw") == 0) c = kf_crc32c_hw(0, p, n);
  else c = kf_crc32c(0, p, n);
  lua_pushinteger(L, (lua_Integer)c);
  return 1;
}

/* compress(codec, s [, legacy_lz4]) -> bytes; decompress(codec, s [, limit]) -> bytes | nil, msg, code */
static int l_compress(lua_State *L) {
  int codec = to_codec(L, 1);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  int legacy = lua_toboolean(L, 3);
  kf_err e = {0, {0}};
  box *bx = box_new(L);
  if (kf_compress(codec, (const uint8_t *)p, n, &bx->w, legacy, &e)) return box_done(bx, push_fail(L, &e));
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return box_done(bx, 1);
}

static int l_decompress(lua_State *L) {
  int codec = to_codec(L, 1);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  lua_Integer lim = luaL_optinteger(L, 3, DEFAULT_MAX_DECOMPRESSED);
  kf_err e = {0, {0}};
  box *bx;
  if (lim < 0) luaL_argerror(L, 3, "limit must not be negative");
  bx = box_new(L);
  if (codec == KF_CODEC_NONE) {
    lua_pushvalue(L, 2);
    return box_done(bx, 1);
  }
  if (kf_decompress(codec, (const uint8_t *)p, n, &bx->w, (size_t)lim, &e)) return box_done(bx, push_fail(L, &e));
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return box_done(bx, 1);
}

static const char *const type_str[] = {"bool", "int8", "int16", "uint16", "int32", "uint32",
                                       "int64", "float64", "uuid", "string", "bytes", "records",
                                       "struct"};

/* Pushes the field table of s as Lua data (for tests and tools). */
static void push_struct(lua_State *L, const kf_struct *s, int depth) {
  uint16_t i;
  luaL_checkstack(L, 6, "schema");
  lua_createtable(L, 0, 2);
  lua_pushstring(L, s->name);
  lua_setfield(L, -2, "name");
  lua_createtable(L, s->nfields, 0);
  for (i = 0; i < s->nfields; i++) {
    const kf_field *f = &s->fields[i];
    lua_createtable(L, 0, 14);
    lua_pushstring(L, f->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, type_str[f->type]);
    lua_setfield(L, -2, "type");
    lua_pushboolean(L, f->is_array);
    lua_setfield(L, -2, "array");
    lua_pushinteger(L, f->vmin);
    lua_setfield(L, -2, "vmin");
    lua_pushinteger(L, f->vmax);
    lua_setfield(L, -2, "vmax");
    lua_pushinteger(L, f->nmin);
    lua_setfield(L, -2, "nmin");
    lua_pushinteger(L, f->nmax);
    lua_setfield(L, -2, "nmax");
    lua_pushinteger(L, f->tmin);
    lua_setfield(L, -2, "tmin");
    lua_pushinteger(L, f->tmax);
    lua_setfield(L, -2, "tmax");
    lua_pushinteger(L, f->tag);
    lua_setfield(L, -2, "tag");
    /* the default: what an absent value encodes as (nil when null) */
    if (f->def_null) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "default_null");
    } else if (f->type == KF_T_BOOL) {
      lua_pushboolean(L, f->def_int != 0);
      lua_setfield(L, -2, "default");
    } else if (f->type <= KF_T_INT64) {
      kf_pushi64(L, f->def_int);
      lua_setfield(L, -2, "default");
    } else if (f->type == KF_T_FLOAT64) {
      lua_pushnumber(L, (lua_Number)f->def_num);
      lua_setfield(L, -2, "default");
    } else if (f->type == KF_T_STRING) {
      lua_pushstring(L, f->def_str ? f->def_str : "");
      lua_setfield(L, -2, "default");
    }
    if (f->child && depth < 32) {
      push_struct(L, f->child, depth + 1);
      lua_setfield(L, -2, "child");
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "fields");
}

/* schema(api, "request"|"response") or schema(name, "data") -> the field
 * tree the codec walks. */
static int l_schema(lua_State *L) {
  const char *kind = luaL_checkstring(L, 2);
  const kf_api *a;
  if (strcmp(kind, "data") == 0) {
    push_struct(L, check_data(L, 1)->s, 0);
    return 1;
  }
  a = check_api(L, 1);
  if (strcmp(kind, "request") == 0) push_struct(L, a->req, 0);
  else if (strcmp(kind, "response") == 0) push_struct(L, a->resp, 0);
  else return luaL_argerror(L, 2, "expected \"request\", \"response\" or \"data\"");
  return 1;
}

/* mem_stats([reset]) -> bytes the core holds now, high-water mark since the
 * last reset (reset = true starts a new one). */
static int l_mem_stats(lua_State *L) {
  if (lua_toboolean(L, 1)) kf_mem_reset_peak();
  lua_pushinteger(L, (lua_Integer)kf_mem_current());
  lua_pushinteger(L, (lua_Integer)kf_mem_peak());
  return 2;
}

static const luaL_Reg core_funcs[] = {
  {"schema", l_schema},
  {"mem_stats", l_mem_stats},
  {"encode_request", l_encode_request},
  {"decode_request", l_decode_request},
  {"encode_response", l_encode_response},
  {"decode_response", l_decode_response},
  {"encode_data", l_encode_data},
  {"decode_data", l_decode_data},
  {"datas", l_datas},
  {"frame_length", l_frame_length},
  {"encode_records", l_encode_records},
  {"decode_records", l_decode_records},
  {"decode_columns", l_decode_columns},
  {"batch", l_batch},
  {"api_key", l_api_key},
  {"api_name", l_api_name},
  {"versions", l_versions},
  {"apis", l_apis},
  {"murmur2", l_murmur2},
  {"crc32", l_crc32},
  {"crc32c", l_crc32c},
  {"compress", l_compress},
  {"decompress", l_decompress},
  {NULL, NULL}
};

static const luaL_Reg batch_methods[] = {
  {"append", l_batch_append},
  {"bytes_size", l_batch_bytes},
  {"encode", l_batch_encode},
  {"clear", l_batch_clear},
  {"stamp", l_batch_stamp},
  {"close", l_batch_close},
  {NULL, NULL}
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int luaopen_kafka_core(lua_State *L);

int luaopen_kafka_core(lua_State *L) {
  luaL_newmetatable(L, BOX_MT);
  lua_pushcfunction(L, box_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

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

  luaL_newlib(L, core_funcs);
  lua_pushboolean(L, kf_crc32c_has_hw());
  lua_setfield(L, -2, "crc32c_hw");
  kf_lua_crypto(L);
  lua_setfield(L, -2, "crypto");
  return 1;
}
