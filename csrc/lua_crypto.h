/* lua_crypto.h - the crypto binding, kafka.core's "crypto" table. */
#ifndef KF_LUA_CRYPTO_H
#define KF_LUA_CRYPTO_H

#include "compat.h"

/* Pushes the table of crypto functions. */
int kf_lua_crypto(lua_State *L);

#endif
