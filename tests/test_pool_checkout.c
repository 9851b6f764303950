/* The pool driver (xf_pool_*) against a real Redis, how a call gets a
 * client: every client busy (XF_EBUSY after the checkout timeout), client
 * opens failing while threads race for slots, options.interrupt ending a
 * wait (for a pooled client, or on another caller's lease). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_io.h" /* xf__test_fail_open_every */
#include "fixture.h"
#include "pool_util.h"
#include "thread_fail.h"

typedef struct blocker {
  int port;
  xft_fail fail; /* what went wrong on its thread */
} blocker;

/* Keeps the server busy for 2 s (DEBUG SLEEP; 600 ms was too short under valgrind on a busy
 * run: the holder was answered before the call timed out): a command sent meanwhile holds
 * its pooled client until then. */
static void *block_server(void *arg) {
  blocker *b = arg;
  redisContext *r = redisConnect("127.0.0.1", b->port);
  redisReply *rep = r && !r->err ? redisCommand(r, "DEBUG SLEEP 2") : NULL;
  if (!rep)
    xft_fail_record(&b->fail, "the sleeper: DEBUG SLEEP 2 on port %d failed: %s", b->port,
                    r ? r->errstr : "no connection");
  freeReplyObject(rep);
  redisFree(r);
  return NULL;
}

/* Until the server on b's port is inside its DEBUG SLEEP: a PING goes
 * unanswered for 100 ms (bounded: 5 s); sleeper: b's thread. Whether it
 * is (the caller asserts it, once its threads ended). */
static int await_asleep(blocker *b, pthread_t sleeper) {
  int port = b->port;
  int64_t until = xft_now_ms() + 5000;
  for (;;) {
    xft_assert_no_fail_join(&b->fail, sleeper); /* else the server never sleeps */
    redisContext *r = xft_redis_port(port);
    redisSetTimeout(r, (struct timeval){.tv_usec = 100000});
    redisReply *rep = redisCommand(r, "PING");
    int asleep = rep == NULL;
    freeReplyObject(rep);
    redisFree(r);
    if (asleep)
      return 1;
    if (xft_now_ms() >= until)
      return 0;
    xft_sleep_ms(1);
  }
}

/* Until no client of pool is idle (bounded: 5 s): whether none is (the
 * caller asserts it, once its threads ended). */
static int await_all_busy(xf_pool *pool) {
  int64_t until = xft_now_ms() + 5000;
  xf_pool_info info;
  for (xf_pool_stats(pool, &info); info.idle > 0; xf_pool_stats(pool, &info)) {
    if (xft_now_ms() >= until)
      return 0;
    xft_sleep_ms(1);
  }
  return 1;
}

