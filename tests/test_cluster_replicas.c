/* The blocking client on a real 3 masters + 3 replicas cluster when replicas
 * and slots misbehave: a replica that answers an error (MASTERDOWN), a
 * failover that turns a master into a replica, a replica that lags behind its
 * master's lease, slots refused to a whole batch (CLUSTERDOWN). Each test
 * restores the cluster; one test at a time. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "cluster_calls.h"
#include "cluster_failover.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "xfetch.h"

#define HOST "127.0.0.1"

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST);
  char v[96];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  return xf_sink_set(sink, v, (size_t)len);
}

static xf_client *open_timed(int port, int replicas, int timeout_ms) {
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", port);
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.read_from_replicas = replicas;
  o.seed = 7;
  o.connect_timeout_ms = o.command_timeout_ms = timeout_ms;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  cr_assert_eq(rc, XF_OK, "open %s: %s", host, xf_strerror(rc));
  return c;
}

static xf_client *open_at(int port, int replicas) {
  return open_timed(port, replicas, XFT_CLUSTER_PATIENT_MS);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void config(int port, const char *name, const char *value) {
  redisContext *r = xft_cluster_redis(port);
  xft_expect_ok(xft_cluster_cmd(r, "CONFIG SET %s %s", name, value));
  redisFree(r);
}

/* Cuts the replica off its master: a wrong password keeps it from coming back. */
static void link_down(int replica) {
  config(replica, "masterauth", "not-the-password");
  redisContext *r = xft_cluster_redis(replica);
  freeReplyObject(xft_cluster_cmd(r, "CLIENT KILL TYPE master"));
  redisFree(r);
  xft_node_wait_info(xft_cluster_shared(), replica, "master_link_status:down");
}

static void link_up(int replica) {
  config(replica, "masterauth", "");
  config(replica, "replica-serve-stale-data", "yes");
  xft_node_wait_info(xft_cluster_shared(), replica, "master_link_status:up");
}

static void get(xf_client *c, const char *key, const xf_policy *p, int *calls,
                xf_source want) {
  xf_value v;
  int rc = xf_get_or_compute(c, key, strlen(key), p, loader, calls, &v);
  cr_assert_eq(rc, XF_OK, "%s: %s (%s)", key, xf_strerror(rc), xf_errmsg(c));
  char value[96];
  snprintf(value, sizeof value, "v-%s", key);
  cr_expect_str_eq(v.data, value);
  cr_expect_eq(v.source, want, "%s: source %d, want %d", key, v.source, want);
  xf_value_free(&v);
}

/* A replica whose link is down and may not serve stale data answers
 * -MASTERDOWN: the master holds the value, so it is read there. */
