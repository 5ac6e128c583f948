/* crypto.h - the few primitives SASL and TLS need, all from OpenSSL's
 * libcrypto (nothing hand-written): digests, HMAC, PBKDF2, a CSPRNG,
 * base64 and the host name check of a peer certificate. No lua.h here. */
#ifndef KF_CRYPTO_H
#define KF_CRYPTO_H

#include <stddef.h>

#define KF_MD_MAX 64 /* the largest digest (SHA-512) */

/* A digest by Kafka's/SCRAM's name: "sha1", "sha256", "sha512" (case
 * insensitive, "SHA-256" also). Returns its size, 0 when unknown. */
size_t kf_md_size(const char *alg);

/* Each returns 0 on success, -1 on failure (unknown algorithm, OpenSSL error). */
int kf_digest(const char *alg, const void *data, size_t n, unsigned char *out, size_t *outlen);
int kf_hmac(const char *alg, const void *key, size_t klen, const void *data, size_t n,
            unsigned char *out, size_t *outlen);
int kf_pbkdf2(const char *alg, const void *pass, size_t plen, const void *salt, size_t slen,
              unsigned long iterations, unsigned char *out, size_t outlen);
int kf_random(unsigned char *out, size_t n);

/* Standard base64 with padding. kf_b64_encode writes 4*ceil(n/3) bytes (+ NUL);
 * kf_b64_decode returns the decoded length or -1 on bad input (out holds
 * 3*n/4 bytes). */
size_t kf_b64_encode(const unsigned char *in, size_t n, char *out);
long kf_b64_decode(const char *in, size_t n, unsigned char *out);

/* Host name verification of a PEM certificate (RFC 6125 as OpenSSL does it:
 * IP addresses against IP SANs only; names against DNS SANs, wildcards only
 * as a whole left-most label, the subject CN only when there are no DNS SANs).
 * Returns 1 match, 0 mismatch, -1 the PEM does not parse. */
int kf_check_host(const char *pem, size_t n, const char *host);

#endif
