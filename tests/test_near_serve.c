/* xf_near_serve (<xfetch/near.h>): a near hit without a call. Served with
 * the call's counters, its events naming the driver given and its result
 * counted where asked; a kept not-found is XF_ENOTFOUND; not served
 * (XF_NEAR_NOT_SERVED) without a near cache or a kept entry; a draw that
 * elected an early refresh is kept for the client's next call, or moved to
 * another client's (xf_near_move_refresh). */
#include <criterion/criterion.h>
#include <string.h>

#include "fixture.h"

#define BOUND_MS 5000

static int near_events;
static xf_driver near_driver;

static void count_near(const xf_event *ev, void *ud) {
  (void)ud;
  if (ev->type == XF_EV_NEAR) {
    near_events++;
    near_driver = ev->driver;
  }
}

static xf_client *client_of(int port, xf_share *share) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  o.seed = 7;
  o.on_event = count_near;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static xf_stats stats_of(xf_client *c) {
  xf_stats st;
  xf_client_stats(c, &st);
  return st;
}

/* Serves key (under p) until the near cache does, within the bound: the
 * first reads (the call's) fill it. */
static void serve_until_near(xf_client *c, const char *key, const xf_policy *p,
                             uint64_t *count, xf_value *v) {
  int64_t until = xft_now_ms() + BOUND_MS;
  xft_loader l = {.value = "loaded", .len = 6};
  while (xf_near_serve(c, key, strlen(key), p, XF_DRIVER_BLOCKING, count, v) != XF_OK) {
    cr_assert_lt(xft_now_ms(), until, "never a near hit");
    xf_value w;
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), p, xft_load, &l, &w), XF_OK);
    xf_value_free(&w);
    xft_sleep_ms(1);
  }
}

Test(near_serve, serves_a_near_hit_with_the_calls_counts) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  xf_client *c = client_of(srv.port, share), *plain = client_of(srv.port, NULL);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  xf_value v;
  uint64_t count = 0;
  cr_assert_eq(xf_near_serve(plain, "k", 1, &p, XF_DRIVER_BLOCKING, NULL, &v),
               XF_NEAR_NOT_SERVED, "no near cache: the call");
  cr_assert_eq(xf_near_serve(c, "absent", 6, &p, XF_DRIVER_BLOCKING, NULL, &v),
               XF_NEAR_NOT_SERVED, "nothing kept: the call");
  serve_until_near(c, "k", &p, &count, &v);
  cr_assert_eq(v.len, 6);
  cr_assert_str_eq(v.data, "loaded");
  cr_assert_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  xf_stats before = stats_of(c);
  near_events = 0;
  count = 0;
  cr_assert_eq(xf_near_serve(c, "k", 1, &p, XF_DRIVER_BLOCKING, &count, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(xf_near_serve(c, "k", 1, NULL, XF_DRIVER_CALL, NULL, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(near_driver, XF_DRIVER_CALL, "the event names the driver given");
  xf_stats after = stats_of(c);
  cr_assert_eq(after.near_hits - before.near_hits, 2);
  cr_assert_eq(after.hits - before.hits, 2);
  cr_assert_eq(count, 1, "the first counted where asked");
  cr_assert_eq(near_events, 1, "the second through the hook");
  xf_client_close(plain);
  xf_client_close(c);
  xf_share_close(share);
  xft_server_stop(&srv);
}

/* beta = inf elects a near hit of a value whose load took time: not served,
 * and the client's next get-or-compute of the key refreshes it even under a
 * policy that never refreshes early (beta 0): it does not draw again. */
Test(near_serve, an_elected_draw_is_kept_for_the_next_call) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  xf_client *c = client_of(srv.port, share);
  xf_policy p = XF_POLICY_INIT, never = XF_POLICY_INIT, always = XF_POLICY_INIT;
  p.ttl_ms = never.ttl_ms = always.ttl_ms = 60000;
  never.beta = 0;
  never.refresh_ahead = -1;                     /* XFetch: beta decides */
  never.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  always.beta = __builtin_inf();
  always.refresh_ahead = -1;                     /* XFetch: beta decides */
  always.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  xft_loader slow = {.value = "v1", .len = 2, .sleep_ms = 20};
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "k", 1, &p, xft_load, &slow, &v), XF_OK);
  xf_value_free(&v);
  serve_until_near(c, "k", &never, NULL, &v);
  xf_value_free(&v);
  cr_assert_eq(xf_near_serve(c, "k", 1, &always, XF_DRIVER_BLOCKING, NULL, &v),
               XF_NEAR_NOT_SERVED, "elected: the call refreshes");
  xft_loader next = {.value = "v2", .len = 2};
  cr_assert_eq(xf_get_or_compute(c, "k", 1, &never, xft_load, &next, &v), XF_OK);
  cr_assert_eq(v.source, XF_SOURCE_LOADER);
  cr_assert_str_eq(v.data, "v2");
  xf_value_free(&v);
  cr_assert_eq(stats_of(c).early, 1);
  xf_client_close(c);
  xf_share_close(share);
  xft_server_stop(&srv);
}

