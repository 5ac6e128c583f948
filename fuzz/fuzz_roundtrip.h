/* fuzz_roundtrip.h - the round-trip property of the schema walkers:
 * whatever body decodes, re-encoded at the same version, decodes again to
 * the same values (decode -> encode -> decode equal). The first decode
 * builds a tree of values through kf_dec_ops; the tree is encoded through
 * kf_enc_ops; the bytes are decoded into a second tree; the trees must be
 * equal, field by field (unknown tagged fields are not kept, so bytes may
 * differ, values may not). A mismatch, or a failure to encode or decode
 * again, abort()s: the fuzzer reports it as a crash. */
#ifndef KF_FUZZ_ROUNDTRIP_H
#define KF_FUZZ_ROUNDTRIP_H

#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"

enum { RT_INT, RT_NUM, RT_BOOL, RT_BYTES, RT_NIL, RT_STRUCT, RT_ARRAY, RT_RECORDS };

typedef struct rt_node {
  const kf_field *f; /* NULL: an array element */
  int kind;
  int64_t i;
  double d;
  const uint8_t *p; /* RT_BYTES, RT_RECORDS (NULL: null records) */
  size_t n;
  struct rt_node **kids;
  size_t nkids, cap;
  struct rt_node *parent;
} rt_node;

typedef struct rt_tree {
  rt_node *root, *cur;
  int oom;
  int fuzz_records; /* the first decode also runs the records decoder */
} rt_tree;

static rt_node *rt_new(rt_tree *t, const kf_field *f, int kind) {
  rt_node *n = (rt_node *)calloc(1, sizeof *n);
  rt_node *c = t->cur;
  if (!n) {
    t->oom = 1;
    return NULL;
  }
  n->f = f;
  n->kind = kind;
  n->parent = c;
  if (c) {
    if (c->nkids == c->cap) {
      size_t cap = c->cap ? c->cap * 2 : 4;
      rt_node **k = (rt_node **)realloc(c->kids, cap * sizeof *k);
      if (!k) {
        free(n);
        t->oom = 1;
        return NULL;
      }
      c->kids = k;
      c->cap = cap;
    }
    c->kids[c->nkids++] = n;
  }
  return n;
}

static void rt_free(rt_node *n) {
  size_t i;
  if (!n) return;
  for (i = 0; i < n->nkids; i++) rt_free(n->kids[i]);
  free(n->kids);
  free(n);
}

/* ---- decoding into a tree ---- */
static void rt_set_int(void *u, const kf_field *f, size_t idx, int64_t v) {
  rt_node *n = rt_new((rt_tree *)u, f, RT_INT);
  (void)idx;
  if (n) n->i = v;
}
static void rt_set_num(void *u, const kf_field *f, size_t idx, double v) {
  rt_node *n = rt_new((rt_tree *)u, f, RT_NUM);
  (void)idx;
  if (n) n->d = v;
}
static void rt_set_bool(void *u, const kf_field *f, size_t idx, int v) {
  rt_node *n = rt_new((rt_tree *)u, f, RT_BOOL);
  (void)idx;
  if (n) n->i = v != 0;
}
static void rt_set_bytes(void *u, const kf_field *f, size_t idx, const uint8_t *p, size_t len) {
  rt_node *n = rt_new((rt_tree *)u, f, RT_BYTES);
  (void)idx;
  if (n) n->p = p, n->n = len;
}
static void rt_set_nil(void *u, const kf_field *f, size_t idx) {
  (void)idx;
  rt_new((rt_tree *)u, f, RT_NIL);
}
static void rt_begin(void *u, const kf_field *f, size_t idx, size_t len) {
  rt_tree *t = (rt_tree *)u;
  rt_node *n = rt_new(t, f, f && f->is_array ? RT_ARRAY : RT_STRUCT);
  (void)idx, (void)len;
  if (n) t->cur = n;
  else t->cur = NULL; /* out of memory: the tree is abandoned */
}
static void rt_end(void *u, const kf_field *f, size_t idx) {
  rt_tree *t = (rt_tree *)u;
  (void)f, (void)idx;
  if (t->cur) t->cur = t->cur->parent;
}
static int rt_records(void *u, const kf_field *f, const uint8_t *p, size_t len, size_t at, kf_err *e) {
  rt_tree *t = (rt_tree *)u;
  rt_node *n = rt_new(t, f, RT_RECORDS);
  (void)at, (void)e;
  if (n) n->p = p, n->n = len;
  if (p && t->fuzz_records) { /* records reached here are fuzzed with CRC checks on and off */
    fz_records(p, len, 1);
    fz_records(p, len, 0);
  }
  return 0;
}

