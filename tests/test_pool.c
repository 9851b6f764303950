/* The pool driver (xf_pool_*) against a real Redis: many threads, few
 * clients, one loader per key, nested calls, the checkout timeout. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client_io.h" /* xf__test_fail_open_every */
#include "fixture.h"

static xf_pool *open_pool(int port, size_t max, int timeout_ms) {
  xf_options o = XF_OPTIONS_INIT;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  o.host = host; /* copied by the pool: this buffer may go */
  xf_pool *p = NULL;
  cr_assert_eq(xf_pool_open(&p, &o, max, timeout_ms), XF_OK);
  return p;
}

typedef struct caller {
  pthread_t th;
  xf_pool *pool;
  const char *key;
  xft_loader *loader;
  int rc;
  char value[64];
  xf_source source;
} caller;

static void *call(void *arg) {
  caller *c = arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  c->rc =
      xf_pool_get_or_compute(c->pool, c->key, strlen(c->key), &p, xft_load, c->loader, &v);
  if (c->rc == XF_OK)
    snprintf(c->value, sizeof c->value, "%s", v.data);
  c->source = v.source;
  xf_value_free(&v);
  return NULL;
}

static void run_callers(caller *cs, int n) {
  for (int i = 0; i < n; i++)
    cr_assert_eq(pthread_create(&cs[i].th, NULL, call, &cs[i]), 0);
  for (int i = 0; i < n; i++)
    pthread_join(cs[i].th, NULL);
}

Test(pool, sixteen_threads_on_a_cold_key_share_four_clients_and_one_load_per_episode) {
  xft_server s; /* its own: the client count is this test's alone */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_pool *pool = open_pool(s.port, 4, 0);
  xft_loader l = {.value = "computed", .sleep_ms = 100};
  /* Three episodes: the key is deleted through the pool between them. */
  for (int episode = 1; episode <= 3; episode++) {
    caller cs[16];
    for (int i = 0; i < 16; i++)
      cs[i] = (caller){.pool = pool, .key = "pool:hot", .loader = &l};
    run_callers(cs, 16);
    int from_loader = 0;
    for (int i = 0; i < 16; i++) {
      cr_expect_eq(cs[i].rc, XF_OK, "thread %d: %s", i, xf_strerror(cs[i].rc));
      cr_expect_str_eq(cs[i].value, "computed");
      from_loader += cs[i].source == XF_SOURCE_LOADER;
    }
    cr_expect_eq(from_loader, 1, "episode %d", episode);
    cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), episode, "episode %d",
                 episode);
    cr_assert_eq(xf_pool_delete(pool, "pool:hot", 8), XF_OK, "%s", xf_pool_errmsg());
  }
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  cr_expect_leq(info.open, 4);
  cr_expect_eq(info.clients.loads, 3);
  cr_expect_eq(info.clients.hits + info.clients.misses + info.clients.waits >= 48, 1);
  redisContext *r = xft_redis_port(s.port);
  /* Redis saw at most 4 xfetch connections (plus this raw one). */
  redisReply *clients = xft_cmd(r, "INFO clients");
  const char *at = strstr(clients->str, "connected_clients:");
  long long connected = at ? atoll(at + strlen("connected_clients:")) : -1;
  freeReplyObject(clients);
  cr_expect_leq(connected, 4 + 1, "%lld connections", connected);
  redisFree(r);
  xf_pool_close(pool);
  xft_server_stop(&s);
}

typedef struct nested {
  xf_pool *pool;
  int outer_calls, inner_rc;
} nested;

/* A loader that asks the pool for another key before answering. */
static int nested_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  nested *n = ud;
  n->outer_calls++;
  xft_loader inner = {.value = "inner"};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  n->inner_rc =
      xf_pool_get_or_compute(n->pool, "pool:nested:inner", 17, &p, xft_load, &inner, &v);
  int rc = n->inner_rc == XF_OK ? xf_sink_set(sink, v.data, v.len) : -1;
  xf_value_free(&v);
  return rc;
}

