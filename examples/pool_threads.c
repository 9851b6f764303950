/* A threaded service behind one xf_pool: 32 request threads, 4 Redis
 * connections, one hot key whose value takes 100 ms to compute.
 * Usage: pool_threads [port] (default 6379). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <xfetch.h>

#define THREADS 32

static int queries; /* database queries made */

static int load_report(void *db, const char *key, size_t keylen, xf_sink *sink) {
  (void)db;
  __atomic_add_fetch(&queries, 1, __ATOMIC_SEQ_CST);
  usleep(100 * 1000); /* the expensive part */
  char buf[128];
  int n = snprintf(buf, sizeof buf, "report for %.*s", (int)keylen, key);
  return xf_sink_set(sink, buf, (size_t)n);
}

static void *request(void *pool) {
  xf_policy policy = XF_POLICY_INIT;
  xf_value v;
  int rc = xf_pool_get_or_compute(pool, "report:today", 12, &policy, load_report, NULL, &v);
  if (rc != XF_OK)
    fprintf(stderr, "request: %s (%s)\n", xf_strerror(rc), xf_pool_errmsg());
  xf_value_free(&v);
  return (void *)(long)(rc != XF_OK);
}

int main(int argc, char **argv) {
  xf_options opts = XF_OPTIONS_INIT;
  opts.port = argc > 1 ? atoi(argv[1]) : 6379;
  xf_pool *pool;
  int rc = xf_pool_open(&pool, &opts, 4, 1000); /* 4 connections, 1 s checkout timeout */
  if (rc != XF_OK) {
    fprintf(stderr, "xf_pool_open: %s\n", xf_strerror(rc));
    return 1;
  }
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&threads[i], NULL, request, pool);
  long failed = 0;
  for (int i = 0; i < THREADS; i++) {
    void *bad;
    pthread_join(threads[i], &bad);
    failed += (long)bad;
  }
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  printf("%d requests on %d threads: %ld failed, %d database queries, %llu Redis "
         "connections\n",
         THREADS, THREADS, failed, queries, (unsigned long long)info.open);
  xf_pool_close(pool);
  return failed != 0;
}
