/* xfetch-bench --cluster: the library on a throwaway Redis Cluster (3 masters
 * + 3 replicas, tests/cluster_launch.c) next to a throwaway standalone
 * redis-server, in one run:
 *   hit_overhead  one client, 1,000 warm keys: client latency per hit, server
 *                 us per hit on each node (INFO commandstats), redirects per
 *                 1,000 calls, commands per hit;
 *   hot_key       threads (one client each) on one key that expires every
 *                 500 ms, 20 ms loader: loader calls per expiry, errors,
 *                 latency, redirects per 1,000 calls;
 *   invalidate    one client, 1,000 invalidations of one tag in a row
 *                 (xf_invalidate_tags): p50 and p99. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cluster_fixture.h"
#include "xfetch.h"

#define HIT_KEYS 1000
#define HOT_TTL_MS 500
#define HOT_LOADER_MS 20
#define INVALIDATIONS 1000

typedef struct node_stat {
  int port;
  double usec, calls;
} node_stat;

typedef struct side {
  const char *name;
  char host[128];
  int ports[XFT_CLUSTER_NODES];
  int nports;
  /* hit_overhead */
  double hit_p50, hit_p99, hit_redirects, hit_cmds_per_hit;
  step_errors hit_errs; /* failed hits, counted */
  node_stat nodes[XFT_CLUSTER_NODES];
  /* hot_key */
  long hot_calls, hot_errors, hot_loads;
  double hot_p50, hot_p99, hot_redirects, hot_seconds;
  /* invalidate */
  double inv_p50, inv_p99;
  step_errors inv_errs;
} side;

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static double pct(uint32_t *v, size_t n, double p) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof *v, cmp_u32);
  return v[(size_t)(p * (double)(n - 1))];
}

static int value_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  if (ud) {
    __atomic_add_fetch((long *)ud, 1, __ATOMIC_SEQ_CST);
    sleep_us(HOT_LOADER_MS * 1000);
  }
  return xf_sink_set(sink, "a value of some thirty bytes...", 31);
}

static xf_client *open_client(const side *s) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = s->host;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  if (rc != XF_OK) {
    char step[160];
    snprintf(step, sizeof step, "xf_client_open %s", s->host);
    step_failed(step, rc, c ? xf_errmsg(c) : NULL);
    xf_client_close(c);
    return NULL;
  }
  return c;
}

/* The read script's server usec and calls on r since the last reset (the
 * commands it runs inside are counted apart by Redis: left out). */
static void read_script_stats(redisContext *r, double *usec, double *calls) {
  *usec = *calls = 0;
  redisReply *info = redisCommand(r, "INFO commandstats");
  const char *at = info && info->type == REDIS_REPLY_STRING
                       ? strstr(info->str, "cmdstat_evalsha_ro:")
                       : NULL;
  if (at)
    sscanf(at, "cmdstat_evalsha_ro:calls=%lf,usec=%lf", calls, usec);
  if (info)
    freeReplyObject(info);
}

/* Server usec and calls of each node since the last reset (reset = 1 resets). */
static void node_stats(side *s, int reset) {
  for (int i = 0; i < s->nports; i++) {
    redisContext *r = xft_cluster_connect(s->ports[i]);
    if (!r)
      continue;
    s->nodes[i].port = s->ports[i];
    if (reset)
      freeReplyObject(redisCommand(r, "CONFIG RESETSTAT"));
    else
      read_script_stats(r, &s->nodes[i].usec, &s->nodes[i].calls);
    redisFree(r);
  }
}

static int hit_overhead(side *s, int hits) {
  xf_client *c = open_client(s);
  if (!c)
    return -1;
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  char key[32];
  xf_value v;
  step_errors warm = {0};
  for (int i = 0; i < HIT_KEYS; i++) {
    int len = snprintf(key, sizeof key, "xfb:hit:%d", i);
    int rc = xf_get_or_compute(c, key, (size_t)len, &p, value_loader, NULL, &v);
    if (rc == XF_OK)
      xf_value_free(&v);
    else
      step_count(&warm, "xf_get_or_compute (warm-up)", rc, xf_errmsg(c));
  }
  step_errors_report(s->name, &warm, HIT_KEYS);
  node_stats(s, 1);
  xf_stats before, after;
  xf_client_stats(c, &before);
  uint32_t *lat = malloc((size_t)hits * sizeof *lat);
  for (int i = 0; lat && i < hits; i++) {
    int len = snprintf(key, sizeof key, "xfb:hit:%d", i % HIT_KEYS);
    int64_t t0 = now_us();
    int rc = xf_get_or_compute(c, key, (size_t)len, &p, value_loader, NULL, &v);
    if (rc == XF_OK)
      xf_value_free(&v);
    else
      step_count(&s->hit_errs, "xf_get_or_compute", rc, xf_errmsg(c));
    lat[i] = (uint32_t)(now_us() - t0);
  }
  if (s->hit_errs.n >= (uint64_t)hits) {
    free(lat);
    xf_client_close(c);
    return step_meaningless(s->name, "p50, p99", "no hit succeeded", &s->hit_errs);
  }
  step_errors_report(s->name, &s->hit_errs, (uint64_t)hits);
  xf_client_stats(c, &after);
  node_stats(s, 0);
  double calls = 0;
  for (int i = 0; i < s->nports; i++)
    calls += s->nodes[i].calls;
  s->hit_p50 = lat ? pct(lat, (size_t)hits, 0.5) : 0;
  s->hit_p99 = lat ? pct(lat, (size_t)hits, 0.99) : 0;
  s->hit_redirects = 1000.0 * (double)(after.redirects - before.redirects) / hits;
  s->hit_cmds_per_hit = calls / hits;
  free(lat);
  xf_client_close(c);
  return 0;
}

