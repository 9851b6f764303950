/* The near scenario (issue 20): what the share's near cache
 * (xf_share_options.near_cache_bytes) gives and what it risks.
 *
 *   hot key    one warm key, one thread: calls/s of xf_get_or_compute served
 *              by Redis (HMGET) vs by the near cache, and the commands Redis
 *              ran per near call (INFO stats total_commands_processed);
 *   zipf       10,000 keys drawn Zipf(1) by 2 threads through one share
 *              whose near cache holds ~1/8 of them: hit ratio, calls/s,
 *              evictions, Redis commands per call;
 *   staleness  a writer in another process sets a key every 20 ms (each
 *              value its version; its acknowledgement time in shared
 *              memory); this process reads it in a loop through the near
 *              cache. A read is stale by t when the version it returned had
 *              been superseded by one acknowledged t ms before the read
 *              began. Thrice: with the writer's sets fenced
 *              (options.write_fence, the default of a near-cache fleet)
 *              undisturbed, then with CLIENT KILL of the invalidation
 *              connection, of the data connections and FLUSHALL every
 *              100 ms, then undisturbed with the fence off; the histogram,
 *              the reads stale by more than 1 ms, the fence's cost per set;
 *   wake       4 processes wait for a 200 ms load another process leads:
 *              how long after the leader's loader returned (its write is
 *              sent next: an upper bound on the time after the write) each
 *              waiter returns, near cache on (woken by the write) vs off
 *              (polling).
 * Figures to the JSON's params and to goals.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drivers.h"
#include "goals.h"
#include "near_bench.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

xf_share *nb_share(size_t bytes) {
  xf_share *s = NULL;
  xf_share_options so = {.near_cache_bytes = bytes};
  int rc = xf_share_open(&s, &so);
  if (rc != XF_OK)
    step_failed("xf_share_open", rc, NULL);
  return rc == XF_OK ? s : NULL;
}

long long nb_commands(redisContext *rc) {
  redisReply *r = redisCommand(rc, "INFO stats");
  long long n = -1;
  const char *at = r && r->type == REDIS_REPLY_STRING
                       ? strstr(r->str, "total_commands_processed:")
                       : NULL;
  if (at)
    n = atoll(at + strlen("total_commands_processed:"));
  if (n < 0)
    step_failed_redis("INFO stats", rc, r);
  if (r)
    freeReplyObject(r);
  return n;
}

/* ---- hot key ---- */

/* n calls on key: calls/s (the failed ones counted in errs, their time
 * kept), or -1 when none succeeded. */
static double hot_rate(xf_client *c, const char *key, int n, step_errors *errs) {
  xf_policy p = XF_POLICY_INIT;
  double t0 = now_s();
  uint64_t before = __atomic_load_n(&errs->n, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++) {
    xf_value v;
    int rc = xf_get_or_compute(c, key, strlen(key), &p, drv_loader, NULL, &v);
    if (rc != XF_OK)
      step_count(errs, "xf_get_or_compute (hot key)", rc, xf_errmsg(c));
    xf_value_free(&v);
  }
  double rate = n / (now_s() - t0);
  return __atomic_load_n(&errs->n, __ATOMIC_ACQUIRE) - before >= (uint64_t)n ? -1 : rate;
}

/* Near hits on one hot key from 2 threads at once (each its own client of
 * one share): calls/s in all, against one thread's. */
typedef struct hot_thread {
  xf_client *c;
  const char *key;
  int n;
  double rps;
  step_errors *errs;
} hot_thread;

static void *hot_thread_run(void *arg) {
  hot_thread *h = arg;
  h->rps = hot_rate(h->c, h->key, h->n, h->errs);
  return NULL;
}

static double hot_rate_threads(const target *t, xf_share *s, const char *key, int n,
                               step_errors *errs) {
  hot_thread h[2] = {{drv_client_shared(t, s), key, n, 0, errs},
                     {drv_client_shared(t, s), key, n, 0, errs}};
  pthread_t th[2];
  double total = -1;
  if (h[0].c && h[1].c) {
    hot_rate(h[0].c, key, 100, errs), hot_rate(h[1].c, key, 100, errs);
    for (int i = 0; i < 2; i++)
      pthread_create(&th[i], NULL, hot_thread_run, &h[i]);
    for (int i = 0; i < 2; i++)
      pthread_join(th[i], NULL);
    total = h[0].rps < 0 || h[1].rps < 0 ? -1 : h[0].rps + h[1].rps;
  }
  xf_client_close(h[0].c), xf_client_close(h[1].c);
  return total;
}

