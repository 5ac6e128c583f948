/*
 * lua_bytes.c - bytes from the network without copies:
 *   kafka.bytes  a read-only run of bytes the decoders accept wherever they
 *                take a string: a frame (its bytes inside the userdata) or
 *                a view into a frame or string it keeps alive (a Fetch
 *                partition's records, decode option raw_records = "view");
 *   kafka.inbox  a luasocket descriptor read with readv() straight into
 *                each frame's own memory, the bytes after a frame kept in
 *                a read-ahead buffer for the next; and written with
 *                sendmsg() from a request frame in pieces:
 *   kafka.outframe  a Produce frame whose uncompressed records stay in
 *                their builders (encode_request's gather option).
 * The inbox speaks TLS too (ib:starttls, tls.c): the records are
 * decrypted straight into the frame, the same frames and read-ahead.
 * Through luasocket, a 1 MiB Fetch answer was copied five times before a
 * decoder saw it (luasocket's buffer, its luaL_Buffer and the growth of
 * that, the string, the join of the pieces) and each partition's records
 * once more; here it is read once into the frame and never copied.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "lua_glue.h"
#include "tls.h"

#define BYTES_MT "kafka.bytes"
#define INBOX_MT "kafka.inbox"
#define OUTFRAME_MT "kafka.outframe"
#define IOV_BATCH 64 /* pieces per sendmsg() */
#define WSTAGE 16384 /* TLS: small pieces of a frame gathered into one record */
#define SPARE 65536 /* read-ahead: the small answers queued behind a frame, in one read */
#define KEEP_MIN 65536 /* a frame below this is never kept for reuse (malloc's free lists serve it) */

enum { K_VIEW, K_FRAME };

