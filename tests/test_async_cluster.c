/* The event-loop driver (xf_async_*, on a libuv loop) against a real 3
 * masters + 3 replicas cluster (cluster_fixture.c): every key routed to its
 * slot's master, one command per hit once warm, MOVED and ASK while a slot
 * moves, redirections that never end. One test at a time: they count the
 * commands each node ran. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xfetch_libuv.h>

#include "clock.h"
#include "cluster.h"
#include "cluster_calls.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"

#define HOST "127.0.0.1"

/* ---- a handle on a loop, and calls run to their end ----------------------------- */

typedef struct handle {
  uv_loop_t loop;
  xf_async *ac;
  int pending; /* calls whose callback has not fired */
  int wrong;   /* XF_OK callbacks with a value other than "v-" + key */
  int by_source[4];
  int errors, last_rc;
  char errmsg[256];
} handle;

typedef struct call {
  handle *h;
  char key[48];
  int rc, fired;
  xf_source source;
} call;

static void open_handle_with(handle *h, const char *host, int cluster, int replicas) {
  memset(h, 0, sizeof *h);
  cr_assert_eq(uv_loop_init(&h->loop), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.cluster = cluster;
  o.read_from_replicas = replicas;
  o.seed = 7;
  o.entry_format = xft_cluster_entry_format();
  /* The counts below (loads, reads, map refreshes) assume no reply times
   * out: a busy machine with six nodes can hold one past 1 s (the default),
   * and the watchdog's drop would reload and re-route. 30 s is the margin. */
  o.connect_timeout_ms = 10000;
  o.command_timeout_ms = 30000;
  int rc = xf_async_open_libuv(&h->ac, &o, &h->loop);
  cr_assert_eq(rc, XF_OK, "open %s: %s", host, xf_strerror(rc));
}

static void open_handle(handle *h, const char *host, int cluster) {
  open_handle_with(h, host, cluster, 0);
}

static void open_node(handle *h, int i) {
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(i));
  open_handle(h, host, XF_CLUSTER_AUTO);
}

static void close_handle(handle *h) {
  xf_async_close(h->ac);
  uv_run(&h->loop, UV_RUN_DEFAULT); /* the handles' close callbacks */
  cr_expect_eq(uv_loop_close(&h->loop), 0, "every handle closed");
}

static void on_done(int rc, const xf_value *v, void *privdata) {
  call *k = privdata;
  handle *h = k->h;
  k->fired++;
  k->rc = rc;
  if (rc == XF_OK) {
    char want[64];
    int len = snprintf(want, sizeof want, "v-%s", k->key);
    k->source = v->source;
    h->by_source[v->source]++;
    h->wrong += v->len != (size_t)len || memcmp(v->data, want, v->len) != 0;
  } else {
    h->errors++;
    h->last_rc = rc;
    snprintf(h->errmsg, sizeof h->errmsg, "%s", xf_async_errmsg(h->ac));
  }
  if (--h->pending == 0)
    uv_stop(&h->loop); /* the node connections keep the loop alive */
}

/* ---- a loader: "v-" + key, counted per key, completed from a loop timer ------------ */

#define MAX_KEYS 300

typedef struct loader {
  uv_loop_t *loop;
  int calls;
  int per_key[MAX_KEYS]; /* keys "<prefix><i>" */
  int later_ms;
} loader;

typedef struct later {
  uv_timer_t timer;
  xf_async_load *load;
  char value[64];
} later;

static void later_closed(uv_handle_t *t) { free(t->data); }

static void later_fired(uv_timer_t *t) {
  later *w = t->data;
  cr_expect_eq(xf_async_load_done(w->load, w->value, strlen(w->value)), XF_OK);
  uv_close((uv_handle_t *)t, later_closed);
}

