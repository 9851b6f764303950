/* The near scenario's staleness passes (bench/near_bench.h): a writer in
 * another process sets a key every 20 ms (each value its version, its
 * acknowledgement time in shared memory) while this process reads it through
 * the near cache; a read is stale by t when the version it returned had been
 * superseded by one acknowledged t ms before the read began. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "drivers.h"
#include "near_bench.h"
#include "near_impl.h"
#include "share.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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
static int stale_pass(const bench_env *e, xf_client *c, struct xf__ncache *near,
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
int nb_staleness(const bench_env *e, double dur, nb_stale out[3], double set_p50_us[2],
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
  xf_client *c = s ? drv_client_shared(e->t, s) : NULL;
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
  /* The faults (FLUSHALL, CLIENT KILL) only on a server this bench started:
   * never on the user's (--redis). */
  memset(&out[1], 0, sizeof out[1]);
  for (int faults = 0; !rv && faults < (e->t->pid ? 2 : 1); faults++)
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
