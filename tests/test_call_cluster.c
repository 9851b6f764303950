/* The sans-I/O call (xf_call_*) driven over plain sockets against a real 3
 * masters + 3 replicas cluster, as an outside driver (Python asyncio) does:
 * one connection per server xf_call_target names, the request written as
 * it is, its replies read and the last one fed back. The call learns the mode
 * and the map through its own SENDs and follows MOVED and ASK itself. One
 * test at a time: they count the commands each node ran. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "cluster_calls.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "link_net.h"
#include "xfetch.h"

#define HOST "127.0.0.1"
#define MAX_WIRES 16

typedef struct wire {
  int port;
  redisContext *sock; /* only its file descriptor is used */
  xf_reader *reader;
  xft_net net; /* with links_of: a link, which keeps its node's clock estimate */
} wire;

/* The driver's clock: every call input carries it. */
static int64_t driver_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static wire wires[MAX_WIRES];
static int nwires, writes[MAX_WIRES];
static xf_client *links_of; /* non-NULL: each server's wire is a link of this client */

/* The driver's connection to host:port, opened on first use. */
static wire *wire_to(const char *host, int port) {
  cr_assert(host && strcmp(host, HOST) == 0, "target host %s", host ? host : "(unix)");
  for (int i = 0; i < nwires; i++)
    if (wires[i].port == port)
      return &wires[i];
  cr_assert_lt(nwires, MAX_WIRES);
  wire *w = &wires[nwires++];
  w->port = port;
  w->sock = xft_cluster_redis(port);
  cr_assert_eq(xf_reader_open(&w->reader), XF_OK);
  w->net = links_of ? xft_net_open(links_of, port, 0) : (xft_net){.fd = -1};
  return w;
}

static void close_wires(void) {
  for (int i = 0; i < nwires; i++) {
    xf_reader_close(wires[i].reader);
    if (wires[i].net.link)
      xft_net_close(&wires[i].net);
    redisFree(wires[i].sock);
  }
  nwires = 0;
  links_of = NULL;
  memset(writes, 0, sizeof writes);
}

static xf_reply *read_reply(wire *w) {
  for (;;) {
    xf_reply *reply;
    cr_assert_eq(xf_reader_next(w->reader, &reply), XF_OK);
    if (reply)
      return reply;
    char buf[4096];
    ssize_t n = read(w->sock->fd, buf, sizeof buf);
    cr_assert_gt(n, 0);
    cr_assert_eq(xf_reader_feed(w->reader, buf, (size_t)n), XF_OK);
  }
}

/* One SEND: to the server the call names; the last reply is the call's. */
static xf_call_step send_step(xf_call *call) {
  const char *host;
  int port;
  int n = xf_call_target(call, &host, &port);
  cr_assert_geq(n, 1);
  wire *w = wire_to(host, port);
  writes[w - wires]++;
  if (w->net.link)
    return xft_net_exchange(&w->net, call);
  size_t len;
  const char *req = xf_call_request(call, &len);
  cr_assert_eq(write(w->sock->fd, req, len), (ssize_t)len);
  xf_reply *last = NULL;
  for (int i = 0; i < n; i++) {
    xf_reply *r = read_reply(w);
    if (i + 1 < n)
      xf_reply_free(r);
    else
      last = r;
  }
  return xf_call_reply(call, last, driver_ms());
}

static int loads;

/* Runs a get-or-compute call on key to the end; the loader gives "v-" + key. */
static int drive(xf_client *c, const char *key, xf_source *source) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  p.beta = 0;
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, key, strlen(key), &p, driver_ms()), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    if (step == XF_CALL_SEND) {
      step = send_step(call);
    } else if (step == XF_CALL_LOAD) {
      loads++;
      char v[96];
      int len = snprintf(v, sizeof v, "v-%s", key);
      step = xf_call_loaded(call, v, (size_t)len, 1000, driver_ms());
    } else {
      usleep((useconds_t)xf_call_wait_ms(call, driver_ms()) * 1000);
      step = xf_call_woke(call, driver_ms());
    }
  }
  xf_value v;
  int rc = xf_call_result(call, &v);
  if (rc == XF_OK) {
    char want[96];
    snprintf(want, sizeof want, "v-%s", key);
    cr_expect_str_eq(v.data, want);
    *source = v.source;
    xf_value_free(&v);
  } else {
    cr_log_error("%s: %s", key, xf_call_errmsg(call));
  }
  xf_call_free(call);
  return rc;
}

