/* The connection setup as the drivers run it, on a real server: a setup
 * command refused by a busy server is "unavailable" (calls fail open), not an
 * authentication failure. */
#include <criterion/criterion.h>
#include <string.h>
#include <xfetch_libuv.h>

#include "fixture.h"

/* ---- the event-loop driver: n calls on one loop ------------------------------- */

typedef struct arun {
  uv_loop_t loop;
  xf_async *ac;
  int n, fired, rc[8];
  xf_source source[8];
} arun;

static void async_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)ud, (void)key, (void)keylen;
  xf_async_load_done(load, "v", 1);
}

typedef struct aslot {
  arun *r;
  int i;
} aslot;

static void on_call(int rc, const xf_value *v, void *privdata) {
  aslot *s = privdata;
  s->r->rc[s->i] = rc;
  s->r->source[s->i] = rc == XF_OK ? v->source : (xf_source)-1;
  if (++s->r->fired == s->r->n)
    xf_async_close(s->r->ac);
}

/* Runs n calls on key with options o until each has called back. */
static void async_calls(arun *r, const xf_options *o, int n, const char *key) {
  memset(r, 0, sizeof *r);
  r->n = n;
  aslot slots[8];
  cr_assert_eq(uv_loop_init(&r->loop), 0);
  cr_assert_eq(xf_async_open_libuv(&r->ac, o, &r->loop), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  for (int i = 0; i < n; i++) {
    slots[i] = (aslot){r, i};
    cr_assert_eq(xf_async_get_or_compute(r->ac, key, strlen(key), &p, async_loader, NULL,
                                         on_call, &slots[i]),
                 XF_OK);
  }
  uv_run(&r->loop, UV_RUN_DEFAULT);
  cr_assert_eq(r->fired, n);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&r->loop), 0);
}

/* ---- a busy server at connect time ------------------------------------------- */

static const char *const busy_config[] = {"--busy-reply-threshold", "10", NULL};

/* SELECT is refused with BUSY while a script runs (AUTH is not): that is a
 * server that cannot serve now, so calls fail open as when it is down. It
 * used to be XF_EAUTH: every call failed as if misconfigured. */
Test(setup_live, busy_at_select_is_unavailable_and_calls_fail_open) {
  xft_server s; /* private: a busy server would stall the other tests */
  cr_assert_eq(xft_server_start(&s, busy_config), 0);
  redisContext *busy = xft_busy_start(s.port);
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.db = 3;
  o.cluster = XF_CLUSTER_OFF;
  xf_client *c;
  cr_expect_eq(xf_client_open(&c, &o), XF_EUNAVAILABLE);
  o.lazy_connect = 1;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  cr_expect_eq(xf_ping(c), XF_EUNAVAILABLE);
  cr_expect(strstr(xf_errmsg(c), "SELECT: BUSY"), "%s", xf_errmsg(c));
  xf_client_close(c);
  cr_assert_eq(xf_client_open(&c, &o), XF_OK); /* a fresh breaker: the call connects */
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "setup:busy", 10, &p, xft_load, &l, &v), XF_OK, "%s",
               xf_errmsg(c));
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(l.calls, 1);
  xf_value_free(&v);
  xf_client_close(c);
  arun a;
  async_calls(&a, &o, 3, "setup:busy");
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(a.rc[i], XF_OK, "async call %d: %s", i, xf_errname(a.rc[i]));
    cr_expect_eq(a.source[i], XF_SOURCE_UNCACHED, "async call %d", i);
  }
  xft_busy_stop(s.port, busy);
  xft_server_stop(&s);
}
