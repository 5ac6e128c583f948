/* schema.c - one encoder and one decoder for every (api, version). */
#include "schema.h"

#include <stdio.h>
#include <string.h>

#define MAX_PATH 24

/* The path of the field being walked, for error messages only. */
typedef struct path {
  int depth;
  const char *name[MAX_PATH];
  size_t idx[MAX_PATH]; /* (size_t)-1: not an array element */
} path;

static void path_push(path *p, const char *name) {
  if (p->depth < MAX_PATH) {
    p->name[p->depth] = name;
    p->idx[p->depth] = (size_t)-1;
  }
  p->depth++;
}
static void path_pop(path *p) { p->depth--; }
static void path_elem(path *p, size_t i) {
  if (p->depth > 0 && p->depth <= MAX_PATH) p->idx[p->depth - 1] = i;
}

static void path_format(const path *p, char *buf, size_t cap) {
  size_t len = 0;
  int i, n = p->depth < MAX_PATH ? p->depth : MAX_PATH;
  buf[0] = 0;
  for (i = 0; i < n && len + 1 < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s", i ? "." : "", p->name[i]);
    if (w < 0) break;
    len += (size_t)w;
    if (len >= cap) break;
    if (p->idx[i] != (size_t)-1) {
      w = snprintf(buf + len, cap - len, "[%zu]", p->idx[i] + 1);
      if (w < 0) break;
      len += (size_t)w;
    }
  }
  if (len >= cap) buf[cap - 1] = 0;
}

static const char *const type_names[] = {"bool", "int8", "int16", "uint16", "int32", "uint32",
                                         "int64", "float64", "uuid", "string", "bytes", "records",
                                         "struct"};

/* ---------------------------------------------------------------- API lookup */

const kf_api *kf_api_by_key(int key) {
  size_t i;
  for (i = 0; i < kf_napis; i++)
    if (kf_apis[i].key == key) return &kf_apis[i];
  return NULL;
}

const kf_api *kf_api_by_name(const char *name) {
  size_t i;
  for (i = 0; i < kf_napis; i++)
    if (strcmp(kf_apis[i].name, name) == 0 || strcmp(kf_apis[i].snake, name) == 0)
      return &kf_apis[i];
  for (i = 0; kf_api_aliases[i].name; i++)
    if (strcmp(kf_api_aliases[i].name, name) == 0 || strcmp(kf_api_aliases[i].snake, name) == 0)
      return kf_api_by_key(kf_api_aliases[i].key);
  return NULL;
}

const kf_data *kf_data_by_name(const char *name) {
  size_t i;
  for (i = 0; i < kf_ndatas; i++)
    if (strcmp(kf_datas[i].name, name) == 0 || strcmp(kf_datas[i].snake, name) == 0)
      return &kf_datas[i];
  return NULL;
}

int kf_req_header_version(const kf_api *a, int version) {
  if (a->key == 7 && version == 0) return 0; /* ControlledShutdown v0: no client id */
  return version >= a->req_flex ? 2 : 1;
}

int kf_resp_header_version(const kf_api *a, int version) {
  if (a->key == 18) return 0; /* ApiVersions: always header v0 */
  return version >= a->resp_flex ? 1 : 0;
}

/* ------------------------------------------------------------------ encoding */

typedef struct ectx {
  const kf_enc_ops *ops;
  void *u;
  kf_writer *w;
  kf_err *e;
  int v;
  int flex;
  path p;
} ectx;

static int enc_fail(ectx *c, int code, const char *what) {
  char ps[160];
  path_format(&c->p, ps, sizeof ps);
  kf_err_set(c->e, code, "%s '%s'", what, ps);
  return -1;
}

static int enc_struct(ectx *c, const kf_struct *s);