static void expect(xf_client *c, const char *key, xf_source want) {
  xf_source source = XF_SOURCE_UNCACHED;
  cr_assert_eq(drive(c, key, &source), XF_OK, "%s", key);
  cr_expect_eq(source, want, "%s: source %d, want %d", key, source, want);
}

/* A configuration client seeded with node i: never connected by a call. */
static xf_client *config_client(int i, int replicas) {
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(i));
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.lazy_connect = 1;
  o.read_from_replicas = replicas;
  o.seed = 5;
  o.entry_format = xft_cluster_entry_format();
  /* No test here is about a timeout: a command answered after the default
   * 1 s (under ASan on a busy machine) would be sent again and counted twice. */
  o.connect_timeout_ms = o.command_timeout_ms = XFT_CLUSTER_PATIENT_MS;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static xf_stats stats(const xf_client *c) {
  xf_stats st;
  xf_client_stats(c, &st);
  return st;
}

TestSuite(call_cluster, .fini = close_wires);

Test(call_cluster, every_key_goes_to_its_master_once_the_map_is_known) {
  xf_client *c = config_client(1, 0);
  loads = 0;
  char key[32];
  for (int round = 0; round < 2; round++) {
    if (round == 1)
      xft_reset_stats();
    for (int i = 0; i < 60; i++) {
      snprintf(key, sizeof key, "callc:route:%d", i);
      expect(c, key, round == 0 ? XF_SOURCE_LOADER : XF_SOURCE_CACHE);
    }
  }
  cr_expect_eq(loads, 60);
  cr_expect_eq(stats(c).redirects, 0);
  cr_expect_eq(stats(c).map_refreshes, 1, "asked once (CLUSTER SLOTS), then routed");
  cr_expect_eq(xft_total_calls("evalsha_ro"), 60, "one read per hit, on its master");
  cr_expect_eq(xft_total_calls("cluster|slots"), 0);
  xf_client_close(c);
}

Test(call_cluster, a_migrated_slot_is_followed_by_moved) {
  const char *key = "{callc-moved}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  xf_client *c = config_client(0, 0);
  loads = 0;
  expect(c, key, XF_SOURCE_LOADER);
  xft_migrate_key(slot, &from, &to, key);
  xft_assign(slot, &to);
  expect(c, key, XF_SOURCE_CACHE);
  expect(c, key, XF_SOURCE_CACHE);
  cr_expect_eq(loads, 1, "the entry moved with its slot");
  cr_expect_eq(stats(c).redirects, 1, "one MOVED, then the map knows");
  xf_client_close(c);
}

Test(call_cluster, a_slot_mid_migration_is_followed_by_ask) {
  const char *kept = "{callc-ask}kept", *gone = "{callc-ask}gone";
  int slot = xf__cluster_keyslot(kept, strlen(kept));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  xf_client *c = config_client(2, 0);
  loads = 0;
  expect(c, kept, XF_SOURCE_LOADER);
  expect(c, gone, XF_SOURCE_LOADER);
  xft_migrate_key(slot, &from, &to, gone);
  xft_reset_stats();
  expect(c, gone, XF_SOURCE_CACHE); /* ASK to the target */
  expect(c, kept, XF_SOURCE_CACHE); /* still the source's */
  cr_expect_eq(loads, 2);
  cr_expect_eq(stats(c).redirects, 1, "one ASK; the map was left alone");
  cr_expect_eq(xft_calls_of(to.port, "asking"), 1);
  xft_migrate_key(slot, &from, &to, kept);
  xft_assign(slot, &to);
  xf_client_close(c);
}