Test(pool, a_call_that_finds_every_client_busy_gives_up_with_ebusy) {
  xft_server s;
  static const char *const conf[] = {"--enable-debug-command", "yes", NULL};
  cr_assert_eq(xft_server_start(&s, conf), 0);
  xf_pool *pool = open_pool(s.port, 1, 100);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_pool_set(pool, "pool:busy", 9, "v", 1, &p), XF_OK, "%s",
               xf_pool_errmsg());
  pthread_t sleeper;
  blocker b = {.port = s.port};
  cr_assert_eq(pthread_create(&sleeper, NULL, block_server, &b), 0);
  int asleep = await_asleep(&b, sleeper);
  if (!asleep) /* the threads end before an assertion leaves the frame they use */
    pthread_join(sleeper, NULL);
  cr_assert(asleep, "the server never slept");
  xft_loader l = {.value = "x"};
  caller holder = {.pool = pool, .key = "pool:busy", .loader = &l};
  int rc = pthread_create(&holder.th, NULL, call, &holder);
  if (rc != 0)
    pthread_join(sleeper, NULL);
  cr_assert_eq(rc, 0);
  /* holder waits for its reply, holding the only client */
  if (!await_all_busy(pool)) {
    pthread_join(holder.th, NULL);
    pthread_join(sleeper, NULL);
    cr_assert_fail("the holder never took the client");
  }
  xf_value v;
  rc = xf_pool_get_or_compute(pool, "pool:busy", 9, &p, xft_load, &l, &v);
  cr_expect_eq(rc, XF_EBUSY, "got %s", xf_errname(rc));
  xf_value_free(&v); /* a value only if it failed */
  cr_expect(strstr(xf_pool_errmsg(), "max_connections 1") != NULL, "%s", xf_pool_errmsg());
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 0, "the loader is not called");
  /* Arguments that are wrong whatever the client are refused at once, not
   * after waiting for one (the server sleeps on, well over a second). */
  cr_expect_eq(xf_pool_get_or_compute(pool, NULL, 1, &p, xft_load, &l, &v), XF_EINVAL);
  cr_expect(strstr(xf_pool_errmsg(), "key") != NULL, "%s", xf_pool_errmsg());
  cr_expect_eq(xf_pool_get_or_compute(pool, "k", 0, &p, xft_load, &l, &v), XF_EINVAL);
  cr_expect_eq(xf_pool_get_or_compute(pool, "k", 1, NULL, xft_load, &l, &v), XF_EINVAL);
  cr_expect(strstr(xf_pool_errmsg(), "policy") != NULL, "%s", xf_pool_errmsg());
  cr_expect_eq(xf_pool_set(pool, NULL, 1, "v", 1, &p), XF_EINVAL);
  cr_expect_eq(xf_pool_set(pool, "k", 1, NULL, 1, &p), XF_EINVAL);
  cr_expect_eq(xf_pool_set(pool, "k", 1, "v", 1, NULL), XF_EINVAL);
  cr_expect_eq(xf_pool_delete(pool, "", 0), XF_EINVAL);
  pthread_join(holder.th, NULL);
  pthread_join(sleeper, NULL);
  xft_assert_no_fail(&b.fail);
  cr_expect_eq(holder.rc, XF_OK);
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  cr_expect_eq(info.timed_out, 1);
  xf_pool_close(pool);
  xft_server_stop(&s);
}

#define OPENFAIL_THREADS 25
#define OPENFAIL_CALLS 50

typedef struct hammer {
  pthread_t th;
  xf_pool *pool;
  xft_loader *loader;
  int id, ok, enomem, ebusy, other, wrong;
} hammer;

/* Calls on five keys; every outcome counted, none may be another code. */
static void *hammer_calls(void *arg) {
  hammer *h = arg;
  xf_policy p = XF_POLICY_INIT;
  for (int i = 0; i < OPENFAIL_CALLS; i++) {
    char key[32];
    snprintf(key, sizeof key, "pool:openfail:%d", (h->id + i) % 5);
    xf_value v;
    int rc = xf_pool_get_or_compute(h->pool, key, strlen(key), &p, xft_load, h->loader, &v);
    h->ok += rc == XF_OK;
    h->enomem += rc == XF_ENOMEM;
    h->ebusy += rc == XF_EBUSY;
    h->other += rc != XF_OK && rc != XF_ENOMEM && rc != XF_EBUSY;
    h->wrong += rc == XF_OK && (v.len != 6 || memcmp(v.data, "loaded", 6) != 0);
    xf_value_free(&v);
  }
  return NULL;
}

/* Every other client open fails (out of memory) while threads race to open
 * them: a failed open must give back its reserved slot without disturbing
 * the slots other threads are filling meanwhile, and the call that asked for
 * it gets the real error. */
