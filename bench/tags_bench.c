/* xfetch-bench's `tags` scenario: a hit without tags, with 1 tag and with 2
 * tags (p50 and Redis commands per hit), with the near cache off and on, and
 * one invalidation of a tag that every one of N entries carries (p50, its
 * commands), in one run against the run's Redis. */
#include <stdio.h>

#include "goals.h"
#include "scenarios.h"
#include "step.h"
#include "tags_measure.h"

/* A hit of kind w against the untagged one: p50s, or the means where the
 * untagged p50 is under 5 us (a near hit: whole microseconds). */
static double over_untagged(const tags_figures *f, int w) {
  if (f->hit_p50_us[0] >= 5)
    return f->hit_p50_us[w] / f->hit_p50_us[0];
  return f->hit_mean_us[0] > 0 ? f->hit_mean_us[w] / f->hit_mean_us[0] : 0;
}

static void print_pass(const char *label, const tags_figures *f) {
  static const char *kinds[3] = {"untagged", "1 tag", "2 tags"};
  printf("  %s\n", label);
  for (int w = 0; w < 3; w++)
    printf("    hit, %-8s mean %7.2f us  p50 %6.1f us  p99 %7.1f us  %.2f commands/hit  "
           "%.2fx untagged\n",
           kinds[w], f->hit_mean_us[w], f->hit_p50_us[w], f->hit_p99_us[w], f->hit_cmds[w],
           over_untagged(f, w));
}

int sc_tags(const bench_env *e, scenario_out *out) {
  long entries = e->cfg->quick ? 10000 : 1000000, hits = e->cfg->quick ? 2000 : 20000;
  tags_figures off, near;
  out->name = "tags";
  snprintf(out->params, sizeof out->params, "{\"failed\": true}");
  printf("\ntags: %ld hits of each kind in blocks of 50 taking turns; one tag on %ld "
         "entries invalidated 200 times\n",
         hits, entries);
  if (tags_measure(e->t, entries, hits, 0, &off) != 0)
    return -1;
  print_pass("near cache off", &off);
  if (tags_measure(e->t, entries / 100, hits, 1, &near) != 0) /* its hits matter */
    return -1;
  print_pass("near cache on (the versions kept in the process)", &near);
  printf("  invalidation of a tag %ld entries carry: p50 %.1f us  p99 %.1f us  %.2f "
         "commands each; %ld of %ld sampled entries loaded again after it\n",
         entries, off.inv_p50_us, off.inv_p99_us, off.inv_cmds, off.missed, off.sampled);
  if (off.missed != off.sampled)
    return step_failed_because("invalidation",
                               "some entries were still served after their tag was raised");
  double ratio_off = over_untagged(&off, 2), ratio_near = over_untagged(&near, 2);
  goal_set("tags_hit_vs_untagged", ratio_off);
  goal_set("tags_hit_vs_untagged_near", ratio_near);
  goal_set("tags_near_extra_cmds_per_hit", near.hit_cmds[2] - near.hit_cmds[0]);
  goal_set("tags_invalidate_p50_ms", off.inv_p50_us / 1000);
  snprintf(out->params, sizeof out->params,
           "{\"entries\": %ld, \"hits\": %ld, \"hit_p50_us\": [%.1f, %.1f, %.1f], "
           "\"hit_cmds\": [%.2f, %.2f, %.2f], \"near_hit_mean_us\": [%.2f, %.2f, %.2f], "
           "\"near_hit_cmds\": [%.3f, %.3f, %.3f], \"tagged_over_untagged\": %.3f, "
           "\"tagged_over_untagged_near\": %.3f, \"invalidate_p50_us\": %.1f, "
           "\"invalidate_p99_us\": %.1f, \"invalidate_cmds\": %.2f, \"write_s\": %.1f}",
           entries, hits, off.hit_p50_us[0], off.hit_p50_us[1], off.hit_p50_us[2],
           off.hit_cmds[0], off.hit_cmds[1], off.hit_cmds[2], near.hit_mean_us[0],
           near.hit_mean_us[1], near.hit_mean_us[2], near.hit_cmds[0], near.hit_cmds[1],
           near.hit_cmds[2], ratio_off, ratio_near, off.inv_p50_us, off.inv_p99_us,
           off.inv_cmds, off.write_s);
  return 0;
}
