/* compress.h - the four Kafka codecs behind one interface. Every
 * decompression takes an output limit and fails with KF_ELIMIT past it. */
#ifndef KF_COMPRESS_H
#define KF_COMPRESS_H

#include "buf.h"

enum { KF_CODEC_NONE = 0, KF_CODEC_GZIP = 1, KF_CODEC_SNAPPY = 2, KF_CODEC_LZ4 = 3,
       KF_CODEC_ZSTD = 4 };

const char *kf_codec_name(int codec);
/* Codec number for a name ("none", "gzip", "snappy", "lz4", "zstd"), or -1. */
int kf_codec_by_name(const char *name);

/* Appends the compressed form of in[0..n) to out. lz4_legacy writes the
 * header checksum the way Kafka 0.8-0.9 computed it (for magic 0). */
int kf_compress(int codec, const uint8_t *in, size_t n, kf_writer *out, int lz4_legacy,
                kf_err *e);
/* Appends the decompressed form to out; at most `limit` bytes are produced.
 * gzip reads gzip or zlib streams; snappy reads raw blocks and the xerial
 * framing; lz4 accepts the KAFKA-3160 header checksum. */
int kf_decompress(int codec, const uint8_t *in, size_t n, kf_writer *out, size_t limit,
                  kf_err *e);

/* XXH32, needed to check and fix LZ4 frame header checksums. */
uint32_t kf_xxh32(const void *p, size_t n, uint32_t seed);

#endif
