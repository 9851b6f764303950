/* The near cache on the 3 masters + 3 replicas test cluster: tracking per
 * node (one invalidation connection each), another client's write seen on
 * every node, a node's connections lost or a slot moved away drop what
 * that node tracked. One test at a time: they move slots and kill
 * connections. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "cluster_calls.h"
#include "cluster_failover.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "near_impl.h"
#include "share.h"
#include "xfetch.h"

#define BOUND_MS 5000
#define NKEYS 12

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static xf_client *open_client(xf_share *share) {
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", xft_cluster_port(0));
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.share = share;
  o.seed = 3;
  o.connect_timeout_ms = o.command_timeout_ms = XFT_CLUSTER_PATIENT_MS;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static xf_share *near_share(void) {
  xf_share *s;
  xf_share_options so = {.near_cache_bytes = 1 << 20};
  cr_assert_eq(xf_share_open(&s, &so), XF_OK);
  return s;
}

static void put(xf_client *c, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, key, strlen(key), value, strlen(value), &p), XF_OK, "%s",
               xf_errmsg(c));
}

/* Reads key until its value is want (bounded): a write is seen once its
 * invalidation came in. */
static void expect_soon(xf_client *c, const char *key, const char *want) {
  int64_t until = mono_ms() + BOUND_MS;
  for (;;) {
    xf_value v;
    int rc = xf_get(c, key, strlen(key), &v);
    int same = rc == XF_OK ? strcmp(v.data, want) == 0 : want[0] == '\0';
    xf_value_free(&v);
    if (same)
      return;
    cr_assert_lt(mono_ms(), until, "%s never became \"%s\"", key, want);
    xft_cluster_sleep_ms(1);
  }
}

static uint64_t near_hits(xf_client *c) {
  xf_stats st;
  xf_client_stats(c, &st);
  return st.near_hits;
}

/* Reads key (its value want) until a read is a near hit: bounded (a hit goes
 * to Redis while the tracker has invalidations still to read). */
static void expect_near_hit(xf_client *c, const char *key, const char *want) {
  uint64_t before = near_hits(c);
  int64_t until = mono_ms() + BOUND_MS;
  while (near_hits(c) == before && mono_ms() < until) {
    expect_soon(c, key, want);
    if (near_hits(c) == before)
      xft_cluster_sleep_ms(1);
  }
  cr_assert_gt(near_hits(c), before, "%s: never a near hit", key);
}

/* Until the tracker has seen more than `seen` invalidations and applied all
 * it read: near_env.c's near_await_invalidations. */
static void await_invalidations(xf_share *s, uint64_t seen) {
  struct xf__ncache *n = xf__share_near(s);
  int64_t until = mono_ms() + BOUND_MS;
  while ((xf__near_invalidations(n) <= seen || xf__near_news_waiting(n)) &&
         mono_ms() < until)
    xft_cluster_sleep_ms(1);
  cr_assert_gt(xf__near_invalidations(n), seen, "no invalidation came");
  cr_assert_not(xf__near_news_waiting(n), "the tracker never applied what it read");
}

Test(near_cluster, every_node_tracks_and_invalidates) {
  xf_share *s = near_share();
  xf_client *c = open_client(s), *other = open_client(NULL);
  char key[32];
  for (int i = 0; i < NKEYS; i++) { /* keys on every master */
    snprintf(key, sizeof key, "nc:%d", i);
    put(other, key, "old");
    expect_soon(c, key, "old");
  }
  for (int i = 0; i < NKEYS; i++) { /* every node's keys kept */
    snprintf(key, sizeof key, "nc:%d", i);
    expect_near_hit(c, key, "old");
  }
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "nc:%d", i);
    put(other, key, "new");
  }
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "nc:%d", i);
    expect_soon(c, key, "new");
  }
  xf_client_close(other);
  xf_client_close(c);
  xf_share_close(s);
}

/* The batch driver on the cluster: its first round (one read per slot,
 * keys on every master) fills the near cache, so its next call is all near
 * hits; a key written elsewhere is read again, the others stay near. */
static void many(xf_client *c, size_t n, const char *const *keys, const char *want3,
                 const char *want) {
  size_t lens[NKEYS];
  xf_value v[NKEYS];
  int rcs[NKEYS];
  for (size_t i = 0; i < n; i++)
    lens[i] = strlen(keys[i]);
  xf_policy p = XF_POLICY_INIT;
  int calls = 0;
  cr_assert_eq(xf_get_or_compute_many(c, n, keys, lens, &p, xft_key_loader, &calls, v, rcs),
               XF_OK);
  cr_assert_eq(calls, 0);
  for (size_t i = 0; i < n; i++) {
    cr_assert_eq(rcs[i], XF_OK, "%s: %s", keys[i], xf_strerror(rcs[i]));
    cr_assert_str_eq(v[i].data, i == 3 ? want3 : want, "%s", keys[i]);
    xf_value_free(&v[i]);
  }
}

