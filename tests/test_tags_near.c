/* Tags with a near cache (the tags' versions kept in the process, tracked by
 * Redis): a warm tagged hit sends nothing and checks the near cache's news
 * once, as an untagged hit does; an invalidation from another client is
 * seen by the next call; a tracking connection killed, or a FLUSHALL, makes
 * the versions read again; on every driver (op_drivers.h), the batch with
 * either loader too; xf_near_serve
 * serves a stamped tagged hit, never a namespace client's get. The tag
 * scripts are loaded with the others at connection setup. Each test on a
 * redis-server of its own. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "near_env.h"
#include "near_impl.h"
#include "op_drivers.h"

/* Every driver (the event loop on libevent and on libuv). */
#define DRIVERS                                                                            \
  { XFT_BLOCKING, XFT_POOL, XFT_ASYNC, XFT_CALL, XFT_ASYNC_UV }
#define NDRIVERS 5

/* How many of HITS warm hits may still go to Redis: a hit goes there while
 * the tracker thread holds bytes it has not applied (near.c), which on a
 * busy 2-core machine (the thread not scheduled for a few ms) happens a few
 * times in a thousand calls; 2 of 20 is far above that. */
enum { HITS = 20, MAY_MISS = 2 };

typedef struct env {
  xft_server srv;
  xf_share *share;
  xf_options o;
  xft_drv *d;
  xf_client *other; /* another process's view: no near cache */
  redisContext *raw;
} env;

static void env_open(env *e, int driver) {
  memset(e, 0, sizeof *e);
  cr_assert_eq(xft_server_start(&e->srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1u << 20};
  cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  e->o = (xf_options)XF_OPTIONS_INIT;
  e->o.port = e->srv.port;
  e->o.share = e->share;
  e->o.seed = 31;
  e->d = xft_drv_open(driver, &e->o);
  e->other = near_client(e->srv.port, NULL, NULL, NULL);
  e->raw = xft_redis_port(e->srv.port);
}

static void env_close(env *e) {
  xft_drv_close(e->d);
  xf_client_close(e->other);
  xf_share_close(e->share);
  redisFree(e->raw);
  xft_server_stop(&e->srv);
}

/* The data commands Redis has run so far: every command but the ones a
 * connection's setup, its liveness and this test's own questions send. */
static long long data_calls(redisContext *r) {
  static const char *const skip[] = {"info",   "ping",   "client",   "hello",
                                     "script", "select", "subscribe"};
  redisReply *rep = xft_cmd(r, "INFO commandstats");
  long long n = 0;
  for (const char *at = strstr(rep->str, "cmdstat_"); at; at = strstr(at, "cmdstat_")) {
    at += 8;
    int skipped = 0;
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
      skipped |= strncmp(at, skip[i], strlen(skip[i])) == 0;
    const char *calls = strstr(at, ":calls=");
    if (calls && !skipped)
      n += atoll(calls + 7);
  }
  freeReplyObject(rep);
  return n;
}

static const char *const TAGS[] = {"tn:a", "tn:b"};

static xf_policy tagged(void) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  p.tags = TAGS, p.ntags = 2;
  return p;
}

/* One tagged get-or-compute of key: its source; *sent the data commands it
 * made Redis run. A load hands over "v<n>" (n: the loader's runs so far). */
static xf_source call(env *e, const char *key, xft_op_loader *l, char *value, size_t cap,
                      long long *sent) {
  static char next[16];
  snprintf(next, sizeof next, "v%d", l->calls + 1);
  l->value = next;
  xf_policy p = tagged();
  long long before = data_calls(e->raw);
  xf_value v;
  int rc = xft_drv_get_or_compute(e->d, key, &p, l, &v);
  cr_assert_eq(rc, XF_OK, "get-or-compute %s: %s (%s)", key, xf_strerror(rc),
               xft_drv_errmsg(e->d));
  if (sent)
    *sent = data_calls(e->raw) - before;
  if (value)
    snprintf(value, cap, "%s", v.data);
  xf_source s = v.source;
  xf_value_free(&v);
  return s;
}

/* Calls key until a call is served from the cache without a command
 * (bounded: BOUND_MS; the event loops arm tracking once their invalidation
 * connection is open). */
