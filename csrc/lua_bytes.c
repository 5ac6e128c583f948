/*
 * lua_bytes.c - bytes from the network without copies:
 *   kafka.bytes  a read-only run of bytes the decoders accept wherever they
 *                take a string: a frame (its bytes inside the userdata) or
 *                a view into a frame or string it keeps alive (a Fetch
 *                partition's records, decode option raw_records = "view");
 *   kafka.inbox  (lua_inbox.c) a luasocket descriptor read with readv()
 *                straight into each frame's own memory, the bytes after a
 *                frame kept in a read-ahead buffer for the next; and
 *                written with sendmsg() from a request frame in pieces:
 *   kafka.outframe  a Produce frame whose uncompressed records stay in
 *                their builders (encode_request's gather option).
 * The inbox speaks TLS too (ib:starttls, tls.c): the records are
 * decrypted straight into the frame, the same frames and read-ahead.
 * Through luasocket, a 1 MiB Fetch answer was copied five times before a
 * decoder saw it (luasocket's buffer, its luaL_Buffer and the growth of
 * that, the string, the join of the pieces) and each partition's records
 * once more; here it is read once into the frame and never copied.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "lua_bytes.h"

/* The kafka.bytes at idx with its bytes still there (raises for a view
 * into a frame released since), or NULL when idx is none. */
static kbytes *live_bytes(lua_State *L, int idx) {
  kbytes *b = (kbytes *)luaL_testudata(L, idx, BYTES_MT);
  if (b && b->root && b->root->gen != b->gen)
    luaL_error(L, "kafka.bytes: the frame this view lies in was released (proto.release) and reused");
  return b;
}

/* The bytes at idx (a string or a kafka.bytes), or NULL. */
const uint8_t *kfl_tobytes(lua_State *L, int idx, size_t *n) {
  kbytes *b;
  if (lua_type(L, idx) == LUA_TSTRING) return (const uint8_t *)lua_tolstring(L, idx, n);
  b = live_bytes(L, idx);
  if (!b) return NULL;
  *n = b->n;
  return b->p;
}

const uint8_t *kfl_checkbytes(lua_State *L, int idx, size_t *n) {
  const uint8_t *p = kfl_tobytes(L, idx, n);
  if (!p) luaL_argerror(L, idx, "string or kafka.bytes expected");
  return p;
}

/* Pushes a view of p[0..n), which lies inside the string or kafka.bytes at
 * owner: the view keeps the owner alive (a table holds it on Lua 5.1,
 * where a user value must be a table). */
void kfl_push_view(lua_State *L, const uint8_t *p, size_t n, int owner) {
  kbytes *b, *o;
  owner = lua_absindex(L, owner);
  o = (kbytes *)luaL_testudata(L, owner, BYTES_MT);
  b = (kbytes *)kf_newuserdata_uv(L, sizeof(kbytes));
  b->p = p;
  b->size = b->cap = 0;
  b->kind = K_VIEW;
  b->released = 0;
  /* the frame the bytes lie in: a view of a view has its parent's */
  b->root = o ? (o->kind == K_FRAME ? o : o->root) : NULL;
  b->gen = b->root ? b->root->gen : 0;
  b->n = n;
  lua_pushvalue(L, owner);
  kf_setlink(L, -2);
  luaL_setmetatable(L, BYTES_MT);
}

static int l_bytes_len(lua_State *L) {
  kbytes *b = (kbytes *)luaL_checkudata(L, 1, BYTES_MT);
  live_bytes(L, 1);
  lua_pushinteger(L, (lua_Integer)b->n);
  return 1;
}

/* tostring(bytes) -> the bytes as a string (a copy). */
static int l_bytes_tostring(lua_State *L) {
  kbytes *b = (kbytes *)luaL_checkudata(L, 1, BYTES_MT);
  live_bytes(L, 1);
  lua_pushlstring(L, b->n ? (const char *)b->p : "", b->n);
  return 1;
}

/* proto.bytes(s [, i [, j]]) -> a view of s:sub(i, j) (s a string or
 * kafka.bytes): for tests and for callers that slice a frame. */
