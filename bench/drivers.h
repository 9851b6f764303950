/* xfetch-bench: the drivers' scenarios (batch, async) and what they share. */
#ifndef BENCH_DRIVERS_H
#define BENCH_DRIVERS_H

#include "scenarios.h"
#include "xfetch.h"

#define DRV_MAX_KEYS 100

typedef struct drv_keyset {
  size_t n;
  char buf[DRV_MAX_KEYS][48];
  const char *ptr[DRV_MAX_KEYS];
  size_t len[DRV_MAX_KEYS];
} drv_keyset;

/* A client on the target; NULL (the failed step reported) on failure. */
xf_client *drv_client(const target *t);
/* The same with a share (NULL = none). */
xf_client *drv_client_shared(const target *t, xf_share *share);
/* Counts a hit that failed (rc) or was not served from the cache (v), in e;
 * 1 when it did, 0 when it was a good hit. what: the call's name. */
int drv_count_bad_hit(step_errors *e, const char *what, int rc, const xf_value *v,
                      const char *errmsg);
/* A loader giving the bench's 64-byte value (counts its calls in *(long *)ud). */
int drv_loader(void *ud, const char *key, size_t keylen, xf_sink *sink);
/* n keys of this run named after what. */
int drv_keys(drv_keyset *k, const bench_env *e, const char *what, size_t n);
/* Writes the 64-byte value to every key (xf_set). 0 or -1 (reported). */
int drv_warm(xf_client *c, const drv_keyset *k, const xf_policy *p);
/* The p-quantile of v[0..n) (sorts v). */
double drv_pct(uint32_t *v, size_t n, double p);
/* INFO stats total_reads_processed, or -1. */
long long drv_server_reads(redisContext *rc);

/* N concurrent requests on one libuv loop thread (xf_async): fills the
 * request count, errors and latencies (us, malloc'd) over dur_s seconds.
 * Returns 0, -1 on failure, or 1 when built without libuv. */
typedef struct drv_run {
  uint64_t requests;
  step_errors errs; /* requests that failed or were not hits, counted */
  uint32_t *us;
  size_t nus, cap;
  double seconds;
} drv_run;
int drv_async_loop(const target *t, const drv_keyset *k, const xf_policy *p, int n,
                   double dur_s, drv_run *out);
/* Appends one latency sample (drops it when out of memory). */
void drv_record(drv_run *r, uint32_t us);

int sc_batch(const bench_env *e, scenario_out *out);
int sc_async(const bench_env *e, scenario_out *out);

#endif