typedef struct hot_thread {
  pthread_t th;
  const side *s;
  int64_t until_us;
  long *loads;
  uint32_t *lat;
  size_t n, cap;
  step_errors errs;
  uint64_t redirects;
} hot_thread;

static void *hot_loop(void *arg) {
  hot_thread *h = arg;
  xf_client *c = open_client(h->s);
  if (!c) { /* reported; counted: this thread makes no call */
    step_count_because(&h->errs, "a thread's xf_client_open", "see above");
    return NULL;
  }
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = HOT_TTL_MS;
  while (now_us() < h->until_us) {
    xf_value v;
    int64_t t0 = now_us();
    int rc = xf_get_or_compute(c, "xfb:hot", 7, &p, value_loader, h->loads, &v);
    if (h->n < h->cap)
      h->lat[h->n++] = (uint32_t)(now_us() - t0);
    if (rc == XF_OK)
      xf_value_free(&v);
    else
      step_count(&h->errs, "xf_get_or_compute", rc, xf_errmsg(c));
    sleep_us(200); /* think time */
  }
  xf_stats st;
  xf_client_stats(c, &st);
  h->redirects = st.redirects;
  xf_client_close(c);
  return NULL;
}

static int hot_key(side *s, int threads, double seconds) {
  hot_thread h[64];
  long loads = 0;
  int64_t t0 = now_us();
  size_t cap = (size_t)(seconds * 10000) + 1000;
  for (int i = 0; i < threads; i++) {
    h[i] = (hot_thread){.s = s,
                        .until_us = t0 + (int64_t)(seconds * 1e6),
                        .loads = &loads,
                        .cap = cap,
                        .lat = malloc(cap * sizeof(uint32_t))};
    int err = h[i].lat ? pthread_create(&h[i].th, NULL, hot_loop, &h[i]) : ENOMEM;
    if (err) { /* the threads started run to their end */
      for (int j = 0; j < i; j++)
        pthread_join(h[j].th, NULL), free(h[j].lat);
      free(h[i].lat);
      return step_failed_because("hot_key: a thread", strerror(err));
    }
  }
  uint32_t *all = malloc((size_t)threads * cap * sizeof *all);
  size_t n = 0;
  uint64_t redirects = 0;
  step_errors errs = {0};
  for (int i = 0; i < threads; i++) {
    pthread_join(h[i].th, NULL);
    if (all)
      memcpy(all + n, h[i].lat, h[i].n * sizeof *all);
    n += h[i].n;
    step_merge(&errs, &h[i].errs);
    redirects += h[i].redirects;
    free(h[i].lat);
  }
  s->hot_seconds = (double)(now_us() - t0) / 1e6;
  s->hot_calls = (long)n;
  s->hot_loads = loads;
  s->hot_p50 = all ? pct(all, n, 0.5) : 0;
  s->hot_p99 = all ? pct(all, n, 0.99) : 0;
  s->hot_redirects = n ? 1000.0 * (double)redirects / (double)n : 0;
  s->hot_errors = (long)errs.n;
  free(all);
  if (errs.n >= n)
    return step_meaningless(s->name, "every hot_key figure", "no call succeeded", &errs);
  step_errors_report(s->name, &errs, n);
  return 0;
}

/* INVALIDATIONS invalidations of one tag, one after the other. */
static int invalidate(side *s) {
  xf_client *c = open_client(s);
  if (!c)
    return -1;
  const char *tag[] = {"xfb:tag"};
  uint32_t *lat = malloc(INVALIDATIONS * sizeof *lat);
  if (!lat) {
    xf_client_close(c);
    return step_failed_because("invalidate", strerror(ENOMEM));
  }
  (void)xf_invalidate_tags(c, tag, 1); /* connected, the tag's key made */
  for (int i = 0; i < INVALIDATIONS; i++) {
    int64_t t0 = now_us();
    int rc = xf_invalidate_tags(c, tag, 1);
    lat[i] = (uint32_t)(now_us() - t0);
    if (rc != XF_OK)
      step_count(&s->inv_errs, "xf_invalidate_tags", rc, xf_errmsg(c));
  }
  xf_client_close(c);
  if (s->inv_errs.n >= INVALIDATIONS) {
    free(lat);
    return step_meaningless(s->name, "invalidate p50, p99", "no invalidation succeeded",
                            &s->inv_errs);
  }
  step_errors_report(s->name, &s->inv_errs, INVALIDATIONS);
  s->inv_p50 = pct(lat, INVALIDATIONS, 0.5);
  s->inv_p99 = pct(lat, INVALIDATIONS, 0.99);
  free(lat);
  return 0;
}