Test(call_cluster, replica_reads_go_to_the_replicas) {
  xf_client *w = config_client(3, 0);
  loads = 0;
  char key[32];
  for (int i = 0; i < 30; i++) {
    snprintf(key, sizeof key, "callc:replica:%d", i);
    expect(w, key, XF_SOURCE_LOADER);
  }
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "WAIT 1 2000"));
    redisFree(r);
  }
  xf_client *c = config_client(4, 1);
  xft_reset_stats();
  for (int i = 0; i < 30; i++) {
    snprintf(key, sizeof key, "callc:replica:%d", i);
    expect(c, key, XF_SOURCE_CACHE);
  }
  cr_expect_eq(loads, 30);
  cr_expect_eq(stats(c).redirects, 0, "READONLY went first");
  long long on[2] = {0, 0}; /* masters, replicas */
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    redisReply *role = xft_cluster_cmd(r, "ROLE");
    on[strcmp(role->element[0]->str, "slave") == 0] +=
        xft_calls_of(xft_cluster_port(i), "evalsha_ro");
    freeReplyObject(role);
    redisFree(r);
  }
  /* A replica that never ran a script answers NOSCRIPT once (counted). */
  cr_expect_geq(on[1], 30, "every hit read on a replica (%lld)", on[1]);
  cr_expect_eq(on[0], 0, "none on a master (%lld)", on[0]);
  xf_client_close(c);
  xf_client_close(w);
}

/* A driver with one link per node reads a hit with one plain read (GET;
 * format 1: HMGET) on the key's master once that link's estimate of its
 * node's clock is fresh; the first reads (the loads' misses) taught it. */
Test(call_cluster, hits_are_plain_reads_on_each_nodes_link) {
  xf_client *c = config_client(1, 0);
  links_of = c;
  loads = 0;
  char key[32];
  for (int i = 0; i < 60; i++) {
    snprintf(key, sizeof key, "callc:plain:%d", i);
    expect(c, key, XF_SOURCE_LOADER);
  }
  xft_reset_stats();
  int64_t t0 = driver_ms();
  for (int i = 0; i < 60; i++) {
    snprintf(key, sizeof key, "callc:plain:%d", i);
    expect(c, key, XF_SOURCE_CACHE);
  }
  long long refreshes = 3 * ((driver_ms() - t0) / 500 + 1); /* per master */
  long long scripts = xft_total_calls("evalsha_ro"),
            reads = xft_total_calls(xft_cluster_read_cmd());
  cr_expect_eq(loads, 60);
  cr_expect_leq(scripts, refreshes, "%lld read scripts for 60 hits", scripts);
  cr_expect_eq(reads, 60, "one %s per hit: plain, or a script's own (%lld)",
               xft_cluster_read_cmd(), reads);
  cr_expect_eq(stats(c).redirects, 0);
  xf_client_close(c);
}

/* Hits sent together on each node's link read with one MGET per slot (keys
 * in three slots, by hash tag: three MGETs), each call its own value. */
