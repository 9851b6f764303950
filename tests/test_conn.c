/* The blocking connection's reply wait (conn.c) with options.interrupt: a
 * server that stops answering (SIGSTOP) or answers late (CLIENT PAUSE) no
 * longer holds the call for the command timeout, and a connection left with
 * a reply in flight is never read again. Each test runs its own server: it
 * stops it. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "entry_peek.h"
#include "fixture.h"

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* The interrupt: fires once the clock passes *at (0 = never), and counts. */
typedef struct alarm_clock {
  long long at;
  int asked;
} alarm_clock;

static int ring(void *ud) {
  alarm_clock *a = ud;
  a->asked++;
  return a->at && mono_ms() >= a->at;
}

static xf_client *open_client(int port, alarm_clock *a) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  /* What ended the call before, and must not here: a timeout ends it with
   * another code than XF_ECANCELED, which is the check; 30 s so that a busy
   * machine (a call took 2.1 s under ASan beside two busy loops) cannot. */
  o.command_timeout_ms = 30000;
  o.interrupt = ring;
  o.interrupt_ud = a;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static int get(xf_client *c, const char *key, xft_loader *l, xf_value *v) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  return xf_get_or_compute(c, key, strlen(key), &p, xft_load, l, v);
}

static void expect_cached(xf_client *c, const char *key, const char *value) {
  xft_loader l = {.value = "from-loader", .len = 11};
  xf_value v;
  cr_expect_eq(get(c, key, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data ? v.data : "(null)", value);
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_value_free(&v);
}

/* A stopped server: the read's reply never comes. The interrupt fires after
 * ~100 ms and the call ends with XF_ECANCELED well before the 1.5 s command
 * timeout, without running the loader. Once the server is back, the next
 * call (another key) gets its own value from the cache: not the first
 * call's late reply, and no breaker tripped by the cancel. (Before: the call
 * waited the whole command timeout, then failed open to the loader.) */
Test(conn, interrupt_cuts_short_a_reply_that_does_not_come) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  alarm_clock a = {0};
  xf_client *c = open_client(s.port, &a);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  cr_assert_eq(xf_set(c, "conn:a", 6, "A", 1, &p), XF_OK);
  cr_assert_eq(xf_set(c, "conn:b", 6, "B", 1, &p), XF_OK);
  kill(s.pid, SIGSTOP);
  xft_loader l = {.value = "from-loader", .len = 11};
  xf_value v;
  long long t0 = mono_ms();
  a.at = t0 + 100;
  int rc = get(c, "conn:a", &l, &v);
  long long took = mono_ms() - t0;
  a.at = 0;
  kill(s.pid, SIGCONT);
  cr_expect_eq(rc, XF_ECANCELED, "%s: %s", xf_errname(rc), xf_errmsg(c));
  cr_expect_lt(took, 10000, "took %lld ms", took);
  cr_expect_geq(took, 90, "took %lld ms", took);
  cr_expect_eq(xft_loader_calls(&l), 0);
  cr_expect_null(v.data);
  expect_cached(c, "conn:b", "B");
  expect_cached(c, "conn:a", "A");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redis_errors, 0);
  xf_client_close(c);
  xft_server_stop(&s);
}

/* What the interrupted lease's test shares with its loader and interrupt. */
typedef struct paused {
  int port;
  int loaded; /* the loader ran: the lease is held, the write comes next */
  int asked;  /* the interrupt said stop */
} paused;

static int pause_then_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  paused *ps = ud;
  redisContext *r = xft_redis_port(ps->port);
  /* The write waits until the interrupt ends the pause (10 s: never reached). */
  freeReplyObject(xft_cmd(r, "CLIENT PAUSE 10000 WRITE"));
  redisFree(r);
  ps->loaded = 1;
  (void)key, (void)keylen;
  return xf_sink_set(sink, "loaded", 6);
}

