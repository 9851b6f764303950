/* Host names resolved off the event loop (stream_resolve.c), against the
 * fixture's real redis-server, each event-loop test on libuv and libevent:
 * a slow resolver (the xf__test_resolve_delay_ms hook: a DNS server that
 * takes its time) leaves the loop running its timers and calls; a name that
 * does not resolve fails the call open with a message naming it; the connect
 * timeout covers resolution (on the loop and for the blocking client). */
#define _DEFAULT_SOURCE /* <uv.h> under -std=c11 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <xfetch_libevent.h>
#include <xfetch_libuv.h>

#include "async.h"
#include "fixture.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define SLOW (RUNNING_ON_VALGRIND ? 4 : 1) /* every duration, under valgrind */

enum { LIBUV, LIBEVENT };

typedef struct run {
  int kind;
  uv_loop_t uv;
  uv_timer_t uv_timer;
  struct event_base *base;
  struct event *ev_timer;
  xf_async *ac;
  int64_t t0, timer_at, done_at; /* ms */
  int rc, source, loads;
  char conn_err[300], errmsg[300];
} run;

static void open_loop(run *r, int kind) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->timer_at = r->done_at = -1;
  if (kind == LIBUV)
    cr_assert_eq(uv_loop_init(&r->uv), 0);
  else
    cr_assert_not_null(r->base = event_base_new());
}

static void close_loop(run *r) {
  if (r->kind == LIBUV) {
    if (r->uv_timer.data)
      uv_close((uv_handle_t *)&r->uv_timer, NULL);
    uv_run(&r->uv, UV_RUN_DEFAULT); /* the closed handles' callbacks */
    cr_assert_eq(uv_loop_close(&r->uv), 0);
  } else {
    if (r->ev_timer)
      event_free(r->ev_timer);
    event_base_free(r->base);
  }
}

static int open_handle(run *r, const char *host, int connect_timeout_ms) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.port = xft_port();
  o.lazy_connect = 1;
  o.connect_timeout_ms = connect_timeout_ms;
  o.command_timeout_ms = 5000 * SLOW;
  o.key_prefix = "resolve:";
  return r->kind == LIBUV ? xf_async_open_libuv(&r->ac, &o, &r->uv)
                          : xf_async_open_libevent(&r->ac, &o, r->base);
}

static void uv_fired(uv_timer_t *t) {
  run *r = t->data;
  r->timer_at = xft_now_ms();
}

static void ev_fired(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  run *r = arg;
  r->timer_at = xft_now_ms();
}

/* Another thing on the same loop: a timer due after ms. */
static void start_timer(run *r, int ms) {
  if (r->kind == LIBUV) {
    uv_timer_init(&r->uv, &r->uv_timer);
    r->uv_timer.data = r;
    uv_timer_start(&r->uv_timer, uv_fired, (uint64_t)ms, 0);
  } else {
    r->ev_timer = evtimer_new(r->base, ev_fired, r);
    struct timeval tv = {0, ms * 1000};
    evtimer_add(r->ev_timer, &tv);
  }
}

static void loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  ((run *)ud)->loads++;
  xf_async_load_done(load, "resolved", 8);
}

static void on_done(int rc, const xf_value *v, void *privdata) {
  run *r = privdata;
  r->rc = rc;
  r->source = v ? (int)v->source : -1;
  r->done_at = xft_now_ms();
  snprintf(r->conn_err, sizeof r->conn_err, "%s", r->ac->core->conn_err);
  snprintf(r->errmsg, sizeof r->errmsg, "%s", xf_async_errmsg(r->ac));
  xf_async_close(r->ac);
}

/* One call of key on the open handle; the loop runs until it is over. How
 * long xf_async_get_or_compute itself took is returned (ms). */
static int64_t call(run *r, const char *key) {
  xf_policy p = XF_POLICY_INIT;
  int64_t at = xft_now_ms();
  cr_assert_eq(xf_async_get_or_compute(r->ac, key, strlen(key), &p, loader, r, on_done, r),
               XF_OK);
  int64_t took = xft_now_ms() - at;
  if (r->kind == LIBUV)
    uv_run(&r->uv, UV_RUN_DEFAULT);
  else
    event_base_dispatch(r->base);
  return took;
}

