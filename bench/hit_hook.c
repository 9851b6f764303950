/* hit_cost's hook pass (issue 22): what the event hook costs on the hit
 * path, and the figures a C service gets from xf_stats and the hook.
 *
 *   one warm 16-byte key, two clients: one without a hook, one with a no-op
 *   hook that only counts events by type (as a metrics hook would); their
 *   hits interleaved in blocks (a load change on the shared machine falls on
 *   both); p50 of each hit's wall time and their ratio, from one run. The
 *   instruction count (deterministic) is bench/hit_loop's, under callgrind.
 *
 * JSON: params "hook": {no_hook_p50_us, noop_hook_p50_us, hook_ratio,
 * events: {type: n}, stats: xf_stats of the hooked client}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hit_cost.h"

#define HOOK_BLOCK 50
#define NTYPES (XF_EV_INVALIDATION + 1)

static void count_event(const xf_event *ev, void *ud) {
  unsigned long *by_type = ud;
  if ((int)ev->type >= 0 && ev->type < NTYPES)
    by_type[ev->type]++;
}

/* A hit on c; a failure is counted in errs. 0 or -1. */
static int hit(xf_client *c, const hc *h, step_errors *errs) {
  xf_value v;
  int rc = xf_get_or_compute(c, h->xkey, strlen(h->xkey), &h->p, drv_loader, NULL, &v);
  int bad = drv_count_bad_hit(errs, "xf_get_or_compute", rc, &v, xf_errmsg(c));
  xf_value_free(&v);
  return bad ? -1 : 0;
}

static size_t stats_json(char *buf, size_t cap, const xf_stats *s) {
  return (size_t)snprintf(
      buf, cap,
      "{\"hits\": %llu, \"misses\": %llu, \"early\": %llu, \"loads\": %llu, "
      "\"load_errors\": %llu, \"waits\": %llu, \"stale\": %llu, \"uncached\": %llu, "
      "\"redis_errors\": %llu, \"connections\": %llu}",
      (unsigned long long)s->hits, (unsigned long long)s->misses,
      (unsigned long long)s->early, (unsigned long long)s->loads,
      (unsigned long long)s->load_errors, (unsigned long long)s->waits,
      (unsigned long long)s->stale, (unsigned long long)s->uncached,
      (unsigned long long)s->redis_errors, (unsigned long long)s->connections);
}

int hc_hook_pass(hc *h, scenario_out *out, int q) {
  static unsigned long by_type[NTYPES];
  memset(by_type, 0, sizeof by_type);
  xf_options o = target_options(h->e->t);
  o.on_event = count_event;
  o.on_event_ud = by_type;
  xf_client *hooked = NULL;
  int n = q ? 400 : 5000, rc = xf_client_open(&hooked, &o);
  uint32_t *us[2] = {malloc((size_t)n * sizeof(uint32_t)),
                     malloc((size_t)n * sizeof(uint32_t))};
  snprintf(h->xkey, sizeof h->xkey, "xfb:%x:hc:hook", h->e->cfg->run_id);
  if (rc != XF_OK)
    step_failed("hook pass: xf_client_open (hooked)", rc,
                hooked ? xf_errmsg(hooked) : NULL);
  else if (!us[0] || !us[1])
    rc = step_failed("hook pass", XF_ENOMEM, NULL);
  else if ((rc = xf_set(h->x, h->xkey, strlen(h->xkey), "0123456789abcdef", 16, &h->p)) !=
           XF_OK)
    step_failed("hook pass: xf_set", rc, xf_errmsg(h->x));
  xf_client *way[2] = {h->x, hooked};
  step_errors errs = {0};
  for (int i = 0; rc == XF_OK && i < 20; i++) /* warm-up */
    hit(h->x, h, &errs), hit(hooked, h, &errs);
  for (int done = 0, b = 0; rc == XF_OK && done < n; done += HOOK_BLOCK, b++)
    for (int k = 0; k < 2; k++) {
      int w = (b + k) % 2;
      for (int i = done; i < done + HOOK_BLOCK && i < n; i++) {
        int64_t t0 = now_us();
        hit(way[w], h, &errs); /* failures counted, their time kept */
        us[w][i] = (uint32_t)(now_us() - t0);
      }
    }
  if (rc == XF_OK && errs.n >= (uint64_t)n)
    rc = step_meaningless("hook pass", "the hook's ratio", "no hit succeeded", &errs);
  else if (rc == XF_OK)
    step_errors_report("hook pass", &errs, 2 * (uint64_t)n + 40);
  if (rc == XF_OK) {
    double p0 = drv_pct(us[0], (size_t)n, 0.5), p1 = drv_pct(us[1], (size_t)n, 0.5);
    printf("\nhit_cost: the event hook on the hit path (16 B, %d hits each, interleaved): "
           "no hook p50 %.0f us, no-op hook p50 %.0f us, ratio %.3f\n",
           n, p0, p1, p1 / p0);
    size_t at = strlen(out->params);
    at +=
        (size_t)snprintf(out->params + at, sizeof out->params - at,
                         "\"hook\": {\"hits\": %d, \"no_hook_p50_us\": %.0f, "
                         "\"noop_hook_p50_us\": %.0f, \"hook_ratio\": %.3g, \"events\": {",
                         n, p0, p1, p1 / p0);
    for (int t = 0, first = 1; t < NTYPES; t++)
      if (by_type[t]) {
        at += (size_t)snprintf(out->params + at, sizeof out->params - at, "%s\"%s\": %lu",
                               first ? "" : ", ", xf_event_name(t), by_type[t]);
        first = 0;
      }
    xf_stats st;
    xf_client_stats(hooked, &st);
    at += (size_t)snprintf(out->params + at, sizeof out->params - at, "}, \"stats\": ");
    at += stats_json(out->params + at, sizeof out->params - at, &st);
    snprintf(out->params + at, sizeof out->params - at, "}, ");
  }
  free(us[0]);
  free(us[1]);
  xf_client_close(hooked);
  return rc == XF_OK ? 0 : -1;
}
