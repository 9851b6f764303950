/* An early refresh elected on a near hit is decided on what Redis holds: a
 * near hit inside the refresh window elects the call, which then reads
 * Redis; when another client wrote the key meanwhile (a newer value, far
 * from its expiry), that value is served as it is, with no lease and no
 * load, as a client without the near cache would. The write is made
 * deterministically between the near hit and the read (the near cache's
 * test hook), on the blocking, pool, batch and event-loop drivers. */
#define _DEFAULT_SOURCE /* <uv.h> under -std=c11 */
#include <criterion/criterion.h>
#include <string.h>
#include <xfetch_libuv.h>

#include "entry_io.h"
#include "fixture.h"
#include "near_env.h"
#include "near_impl.h"

#define KEY "hot"
#define DELTA_US 100000 /* the entry's last load: 100 ms */

/* The old entry expires within 60 s; the rate-aware window is 1000 x 100 ms
 * = 100 s: any near hit of it is elected. The newer write lives 600 s: past
 * the window by 500 s, whatever the machine's delays. */
static xf_policy refresh_policy(void) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.refresh_ahead = 1000;
  return p;
}

static near_env *writing; /* the hook's: the other client writes "new" */
static int writes;

static void write_newer(void) {
  xf__near_test_after_hit = NULL; /* once: the next near hit's */
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 600000;
  cr_assert_eq(xf_set(writing->other, KEY, 3, "new", 3, &p), XF_OK);
  writes++;
}

/* Redis holds "old" (delta 100 ms, 60 s left), kept near; the next near hit
 * is followed by another client's write of "new" (600 s). */
static void setup(near_env *e) {
  near_env_open(e);
  int written = 0;
  xf__write w = {.token = "",
                 .data = "old",
                 .len = 3,
                 .delta_us = DELTA_US,
                 .ttl_ms = 60000,
                 .start_ms = -1,
                 .kind = XF_WRITE_VALUE};
  cr_assert_eq(xft_entry_write(e->other, KEY, 3, &w, &written), XF_OK);
  cr_assert_eq(written, 1);
  near_warm(e->c, KEY, "old");
  writing = e;
  writes = 0;
  xf__near_test_after_hit = write_newer;
}

/* The call served "new" from Redis without loading, and Redis still holds
 * it with its 600 s. */
static void check(near_env *e, int rc, const char *got, int source, const xft_loader *l) {
  cr_assert_eq(writes, 1, "the write came between the near hit and the read");
  cr_assert_eq(rc, XF_OK);
  cr_assert_eq(__atomic_load_n(&l->calls, __ATOMIC_RELAXED), 0,
               "loaded: the election on the near copy refreshed a newer value");
  cr_assert_str_eq(got, "new");
  cr_assert_eq(source, XF_SOURCE_CACHE);
  char now[16];
  near_get(e->other, KEY, now, sizeof now);
  cr_assert_str_eq(now, "new");
  redisReply *type = xft_cmd(e->r, "TYPE %s", KEY);
  cr_assert_str_eq(type->str, xft_entry_format() == 1 ? "hash" : "string",
                   "the format tested");
  freeReplyObject(type);
  redisReply *ttl = xft_cmd(e->r, "PTTL %s", KEY);
  cr_assert_gt(ttl->integer, 500000, "the newer value keeps its ttl (%lld ms)",
               ttl->integer);
  freeReplyObject(ttl);
  near_env_close(e);
}

/* check() of a call's outcome (rc, v); frees v. */
static void check_value(near_env *e, int rc, xf_value *v, const xft_loader *l) {
  char got[16];
  snprintf(got, sizeof got, "%s", rc == XF_OK ? v->data : "");
  int source = v->source;
  xf_value_free(v);
  check(e, rc, got, source, l);
}

Test(near_refresh, blocking) {
  near_env e;
  setup(&e);
  xf_policy p = refresh_policy();
  xft_loader l = {.value = "loaded", .len = 6};
  xf_value v;
  int rc = xf_get_or_compute(e.c, KEY, 3, &p, xft_load, &l, &v);
  check_value(&e, rc, &v, &l);
}