static void warm(env *e, const char *key, xft_op_loader *l) {
  int64_t until = xft_now_ms() + BOUND_MS;
  for (;;) {
    long long sent;
    xf_source s = call(e, key, l, NULL, 0, &sent);
    if (s == XF_SOURCE_CACHE && sent == 0)
      return;
    cr_assert(xft_now_ms() < until, "%s: never a hit sending nothing", key);
  }
}

ParameterizedTestParameters(tags_near, a_warm_tagged_hit_sends_nothing) {
  static int drivers[] = DRIVERS;
  return cr_make_param_array(int, drivers, NDRIVERS);
}

/* While tracking holds, a warm hit on a 2-tag entry sends no command: not
 * its entry's read, not its tags' versions. */
ParameterizedTest(int *driver, tags_near, a_warm_tagged_hit_sends_nothing) {
  env e;
  env_open(&e, *driver);
  xft_op_loader l = {0};
  warm(&e, "tn:hit", &l);
  int sent_some = 0;
  long long total = 0;
  for (int i = 0; i < HITS; i++) {
    long long sent;
    cr_assert_eq(call(&e, "tn:hit", &l, NULL, 0, &sent), XF_SOURCE_CACHE);
    sent_some += sent > 0;
    total += sent;
  }
  cr_expect(sent_some <= MAY_MISS, "%s: %d of %d hits sent commands (%lld)",
            xft_driver_names[*driver], sent_some, HITS, total);
  cr_expect_eq(l.calls, 1, "loaded once");
  env_close(&e);
}

ParameterizedTestParameters(tags_near, another_clients_invalidation_is_seen_at_once) {
  static int drivers[] = DRIVERS;
  return cr_make_param_array(int, drivers, NDRIVERS);
}

/* Another client (no near cache) invalidates one of the tags: the very next
 * call loads (no wait: the invalidation is fenced, so Redis has sent the
 * tracking message before it returns, and a hit that finds it unread goes
 * to Redis), then it is a hit again. */
ParameterizedTest(int *driver, tags_near, another_clients_invalidation_is_seen_at_once) {
  env e;
  env_open(&e, *driver);
  xft_op_loader l = {0};
  warm(&e, "tn:inv", &l);
  for (int round = 0; round < 3; round++) {
    cr_assert_eq(xf_invalidate_tags(e.other, TAGS + round % 2, 1), XF_OK, "%s",
                 xf_errmsg(e.other));
    char value[16];
    cr_expect_eq(call(&e, "tn:inv", &l, value, sizeof value, NULL), XF_SOURCE_LOADER,
                 "%s: round %d: served %s after the invalidation returned",
                 xft_driver_names[*driver], round, value);
    warm(&e, "tn:inv", &l);
  }
  cr_expect_eq(l.calls, 4);
  env_close(&e);
}

ParameterizedTestParameters(tags_near, a_lost_tracking_connection_makes_the_versions_read) {
  static int drivers[] = DRIVERS;
  return cr_make_param_array(int, drivers, NDRIVERS);
}

/* The invalidation connection killed (CLIENT KILL TYPE pubsub), then the
 * data connections (TYPE normal), each followed by an invalidation from
 * another client, which Redis can no longer tell this process: the next
 * call must not serve the entry (the versions are read again; a call on a
 * killed connection may fail open: a load too), and once tracking is set up
 * again (bounded) a warm hit sends nothing. */
ParameterizedTest(int *driver, tags_near,
                  a_lost_tracking_connection_makes_the_versions_read) {
  env e;
  env_open(&e, *driver);
  xft_op_loader l = {0};
  static const char *const kills[] = {"CLIENT KILL TYPE pubsub",
                                      "CLIENT KILL TYPE normal SKIPME yes"};
  for (int k = 0; k < 2; k++) {
    warm(&e, "tn:kill", &l);
    char before[16];
    cr_assert_eq(call(&e, "tn:kill", &l, before, sizeof before, NULL), XF_SOURCE_CACHE);
    freeReplyObject(xft_cmd(e.raw, kills[k]));
    cr_assert_eq(xf_invalidate_tags(e.other, TAGS + 1, 1), XF_OK, "%s", xf_errmsg(e.other));
    char value[16];
    xf_source s = call(&e, "tn:kill", &l, value, sizeof value, NULL);
    cr_expect(s != XF_SOURCE_CACHE && strcmp(value, before) != 0,
              "%s: %s: served %s (source %d) after the invalidation returned",
              xft_driver_names[*driver], kills[k], value, s);
  }
  warm(&e, "tn:kill", &l);
  env_close(&e);
}

