/* xfetch-bench: hit_cost's two halves (bench/hit_cost.c: time per hit;
 * bench/hit_memory.c: memory per entry) and what they share. */
#ifndef BENCH_HIT_COST_H
#define BENCH_HIT_COST_H

#include "drivers.h"

#define CTL_NAME "xfb-hit-cost-ctl"

typedef struct hc {
  const bench_env *e;
  redisContext *ctl; /* CONFIG, SLOWLOG, INFO: named, so its commands are left out */
  redisContext *g;   /* the raw GETs */
  xf_client *x;      /* the hits */
  xf_policy p;
  char gkey[64], xkey[64];
  size_t len;
  step_errors errs; /* the current pass's failed requests, counted */
} hc;

/* A command on c (printf-like, as redisCommand); the caller frees the reply. */
redisReply *hc_cmd(redisContext *c, const char *fmt, ...);
/* A command whose answer does not matter (a failure shows in what follows). */
void hc_cmd_free(redisContext *c, const char *fmt, ...);
/* Appends the memory figures to out->params and closes it. 0 or -1. */
int hc_memory_pass(hc *h, scenario_out *out, int q);
/* Appends the event hook's cost (no hook vs a no-op hook) to out->params
 * (bench/hit_hook.c). 0 or -1. */
int hc_hook_pass(hc *h, scenario_out *out, int q);

#endif