static int enc_int(ectx *c, const kf_field *f, const kf_field *key) {
  int64_t x = 0, lo, hi;
  int rc = c->ops->get_int(c->u, key, &x);
  if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected an integer for");
  if (rc == KF_V_NIL) x = f->def_int;
  switch (f->type) {
  case KF_T_INT8: lo = INT8_MIN, hi = INT8_MAX; break;
  case KF_T_INT16: lo = INT16_MIN, hi = INT16_MAX; break;
  case KF_T_UINT16: lo = 0, hi = UINT16_MAX; break;
  case KF_T_INT32: lo = INT32_MIN, hi = INT32_MAX; break;
  case KF_T_UINT32: lo = 0, hi = UINT32_MAX; break;
  default: lo = INT64_MIN, hi = INT64_MAX; break;
  }
  if (x < lo || x > hi) {
    char what[96];
    snprintf(what, sizeof what, "value %lld out of range for %s", (long long)x, type_names[f->type]);
    return enc_fail(c, KF_EVALUE, what);
  }
  switch (f->type) {
  case KF_T_INT8: kf_w_i8(c->w, (int8_t)x); break;
  case KF_T_INT16: case KF_T_UINT16: kf_w_i16(c->w, (int16_t)(uint16_t)x); break;
  case KF_T_INT32: case KF_T_UINT32: kf_w_i32(c->w, (int32_t)(uint32_t)x); break;
  default: kf_w_i64(c->w, x); break;
  }
  return 0;
}

/* Encodes one value of field f: the field of the current struct (elem == 0)
 * or the current array element (elem == 1). */
static int enc_value(ectx *c, const kf_field *f, int elem) {
  const kf_field *key = elem ? NULL : f;
  int nullable = kf_in(c->v, f->nmin, f->nmax);
  int rc;
  switch (f->type) {
  case KF_T_BOOL: {
    int b = 0;
    rc = c->ops->get_bool(c->u, key, &b);
    if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected a boolean for");
    if (rc == KF_V_NIL) b = f->def_int != 0;
    kf_w_i8(c->w, b ? 1 : 0);
    return 0;
  }
  case KF_T_INT8: case KF_T_INT16: case KF_T_UINT16: case KF_T_INT32: case KF_T_UINT32:
  case KF_T_INT64:
    return enc_int(c, f, key);
  case KF_T_FLOAT64: {
    double d = 0;
    rc = c->ops->get_num(c->u, key, &d);
    if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected a number for");
    if (rc == KF_V_NIL) d = f->def_num;
    kf_w_f64(c->w, d);
    return 0;
  }
  case KF_T_UUID: {
    const uint8_t *p = NULL;
    size_t n = 0;
    static const uint8_t zero[16];
    rc = c->ops->get_bytes(c->u, key, &p, &n);
    if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected a string for");
    if (rc == KF_V_NIL) p = zero, n = 16;
    if (n != 16) return enc_fail(c, KF_EVALUE, "expected 16 bytes for uuid");
    kf_w_bytes(c->w, p, 16);
    return 0;
  }
  case KF_T_STRING: case KF_T_BYTES: {
    const uint8_t *p = NULL;
    size_t n = 0;
    int kind = c->flex ? 'c' : (f->type == KF_T_STRING ? 16 : 32);
    rc = c->ops->get_bytes(c->u, key, &p, &n);
    if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected a string for");
    if (rc == KF_V_NIL) {
      if (nullable) {
        p = NULL;
      } else {
        p = (const uint8_t *)(f->def_str ? f->def_str : "");
        n = strlen((const char *)p);
      }
    }
    /* a compact string is bounded as a classic one is (Kafka's Java
     * classes refuse longer ones both ways); compact bytes are not */
    if (p && f->type == KF_T_STRING && n > 32767) return enc_fail(c, KF_EVALUE, "string too long for");
    kf_w_lenbytes(c->w, kind, p, n);
    if (c->w->err == KF_EVALUE) {
      c->w->err = KF_OK;
      return enc_fail(c, KF_EVALUE, "string too long for");
    }
    return 0;
  }
  case KF_T_RECORDS:
    if (c->ops->records(c->u, key, c->w, c->flex ? 'c' : 32, nullable, c->e)) {
      if (!c->e->code) return enc_fail(c, KF_EVALUE, "bad records value for");
      return -1;
    }
    return 0;
  case KF_T_STRUCT:
    if (elem) return enc_struct(c, f->child);
    rc = c->ops->enter(c->u, f, NULL);
    if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected a table for");
    if (nullable) {
      kf_w_i8(c->w, rc == KF_V_NIL ? -1 : 1);
      if (rc == KF_V_NIL) {
        c->ops->leave(c->u);
        return 0;
      }
    }
    rc = enc_struct(c, f->child);
    c->ops->leave(c->u);
    return rc;
  default:
    return enc_fail(c, KF_EUNSUPPORTED, "unknown type of");
  }
}

