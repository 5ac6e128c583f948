/*
 * lua_producer.c - the producer's accumulator (kafka.producer): its message
 * counters, and send()'s common case in one C call.
 *
 * Why C: a send() of a small message cost ~650 ns on Lua 5.4, most of it
 * the interpreter reading some twenty fields of the producer's tables, and
 * reading them through the C API is no faster. So the state a send() needs
 * lives here, in C structs:
 *   the accumulator  message ids (seq), messages and accounted bytes
 *                    buffered (nbuf, nbytes), their limits, the partitioner
 *   one topic each   its partition count and when to ask again (by seq),
 *                    the sticky partition, the open batch builder of each
 *                    partition (anchored in the topic's user value)
 * The counters are the producer's only copy (acc:counts, acc:take,
 * acc:release); the topic fields mirror what producer.lua decides
 * (acc:topic, acc:sticky, acc:open), so the partition and batch state
 * machine stays in Lua, with its names.
 *
 * acc:send(topic, value, o) does exactly what producer.lua's send() does
 * for a message that needs nothing but an append to the open batch of the
 * partition send() would choose (and returns its id), or changes nothing
 * and returns nothing; send() then goes its own way, which handles every
 * case (validation and its errors, new batches, partition counts, the
 * linger check, full buffers). spec/mock_spec.lua runs the same sends
 * through both and compares ids, partitions, records and reports.
 */
#include <string.h>

#include "crc.h"
#include "lua_glue.h"

#define ACC_MT "kafka.core.accumulator"
#define TOPIC_MT "kafka.core.accumulator.topic"

enum { P_MURMUR2_RANDOM, P_MURMUR2, P_RANDOM, P_FUNCTION };

typedef struct ktopic {
  const char *name; /* the topics table's key (alive as long as the entry) */
  int64_t n;        /* partition count; 0: unknown */
  int64_t ptime;    /* ask the count again once seq reaches this */
  int64_t sticky;   /* the sticky partition, -1: none */
  int64_t cpart;    /* the partition of clb, a cache of the anchor table */
  lbatch *clb;
} ktopic;

typedef struct kacc {
  int64_t seq, nbuf, nbytes;
  int64_t fast; /* sends acc:send took (stats: the spec's proof it ran) */
  int64_t max_message_bytes, max_buffered, max_buffered_bytes;
  int partitioner;
  ktopic *last; /* the last topic looked up */
} kacc;

/* Upvalues of acc:send: its metatable and the option names. */
enum { U_ACC = 1, U_KEY, U_TIMESTAMP, U_PARTITION, U_HEADERS, U_COUNT };

static kacc *check_acc(lua_State *L) { return (kacc *)luaL_checkudata(L, 1, ACC_MT); }

/* The topic named by the string at idx, or NULL (not known yet). */
static ktopic *find_topic(lua_State *L, kacc *a, int idx) {
  const char *name = lua_tostring(L, idx);
  ktopic *t = a->last;
  if (t && t->name == name) return t; /* the same string object */
  kf_getuv(L, 1);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  t = (ktopic *)lua_touserdata(L, -1);
  lua_pop(L, 2);
  if (t) a->last = t;
  return t;
}

/* Pushes the topic named by argument 2 (made when new) and returns it. */
static ktopic *push_topic(lua_State *L, kacc *a) {
  ktopic *t;
  luaL_checktype(L, 2, LUA_TSTRING);
  kf_getuv(L, 1);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  t = (ktopic *)lua_touserdata(L, -1);
  if (!t) {
    lua_pop(L, 1);
    lua_pushvalue(L, 2);
    t = (ktopic *)kf_newuserdata_uv(L, sizeof(ktopic));
    t->n = 0;
    t->ptime = 0;
    t->sticky = -1;
    t->cpart = -1;
    t->clb = NULL;
    luaL_setmetatable(L, TOPIC_MT);
    lua_newtable(L);
    kf_setuv(L, -2);
    lua_rawset(L, -3);
    /* the key now in the table is the string object at 2 */
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    t = (ktopic *)lua_touserdata(L, -1);
    t->name = lua_tostring(L, 2);
  }
  lua_remove(L, -2);
  a->last = t;
  return t;
}

static int64_t opt_int(lua_State *L, const char *k, int64_t def) {
  int64_t v;
  kfl_opt_int(L, 1, k, def, &v);
  return v;
}

/* core.accumulator{max_message_bytes=, max_buffered=, max_buffered_bytes=,
 * partitioner="murmur2_random"|"murmur2"|"random"|"function"} -> acc */
