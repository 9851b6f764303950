/* The loader under control on the event-loop driver (xf_async on libuv),
 * against a real Redis: a loader that completes after twice its lease
 * keeps the lease (the loop renews it: a second handle's call loads
 * nothing), and the soft and hard timeouts end the call on a loop timer
 * while the load completes later and is cached (with its loader's ttl).
 *
 * Timing margins: a 1.5 s lease against a 3 s loader (renewals every
 * 500 ms: one may come 1 s late; a 1 s lease lost it in 1 of 5 runs beside
 * two CPU loops); a 100-200 ms timeout against a 3 s loader, the callback
 * within 1.2 s (the timeout plus 1-1.1 s for a busy 2-core machine); the
 * load's write within 6 s of its completion, looked for on one client; its
 * PTTL read within 10 s of it. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xfetch_libuv.h>

#include "fixture.h"

#define LEASE_MS 1500
#define LOAD_MS 3000
#define CALL_BOUND_MS 1200
#define LANDS_WITHIN_MS 6000

typedef struct caller {
  int fired, rc;
  xf_source source;
  char value[32];
  int64_t started_ms, took_ms;
} caller;

typedef struct ctx {
  uv_loop_t loop;
  xf_async *ac[2];
  caller callers[2];
  int loads, completed;
  uv_timer_t later; /* the second call, 100 ms after the first */
  const char *key;
  xf_policy p;
  int unchanged;    /* the held loads answer "unchanged" */
  int previous_old; /* and were given the previous value "old" */
  int64_t ttl_ms;   /* > 0: the held loads' ttl (xf_async_load_ttl), */
  int ttl_early;    /* set in the loader (before the timeout), else at completion */
} ctx;

static void on_done(int rc, const xf_value *v, void *privdata) {
  caller *k = privdata;
  k->fired++;
  k->rc = rc;
  k->took_ms = xft_now_ms() - k->started_ms;
  if (rc == XF_OK) {
    k->source = v->source;
    snprintf(k->value, sizeof k->value, "%.*s", (int)v->len, v->data);
  }
}

/* A held load: completed by its own timer. */
typedef struct held {
  uv_timer_t timer;
  xf_async_load *load;
  ctx *x;
} held;

static void freed(uv_handle_t *h) { free(h->data); }

static void completes(uv_timer_t *t) {
  held *h = t->data;
  h->x->completed++;
  if (h->x->unchanged) { /* read after the call was served its stale value */
    const void *prev = NULL;
    size_t n = 0;
    h->x->previous_old = xf_async_load_previous(h->load, &prev, &n, NULL) == 1 && n == 3 &&
                         !memcmp(prev, "old", 3);
    if (xf_async_load_unchanged(h->load) != XF_OK)
      xf_async_load_fail(h->load, 0);
  } else {
    if (h->x->ttl_ms && !h->x->ttl_early)
      cr_expect_eq(xf_async_load_ttl(h->load, h->x->ttl_ms), XF_OK);
    xf_async_load_done(h->load, "new", 3);
  }
  uv_close((uv_handle_t *)t, freed);
}

/* Completes after LOAD_MS, from a loop timer (the loop runs meanwhile). */
static void slow_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  ctx *x = ud;
  x->loads++;
  if (x->ttl_ms && x->ttl_early)
    cr_expect_eq(xf_async_load_ttl(load, x->ttl_ms), XF_OK);
  held *h = calloc(1, sizeof *h);
  cr_assert_not_null(h);
  h->load = load;
  h->x = x;
  uv_timer_init(&x->loop, &h->timer);
  h->timer.data = h;
  uv_timer_start(&h->timer, completes, LOAD_MS, 0);
}

static void open_ctx(ctx *x, const char *key) {
  memset(x, 0, sizeof *x);
  cr_assert_eq(uv_loop_init(&x->loop), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  for (int i = 0; i < 2; i++)
    cr_assert_eq(xf_async_open_libuv(&x->ac[i], &o, &x->loop), XF_OK);
  uv_timer_init(&x->loop, &x->later);
  x->later.data = x;
  x->key = key;
  x->p = (xf_policy)XF_POLICY_INIT;
  x->p.lease_ms = LEASE_MS;
  x->p.stale_ms = 60000;
}

static void call(ctx *x, int i) {
  x->callers[i].started_ms = xft_now_ms();
  cr_assert_eq(xf_async_get_or_compute(x->ac[i], x->key, strlen(x->key), &x->p, slow_loader,
                                       x, on_done, &x->callers[i]),
               XF_OK);
}

static void call_second(uv_timer_t *t) { call(t->data, 1); }

static void tick(uv_timer_t *t) { (void)t; }

/* Whether key holds "new" (a load's write), read on c. */
static int written(xf_client *c, const char *key) {
  xf_value v;
  int yes =
      xf_get(c, key, strlen(key), &v) == XF_OK && v.len == 3 && !memcmp(v.data, "new", 3);
  xf_value_free(&v);
  return yes;
}

/* Runs the loop until every held load completed and its value was written
 * (the loop sends the write), looking every 20 ms for up to
 * LANDS_WITHIN_MS. */
static void run_past_the_load(ctx *x) {
  while (x->completed < x->loads)
    uv_run(&x->loop, UV_RUN_ONCE);
  int64_t give_up = xft_now_ms() + LANDS_WITHIN_MS;
  uv_timer_start(&x->later, tick, 20, 20); /* the loop wakes to look */
  xf_client *c = xft_client(0);
  while (!written(c, x->key) && xft_now_ms() < give_up)
    uv_run(&x->loop, UV_RUN_ONCE);
  xf_client_close(c);
  uv_timer_stop(&x->later);
}

static void end(ctx *x) {
  for (int i = 0; i < 2; i++)
    xf_async_close(x->ac[i]);
  uv_close((uv_handle_t *)&x->later, NULL);
  uv_run(&x->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&x->loop), 0);
}

