/*
 * lua_inbox.c - kafka.inbox (see lua_bytes.c's head): a luasocket
 * descriptor read with readv() straight into each frame's own memory (a
 * kafka.bytes), the bytes after a frame kept in a read-ahead buffer for the
 * next; written with sendmsg() from a request frame in pieces; TLS
 * (ib:starttls, tls.c) decrypting straight into the same frames.
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

#include "lua_bytes.h"
#include "tls.h"

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
    int i, nv = kfl_outframe_iov(of, pos, v, IOV_BATCH);
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
  kfl_outframe one, *of = luaL_testudata(L, 2, OUTFRAME_MT) ? kfl_check_outframe(L, 2) : NULL;
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
    mh.msg_iovlen = (size_t)kfl_outframe_iov(of, off, v, IOV_BATCH);
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

void kfl_open_inbox(lua_State *L) {
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
  lua_pushcfunction(L, l_inbox_new);
  lua_setfield(L, -2, "inbox");
}
