/* The batch driver (xf_get_or_compute_many) with a near cache, against a
 * real redis-server, for both entry formats (format 1: the first round is a
 * read_many script until the clock is learned, then HMGETs; format 2: one
 * MGET): its first round fills the near cache, its later calls are served
 * from it, another client's write is seen, and a key another caller is
 * loading is waited for by wake-on-write, not by polling. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "near_env.h"
#include "near_impl.h"
#include "share.h"
#include "thread_fail.h"

#define BATCH_NEAR_BYTES (1u << 22) /* 100 keys of a batch and more */
#define NKEYS 100

typedef struct env {
  xft_server srv;
  xf_share *share;
  xf_client *c;     /* with the near cache */
  xf_client *other; /* another process's view: no share */
  redisContext *r;  /* raw */
  int format;
} env;

/* A client of e's server on share (NULL: none): XF_OK or the open's code. */
static int open_client_of(xf_client **c, const env *e, xf_share *share) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = e->srv.port;
  o.share = share;
  o.seed = 7;
  o.entry_format = e->format;
  return xf_client_open(c, &o);
}

static xf_client *client_of(const env *e, xf_share *share) {
  xf_client *c;
  cr_assert_eq(open_client_of(&c, e, share), XF_OK);
  return c;
}

static void env_open(env *e, int format) {
  memset(e, 0, sizeof *e);
  e->format = format;
  cr_assert_eq(xft_server_start(&e->srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = BATCH_NEAR_BYTES};
  cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  e->c = client_of(e, e->share);
  e->other = client_of(e, NULL);
  e->r = xft_redis_port(e->srv.port);
}

static void env_close(env *e) {
  redisFree(e->r);
  xf_client_close(e->other);
  xf_client_close(e->c);
  xf_share_close(e->share);
  xft_server_stop(&e->srv);
}

/* Every command a read, a lease or a write may be (scripts' inner commands
 * included: INFO commandstats counts them too). */
static long long sent(redisContext *r) {
  static const char *const cmds[] = {"hmget", "mget", "get", "evalsha", "eval"};
  long long n = 0;
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    n += xft_command_calls(r, cmds[i]);
  return n;
}

static void put(xf_client *c, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, key, strlen(key), value, strlen(value), &p), XF_OK, "%s",
               xf_errmsg(c));
}

/* A loader whose value names the key ("L:<key>"), counting its calls. */
static int calls;
static int key_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud;
  __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  char buf[64];
  int n = snprintf(buf, sizeof buf, "L:%.*s", (int)keylen, key);
  return xf_sink_set(sink, buf, (size_t)n);
}

/* One batch call of n keys: each value (or "" for an error) in got[i]; the
 * call's code (got untouched unless XF_OK). */
static int try_batch(xf_client *c, size_t n, const char *const *keys, char (*got)[32]) {
  size_t lens[NKEYS];
  xf_value v[NKEYS];
  int rcs[NKEYS];
  for (size_t i = 0; i < n; i++)
    lens[i] = strlen(keys[i]);
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = NEAR_WAIT_MS; /* past the fallback poll of near_wake_by_writes_only */
  int rc = xf_get_or_compute_many(c, n, keys, lens, &p, key_loader, NULL, v, rcs);
  if (rc != XF_OK)
    return rc;
  for (size_t i = 0; i < n; i++) {
    snprintf(got[i], sizeof got[i], "%s", rcs[i] == XF_OK ? v[i].data : "");
    xf_value_free(&v[i]);
  }
  return XF_OK;
}

/* try_batch, asserted. */
static void batch(xf_client *c, size_t n, const char *const *keys, char (*got)[32]) {
  cr_assert_eq(try_batch(c, n, keys, got), XF_OK, "%s", xf_errmsg(c));
}

static char names[NKEYS][16];
static const char *keys[NKEYS];

static void name_keys(const char *stem) {
  for (int i = 0; i < NKEYS; i++) {
    snprintf(names[i], sizeof names[i], "%s%d", stem, i);
    keys[i] = names[i];
  }
}

static int formats[] = {XF_ENTRY_HASH, XF_ENTRY_STRING};

/* 100 keys read once by a batch: its round trip fills the near cache, so the
 * next 100 calls are near hits, 10,000 of them sending (almost) nothing. */
