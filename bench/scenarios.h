/* xfetch-bench: the scenarios. Each runs its strategies one after the other
 * against the same server with the same loader and appends a scenario_out. */
#ifndef BENCH_SCENARIOS_H
#define BENCH_SCENARIOS_H

#include "report.h"

typedef struct bench_cfg {
  int quick;
  int clients;      /* hot_key clients (0 = default) */
  int think_us;     /* closed-loop think time (-1 = default) */
  double open_rate; /* > 0: hot_key in open loop at this many requests/s */
  int64_t ttl_ms;   /* hot_key ttl (0 = default) */
  unsigned run_id;
} bench_cfg;

typedef struct bench_env {
  const bench_cfg *cfg;
  const target *t;
  redisContext *rc; /* the parent's connection: prefill, stats */
  arena *a;
} bench_env;

/* Prefills [first, first+count) with ttl_ms (when count > 0), runs the workers
 * and analyses. Returns 0, or -1 when the run failed. */
int run_one(const bench_env *e, run_spec *s, int first, int count, int64_t ttl_ms,
            int cold_absent, int all_cold, result *r);
void spec_init(run_spec *s, const bench_env *e, const char *scenario, strategy st,
               const char *variant);

int sc_hot_key(const bench_env *e, scenario_out *out);
int sc_cold_start(const bench_env *e, scenario_out *out);
int sc_mass_expiry(const bench_env *e, scenario_out *out);
int sc_hit_overhead(const bench_env *e, scenario_out *out);
int sc_beta_sweep(const bench_env *e, scenario_out *out);
/* bench/hit_cost.c: issue 19's hit and memory costs against GET and SET PX. */
int sc_hit_cost(const bench_env *e, scenario_out *out);
/* bench/write_cost.c: server time per write and per lease + write, by size. */
int sc_write_cost(const bench_env *e, scenario_out *out);
/* bench/tls_bench.c: the TLS hit's p50 and throughput against a raw GET over
 * TLS, and its handshakes. */
int sc_tls(const bench_env *e, scenario_out *out);
/* bench/tags_bench.c: a tagged hit against an untagged one (near cache off and
 * on) and the invalidation of a tag many entries carry. */
int sc_tags(const bench_env *e, scenario_out *out);

#endif