static void print(const side *sides, int nsides, int threads) {
  printf("\nhit_overhead: one client, %d warm keys (all hits)\n", HIT_KEYS);
  printf("  %-10s  %8s  %8s  %14s  %16s  %7s\n", "redis", "p50 us", "p99 us",
         "redirects/1000", "scripts/hit", "errors");
  for (int i = 0; i < nsides; i++)
    printf("  %-10s  %8.0f  %8.0f  %14.2f  %16.3f  %7llu\n", sides[i].name,
           sides[i].hit_p50, sides[i].hit_p99, sides[i].hit_redirects,
           sides[i].hit_cmds_per_hit, (unsigned long long)sides[i].hit_errs.n);
  printf("  server us per hit (the read script, INFO commandstats), per node:\n");
  for (int i = 0; i < nsides; i++)
    for (int n = 0; n < sides[i].nports; n++)
      if (sides[i].nodes[n].calls > 0)
        printf("    %-10s node :%d  %8.0f hits  %6.2f us each\n", sides[i].name,
               sides[i].nodes[n].port, sides[i].nodes[n].calls,
               sides[i].nodes[n].usec / sides[i].nodes[n].calls);
  printf("\nhot_key: %d threads on one key, ttl %d ms, loader %d ms\n", threads, HOT_TTL_MS,
         HOT_LOADER_MS);
  printf("  %-10s  %8s  %7s  %6s  %14s  %8s  %8s  %14s\n", "redis", "calls", "errors",
         "loads", "loads/expiry", "p50 us", "p99 us", "redirects/1000");
  for (int i = 0; i < nsides; i++) {
    const side *s = &sides[i];
    double expiries = s->hot_seconds * 1000.0 / HOT_TTL_MS;
    printf("  %-10s  %8ld  %7ld  %6ld  %14.2f  %8.0f  %8.0f  %14.2f\n", s->name,
           s->hot_calls, s->hot_errors, s->hot_loads, (double)s->hot_loads / expiries,
           s->hot_p50, s->hot_p99, s->hot_redirects);
  }
  printf("\ninvalidate: one client, %d invalidations of one tag in a row\n", INVALIDATIONS);
  printf("  %-10s  %8s  %8s  %7s\n", "redis", "p50 us", "p99 us", "errors");
  for (int i = 0; i < nsides; i++)
    printf("  %-10s  %8.0f  %8.0f  %7llu\n", sides[i].name, sides[i].inv_p50,
           sides[i].inv_p99, (unsigned long long)sides[i].inv_errs.n);
}

int bench_cluster(int quick) {
  int threads = quick ? 4 : 8, hits = quick ? 5000 : 50000;
  double seconds = quick ? 3 : 10;
  target t;
  xft_cluster cl;
  if (target_start_server(&t) != 0)
    return 1;
  if (xft_cluster_start(&cl) != 0) {
    step_failed_because("cluster", "xft_cluster_start could not start the 3+3 cluster");
    target_stop_server(&t);
    return 1;
  }
  side sides[2] = {{.name = "standalone", .nports = 1, .ports = {t.port}},
                   {.name = "cluster", .nports = XFT_CLUSTER_NODES}};
  snprintf(sides[0].host, sizeof sides[0].host, "127.0.0.1:%d", t.port);
  snprintf(sides[1].host, sizeof sides[1].host, "127.0.0.1:%d", cl.port[0]);
  memcpy(sides[1].ports, cl.port, sizeof cl.port);
  printf("xfetch-bench --cluster: standalone redis-server :%d vs a 3 masters + 3 replicas "
         "cluster (:%d..:%d), cluster started in %.1f s\n",
         t.port, cl.port[0], cl.port[XFT_CLUSTER_NODES - 1], cl.start_s);
  int rc = 0;
  for (int i = 0; i < 2 && rc == 0; i++) {
    step_scenario("cluster: hit_overhead");
    rc = hit_overhead(&sides[i], hits);
    step_scenario("cluster: hot_key");
    rc = rc || hot_key(&sides[i], threads, seconds);
    step_scenario("cluster: invalidate");
    rc = rc || invalidate(&sides[i]);
  }
  if (rc)
    fprintf(stderr, "xfetch-bench --cluster: failed (its failed step above)\n");
  if (rc == 0)
    print(sides, 2, threads);
  xft_cluster_stop(&cl);
  target_stop_server(&t);
  return rc;
}
