/* crypto.c - thin wrappers over libcrypto (see crypto.h). */
#include "crypto.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static const EVP_MD *md_by_name(const char *alg) {
  if (!alg) return NULL;
  if (!strcasecmp(alg, "sha1") || !strcasecmp(alg, "sha-1")) return EVP_sha1();
  if (!strcasecmp(alg, "sha256") || !strcasecmp(alg, "sha-256")) return EVP_sha256();
  if (!strcasecmp(alg, "sha512") || !strcasecmp(alg, "sha-512")) return EVP_sha512();
  return NULL;
}

size_t kf_md_size(const char *alg) {
  const EVP_MD *md = md_by_name(alg);
  return md ? (size_t)EVP_MD_size(md) : 0;
}

int kf_digest(const char *alg, const void *data, size_t n, unsigned char *out, size_t *outlen) {
  const EVP_MD *md = md_by_name(alg);
  unsigned int len = 0;
  if (!md || !EVP_Digest(data, n, out, &len, md, NULL)) return -1;
  *outlen = len;
  return 0;
}

int kf_hmac(const char *alg, const void *key, size_t klen, const void *data, size_t n,
            unsigned char *out, size_t *outlen) {
  const EVP_MD *md = md_by_name(alg);
  unsigned int len = 0;
  if (!md || klen > INT_MAX) return -1;
  if (!HMAC(md, key, (int)klen, data, n, out, &len)) return -1;
  *outlen = len;
  return 0;
}

int kf_pbkdf2(const char *alg, const void *pass, size_t plen, const void *salt, size_t slen,
              unsigned long iterations, unsigned char *out, size_t outlen) {
  const EVP_MD *md = md_by_name(alg);
  if (!md || plen > INT_MAX || slen > INT_MAX || outlen > INT_MAX || iterations < 1 || iterations > INT_MAX)
    return -1;
  return PKCS5_PBKDF2_HMAC((const char *)pass, (int)plen, (const unsigned char *)salt, (int)slen,
                           (int)iterations, md, (int)outlen, out) == 1 ? 0 : -1;
}

int kf_random(unsigned char *out, size_t n) {
  if (n > INT_MAX) return -1;
  return RAND_bytes(out, (int)n) == 1 ? 0 : -1;
}

size_t kf_b64_encode(const unsigned char *in, size_t n, char *out) {
  /* EVP_EncodeBlock takes an int length: callers keep n well below it */
  return (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

long kf_b64_decode(const char *in, size_t n, unsigned char *out) {
  size_t pad = 0;
  int len;
  if (n % 4 != 0 || n > INT_MAX) return -1;
  if (n == 0) return 0;
  /* EVP_DecodeBlock counts padding as zero bytes: subtract it */
  if (in[n - 1] == '=') pad++;
  if (in[n - 2] == '=') pad++;
  len = EVP_DecodeBlock(out, (const unsigned char *)in, (int)n);
  if (len < 0 || (size_t)len < pad) return -1;
  return (long)((size_t)len - pad);
}

int kf_check_host(const char *pem, size_t n, const char *host) {
  BIO *bio;
  X509 *cert;
  int r;
  if (n > INT_MAX) return -1;
  bio = BIO_new_mem_buf(pem, (int)n);
  if (!bio) return -1;
  cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
  BIO_free(bio);
  if (!cert) return -1;
  /* an IP address literal matches IP SANs only (-2: not an address) */
  r = X509_check_ip_asc(cert, host, 0);
  if (r == -2) r = X509_check_host(cert, host, strlen(host), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, NULL);
  X509_free(cert);
  return r == 1 ? 1 : 0;
}
