/* write_cost: what a write costs Redis, by value size (16 B, 1 KiB, 100 KiB,
 * 1 MiB, 8 MiB; --quick 16 B and 1 MiB), one connection, one key per size:
 *   set: xf_set (the write script alone);
 *   lease + write: xf_get_or_compute with XFetch (refresh_ahead < 0) and
 *     beta = INFINITY on a warm entry
 *     (every call is elected early: a lease, the loader handing back a value
 *     of the same size, a write).
 * Server us per call: cmdstat_evalsha's usec over the pass (CONFIG RESETSTAT
 * before it), which holds the commands the scripts run. Figures to stdout and
 * the JSON's params; bench/README.md "Write cost" has them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers.h"
#include "hit_cost.h"

typedef struct write_size {
  size_t len;
  const char *label;
  int calls; /* per pass */
  int quick;
} write_size;

static const write_size SIZES[] = {{16, "16B", 2000, 1},
                                   {1024, "1KiB", 2000, 0},
                                   {100 << 10, "100KiB", 500, 0},
                                   {1 << 20, "1MiB", 100, 1},
                                   {8 << 20, "8MiB", 20, 0}};

typedef struct wc_value {
  const char *data;
  size_t len;
} wc_value;

static int same_size(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  const wc_value *v = ud;
  return xf_sink_set(sink, v->data, v->len);
}

/* cmdstat_evalsha's usec and calls since the last CONFIG RESETSTAT. */
static int evalsha_stats(redisContext *ctl, double *usec, double *calls) {
  redisReply *r = hc_cmd(ctl, "INFO commandstats");
  *usec = *calls = 0;
  const char *at =
      r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_evalsha:") : NULL;
  int ok = at && sscanf(at, "cmdstat_evalsha:calls=%lf,usec=%lf", calls, usec) == 2;
  if (!ok)
    step_failed_redis("INFO commandstats (cmdstat_evalsha)", ctl, r);
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

/* n calls of one way on key; us per call, or a negative value (reported).
 * A failed call is counted in errs (the server's time over n stands: it ran
 * what it received). */
static double pass(redisContext *ctl, xf_client *x, const char *key, wc_value *v, int n,
                   int lease, step_errors *errs) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  p.refresh_ahead = -1; /* XFetch, whose beta = INFINITY recomputes every call */
  p.beta = INFINITY;
  int rc = xf_set(x, key, strlen(key), v->data, v->len, &p); /* warm, scripts loaded */
  if (rc != XF_OK)
    return step_failed("xf_set (warm-up)", rc, xf_errmsg(x));
  redisReply *r = hc_cmd(ctl, "CONFIG RESETSTAT");
  if (!r || r->type != REDIS_REPLY_STATUS) {
    step_failed_redis("CONFIG RESETSTAT", ctl, r);
    if (r)
      freeReplyObject(r);
    return -1;
  }
  freeReplyObject(r);
  for (int i = 0; i < n; i++) {
    if (!lease) {
      if ((rc = xf_set(x, key, strlen(key), v->data, v->len, &p)) != XF_OK)
        step_count(errs, "xf_set", rc, xf_errmsg(x));
      continue;
    }
    xf_value got;
    rc = xf_get_or_compute(x, key, strlen(key), &p, same_size, v, &got);
    if (rc != XF_OK)
      step_count(errs, "xf_get_or_compute (lease + write)", rc, xf_errmsg(x));
    else if (got.source != XF_SOURCE_LOADER || got.len != v->len)
      step_count_because(errs, "xf_get_or_compute (lease + write)",
                         "not a lease and a write of the value");
    xf_value_free(&got);
  }
  if (errs->n >= (uint64_t)n)
    return step_meaningless(lease ? "lease + write" : "xf_set", "server us per call",
                            "no call succeeded", errs);
  double usec, calls;
  if (evalsha_stats(ctl, &usec, &calls) != 0)
    return -1;
  return usec / n;
}

int sc_write_cost(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, rc = -1;
  redisContext *ctl = target_connect(e->t, 10000);
  xf_client *x = drv_client(e->t);
  char *buf = malloc(8 << 20);
  out->name = "write_cost";
  snprintf(out->params, sizeof out->params, "{");
  if (!buf)
    step_failed("the values", XF_ENOMEM, NULL);
  if (!ctl || !x || !buf) /* reported */
    goto done;
  for (size_t i = 0; i < (size_t)8 << 20; i++)
    buf[i] = (char)(i * 7 + 1);
  printf("\nwrite_cost: server us per call (cmdstat_evalsha), one connection\n");
  printf("%-8s %6s %10s %14s\n", "value", "calls", "xf_set", "lease+write");
  size_t at = strlen(out->params);
  for (size_t i = 0; i < sizeof SIZES / sizeof *SIZES; i++) {
    const write_size *z = &SIZES[i];
    if (q && !z->quick)
      continue;
    char key[64];
    snprintf(key, sizeof key, "xfb:%x:wc:%s", e->cfg->run_id, z->label);
    wc_value v = {buf, z->len};
    int n = q ? (z->calls + 9) / 10 : z->calls;
    step_errors set_errs = {0}, lease_errs = {0};
    double set_us = pass(ctl, x, key, &v, n, 0, &set_errs);
    double lease_us = set_us < 0 ? -1 : pass(ctl, x, key, &v, n, 1, &lease_errs);
    hc_cmd_free(ctl, "DEL %s", key);
    if (set_us < 0 || lease_us < 0) {
      step_failed_because(z->label,
                          "this size's figures are not measured (the step above)");
      goto done;
    }
    char step[48];
    snprintf(step, sizeof step, "%s xf_set", z->label);
    step_errors_report(step, &set_errs, (uint64_t)n);
    snprintf(step, sizeof step, "%s lease + write", z->label);
    step_errors_report(step, &lease_errs, (uint64_t)n);
    printf("%-8s %6d %10.1f %14.1f\n", z->label, n, set_us, lease_us);
    at += (size_t)snprintf(out->params + at, sizeof out->params - at,
                           "%s\"set_us_%s\": %.1f, \"lease_write_us_%s\": %.1f",
                           at > 1 ? ", " : "", z->label, set_us, z->label, lease_us);
  }
  snprintf(out->params + at, sizeof out->params - at, "}");
  rc = 0;
done:
  if (rc)
    snprintf(out->params, sizeof out->params, "{\"failed\": true}");
  free(buf);
  xf_client_close(x);
  if (ctl)
    redisFree(ctl);
  return rc;
}