Test(pool, a_loader_may_call_the_pool_even_with_one_client) {
  xf_pool *pool = open_pool(xft_port(), 1, 200);
  nested n = {.pool = pool};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_assert_eq(
      xf_pool_get_or_compute(pool, "pool:nested:outer", 17, &p, nested_loader, &n, &v),
      XF_OK, "%s", xf_pool_errmsg());
  cr_expect_eq(n.inner_rc, XF_OK);
  cr_expect_str_eq(v.data, "inner");
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  cr_expect_eq(info.open, 1);
  cr_expect_eq(info.timed_out, 0);
  xf_pool_close(pool);
}

/* A loader whose nested call fails (its own loader does) and that answers
 * anyway: the outer call succeeds. */
static int forgiving_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  nested *n = ud;
  n->outer_calls++;
  xft_loader failing = {.fail_rc = 7};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  n->inner_rc =
      xf_pool_get_or_compute(n->pool, "pool:forgive:inner", 18, &p, xft_load, &failing, &v);
  xf_value_free(&v);
  return xf_sink_set(sink, "fallback", 8);
}

Test(pool, a_success_leaves_no_message_from_a_failed_nested_call) {
  xf_pool *pool = open_pool(xft_port(), 1, 200);
  nested n = {.pool = pool};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_assert_eq(
      xf_pool_get_or_compute(pool, "pool:forgive:outer", 18, &p, forgiving_loader, &n, &v),
      XF_OK, "%s", xf_pool_errmsg());
  cr_expect_eq(n.inner_rc, XF_ELOADER);
  cr_expect_str_eq(v.data, "fallback");
  cr_expect_str_eq(xf_pool_errmsg(), "", "after a success: \"%s\"", xf_pool_errmsg());
  xf_value_free(&v);
  cr_expect_eq(xf_pool_delete(pool, "pool:forgive:missing", 20), XF_OK);
  cr_expect_str_eq(xf_pool_errmsg(), "");
  xf_pool_close(pool);
}

typedef struct blocker {
  int port;
} blocker;

/* Keeps the server busy for 600 ms (DEBUG SLEEP): a command sent meanwhile
 * holds its pooled client until then. */
static void *block_server(void *arg) {
  redisContext *r = xft_redis_port(((blocker *)arg)->port);
  freeReplyObject(xft_cmd(r, "DEBUG SLEEP 0.6"));
  redisFree(r);
  return NULL;
}

/* Until the server on port is inside its DEBUG SLEEP: a PING goes
 * unanswered for 100 ms (bounded: 5 s). */
static void await_asleep(int port) {
  int64_t until = xft_now_ms() + 5000;
  for (;;) {
    redisContext *r = xft_redis_port(port);
    redisSetTimeout(r, (struct timeval){.tv_usec = 100000});
    redisReply *rep = redisCommand(r, "PING");
    int asleep = rep == NULL;
    freeReplyObject(rep);
    redisFree(r);
    if (asleep)
      return;
    cr_assert_lt(xft_now_ms(), until, "the server never slept");
    xft_sleep_ms(1);
  }
}

/* Until no client of pool is idle (bounded: 5 s). */
static void await_all_busy(xf_pool *pool) {
  int64_t until = xft_now_ms() + 5000;
  xf_pool_info info;
  for (xf_pool_stats(pool, &info); info.idle > 0; xf_pool_stats(pool, &info)) {
    cr_assert_lt(xft_now_ms(), until, "the holder never took the client");
    xft_sleep_ms(1);
  }
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
  blocker b = {s.port};
  cr_assert_eq(pthread_create(&sleeper, NULL, block_server, &b), 0);
  await_asleep(s.port);
  xft_loader l = {.value = "x"};
  caller holder = {.pool = pool, .key = "pool:busy", .loader = &l};
  cr_assert_eq(pthread_create(&holder.th, NULL, call, &holder), 0);
  await_all_busy(pool); /* holder waits for its reply, holding the only client */
  xf_value v;
  int rc = xf_pool_get_or_compute(pool, "pool:busy", 9, &p, xft_load, &l, &v);
  cr_expect_eq(rc, XF_EBUSY, "got %s", xf_errname(rc));
  cr_expect(strstr(xf_pool_errmsg(), "max_connections 1") != NULL, "%s", xf_pool_errmsg());
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 0, "the loader is not called");
  /* Arguments that are wrong whatever the client are refused at once, not
   * after waiting for one (the server sleeps ~400 ms more). */
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
  cr_expect_eq(holder.rc, XF_OK);
  xf_pool_info info;
  xf_pool_stats(pool, &info);
  cr_expect_eq(info.timed_out, 1);
  xf_pool_close(pool);
  xft_server_stop(&s);
}

