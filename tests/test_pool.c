/* The pool driver (xf_pool_*) against a real Redis, what its calls share:
 * many threads, few clients, one loader per key, nested calls, a loader
 * asking for its own key, Redis down, the seed list, bad arguments. How a
 * call gets a client (all busy, a failed open, an interrupted wait):
 * test_pool_checkout.c. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fixture.h"
#include "pool_util.h"

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
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_pool_info info;
  xf_pool_stats(NULL, &info);
  cr_expect_eq(info.open, 0);
  xf_pool_stats(pool, NULL);
  xf_pool_close(pool);
  xf_pool_close(NULL);
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
