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

/* ---- the rate-aware rule ------------------------------------------------------- */

Test(decide, rate_aware_refreshes_within_its_margin_only) {
  cr_expect(xf__refresh_due(150, 100000, 1.5));
  cr_expect(!xf__refresh_due(151, 100000, 1.5));
  cr_expect(!xf__refresh_due(1, 0, 1.5), "no delta yet: never early");
}

Test(decide, refresh_factor_follows_the_policy) {
  xf_policy p = XF_POLICY_INIT;
  cr_expect_eq(xf__refresh_factor(&p), XF_REFRESH_AHEAD_DEFAULT, "rate-aware by default");
  p.background_refresh = XF_BACKGROUND_OFF;
  cr_expect_eq(xf__refresh_factor(&p), XF_REFRESH_AHEAD_DEFAULT,
               "rate-aware in the call too: the rule does not depend on where it runs");
  p.background_refresh = XF_BACKGROUND_ON;
  cr_expect_eq(xf__refresh_factor(&p), XF_REFRESH_AHEAD_DEFAULT);
  p.refresh_ahead = -1;
  cr_expect_eq(xf__refresh_factor(&p), 0, "negative: XFetch even in the background");
  p.refresh_ahead = 3;
  cr_expect_eq(xf__refresh_factor(&p), 3);
  p.background_refresh = XF_BACKGROUND_OFF;
  cr_expect_eq(xf__refresh_factor(&p), 3);
}

/* One hot key under Poisson arrivals at rate_per_s, for 200 ttls: a caller
 * that decides to refresh takes the lease (no one else refreshes until its
 * load of delta_ms lands; the value is dated by the lease, as lease.lua
 * does); a caller that finds the value expired counts as late. */
typedef struct sim_out {
  double loads_per_ttl;
  long late;
} sim_out;

static sim_out simulate(const xf_policy *p, double rate_per_s, int64_t delta_ms) {
  xf__pcg32 arrivals, draws;
  xf__pcg32_seed(&arrivals, 7, 1);
  xf__pcg32_seed(&draws, 7, 2);
  const int64_t ttl = p->ttl_ms, end = 200 * ttl;
  double t = 0, expiry = (double)ttl, lands = -1;
  long loads = 1, late = 0;
  while (t < end) {
    t += -log(xf__pcg32_unit(&arrivals)) * 1000.0 / rate_per_s;
    if (lands >= 0 && t >= lands)
      lands = -1; /* the refresh landed: expiry was moved at its lease */
    if (t >= expiry && lands < 0) {
      late++; /* a miss: this caller loads in its request */
      expiry = t + (double)ttl, loads++;
      continue;
    }
    if (t >= expiry)
      late++;
    if (lands >= 0) /* the lease is held: served */
      continue;
    if (xf__refresh_early(&draws, p, (int64_t)(expiry - t), delta_ms * 1000)) {
      loads++;
      lands = t + (double)delta_ms;
      expiry = t + (double)ttl;
    }
  }
  return (sim_out){(double)loads / (double)(end / ttl), late};
}

Test(decide, rate_aware_makes_about_one_load_per_ttl_at_any_rate) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 1000;
  p.background_refresh = XF_BACKGROUND_ON;
  double rates[] = {100, 1000, 10000, 100000};
  for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
    sim_out o = simulate(&p, rates[i], 100);
    cr_expect_leq(o.loads_per_ttl, 1.2, "rate %g/s: %.3f loads per ttl", rates[i],
                  o.loads_per_ttl);
    cr_expect_eq(o.late, 0, "rate %g/s: %ld calls found the value expired", rates[i],
                 o.late);
  }
}

Test(decide, default_policy_refreshes_a_hot_key_about_once_per_ttl) {
  xf_policy p = XF_POLICY_INIT; /* nothing changed but the ttl */
  p.ttl_ms = 1000;
  sim_out hot = simulate(&p, 100000, 100);
  cr_expect_leq(hot.loads_per_ttl, 1.2, "the defaults at 100k/s: %.3f loads per ttl",
                hot.loads_per_ttl);
  cr_expect_eq(hot.late, 0, "%ld calls found the value expired", hot.late);
}

Test(decide, xfetch_loads_more_the_hotter_the_key) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 1000; /* beta 1: pure XFetch */
  p.refresh_ahead = -1;
  sim_out slow = simulate(&p, 100, 100), hot = simulate(&p, 100000, 100);
  cr_expect_gt(hot.loads_per_ttl, slow.loads_per_ttl + 0.2, "%.3f vs %.3f",
               hot.loads_per_ttl, slow.loads_per_ttl);
  cr_expect_gt(hot.loads_per_ttl, 1.5, "XFetch at 100k/s: %.3f", hot.loads_per_ttl);
}
