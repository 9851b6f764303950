/* PCG32, written from the algorithm in O'Neill's PCG paper (2014). */
#include "pcg.h"

#define PCG_MULT 6364136223846793005ULL

static void step(xf__pcg32 *rng) { rng->state = rng->state * PCG_MULT + rng->inc; }

void xf__pcg32_seed(xf__pcg32 *rng, uint64_t seed, uint64_t stream) {
  rng->inc = (stream << 1u) | 1u;
  rng->state = 0;
  step(rng);
  rng->state += seed;
  step(rng);
}

uint32_t xf__pcg32_next(xf__pcg32 *rng) {
  uint64_t old = rng->state;
  step(rng);
  uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  uint32_t rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

double xf__pcg32_unit(xf__pcg32 *rng) {
  return ((double)xf__pcg32_next(rng) + 1.0) / 4294967296.0;
}
