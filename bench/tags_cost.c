/* tags_cost: what tags cost, in one run against one throwaway redis-server
 * (or --port P).
 *
 *   hits: p50 and p99 of one xf_get_or_compute hit's wall time (µs) on a key
 *     without tags, with 1 tag and with 2 tags, interleaved in blocks of 50 so
 *     that a load change on the shared machine falls on all three; and the
 *     commands Redis ran per hit (INFO commandstats: a script's own commands
 *     counted, PING not);
 *   invalidation: N entries that all carry one tag (written with xf_set),
 *     then xf_invalidate_tags of that tag R times: p50 and p99 of its wall
 *     time, the commands per invalidation, and a check that the entries are
 *     misses afterwards (a sample of 1,000).
 *
 *   --near: the client's share keeps a near cache (64 MiB): the tags' versions
 *     are kept there, and an untagged hit is a near hit.
 *
 *   tags_cost [--entries N] [--hits K] [--port P] [--near] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
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

int main(int argc, char **argv) {
  long entries = 100000, k = 20000;
  int port = 0, near = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--near"))
      near = 1;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--near"))
      i--;
    else if (!strcmp(argv[i], "--entries"))
      entries = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--hits"))
      k = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--port"))
      port = atoi(argv[i + 1]);
  target t = {0};
  if (port) {
    snprintf(t.host, sizeof t.host, "127.0.0.1");
    t.port = port;
  } else if (target_start_server(&t) != 0) {
    return 1;
  }
  xf_options o = target_options(&t);
  xf_share *share = NULL;
  if (near) {
    xf_share_options so = {0};
    so.near_cache_bytes = 64u << 20;
    if (xf_share_open(&share, &so) != XF_OK)
      return 1;
    o.share = share;
  }
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  redisContext *r = target_connect(&t, 5000);
  if (rc != XF_OK || !r) {
    fprintf(stderr, "tags_cost: cannot connect\n");
    return 1;
  }
  const char *one[] = {"tc:a"}, *two[] = {"tc:a", "tc:b"};
  xf_policy p[3] = {XF_POLICY_INIT, XF_POLICY_INIT, XF_POLICY_INIT};
  const char *names[3] = {"untagged", "1 tag", "2 tags"};
  const char *keys[3] = {"tc:hit:0", "tc:hit:1", "tc:hit:2"};
  for (int w = 0; w < 3; w++)
    p[w].ttl_ms = 3600000, p[w].beta = 0;
  p[1].tags = one, p[1].ntags = 1;
  p[2].tags = two, p[2].ntags = 2;
  long loads = 0;
  int64_t *lat[3];
  double cmds[3] = {0}, block_us[3] = {0}; /* whole blocks timed: a mean below 1 us */
  for (int w = 0; w < 3; w++)
    lat[w] = malloc((size_t)k * sizeof **lat);
  for (long i = 0; rc == XF_OK && i < 3 * 200; i++) { /* warm: loaded, scripts known */
    xf_value v;
    rc = xf_get_or_compute(c, keys[i % 3], strlen(keys[i % 3]), &p[i % 3], loader, &loads,
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
        rc = xf_get_or_compute(c, keys[w], strlen(keys[w]), &p[w], loader, &loads, &v);
        lat[w][i] = now_us() - t0;
        if (v.source != XF_SOURCE_CACHE)
          rc = XF_EREDIS;
        xf_value_free(&v);
      }
      block_us[w] += (double)(now_us() - b0);
      cmds[w] += calls(r) - before;
    }
  if (rc != XF_OK) {
    fprintf(stderr, "tags_cost: hits: %s: %s\n", xf_strerror(rc), xf_errmsg(c));
    return 1;
  }
  printf("hits (%ld each, interleaved%s):\n", k, near ? ", near cache on" : "");
  double base = 0;
  for (int w = 0; w < 3; w++) {
    double p50 = pct(lat[w], k, 0.5), p99 = pct(lat[w], k, 0.99);
    if (w == 0)
      base = p50;
    printf("  %-8s mean %6.2f us  p50 %5.1f us  p99 %6.1f us  %.2f commands/hit", names[w],
           block_us[w] / (double)k, p50, p99, cmds[w] / (double)k);
    if (base > 0)
      printf("  p50 %.2fx untagged", p50 / base);
    printf("\n");
  }
  /* invalidation: entries entries carrying one tag */
  const char *tag[] = {"tc:many"};
  xf_policy q = XF_POLICY_INIT;
  q.ttl_ms = 3600000;
  q.tags = tag, q.ntags = 1;
  char key[48];
  int64_t w0 = now_us();
  for (long i = 0; rc == XF_OK && i < entries; i++) {
    snprintf(key, sizeof key, "tc:e:%ld", i);
    rc = xf_set(c, key, strlen(key), "v", 1, &q);
  }
  double write_s = (double)(now_us() - w0) / 1e6;
  int64_t inv[ROUNDS];
  double before = calls(r);
  for (int i = 0; rc == XF_OK && i < ROUNDS; i++) {
    int64_t t0 = now_us();
    rc = xf_invalidate_tags(c, tag, 1);
    inv[i] = now_us() - t0;
  }
  double per = (calls(r) - before) / ROUNDS;
  long missed = 0, sample = entries < 1000 ? entries : 1000;
  for (long i = 0; rc == XF_OK && i < sample; i++) {
    snprintf(key, sizeof key, "tc:e:%ld", i * (entries / sample));
    long before_loads = loads;
    xf_value v;
    rc = xf_get_or_compute(c, key, strlen(key), &q, loader, &loads, &v);
    missed += loads > before_loads;
    xf_value_free(&v);
  }
  if (rc != XF_OK) {
    fprintf(stderr, "tags_cost: invalidation: %s: %s\n", xf_strerror(rc), xf_errmsg(c));
    return 1;
  }
  printf("invalidation of a tag %ld entries carry (written in %.1f s):\n", entries,
         write_s);
  printf(
      "  p50 %.1f us  p99 %.1f us  %.2f commands each (a script's own counted, a fence's "
      "PING not); %ld of %ld sampled entries "
      "loaded again after it\n",
      pct(inv, ROUNDS, 0.5), pct(inv, ROUNDS, 0.99), per, missed, sample);
  xf_client_close(c);
  xf_share_close(share);
  redisFree(r);
  if (t.pid)
    target_stop_server(&t);
  return 0;
}
