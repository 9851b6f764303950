/* The client on a 3 masters + 3 replicas Redis Cluster with TLS on every
 * node and nothing else (cluster_launch.c: --port 0, tls-cluster and
 * tls-replication; the certificates of tls_certs.c): the nodes' announced TLS
 * ports route every key, replicas serve reads, a killed connection comes
 * back over TLS, a replica promoted is followed (one load per key), a CA
 * that signed nothing is refused with XF_ETLS; the event-loop driver routes
 * and follows a failover over TLS too. One cluster per binary (this file's
 * PRE_ALL hook); one test at a time, since they count the commands each node
 * ran. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cluster.h"
#include "cluster_calls.h"
#include "cluster_failover.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "tls.h"
#include "tls_certs.h"
#include "xfetch.h"
#ifdef XFT_WITH_LIBUV
#include <xfetch_libuv.h>
#endif

#define NKEYS 200

/* ---- the binary's TLS cluster ------------------------------------------- */

static xft_cluster shared;
static char cert_dir[64];

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
  (void)set;
  if (xft_tls_make_certs(cert_dir, sizeof cert_dir) != 0 ||
      xft_cluster_start_tls(&shared, cert_dir) != 0) {
    fprintf(stderr, "tls cluster fixture: cannot start the TLS cluster\n");
    exit(1);
  }
  char ports[XFT_CLUSTER_NODES * 8] = "";
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    snprintf(ports + strlen(ports), sizeof ports - strlen(ports), "%s%d", i ? "," : "",
             shared.port[i]);
  setenv("XFT_TLS_CLUSTER_PORTS", ports, 1); /* Criterion's workers are new processes */
  setenv("XFT_TLS_DIR", cert_dir, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  (void)stats;
  xft_cluster_stop(&shared);
  xft_tls_remove_certs(cert_dir);
  fprintf(stderr, "tls cluster fixture: start %.2f s, stop %.2f s\n", shared.start_s,
          shared.stop_s);
}

/* The cluster as the runner started it, in a worker. */
static const xft_cluster *cluster(void) {
  static xft_cluster c;
  const char *ports = getenv("XFT_TLS_CLUSTER_PORTS"), *dir = getenv("XFT_TLS_DIR");
  cr_assert(ports && dir, "no shared TLS cluster");
  snprintf(c.tls_dir, sizeof c.tls_dir, "%s", dir);
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    c.port[i] = atoi(ports);
    ports = strchr(ports, ',') + (i + 1 < XFT_CLUSTER_NODES);
  }
  return &c;
}

static const char *cert(const char *name) {
  static char buf[4][128];
  static int next;
  char *b = buf[next++ % 4];
  snprintf(b, sizeof buf[0], "%s/%s", cluster()->tls_dir, name);
  return b;
}

/* A command (words split at spaces) on node i over TLS; asserts a reply that
 * is not an error. */
static redisReply *node_cmd(int i, const char *cmd) {
  redisReply *r = xft_cluster_node_cmd(cluster(), cluster()->port[i], cmd);
  cr_assert_not_null(r, "%s on node %d (TLS port %d) failed", cmd, i, cluster()->port[i]);
  cr_assert_neq(r->type, REDIS_REPLY_ERROR, "%s on node %d: %s", cmd, i, r->str);
  return r;
}

static int is_replica(int i) {
  redisReply *role = node_cmd(i, "ROLE");
  int replica = strcmp(role->element[0]->str, "slave") == 0;
  freeReplyObject(role);
  return replica;
}

/* calls of cmd on node i (INFO commandstats). */
static long long calls_of(int i, const char *cmd) {
  redisReply *info = node_cmd(i, "INFO commandstats");
  char field[64];
  snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
  const char *at = strstr(info->str, field);
  long long n = at ? atoll(at + strlen(field)) : 0;
  freeReplyObject(info);
  return n;
}

/* ---- the client ---------------------------------------------------------- */

