/*
 * lua_schema.c - the schema visitors over Lua tables (see lua_glue.h):
 * request and response frames, data structures, the field tree for
 * introspection. The records inside frames go through lua_records.c.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "compat.h"
#include "lua_glue.h"
#include "records.h"
#include "schema.h"

#define DEFAULT_MAX_FRAME (256u << 20)

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

/* ---------------------------------------------------------- encoding */

typedef struct lenc {
  lua_State *L;
  box *bx;
  int magic; /* records format of the message being encoded */
  kfl_outframe *of; /* a frame in pieces (NULL: one run of bytes) */
  int of_idx;       /* its stack index */
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
  else if (!(*p = kfl_tobytes(L, -1, n))) rc = KF_V_BAD; /* a string or kafka.bytes (kept alive by the table) */
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
  lbatch *lb = NULL;
  cur_value(L, f);
  t = lua_type(L, -1);
  if (c->of && t == LUA_TUSERDATA && (kind == 32 || kind == 'c')) lb = kfl_batch_gatherable(L, -1);
  if (t == LUA_TNIL) {
    if (nullable) kf_w_lenbytes(w, kind, NULL, 0);
    else kf_w_lenbytes(w, kind, "", 0);
  } else if (t == LUA_TSTRING) {
    size_t n;
    const char *p = lua_tolstring(L, -1, &n);
    kf_w_lenbytes(w, kind, p, n);
  } else if (lb) {
    /* the records stay in the builder: only their size and batch header
     * go into the frame */
    kf_w_lenprefix(w, kind, KF_V2_HEADER + lb->b.body.len);
    rc = kf_batch_encode_head(&lb->b, &lb->stamp, w, e);
    if (!rc && !w->err) kfl_outframe_add(L, c->of_idx, lua_gettop(L), c->of, lb);
  } else if (kfl_is_records(L, -1)) {
    /* An int32 length is back-patched: the records go straight into the
     * frame. A compact length is a varint of unknown size: go through tmp. */
    kf_writer *dst = kind == 32 ? w : &c->bx->tmp;
    size_t at = 0;
    if (kind == 32) at = kf_w_slot(w, 4);
    else dst->len = 0;
    rc = kfl_encode_records_value(L, lua_gettop(L), c->magic, c->bx, dst, e);
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

/* Encodes the body table at idx into w (bx->w or the frame in pieces at
 * of_idx); raises on misuse, returns 0 or -1. */
static int encode_body(lua_State *L, int idx, const kf_struct *s, int version, int flex, int magic,
                       box *bx, kf_writer *w, kfl_outframe *of, int of_idx, kf_err *e) {
  lenc c;
  int rc;
  c.L = L;
  c.bx = bx;
  c.magic = magic;
  c.of = of;
  c.of_idx = of_idx;
  if (!lua_isnil(L, idx) && lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "body must be a table");
  lua_pushvalue(L, idx);
  rc = kf_schema_encode(s, version, flex, &lua_enc_ops, &c, w, e);
  lua_pop(L, 1);
  if (rc && (e->code == KF_EVALUE || e->code == KF_EUNSUPPORTED)) return luaL_error(L, "%s", e->msg);
  return rc;
}

/* Patches the size prefix of the frame in w (ext more bytes in pieces)
 * and pushes it: a string, or the frame in pieces at of_idx (0: none). */
static int push_frame(lua_State *L, kf_writer *w, size_t ext, int of_idx, kf_err *e) {
  if (w->err) {
    kf_err_set(e, w->err, "frame encoding failed (%s)", kf_err_name(w->err));
    return kfl_fail(L, e);
  }
  if (!(w->len - 4 <= INT32_MAX && ext <= INT32_MAX - (w->len - 4))) {
    kf_err_set(e, KF_ELIMIT, "frame larger than 2 GiB");
    return kfl_fail(L, e);
  }
  kf_w_patch32(w, 0, (uint32_t)(w->len - 4 + ext)); /* the size prefix */
  if (of_idx) lua_pushvalue(L, of_idx);
  else lua_pushlstring(L, (const char *)w->buf, w->len);
  return 1;
}

/* encode_request(api, version, header, body [, opts]) -> frame (size
 * included): a string, or with opts.gather a Produce frame in pieces
 * (kafka.outframe: ib:write sends it, tostring joins it, #frame). */
static int l_encode_request(lua_State *L) {
  const kf_api *a = check_api(L, 1);
  int v = check_version(L, 2, a);
  int64_t corr;
  const char *client = NULL;
  size_t clen = 0;
  kf_err e;
  KF_ERR_INIT(e);
  box *bx;
  kfl_outframe *of = NULL;
  kf_writer *w;
  int of_idx = 0;
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 5);
  /* only Produce: its records are regular fields, and a tagged field's
   * size (inserted before the value once encoded) would miss a piece */
  if (lua_type(L, 5) == LUA_TTABLE) { /* (callers pass on extra results: anything else is no options) */
    if (kfl_opt_bool(L, 5, "gather", 0) && a->key == 0) {
      of = kfl_outframe_new(L);
      of_idx = lua_gettop(L);
    }
  }
  kfl_opt_int(L, 3, "correlation_id", 0, &corr);
  if (corr < INT32_MIN || corr > INT32_MAX) luaL_error(L, "correlation_id out of int32 range");
  lua_getfield(L, 3, "client_id");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "client_id must be a string");
    client = lua_tolstring(L, -1, &clen);
    if (clen > 32767) luaL_error(L, "client_id longer than 32767 bytes");
  }
  bx = kfl_box_new(L); /* keeps client_id (below it) alive */
  w = of ? &of->w : &bx->w;
  kf_w_slot(w, 4);
  kf_write_request_header(w, a, v, (int32_t)corr, client, clen);
  if (encode_body(L, 4, a->req, v, v >= a->req_flex, magic_for(a, v), bx, w, of, of_idx, &e))
    return kfl_box_done(bx, kfl_fail(L, &e));
  return kfl_box_done(bx, push_frame(L, w, of ? of->ext : 0, of_idx, &e));
}

