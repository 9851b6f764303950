/* The near cache under threads, outside Criterion so ThreadSanitizer can
 * run it: 8 threads read 16 keys through a pool whose share keeps a near
 * cache, while a writer (another client, no share) rewrites them, a killer
 * cuts the data and invalidation connections (CLIENT KILL) and 4 threads
 * wait on a slow load (woken by its write); then 2 threads run batches
 * (xf_get_or_compute_many) of two new slow keys each round, one waiting on
 * the other's loads (batch_wait.c), the writer still writing. Every call must succeed with
 * a well-formed value; the near cache must have served hits. Usage: near_stress PORT. Exit
 * 0 on success. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfetch.h"

#define READERS 8
#define KEYS 16
#define READS 3000

static int port;
static xf_pool *pool;
static int stop, killed; /* killed: the killer is done */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  sleep_ms(ud ? 100 : 0);
  return xf_sink_set(sink, "v0", 2);
}

static xf_client *plain_client(void) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  xf_client *c;
  return xf_client_open(&c, &o) == XF_OK ? c : NULL;
}

static void *reader(void *arg) {
  long bad = 0;
  xf_policy p = XF_POLICY_INIT;
  for (int i = 0; i < READS || !__atomic_load_n(&killed, __ATOMIC_ACQUIRE); i++) {
    char key[16];
    snprintf(key, sizeof key, "ns:%d", (i * 7 + (int)(long)arg) % KEYS);
    xf_value v;
    int rc = xf_pool_get_or_compute(pool, key, strlen(key), &p, load, NULL, &v);
    if (rc != XF_OK || v.len < 2 || v.data[0] != 'v') {
      if (bad++ == 0) /* what went wrong, once per thread */
        fprintf(stderr, "near_stress: reader %s: %s (%s), value %.*s\n", key,
                xf_strerror(rc), rc == XF_OK ? "" : xf_pool_errmsg(),
                rc == XF_OK ? (int)v.len : 0, rc == XF_OK ? v.data : "");
    }
    xf_value_free(&v);
  }
  return (void *)bad;
}

static void *writer(void *arg) {
  (void)arg;
  xf_client *c = plain_client();
  xf_policy p = XF_POLICY_INIT;
  for (int n = 1; c && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); n++) {
    char key[16], value[24];
    snprintf(key, sizeof key, "ns:%d", n % KEYS);
    snprintf(value, sizeof value, "v%d", n);
    xf_set(c, key, strlen(key), value, strlen(value), &p);
    sleep_ms(1);
  }
  xf_client_close(c);
  return NULL;
}

/* Cuts the data connections, then the invalidation one, alternately
 * (redis-cli: this program links no hiredis of its own). */
