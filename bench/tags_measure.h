/* What tags cost, measured against one Redis (bench/tags_measure.c): used by
 * xfetch-bench's `tags` scenario. */
#ifndef BENCH_TAGS_MEASURE_H
#define BENCH_TAGS_MEASURE_H

#include "bench.h"

/* One pass: hits on a key without tags, with 1 tag and with 2 tags (in that
 * order in the arrays), then the invalidation of a tag `entries` entries
 * carry. */
typedef struct tags_figures {
  double hit_mean_us[3], hit_p50_us[3], hit_p99_us[3];
  double hit_cmds[3]; /* Redis commands per hit (a script's own counted) */
  double write_s;     /* writing the entries (xf_set, one by one) */
  double inv_p50_us, inv_p99_us;
  double inv_cmds;      /* Redis commands per invalidation (a fence's PING not) */
  long missed, sampled; /* sampled entries loaded again after it */
} tags_figures;

/* hits: per kind, timed one by one in blocks of 50 that take turns, so a
 * change of load on the machine falls on all three. near: the client's share
 * keeps a near cache (64 MiB). 0, or -1 with the failed step reported
 * (step.h). */
int tags_measure(const target *t, long entries, long hits, int near, tags_figures *out);

#endif