static void key_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  loader *l = ud;
  l->calls++;
  char copy[64]; /* key is not NUL-terminated */
  snprintf(copy, sizeof copy, "%.*s", (int)keylen, key);
  const char *colon = strrchr(copy, ':');
  int i = colon ? atoi(colon + 1) : 0;
  if (i >= 0 && i < MAX_KEYS)
    l->per_key[i]++;
  later *w = calloc(1, sizeof *w);
  cr_assert_not_null(w);
  snprintf(w->value, sizeof w->value, "v-%.*s", (int)keylen, key);
  if (l->later_ms == 0) {
    cr_expect_eq(xf_async_load_done(load, w->value, strlen(w->value)), XF_OK);
    free(w);
    return;
  }
  w->load = load;
  w->timer.data = w;
  uv_timer_init(l->loop, &w->timer);
  uv_timer_start(&w->timer, later_fired, (uint64_t)l->later_ms, 0);
}

static xf_policy long_ttl(void) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  p.beta = 0; /* no early recompute: the counts below are exact */
  return p;
}

/* Starts n calls (key of call i: prefix + i % nkeys; prefix alone when nkeys
 * is 0) at once and runs the loop until
 * every callback fired. */
static call *run_calls(handle *h, int n, const char *prefix, int nkeys, loader *l) {
  xf_policy p = long_ttl();
  call *calls = calloc((size_t)n, sizeof *calls);
  cr_assert_not_null(calls);
  for (int i = 0; i < n; i++) {
    calls[i].h = h;
    if (nkeys > 0)
      snprintf(calls[i].key, sizeof calls[i].key, "%s%d", prefix, i % nkeys);
    else
      snprintf(calls[i].key, sizeof calls[i].key, "%s", prefix);
    int rc = xf_async_get_or_compute(h->ac, calls[i].key, strlen(calls[i].key), &p,
                                     key_loader, l, on_done, &calls[i]);
    cr_assert_eq(rc, XF_OK, "call %d: %s", i, xf_strerror(rc));
    h->pending++;
  }
  uv_run(&h->loop, UV_RUN_DEFAULT);
  for (int i = 0; i < n; i++)
    cr_expect_eq(calls[i].fired, 1, "callback %d fired %d times", i, calls[i].fired);
  return calls;
}

/* One call on key: its code, and its source on XF_OK. */
static int get1(handle *h, const char *key, loader *l, xf_source *source) {
  call *k = run_calls(h, 1, key, 0, l);
  int rc = k->rc;
  *source = k->source;
  free(k);
  return rc;
}

static void expect_get(handle *h, const char *key, loader *l, xf_source want) {
  xf_source source = XF_SOURCE_CACHE;
  int rc = get1(h, key, l, &source);
  cr_assert_eq(rc, XF_OK, "%s: %s (%s)", key, xf_strerror(rc), h->errmsg);
  cr_expect_eq(source, want, "%s: source %d, want %d", key, source, want);
  cr_expect_eq(h->wrong, 0, "%s: the value is v-%s", key, key);
}

static int is_master(int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *role = xft_cluster_cmd(r, "ROLE");
  int master = strcmp(role->element[0]->str, "master") == 0;
  freeReplyObject(role);
  redisFree(r);
  return master;
}

/* ---- routing ------------------------------------------------------------------- */