static int enc_field(ectx *c, const kf_field *f) {
  int rc;
  size_t i, n = 0;
  if (!f->is_array) return enc_value(c, f, 0);
  rc = c->ops->enter(c->u, f, &n);
  if (rc == KF_V_BAD) return enc_fail(c, KF_EVALUE, "expected an array for");
  if (rc == KF_V_NIL) {
    kf_w_count(c->w, c->flex ? 'c' : 32, 0, kf_in(c->v, f->nmin, f->nmax));
    c->ops->leave(c->u);
    return 0;
  }
  kf_w_count(c->w, c->flex ? 'c' : 32, n, 0);
  for (i = 0; i < n; i++) {
    path_elem(&c->p, i);
    rc = c->ops->enter_elem(c->u, i);
    if (rc != KF_V_OK) {
      c->ops->leave(c->u);
      return enc_fail(c, KF_EVALUE,
                      f->type == KF_T_STRUCT ? "expected a table element in" : "missing element in");
    }
    rc = enc_value(c, f, 1);
    c->ops->leave(c->u);
    if (rc) break;
  }
  path_elem(&c->p, (size_t)-1);
  c->ops->leave(c->u);
  return rc;
}

static int enc_struct(ectx *c, const kf_struct *s) {
  uint16_t i, nreg = (uint16_t)(s->nfields - s->ntagged);
  for (i = 0; i < nreg; i++) {
    const kf_field *f = &s->fields[i];
    int rc;
    if (!kf_in(c->v, f->vmin, f->vmax)) continue;
    path_push(&c->p, f->name);
    rc = enc_field(c, f);
    path_pop(&c->p);
    if (rc) return rc;
  }
  if (c->flex) {
    uint32_t ntag = 0;
    for (i = nreg; i < s->nfields; i++) {
      const kf_field *f = &s->fields[i];
      if (kf_in(c->v, f->vmin, f->vmax) && c->ops->has(c->u, f)) ntag++;
    }
    kf_w_uvarint(c->w, ntag);
    for (i = nreg; ntag && i < s->nfields; i++) {
      const kf_field *f = &s->fields[i];
      size_t at;
      uint8_t vb[10];
      int rc;
      if (!kf_in(c->v, f->vmin, f->vmax) || !c->ops->has(c->u, f)) continue;
      kf_w_uvarint(c->w, (uint32_t)f->tag);
      at = c->w->len;
      path_push(&c->p, f->name);
      rc = enc_field(c, f);
      path_pop(&c->p);
      if (rc) return rc;
      /* The size precedes the value: insert it now that it is known. */
      kf_w_insert(c->w, at, vb, (size_t)(kf_put_uvarlong(vb, c->w->len - at) - vb));
    }
  }
  if (c->w->err) {
    kf_err_set(c->e, c->w->err, "%s while encoding", c->w->err == KF_ENOMEM ? "out of memory" : "bad value");
    return -1;
  }
  return 0;
}

int kf_schema_encode(const kf_struct *s, int version, int flexible, const kf_enc_ops *ops,
                     void *u, kf_writer *w, kf_err *e) {
  ectx c;
  c.ops = ops;
  c.u = u;
  c.w = w;
  c.e = e;
  c.v = version;
  c.flex = flexible;
  c.p.depth = 0;
  return enc_struct(&c, s);
}

/* ------------------------------------------------------------------ decoding */

typedef struct dctx {
  const kf_dec_ops *ops;
  void *u;
  kf_reader *r;
  kf_err *e;
  int v;
  int flex;
  int depth;
  path p;
} dctx;

