/* Record decoding: any blob of message sets (magic 0/1) and record batches
 * (magic 2), every codec. Byte 0 selects CRC checking: with it off the
 * fuzzer reaches the record parsers without forging CRCs. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  fz_records(data + 1, size - 1, data[0] & 1);
  fz_records_paused(data + 1, size - 1, data[0] & 1, (unsigned)(data[0] >> 1) + 1);
  return 0;
}