Test(pool, a_failed_client_open_leaves_the_pool_as_it_was) {
  xft_server s; /* its own: the connection count is this test's alone */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_pool *pool = open_pool(s.port, 32, 0);
  xft_loader l = {.value = "loaded"};
  hammer hs[OPENFAIL_THREADS];
  __atomic_store_n(&xf__test_fail_open_every, 2, __ATOMIC_SEQ_CST);
  int started = 0, rc = 0;
  for (; started < OPENFAIL_THREADS; started++) {
    hs[started] = (hammer){.pool = pool, .loader = &l, .id = started};
    if ((rc = pthread_create(&hs[started].th, NULL, hammer_calls, &hs[started])) != 0)
      break;
  }
  int ok = 0, enomem = 0, ebusy = 0, other = 0, wrong = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(hs[i].th, NULL);
    ok += hs[i].ok, enomem += hs[i].enomem, ebusy += hs[i].ebusy;
    other += hs[i].other, wrong += hs[i].wrong;
  }
  __atomic_store_n(&xf__test_fail_open_every, 0, __ATOMIC_SEQ_CST);
  cr_assert_eq(rc, 0);
  unsigned failed = __atomic_load_n(&xf__test_failed_opens, __ATOMIC_SEQ_CST);
  cr_expect_gt(failed, 0, "no open failed: the test tested nothing");
  cr_expect_eq(other, 0, "calls end XF_OK, XF_ENOMEM or XF_EBUSY");
  cr_expect_eq(wrong, 0);
  cr_expect_eq(enomem, (int)failed, "each failed open fails its call with XF_ENOMEM");
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  cr_log_info("%d ok, %d XF_ENOMEM (%u failed opens), %d XF_EBUSY; %llu open, %llu idle, "
              "%llu loads, %llu hits",
              ok, enomem, failed, ebusy, (unsigned long long)info.open,
              (unsigned long long)info.idle, (unsigned long long)info.clients.loads,
              (unsigned long long)info.clients.hits);
  cr_expect_eq(ebusy, (int)info.timed_out);
  cr_expect_leq(info.open, 32);
  cr_expect_eq(info.idle, info.open, "every client was checked in");
  /* Every counter is a sum of real calls' counts (no unsigned underflow). */
  cr_expect_leq(info.clients.loads, (uint64_t)ok, "loads %llu for %d calls",
                (unsigned long long)info.clients.loads, ok);
  cr_expect_geq(info.clients.loads, (uint64_t)__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST));
  cr_expect_leq(info.clients.hits, (uint64_t)ok, "hits %llu for %d calls",
                (unsigned long long)info.clients.hits, ok);
  /* The pool still works: as many threads as clients, none failing. */
  caller cs[32];
  for (int i = 0; i < 32; i++)
    cs[i] = (caller){.pool = pool, .key = "pool:openfail:after", .loader = &l};
  run_callers(cs, 32);
  for (int i = 0; i < 32; i++)
    cr_expect_eq(cs[i].rc, XF_OK, "thread %d: %s", i, xf_strerror(cs[i].rc));
  xf_pool_stats(pool, &info);
  cr_expect_leq(info.open, 32);
  cr_expect_eq(info.idle, info.open);
  redisContext *r = xft_redis_port(s.port);
  redisReply *clients = xft_cmd(r, "INFO clients");
  const char *at = strstr(clients->str, "connected_clients:");
  long long connected = at ? atoll(at + strlen("connected_clients:")) : -1;
  freeReplyObject(clients);
  cr_expect_leq(connected, (long long)info.open + 1, "%lld connections for %llu clients",
                connected, (unsigned long long)info.open);
  redisFree(r);
  xf_pool_close(pool);
  xft_server_stop(&s);
}

/* ---- options.interrupt in the pool's own waits -------------------------------- */

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Fires in the test's own thread once the clock passes *at (0 = never). */
typedef struct main_alarm {
  pthread_t main;
  long long at;
} main_alarm;

static int ring_in_main(void *ud) {
  main_alarm *a = ud;
  return pthread_equal(pthread_self(), a->main) && a->at && mono_ms() >= a->at;
}

static xf_pool *open_interruptible(int port, size_t max, int timeout_ms, main_alarm *a) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.command_timeout_ms = 3000;
  o.interrupt = ring_in_main;
  o.interrupt_ud = a;
  xf_pool *p = NULL;
  cr_assert_eq(xf_pool_open(&p, &o, max, timeout_ms), XF_OK);
  return p;
}

