/* The XFetch decision. With u uniform in (0, 1], -ln(u) is Exp(1), so the
 * chance of recomputing early is exp(-remaining / (beta * delta)): it grows
 * as expiry nears, faster for slow computations and larger beta. */
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
