/* The drivers' scenarios (issue 9):
 *   batch  100 warm keys: one MGET of 100 plain keys, vs one
 *          xf_get_or_compute_many of the 100, vs 100 sequential
 *          xf_get_or_compute; p50/p99 per batch, server commands and us per
 *          batch (INFO commandstats), and the ratios against the goals
 *          (many <= 1.3 x MGET, >= 20 x faster than sequential);
 *   async  N concurrent hit requests on 100 warm keys: one libuv loop thread
 *          with xf_async (bench/drivers_async.c) vs N threads each blocking
 *          on its own client; throughput and p50/p99.
 * They print their own table; the figures also go to the JSON as params. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers.h"
#include "goals.h"

#define BATCH_KEYS 100
#define VALUE "a value of sixty-four bytes, as hit_overhead uses: 0123456789abc"

xf_client *drv_client_shared(const target *t, xf_share *share) {
  xf_options o = target_options(t);
  o.share = share;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  if (rc != XF_OK) {
    step_failed(share ? "xf_client_open (with a share)" : "xf_client_open", rc,
                c ? xf_errmsg(c) : NULL);
    xf_client_close(c);
    return NULL;
  }
  return c;
}

xf_client *drv_client(const target *t) { return drv_client_shared(t, NULL); }

int drv_count_bad_hit(step_errors *e, const char *what, int rc, const xf_value *v,
                      const char *errmsg) {
  if (rc != XF_OK) {
    step_count(e, what, rc, errmsg);
    return 1;
  }
  if (v->source != XF_SOURCE_CACHE) {
    char why[96];
    snprintf(why, sizeof why, "a warm key served from %s, not the cache",
             v->source == XF_SOURCE_UNCACHED ? "the loader uncached (fail-open)"
             : v->source == XF_SOURCE_STALE  ? "a stale value"
                                             : "elsewhere");
    step_count_because(e, what, why);
    return 1;
  }
  return 0;
}

int drv_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  if (ud)
    __atomic_add_fetch((long *)ud, 1, __ATOMIC_RELAXED);
  return xf_sink_set(sink, VALUE, sizeof VALUE - 1);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

double drv_pct(uint32_t *v, size_t n, double p) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof *v, cmp_u32);
  return v[(size_t)(p * (double)(n - 1))];
}

int drv_keys(drv_keyset *k, const bench_env *e, const char *what, size_t n) {
  k->n = n;
  for (size_t i = 0; i < n; i++) {
    snprintf(k->buf[i], sizeof k->buf[i], "xfb:%x:%s:%zu", e->cfg->run_id, what, i);
    k->ptr[i] = k->buf[i];
    k->len[i] = strlen(k->buf[i]);
  }
  return 0;
}

int drv_warm(xf_client *c, const drv_keyset *k, const xf_policy *p) {
  for (size_t i = 0; i < k->n; i++) {
    int rc = xf_set(c, k->ptr[i], k->len[i], VALUE, sizeof VALUE - 1, p);
    if (rc != XF_OK)
      return step_failed("xf_set (warm-up)", rc, xf_errmsg(c));
  }
  return 0;
}

/* ---- batch ----------------------------------------------------------------------- */

typedef struct way {
  const char *name;
  step_errors errs; /* batches that failed, counted */
  uint32_t *us;
  size_t n;
  double cmds, server_us, reads; /* per batch */
  double p50, p99;
} way;