/* A pooled call waiting on another caller's lease asks the interrupt while it
 * sleeps and ends with XF_ECANCELED at once, without loading; the other's
 * lease stays. (Before: it slept its whole wait_ms, then loaded.) It ends
 * within half its 5 s wait, the alarm ringing after 100 ms. */
Test(pool, interrupt_ends_a_wait_on_another_callers_lease) {
  redisContext *r = xft_redis();
  char lease[64];
  snprintf(lease, sizeof lease, "other-1:%lld", xft_server_ms(r) + 60000);
  freeReplyObject(xft_cmd(r, "HSET pool:intr l %s", lease));
  freeReplyObject(xft_cmd(r, "PEXPIRE pool:intr 60000"));
  main_alarm a = {.main = pthread_self()};
  xf_pool *pool = open_interruptible(xft_port(), 2, 0, &a);
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 5000;
  xft_loader l = {.value = "v"};
  xf_value v;
  long long t0 = mono_ms();
  a.at = t0 + 100;
  int rc = xf_pool_get_or_compute(pool, "pool:intr", 9, &p, xft_load, &l, &v);
  long long took = mono_ms() - t0;
  cr_expect_eq(rc, XF_ECANCELED, "%s: %s", xf_errname(rc), xf_pool_errmsg());
  cr_expect_lt(took, 2500, "took %lld ms", took);
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_value_free(&v);
  redisReply *still = xft_cmd(r, "HGET pool:intr l");
  cr_expect_str_eq(still->str ? still->str : "(nil)", lease,
                   "not this caller's: untouched");
  freeReplyObject(still);
  redisFree(r);
  xf_pool_close(pool);
}

/* A call waiting for a pooled client (the only one is held by a call whose
 * server stopped answering) asks the interrupt between slices and ends with
 * XF_ECANCELED; the holder, not interrupted, gets its reply once the server
 * is back. (Before: it waited the whole checkout timeout: XF_EBUSY.) The
 * call starts once the holder holds the client (not after a fixed 100 ms: a
 * holder started later took the client after it, and the test saw a reply
 * wait interrupted instead), and ends within half its 5 s checkout timeout,
 * the alarm ringing after 100 ms. */
Test(pool, interrupt_ends_a_wait_for_a_pooled_client) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  main_alarm a = {.main = pthread_self()};
  xf_pool *pool = open_interruptible(s.port, 1, 5000, &a);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_pool_set(pool, "pool:held", 9, "v", 1, &p), XF_OK, "%s",
               xf_pool_errmsg());
  kill(s.pid, SIGSTOP);
  xft_loader l = {.value = "x"};
  caller holder = {.pool = pool, .key = "pool:held", .loader = &l};
  cr_assert_eq(pthread_create(&holder.th, NULL, call, &holder), 0);
  /* holder waits for its reply, holding the only client */
  if (!await_all_busy(pool)) { /* it ends once the server answers */
    kill(s.pid, SIGCONT);
    pthread_join(holder.th, NULL);
    cr_assert_fail("the holder never took the client");
  }
  xf_value v;
  long long t0 = mono_ms();
  a.at = t0 + 100;
  int rc = xf_pool_get_or_compute(pool, "pool:held", 9, &p, xft_load, &l, &v);
  long long took = mono_ms() - t0;
  kill(s.pid, SIGCONT);
  cr_expect_eq(rc, XF_ECANCELED, "%s: %s", xf_errname(rc), xf_pool_errmsg());
  cr_expect_lt(took, 2500, "took %lld ms", took);
  pthread_join(holder.th, NULL);
  cr_expect_eq(holder.rc, XF_OK);
  cr_expect_str_eq(holder.value, "v");
  cr_expect_eq(holder.source, XF_SOURCE_CACHE);
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 0);
  xf_pool_close(pool);
  xft_server_stop(&s);
}

typedef struct elected_call {
  pthread_t th;
  xf_pool *pool;
  xft_loader *loader;
  int rc;
  xf_source source;
} elected_call;

