/*
 * lua_glue.c - what every glue file of the Lua binding calls back (see
 * lua_glue.h): the box (one call's scratch memory, owned by the GC), the
 * error contract's nil, message, code, the option readers and the codec
 * names. It calls no other glue file, so the glue files form no circle:
 * lua_kafka.c registers the module and calls the others' openers; they
 * all call this one.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "compat.h"
#include "compress.h"
#include "lua_glue.h"
#include "records.h"

#define BOX_MT "kafka.core.box"

/* --------------------------------------------------------------- the box */

/* Frees a box's buffers as soon as the call's results are pushed, so the
 * next call reuses warm memory instead of waiting for the GC (LuaJIT's GC
 * does not see C memory at all). Returns nret. */
int kfl_box_done(box *b, int nret) {
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
  if (b) kfl_box_done(b, 0);
  return 0;
}

/* Pushes a new box; it stays on the stack for the duration of the call. */
box *kfl_box_new(lua_State *L) {
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
int kfl_fail(lua_State *L, const kf_err *e) {
  lua_pushnil(L);
  lua_pushstring(L, e->msg[0] ? e->msg : kf_err_name(e->code));
  lua_pushstring(L, kf_err_name(e->code));
  return 3;
}

int kfl_fail_msg(lua_State *L, int code, const char *msg) {
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushstring(L, kf_err_name(code));
  return 3;
}

/* --------------------------------------------------------------- options */

int kfl_opt_int(lua_State *L, int t, const char *k, int64_t def, int64_t *out) {
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

int kfl_opt_bool(lua_State *L, int t, const char *k, int def) {
  int v;
  lua_getfield(L, t, k);
  v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Codec from a name or number at the top of the stack (nil: none). */
int kfl_codec(lua_State *L, int idx) {
  int c = -1;
  int64_t n;
  if (lua_isnil(L, idx)) return 0;
  if (lua_type(L, idx) == LUA_TSTRING) c = kf_codec_by_name(lua_tostring(L, idx));
  else if (kf_toi64(L, idx, &n) && n >= 0 && n <= 4) c = (int)n;
  if (c < 0) luaL_error(L, "unknown compression '%s' (none, gzip, snappy, lz4, zstd)",
                        lua_tostring(L, idx) ? lua_tostring(L, idx) : luaL_typename(L, idx));
  return c;
}

/* Registers the box's metatable (before any call makes a box). */
void kfl_open_glue(lua_State *L) {
  luaL_newmetatable(L, BOX_MT);
  lua_pushcfunction(L, box_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
}