static void unique_key(char *buf, size_t len, const char *what, int kind) {
  snprintf(buf, len, "%s:%s:%d", what, kind == LIBUV ? "uv" : "ev", (int)getpid());
}

ParameterizedTestParameters(resolve, a_slow_resolver_does_not_block_the_loop) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
/* The resolver takes 1.5 s: the call returns at once, a 20 ms timer on the
 * same loop fires long before the call's callback (both asserted within half
 * the resolver's time: 730 ms for a busy machine), and "localhost" then
 * serves a miss and a hit. Before the resolver thread the call itself took
 * the resolver's time (getaddrinfo on the loop's thread) and the timer waited. */
ParameterizedTest(int *kind, resolve, a_slow_resolver_does_not_block_the_loop) {
  const int delay = 1500 * SLOW;
  char key[80];
  unique_key(key, sizeof key, "slow", *kind);
  __atomic_store_n(&xf__test_resolve_delay_ms, (unsigned)delay, __ATOMIC_RELAXED);
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, "localhost", 5000 * SLOW), XF_OK);
  r.t0 = xft_now_ms();
  start_timer(&r, 20);
  int64_t took = call(&r, key);
  cr_expect_lt(took, delay / 2, "the call waited on the resolver: %lld ms",
               (long long)took);
  cr_assert_geq(r.timer_at, 0, "the timer never fired");
  cr_expect_lt(r.timer_at - r.t0, delay / 2, "the timer fired after %lld ms",
               (long long)(r.timer_at - r.t0));
  cr_expect_lt(r.timer_at, r.done_at, "the timer fired after the call was over");
  cr_expect_geq(r.done_at - r.t0, delay - 50, "the call did not wait for its address");
  cr_expect_eq(r.rc, XF_OK, "%s", r.conn_err);
  cr_expect_eq(r.source, XF_SOURCE_LOADER, "%s", r.conn_err);
  close_loop(&r);

  __atomic_store_n(&xf__test_resolve_delay_ms, 0, __ATOMIC_RELAXED);
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, "localhost", 5000 * SLOW), XF_OK);
  call(&r, key);
  cr_expect_eq(r.rc, XF_OK, "%s", r.conn_err);
  cr_expect_eq(r.source, XF_SOURCE_CACHE, "localhost's second call is a hit: %s",
               r.conn_err);
  cr_expect_eq(r.loads, 0);
  close_loop(&r);
}

ParameterizedTestParameters(resolve, a_host_that_does_not_resolve_fails_open_naming_it) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
ParameterizedTest(int *kind, resolve, a_host_that_does_not_resolve_fails_open_naming_it) {
  char key[80];
  unique_key(key, sizeof key, "nohost", *kind);
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, "nosuch.invalid", 5000 * SLOW), XF_OK);
  call(&r, key);
  cr_expect_eq(r.rc, XF_OK);
  cr_expect_eq(r.source, XF_SOURCE_UNCACHED, "a server that cannot be reached: fail open");
  cr_expect_eq(r.loads, 1);
  cr_expect(strstr(r.conn_err, "cannot resolve nosuch.invalid"), "conn_err: %s",
            r.conn_err);
  close_loop(&r);
}

ParameterizedTestParameters(resolve, the_connect_timeout_covers_resolution) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
/* A resolver slower than the connect timeout: the call fails open at the
 * timeout, saying so, not when the resolver answers. */
