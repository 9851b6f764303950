/* The pool driver's threaded paths, outside Criterion so ThreadSanitizer can
 * run them (threads_stress covers 16 threads on a cold key through 4
 * clients). Each round:
 *   nested:  16 threads, ONE client: a loader that calls the pool for another
 *            key; one outer and one inner loader call, every value right, no
 *            checkout timed out, while another thread reads xf_pool_stats;
 *   busy:    16 threads hammer one cached key through ONE client with a 1 ms
 *            checkout timeout: every call is XF_OK or XF_EBUSY, the pool
 *            counts exactly the XF_EBUSYs, the loader never runs again;
 *   openfail: 16 threads through up to 8 clients while every other client
 *            open fails: every call is XF_OK, XF_ENOMEM (exactly one per failed
 *            open) or XF_EBUSY, every client is idle afterwards, and the
 *            summed stats count no more than the calls made;
 *   down:    Redis unreachable, 16 threads through 2 clients: one loader call
 *            (the pool's share), every thread gets the value.
 * Usage: pool_stress PORT. Exit 0 on success. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfetch.h"

#define THREADS 16
#define ROUNDS 3
#define BUSY_CALLS 50
#define OPENFAIL_MAX 8

/* The library's internal test hook (src/client_io.h): every Nth client open
 * fails with XF_ENOMEM. */
extern unsigned xf__test_fail_open_every, xf__test_failed_opens;

static xf_pool *pool;
static pthread_barrier_t start;
static int outer_calls, inner_calls, plain_calls, stop_stats;
static char outer_key[64], inner_key[64];
static int failures;

static void fail(const char *what, int rc) {
  fprintf(stderr, "pool_stress: %s: %s (%s)\n", what, xf_errname(rc), xf_pool_errmsg());
  __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
}

static void nap_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static int load_plain(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud;
  __atomic_add_fetch(&plain_calls, 1, __ATOMIC_SEQ_CST);
  nap_ms(30);
  return xf_sink_set(sink, key, keylen);
}

static int load_inner(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  __atomic_add_fetch(&inner_calls, 1, __ATOMIC_SEQ_CST);
  nap_ms(20);
  return xf_sink_set(sink, "inner", 5);
}

/* Asks the pool again while this call's own lease is held. */
static int load_outer(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  __atomic_add_fetch(&outer_calls, 1, __ATOMIC_SEQ_CST);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  int rc =
      xf_pool_get_or_compute(pool, inner_key, strlen(inner_key), &p, load_inner, NULL, &v);
  if (rc != XF_OK)
    return -1;
  char buf[64];
  int n = snprintf(buf, sizeof buf, "outer(%.*s)", (int)v.len, v.data);
  xf_value_free(&v);
  return xf_sink_set(sink, buf, (size_t)n);
}

static void *nested(void *arg) {
  (void)arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  pthread_barrier_wait(&start);
  int rc =
      xf_pool_get_or_compute(pool, outer_key, strlen(outer_key), &p, load_outer, NULL, &v);
  if (rc != XF_OK)
    fail("nested call", rc);
  else if (v.len != 12 || memcmp(v.data, "outer(inner)", 12) != 0)
    fail("nested call: wrong value", rc);
  xf_value_free(&v);
  return NULL;
}

static void *stats_reader(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&stop_stats, __ATOMIC_SEQ_CST)) {
    xf_pool_info info;
    xf_pool_stats(pool, &info);
    if (info.open > 1)
      fail("nested: more clients than max_connections", XF_OK);
    nap_ms(1);
  }
  return NULL;
}

static void *busy(void *arg) {
  long *ebusy = arg;
  xf_policy p = XF_POLICY_INIT;
  pthread_barrier_wait(&start);
  for (int i = 0; i < BUSY_CALLS; i++) {
    xf_value v;
    int rc = xf_pool_get_or_compute(pool, outer_key, strlen(outer_key), &p, load_plain,
                                    NULL, &v);
    if (rc == XF_EBUSY)
      ++*ebusy;
    else if (rc != XF_OK)
      fail("busy call", rc);
    else if (v.len != strlen(outer_key) || memcmp(v.data, outer_key, v.len) != 0)
      fail("busy call: wrong value", rc);
    xf_value_free(&v);
  }
  return NULL;
}

static void *down(void *arg) {
  (void)arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  pthread_barrier_wait(&start);
  int rc =
      xf_pool_get_or_compute(pool, outer_key, strlen(outer_key), &p, load_plain, NULL, &v);
  if (rc != XF_OK)
    fail("call with Redis down", rc);
  else if (v.len != strlen(outer_key) || memcmp(v.data, outer_key, v.len) != 0)
    fail("call with Redis down: wrong value", rc);
  xf_value_free(&v);
  return NULL;
}

static void open_pool(int port, size_t max, int timeout_ms) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  int rc = xf_pool_open(&pool, &o, max, timeout_ms);
  if (rc != XF_OK) {
    fail("xf_pool_open", rc);
    exit(1);
  }
}

typedef struct tally {
  long ok, enomem, ebusy;
} tally;

static void *openfail(void *arg) {
  tally *t = arg;
  xf_policy p = XF_POLICY_INIT;
  pthread_barrier_wait(&start);
  for (int i = 0; i < BUSY_CALLS; i++) {
    xf_value v;
    int rc = xf_pool_get_or_compute(pool, outer_key, strlen(outer_key), &p, load_plain,
                                    NULL, &v);
    if (rc == XF_OK)
      t->ok++;
    else if (rc == XF_ENOMEM)
      t->enomem++;
    else if (rc == XF_EBUSY)
      t->ebusy++;
    else
      fail("openfail call", rc);
    if (rc == XF_OK &&
        (v.len != strlen(outer_key) || memcmp(v.data, outer_key, v.len) != 0))
      fail("openfail call: wrong value", rc);
    xf_value_free(&v);
  }
  return NULL;
}