ParameterizedTestParameters(near_batch, its_first_round_fills_the_near_cache) {
  return cr_make_param_array(int, formats, 2);
}
ParameterizedTest(int *format, near_batch, its_first_round_fills_the_near_cache) {
  env e;
  env_open(&e, *format);
  name_keys("nb:w");
  for (int i = 0; i < NKEYS; i++)
    put(e.other, keys[i], "v");
  char got[NKEYS][32];
  batch(e.c, NKEYS, keys, got);
  uint64_t hits = near_hits(e.c);
  long long before = sent(e.r);
  for (int round = 0; round < 100; round++) {
    batch(e.c, NKEYS, keys, got);
    for (int i = 0; i < NKEYS; i++)
      cr_assert_str_eq(got[i], "v");
  }
  long long n = sent(e.r) - before;
  uint64_t near = near_hits(e.c) - hits;
  cr_log_info("format %d: 100 batches of 100 warm keys: %llu near hits, %lld commands",
              *format, (unsigned long long)near, n);
  cr_assert_geq(near, 9900, "%llu of 10,000 reads were near hits",
                (unsigned long long)near);
  cr_assert_leq(n, 10, "100 batches of near hits sent %lld commands", n);
  cr_assert_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 0);
  env_close(&e);
}

/* Another client's write: the next batch returns the new value (never the
 * old), while the keys nobody wrote stay near hits. */
ParameterizedTestParameters(near_batch, another_clients_write_is_seen) {
  return cr_make_param_array(int, formats, 2);
}
ParameterizedTest(int *format, near_batch, another_clients_write_is_seen) {
  env e;
  env_open(&e, *format);
  name_keys("nb:i");
  for (int i = 0; i < 10; i++)
    put(e.other, keys[i], "old");
  char got[NKEYS][32];
  batch(e.c, 10, keys, got);
  batch(e.c, 10, keys, got);
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  put(e.other, keys[3], "new");
  near_await_invalidations(e.share, seen);
  uint64_t hits = near_hits(e.c);
  batch(e.c, 10, keys, got);
  for (int i = 0; i < 10; i++)
    cr_assert_str_eq(got[i], i == 3 ? "new" : "old", "key %d", i);
  cr_assert_eq(near_hits(e.c) - hits, 9, "the 9 keys nobody wrote were not near hits");
  hits = near_hits(e.c);
  batch(e.c, 10, keys, got); /* the new value kept near in turn */
  cr_assert_str_eq(got[3], "new");
  cr_assert_eq(near_hits(e.c) - hits, 10);
  env_close(&e);
}

/* Near, in Redis only, missing: in one call, each key gets its value, each
 * missing key is loaded once, and the keys read from Redis are kept near. */
ParameterizedTestParameters(near_batch, near_redis_and_missing_keys_in_one_call) {
  return cr_make_param_array(int, formats, 2);
}
ParameterizedTest(int *format, near_batch, near_redis_and_missing_keys_in_one_call) {
  env e;
  env_open(&e, *format);
  name_keys("nb:m");
  for (int i = 0; i < 20; i++) /* 0..9 near, 10..19 in Redis, 20..29 missing */
    put(e.other, keys[i], "r");
  char got[NKEYS][32];
  batch(e.c, 10, keys, got); /* 0..9 kept near by a batch */
  uint64_t hits = near_hits(e.c);
  long long before = sent(e.r);
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  batch(e.c, 30, keys, got);
  for (int i = 0; i < 30; i++) {
    char want[32];
    snprintf(want, sizeof want, i < 20 ? "r" : "L:%s", keys[i]);
    cr_assert_str_eq(got[i], want, "key %d", i);
  }
  cr_assert_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 10, "one load per missing key");
  cr_assert_eq(near_hits(e.c) - hits, 10, "the 10 near keys");
  cr_log_info("format %d: a mixed batch of 30 sent %lld commands", *format,
              sent(e.r) - before);
  /* The loads' writes invalidated 20..29 (read missing, so tracked): until
   * the tracker has applied that, the node's hits go to Redis (valgrind). */
  near_await_invalidations(e.share, seen);
  hits = near_hits(e.c);
  batch(e.c, 20, keys, got); /* 10..19 were kept near by the mixed call's read */
  cr_assert_eq(near_hits(e.c) - hits, 20);
  cr_assert_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 10);
  env_close(&e);
}

