/* compress.c - gzip (zlib), snappy (snappy-c), lz4 (frame API), zstd. */
#include "compress.h"

#include <lz4frame.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

static const char *const codec_names[] = {"none", "gzip", "snappy", "lz4", "zstd"};

const char *kf_codec_name(int codec) {
  return codec >= 0 && codec <= 4 ? codec_names[codec] : "unknown";
}

int kf_codec_by_name(const char *name) {
  int i;
  for (i = 0; i <= 4; i++)
    if (strcmp(name, codec_names[i]) == 0) return i;
  return -1;
}

/* ---- XXH32 (public-domain algorithm by Yann Collet) ---- */
#define XXP1 2654435761u
#define XXP2 2246822519u
#define XXP3 3266489917u
#define XXP4 668265263u
#define XXP5 374761393u
static uint32_t xx_rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
static uint32_t xx_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint32_t xx_round(uint32_t acc, uint32_t in) {
  return xx_rotl(acc + in * XXP2, 13) * XXP1;
}

uint32_t kf_xxh32(const void *data, size_t n, uint32_t seed) {
  const uint8_t *p = (const uint8_t *)data, *end = p + n;
  uint32_t h;
  if (n >= 16) {
    uint32_t v1 = seed + XXP1 + XXP2, v2 = seed + XXP2, v3 = seed, v4 = seed - XXP1;
    while ((size_t)(end - p) >= 16) {
      v1 = xx_round(v1, xx_le32(p));
      v2 = xx_round(v2, xx_le32(p + 4));
      v3 = xx_round(v3, xx_le32(p + 8));
      v4 = xx_round(v4, xx_le32(p + 12));
      p += 16;
    }
    h = xx_rotl(v1, 1) + xx_rotl(v2, 7) + xx_rotl(v3, 12) + xx_rotl(v4, 18);
  } else {
    h = seed + XXP5;
  }
  h += (uint32_t)n;
  while ((size_t)(end - p) >= 4) {
    h = xx_rotl(h + xx_le32(p) * XXP3, 17) * XXP4;
    p += 4;
  }
  while (p < end) {
    h = xx_rotl(h + (*p++) * XXP5, 11) * XXP1;
  }
  h ^= h >> 15;
  h *= XXP2;
  h ^= h >> 13;
  h *= XXP3;
  h ^= h >> 16;
  return h;
}

/* ---- gzip ---- */
static int gzip_compress(const uint8_t *in, size_t n, kf_writer *out, kf_err *e) {
  z_stream zs;
  int rc = Z_STREAM_ERROR;
  memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    kf_err_set(e, KF_ENOMEM, "gzip: deflateInit failed");
    return -1;
  }
  zs.next_in = (Bytef *)(uintptr_t)in;
  zs.avail_in = (uInt)n; /* callers never pass >4 GiB: records are int32-sized */
  do {
    size_t room = deflateBound(&zs, zs.avail_in) + 64;
    uint8_t *p = kf_w_reserve(out, room);
    if (!p) break;
    zs.next_out = p;
    zs.avail_out = (uInt)room;
    rc = deflate(&zs, Z_FINISH);
    out->len += room - zs.avail_out;
  } while (rc == Z_OK || rc == Z_BUF_ERROR);
  deflateEnd(&zs);
  if (out->err || rc != Z_STREAM_END) {
    kf_err_set(e, out->err ? out->err : KF_ECORRUPT, "gzip: compression failed");
    return -1;
  }
  return 0;
}

static int gzip_decompress(const uint8_t *in, size_t n, kf_writer *out, size_t limit,
                           kf_err *e) {
  z_stream zs;
  size_t produced = 0;
  memset(&zs, 0, sizeof zs);
  if (n > 0xffffffffu) {
    kf_err_set(e, KF_ELIMIT, "gzip: input too large");
    return -1;
  }
  if (inflateInit2(&zs, 15 + 32) != Z_OK) { /* +32: gzip or zlib header */
    kf_err_set(e, KF_ENOMEM, "gzip: inflateInit failed");
    return -1;
  }
  zs.next_in = (Bytef *)(uintptr_t)in;
  zs.avail_in = (uInt)n;
  for (;;) {
    size_t room = n * 4 + 1024, before;
    uint8_t *p;
    int rc;
    if (room > 1u << 20) room = 1u << 20;
    if (room > limit - produced + 1) room = limit - produced + 1; /* +1 detects overflow */
    p = kf_w_reserve(out, room);
    if (!p) {
      kf_err_set(e, KF_ENOMEM, "gzip: out of memory");
      break;
    }
    zs.next_out = p;
    zs.avail_out = (uInt)room;
    before = room;
    rc = inflate(&zs, Z_NO_FLUSH);
    out->len += before - zs.avail_out;
    produced += before - zs.avail_out;
    if (produced > limit) {
      kf_err_set(e, KF_ELIMIT, "gzip: decompressed size exceeds the limit of %zu bytes", limit);
      break;
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      /* concatenated gzip members */
      if (inflateReset(&zs) != Z_OK) break;
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      kf_err_set(e, KF_ECORRUPT, "gzip: truncated stream");
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      kf_err_set(e, KF_ECORRUPT, "gzip: %s", zs.msg ? zs.msg : "corrupt stream");
      break;
    }
  }
  inflateEnd(&zs);
  return e->code ? -1 : 0;
}