/* Threads race to open clients while every other open fails. */
static long openfail_round(int port) {
  open_pool(port, OPENFAIL_MAX, 2000);
  unsigned failed_before = __atomic_load_n(&xf__test_failed_opens, __ATOMIC_SEQ_CST);
  __atomic_store_n(&xf__test_fail_open_every, 2, __ATOMIC_SEQ_CST);
  tally ts[THREADS] = {{0}};
  pthread_t th[THREADS];
  pthread_barrier_init(&start, NULL, THREADS);
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, openfail, &ts[i]);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  __atomic_store_n(&xf__test_fail_open_every, 0, __ATOMIC_SEQ_CST);
  long failed =
      (long)(__atomic_load_n(&xf__test_failed_opens, __ATOMIC_SEQ_CST) - failed_before);
  tally sum = {0};
  for (int i = 0; i < THREADS; i++)
    sum.ok += ts[i].ok, sum.enomem += ts[i].enomem, sum.ebusy += ts[i].ebusy;
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  if (sum.enomem != failed || (long)info.timed_out != sum.ebusy ||
      info.open > OPENFAIL_MAX || info.idle != info.open ||
      info.clients.hits > (uint64_t)sum.ok) {
    fprintf(stderr,
            "pool_stress: openfail: %ld XF_ENOMEM for %ld failed opens, %ld XF_EBUSY (%llu "
            "timed out), %llu open, %llu idle, %llu hits for %ld calls\n",
            sum.enomem, failed, sum.ebusy, (unsigned long long)info.timed_out,
            (unsigned long long)info.open, (unsigned long long)info.idle,
            (unsigned long long)info.clients.hits, sum.ok);
    __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
  }
  xf_pool_close(pool);
  return failed;
}

static void run(void *(*fn)(void *), long *args) {
  pthread_t ts[THREADS];
  pthread_barrier_init(&start, NULL, THREADS);
  for (int i = 0; i < THREADS; i++)
    pthread_create(&ts[i], NULL, fn, args ? &args[i] : NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(ts[i], NULL);
  pthread_barrier_destroy(&start);
}

static void expect_calls(const char *what, int round, int *calls, int want) {
  int got = __atomic_load_n(calls, __ATOMIC_SEQ_CST);
  if (got != want) {
    fprintf(stderr, "pool_stress: round %d: %d %s loader calls, want %d\n", round, got,
            what, want);
    __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
  }
  __atomic_store_n(calls, 0, __ATOMIC_SEQ_CST);
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  int port = atoi(argv[1]);
  long stamp = (long)time(NULL);
  long ebusy_total = 0, failed_opens = 0;
  for (int round = 0; round < ROUNDS; round++) {
    snprintf(outer_key, sizeof outer_key, "pstress:%ld:%d:outer", stamp, round);
    snprintf(inner_key, sizeof inner_key, "pstress:%ld:%d:inner", stamp, round);

    open_pool(port, 1, 2000);
    __atomic_store_n(&stop_stats, 0, __ATOMIC_SEQ_CST);
    pthread_t reader;
    pthread_create(&reader, NULL, stats_reader, NULL);
    run(nested, NULL);
    __atomic_store_n(&stop_stats, 1, __ATOMIC_SEQ_CST);
    pthread_join(reader, NULL);
    expect_calls("outer", round, &outer_calls, 1);
    expect_calls("inner", round, &inner_calls, 1);
    xf_pool_info info;
    xf_pool_stats(pool, &info);
    if (info.open != 1 || info.timed_out != 0)
      fail("nested: clients open / timed out", XF_OK);
    xf_pool_close(pool);

    /* outer_key now holds "outer(inner)": the busy calls hit it. */
    open_pool(port, 1, 1);
    xf_policy p = XF_POLICY_INIT;
    int rc =
        xf_pool_set(pool, outer_key, strlen(outer_key), outer_key, strlen(outer_key), &p);
    if (rc != XF_OK)
      fail("xf_pool_set", rc);
    long ebusy[THREADS] = {0};
    run(busy, ebusy);
    long sum = 0;
    for (int i = 0; i < THREADS; i++)
      sum += ebusy[i];
    xf_pool_stats(pool, &info);
    if ((long)info.timed_out != sum || info.open != 1) {
      fprintf(stderr, "pool_stress: busy: %ld XF_EBUSY, pool counted %llu, %llu open\n",
              sum, (unsigned long long)info.timed_out, (unsigned long long)info.open);
      __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
    }
    if (info.clients.hits != (uint64_t)(THREADS * BUSY_CALLS - sum))
      fail("busy: hits != calls that got a client", XF_OK);
    expect_calls("busy", round, &plain_calls, 0);
    ebusy_total += sum;
    xf_pool_close(pool);

    failed_opens += openfail_round(port); /* outer_key still cached: hits only */
    expect_calls("openfail", round, &plain_calls, 0);

    open_pool(1, 2, 2000); /* nobody listens on port 1 */
    run(down, NULL);
    expect_calls("Redis-down", round, &plain_calls, 1);
    xf_pool_close(pool);
  }
  printf("pool_stress: %d rounds x %d threads (nested calls through 1 client, %d hits each "
         "through 1 client with a 1 ms checkout timeout: %ld XF_EBUSY, Redis down through "
         "2, %ld client opens failed through up to %d), %d failures\n",
         ROUNDS, THREADS, BUSY_CALLS, ebusy_total, failed_opens, OPENFAIL_MAX,
         __atomic_load_n(&failures, __ATOMIC_SEQ_CST));
  return __atomic_load_n(&failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
