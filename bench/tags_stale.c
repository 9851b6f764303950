/* tags_stale: a hot tagged key whose tag is invalidated again and again, for
 * what the callers wait (see bench/README.md, "After an invalidation"). Starts
 * a throwaway redis-server (or uses --port P); T threads, each with its own
 * client (as processes of a fleet would be), call xf_get_or_compute on one
 * key with one tag, a 1 ms pause between calls; the loader takes LOAD ms;
 * every EVERY ms another client invalidates the tag. Two runs of DUR ms, one
 * after the other on the same server: the default policy.tags_never_stale 0
 * with stale_ms 10 s (the invalidated value is served stale while one caller
 * reloads it), then tags_never_stale 1 (every caller waits for the reload).
 * Prints, per run: calls, loads per invalidation, calls served stale, the
 * calls that waited for a load (took LOAD / 2 ms or more: the reloading one
 * itself, and with tags_never_stale every caller that came meanwhile), and
 * the latency of a call at p50, p99 and max.
 *
 *   tags_stale [--threads T] [--ms DUR] [--load-ms LOAD] [--every-ms EVERY]
 *              [--port P] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "xfetch.h"

enum { MAX_SAMPLES = 1 << 20 };

typedef struct run {
  xf_options o;
  int load_ms, never_stale;
  int64_t end_us;
  long loads, calls, stale, errors; /* atomics */
  int64_t *lat_us;                  /* MAX_SAMPLES; next: the next free slot */
  long next;
} run;

static long add(long *at, long n) { return __atomic_add_fetch(at, n, __ATOMIC_RELAXED); }

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  run *r = ud;
  add(&r->loads, 1);
  sleep_us((int64_t)r->load_ms * 1000);
  return xf_sink_set(sink, "value", 5);
}

static const char *const tags[] = {"tags_stale"};

static xf_policy policy(const run *r) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  p.tags = tags, p.ntags = 1;
  p.stale_ms = 10000;
  p.tags_never_stale = r->never_stale;
  return p;
}

static void *caller(void *arg) {
  run *r = arg;
  xf_client *c = NULL;
  if (xf_client_open(&c, &r->o) != XF_OK) {
    add(&r->errors, 1);
    xf_client_close(c);
    return NULL;
  }
  xf_policy p = policy(r);
  while (now_us() < r->end_us) {
    sleep_us(1000);
    xf_value v;
    int64_t t0 = now_us();
    int rc = xf_get_or_compute(c, "tags_stale", 10, &p, loader, r, &v);
    int64_t took = now_us() - t0;
    add(&r->calls, 1);
    long i = add(&r->next, 1) - 1;
    if (i < MAX_SAMPLES)
      r->lat_us[i] = took;
    if (rc != XF_OK) {
      if (add(&r->errors, 1) <= 3)
        fprintf(stderr, "tags_stale: a call failed: %s (%s)\n", xf_strerror(rc),
                xf_errmsg(c));
      continue;
    }
    if (v.source == XF_SOURCE_STALE)
      add(&r->stale, 1);
    xf_value_free(&v);
  }
  xf_client_close(c);
  return NULL;
}

static int by_value(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static double ms_at(const int64_t *sorted, long n, double q) {
  long i = (long)(q * (double)(n - 1));
  return (double)sorted[i] / 1000.0;
}

/* One run: T callers and the invalidator for ms; prints its line. */
static int one_run(const xf_options *o, int threads, int ms, int load_ms, int every_ms,
                   int never_stale) {
  run r = {.o = *o, .load_ms = load_ms, .never_stale = never_stale};
  r.lat_us = calloc(MAX_SAMPLES, sizeof *r.lat_us);
  xf_client *inv = NULL;
  if (!r.lat_us || xf_client_open(&inv, o) != XF_OK) {
    fprintf(stderr, "tags_stale: out of memory, or the invalidator's open failed\n");
    free(r.lat_us);
    xf_client_close(inv);
    return 1;
  }
  /* Each run starts from a value of its own, loaded before the callers. */
  xf_invalidate_tags(inv, tags, 1);
  xf_policy p = policy(&r);
  xf_value v;
  if (xf_get_or_compute(inv, "tags_stale", 10, &p, loader, &r, &v) == XF_OK)
    xf_value_free(&v);
  r.loads = 0;
  r.end_us = now_us() + (int64_t)ms * 1000;
  pthread_t ts[64];
  for (int i = 0; i < threads; i++)
    pthread_create(&ts[i], NULL, caller, &r);
  long invalidations = 0;
  while (now_us() + (int64_t)every_ms * 1000 < r.end_us) {
    sleep_us((int64_t)every_ms * 1000);
    if (xf_invalidate_tags(inv, tags, 1) == XF_OK)
      invalidations++;
  }
  for (int i = 0; i < threads; i++)
    pthread_join(ts[i], NULL);
  xf_client_close(inv);
  long n = r.next < MAX_SAMPLES ? r.next : MAX_SAMPLES, waited = 0;
  qsort(r.lat_us, (size_t)n, sizeof *r.lat_us, by_value);
  for (long i = 0; i < n; i++)
    waited += r.lat_us[i] * 2 >= (int64_t)load_ms * 1000;
  printf("tags_stale: tags_never_stale %d (stale_ms 10000): %d threads, a %d ms loader, "
         "%ld invalidations: %ld calls, %ld loads (%.2f per invalidation), %ld served "
         "stale, %ld errors; %ld calls waited for a load (%.2f per invalidation); a call "
         "p50 %.2f ms, p99 %.2f ms, max %.1f ms\n",
         never_stale, threads, load_ms, invalidations, r.calls, r.loads,
         invalidations ? (double)r.loads / (double)invalidations : 0.0, r.stale, r.errors,
         waited, invalidations ? (double)waited / (double)invalidations : 0.0,
         n ? ms_at(r.lat_us, n, 0.5) : 0.0, n ? ms_at(r.lat_us, n, 0.99) : 0.0,
         n ? ms_at(r.lat_us, n, 1.0) : 0.0);
  free(r.lat_us);
  return r.errors != 0;
}

int main(int argc, char **argv) {
  int threads = 8, ms = 10000, load_ms = 100, every_ms = 500, port = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--threads"))
      threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ms"))
      ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--load-ms"))
      load_ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--every-ms"))
      every_ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--port"))
      port = atoi(argv[i + 1]);
    else
      threads = 0;
  if (threads < 1 || threads > 64 || ms < 1000 || load_ms < 0 || every_ms <= load_ms ||
      every_ms >= ms) {
    fprintf(stderr, "usage: tags_stale [--threads T] [--ms DUR] [--load-ms LOAD] "
                    "[--every-ms EVERY (> LOAD, < DUR)] [--port P]\n");
    return 2;
  }
  target t;
  if (target_local_or_start(&t, port) != 0)
    return 1;
  xf_options o = target_options(&t);
  int rc = one_run(&o, threads, ms, load_ms, every_ms, 0) |
           one_run(&o, threads, ms, load_ms, every_ms, 1);
  if (t.pid)
    target_stop_server(&t);
  return rc;
}
