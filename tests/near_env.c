/* What the near-cache tests share: see near_env.h. */
#include "near_env.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "near_impl.h"
#include "near_track.h"
#include "share.h"

int near_client_open(xf_client **c, int port, xf_share *share, const char *user,
                     const char *password) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  o.username = user;
  o.password = password;
  o.seed = 7;
  o.entry_format = xft_entry_format(); /* XFT_ENTRY_FORMAT, as the fixture's clients */
  /* Patient, as the fixture's clients: no near-cache test is about a timeout */
  o.connect_timeout_ms = o.command_timeout_ms = XFT_PATIENT_MS;
  return xf_client_open(c, &o);
}

xf_client *near_client(int port, xf_share *share, const char *user, const char *password) {
  xf_client *c;
  cr_assert_eq(near_client_open(&c, port, share, user, password), XF_OK);
  return c;
}

void near_wake_by_writes_only(xf_client *c) { c->wake_poll_ms = NEAR_FALLBACK_POLL_MS; }

void near_env_open(near_env *e) {
  memset(e, 0, sizeof *e);
  cr_assert_eq(xft_server_start(&e->srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  e->c = near_client(e->srv.port, e->share, NULL, NULL);
  e->other = near_client(e->srv.port, NULL, NULL, NULL);
  e->r = xft_redis_port(e->srv.port);
}

void near_env_close(near_env *e) {
  redisFree(e->r);
  xf_client_close(e->other);
  xf_client_close(e->c);
  xf_share_close(e->share);
  xft_server_stop(&e->srv);
}

void near_put(xf_client *c, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, key, strlen(key), value, strlen(value), &p), XF_OK, "%s",
               xf_errmsg(c));
}

void near_get(xf_client *c, const char *key, char *buf, size_t cap) {
  xf_value v;
  int rc = xf_get(c, key, strlen(key), &v);
  cr_assert(rc == XF_OK || rc == XF_ENOTFOUND, "%s", xf_errmsg(c));
  snprintf(buf, cap, "%s", rc == XF_OK ? v.data : "");
  xf_value_free(&v);
}

uint64_t near_hits(xf_client *c) {
  xf_stats st;
  xf_client_stats(c, &st);
  return st.near_hits;
}

void near_warm(xf_client *c, const char *key, const char *want) {
  char got[64];
  uint64_t before = near_hits(c);
  int64_t until = xft_now_ms() + BOUND_MS;
  while (near_hits(c) == before && xft_now_ms() < until) {
    near_get(c, key, got, sizeof got);
    cr_assert_str_eq(got, want);
    if (near_hits(c) == before)
      xft_sleep_ms(1);
  }
  cr_assert_gt(near_hits(c), before, "never a near hit");
}

void near_await_invalidations(xf_share *s, uint64_t seen) {
  struct xf__ncache *n = xf__share_near(s);
  int64_t until = xft_now_ms() + BOUND_MS;
  while ((xf__near_invalidations(n) <= seen || xf__near_news_waiting(n)) &&
         xft_now_ms() < until)
    xft_sleep_ms(1);
  cr_assert_gt(xf__near_invalidations(n), seen, "no invalidation came");
  cr_assert_not(xf__near_news_waiting(n), "the tracker never applied what it read");
}

int near_opening(xf_share *s, int port) {
  struct xf__near_tracker *t = xf__near_tracker(xf__share_near(s));
  int opening = 0;
  pthread_mutex_lock(&t->mu);
  for (struct xf__track_node *node = t->nodes; node; node = node->next)
    opening |= node->port == port && (node->want || node->opening);
  pthread_mutex_unlock(&t->mu);
  return opening;
}

int near_openers_unjoined(xf_share *s) {
  struct xf__near_tracker *t = xf__near_tracker(xf__share_near(s));
  int unjoined = 0;
  pthread_mutex_lock(&t->mu);
  for (struct xf__track_node *node = t->nodes; node; node = node->next)
    unjoined += node->has_opener;
  pthread_mutex_unlock(&t->mu);
  return unjoined;
}