static char *cached(const char *key) {
  xf_client *c = xft_client(0);
  xf_value v;
  char *got = xf_get(c, key, strlen(key), &v) == XF_OK ? strdup(v.data) : strdup("(none)");
  xf_value_free(&v);
  xf_client_close(c);
  return got;
}

static int two_callers(const char *key, int64_t max_load_ms) {
  ctx x;
  open_ctx(&x, key);
  x.p.max_load_ms = max_load_ms;
  call(&x, 0);
  uv_timer_start(&x.later, call_second, 100, 0);
  while (x.callers[0].fired + x.callers[1].fired < 2)
    uv_run(&x.loop, UV_RUN_ONCE);
  for (int i = 0; i < 2; i++)
    cr_expect_eq(x.callers[i].rc, XF_OK, "caller %d: %s", i, xf_strerror(x.callers[i].rc));
  int loads = x.loads;
  run_past_the_load(&x);
  end(&x);
  return loads;
}

Test(async_loadctl, a_loader_twice_its_lease_gets_no_twin) {
  int loads = two_callers("aload:renew", 0);
  cr_expect_eq(loads, 1, "%d loads", loads);
}

Test(async_loadctl, without_renewal_the_second_caller_loads_too) {
  int loads = two_callers("aload:off", LEASE_MS);
  cr_expect_eq(loads, 2, "%d loads", loads);
}

Test(async_loadctl, hard_timeout_on_a_cold_key) {
  ctx x;
  open_ctx(&x, "aload:hard");
  x.p.hard_timeout_ms = 200;
  call(&x, 0);
  while (!x.callers[0].fired)
    uv_run(&x.loop, UV_RUN_ONCE);
  cr_expect_eq(x.callers[0].rc, XF_ETIMEDOUT, "%s", xf_strerror(x.callers[0].rc));
  cr_expect_geq(x.callers[0].took_ms, 200);
  cr_expect_leq(x.callers[0].took_ms, CALL_BOUND_MS + 100);
  run_past_the_load(&x);
  char *got = cached(x.key);
  cr_expect_str_eq(got, "new", "the load went on and was cached");
  free(got);
  cr_expect_eq(x.loads, 1);
  end(&x);
}

/* x's key holds "old" past its ttl (within stale_ms); a call with a 100 ms
 * soft timeout is served it, stale, within CALL_BOUND_MS while its load
 * goes on. */
static void served_stale_past_the_soft_timeout(ctx *x) {
  xf_client *w = xft_client(0);
  xf_policy p = x->p;
  p.ttl_ms = 100;
  cr_assert_eq(xf_set(w, x->key, strlen(x->key), "old", 3, &p), XF_OK);
  xf_client_close(w);
  xft_sleep_ms(200); /* past its ttl, within stale_ms */
  x->p.soft_timeout_ms = 100;
  call(x, 0);
  while (!x->callers[0].fired)
    uv_run(&x->loop, UV_RUN_ONCE);
  cr_expect_eq(x->callers[0].rc, XF_OK);
  cr_expect_str_eq(x->callers[0].value, "old");
  cr_expect_eq(x->callers[0].source, XF_SOURCE_STALE);
  cr_expect_leq(x->callers[0].took_ms, CALL_BOUND_MS);
}

Test(async_loadctl, soft_timeout_serves_stale) {
  ctx x;
  open_ctx(&x, "aload:soft");
  served_stale_past_the_soft_timeout(&x);
  run_past_the_load(&x);
  char *got = cached(x.key);
  cr_expect_str_eq(got, "new");
  free(got);
  end(&x);
}

