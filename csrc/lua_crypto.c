/*
 * lua_crypto.c - the binding of crypto.c (kafka.core.crypto, exposed as
 * kafka.proto.crypto): what SASL (SCRAM, OAUTHBEARER) and the TLS host name
 * check need. Strings in, strings out; misuse (an unknown algorithm, a bad
 * argument type) raises; bad data (base64, PEM) returns nil, message.
 *
 *   digest(alg, data)                          -> raw digest
 *   hmac(alg, key, data)                       -> raw MAC
 *   pbkdf2(alg, password, salt, iterations, len) -> raw key
 *   random_bytes(n)                            -> n bytes from OpenSSL's CSPRNG
 *   xor(a, b)                                  -> a XOR b (equal lengths)
 *   b64_encode(s), b64_decode(s)               -> standard base64 with padding
 *   check_host(pem, host)                      -> true | false (RFC 6125, OpenSSL's X509_check_host/ip_asc)
 *
 * alg is "sha1", "sha256" or "sha512" ("SHA-256" etc. also).
 */
#include "crypto.h"
#include "lua_crypto.h"

static const char *check_alg(lua_State *L, int i) {
  const char *alg = luaL_checkstring(L, i);
  if (!kf_md_size(alg)) luaL_argerror(L, i, "unknown digest (sha1, sha256, sha512)");
  return alg;
}

static int l_digest(lua_State *L) {
  size_t n, outlen = 0;
  const char *alg = check_alg(L, 1);
  const char *data = luaL_checklstring(L, 2, &n);
  unsigned char out[KF_MD_MAX];
  if (kf_digest(alg, data, n, out, &outlen) != 0) return luaL_error(L, "digest %s failed", alg);
  lua_pushlstring(L, (const char *)out, outlen);
  return 1;
}

static int l_hmac(lua_State *L) {
  size_t klen, n, outlen = 0;
  const char *alg = check_alg(L, 1);
  const char *key = luaL_checklstring(L, 2, &klen);
  const char *data = luaL_checklstring(L, 3, &n);
  unsigned char out[KF_MD_MAX];
  if (kf_hmac(alg, key, klen, data, n, out, &outlen) != 0) return luaL_error(L, "hmac %s failed", alg);
  lua_pushlstring(L, (const char *)out, outlen);
  return 1;
}

static int l_pbkdf2(lua_State *L) {
  size_t plen, slen;
  const char *alg = check_alg(L, 1);
  const char *pass = luaL_checklstring(L, 2, &plen);
  const char *salt = luaL_checklstring(L, 3, &slen);
  lua_Number it = luaL_checknumber(L, 4);
  lua_Number len = luaL_optnumber(L, 5, (lua_Number)kf_md_size(alg));
  unsigned char out[KF_MD_MAX];
  luaL_argcheck(L, it >= 1 && it <= 100000000, 4, "iterations out of range");
  luaL_argcheck(L, len >= 1 && len <= KF_MD_MAX, 5, "length out of range (1-64)");
  if (kf_pbkdf2(alg, pass, plen, salt, slen, (unsigned long)it, out, (size_t)len) != 0)
    return luaL_error(L, "pbkdf2 %s failed", alg);
  lua_pushlstring(L, (const char *)out, (size_t)len);
  return 1;
}

static int l_random_bytes(lua_State *L) {
  lua_Number n = luaL_checknumber(L, 1);
  unsigned char buf[256];
  luaL_argcheck(L, n >= 0 && n <= (lua_Number)sizeof buf, 1, "0-256 bytes");
  if (kf_random(buf, (size_t)n) != 0) return luaL_error(L, "the CSPRNG failed");
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  return 1;
}

static int l_xor(lua_State *L) {
  size_t na, nb, i;
  const char *a = luaL_checklstring(L, 1, &na);
  const char *b = luaL_checklstring(L, 2, &nb);
  luaL_Buffer B;
  luaL_argcheck(L, na == nb, 2, "lengths differ");
  luaL_buffinit(L, &B);
  for (i = 0; i < na; i++) luaL_addchar(&B, (char)(a[i] ^ b[i]));
  luaL_pushresult(&B);
  return 1;
}

/* base64 output sizes follow the input's: scratch in a userdata the GC owns */
static int l_b64_encode(lua_State *L) {
  size_t n, len;
  const char *s = luaL_checklstring(L, 1, &n);
  char *out;
  luaL_argcheck(L, n <= (1u << 28), 1, "too long");
  out = (char *)kf_newuserdata(L, 4 * ((n + 2) / 3) + 1);
  len = kf_b64_encode((const unsigned char *)s, n, out);
  lua_pushlstring(L, out, len);
  return 1;
}

static int l_b64_decode(lua_State *L) {
  size_t n;
  long len;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char *out;
  luaL_argcheck(L, n <= (1u << 28), 1, "too long");
  out = (unsigned char *)kf_newuserdata(L, 3 * (n / 4) + 3);
  len = kf_b64_decode(s, n, out);
  if (len < 0) {
    lua_pushnil(L);
    lua_pushliteral(L, "invalid base64");
    return 2;
  }
  lua_pushlstring(L, (const char *)out, (size_t)len);
  return 1;
}

static int l_check_host(lua_State *L) {
  size_t n;
  const char *pem = luaL_checklstring(L, 1, &n);
  const char *host = luaL_checkstring(L, 2);
  int r = kf_check_host(pem, n, host);
  if (r < 0) {
    lua_pushnil(L);
    lua_pushliteral(L, "the peer certificate does not parse");
    return 2;
  }
  lua_pushboolean(L, r);
  return 1;
}

static const luaL_Reg crypto_funcs[] = {
  {"digest", l_digest},
  {"hmac", l_hmac},
  {"pbkdf2", l_pbkdf2},
  {"random_bytes", l_random_bytes},
  {"xor", l_xor},
  {"b64_encode", l_b64_encode},
  {"b64_decode", l_b64_decode},
  {"check_host", l_check_host},
  {NULL, NULL}
};

int kf_lua_crypto(lua_State *L) {
  luaL_newlib(L, crypto_funcs);
  return 1;
}
