/* hot_key_loop: one hot key under a closed loop of callers, for how many
 * calls one load serves (see bench/README.md). Starts a throwaway
 * redis-server (or uses --port P); N threads, each with its own client
 * (with --share, all on one xf_share; --near: one with a near cache, whose
 * waiters wake when the key is written), call xf_get_or_compute on one key for
 * DUR ms; the loader takes LOAD ms and returns a value, or finds nothing
 * (not cached: negative_ttl 0, the default). A load serves every caller that
 * came while it ran: about N calls per load either way.
 *
 *   hot_key_loop none|value [--threads N] [--ms DUR] [--load-ms LOAD]
 *                [--share | --near] [--port P] [format1] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "xfetch.h"

typedef struct run {
  xf_options o;
  int found, load_ms;
  int64_t end_us;
  long calls, loads;           /* atomics */
  int64_t call_us, slowest_us; /* atomics: the calls' time in all, the longest */
  long errors;
} run;

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  run *r = ud;
  __atomic_add_fetch(&r->loads, 1, __ATOMIC_RELAXED);
  struct timespec ts = {r->load_ms / 1000, (long)(r->load_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  if (r->found)
    return xf_sink_set(sink, "v", 1);
  xf_sink_not_found(sink);
  return 0;
}

static void *caller(void *arg) {
  run *r = arg;
  xf_client *c = NULL;
  if (xf_client_open(&c, &r->o) != XF_OK) {
    __atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
    xf_client_close(c);
    return NULL;
  }
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 100; /* a value expires and is loaded again, as a not-found is */
  int64_t t0;
  while ((t0 = now_us()) < r->end_us) {
    xf_value v;
    int rc = xf_get_or_compute(c, "hot_key_loop", 12, &p, loader, r, &v);
    xf_value_free(&v);
    int64_t took = now_us() - t0, was = __atomic_load_n(&r->slowest_us, __ATOMIC_RELAXED);
    __atomic_add_fetch(&r->call_us, took, __ATOMIC_RELAXED);
    while (took > was && !__atomic_compare_exchange_n(&r->slowest_us, &was, took, 0,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      ;
    if (rc != XF_OK && rc != XF_ENOTFOUND)
      __atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&r->calls, 1, __ATOMIC_RELAXED);
  }
  xf_client_close(c);
  return NULL;
}

int main(int argc, char **argv) {
  int n = 16, ms = 1000, port = 0, shared = 0, near = 0, format = XF_ENTRY_STRING;
  run r = {.found = -1, .load_ms = 25};
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "none") || !strcmp(argv[i], "value"))
      r.found = !strcmp(argv[i], "value");
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ms") && i + 1 < argc)
      ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--load-ms") && i + 1 < argc)
      r.load_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--share"))
      shared = 1;
    else if (!strcmp(argv[i], "--near"))
      shared = near = 1;
    else if (!strcmp(argv[i], "format1"))
      format = XF_ENTRY_HASH;
  if (r.found < 0 || n < 1 || n > 1024 || ms < 1 || r.load_ms < 0) {
    fprintf(stderr, "usage: hot_key_loop none|value [--threads N] [--ms DUR] "
                    "[--load-ms LOAD] [--share | --near] [--port P] [format1]\n");
    return 2;
  }
  target t;
  if (target_local_or_start(&t, port) != 0)
    return 1;
  t.entry_format = format;
  r.o = target_options(&t);
  xf_share *share = NULL;
  xf_share_options so = {.near_cache_bytes = near ? 1u << 20 : 0};
  if (shared && xf_share_open(&share, &so) != XF_OK)
    return 1;
  r.o.share = share;
  pthread_t *ts = calloc((size_t)n, sizeof *ts);
  r.end_us = now_us() + (int64_t)ms * 1000;
  for (int i = 0; ts && i < n; i++)
    pthread_create(&ts[i], NULL, caller, &r);
  for (int i = 0; ts && i < n; i++)
    pthread_join(ts[i], NULL);
  free(ts);
  xf_share_close(share);
  if (t.pid)
    target_stop_server(&t);
  long calls = __atomic_load_n(&r.calls, __ATOMIC_RELAXED);
  long loads = __atomic_load_n(&r.loads, __ATOMIC_RELAXED);
  printf("hot_key_loop %s: %d threads%s, %d ms, %d ms loader: %ld calls, %ld loads, "
         "%.1f calls per load, a call %.1f ms on average, %.1f ms at most, %ld errors\n",
         r.found ? "value" : "none", n,
         near     ? " on a near cache"
         : shared ? " on one share"
                  : "",
         ms, r.load_ms, calls, loads, loads ? (double)calls / (double)loads : 0.0,
         calls ? (double)r.call_us / 1000.0 / (double)calls : 0.0,
         (double)r.slowest_us / 1000.0, r.errors);
  return r.errors ? 1 : 0;
}