ParameterizedTestParameters(tags_near, a_flushall_makes_the_versions_read) {
  static int drivers[] = DRIVERS;
  return cr_make_param_array(int, drivers, NDRIVERS);
}

/* FLUSHALL (the tags' keys gone with the entries): the next call reads the
 * versions again (their keys made anew: the script) and loads; an
 * invalidation after that is seen; then a warm hit sends nothing. */
ParameterizedTest(int *driver, tags_near, a_flushall_makes_the_versions_read) {
  env e;
  env_open(&e, *driver);
  xft_op_loader l = {0};
  warm(&e, "tn:flush", &l);
  freeReplyObject(xft_cmd(e.raw, "FLUSHALL"));
  long long evals = xft_command_calls(e.raw, "evalsha");
  cr_expect_eq(call(&e, "tn:flush", &l, NULL, 0, NULL), XF_SOURCE_LOADER);
  cr_expect_geq(xft_command_calls(e.raw, "evalsha") - evals, 2,
                "%s: both tags' keys made again", xft_driver_names[*driver]);
  warm(&e, "tn:flush", &l);
  cr_assert_eq(xf_invalidate_tags(e.other, TAGS, 1), XF_OK, "%s", xf_errmsg(e.other));
  cr_expect_eq(call(&e, "tn:flush", &l, NULL, 0, NULL), XF_SOURCE_LOADER);
  warm(&e, "tn:flush", &l);
  env_close(&e);
}

/* ---- the batch ------------------------------------------------------------------ */

enum { BATCH_N = 4 };

/* One tagged batch of keys: how many were served from source want; *sent
 * the data commands it made Redis run. */
static int batch_call(env *e, const char *const *keys, xft_op_loader *l, xf_source want,
                      long long *sent) {
  xf_policy p = tagged();
  xf_value values[BATCH_N];
  int rcs[BATCH_N], as_wanted = 0;
  long long before = data_calls(e->raw);
  int rc = xft_drv_many(e->d, BATCH_N, keys, &p, l, values, rcs);
  cr_assert_eq(rc, XF_OK, "batch: %s (%s)", xf_strerror(rc), xft_drv_errmsg(e->d));
  if (sent)
    *sent = data_calls(e->raw) - before;
  for (int i = 0; i < BATCH_N; i++) {
    cr_assert_eq(rcs[i], XF_OK, "%s: %s", keys[i], xf_strerror(rcs[i]));
    as_wanted += values[i].source == want;
    xf_value_free(&values[i]);
  }
  return as_wanted;
}

/* Calls the batch until it is served from the cache without a command
 * (bounded: BOUND_MS). */
static void batch_warm(env *e, const char *const *keys, xft_op_loader *l) {
  int64_t until = xft_now_ms() + BOUND_MS;
  for (;;) {
    long long sent;
    if (batch_call(e, keys, l, XF_SOURCE_CACHE, &sent) == BATCH_N && sent == 0)
      return;
    cr_assert(xft_now_ms() < until, "never a batch of hits sending nothing");
  }
}

ParameterizedTestParameters(tags_near, a_tagged_batch_is_near_hits_until_a_tag_is_raised) {
  static xft_batch_kind kinds[] = XFT_ALL_BATCH_KINDS;
  return cr_make_param_array(xft_batch_kind, kinds, sizeof kinds / sizeof *kinds);
}

/* The batch with a near cache, with either loader: a warm batch of tagged
 * entries is near hits, sending nothing (MAY_MISS); another client's
 * invalidation of either tag (fenced) makes the very next batch load every
 * key, once; then it is near hits again. */
