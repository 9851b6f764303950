/* Background refresh (XF_BACKGROUND_ON) on the event-loop driver (xf_async)
 * against a real Redis: the call that wins an early refresh gets the current value in its
 * callback while the refresh's loader is still pending; the refresh runs on
 * the loop as a call of its own and its value lands; closing the handle
 * with a refresh pending cancels it (its load completes into nothing). By
 * default the refresh runs in the call. A loader's own ttl is the entry's,
 * in the call and in the refresh. */
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
  int64_t ttl_ms;   /* > 0: its ttl (xf_async_load_ttl), set before it holds */
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
  if (x->ttl_ms) {
    cr_expect_eq(xf_async_load_ttl(load, -1), XF_EINVAL);
    cr_expect_eq(xf_async_load_ttl(load, x->ttl_ms), XF_OK);
  }
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
  p.background_refresh = XF_BACKGROUND_ON;
  p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
  return p;
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

/* Runs the loop until Redis holds want for the key (the loop sends the
 * write), looking every 5 ms, 1000 times at most. */
static void run_until_cached(ctx *x, const char *want) {
  x->want = want;
  x->polls = 0;
  uv_timer_init(&x->loop, &x->poll);
  x->poll.data = x;
  uv_timer_start(&x->poll, polled, 5, 5);
  uv_run(&x->loop, UV_RUN_DEFAULT); /* until the poll stops */
  uv_close((uv_handle_t *)&x->poll, NULL);
  cr_expect(cached_is(x->key, want), "%s was not written", want);
}

/* The key's PTTL: its entry's ttl (no stale window) less the time since it
 * was written, at most a few seconds on a busy machine. */
static void expect_ttl(const char *key, long long ttl_ms) {
  redisContext *r = xft_redis();
  long long pttl = xft_int(r, "PTTL %s", key);
  redisFree(r);
  cr_expect(pttl > ttl_ms - 10000 && pttl <= ttl_ms, "PTTL %lld, want the loader's %lld",
            pttl, ttl_ms);
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
  run_until_cached(&x, "v2"); /* the refresh wrote */
  end(&x);
}

/* xf_async_load_ttl: the entry's ttl is the loader's, not the policy's
 * 60 s, in the call's own load (20 s) and in the refresh the loop runs after
 * the call was answered (30 s, set before the load completes later); the
 * margin of expect_ttl (10 s) keeps them apart. */
Test(async_refresh, the_loader_s_ttl_is_the_entry_s_in_the_call_and_in_the_refresh) {
  ctx x;
  open_ctx(&x, "async:bgttl");
  x.next = "v1";
  x.ttl_ms = 20000;
  call(&x);
  run_until_fired(&x);
  cr_assert_eq(x.source, XF_SOURCE_LOADER);
  expect_ttl(x.key, 20000);
  x.fired = 0;
  x.hold = 1;
  x.ttl_ms = 30000;
  call(&x);
  run_until_fired(&x);
  cr_expect_eq(x.source, XF_SOURCE_CACHE);
  cr_assert_not_null(x.held, "the refresh's loader runs, still pending");
  cr_expect_eq(xf_async_load_done(x.held, "v2", 2), XF_OK);
  cr_expect_eq(xf_async_load_ttl(x.held, 1000), XF_EINVAL, "a completed load");
  cr_expect_eq(xf_async_load_ttl(NULL, 1000), XF_EINVAL);
  run_until_cached(&x, "v2");
  expect_ttl(x.key, 30000);
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

/* A request as a C program on a loop keeps it: the loader_ud and the
 * callback's data at once, freed by the callback. The test keeps the memory
 * and marks it gone there, counting a loader run that begins after. */
typedef struct request {
  ctx *x;
  int gone, loads, touched_after;
} request;

static void request_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  request *r = ud;
  if (r->gone)
    r->touched_after++;
  r->loads++;
  loader(r->x, key, keylen, load);
}

static void request_done(int rc, const xf_value *v, void *privdata) {
  request *r = privdata;
  on_done(rc, v, r->x);
  r->gone = 1;
}

static void request_start(request *r, const xf_policy *p) {
  ctx *x = r->x;
  cr_assert_eq(xf_async_get_or_compute(x->ac, x->key, strlen(x->key), p, request_loader, r,
                                       request_done, r),
               XF_OK);
}

/* The default policy (background_refresh AUTO): the refresh runs in the
 * call, whose callback gets the new value, though the loop could run it as a
 * call of its own: the library cannot know that loader_ud outlives the
 * callback (XF_BACKGROUND_ON says so). */
Test(async_refresh, by_default_the_refresh_runs_in_the_call) {
  ctx x;
  open_ctx(&x, "async:bgdefault");
  xf_policy p = XF_POLICY_INIT;
  p.refresh_ahead = 1e9; /* due as soon as the value has a delta */
  request cold = {.x = &x}, early = {.x = &x};
  x.next = "v1";
  request_start(&cold, &p);
  run_until_fired(&x);
  cr_assert_eq(x.source, XF_SOURCE_LOADER);
  x.fired = 0;
  x.next = "v2";
  request_start(&early, &p);
  run_until_fired(&x);
  cr_expect_eq(x.rc, XF_OK);
  cr_expect_eq(x.source, XF_SOURCE_LOADER, "refreshed in the call");
  cr_expect_str_eq(x.value, "v2");
  cr_expect_eq(early.loads, 1, "the loader ran before the callback");
  cr_expect(cached_is(x.key, "v2"), "the call wrote");
  end(&x); /* runs the loop out: anything still on it runs or is canceled */
  cr_expect_eq(cold.touched_after, 0);
  cr_expect_eq(early.touched_after, 0, "a loader_ud used after its callback");
  cr_expect_eq(early.loads, 1, "one refresh");
}