/* ---- snappy ---- */
static const uint8_t xerial_magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

static int snappy_block(const uint8_t *in, size_t n, kf_writer *out, size_t *left,
                        kf_err *e) {
  size_t ulen;
  uint8_t *p;
  if (snappy_uncompressed_length((const char *)in, n, &ulen) != SNAPPY_OK) {
    kf_err_set(e, KF_ECORRUPT, "snappy: bad block header");
    return -1;
  }
  if (ulen > *left) {
    kf_err_set(e, KF_ELIMIT, "snappy: decompressed size exceeds the limit");
    return -1;
  }
  p = kf_w_reserve(out, ulen + 1);
  if (!p) {
    kf_err_set(e, KF_ENOMEM, "snappy: out of memory");
    return -1;
  }
  if (snappy_uncompress((const char *)in, n, (char *)p, &ulen) != SNAPPY_OK) {
    kf_err_set(e, KF_ECORRUPT, "snappy: corrupt block");
    return -1;
  }
  out->len += ulen;
  *left -= ulen;
  return 0;
}

static int snappy_decompress(const uint8_t *in, size_t n, kf_writer *out, size_t limit,
                             kf_err *e) {
  size_t left = limit;
  if (n >= 16 && memcmp(in, xerial_magic, 8) == 0) {
    /* xerial framing: magic, version, compatible version, [int32 len, block]... */
    size_t pos = 16;
    while (pos < n) {
      uint32_t clen;
      if (!(4 <= n - pos)) {
        kf_err_set(e, KF_ECORRUPT, "snappy: truncated xerial chunk header at byte %zu", pos);
        return -1;
      }
      clen = kf_be32(in + pos);
      pos += 4;
      if (!(clen <= n - pos)) {
        kf_err_set(e, KF_ECORRUPT, "snappy: xerial chunk of %u bytes at byte %zu runs past the end",
                   clen, pos - 4);
        return -1;
      }
      if (snappy_block(in + pos, clen, out, &left, e)) return -1;
      pos += clen;
    }
    return 0;
  }
  return snappy_block(in, n, out, &left, e);
}

static int snappy_compress_raw(const uint8_t *in, size_t n, kf_writer *out, kf_err *e) {
  size_t clen = snappy_max_compressed_length(n);
  uint8_t *p = kf_w_reserve(out, clen);
  if (!p) {
    kf_err_set(e, KF_ENOMEM, "snappy: out of memory");
    return -1;
  }
  if (snappy_compress((const char *)in, n, (char *)p, &clen) != SNAPPY_OK) {
    kf_err_set(e, KF_ECORRUPT, "snappy: compression failed");
    return -1;
  }
  out->len += clen;
  return 0;
}

/* ---- lz4 ---- */
/* Header checksum byte index and the two possible values of it. */
static int lz4_header(const uint8_t *in, size_t n, size_t *hc_at, uint8_t *good, uint8_t *legacy) {
  size_t dlen;
  if (n < 7 || kf_be32(in) != 0x04224D18u) return -1; /* magic 0x184D2204, little-endian */
  dlen = 2u + ((in[4] & 0x08) ? 8u : 0u) + ((in[4] & 0x01) ? 4u : 0u);
  if (!(4 + dlen + 1 <= n)) return -1;
  *hc_at = 4 + dlen;
  *good = (uint8_t)(kf_xxh32(in + 4, dlen, 0) >> 8);
  *legacy = (uint8_t)(kf_xxh32(in, 4 + dlen, 0) >> 8);
  return 0;
}

static int lz4_compress(const uint8_t *in, size_t n, kf_writer *out, int legacy, kf_err *e) {
  LZ4F_preferences_t prefs;
  size_t bound, rc, start = out->len;
  uint8_t *p;
  memset(&prefs, 0, sizeof prefs);
  prefs.frameInfo.blockMode = LZ4F_blockIndependent;
  prefs.frameInfo.blockSizeID = LZ4F_max64KB;
  bound = LZ4F_compressFrameBound(n, &prefs);
  p = kf_w_reserve(out, bound);
  if (!p) {
    kf_err_set(e, KF_ENOMEM, "lz4: out of memory");
    return -1;
  }
  rc = LZ4F_compressFrame(p, bound, in, n, &prefs);
  if (LZ4F_isError(rc)) {
    kf_err_set(e, KF_ECORRUPT, "lz4: %s", LZ4F_getErrorName(rc));
    return -1;
  }
  out->len += rc;
  if (legacy) {
    size_t at;
    uint8_t good, bad;
    if (lz4_header(out->buf + start, rc, &at, &good, &bad) == 0) out->buf[start + at] = bad;
  }
  return 0;
}

