/* The goals the project holds, as one table so the run states met / missed for each and
 * says which scenario would measure a goal it did not run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "goals.h"

typedef struct goal {
  const char *id, *scenario, *what;
  int at_least; /* 0: measured <= limit, 1: measured >= limit */
  double limit;
  double measured; /* NAN until a scenario sets it */
} goal;

static goal GOALS[] = {
    {"hit_server_16B", "hit_cost", "server time per hit / per GET, 16 B", 0, 1.5, NAN},
    {"hit_server_1KiB", "hit_cost", "server time per hit / per GET, 1 KiB", 0, 1.5, NAN},
    {"hit_server_100KiB", "hit_cost", "server time per hit / per GET, 100 KiB", 0, 1.5,
     NAN},
    {"hit_server_1MiB", "hit_cost", "server time per hit / per GET, 1 MiB", 0, 1.5, NAN},
    {"hit_client_100KiB", "hit_cost", "client p50 per hit / raw GET, 100 KiB", 0, 1.1, NAN},
    {"hit_client_1MiB", "hit_cost", "client p50 per hit / raw GET, 1 MiB", 0, 1.1, NAN},
    {"throughput_50conn", "hit_overhead", "hit throughput / raw GET's, 50 connections", 1,
     0.9, NAN},
    {"p50_1conn", "hit_overhead", "hit p50 / raw GET's, 1 connection", 0, 1.05, NAN},
    /* The same goal from hit_cost's client pass, where GETs and hits take
     * turns in blocks of 50: hit_overhead runs each strategy in its own 4 s,
     * and on this VM a connection's round trip can settle near 8 us or near
     * 70 us for a whole run, which moves its ratio more than a hit costs. */
    {"p50_1conn_interleaved", "hit_cost",
     "hit p50 / raw GET's, 1 connection, interleaved, 16 B", 0, 1.05, NAN},
    {"batch_vs_mget", "batch", "100 warm keys in one call / one MGET of 100 (p50)", 0, 1.3,
     NAN},
    {"batch_vs_sequential", "batch", "100 sequential calls / one call of 100 (p50)", 1, 20,
     NAN},
    {"memory_16B", "hit_cost", "Redis memory per entry / SET PX's (same TTL), 16 B", 0, 1.2,
     NAN},
    {"memory_100B", "hit_cost", "Redis memory per entry / SET PX's (same TTL), 100 B", 0,
     1.2, NAN},
    {"memory_1KiB", "hit_cost", "Redis memory per entry / SET PX's (same TTL), 1 KiB", 0,
     1.2, NAN},
    {"memory_100KiB", "hit_cost", "Redis memory per entry / SET PX's (same TTL), 100 KiB",
     0, 1.2, NAN},
    /* TLS (bench/tls_bench.c): the hit against a raw GET, both over TLS on
     * the library's own connections; the server's TLS work is the same for
     * every client (and Redis 7.0 has no TLS in its I/O threads). */
    {"tls_p50_1conn", "tls", "hit p50 / raw GET's, both over TLS, 1 connection", 0, 1.05,
     NAN},
    {"tls_throughput_50conn", "tls", "hit throughput / raw GET's, both TLS, 50 conns", 1,
     0.9, NAN},
    {"tls_handshakes_per_conn", "tls", "TLS handshakes per connection", 0, 1.0, NAN},
    /* Issue 20: the near cache (bench/near_bench.c). */
    {"near_hit_vs_redis_hit", "near", "near hit calls/s / Redis hit's (hot key)", 1, 10,
     NAN},
    {"near_cmds_per_10k", "near", "Redis commands per 10,000 near hits", 0, 100, NAN},
    {"near_stale_p99_ms", "near", "staleness p99 (ms), writer every 20 ms", 0, 1, NAN},
    {"near_stale_over_1ms_faults", "near",
     "reads stale by > 1 ms under CLIENT KILL + FLUSHALL", 0, 0, NAN},
    {"near_wake_max_ms", "near", "waiters of a 200 ms load: ms after the write (max)", 0, 5,
     NAN},
    /* Tags (bench/tags_bench.c): a hit on an entry with 2 tags, and the
     * invalidation of a tag (1,000,000 entries carry it; 10,000 in --quick). */
    {"tags_hit_vs_untagged", "tags", "hit with 2 tags / untagged hit (p50)", 0, 1.1, NAN},
    {"tags_hit_vs_untagged_near", "tags", "near hit with 2 tags / untagged (mean)", 0, 1.1,
     NAN},
    {"tags_near_extra_cmds_per_hit", "tags", "extra Redis commands per tagged near hit", 0,
     0, NAN},
    {"tags_invalidate_p50_ms", "tags", "invalidating a tag, p50 (ms)", 0, 1, NAN},
};
#define NGOALS (sizeof GOALS / sizeof GOALS[0])

void goal_set(const char *id, double measured) {
  for (size_t i = 0; i < NGOALS; i++)
    if (!strcmp(GOALS[i].id, id)) {
      GOALS[i].measured = measured;
      return;
    }
  fprintf(stderr, "xfetch-bench: no goal %s\n", id);
  abort();
}

static int met(const goal *g) {
  return g->at_least ? g->measured >= g->limit : g->measured <= g->limit;
}

void goals_print(FILE *f) {
  fprintf(f, "\ngoals (ratios from this run; memory against SET PX with the same TTL, "
             "TLS against a raw GET over TLS)\n");
  for (size_t i = 0; i < NGOALS; i++) {
    const goal *g = &GOALS[i];
    if (isfinite(g->measured))
      fprintf(f, "  %-56s %8.2fx  %s %4gx  %s\n", g->what, g->measured,
              g->at_least ? ">=" : "<=", g->limit, met(g) ? "met" : "missed");
    else
      fprintf(f, "  %-56s %9s  %s %4gx  not measured (%s%s)\n", g->what, "-",
              g->at_least ? ">=" : "<=", g->limit, g->scenario,
              strcmp(g->scenario, "hit_cost") ? " not in this run"
                                              : ": not run, or --quick");
  }
}

void goals_json(FILE *f) {
  fprintf(f, "\"goals\": [");
  for (size_t i = 0; i < NGOALS; i++) {
    const goal *g = &GOALS[i];
    int m = isfinite(g->measured);
    fprintf(f, "%s\n    {\"id\": \"%s\", \"scenario\": \"%s\", \"what\": \"%s\", ",
            i ? "," : "", g->id, g->scenario, g->what);
    if (m)
      fprintf(f, "\"measured\": %.4g, ", g->measured);
    else
      fprintf(f, "\"measured\": null, ");
    fprintf(f, "\"op\": \"%s\", \"limit\": %g, \"met\": %s}",
            g->at_least ? ">=" : "<=", g->limit, m ? (met(g) ? "true" : "false") : "null");
  }
  fprintf(f, "\n  ]");
}