static xf_options tls_opts(char *seed, size_t n, int node, const char *ca) {
  snprintf(seed, n, "127.0.0.1:%d", cluster()->port[node]);
  xf_options o = XF_OPTIONS_INIT;
  o.host = seed;
  o.cluster = XF_CLUSTER_ON;
  o.seed = 7;
  o.connect_timeout_ms = o.command_timeout_ms = XFT_CLUSTER_PATIENT_MS;
  o.tls.enable = 1;
  o.tls.ca_file = cert(ca);
  return o;
}

static xf_client *open_client(int node, int replicas) {
  char seed[64];
  xf_options o = tls_opts(seed, sizeof seed, node, "ca.crt");
  o.read_from_replicas = replicas;
  o.entry_format = xft_cluster_entry_format();
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  cr_assert_eq(rc, XF_OK, "open over TLS: %s (%s)", xf_strerror(rc), c ? xf_errmsg(c) : "");
  return c;
}

Test(tls_cluster, no_node_has_a_plain_port) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisReply *r = node_cmd(i, "CONFIG GET port");
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    cr_expect_str_eq(r->element[1]->str, "0", "node %d listens on a plain port", i);
    freeReplyObject(r);
    r = node_cmd(i, "CONFIG GET tls-cluster");
    cr_expect_str_eq(r->element[1]->str, "yes");
    freeReplyObject(r);
  }
}

Test(tls_cluster, cold_keys_load_once_then_hit_and_a_killed_connection_comes_back) {
  xf_client *c = open_client(0, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  char key[64];
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "tc:route:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_LOADER);
  }
  cr_expect_eq(calls, NKEYS, "each cold key loaded once");
  xf_stats warm;
  xf_client_stats(c, &warm);
  cr_expect_eq(warm.redirects, 0, "the map (the announced TLS ports) routes every key");
  cr_expect_eq(warm.connections, 3, "one TLS connection per master");
  cr_expect_geq(xf__tls_handshakes(c->tls), 3, "a handshake per master at least");
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "tc:route:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  }
  cr_expect_eq(calls, NKEYS, "no load once warm");
  xf_stats hot;
  xf_client_stats(c, &hot);
  cr_expect_eq(hot.hits - warm.hits, NKEYS);
  cr_expect_eq(hot.redirects, 0);
  cr_expect_eq(hot.map_refreshes, warm.map_refreshes);
  uint64_t handshakes = xf__tls_handshakes(c->tls);
  /* Every master drops its clients (not this one: SKIPME): the client
   * reconnects over TLS and hits on. */
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    if (!is_replica(i))
      freeReplyObject(node_cmd(i, "CLIENT KILL TYPE normal"));
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "tc:route:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  }
  cr_expect_eq(calls, NKEYS, "no load after the reconnects");
  cr_expect_eq(xf__tls_handshakes(c->tls), handshakes + 3, "one new handshake per master");
  xf_stats after;
  xf_client_stats(c, &after);
  cr_expect_eq(after.connections, 3);
  cr_expect_eq(after.uncached, 0);
  xf_client_close(c);
}

Test(tls_cluster, replica_reads_are_served_by_the_replicas) {
  xf_client *w = open_client(2, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  char key[64];
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "tc:replica:%d", i);
    xft_expect_get(w, key, &p, &calls, XF_SOURCE_LOADER);
  }
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) /* the replicas have caught up (over TLS) */
    if (!is_replica(i))
      freeReplyObject(node_cmd(i, "WAIT 1 2000"));
  xf_client *c = open_client(1, 1);
  long long before[XFT_CLUSTER_NODES];
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) /* a read (the script's too) */
    before[i] = calls_of(i, xft_cluster_read_cmd());
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "tc:replica:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  }
  cr_expect_eq(calls, 100);
  long long on_replicas = 0, on_masters = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    long long ran = calls_of(i, xft_cluster_read_cmd()) - before[i];
    if (is_replica(i))
      on_replicas += ran;
    else
      on_masters += ran;
  }
  cr_expect_geq(on_replicas, 100, "every hit read on a replica");
  cr_expect_eq(on_masters, 0, "no hit read on a master");
  xf_client_close(c);
  xf_client_close(w);
}