ParameterizedTest(int *kind, resolve, the_connect_timeout_covers_resolution) {
  const int delay = 1500 * SLOW, timeout = 200 * SLOW;
  char key[80];
  unique_key(key, sizeof key, "late", *kind);
  __atomic_store_n(&xf__test_resolve_delay_ms, (unsigned)delay, __ATOMIC_RELAXED);
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, "localhost", timeout), XF_OK);
  r.t0 = xft_now_ms();
  call(&r, key);
  cr_expect_eq(r.source, XF_SOURCE_UNCACHED, "%s", r.conn_err);
  cr_expect_lt(r.done_at - r.t0, delay - 300 * SLOW, "over after %lld ms",
               (long long)(r.done_at - r.t0));
  cr_expect(strstr(r.conn_err, "cannot resolve localhost") &&
                strstr(r.conn_err, "no answer"),
            "conn_err: %s", r.conn_err);
  close_loop(&r);
  xft_sleep_ms(delay); /* the resolver's thread ends and frees its job */
}

/* "twice.test": a refused address first (a port nobody listens on), then
 * the fixture's server: a host with an IPv6 and an IPv4 address where
 * the server listens on one only (localhost on most machines). Both ports
 * are set by the test: the hook runs on the resolver's thread, where no
 * assertion may run (xft_port's). */
static int refused_port, served_port;

static int two_addresses(const char *host, const char *service,
                         const struct addrinfo *hints, struct addrinfo **res) {
  (void)service;
  struct addrinfo h = *hints, *first = NULL, *second = NULL;
  h.ai_flags |= AI_NUMERICHOST;
  char port[16];
  snprintf(port, sizeof port, "%d", refused_port);
  if (strcmp(host, "twice.test") != 0)
    return getaddrinfo(host, service, hints, res);
  int rc = getaddrinfo("127.0.0.1", port, &h, &first);
  snprintf(port, sizeof port, "%d", served_port);
  if (rc == 0 && (rc = getaddrinfo("127.0.0.1", port, &h, &second)) != 0)
    freeaddrinfo(first);
  if (rc == 0) {
    first->ai_next = second; /* one list: freeaddrinfo frees both */
    *res = first;
  }
  return rc;
}

ParameterizedTestParameters(resolve, a_refused_first_address_moves_on_to_the_next) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
/* The first address refuses after the loop watched its socket; the next
 * socket (often given the same descriptor number) must be watched anew. */
ParameterizedTest(int *kind, resolve, a_refused_first_address_moves_on_to_the_next) {
  xft_server gone;
  cr_assert_eq(xft_server_start(&gone, NULL), 0);
  refused_port = gone.port;
  xft_server_stop(&gone);
  served_port = xft_port();
  xf__test_getaddrinfo = two_addresses;
  char key[80];
  unique_key(key, sizeof key, "twice", *kind);
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, "twice.test", 3000 * SLOW), XF_OK);
  r.t0 = xft_now_ms();
  call(&r, key);
  cr_expect_eq(r.rc, XF_OK, "%s", r.conn_err);
  cr_expect_eq(r.source, XF_SOURCE_LOADER,
               "the second address served it: %s (after %lld ms)", r.conn_err,
               (long long)(r.done_at - r.t0));
  cr_expect_lt(r.done_at - r.t0, 1500 * SLOW,
               "over after %lld ms: the next address's socket was not watched (the "
               "watchdog found it connected at the 3000 ms connect timeout)",
               (long long)(r.done_at - r.t0));
  close_loop(&r);
}

/* The blocking client's connect timeout covers resolution too. */
Test(resolve, the_blocking_connect_timeout_covers_resolution) {
  const int delay = 1500 * SLOW, timeout = 200 * SLOW;
  __atomic_store_n(&xf__test_resolve_delay_ms, (unsigned)delay, __ATOMIC_RELAXED);
  xf_options o = XF_OPTIONS_INIT;
  o.host = "localhost";
  o.port = xft_port();
  o.connect_timeout_ms = timeout;
  xf_client *c = NULL;
  int64_t t0 = xft_now_ms();
  int rc = xf_client_open(&c, &o);
  int64_t took = xft_now_ms() - t0;
  cr_expect_eq(rc, XF_ECONNECT);
  cr_expect_lt(took, delay - 300 * SLOW, "xf_client_open took %lld ms", (long long)took);
  xf_client_close(c);
  xft_sleep_ms(delay);
}
