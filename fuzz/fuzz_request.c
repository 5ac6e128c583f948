/* Request decoding (the server side): the input is a whole frame, size
 * prefix included, as it comes from a client. A body that decodes must
 * round-trip: re-encoded at its version it decodes to the same values
 * (fuzz_roundtrip.h). */
#include "fuzz_roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kf_reader r;
  kf_err e = {0, {0}};
  kf_req_header h;
  if (kf_frame_check(data, size, &e)) return 0;
  kf_r_init(&r, data, size);
  r.pos = 4;
  if (kf_read_request_header(&r, &h, &e)) return 0;
  rt_check(h.api->req, h.api_version, h.api_version >= h.api->req_flex, &r);
  return 0;
}
