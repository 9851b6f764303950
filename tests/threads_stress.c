/* Threads on a cold key, outside Criterion so ThreadSanitizer can run it:
 * each round, 16 threads (one client each) ask for a fresh key at once;
 * exactly one loader call per round and every thread gets the value. Then
 * the same with Redis unreachable and the threads' clients sharing one
 * xf_share: still one loader call per round. Then the 16 threads go through
 * one xf_pool of 4 clients: one loader call per round, at most 4 clients.
 * Usage: threads_stress PORT. Exit 0 on success. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfetch.h"

#define THREADS 16
#define ROUNDS 5

static int port;
static int calls;
static pthread_barrier_t start;
static xf_share *share; /* set: the clients share it and Redis is down */
static xf_pool *pool;   /* set: the threads call through it */

static int load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud;
  __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  struct timespec ts = {0, 50 * 1000000L};
  nanosleep(&ts, NULL);
  return xf_sink_set(sink, key, keylen);
}

static void *pooled(const char *key) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  pthread_barrier_wait(&start);
  int rc = xf_pool_get_or_compute(pool, key, strlen(key), &p, load, NULL, &v);
  int bad = rc != XF_OK || v.len != strlen(key) || memcmp(v.data, key, v.len) != 0;
  xf_value_free(&v);
  return (void *)(long)bad;
}

static void *worker(void *arg) {
  const char *key = arg;
  if (pool)
    return pooled(key);
  xf_options o = XF_OPTIONS_INIT;
  o.port = share ? 1 : port; /* nobody listens on port 1 */
  o.lazy_connect = share != NULL;
  o.share = share;
  xf_client *c;
  if (xf_client_open(&c, &o) != XF_OK)
    return (void *)1;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  pthread_barrier_wait(&start);
  int rc = xf_get_or_compute(c, key, strlen(key), &p, load, NULL, &v);
  int bad = rc != XF_OK || v.len != strlen(key) || memcmp(v.data, key, v.len) != 0;
  xf_value_free(&v);
  xf_client_close(c);
  return (void *)(long)bad;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  port = atoi(argv[1]);
  int failures = 0;
  for (int round = 0; round < 3 * ROUNDS; round++) {
    if (round == ROUNDS && xf_share_open(&share, NULL) != XF_OK)
      return 1;
    if (round == 2 * ROUNDS) {
      xf_share_close(share);
      share = NULL;
      xf_options o = XF_OPTIONS_INIT;
      o.port = port;
      if (xf_pool_open(&pool, &o, 4, 0) != XF_OK)
        return 1;
    }
    char key[64];
    snprintf(key, sizeof key, "stress:%ld:%d", (long)time(NULL), round);
    __atomic_store_n(&calls, 0, __ATOMIC_SEQ_CST);
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t ts[THREADS];
    for (int i = 0; i < THREADS; i++)
      pthread_create(&ts[i], NULL, worker, key);
    for (int i = 0; i < THREADS; i++) {
      void *bad;
      pthread_join(ts[i], &bad);
      failures += bad != NULL;
    }
    pthread_barrier_destroy(&start);
    int n = __atomic_load_n(&calls, __ATOMIC_SEQ_CST);
    if (n != 1) {
      fprintf(stderr, "round %d: %d loader calls, want 1\n", round, n);
      failures++;
    }
  }
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  if (info.open > 4) {
    fprintf(stderr, "the pool made %llu clients, want <= 4\n",
            (unsigned long long)info.open);
    failures++;
  }
  xf_pool_close(pool);
  printf("threads_stress: %d rounds x %d threads (and as many with Redis down and a "
         "share, and through a pool of 4), %d failures\n",
         ROUNDS, THREADS, failures);
  return failures ? 1 : 0;
}
