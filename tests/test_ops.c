/* Every driver offers the same operations, each one flow kind: get-or-compute,
 * get, set and delete (and the batch where a driver has one) run the same
 * assertions on the blocking client, the pool, the event loop (xf_async on
 * libevent and on libuv) and the sans-I/O call (op_drivers.h), against a real
 * redis-server. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>
#include <xfetch_libevent.h>

#include "op_drivers.h"

static xf_options options(void) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.seed = 29;
  o.entry_format = xft_entry_format();
  return o;
}

/* This test's key on this driver: tests run in parallel. */
static const char *key_of(char *buf, size_t size, const char *test, int driver) {
  snprintf(buf, size, "ops:%s:%s", test, xft_driver_names[driver]);
  return buf;
}

static void del(const char *key) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
}

/* A get of key: rc, and on XF_OK the value want from source. */
static void expect_get(xft_drv *d, const char *what, const char *key, int rc,
                       const char *want, xf_source source) {
  xf_value v;
  int got = xft_drv_get(d, key, &v);
  cr_expect_eq(got, rc, "%s: get %s: %s (%s)", what, key, xf_strerror(got),
               xft_drv_errmsg(d));
  if (got == XF_OK && rc == XF_OK) {
    cr_expect_str_eq(v.data, want, "%s: get %s", what, key);
    cr_expect_eq(v.source, source, "%s: get %s: source %d", what, key, v.source);
  }
  xf_value_free(&v);
}

/* A get-or-compute of key with l: XF_OK with want from source. */
static void expect_goc(xft_drv *d, const char *what, const char *key, const xf_policy *p,
                       xft_op_loader *l, const char *want, xf_source source) {
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, p, l, &v);
  cr_assert_eq(rc, XF_OK, "%s: get-or-compute %s: %s (%s)", what, key, xf_strerror(rc),
               xft_drv_errmsg(d));
  cr_expect_str_eq(v.data, want, "%s: get-or-compute %s", what, key);
  cr_expect_eq(v.source, source, "%s: get-or-compute %s: source %d", what, key, v.source);
  xf_value_free(&v);
}

ParameterizedTestParameters(ops, get_or_compute) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A miss loads once; the next call is a hit. */
ParameterizedTest(int *driver, ops, get_or_compute) {
  const char *what = xft_driver_names[*driver];
  char key[64];
  key_of(key, sizeof key, "goc", *driver);
  del(key);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  xf_policy p = XF_POLICY_INIT;
  xft_op_loader l = {.value = "loaded"};
  expect_goc(d, what, key, &p, &l, "loaded", XF_SOURCE_LOADER);
  expect_goc(d, what, key, &p, &l, "loaded", XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 1, "%s: %d loads", what, l.calls);
  xft_drv_close(d);
}

ParameterizedTestParameters(ops, get) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A fresh value is read; a missing key and a cached not-found are
 * XF_ENOTFOUND; a get loads nothing. */
ParameterizedTest(int *driver, ops, get) {
  const char *what = xft_driver_names[*driver];
  char key[64], none[64], gone[64];
  key_of(key, sizeof key, "get", *driver);
  key_of(none, sizeof none, "get-missing", *driver);
  key_of(gone, sizeof gone, "get-not-found", *driver);
  del(key), del(none), del(gone);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  xf_policy p = XF_POLICY_INIT;
  xft_op_loader l = {.value = "fresh"};
  expect_goc(d, what, key, &p, &l, "fresh", XF_SOURCE_LOADER);
  expect_get(d, what, key, XF_OK, "fresh", XF_SOURCE_CACHE);
  expect_get(d, what, none, XF_ENOTFOUND, NULL, 0);
  p.negative_ttl_ms = 60000;
  xft_op_loader nothing = {.value = NULL};
  xf_value v;
  cr_expect_eq(xft_drv_get_or_compute(d, gone, &p, &nothing, &v), XF_ENOTFOUND, "%s", what);
  expect_get(d, what, gone, XF_ENOTFOUND, NULL, 0);
  redisContext *r = xft_redis();
  cr_expect_eq(xft_int(r, "EXISTS %s", gone), 1, "%s: the not-found is cached", what);
  redisFree(r);
  cr_expect_eq(xft_drv_get_or_compute(d, gone, &p, &nothing, &v), XF_ENOTFOUND, "%s", what);
  cr_expect_eq(nothing.calls, 1, "%s: the cached not-found loaded again", what);
  cr_expect_eq(l.calls, 1, "%s: a get loaded", what);
  xft_drv_close(d);
}

