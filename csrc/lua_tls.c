/*
 * lua_tls.c - the binding of tls.c's contexts: core.tls_context(conf), an
 * SSL_CTX per security configuration (kafka.socket makes one per client's
 * tls settings and keeps it there), used by the inbox's starttls
 * (lua_bytes.c). The connection itself lives in the inbox.
 *
 *   core.tls_context{cafile=, capath=, certificate=, key=, key_password=,
 *                    verify_chain=}         -> ctx | nil, message
 *   ctx:close()                             -> frees it (idempotent; also __gc, __close)
 *
 * Misuse (a field of the wrong type) raises; a file that does not load, a
 * wrong key password, a key not matching its certificate return nil,
 * OpenSSL's reason.
 */
#include "lua_glue.h"
#include "tls.h"

#define TLSCTX_MT "kafka.tls_context"

typedef struct ltlsctx {
  kf_tls_ctx *c;
} ltlsctx;

kf_tls_ctx *kfl_checktlsctx(lua_State *L, int idx) {
  ltlsctx *u = (ltlsctx *)luaL_checkudata(L, idx, TLSCTX_MT);
  if (!u->c) luaL_argerror(L, idx, "the TLS context is closed");
  return u->c;
}

/* A string field of the table at 1 (nil: NULL); stays on the stack. */
static const char *opt_str(lua_State *L, const char *k) {
  lua_getfield(L, 1, k);
  if (lua_isnil(L, -1)) return NULL;
  if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "tls_context: %s must be a string", k);
  return lua_tostring(L, -1);
}

static int l_tls_context(lua_State *L) {
  kf_tls_conf conf;
  kf_tls_err e;
  ltlsctx *u;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  conf.cafile = opt_str(L, "cafile");
  conf.capath = opt_str(L, "capath");
  conf.certificate = opt_str(L, "certificate");
  conf.key = opt_str(L, "key");
  conf.key_password = opt_str(L, "key_password");
  lua_getfield(L, 1, "verify_chain");
  conf.verify_chain = lua_toboolean(L, -1);
  /* the userdata first: nothing raises once the context exists */
  u = (ltlsctx *)kf_newuserdata(L, sizeof(ltlsctx));
  u->c = NULL;
  luaL_setmetatable(L, TLSCTX_MT);
  u->c = kf_tls_ctx_new(&conf, &e);
  if (!u->c) {
    lua_pushnil(L);
    lua_pushstring(L, e.msg);
    return 2;
  }
  return 1;
}

static int l_tls_context_close(lua_State *L) {
  ltlsctx *u = (ltlsctx *)luaL_checkudata(L, 1, TLSCTX_MT);
  kf_tls_ctx_free(u->c); /* a connection made from it holds its own reference */
  u->c = NULL;
  return 0;
}

static const luaL_Reg ctx_methods[] = {{"close", l_tls_context_close}, {NULL, NULL}};

void kfl_open_tls(lua_State *L) {
  luaL_newmetatable(L, TLSCTX_MT);
  lua_newtable(L);
  luaL_setfuncs(L, ctx_methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_tls_context_close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_tls_context_close);
  lua_setfield(L, -2, "__close");
  lua_pushliteral(L, TLSCTX_MT);
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_tls_context);
  lua_setfield(L, -2, "tls_context");
}