static int dec_fail(dctx *c, const kf_field *f, const char *what, size_t at) {
  char ps[160];
  path_format(&c->p, ps, sizeof ps);
  if (c->r->err == KF_EINCOMPLETE || c->r->err == KF_OK)
    kf_err_set(c->e, KF_ECORRUPT, "truncated %s '%s' at byte %zu", what, ps, at);
  else
    kf_err_set(c->e, KF_ECORRUPT, "bad %s '%s' at byte %zu", what, ps, at);
  (void)f;
  return -1;
}

/* Smallest wire size of one element of f, to bound array counts. */
static size_t min_size(const kf_field *f, int v, int flex, int depth) {
  size_t n = 0;
  uint16_t i;
  switch (f->type) {
  case KF_T_BOOL: case KF_T_INT8: return 1;
  case KF_T_INT16: case KF_T_UINT16: return 2;
  case KF_T_INT32: case KF_T_UINT32: return 4;
  case KF_T_INT64: case KF_T_FLOAT64: return 8;
  case KF_T_UUID: return 16;
  case KF_T_STRING: return flex ? 1 : 2;
  case KF_T_BYTES: case KF_T_RECORDS: return flex ? 1 : 4;
  case KF_T_STRUCT:
    if (depth > 8) return 1;
    for (i = 0; i < f->child->nfields - f->child->ntagged; i++) {
      const kf_field *g = &f->child->fields[i];
      if (!kf_in(v, g->vmin, g->vmax)) continue;
      if (g->is_array) n += flex ? 1 : 4;
      else if (g->type == KF_T_STRUCT && kf_in(v, g->nmin, g->nmax)) n += 1;
      else n += min_size(g, v, flex, depth + 1);
    }
    return n + (flex ? 1 : 0);
  default: return 1;
  }
}

static int dec_struct(dctx *c, const kf_struct *s);

static int dec_value(dctx *c, const kf_field *f, int elem, size_t idx) {
  kf_reader *r = c->r;
  const kf_field *key = elem ? NULL : f;
  size_t at = r->pos;
  /* nullableVersions of an array field is the array's: its elements are
   * never null (Kafka's readers refuse a null element, its writers never
   * write one), so a null element is corrupt, not a hole in the array. */
  int nullable = !elem && kf_in(c->v, f->nmin, f->nmax);
  switch (f->type) {
  case KF_T_BOOL: {
    int8_t b = kf_r_i8(r);
    if (r->err) return dec_fail(c, f, "bool", at);
    c->ops->set_bool(c->u, key, idx, b != 0);
    return 0;
  }
  case KF_T_INT8: {
    int8_t x = kf_r_i8(r);
    if (r->err) return dec_fail(c, f, "int8", at);
    c->ops->set_int(c->u, key, idx, x);
    return 0;
  }
  case KF_T_INT16: {
    int16_t x = kf_r_i16(r);
    if (r->err) return dec_fail(c, f, "int16", at);
    c->ops->set_int(c->u, key, idx, x);
    return 0;
  }
  case KF_T_UINT16: {
    uint16_t x = kf_r_u16(r);
    if (r->err) return dec_fail(c, f, "uint16", at);
    c->ops->set_int(c->u, key, idx, x);
    return 0;
  }
  case KF_T_INT32: {
    int32_t x = kf_r_i32(r);
    if (r->err) return dec_fail(c, f, "int32", at);
    c->ops->set_int(c->u, key, idx, x);
    return 0;
  }
  case KF_T_UINT32: {
    uint32_t x = kf_r_u32(r);
    if (r->err) return dec_fail(c, f, "uint32", at);
    c->ops->set_int(c->u, key, idx, x);
    return 0;
  }
  case KF_T_INT64: {
    int64_t x = kf_r_i64(r);
    if (r->err) return dec_fail(c, f, "int64", at);
    c->ops->set_int(c->u, key, idx, x);
    return 0;
  }
  case KF_T_FLOAT64: {
    double d = kf_r_f64(r);
    if (r->err) return dec_fail(c, f, "float64", at);
    c->ops->set_num(c->u, key, idx, d);
    return 0;
  }
  case KF_T_UUID: {
    const uint8_t *p = kf_r_take(r, 16);
    if (!p) return dec_fail(c, f, "uuid", at);
    c->ops->set_bytes(c->u, key, idx, p, 16);
    return 0;
  }
  case KF_T_STRING: case KF_T_BYTES: case KF_T_RECORDS: {
    const uint8_t *p;
    size_t n;
    int kind = c->flex ? 'c' : (f->type == KF_T_STRING ? 16 : 32);
    const char *tn = type_names[f->type];
    if (!kf_r_lenbytes(r, kind, &p, &n)) return dec_fail(c, f, tn, at);
    if (p && f->type == KF_T_STRING && n > 32767) {
      char ps[160];
      path_format(&c->p, ps, sizeof ps);
      kf_err_set(c->e, KF_ECORRUPT, "string '%s' at byte %zu is %zu bytes long, over 32767", ps, at, n);
      return -1;
    }
    if (!p && !nullable) {
      char ps[160];
      path_format(&c->p, ps, sizeof ps);
      kf_err_set(c->e, KF_ECORRUPT, "null %s '%s' at byte %zu is not nullable in v%d", tn, ps, at, c->v);
      return -1;
    }
    if (f->type == KF_T_RECORDS) return c->ops->records(c->u, key, p, n, r->pos - n, c->e);
    if (p) c->ops->set_bytes(c->u, key, idx, p, n);
    else c->ops->set_nil(c->u, key, idx);
    return 0;
  }
  case KF_T_STRUCT: {
    int rc;
    if (nullable && !elem) {
      int8_t m = kf_r_i8(r);
      if (r->err) return dec_fail(c, f, "struct marker", at);
      if (m < 0) {
        c->ops->set_nil(c->u, key, idx);
        return 0;
      }
    }
    if (c->depth >= 32) {
      kf_err_set(c->e, KF_ECORRUPT, "structures nested too deep at byte %zu", at);
      return -1;
    }
    c->depth++;
    c->ops->begin(c->u, key, idx, 0);
    rc = dec_struct(c, f->child);
    c->ops->end(c->u, key, idx);
    c->depth--;
    return rc;
  }
  default:
    kf_err_set(c->e, KF_EUNSUPPORTED, "unknown field type at byte %zu", at);
    return -1;
  }
}