ParameterizedTestParameters(ops, set) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A set is read back by get and served by get-or-compute without a load; a
 * set refused by a newer value is XF_ESUPERSEDED and writes nothing. */
ParameterizedTest(int *driver, ops, set) {
  const char *what = xft_driver_names[*driver];
  char key[64], newer[64];
  key_of(key, sizeof key, "set", *driver);
  key_of(newer, sizeof newer, "set-newer", *driver);
  del(key);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xft_drv_set(d, key, "written", &p), XF_OK, "%s: %s", what,
               xft_drv_errmsg(d));
  expect_get(d, what, key, XF_OK, "written", XF_SOURCE_CACHE);
  xft_op_loader l = {.value = "loaded"};
  expect_goc(d, what, key, &p, &l, "written", XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 0, "%s: the set value was loaded again", what);
  /* An entry dated in the future (s), as after the server's clock stepped
   * back: in format 1, which every client reads. */
  redisContext *r = xft_redis();
  long long now = xft_server_ms(r);
  freeReplyObject(xft_cmd(r, "DEL %s", newer));
  freeReplyObject(
      xft_cmd(r, "HSET %s v newer d 0 e %lld s %lld", newer, now + 60000, now + 30000));
  freeReplyObject(xft_cmd(r, "PEXPIRE %s 60000", newer));
  redisFree(r);
  int rc = xft_drv_set(d, newer, "older", &p);
  cr_expect_eq(rc, XF_ESUPERSEDED, "%s: %s (%s)", what, xf_strerror(rc), xft_drv_errmsg(d));
  expect_get(d, what, newer, XF_OK, "newer", XF_SOURCE_CACHE);
  xft_drv_close(d);
}

ParameterizedTestParameters(ops, delete) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

typedef struct deleting {
  const char *key;
  int rc;
} deleting;

static void delete_it(xft_drv *d, void *arg) {
  deleting *x = arg;
  x->rc = xft_drv_delete(d, x->key);
}

/* A delete makes the next get-or-compute load again; a delete made while a
 * load runs wins: that load's value goes back to its caller uncached (the
 * tombstone refuses its write), and the next call loads again. Deleting a
 * missing key is XF_OK. */
ParameterizedTest(int *driver, ops, delete) {
  const char *what = xft_driver_names[*driver];
  char key[64], during[64];
  key_of(key, sizeof key, "delete", *driver);
  key_of(during, sizeof during, "delete-during-load", *driver);
  del(key), del(during);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xft_drv_set(d, key, "old", &p), XF_OK, "%s", what);
  cr_assert_eq(xft_drv_delete(d, key), XF_OK, "%s: %s", what, xft_drv_errmsg(d));
  expect_get(d, what, key, XF_ENOTFOUND, NULL, 0);
  xft_op_loader l = {.value = "reloaded"};
  expect_goc(d, what, key, &p, &l, "reloaded", XF_SOURCE_LOADER);
  cr_expect_eq(l.calls, 1, "%s: %d loads after the delete", what, l.calls);
  cr_expect_eq(xft_drv_delete(d, key), XF_OK, "%s", what);
  cr_expect_eq(xft_drv_delete(d, key), XF_OK, "%s: a missing key", what);

  deleting x = {.key = during, .rc = -100};
  xft_op_loader racing = {.value = "before-delete", .during = delete_it, .arg = &x};
  expect_goc(d, what, during, &p, &racing, "before-delete", XF_SOURCE_UNCACHED);
  cr_expect_eq(x.rc, XF_OK, "%s: the delete during the load: %s", what, xf_strerror(x.rc));
  expect_get(d, what, during, XF_ENOTFOUND, NULL, 0);
  xft_op_loader after = {.value = "after-delete"};
  expect_goc(d, what, during, &p, &after, "after-delete", XF_SOURCE_LOADER);
  cr_expect_eq(after.calls, 1, "%s", what);
  xft_drv_close(d);
}

ParameterizedTestParameters(ops, batch) {
  static int drivers[] = {XFT_BLOCKING, XFT_POOL};
  return cr_make_param_array(int, drivers, sizeof drivers / sizeof *drivers);
}