/* encode_response(api, version, correlation_id, body) -> frame. */
static int l_encode_response(lua_State *L) {
  const kf_api *a = check_api(L, 1);
  int v = check_version(L, 2, a), hv = kf_resp_header_version(a, v);
  lua_Integer corr = luaL_checkinteger(L, 3);
  kf_err e;
  KF_ERR_INIT(e);
  box *bx;
  lua_settop(L, 4);
  bx = kfl_box_new(L);
  kf_w_slot(&bx->w, 4);
  kf_write_response_header(&bx->w, hv, (int32_t)corr);
  if (encode_body(L, 4, a->resp, v, v >= a->resp_flex, magic_for(a, v), bx, &bx->w, NULL, 0, &e))
    return kfl_box_done(bx, kfl_fail(L, &e));
  return kfl_box_done(bx, push_frame(L, &bx->w, 0, 0, &e));
}
/* ---------------------------------------------------------- decoding */

typedef struct ldec {
  lua_State *L;
  box *bx;
  int raw_records; /* 1: records as strings, 2: as kafka.bytes views */
  int owner;       /* stack index of the frame (what views keep alive) */
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
static int d_records(void *u, const kf_field *f, const uint8_t *p, size_t n, size_t at, kf_err *e) {
  ldec *c = (ldec *)u;
  lua_State *L = c->L;
  kf_err re;
  KF_ERR_INIT(re);
  (void)e;
  if (!p) return 0; /* null records: absent */
  if (c->raw_records == 2) {
    kfl_push_view(L, p, n, c->owner); /* no copy: the view keeps the frame alive */
  } else if (c->raw_records) {
    lua_pushlstring(L, (const char *)p, n);
  } else if (kfl_push_records(L, p, n, &c->ro, c->bx, NULL, NULL, &re)) {
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
  c->raw_records = 0;
  c->unsized = 0;
  c->has_corr = 0;
  c->corr = 0;
  kfl_rec_opts(L, idx, &c->ro);
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "raw_records");
  if (lua_type(L, -1) == LUA_TSTRING) {
    if (strcmp(lua_tostring(L, -1), "view") != 0) luaL_error(L, "raw_records must be a boolean or \"view\"");
    c->raw_records = 2;
  }
  lua_pop(L, 1);
  if (!c->raw_records) c->raw_records = kfl_opt_bool(L, idx, "raw_records", 0);
  c->unsized = kfl_opt_bool(L, idx, "unsized", 0);
  lua_getfield(L, idx, "correlation_id");
  c->has_corr = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (c->has_corr) {
    kfl_opt_int(L, idx, "correlation_id", 0, &c->corr);
    if (c->corr < INT32_MIN || c->corr > INT32_MAX) luaL_error(L, "correlation_id out of range for int32");
  }
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
  const uint8_t *p = kfl_checkbytes(L, 3, &n);
  kf_err e;
  KF_ERR_INIT(e);
  kf_reader r;
  ldec c;
  int32_t corr;
  dec_opts(L, 4, &c);
  lua_settop(L, 4);
  c.L = L;
  c.owner = 3;
  c.bx = kfl_box_new(L);
  kf_r_init(&r, p, n);
  if (!c.unsized) {
    /* sized: exactly one frame; unsized: what follows the size (a socket
     * reader saves concatenating the two; offsets then count from there) */
    if (kf_frame_check(p, n, &e)) return kfl_box_done(c.bx, kfl_fail(L, &e));
    r.pos = 4;
  }
  if (c.has_corr) {
    /* the caller read (and checked) the correlation id: the frame starts after it */
    corr = (int32_t)c.corr;
    if (kf_read_response_header_tail(&r, hv, &e)) return kfl_box_done(c.bx, kfl_fail(L, &e));
  } else if (kf_read_response_header(&r, hv, &corr, &e)) {
    return kfl_box_done(c.bx, kfl_fail(L, &e));
  }
  lua_pushinteger(L, corr);
  if (decode_body(L, a->resp, v, v >= a->resp_flex, &r, &c, &e)) return kfl_box_done(c.bx, kfl_fail(L, &e));
  return kfl_box_done(c.bx, 2);
}

/* decode_request(frame [, opts]) -> {api_key, api_version, correlation_id,
 * client_id, body}. An unknown api or version is data: nil, msg,
 * "unsupported". */
static int l_decode_request(lua_State *L) {
  size_t n;
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  kf_err e;
  KF_ERR_INIT(e);
  kf_reader r;
  ldec c;
  kf_req_header h;
  dec_opts(L, 2, &c);
  lua_settop(L, 2);
  c.L = L;
  c.owner = 1;
  c.bx = kfl_box_new(L);
  if (kf_frame_check(p, n, &e)) return kfl_box_done(c.bx, kfl_fail(L, &e));
  kf_r_init(&r, p, n);
  r.pos = 4;
  if (kf_read_request_header(&r, &h, &e)) return kfl_box_done(c.bx, kfl_fail(L, &e));
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
    return kfl_box_done(c.bx, kfl_fail(L, &e));
  lua_setfield(L, -2, "body");
  return kfl_box_done(c.bx, 1);
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
  kf_err e;
  KF_ERR_INIT(e);
  lenc c;
  box *bx;
  if (v < d->min || v > d->max)
    luaL_argerror(L, 2, lua_pushfstring(L, "%s supports versions %d-%d, not %d", d->name, (int)d->min,
                                        (int)d->max, (int)v));
  if (!lua_isnil(L, 3) && lua_type(L, 3) != LUA_TTABLE) luaL_error(L, "body must be a table");
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    bare = kfl_opt_bool(L, 4, "bare", 0);
  }
  lua_settop(L, 3);
  bx = kfl_box_new(L);
  c.L = L;
  c.bx = bx;
  c.magic = 2;
  lua_pushvalue(L, 3);
  rc = kf_data_encode(d, (int)v, bare, &lua_enc_ops, &c, &bx->w, &e);
  lua_pop(L, 1);
  if (rc && (e.code == KF_EVALUE || e.code == KF_EUNSUPPORTED)) return luaL_error(L, "%s", e.msg);
  if (rc) return kfl_box_done(bx, kfl_fail(L, &e));
  if (bx->w.err) {
    kf_err_set(&e, bx->w.err, "%s encoding failed (%s)", d->name, kf_err_name(bx->w.err));
    return kfl_box_done(bx, kfl_fail(L, &e));
  }
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return kfl_box_done(bx, 1);
}