Test(tls_cluster, a_ca_that_signed_nothing_is_refused_with_etls) {
  char seed[64];
  xf_options o = tls_opts(seed, sizeof seed, 3, "other-ca.crt");
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  cr_expect_eq(rc, XF_ETLS, "open: %s", xf_strerror(rc));
  if (rc == XF_OK) {
    xf_client_close(c);
    return;
  }
  o.lazy_connect = 1; /* the same refusal from a call, worded */
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xf_value v;
  rc = xf_get_or_compute(c, "tc:wrong-ca", 11, &p, xft_key_loader, &calls, &v);
  if (rc == XF_OK) /* a fail-open: the expectation below fails */
    xf_value_free(&v);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(rc, XF_ETLS, "get: %s (a TLS failure is never a fail-open; uncached %llu)",
               xf_strerror(rc), (unsigned long long)st.uncached);
  cr_expect(strstr(xf_errmsg(c), "not trusted") != NULL, "errmsg: %s", xf_errmsg(c));
  xf_client_close(c);
}

/* ---- a failover ---------------------------------------------------------- */

#define FAILOVER_KEYS 20

/* The keys of one slot ("{tag}:i") and its master and replica ports. */
typedef struct one_slot {
  int slot, master, replica;
  char key[FAILOVER_KEYS][48];
} one_slot;

static void slot_of(one_slot *o, const char *tag) {
  for (int i = 0; i < FAILOVER_KEYS; i++)
    snprintf(o->key[i], sizeof o->key[i], "{%s}:%d", tag, i);
  o->slot = xf__cluster_keyslot(o->key[0], strlen(o->key[0]));
  o->master = xft_slot_master(cluster(), o->slot);
  o->replica = xft_slot_replica(cluster(), o->slot);
}

/* from takes over slot's master role from to; waits until every node agrees. */
static void fail_over(const one_slot *o, int from, int to) {
  xft_replicated(cluster(), to);
  xft_promote(cluster(), from);
  xft_node_wait_info(cluster(), to, "master_link_status:up");
  xft_wait_replica_listed(cluster(), o->slot, to);
}

/* The replica of the keys' slot is promoted (CLUSTER FAILOVER, over TLS):
 * the client follows the slot to it over TLS (MOVED, the map again, a new
 * handshake) and every key is still a hit: loaded once in all. */
Test(tls_cluster, a_promoted_replica_is_followed_with_one_load_per_key) {
  one_slot o;
  slot_of(&o, "tc-failover");
  xf_client *c = open_client(0, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  for (int i = 0; i < FAILOVER_KEYS; i++)
    xft_expect_get(c, o.key[i], &p, &calls, XF_SOURCE_LOADER);
  uint64_t handshakes = xf__tls_handshakes(c->tls);
  fail_over(&o, o.replica, o.master);
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < FAILOVER_KEYS; i++)
      xft_expect_get(c, o.key[i], &p, &calls, XF_SOURCE_CACHE);
  cr_expect_eq(calls, FAILOVER_KEYS, "each key loaded once, before the failover");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_geq(st.redirects, 1, "the old master's MOVED was followed");
  cr_expect_eq(st.uncached, 0);
  cr_expect_geq(xf__tls_handshakes(c->tls), handshakes + 1, "the new master over TLS");
  xf_client_close(c);
  fail_over(&o, o.master, o.replica); /* back as it was */
}

#ifdef XFT_WITH_LIBUV
/* ---- the event-loop driver ---------------------------------------------- */

typedef struct arun {
  uv_loop_t loop;
  xf_async *ac;
  int pending, loads, errors, wrong;
  int by_source[4];
  char errmsg[256];
} arun;

typedef struct acall {
  arun *r;
  const char *key;
} acall;

