/* Conditional refresh: a loader that refreshes a value the entry holds is
 * given it (xf_sink_previous: the value and its age) and may answer
 * "unchanged" (xf_sink_unchanged): the entry's life is extended (touch.lua)
 * without rewriting its value, under a write's guards. Every driver
 * (op_drivers.c); real redis-server.
 *
 * Timing margins: the value is set with a 100 ms ttl and read 300 ms later
 * (past its ttl, within a 60 s stale window); the extended life is 60 s,
 * checked against a bound of 30 s, far beyond any delay of a busy machine.
 * The age is checked against 100 ms, below the 300 ms sleep. The validator
 * is stored with a 100 ms ttl and read 300 ms later, twice. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op_drivers.h"

static void count_revalidated(const xf_event *ev, void *ud) {
  if (ev->type == XF_EV_REVALIDATED)
    __atomic_add_fetch((int *)ud, 1, __ATOMIC_ACQ_REL);
}

static xf_policy revalidate_policy(void) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.stale_ms = 60000; /* the expired value stays in Redis: a previous to give */
  return p;
}

/* key holds value, past its ttl (within the stale window). */
static void an_expired_value(const char *key, const char *value) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
  xf_client *w = xft_client(0);
  xf_policy p = revalidate_policy();
  p.ttl_ms = 100;
  cr_assert_eq(xf_set(w, key, strlen(key), value, strlen(value), &p), XF_OK);
  xf_client_close(w);
  xft_sleep_ms(300); /* past its ttl */
}

static long long pttl(const char *key) {
  redisContext *r = xft_redis();
  long long ms = xft_int(r, "PTTL %s", key);
  redisFree(r);
  return ms;
}

static xft_drv *open_driver(int driver, int *events) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  o.on_event = count_revalidated;
  o.on_event_ud = events;
  return xft_drv_open(driver, &o);
}

ParameterizedTestParameters(revalidate, unchanged_keeps_the_value_and_extends_its_life) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, revalidate, unchanged_keeps_the_value_and_extends_its_life) {
  const char *name = xft_driver_names[*driver];
  char key[48];
  snprintf(key, sizeof key, "rv:unchanged:%s", name);
  an_expired_value(key, "v1");
  int events = 0;
  xft_drv *d = open_driver(*driver, &events);
  xf_policy p = revalidate_policy();
  xft_op_loader l = {.value = "v2", .unchanged = 1};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
  cr_expect_eq(rc, XF_OK, "%s: %s", name, xft_drv_errmsg(d));
  if (rc == XF_OK) {
    cr_expect_str_eq(v.data, "v1", "%s: the previous value", name);
    cr_expect_eq(v.source, XF_SOURCE_LOADER, "%s: source %d", name, v.source);
  }
  xf_value_free(&v);
  cr_expect_eq(l.calls, 1, "%s", name);
  cr_expect(l.had_previous, "%s: the loader was given no previous value", name);
  cr_expect_str_eq(l.previous, "v1", "%s", name);
  cr_expect(l.previous_age_ms >= 100 && l.previous_age_ms < 60000, "%s: age %lld ms", name,
            (long long)l.previous_age_ms);
  long long ms = pttl(key);
  cr_expect(ms > 30000, "%s: PTTL %lld: the entry's life not extended", name, ms);
  xf_stats st;
  xft_drv_stats(d, &st);
  cr_expect_eq(st.revalidated, 1, "%s: stats.revalidated %llu", name,
               (unsigned long long)st.revalidated);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 1, "%s: XF_EV_REVALIDATED",
               name);
  /* Now a fresh hit of the same value, no load. */
  xft_op_loader again = {.value = "v3"};
  rc = xft_drv_get_or_compute(d, key, &p, &again, &v);
  cr_expect_eq(rc, XF_OK, "%s", name);
  if (rc == XF_OK) {
    cr_expect_str_eq(v.data, "v1", "%s: the kept value", name);
    cr_expect_eq(v.source, XF_SOURCE_CACHE, "%s: a hit", name);
  }
  xf_value_free(&v);
  cr_expect_eq(again.calls, 0, "%s: loaded again", name);
  xft_drv_close(d);
}

/* An early refresh (XFetch, beta infinite: every call is elected) of a fresh
 * value: the loader is given it and answers "unchanged". */
