/* Helpers shared by the fuzz targets (see fuzz.h). */
#include <math.h>
#include <string.h>

#include "fuzz.h"

xf_client *fuzz_client(void) {
  static xf_client *c;
  if (!c) {
    xf_options o = XF_OPTIONS_INIT;
    o.lazy_connect = 1;
    o.unix_path = FUZZ_NO_SERVER;
    o.seed = 1;
    FUZZ_CHECK(xf_client_open(&c, &o) == XF_OK);
  }
  return c;
}

uint8_t fuzz_u8(fuzz_in *in) {
  if (in->n == 0)
    return 0;
  in->n--;
  return *in->p++;
}

uint64_t fuzz_u64(fuzz_in *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | fuzz_u8(in);
  return v;
}

int64_t fuzz_i64(fuzz_in *in) {
  static const int64_t edges[] = {0,
                                  1,
                                  -1,
                                  2,
                                  1000,
                                  60000,
                                  (int64_t)1 << 40,
                                  ((int64_t)1 << 40) + 1,
                                  ((int64_t)1 << 40) - 1,
                                  -((int64_t)1 << 40),
                                  INT32_MAX,
                                  (int64_t)INT32_MAX + 1,
                                  INT32_MIN,
                                  INT64_MAX,
                                  INT64_MIN,
                                  65535,
                                  65536};
  uint8_t how = fuzz_u8(in);
  switch (how % 4) {
  case 0:
    return edges[fuzz_u8(in) % (sizeof edges / sizeof edges[0])];
  case 1:
    return (int8_t)fuzz_u8(in); /* small, either sign */
  case 2:
    return (int64_t)(fuzz_u64(in) >> (fuzz_u8(in) % 64)); /* any magnitude */
  default:
    return (int64_t)fuzz_u64(in); /* raw */
  }
}

int fuzz_int(fuzz_in *in) {
  int64_t v = fuzz_i64(in);
  return (int)(uint32_t)(uint64_t)v; /* wraps: INT64 edges become other ints */
}

double fuzz_double(fuzz_in *in) {
  static const double edges[] = {0.0,       -0.0,  1.0,     0.5,       -1.0,   0.999999999,
                                 2.0,       1e300, -1e-300, 5e-324,    1e-310, INFINITY,
                                 -INFINITY, NAN,   -NAN,    1.0000001, 1e18};
  uint8_t how = fuzz_u8(in);
  if (how % 2 == 0)
    return edges[fuzz_u8(in) % (sizeof edges / sizeof edges[0])];
  uint64_t bits = fuzz_u64(in);
  double d;
  memcpy(&d, &bits, sizeof d); /* any bit pattern: NaN payloads, denormals */
  return d;
}

const char *fuzz_str(fuzz_in *in, char *buf, size_t cap) {
  uint8_t len = fuzz_u8(in);
  if (len == 0xff)
    return NULL;
  size_t n = len < cap - 1 ? len : cap - 1;
  size_t got;
  const uint8_t *p = fuzz_bytes(in, n, &got);
  if (got)
    memcpy(buf, p, got);
  buf[got] = '\0';
  return buf;
}

const uint8_t *fuzz_bytes(fuzz_in *in, size_t max, size_t *len) {
  *len = max < in->n ? max : in->n;
  const uint8_t *p = in->p;
  in->p += *len;
  in->n -= *len;
  return p;
}
