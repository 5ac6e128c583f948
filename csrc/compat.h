/*
 * compat.h - the only place that knows Lua versions (5.1/LuaJIT 2.1, 5.3, 5.4).
 *
 * 64-bit policy: on Lua 5.3/5.4 int64 fields are Lua integers, exact over
 * the whole range. On Lua 5.1 and LuaJIT they are Lua numbers (doubles):
 * exact up to 2^53 in magnitude (offsets, timestamps and producer ids stay
 * far below it); larger values decode to the nearest double, and encoding
 * accepts only numbers with an integral value inside the int64 range.
 */
#ifndef KF_COMPAT_H
#define KF_COMPAT_H

#include <stdint.h>

#include "lauxlib.h"
#include "lua.h"

#if LUA_VERSION_NUM < 502
/* Lua 5.1 lacks these; LuaJIT 2.1 has some of them. Our own copies under
 * kf_ names serve both without clashing with LuaJIT's declarations. */
#define lua_rawlen(L, i) lua_objlen(L, (i))
#undef luaL_newlibtable
#undef luaL_newlib
#define luaL_newlibtable(L, l) lua_createtable(L, 0, (int)(sizeof(l) / sizeof((l)[0]) - 1))
#define luaL_newlib(L, l) (luaL_newlibtable(L, l), luaL_setfuncs(L, l, 0))
#define luaL_setfuncs kf_luaL_setfuncs
#define lua_absindex(L, i) ((i) > 0 || (i) <= LUA_REGISTRYINDEX ? (i) : lua_gettop(L) + (i) + 1)
#define luaL_setmetatable kf_luaL_setmetatable
#define luaL_testudata kf_luaL_testudata
static inline void kf_luaL_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
  luaL_checkstack(L, nup + 1, "too many upvalues");
  for (; l->name; l++) {
    int i;
    for (i = 0; i < nup; i++) lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}
static inline void kf_luaL_setmetatable(lua_State *L, const char *tname) {
  luaL_getmetatable(L, tname);
  lua_setmetatable(L, -2);
}
static inline void *kf_luaL_testudata(lua_State *L, int i, const char *tname) {
  void *p = lua_touserdata(L, i);
  if (p && lua_getmetatable(L, i)) {
    int same;
    luaL_getmetatable(L, tname);
    same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (same) return p;
  }
  return NULL;
}
#endif

#if LUA_VERSION_NUM >= 504
#define kf_newuserdata(L, sz) lua_newuserdatauv(L, (sz), 0)
#else
#define kf_newuserdata(L, sz) lua_newuserdata(L, (sz))
#endif

/* Userdata with one user value (a table): kf_getuv pushes it, kf_setuv
 * pops the value on top into it. */
#if LUA_VERSION_NUM >= 504
#define kf_newuserdata_uv(L, sz) lua_newuserdatauv(L, (sz), 1)
#define kf_getuv(L, i) ((void)lua_getiuservalue(L, (i), 1))
#define kf_setuv(L, i) ((void)lua_setiuservalue(L, (i), 1))
#elif LUA_VERSION_NUM == 503
#define kf_newuserdata_uv(L, sz) lua_newuserdata(L, (sz))
#define kf_getuv(L, i) ((void)lua_getuservalue(L, (i)))
#define kf_setuv(L, i) lua_setuservalue(L, (i))
#else
#define kf_newuserdata_uv(L, sz) lua_newuserdata(L, (sz))
#define kf_getuv(L, i) lua_getfenv(L, (i))
#define kf_setuv(L, i) ((void)lua_setfenv(L, (i)))
#endif

/* A userdata's link to another value (what keeps it alive): its user value,
 * in a table on Lua 5.1, where a user value must be a table. kf_setlink
 * pops the value on top into the userdata at ud; kf_pushlink pushes it
 * (nil when none). */
static inline void kf_setlink(lua_State *L, int ud) {
  ud = lua_absindex(L, ud);
#if LUA_VERSION_NUM < 503
  lua_createtable(L, 1, 0);
  lua_insert(L, -2);
  lua_rawseti(L, -2, 1);
#endif
  kf_setuv(L, ud);
}

static inline void kf_pushlink(lua_State *L, int ud) {
  kf_getuv(L, ud);
#if LUA_VERSION_NUM < 503
  if (lua_istable(L, -1)) {
    lua_rawgeti(L, -1, 1);
    lua_remove(L, -2);
  } else {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
#endif
}

#if LUA_VERSION_NUM >= 503
static inline void kf_pushi64(lua_State *L, int64_t v) { lua_pushinteger(L, (lua_Integer)v); }
/* Reads an int64 at idx: 1 on success, 0 when it is not an integral number. */
static inline int kf_toi64(lua_State *L, int idx, int64_t *out) {
  int ok = 0;
  lua_Integer i;
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  i = lua_tointegerx(L, idx, &ok);
  if (!ok) return 0;
  *out = (int64_t)i;
  return 1;
}
#else
static inline void kf_pushi64(lua_State *L, int64_t v) { lua_pushnumber(L, (lua_Number)v); }
static inline int kf_toi64(lua_State *L, int idx, int64_t *out) {
  lua_Number d;
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  d = lua_tonumber(L, idx);
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return 0;
  if ((lua_Number)(int64_t)d != d) return 0;
  *out = (int64_t)d;
  return 1;
}
#endif

#endif
