/* A blocking client's background refreshes write through the share's idle
 * refresh clients (refresh_clients.c): N refreshes of a hot key open at
 * most XF_REFRESH_THREADS connections (before: one per refresh), the
 * clients are closed with the share, and a refresh's counters (its loader's
 * failure) land in xf_share_refresh_stats (its load counted on the caller). On a server of
 * the test's own, so that every connection it counts is this test's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"

#define WORKERS 2 /* XF_REFRESH_THREADS (src/drivers/refresh.h) */

static int fail_at, runs;

static int load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  int n = __atomic_add_fetch(&runs, 1, __ATOMIC_SEQ_CST);
  xft_sleep_ms(2); /* a delta the rate-aware rule can work with */
  char v[16];
  snprintf(v, sizeof v, "v%d", n);
  return n == fail_at ? 9 : (xf_sink_set(sink, v, strlen(v)) == XF_OK ? 0 : -1);
}

static xf_refresh_info info_when(xf_share *s, uint64_t done) {
  xf_refresh_info i;
  for (int n = 0; n < 1000; n++) {
    xf_share_refresh_stats(s, &i);
    if (i.done + i.abandoned >= done)
      break;
    xft_sleep_ms(10);
  }
  return i;
}

/* n due hits of one key on a blocking client of s, each waited for until
 * its refresh is done. */
static xf_refresh_info refresh_n(xf_share *s, int port, int n, const char *key) {
  xf_options o = XF_OPTIONS_INIT;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  o.host = host;
  o.share = s;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.background_refresh = 1;
  p.refresh_ahead = 1e9; /* every hit with a delta is due */
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, load, NULL, &v), XF_OK);
  cr_assert_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  xf_refresh_info i = {0};
  for (int k = 1; k <= n; k++) {
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, load, NULL, &v), XF_OK);
    cr_assert_eq(v.source, XF_SOURCE_CACHE, "the winner returns at once");
    xf_value_free(&v);
    i = info_when(s, (uint64_t)k);
    cr_assert_eq(i.done, (uint64_t)k);
  }
  xf_client_close(c);
  return i;
}

Test(refresh_clients, n_refreshes_open_at_most_one_connection_per_worker) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *r = xft_redis_port(srv.port);
  long long before = xft_info_int(r, "total_connections_received");
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_refresh_info i = refresh_n(s, srv.port, 20, "refresh_clients:hot");
  long long made = xft_info_int(r, "total_connections_received") - before;
  /* the caller's one, and at most one per worker for 20 refreshes */
  cr_expect_leq(made, 1 + WORKERS, "%lld connections", made);
  cr_expect_geq(i.clients.connections, 1, "an idle refresh client stays connected");
  long long clients = xft_info_int(r, "connected_clients");
  xf_share_close(s); /* closes the idle refresh clients */
  for (int n = 0; n < 100 && xft_info_int(r, "connected_clients") >= clients; n++)
    xft_sleep_ms(10);
  cr_expect_eq(xft_info_int(r, "connected_clients"), 1, "only the probe's left");
  redisFree(r);
  xft_server_stop(&srv);
}

Test(refresh_clients, a_failed_refresh_counts_in_the_shares_load_errors) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  fail_at = 3; /* the second refresh */
  xf_refresh_info i = refresh_n(s, xft_port(), 3, "refresh_clients:fails");
  cr_expect_eq(i.failed, 1);
  cr_expect_eq(i.clients.load_errors, 1);
  cr_expect_eq(i.clients.superseded, 0);
  xf_share_close(s);
}

Test(refresh_clients, a_batchs_early_refreshes_run_on_the_workers) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", xft_port());
  o.host = host;
  o.share = s;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.background_refresh = 1;
  p.refresh_ahead = 1e9; /* every hit with a delta is due */
  const char *keys[] = {"refresh_clients:batch:a", "refresh_clients:batch:b"};
  size_t lens[] = {strlen(keys[0]), strlen(keys[1])};
  xf_value v[2];
  int rcs[2];
  cr_assert_eq(xf_get_or_compute_many(c, 2, keys, lens, &p, load, NULL, v, rcs), XF_OK);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(v[i].source, XF_SOURCE_LOADER);
    xf_value_free(&v[i]);
  }
  int before = __atomic_load_n(&runs, __ATOMIC_SEQ_CST);
  cr_assert_eq(xf_get_or_compute_many(c, 2, keys, lens, &p, load, NULL, v, rcs), XF_OK);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(rcs[i], XF_OK);
    cr_expect_eq(v[i].source, XF_SOURCE_CACHE, "key %d: served, its refresh handed off", i);
    xf_value_free(&v[i]);
  }
  xf_refresh_info i = info_when(s, 2);
  cr_expect_eq(i.started, 2, "both refreshes on the workers (before: in the call)");
  cr_expect_eq(i.done, 2);
  cr_expect_eq(__atomic_load_n(&runs, __ATOMIC_SEQ_CST), before + 2);
  xf_client_close(c);
  xf_share_close(s);
}