/* The fast path's draw (xf_near_serve: a near hit without a call) elects with
 * beta = inf and leaves the election to the client's next call, made under
 * beta = 0: still decided on what Redis holds. */
Test(near_refresh, an_election_kept_for_the_next_call) {
  near_env e;
  setup(&e);
  xf__near_test_after_hit = NULL; /* not the fast path's hit: the call's */
  xf_policy always = XF_POLICY_INIT, never = XF_POLICY_INIT;
  always.ttl_ms = never.ttl_ms = 60000;
  always.beta = __builtin_inf();
  always.refresh_ahead = -1;                     /* XFetch: beta decides */
  always.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  never.beta = 0;
  never.refresh_ahead = -1;                     /* XFetch: beta decides */
  never.background_refresh = XF_BACKGROUND_OFF; /* in the call */
  xf_value v;
  cr_assert_eq(xf_near_serve(e.c, KEY, 3, &always, XF_DRIVER_BLOCKING, NULL, &v),
               XF_NEAR_NOT_SERVED, "elected");
  xf__near_test_after_hit = write_newer;
  xft_loader l = {.value = "loaded", .len = 6};
  int rc = xf_get_or_compute(e.c, KEY, 3, &never, xft_load, &l, &v);
  check_value(&e, rc, &v, &l);
}

Test(near_refresh, pool) {
  near_env e;
  setup(&e);
  xf_options o = XF_OPTIONS_INIT;
  o.port = e.srv.port;
  o.share = e.share;
  xf_pool *pool;
  cr_assert_eq(xf_pool_open(&pool, &o, 2, 0), XF_OK);
  xf_policy p = refresh_policy();
  xft_loader l = {.value = "loaded", .len = 6};
  xf_value v;
  int rc = xf_pool_get_or_compute(pool, KEY, 3, &p, xft_load, &l, &v);
  xf_pool_close(pool);
  check_value(&e, rc, &v, &l);
}

Test(near_refresh, batch) {
  near_env e;
  setup(&e);
  xf_policy p = refresh_policy();
  xft_loader l = {.value = "loaded", .len = 6};
  const char *keys[1] = {KEY};
  size_t lens[1] = {3};
  xf_value v;
  int rcs[1];
  cr_assert_eq(xf_get_or_compute_many(e.c, 1, keys, lens, &p, xft_load, &l, &v, rcs),
               XF_OK);
  check_value(&e, rcs[0], &v, &l);
}

typedef struct loop_call {
  uv_loop_t uv;
  int done, rc, source, loads;
  char got[16];
} loop_call;

static void on_done(int rc, const xf_value *v, void *privdata) {
  loop_call *r = privdata;
  r->rc = rc;
  r->source = rc == XF_OK ? (int)v->source : -1;
  snprintf(r->got, sizeof r->got, "%.*s", rc == XF_OK ? (int)v->len : 0,
           rc == XF_OK ? v->data : "");
  r->done = 1;
  uv_stop(&r->uv);
}

static void loop_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  ((loop_call *)ud)->loads++;
  xf_async_load_done(load, "loaded", 6);
}

Test(near_refresh, event_loop) {
  near_env e;
  setup(&e);
  loop_call r = {0};
  cr_assert_eq(uv_loop_init(&r.uv), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = e.srv.port;
  o.share = e.share;
  xf_async *ac;
  cr_assert_eq(xf_async_open_libuv(&ac, &o, &r.uv), XF_OK);
  xf_policy p = refresh_policy();
  cr_assert_eq(xf_async_get_or_compute(ac, KEY, 3, &p, loop_loader, &r, on_done, &r),
               XF_OK);
  while (!r.done)
    uv_run(&r.uv, UV_RUN_DEFAULT);
  xf_async_close(ac);
  uv_run(&r.uv, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&r.uv), 0);
  xft_loader l = {.calls = r.loads};
  check(&e, r.rc, r.got, r.source, &l);
}