static int l_accumulator(lua_State *L) {
  static const char *const parts[] = {"murmur2_random", "murmur2", "random", "function", NULL};
  kacc *a;
  int p;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "partitioner");
  p = luaL_checkoption(L, -1, "murmur2_random", parts);
  lua_pop(L, 1);
  a = (kacc *)kf_newuserdata_uv(L, sizeof(kacc));
  a->seq = a->nbuf = a->nbytes = a->fast = 0;
  a->max_message_bytes = opt_int(L, "max_message_bytes", 1000000);
  a->max_buffered = opt_int(L, "max_buffered", 100000);
  a->max_buffered_bytes = opt_int(L, "max_buffered_bytes", 1073741824);
  a->partitioner = p;
  a->last = NULL;
  luaL_setmetatable(L, ACC_MT);
  lua_newtable(L);
  kf_setuv(L, -2);
  return 1;
}

/* acc:counts() -> seq (the last message id), nbuf, nbytes, sends taken
 * by acc:send */
static int l_acc_counts(lua_State *L) {
  kacc *a = check_acc(L);
  kf_pushi64(L, a->seq);
  kf_pushi64(L, a->nbuf);
  kf_pushi64(L, a->nbytes);
  kf_pushi64(L, a->fast);
  return 4;
}

/* acc:take(size) -> id: a message of size accounted bytes is buffered */
static int l_acc_take(lua_State *L) {
  kacc *a = check_acc(L);
  int64_t size = 0;
  if (!kf_toi64(L, 2, &size) || size < 0) luaL_argerror(L, 2, "size must be an integer >= 0");
  a->seq++;
  a->nbuf++;
  a->nbytes += size;
  kf_pushi64(L, a->seq);
  return 1;
}

/* acc:release(count, bytes): settled messages leave the buffer */
static int l_acc_release(lua_State *L) {
  kacc *a = check_acc(L);
  int64_t n = 0, size = 0;
  if (!kf_toi64(L, 2, &n) || n < 0 || n > a->nbuf) luaL_argerror(L, 2, "count must be in 0..buffered");
  if (!kf_toi64(L, 3, &size) || size < 0 || size > a->nbytes) luaL_argerror(L, 3, "bytes must be in 0..buffered");
  a->nbuf -= n;
  a->nbytes -= size;
  return 0;
}

/* acc:topic(name, n, ptime): the partition count (nil: unknown) and the
 * seq at which send() asks it again */
static int l_acc_topic(lua_State *L) {
  kacc *a = check_acc(L);
  int64_t n = 0, ptime = 0;
  ktopic *t;
  if (!lua_isnoneornil(L, 3) && (!kf_toi64(L, 3, &n) || n <= 0)) luaL_argerror(L, 3, "n must be an integer > 0");
  if (!lua_isnoneornil(L, 4) && !kf_toi64(L, 4, &ptime)) luaL_argerror(L, 4, "ptime must be an integer");
  t = push_topic(L, a);
  t->n = n;
  t->ptime = ptime;
  return 0;
}

/* acc:sticky(name, partition | nil) */
static int l_acc_sticky(lua_State *L) {
  kacc *a = check_acc(L);
  int64_t s = -1;
  ktopic *t;
  if (!lua_isnoneornil(L, 3) && (!kf_toi64(L, 3, &s) || s < 0)) luaL_argerror(L, 3, "partition must be >= 0");
  t = push_topic(L, a);
  t->sticky = s;
  return 0;
}

/* acc:open(name, partition, builder | nil): the partition's open batch */
static int l_acc_open(lua_State *L) {
  kacc *a = check_acc(L);
  int64_t part = 0;
  lbatch *lb = NULL;
  ktopic *t;
  if (!kf_toi64(L, 3, &part) || part < 0 || part > 2147483647) luaL_argerror(L, 3, "partition must be >= 0");
  if (!lua_isnoneornil(L, 4)) lb = (lbatch *)luaL_checkudata(L, 4, KFL_BATCH_MT);
  lua_settop(L, 4);
  t = push_topic(L, a); /* 5 */
  kf_getuv(L, 5);       /* 6: the anchors, partition -> builder */
  lua_pushvalue(L, 4);
  lua_rawseti(L, 6, (int)part);
  if (t->cpart == part || lb) {
    t->cpart = part;
    t->clb = lb;
  }
  return 0;
}

/* The open builder of partition part of t, the topic named by argument 2
 * of acc:send, or NULL: the last one used is cached in t, others are read
 * from t's anchors. */
static lbatch *open_batch(lua_State *L, ktopic *t, int64_t part) {
  lbatch *lb;
  if (t->cpart == part) return t->clb;
  kf_getuv(L, 1);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2); /* t's userdata */
  kf_getuv(L, -1);
  lua_rawgeti(L, -1, (int)part);
  lb = (lbatch *)lua_touserdata(L, -1); /* (only builders are anchored) */
  lua_pop(L, 4);
  t->cpart = part;
  t->clb = lb;
  return lb;
}