Test(async_cluster, a_thousand_calls_over_300_keys_load_each_once_then_hit_in_one_command) {
  handle h;
  open_node(&h, 0);
  loader l = {.loop = &h.loop, .later_ms = 5};
  free(run_calls(&h, 1000, "ac:route:", MAX_KEYS, &l));
  cr_expect_eq(h.errors, 0, "last error: %s", h.errmsg);
  cr_expect_eq(h.wrong, 0);
  cr_expect_eq(l.calls, MAX_KEYS, "one loader call per key");
  for (int i = 0; i < MAX_KEYS; i++)
    cr_expect_eq(l.per_key[i], 1, "key %d loaded %d times", i, l.per_key[i]);
  xf_stats warm;
  xf_async_stats(h.ac, &warm);
  cr_expect_eq(warm.redirects, 0, "the map routes every key to its master");
  cr_expect_eq(warm.map_refreshes, 1);
  int seed_is_master = is_master(xft_cluster_port(0));
  cr_expect_eq(warm.connections, 3 + !seed_is_master,
               "one per master (and the seed's, which asked for the map)");
  xft_reset_stats();
  memset(h.by_source, 0, sizeof h.by_source);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  free(run_calls(&h, 1000, "ac:route:", MAX_KEYS, &l));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long long elapsed_ms =
      (long long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  cr_expect_eq(h.by_source[XF_SOURCE_CACHE], 1000);
  cr_expect_eq(l.calls, MAX_KEYS, "no load once warm");
  xf_stats hot;
  xf_async_stats(h.ac, &hot);
  cr_expect_eq(hot.redirects, 0);
  cr_expect_eq(hot.map_refreshes, 1);
  /* One round trip per hit: a plain read (GET; format 1: HMGET), nothing
   * else; the read script only to refresh the estimates of the masters'
   * clocks (clock.h):
   * one per half refresh period per node, however many calls are in flight
   * on its connection. */
  long long reads = xft_total_calls(xft_cluster_read_cmd()),
            scripts = xft_total_calls("evalsha_ro");
  cr_expect_leq(scripts, 3 * (1 + elapsed_ms / (XF_CLOCK_REFRESH_MS / 2)),
                "%lld read scripts in %lld ms", scripts, elapsed_ms);
  /* A read script runs that read too: reads - scripts are plain ones. */
  cr_expect_leq(reads - scripts, 1000, "at most one plain read per hit");
  cr_expect_geq(reads, 1000, "every hit read");
  cr_expect_eq(xft_total_calls("evalsha"), 0);
  cr_expect_eq(xft_total_calls("cluster|slots"), 0);
  cr_expect_eq(xft_total_calls("asking"), 0);
  close_handle(&h);
}

Test(async_cluster, replica_reads_serve_hits_from_the_replicas) {
  handle w;
  open_node(&w, 2);
  loader l = {.loop = &w.loop};
  free(run_calls(&w, 100, "ac:replica:", 100, &l));
  cr_expect_eq(l.calls, 100);
  close_handle(&w);
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) { /* the replicas have caught up */
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "WAIT 1 2000"));
    redisFree(r);
  }
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  handle h;
  open_handle_with(&h, host, XF_CLUSTER_AUTO, 1);
  long long before[XFT_CLUSTER_NODES];
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) /* a read (the script's too) */
    before[i] = xft_calls_of(xft_cluster_port(i), xft_cluster_read_cmd());
  loader r = {.loop = &h.loop};
  free(run_calls(&h, 100, "ac:replica:", 100, &r));
  cr_expect_eq(h.errors, 0, "last error: %s", h.errmsg);
  cr_expect_eq(h.by_source[XF_SOURCE_CACHE], 100);
  cr_expect_eq(r.calls, 0);
  long long on_replicas = 0, on_masters = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    long long ran = xft_calls_of(xft_cluster_port(i), xft_cluster_read_cmd()) - before[i];
    if (!is_master(xft_cluster_port(i)))
      on_replicas += ran;
    else
      on_masters += ran;
  }
  cr_expect_geq(on_replicas, 100, "every hit read on a replica (%lld)", on_replicas);
  cr_expect_eq(on_masters, 0, "no hit read on a master (plain or script)");
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 0, "READONLY went first on the replicas' connections");
  close_handle(&h);
}

Test(async_cluster, a_thousand_calls_on_one_cold_hot_key_load_once) {
  handle h;
  open_node(&h, 1);
  loader l = {.loop = &h.loop, .later_ms = 20};
  free(run_calls(&h, 1000, "ac:hot:", 1, &l));
  cr_expect_eq(h.errors, 0, "last error: %s", h.errmsg);
  cr_expect_eq(h.wrong, 0);
  cr_expect_eq(l.calls, 1, "one loader call for 1,000 concurrent calls");
  cr_expect_eq(h.by_source[XF_SOURCE_LOADER], 1);
  cr_expect_eq(h.by_source[XF_SOURCE_CACHE], 999);
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 0);
  close_handle(&h);
}