/* decode_data(name, bytes [, {version = v}]) -> version, table | nil, msg,
 * code. Without opts.version the bytes start with the int16 version; a
 * version above the newest known is decoded as the newest (its prefix). */
static int l_decode_data(lua_State *L) {
  const kf_data *d = check_data(L, 1);
  size_t n;
  const uint8_t *p = kfl_checkbytes(L, 2, &n);
  int64_t bv = -1;
  int v = 0;
  kf_err e;
  KF_ERR_INIT(e);
  kf_reader r;
  ldec c;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    kfl_opt_int(L, 3, "version", -1, &bv);
    if (bv != -1 && (bv < d->min || bv > d->max))
      luaL_error(L, "%s supports versions %d-%d, not %d", d->name, (int)d->min, (int)d->max, (int)bv);
  }
  lua_settop(L, 3);
  dec_opts(L, 4, &c); /* none there: the defaults */
  c.L = L;
  c.owner = 2;
  c.bx = kfl_box_new(L);
  kf_r_init(&r, p, n);
  lua_createtable(L, 0, d->s->nfields);
  if (kf_data_decode(d, (int)bv, &lua_dec_ops, &c, &r, &v, &e)) {
    lua_pop(L, 1);
    return kfl_box_done(c.bx, kfl_fail(L, &e));
  }
  lua_pushinteger(L, v);
  lua_insert(L, -2);
  return kfl_box_done(c.bx, 2);
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
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  lua_Integer max = luaL_optinteger(L, 2, DEFAULT_MAX_FRAME);
  int32_t size;
  if (n < 4) {
    lua_pushnil(L);
    return 1;
  }
  size = (int32_t)kf_be32(p);
  if (size < 0) return kfl_fail_msg(L, KF_ECORRUPT, "negative frame size");
  if ((lua_Integer)size > max) {
    lua_pushnil(L);
    lua_pushfstring(L, "frame of %d bytes exceeds the limit of %d", (int)size, (int)max);
    lua_pushstring(L, "limit");
    return 3;
  }
  lua_pushinteger(L, (lua_Integer)size + 4);
  return 1;
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
static const luaL_Reg schema_funcs[] = {
  {"schema", l_schema},
  {"encode_request", l_encode_request},
  {"decode_request", l_decode_request},
  {"encode_response", l_encode_response},
  {"decode_response", l_decode_response},
  {"encode_data", l_encode_data},
  {"decode_data", l_decode_data},
  {"datas", l_datas},
  {"frame_length", l_frame_length},
  {"api_key", l_api_key},
  {"api_name", l_api_name},
  {"versions", l_versions},
  {"apis", l_apis},
  {NULL, NULL}
};

void kfl_open_schema(lua_State *L) { luaL_setfuncs(L, schema_funcs, 0); }