/* ---- the scenario ---- */

int sc_near(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, n = q ? 20000 : 100000;
  out->name = "near";
  char key[64];
  snprintf(key, sizeof key, "xfb:%u:near:hot", e->cfg->run_id);
  xf_share *s = nb_share(64 << 20);
  xf_client *far = s ? drv_client_shared(e->t, NULL) : NULL,
            *near = far ? drv_client_shared(e->t, s) : NULL;
  if (!far || !near) {
    xf_client_close(far), xf_client_close(near), xf_share_close(s);
    return -1;
  }
  /* Failed calls are counted (and their time kept): a transient timeout on a
   * loaded machine costs a figure one call, not the run. */
  step_errors hot = {0}, warm = {0}, zerr = {0}, serr = {0};
  hot_rate(far, key, 100, &warm); /* warm: the key, the connections, their clocks */
  hot_rate(near, key, 100, &warm);
  double redis_rps = hot_rate(far, key, n / 10, &hot);
  long long c0 = nb_commands(e->rc);
  double near_rps = hot_rate(near, key, n, &hot);
  long long c1 = nb_commands(e->rc);
  double cmds_per_call = (double)(c1 - c0 - 1) / n; /* less the INFO itself */
  double threads_rps = hot_rate_threads(e->t, s, key, n, &hot);
  xf_client_close(far), xf_client_close(near), xf_share_close(s);
  step_errors_report("hot key: warm-up calls", &warm, 200);
  if (redis_rps < 0 || near_rps < 0 || threads_rps < 0)
    return step_meaningless("hot key", "calls/s", "no call of a pass succeeded", &hot);
  if (c0 < 0 || c1 < 0) /* reported by nb_commands */
    return step_meaningless("hot key", "Redis commands per near call",
                            "INFO stats was not read", NULL);
  step_errors_report("hot key", &hot, (uint64_t)(n / 10 + 3 * n));
  nb_zipf z;
  nb_stale st[3];
  double set_us[2];
  nb_wake w;
  uint64_t set_errs = 0;
  if (nb_zipf_run(e, q, &z, &zerr) ||
      nb_staleness(e, q ? 1.0 : 3.0, st, set_us, &serr, &set_errs) || nb_wake_run(e, &w))
    return -1;
  step_errors_report("zipf", &zerr, (uint64_t)z.keys + (uint64_t)(q ? 200000 : 1000000));
  step_errors_report("staleness: the reader's xf_get", &serr,
                     st[0].reads + st[1].reads + st[2].reads);
  goal_set("near_hit_vs_redis_hit", near_rps / redis_rps);
  goal_set("near_cmds_per_10k", cmds_per_call * 10000);
  goal_set("near_stale_p99_ms", st[0].p99_ms);
  if (e->t->pid) /* not run on the user's server (--redis): no FLUSHALL there */
    goal_set("near_stale_over_1ms_faults", (double)st[1].over_1ms);
  goal_set("near_wake_max_ms", w.near_max_ms);
  printf("near: hot key %.0f calls/s near vs %.0f via Redis (x%.1f), %.4f Redis commands "
         "per near call; 2 threads: %.0f calls/s in all\n",
         near_rps, redis_rps, near_rps / redis_rps, cmds_per_call, threads_rps);
  printf("near: zipf(1) %d keys, cache ~1/8 of them: hit ratio %.3f (LRU; simulated on "
         "the trace: LRU %.3f, CLOCK %.3f, S3-FIFO %.3f), %.0f calls/s on %d threads, "
         "%.3f commands per call, %llu evictions\n",
         z.keys, z.hit_ratio, z.sim_lru, z.sim_clock, z.sim_s3fifo, z.rps, z.threads,
         z.cmds_per_call, (unsigned long long)z.evictions);
  if (!e->t->pid)
    printf("near: staleness under CLIENT KILL + FLUSHALL: not run (--redis names a server "
           "this bench did not start)\n");
  for (int i = 0; i < 3; i++)
    if (i != 1 || e->t->pid)
      printf("near: staleness%s: %llu reads, %llu stale, p99 %.3f ms, p99.9 %.3f ms, max "
             "%.3f ms, %llu stale by > 1 ms (%llu with the invalidation in the process, "
             "unapplied); the tracker took the invalidation > 1 ms after the write's ack "
             "for %d of %d writes (max %.1f ms; hits go to Redis while it waits)\n",
             i == 2   ? ", the writer's fence off (write_fence off)"
             : i == 1 ? " under CLIENT KILL + FLUSHALL every 100 ms, the writer fenced"
                      : ", the writer fenced (write_fence)",
             (unsigned long long)st[i].reads, (unsigned long long)st[i].stale, st[i].p99_ms,
             st[i].p999_ms, st[i].max_ms, (unsigned long long)st[i].over_1ms,
             (unsigned long long)st[i].over_1ms_delivered, st[i].writes_late_1ms,
             st[i].writes, st[i].late_max_ms);
  printf("near: the write fence: the writer's xf_set p50 %.0f us fenced vs %.0f us not "
         "(+%.0f us per write)\n",
         set_us[1], set_us[0], set_us[1] - set_us[0]);
  printf("near: 4 waiters of a 200 ms load return after the leader's load ended (its write "
         "sent next): near max "
         "%.1f ms (mean %.1f), polling max %.1f ms (mean %.1f)\n",
         w.near_max_ms, w.near_mean_ms, w.poll_max_ms, w.poll_mean_ms);
  snprintf(
      out->params, sizeof out->params,
      "{\"hot_key_calls_per_s\": {\"near\": %.0f, \"redis\": %.0f, "
      "\"near_2_threads\": %.0f}, "
      "\"near_commands_per_call\": %.5f, "
      "\"zipf\": {\"keys\": %d, \"threads\": %d, \"hit_ratio\": %.4f, "
      "\"calls_per_s\": %.0f, \"commands_per_call\": %.4f, \"evictions\": %llu, "
      "\"simulated_hit_ratio\": {\"lru\": %.4f, \"clock\": %.4f, \"s3fifo\": %.4f}}, "
      "\"staleness_ms\": [{\"faults\": false, \"writer_fenced\": true, \"reads\": %llu, "
      "\"stale\": %llu, "
      "\"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f, \"over_1ms\": %llu, "
      "\"over_1ms_delivered\": %llu, \"writes\": %d, \"writes_inval_late_1ms\": %d, "
      "\"inval_late_max\": %.2f}, "
      "{\"faults\": true, \"writer_fenced\": true, \"reads\": %llu, \"stale\": %llu, "
      "\"p99\": %.3f, "
      "\"p999\": %.3f, \"max\": %.3f, \"over_1ms\": %llu, "
      "\"over_1ms_delivered\": %llu, \"writes\": %d, \"writes_inval_late_1ms\": %d, "
      "\"inval_late_max\": %.2f}, "
      "{\"faults\": false, \"writer_fenced\": false, \"reads\": %llu, \"stale\": %llu, "
      "\"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f, \"over_1ms\": %llu, "
      "\"over_1ms_delivered\": %llu}], "
      "\"set_p50_us\": {\"fenced\": %.1f, \"unfenced\": %.1f}, "
      "\"wake_after_write_ms\": {\"near_max\": %.2f, \"near_mean\": %.2f, "
      "\"poll_max\": %.2f, \"poll_mean\": %.2f}, "
      "\"errors\": {\"hot_key\": %llu, \"zipf\": %llu, \"staleness_reads\": %llu, "
      "\"writer_sets\": %llu, \"wake_waiters\": %llu}}",
      near_rps, redis_rps, threads_rps, cmds_per_call, z.keys, z.threads, z.hit_ratio,
      z.rps, z.cmds_per_call, (unsigned long long)z.evictions, z.sim_lru, z.sim_clock,
      z.sim_s3fifo, (unsigned long long)st[0].reads, (unsigned long long)st[0].stale,
      st[0].p99_ms, st[0].p999_ms, st[0].max_ms, (unsigned long long)st[0].over_1ms,
      (unsigned long long)st[0].over_1ms_delivered, st[0].writes, st[0].writes_late_1ms,
      st[0].late_max_ms, (unsigned long long)st[1].reads, (unsigned long long)st[1].stale,
      st[1].p99_ms, st[1].p999_ms, st[1].max_ms, (unsigned long long)st[1].over_1ms,
      (unsigned long long)st[1].over_1ms_delivered, st[1].writes, st[1].writes_late_1ms,
      st[1].late_max_ms, (unsigned long long)st[2].reads, (unsigned long long)st[2].stale,
      st[2].p99_ms, st[2].p999_ms, st[2].max_ms, (unsigned long long)st[2].over_1ms,
      (unsigned long long)st[2].over_1ms_delivered, set_us[1], set_us[0], w.near_max_ms,
      w.near_mean_ms, w.poll_max_ms, w.poll_mean_ms, (unsigned long long)hot.n,
      (unsigned long long)zerr.n, (unsigned long long)serr.n, (unsigned long long)set_errs,
      (unsigned long long)w.errors);
  return 0;
}
