/* The event-loop driver (xf_async_*) on a libevent event_base against a real
 * Redis: the same flow as on libuv (test_async.c), through the other adapter. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <xfetch_libevent.h>

#include "fixture.h"

typedef struct run {
  struct event_base *base;
  xf_async *ac;
  int n, fired, wrong, loader_calls;
  int *seen;
  int by_source[4];
  const char *want;
} run;

typedef struct slot {
  run *r;
  int i;
} slot;

static void on_done(int rc, const xf_value *v, void *privdata) {
  slot *s = privdata;
  run *r = s->r;
  r->seen[s->i]++;
  if (rc != XF_OK || v->len != strlen(r->want) || memcmp(v->data, r->want, v->len) != 0)
    r->wrong++;
  else
    r->by_source[v->source]++;
  if (++r->fired == r->n)
    xf_async_close(r->ac);
}

typedef struct later {
  run *r;
  xf_async_load *load;
  struct event *ev;
} later;

static void later_fired(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  later *w = arg;
  cr_expect_eq(xf_async_load_done(w->load, w->r->want, strlen(w->r->want)), XF_OK);
  event_free(w->ev);
  free(w);
}

/* Completes 20 ms later, from a libevent timer. */
static void loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key;
  (void)keylen;
  run *r = ud;
  r->loader_calls++;
  later *w = calloc(1, sizeof *w);
  w->r = r;
  w->load = load;
  w->ev = evtimer_new(r->base, later_fired, w);
  struct timeval tv = {0, 20000};
  evtimer_add(w->ev, &tv);
}

static void run_calls(int port, int lazy, int n, const char *key, run *r) {
  r->base = event_base_new();
  cr_assert_not_null(r->base);
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.lazy_connect = lazy;
  o.breaker_ms = -1;
  cr_assert_eq(xf_async_open_libevent(&r->ac, &o, r->base), XF_OK);
  r->n = n;
  r->seen = calloc((size_t)n, sizeof *r->seen);
  slot *slots = calloc((size_t)n, sizeof *slots);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  for (int i = 0; i < n; i++) {
    slots[i] = (slot){r, i};
    cr_assert_eq(
        xf_async_get_or_compute(r->ac, key, strlen(key), &p, loader, r, on_done, &slots[i]),
        XF_OK);
  }
  event_base_dispatch(r->base);
  for (int i = 0; i < n; i++)
    cr_expect_eq(r->seen[i], 1, "callback %d fired %d times", i, r->seen[i]);
  free(slots);
  free(r->seen);
  event_base_free(r->base);
}

Test(async_libevent, thousand_calls_on_a_cold_hot_key_load_once) {
  run r = {.want = "libevent-hot"};
  run_calls(xft_port(), 0, 1000, "async-ev:hot", &r);
  cr_expect_eq(r.loader_calls, 1);
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(r.by_source[XF_SOURCE_LOADER], 1);
  cr_expect_eq(r.by_source[XF_SOURCE_CACHE], 999);
}

Test(async_libevent, redis_down_fails_open) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  int port = s.port;
  xft_server_stop(&s);
  run r = {.want = "uncached"};
  run_calls(port, 1, 3, "async-ev:down", &r);
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(r.by_source[XF_SOURCE_UNCACHED], 3);
}