Test(near_cluster, a_batch_fills_and_is_served_from_the_near_cache) {
  xf_share *s = near_share();
  xf_client *c = open_client(s), *other = open_client(NULL);
  char names[NKEYS][16];
  const char *keys[NKEYS];
  for (int i = 0; i < NKEYS; i++) { /* 3 keys in each of 4 slots */
    snprintf(names[i], sizeof names[i], "{nb%d}:%d", i % 4, i);
    keys[i] = names[i];
    put(other, keys[i], "old");
  }
  many(c, NKEYS, keys, "old", "old");
  uint64_t hits = near_hits(c);
  many(c, NKEYS, keys, "old", "old");
  cr_assert_eq(near_hits(c) - hits, NKEYS, "the first batch did not fill the near cache");
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  put(other, keys[3], "new");
  await_invalidations(s, seen);
  hits = near_hits(c);
  many(c, NKEYS, keys, "new", "old");
  cr_assert_eq(near_hits(c) - hits, NKEYS - 1);
  xf_client_close(other);
  xf_client_close(c);
  xf_share_close(s);
}

/* A fault on the master of key (its tracked data connections killed, its
 * invalidation connection killed, FLUSHALL): what that node tracked drops at
 * once, and a write made afterwards is seen. */
static void fault_on_owner(const char *key, const char *fault) {
  xft_node owner, other_master;
  xft_masters_of(xf__cluster_keyslot(key, strlen(key)), &owner, &other_master);
  xf_share *s = near_share();
  xf_client *c = open_client(s), *other = open_client(NULL);
  put(other, key, "old");
  expect_near_hit(c, key, "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  redisContext *raw = xft_cluster_redis(owner.port);
  freeReplyObject(xft_cluster_cmd(raw, fault));
  redisFree(raw);
  await_invalidations(s, seen);
  put(other, key, "new");
  expect_soon(c, key, "new");
  expect_near_hit(c, key, "new"); /* tracked again */
  xf_client_close(other);
  xf_client_close(c);
  xf_share_close(s);
}

Test(near_cluster, a_nodes_killed_data_connections_drop_its_entries) {
  fault_on_owner("{nc-kill}k", "CLIENT KILL TYPE normal");
}

Test(near_cluster, a_nodes_killed_invalidation_connection_drops_its_entries) {
  fault_on_owner("{nc-pubsub}k", "CLIENT KILL TYPE pubsub");
}

Test(near_cluster, a_nodes_flushall_drops_its_entries) {
  fault_on_owner("{nc-flush}k", "FLUSHALL");
}

/* ---- tags whose keys sit on other masters than their entry ---- */

static long long reads_everywhere(void) {
  return xft_total_calls("get") + xft_total_calls("evalsha") +
         xft_total_calls("evalsha_ro");
}

/* One tagged get-or-compute of key: its value (the loader's runs so far);
 * *sent the reads the cluster ran for it. */
static int tagged_call(xf_client *c, const char *key, const char *const *tags, int *calls,
                       long long *sent) {
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = 2;
  long long before = reads_everywhere();
  xf_value v;
  int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_key_loader, calls, &v);
  cr_assert_eq(rc, XF_OK, "%s: %s", key, xf_errmsg(c));
  if (sent)
    *sent = reads_everywhere() - before;
  int source = v.source;
  xf_value_free(&v);
  return source;
}

/* Calls until a call reads nothing anywhere (bounded). */
static void tagged_warm(xf_client *c, const char *key, const char *const *tags,
                        int *calls) {
  int64_t until = mono_ms() + BOUND_MS;
  long long sent = 1;
  while (tagged_call(c, key, tags, calls, &sent) != XF_SOURCE_CACHE || sent != 0)
    cr_assert_lt(mono_ms(), until, "%s: never a tagged hit reading nothing", key);
}

/* An entry on one master, its 2 tags' keys on the others (their slots'
 * masters): a warm tagged hit reads nothing on any node (the versions kept,
 * each tracked on its own node: at most 2 of 20 hits go to Redis, a hit
 * does while the tracker holds bytes it has not applied); another client's
 * invalidation of a tag is seen by the next call; the invalidation
 * connection of a tag's master killed, then an invalidation that master can
 * no longer tell: the next call loads; then it is kept again. */