/* A batch serves what is cached and loads what is missing, per key. */
ParameterizedTest(int *driver, ops, batch) {
  const char *what = xft_driver_names[*driver];
  char cached[64], missing[64];
  key_of(cached, sizeof cached, "batch-cached", *driver);
  key_of(missing, sizeof missing, "batch-missing", *driver);
  del(cached), del(missing);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xft_drv_set(d, cached, "cached", &p), XF_OK, "%s", what);
  const char *keys[2] = {cached, missing};
  xf_value vs[2];
  int rcs[2];
  xft_op_loader l = {.value = "loaded"};
  cr_assert_eq(xft_drv_many(d, 2, keys, &p, &l, vs, rcs), XF_OK, "%s: %s", what,
               xft_drv_errmsg(d));
  cr_expect_eq(rcs[0], XF_OK, "%s", what);
  cr_expect_eq(rcs[1], XF_OK, "%s", what);
  if (rcs[0] == XF_OK) {
    cr_expect_str_eq(vs[0].data, "cached", "%s", what);
    cr_expect_eq(vs[0].source, XF_SOURCE_CACHE, "%s", what);
  }
  if (rcs[1] == XF_OK) {
    cr_expect_str_eq(vs[1].data, "loaded", "%s", what);
    cr_expect_eq(vs[1].source, XF_SOURCE_LOADER, "%s", what);
  }
  cr_expect_eq(l.calls, 1, "%s: %d loads", what, l.calls);
  xf_value_free(&vs[0]);
  xf_value_free(&vs[1]);
  cr_expect_eq(xft_drv_many(d, 0, NULL, &p, &l, NULL, NULL), XF_OK, "%s: n == 0", what);
  xft_drv_close(d);
}

/* ---- what each start refuses, and what it keeps ---------------------------------- */

static void never(int rc, void *privdata) {
  (void)rc, (void)privdata;
  cr_assert_fail("a refused call called back");
}

static void never_value(int rc, const xf_value *v, void *privdata) {
  (void)v;
  never(rc, privdata);
}