static int dec_field(dctx *c, const kf_field *f) {
  kf_reader *r = c->r;
  size_t at = r->pos, i;
  int64_t n;
  int rc = 0;
  if (!f->is_array) return dec_value(c, f, 0, 0);
  n = kf_r_count(r, c->flex ? 'c' : 32, min_size(f, c->v, c->flex, 0));
  if (r->err) return dec_fail(c, f, "array length", at);
  if (n < 0) {
    if (!kf_in(c->v, f->nmin, f->nmax)) {
      char ps[160];
      path_format(&c->p, ps, sizeof ps);
      kf_err_set(c->e, KF_ECORRUPT, "null array '%s' at byte %zu is not nullable in v%d", ps, at, c->v);
      return -1;
    }
    c->ops->set_nil(c->u, f, 0);
    return 0;
  }
  c->ops->begin(c->u, f, 0, (size_t)n);
  for (i = 0; i < (size_t)n; i++) {
    path_elem(&c->p, i);
    rc = dec_value(c, f, 1, i);
    if (rc) break;
  }
  path_elem(&c->p, (size_t)-1);
  c->ops->end(c->u, f, 0);
  return rc;
}

static int dec_struct(dctx *c, const kf_struct *s) {
  kf_reader *r = c->r;
  uint16_t i, nreg = (uint16_t)(s->nfields - s->ntagged);
  for (i = 0; i < nreg; i++) {
    const kf_field *f = &s->fields[i];
    int rc;
    if (!kf_in(c->v, f->vmin, f->vmax)) continue;
    path_push(&c->p, f->name);
    rc = dec_field(c, f);
    path_pop(&c->p);
    if (rc) return rc;
  }
  if (c->flex) {
    size_t at = r->pos;
    uint32_t ntag = kf_r_uvarint(r), k;
    int64_t last = -1;
    if (r->err) {
      kf_err_set(c->e, KF_ECORRUPT, "truncated tagged field count in %s at byte %zu", s->name, at);
      return -1;
    }
    if (ntag > kf_r_left(r) / 2) {
      kf_err_set(c->e, KF_ECORRUPT, "tagged field count %u in %s at byte %zu exceeds the bytes left",
                 ntag, s->name, at);
      return -1;
    }
    for (k = 0; k < ntag; k++) {
      uint32_t tag, size;
      size_t saved_len;
      const kf_field *f = NULL;
      at = r->pos;
      tag = kf_r_uvarint(r);
      size = kf_r_uvarint(r);
      if (r->err || !(size <= kf_r_left(r))) {
        kf_err_set(c->e, KF_ECORRUPT, "truncated tagged field in %s at byte %zu", s->name, at);
        return -1;
      }
      if ((int64_t)tag <= last) {
        kf_err_set(c->e, KF_ECORRUPT, "tagged fields out of order in %s at byte %zu", s->name, at);
        return -1;
      }
      last = tag;
      for (i = nreg; i < s->nfields; i++)
        if ((uint32_t)s->fields[i].tag == tag && kf_in(c->v, s->fields[i].vmin, s->fields[i].vmax))
          f = &s->fields[i];
      if (!f) { /* unknown tag: skip, as Kafka does */
        r->pos += size;
        continue;
      }
      saved_len = r->len;
      r->len = r->pos + size; /* the field cannot read past its size */
      path_push(&c->p, f->name);
      if (dec_field(c, f)) {
        path_pop(&c->p);
        r->len = saved_len;
        return -1;
      }
      path_pop(&c->p);
      if (r->pos != r->len) {
        kf_err_set(c->e, KF_ECORRUPT, "tagged field %s in %s at byte %zu has %zu bytes left over",
                   f->name, s->name, at, r->len - r->pos);
        r->len = saved_len;
        return -1;
      }
      r->len = saved_len;
    }
  }
  return 0;
}