/* ---- wake-on-write ---- */

/* Loads the scripts (read, lease, write, read_many) before a test counts
 * commands: a client loads each on first use (NOSCRIPT, SCRIPT LOAD, the
 * EVALSHA again), and with several clients racing on a fresh server how
 * many met NOSCRIPT depended on who came first. */
static void load_scripts(env *e) {
  xft_loader quick = {.value = "q", .len = 1};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(e->other, "nb:warm", 7, &p, xft_load, &quick, &v), XF_OK,
               "%s", xf_errmsg(e->other));
  xf_value_free(&v);
  const char *key = "nb:warm:many";
  size_t len = strlen(key);
  int rc;
  cr_assert_eq(xf_get_or_compute_many(e->c, 1, &key, &len, &p, xft_load, &quick, &v, &rc),
               XF_OK, "%s", xf_errmsg(e->c));
  cr_assert_eq(rc, XF_OK);
  xf_value_free(&v);
}

typedef struct leader {
  env *e;
  xf_client *c; /* NULL: e->other */
  const char *key;
  int sleep_ms; /* 400 unless told */
  int rc;
  int64_t done_ms;
} leader;

static int slow_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  leader *l = ud;
  __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  int ms = l->sleep_ms ? l->sleep_ms : 400;
  xft_sleep_ms(ms);
  return xf_sink_set(sink, "slow", 4);
}

static void *lead(void *arg) { /* another process's client, holding the lease */
  leader *l = arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  const char *key = l->key ? l->key : "nb:slow";
  l->rc = xf_get_or_compute(l->c ? l->c : l->e->other, key, strlen(key), &p, slow_loader, l,
                            &v);
  l->done_ms = xft_now_ms();
  xf_value_free(&v);
  return NULL;
}

/* Waits (bounded) until the n leaders' loaders run: each holds its key's
 * lease from then on. A fixed sleep after starting them was outlasted on a
 * busy machine (the batch took a lease first and loaded itself). Asserted
 * once the leaders (threads t) ended. */
static void await_leaders(int n, const pthread_t *t) {
  int64_t until = xft_now_ms() + 10000;
  while (__atomic_load_n(&calls, __ATOMIC_SEQ_CST) < n) {
    if (xft_now_ms() >= until) {
      for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
      cr_assert_fail("the leaders' loads never started");
    }
    xft_sleep_ms(1);
  }
}

typedef struct waiter {
  env *e;
  int start_ms;
  char got[3][32];
  int64_t began_ms, done_ms;
  xft_fail fail; /* what went wrong on its thread */
} waiter;

static void *wait_in_batch(void *arg) {
  waiter *w = arg;
  xf_client *c;
  int rc = xft_record_open(open_client_of(&c, w->e, w->e->share), &w->fail, "the waiter");
  if (rc != XF_OK)
    return NULL;
  near_wake_by_writes_only(c);
  static const char *const ks[3] = {"nb:a", "nb:slow", "nb:b"};
  xft_sleep_ms(w->start_ms);
  w->began_ms = xft_now_ms();
  rc = try_batch(c, 3, ks, w->got);
  if (rc != XF_OK)
    xft_fail_record(&w->fail, "xf_get_or_compute_many returned %d (%s): %s", rc,
                    xf_strerror(rc), xf_errmsg(c));
  w->done_ms = xft_now_ms();
  xf_client_close(c);
  return NULL;
}

/* Batches waiting for another client's 400 ms load come back when its write
 * invalidates the key, having read it a few times (a poll reads it ~20
 * times in 400 ms), not at their fallback poll (30 s here:
 * near_wake_by_writes_only); the batches start 50 ms apart, once the load
 * runs. */
