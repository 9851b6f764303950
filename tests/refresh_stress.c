/* Background refresh's threads, outside Criterion so ThreadSanitizer can run
 * them: 8 threads hammer one hot key whose ttl (300 ms) runs out several
 * times, with background_refresh (the rate-aware rule), through
 *   pool:     a pool of 2 clients (its own share's workers);
 *   blocking: a blocking client per thread, all on one share;
 * then close while refreshes may still run. Every call must be XF_OK, no
 * call may run the loader itself but the first misses, and the loader must
 * not run more than about once per ttl. Usage: refresh_stress PORT. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfetch.h"

#define THREADS 8
#define RUN_MS 1500
#define TTL_MS 300
#define LOAD_MS 20

static xf_pool *pool;
static xf_share *share;
static int port;
static char key[64];
/* Counted by the callers and by the refresh workers, which may still run a
 * load after the callers are joined: read and reset atomically only. */
static int loads, failures, in_call_loads;
static __thread int loading_here;
static pthread_barrier_t start;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int load(void *ud, const char *k, size_t klen, xf_sink *sink) {
  (void)ud, (void)k, (void)klen;
  loading_here = 1;
  int n = __atomic_add_fetch(&loads, 1, __ATOMIC_RELAXED);
  struct timespec ts = {0, LOAD_MS * 1000000L};
  nanosleep(&ts, NULL);
  char v[16];
  snprintf(v, sizeof v, "v%d", n);
  return xf_sink_set(sink, v, strlen(v)) == XF_OK ? 0 : -1;
}

static xf_policy policy(void) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = TTL_MS;
  p.background_refresh = 1;
  return p;
}

static void check(int rc, const xf_value *v, int64_t at) {
  if (rc != XF_OK) {
    fprintf(stderr, "refresh_stress: a call failed: %s\n", xf_strerror(rc));
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  } else if (loading_here && at > 2 * LOAD_MS + 100) { /* past the first miss */
    __atomic_add_fetch(&in_call_loads, 1, __ATOMIC_RELAXED);
  }
  (void)v;
}

static void *through_pool(void *arg) {
  (void)arg;
  xf_policy p = policy();
  pthread_barrier_wait(&start);
  int64_t t0 = now_ms();
  while (now_ms() - t0 < RUN_MS) {
    xf_value v;
    loading_here = 0;
    int rc = xf_pool_get_or_compute(pool, key, strlen(key), &p, load, NULL, &v);
    check(rc, &v, now_ms() - t0);
    xf_value_free(&v);
  }
  return NULL;
}

static void *through_client(void *arg) {
  (void)arg;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.share = share;
  xf_client *c = NULL;
  if (xf_client_open(&c, &o) != XF_OK) {
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    pthread_barrier_wait(&start);
    return NULL;
  }
  xf_policy p = policy();
  pthread_barrier_wait(&start);
  int64_t t0 = now_ms();
  while (now_ms() - t0 < RUN_MS) {
    xf_value v;
    loading_here = 0;
    int rc = xf_get_or_compute(c, key, strlen(key), &p, load, NULL, &v);
    check(rc, &v, now_ms() - t0);
    xf_value_free(&v);
  }
  xf_client_close(c);
  return NULL;
}

static int round_of(const char *name, void *(*fn)(void *)) {
  snprintf(key, sizeof key, "refresh_stress:%s:%ld", name, (long)now_ms());
  __atomic_store_n(&loads, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&failures, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&in_call_loads, 0, __ATOMIC_RELAXED);
  pthread_t th[THREADS];
  pthread_barrier_init(&start, NULL, THREADS);
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, fn, NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  int most = RUN_MS / (TTL_MS - 2 * LOAD_MS) + 3; /* about one per ttl, and the miss */
  int n = __atomic_load_n(&loads, __ATOMIC_RELAXED);
  int failed = __atomic_load_n(&failures, __ATOMIC_RELAXED);
  printf("refresh_stress %s: %d loads in %d ms (ttl %d), %d failed calls, %d in-call "
         "loads after the first miss\n",
         name, n, RUN_MS, TTL_MS, failed,
         __atomic_load_n(&in_call_loads, __ATOMIC_RELAXED));
  return failed == 0 && n <= most && n >= 2 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  port = atoi(argv[1]);
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  int bad = 0;
  if (xf_pool_open(&pool, &o, 2, 0) != XF_OK)
    return 1;
  bad |= round_of("pool", through_pool);
  xf_pool_close(pool); /* a refresh may still run: drained or abandoned */
  if (xf_share_open(&share, NULL) != XF_OK)
    return 1;
  bad |= round_of("blocking", through_client);
  xf_refresh_info i;
  xf_share_refresh_stats(share, &i);
  printf("refresh_stress blocking: %llu started, %llu done, %llu skipped\n",
         (unsigned long long)i.started, (unsigned long long)i.done,
         (unsigned long long)i.skipped);
  xf_share_close(share);
  return bad;
}
