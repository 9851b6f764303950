/* xfetch-bench: results of one run, their analysis, the table, JSON and plots. */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include "bench.h"

#define HIST_MAX 32 /* loads-per-expiry histogram: 1..HIST_MAX (last = more) */
#define CDF_POINTS 81
#define BUCKET_MS 100

typedef struct result {
  strategy strat;
  double beta, jitter;
  int connections;
  /* requests */
  uint64_t requests, errors, dropped, loads;
  uint64_t not_opened;   /* workers whose connection did not open (in errors) */
  char first_error[320]; /* the first error's description ("" = none) */
  double throughput_rps;
  /* loads per expiry (episodes after the first of each absent key) */
  int expiries;
  double loads_per_expiry;
  int max_loads_per_expiry;
  int hist[HIST_MAX + 1];
  double cold_loads; /* mean loads per cold episode */
  int cold_max, cold_episodes;
  /* who waited */
  double waited_pct, wait_mean_ms, wait_max_ms, loaded_pct, stale_pct, cold_waited_pct;
  uint64_t loaded_calls; /* requests that ran the loader inside themselves */
  double warm_max_ms;    /* the slowest request outside the cold start */
  double loads_per_ttl;  /* loader calls / (duration / ttl) */
  /* latency, ms */
  double mean_ms, p50_ms, p99_ms, p999_ms, max_ms;
  double win_p50_ms, win_p99_ms, win_p999_ms, win_max_ms, steady_p50_ms, steady_p99_ms;
  uint64_t win_requests;
  double cdf_pct[CDF_POINTS], cdf_ms[CDF_POINTS];
  /* loader concurrency */
  int peak_concurrent_loads, peak_loads_per_100ms;
  int nbuckets;
  int *buckets; /* loader calls started per BUCKET_MS */
  /* XFetch timing: how early the refresh landed (ms before expiry) */
  double early_ms;
  double mean_trigger_p; /* mean of exp(-r0/(beta delta)) at the first trigger */
  /* hit_overhead */
  double server_usec_per_call;
  int tls;    /* the tls scenario: 1 over TLS, 0 plain TCP */
  int pinned; /* the tls scenario: server and clients pinned to different cores */
  /* beta_sweep theory */
  double theory_loads_per_expiry, theory_early_ms;
  /* 1 + H(r0) (e^(1/beta) - 1) averaged over the measured first triggers r0:
   * the theory with the first trigger's randomness taken out */
  double theory_given_r0;
} result;

typedef struct scenario_out {
  const char *name;
  char params[4096]; /* a JSON object (hit_cost's tables are the largest) */
  int nresults;
  result results[24]; /* tls: 3 ways x 2 rounds x 1 and 50 connections x pinned */
} scenario_out;

/* Fills r from the arena after a run. cold_absent: keys started absent, so
 * each key's first episode is a cold start (excluded from waited_pct unless
 * all_cold). */
void analyze(const run_spec *s, const arena *a, double wall_s, int cold_absent,
             int all_cold, result *r);
void result_free(result *r);

void report_table(FILE *f, const scenario_out *sc, int n);
void report_summary(FILE *f, const scenario_out *sc, int n);
int report_json(const char *path, const char *machine_json, const scenario_out *sc, int n);
int plot_all(const char *dir, const scenario_out *sc, int n);

#endif