ParameterizedTestParameters(near_batch, waiters_are_woken_by_the_write) {
  return cr_make_param_array(int, formats, 2);
}
ParameterizedTest(int *format, near_batch, waiters_are_woken_by_the_write) {
  env e;
  env_open(&e, *format);
  put(e.other, "nb:a", "a");
  put(e.other, "nb:b", "b");
  load_scripts(&e);
  long long before = sent(e.r);
  leader l = {.e = &e};
  pthread_t lt, wt[3];
  pthread_create(&lt, NULL, lead, &l);
  await_leaders(1, &lt);
  waiter w[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter){.e = &e, .start_ms = 50 * i};
    pthread_create(&wt[i], NULL, wait_in_batch, &w[i]);
  }
  int64_t lag_ms = 0;
  int waited = 0;
  /* join them all before an assertion leaves the frame they write to */
  pthread_join(lt, NULL);
  for (int i = 0; i < 3; i++)
    pthread_join(wt[i], NULL);
  cr_assert_eq(l.rc, XF_OK);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(xft_fail_count(&w[i].fail), 0, "waiter %d: %s", i,
                 xft_fail_msg(&w[i].fail));
    cr_assert_str_eq(w[i].got[0], "a");
    cr_assert_str_eq(w[i].got[1], "slow");
    cr_assert_str_eq(w[i].got[2], "b");
    if (w[i].began_ms >= l.done_ms)
      continue; /* its client opened after the write (a busy machine): no wait */
    waited++;
    if (w[i].done_ms - l.done_ms > lag_ms)
      lag_ms = w[i].done_ms - l.done_ms;
  }
  cr_assert_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 1);
  long long n = sent(e.r) - before;
  cr_log_info(
      "format %d: batch wake-on-write: %lld commands, the last waiter %lld ms after "
      "the write",
      *format, n, (long long)lag_ms);
  /* leader: read, lease, write (+ the scripts' inner commands); each waiter:
   * its first round, the re-read after the write (the lease's own
   * invalidation may wake it once), +1 */
  cr_assert_leq(n, 10 + 3 * 5, "%lld commands: the waiters polled", n);
  /* Woken: the waiters whose batch began before the write back within 15 s
   * of it (the slowest seen: 5.8 s under ASan on a busy machine); left to
   * the fallback poll, 30 s. */
  cr_assert_lt(lag_ms, NEAR_WOKEN_MS, "a waiter came back %lld ms after the write",
               (long long)lag_ms);
  env_close(&e);
}

/* One batch waiting for two keys that two other clients load (300 and
 * 400 ms): each write wakes the key's wait (the batch's wake pipe: the keys
 * are in different shards of the near cache). */
ParameterizedTestParameters(near_batch,
                            a_batch_waiting_for_two_keys_is_woken_by_each_write) {
  return cr_make_param_array(int, formats, 2);
}
ParameterizedTest(int *format, near_batch,
                  a_batch_waiting_for_two_keys_is_woken_by_each_write) {
  env e;
  env_open(&e, *format);
  xf_client *third = client_of(&e, NULL);
  load_scripts(&e);
  long long before = sent(e.r);
  leader l[2] = {{.e = &e, .key = "nb:s1", .sleep_ms = 300},
                 {.e = &e, .c = third, .key = "nb:s2", .sleep_ms = 400}};
  pthread_t lt[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&lt[i], NULL, lead, &l[i]);
  static const char *const ks[2] = {"nb:s1", "nb:s2"};
  char got[2][32];
  await_leaders(2, lt);
  near_wake_by_writes_only(e.c);
  int rc = try_batch(e.c, 2, ks, got);
  int64_t done_ms = xft_now_ms();
  for (int i = 0; i < 2; i++) /* before an assertion leaves the frame they write to */
    pthread_join(lt[i], NULL);
  cr_assert_eq(rc, XF_OK, "%s", xf_errmsg(e.c));
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(l[i].rc, XF_OK);
    cr_assert_str_eq(got[i], "slow");
  }
  cr_assert_eq(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 2);
  long long n = sent(e.r) - before;
  int64_t lag_ms = done_ms - l[1].done_ms;
  cr_log_info("format %d: a batch waiting for 2 keys: %lld commands, back %lld ms after "
              "the last write",
              *format, n, (long long)lag_ms);
  cr_assert_leq(n, 2 * 10 + 12, "%lld commands: the waits polled", n);
  /* Woken by each write: back within 15 s of the last (195 ms was the
   * slowest seen, under ASan on a busy machine); a wait left to the fallback
   * poll ends 30 s after it began. */
  cr_assert_lt(lag_ms, NEAR_WOKEN_MS, "back %lld ms after the last write",
               (long long)lag_ms);
  xf_client_close(third);
  env_close(&e);
}