static int schema_decode(const kf_struct *s, int version, int flexible, const kf_dec_ops *ops,
                         void *u, kf_reader *r, int allow_trailing, kf_err *e) {
  dctx c;
  c.ops = ops;
  c.u = u;
  c.r = r;
  c.e = e;
  c.v = version;
  c.flex = flexible;
  c.depth = 0;
  c.p.depth = 0;
  if (dec_struct(&c, s)) return -1;
  if (kf_r_left(r) != 0 && !allow_trailing) {
    kf_err_set(e, KF_ECORRUPT, "%zu unexpected bytes after the %s body at byte %zu", kf_r_left(r),
               s->name, r->pos);
    return -1;
  }
  return 0;
}

int kf_schema_decode(const kf_struct *s, int version, int flexible, const kf_dec_ops *ops,
                     void *u, kf_reader *r, kf_err *e) {
  return schema_decode(s, version, flexible, ops, u, r, 0, e);
}

/* ------------------------------------------------------- data structures */

int kf_data_encode(const kf_data *d, int version, int bare, const kf_enc_ops *ops, void *u,
                   kf_writer *w, kf_err *e) {
  if (version < d->min || version > d->max) {
    kf_err_set(e, KF_EUNSUPPORTED, "%s supports versions %d-%d, not %d", d->name, (int)d->min,
               (int)d->max, version);
    return -1;
  }
  if (!bare) kf_w_i16(w, (int16_t)version);
  return kf_schema_encode(d->s, version, version >= d->flex, ops, u, w, e);
}

int kf_data_decode(const kf_data *d, int bare_version, const kf_dec_ops *ops, void *u,
                   kf_reader *r, int *version, kf_err *e) {
  int v = bare_version, as;
  if (v < 0) {
    v = kf_r_i16(r);
    if (r->err) {
      kf_err_set(e, KF_ECORRUPT, "truncated %s: no int16 version at byte %zu", d->name, r->pos);
      return -1;
    }
  }
  *version = v;
  if (v < d->min || (bare_version >= 0 && v > d->max)) {
    kf_err_set(e, KF_EUNSUPPORTED, "unsupported %s version %d (this codec has %d-%d)", d->name, v,
               (int)d->min, (int)d->max);
    return -1;
  }
  as = v > d->max ? d->max : v; /* a newer version: its prefix is the newest one known */
  return schema_decode(d->s, as, as >= d->flex, ops, u, r, v > d->max, e);
}