static int l_bytes_new(lua_State *L) {
  size_t n;
  const uint8_t *p = kfl_checkbytes(L, 1, &n);
  lua_Integer i = luaL_optinteger(L, 2, 1), j = luaL_optinteger(L, 3, (lua_Integer)n);
  if (i < 1) i = 1;
  if (j > (lua_Integer)n) j = (lua_Integer)n;
  if (i > j) {
    kfl_push_view(L, p, 0, 1);
  } else {
    kfl_push_view(L, p + i - 1, (size_t)(j - i + 1), 1);
  }
  return 1;
}

/* ------------------------------------------------- frames in pieces */

kfl_outframe *kfl_outframe_new(lua_State *L) {
  kfl_outframe *of = (kfl_outframe *)kf_newuserdata_uv(L, sizeof(kfl_outframe));
  kf_w_init(&of->w);
  of->pieces = NULL;
  of->npieces = of->cap = of->ext = 0;
  luaL_setmetatable(L, OUTFRAME_MT);
  lua_newtable(L); /* the builders, alive while the frame is */
  kf_setuv(L, -2);
  return of;
}

void kfl_outframe_add(lua_State *L, int ofidx, int bidx, kfl_outframe *of, const lbatch *lb) {
  kfl_piece *pc;
  if (of->npieces == of->cap) {
    size_t cap = of->cap ? of->cap * 2 : 16;
    kfl_piece *np = (kfl_piece *)realloc(of->pieces, cap * sizeof(kfl_piece));
    if (!np) luaL_error(L, "out of memory");
    of->pieces = np;
    of->cap = cap;
  }
  kf_getuv(L, ofidx);
  lua_pushvalue(L, bidx);
  lua_rawseti(L, -2, (int)of->npieces + 1); /* may raise: the piece is not counted yet */
  lua_pop(L, 1);
  pc = &of->pieces[of->npieces++];
  pc->at = of->w.len;
  pc->lb = lb;
  pc->p = lb->b.body.buf;
  pc->n = lb->b.body.len;
  pc->clears = lb->clears;
  of->ext += pc->n;
}

/* The frame in pieces at idx, its builders checked to be as they were
 * when it was encoded (raises: it would send other bytes than its size
 * and CRCs say). Raises when released. */
kfl_outframe *kfl_check_outframe(lua_State *L, int idx) {
  kfl_outframe *of = (kfl_outframe *)luaL_checkudata(L, idx, OUTFRAME_MT);
  size_t i;
  if (!of->w.buf) luaL_error(L, "kafka.outframe: released (proto.release)");
  for (i = 0; i < of->npieces; i++) {
    const kfl_piece *pc = &of->pieces[i];
    if (!pc->lb->live || pc->lb->clears != pc->clears || pc->lb->b.body.buf != pc->p ||
        pc->lb->b.body.len != pc->n)
      luaL_error(L, "kafka.outframe: a builder of this frame changed after encode_request");
  }
  return of;
}

/* Fills v (at most max entries) with the frame's bytes from byte off on;
 * returns the entries used. */
int kfl_outframe_iov(const kfl_outframe *of, size_t off, struct iovec *v, int max) {
  int nv = 0;
  size_t i, from = 0, pos = 0; /* pos: bytes of the frame before w->buf[from] */
  for (i = 0; i <= of->npieces && nv < max; i++) {
    size_t to = i < of->npieces ? of->pieces[i].at : of->w.len;
    const uint8_t *pp = i < of->npieces ? of->pieces[i].p : NULL;
    size_t pn = i < of->npieces ? of->pieces[i].n : 0;
    size_t own = to - from;
    if (off < pos + own) {
      size_t skip = off > pos ? off - pos : 0;
      v[nv].iov_base = (void *)(of->w.buf + from + skip);
      v[nv].iov_len = own - skip;
      nv++;
    }
    pos += own;
    if (pn && nv < max && off < pos + pn) {
      size_t skip = off > pos ? off - pos : 0;
      v[nv].iov_base = (void *)(pp + skip);
      v[nv].iov_len = pn - skip;
      nv++;
    }
    pos += pn;
    from = to;
  }
  return nv;
}

static int l_outframe_len(lua_State *L) {
  kfl_outframe *of = kfl_check_outframe(L, 1);
  lua_pushinteger(L, (lua_Integer)(of->w.len + of->ext));
  return 1;
}

