/* What tags cost (tags_measure.h): one client of t, one pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "step.h"
#include "tags_measure.h"
#include "xfetch.h"

#define BLOCK 50
#define ROUNDS 200 /* invalidations timed */

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  ++*(long *)ud;
  return xf_sink_set(sink, "v", 1);
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(int64_t *v, long n, double q) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return (double)v[(long)(q * (double)(n - 1))];
}

static double calls(redisContext *r) {
  double us = 0, n = 0;
  target_commandstats(r, &us, &n);
  return n;
}

/* Hits of the three kinds, taking turns in blocks. */
static int hits_of(xf_client *c, redisContext *r, long k, long *loads, tags_figures *out) {
  const char *one[] = {"tc:a"}, *two[] = {"tc:a", "tc:b"};
  xf_policy p[3] = {XF_POLICY_INIT, XF_POLICY_INIT, XF_POLICY_INIT};
  const char *keys[3] = {"tc:hit:0", "tc:hit:1", "tc:hit:2"};
  for (int w = 0; w < 3; w++)
    p[w].ttl_ms = 3600000, p[w].beta = 0;
  p[1].tags = one, p[1].ntags = 1;
  p[2].tags = two, p[2].ntags = 2;
  int rc = XF_OK;
  int64_t *lat[3] = {0};
  double block_us[3] = {0}; /* whole blocks timed: a mean below 1 us */
  for (int w = 0; w < 3; w++)
    if (!(lat[w] = malloc((size_t)k * sizeof **lat)))
      rc = XF_ENOMEM;
  for (long i = 0; rc == XF_OK && i < 3 * 200; i++) { /* warm: loaded, scripts known */
    xf_value v;
    rc = xf_get_or_compute(c, keys[i % 3], strlen(keys[i % 3]), &p[i % 3], loader, loads,
                           &v);
    xf_value_free(&v);
  }
  for (long at = 0; rc == XF_OK && at < k; at += BLOCK)
    for (int w = 0; rc == XF_OK && w < 3; w++) {
      double before = calls(r);
      int64_t b0 = now_us();
      for (long i = at; rc == XF_OK && i < at + BLOCK && i < k; i++) {
        xf_value v;
        int64_t t0 = now_us();
        rc = xf_get_or_compute(c, keys[w], strlen(keys[w]), &p[w], loader, loads, &v);
        lat[w][i] = now_us() - t0;
        if (rc == XF_OK && v.source != XF_SOURCE_CACHE)
          rc = XF_EREDIS;
        xf_value_free(&v);
      }
      block_us[w] += (double)(now_us() - b0);
      out->hit_cmds[w] += calls(r) - before;
    }
  for (int w = 0; rc == XF_OK && w < 3; w++) {
    out->hit_mean_us[w] = block_us[w] / (double)k;
    out->hit_p50_us[w] = pct(lat[w], k, 0.5);
    out->hit_p99_us[w] = pct(lat[w], k, 0.99);
    out->hit_cmds[w] /= (double)k;
  }
  for (int w = 0; w < 3; w++)
    free(lat[w]);
  return rc == XF_OK ? 0 : step_failed("tagged hits", rc, xf_errmsg(c));
}

/* entries entries carrying one tag, then its invalidation ROUNDS times. */
static int invalidation_of(xf_client *c, redisContext *r, long entries, long *loads,
                           tags_figures *out) {
  const char *tag[] = {"tc:many"};
  xf_policy q = XF_POLICY_INIT;
  q.ttl_ms = 3600000;
  q.tags = tag, q.ntags = 1;
  char key[48];
  int rc = XF_OK;
  int64_t w0 = now_us();
  for (long i = 0; rc == XF_OK && i < entries; i++) {
    snprintf(key, sizeof key, "tc:e:%ld", i);
    rc = xf_set(c, key, strlen(key), "v", 1, &q);
  }
  if (rc != XF_OK)
    return step_failed("writing the tagged entries", rc, xf_errmsg(c));
  out->write_s = (double)(now_us() - w0) / 1e6;
  int64_t inv[ROUNDS];
  double before = calls(r);
  for (int i = 0; rc == XF_OK && i < ROUNDS; i++) {
    int64_t t0 = now_us();
    rc = xf_invalidate_tags(c, tag, 1);
    inv[i] = now_us() - t0;
  }
  if (rc != XF_OK)
    return step_failed("xf_invalidate_tags", rc, xf_errmsg(c));
  out->inv_cmds = (calls(r) - before) / ROUNDS;
  out->inv_p50_us = pct(inv, ROUNDS, 0.5);
  out->inv_p99_us = pct(inv, ROUNDS, 0.99);
  out->sampled = entries < 1000 ? entries : 1000;
  for (long i = 0; rc == XF_OK && i < out->sampled; i++) {
    snprintf(key, sizeof key, "tc:e:%ld", i * (entries / out->sampled));
    long before_loads = *loads;
    xf_value v;
    rc = xf_get_or_compute(c, key, strlen(key), &q, loader, loads, &v);
    out->missed += *loads > before_loads;
    xf_value_free(&v);
  }
  return rc == XF_OK ? 0 : step_failed("reading the invalidated entries", rc, xf_errmsg(c));
}

int tags_measure(const target *t, long entries, long hits, int near, tags_figures *out) {
  memset(out, 0, sizeof *out);
  xf_options o = target_options(t);
  xf_share *share = NULL;
  if (near) {
    xf_share_options so = {0};
    so.near_cache_bytes = 64u << 20;
    int rc = xf_share_open(&share, &so);
    if (rc != XF_OK)
      return step_failed("the near cache's share", rc, NULL);
    o.share = share;
  }
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  redisContext *r = rc == XF_OK ? target_connect(t, 5000) : NULL;
  int failed = rc != XF_OK ? step_failed("opening a client", rc, xf_errmsg(NULL))
               : !r        ? step_failed("a control connection", XF_ECONNECT, NULL)
                           : 0;
  long loads = 0;
  if (!failed)
    failed = hits_of(c, r, hits, &loads, out);
  if (!failed)
    failed = invalidation_of(c, r, entries, &loads, out);
  xf_client_close(c);
  xf_share_close(share);
  if (r)
    redisFree(r);
  return failed ? -1 : 0;
}
