/*
 * lua_kafka.c - the Lua binding's registration (module kafka.core: every
 * glue file's opener is called from here) and the module's own functions:
 * hashes, compression, memory counters. The helpers every glue file shares
 * (the box, the error contract, option readers) are in lua_glue.c; the
 * schema visitors in lua_schema.c, the records in lua_records.c (see
 * lua_glue.h). Memory owned by C (writers, decompression scratch, batch
 * builders) lives in userdata with an idempotent __gc, so a raise never
 * leaks.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "compat.h"
#include "compress.h"
#include "crc.h"
#include "lua_crypto.h"
#include "lua_glue.h"
#include "records.h"

/* ---------------------------------------------------- hashes, compression */

/* murmur2(key) -> Kafka's murmur2 hash (the Java client's and librdkafka's
 * murmur2 partitioners), as a non-negative integer below 2^32. */
static int l_murmur2(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  kf_pushi64(L, (int64_t)kf_murmur2(p, n));
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
  int codec = kfl_codec(L, 1);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  int legacy = lua_toboolean(L, 3);
  kf_err e;
  KF_ERR_INIT(e);
  box *bx = kfl_box_new(L);
  if (kf_compress(codec, (const uint8_t *)p, n, &bx->w, legacy, &e)) return kfl_box_done(bx, kfl_fail(L, &e));
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return kfl_box_done(bx, 1);
}

static int l_decompress(lua_State *L) {
  int codec = kfl_codec(L, 1);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  lua_Integer lim = luaL_optinteger(L, 3, KFL_DEFAULT_MAX_DECOMPRESSED);
  kf_err e;
  KF_ERR_INIT(e);
  box *bx;
  if (lim < 0) luaL_argerror(L, 3, "limit must not be negative");
  bx = kfl_box_new(L);
  if (codec == KF_CODEC_NONE) {
    lua_pushvalue(L, 2);
    return kfl_box_done(bx, 1);
  }
  if (kf_decompress(codec, (const uint8_t *)p, n, &bx->w, (size_t)lim, &e)) return kfl_box_done(bx, kfl_fail(L, &e));
  lua_pushlstring(L, bx->w.len ? (const char *)bx->w.buf : "", bx->w.len);
  return kfl_box_done(bx, 1);
}
/* mem_stats([reset]) -> bytes the core holds now, high-water mark since the
 * last reset (reset = true starts a new one). */
static int l_mem_stats(lua_State *L) {
  if (lua_toboolean(L, 1)) kf_mem_reset_peak();
  lua_pushinteger(L, (lua_Integer)kf_mem_current());
  lua_pushinteger(L, (lua_Integer)kf_mem_peak());
  return 2;
}
/* new_array(n) -> an empty table with room for n array items: a poll's
 * messages go into one allocation, not into ten doublings (each a large
 * malloc that made glibc consolidate the small chunks freed before it). */
static int l_new_array(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0 && n <= 1 << 24, 1, "size out of range");
  lua_createtable(L, (int)n, 0);
  return 1;
}

static const luaL_Reg core_funcs[] = {
  {"mem_stats", l_mem_stats},
  {"new_array", l_new_array},
  {"murmur2", l_murmur2},
  {"crc32", l_crc32},
  {"crc32c", l_crc32c},
  {"compress", l_compress},
  {"decompress", l_decompress},
  {NULL, NULL}
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int luaopen_kafka_core(lua_State *L);

int luaopen_kafka_core(lua_State *L) {
  kfl_open_glue(L);
  luaL_newlib(L, core_funcs);
  kfl_open_schema(L);
  kfl_open_batch(L);
  kfl_open_records(L);
  kfl_open_producer(L);
  kfl_open_bytes(L);
  kfl_open_inbox(L);
  kfl_open_tls(L);
  lua_pushboolean(L, kf_crc32c_has_hw());
  lua_setfield(L, -2, "crc32c_hw");
  kf_lua_crypto(L);
  lua_setfield(L, -2, "crypto");
  return 1;
}
