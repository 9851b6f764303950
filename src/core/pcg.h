/* PCG32 (O'Neill's pcg32: 64-bit LCG state, XSH-RR output to 32 bits). */
#ifndef XF_PCG_H
#define XF_PCG_H

#include <stdint.h>

typedef struct xf__pcg32 {
  uint64_t state;
  uint64_t inc; /* always odd: (stream << 1) | 1 */
} xf__pcg32;

/* Seeds like the reference pcg32(seed, stream). */
void xf__pcg32_seed(xf__pcg32 *rng, uint64_t seed, uint64_t stream);

/* The next 32-bit output. */
uint32_t xf__pcg32_next(xf__pcg32 *rng);

/* A uniform double in (0, 1]: never 0, so ln(u) is always finite. */
double xf__pcg32_unit(xf__pcg32 *rng);

#endif