/* The codes: a NULL client or out is XF_EINVAL (out emptied); an argument the
 * call refuses is not served (the call says why); a kept not-found is
 * XF_ENOTFOUND for both a get-or-compute and a get. */
Test(near_serve, codes) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  xf_client *c = client_of(srv.port, share);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.negative_ttl_ms = 60000;
  xf_value v = {.data = (char *)"x", .len = 1};
  cr_assert_eq(xf_near_serve(NULL, "k", 1, &p, XF_DRIVER_CALL, NULL, &v), XF_EINVAL);
  cr_assert_null(v.data, "out emptied");
  cr_assert_eq(xf_near_serve(c, "k", 1, &p, XF_DRIVER_CALL, NULL, NULL), XF_EINVAL);
  cr_assert_eq(xf_near_serve(c, NULL, 1, &p, XF_DRIVER_CALL, NULL, &v), XF_NEAR_NOT_SERVED);
  cr_assert_eq(xf_get_or_compute(c, NULL, 1, &p, xft_load, &(xft_loader){0}, &v), XF_EINVAL,
               "the call says why");
  xft_loader none = {.not_found = 1};
  int64_t until = xft_now_ms() + BOUND_MS;
  int rc;
  while ((rc = xf_near_serve(c, "gone", 4, &p, XF_DRIVER_CALL, NULL, &v)) ==
         XF_NEAR_NOT_SERVED) {
    cr_assert_lt(xft_now_ms(), until, "never a near hit");
    cr_assert_eq(xf_get_or_compute(c, "gone", 4, &p, xft_load, &none, &v), XF_ENOTFOUND);
    xft_sleep_ms(1);
  }
  cr_assert_eq(rc, XF_ENOTFOUND, "a kept not-found");
  cr_assert_null(v.data);
  cr_assert_eq(xf_near_serve(c, "gone", 4, NULL, XF_DRIVER_CALL, NULL, &v), XF_ENOTFOUND,
               "a get of a kept not-found");
  cr_assert_eq(xft_loader_calls(&none), 1, "loaded once");
  xf_client_close(c);
  xf_share_close(share);
  xft_server_stop(&srv);
}

/* An election moved to another client (a pool's idle client served the
 * draw; the call runs on another): the receiver's next get-or-compute
 * refreshes under a policy that never refreshes early, the giver's does not. */
Test(near_serve, an_election_moves_to_the_calls_client) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  xf_client *from = client_of(srv.port, share), *to = client_of(srv.port, share);
  xf_policy p = XF_POLICY_INIT, never = XF_POLICY_INIT, always = XF_POLICY_INIT;
  p.ttl_ms = never.ttl_ms = always.ttl_ms = 60000;
  never.beta = 0;
  never.refresh_ahead = -1;                     /* XFetch: beta decides */
  never.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  always.beta = __builtin_inf();
  always.refresh_ahead = -1;                     /* XFetch: beta decides */
  always.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  xft_loader slow = {.value = "v1", .len = 2, .sleep_ms = 20};
  xf_value v;
  cr_assert_eq(xf_get_or_compute(from, "k", 1, &p, xft_load, &slow, &v), XF_OK);
  xf_value_free(&v);
  serve_until_near(from, "k", &never, NULL, &v);
  xf_value_free(&v);
  xf_near_move_refresh(NULL, to); /* NULL-safe */
  xf_near_move_refresh(from, NULL);
  cr_assert_eq(xf_near_serve(from, "k", 1, &always, XF_DRIVER_POOL, NULL, &v),
               XF_NEAR_NOT_SERVED, "elected");
  xf_near_move_refresh(from, to);
  xft_loader next = {.value = "v2", .len = 2};
  cr_assert_eq(xf_get_or_compute(from, "k", 1, &never, xft_load, &next, &v), XF_OK);
  cr_assert_eq(v.source, XF_SOURCE_CACHE, "the giver's call does not refresh");
  xf_value_free(&v);
  cr_assert_eq(xf_get_or_compute(to, "k", 1, &never, xft_load, &next, &v), XF_OK);
  cr_assert_eq(v.source, XF_SOURCE_LOADER, "the receiver's call refreshes");
  cr_assert_str_eq(v.data, "v2");
  xf_value_free(&v);
  cr_assert_eq(stats_of(to).early, 1);
  cr_assert_eq(stats_of(from).early, 0);
  xf_client_close(from);
  xf_client_close(to);
  xf_share_close(share);
  xft_server_stop(&srv);
}
