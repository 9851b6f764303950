/* The client on a 3 masters + 3 replicas Redis Cluster with TLS on every
 * node and nothing else (cluster_launch.c: --port 0, tls-cluster and
 * tls-replication; the certificates of tls_certs.c): the nodes' announced TLS
 * ports route every key, replicas serve reads, a killed connection comes
 * back over TLS, a CA that signed nothing is refused with XF_ETLS. One
 * cluster per binary (this file's PRE_ALL hook); one test at a time, since
 * they count the commands each node ran. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cluster_calls.h"
#include "cluster_fixture.h"
#include "tls.h"
#include "tls_certs.h"
#include "xfetch.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
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
  o.connect_timeout_ms = o.command_timeout_ms = RUNNING_ON_VALGRIND ? 10000 : 2000;
  o.tls.enable = 1;
  o.tls.ca_file = cert(ca);
  return o;
}

static xf_client *open_client(int node, int replicas) {
  char seed[64];
  xf_options o = tls_opts(seed, sizeof seed, node, "ca.crt");
  o.read_from_replicas = replicas;
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
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) /* a read: HMGET (the script's too) */
    before[i] = calls_of(i, "hmget");
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "tc:replica:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  }
  cr_expect_eq(calls, 100);
  long long on_replicas = 0, on_masters = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    long long ran = calls_of(i, "hmget") - before[i];
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
