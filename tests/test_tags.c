/* Tags (policy.tags, xf_invalidate_tags) and namespaces (options.namespace_tag,
 * xf_clear_namespace): an entry loaded before an invalidation is never served
 * fresh after it returns, on every driver (op_drivers.h); an invalidation
 * during a load wins; untagged entries and other tags are untouched; a tagged
 * hot key loads once per episode; a version-3 reader (a client that knows no tags) judges a
 * tagged entry malformed. Real redis-server. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xfetch_libevent.h>

#include "clock.h"
#include "near_env.h"
#include "op_drivers.h"
#include "thread_fail.h"

static xf_options options(void) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.seed = 31;
  return o;
}

static void key_of(char *buf, size_t size, const char *test, int driver) {
  snprintf(buf, size, "tags:%s:%s", test, xft_driver_names[driver]);
}

static void del(const char *key) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
}

/* A get-or-compute of key with l: XF_OK with want from source. */
static void expect_goc(xft_drv *d, const char *what, const char *key, const xf_policy *p,
                       xft_op_loader *l, const char *want, xf_source source) {
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, p, l, &v);
  cr_assert_eq(rc, XF_OK, "%s: get-or-compute %s: %s (%s)", what, key, xf_strerror(rc),
               xft_drv_errmsg(d));
  cr_expect_str_eq(v.data, want, "%s: get-or-compute %s", what, key);
  cr_expect_eq(v.source, source, "%s: get-or-compute %s: source %d, want %d", what, key,
               v.source, source);
  xf_value_free(&v);
}

/* Invalidates tags with a client of its own (another process's, as it were). */
static void invalidate(const char *const *tags, size_t n) {
  xf_client *c = xft_client(0);
  int rc = xf_invalidate_tags(c, tags, n);
  cr_assert_eq(rc, XF_OK, "xf_invalidate_tags: %s (%s)", xf_strerror(rc), xf_errmsg(c));
  xf_client_close(c);
}

ParameterizedTestParameters(tags, invalidate) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A tagged entry is a hit until one of its tags is invalidated, then a miss
 * loaded once; an untagged entry and an entry of another tag stay hits. */
ParameterizedTest(int *driver, tags, invalidate) {
  const char *what = xft_driver_names[*driver];
  char key[64], plain[64], other[64], tag[64], tag2[64];
  key_of(key, sizeof key, "tagged", *driver);
  key_of(plain, sizeof plain, "untagged", *driver);
  key_of(other, sizeof other, "other", *driver);
  snprintf(tag, sizeof tag, "user:%s", what);
  snprintf(tag2, sizeof tag2, "other:%s", what);
  del(key), del(plain), del(other);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *tags[] = {tag, "catalogue"}, *tags2[] = {tag2};
  xf_policy p = XF_POLICY_INIT, q = XF_POLICY_INIT, u = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  q.tags = tags2, q.ntags = 1;
  xft_op_loader l = {.value = "v1"}, lo = {.value = "o1"}, lu = {.value = "u1"};
  expect_goc(d, what, key, &p, &l, "v1", XF_SOURCE_LOADER);
  expect_goc(d, what, key, &p, &l, "v1", XF_SOURCE_CACHE);
  expect_goc(d, what, other, &q, &lo, "o1", XF_SOURCE_LOADER);
  expect_goc(d, what, plain, &u, &lu, "u1", XF_SOURCE_LOADER);
  int rc = xft_drv_invalidate_tags(d, (const char *const[]){tag}, 1);
  cr_assert_eq(rc, XF_OK, "%s: invalidate: %s (%s)", what, xf_strerror(rc),
               xft_drv_errmsg(d));
  l.value = "v2";
  expect_goc(d, what, key, &p, &l, "v2", XF_SOURCE_LOADER);
  expect_goc(d, what, key, &p, &l, "v2", XF_SOURCE_CACHE);
  expect_goc(d, what, other, &q, &lo, "o1", XF_SOURCE_CACHE);
  expect_goc(d, what, plain, &u, &lu, "u1", XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 2, "%s: %d loads of the tagged key", what, l.calls);
  cr_expect_eq(lo.calls + lu.calls, 2, "%s: other tag, untagged: %d loads", what,
               lo.calls + lu.calls);
  xft_drv_close(d);
}

/* The loader's during hook: the tag invalidated while the load runs. */
static void invalidate_during(xft_drv *d, void *arg) {
  (void)d;
  invalidate((const char *const[]){arg}, 1);
}

ParameterizedTestParameters(tags, an_invalidation_during_the_load_wins) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* The versions are read before the loader runs: the value of a load that an
 * invalidation overlapped is written with the old ones, and not served. */
ParameterizedTest(int *driver, tags, an_invalidation_during_the_load_wins) {
  const char *what = xft_driver_names[*driver];
  char key[64], tag[64];
  key_of(key, sizeof key, "during", *driver);
  snprintf(tag, sizeof tag, "during:%s", what);
  del(key);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *tags[] = {tag};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  xft_op_loader l = {.value = "old", .during = invalidate_during, .arg = tag};
  expect_goc(d, what, key, &p, &l, "old", XF_SOURCE_LOADER);
  l.during = NULL;
  l.value = "new";
  expect_goc(d, what, key, &p, &l, "new", XF_SOURCE_LOADER);
  expect_goc(d, what, key, &p, &l, "new", XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 2, "%s: %d loads", what, l.calls);
  xft_drv_close(d);
}

ParameterizedTestParameters(tags, a_tagged_set) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A set records the versions too: a hit for a call of its tags, until one is
 * invalidated. */
ParameterizedTest(int *driver, tags, a_tagged_set) {
  const char *what = xft_driver_names[*driver];
  char key[64], tag[64];
  key_of(key, sizeof key, "set", *driver);
  snprintf(tag, sizeof tag, "set:%s", what);
  del(key);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *tags[] = {tag};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  int rc = xft_drv_set(d, key, "written", &p);
  cr_assert_eq(rc, XF_OK, "%s: set: %s (%s)", what, xf_strerror(rc), xft_drv_errmsg(d));
  xft_op_loader l = {.value = "loaded"};
  expect_goc(d, what, key, &p, &l, "written", XF_SOURCE_CACHE);
  invalidate(tags, 1);
  expect_goc(d, what, key, &p, &l, "loaded", XF_SOURCE_LOADER);
  cr_expect_eq(l.calls, 1, "%s: %d loads", what, l.calls);
  xft_drv_close(d);
}

ParameterizedTestParameters(tags, after_an_old_clients_overwrite) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A client that knows no tags judges a tagged entry malformed, recomputes it
 * and writes it back as version 3 without a record (the bytes an untagged
 * xf_set writes: written here by another client). A tagged call then
 * refuses that entry as invalidated (counted), loads once, and hits after. */