/* tostring(frame) -> its bytes joined (a copy: what a socket without a
 * descriptor, TLS or a cosocket, sends). */
static int l_outframe_tostring(lua_State *L) {
  kfl_outframe *of = kfl_check_outframe(L, 1);
  struct iovec v[IOV_BATCH];
  size_t off = 0, total = of->w.len + of->ext;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (off < total) {
    int i, nv = kfl_outframe_iov(of, off, v, IOV_BATCH);
    for (i = 0; i < nv; i++) {
      luaL_addlstring(&b, (const char *)v[i].iov_base, v[i].iov_len);
      off += v[i].iov_len;
    }
  }
  luaL_pushresult(&b);
  return 1;
}

static void outframe_free(kfl_outframe *of) {
  kf_w_free(&of->w);
  free(of->pieces);
  of->pieces = NULL;
  of->npieces = of->cap = of->ext = 0;
}

static int l_outframe_gc(lua_State *L) {
  outframe_free((kfl_outframe *)luaL_checkudata(L, 1, OUTFRAME_MT));
  return 0;
}

/* proto.release(frame in pieces): its memory goes back at once (to the
 * writers' cache), its builders are let go; the frame is void. */
static int outframe_release(lua_State *L) {
  kfl_outframe *of = (kfl_outframe *)lua_touserdata(L, 1);
  int had = of->w.buf != NULL;
  outframe_free(of);
  lua_newtable(L);
  kf_setuv(L, 1);
  lua_pushboolean(L, had);
  return 1;
}

/* proto.release(bytes) -> true | false: the frame bytes (a frame or a view
 * into one) lies in is done with: its memory is kept by the inbox that read
 * it and the next frame big enough is read into it, not into fresh pages
 * (a 1 MiB Fetch answer in new memory cost a page fault every 4 KiB, 8 %
 * of consuming 100 B messages). Every view into the frame made before is
 * void from here on: using one raises. false: nothing to release (bytes
 * lie in a string, in a frame too small to keep, or released already).
 * For the frame's last user: the fetcher, once it has decoded a Fetch
 * answer's every partition. */
static int l_bytes_release(lua_State *L) {
  kbytes *b, *fr, *spare;
  if (luaL_testudata(L, 1, OUTFRAME_MT)) return outframe_release(L);
  b = (kbytes *)luaL_checkudata(L, 1, BYTES_MT);
  if (b->kind == K_VIEW) {
    if (!b->root || b->root->gen != b->gen) {
      lua_pushboolean(L, 0);
      return 1;
    }
    /* the frame object: up the chain of owners */
    lua_settop(L, 1);
    while (((kbytes *)lua_touserdata(L, -1))->kind == K_VIEW) kf_pushlink(L, -1);
  } else {
    lua_settop(L, 1);
  }
  fr = (kbytes *)lua_touserdata(L, -1);
  kf_pushlink(L, -1); /* the inbox, for a frame worth keeping */
  if (fr->released || !luaL_testudata(L, -1, INBOX_MT)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  fr->gen++;
  fr->released = 1;
  fr->p = fr->data;
  fr->n = 0;
  kf_getuv(L, -1); /* the inbox's table: [2] the frame kept for reuse */
  lua_rawgeti(L, -1, 2);
  spare = (kbytes *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!spare || spare->cap < fr->cap) {
    lua_pushvalue(L, -3);
    lua_rawseti(L, -2, 2);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg bytes_meta[] = {{"__len", l_bytes_len}, {"__tostring", l_bytes_tostring}, {NULL, NULL}};
static const luaL_Reg outframe_meta[] = {
  {"__len", l_outframe_len}, {"__tostring", l_outframe_tostring}, {"__gc", l_outframe_gc}, {NULL, NULL}};

void kfl_open_bytes(lua_State *L) {
  luaL_newmetatable(L, BYTES_MT);
  luaL_setfuncs(L, bytes_meta, 0);
  lua_pushliteral(L, BYTES_MT);
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
  luaL_newmetatable(L, OUTFRAME_MT);
  luaL_setfuncs(L, outframe_meta, 0);
  lua_pushliteral(L, OUTFRAME_MT);
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_bytes_new);
  lua_setfield(L, -2, "bytes");
  lua_pushcfunction(L, l_bytes_release);
  lua_setfield(L, -2, "release");
}