/* The decompression contexts, one per thread, kept between batches: making
 * a zstd context for every batch took 30% of a consumer's CPU on 100-byte
 * records (perf, bench/consume.lua). A zstd context that grew past KEEP_CTX
 * bytes (a large frame's window) is freed after its batch instead. */
#define KEEP_CTX ((size_t)4 << 20)
static __thread LZ4F_dctx *lz4_dctx;
static __thread ZSTD_DCtx *zstd_dctx;

static int lz4_decompress(const uint8_t *in, size_t n, kf_writer *out, size_t limit, kf_err *e) {
  LZ4F_dctx *dctx = lz4_dctx;
  uint8_t *fixed = NULL;
  size_t at, produced = 0, pos = 0;
  uint8_t good, legacy;
  if (lz4_header(in, n, &at, &good, &legacy) != 0) {
    kf_err_set(e, KF_ECORRUPT, "lz4: bad frame header");
    return -1;
  }
  if (in[at] != good && in[at] == legacy) {
    /* KAFKA-3160: old brokers/clients hashed the magic too. */
    fixed = (uint8_t *)malloc(n);
    if (fixed) kf_mem_account((long)n);
    if (!fixed) {
      kf_err_set(e, KF_ENOMEM, "lz4: out of memory");
      return -1;
    }
    memcpy(fixed, in, n);
    fixed[at] = good;
    in = fixed;
  }
  if (dctx) {
    LZ4F_resetDecompressionContext(dctx); /* (a frame left half-read by an error) */
  } else if (LZ4F_isError(LZ4F_createDecompressionContext(&dctx, LZ4F_VERSION))) {
    free(fixed);
    kf_err_set(e, KF_ENOMEM, "lz4: cannot create context");
    return -1;
  }
  lz4_dctx = dctx;
  for (;;) {
    size_t room = 65536, src = n - pos, rc;
    uint8_t *p;
    if (room > limit - produced + 1) room = limit - produced + 1;
    p = kf_w_reserve(out, room);
    if (!p) {
      kf_err_set(e, KF_ENOMEM, "lz4: out of memory");
      break;
    }
    rc = LZ4F_decompress(dctx, p, &room, in + pos, &src, NULL);
    if (LZ4F_isError(rc)) {
      kf_err_set(e, KF_ECORRUPT, "lz4: %s", LZ4F_getErrorName(rc));
      break;
    }
    out->len += room;
    produced += room;
    pos += src;
    if (produced > limit) {
      kf_err_set(e, KF_ELIMIT, "lz4: decompressed size exceeds the limit of %zu bytes", limit);
      break;
    }
    if (rc == 0) break; /* frame complete */
    if (pos >= n && room == 0) {
      kf_err_set(e, KF_ECORRUPT, "lz4: truncated frame");
      break;
    }
  }
  /* (kept whatever it decoded: an lz4 context holds at most its frame's
   * block buffers, 4 MiB blocks at the most, 64 KiB from Kafka's clients) */
  if (fixed) kf_mem_account(-(long)n);
  free(fixed);
  return e->code ? -1 : 0;
}

/* ---- zstd ---- */
static int zstd_compress(const uint8_t *in, size_t n, kf_writer *out, kf_err *e) {
  size_t bound = ZSTD_compressBound(n), rc;
  uint8_t *p = kf_w_reserve(out, bound);
  if (!p) {
    kf_err_set(e, KF_ENOMEM, "zstd: out of memory");
    return -1;
  }
  rc = ZSTD_compress(p, bound, in, n, 3);
  if (ZSTD_isError(rc)) {
    kf_err_set(e, KF_ECORRUPT, "zstd: %s", ZSTD_getErrorName(rc));
    return -1;
  }
  out->len += rc;
  return 0;
}

