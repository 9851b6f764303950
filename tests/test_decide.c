/* The XFetch decision against its closed form: with u uniform in (0, 1],
 * P(early) = P(remaining <= -delta * beta * ln u) = exp(-remaining / (beta * delta)). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>

#include "decide.h"

#define DRAWS 40000

typedef struct {
  int64_t remaining_ms;
  int64_t delta_us;
  double beta;
} point;

static void expect_closed_form(point pt, uint64_t seed) {
  xf__pcg32 rng;
  xf__pcg32_seed(&rng, seed, 0);
  int early = 0;
  for (int i = 0; i < DRAWS; i++)
    early += xf__recompute_early(&rng, pt.remaining_ms, pt.delta_us, pt.beta);
  double p = exp(-(double)pt.remaining_ms / (pt.beta * (double)pt.delta_us / 1000.0));
  double freq = (double)early / DRAWS;
  double se = sqrt(p * (1 - p) / DRAWS);
  cr_expect(fabs(freq - p) <= 3 * se + 1e-12,
            "remaining %lld delta %lld us beta %g: freq %.4f, closed form %.4f (3se %.4f)",
            (long long)pt.remaining_ms, (long long)pt.delta_us, pt.beta, freq, p, 3 * se);
}

ParameterizedTestParameters(decide, matches_closed_form) {
  static point points[] = {
      {100, 100000, 1.0}, /* p = e^-1 */
      {50, 100000, 1.0},  /* e^-0.5 */
      {200, 100000, 1.0}, /* e^-2 */
      {100, 100000, 2.0}, /* e^-0.5 */
      {100, 100000, 0.5}, /* e^-2 */
      {300, 50000, 4.0},  /* e^-1.5 */
      {10, 1000, 1.0},    /* e^-10: almost never */
      {1, 1000000, 1.0},  /* e^-0.001: almost always */
  };
  return cr_make_param_array(point, points, sizeof points / sizeof points[0]);
}

ParameterizedTest(point *pt, decide, matches_closed_form) { expect_closed_form(*pt, 2015); }

Test(decide, beta_zero_never_recomputes_early) {
  xf__pcg32 rng;
  xf__pcg32_seed(&rng, 1, 0);
  for (int i = 0; i < 10000; i++)
    cr_assert_eq(xf__recompute_early(&rng, 1, 10000000, 0.0), 0);
}

Test(decide, beta_infinity_always_recomputes) {
  xf__pcg32 rng;
  xf__pcg32_seed(&rng, 1, 0);
  for (int i = 0; i < 10000; i++)
    cr_assert_eq(xf__recompute_early(&rng, 1000000, 1, INFINITY), 1);
}

Test(decide, zero_delta_never_recomputes_a_fresh_value) {
  xf__pcg32 rng;
  xf__pcg32_seed(&rng, 1, 0);
  for (int i = 0; i < 10000; i++)
    cr_assert_eq(xf__recompute_early(&rng, 1, 0, 1.0), 0);
}

Test(decide, same_seed_same_decisions) {
  xf__pcg32 a, b;
  xf__pcg32_seed(&a, 99, 0);
  xf__pcg32_seed(&b, 99, 0);
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(xf__recompute_early(&a, 100, 100000, 1.0),
                 xf__recompute_early(&b, 100, 100000, 1.0));
}