ParameterizedTest(int *driver, tags, after_an_old_clients_overwrite) {
  const char *what = xft_driver_names[*driver];
  char key[64], tag[64];
  key_of(key, sizeof key, "old", *driver);
  snprintf(tag, sizeof tag, "old:%s", what);
  del(key);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *tags[] = {tag};
  xf_policy p = XF_POLICY_INIT, u = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  xft_op_loader l = {.value = "tagged"};
  expect_goc(d, what, key, &p, &l, "tagged", XF_SOURCE_LOADER);
  xf_client *old = xft_client(0);
  cr_assert_eq(xf_set(old, key, strlen(key), "old", 3, &u), XF_OK, "%s", xf_errmsg(old));
  xf_client_close(old);
  redisContext *r = xft_redis();
  redisReply *h = xft_cmd(r, "GETRANGE %s 0 2", key);
  cr_assert_eq(h->len, 3);
  cr_expect_eq((unsigned char)h->str[1], 3, "the old client's write: version %d",
               h->str[1]);
  freeReplyObject(h);
  redisFree(r);
  xf_stats before, after;
  xft_drv_stats(d, &before);
  expect_goc(d, what, key, &p, &l, "tagged", XF_SOURCE_LOADER);
  xft_drv_stats(d, &after);
  cr_expect_eq(after.tag_invalidated - before.tag_invalidated, 1,
               "%s: the record-less entry refused as invalidated", what);
  expect_goc(d, what, key, &p, &l, "tagged", XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 2, "%s: %d loads", what, l.calls);
  xft_drv_close(d);
}

static const char *batch_name(const xft_batch_kind *k) {
  static const char *const names[XFT_NDRIVERS][2] = {
      [XFT_BLOCKING] = {"blocking many", "blocking many_batch"},
      [XFT_POOL] = {"pool many", "pool many_batch"}};
  return names[k->driver][k->batch_loader];
}

ParameterizedTestParameters(tags, a_tagged_batch) {
  static xft_batch_kind kinds[] = XFT_ALL_BATCH_KINDS;
  return cr_make_param_array(xft_batch_kind, kinds, sizeof kinds / sizeof *kinds);
}

/* The batch, with either loader: each key's tags read first, then the same
 * judgment per key. An invalidation while the loads run wins (the versions
 * were read before them: the values are served once, not cached as
 * current); then hits; an invalidation before a batch makes every key a
 * miss, loaded once. */
ParameterizedTest(xft_batch_kind *kind, tags, a_tagged_batch) {
  const char *what = batch_name(kind);
  enum { N = 5 };
  char names[N][64], tag[64];
  const char *keys[N];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "tags:batch:%s:%d:%d",
             xft_driver_names[kind->driver], kind->batch_loader, i);
    keys[i] = names[i];
    del(keys[i]);
  }
  snprintf(tag, sizeof tag, "batch:%s:%d", xft_driver_names[kind->driver],
           kind->batch_loader);
  xf_options o = options();
  xft_drv *d = xft_drv_open(kind->driver, &o);
  const char *tags[] = {tag};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  xft_op_loader l = {.value = "b", .batch = kind->batch_loader};
  xf_value values[N];
  int rcs[N];
  /* loads overlapped by an invalidation, loads, hits, loads after one */
  xf_source want[] = {XF_SOURCE_LOADER, XF_SOURCE_LOADER, XF_SOURCE_CACHE,
                      XF_SOURCE_LOADER};
  for (int round = 0; round < 4; round++) {
    l.during = round == 0 ? invalidate_during : NULL; /* each key's load, or the batch's */
    l.arg = tag;
    if (round == 3)
      invalidate(tags, 1);
    cr_assert_eq(xft_drv_many(d, N, keys, &p, &l, values, rcs), XF_OK, "%s: %s", what,
                 xft_drv_errmsg(d));
    for (int i = 0; i < N; i++) {
      cr_expect_eq(rcs[i], XF_OK, "%s round %d key %d: %s", what, round, i,
                   xf_strerror(rcs[i]));
      if (rcs[i] != XF_OK)
        continue;
      cr_expect_str_eq(values[i].data, "b", "%s round %d key %d", what, round, i);
      cr_expect_eq(values[i].source, want[round], "%s round %d key %d: source %d", what,
                   round, i, values[i].source);
      xf_value_free(&values[i]);
    }
  }
  cr_expect_eq(l.calls, 3 * N, "%s: %d loads", what, l.calls);
  if (kind->batch_loader)
    cr_expect_eq(l.batch_calls, 3, "%s: %d batch loader runs", what, l.batch_calls);
  xf_stats st;
  xft_drv_stats(d, &st);
  cr_expect_eq(st.tag_invalidated, 2 * N, "%s: %llu refused", what,
               (unsigned long long)st.tag_invalidated);
  xft_drv_close(d);
}

static int load_value(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  __atomic_add_fetch((int *)ud, 1, __ATOMIC_ACQ_REL);
  xf_sink_set(sink, "v", 1);
  return 0;
}

/* What the hook was told of refused entries (XF_EV_TAG_INVALIDATED). */
typedef struct told {
  int raised, other, unknown; /* by reason */
  int driver;                 /* what ev->driver must say (xf_driver) */
  int wrong_driver, wrong_key, wrong_source;
  const char *key;
} told;

static void tell(const xf_event *ev, void *ud) {
  told *t = ud;
  if (ev->type != XF_EV_TAG_INVALIDATED)
    return;
  if (ev->rc == XF_TAG_RAISED)
    t->raised++;
  else if (ev->rc == XF_TAG_OTHER)
    t->other++;
  else
    t->unknown++;
  t->wrong_driver += (int)ev->driver != t->driver;
  t->wrong_key +=
      ev->keylen != strlen(t->key) || !ev->key || memcmp(ev->key, t->key, ev->keylen) != 0;
  t->wrong_source += ev->source != -1;
}

/* The xf_driver a driver's events name. */
static int event_driver(int driver) {
  static const int of[XFT_NDRIVERS] = {[XFT_BLOCKING] = XF_DRIVER_BLOCKING,
                                       [XFT_POOL] = XF_DRIVER_POOL,
                                       [XFT_ASYNC] = XF_DRIVER_ASYNC,
                                       [XFT_CALL] = XF_DRIVER_CALL,
                                       [XFT_ASYNC_UV] = XF_DRIVER_ASYNC};
  return of[driver];
}

/* Expects t to hold raised and other events since it was zeroed, every one
 * of t->driver and t->key. */
static void expect_told(const char *what, const char *step, const told *t, int raised,
                        int other) {
  cr_expect_eq(t->raised, raised, "%s, %s: %d XF_TAG_RAISED, want %d", what, step,
               t->raised, raised);
  cr_expect_eq(t->other, other, "%s, %s: %d XF_TAG_OTHER, want %d", what, step, t->other,
               other);
  cr_expect_eq(t->unknown + t->wrong_driver + t->wrong_key + t->wrong_source, 0,
               "%s, %s: %d of another reason, %d of another driver, %d of another key, %d "
               "with a source",
               what, step, t->unknown, t->wrong_driver, t->wrong_key, t->wrong_source);
}