Test(pool, redis_down_fails_open_with_one_load_across_threads) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  int port = s.port;
  xft_server_stop(&s);
  xf_pool *pool = open_pool(port, 2, 0);
  xft_loader l = {.value = "direct", .sleep_ms = 100};
  caller cs[8];
  for (int i = 0; i < 8; i++)
    cs[i] = (caller){.pool = pool, .key = "pool:down", .loader = &l};
  run_callers(cs, 8);
  for (int i = 0; i < 8; i++) {
    cr_expect_eq(cs[i].rc, XF_OK, "thread %d: %s", i, xf_strerror(cs[i].rc));
    cr_expect_str_eq(cs[i].value, "direct");
  }
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 1, "the pool's share");
  xf_pool_close(pool);
}

Test(pool, bad_arguments_are_refused) {
  xf_pool *pool = NULL;
  cr_expect_eq(xf_pool_open(NULL, NULL, 1, 0), XF_EINVAL);
  cr_expect_eq(xf_pool_open(&pool, NULL, 0, 0), XF_EINVAL);
  cr_expect_eq(xf_pool_open(&pool, NULL, 1, -1), XF_EINVAL);
  xf_options bad = XF_OPTIONS_INIT;
  bad.port = 70000;
  cr_expect_eq(xf_pool_open(&pool, &bad, 1, 0), XF_EINVAL);
  cr_expect_null(pool);
  pool = open_pool(xft_port(), 1, 0);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xft_loader l = {.value = "x"};
  cr_expect_eq(xf_pool_get_or_compute(NULL, "k", 1, &p, xft_load, &l, &v), XF_EINVAL);
  cr_expect_eq(xf_pool_get_or_compute(pool, "k", 1, &p, NULL, &l, &v), XF_EINVAL);
  cr_expect_eq(xf_pool_get_or_compute(pool, "k", 1, &p, xft_load, &l, NULL), XF_EINVAL);
  cr_expect_eq(xf_pool_get_or_compute(pool, "", 0, &p, xft_load, &l, &v), XF_EINVAL);
  cr_expect_eq(xf_pool_set(NULL, "k", 1, "v", 1, &p), XF_EINVAL);
  cr_expect_eq(xf_pool_delete(pool, NULL, 1), XF_EINVAL);
  cr_expect_eq(l.calls, 0);
  xf_pool_info info;
  xf_pool_stats(NULL, &info);
  cr_expect_eq(info.open, 0);
  xf_pool_stats(pool, NULL);
  xf_pool_close(pool);
  xf_pool_close(NULL);
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
  for (int i = 0; i < OPENFAIL_THREADS; i++) {
    hs[i] = (hammer){.pool = pool, .loader = &l, .id = i};
    cr_assert_eq(pthread_create(&hs[i].th, NULL, hammer_calls, &hs[i]), 0);
  }
  int ok = 0, enomem = 0, ebusy = 0, other = 0, wrong = 0;
  for (int i = 0; i < OPENFAIL_THREADS; i++) {
    pthread_join(hs[i].th, NULL);
    ok += hs[i].ok, enomem += hs[i].enomem, ebusy += hs[i].ebusy;
    other += hs[i].other, wrong += hs[i].wrong;
  }
  __atomic_store_n(&xf__test_fail_open_every, 0, __ATOMIC_SEQ_CST);
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

/* A loopback port nothing listens on: bound, read, closed. */
static int dead_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* Pooled clients connect lazily: with cluster OFF nothing walked the seed
 * list, so a dead first seed failed every call open. */
Test(pool, a_dead_first_seed_is_skipped_with_cluster_off) {
  char hosts[64];
  snprintf(hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", dead_port(), xft_port());
  xf_options o = XF_OPTIONS_INIT;
  o.host = hosts;
  o.cluster = XF_CLUSTER_OFF;
  xf_pool *pool = NULL;
  cr_assert_eq(xf_pool_open(&pool, &o, 2, 0), XF_OK);
  xft_loader l = {.value = "seeded"};
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0; /* no early refresh: sources are exact */
  int by_source[5] = {0};
  for (int i = 0; i < 10; i++) {
    xf_value v;
    cr_assert_eq(xf_pool_get_or_compute(pool, "pool:seeds:off", 14, &p, xft_load, &l, &v),
                 XF_OK, "%s", xf_pool_errmsg());
    by_source[v.source]++;
    xf_value_free(&v);
  }
  cr_expect_eq(by_source[XF_SOURCE_LOADER], 1, "%d uncached",
               by_source[XF_SOURCE_UNCACHED]);
  cr_expect_eq(by_source[XF_SOURCE_CACHE], 9);
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 1);
  xf_pool_close(pool);
}

static void pool_calls(xf_pool *pool, const char *key, xft_loader *l, int n,
                       int *by_source) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  for (int i = 0; i < n; i++) {
    xf_value v;
    cr_assert_eq(xf_pool_get_or_compute(pool, key, strlen(key), &p, xft_load, l, &v), XF_OK,
                 "%s", xf_pool_errmsg());
    by_source[v.source]++;
    xf_value_free(&v);
  }
}