ParameterizedTest(xft_batch_kind *kind, tags_near,
                  a_tagged_batch_is_near_hits_until_a_tag_is_raised) {
  const char *what = xft_driver_names[kind->driver];
  env e;
  env_open(&e, kind->driver);
  char names[BATCH_N][32];
  const char *keys[BATCH_N];
  for (int i = 0; i < BATCH_N; i++) {
    snprintf(names[i], sizeof names[i], "tn:batch:%d", i);
    keys[i] = names[i];
  }
  xft_op_loader l = {.value = "b", .batch = kind->batch_loader};
  batch_warm(&e, keys, &l);
  for (int round = 0; round < 2; round++) {
    xf_stats before, after;
    xft_drv_stats(e.d, &before);
    int sent_some = 0;
    for (int i = 0; i < HITS; i++) {
      long long sent;
      cr_expect_eq(batch_call(&e, keys, &l, XF_SOURCE_CACHE, &sent), BATCH_N,
                   "%s (batch loader %d): round %d: a batch not all hits", what,
                   kind->batch_loader, round);
      sent_some += sent > 0;
    }
    xft_drv_stats(e.d, &after);
    cr_expect(sent_some <= MAY_MISS, "%s (batch loader %d): %d of %d batches sent commands",
              what, kind->batch_loader, sent_some, HITS);
    cr_expect_geq(after.near_hits - before.near_hits, (uint64_t)(HITS - MAY_MISS) * BATCH_N,
                  "%s (batch loader %d): %llu near hits", what, kind->batch_loader,
                  (unsigned long long)(after.near_hits - before.near_hits));
    cr_assert_eq(xf_invalidate_tags(e.other, TAGS + round, 1), XF_OK, "%s",
                 xf_errmsg(e.other));
    cr_expect_eq(batch_call(&e, keys, &l, XF_SOURCE_LOADER, NULL), BATCH_N,
                 "%s (batch loader %d): round %d: served after the invalidation returned",
                 what, kind->batch_loader, round);
    batch_warm(&e, keys, &l);
  }
  cr_expect_eq(l.calls, 3 * BATCH_N, "%s (batch loader %d): %d loads", what,
               kind->batch_loader, l.calls);
  env_close(&e);
}

/* ---- the cost of a warm tagged near hit ------------------------------------------ */

static int checks;
static void count_check(void) { __atomic_add_fetch(&checks, 1, __ATOMIC_SEQ_CST); }

/* A warm near hit on a 2-tag entry checks the near cache's news once (one
 * poll()), as an untagged one does: not once more per tag. Counted per call;
 * a call that found news pending (busy machine) checks more: MAY_MISS. */
Test(tags_near, a_warm_tagged_near_hit_checks_news_once) {
  env e;
  env_open(&e, XFT_BLOCKING);
  xft_op_loader l = {0};
  warm(&e, "tn:check", &l);
  xf__near_test_on_check = count_check;
  int once = 0;
  for (int i = 0; i < HITS; i++) {
    int before = __atomic_load_n(&checks, __ATOMIC_SEQ_CST);
    cr_assert_eq(call(&e, "tn:check", &l, NULL, 0, NULL), XF_SOURCE_CACHE);
    once += __atomic_load_n(&checks, __ATOMIC_SEQ_CST) - before == 1;
  }
  xf__near_test_on_check = NULL;
  cr_expect_geq(once, HITS - MAY_MISS, "%d of %d hits checked once", once, HITS);
  env_close(&e);
}

/* ---- the tag scripts preloaded ------------------------------------------------- */

static long long noscript_errors(redisContext *r) {
  redisReply *rep = xft_cmd(r, "INFO errorstats");
  const char *at = strstr(rep->str, "errorstat_NOSCRIPT:count=");
  long long n = at ? atoll(at + strlen("errorstat_NOSCRIPT:count=")) : 0;
  freeReplyObject(rep);
  return n;
}

/* On a server that knows no script, the event loop's connection (whose
 * setup loads the scripts: the blocking client's loads each on its first
 * NOSCRIPT) makes its first calls, a tagged get-or-compute of tags never
 * seen (tag_read.lua) and an invalidation (tag_bump.lua), without a
 * NOSCRIPT answered. */
