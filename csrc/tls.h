/* tls.h - TLS client connections with OpenSSL's libssl over a connected,
 * non-blocking socket descriptor (a luasocket one), for the inbox
 * (lua_bytes.c): the handshake with the chain and the host name verified
 * by OpenSSL itself, reads straight into the caller's memory (a response
 * frame) and writes with the inbox's deadlines. Also the waits the
 * plaintext inbox shares. No lua.h here: errors are a kind and a message.
 */
#ifndef KF_TLS_H
#define KF_TLS_H

#include <stddef.h>
#include <stdint.h>

/* Results of the waits, reads and writes (the inbox's RD_* values). */
enum {
  KF_IO_OK = 1,
  KF_IO_CLOSED = 0,   /* the peer closed (close_notify, or the TCP stream ended) */
  KF_IO_TIMEOUT = -1, /* the deadline passed: a read may be called again */
  KF_IO_ERROR = -2,   /* a system error: errno */
  KF_IO_TLS = -3      /* a TLS error: the message in kf_tls_err */
};

/* Why a handshake failed (beside the KF_IO_* result). */
enum {
  KF_TLS_E_NONE = 0,
  KF_TLS_E_VERIFY, /* the chain is not trusted: verify/depth say why */
  KF_TLS_E_HOST,   /* the certificate does not name the host */
  KF_TLS_E_PROTO   /* any other TLS error (an alert, not TLS at all) */
};

#define KF_TLS_MSG 240

typedef struct kf_tls_err {
  int kind;      /* KF_TLS_E_* */
  long verify;   /* X509_V_ERR_* of a failed verification */
  int depth;     /* where in the chain it failed */
  char msg[KF_TLS_MSG];
} kf_tls_err;

/* A security configuration's settings (kafka.options.security's tls). */
typedef struct kf_tls_conf {
  const char *cafile, *capath; /* the trusted CAs: a PEM file or a hashed directory */
  const char *certificate, *key, *key_password; /* the client's, or NULL */
  int verify_chain;            /* 0: no verification at all */
} kf_tls_conf;

typedef struct kf_tls_ctx kf_tls_ctx; /* an SSL_CTX */
typedef struct kf_tls kf_tls;         /* one connection */

/* A context for conf, or NULL with e->msg saying why (a file that does
 * not load, a wrong key password, a key not matching its certificate). */
kf_tls_ctx *kf_tls_ctx_new(const kf_tls_conf *conf, kf_tls_err *e);
void kf_tls_ctx_free(kf_tls_ctx *c);

/* A connection over fd (not owned) to host: SNI unless host is an IP
 * address; verify_host: the certificate must name host (DNS names with
 * whole-label wildcards only, addresses against IP SANs). NULL: out of
 * memory, e->msg says it. */
kf_tls *kf_tls_new(kf_tls_ctx *c, int fd, const char *host, int verify_host, kf_tls_err *e);
/* Frees it; send_close: a close_notify first (one non-blocking try; only
 * while fd is still open: never from a collector). */
void kf_tls_free(kf_tls *t, int send_close);

/* The handshake, by deadline (ms on kf_mono_ms; -1: none): KF_IO_*. */
int kf_tls_handshake(kf_tls *t, int64_t deadline, kf_tls_err *e);
/* One read of up to n bytes into dst: KF_IO_OK with *got > 0, or why not. */
int kf_tls_read(kf_tls *t, uint8_t *dst, size_t n, int64_t deadline, size_t *got, kf_tls_err *e);
/* Writes all n bytes (*sent: those that went): KF_IO_*. After anything
 * but KF_IO_OK the connection is not to be written again. */
int kf_tls_write(kf_tls *t, const uint8_t *p, size_t n, int64_t deadline, size_t *sent, kf_tls_err *e);
/* The negotiated protocol ("TLSv1.3") and cipher. */
const char *kf_tls_version(const kf_tls *t);
const char *kf_tls_cipher(const kf_tls *t);

/* A monotonic clock in ms. */
int64_t kf_mono_ms(void);
/* Waits until fd is ready for events (POLLIN, POLLOUT) or the deadline
 * passes (-1: none): KF_IO_OK, KF_IO_TIMEOUT or KF_IO_ERROR. */
int kf_wait_fd(int fd, short events, int64_t deadline);

#endif