/* A refused start returns its code and never calls back. */
Test(ops, async_starts_refuse_bad_arguments) {
  struct event_base *base = event_base_new();
  cr_assert_not_null(base);
  xf_options o = options();
  o.max_value_len = 4;
  xf_async *ac;
  cr_assert_eq(xf_async_open_libevent(&ac, &o, base), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_expect_eq(xf_async_get(NULL, "k", 1, never_value, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_get(ac, "k", 1, NULL, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_get(ac, NULL, 1, never_value, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_get(ac, "k", 0, never_value, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_set(ac, "k", 1, "v", 1, NULL, never, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_set(ac, "k", 1, NULL, 1, &p, never, NULL), XF_EINVAL);
  cr_expect(strstr(xf_async_errmsg(ac), "data is NULL"), "%s", xf_async_errmsg(ac));
  cr_expect_eq(xf_async_set(ac, "k", 1, "12345", 5, &p, never, NULL), XF_EINVAL);
  cr_expect(strstr(xf_async_errmsg(ac), "max_value_len"), "%s", xf_async_errmsg(ac));
  cr_expect_eq(xf_async_set(ac, "k", 1, "v", 1, &p, NULL, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_delete(ac, "", 0, never, NULL), XF_EINVAL);
  cr_expect_eq(xf_async_delete(ac, "k", 1, NULL, NULL), XF_EINVAL);
  event_base_loop(base, EVLOOP_NONBLOCK);
  xf_async_close(ac);
  event_base_free(base);
}

Test(ops, pool_get_refuses_bad_arguments) {
  xf_options o = options();
  xf_pool *pool;
  cr_assert_eq(xf_pool_open(&pool, &o, 1, 0), XF_OK);
  xf_value v;
  cr_expect_eq(xf_pool_get(NULL, "k", 1, &v), XF_EINVAL);
  cr_expect_eq(xf_pool_get(pool, "k", 1, NULL), XF_EINVAL);
  cr_expect_str_eq(xf_pool_errmsg(), "out is NULL");
  cr_expect_eq(xf_pool_get(pool, NULL, 1, &v), XF_EINVAL);
  cr_expect_eq(xf_pool_get(pool, "", 0, &v), XF_EINVAL);
  cr_expect_str_eq(xf_pool_errmsg(), "key is empty");
  xf_pool_close(pool);
}

/* Closing the handle ends an unfinished set, get or delete: its callback
 * fires once, with XF_ECANCELED. */
typedef struct ended {
  int calls, rc;
} ended;

static void on_end(int rc, void *privdata) {
  ended *e = privdata;
  e->calls++;
  e->rc = rc;
}

static void on_end_value(int rc, const xf_value *v, void *privdata) {
  cr_expect_null(v);
  on_end(rc, privdata);
}

Test(ops, closing_the_loop_handle_ends_its_sets_gets_and_deletes) {
  struct event_base *base = event_base_new();
  cr_assert_not_null(base);
  xf_options o = options();
  xf_async *ac;
  cr_assert_eq(xf_async_open_libevent(&ac, &o, base), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  ended e[3] = {{0}};
  cr_assert_eq(xf_async_set(ac, "ops:closed", 10, "v", 1, &p, on_end, &e[0]), XF_OK);
  cr_assert_eq(xf_async_get(ac, "ops:closed", 10, on_end_value, &e[1]), XF_OK);
  cr_assert_eq(xf_async_delete(ac, "ops:closed", 10, on_end, &e[2]), XF_OK);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(e[i].calls, 0, "call %d called back from its start", i);
  xf_async_close(ac);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(e[i].calls, 1, "call %d", i);
    cr_expect_eq(e[i].rc, XF_ECANCELED, "call %d: %s", i, xf_strerror(e[i].rc));
  }
  event_base_free(base);
}

/* An event-loop call outlives its start: what it reports (events) names the
 * key it was given, even once the caller's buffer holds something else. */
typedef struct seen {
  const char *want;
  int events, wrong;
  int done, rc;
} seen;

static void record(const xf_event *ev, void *ud) {
  seen *s = ud;
  if (!ev->key)
    return; /* a connection's event */
  s->events++;
  if (ev->keylen != strlen(s->want) || memcmp(ev->key, s->want, ev->keylen) != 0)
    s->wrong++;
}

static void loaded_now(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)ud, (void)key, (void)keylen;
  xf_async_load_done(load, "v", 1);
}

static void finished(int rc, const xf_value *v, void *privdata) {
  (void)v;
  seen *s = privdata;
  s->rc = rc;
  s->done = 1;
}

Test(ops, an_async_calls_events_name_its_key_after_its_buffer_is_reused) {
  struct event_base *base = event_base_new();
  cr_assert_not_null(base);
  seen s = {.want = "ops:events"};
  del(s.want);
  xf_options o = options();
  o.on_event = record;
  o.on_event_ud = &s;
  xf_async *ac;
  cr_assert_eq(xf_async_open_libevent(&ac, &o, base), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  char key[16];
  strcpy(key, s.want);
  cr_assert_eq(
      xf_async_get_or_compute(ac, key, strlen(key), &p, loaded_now, NULL, finished, &s),
      XF_OK);
  memset(key, 'X', strlen(key)); /* the caller's buffer, reused */
  while (!s.done)
    event_base_loop(base, EVLOOP_ONCE);
  cr_expect_eq(s.rc, XF_OK, "%s", xf_strerror(s.rc));
  cr_expect_gt(s.events, 0, "no event named a key");
  cr_expect_eq(s.wrong, 0, "%d of %d events named another key", s.wrong, s.events);
  xf_async_close(ac);
  event_base_free(base);
}

ParameterizedTestParameters(ops, a_connection_the_server_closed_is_resent) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* The server closing a working connection (CLIENT KILL, as an idle timeout
 * or a proxy's cut-off would) is no server down, on every driver: the next
 * call's command goes once more on a new connection and is a hit; nothing
 * is counted as a Redis error, the breaker stays closed. */
ParameterizedTest(int *driver, ops, a_connection_the_server_closed_is_resent) {
  xft_server srv; /* its own: the kill must reach no other test's connection */
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = srv.port;
  o.entry_format = xft_entry_format();
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *what = xft_driver_names[*driver], *key = "ops:killed";
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.beta = 0; /* no early refresh: the second call is a hit */
  xft_op_loader l = {.value = "v1"};
  expect_goc(d, what, key, &p, &l, "v1", XF_SOURCE_LOADER);
  redisContext *r = xft_redis_port(srv.port);
  cr_assert_geq(xft_int(r, "CLIENT KILL TYPE normal SKIPME yes"), 1, "%s: killed none",
                what);
  expect_goc(d, what, key, &p, &l, "v1", XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 1, "%s: loaded once", what);
  xf_stats st;
  xft_drv_stats(d, &st);
  cr_expect_eq(st.redis_errors, 0, "%s: %llu Redis errors", what,
               (unsigned long long)st.redis_errors);
  expect_goc(d, what, key, &p, &l, "v1", XF_SOURCE_CACHE);
  redisFree(r);
  xft_drv_close(d);
  xft_server_stop(&srv);
}
