/*
 * tls.c - TLS client connections with OpenSSL's libssl (see tls.h).
 * OpenSSL decrypts each record into its own buffer and copies the plain
 * bytes into the caller's (SSL_read_ex), so a response frame is written
 * once, by the decryption's copy; LuaSec went through its buffer, a Lua
 * string per piece and the join of the pieces. Verification is OpenSSL's
 * during the handshake: the chain against the configured CAs, the host
 * name with X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS (as kf_check_host), an
 * IP address against IP SANs; a failure sends the alert and ends the
 * handshake (never a connection left open unverified).
 * Writes go through OpenSSL's socket BIO (write(), no MSG_NOSIGNAL): a
 * peer gone would raise SIGPIPE, which luasocket, whose descriptors these
 * are, sets to be ignored when it loads (socket.core).
 */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct kf_tls_ctx {
  SSL_CTX *ctx;
};

struct kf_tls {
  SSL *ssl;
  int fd;
  int broken;       /* a fatal error was seen: no close_notify then */
  long verify;      /* the first verification error (the callback's) */
  int depth;
};

int64_t kf_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kf_wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    struct pollfd pfd;
    int64_t left = deadline < 0 ? -1 : deadline - kf_mono_ms();
    int pr;
    if (deadline >= 0 && left <= 0) return KF_IO_TIMEOUT;
    pfd.fd = fd;
    pfd.events = events;
    pfd.revents = 0;
    pr = poll(&pfd, 1, left > 2147483647 ? 2147483647 : (int)left);
    if (pr > 0) return KF_IO_OK;
    if (pr == 0) return KF_IO_TIMEOUT;
    if (errno != EINTR) return KF_IO_ERROR;
  }
}

static void set_msg(kf_tls_err *e, int kind, const char *what, const char *detail) {
  e->kind = kind;
  snprintf(e->msg, sizeof e->msg, "%s%s%s", what, detail && *detail ? ": " : "", detail ? detail : "");
}

/* The reason of the oldest error in OpenSSL's queue (the one that says
 * why), or what when it is empty; clears the queue. */
static void ssl_msg(kf_tls_err *e, int kind, const char *what) {
  unsigned long code = ERR_peek_error();
  const char *r = code ? ERR_reason_error_string(code) : NULL;
  char buf[120];
  if (code && !r) {
    ERR_error_string_n(code, buf, sizeof buf);
    r = buf;
  }
  if (r) set_msg(e, kind, r, NULL);
  else set_msg(e, kind, what, NULL);
  ERR_clear_error();
}

/* Key passwords come from the configuration only: never a prompt on the
 * terminal (OpenSSL's default callback asks there when it has none). */
static int password_cb(char *buf, int size, int rwflag, void *u) {
  size_t n;
  (void)rwflag;
  if (!u || size <= 0) return -1;
  n = strlen((const char *)u);
  if (n > (size_t)size) return -1;
  memcpy(buf, u, n);
  return (int)n;
}

kf_tls_ctx *kf_tls_ctx_new(const kf_tls_conf *conf, kf_tls_err *e) {
  kf_tls_ctx *c = (kf_tls_ctx *)malloc(sizeof *c);
  SSL_CTX *ctx;
  memset(e, 0, sizeof *e);
  if (!c) {
    set_msg(e, KF_TLS_E_PROTO, "out of memory", NULL);
    return NULL;
  }
  ERR_clear_error();
  ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) {
    free(c);
    ssl_msg(e, KF_TLS_E_PROTO, "SSL_CTX_new failed");
    return NULL;
  }
  c->ctx = ctx;
  /* TLS 1.2 and 1.3, as LuaSec's no_tlsv1/no_tlsv1_1 and Kafka's default */
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) goto fail;
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION);
  /* read ahead: one read() takes whatever the kernel holds, up to the
   * buffer, not one record header then one record */
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 65536);
  SSL_CTX_set_verify(ctx, conf->verify_chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
  if (conf->cafile || conf->capath) {
    if (SSL_CTX_load_verify_locations(ctx, conf->cafile, conf->capath) != 1) goto fail;
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    goto fail;
  }
  SSL_CTX_set_default_passwd_cb(ctx, password_cb);
  if (conf->certificate && SSL_CTX_use_certificate_chain_file(ctx, conf->certificate) != 1) goto fail;
  if (conf->key) {
    SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)conf->key_password);
    if (SSL_CTX_use_PrivateKey_file(ctx, conf->key, SSL_FILETYPE_PEM) != 1) {
      SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
      goto fail;
    }
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL); /* the password is not kept */
    if (SSL_CTX_check_private_key(ctx) != 1) goto fail;
  }
  return c;
fail:
  ssl_msg(e, KF_TLS_E_PROTO, "cannot load the TLS settings");
  SSL_CTX_free(ctx);
  free(c);
  return NULL;
}

void kf_tls_ctx_free(kf_tls_ctx *c) {
  if (!c) return;
  SSL_CTX_free(c->ctx);
  free(c);
}

/* Keeps the first verification error and its depth (for the message);
 * the result stays OpenSSL's: a failure ends the handshake. */
static int verify_cb(int ok, X509_STORE_CTX *store) {
  SSL *ssl = (SSL *)X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
  kf_tls *t = ssl ? (kf_tls *)SSL_get_app_data(ssl) : NULL;
  if (!ok && t && t->verify == X509_V_OK) {
    t->verify = X509_STORE_CTX_get_error(store);
    t->depth = X509_STORE_CTX_get_error_depth(store);
  }
  return ok;
}

