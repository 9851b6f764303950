/* The XFetch decision (Vattani, Chierichetti, Lowenstein, VLDB 2015). */
#ifndef XF_DECIDE_H
#define XF_DECIDE_H

#include <stdint.h>

#include "pcg.h"

/* Draws u in (0, 1] from rng and returns 1 when a value with remaining_ms of
 * logical lifetime left, whose last computation took delta_us, should be
 * recomputed now: remaining_ms <= -delta_ms * beta * ln(u). beta 0 never
 * recomputes early, beta INFINITY always does. */
int xf__recompute_early(xf__pcg32 *rng, int64_t remaining_ms, int64_t delta_us,
                        double beta);

#endif