static int resetstat(redisContext *rc) {
  redisReply *r = redisCommand(rc, "CONFIG RESETSTAT");
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (!ok)
    step_failed_redis("CONFIG RESETSTAT", rc, r);
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

static int one_mget(redisContext *rc, const drv_keyset *mk, step_errors *errs) {
  const char *argv[BATCH_KEYS + 1];
  size_t lens[BATCH_KEYS + 1];
  argv[0] = "MGET", lens[0] = 4;
  for (size_t i = 0; i < mk->n; i++)
    argv[i + 1] = mk->ptr[i], lens[i + 1] = mk->len[i];
  redisReply *r = redisCommandArgv(rc, (int)mk->n + 1, argv, lens);
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == mk->n &&
           r->element[0]->type == REDIS_REPLY_STRING;
  if (!ok)
    step_count_redis(errs, "MGET", rc, r);
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

/* One batch; a batch with a bad key counts once. */
static int one_many(xf_client *c, const drv_keyset *k, const xf_policy *p,
                    step_errors *errs) {
  xf_value v[BATCH_KEYS];
  int rcs[BATCH_KEYS], bad = 0;
  int rc = xf_get_or_compute_many(c, k->n, k->ptr, k->len, p, drv_loader, NULL, v, rcs);
  if (rc != XF_OK) {
    step_count(errs, "xf_get_or_compute_many", rc, xf_errmsg(c));
    return -1;
  }
  for (size_t i = 0; i < k->n; i++) {
    if (!bad)
      bad = drv_count_bad_hit(errs, "xf_get_or_compute_many (a key)", rcs[i], &v[i],
                              xf_errmsg(c));
    xf_value_free(&v[i]);
  }
  return bad ? -1 : 0;
}

static int one_seq(xf_client *c, const drv_keyset *k, const xf_policy *p,
                   step_errors *errs) {
  int bad = 0;
  for (size_t i = 0; i < k->n; i++) {
    xf_value v;
    int rc = xf_get_or_compute(c, k->ptr[i], k->len[i], p, drv_loader, NULL, &v);
    if (!bad)
      bad = drv_count_bad_hit(errs, "xf_get_or_compute", rc, &v, xf_errmsg(c));
    xf_value_free(&v);
  }
  return bad ? -1 : 0;
}

/* Redis' total_reads_processed (INFO stats): the reads the server made from
 * its clients' sockets; one per round trip when a request fits one read. */
long long drv_server_reads(redisContext *rc) {
  redisReply *r = redisCommand(rc, "INFO stats");
  const char *at =
      r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_reads_processed:") : NULL;
  long long v = at ? atoll(at + strlen("total_reads_processed:")) : -1;
  if (r)
    freeReplyObject(r);
  return v;
}

/* Runs way w iters times (after a warm-up), timing each batch. A batch that
 * fails is counted in w->errs (its time kept among the others); 0, or -1
 * when none of them succeeded (or out of memory). */
static int measure(way *w, int kind, size_t iters, redisContext *rc, xf_client *c,
                   const drv_keyset *k, const drv_keyset *mk, const xf_policy *p) {
  w->us = malloc(iters * sizeof *w->us);
  if (!w->us)
    return -1;
  step_errors warm = {0};
  for (size_t i = 0; i < iters / 10 + 5; i++) /* warm-up: scripts, connections */
    kind == 0   ? one_mget(rc, mk, &warm)
    : kind == 1 ? one_many(c, k, p, &warm)
                : one_seq(c, k, p, &warm);
  if (resetstat(rc) != 0)
    return -1;
  long long reads0 = drv_server_reads(rc);
  for (size_t i = 0; i < iters; i++) {
    int64_t t0 = now_us();
    kind == 0   ? one_mget(rc, mk, &w->errs)
    : kind == 1 ? one_many(c, k, p, &w->errs)
                : one_seq(c, k, p, &w->errs);
    w->us[i] = (uint32_t)(now_us() - t0);
  }
  char step[64];
  snprintf(step, sizeof step, "%s batches", w->name);
  if (w->errs.n >= iters)
    return step_meaningless(step, "its p50, p99 and commands", "no batch succeeded",
                            &w->errs);
  step_errors_report(step, &w->errs, iters);
  snprintf(step, sizeof step, "%s warm-up batches", w->name);
  step_errors_report(step, &warm, iters / 10 + 5);
  /* Less the INFO that read reads0. */
  w->reads = (double)(drv_server_reads(rc) - reads0 - 1) / (double)iters;
  double usec, calls;
  if (target_commandstats(rc, &usec, &calls) == 0) {
    w->cmds = calls / (double)iters;
    w->server_us = usec / (double)iters;
  }
  w->n = iters;
  w->p50 = drv_pct(w->us, iters, 0.5);
  w->p99 = drv_pct(w->us, iters, 0.99);
  return 0;
}

static int plain_keys(redisContext *rc, const drv_keyset *mk) {
  for (size_t i = 0; i < mk->n; i++)
    redisAppendCommand(rc, "SET %s %s", mk->ptr[i], VALUE);
  int bad = 0;
  for (size_t i = 0; i < mk->n; i++) {
    redisReply *r = NULL;
    if (redisGetReply(rc, (void **)&r) != REDIS_OK)
      return step_failed_redis("SET (the MGET's keys)", rc, NULL);
    if (r->type != REDIS_REPLY_STATUS && !bad++)
      step_failed_redis("SET (the MGET's keys)", rc, r);
    freeReplyObject(r);
  }
  return bad ? -1 : 0;
}

int sc_batch(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick;
  size_t iters = q ? 200 : 3000, seq_iters = q ? 40 : 500;
  static drv_keyset k, mk;
  drv_keys(&k, e, "batch", BATCH_KEYS);
  drv_keys(&mk, e, "mget", BATCH_KEYS);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  xf_client *c = drv_client(e->t), *nc = NULL;
  /* many_near: the same batch on a client whose share keeps a near cache:
   * its first batch fills it, the next are served from it (issue 20) */
  xf_share *share = NULL;
  xf_share_options so = {.near_cache_bytes = 1u << 22};
  int orc = c ? xf_share_open(&share, &so) : XF_OK;
  if (orc != XF_OK)
    step_failed("xf_share_open (many_near)", orc, NULL);
  else if (c)
    nc = drv_client_shared(e->t, share);
  way w[4] = {
      {.name = "mget"}, {.name = "many"}, {.name = "sequential"}, {.name = "many_near"}};
  int rc = -1;
  if (!c || !nc || drv_warm(c, &k, &p) || plain_keys(e->rc, &mk))
    goto done;
  if (measure(&w[0], 0, iters, e->rc, c, &k, &mk, &p) ||
      measure(&w[1], 1, iters, e->rc, c, &k, &mk, &p) ||
      measure(&w[2], 2, seq_iters, e->rc, c, &k, &mk, &p) ||
      measure(&w[3], 1, iters, e->rc, nc, &k, &mk, &p))
    goto done;
  double vs_mget = w[1].p50 / w[0].p50, vs_seq = w[2].p50 / w[1].p50;
  goal_set("batch_vs_mget", vs_mget);
  goal_set("batch_vs_sequential", vs_seq);
  out->name = "batch";
  snprintf(out->params, sizeof out->params,
           "{\"keys\": %d, \"value_bytes\": %zu, \"batches\": %zu, \"sequential_batches\": "
           "%zu, \"mget_p50_us\": %.0f, \"mget_p99_us\": %.0f, \"many_p50_us\": %.0f, "
           "\"many_p99_us\": %.0f, \"sequential_p50_us\": %.0f, \"sequential_p99_us\": "
           "%.0f, \"mget_cmds\": %.1f, \"many_cmds\": %.1f, \"sequential_cmds\": %.1f, "
           "\"many_round_trips\": %.1f, \"sequential_round_trips\": %.1f, "
           "\"many_over_mget\": %.2f, \"sequential_over_many\": %.2f, "
           "\"many_near_p50_us\": %.0f, \"many_near_p99_us\": %.0f, \"many_near_cmds\": "
           "%.2f, \"errors\": {\"mget\": %llu, \"many\": %llu, \"sequential\": %llu, "
           "\"many_near\": %llu}}",
           BATCH_KEYS, sizeof VALUE - 1, iters, seq_iters, w[0].p50, w[0].p99, w[1].p50,
           w[1].p99, w[2].p50, w[2].p99, w[0].cmds, w[1].cmds, w[2].cmds, w[1].reads,
           w[2].reads, vs_mget, vs_seq, w[3].p50, w[3].p99, w[3].cmds,
           (unsigned long long)w[0].errs.n, (unsigned long long)w[1].errs.n,
           (unsigned long long)w[2].errs.n, (unsigned long long)w[3].errs.n);
  printf("\nbatch: %d warm keys, %zu-byte values; per batch of %d (%zu batches, "
         "sequential %zu)\n",
         BATCH_KEYS, sizeof VALUE - 1, BATCH_KEYS, iters, seq_iters);
  printf("%-12s %9s %9s %12s %14s %13s %7s\n", "way", "p50 us", "p99 us", "server cmds",
         "server us", "round trips", "errors");
  for (int i = 0; i < 4; i++)
    printf("%-12s %9.0f %9.0f %12.1f %14.1f %13.1f %7llu\n", w[i].name, w[i].p50, w[i].p99,
           w[i].cmds, w[i].server_us, w[i].reads, (unsigned long long)w[i].errs.n);
  printf("  many/mget p50 = %.2fx (goal <= 1.3x: %s); sequential/many p50 = %.1fx (goal "
         ">= 20x: %s)\n",
         vs_mget, vs_mget <= 1.3 ? "met" : "missed", vs_seq,
         vs_seq >= 20 ? "met" : "missed");
  printf("  many_near: the batch with a near cache (its share's near_cache_bytes 4 MiB): "
         "many_near/many p50 = %.2fx\n",
         w[3].p50 / w[1].p50);
  printf("  (per batch; server cmds and us from INFO commandstats, round trips as the "
         "server's socket reads, INFO stats total_reads_processed)\n");
  rc = 0;
done:
  for (int i = 0; i < 4; i++)
    free(w[i].us);
  xf_client_close(nc);
  xf_share_close(share);
  xf_client_close(c);
  return rc;
}

/* ---- async ----------------------------------------------------------------------- */

typedef struct blocking_thread {
  const bench_env *e;
  const drv_keyset *k;
  const xf_policy *p;
  int64_t end_us;
  size_t first_key;
  drv_run run;
} blocking_thread;

static void *blocking_main(void *arg) {
  blocking_thread *b = arg;
  xf_options o = target_options(b->e->t);
  xf_client *c = NULL;
  int orc = xf_client_open(&c, &o);
  if (orc != XF_OK) { /* counted: this thread makes no request */
    step_count(&b->run.errs, "a thread's xf_client_open", orc, c ? xf_errmsg(c) : NULL);
    xf_client_close(c);
    return NULL;
  }
  for (size_t i = b->first_key; now_us() < b->end_us; i++) {
    xf_value v;
    size_t key = i % b->k->n;
    int64_t t0 = now_us();
    int rc =
        xf_get_or_compute(c, b->k->ptr[key], b->k->len[key], b->p, drv_loader, NULL, &v);
    drv_record(&b->run, (uint32_t)(now_us() - t0));
    b->run.requests++;
    drv_count_bad_hit(&b->run.errs, "xf_get_or_compute", rc, &v, xf_errmsg(c));
    xf_value_free(&v);
  }
  xf_client_close(c);
  return NULL;
}

/* n threads, each blocking on its own client, merged into *out. */
static int blocking_threads(const bench_env *e, const drv_keyset *k, const xf_policy *p,
                            int n, double dur_s, drv_run *out) {
  blocking_thread *b = calloc((size_t)n, sizeof *b);
  pthread_t *tid = calloc((size_t)n, sizeof *tid);
  int rc = b && tid ? 0 : -1;
  int64_t t0 = now_us();
  for (int i = 0; rc == 0 && i < n; i++) {
    b[i] = (blocking_thread){e, k, p, t0 + (int64_t)(dur_s * 1e6), (size_t)i, {0}};
    int err = pthread_create(&tid[i], NULL, blocking_main, &b[i]);
    if (err != 0) {
      step_failed_because("blocking threads: pthread_create", strerror(err));
      n = i, rc = -1;
    }
  }
  for (int i = 0; b && tid && i < n; i++) {
    pthread_join(tid[i], NULL);
    out->requests += b[i].run.requests;
    step_merge(&out->errs, &b[i].run.errs);
    for (size_t j = 0; j < b[i].run.nus; j++)
      drv_record(out, b[i].run.us[j]);
    free(b[i].run.us);
  }
  out->seconds = (double)(now_us() - t0) / 1e6;
  free(b);
  free(tid);
  return rc;
}

int sc_async(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, n = q ? 16 : 64;
  double dur = q ? 0.4 : 3.0;
  static drv_keyset k;
  drv_keys(&k, e, "async", DRV_MAX_KEYS);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  out->name = "async";
  xf_client *c = drv_client(e->t);
  if (!c || drv_warm(c, &k, &p)) {
    xf_client_close(c);
    return -1;
  }
  xf_client_close(c);
  drv_run warmup = {0}, loop = {0}, threads = {0};
  int rc = drv_async_loop(e->t, &k, &p, n, 0.1, &warmup); /* scripts, connection */
  free(warmup.us);
  if (rc == 1) {
    printf("\nasync: skipped (xfetch-bench was built without libuv)\n");
    snprintf(out->params, sizeof out->params, "{\"skipped\": \"no libuv\"}");
    return 0;
  }
  step_errors_report("the loop's warm-up", &warmup.errs, warmup.requests);
  rc = rc != 0 || drv_async_loop(e->t, &k, &p, n, dur, &loop) != 0 ||
               blocking_threads(e, &k, &p, n, dur, &threads) != 0
           ? -1
           : 0;
  /* Errors are counted (the table's errors column); a way without one good
   * request has no figure. */
  const drv_run *way[2] = {&loop, &threads};
  const char *way_name[2] = {"the libuv loop's requests", "the blocking threads' requests"};
  for (int i = 0; rc == 0 && i < 2; i++)
    if (way[i]->errs.n >= way[i]->requests)
      rc = step_meaningless(way_name[i], "its req/s, p50 and p99", "no request succeeded",
                            &way[i]->errs);
    else
      step_errors_report(way_name[i], &way[i]->errs, way[i]->requests);
  if (rc != 0) {
    free(loop.us);
    free(threads.us);
    return -1;
  }
  double lrps = (double)loop.requests / loop.seconds;
  double trps = (double)threads.requests / threads.seconds;
  double l50 = drv_pct(loop.us, loop.nus, 0.5), l99 = drv_pct(loop.us, loop.nus, 0.99);
  double t50 = drv_pct(threads.us, threads.nus, 0.5);
  double t99 = drv_pct(threads.us, threads.nus, 0.99);
  snprintf(out->params, sizeof out->params,
           "{\"concurrent\": %d, \"keys\": %d, \"duration_s\": %.1f, \"loop_rps\": %.0f, "
           "\"loop_p50_us\": %.0f, \"loop_p99_us\": %.0f, \"threads_rps\": %.0f, "
           "\"threads_p50_us\": %.0f, \"threads_p99_us\": %.0f, \"loop_over_threads_rps\": "
           "%.2f, \"loop_errors\": %llu, \"threads_errors\": %llu}",
           n, DRV_MAX_KEYS, dur, lrps, l50, l99, trps, t50, t99, lrps / trps,
           (unsigned long long)loop.errs.n, (unsigned long long)threads.errs.n);
  printf("\nasync: %d concurrent hit requests on %d warm keys for %.1f s\n", n,
         DRV_MAX_KEYS, dur);
  printf("%-28s %10s %9s %9s %9s %7s\n", "driver", "req/s", "p50 us", "p99 us", "requests",
         "errors");
  printf("%-28s %10.0f %9.0f %9.0f %9llu %7llu\n", "one libuv loop (xf_async)", lrps, l50,
         l99, (unsigned long long)loop.requests, (unsigned long long)loop.errs.n);
  printf("%-28s %10.0f %9.0f %9.0f %9llu %7llu\n", "blocking threads", trps, t50, t99,
         (unsigned long long)threads.requests, (unsigned long long)threads.errs.n);
  printf(
      "  loop/threads throughput = %.2fx (one thread and one connection vs %d of each)\n",
      lrps / trps, n);
  free(loop.us);
  free(threads.us);
  return 0;
}