ParameterizedTestParameters(revalidate, an_early_refresh_answered_unchanged) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, revalidate, an_early_refresh_answered_unchanged) {
  const char *name = xft_driver_names[*driver];
  char key[48];
  snprintf(key, sizeof key, "rv:early:%s", name);
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
  xf_client *w = xft_client(0);
  xf_policy set = XF_POLICY_INIT;
  set.ttl_ms = 5000;
  cr_assert_eq(xf_set(w, key, strlen(key), "e1", 2, &set), XF_OK);
  xf_client_close(w);
  int events = 0;
  xft_drv *d = open_driver(*driver, &events);
  xf_policy p = revalidate_policy();
  p.refresh_ahead = -1; /* XFetch */
  p.beta = INFINITY;
  p.background_refresh = XF_BACKGROUND_OFF;
  xft_op_loader l = {.value = "e2", .unchanged = 1};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
  cr_expect_eq(rc, XF_OK, "%s: %s", name, xft_drv_errmsg(d));
  if (rc == XF_OK)
    cr_expect_str_eq(v.data, "e1", "%s", name);
  xf_value_free(&v);
  cr_expect_eq(l.calls, 1, "%s: not elected", name);
  cr_expect_str_eq(l.previous, "e1", "%s", name);
  long long ms = pttl(key);
  cr_expect(ms > 30000, "%s: PTTL %lld: not extended", name, ms);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 1, "%s", name);
  xft_drv_close(d);
}

/* A miss has no previous value: "unchanged" is refused, the loader's value
 * is written. */
ParameterizedTestParameters(revalidate, a_miss_has_no_previous_value) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, revalidate, a_miss_has_no_previous_value) {
  const char *name = xft_driver_names[*driver];
  char key[48];
  snprintf(key, sizeof key, "rv:miss:%s", name);
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
  int events = 0;
  xft_drv *d = open_driver(*driver, &events);
  xf_policy p = revalidate_policy();
  xft_op_loader l = {.value = "fresh", .unchanged = 1};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
  cr_expect_eq(rc, XF_OK, "%s: %s", name, xft_drv_errmsg(d));
  if (rc == XF_OK)
    cr_expect_str_eq(v.data, "fresh", "%s", name);
  xf_value_free(&v);
  cr_expect_not(l.had_previous, "%s: a previous value on a miss", name);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 0, "%s", name);
  xft_drv_close(d);
}

/* A delete while the loader runs wins: the touch is refused, nothing comes
 * back to life; the caller gets the value uncached. */
static void delete_it(xft_drv *d, void *arg) {
  (void)d;
  xf_client *c = xft_client(0);
  cr_assert_eq(xf_delete(c, arg, strlen(arg)), XF_OK);
  xf_client_close(c);
}

ParameterizedTestParameters(revalidate, a_delete_during_the_load_wins) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, revalidate, a_delete_during_the_load_wins) {
  const char *name = xft_driver_names[*driver];
  char key[48];
  snprintf(key, sizeof key, "rv:delete:%s", name);
  an_expired_value(key, "v1");
  int events = 0;
  xft_drv *d = open_driver(*driver, &events);
  xf_policy p = revalidate_policy();
  xft_op_loader l = {.value = "v2", .unchanged = 1, .during = delete_it, .arg = key};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
  cr_expect_eq(rc, XF_OK, "%s: %s", name, xft_drv_errmsg(d));
  if (rc == XF_OK)
    cr_expect_eq(v.source, XF_SOURCE_UNCACHED, "%s: source %d", name, v.source);
  xf_value_free(&v);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 0, "%s: revalidated", name);
  xf_client *c = xft_client(0);
  rc = xf_get(c, key, strlen(key), &v);
  cr_expect_eq(rc, XF_ENOTFOUND, "%s: the deleted value came back (%d)", name, rc);
  xf_value_free(&v);
  xf_client_close(c);
  xft_drv_close(d);
}

/* A loader that fails after seeing the previous value caches nothing: the
 * entry keeps its old life. */
ParameterizedTestParameters(revalidate, a_loader_failure_is_not_cached) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, revalidate, a_loader_failure_is_not_cached) {
  const char *name = xft_driver_names[*driver];
  char key[48];
  snprintf(key, sizeof key, "rv:fail:%s", name);
  an_expired_value(key, "v1");
  long long before = pttl(key);
  int events = 0;
  xft_drv *d = open_driver(*driver, &events);
  xf_policy p = revalidate_policy();
  xft_op_loader l = {.fail = 7, .unchanged = 1};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
  cr_expect_eq(rc, XF_ELOADER, "%s: %d", name, rc);
  xf_value_free(&v);
  cr_expect(l.had_previous, "%s", name);
  long long after = pttl(key);
  cr_expect(after <= before, "%s: PTTL %lld, was %lld: extended", name, after, before);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 0, "%s", name);
  xf_client *c = xft_client(0);
  rc = xf_get(c, key, strlen(key), &v);
  cr_expect_eq(rc, XF_ENOTFOUND, "%s: an expired value served fresh (%d)", name, rc);
  xf_value_free(&v);
  xf_client_close(c);
  xft_drv_close(d);
}

