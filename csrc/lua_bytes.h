/*
 * lua_bytes.h - private to lua_bytes.c and lua_inbox.c: the kafka.bytes
 * userdata (a frame the inbox reads into, or a view into a frame or
 * string), the outframe's pieces, and the sizes both files use.
 */
#ifndef KF_LUA_BYTES_H
#define KF_LUA_BYTES_H

#include <sys/uio.h>

#include "lua_glue.h"

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

/* The kafka.outframe at idx (raises otherwise). */
kfl_outframe *kfl_check_outframe(lua_State *L, int idx);
/* Fills v with up to max pieces of of from byte off on; returns how many. */
int kfl_outframe_iov(const kfl_outframe *of, size_t off, struct iovec *v, int max);

#endif