static void aloader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  ((arun *)ud)->loads++;
  char v[96];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  xf_async_load_done(load, v, (size_t)len);
}

static void adone(int rc, const xf_value *v, void *privdata) {
  acall *k = privdata;
  arun *r = k->r;
  if (rc == XF_OK) {
    char want[96];
    int len = snprintf(want, sizeof want, "v-%s", k->key);
    r->by_source[v->source]++;
    r->wrong += v->len != (size_t)len || memcmp(v->data, want, v->len) != 0;
  } else {
    r->errors++;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", xf_async_errmsg(r->ac));
  }
  if (--r->pending == 0)
    uv_stop(&r->loop); /* the node connections keep the loop alive */
}

/* The n keys at once, run to their end; the sources counted afresh. */
static void aget(arun *r, int n, const char *const *keys) {
  acall k[NKEYS];
  xf_policy p = xft_long_ttl();
  memset(r->by_source, 0, sizeof r->by_source);
  r->pending = n;
  for (int i = 0; i < n; i++) {
    k[i] = (acall){r, keys[i]};
    cr_assert_eq(xf_async_get_or_compute(r->ac, keys[i], strlen(keys[i]), &p, aloader, r,
                                         adone, &k[i]),
                 XF_OK);
  }
  uv_run(&r->loop, UV_RUN_DEFAULT);
  cr_assert_eq(r->pending, 0);
  cr_expect_eq(r->errors, 0, "%s", r->errmsg);
  cr_expect_eq(r->wrong, 0);
}

/* xf_async on the TLS cluster: every key to its master over TLS, each
 * loaded once, hits once warm; a replica promoted is followed as by the
 * blocking client, no key loaded again. */
Test(tls_cluster, the_event_loop_driver_routes_and_follows_a_failover_over_tls) {
  arun r = {0};
  cr_assert_eq(uv_loop_init(&r.loop), 0);
  char seed[64];
  xf_options opts = tls_opts(seed, sizeof seed, 1, "ca.crt");
  cr_assert_eq(xf_async_open_libuv(&r.ac, &opts, &r.loop), XF_OK);
  static char names[NKEYS][48];
  const char *keys[NKEYS];
  for (int i = 0; i < NKEYS; i++) {
    snprintf(names[i], sizeof names[i], "tc:async:%d", i);
    keys[i] = names[i];
  }
  aget(&r, NKEYS, keys);
  cr_expect_eq(r.loads, NKEYS, "each cold key loaded once");
  cr_expect_eq(r.by_source[XF_SOURCE_LOADER], NKEYS);
  aget(&r, NKEYS, keys);
  cr_expect_eq(r.by_source[XF_SOURCE_CACHE], NKEYS);
  xf_stats st;
  xf_async_stats(r.ac, &st);
  cr_expect_eq(st.redirects, 0, "the map (the announced TLS ports) routes every key");
  cr_expect_geq(st.connections, 3, "a TLS connection per master (and the seed's)");
  one_slot o;
  slot_of(&o, "tc-async-failover");
  const char *fo[FAILOVER_KEYS];
  for (int i = 0; i < FAILOVER_KEYS; i++)
    fo[i] = o.key[i];
  aget(&r, FAILOVER_KEYS, fo);
  fail_over(&o, o.replica, o.master);
  for (int round = 0; round < 3; round++) {
    aget(&r, FAILOVER_KEYS, fo);
    cr_expect_eq(r.by_source[XF_SOURCE_CACHE], FAILOVER_KEYS, "round %d", round);
  }
  cr_expect_eq(r.loads, NKEYS + FAILOVER_KEYS, "no key loaded again");
  xf_async_stats(r.ac, &st);
  cr_expect_geq(st.redirects, 1, "the old master's MOVED was followed");
  cr_expect_eq(st.uncached, 0);
  xf_async_close(r.ac);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&r.loop), 0);
  fail_over(&o, o.master, o.replica); /* back as it was */
}
#endif
