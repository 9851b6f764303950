/* xfetch-bench: the near scenario's parts (bench/near_bench.c: hot key,
 * staleness and the scenario; bench/near_zipf.c: the Zipf trace, its
 * eviction policies simulated, and the waiters' wake; bench/near_stale.c: the
 * staleness passes). */
#ifndef BENCH_NEAR_BENCH_H
#define BENCH_NEAR_BENCH_H

#include <stdint.h>

#include "scenarios.h"

typedef struct nb_zipf {
  int keys, threads;
  double hit_ratio, rps, cmds_per_call;
  uint64_t evictions;
  double sim_lru, sim_clock, sim_s3fifo; /* the same trace, the same capacity */
} nb_zipf;

typedef struct nb_stale {
  uint64_t reads, stale, over_1ms;
  double p99_ms, p999_ms, max_ms;
  /* of over_1ms: reads after which news had reached the process unapplied
   * (xf__near_news_waiting; the rest: Redis had not yet sent the invalidation) */
  uint64_t over_1ms_delivered;
  /* writes in the pass whose invalidation the tracker took before the next
   * write's, and how late after the write's acknowledgement (mostly the
   * thread's scheduling: hits go to Redis while the bytes wait) */
  int writes, writes_late_1ms;
  double late_max_ms;
} nb_stale;

typedef struct nb_wake {
  double near_max_ms, near_mean_ms, poll_max_ms, poll_mean_ms;
  uint64_t errors; /* waiters whose call failed (left out of max and mean) */
} nb_wake;

/* A share with a near cache of bytes; NULL on failure. */
xf_share *nb_share(size_t bytes);
/* INFO stats' total_commands_processed, or -1. */
long long nb_commands(redisContext *rc);

/* Failed calls are counted in errs (the figures stand); -1 (reported) when
 * a figure has nothing to stand on. */
int nb_zipf_run(const bench_env *e, int quick, nb_zipf *out, step_errors *errs);
/* Three staleness passes: undisturbed and under faults with the writer
 * fenced, then undisturbed with the fence off (bench/near_stale.c); the
 * reader's failed reads counted in errs, the writer's in *set_errs; -1
 * (reported) when the writer or the reader could not start. */
int nb_staleness(const bench_env *e, double dur, nb_stale out[3], double set_p50_us[2],
                 step_errors *errs, uint64_t *set_errs);
/* -1 (reported) when a leader's load failed: no write to wake the waiters. */
int nb_wake_run(const bench_env *e, nb_wake *out);

int sc_near(const bench_env *e, scenario_out *out);

#endif
