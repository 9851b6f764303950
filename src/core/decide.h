/* When a fresh value is refreshed early: the XFetch draw (Vattani,
 * Chierichetti, Lowenstein, VLDB 2015), or the rate-aware margin that a
 * lease makes enough (docs/design.md, "Early refresh"). */
#ifndef XF_DECIDE_H
#define XF_DECIDE_H

#include <stdint.h>

#include "pcg.h"
#include "xfetch.h"

/* Draws u in (0, 1] from rng and returns 1 when a value with remaining_ms of
 * logical lifetime left, whose last computation took delta_us, should be
 * recomputed now: remaining_ms <= -delta_ms * beta * ln(u). beta 0 never
 * recomputes early, beta INFINITY always does. */
int xf__recompute_early(xf__pcg32 *rng, int64_t remaining_ms, int64_t delta_us,
                        double beta);

/* The rate-aware rule: 1 when remaining_ms <= factor * delta_ms. No draw:
 * every caller in the window would refresh, and the key's lease lets one. */
int xf__refresh_due(int64_t remaining_ms, int64_t delta_us, double factor);

/* The factor of p's rate-aware rule (refresh_ahead; XF_REFRESH_AHEAD_DEFAULT
 * for 0), or 0: XFetch (refresh_ahead < 0). See xf_policy.refresh_ahead. */
double xf__refresh_factor(const xf_policy *p);

/* p's decision for a fresh value: the rate-aware rule or XFetch's draw (the
 * draw is made only for XFetch). */
int xf__refresh_early(xf__pcg32 *rng, const xf_policy *p, int64_t remaining_ms,
                      int64_t delta_us);

#endif
