/* Background refresh on the event-loop driver (xf_async) against a real
 * Redis: the call that wins an early refresh gets the current value in its
 * callback while the refresh's loader is still pending; the refresh runs on
 * the loop as a call of its own and its value lands; closing the handle
 * with a refresh pending cancels it (its load completes into nothing). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <xfetch_libuv.h>

#include "entry_peek.h"
#include "fixture.h"

typedef struct ctx {
  uv_loop_t loop;
  xf_async *ac;
  int fired, rc;
  xf_source source;
  char value[32];
  xf_async_load *held; /* the loader's pending load (hold: not completed) */
  int hold, loads;
  const char *next; /* the value the loader completes with */
  const char *key, *want;
  uv_timer_t poll;
  int polls;
} ctx;

static void on_done(int rc, const xf_value *v, void *privdata) {
  ctx *x = privdata;
  x->fired++;
  x->rc = rc;
  if (rc == XF_OK) {
    x->source = v->source;
    snprintf(x->value, sizeof x->value, "%.*s", (int)v->len, v->data);
  }
}

static void loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  ctx *x = ud;
  x->loads++;
  xft_sleep_ms(2); /* a delta the rate-aware rule can work with */
  if (x->hold)
    x->held = load;
  else
    xf_async_load_done(load, x->next, strlen(x->next));
}

static void open_ctx(ctx *x, const char *key) {
  memset(x, 0, sizeof *x);
  cr_assert_eq(uv_loop_init(&x->loop), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  cr_assert_eq(xf_async_open_libuv(&x->ac, &o, &x->loop), XF_OK);
  x->key = key;
}

static xf_policy background(void) {
  xf_policy p = XF_POLICY_INIT;
  p.background_refresh = 1;
  p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
  return p;
}

static void call_with(ctx *x, const xf_policy *p) {
  cr_assert_eq(
      xf_async_get_or_compute(x->ac, x->key, strlen(x->key), p, loader, x, on_done, x),
      XF_OK);
}

static void call(ctx *x) {
  xf_policy p = background();
  cr_assert_eq(
      xf_async_get_or_compute(x->ac, x->key, strlen(x->key), &p, loader, x, on_done, x),
      XF_OK);
}

static void run_until_fired(ctx *x) {
  while (!x->fired)
    uv_run(&x->loop, UV_RUN_ONCE);
}

static void end(ctx *x) {
  xf_async_close(x->ac);
  uv_run(&x->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&x->loop), 0);
}

/* What Redis holds for the key's value field. */
static int cached_is(const char *key, const char *want) {
  redisContext *r = xft_redis();
  xft_peek e;
  xft_peek_read(r, key, "", &e);
  int ok = e.v && strcmp(e.v, want) == 0;
  xft_peek_free(&e);
  redisFree(r);
  return ok;
}

static void polled(uv_timer_t *t) {
  ctx *x = t->data;
  if (cached_is(x->key, x->want) || ++x->polls > 1000) {
    uv_timer_stop(t);
    uv_stop(t->loop);
  }
}

Test(async_refresh, the_winner_is_answered_while_the_refresh_runs_on_the_loop) {
  ctx x;
  open_ctx(&x, "async:bg");
  x.next = "v1";
  call(&x);
  run_until_fired(&x);
  cr_assert_eq(x.source, XF_SOURCE_LOADER);
  cr_assert(cached_is(x.key, "v1"));
  x.fired = 0;
  x.hold = 1; /* the refresh's load stays pending */
  call(&x);
  run_until_fired(&x);
  cr_expect_eq(x.rc, XF_OK);
  cr_expect_eq(x.source, XF_SOURCE_CACHE);
  cr_expect_str_eq(x.value, "v1");
  cr_assert_not_null(x.held, "the refresh's loader runs, still pending");
  cr_expect_eq(x.loads, 2);
  xf_async_load *held = x.held;
  cr_expect_eq(xf_async_load_done(held, "v2", 2), XF_OK);
  x.want = "v2";
  uv_timer_init(&x.loop, &x.poll);
  x.poll.data = &x;
  uv_timer_start(&x.poll, polled, 5, 5);
  uv_run(&x.loop, UV_RUN_DEFAULT); /* until the poll stops */
  uv_close((uv_handle_t *)&x.poll, NULL);
  cr_expect(cached_is(x.key, "v2"), "the refresh wrote");
  end(&x);
}

Test(async_refresh, closing_with_a_refresh_pending_cancels_it) {
  ctx x;
  open_ctx(&x, "async:bgclose");
  x.next = "v1";
  call(&x);
  run_until_fired(&x);
  x.fired = 0;
  x.hold = 1;
  call(&x);
  run_until_fired(&x);
  cr_assert_not_null(x.held);
  xf_async_load *held = x.held;
  end(&x);                             /* the refresh is canceled with the handle */
  xf_async_load_done(held, "late", 4); /* completes into nothing */
  cr_expect(cached_is("async:bgclose", "v1"), "nothing written after close");
}

/* The default policy (background_refresh AUTO): the loop is somewhere to run
 * a refresh, so the winner is answered with the current value. */
Test(async_refresh, by_default_the_refresh_runs_on_the_loop) {
  ctx x;
  open_ctx(&x, "async:bgdefault");
  xf_policy p = XF_POLICY_INIT;
  p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
  x.next = "v1";
  call_with(&x, &p);
  run_until_fired(&x);
  cr_assert_eq(x.source, XF_SOURCE_LOADER);
  x.fired = 0;
  x.hold = 1; /* the refresh's load stays pending */
  call_with(&x, &p);
  while (!x.fired && !x.held)
    uv_run(&x.loop, UV_RUN_ONCE);
  int answered_first = x.fired;
  cr_assert_not_null(x.held, "the refresh's loader runs");
  cr_expect_eq(xf_async_load_done(x.held, "v2", 2), XF_OK);
  run_until_fired(&x); /* at once if answered first; else once its load landed */
  cr_expect(answered_first, "answered before the refresh's load completed");
  cr_expect_eq(x.rc, XF_OK);
  cr_expect_eq(x.source, XF_SOURCE_CACHE, "the current value");
  cr_expect_str_eq(x.value, "v1");
  x.want = "v2";
  uv_timer_init(&x.loop, &x.poll);
  x.poll.data = &x;
  uv_timer_start(&x.poll, polled, 5, 5);
  uv_run(&x.loop, UV_RUN_DEFAULT); /* until the poll stops */
  uv_close((uv_handle_t *)&x.poll, NULL);
  cr_expect(cached_is(x.key, "v2"), "the refresh wrote");
  end(&x);
}