/* Says stop once the write is waiting: first kills the call's connection, so
 * its paused write is dropped unrun, then ends the pause, so the release is
 * answered at once (within its grace, XF_CANCEL_GRACE_MS). */
static int stop_the_write(void *ud) {
  paused *ps = ud;
  if (!ps->loaded)
    return 0; /* a wait before the loader (a slow read or lease): go on */
  if (ps->asked++ == 0) {
    redisContext *r = xft_redis_port(ps->port);
    freeReplyObject(xft_cmd(r, "CLIENT KILL TYPE normal SKIPME yes"));
    freeReplyObject(xft_cmd(r, "CLIENT UNPAUSE"));
    redisFree(r);
  }
  return 1;
}

/* The caller holds the key's lease when the interrupt cuts its write's reply
 * wait short (the server pauses writes until then): the call ends with
 * XF_ECANCELED, and its lease is released on a fresh connection (without
 * asking the interrupt again, which still says stop) instead of being left
 * for lease_ms. No margin but the release's grace (250 ms) for an answer the
 * server gives at once; the call's time is not asserted. */
Test(conn, a_lease_held_when_interrupted_is_released) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  paused ps = {.port = s.port};
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.interrupt = stop_the_write;
  o.interrupt_ud = &ps;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.lease_ms = 60000;
  xf_value v;
  int rc = xf_get_or_compute(c, "conn:leased", 11, &p, pause_then_load, &ps, &v);
  cr_expect_eq(rc, XF_ECANCELED, "%s: %s", xf_errname(rc), xf_errmsg(c));
  cr_expect_null(v.data);
  cr_expect_geq(ps.asked, 1);
  redisContext *r = xft_redis_port(s.port);
  xft_peek e;
  xft_peek_read(r, "conn:leased", "", &e); /* either format */
  cr_expect_not(e.live, "lease left (%s)", e.kind);
  cr_expect_null(e.v, "the interrupted write ran");
  xft_peek_free(&e);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

/* The batch driver's pipeline waits the same way: every call of a batch
 * against a stopped server ends with XF_ECANCELED within a second, and the
 * next batch on the client reads the right values. (Before: the command
 * timeout, then every key failed open to the loader.) */
Test(conn, interrupt_cuts_short_a_pipeline_that_gets_no_reply) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  alarm_clock a = {0};
  xf_client *c = open_client(s.port, &a);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  const char *keys[] = {"conn:m1", "conn:m2", "conn:m3"};
  size_t lens[] = {7, 7, 7};
  for (int i = 0; i < 3; i++)
    cr_assert_eq(xf_set(c, keys[i], 7, keys[i], 7, &p), XF_OK);
  kill(s.pid, SIGSTOP);
  xft_loader l = {.value = "from-loader", .len = 11};
  xf_value v[3];
  int rcs[3];
  long long t0 = mono_ms();
  a.at = t0 + 100;
  int rc = xf_get_or_compute_many(c, 3, keys, lens, &p, xft_load, &l, v, rcs);
  long long took = mono_ms() - t0;
  a.at = 0;
  kill(s.pid, SIGCONT);
  cr_expect_eq(rc, XF_OK);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(rcs[i], XF_ECANCELED, "key %d: %s", i, xf_errname(rcs[i]));
    xf_value_free(&v[i]);
  }
  cr_expect_lt(took, 10000, "took %lld ms", took);
  cr_expect_eq(xft_loader_calls(&l), 0);
  const char *again[] = {"conn:m3", "conn:m1"};
  cr_expect_eq(xf_get_or_compute_many(c, 2, again, lens, &p, xft_load, &l, v, rcs), XF_OK);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(rcs[i], XF_OK, "%s", xf_errname(rcs[i]));
    cr_expect_str_eq(v[i].data ? v[i].data : "(null)", again[i]);
    cr_expect_eq(v[i].source, XF_SOURCE_CACHE);
    xf_value_free(&v[i]);
  }
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_client_close(c);
  xft_server_stop(&s);
}