/* A load that ran past its soft timeout keeps the loader's ttl
 * (xf_async_load_ttl), given in the loader (before the timeout moved the load
 * off the call) or at its completion (after): the entry's PTTL is that ttl
 * (20 s) plus stale_ms (60 s), not the policy's 60 s plus stale_ms. Margin:
 * PTTL is read within 10 s of the write. */
ParameterizedTestParameters(async_loadctl, a_load_past_its_soft_timeout_keeps_its_ttl) {
  static int early[] = {1, 0};
  return cr_make_param_array(int, early, 2);
}

/* The entry x's load wrote lives the loader's ttl plus stale_ms. */
static void expect_the_loader_s_ttl(const ctx *x) {
  redisContext *r = xft_redis();
  long long pttl = xft_int(r, "PTTL %s", x->key);
  redisFree(r);
  long long want = x->ttl_ms + x->p.stale_ms;
  cr_expect(pttl > want - 10000 && pttl <= want, "PTTL %lld, want %lld", pttl, want);
}

ParameterizedTest(int *early, async_loadctl, a_load_past_its_soft_timeout_keeps_its_ttl) {
  ctx x;
  open_ctx(&x, *early ? "aload:soft:ttl:early" : "aload:soft:ttl:late");
  x.ttl_ms = 20000;
  x.ttl_early = *early;
  served_stale_past_the_soft_timeout(&x);
  run_past_the_load(&x);
  expect_the_loader_s_ttl(&x);
  end(&x);
}

/* The same past a hard timeout: a cold key's call ends with XF_ETIMEDOUT at
 * 200 ms, and its load goes on to write with the loader's ttl. */
ParameterizedTestParameters(async_loadctl, a_load_past_its_hard_timeout_keeps_its_ttl) {
  static int early[] = {1, 0};
  return cr_make_param_array(int, early, 2);
}

ParameterizedTest(int *early, async_loadctl, a_load_past_its_hard_timeout_keeps_its_ttl) {
  ctx x;
  open_ctx(&x, *early ? "aload:hard:ttl:early" : "aload:hard:ttl:late");
  x.ttl_ms = 20000;
  x.ttl_early = *early;
  x.p.hard_timeout_ms = 200;
  call(&x, 0);
  while (!x.callers[0].fired)
    uv_run(&x.loop, UV_RUN_ONCE);
  cr_expect_eq(x.callers[0].rc, XF_ETIMEDOUT, "%s", xf_strerror(x.callers[0].rc));
  run_past_the_load(&x);
  expect_the_loader_s_ttl(&x);
  end(&x);
}

/* A load that ran past its soft timeout answers "unchanged" once the call
 * was served its stale value: it is given that value (read then, after the
 * call ended), and the entry's life is extended with the value kept (a
 * fresh hit on another client within LANDS_WITHIN_MS). */
Test(async_loadctl, a_load_past_its_soft_timeout_answers_unchanged) {
  ctx x;
  open_ctx(&x, "aload:soft:unchanged");
  x.unchanged = 1;
  x.p.ttl_ms = 60000; /* the touch's: the entry's life extended by it */
  served_stale_past_the_soft_timeout(&x);
  xf_client *w = xft_client(0);
  while (x.completed < x.loads)
    uv_run(&x.loop, UV_RUN_ONCE);
  cr_expect(x.previous_old, "the loader was not given the previous value \"old\"");
  int64_t give_up = xft_now_ms() + LANDS_WITHIN_MS;
  uv_timer_start(&x.later, tick, 20, 20); /* the loop wakes to send the touch */
  xf_value v = {0};
  int rc = XF_ENOTFOUND;
  while (rc != XF_OK && xft_now_ms() < give_up) {
    uv_run(&x.loop, UV_RUN_ONCE);
    xf_value_free(&v);
    rc = xf_get(w, x.key, strlen(x.key), &v);
  }
  uv_timer_stop(&x.later);
  cr_expect_eq(rc, XF_OK, "the entry's life was not extended: %s", xf_strerror(rc));
  cr_expect(rc != XF_OK || (v.len == 3 && !memcmp(v.data, "old", 3)), "the value kept");
  xf_value_free(&v);
  xf_client_close(w);
  cr_expect_eq(x.loads, 1);
  end(&x);
}

/* Closing the handle while a timed-out call's load is still running: its
 * late completion goes nowhere (no use of freed memory: the sanitizers). */
Test(async_loadctl, closing_with_a_moved_load_pending) {
  ctx x;
  open_ctx(&x, "aload:close");
  x.p.hard_timeout_ms = 100;
  call(&x, 0);
  while (!x.callers[0].fired)
    uv_run(&x.loop, UV_RUN_ONCE);
  cr_expect_eq(x.callers[0].rc, XF_ETIMEDOUT);
  xf_async_close(x.ac[0]);
  x.ac[0] = NULL;
  while (x.completed < x.loads)
    uv_run(&x.loop, UV_RUN_ONCE);
  end(&x);
}