ParameterizedTestParameters(tags, a_refused_entry_is_counted_and_told) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* Stats and events: an entry refused is counted once in tag_invalidated (a
 * miss too) and told once as tag_invalidated with its reason: XF_TAG_RAISED
 * after an invalidation (the driver's own), XF_TAG_OTHER for a call of other
 * tags, and for an entry without a record (an untagged set); by the batch
 * too (its events name the batch driver), on the drivers that have one. */
ParameterizedTest(int *driver, tags, a_refused_entry_is_counted_and_told) {
  const char *what = xft_driver_names[*driver];
  char key[64], tag[64], tag2[64];
  key_of(key, sizeof key, "counted", *driver);
  snprintf(tag, sizeof tag, "counted:%s", what);
  snprintf(tag2, sizeof tag2, "counted-other:%s", what);
  del(key);
  told t = {.driver = event_driver(*driver), .key = key};
  xf_options o = options();
  o.on_event = tell;
  o.on_event_ud = &t;
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *tags[] = {tag}, *other[] = {tag2};
  xf_policy p = XF_POLICY_INIT, q = XF_POLICY_INIT, u = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  q.tags = other, q.ntags = 1;
  xft_op_loader l = {.value = "v"};
  expect_goc(d, what, key, &p, &l, "v", XF_SOURCE_LOADER);
  expect_goc(d, what, key, &p, &l, "v", XF_SOURCE_CACHE);
  expect_told(what, "loaded, a hit", &t, 0, 0);
  int rc = xft_drv_invalidate_tags(d, tags, 1);
  cr_assert_eq(rc, XF_OK, "%s: invalidate: %s (%s)", what, xf_strerror(rc),
               xft_drv_errmsg(d));
  expect_goc(d, what, key, &p, &l, "v", XF_SOURCE_LOADER);
  expect_told(what, "after an invalidation", &t, 1, 0);
  xf_stats s;
  xft_drv_stats(d, &s);
  cr_expect_eq(s.tag_invalidated, 1, "%s: tag_invalidated %llu", what,
               (unsigned long long)s.tag_invalidated);
  cr_expect_eq(s.misses, 2, "%s: misses %llu", what, (unsigned long long)s.misses);
  expect_goc(d, what, key, &q, &l, "v", XF_SOURCE_LOADER); /* under other tags */
  expect_told(what, "other tags", &t, 1, 1);
  cr_assert_eq(xft_drv_set(d, key, "u", &u), XF_OK, "%s: %s", what, xft_drv_errmsg(d));
  expect_goc(d, what, key, &p, &l, "v", XF_SOURCE_LOADER); /* a record-less entry */
  expect_told(what, "an untagged set", &t, 1, 2);
  xft_drv_stats(d, &s);
  cr_expect_eq(s.tag_invalidated, 3, "%s: tag_invalidated %llu", what,
               (unsigned long long)s.tag_invalidated);
  cr_expect_eq(l.calls, 4, "%s: %d loads", what, l.calls);
  if (xft_drv_has_batch(*driver)) {
    t = (told){.driver = XF_DRIVER_BATCH, .key = key};
    xf_value v;
    int one;
    for (int step = 0; step < 2; step++) { /* raised, then other tags */
      if (step == 0)
        cr_assert_eq(xft_drv_invalidate_tags(d, tags, 1), XF_OK, "%s", xft_drv_errmsg(d));
      cr_assert_eq(
          xft_drv_many(d, 1, (const char *const[]){key}, step ? &q : &p, &l, &v, &one),
          XF_OK, "%s: %s", what, xft_drv_errmsg(d));
      cr_expect_eq(one, XF_OK, "%s: batch step %d: %s", what, step, xf_strerror(one));
      if (one == XF_OK) {
        cr_expect_eq(v.source, XF_SOURCE_LOADER, "%s: batch step %d: source %d", what, step,
                     v.source);
        xf_value_free(&v);
      }
    }
    expect_told(what, "the batch", &t, 1, 1);
    xft_drv_stats(d, &s);
    cr_expect_eq(s.tag_invalidated, 5, "%s: tag_invalidated %llu", what,
                 (unsigned long long)s.tag_invalidated);
  }
  cr_expect_str_eq(xf_event_name(XF_EV_TAG_INVALIDATED), "tag_invalidated");
  xft_drv_close(d);
}

/* One command per tag, whatever the number of entries: the tag's key only. */
/* (on a server of its own: it counts the server's commands) */
Test(tags, an_invalidation_is_one_command_per_tag) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_client *c = xft_client_port(srv.port, 0);
  const char *tags[] = {"one:a", "one:b"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  int loads = 0;
  char key[32];
  for (int i = 0; i < 50; i++) {
    snprintf(key, sizeof key, "tags:one:%d", i);
    xf_value v;
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, load_value, &loads, &v), XF_OK);
    xf_value_free(&v);
  }
  const char *warm[] = {"one:warm"}; /* tag_bump.lua loaded (not preloaded) */
  cr_assert_eq(xf_invalidate_tags(c, warm, 1), XF_OK);
  redisContext *r = xft_redis_port(srv.port);
  freeReplyObject(xft_cmd(r, "CONFIG RESETSTAT"));
  cr_assert_eq(xf_invalidate_tags(c, tags, 2), XF_OK);
  long long scripts = xft_command_calls(r, "evalsha");
  cr_expect_eq(scripts, 2, "%lld scripts for 2 tags", scripts);
  cr_expect_eq(xft_command_calls(r, "set"), 2, "one write per tag");
  cr_expect_eq(xft_command_calls(r, "ping"), 2, "the fence: one PING per tag");
  cr_expect_eq(xft_command_calls(r, "scan") + xft_command_calls(r, "keys") +
                   xft_command_calls(r, "del"),
               0);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&srv);
}

Test(tags, bad_tags_are_refused_before_any_io) {
  xf_client *c = xft_client(0);
  int loads = 0;
  xf_value v;
  const char *empty[] = {""}, *null[] = {NULL};
  xf_policy p = XF_POLICY_INIT;
  p.tags = empty, p.ntags = 1;
  cr_expect_eq(xf_get_or_compute(c, "tags:bad", 8, &p, load_value, &loads, &v), XF_EINVAL);
  p.tags = null;
  cr_expect_eq(xf_get_or_compute(c, "tags:bad", 8, &p, load_value, &loads, &v), XF_EINVAL);
  p.tags = NULL;
  cr_expect_eq(xf_get_or_compute(c, "tags:bad", 8, &p, load_value, &loads, &v), XF_EINVAL);
  const char *many[XF_MAX_TAGS + 1];
  for (int i = 0; i <= XF_MAX_TAGS; i++)
    many[i] = "t";
  p.tags = many, p.ntags = XF_MAX_TAGS + 1;
  cr_expect_eq(xf_get_or_compute(c, "tags:bad", 8, &p, load_value, &loads, &v), XF_EINVAL);
  cr_expect_eq(xf_invalidate_tags(c, many, XF_MAX_TAGS + 1), XF_EINVAL);
  cr_expect_eq(loads, 0);
  xf_client_close(c);
  /* format 1 has no room for the record */
  c = xft_client_format(xft_port(), 0, XF_ENTRY_HASH);
  p.tags = many, p.ntags = 1;
  cr_expect_eq(xf_get_or_compute(c, "tags:bad", 8, &p, load_value, &loads, &v), XF_EINVAL);
  xf_client_close(c);
}

/* Redis down: a tagged get-or-compute fails open (the loader's value,
 * uncached), as an untagged one does; an invalidation returns the error. */