Test(revalidate, the_event_has_a_name) {
  cr_expect_str_eq(xf_event_name(XF_EV_REVALIDATED), "revalidated");
}

/* The validator a loader stores with its value comes back to the next
 * refresh's loader with the previous value, and an "unchanged" answer keeps
 * it (format 2; a format-1 entry keeps none). */
ParameterizedTestParameters(revalidate, the_validator_round_trips) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, revalidate, the_validator_round_trips) {
  const char *name = xft_driver_names[*driver];
  int kept = xft_entry_format() != XF_ENTRY_HASH;
  char key[48];
  snprintf(key, sizeof key, "rv:validator:%s", name);
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  int events = 0;
  xft_drv *d = open_driver(*driver, &events);
  xf_policy p = revalidate_policy();
  p.ttl_ms = 100;
  xft_op_loader first = {.value = "v1", .validator = "etag-1"};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &first, &v);
  cr_expect_eq(rc, XF_OK, "%s: %s", name, xft_drv_errmsg(d));
  xf_value_free(&v);
  if (kept) {
    redisReply *raw = xft_cmd(r, "GETRANGE %s 1 1", key);
    cr_expect_eq(raw->str[0], 6, "%s: version %d", name, raw->str[0]);
    freeReplyObject(raw);
  }
  xft_sleep_ms(300); /* past its ttl */
  for (int round = 0; round < 2; round++) {
    xft_op_loader again = {.value = "v2", .unchanged = 1};
    rc = xft_drv_get_or_compute(d, key, &p, &again, &v);
    cr_expect_eq(rc, XF_OK, "%s: %s", name, xft_drv_errmsg(d));
    if (rc == XF_OK)
      cr_expect_str_eq(v.data, "v1", "%s round %d", name, round);
    xf_value_free(&v);
    cr_expect_str_eq(again.previous_validator, kept ? "etag-1" : "",
                     "%s round %d: the previous value's validator", name, round);
    xft_sleep_ms(300); /* past its ttl again: the touch kept the validator */
  }
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 2, "%s", name);
  xft_drv_close(d);
  redisFree(r);
}

static char *read_file(const char *path) {
  FILE *fp = fopen(path, "rb");
  cr_assert(fp, "%s", path);
  static char src[32768];
  size_t n = fread(src, 1, sizeof src - 1, fp);
  fclose(fp);
  src[n] = '\0';
  return src;
}

/* The previous version's reader (its read script, kept in tests/data) judges
 * an entry with a validator malformed: a miss, never a wrong value; an entry
 * without one it reads as before. */
