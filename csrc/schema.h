/*
 * schema.h - the data-driven protocol interpreter.
 *
 * Field tables (csrc/apis.c, generated from Kafka's JSON definitions) say
 * for every field its name, wire type, the versions it exists in, when it
 * is nullable and when it is tagged. One walker encodes and one decodes any
 * (api, version); flexible versions switch to compact lengths and add
 * tagged-field sections. The walkers never see Lua: they talk to a small
 * visitor that the glue (lua_schema.c, over Lua tables) and the fuzz
 * harnesses implement, so the tables can be tested and fuzzed in C alone.
 */
#ifndef KF_SCHEMA_H
#define KF_SCHEMA_H

#include "buf.h"

enum {
  KF_T_BOOL, KF_T_INT8, KF_T_INT16, KF_T_UINT16, KF_T_INT32, KF_T_UINT32, KF_T_INT64,
  KF_T_FLOAT64, KF_T_UUID, KF_T_STRING, KF_T_BYTES, KF_T_RECORDS, KF_T_STRUCT
};

struct kf_struct;

typedef struct kf_field {
  const char *name; /* Kafka's name in snake_case */
  uint8_t type;
  uint8_t is_array;
  int16_t vmin, vmax; /* versions the field exists in */
  int16_t nmin, nmax; /* versions it is nullable in (nmin > nmax: never) */
  int16_t tmin, tmax; /* versions it is a tagged field in */
  int32_t tag;
  const struct kf_struct *child; /* KF_T_STRUCT */
  int64_t def_int;               /* default of integer and bool fields */
  double def_num;                /* default of float64 fields */
  const char *def_str;           /* default of string fields (NULL: "") */
  uint8_t def_null;              /* the default is null */
} kf_field;

typedef struct kf_struct {
  const char *name;
  uint16_t nfields;
  uint16_t ntagged; /* the last ntagged fields are tagged, sorted by tag */
  const kf_field *fields;
} kf_struct;

typedef struct kf_api {
  int16_t key;
  const char *name;  /* "Produce" */
  const char *snake; /* "produce" */
  int16_t min, max;
  int16_t req_flex, resp_flex; /* first flexible version (0x7fff: never) */
  const kf_struct *req, *resp;
} kf_api;

extern const kf_api kf_apis[];
extern const size_t kf_napis;

/* The old name of a renamed API (ListClientMetricsResources, key 74). */
typedef struct kf_api_alias {
  const char *name, *snake;
  int16_t key;
} kf_api_alias;
extern const kf_api_alias kf_api_aliases[]; /* ends with a NULL name */

/* A structure carried inside other messages (Kafka's type "data":
 * ConsumerProtocolSubscription, EndTxnMarker, ...). */
typedef struct kf_data {
  const char *name;  /* "ConsumerProtocolSubscription" */
  const char *snake; /* "consumer_protocol_subscription" */
  int16_t min, max;
  int16_t flex; /* first flexible version (0x7fff: never) */
  const kf_struct *s;
} kf_data;
extern const kf_data kf_datas[];
extern const size_t kf_ndatas;

const kf_api *kf_api_by_key(int key);
/* By name or snake_case name, old names of renamed APIs included. */
const kf_api *kf_api_by_name(const char *name);
const kf_data *kf_data_by_name(const char *name);
/* Request header version (0, 1 or 2) and response header version (0 or 1). */
int kf_req_header_version(const kf_api *a, int version);
int kf_resp_header_version(const kf_api *a, int version);

static inline int kf_in(int v, int lo, int hi) { return lo <= v && v <= hi; }

/*
 * Encoding reads values through kf_enc_ops. Each getter looks a field up in
 * the current struct (f != NULL) or takes the current array element
 * (f == NULL). Return KF_V_OK, KF_V_NIL (absent or null) or KF_V_BAD (wrong
 * type; the glue raises instead of returning it when it can).
 */
enum { KF_V_OK = 0, KF_V_NIL = 1, KF_V_BAD = 2 };

typedef struct kf_enc_ops {
  int (*get_int)(void *u, const kf_field *f, int64_t *v);
  int (*get_num)(void *u, const kf_field *f, double *v);
  int (*get_bool)(void *u, const kf_field *f, int *v);
  int (*get_bytes)(void *u, const kf_field *f, const uint8_t **p, size_t *n);
  /* Makes the struct/array value current; *n gets the array length. */
  int (*enter)(void *u, const kf_field *f, size_t *n);
  /* Makes element i (0-based) of the current array current. */
  int (*enter_elem)(void *u, size_t i);
  void (*leave)(void *u);
  /* Whether a field has a non-nil value (tagged fields are written only then). */
  int (*has)(void *u, const kf_field *f);
  /* Appends a records value (string or message table) as length-prefixed
   * bytes: kind 32 (int32) or 'c' (compact). */
  int (*records)(void *u, const kf_field *f, kf_writer *w, int kind, int nullable, kf_err *e);
} kf_enc_ops;