Test(async_cluster, a_seed_list_and_cluster_on_route_too) {
  char host[128];
  snprintf(host, sizeof host, HOST ":1," HOST ":%d", xft_cluster_port(4));
  handle h;
  open_handle(&h, host, XF_CLUSTER_ON);
  loader l = {.loop = &h.loop};
  free(run_calls(&h, 30, "ac:seeds:", 30, &l));
  cr_expect_eq(h.errors, 0, "last error: %s", h.errmsg);
  cr_expect_eq(h.wrong, 0);
  free(run_calls(&h, 30, "ac:seeds:", 30, &l));
  cr_expect_eq(l.calls, 30);
  cr_expect_eq(h.by_source[XF_SOURCE_CACHE], 30);
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 0);
  close_handle(&h);
}

Test(async_cluster, cluster_off_talks_to_the_seed_alone) {
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  handle h;
  open_handle(&h, host, XF_CLUSTER_OFF);
  loader l = {.loop = &h.loop};
  free(run_calls(&h, 30, "ac:off:", 30, &l));
  cr_expect_gt(h.errors, 0, "never routed, so MOVED comes back as an error");
  cr_expect_eq(h.last_rc, XF_EREDIS);
  cr_expect(strstr(h.errmsg, "MOVED") != NULL, "%s", h.errmsg);
  close_handle(&h);
}

/* ---- a slot on the move --------------------------------------------------------- */

Test(async_cluster, a_migrated_slot_is_followed_by_moved) {
  const char *key = "{ac-moved}k:0";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  handle h;
  open_node(&h, 0);
  loader l = {.loop = &h.loop};
  expect_get(&h, key, &l, XF_SOURCE_LOADER);
  xft_migrate_key(slot, &from, &to, key);
  xft_assign(slot, &to);
  expect_get(&h, key, &l, XF_SOURCE_CACHE);
  expect_get(&h, key, &l, XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 1, "the entry moved with its slot: never reloaded");
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 1, "one MOVED, then the map knows");
  close_handle(&h);
}

Test(async_cluster, a_slot_mid_migration_is_followed_by_ask) {
  const char *kept = "{ac-ask}k:0", *gone = "{ac-ask}k:1";
  int slot = xf__cluster_keyslot(kept, strlen(kept));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  handle h;
  open_node(&h, 1);
  loader l = {.loop = &h.loop};
  expect_get(&h, kept, &l, XF_SOURCE_LOADER);
  expect_get(&h, gone, &l, XF_SOURCE_LOADER);
  xft_migrate_key(slot, &from, &to, gone);
  /* gone now lives on the target: ASK; kept is still served by the source. */
  xft_reset_stats();
  expect_get(&h, gone, &l, XF_SOURCE_CACHE);
  expect_get(&h, kept, &l, XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 2);
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 1, "one ASK; the map was left alone");
  /* The target's clock is not known yet: the read there is the script (the
   * hit's plain read, if the client's estimates were fresh, is followed by it,
   * sent there again with ASKING, not via the source: no second ASK). */
  long long scripts = xft_calls_of(to.port, "evalsha_ro");
  /* a script reads by the plain read's command too */
  long long plain = xft_calls_of(to.port, xft_cluster_read_cmd()) - scripts;
  cr_expect_leq(plain, 1, "the hit's plain read, at most (%lld)", plain);
  cr_expect_eq(scripts, 1, "and the read script");
  cr_expect_eq(xft_calls_of(to.port, "asking"), 1 + plain, "ASKING before each");
  expect_get(&h, gone, &l, XF_SOURCE_CACHE);
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 2, "ASK again: the slot is still the source's");
  cr_expect_eq(l.calls, 2);
  xft_migrate_key(slot, &from, &to, kept);
  xft_assign(slot, &to);
  close_handle(&h);
}

