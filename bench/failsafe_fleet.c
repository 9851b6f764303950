/* failsafe_fleet: a loader that fails for a while under a fleet of processes,
 * for how many load attempts the whole fleet makes and how many callers get
 * an error (see bench/README.md, "Fail-safe across the fleet"). Starts a
 * throwaway redis-server (or uses --port P); P processes of T threads, each
 * thread with its own client, call xf_get_or_compute on one key for DUR ms.
 * The loader succeeds for the first second, then fails (returns -1 after
 * LOAD ms) until FAIL ms later, then succeeds again. The policy: ttl 500 ms,
 * stale_if_error_ms 60 s, failsafe_throttle_ms THROTTLE (0: none, each
 * caller retries at once). Load attempts are counted in shared memory.
 *
 *   failsafe_fleet [--procs P] [--threads T] [--ms DUR] [--fail-ms FAIL]
 *                  [--load-ms LOAD] [--throttle-ms THROTTLE] [--port P] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "xfetch.h"

typedef struct fleet { /* in MAP_SHARED memory: every field an atomic */
  int64_t start_us, fail_from_us, fail_until_us, end_us;
  long attempts_failing;                     /* loads started while the loader fails */
  long attempts_ok;                          /* loads started while it succeeds */
  long calls, errors, stale, cached, loaded; /* calls while the loader fails */
  long slowest_us;                           /* the slowest of them */
} fleet;

typedef struct caller_arg {
  fleet *f;
  xf_options o;
  int load_ms;
  int64_t throttle_ms;
} caller_arg;

static long add(long *at, long n) { return __atomic_add_fetch(at, n, __ATOMIC_RELAXED); }

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  caller_arg *a = ud;
  int64_t now = now_us();
  int failing = now >= a->f->fail_from_us && now < a->f->fail_until_us;
  add(failing ? &a->f->attempts_failing : &a->f->attempts_ok, 1);
  struct timespec ts = {a->load_ms / 1000, (long)(a->load_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return failing ? -1 : xf_sink_set(sink, "value", 5);
}

static void *caller(void *arg) {
  caller_arg *a = arg;
  xf_client *c = NULL;
  if (xf_client_open(&c, &a->o) != XF_OK) {
    add(&a->f->errors, 1);
    xf_client_close(c);
    return NULL;
  }
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 500;
  p.stale_if_error_ms = 60000;
  p.failsafe_throttle_ms = a->throttle_ms;
  while (now_us() < a->f->end_us) {
    struct timespec think = {0, 2000000L}; /* 2 ms between a thread's calls */
    nanosleep(&think, NULL);
    xf_value v;
    int64_t t0 = now_us();
    int rc = xf_get_or_compute(c, "failsafe_fleet", 14, &p, loader, a, &v);
    int64_t t1 = now_us();
    if (t0 < a->f->fail_from_us || t1 >= a->f->fail_until_us) {
      xf_value_free(&v);
      continue; /* counted: the calls that start and end while it fails */
    }
    long took = (long)(t1 - t0), was = __atomic_load_n(&a->f->slowest_us, __ATOMIC_RELAXED);
    while (took > was && !__atomic_compare_exchange_n(&a->f->slowest_us, &was, took, 0,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      ;
    add(&a->f->calls, 1);
    if (rc != XF_OK) {
      if (add(&a->f->errors, 1) <= 3)
        fprintf(stderr, "failsafe_fleet: a call failed: %s (%s)\n", xf_strerror(rc),
                xf_errmsg(c));
    } else if (v.source == XF_SOURCE_STALE)
      add(&a->f->stale, 1);
    else if (v.source == XF_SOURCE_CACHE)
      add(&a->f->cached, 1);
    else
      add(&a->f->loaded, 1);
    xf_value_free(&v);
  }
  xf_client_close(c);
  return NULL;
}

static int process(fleet *f, const xf_options *o, int threads, int load_ms,
                   int64_t throttle) {
  pthread_t ts[64];
  caller_arg a = {.f = f, .o = *o, .load_ms = load_ms, .throttle_ms = throttle};
  for (int i = 0; i < threads; i++)
    pthread_create(&ts[i], NULL, caller, &a);
  for (int i = 0; i < threads; i++)
    pthread_join(ts[i], NULL);
  return 0;
}

int main(int argc, char **argv) {
  int procs = 16, threads = 2, ms = 13000, fail_ms = 10000, load_ms = 20, port = 0;
  int64_t throttle = 1000;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--procs"))
      procs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads"))
      threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ms"))
      ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--fail-ms"))
      fail_ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--load-ms"))
      load_ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--throttle-ms"))
      throttle = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--port"))
      port = atoi(argv[i + 1]);
    else
      procs = 0;
  if (procs < 1 || procs > 256 || threads < 1 || threads > 64 || ms < 2000 || fail_ms < 0 ||
      fail_ms > ms - 1000 || load_ms < 0 || throttle < 0) {
    fprintf(stderr,
            "usage: failsafe_fleet [--procs P] [--threads T] [--ms DUR] "
            "[--fail-ms FAIL] [--load-ms LOAD] [--throttle-ms THROTTLE] [--port P]\n");
    return 2;
  }
  target t;
  if (target_local_or_start(&t, port) != 0)
    return 1;
  xf_options o = target_options(&t);
  fleet *f =
      mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (f == MAP_FAILED)
    return 1;
  memset(f, 0, sizeof *f);
  f->start_us = now_us();
  f->fail_from_us = f->start_us + 1000000;
  f->fail_until_us = f->fail_from_us + (int64_t)fail_ms * 1000;
  f->end_us = f->start_us + (int64_t)ms * 1000;
  pid_t pids[256];
  for (int i = 0; i < procs; i++)
    if ((pids[i] = fork()) == 0)
      _exit(process(f, &o, threads, load_ms, throttle));
  for (int i = 0; i < procs; i++)
    waitpid(pids[i], NULL, 0);
  if (t.pid)
    target_stop_server(&t);
  long failing = __atomic_load_n(&f->attempts_failing, __ATOMIC_RELAXED);
  double windows = throttle ? (double)fail_ms / (double)throttle : 0.0;
  printf(
      "failsafe_fleet: %d processes x %d threads, loader failing for %d ms (%d ms a try), "
      "failsafe_throttle_ms %lld: %ld load attempts while failing (%.2f per throttle "
      "window), "
      "%ld while succeeding; %ld calls while failing: %ld errors, %ld stale, %ld cached, "
      "%ld "
      "loaded, the slowest %.1f ms\n",
      procs, threads, fail_ms, load_ms, (long long)throttle, failing,
      windows > 0 ? (double)failing / windows : 0.0, f->attempts_ok, f->calls, f->errors,
      f->stale, f->cached, f->loaded, (double)f->slowest_us / 1000.0);
  munmap(f, sizeof *f);
  return 0;
}