/* -------------------------------------------------------------- headers */

int kf_frame_check(const uint8_t *p, size_t n, kf_err *e) {
  int32_t size;
  if (n < 4) {
    kf_err_set(e, KF_EINCOMPLETE, "incomplete frame: %zu bytes, the size prefix needs 4", n);
    return -1;
  }
  size = (int32_t)kf_be32(p);
  if (size < 0) {
    kf_err_set(e, KF_ECORRUPT, "negative frame size %d at byte 0", (int)size);
    return -1;
  }
  if ((size_t)size > n - 4) {
    kf_err_set(e, KF_EINCOMPLETE, "incomplete frame: size prefix says %d bytes, %zu present", (int)size,
               n - 4);
    return -1;
  }
  if ((size_t)size < n - 4) {
    kf_err_set(e, KF_ECORRUPT, "%zu bytes after the end of the frame (size %d)", n - 4 - (size_t)size,
               (int)size);
    return -1;
  }
  return 0;
}

/* Skips a header's tagged-field section: nothing in it is ours. */
static int skip_tags(kf_reader *r) {
  uint32_t n = kf_r_uvarint(r), i;
  if (!r->err && n > kf_r_left(r) / 2) kf_r_fail(r, KF_ECORRUPT);
  for (i = 0; i < n && !r->err; i++) {
    uint32_t size;
    (void)kf_r_uvarint(r);
    size = kf_r_uvarint(r);
    kf_r_take(r, size);
  }
  return r->err ? -1 : 0;
}

int kf_read_request_header(kf_reader *r, kf_req_header *h, kf_err *e) {
  int hv;
  memset(h, 0, sizeof *h);
  h->api_key = kf_r_i16(r);
  h->api_version = kf_r_i16(r);
  h->correlation_id = kf_r_i32(r);
  if (r->err) {
    kf_err_set(e, KF_ECORRUPT, "truncated request header at byte %zu", r->pos);
    return -1;
  }
  h->api = kf_api_by_key(h->api_key);
  if (!h->api || h->api_version < h->api->min || h->api_version > h->api->max) {
    kf_err_set(e, KF_EUNSUPPORTED, "unsupported api key %d version %d", (int)h->api_key,
               (int)h->api_version);
    return -1;
  }
  hv = kf_req_header_version(h->api, h->api_version);
  if (hv >= 1 && !kf_r_lenbytes(r, 16, &h->client_id, &h->client_id_len)) {
    kf_err_set(e, KF_ECORRUPT, "truncated client_id at byte 12");
    return -1;
  }
  if (hv >= 2 && skip_tags(r)) {
    kf_err_set(e, KF_ECORRUPT, "bad request header tags at byte %zu", r->pos);
    return -1;
  }
  return 0;
}

void kf_write_request_header(kf_writer *w, const kf_api *a, int version, int32_t correlation_id,
                             const char *client_id, size_t client_id_len) {
  int hv = kf_req_header_version(a, version);
  kf_w_i16(w, a->key);
  kf_w_i16(w, (int16_t)version);
  kf_w_i32(w, correlation_id);
  if (hv >= 1) kf_w_lenbytes(w, 16, client_id, client_id_len);
  if (hv >= 2) kf_w_uvarint(w, 0);
}

void kf_write_response_header(kf_writer *w, int hv, int32_t correlation_id) {
  kf_w_i32(w, correlation_id);
  if (hv >= 1) kf_w_uvarint(w, 0);
}

int kf_read_response_header_tail(kf_reader *r, int hv, kf_err *e) {
  if (hv >= 1) skip_tags(r);
  if (r->err) {
    kf_err_set(e, KF_ECORRUPT, "truncated response header at byte %zu", r->pos);
    return -1;
  }
  return 0;
}

int kf_read_response_header(kf_reader *r, int hv, int32_t *correlation_id, kf_err *e) {
  *correlation_id = kf_r_i32(r);
  if (hv >= 1) skip_tags(r);
  if (r->err) {
    kf_err_set(e, KF_ECORRUPT, "truncated response header at byte %zu", r->pos);
    return -1;
  }
  return 0;
}