/*
 * Decoding reports through kf_dec_ops. f is the field; for array elements
 * f is NULL and idx is the 0-based element index.
 */
typedef struct kf_dec_ops {
  void (*set_int)(void *u, const kf_field *f, size_t idx, int64_t v);
  void (*set_num)(void *u, const kf_field *f, size_t idx, double v);
  void (*set_bool)(void *u, const kf_field *f, size_t idx, int v);
  void (*set_bytes)(void *u, const kf_field *f, size_t idx, const uint8_t *p, size_t n);
  void (*set_nil)(void *u, const kf_field *f, size_t idx);
  void (*begin)(void *u, const kf_field *f, size_t idx, size_t n); /* struct or array */
  void (*end)(void *u, const kf_field *f, size_t idx);
  /* A records field: p == NULL is null. Returns 0 or -1 with e set. */
  int (*records)(void *u, const kf_field *f, const uint8_t *p, size_t n, size_t at, kf_err *e);
} kf_dec_ops;

/* Encodes the body of s at version v (flexible: compact forms + tags). */
int kf_schema_encode(const kf_struct *s, int version, int flexible, const kf_enc_ops *ops,
                     void *u, kf_writer *w, kf_err *e);
/* Decodes a body. The reader's offsets are reported in errors, so pass a
 * reader over the whole frame positioned at the body. Trailing bytes after
 * the body are an error. */
int kf_schema_decode(const kf_struct *s, int version, int flexible, const kf_dec_ops *ops,
                     void *u, kf_reader *r, kf_err *e);

/*
 * Data structures (kf_datas) travel inside other messages, in two forms:
 * - version-prefixed (the consumer protocol's subscription and assignment,
 *   a transaction marker's control record value): an int16 version, then
 *   the struct at that version;
 * - bare (LeaderChangeMessage, the KRaft records): the struct alone, its
 *   version known from elsewhere.
 * kf_data_encode writes the int16 prefix unless bare. kf_data_decode reads
 * it when bare_version < 0 (else decodes the bare struct at bare_version)
 * and sets *version. A prefixed version above d->max is decoded as d->max
 * and the bytes after that prefix are ignored, as Kafka's Java client does
 * (ConsumerProtocol.deserializeSubscription, EndTransactionMarker): new
 * versions only append fields. A negative version is KF_EUNSUPPORTED;
 * trailing bytes after a known version are KF_ECORRUPT.
 */
int kf_data_encode(const kf_data *d, int version, int bare, const kf_enc_ops *ops, void *u,
                   kf_writer *w, kf_err *e);
int kf_data_decode(const kf_data *d, int bare_version, const kf_dec_ops *ops, void *u,
                   kf_reader *r, int *version, kf_err *e);

/* Frames: a 4-byte size, then the header, then the body. */
typedef struct kf_req_header {
  const kf_api *api;
  int16_t api_key;
  int16_t api_version;
  int32_t correlation_id;
  const uint8_t *client_id; /* NULL: null (or header v0) */
  size_t client_id_len;
} kf_req_header;

/* Checks that p[0..n) is exactly one frame: KF_EINCOMPLETE when shorter than
 * its size prefix, KF_ECORRUPT when negative or followed by extra bytes. */
int kf_frame_check(const uint8_t *p, size_t n, kf_err *e);
/* Reads a request header (r positioned after the size). An api or version
 * this codec does not have is KF_EUNSUPPORTED. On success r is at the body. */
int kf_read_request_header(kf_reader *r, kf_req_header *h, kf_err *e);
/* Writes a request header (after the size slot): api key, version,
 * correlation id, then client_id (v1+, NULL: null) and empty tags (v2). */
void kf_write_request_header(kf_writer *w, const kf_api *a, int version, int32_t correlation_id,
                             const char *client_id, size_t client_id_len);
/* Writes a response header of version hv: the correlation id, empty tags (v1). */
void kf_write_response_header(kf_writer *w, int hv, int32_t correlation_id);
/* Reads a response header of version hv (0 or 1). */
int kf_read_response_header(kf_reader *r, int hv, int32_t *correlation_id, kf_err *e);
/* The rest of a response header whose correlation id was read already (a
 * socket reader checks it before reading the frame): its tagged fields. */
int kf_read_response_header_tail(kf_reader *r, int hv, kf_err *e);

#endif