/* acc:send(topic, value, o) -> id | nothing (see the top of the file) */
static int l_acc_send(lua_State *L) {
  kacc *a;
  ktopic *t;
  lbatch *lb;
  const char *key = NULL;
  size_t vl = 0, kl = 0;
  int64_t size, part = -1;
  int ki = 0, ti = 0, rc;
  kf_err e;
  KF_ERR_INIT(e);
  a = (kacc *)lua_touserdata(L, 1);
  if (!a || !lua_getmetatable(L, 1) || !lua_rawequal(L, -1, lua_upvalueindex(U_ACC)))
    luaL_argerror(L, 1, "kafka.core.accumulator expected");
  lua_settop(L, 4);
  if (lua_type(L, 2) != LUA_TSTRING || lua_rawlen(L, 2) == 0) return 0;
  if (lua_type(L, 3) == LUA_TSTRING) {
    vl = lua_rawlen(L, 3);
  } else if (!lua_isnil(L, 3)) {
    return 0;
  }
  if (!lua_isnil(L, 4)) {
    /* 5: key, 6: timestamp, 7: partition, 8: headers, read as send() reads them */
    if (lua_type(L, 4) != LUA_TTABLE) return 0;
    lua_pushvalue(L, lua_upvalueindex(U_KEY));
    lua_gettable(L, 4);
    lua_pushvalue(L, lua_upvalueindex(U_TIMESTAMP));
    lua_gettable(L, 4);
    lua_pushvalue(L, lua_upvalueindex(U_PARTITION));
    lua_gettable(L, 4);
    lua_pushvalue(L, lua_upvalueindex(U_HEADERS));
    lua_gettable(L, 4);
    if (!lua_isnil(L, 8)) return 0;
    if (lua_type(L, 5) == LUA_TSTRING) {
      key = lua_tolstring(L, 5, &kl);
      ki = 5;
    } else if (!lua_isnil(L, 5)) {
      return 0;
    }
    if (!lua_isnil(L, 6)) {
      int64_t ts;
      if (!kf_toi64(L, 6, &ts)) return 0;
      ti = 6;
    }
    if (!lua_isnil(L, 7) && (!kf_toi64(L, 7, &part) || part < 0 || part > 2147483647)) return 0;
  }
  size = (int64_t)vl + (int64_t)kl + 70;
  if (size > a->max_message_bytes) return 0;
  /* (every 64th message send() reads the clock for linger_ms: its path) */
  if (a->nbuf <= 0 || a->nbuf % 64 == 0 || a->nbuf >= a->max_buffered) return 0;
  if (a->nbytes + size > a->max_buffered_bytes) return 0;
  /* the topic: its partition count known and fresh */
  t = find_topic(L, a, 2);
  if (!t || t->n <= 0 || a->seq >= t->ptime) return 0;
  /* the partition, as send() and _partition choose it */
  if (part >= 0) {
    if (part >= t->n) return 0;
  } else if (key && a->partitioner != P_RANDOM) {
    if (a->partitioner == P_FUNCTION) return 0;
    part = (int64_t)((kf_murmur2(key, kl) & 0x7fffffffu) % (uint64_t)t->n);
  } else if (a->partitioner == P_MURMUR2) {
    part = (int64_t)((kf_murmur2("", 0) & 0x7fffffffu) % (uint64_t)t->n);
  } else {
    if (a->partitioner == P_FUNCTION || t->sticky < 0 || t->sticky >= t->n) return 0;
    part = t->sticky;
  }
  /* its open batch takes the message */
  lb = open_batch(L, t, part);
  if (!lb || !lb->live) return 0;
  rc = kfl_batch_add(L, lb, 3, ki, 0, ti, a->seq + 1, size, &e);
  if (rc != 1) return 0; /* full or refused: nothing added, send()'s path */
  a->seq++;
  a->nbuf++;
  a->nbytes += size;
  a->fast++;
  kf_pushi64(L, a->seq);
  return 1;
}

static const luaL_Reg acc_methods[] = {
  {"counts", l_acc_counts}, {"take", l_acc_take}, {"release", l_acc_release},
  {"topic", l_acc_topic}, {"sticky", l_acc_sticky}, {"open", l_acc_open}, {NULL, NULL}
};

void kfl_open_producer(lua_State *L) {
  luaL_newmetatable(L, TOPIC_MT);
  lua_pop(L, 1);
  luaL_newmetatable(L, ACC_MT);
  luaL_newlibtable(L, acc_methods);
  luaL_setfuncs(L, acc_methods, 0);
  /* send: upvalues its metatable and the option names */
  lua_pushvalue(L, -2);
  lua_pushstring(L, "key");
  lua_pushstring(L, "timestamp");
  lua_pushstring(L, "partition");
  lua_pushstring(L, "headers");
  lua_pushcclosure(L, l_acc_send, U_COUNT - 1);
  lua_setfield(L, -2, "send");
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_accumulator);
  lua_setfield(L, -2, "accumulator");
}