static int is_ip(const char *host) {
  unsigned char a[16];
  return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

kf_tls *kf_tls_new(kf_tls_ctx *c, int fd, const char *host, int verify_host, kf_tls_err *e) {
  kf_tls *t = (kf_tls *)calloc(1, sizeof *t);
  int ip = is_ip(host);
  memset(e, 0, sizeof *e);
  if (!t) {
    set_msg(e, KF_TLS_E_PROTO, "out of memory", NULL);
    return NULL;
  }
  ERR_clear_error();
  t->ssl = SSL_new(c->ctx);
  t->fd = fd;
  t->verify = X509_V_OK;
  if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) goto fail;
  SSL_set_app_data(t->ssl, t);
  if (!ip && SSL_set_tlsext_host_name(t->ssl, host) != 1) goto fail;
  if (verify_host) {
    X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (ip) {
      if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1) goto fail;
    } else if (SSL_set1_host(t->ssl, host) != 1) {
      goto fail;
    }
  }
  /* with verification off nothing is recorded: nothing refuses */
  if (SSL_CTX_get_verify_mode(c->ctx) & SSL_VERIFY_PEER) SSL_set_verify(t->ssl, SSL_VERIFY_PEER, verify_cb);
  SSL_set_connect_state(t->ssl);
  return t;
fail:
  ssl_msg(e, KF_TLS_E_PROTO, "cannot set up the TLS connection");
  if (t->ssl) SSL_free(t->ssl);
  free(t);
  return NULL;
}

void kf_tls_free(kf_tls *t, int send_close) {
  if (!t) return;
  if (send_close && !t->broken && SSL_is_init_finished(t->ssl)) {
    ERR_clear_error();
    (void)SSL_shutdown(t->ssl); /* our close_notify; the peer's is not waited for */
  }
  ERR_clear_error();
  SSL_free(t->ssl);
  free(t);
}

/* After an SSL_* call returned r: KF_IO_OK to call again (it waited for
 * what it wants), else the result (e filled for KF_IO_TLS). */
static int after(kf_tls *t, int r, int64_t deadline, kf_tls_err *e) {
  int se = SSL_get_error(t->ssl, r);
  switch (se) {
  case SSL_ERROR_WANT_READ:
    return kf_wait_fd(t->fd, POLLIN, deadline);
  case SSL_ERROR_WANT_WRITE:
    return kf_wait_fd(t->fd, POLLOUT, deadline);
  case SSL_ERROR_ZERO_RETURN: /* the peer's close_notify */
    t->broken = 1;
    ERR_clear_error();
    return KF_IO_CLOSED;
  case SSL_ERROR_SYSCALL:
    t->broken = 1;
    if (ERR_peek_error() == 0) {
      ERR_clear_error();
      if (errno == 0 || errno == EPIPE || errno == ECONNRESET) return KF_IO_CLOSED;
      return KF_IO_ERROR;
    }
    ssl_msg(e, KF_TLS_E_PROTO, "TLS error");
    return KF_IO_TLS;
  default: {
    unsigned long code = ERR_peek_error();
    t->broken = 1;
    /* the stream ended inside a record or without close_notify: as a
     * plain connection's end (a broker closing an idle connection does) */
    if (ERR_GET_LIB(code) == ERR_LIB_SSL && ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
      ERR_clear_error();
      return KF_IO_CLOSED;
    }
    ssl_msg(e, KF_TLS_E_PROTO, "TLS error");
    return KF_IO_TLS;
  }
  }
}

int kf_tls_handshake(kf_tls *t, int64_t deadline, kf_tls_err *e) {
  memset(e, 0, sizeof *e);
  for (;;) {
    int r, rc;
    errno = 0;
    ERR_clear_error();
    r = SSL_connect(t->ssl);
    if (r == 1) return KF_IO_OK;
    if (t->verify != X509_V_OK) {
      /* the chain or the name refused (OpenSSL sent the alert) */
      const char *why = X509_verify_cert_error_string(t->verify);
      t->broken = 1;
      ERR_clear_error();
      e->verify = t->verify;
      e->depth = t->depth;
      set_msg(e, (t->verify == X509_V_ERR_HOSTNAME_MISMATCH || t->verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
                   ? KF_TLS_E_HOST : KF_TLS_E_VERIFY, why, NULL);
      return KF_IO_TLS;
    }
    rc = after(t, r, deadline, e);
    if (rc != KF_IO_OK) return rc;
  }
}

int kf_tls_read(kf_tls *t, uint8_t *dst, size_t n, int64_t deadline, size_t *got, kf_tls_err *e) {
  *got = 0;
  for (;;) {
    size_t r = 0;
    int rc;
    errno = 0;
    ERR_clear_error();
    if (SSL_read_ex(t->ssl, dst, n, &r) == 1) {
      *got = r;
      return KF_IO_OK;
    }
    rc = after(t, 0, deadline, e);
    if (rc != KF_IO_OK) return rc;
  }
}

int kf_tls_write(kf_tls *t, const uint8_t *p, size_t n, int64_t deadline, size_t *sent, kf_tls_err *e) {
  *sent = 0;
  while (*sent < n) {
    size_t w = 0;
    int rc;
    errno = 0;
    ERR_clear_error();
    /* a retry after WANT_* passes the same bytes, as OpenSSL requires */
    if (SSL_write_ex(t->ssl, p + *sent, n - *sent, &w) == 1) {
      *sent += w;
      continue;
    }
    rc = after(t, 0, deadline, e);
    if (rc != KF_IO_OK) return rc;
  }
  return KF_IO_OK;
}

const char *kf_tls_version(const kf_tls *t) { return SSL_get_version(t->ssl); }

const char *kf_tls_cipher(const kf_tls *t) {
  const char *c = SSL_get_cipher_name(t->ssl);
  return c ? c : "";
}