static void *call_elected(void *arg) {
  elected_call *e = arg;
  xf_policy p = XF_POLICY_INIT;
  p.beta = __builtin_inf();                 /* every draw elects an early refresh */
  p.refresh_ahead = -1;                     /* XFetch: beta decides */
  p.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  xf_value v;
  e->rc = xf_pool_get_or_compute(e->pool, "hot", 3, &p, xft_load, e->loader, &v);
  e->source = v.source;
  xf_value_free(&v);
  return NULL;
}

/* A near hit needs no client: with the only pooled client held by a call
 * whose lease script CLIENT PAUSE WRITE holds (until the test unpauses, at
 * most 10 s), a near hit is served at once; the holder still waits then. */
Test(pool, a_near_hit_waits_for_no_client) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.share = share;
  o.command_timeout_ms = 20000; /* the holder's lease waits out the pause */
  xf_pool *pool;
  cr_assert_eq(xf_pool_open(&pool, &o, 1, 10000), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;                               /* never elected: a hit */
  p.refresh_ahead = -1;                     /* XFetch: beta decides */
  p.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  cr_assert_eq(xf_pool_set(pool, "hot", 3, "v", 1, &p), XF_OK, "%s", xf_pool_errmsg());
  xft_loader never = {.value = "loaded", .len = 6};
  xf_pool_info info;
  int64_t until = xft_now_ms() + 5000;
  for (xf_pool_stats(pool, &info); info.clients.near_hits == 0;
       xf_pool_stats(pool, &info)) {
    xf_value v; /* the first reads fill the near cache */
    cr_assert_eq(xf_pool_get_or_compute(pool, "hot", 3, &p, xft_load, &never, &v), XF_OK);
    xf_value_free(&v);
    cr_assert_lt(xft_now_ms(), until, "never a near hit");
  }
  redisContext *raw = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(raw, "CLIENT PAUSE 10000 WRITE"));
  xft_loader slow = {.value = "slow", .len = 4};
  caller holder = {.pool = pool, .key = "slow", .loader = &slow};
  cr_assert_eq(pthread_create(&holder.th, NULL, call, &holder), 0);
  if (!await_all_busy(pool)) { /* the holder ends once the pause does */
    freeReplyObject(xft_cmd(raw, "CLIENT UNPAUSE"));
    pthread_join(holder.th, NULL);
    cr_assert_fail("the holder never took the client");
  }
  xf_value v;
  int rc = xf_pool_get_or_compute(pool, "hot", 3, &p, xft_load, &never, &v);
  int held = pthread_tryjoin_np(holder.th, NULL) == EBUSY;
  /* A near hit whose draw elects a refresh (beta inf) passes the election to
   * its call, which waits for the client: it refreshes once the holder is
   * done (whether its near hit was drawn on a spare or, late, on the client). */
  xft_loader fresh = {.value = "fresh", .len = 5};
  elected_call refresher = {.pool = pool, .loader = &fresh};
  int refresher_rc = pthread_create(&refresher.th, NULL, call_elected, &refresher);
  if (refresher_rc == 0)
    xft_sleep_ms(50);
  freeReplyObject(xft_cmd(raw, "CLIENT UNPAUSE"));
  if (held)
    pthread_join(holder.th, NULL);
  if (refresher_rc == 0)
    pthread_join(refresher.th, NULL);
  cr_assert_eq(refresher_rc, 0);
  cr_assert_eq(rc, XF_OK, "%s", xf_pool_errmsg());
  cr_assert_str_eq(v.data, "v");
  cr_assert_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  cr_assert(held, "the near hit waited for the pooled client");
  cr_assert_eq(holder.rc, XF_OK);
  cr_assert_eq(__atomic_load_n(&never.calls, __ATOMIC_RELAXED), 0);
  cr_assert_eq(refresher.rc, XF_OK);
  cr_assert_eq(refresher.source, XF_SOURCE_LOADER, "the elected call refreshed");
  xf_pool_close(pool);
  xf_share_close(share);
  redisFree(raw);
  xft_server_stop(&s);
}