Test(tags_near, the_tag_scripts_are_loaded_at_connection_setup) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *raw = xft_redis_port(srv.port);
  freeReplyObject(xft_cmd(raw, "SCRIPT FLUSH"));
  long long before = noscript_errors(raw);
  xf_options o = XF_OPTIONS_INIT;
  o.port = srv.port;
  xft_drv *d = xft_drv_open(XFT_ASYNC, &o);
  xf_policy p = tagged();
  xft_op_loader l = {.value = "v"};
  xf_value v;
  cr_assert_eq(xft_drv_get_or_compute(d, "tn:script", &p, &l, &v), XF_OK, "%s",
               xft_drv_errmsg(d));
  xf_value_free(&v);
  cr_assert_eq(xft_drv_invalidate_tags(d, TAGS, 2), XF_OK, "%s", xft_drv_errmsg(d));
  cr_expect_eq(noscript_errors(raw) - before, 0, "NOSCRIPT answered");
  xft_drv_close(d);
  redisFree(raw);
  xft_server_stop(&srv);
}

/* ---- xf_near_serve (a near hit without a call) ------------------------------------ */

/* xf_near_serve serves a tagged get-or-compute whose entry is stamped (after
 * one call, the versions all kept) and nothing after an invalidation from
 * another client (fenced: no wait); a namespace client's get (policy NULL)
 * never: its namespace's version is read by the call first. */
Test(tags_near, xf_near_serve_serves_a_stamped_tagged_hit_and_no_namespace_get) {
  env e;
  env_open(&e, XFT_BLOCKING);
  xft_op_loader l = {0};
  warm(&e, "tn:serve", &l);
  xf_client *served_on = near_client(e.srv.port, e.share, NULL, NULL);
  xf_policy p = tagged();
  xf_value v;
  int rc = XF_NEAR_NOT_SERVED;
  for (int i = 0; i < 3 && rc == XF_NEAR_NOT_SERVED; i++) /* MAY_MISS's reason */
    rc = xf_near_serve(served_on, "tn:serve", 8, &p, XF_DRIVER_BLOCKING, NULL, &v);
  cr_assert_eq(rc, XF_OK, "a stamped tagged hit not served: %d", rc);
  xf_value_free(&v);
  cr_assert_eq(xf_invalidate_tags(e.other, TAGS + 1, 1), XF_OK, "%s", xf_errmsg(e.other));
  cr_expect_eq(xf_near_serve(served_on, "tn:serve", 8, &p, XF_DRIVER_BLOCKING, NULL, &v),
               XF_NEAR_NOT_SERVED, "served after the invalidation returned");
  xf_client_close(served_on);
  env_close(&e);

  /* a namespace client: its get kept, then the namespace cleared elsewhere */
  env_open(&e, XFT_BLOCKING);
  xf_options o = e.o;
  o.namespace_tag = 1;
  xf_client *ns, *ns_other;
  cr_assert_eq(xf_client_open(&ns, &o), XF_OK);
  o.share = NULL;
  cr_assert_eq(xf_client_open(&ns_other, &o), XF_OK);
  xf_policy q = XF_POLICY_INIT;
  q.ttl_ms = 3600000;
  cr_assert_eq(xf_set(ns, "tn:ns", 5, "v", 1, &q), XF_OK, "%s", xf_errmsg(ns));
  int64_t until = xft_now_ms() + BOUND_MS;
  uint64_t hits = 0;
  while (hits == 0) { /* until a get is a near hit */
    cr_assert_eq(xf_get(ns, "tn:ns", 5, &v), XF_OK, "%s", xf_errmsg(ns));
    xf_value_free(&v);
    xf_stats st;
    xf_client_stats(ns, &st);
    hits = st.near_hits;
    cr_assert_lt(xft_now_ms(), until, "never a near hit");
  }
  cr_assert_eq(xf_clear_namespace(ns_other), XF_OK, "%s", xf_errmsg(ns_other));
  cr_expect_eq(xf_near_serve(ns, "tn:ns", 5, NULL, XF_DRIVER_BLOCKING, NULL, &v),
               XF_NEAR_NOT_SERVED, "a namespace client's get served without its version");
  cr_expect_eq(xf_get(ns, "tn:ns", 5, &v), XF_ENOTFOUND, "cleared");
  xf_client_close(ns);
  xf_client_close(ns_other);
  env_close(&e);
}