Test(async_cluster, an_ask_target_without_the_scripts_gets_them_loaded) {
  const char *kept = "{ac-ask-noscript}k:0", *gone = "{ac-ask-noscript}k:1";
  int slot = xf__cluster_keyslot(kept, strlen(kept));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  handle h;
  open_node(&h, 2);
  loader l = {.loop = &h.loop};
  expect_get(&h, kept, &l, XF_SOURCE_LOADER);
  expect_get(&h, gone, &l, XF_SOURCE_LOADER);
  free(run_calls(&h, 30, "ac:ask-warm:", 30, &l)); /* a connection to every master */
  xft_migrate_key(slot, &from, &to, gone);
  redisContext *t = xft_cluster_redis(to.port); /* as after a restart */
  freeReplyObject(xft_cluster_cmd(t, "SCRIPT FLUSH"));
  redisFree(t);
  xft_cluster_sleep_ms(XF_CLOCK_REFRESH_MS / 2 + 50); /* the read is a script again */
  xft_reset_stats();
  /* The slot's master (the source) has the scripts: only a load on the ASK
   * target itself lets the read run there. */
  expect_get(&h, gone, &l, XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 32);
  cr_expect_eq(xft_calls_of(to.port, "script|load"), 1, "loaded on the target");
  cr_expect_eq(xft_calls_of(to.port, "asking"), 2, "ASKING before the read, twice");
  xft_migrate_key(slot, &from, &to, kept);
  xft_assign(slot, &to);
  close_handle(&h);
}

Test(async_cluster, redirections_that_never_end_give_a_clear_error) {
  const char *key = "{ac-loop}k:0";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  /* The owner now says the slot is the other's, which says it is the owner's:
   * each answers MOVED to the other. */
  redisContext *o = xft_cluster_redis(owner.port);
  xft_expect_ok(xft_cluster_cmd(o, "CLUSTER SETSLOT %d NODE %s", slot, other.id));
  handle h;
  open_node(&h, 0);
  loader l = {.loop = &h.loop};
  xf_source source;
  int rc = get1(&h, key, &l, &source);
  cr_expect_eq(rc, XF_EREDIS, "got %s", xf_errname(rc));
  cr_expect(strstr(h.errmsg, "redirections") != NULL, "%s", h.errmsg);
  cr_expect_eq(l.calls, 0, "an error before the loader: it is not called");
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 5);
  xft_expect_ok(xft_cluster_cmd(o, "CLUSTER SETSLOT %d NODE %s", slot, owner.id));
  redisFree(o);
  h.errors = 0;
  expect_get(&h, key, &l, XF_SOURCE_LOADER); /* healed */
  close_handle(&h);
}

typedef struct restore {
  uv_timer_t timer;
  int port, slot, polls;
} restore;

/* Every 5 ms on the loop: once the owner has answered CLUSTERDOWN (or after
 * 10 s, so the loop ends), the slot is given back; a fixed 30 ms delay raced
 * the call on a busy machine. */
static void restore_slot(uv_timer_t *t) {
  restore *w = t->data;
  if (xft_errors_of(w->port, "CLUSTERDOWN") < 1 && ++w->polls < 2000)
    return;
  redisContext *r = xft_cluster_redis(w->port);
  xft_expect_ok(xft_cluster_cmd(r, "CLUSTER ADDSLOTS %d", w->slot));
  redisFree(r);
  uv_close((uv_handle_t *)t, NULL);
}