/* The seed in use goes away: the next call moves on to the next seed. */
Test(pool, calls_move_to_the_next_seed_when_theirs_goes_away) {
  xft_server first;
  cr_assert_eq(xft_server_start(&first, NULL), 0);
  char hosts[64];
  snprintf(hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", first.port, xft_port());
  xf_options o = XF_OPTIONS_INIT;
  o.host = hosts;
  o.cluster = XF_CLUSTER_OFF;
  xf_pool *pool = NULL;
  cr_assert_eq(xf_pool_open(&pool, &o, 1, 0), XF_OK);
  xft_loader l = {.value = "either-seed"};
  int by_source[5] = {0};
  pool_calls(pool, "pool:seeds:moved", &l, 3, by_source);
  cr_expect_eq(by_source[XF_SOURCE_LOADER], 1);
  xft_server_stop(&first);
  pool_calls(pool, "pool:seeds:moved", &l, 3, by_source);
  cr_expect_eq(by_source[XF_SOURCE_LOADER], 2, "the second seed's first call loads");
  cr_expect_eq(by_source[XF_SOURCE_CACHE], 4, "%d uncached, %d local",
               by_source[XF_SOURCE_UNCACHED], by_source[XF_SOURCE_LOCAL]);
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 2);
  xf_pool_close(pool);
}

/* ---- a loader asking the pool for its own key ----------------------------------- */

typedef struct selfish {
  xf_pool *pool;
  int calls, inner_rc;
  char msg[256];
} selfish;

/* Asks for its own key once (the second load, if any, just answers). */
static int self_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  selfish *s = ud;
  if (__atomic_add_fetch(&s->calls, 1, __ATOMIC_SEQ_CST) == 1) {
    xf_policy p = XF_POLICY_INIT;
    p.wait_ms = 300; /* what the nested call would stall for without the check */
    xf_value v;
    s->inner_rc = xf_pool_get_or_compute(s->pool, key, keylen, &p, self_loader, s, &v);
    snprintf(s->msg, sizeof s->msg, "%s", xf_pool_errmsg());
    xf_value_free(&v);
  }
  return xf_sink_set(sink, "outer", 5);
}