static void *killer(void *arg) {
  (void)arg;
  char cmd[128];
  for (int i = 0; i < 6; i++) {
    sleep_ms(50);
    snprintf(cmd, sizeof cmd, "redis-cli -p %d CLIENT KILL TYPE %s >/dev/null", port,
             i % 2 ? "pubsub" : "normal");
    if (system(cmd) != 0)
      fprintf(stderr, "near_stress: %s failed\n", cmd);
  }
  __atomic_store_n(&killed, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void *waiter(void *arg) {
  (void)arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  int rc = xf_pool_get_or_compute(pool, "ns:slow", 7, &p, load, (void *)1, &v);
  long bad = rc != XF_OK || strcmp(v.data, "v0") != 0;
  if (bad)
    fprintf(stderr, "near_stress: waiter: %s (%s), value %s\n", xf_strerror(rc),
            rc == XF_OK ? "" : xf_pool_errmsg(), rc == XF_OK ? v.data : "");
  xf_value_free(&v);
  return (void *)bad;
}

/* The batch loader: the round's keys in one slow call. */
static int load_many(void *ud, size_t n, const char *const *keys, const size_t *keylens,
                     xf_sink *const *sinks) {
  (void)ud, (void)keys, (void)keylens;
  sleep_ms(100);
  for (size_t i = 0; i < n; i++)
    if (xf_sink_set(sinks[i], "v0", 2) != XF_OK)
      return 1;
  return 0;
}

/* Rounds of a batch: two keys new this round (slow loads) and two the
 * writer rewrites. The first batch thread loads with the batch loader (both
 * new keys leased at once), the other with the per-key loader: when the
 * first leads, the other waits on both keys (batch_wait.c's wake pipe). */
static xf_share *share;

static void *batcher(void *arg) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  o.connect_timeout_ms = 10000; /* as main's pool: see there */
  o.command_timeout_ms = 30000;
  xf_client *c;
  int orc = xf_client_open(&c, &o);
  if (orc != XF_OK) {
    fprintf(stderr, "near_stress: batch: xf_client_open: %s\n", xf_strerror(orc));
    return (void *)1;
  }
  xf_policy p = XF_POLICY_INIT;
  long bad = 0;
  for (int round = 0; round < 5; round++) {
    char names[4][24];
    const char *keys[4];
    size_t lens[4];
    for (int i = 0; i < 4; i++) {
      if (i < 2)
        snprintf(names[i], sizeof names[i], "ns:b%d:%d", round, i);
      else
        snprintf(names[i], sizeof names[i], "ns:%d", (round + i) % KEYS);
      keys[i] = names[i];
      lens[i] = strlen(names[i]);
    }
    xf_value v[4];
    int rcs[4];
    int rc =
        arg ? xf_get_or_compute_many_batch(c, 4, keys, lens, &p, load_many, NULL, v, rcs)
            : xf_get_or_compute_many(c, 4, keys, lens, &p, load, (void *)1, v, rcs);
    if (rc != XF_OK) {
      fprintf(stderr, "near_stress: batch: %s (%s)\n", xf_strerror(rc), xf_errmsg(c));
      xf_client_close(c);
      return (void *)1;
    }
    for (int i = 0; i < 4; i++) {
      if (rcs[i] != XF_OK || v[i].len < 2 || v[i].data[0] != 'v') {
        fprintf(stderr, "near_stress: batch %s: %s (%s)\n", keys[i], xf_strerror(rcs[i]),
                xf_errmsg(c));
        bad++;
      }
      xf_value_free(&v[i]);
    }
  }
  xf_client_close(c);
  return (void *)bad;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  port = atoi(argv[1]);
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  if (xf_share_open(&share, &so) != XF_OK)
    return 1;
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  /* 12 threads on 6 clients, the 4 waiters holding theirs for the slow
   * load: a checkout may wait past the default 1 s under valgrind on a busy
   * machine (XF_EBUSY, seen); this program checks values, not the pool. */
  /* Timeouts of 10 s (connect) and 30 s (a reply): under valgrind on a busy
   * machine the 1 s defaults timed every connection out (the breaker open,
   * every call failed open: "0 near hits of 0 hits"). */
  o.connect_timeout_ms = 10000;
  o.command_timeout_ms = 30000;
  if (xf_pool_open(&pool, &o, 6, 30000) != XF_OK)
    return 1;
  pthread_t r[READERS], w[4], b[2], wr, k;
  pthread_create(&wr, NULL, writer, NULL);
  pthread_create(&k, NULL, killer, NULL);
  for (long i = 0; i < READERS; i++)
    pthread_create(&r[i], NULL, reader, (void *)i);
  for (int i = 0; i < 4; i++)
    pthread_create(&w[i], NULL, waiter, NULL);
  long bad = 0;
  for (int i = 0; i < READERS; i++) {
    void *b;
    pthread_join(r[i], &b);
    bad += (long)b;
  }
  for (int i = 0; i < 4; i++) {
    void *b;
    pthread_join(w[i], &b);
    bad += (long)b;
  }
  /* The batches after the pool's calls (their load made the readers' 1 s
   * checkout run out under ThreadSanitizer), the writer still writing. */
  for (int i = 0; i < 2; i++)
    pthread_create(&b[i], NULL, batcher, (void *)(long)(i == 0));
  for (int i = 0; i < 2; i++) {
    void *rb;
    pthread_join(b[i], &rb);
    bad += (long)rb;
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
  pthread_join(k, NULL);
  pthread_join(wr, NULL);
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  xf_pool_close(pool);
  xf_share_close(share);
  printf("near_stress: %ld bad, %llu near hits of %llu hits\n", bad,
         (unsigned long long)info.clients.near_hits, (unsigned long long)info.clients.hits);
  return bad || info.clients.near_hits == 0;
}