typedef struct kbytes {
  const uint8_t *p; /* the bytes: into data (a frame) or into the owner (a view) */
  size_t n;
  size_t size;      /* a frame: the bytes of the frame in data (being) read */
  size_t cap;       /* a frame: the bytes data holds (a recycled frame holds more than it uses) */
  const struct kbytes *root; /* a view: the frame it lies in (NULL: in a string) */
  unsigned gen;     /* a frame: bumped when released; a view: its root's gen when made */
  int kind;         /* K_VIEW or K_FRAME */
  int released;     /* a frame: released, waiting in its inbox for reuse */
  uint8_t data[1];
} kbytes;

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
static kfl_outframe *check_outframe(lua_State *L, int idx) {
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
static int outframe_iov(const kfl_outframe *of, size_t off, struct iovec *v, int max) {
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
  kfl_outframe *of = check_outframe(L, 1);
  lua_pushinteger(L, (lua_Integer)(of->w.len + of->ext));
  return 1;
}

/* tostring(frame) -> its bytes joined (a copy: what a socket without a
 * descriptor, TLS or a cosocket, sends). */
static int l_outframe_tostring(lua_State *L) {
  kfl_outframe *of = check_outframe(L, 1);
  struct iovec v[IOV_BATCH];
  size_t off = 0, total = of->w.len + of->ext;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (off < total) {
    int i, nv = outframe_iov(of, off, v, IOV_BATCH);
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

/* ------------------------------------------------------------ the inbox */

typedef struct inbox {
  int fd;        /* -1 once closed */
  kf_tls *tls;   /* after starttls: reads and writes go through it */
  kf_tls_err terr; /* the last TLS error */
  int seen;      /* a frame size has been read */
  size_t fill;   /* bytes of the current frame read (its userdata is user value slot 1) */
  size_t head, tail; /* spare[head..tail): read ahead, not consumed */
  uint8_t spare[SPARE];
} inbox;

enum { RD_OK = KF_IO_OK, RD_CLOSED = KF_IO_CLOSED, RD_TIMEOUT = KF_IO_TIMEOUT, RD_ERROR = KF_IO_ERROR,
       RD_TLS = KF_IO_TLS };
#define mono_ms kf_mono_ms
#define wait_fd kf_wait_fd

/* One read into dst (dlen bytes; 0: none, then the spare must hold less
 * than a size prefix) and on into the spare behind what it holds (with
 * dst, the spare must be empty: the bytes keep their order); waits for
 * data until the deadline (-1: none; a deadline already passed still
 * looks once). RD_OK with *got the bytes that went into dst, or why
 * nothing came. */
static int ib_read(inbox *ib, uint8_t *dst, size_t dlen, int64_t deadline, size_t *got) {
  struct iovec v[2];
  size_t have = ib->tail - ib->head;
  memmove(ib->spare, ib->spare + ib->head, have);
  ib->head = 0;
  ib->tail = have;
  v[0].iov_base = dst;
  v[0].iov_len = dlen;
  v[1].iov_base = ib->spare + have;
  v[1].iov_len = SPARE - have;
  *got = 0;
  if (ib->tls) { /* one record's bytes, decrypted into dst or the spare */
    size_t g = 0;
    int rc = kf_tls_read(ib->tls, dlen ? dst : ib->spare + have, dlen ? dlen : SPARE - have, deadline, &g, &ib->terr);
    if (rc != RD_OK) return rc;
    if (dlen) *got = g;
    else ib->tail += g;
    return RD_OK;
  }
  for (;;) {
    ssize_t r = readv(ib->fd, dlen ? v : v + 1, dlen ? 2 : 1);
    if (r > 0) {
      size_t u = (size_t)r;
      *got = u < dlen ? u : dlen;
      ib->tail += u - *got;
      return RD_OK;
    }
    if (r == 0) return RD_CLOSED;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return RD_ERROR;
    {
      int rc = wait_fd(ib->fd, POLLIN, deadline);
      if (rc != RD_OK) return rc;
    }
  }
}

/* Takes up to want bytes of the spare into dst; returns how many. */
static size_t ib_take(inbox *ib, uint8_t *dst, size_t want) {
  size_t have = ib->tail - ib->head;
  if (want > have) want = have;
  if (want) memcpy(dst, ib->spare + ib->head, want);
  ib->head += want;
  return want;
}

static inbox *check_inbox(lua_State *L) {
  inbox *ib = (inbox *)luaL_checkudata(L, 1, INBOX_MT);
  if (ib->fd < 0) luaL_error(L, "inbox is closed");
  return ib;
}

/* A timeout argument in ms (nil: wait without end) as a deadline. */
static int64_t deadline_of(lua_State *L, int idx) {
  lua_Number t;
  if (lua_isnoneornil(L, idx)) return -1;
  t = luaL_checknumber(L, idx);
  if (t < 0) t = 0;
  if (t > 1e12) return -1;
  return mono_ms() + (int64_t)t;
}

/* nil, err, started [, "tls" (err is a TLS error: an alert, a bad record)] */
static int read_failed(lua_State *L, const inbox *ib, int rc, int started) {
  lua_pushnil(L);
  if (rc == RD_CLOSED) {
    lua_pushliteral(L, "closed");
  } else if (rc == RD_TIMEOUT) {
    lua_pushliteral(L, "timeout");
  } else if (rc == RD_TLS) {
    lua_pushstring(L, ib->terr.msg);
    lua_pushboolean(L, started);
    lua_pushliteral(L, "tls");
    return 4;
  } else {
    lua_pushstring(L, strerror(errno));
  }
  lua_pushboolean(L, started);
  return 3;
}

static int32_t be32(const uint8_t *p) {
  return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* ib:frame(timeout_ms, max_bytes [, expect]) -> correlation_id, frame (a
 * kafka.bytes of what follows the correlation id) | false, size [, corr]
 * (the size prefix is below 4 or above max_bytes, or the correlation id
 * is not expect: nothing of the frame is taken, so that a peer that is
 * not Kafka costs no memory; the caller may accept corr in a next call)
 * | nil, err, started (err "timeout": what was read is kept and the next
 * call goes on; else "closed" or the system's message; started: part of
 * a frame was read) | nil, err, false, "tls" (the first bytes are a TLS
 * record: a plaintext client on a TLS listener). */
static int l_inbox_frame(lua_State *L) {
  inbox *ib = check_inbox(L);
  int64_t deadline = deadline_of(L, 2);
  lua_Integer max = luaL_checkinteger(L, 3);
  int has_expect = !lua_isnoneornil(L, 4);
  lua_Integer expect = has_expect ? luaL_checkinteger(L, 4) : 0;
  kbytes *fr;
  lua_settop(L, 4);
  kf_getuv(L, 1); /* 5: the inbox's table; [1] the frame being read */
  lua_rawgeti(L, 5, 1);
  fr = (kbytes *)lua_touserdata(L, 6);
  if (!fr) {
    const uint8_t *h;
    int32_t size, corr;
    lua_pop(L, 1);
    /* the size prefix and the correlation id: the spare may hold part */
    for (;;) {
      size_t got, have = ib->tail - ib->head;
      int rc;
      h = ib->spare + ib->head;
      if (!ib->seen && have >= 3) {
        if ((h[0] == 21 || h[0] == 22) && h[1] == 3 && h[2] <= 4) {
          lua_pushnil(L);
          lua_pushliteral(L, "the broker answered with TLS: is it an SSL or SASL_SSL listener? (security_protocol)");
          lua_pushboolean(L, 0);
          lua_pushliteral(L, "tls");
          return 4;
        }
        ib->seen = 1;
      }
      /* a bad size is refused on its 4 bytes: a frame too short may end there */
      if (have >= 4 && (be32(h) < 4 || be32(h) > max)) {
        lua_pushboolean(L, 0);
        lua_pushinteger(L, be32(h));
        return 2;
      }
      if (have >= 8) break;
      rc = ib_read(ib, NULL, 0, deadline, &got);
      if (rc != RD_OK) return read_failed(L, ib, rc, have > 0);
    }
    size = be32(h);
    corr = be32(h + 4);
    if (has_expect && corr != expect) {
      lua_pushboolean(L, 0);
      lua_pushinteger(L, size);
      lua_pushinteger(L, corr);
      return 3;
    }
    /* allocated first: when it raises, the prefix is still there */
    lua_rawgeti(L, 5, 2); /* a released frame big enough (not too big) is read into */
    fr = (kbytes *)lua_touserdata(L, -1);
    if (fr && (size_t)size >= KEEP_MIN && fr->cap >= (size_t)size && (size_t)size >= fr->cap / 4) {
      lua_pushnil(L);
      lua_rawseti(L, 5, 2);
      fr->released = 0;
    } else {
      lua_pop(L, 1);
      fr = (kbytes *)kf_newuserdata_uv(L, sizeof(kbytes) + (size_t)size);
      fr->cap = (size_t)size;
      fr->root = NULL;
      fr->gen = 0;
      fr->kind = K_FRAME;
      fr->released = 0;
      luaL_setmetatable(L, BYTES_MT);
      if ((size_t)size >= KEEP_MIN) {
        lua_pushvalue(L, 1); /* the inbox it goes back to (proto.release) */
        kf_setlink(L, -2);
      }
    }
    ib->head += 4;
    fr->size = (size_t)size;
    fr->p = fr->data;
    fr->n = 0;
    lua_pushvalue(L, -1);
    lua_rawseti(L, 5, 1);
    ib->fill = 0;
  }
  ib->fill += ib_take(ib, fr->data + ib->fill, fr->size - ib->fill);
  while (ib->fill < fr->size) {
    size_t got = 0;
    int rc = ib_read(ib, fr->data + ib->fill, fr->size - ib->fill, deadline, &got);
    if (rc != RD_OK) return read_failed(L, ib, rc, 1);
    ib->fill += got;
  }
  lua_pushnil(L);
  lua_rawseti(L, 5, 1);
  fr->p = fr->data + 4;
  fr->n = fr->size - 4;
  lua_pushinteger(L, be32(fr->data));
  lua_insert(L, -2);
  return 2;
}

/* ib:receive(n, timeout_ms) -> string | nil, err, partial: n bytes, as
 * luasocket's receive(n) (for reads outside the framing, e.g. SASL v0
 * tokens). Must not be used while a frame is half read. */
static int l_inbox_receive(lua_State *L) {
  inbox *ib = check_inbox(L);
  lua_Integer n = luaL_checkinteger(L, 2);
  int64_t deadline = deadline_of(L, 3);
  uint8_t *buf;
  size_t have;
  luaL_argcheck(L, n >= 0 && n <= 1073741824, 2, "byte count out of range");
  lua_settop(L, 3);
  buf = (uint8_t *)lua_newuserdata(L, (size_t)n + 1);
  have = ib_take(ib, buf, (size_t)n);
  while (have < (size_t)n) {
    size_t got = 0;
    int rc = ib_read(ib, buf + have, (size_t)n - have, deadline, &got);
    if (rc != RD_OK) {
      lua_settop(L, 4); /* buf at 4 */
      read_failed(L, ib, rc, 0);
      lua_settop(L, 6); /* nil, err */
      lua_pushlstring(L, (const char *)buf, have);
      return 3;
    }
    have += got;
  }
  lua_pushlstring(L, (const char *)buf, have);
  return 1;
}

/* A frame in pieces over TLS: its small pieces gathered into WSTAGE bytes
 * (each SSL_write is at least one record), its large ones written from
 * their builders. RD_OK or why not; *sent: the bytes that went. */
static int tls_write_pieces(inbox *ib, const kfl_outframe *of, int64_t deadline, size_t *sent) {
  uint8_t stage[WSTAGE];
  size_t fill = 0, pos = 0, w = 0, total = of->w.len + of->ext;
  int rc = RD_OK;
  while (rc == RD_OK && pos < total) {
    struct iovec v[IOV_BATCH];
    int i, nv = outframe_iov(of, pos, v, IOV_BATCH);
    for (i = 0; rc == RD_OK && i < nv; i++) {
      const uint8_t *p = (const uint8_t *)v[i].iov_base;
      size_t n = v[i].iov_len;
      if (n >= WSTAGE) { /* large: the stage first, then the piece as it lies */
        if (fill) {
          rc = kf_tls_write(ib->tls, stage, fill, deadline, &w, &ib->terr);
          *sent += w;
          fill = 0;
          if (rc != RD_OK) break;
        }
        rc = kf_tls_write(ib->tls, p, n, deadline, &w, &ib->terr);
        *sent += w;
      } else {
        while (n) {
          size_t take = WSTAGE - fill < n ? WSTAGE - fill : n;
          memcpy(stage + fill, p, take);
          fill += take;
          p += take;
          n -= take;
          if (fill == WSTAGE) {
            rc = kf_tls_write(ib->tls, stage, fill, deadline, &w, &ib->terr);
            *sent += w;
            fill = 0;
            if (rc != RD_OK) break;
          }
        }
      }
      pos += v[i].iov_len;
    }
  }
  if (rc == RD_OK && fill) {
    rc = kf_tls_write(ib->tls, stage, fill, deadline, &w, &ib->terr);
    *sent += w;
  }
  return rc;
}

/* ib:write over TLS: a string or kafka.bytes in one SSL_write, a frame in
 * pieces by tls_write_pieces. */
static int tls_write(lua_State *L, inbox *ib, const kfl_outframe *of, int64_t deadline) {
  size_t sent = 0;
  int rc;
  if (!of) {
    size_t n;
    const uint8_t *p = kfl_checkbytes(L, 2, &n);
    rc = kf_tls_write(ib->tls, p, n, deadline, &sent, &ib->terr);
  } else {
    rc = tls_write_pieces(ib, of, deadline, &sent);
  }
  if (rc == RD_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  if (rc == RD_TIMEOUT) lua_pushliteral(L, "timeout");
  else if (rc == RD_CLOSED) lua_pushliteral(L, "closed");
  else if (rc == RD_TLS) lua_pushstring(L, ib->terr.msg);
  else lua_pushstring(L, strerror(errno));
  lua_pushinteger(L, (lua_Integer)sent);
  return 3;
}

/* ib:write(frame, timeout_ms) -> true | nil, err, sent: the whole frame
 * (a string, a kafka.bytes or a kafka.outframe) on the descriptor, as
 * luasocket's send() (err "timeout", "closed" or the system's message;
 * sent: the bytes that went, a frame cut short). sendmsg() takes the
 * pieces of a frame as they lie; MSG_NOSIGNAL: a peer gone is an error,
 * not SIGPIPE. */
static int l_inbox_write(lua_State *L) {
  inbox *ib = check_inbox(L);
  int64_t deadline = deadline_of(L, 3);
  kfl_outframe one, *of = luaL_testudata(L, 2, OUTFRAME_MT) ? check_outframe(L, 2) : NULL;
  size_t off = 0, total;
  if (ib->tls) return tls_write(L, ib, of, deadline);
  if (!of) { /* one run of bytes: a frame without pieces around it */
    size_t n;
    const uint8_t *p = kfl_checkbytes(L, 2, &n);
    one.w.buf = (uint8_t *)p;
    one.w.len = one.w.cap = n;
    one.w.err = 0;
    one.pieces = NULL;
    one.npieces = one.cap = one.ext = 0;
    of = &one;
  }
  total = of->w.len + of->ext;
  while (off < total) {
    struct iovec v[IOV_BATCH];
    struct msghdr mh;
    ssize_t r;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = v;
    mh.msg_iovlen = (size_t)outframe_iov(of, off, v, IOV_BATCH);
    r = sendmsg(ib->fd, &mh, MSG_NOSIGNAL);
    if (r >= 0) {
      off += (size_t)r;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = wait_fd(ib->fd, POLLOUT, deadline);
      if (rc == RD_OK) continue;
      lua_pushnil(L);
      if (rc == RD_TIMEOUT) lua_pushliteral(L, "timeout");
      else lua_pushstring(L, strerror(errno));
    } else {
      lua_pushnil(L);
      if (errno == EPIPE || errno == ECONNRESET) lua_pushliteral(L, "closed");
      else lua_pushstring(L, strerror(errno));
    }
    lua_pushinteger(L, (lua_Integer)off);
    return 3;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* ib:close(): ends TLS (our close_notify) and forgets the descriptor (its
 * socket closes it right after). Idempotent. */
static int l_inbox_close(lua_State *L) {
  inbox *ib = (inbox *)luaL_checkudata(L, 1, INBOX_MT);
  kf_tls *t = ib->tls;
  ib->tls = NULL;
  kf_tls_free(t, ib->fd >= 0);
  ib->fd = -1;
  return 0;
}

/* __gc: frees the TLS state without a word on the descriptor, which its
 * socket may have closed (and the number been reused) already. */
static int l_inbox_gc(lua_State *L) {
  inbox *ib = (inbox *)luaL_checkudata(L, 1, INBOX_MT);
  kf_tls *t = ib->tls;
  ib->tls = NULL;
  kf_tls_free(t, 0);
  ib->fd = -1;
  return 0;
}

/* ib:starttls(ctx, host, verify_host, timeout_ms) -> true | nil, message,
 * kind [, depth]: the TLS handshake on the inbox's descriptor (before any
 * read), verified as ctx (core.tls_context) and verify_host say; from
 * here on frame, receive and write go through TLS. kind: "timeout",
 * "closed" (the peer closed: not a TLS listener?), "verify" (the chain is
 * not trusted; depth: where), "host" (the certificate does not name
 * host), "tls" (any other TLS error: an alert, not TLS at all), "system"
 * (errno). A failed handshake leaves the inbox to be closed. */
static int l_inbox_starttls(lua_State *L) {
  inbox *ib = check_inbox(L);
  kf_tls_ctx *ctx = kfl_checktlsctx(L, 2);
  const char *host = luaL_checkstring(L, 3);
  int verify_host = lua_toboolean(L, 4);
  int64_t deadline = deadline_of(L, 5);
  kf_tls_err e;
  int rc;
  if (ib->tls || ib->seen || ib->tail != ib->head) luaL_error(L, "inbox: starttls once, before any read");
  ib->tls = kf_tls_new(ctx, ib->fd, host, verify_host, &e);
  if (!ib->tls) {
    lua_pushnil(L);
    lua_pushstring(L, e.msg);
    lua_pushliteral(L, "tls");
    return 3;
  }
  ib->seen = 1; /* no plaintext peer check on the decrypted bytes */
  rc = kf_tls_handshake(ib->tls, deadline, &e);
  if (rc == RD_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  switch (rc) {
  case RD_TIMEOUT:
    lua_pushliteral(L, "timeout");
    lua_pushliteral(L, "timeout");
    return 3;
  case RD_CLOSED:
    lua_pushliteral(L, "closed");
    lua_pushliteral(L, "closed");
    return 3;
  case RD_ERROR:
    lua_pushstring(L, strerror(errno));
    lua_pushliteral(L, "system");
    return 3;
  default:
    lua_pushstring(L, e.msg);
    if (e.kind == KF_TLS_E_VERIFY) {
      lua_pushliteral(L, "verify");
      lua_pushinteger(L, e.depth);
      return 4;
    }
    if (e.kind == KF_TLS_E_HOST) lua_pushliteral(L, "host");
    else lua_pushliteral(L, "tls");
    return 3;
  }
}

/* ib:tls() -> protocol, cipher ("TLSv1.3", "TLS_AES_256_GCM_SHA384") | nil */
static int l_inbox_tls(lua_State *L) {
  inbox *ib = check_inbox(L);
  if (!ib->tls) return 0;
  lua_pushstring(L, kf_tls_version(ib->tls));
  lua_pushstring(L, kf_tls_cipher(ib->tls));
  return 2;
}

/* core.inbox(fd) -> an inbox reading the (non-blocking) descriptor fd,
 * which is made close-on-exec (luasocket does not): a program this
 * process starts (os.execute, io.popen) would hold the broker connection
 * open after it is closed here, as librdkafka's SOCK_CLOEXEC prevents. */
static int l_inbox_new(lua_State *L) {
  lua_Integer fd = luaL_checkinteger(L, 1);
  inbox *ib;
  int fl;
  luaL_argcheck(L, fd >= 0 && fd <= 2147483647, 1, "descriptor out of range");
  fl = fcntl((int)fd, F_GETFD);
  if (fl >= 0) (void)fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
  ib = (inbox *)kf_newuserdata_uv(L, sizeof(inbox));
  ib->fd = (int)fd;
  ib->tls = NULL;
  ib->seen = 0;
  ib->fill = ib->head = ib->tail = 0;
  lua_createtable(L, 2, 0);
  kf_setuv(L, -2);
  luaL_setmetatable(L, INBOX_MT);
  return 1;
}

static const luaL_Reg inbox_methods[] = {
  {"frame", l_inbox_frame},
  {"receive", l_inbox_receive},
  {"write", l_inbox_write},
  {"close", l_inbox_close},
  {"starttls", l_inbox_starttls},
  {"tls", l_inbox_tls},
  {NULL, NULL}
};

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
  luaL_newmetatable(L, INBOX_MT);
  lua_newtable(L);
  luaL_setfuncs(L, inbox_methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_inbox_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_inbox_gc);
  lua_setfield(L, -2, "__close");
  lua_pushliteral(L, INBOX_MT);
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_bytes_new);
  lua_setfield(L, -2, "bytes");
  lua_pushcfunction(L, l_bytes_release);
  lua_setfield(L, -2, "release");
  lua_pushcfunction(L, l_inbox_new);
  lua_setfield(L, -2, "inbox");
}
