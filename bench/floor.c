/* bench/floor.c: what the hardware allows for the same bytes, with the same
 * libraries: encode = copy the records + compress + CRC-32C of the batch;
 * decode = CRC-32C + decompress + copy. Prints bench/codec.lua's format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../csrc/compress.h"
#include "../csrc/crc.h"
#include "../csrc/records.h"

#define N 10000
#define RUNS 9

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static volatile uint32_t sink;

int main(void) {
  static const char *codecs[] = {"none", "gzip", "snappy", "lz4", "zstd"};
  static const size_t sizes[] = {100, 1024};
  size_t si;
  for (si = 0; si < 2; si++) {
    size_t size = sizes[si], i;
    kf_batch b;
    static char val[2048];
    int c;
    memset(val, 'x', sizeof val);
    kf_batch_init(&b, 2, 0);
    for (i = 0; i < N; i++) {
      kf_err e = {0, {0}};
      int k = snprintf(val, sizeof val, "%zu", i + 1);
      val[k] = 'x';
      kf_batch_record(&b, 1700000000000LL, NULL, 0, val, size, 0, 0, &e);
    }
    for (c = 0; c < 5; c++) {
      double enc[RUNS], dec[RUNS];
      kf_writer copy, comp, out;
      int r;
      kf_w_init(&copy);
      kf_w_init(&comp);
      kf_w_init(&out);
      for (r = -1; r < RUNS; r++) {
        kf_err e = {0, {0}};
        double t0 = now(), t1;
        copy.len = comp.len = out.len = 0;
        kf_w_bytes(&copy, b.body.buf, b.body.len);
        kf_compress(c, copy.buf, copy.len, &comp, 0, &e);
        sink += kf_crc32c(0, comp.buf, comp.len);
        t1 = now();
        if (c) kf_decompress(c, comp.buf, comp.len, &out, 1u << 30, &e);
        else kf_w_bytes(&out, comp.buf, comp.len);
        sink += kf_crc32c(0, comp.buf, comp.len);
        copy.len = 0;
        kf_w_bytes(&copy, out.buf, out.len);
        if (r >= 0) {
          enc[r] = t1 - t0;
          dec[r] = now() - t1;
        }
      }
      qsort(enc, RUNS, sizeof enc[0], cmp);
      qsort(dec, RUNS, sizeof dec[0], cmp);
      printf("encode_batch\t%zu\t%s\t%.0f\n", size, codecs[c], N / enc[RUNS / 2]);
      printf("decode_tables\t%zu\t%s\t%.0f\n", size, codecs[c], N / dec[RUNS / 2]);
      kf_w_free(&copy);
      kf_w_free(&comp);
      kf_w_free(&out);
    }
    kf_batch_free(&b);
  }
  return 0;
}
