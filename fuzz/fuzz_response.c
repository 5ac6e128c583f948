/* Response decoding: byte 0 picks the api, byte 1 the version; the rest is
 * the frame after its size prefix (header + body). Byte 0 past the apis
 * picks a data structure (kf_datas): the rest is its int16 version and
 * body, byte 1 unused. A body that decodes must round-trip (fuzz_roundtrip.h);
 * its records are decoded with CRC checks on and off. */
#include "fuzz_roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const kf_api *a;
  int v, hv;
  kf_reader r;
  kf_err e = {0, {0}};
  int32_t corr;
  if (size < 2) return 0;
  if (data[0] % (kf_napis + kf_ndatas) >= kf_napis) {
    const kf_data *d = &kf_datas[data[0] % (kf_napis + kf_ndatas) - kf_napis];
    kf_r_init(&r, data + 2, size - 2);
    kf_data_decode(d, -1, &fz_dec_ops, NULL, &r, &v, &e);
    return 0;
  }
  a = &kf_apis[data[0] % kf_napis];
  v = a->min + data[1] % (a->max - a->min + 1);
  hv = kf_resp_header_version(a, v);
  kf_r_init(&r, data + 2, size - 2);
  if (kf_read_response_header(&r, hv, &corr, &e)) return 0;
  rt_check(a->resp, v, v >= a->resp_flex, &r);
  return 0;
}