Test(call_cluster, hits_sent_together_read_with_one_mget_per_slot) {
  xf_client *c = config_client(1, 0);
  links_of = c;
  loads = 0;
  static const char *const tags[] = {"{callc:a}", "{callc:b}", "{callc:c}"};
  char keys[30][32];
  int64_t warmed_from = driver_ms();
  for (int i = 0; i < 30; i++) {
    snprintf(keys[i], sizeof keys[i], "%s:many:%d", tags[i % 3], i);
    expect(c, keys[i], XF_SOURCE_LOADER); /* warm; each link's clock learned */
  }
  if (xft_cluster_entry_format() == XF_ENTRY_HASH) {
    xf_client_close(c);
    return; /* format 1: plain HMGETs, pipelined, no MGET */
  }
  xft_reset_stats();
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  p.beta = 0;
  xf_call *calls[30];
  wire *on[30];
  for (int i = 0; i < 30; i++) {
    cr_assert_eq(xf_call_start(&calls[i], c, keys[i], strlen(keys[i]), &p, driver_ms()),
                 XF_OK);
    cr_assert_eq(xf_call_next(calls[i]), XF_CALL_SEND);
    const char *host;
    int port;
    cr_assert_geq(xf_call_target(calls[i], &host, &port), 1);
    on[i] = wire_to(host, port);
  }
  for (int w = 0; w < nwires; w++) { /* each node's calls at once */
    xf_call *batch[30];
    size_t n = 0;
    for (int i = 0; i < 30; i++)
      if (on[i] == &wires[w])
        batch[n++] = calls[i];
    cr_assert_eq(xf_call_send_many(batch, n, wires[w].net.link, driver_ms()), XF_OK);
    for (size_t done = 0; done < n; done++)
      cr_assert_eq(xf_call_received(xft_net_pump(&wires[w].net), driver_ms()),
                   XF_CALL_DONE);
  }
  for (int i = 0; i < 30; i++) {
    xf_value v;
    cr_expect_eq(xf_call_result(calls[i], &v), XF_OK, "%s", xf_call_errmsg(calls[i]));
    cr_expect_eq(v.source, XF_SOURCE_CACHE);
    char want[40];
    snprintf(want, sizeof want, "v-%.30s", keys[i]);
    cr_expect_str_eq(v.data, want);
    xf_value_free(&v);
    xf_call_free(calls[i]);
  }
  /* The clocks were learned during the warm-up: fresh while it and the sends
   * took less than half the estimate's refresh period (500 ms; a refresh
   * sends a node's first read as the read script, the rest still one MGET).
   * Judged exactly then; on a busy machine, that no call read alone. */
  long long mgets = xft_total_calls("mget"), gets = xft_total_calls("get");
  if (driver_ms() - warmed_from < 500) {
    cr_expect_eq(mgets, 3);
    cr_expect_eq(gets, 0);
  } else {
    cr_expect_leq(mgets, 3, "%lld MGETs", mgets);
    cr_expect_leq(gets, 3, "%lld GETs: one read script per node at most", gets);
  }
  cr_expect_eq(loads, 30);
  xf_client_close(c);
}

/* Runs an invalidation call of tags to the end; its code. */
static int drive_invalidate(xf_client *c, const char *const *tags, size_t n) {
  xf_call *call;
  cr_assert_eq(xf_call_start_invalidate_tags(&call, c, tags, n, driver_ms()), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    cr_assert_eq(step, XF_CALL_SEND, "an invalidation only sends");
    step = send_step(call);
  }
  int rc = xf_call_result(call, NULL);
  if (rc != XF_OK)
    cr_log_error("%s", xf_call_errmsg(call));
  xf_call_free(call);
  return rc;
}

/* The fence after a raise is WAIT 1 where the tag's master has a replica,
 * on the raise's connection: what the call names as its target (its
 * tag's key: the same server), over a plain socket per server and over a
 * link per server (as xfetch.aio drives it). */
Test(call_cluster, an_invalidation_waits_for_a_replica_on_its_raise_s_connection) {
  const char *tags[] = {"wr-c"}, *key = "xf-tag:{wr-c}";
  xft_node owner, other;
  xft_masters_of(xf__cluster_keyslot(key, strlen(key)), &owner, &other);
  for (int linked = 0; linked < 2; linked++) {
    xf_client *c = config_client(1, 0);
    links_of = linked ? c : NULL;
    cr_assert_eq(drive_invalidate(c, tags, 1), XF_OK); /* the map learned */
    redisContext *m = xft_monitor(owner.port);
    cr_assert_eq(drive_invalidate(c, tags, 1), XF_OK);
    cr_assert_eq(drive_invalidate(c, tags, 1), XF_OK);
    xft_raises seen = xft_raises_seen(m, owner.port);
    cr_expect_eq(seen.raises, 2, "linked %d", linked);
    cr_expect_eq(seen.waits, 2, "linked %d", linked);
    cr_expect_eq(seen.waits_on_the_raise_s_connection, 2, "linked %d", linked);
    close_wires();
    xf_client_close(c);
  }
}