Test(cluster_replicas, a_replica_that_answers_an_error_is_read_through_its_master) {
  const char *key = "{cr-down}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  int replica = xft_slot_replica(xft_cluster_shared(), slot);
  xf_client *w = open_at(owner.port, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  get(w, key, &p, &calls, XF_SOURCE_LOADER);
  xft_replicated(xft_cluster_shared(), owner.port);
  config(replica, "replica-serve-stale-data", "no");
  link_down(replica);
  xf_client *c = open_at(other.port, 1);
  for (int i = 0; i < 10; i++)
    get(c, key, &p, &calls, XF_SOURCE_CACHE);
  cr_expect_eq(calls, 1, "the value was loaded once, by the writer");
  cr_expect_geq(xft_errors_of(replica, "MASTERDOWN"), 1, "the replica was asked");
  link_up(replica);
  xf_client_close(c);
  xf_client_close(w);
}

/* A manual failover swaps a master and its replica: the client's connection
 * to the old master was opened without READONLY. */
Test(cluster_replicas, after_a_failover_replica_reads_are_not_redirected) {
  const char *key = "{cr-failover}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  int replica = xft_slot_replica(xft_cluster_shared(), slot);
  xf_client *c = open_at(other.port, 1);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  get(c, key, &p, &calls, XF_SOURCE_LOADER); /* connects to the master */
  xft_replicated(xft_cluster_shared(), owner.port);
  for (int i = 0; i < 10; i++)
    get(c, key, &p, &calls, XF_SOURCE_CACHE); /* and to its replica */
  xft_promote(xft_cluster_shared(), replica);
  xft_node_wait_info(xft_cluster_shared(), owner.port, "master_link_status:up");
  xft_wait_replica_listed(xft_cluster_shared(), slot, owner.port);
  /* A write meets the old master: MOVED, and the map is loaded again. */
  char value[64];
  int len = snprintf(value, sizeof value, "v-%s", key);
  cr_assert_eq(xf_set(c, key, strlen(key), value, (size_t)len, &p), XF_OK, "%s",
               xf_errmsg(c));
  xf_stats before, after;
  xf_client_stats(c, &before);
  for (int i = 0; i < 200; i++)
    get(c, key, &p, &calls, XF_SOURCE_CACHE);
  xf_client_stats(c, &after);
  cr_expect_eq(calls, 1);
  cr_expect_leq(after.redirects - before.redirects, 2, "%llu redirects for 200 reads",
                (unsigned long long)(after.redirects - before.redirects));
  xft_promote(xft_cluster_shared(), owner.port); /* back as it was */
  xft_node_wait_info(xft_cluster_shared(), replica, "master_link_status:up");
  xft_wait_replica_listed(xft_cluster_shared(), slot, replica);
  xf_client_close(c);
}

/* The replica still shows a lease its master's entry no longer needs (a
 * value was written since): the waiter must not wait it out and load again. */
Test(cluster_replicas, a_lease_seen_on_a_lagging_replica_is_checked_on_the_master) {
  const char *key = "{cr-lag}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  int replica = xft_slot_replica(xft_cluster_shared(), slot);
  redisContext *m = xft_cluster_redis(owner.port);
  freeReplyObject(xft_cluster_cmd(m, "DEL %s", key));
  /* Someone else's live lease, with no value yet (lua/lease.lua's shape). */
  redisReply *t = xft_cluster_cmd(m, "TIME");
  long long ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
  freeReplyObject(t);
  freeReplyObject(xft_cluster_cmd(m, "HSET %s l other:%lld", key, ms + 30000));
  freeReplyObject(xft_cluster_cmd(m, "PEXPIRE %s 30000", key));
  redisFree(m);
  xft_replicated(xft_cluster_shared(), owner.port);
  link_down(replica);
  /* The value lands on the master; the replica does not see it. */
  xf_client *w = open_at(owner.port, 0);
  xf_policy p = xft_long_ttl();
  char value[64];
  int len = snprintf(value, sizeof value, "v-%s", key);
  cr_assert_eq(xf_set(w, key, strlen(key), value, (size_t)len, &p), XF_OK);
  xf_client *c = open_at(other.port, 1);
  p.wait_ms = 5000; /* a wait ends by its value, long before this */
  int calls = 0;
  double t0 = now_ms();
  get(c, key, &p, &calls, XF_SOURCE_CACHE);
  double took = now_ms() - t0;
  cr_expect_eq(calls, 0, "never loaded: the master holds a fresh value");
  /* Margin: the fixed path is one read on the master (ms); a waiter that
   * waits its wait_ms out takes 5 s. */
  cr_expect_lt(took, 4000, "%.0f ms: the waiter waited its wait_ms out", took);
  link_up(replica);
  xf_client_close(c);
  xf_client_close(w);
}

static void wait_cluster_ok(int port) {
  for (int i = 0; i < 1000; i++) {
    redisContext *r = xft_cluster_redis(port);
    redisReply *info = xft_cluster_cmd(r, "CLUSTER INFO");
    int ok = strstr(info->str, "cluster_state:ok") != NULL;
    freeReplyObject(info);
    redisFree(r);
    if (ok)
      return;
    xft_cluster_sleep_ms(10);
  }
  cr_assert_fail("node %d never came back to cluster_state:ok", port);
}

/* Keys whose slots their master stops serving: each is refused (CLUSTERDOWN)
 * until its retries run out and it fails open. A batch waits that out once. */
Test(cluster_replicas, a_batch_refused_by_its_slots_backs_off_once) {
  enum { N = 20 };
  xft_node owner, other;
  xft_masters_of(0, &owner, &other);
  char buf[N][32];
  const char *keys[N];
  size_t lens[N];
  int slots[N];
  for (int i = 0, k = 0; k < N; i++) { /* N keys in distinct slots of owner's */
    char key[32];
    snprintf(key, sizeof key, "cr:batch:%d", i);
    int slot = xf__cluster_keyslot(key, strlen(key)), dup = 0;
    xft_node o, t;
    xft_masters_of(slot, &o, &t);
    for (int j = 0; j < k; j++)
      dup |= slots[j] == slot;
    if (o.port != owner.port || dup)
      continue;
    snprintf(buf[k], sizeof buf[k], "%s", key);
    keys[k] = buf[k];
    lens[k] = strlen(key);
    slots[k++] = slot;
  }
  xf_client *c = open_at(other.port, 0); /* its map keeps the slots */
  xf_policy p = xft_long_ttl();
  int calls = 0;
  get(c, "{cr-batch-warm}", &p, &calls, XF_SOURCE_LOADER);
  redisContext *o = xft_cluster_redis(owner.port);
  for (int i = 0; i < N; i++)
    xft_expect_ok(xft_cluster_cmd(o, "CLUSTER DELSLOTS %d", slots[i]));
  xf_value v[N];
  int rcs[N];
  double t0 = now_ms();
  cr_assert_eq(xf_get_or_compute_many(c, N, keys, lens, &p, loader, &calls, v, rcs), XF_OK);
  double took = now_ms() - t0;
  for (int i = 0; i < N; i++) {
    xft_expect_ok(xft_cluster_cmd(o, "CLUSTER ADDSLOTS %d", slots[i]));
    cr_expect_eq(rcs[i], XF_OK);
    cr_expect_eq(v[i].source, XF_SOURCE_UNCACHED, "key %d: refused, so failed open", i);
    xf_value_free(&v[i]);
  }
  redisFree(o);
  wait_cluster_ok(owner.port);
  /* One call's retries take 10 + 20 + 40 + 80 + 160 = 310 ms; twenty in a row
   * took six seconds (at least 20 x 310 ms = 6.2 s). Margin: 3.7 s over the
   * one back-off for a busy machine, 2.2 s under the twenty. */
  cr_expect_lt(took, 4000, "%.0f ms for %d refused keys", took, N);
  xf_client_close(c);
}

/* The tagged entry key (in its tag's slot: on the same master), loaded and
 * then a hit, everything replicated; c is the client that read it. */
static void tagged_entry(xf_client *c, const char *key, const xf_policy *p, int owner,
                         int *calls) {
  get(c, key, p, calls, XF_SOURCE_LOADER);
  get(c, key, p, calls, XF_SOURCE_CACHE);
  xft_replicated(xft_cluster_shared(), owner);
}

/* Replica takes its master's slots without asking anyone and without
 * catching up (CLUSTER FAILOVER TAKEOVER): what it has not received is lost,
 * as when a master dies. The old master, demoted, syncs from it. */
static void takeover(int replica, int owner) {
  xft_expect_ok(
      xft_cluster_node_cmd(xft_cluster_shared(), replica, "CLUSTER FAILOVER TAKEOVER"));
  xft_node_wait_info(xft_cluster_shared(), replica, "role:master");
  xft_node_wait_info(xft_cluster_shared(), owner, "role:slave");
  xft_node_wait_info(xft_cluster_shared(), owner, "master_link_status:up");
}

/* Back as it was: owner the slot's master, replica linked to it, every node
 * agreeing. The same way (a manual failover after a takeover can be undone
 * by the epochs' collision handling), once owner has all replica has. */
static void take_back(int slot, int replica, int owner) {
  config(replica, "masterauth", "");
  xft_replicated(xft_cluster_shared(), replica);
  takeover(owner, replica);
  xft_wait_replica_listed(xft_cluster_shared(), slot, replica);
}

/* The tag's master takes invalidations while its replica cannot receive
 * them (its link cut: link_down), then the replica takes over: a raise that
 * only the old master had is lost with it. An invalidation that returned
 * XF_OK must not be: the entry loaded before it is never served as fresh
 * after it. No timing margin: the replica cannot receive the raise at all
 * (a wrong masterauth keeps it from reconnecting), the takeover and the
 * old master's resync are waited for by their state (10 s bounds). */
Test(cluster_replicas, an_invalidation_that_returned_ok_survives_a_failover) {
  const char *tags[] = {"cr-inv"}, *tag_key = "xf-tag:{cr-inv}";
  int slot = xf__cluster_keyslot(tag_key, strlen(tag_key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  int replica = xft_slot_replica(xft_cluster_shared(), slot);
  /* the library's default timeouts: how long an invalidation waits for its
   * replica is bounded by the command timeout */
  xf_client *c = open_timed(other.port, 0, 0);
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = 1;
  int calls = 0;
  tagged_entry(c, "{cr-inv}k", &p, owner.port, &calls);
  link_down(replica);
  int rc = xf_invalidate_tags(c, tags, 1);
  cr_expect_eq(rc, XF_ENOTREPLICATED, "%s (%s)", xf_errname(rc), xf_errmsg(c));
  takeover(replica, owner.port);
  xf_value v;
  int got = xf_get_or_compute(c, "{cr-inv}k", 9, &p, loader, &calls, &v);
  cr_expect_eq(got, XF_OK, "%s", xf_errmsg(c));
  if (got == XF_OK) {
    cr_expect(rc != XF_OK || v.source == XF_SOURCE_LOADER,
              "the invalidation returned XF_OK and the entry it invalidated was served "
              "as fresh after the failover (source %d)",
              v.source);
    xf_value_free(&v);
  }
  take_back(slot, replica, owner.port);
  xf_client_close(c);
}

/* The same with the replica linked: the invalidation returns XF_OK once the
 * replica has the raise (WAIT), so a takeover right after it keeps it and
 * the entry is loaded again. No timing margin: XF_OK means acknowledged. */
Test(cluster_replicas, an_invalidation_acknowledged_by_the_replica_survives_a_takeover) {
  const char *tags[] = {"cr-ack"}, *tag_key = "xf-tag:{cr-ack}";
  int slot = xf__cluster_keyslot(tag_key, strlen(tag_key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  int replica = xft_slot_replica(xft_cluster_shared(), slot);
  xf_client *c = open_timed(other.port, 0, 0);
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = 1;
  int calls = 0;
  tagged_entry(c, "{cr-ack}k", &p, owner.port, &calls);
  cr_assert_eq(xf_invalidate_tags(c, tags, 1), XF_OK, "%s", xf_errmsg(c));
  takeover(replica, owner.port);
  xf_value v;
  int got = xf_get_or_compute(c, "{cr-ack}k", 9, &p, loader, &calls, &v);
  cr_expect_eq(got, XF_OK, "%s", xf_errmsg(c));
  if (got == XF_OK) {
    cr_expect_eq(v.source, XF_SOURCE_LOADER, "served as fresh after the takeover");
    xf_value_free(&v);
  }
  take_back(slot, replica, owner.port);
  xf_client_close(c);
}
