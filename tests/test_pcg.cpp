// PCG32 in C against Debian's C++ reference header (libpcg-cpp-dev).
#include <criterion/criterion.h>
#include <pcg_random.hpp>

extern "C" {
#include "pcg.h"
}

static void expect_same_stream(uint64_t seed, uint64_t stream) {
  pcg32 ref(seed, stream);
  xf__pcg32 ours;
  xf__pcg32_seed(&ours, seed, stream);
  for (int i = 0; i < 1000; i++) {
    uint32_t want = ref();
    uint32_t got = xf__pcg32_next(&ours);
    cr_assert_eq(got, want, "seed %llu stream %llu output %d: got %u want %u",
                 (unsigned long long)seed, (unsigned long long)stream, i, got, want);
  }
}

Test(pcg, matches_reference_small_seeds) {
  expect_same_stream(0, 0);
  expect_same_stream(1, 0);
  expect_same_stream(42, 54);
}

Test(pcg, matches_reference_large_seeds_and_streams) {
  expect_same_stream(0x853c49e6748fea9bULL, 0xda3e39cb94b95bdbULL);
  expect_same_stream(~0ULL, ~0ULL);
  expect_same_stream(0x0123456789abcdefULL, 7);
}

Test(pcg, unit_is_in_open_closed_interval) {
  xf__pcg32 r;
  xf__pcg32_seed(&r, 7, 0);
  double lo = 1, hi = 0;
  for (int i = 0; i < 100000; i++) {
    double u = xf__pcg32_unit(&r);
    cr_assert(u > 0.0 && u <= 1.0, "u = %g out of (0, 1]", u);
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
  }
  cr_expect_lt(lo, 0.001);
  cr_expect_gt(hi, 0.999);
}