static const kf_dec_ops rt_dec_ops = {rt_set_int, rt_set_num, rt_set_bool, rt_set_bytes,
                                      rt_set_nil, rt_begin, rt_end, rt_records};

/* ---- encoding from a tree ---- */
#define RT_DEPTH 80
typedef struct rt_enc {
  rt_node *stack[RT_DEPTH]; /* stack[top]: the current node (NULL: absent) */
  int top;
} rt_enc;

static rt_node *rt_find(rt_enc *x, const kf_field *f) {
  rt_node *c = x->stack[x->top];
  size_t i;
  if (!f) return c;
  if (!c) return NULL;
  for (i = 0; i < c->nkids; i++)
    if (c->kids[i]->f == f) return c->kids[i];
  return NULL;
}
static int rt_get_int(void *u, const kf_field *f, int64_t *v) {
  rt_node *n = rt_find((rt_enc *)u, f);
  if (!n || n->kind == RT_NIL) return KF_V_NIL;
  if (n->kind != RT_INT) return KF_V_BAD;
  *v = n->i;
  return KF_V_OK;
}
static int rt_get_num(void *u, const kf_field *f, double *v) {
  rt_node *n = rt_find((rt_enc *)u, f);
  if (!n || n->kind == RT_NIL) return KF_V_NIL;
  if (n->kind != RT_NUM) return KF_V_BAD;
  *v = n->d;
  return KF_V_OK;
}
static int rt_get_bool(void *u, const kf_field *f, int *v) {
  rt_node *n = rt_find((rt_enc *)u, f);
  if (!n || n->kind == RT_NIL) return KF_V_NIL;
  if (n->kind != RT_BOOL) return KF_V_BAD;
  *v = (int)n->i;
  return KF_V_OK;
}
static int rt_get_bytes(void *u, const kf_field *f, const uint8_t **p, size_t *len) {
  rt_node *n = rt_find((rt_enc *)u, f);
  if (!n || n->kind == RT_NIL) return KF_V_NIL;
  if (n->kind != RT_BYTES) return KF_V_BAD;
  *p = n->p;
  *len = n->n;
  return KF_V_OK;
}
static int rt_push(rt_enc *x, rt_node *n) {
  if (x->top + 1 >= RT_DEPTH) abort(); /* deeper than the decoder's nesting limit allows */
  x->stack[++x->top] = n;
  return 0;
}
static int rt_enter(void *u, const kf_field *f, size_t *len) {
  rt_enc *x = (rt_enc *)u;
  rt_node *n = rt_find(x, f);
  if (n && n->kind == RT_NIL) n = NULL;
  rt_push(x, n);
  if (!n) return KF_V_NIL;
  if (n->kind != RT_STRUCT && n->kind != RT_ARRAY) return KF_V_BAD;
  if (len) *len = n->nkids;
  return KF_V_OK;
}
static int rt_enter_elem(void *u, size_t i) {
  rt_enc *x = (rt_enc *)u;
  rt_node *c = x->stack[x->top];
  rt_node *n = c && i < c->nkids ? c->kids[i] : NULL;
  rt_push(x, n);
  return n && n->kind != RT_NIL ? KF_V_OK : KF_V_NIL;
}
static void rt_leave(void *u) {
  rt_enc *x = (rt_enc *)u;
  if (x->top > 0) x->top--;
}
static int rt_has(void *u, const kf_field *f) { return rt_find((rt_enc *)u, f) != NULL; }
static int rt_enc_records(void *u, const kf_field *f, kf_writer *w, int kind, int nullable, kf_err *e) {
  rt_node *n = rt_find((rt_enc *)u, f);
  (void)e;
  if (!n || n->kind != RT_RECORDS || !n->p) {
    if (!nullable) return -1;
    kf_w_lenbytes(w, kind, NULL, 0);
    return 0;
  }
  kf_w_lenbytes(w, kind, n->p, n->n);
  return 0;
}

