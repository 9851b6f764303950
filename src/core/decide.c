/* The early-refresh decisions. XFetch: with u uniform in (0, 1], -ln(u) is
 * Exp(1), so the chance of recomputing early is exp(-remaining / (beta *
 * delta)): it grows as expiry nears, faster for slow computations and larger
 * beta, and with many callers one of them draws early about
 * delta * beta * ln(rate * delta * beta) before expiry. The rate-aware rule
 * refreshes at a fixed margin of the loader's own time instead: with the
 * key's lease only one caller refreshes, so the margin need not grow with
 * traffic. */
#include <math.h>

#include "decide.h"

int xf__recompute_early(xf__pcg32 *rng, int64_t remaining_ms, int64_t delta_us,
                        double beta) {
  if (beta == 0)
    return 0;
  if (isinf(beta))
    return 1;
  double delta_ms = (double)delta_us / 1000.0;
  double u = xf__pcg32_unit(rng);
  return (double)remaining_ms <= -delta_ms * beta * log(u);
}

int xf__refresh_due(int64_t remaining_ms, int64_t delta_us, double factor) {
  return (double)remaining_ms <= factor * (double)delta_us / 1000.0;
}

double xf__refresh_factor(const xf_policy *p) {
  if (p->refresh_ahead > 0)
    return p->refresh_ahead;
  return p->refresh_ahead == 0 ? XF_REFRESH_AHEAD_DEFAULT : 0;
}

int xf__refresh_early(xf__pcg32 *rng, const xf_policy *p, int64_t remaining_ms,
                      int64_t delta_us) {
  double factor = xf__refresh_factor(p);
  if (factor > 0)
    return xf__refresh_due(remaining_ms, delta_us, factor);
  return xf__recompute_early(rng, remaining_ms, delta_us, p->beta);
}