static int zstd_decompress(const uint8_t *in, size_t n, kf_writer *out, size_t limit,
                           kf_err *e) {
  ZSTD_DCtx *d = zstd_dctx;
  size_t produced = 0, pos = 0;
  int wlog = 10;
  if (!d) d = ZSTD_createDCtx();
  if (!d) {
    kf_err_set(e, KF_ENOMEM, "zstd: cannot create context");
    return -1;
  }
  zstd_dctx = d;
  ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
  /* A frame header may declare any window, and zstd allocates it up front.
   * No window larger than the output limit is needed: refuse bigger ones. */
  while (wlog < 27 && ((size_t)1 << wlog) < limit) wlog++;
  ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, wlog);
  if (n == 0) kf_err_set(e, KF_ECORRUPT, "zstd: empty input");
  /* Frame by frame, each checked to be a zstd v1 (or skippable) frame:
   * libzstd also decodes pre-1.0 "legacy" frames, whose decoder allocates
   * what their header says regardless of windowLogMax (a 20-byte input
   * asked for 128 MiB; found by fuzz_decompress). Kafka never wrote them. */
  while (!e->code && pos < n) {
    ZSTD_inBuffer ib;
    size_t fsz;
    uint32_t magic;
    if (!(4 <= n - pos)) {
      kf_err_set(e, KF_ECORRUPT, "zstd: truncated frame at byte %zu", pos);
      break;
    }
    magic = (uint32_t)in[pos] | (uint32_t)in[pos + 1] << 8 | (uint32_t)in[pos + 2] << 16 |
            (uint32_t)in[pos + 3] << 24;
    if (magic != 0xFD2FB528u && (magic & 0xFFFFFFF0u) != 0x184D2A50u) {
      kf_err_set(e, KF_ECORRUPT, "zstd: no zstd frame at byte %zu", pos);
      break;
    }
    fsz = ZSTD_findFrameCompressedSize(in + pos, n - pos);
    if (ZSTD_isError(fsz)) {
      kf_err_set(e, KF_ECORRUPT, "zstd: bad or truncated frame at byte %zu: %s", pos,
                 ZSTD_getErrorName(fsz));
      break;
    }
    ib.src = in + pos;
    ib.size = fsz;
    ib.pos = 0;
    ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
    for (;;) {
      ZSTD_outBuffer ob;
      size_t room = 1u << 17, rc;
      uint8_t *p;
      if (room > limit - produced + 1) room = limit - produced + 1;
      p = kf_w_reserve(out, room);
      if (!p) {
        kf_err_set(e, KF_ENOMEM, "zstd: out of memory");
        break;
      }
      ob.dst = p;
      ob.size = room;
      ob.pos = 0;
      rc = ZSTD_decompressStream(d, &ob, &ib);
      if (ZSTD_isError(rc)) {
        if (ZSTD_getErrorCode(rc) == ZSTD_error_frameParameter_windowTooLarge)
          kf_err_set(e, KF_ELIMIT, "zstd: the frame's window exceeds the limit of %zu bytes", limit);
        else
          kf_err_set(e, KF_ECORRUPT, "zstd: %s", ZSTD_getErrorName(rc));
        break;
      }
      out->len += ob.pos;
      produced += ob.pos;
      if (produced > limit) {
        kf_err_set(e, KF_ELIMIT, "zstd: decompressed size exceeds the limit of %zu bytes", limit);
        break;
      }
      if (rc == 0) break; /* frame done */
      if (ib.pos == ib.size && ob.pos < ob.size) {
        kf_err_set(e, KF_ECORRUPT, "zstd: truncated frame");
        break;
      }
    }
    pos += fsz;
  }
  if (ZSTD_sizeof_DCtx(d) > KEEP_CTX) {
    ZSTD_freeDCtx(d);
    zstd_dctx = NULL;
  }
  return e->code ? -1 : 0;
}

int kf_compress(int codec, const uint8_t *in, size_t n, kf_writer *out, int lz4_legacy,
                kf_err *e) {
  if (n > INT32_MAX) {
    kf_err_set(e, KF_ELIMIT, "%s: input too large", kf_codec_name(codec));
    return -1;
  }
  switch (codec) {
  case KF_CODEC_NONE: kf_w_bytes(out, in, n); return out->err ? -1 : 0;
  case KF_CODEC_GZIP: return gzip_compress(in, n, out, e);
  case KF_CODEC_SNAPPY: return snappy_compress_raw(in, n, out, e);
  case KF_CODEC_LZ4: return lz4_compress(in, n, out, lz4_legacy, e);
  case KF_CODEC_ZSTD: return zstd_compress(in, n, out, e);
  default: kf_err_set(e, KF_EUNSUPPORTED, "unknown compression codec %d", codec); return -1;
  }
}

int kf_decompress(int codec, const uint8_t *in, size_t n, kf_writer *out, size_t limit,
                  kf_err *e) {
  switch (codec) {
  case KF_CODEC_GZIP: return gzip_decompress(in, n, out, limit, e);
  case KF_CODEC_SNAPPY: return snappy_decompress(in, n, out, limit, e);
  case KF_CODEC_LZ4: return lz4_decompress(in, n, out, limit, e);
  case KF_CODEC_ZSTD: return zstd_decompress(in, n, out, limit, e);
  default: kf_err_set(e, KF_EUNSUPPORTED, "unknown compression codec %d", codec); return -1;
  }
}