Test(async_cluster, clusterdown_is_retried_from_the_loop_timer_until_the_slot_is_back) {
  const char *key = "{ac-down}k:0";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", other.port); /* its map keeps the slot */
  handle h;
  open_handle(&h, host, XF_CLUSTER_AUTO);
  loader l = {.loop = &h.loop};
  expect_get(&h, key, &l, XF_SOURCE_LOADER);
  xft_reset_stats();
  /* The owner stops serving the slot (CLUSTERDOWN) until the call has met it
   * once, then gets it back within about 5 ms: the retries' backoff (10 + 20
   * + 40 + 80 + 160 ms) leaves 310 ms for that, 60 times the poll. */
  redisContext *o = xft_cluster_redis(owner.port);
  xft_expect_ok(xft_cluster_cmd(o, "CLUSTER DELSLOTS %d", slot));
  redisFree(o);
  restore w = {.port = owner.port, .slot = slot};
  uv_timer_init(&h.loop, &w.timer);
  w.timer.data = &w;
  uv_timer_start(&w.timer, restore_slot, 5, 5);
  expect_get(&h, key, &l, XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 1, "never reloaded");
  cr_expect_geq(xft_errors_of(owner.port, "CLUSTERDOWN"), 1, "the call met CLUSTERDOWN");
  xf_stats st;
  xf_async_stats(h.ac, &st);
  cr_expect_eq(st.redirects, 0);
  close_handle(&h);
}

/* ---- scripts ------------------------------------------------------------------------ */

Test(async_cluster, a_node_that_lost_its_scripts_gets_them_again) {
  handle h;
  open_node(&h, 2);
  loader l = {.loop = &h.loop};
  free(run_calls(&h, 30, "ac:noscript:", 30, &l));
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) { /* as after a restart */
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "SCRIPT FLUSH"));
    redisFree(r);
  }
  /* Old estimates of the servers' clocks: the reads are scripts again. */
  xft_cluster_sleep_ms(XF_CLOCK_REFRESH_MS / 2 + 50);
  xft_reset_stats();
  memset(h.by_source, 0, sizeof h.by_source);
  free(run_calls(&h, 30, "ac:noscript:", 30, &l));
  cr_expect_eq(h.errors, 0, "last error: %s", h.errmsg);
  cr_expect_eq(h.by_source[XF_SOURCE_CACHE], 30);
  cr_expect_eq(l.calls, 30);
  long long loads = xft_total_calls("script|load");
  cr_expect(loads >= 1 && loads <= 30, "%lld SCRIPT LOADs, each on the node that lost it",
            loads);
  close_handle(&h);
}

static void on_code(int rc, void *privdata) {
  call *k = privdata;
  k->fired++;
  k->rc = rc;
  if (--k->h->pending == 0)
    uv_stop(&k->h->loop);
}

/* The event loop's invalidation: its fence is WAIT 1 where the tag's master
 * has a replica, on the connection its raise went on. */
Test(async_cluster, an_invalidation_waits_for_a_replica_on_its_raise_s_connection) {
  const char *tags[] = {"wr-e"}, *key = "xf-tag:{wr-e}";
  xft_node owner, other;
  xft_masters_of(xf__cluster_keyslot(key, strlen(key)), &owner, &other);
  handle h;
  open_node(&h, 2);
  redisContext *m = NULL;
  for (int i = 0; i < 3; i++) {
    if (i == 1) /* the first one connected and mapped */
      m = xft_monitor(owner.port);
    call k = {.h = &h};
    h.pending = 1;
    cr_assert_eq(xf_async_invalidate_tags(h.ac, tags, 1, on_code, &k), XF_OK);
    uv_run(&h.loop, UV_RUN_DEFAULT);
    cr_assert_eq(k.fired, 1);
    cr_assert_eq(k.rc, XF_OK, "%s", xf_async_errmsg(h.ac));
  }
  xft_raises seen = xft_raises_seen(m, owner.port);
  cr_expect_eq(seen.raises, 2);
  cr_expect_eq(seen.waits, 2);
  cr_expect_eq(seen.waits_on_the_raise_s_connection, 2);
  close_handle(&h);
}
