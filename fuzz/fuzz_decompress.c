/* Each decompressor: byte 0 picks gzip, snappy, lz4 or zstd; the output
 * limit is 1 MiB, so -malloc_limit_mb catches any unbounded allocation. */
#include "fuzz_common.h"
#include "../csrc/compress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kf_writer w;
  kf_err e = {0, {0}};
  if (size < 1) return 0;
  kf_w_init(&w);
  kf_decompress(1 + data[0] % 4, data + 1, size - 1, &w, 1u << 20, &e);
  if (!e.code && w.len > (1u << 20)) __builtin_trap(); /* the limit must hold */
  kf_w_free(&w);
  return 0;
}