static void expect_own_key_refused(int port, xf_source source) {
  xf_pool *pool = open_pool(port, 1, 200);
  selfish s = {.pool = pool};
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 300;
  xf_value v;
  cr_assert_eq(xf_pool_get_or_compute(pool, "pool:self", 9, &p, self_loader, &s, &v), XF_OK,
               "%s", xf_pool_errmsg());
  cr_expect_eq(s.inner_rc, XF_EINVAL, "the nested call returned %s",
               xf_errname(s.inner_rc));
  cr_expect(strstr(s.msg, "pool:self asked for pool:self itself") != NULL, "message: %s",
            s.msg);
  cr_expect_eq(s.calls, 1, "the loader ran %d times", s.calls);
  cr_expect_str_eq(v.data, "outer");
  cr_expect_eq(v.source, source);
  xf_value_free(&v);
  xf_pool_close(pool);
}

Test(pool, a_loader_asking_for_its_own_key_fails_at_once) {
  expect_own_key_refused(xft_port(), XF_SOURCE_LOADER);
}

Test(pool, a_loader_asking_for_its_own_key_fails_at_once_with_redis_down) {
  expect_own_key_refused(1, XF_SOURCE_UNCACHED); /* the pool's own share */
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
 * lease stays. (Before: it slept its whole wait_ms, then loaded.) */
Test(pool, interrupt_ends_a_wait_on_another_callers_lease) {
  redisContext *r = xft_redis();
  char lease[64];
  snprintf(lease, sizeof lease, "other-1:%lld", xft_server_ms(r) + 60000);
  freeReplyObject(xft_cmd(r, "HSET pool:intr l %s", lease));
  freeReplyObject(xft_cmd(r, "PEXPIRE pool:intr 60000"));
  main_alarm a = {.main = pthread_self()};
  xf_pool *pool = open_interruptible(xft_port(), 2, 0, &a);
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 1500;
  xft_loader l = {.value = "v"};
  xf_value v;
  long long t0 = mono_ms();
  a.at = t0 + 100;
  int rc = xf_pool_get_or_compute(pool, "pool:intr", 9, &p, xft_load, &l, &v);
  long long took = mono_ms() - t0;
  cr_expect_eq(rc, XF_ECANCELED, "%s: %s", xf_errname(rc), xf_pool_errmsg());
  cr_expect_lt(took, 1000, "took %lld ms", took);
  cr_expect_eq(l.calls, 0);
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
 * is back. (Before: it waited the whole checkout timeout: XF_EBUSY.) */
Test(pool, interrupt_ends_a_wait_for_a_pooled_client) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  main_alarm a = {.main = pthread_self()};
  xf_pool *pool = open_interruptible(s.port, 1, 1500, &a);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_pool_set(pool, "pool:held", 9, "v", 1, &p), XF_OK, "%s",
               xf_pool_errmsg());
  kill(s.pid, SIGSTOP);
  xft_loader l = {.value = "x"};
  caller holder = {.pool = pool, .key = "pool:held", .loader = &l};
  cr_assert_eq(pthread_create(&holder.th, NULL, call, &holder), 0);
  xft_sleep_ms(100); /* holder waits for its reply, holding the only client */
  xf_value v;
  long long t0 = mono_ms();
  a.at = t0 + 100;
  int rc = xf_pool_get_or_compute(pool, "pool:held", 9, &p, xft_load, &l, &v);
  long long took = mono_ms() - t0;
  kill(s.pid, SIGCONT);
  cr_expect_eq(rc, XF_ECANCELED, "%s: %s", xf_errname(rc), xf_pool_errmsg());
  cr_expect_lt(took, 1000, "took %lld ms", took);
  pthread_join(holder.th, NULL);
  cr_expect_eq(holder.rc, XF_OK);
  cr_expect_str_eq(holder.value, "v");
  cr_expect_eq(holder.source, XF_SOURCE_CACHE);
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_SEQ_CST), 0);
  xf_pool_close(pool);
  xft_server_stop(&s);
}