Test(near_cluster, tags_on_other_masters_are_kept_and_their_invalidations_seen) {
  const char *key = "{nct-e}k";
  xft_node owner, unused;
  xft_masters_of(xf__cluster_keyslot(key, strlen(key)), &owner, &unused);
  static char names[2][16];
  const char *tags[2];
  xft_node tag_owner[2];
  int found = 0;
  for (int i = 0; found < 2 && i < 200; i++) { /* tags on other masters */
    char tag_key[40];
    snprintf(names[found], sizeof names[found], "nct-%d", i);
    int len = snprintf(tag_key, sizeof tag_key, "xf-tag:{%s}", names[found]);
    xft_masters_of(xf__cluster_keyslot(tag_key, (size_t)len), &tag_owner[found], &unused);
    if (tag_owner[found].port != owner.port)
      tags[found] = names[found], found++;
  }
  cr_assert_eq(found, 2);
  xf_share *s = near_share();
  xf_client *c = open_client(s), *other = open_client(NULL);
  int calls = 0;
  tagged_warm(c, key, tags, &calls);
  int sent_some = 0;
  for (int i = 0; i < 20; i++) {
    long long sent;
    cr_assert_eq(tagged_call(c, key, tags, &calls, &sent), XF_SOURCE_CACHE);
    sent_some += sent > 0;
  }
  cr_expect_leq(sent_some, 2, "%d of 20 warm tagged hits read", sent_some);
  cr_assert_eq(xf_invalidate_tags(other, tags + 1, 1), XF_OK, "%s", xf_errmsg(other));
  cr_expect_eq(tagged_call(c, key, tags, &calls, NULL), XF_SOURCE_LOADER);
  tagged_warm(c, key, tags, &calls);
  redisContext *raw = xft_cluster_redis(tag_owner[0].port);
  freeReplyObject(xft_cluster_cmd(raw, "CLIENT KILL TYPE pubsub"));
  redisFree(raw);
  cr_assert_eq(xf_invalidate_tags(other, tags, 1), XF_OK, "%s", xf_errmsg(other));
  cr_expect_eq(tagged_call(c, key, tags, &calls, NULL), XF_SOURCE_LOADER);
  tagged_warm(c, key, tags, &calls);
  cr_expect_eq(calls, 3);
  xf_client_close(other);
  xf_client_close(c);
  xf_share_close(s);
}

/* The slot moves to another master: the key's deletion on the old one
 * invalidates it; reads follow MOVED and are tracked on the new one. */
Test(near_cluster, a_slot_move_drops_and_tracks_on_the_new_node) {
  const char *key = "{nc-move}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  xf_share *s = near_share();
  xf_client *c = open_client(s), *other = open_client(NULL);
  put(other, key, "old");
  expect_soon(c, key, "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  xft_migrate_key(slot, &from, &to, key);
  xft_assign(slot, &to);
  await_invalidations(s, seen);
  expect_near_hit(c, key, "old"); /* read on the new owner, kept */
  put(other, key, "new");
  expect_soon(c, key, "new");
  xft_migrate_key(slot, &to, &from, key); /* back, for the other tests */
  xft_assign(slot, &from);
  xf_client_close(other);
  xf_client_close(c);
  xf_share_close(s);
}

/* A manual failover of the key's master: what the old master tracked goes
 * (the write reaches it as a replica and invalidates, or its connections
 * go), no read after the failover and the write sees the old value, and the
 * key is tracked on the promoted node. */
Test(near_cluster, a_failover_drops_and_tracks_on_the_promoted_node) {
  const char *key = "{nc-fo}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other_master;
  xft_masters_of(slot, &owner, &other_master);
  int replica = xft_slot_replica(xft_cluster_shared(), slot);
  xf_share *s = near_share();
  xf_client *c = open_client(s), *other = open_client(NULL);
  put(other, key, "old");
  xft_replicated(xft_cluster_shared(), owner.port);
  expect_near_hit(c, key, "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  xft_promote(xft_cluster_shared(), replica);
  xft_node_wait_info(xft_cluster_shared(), owner.port, "master_link_status:up");
  xft_wait_replica_listed(xft_cluster_shared(), slot, owner.port);
  put(other, key, "new"); /* on the promoted node (MOVED) */
  await_invalidations(s, seen);
  xf_value v;
  cr_assert_eq(xf_get(c, key, strlen(key), &v), XF_OK, "%s", xf_errmsg(c));
  cr_assert_str_eq(v.data, "new", "a stale read after the failover");
  xf_value_free(&v);
  expect_near_hit(c, key, "new"); /* tracked on the promoted node */
  seen = xf__near_invalidations(xf__share_near(s));
  put(other, key, "newer");
  await_invalidations(s, seen);
  expect_soon(c, key, "newer");
  xft_promote(xft_cluster_shared(), owner.port); /* back as it was */
  xft_node_wait_info(xft_cluster_shared(), replica, "master_link_status:up");
  xft_wait_replica_listed(xft_cluster_shared(), slot, replica);
  xf_client_close(other);
  xf_client_close(c);
  xf_share_close(s);
}