Test(revalidate, the_previous_versions_reader_sees_a_validated_entry_as_a_miss) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 1 keeps no validator");
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = XF_ENTRY_STRING;
  xft_drv *d = xft_drv_open(XFT_BLOCKING, &o);
  xf_policy p = revalidate_policy();
  xft_op_loader with = {.value = "v1", .validator = "etag-1"};
  xft_op_loader without = {.value = "v0"};
  xf_value v;
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL rv:v6 rv:v3"));
  cr_assert_eq(xft_drv_get_or_compute(d, "rv:v6", &p, &with, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(xft_drv_get_or_compute(d, "rv:v3", &p, &without, &v), XF_OK);
  xf_value_free(&v);
  redisReply *raw = xft_cmd(r, "GETRANGE rv:v6 1 1");
  cr_expect_eq(raw->str[0], 6, "version %d", raw->str[0]);
  freeReplyObject(raw);
  const char *src = read_file(XFT_DATA_DIR "/read_v5.lua");
  redisReply *old = xft_cmd(r, "EVAL %s 1 rv:v6", src);
  cr_assert_eq(old->type, REDIS_REPLY_ARRAY, "%s", old->str ? old->str : "");
  cr_expect_eq(old->element[0]->type, REDIS_REPLY_NIL, "a value served");
  cr_expect_eq(old->element[4]->integer, 1, "not malformed");
  freeReplyObject(old);
  old = xft_cmd(r, "EVAL %s 1 rv:v3", src);
  cr_assert_eq(old->type, REDIS_REPLY_ARRAY);
  cr_expect_eq(old->element[0]->type, REDIS_REPLY_STRING,
               "an entry without one: its value");
  freeReplyObject(old);
  /* This version reads it (the plain GET and the read script alike). */
  xf_value got;
  xf_client *c = xft_client(0);
  cr_expect_eq(xf_get(c, "rv:v6", 5, &got), XF_OK);
  if (got.data)
    cr_expect_str_eq(got.data, "v1");
  xf_value_free(&got);
  xf_client_close(c);
  redisFree(r);
  xft_drv_close(d);
}

/* Off the request path: a background refresh (the share's refresh workers)
 * and a load that ran past its soft timeout (it goes on on the share's
 * workers) answer "unchanged": the entry is touched, not rewritten. On the
 * drivers whose loads run there: a pool and a blocking client, each with a
 * share. The loader sleeps 300 ms on the soft-timeout path (soft timeout
 * 50 ms); the outcome is polled for up to 10 s, far above that on a busy
 * machine. */
typedef struct off_path_case {
  int pool;         /* 0: a blocking client */
  int soft_timeout; /* 0: background_refresh */
} off_path_case;

typedef struct off_path_loader {
  int delay_ms;
  int calls;        /* atomic: the loader runs on a worker */
  int had_previous; /* atomic */
} off_path_loader;

static int unchanged_off_path(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  off_path_loader *l = ud;
  __atomic_add_fetch(&l->calls, 1, __ATOMIC_ACQ_REL);
  if (l->delay_ms)
    xft_sleep_ms(l->delay_ms);
  const void *prev = NULL;
  size_t n = 0;
  if (!xf_sink_previous(sink, &prev, &n, NULL))
    return xf_sink_set(sink, "fresh", 5) == XF_OK ? 0 : -1;
  /* read after the call was served the entry's value (the soft timeout) */
  if (n == 2 && !memcmp(prev, "o1", 2))
    __atomic_store_n(&l->had_previous, 1, __ATOMIC_RELEASE);
  return xf_sink_unchanged(sink) == XF_OK ? 0 : -1;
}

ParameterizedTestParameters(revalidate, a_load_off_the_request_path_answers_unchanged) {
  static off_path_case cases[] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  return cr_make_param_array(off_path_case, cases, 4);
}

ParameterizedTest(off_path_case *c, revalidate,
                  a_load_off_the_request_path_answers_unchanged) {
  const char *name = c->soft_timeout ? "soft_timeout" : "background";
  char key[64];
  snprintf(key, sizeof key, "rv:off:%s:%s", name, c->pool ? "pool" : "blocking");
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  xf_client *w = xft_client(0);
  xf_policy set = revalidate_policy();
  cr_assert_eq(xf_set(w, key, strlen(key), "o1", 2, &set), XF_OK);
  xf_client_close(w);
  freeReplyObject(xft_cmd(r, "PEXPIRE %s 5000", key)); /* so the extension shows */

  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  int events = 0;
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  o.on_event = count_revalidated;
  o.on_event_ud = &events;
  o.share = s;
  xf_pool *pool = NULL;
  xf_client *client = NULL;
  if (c->pool)
    cr_assert_eq(xf_pool_open(&pool, &o, 2, 0), XF_OK);
  else
    cr_assert_eq(xf_client_open(&client, &o), XF_OK);

  xf_policy p = revalidate_policy();
  p.refresh_ahead = -1; /* XFetch, beta infinite: every call is elected */
  p.beta = INFINITY;
  off_path_loader l = {0};
  if (c->soft_timeout) {
    p.background_refresh = XF_BACKGROUND_OFF;
    p.soft_timeout_ms = 50;
    l.delay_ms = 300;
  } else {
    p.background_refresh = XF_BACKGROUND_ON;
  }
  xf_value v;
  int rc =
      pool ? xf_pool_get_or_compute(pool, key, strlen(key), &p, unchanged_off_path, &l, &v)
           : xf_get_or_compute(client, key, strlen(key), &p, unchanged_off_path, &l, &v);
  cr_assert_eq(rc, XF_OK, "%s: rc %d", name, rc);
  cr_expect_str_eq(v.data, "o1", "%s: the current value, at once", name);
  xf_value_free(&v);
  for (int i = 0; i < 1000 && __atomic_load_n(&events, __ATOMIC_ACQUIRE) < 1; i++)
    xft_sleep_ms(10);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 1, "%s: XF_EV_REVALIDATED",
               name);
  cr_expect_eq(__atomic_load_n(&l.calls, __ATOMIC_ACQUIRE), 1, "%s: loads", name);
  cr_expect(__atomic_load_n(&l.had_previous, __ATOMIC_ACQUIRE),
            "%s: the loader was not given the previous value \"o1\"", name);
  long long ms = pttl(key);
  cr_expect(ms > 30000, "%s: PTTL %lld: the entry's life not extended", name, ms);
  xf_client *g = xft_client(0);
  cr_expect_eq(xf_get(g, key, strlen(key), &v), XF_OK);
  if (v.data)
    cr_expect_str_eq(v.data, "o1", "%s: the kept value", name);
  xf_value_free(&v);
  xf_client_close(g);
  xf_pool_close(pool);
  xf_client_close(client);
  xf_share_close(s);
  redisFree(r);
}
