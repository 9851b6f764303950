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
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "drivers.h"
#include "goals.h"
#include "near_bench.h"
#include "near_impl.h"
#include "share.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

xf_client *nb_client(const target *t, xf_share *share) {
  xf_options o = target_options(t);
  o.share = share;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  if (rc != XF_OK) {
    step_failed(share ? "xf_client_open (near cache)" : "xf_client_open", rc,
                c ? xf_errmsg(c) : NULL);
    xf_client_close(c);
    return NULL;
  }
  return c;
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
  hot_thread h[2] = {{nb_client(t, s), key, n, 0, errs},
                     {nb_client(t, s), key, n, 0, errs}};
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

/* ---- staleness ---- */

#define MAX_VERSIONS 4096

typedef struct shared_log {
  int64_t acked_us[MAX_VERSIONS]; /* when version i's set returned (0: not yet) */
  int stop;
  int fence;            /* asked: the writer's sets fenced (options.write_fence on) */
  int fencing;          /* whether its last set was (-1: none yet) */
  int nset[2];          /* how long its sets took (us), unfenced [0] and fenced [1] */
  step_errors set_errs; /* the writer's failed sets (that version never acked) */
  float set_us[2][MAX_VERSIONS];
} shared_log;

/* A writer without a near cache (another process's), its sets fenced or not:
 * options.write_fence, as a writer of a near-cache fleet turns it on. */
static xf_client *writer_client(const target *t, int fence) {
  xf_options o = target_options(t);
  o.write_fence = fence ? XF_FENCE_ON : XF_FENCE_OFF;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  if (rc != XF_OK) {
    step_failed("the writer's xf_client_open", rc, c ? xf_errmsg(c) : NULL);
    xf_client_close(c);
    return NULL;
  }
  return c;
}

/* Sets key every 20 ms. Fenced (log->fence), the library follows each write
 * with a PING before xf_set returns: Redis has then written everything the
 * write caused (its invalidations among them: they go out after the write's
 * reply, in the same pass over its clients, which ends before it reads the
 * next command). */
static void writer(const target *t, const char *key, shared_log *log) {
  xf_client *c[2] = {writer_client(t, 0), writer_client(t, 1)};
  if (!c[0] || !c[1])
    step_count_because(&log->set_errs, "the writer's xf_client_open", "see above");
  xf_policy p = XF_POLICY_INIT;
  for (int ver = 1; c[0] && c[1] && ver < MAX_VERSIONS && !__atomic_load_n(&log->stop, 0);
       ver++) {
    int fenced = __atomic_load_n(&log->fence, __ATOMIC_ACQUIRE) != 0;
    char v[16];
    snprintf(v, sizeof v, "%d", ver);
    double t0 = now_s();
    int rc = xf_set(c[fenced], key, strlen(key), v, strlen(v), &p), ok = rc == XF_OK;
    double t1 = now_s();
    if (!ok)
      step_count(&log->set_errs, "the writer's xf_set", rc, xf_errmsg(c[fenced]));
    if (ok) {
      __atomic_store_n(&log->acked_us[ver], (int64_t)(t1 * 1e6), __ATOMIC_RELEASE);
      log->set_us[fenced][log->nset[fenced]++] = (float)((t1 - t0) * 1e6);
    }
    __atomic_store_n(&log->fencing, fenced, __ATOMIC_RELEASE);
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  xf_client_close(c[0]), xf_client_close(c[1]);
}

/* When the tracker thread took each invalidation message (the tests' hook,
 * set for the staleness passes): how late after the writes'
 * acknowledgements. Mostly the thread's own scheduling delay on a loaded
 * machine (hits see the bytes waiting and go to Redis meanwhile), plus
 * Redis' delay in sending them (which nothing here can see). */
#define APPLIED_CAP 65536
static int64_t applied_us[APPLIED_CAP];
static unsigned napplied;

static void on_apply(void) {
  unsigned i = __atomic_fetch_add(&napplied, 1, __ATOMIC_ACQ_REL);
  if (i < APPLIED_CAP)
    __atomic_store_n(&applied_us[i], (int64_t)(now_s() * 1e6), __ATOMIC_RELEASE);
}

/* For the writes acknowledged in [from, to]: how long after each the next
 * invalidation was taken by the tracker. */
static void lateness(const shared_log *log, double from, double to, nb_stale *out) {
  unsigned n = __atomic_load_n(&napplied, __ATOMIC_ACQUIRE), at = 0;
  n = n < APPLIED_CAP ? n : APPLIED_CAP;
  for (int v = 1; v < MAX_VERSIONS; v++) {
    double acked = (double)__atomic_load_n(&log->acked_us[v], __ATOMIC_ACQUIRE) / 1e6;
    if (acked < from || acked > to)
      continue;
    while (at < n &&
           (double)__atomic_load_n(&applied_us[at], __ATOMIC_ACQUIRE) / 1e6 < acked)
      at++;
    double next = (double)__atomic_load_n(&log->acked_us[v + 1 < MAX_VERSIONS ? v + 1 : v],
                                          __ATOMIC_ACQUIRE) /
                  1e6;
    if (at == n)
      break;
    if (next > acked && (double)applied_us[at] / 1e6 > next)
      continue; /* none before the next write: the key was not tracked then */
    double late = ((double)applied_us[at] / 1e6 - acked) * 1000;
    out->writes++;
    out->writes_late_1ms += late > 1.0;
    out->late_max_ms = late > out->late_max_ms ? late : out->late_max_ms;
  }
}

/* How long before t0 a version newer than ver was acknowledged (<= 0: the
 * read was not stale). */
static double stale_by_ms(const shared_log *log, int ver, double t0) {
  if (ver < 0 || ver + 1 >= MAX_VERSIONS)
    return 0;
  double acked = (double)__atomic_load_n(&log->acked_us[ver + 1], __ATOMIC_ACQUIRE) / 1e6;
  return acked > 0 && acked < t0 ? (t0 - acked) * 1000 : 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Reads for dur seconds; faults: CLIENT KILL / FLUSHALL every 100 ms. */
static int stale_pass(const bench_env *e, xf_client *c, struct xf__near *near,
                      const char *key, shared_log *log, double dur, int faults,
                      nb_stale *out, step_errors *errs) {
  memset(out, 0, sizeof *out);
  size_t cap = 1 << 16, n = 0;
  double *stale = malloc(cap * sizeof *stale);
  if (!stale)
    return -1;
  const char *fault[] = {"CLIENT KILL TYPE pubsub", "CLIENT KILL TYPE normal SKIPME yes",
                         "FLUSHALL"};
  double start = now_s(), end = start + dur, next_fault = start + 0.1;
  int nf = 0;
  while (now_s() < end) {
    if (faults && now_s() >= next_fault) {
      redisReply *r = redisCommand(e->rc, fault[nf++ % 3]);
      if (r)
        freeReplyObject(r);
      next_fault += 0.1;
    }
    double t0 = now_s();
    xf_value v;
    int rc = xf_get(c, key, strlen(key), &v);
    int ver = rc == XF_OK ? atoi(v.data) : -1;
    xf_value_free(&v);
    out->reads++;
    if (rc != XF_OK && rc != XF_ENOTFOUND)
      step_count(errs, "xf_get (staleness)", rc, xf_errmsg(c));
    if (rc != XF_OK)
      continue; /* flushed: a miss is never stale; an error is counted */
    double s = stale_by_ms(log, ver, t0);
    if (s > 1.0)
      out->over_1ms_delivered += xf__near_news_waiting(near);
    if (s > 0) {
      if (n == cap) {
        double *more = realloc(stale, 2 * cap * sizeof *stale);
        if (!more)
          break;
        stale = more, cap *= 2;
      }
      stale[n++] = s;
    }
  }
  usleep(50 * 1000); /* the last write's invalidation */
  lateness(log, start, end, out);
  qsort(stale, n, sizeof *stale, cmp_d);
  out->stale = n;
  for (size_t i = 0; i < n; i++)
    out->over_1ms += stale[i] > 1.0;
  /* percentiles over every read (most are 0) */
  double p99_idx = 0.99 * (double)out->reads, p999_idx = 0.999 * (double)out->reads;
  size_t fresh = out->reads - n;
  out->p99_ms = p99_idx < fresh ? 0 : stale[(size_t)(p99_idx - fresh)];
  out->p999_ms = p999_idx < fresh ? 0 : stale[(size_t)(p999_idx - fresh)];
  out->max_ms = n ? stale[n - 1] : 0;
  free(stale);
  return 0;
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Three passes: undisturbed and under faults with the writer fenced (the
 * library's default for a near-cache fleet), then undisturbed with the
 * fence off; set_p50_us: the writer's xf_set p50, unfenced [0] and fenced
 * [1]. */
static int staleness(const bench_env *e, double dur, nb_stale out[3], double set_p50_us[2],
                     step_errors *errs, uint64_t *set_errs) {
  shared_log *log =
      mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (log == MAP_FAILED)
    return -1;
  memset(log, 0, sizeof *log);
  log->fence = 1;
  log->fencing = -1;
  char key[64];
  snprintf(key, sizeof key, "xfb:%u:near:stale", e->cfg->run_id);
  pid_t pid = fork();
  if (pid == 0) {
    writer(e->t, key, log);
    _exit(0);
  }
  if (pid < 0)
    step_failed_because("staleness: fork (the writer)", strerror(errno));
  xf_share *s = pid > 0 ? nb_share(1 << 20) : NULL;
  xf_client *c = s ? nb_client(e->t, s) : NULL;
  int rv = c ? 0 : -1;
  /* the writer's first set acknowledged (or the writer gone: it failed) */
  while (!rv && !__atomic_load_n(&log->acked_us[1], __ATOMIC_ACQUIRE))
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      pid = -1;
      rv = step_meaningless(
          "staleness", "staleness",
          "the writer process ended before its first set was acknowledged", &log->set_errs);
    } else
      usleep(1000);
  xf__near_test_before_apply = on_apply;
  for (int faults = 0; !rv && faults < 2; faults++)
    rv = stale_pass(e, c, xf__share_near(s), key, log, dur, faults, &out[faults], errs);
  memset(&out[2], 0, sizeof out[2]); /* then undisturbed, the fence off */
  __atomic_store_n(&log->fence, 0, __ATOMIC_RELEASE);
  while (!rv && __atomic_load_n(&log->fencing, __ATOMIC_ACQUIRE) != 0)
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      pid = -1;
      rv = step_meaningless("staleness", "staleness with the fence off",
                            "the writer process ended", &log->set_errs);
    } else
      usleep(1000);
  if (!rv)
    rv = stale_pass(e, c, xf__share_near(s), key, log, dur, 0, &out[2], errs);
  xf__near_test_before_apply = NULL;
  __atomic_store_n(&log->stop, 1, __ATOMIC_RELEASE);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  *set_errs = __atomic_load_n(&log->set_errs.n, __ATOMIC_ACQUIRE);
  step_errors_report("staleness: the writer's sets", &log->set_errs,
                     (uint64_t)(log->nset[0] + log->nset[1]) + *set_errs);
  for (int f = 0; f < 2; f++) {
    qsort(log->set_us[f], (size_t)log->nset[f], sizeof(float), cmp_f);
    set_p50_us[f] = log->nset[f] ? log->set_us[f][log->nset[f] / 2] : 0;
  }
  xf_client_close(c);
  xf_share_close(s);
  munmap(log, sizeof *log);
  return rv;
}

/* ---- the scenario ---- */

int sc_near(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, n = q ? 20000 : 100000;
  out->name = "near";
  char key[64];
  snprintf(key, sizeof key, "xfb:%u:near:hot", e->cfg->run_id);
  xf_share *s = nb_share(64 << 20);
  xf_client *far = s ? nb_client(e->t, NULL) : NULL,
            *near = far ? nb_client(e->t, s) : NULL;
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
      staleness(e, q ? 1.0 : 3.0, st, set_us, &serr, &set_errs) || nb_wake_run(e, &w))
    return -1;
  step_errors_report("zipf", &zerr, (uint64_t)z.keys + (uint64_t)(q ? 200000 : 1000000));
  step_errors_report("staleness: the reader's xf_get", &serr,
                     st[0].reads + st[1].reads + st[2].reads);
  goal_set("near_hit_vs_redis_hit", near_rps / redis_rps);
  goal_set("near_cmds_per_10k", cmds_per_call * 10000);
  goal_set("near_stale_p99_ms", st[0].p99_ms);
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
  for (int i = 0; i < 3; i++)
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