static const kf_enc_ops rt_enc_ops = {rt_get_int, rt_get_num,    rt_get_bool, rt_get_bytes, rt_enter,
                                      rt_enter_elem, rt_leave, rt_has, rt_enc_records};

/* ---- comparing ---- */
static int rt_equal(const rt_node *a, const rt_node *b) {
  size_t i;
  if (a->f != b->f || a->kind != b->kind || a->nkids != b->nkids) return 0;
  switch (a->kind) {
  case RT_INT: case RT_BOOL:
    if (a->i != b->i) return 0;
    break;
  case RT_NUM:
    if (!(a->d != a->d && b->d != b->d) && memcmp(&a->d, &b->d, sizeof a->d) != 0) return 0;
    break;
  case RT_BYTES: case RT_RECORDS:
    if ((a->p == NULL) != (b->p == NULL) || a->n != b->n) return 0;
    if (a->n && memcmp(a->p, b->p, a->n) != 0) return 0;
    break;
  default: break;
  }
  for (i = 0; i < a->nkids; i++)
    if (!rt_equal(a->kids[i], b->kids[i])) return 0;
  return 1;
}

static void rt_fail(const char *what, const kf_struct *s, int version, const kf_err *e) {
  fprintf(stderr, "round trip of %s v%d: %s%s%s\n", s->name, version, what, e ? ": " : "",
          e ? e->msg : "");
  abort();
}

/* Decodes the body at r (whole-frame reader positioned at the body); when it
 * decodes, checks the round trip. Returns what kf_schema_decode returned. */
static int rt_check(const kf_struct *s, int version, int flexible, kf_reader *r) {
  rt_tree t1 = {NULL, NULL, 0, 1}, t2 = {NULL, NULL, 0, 0};
  rt_enc x;
  kf_writer w;
  kf_reader r2;
  kf_err e = {0, {0}};
  int rc;
  t1.root = t1.cur = rt_new(&t1, NULL, RT_STRUCT);
  if (!t1.root) return -1;
  rc = kf_schema_decode(s, version, flexible, &rt_dec_ops, &t1, r, &e);
  if (rc || t1.oom) {
    rt_free(t1.root);
    return rc;
  }
  x.top = 0;
  x.stack[0] = t1.root;
  kf_w_init(&w);
  if (kf_schema_encode(s, version, flexible, &rt_enc_ops, &x, &w, &e)) {
    if (e.code != KF_ENOMEM) rt_fail("the decoded body does not encode", s, version, &e);
  } else {
    t2.root = t2.cur = rt_new(&t2, NULL, RT_STRUCT);
    if (t2.root) {
      kf_r_init(&r2, w.buf, w.len);
      if (kf_schema_decode(s, version, flexible, &rt_dec_ops, &t2, &r2, &e))
        rt_fail("the re-encoded body does not decode", s, version, &e);
      if (!t2.oom && !rt_equal(t1.root, t2.root))
        rt_fail("decoded again, the values differ", s, version, NULL);
    }
  }
  kf_w_free(&w);
  rt_free(t1.root);
  rt_free(t2.root);
  return 0;
}

#endif