Test(tags, redis_down_fails_open_and_an_invalidation_fails) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nobody listens */
  o.lazy_connect = 1;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  const char *tags[] = {"down"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  int loads = 0;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "tags:down", 9, &p, load_value, &loads, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(loads, 1);
  xf_value_free(&v);
  int rc = xf_invalidate_tags(c, tags, 1);
  cr_expect(rc == XF_ECONNECT || rc == XF_EIO, "invalidate with Redis down: %s",
            xf_strerror(rc));
  xf_client_close(c);
}

/* Redis down with a share: the value a tagged call loaded is kept in the
 * process's fallback cache and served (XF_SOURCE_LOCAL) to the next call of
 * the key whatever its tags: the fallback keeps no tag record, and an
 * invalidation cannot reach it (it fails while Redis is down). */
Test(tags, redis_down_a_shares_local_value_is_served_whatever_the_tags) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nobody listens */
  o.lazy_connect = 1;
  o.share = s;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  const char *tags[] = {"down-a"}, *other[] = {"down-b"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  int loads = 0;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "tags:local", 10, &p, load_value, &loads, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
  cr_expect_neq(xf_invalidate_tags(c, tags, 1), XF_OK, "Redis is down");
  p.tags = other;
  cr_assert_eq(xf_get_or_compute(c, "tags:local", 10, &p, load_value, &loads, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOCAL, "the first call's value, kept by the share");
  cr_expect_eq(loads, 1);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

/* ---- namespaces ---------------------------------------------------------------- */

static xf_client *prefixed(const char *prefix, int namespace_tag) {
  xf_options o = options();
  o.key_prefix = prefix;
  o.namespace_tag = namespace_tag;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

/* xf_clear_namespace invalidates every entry of the prefix, and only them. */
Test(tags, clear_namespace) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL ns1:k ns2:k"));
  redisFree(r);
  xf_client *a = prefixed("ns1:", 1), *b = prefixed("ns2:", 1),
            *plain = prefixed("ns1:", 0);
  xf_policy p = XF_POLICY_INIT;
  int la = 0, lb = 0;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(a, "k", 1, &p, load_value, &la, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(xf_get_or_compute(b, "k", 1, &p, load_value, &lb, &v), XF_OK);
  xf_value_free(&v);
  cr_expect_eq(xf_clear_namespace(plain), XF_EINVAL, "no namespace tag: refused");
  cr_assert_eq(xf_clear_namespace(a), XF_OK, "%s", xf_errmsg(a));
  cr_assert_eq(xf_get_or_compute(a, "k", 1, &p, load_value, &la, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOADER, "cleared: loaded again");
  xf_value_free(&v);
  cr_assert_eq(xf_get_or_compute(b, "k", 1, &p, load_value, &lb, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_CACHE, "another namespace: untouched");
  xf_value_free(&v);
  cr_expect_eq(la, 2);
  cr_expect_eq(lb, 1);
  xf_client_close(a), xf_client_close(b), xf_client_close(plain);
}

ParameterizedTestParameters(tags, a_get_judges_the_namespace) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A namespace client's get serves its entries until the namespace is cleared
 * (by another client of the prefix), then finds nothing, leaving no key
 * behind; a value written after the clear is served. */
ParameterizedTest(int *driver, tags, a_get_judges_the_namespace) {
  const char *what = xft_driver_names[*driver];
  char prefix[64], full[80];
  snprintf(prefix, sizeof prefix, "nsget:%s:", what);
  snprintf(full, sizeof full, "%sk", prefix);
  del(full);
  xf_options o = options();
  o.key_prefix = prefix;
  o.namespace_tag = 1;
  xft_drv *d = xft_drv_open(*driver, &o);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_assert_eq(xft_drv_set(d, "k", "v1", &p), XF_OK, "%s: %s", what, xft_drv_errmsg(d));
  int rc = xft_drv_get(d, "k", &v);
  cr_assert_eq(rc, XF_OK, "%s: get: %s (%s)", what, xf_strerror(rc), xft_drv_errmsg(d));
  cr_expect_str_eq(v.data, "v1", "%s", what);
  xf_value_free(&v);
  xf_client *other = prefixed(prefix, 1);
  cr_assert_eq(xf_clear_namespace(other), XF_OK, "%s", xf_errmsg(other));
  rc = xft_drv_get(d, "k", &v);
  cr_expect_eq(rc, XF_ENOTFOUND, "%s: a get after the clear: %s", what, xf_strerror(rc));
  if (rc == XF_OK)
    xf_value_free(&v);
  cr_assert_eq(xft_drv_set(d, "k", "v2", &p), XF_OK, "%s: %s", what, xft_drv_errmsg(d));
  rc = xft_drv_get(d, "k", &v);
  cr_assert_eq(rc, XF_OK, "%s: get: %s (%s)", what, xf_strerror(rc), xft_drv_errmsg(d));
  cr_expect_str_eq(v.data, "v2", "%s", what);
  xf_value_free(&v);
  xf_client_close(other);
  xft_drv_close(d);
}

/* ---- a hot key ------------------------------------------------------------------ */

enum { CALLERS = 8 };

typedef struct hot {
  const xf_policy *p;
  int loads;
  int start;
  int rcs[CALLERS];
} hot;

static int slow_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  __atomic_add_fetch(&((hot *)ud)->loads, 1, __ATOMIC_ACQ_REL);
  xft_sleep_ms(100); /* long enough for every caller to find the lease taken */
  xf_sink_set(sink, "hot", 3);
  return 0;
}

typedef struct caller {
  hot *h;
  int i;
  xft_fail fail; /* what went wrong on its thread */
} caller;

static void *call_hot(void *arg) {
  caller *k = arg;
  xf_client *c;
  int rc = xft_record_open(xft_client_open(&c, 0), &k->fail, "the caller");
  if (rc != XF_OK)
    return NULL;
  while (!__atomic_load_n(&k->h->start, __ATOMIC_ACQUIRE))
    xft_sleep_ms(1);
  xf_value v;
  k->h->rcs[k->i] = xf_get_or_compute(c, "tags:hot", 8, k->h->p, slow_load, k->h, &v);
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

static void episode(hot *h) {
  pthread_t t[CALLERS];
  caller k[CALLERS];
  __atomic_store_n(&h->start, 0, __ATOMIC_RELEASE);
  for (int i = 0; i < CALLERS; i++) {
    k[i] = (caller){.h = h, .i = i};
    pthread_create(&t[i], NULL, call_hot, &k[i]);
  }
  __atomic_store_n(&h->start, 1, __ATOMIC_RELEASE);
  /* join them all before an assertion leaves the frame they write to */
  for (int i = 0; i < CALLERS; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < CALLERS; i++) {
    cr_assert_eq(xft_fail_count(&k[i].fail), 0, "caller %d: %s", i,
                 xft_fail_msg(&k[i].fail));
    cr_expect_eq(h->rcs[i], XF_OK, "caller %d: %s", i, xf_strerror(h->rcs[i]));
  }
}

/* A tagged hot key loads once per episode: cold, then after an invalidation
 * (wait_ms 10 s: far past the 100 ms load on a busy machine). */
Test(tags, a_tagged_hot_key_loads_once_per_episode) {
  del("tags:hot");
  const char *tags[] = {"hot"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  p.wait_ms = 10000;
  p.lease_ms = 10000;
  hot h = {.p = &p};
  episode(&h);
  cr_expect_eq(__atomic_load_n(&h.loads, __ATOMIC_ACQUIRE), 1, "cold: %d loads", h.loads);
  invalidate(tags, 1);
  episode(&h);
  cr_expect_eq(__atomic_load_n(&h.loads, __ATOMIC_ACQUIRE), 2, "invalidated: %d loads",
               h.loads);
  episode(&h);
  cr_expect_eq(__atomic_load_n(&h.loads, __ATOMIC_ACQUIRE), 2, "hits: %d loads", h.loads);
}

/* ---- the near cache ------------------------------------------------------------- */

/* With a near cache a tagged call keeps its tags' versions there (Redis'
 * tracking drops them when a tag is raised) and its entry with the entry's
 * tag record: a warm tagged hit is a near hit, nothing sent, while the
 * versions it recorded are the ones kept. An invalidation from another client
 * without a near cache (write_fence off) is fenced anyway (acknowledged once
 * Redis has sent the invalidations): the next call loads. */
Test(tags, a_tagged_hit_is_a_near_hit_until_a_tag_is_raised) {
  near_env e;
  near_env_open(&e);
  const char *tags[] = {"near", "near2"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  int loads = 0;
  xf_value v;
  /* Loaded, then the versions and the entry kept once the invalidation
   * connection is open (on a busy machine, after a few calls): called until
   * a near hit, bounded by 5 s. */
  for (int64_t until = xft_now_ms() + 5000;;) {
    uint64_t was = near_hits(e.c);
    cr_assert_eq(xf_get_or_compute(e.c, "tags:near", 9, &p, load_value, &loads, &v), XF_OK);
    xf_value_free(&v);
    if (near_hits(e.c) > was)
      break;
    cr_assert(xft_now_ms() < until, "never a near hit");
    xft_sleep_ms(1);
  }
  uint64_t before = near_hits(e.c);
  long long evals = xft_command_calls(e.r, "evalsha"), gets = xft_command_calls(e.r, "get");
  enum { HITS = 20 };
  for (int i = 0; i < HITS; i++) {
    cr_assert_eq(xf_get_or_compute(e.c, "tags:near", 9, &p, load_value, &loads, &v), XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_CACHE);
    xf_value_free(&v);
  }
  /* A hit goes to Redis while the tracker has invalidations still to read
   * (near_env.h): a few at most on a busy machine (3 GETs each). */
  long long more_gets = xft_command_calls(e.r, "get") - gets;
  uint64_t near = near_hits(e.c) - before;
  cr_expect(more_gets <= 3 * 4, "%lld GETs for %d hits", more_gets, HITS);
  cr_expect(near >= HITS - 4, "%llu near hits of %d", (unsigned long long)near, HITS);
  cr_expect_eq(xft_command_calls(e.r, "evalsha") - evals, 0, "no tag script on a hit");
  xf_options o =
      XF_OPTIONS_INIT; /* no near cache: write_fence off, yet the raise is fenced */
  o.port = e.srv.port;
  xf_client *writer;
  cr_assert_eq(xf_client_open(&writer, &o), XF_OK);
  cr_assert_eq(xf_invalidate_tags(writer, tags + 1, 1), XF_OK);
  xf_stats s;
  xf_client_stats(writer, &s);
  cr_expect_eq(s.fence_failed, 0);
  cr_assert_eq(xf_get_or_compute(e.c, "tags:near", 9, &p, load_value, &loads, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOADER, "invalidated elsewhere, fenced: loaded again");
  xf_value_free(&v);
  cr_assert_eq(xf_get_or_compute(e.c, "tags:near", 9, &p, load_value, &loads, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  cr_expect_eq(loads, 2);
  xf_client_close(writer);
  near_env_close(&e);
}

/* ---- the staleness harness ------------------------------------------------------ */

/* Readers (threads, each its own client on one share with a near cache) call a
 * tagged key whose loader returns the generation it reads; an invalidator
 * raises the generation, then invalidates the tag; a killer cuts the
 * connections (CLIENT KILL, the tracking ones too) or flushes everything (the
 * tags' keys too) every 100 ms. A call that
 * starts after the invalidation of generation g returned must never be served
 * a value of a generation below g (loaded before the raise): 0 such reads.
 * No timing in the verdict (the run's length only bounds how much it sees). */
enum { STALE_READERS = 4, STALE_MS = 1500 };

typedef struct stale_run {
  int port;
  xf_share *share;
  /* Opened before the killer starts: a connection cut during its setup
   * fails the open, and a thread must not assert (Criterion's asserts
   * belong to the test's own thread). */
  xf_client *reader_clients[STALE_READERS], *invalidator_client;
  int next_reader;
  long gen, done; /* the generation loaders read; the last one invalidated */
  int stop;
  long calls, near, wrong, errors;
  xft_fail killer_fail; /* what went wrong on the killer's thread */
} stale_run;

static int load_gen(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld",
                   __atomic_load_n(&((stale_run *)ud)->gen, __ATOMIC_ACQUIRE));
  return xf_sink_set(sink, buf, (size_t)n);
}

static void *stale_reader(void *arg) {
  stale_run *run = arg;
  xf_client *c =
      run->reader_clients[__atomic_fetch_add(&run->next_reader, 1, __ATOMIC_RELAXED)];
  const char *tags[] = {"stale", "stale2"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  while (!__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE)) {
    long floor = __atomic_load_n(&run->done, __ATOMIC_ACQUIRE);
    xf_value v;
    int rc = xf_get_or_compute(c, "tags:stale", 10, &p, load_gen, run, &v);
    __atomic_add_fetch(&run->calls, 1, __ATOMIC_RELAXED);
    if (rc != XF_OK) {
      __atomic_add_fetch(&run->errors, 1, __ATOMIC_RELAXED);
      continue;
    }
    if (v.source != XF_SOURCE_UNCACHED && atol(v.data) < floor)
      __atomic_add_fetch(&run->wrong, 1, __ATOMIC_RELAXED);
    xf_value_free(&v);
  }
  xf_stats st;
  xf_client_stats(c, &st);
  __atomic_add_fetch(&run->near, (long)st.near_hits, __ATOMIC_RELAXED);
  xf_client_close(c);
  return NULL;
}

static void *stale_invalidator(void *arg) {
  stale_run *run = arg;
  xf_client *c = run->invalidator_client;
  const char *tags[] = {"stale2"};
  while (!__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE)) {
    long g = __atomic_add_fetch(&run->gen, 1, __ATOMIC_ACQ_REL);
    if (xf_invalidate_tags(c, tags, 1) == XF_OK)
      __atomic_store_n(&run->done, g, __ATOMIC_RELEASE);
    xft_sleep_ms(5);
  }
  xf_client_close(c);
  return NULL;
}

static void *stale_killer(void *arg) {
  stale_run *run = arg;
  redisContext *r = redisConnect("127.0.0.1", run->port);
  if (!r || r->err) {
    xft_fail_record(&run->killer_fail, "the killer: raw connect to %d failed", run->port);
    redisFree(r);
    return NULL;
  }
  for (int i = 0; !__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE); i++) {
    xft_sleep_ms(100);
    static const char *const faults[] = {"CLIENT KILL TYPE normal SKIPME yes",
                                         "CLIENT KILL TYPE pubsub", "FLUSHALL"};
    redisReply *rep = redisCommand(r, faults[i % 3]);
    if (!rep) {
      xft_fail_record(&run->killer_fail, "the killer: %s failed: %s", faults[i % 3],
                      r->errstr);
      break;
    }
    freeReplyObject(rep);
  }
  redisFree(r);
  return NULL;
}

Test(tags, an_invalidated_entry_is_never_served_after_the_invalidation_returned) {
  stale_run run = {0};
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  cr_assert_eq(xf_share_open(&run.share, &so), XF_OK);
  run.port = srv.port;
  for (int i = 0; i < STALE_READERS; i++)
    run.reader_clients[i] = near_client(srv.port, run.share, NULL, NULL);
  run.invalidator_client = near_client(srv.port, NULL, NULL, NULL); /* no near cache */
  pthread_t readers[STALE_READERS], inv, killer;
  for (int i = 0; i < STALE_READERS; i++)
    pthread_create(&readers[i], NULL, stale_reader, &run);
  pthread_create(&inv, NULL, stale_invalidator, &run);
  pthread_create(&killer, NULL, stale_killer, &run);
  xft_sleep_ms(STALE_MS);
  __atomic_store_n(&run.stop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < STALE_READERS; i++)
    pthread_join(readers[i], NULL);
  pthread_join(inv, NULL);
  pthread_join(killer, NULL);
  xft_assert_no_fail(&run.killer_fail);
  cr_expect_eq(run.wrong, 0,
               "%ld of %ld calls served a value loaded before an invalidation "
               "that had returned",
               run.wrong, run.calls);
  cr_expect_gt(run.done, 10, "%ld invalidations", run.done);
  cr_expect_gt(run.calls, 100, "%ld calls", run.calls);
  fprintf(stderr,
          "tags staleness: %ld calls, %ld near hits, %ld invalidations, %ld errors, "
          "%ld wrong\n",
          run.calls, run.near, run.done, run.errors, run.wrong);
  xf_share_close(run.share);
  xft_server_stop(&srv);
}

/* ---- the entry on Redis ----------------------------------------------------------- */

/* A tagged entry is version 4 (flag 64, its record last in the header), an
 * untagged one stays version 3; a version-3 reader (the read script of a
 * client that knows no tags, kept in tests/data) judges the tagged entry
 * malformed: a miss (its value not served), then recomputed. */
Test(tags, a_version_3_reader_judges_a_tagged_entry_malformed) {
  del("tags:v4"), del("tags:v3");
  xf_client *c = xft_client(0);
  const char *tags[] = {"v4"};
  xf_policy p = XF_POLICY_INIT, u = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  int loads = 0;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "tags:v4", 7, &p, load_value, &loads, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(xf_get_or_compute(c, "tags:v3", 7, &u, load_value, &loads, &v), XF_OK);
  xf_value_free(&v);
  xf_client_close(c);
  redisContext *r = xft_redis();
  redisReply *t = xft_cmd(r, "GETRANGE tags:v4 0 2"),
             *s = xft_cmd(r, "GETRANGE tags:v3 0 2");
  cr_assert_eq(t->len, 3);
  cr_expect_eq((unsigned char)t->str[1], 4, "tagged: version %d", t->str[1]);
  cr_expect_eq((unsigned char)t->str[2] & 64, 64, "tagged: flag 64");
  cr_expect_eq((unsigned char)s->str[1], 3, "untagged: version %d", s->str[1]);
  freeReplyObject(t), freeReplyObject(s);
  FILE *fp = fopen(XFT_DATA_DIR "/read_v3.lua", "rb");
  cr_assert(fp, "tests/data/read_v3.lua");
  static char src[16384];
  size_t n = fread(src, 1, sizeof src - 1, fp);
  fclose(fp);
  src[n] = '\0';
  redisReply *old = xft_cmd(r, "EVAL %s 1 tags:v4", src);
  cr_assert_eq(old->type, REDIS_REPLY_ARRAY, "%s", old->str ? old->str : "");
  cr_assert_eq(old->elements, 7);
  cr_expect_eq(old->element[0]->type, REDIS_REPLY_NIL, "no value served");
  cr_expect_eq(old->element[4]->integer, 1, "malformed");
  freeReplyObject(old);
  old = xft_cmd(r, "EVAL %s 1 tags:v3", src);
  cr_assert_eq(old->type, REDIS_REPLY_ARRAY);
  cr_expect_eq(old->element[0]->type, REDIS_REPLY_STRING, "an untagged entry: its value");
  freeReplyObject(old);
  redisFree(r);
}

/* Every command the server ran since its last CONFIG RESETSTAT, but the
 * test's own (INFO, CONFIG). */
static long long commands_run(redisContext *r) {
  redisReply *rep = xft_cmd(r, "INFO commandstats");
  long long n = 0;
  for (const char *at = rep->str; (at = strstr(at, "cmdstat_")) != NULL; at++) {
    const char *calls = strstr(at, ":calls=");
    if (calls && strncmp(at, "cmdstat_info:", 13) != 0 &&
        strncmp(at, "cmdstat_config", 14) != 0)
      n += atoll(calls + 7);
  }
  freeReplyObject(rep);
  return n;
}

/* A driver's namespace client ("ns1:", its namespace tag on) of a server of
 * its own, started in srv: a test that counts the server's commands. */
static xft_drv *open_counted(int driver, xft_server *srv) {
  cr_assert_eq(xft_server_start(srv, NULL), 0);
  xf_options o = options();
  o.port = srv->port;
  o.key_prefix = "ns1:";
  o.namespace_tag = 1;
  return xft_drv_open(driver, &o);
}

ParameterizedTestParameters(tags, a_tagged_hit_without_a_near_cache_is_one_command) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* Without a near cache to keep the versions, a hit on standalone Redis reads
 * its tags' versions with the entry: one command per hit (the read carries
 * the tags' keys), not one more per tag. On a server of its own (it counts
 * the server's commands), a namespace client (the namespace's tag too). */
ParameterizedTest(int *driver, tags, a_tagged_hit_without_a_near_cache_is_one_command) {
  const char *what = xft_driver_names[*driver];
  xft_server srv;
  xft_drv *d = open_counted(*driver, &srv);
  const char *tags[] = {"hit:a", "hit:b"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  xft_op_loader l = {.value = "h"};
  int64_t learning = xft_now_ms(); /* the clock is learned after it */
  expect_goc(d, what, "tags:hit", &p, &l, "h", XF_SOURCE_LOADER);
  expect_goc(d, what, "tags:hit", &p, &l, "h", XF_SOURCE_CACHE); /* the clock learnt */
  redisContext *r = xft_redis_port(srv.port);
  freeReplyObject(xft_cmd(r, "CONFIG RESETSTAT"));
  enum { HITS = 5 };
  for (int i = 0; i < HITS; i++)
    expect_goc(d, what, "tags:hit", &p, &l, "h", XF_SOURCE_CACHE);
  long long ran = commands_run(r), scripts = xft_command_calls(r, "evalsha_ro");
  /* and a get of the namespace client, its namespace's version with it */
  freeReplyObject(xft_cmd(r, "CONFIG RESETSTAT"));
  xf_value v;
  cr_expect_eq(xft_drv_get(d, "tags:hit", &v), XF_OK, "%s: get: %s", what,
               xft_drv_errmsg(d));
  xf_value_free(&v);
  long long got = commands_run(r), got_scripts = xft_command_calls(r, "evalsha_ro");
  /* One command a hit while the clock estimate is fresh: younger than
   * XF_CLOCK_REFRESH_MS / 2 (500 ms), so while everything since `learning`
   * took less than that (2-3 ms on a quiet machine). Past it (a busy
   * machine) a call may refresh the estimate with the read script, which
   * runs the entry's and the versions' reads too (7 commands in all,
   * measured with a 600 ms pause): once per half refresh period. */
  int64_t took = xft_now_ms() - learning;
  if (took < XF_CLOCK_REFRESH_MS / 2) {
    cr_expect_eq(ran, HITS, "%s: %lld commands for %d hits with 3 tags", what, ran, HITS);
    cr_expect_eq(got, 1, "%s: %lld commands for a get of a namespace client", what, got);
  } else {
    cr_expect_leq(scripts + got_scripts, 1 + took / (XF_CLOCK_REFRESH_MS / 2),
                  "%s: %lld read scripts in %lld ms", what, scripts + got_scripts,
                  (long long)took);
    cr_expect_leq(ran, HITS + 6 * scripts, "%s: %lld commands for %d hits, %lld scripts",
                  what, ran, HITS, scripts);
    cr_expect_leq(got, 1 + 6 * got_scripts, "%s: %lld commands for a get", what, got);
  }
  cr_expect_eq(l.calls, 1, "%s: %d loads", what, l.calls);
  redisFree(r);
  xft_drv_close(d);
  xft_server_stop(&srv);
}

ParameterizedTestParameters(tags, a_tagged_batchs_hits_are_one_mget) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* The batch's hits without a near cache: one MGET of every entry and of the
 * tags they carry (each once), none read apart. */
ParameterizedTest(int *driver, tags, a_tagged_batchs_hits_are_one_mget) {
  if (!xft_drv_has_batch(*driver))
    cr_skip_test("no batch on %s", xft_driver_names[*driver]);
  const char *what = xft_driver_names[*driver];
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  xf_options o = options();
  o.port = srv.port;
  xft_drv *d = xft_drv_open(*driver, &o);
  enum { N = 4 };
  const char *keys[N] = {"tags:bk:0", "tags:bk:1", "tags:bk:2", "tags:bk:3"};
  const char *tags[] = {"bk:a", "bk:b"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  xft_op_loader l = {.value = "b"};
  xf_value values[N];
  int rcs[N];
  redisContext *r = xft_redis_port(srv.port);
  for (int round = 0; round < 3; round++) { /* loads, the clock learnt, hits */
    if (round == 2)
      freeReplyObject(xft_cmd(r, "CONFIG RESETSTAT"));
    cr_assert_eq(xft_drv_many(d, N, keys, &p, &l, values, rcs), XF_OK, "%s: %s", what,
                 xft_drv_errmsg(d));
    for (int i = 0; i < N; i++) {
      cr_expect_eq(rcs[i], XF_OK, "%s round %d key %d", what, round, i);
      if (round == 2)
        cr_expect_eq(values[i].source, XF_SOURCE_CACHE, "%s key %d: source %d", what, i,
                     values[i].source);
      if (rcs[i] == XF_OK)
        xf_value_free(&values[i]);
    }
  }
  long long ran = commands_run(r);
  /* One MGET; or, where the connection's clock estimate aged past use (1 s:
   * a stall of the busy machine between two rounds), each read is the read
   * script with its tags' keys (read_many takes entries only): N. */
  long long mget = xft_command_calls(r, "mget"),
            scripts = xft_command_calls(r, "evalsha_ro");
  cr_expect((ran == 1 && mget == 1) || (ran == N && scripts == N),
            "%s: %lld commands (%lld MGET, %lld scripts) for %d tagged hits", what, ran,
            mget, scripts, N);
  cr_expect_eq(xft_command_calls(r, "get"), 0, "%s: no tag read apart", what);
  cr_expect_eq(l.calls, N, "%s: %d loads", what, l.calls);
  redisFree(r);
  xft_drv_close(d);
  xft_server_stop(&srv);
}

ParameterizedTestParameters(tags, a_tagged_set_reads_its_versions_in_one_command) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* Without a near cache, on standalone Redis, a set reads every version of its
 * tags (the namespace's too) with one MGET before its write: two round trips,
 * not one more per tag. On a server of its own (it counts its commands). */
ParameterizedTest(int *driver, tags, a_tagged_set_reads_its_versions_in_one_command) {
  const char *what = xft_driver_names[*driver];
  xft_server srv;
  xft_drv *d = open_counted(*driver, &srv);
  const char *tags[] = {"set1:a", "set1:b", "set1:c"};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 3;
  int rc = xft_drv_set(d, "tags:set1", "first", &p); /* the tags' keys made */
  cr_assert_eq(rc, XF_OK, "%s: set: %s (%s)", what, xf_strerror(rc), xft_drv_errmsg(d));
  redisContext *r = xft_redis_port(srv.port);
  freeReplyObject(xft_cmd(r, "CONFIG RESETSTAT"));
  enum { SETS = 5 };
  for (int i = 0; i < SETS; i++) {
    rc = xft_drv_set(d, "tags:set1", "written", &p);
    cr_assert_eq(rc, XF_OK, "%s: set: %s (%s)", what, xf_strerror(rc), xft_drv_errmsg(d));
  }
  /* the write is a script: the commands it runs inside are counted too */
  long long reads = xft_command_calls(r, "get") + xft_command_calls(r, "mget") +
                    xft_command_calls(r, "evalsha_ro");
  long long writes = xft_command_calls(r, "evalsha");
  cr_expect_eq(reads, SETS, "%s: %lld reads for %d sets with 4 tags", what, reads, SETS);
  cr_expect_eq(writes, SETS, "%s: %lld writes for %d sets", what, writes, SETS);
  xft_op_loader l = {.value = "loaded"};
  expect_goc(d, what, "tags:set1", &p, &l, "written", XF_SOURCE_CACHE);
  const char *one[] = {"set1:b"};
  cr_assert_eq(xft_drv_invalidate_tags(d, one, 1), XF_OK);
  expect_goc(d, what, "tags:set1", &p, &l, "loaded", XF_SOURCE_LOADER);
  cr_expect_eq(l.calls, 1, "%s: %d loads", what, l.calls);
  redisFree(r);
  xft_drv_close(d);
  xft_server_stop(&srv);
}

/* ---- an invalidated entry under the stale rules -------------------------------- */

/* Another caller reloading: a blocking client's get-or-compute of key on a
 * thread of its own, its loader holding the key's lease until released. */
typedef struct reloader {
  const char *key;
  xf_policy p;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int loading, released;
  int rc;
  char got[16];
  xf_source source;
  xft_fail fail;
} reloader;

static int held_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  reloader *r = ud;
  pthread_mutex_lock(&r->mu);
  r->loading = 1;
  pthread_cond_broadcast(&r->cv);
  while (!r->released)
    pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  return xf_sink_set(sink, "v2", 2);
}

static void *reload(void *arg) {
  reloader *r = arg;
  xf_client *c;
  if (xft_record_open(xft_client_open(&c, 0), &r->fail, "the reloader") == XF_OK) {
    xf_value v;
    r->rc = xf_get_or_compute(c, r->key, strlen(r->key), &r->p, held_load, r, &v);
    if (r->rc == XF_OK) {
      snprintf(r->got, sizeof r->got, "%.*s", (int)v.len, v.data);
      r->source = v.source;
      xf_value_free(&v);
    }
    xf_client_close(c);
  }
  pthread_mutex_lock(&r->mu);
  r->loading = 1; /* a failed open waits for nothing */
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

ParameterizedTestParameters(tags, an_invalidated_entry_is_stale_from_the_invalidation) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* After an invalidation, an entry of the tag counts as a value that expired
 * then: within stale_ms, a caller that finds another one reloading it is
 * served it (XF_SOURCE_STALE) instead of waiting; within
 * stale_if_error_ms, a failed load serves it; the windows count from the
 * invalidation (a window of 1 ms is over 20 ms after it, whatever the
 * entry's own ttl); policy.tags_never_stale serves it in no case. Never
 * fresh. The batch, where the driver has one, as a get-or-compute. */
ParameterizedTest(int *driver, tags, an_invalidated_entry_is_stale_from_the_invalidation) {
  const char *what = xft_driver_names[*driver];
  char key[64], tag[64];
  key_of(key, sizeof key, "stale", *driver);
  snprintf(tag, sizeof tag, "stale:%s", what);
  xf_options o = options();
  xft_drv *d = xft_drv_open(*driver, &o);
  const char *tags[] = {tag};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 1;
  p.ttl_ms = 3600 * 1000;
  p.stale_ms = p.stale_if_error_ms = 3600 * 1000;
  p.wait_ms = 0, p.on_wait_timeout = XF_WAIT_FAIL; /* no stale value: XF_ETIMEDOUT */
  for (int strict = 0; strict <= 1; strict++) {
    p.tags_never_stale = strict;
    const char *how = strict ? "tags_never_stale" : "stale rules";
    /* While another caller reloads: stale, or (strict) no value to give. */
    del(key);
    xft_op_loader l = {.value = "v1"};
    expect_goc(d, what, key, &p, &l, "v1", XF_SOURCE_LOADER);
    invalidate(tags, 1);
    reloader r = {.key = key, .p = p};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, reload, &r), 0);
    pthread_mutex_lock(&r.mu);
    while (!r.loading)
      pthread_cond_wait(&r.cv, &r.mu);
    pthread_mutex_unlock(&r.mu);
    xf_value v = {0};
    int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
    int served_stale =
        rc == XF_OK && v.data && strcmp(v.data, "v1") == 0 && v.source == XF_SOURCE_STALE;
    if (rc == XF_OK)
      xf_value_free(&v);
    int batch_rc = XF_OK, batch_stale = 1; /* the batch's one key, where it has one */
    if (xft_drv_has_batch(*driver)) {
      const char *keys[] = {key};
      xf_value bv[1] = {{0}};
      int rcs[1] = {XF_OK};
      int all = xft_drv_many(d, 1, keys, &p, &l, bv, rcs);
      batch_rc = all == XF_OK ? rcs[0] : all;
      batch_stale = batch_rc == XF_OK && bv[0].data && strcmp(bv[0].data, "v1") == 0 &&
                    bv[0].source == XF_SOURCE_STALE;
      if (batch_rc == XF_OK)
        xf_value_free(&bv[0]);
    }
    pthread_mutex_lock(&r.mu);
    r.released = 1;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    pthread_join(th, NULL);
    xft_assert_no_fail(&r.fail);
    if (strict)
      cr_expect_eq(rc, XF_ETIMEDOUT, "%s, %s: while reloading: %s, want XF_ETIMEDOUT", what,
                   how, xf_strerror(rc));
    else
      cr_expect(served_stale, "%s, %s: while reloading: %s, not v1 stale", what, how,
                xf_strerror(rc));
    if (strict)
      cr_expect_eq(batch_rc, xft_drv_has_batch(*driver) ? XF_ETIMEDOUT : XF_OK,
                   "%s, %s: the batch while reloading: %s", what, how,
                   xf_strerror(batch_rc));
    else
      cr_expect(batch_stale, "%s, %s: the batch while reloading: %s, not v1 stale", what,
                how, xf_strerror(batch_rc));
    cr_expect_eq(r.rc, XF_OK, "%s, %s: the reload: %s", what, how, xf_strerror(r.rc));
    cr_expect_str_eq(r.got, "v2", "%s, %s: the reload", what, how);
    cr_expect_eq(r.source, XF_SOURCE_LOADER, "%s, %s: the reload's source", what, how);
    expect_goc(d, what, key, &p, &l, "v2", XF_SOURCE_CACHE);
    cr_expect_eq(l.calls, 1, "%s, %s: %d loads of the driver's", what, how, l.calls);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);

    /* A failed load: the invalidated value within stale_if_error_ms. */
    invalidate(tags, 1);
    xft_op_loader failing = {.fail = 5};
    rc = xft_drv_get_or_compute(d, key, &p, &failing, &v);
    if (strict)
      cr_expect_neq(rc, XF_OK, "%s, %s: a failed load served a value", what, how);
    else {
      cr_expect_eq(rc, XF_OK, "%s, %s: a failed load: %s", what, how, xf_strerror(rc));
      if (rc == XF_OK) {
        cr_expect_str_eq(v.data, "v2", "%s, %s: a failed load", what, how);
        cr_expect_eq(v.source, XF_SOURCE_STALE, "%s, %s: a failed load's source", what,
                     how);
      }
    }
    if (rc == XF_OK)
      xf_value_free(&v);
  }
  /* The window counts from the invalidation: 1 ms, 20 ms ago at least. */
  p.tags_never_stale = 0;
  p.stale_ms = p.stale_if_error_ms = 1;
  del(key);
  xft_op_loader l = {.value = "v3"};
  expect_goc(d, what, key, &p, &l, "v3", XF_SOURCE_LOADER);
  invalidate(tags, 1);
  xft_sleep_ms(20);
  xft_op_loader failing = {.fail = 5};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &failing, &v);
  cr_expect_neq(rc, XF_OK, "%s: a failed load 20 ms past a 1 ms window served %s", what,
                rc == XF_OK ? v.data : "");
  if (rc == XF_OK)
    xf_value_free(&v);
  xft_drv_close(d);
}
