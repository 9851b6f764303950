/* The client against a real 3 masters + 3 replicas cluster (cluster_fixture.c):
 * routing by slot, one round trip per hit once warm, MOVED and ASK while a
 * slot moves, seed lists, replica reads, the batch driver per node; tags in
 * other slots than their entries, and a tag's slot moved, on every driver
 * (op_drivers.h, built with the event loops' libraries: XFT_WITH_DRIVERS). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cluster.h"
#include "cluster_calls.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "xfetch.h"
#ifdef XFT_WITH_DRIVERS
#include <criterion/parameterized.h>

#include "op_drivers.h"
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif
#endif

#define HOST "127.0.0.1"
#define NKEYS 1000

static xf_client *open_client(const char *host, int cluster, int replicas) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.cluster = cluster;
  o.read_from_replicas = replicas;
  o.seed = 7;
  o.entry_format = xft_cluster_entry_format();
  o.connect_timeout_ms = o.command_timeout_ms = XFT_CLUSTER_PATIENT_MS;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  cr_assert_eq(rc, XF_OK, "open %s: %s", host, xf_strerror(rc));
  return c;
}

static xf_client *node_client(int i) {
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(i));
  return open_client(host, XF_CLUSTER_AUTO, 0);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How many read scripts a run of elapsed_ms may send to keep the estimates
 * of the 3 masters' clocks (clock.h) fresh: one per half refresh period per
 * node (each connection's own estimate decides its reads). */
static long long clock_refreshes_allowed(int64_t elapsed_ms) {
  return 3 * (1 + elapsed_ms / (XF_CLOCK_REFRESH_MS / 2));
}

Test(cluster_client, auto_mode_detects_the_cluster_and_maps_it) {
  xf_client *c = node_client(3);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.map_refreshes, 1);
  cr_expect_eq(st.connections, 0, "the seed's connection is closed once routed");
  cr_expect_eq(xf_ping(c), XF_OK);
  xf_client_close(c);
}

Test(cluster_client, a_thousand_keys_load_once_then_hit_in_one_command_each) {
  xf_client *c = node_client(0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  char key[64];
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "cc:route:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_LOADER);
  }
  cr_expect_eq(calls, NKEYS);
  xf_stats warm;
  xf_client_stats(c, &warm);
  cr_expect_eq(warm.redirects, 0, "the map routes every key to its master");
  cr_expect_eq(warm.connections, 3, "one connection per master");
  xft_reset_stats();
  int64_t t0 = mono_ms();
  for (int i = 0; i < NKEYS; i++) {
    snprintf(key, sizeof key, "cc:route:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  }
  int64_t elapsed_ms = mono_ms() - t0;
  cr_expect_eq(calls, NKEYS, "no load once warm");
  xf_stats hot;
  xf_client_stats(c, &hot);
  cr_expect_eq(hot.redirects, 0);
  cr_expect_eq(hot.map_refreshes, warm.map_refreshes);
  cr_expect_eq(hot.hits - warm.hits, NKEYS);
  /* One round trip per hit: a plain read (GET, or HMGET on format 1), and
   * nothing else; the read script only to refresh the estimates of the
   * servers' clocks, a few times per second. */
  long long reads = xft_total_calls(xft_cluster_read_cmd()),
            scripts = xft_total_calls("evalsha_ro");
  cr_expect_leq(scripts, clock_refreshes_allowed(elapsed_ms),
                "%lld read scripts in %lld ms", scripts, (long long)elapsed_ms);
  /* A read script runs that read too: reads - scripts are plain ones. */
  cr_expect_leq(reads - scripts, NKEYS, "at most one plain read per hit");
  cr_expect_geq(reads, NKEYS, "every hit read");
  cr_expect_eq(xft_total_calls("evalsha"), 0);
  cr_expect_eq(xft_total_calls("cluster|slots"), 0);
  cr_expect_eq(xft_total_calls("asking"), 0);
  xf_client_close(c);
}

/* One master's estimate ages past use while the others are hit: its next hit
 * is one command there (the read script), not a plain read and then the
 * script. */
Test(cluster_client, a_node_whose_clock_aged_gets_one_command_per_hit) {
  const char *aged = "{cc-aged}k";
  xft_node a, other;
  xft_masters_of(xf__cluster_keyslot(aged, strlen(aged)), &a, &other);
  char busy[64];
  xft_node b;
  for (int i = 0;; i++) { /* a key on another master */
    snprintf(busy, sizeof busy, "{cc-busy-%d}k", i);
    xft_masters_of(xf__cluster_keyslot(busy, strlen(busy)), &b, &other);
    if (b.port != a.port)
      break;
  }
  xf_client *c = node_client(0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xft_expect_get(c, aged, &p, &calls, XF_SOURCE_LOADER);
  xft_expect_get(c, busy, &p, &calls, XF_SOURCE_LOADER);
  /* busy's master is refreshed every half period; aged's estimate outlives
   * its use. */
  int64_t until = mono_ms() + XF_CLOCK_REFRESH_MS + 200;
  while (mono_ms() < until) {
    xft_expect_get(c, busy, &p, &calls, XF_SOURCE_CACHE);
    xft_cluster_sleep_ms(5);
  }
  xft_reset_stats();
  for (int hit = 0; hit < 3; hit++) {
    xft_expect_get(c, aged, &p, &calls, XF_SOURCE_CACHE);
    long long scripts = xft_calls_of(a.port, "evalsha_ro");
    /* a script reads by the plain read's command too */
    long long plain = xft_calls_of(a.port, xft_cluster_read_cmd()) - scripts;
    cr_expect_eq(scripts, 1, "hit %d: the aged estimate refreshed once, on the first", hit);
    cr_expect_eq(plain, hit, "hit %d: the first is the script alone, then plain reads",
                 hit);
  }
  cr_expect_eq(calls, 2);
  xf_client_close(c);
}

Test(cluster_client, a_seed_list_skips_the_seeds_that_do_not_answer) {
  char host[128];
  snprintf(host, sizeof host, HOST ":1, " HOST ":%d,localhost:%d", xft_cluster_port(4),
           xft_cluster_port(5));
  xf_client *c = open_client(host, XF_CLUSTER_AUTO, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xft_expect_get(c, "cc:seeds", &p, &calls, XF_SOURCE_LOADER);
  xft_expect_get(c, "cc:seeds", &p, &calls, XF_SOURCE_CACHE);
  cr_expect_eq(calls, 1);
  xf_client_close(c);
}

Test(cluster_client, bad_cluster_options_are_refused) {
  xf_options o = XF_OPTIONS_INIT;
  xf_client *c = NULL;
  o.cluster = 3;
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL);
  o.cluster = XF_CLUSTER_ON;
  o.unix_path = "/tmp/nowhere.sock";
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL);
  o = (xf_options)XF_OPTIONS_INIT;
  o.host = HOST ":99999";
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL);
  o.host = ",";
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL);
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  o.host = host;
  o.db = 2;
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL, "a cluster has only db 0");
  cr_expect_null(c);
}

Test(cluster_client, cluster_off_talks_to_the_seed_alone) {
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  xf_client *c = open_client(host, XF_CLUSTER_OFF, 0);
  xf_policy p = xft_long_ttl();
  int calls = 0, moved = 0;
  char key[64];
  for (int i = 0; i < 30; i++) { /* most keys live on another master */
    snprintf(key, sizeof key, "cc:off:%d", i);
    xf_value v;
    int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_key_loader, &calls, &v);
    moved += rc == XF_EREDIS && strstr(xf_errmsg(c), "MOVED") != NULL;
    xf_value_free(&v);
  }
  cr_expect_gt(moved, 0, "never routed, so MOVED comes back as an error");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 0);
  cr_expect_eq(st.map_refreshes, 0);
  xf_client_close(c);
}

/* ---- a slot on the move -------------------------------------------------- */

Test(cluster_client, a_migrated_slot_is_followed_by_moved_without_a_reload) {
  const char *key = "{cc-moved}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  xf_client *c = node_client(0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xft_expect_get(c, key, &p, &calls, XF_SOURCE_LOADER);
  xft_migrate_key(slot, &from, &to, key);
  xft_assign(slot, &to);
  xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  cr_expect_eq(calls, 1, "the entry moved with its slot: never reloaded");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 1, "one MOVED, then the map knows");
  xf_client_close(c);
}

Test(cluster_client, a_slot_mid_migration_is_followed_by_ask) {
  const char *kept = "{cc-ask}kept", *gone = "{cc-ask}gone";
  int slot = xf__cluster_keyslot(kept, strlen(kept));
  xft_node from, to;
  xft_masters_of(slot, &from, &to);
  xf_client *c = node_client(1);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xft_expect_get(c, kept, &p, &calls, XF_SOURCE_LOADER);
  xft_expect_get(c, gone, &p, &calls, XF_SOURCE_LOADER);
  xft_migrate_key(slot, &from, &to, gone);
  xft_reset_stats();
  /* gone now lives on the target: ASK; kept is still served by the source.
   * The target's clock is unknown: the read goes there as the script, once
   * (not a plain read then the script, each after ASKING). */
  xft_expect_get(c, gone, &p, &calls, XF_SOURCE_CACHE);
  long long scripts = xft_calls_of(to.port, "evalsha_ro");
  cr_expect_eq(scripts, 1);
  cr_expect_eq(xft_calls_of(to.port, xft_cluster_read_cmd()) - scripts, 0,
               "no plain read on the target");
  cr_expect_eq(xft_calls_of(to.port, "asking"), 1);
  xft_expect_get(c, kept, &p, &calls, XF_SOURCE_CACHE);
  cr_expect_eq(calls, 2);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 1, "one ASK; the map was left alone");
  xft_expect_get(c, gone, &p, &calls, XF_SOURCE_CACHE);
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 2, "ASK again: the slot is still the source's");
  cr_expect_eq(calls, 2);
  xft_migrate_key(slot, &from, &to, kept);
  xft_assign(slot, &to);
  xf_client_close(c);
}

Test(cluster_client, replica_reads_serve_hits_from_the_replicas) {
  xf_client *w = node_client(2);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  char key[64];
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "cc:replica:%d", i);
    xft_expect_get(w, key, &p, &calls, XF_SOURCE_LOADER);
  }
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) { /* the replicas have caught up */
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "WAIT 1 2000"));
    redisFree(r);
  }
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  xf_client *c = open_client(host, XF_CLUSTER_AUTO, 1);
  long long before[XFT_CLUSTER_NODES];
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) /* a read (the script's too) */
    before[i] = xft_calls_of(xft_cluster_port(i), xft_cluster_read_cmd());
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "cc:replica:%d", i);
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
  }
  cr_expect_eq(calls, 100);
  long long on_replicas = 0, on_masters = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    redisReply *role = xft_cluster_cmd(r, "ROLE");
    int replica = strcmp(role->element[0]->str, "slave") == 0;
    long long ran = xft_calls_of(xft_cluster_port(i), xft_cluster_read_cmd()) - before[i];
    if (replica)
      on_replicas += ran;
    else
      on_masters += ran;
    freeReplyObject(role);
    redisFree(r);
  }
  cr_expect_geq(on_replicas, 100, "every hit read on a replica");
  cr_expect_eq(on_masters, 0, "no hit read on a master (plain or script)");
  xf_client_close(c);
  xf_client_close(w);
}

Test(cluster_client, a_batch_spans_every_master) {
  xf_client *c = node_client(4);
  xf_policy p = xft_long_ttl();
  enum { N = 100 };
  char buf[N][32];
  const char *keys[N];
  size_t lens[N];
  for (int i = 0; i < N; i++) {
    snprintf(buf[i], sizeof buf[i], "cc:batch:%d", i);
    keys[i] = buf[i];
    lens[i] = strlen(buf[i]);
  }
  xf_value v[N];
  int rcs[N], calls = 0;
  for (int round = 0; round < 2; round++) {
    cr_assert_eq(
        xf_get_or_compute_many(c, N, keys, lens, &p, xft_key_loader, &calls, v, rcs),
        XF_OK);
    for (int i = 0; i < N; i++) {
      char want[64];
      int len = snprintf(want, sizeof want, "v-%s", buf[i]);
      cr_assert(len > 0 && len < (int)sizeof want, "key %d: its value does not fit", i);
      cr_expect_eq(rcs[i], XF_OK, "key %d: %s", i, xf_strerror(rcs[i]));
      cr_expect(v[i].data && strcmp(v[i].data, want) == 0, "key %d", i);
      cr_expect_eq(v[i].source, round == 0 ? XF_SOURCE_LOADER : XF_SOURCE_CACHE);
      xf_value_free(&v[i]);
    }
  }
  cr_expect_eq(calls, N);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 0);
  cr_expect_eq(st.connections, 3);
  xf_client_close(c);
}

Test(cluster_client, set_and_delete_reach_the_key_s_master) {
  xf_client *c = node_client(5);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  char key[64];
  for (int i = 0; i < 30; i++) { /* spread over the three masters */
    snprintf(key, sizeof key, "cc:set:%d", i);
    char value[96];
    int len = snprintf(value, sizeof value, "v-%s", key);
    cr_assert_eq(xf_set(c, key, strlen(key), value, (size_t)len, &p), XF_OK, "%s: %s", key,
                 xf_errmsg(c));
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_CACHE);
    cr_assert_eq(xf_delete(c, key, strlen(key)), XF_OK, "%s: %s", key, xf_errmsg(c));
    xft_expect_get(c, key, &p, &calls, XF_SOURCE_LOADER);
  }
  cr_expect_eq(calls, 30, "every delete made the next call load");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 0);
  xf_client_close(c);
}

Test(cluster_client, redirections_that_never_end_give_a_clear_error) {
  const char *key = "{cc-loop}k";
  int slot = xf__cluster_keyslot(key, strlen(key));
  xft_node owner, other;
  xft_masters_of(slot, &owner, &other);
  /* The owner now says the slot is the other's, which says it is the owner's:
   * each answers MOVED to the other. */
  redisContext *o = xft_cluster_redis(owner.port);
  xft_expect_ok(xft_cluster_cmd(o, "CLUSTER SETSLOT %d NODE %s", slot, other.id));
  xf_client *c = node_client(0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xf_value v;
  int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_key_loader, &calls, &v);
  cr_expect_eq(rc, XF_EREDIS, "got %s", xf_errname(rc));
  cr_expect(strstr(xf_errmsg(c), "redirections") != NULL, "%s", xf_errmsg(c));
  cr_expect_eq(calls, 0, "an error before the loader: it is not called");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redirects, 5);
  xft_expect_ok(xft_cluster_cmd(o, "CLUSTER SETSLOT %d NODE %s", slot, owner.id));
  redisFree(o);
  xft_expect_get(c, key, &p, &calls, XF_SOURCE_LOADER); /* healed */
  xf_client_close(c);
}

static int owner_port(const char *key) {
  xft_node owner, other;
  xft_masters_of(xf__cluster_keyslot(key, strlen(key)), &owner, &other);
  return owner.port;
}

/* How many connections the node has accepted, this raw one included (a
 * counter: closing connections do not race it). */
static long connections_received(int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *info = xft_cluster_cmd(r, "INFO stats");
  const char *at = strstr(info->str, "total_connections_received:");
  long n = at ? atol(at + strlen("total_connections_received:")) : -1;
  freeReplyObject(info);
  redisFree(r);
  return n;
}

Test(cluster_client, a_forked_child_opens_its_own_node_connections) {
  xf_client *c = node_client(0);
  xf_policy p = xft_long_ttl();
  int calls = 0;
  xft_expect_get(c, "cc:fork", &p, &calls, XF_SOURCE_LOADER);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) { /* the child: same client, its own sockets */
    int master = owner_port("cc:fork");
    long before = connections_received(master);
    xf_value v;
    int rc = xf_get_or_compute(c, "cc:fork", 7, &p, xft_key_loader, &calls, &v);
    long after = connections_received(master);
    int why = rc != XF_OK                            ? 1
              : v.source != XF_SOURCE_CACHE          ? 2
              : strcmp(v.data, "v-cc:fork") != 0     ? 3
              : after != before + 2 /* ours + raw */ ? 4
                                                     : 0;
    xf_value_free(&v);
    xf_client_close(c); /* closes the child's sockets only */
    _exit(why);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child: %d (1 error, 2 not a hit, 3 wrong value, 4 reused a socket)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  xft_expect_get(c, "cc:fork", &p, &calls, XF_SOURCE_CACHE); /* the parent's still work */
  cr_expect_eq(calls, 1);
  xf_client_close(c);
}

/* The batch's first round: plain reads while the estimates of the servers'
 * clocks are fresh (one MGET per slot, a GET for a key alone in its slot;
 * format 1: one HMGET per key); when they are old, one read_many per slot
 * (a script's keys must share a slot), a key alone in its slot with its own
 * read; no CROSSSLOT either way. */
Test(cluster_client, a_batch_reads_once_per_slot) {
  xf_client *c = node_client(2);
  xf_policy p = xft_long_ttl();
  enum { N = 105 };
  char buf[N][32];
  const char *keys[N];
  size_t lens[N];
  for (int i = 0; i < N; i++) { /* 3 tags x 33 keys, then 6 untagged keys */
    if (i < 99)
      snprintf(buf[i], sizeof buf[i], "cc:{slot%d}:%d", i % 3, i);
    else
      snprintf(buf[i], sizeof buf[i], "cc:alone:%d", i);
    keys[i] = buf[i];
    lens[i] = strlen(buf[i]);
  }
  char seen[16384] = {0};
  int slots = 0;
  for (int i = 0; i < N; i++) {
    int s = xf__cluster_keyslot(keys[i], lens[i]);
    slots += !seen[s];
    seen[s] = 1;
  }
  xf_value v[N];
  int rcs[N], calls = 0;
  long long plain_reads = 0, plain_scripts = 0;
  int format1 = xft_cluster_entry_format() == XF_ENTRY_HASH;
  int64_t began_ms = mono_ms(), fresh_ms = 0;
  for (int round = 0; round < 3; round++) { /* loads; plain hits; scripts */
    if (round == 2) { /* the estimates are old: the reads are scripts again */
      fresh_ms = mono_ms() - began_ms;
      plain_reads = format1 ? xft_total_calls("hmget")
                            : xft_total_calls("mget") + xft_total_calls("get");
      plain_scripts = xft_total_calls("evalsha_ro");
      xft_cluster_sleep_ms(XF_CLOCK_REFRESH_MS / 2 + 50);
    }
    if (round >= 1)
      xft_reset_stats();
    cr_assert_eq(
        xf_get_or_compute_many(c, N, keys, lens, &p, xft_key_loader, &calls, v, rcs),
        XF_OK);
    for (int i = 0; i < N; i++) {
      char want[64];
      int len = snprintf(want, sizeof want, "v-%s", buf[i]);
      cr_assert(len > 0 && len < (int)sizeof want, "key %d: its value does not fit", i);
      cr_expect_eq(rcs[i], XF_OK, "key %d: %s (%s)", i, xf_strerror(rcs[i]), xf_errmsg(c));
      cr_expect(v[i].data && strcmp(v[i].data, want) == 0, "key %d", i);
      cr_expect_eq(v[i].source, round == 0 ? XF_SOURCE_LOADER : XF_SOURCE_CACHE);
      xf_value_free(&v[i]);
    }
  }
  cr_expect_eq(calls, N);
  /* The estimates learned in round 0 are fresh for XF_CLOCK_REFRESH_MS / 2
   * (clock.c): on a busy machine the first two rounds may outlast that, and
   * the hits then read by script again (a busy run's release stage). */
  if (fresh_ms < XF_CLOCK_REFRESH_MS / 2) {
    cr_expect_eq(plain_reads, format1 ? N : slots, "one %s while the clocks are known",
                 format1 ? "HMGET per key" : "MGET per slot (a GET for a key alone)");
    cr_expect_eq(plain_scripts, 0, "no script for those hits");
  } else {
    cr_log_info("rounds 0 and 1 took %lld ms: the plain reads are not judged",
                (long long)fresh_ms);
  }
  long long reads = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    reads += xft_calls_of(xft_cluster_port(i), "evalsha_ro");
  /* A node that had not loaded read_many answers NOSCRIPT once (counted). */
  long long noscript = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    noscript += xft_calls_of(xft_cluster_port(i), "script|load");
  cr_expect_eq(reads - noscript, slots, "%lld reads for %d slots", reads, slots);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redis_errors, 0);
  xf_client_close(c);
}

#ifdef XFT_WITH_DRIVERS
/* A driver's handle on the cluster, seeded with node i. */
static xft_drv *node_drv(int driver, int i) {
  static char hosts[XFT_CLUSTER_NODES][64]; /* each seed's, for the handle's life */
  snprintf(hosts[i], sizeof hosts[i], HOST ":%d", xft_cluster_port(i));
  xf_options o = XF_OPTIONS_INIT;
  o.host = hosts[i];
  o.cluster = XF_CLUSTER_AUTO;
  o.seed = 7;
  o.entry_format = xft_cluster_entry_format();
  o.connect_timeout_ms = o.command_timeout_ms = XFT_CLUSTER_PATIENT_MS;
  return xft_drv_open(driver, &o);
}

/* A get-or-compute of key through d: XF_OK with l's value from source want. */
static void drv_expect(xft_drv *d, const char *what, const char *key, const xf_policy *p,
                       xft_op_loader *l, xf_source want) {
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, p, l, &v);
  cr_assert_eq(rc, XF_OK, "%s: %s: %s (%s)", what, key, xf_strerror(rc), xft_drv_errmsg(d));
  cr_expect_str_eq(v.data, l->value, "%s: %s", what, key);
  cr_expect_eq(v.source, want, "%s: %s: source %d, want %d", what, key, v.source, want);
  xf_value_free(&v);
}

/* An invalidation of tags through d, asserted. */
static void drv_invalidate(xft_drv *d, const char *what, const char *const *tags,
                           size_t n) {
  int rc = xft_drv_invalidate_tags(d, tags, n);
  cr_assert_eq(rc, XF_OK, "%s: invalidate: %s (%s)", what, xf_strerror(rc),
               xft_drv_errmsg(d));
}

/* Under valgrind (memcheck: one test at a time on the cluster) the tags'
 * tests run the blocking driver's cases; ASan and TSan run every driver's. */
static void tag_drivers_skip_under_valgrind(int driver) {
  if (driver != XFT_BLOCKING && RUNNING_ON_VALGRIND)
    cr_skip_test("the blocking driver's case only, under valgrind");
}

ParameterizedTestParameters(cluster_client, tags_in_other_slots_than_their_entries) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* Tags whose keys ("xf-tag:{<name>}") sit in other slots, on other masters,
 * than the entries: each tag's version is read on its own slot's master, and
 * an invalidation, from another client or the driver's own, makes every
 * tagged entry a miss, loaded once, the batch's included (with either
 * loader, on the drivers that have a batch); no redirection once mapped. */
ParameterizedTest(int *driver, cluster_client, tags_in_other_slots_than_their_entries) {
  if (xft_cluster_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("tags need entry format 2 (format 1 refuses them: XF_EINVAL)");
  tag_drivers_skip_under_valgrind(*driver);
  const char *what = xft_driver_names[*driver];
  xft_drv *d = node_drv(*driver, 0);
  xf_client *other = node_client(5);
  char names[3][32];
  const char *tags[3];
  int slots[3];
  for (int i = 0; i < 3; i++) { /* slots of their own */
    snprintf(names[i], sizeof names[i], "cc-%c:%s", 'a' + i, what);
    tags[i] = names[i];
    char key[48];
    int len = snprintf(key, sizeof key, "xf-tag:{%s}", tags[i]);
    slots[i] = xf__cluster_keyslot(key, (size_t)len);
  }
  cr_assert(slots[0] != slots[1] || slots[1] != slots[2]);
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = 3;
  enum { N = 12 };
  char buf[N][48];
  const char *keys[N];
  for (int i = 0; i < N; i++) {
    snprintf(buf[i], sizeof buf[i], "cc:tagged:%s:%d", what, i);
    keys[i] = buf[i];
  }
  int batch = xft_drv_has_batch(*driver);
  xft_op_loader l = {.value = "t"};
  /* even rounds one key at a time, odd ones the batch (if any); round 4 and
   * 5 with the batch loader */
  xf_source want[] = {XF_SOURCE_LOADER, XF_SOURCE_CACHE,  XF_SOURCE_LOADER,
                      XF_SOURCE_CACHE,  XF_SOURCE_LOADER, XF_SOURCE_CACHE};
  for (int round = 0; round < 6; round++) {
    if (round == 2)
      cr_assert_eq(xf_invalidate_tags(other, tags + 1, 1), XF_OK, "%s", xf_errmsg(other));
    if (round == 4)
      drv_invalidate(d, what, tags + 2, 1);
    if (!batch || round % 2 == 0) {
      for (int i = 0; i < N; i++)
        drv_expect(d, what, keys[i], &p, &l, want[round]);
      continue;
    }
    l.batch = round >= 4;
    xf_value v[N];
    int rcs[N];
    cr_assert_eq(xft_drv_many(d, N, keys, &p, &l, v, rcs), XF_OK, "%s: %s", what,
                 xft_drv_errmsg(d));
    for (int i = 0; i < N; i++) {
      cr_expect_eq(rcs[i], XF_OK, "%s round %d key %d: %s", what, round, i,
                   xf_strerror(rcs[i]));
      if (rcs[i] != XF_OK)
        continue;
      cr_expect_eq(v[i].source, want[round], "%s round %d key %d: source %d", what, round,
                   i, v[i].source);
      xf_value_free(&v[i]);
    }
  }
  cr_expect_eq(l.calls, 3 * N, "%s: %d loads", what, l.calls);
  xf_stats st;
  xft_drv_stats(d, &st);
  cr_expect_eq(st.tag_invalidated, 2 * N, "%s: %llu refused", what,
               (unsigned long long)st.tag_invalidated);
  cr_expect_eq(st.redirects, 0, "%s: %llu redirects", what,
               (unsigned long long)st.redirects);
  xft_drv_close(d);
  xf_client_close(other);
}
#endif

/* A MONITOR connection to the node at port. */
static redisContext *monitor(int port) {
  redisContext *m = xft_cluster_redis(port);
  freeReplyObject(xft_cluster_cmd(m, "MONITOR"));
  return m;
}

/* The reads (EVALSHA, EVALSHA_RO, GET, MGET) clients sent the node of port
 * since m began to MONITOR it, not counting what scripts ran (a "lua"
 * source): commands on the wire. Ends m. */
static long long reads_sent(redisContext *m, int port) {
  redisContext *a = xft_cluster_redis(port);
  freeReplyObject(xft_cluster_cmd(a, "ECHO xft-monitor-end"));
  redisFree(a);
  long long n = 0;
  redisReply *rep;
  while (redisGetReply(m, (void **)&rep) == REDIS_OK) {
    int end = rep->type == REDIS_REPLY_STATUS && strstr(rep->str, "xft-monitor-end");
    if (!end && rep->type == REDIS_REPLY_STATUS && !strstr(rep->str, " lua] ") &&
        (strstr(rep->str, "] \"EVALSHA") || strstr(rep->str, "] \"GET\"") ||
         strstr(rep->str, "] \"MGET\"")))
      n++;
    freeReplyObject(rep);
    if (end)
      break;
  }
  redisFree(m);
  return n;
}

/* The error replies the node of port has counted (INFO errorstats: those a
 * script caught too, as a read of a key another node holds). */
static long long errors_counted(int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "INFO errorstats");
  long long n = 0;
  for (const char *at = rep->str; (at = strstr(at, ":count=")) != NULL; at++)
    n += atoll(at + 7);
  freeReplyObject(rep);
  redisFree(r);
  return n;
}

#ifdef XFT_WITH_DRIVERS
/* What a tagged hit without a near cache sends: 6 tags on the masters, in
 * slots of their own, the entry on another slot. A tag's key cannot be read
 * with another slot's in one MGET (next test), but tag_read.lua reads every
 * tag a node holds in one command: the entry's read plus one command per
 * master holding tags (one per tag before: 7 per hit, where 4 are allowed
 * now). Counted on the wire (MONITOR: a script's own GETs are not sent), on
 * every driver. */
ParameterizedTestParameters(cluster_client,
                            a_tagged_hit_reads_its_tags_with_one_command_per_node) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, cluster_client,
                  a_tagged_hit_reads_its_tags_with_one_command_per_node) {
  if (xft_cluster_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("tags need entry format 2 (format 1 refuses them: XF_EINVAL)");
  tag_drivers_skip_under_valgrind(*driver);
  const char *what = xft_driver_names[*driver];
  xft_drv *d = node_drv(*driver, 0);
  char key[48];
  snprintf(key, sizeof key, "cc:pernode:%s", what);
  const char *tags[] = {"pn-a", "pn-b", "pn-c", "pn-d", "pn-e", "pn-f"};
  enum { NT = 6, HITS = 10 };
  int masters[NT], nmasters = 0; /* the distinct masters holding the tags */
  for (int i = 0; i < NT; i++) {
    char k[64];
    snprintf(k, sizeof k, "xf-tag:{%s}", tags[i]);
    int port = owner_port(k), seen = 0;
    cr_assert_geq(port, 0);
    for (int j = 0; j < nmasters; j++)
      seen |= masters[j] == port;
    if (!seen)
      masters[nmasters++] = port;
  }
  cr_assert_gt(nmasters, 1, "the test needs tags on two masters at least");
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = NT;
  xft_op_loader l = {.value = "n"};
  drv_expect(d, what, key, &p, &l, XF_SOURCE_LOADER);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE); /* clocks learned */
  redisContext *mon[XFT_CLUSTER_NODES];
  long long errors = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    mon[i] = monitor(xft_cluster_port(i));
    errors -= errors_counted(xft_cluster_port(i));
  }
  int64_t t0 = mono_ms();
  for (int i = 0; i < HITS; i++)
    drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  long long periods = 1 + (mono_ms() - t0) / (XF_CLOCK_REFRESH_MS / 2);
  long long total = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    long long n = reads_sent(mon[i], xft_cluster_port(i));
    errors += errors_counted(xft_cluster_port(i));
    cr_log_info("%s: node %d (port %d): %lld reads sent for %d hits with %d tags on %d "
                "masters",
                what, i, xft_cluster_port(i), n, HITS, NT, nmasters);
    total += n;
  }
  cr_log_info("%s: total: %lld reads sent per hit", what, total / HITS);
  /* Besides: at most one clock refresh per master per half refresh period
   * (XF_CLOCK_REFRESH_MS / 2) the hits took: a busy machine's slower hits
   * find the estimates old more often. */
  cr_expect_leq(total, (long long)HITS * (1 + nmasters) + nmasters * periods,
                "%s: %lld reads sent in %lld half refresh periods", what, total, periods);
  /* a script only reads the keys its node holds: no error replies counted
   * (an operator watching errorstats sees none) */
  cr_expect_eq(errors, 0, "%s: %lld error replies counted by the nodes", what, errors);
  cr_expect_eq(l.calls, 1, "%s: %d loads", what, l.calls);
  xft_drv_close(d);
}
#endif

/* Why tags' keys on one node are not read with one MGET: Redis Cluster
 * refuses a multi-key command whose keys are in different slots, on one node
 * as on several (CROSSSLOT). */
Test(cluster_client, one_mget_cannot_span_two_slots_of_one_node) {
  const char *a = "xf-tag:{pn-a}";
  int port = owner_port(a);
  cr_assert_geq(port, 0);
  char b[64];
  for (int i = 0;; i++) { /* another tag's key, another slot, the same master */
    snprintf(b, sizeof b, "xf-tag:{pn-%d}", i);
    if (xf__cluster_keyslot(b, strlen(b)) != xf__cluster_keyslot(a, strlen(a)) &&
        owner_port(b) == port)
      break;
  }
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "MGET %s %s", a, b);
  cr_expect_eq(rep->type, REDIS_REPLY_ERROR);
  cr_expect(rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "CROSSSLOT", 9) == 0, "%s",
            rep->str ? rep->str : "(no error)");
  freeReplyObject(rep);
  redisFree(r);
}

/* With read_from_replicas a tagged hit reads its entry on a replica, as an
 * untagged hit does, and its tag's version on the tag's master: a replica may
 * not have a raise yet, and an old version would serve an invalidated entry
 * as fresh after xf_invalidate_tags returned. */
Test(cluster_client, replica_reads_of_a_tagged_entry_read_the_tag_on_its_master) {
  if (xft_cluster_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("tags need entry format 2 (format 1 refuses them: XF_EINVAL)");
  const char *tags[] = {"rp-a"};
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = 1;
  xf_client *w = node_client(2);
  int calls = 0;
  xft_expect_get(w, "cc:replica-tagged", &p, &calls, XF_SOURCE_LOADER);
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) { /* the replicas have caught up */
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "WAIT 1 2000"));
    redisFree(r);
  }
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  xf_client *c = open_client(host, XF_CLUSTER_AUTO, 1);
  xft_expect_get(c, "cc:replica-tagged", &p, &calls,
                 XF_SOURCE_CACHE); /* connections made */
  enum { HITS = 20 };
  xft_reset_stats();
  for (int i = 0; i < HITS; i++)
    xft_expect_get(c, "cc:replica-tagged", &p, &calls, XF_SOURCE_CACHE);
  long long on_replicas = 0, on_masters = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    redisReply *role = xft_cluster_cmd(r, "ROLE");
    long long ran = xft_calls_of(xft_cluster_port(i), "get") +
                    xft_calls_of(xft_cluster_port(i), "evalsha_ro");
    if (strcmp(role->element[0]->str, "slave") == 0)
      on_replicas += ran;
    else
      on_masters += ran;
    freeReplyObject(role);
    redisFree(r);
  }
  cr_log_info("%d tagged hits: %lld reads on replicas, %lld on masters", HITS, on_replicas,
              on_masters);
  cr_expect_eq(on_replicas, HITS, "each entry read on a replica");
  cr_expect_eq(on_masters, HITS, "each tag's version on its master");
  cr_expect_eq(calls, 1);
  xf_client_close(c);
  xf_client_close(w);
}

#ifdef XFT_WITH_DRIVERS
/* The number of keys the node at port holds in slot. */
static long long keys_in_slot(int port, int slot) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "CLUSTER COUNTKEYSINSLOT %d", slot);
  long long n = rep->integer;
  freeReplyObject(rep);
  redisFree(r);
  return n;
}

ParameterizedTestParameters(cluster_client, a_tags_slot_moved_is_followed) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A tag's key whose slot moves to another master while an entry carries it,
 * next to a tag of the same master the call reads in the same command
 * (tag_read.lua, the moved one in its ARGV): the next calls follow MOVED to
 * its new master and are hits; another client's invalidation of the tag there
 * is seen; with the slot half-way back (MIGRATING, its key moved: ASK) a call
 * is a hit, and the driver's own invalidation reaches the tag's key (ASK)
 * and is seen; the slot is given back at the end. */
ParameterizedTest(int *driver, cluster_client, a_tags_slot_moved_is_followed) {
  if (xft_cluster_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("tags need entry format 2 (format 1 refuses them: XF_EINVAL)");
  tag_drivers_skip_under_valgrind(*driver);
  const char *what = xft_driver_names[*driver];
  char moved[32], kept[32], moved_key[48], kept_key[48], key[48];
  xft_node from, to, owner, unused;
  int slot;
  for (int i = 0;; i++) { /* a slot nobody else's keys are in: it moves */
    cr_assert_lt(i, 1000);
    snprintf(moved, sizeof moved, "mv%d-%s", i, what);
    snprintf(moved_key, sizeof moved_key, "xf-tag:{%s}", moved);
    slot = xf__cluster_keyslot(moved_key, strlen(moved_key));
    xft_masters_of(slot, &from, &to);
    if (keys_in_slot(from.port, slot) == 0)
      break;
  }
  for (int i = 0;; i++) { /* another slot of the same master: it stays */
    cr_assert_lt(i, 1000);
    snprintf(kept, sizeof kept, "kp%d-%s", i, what);
    snprintf(kept_key, sizeof kept_key, "xf-tag:{%s}", kept);
    int s = xf__cluster_keyslot(kept_key, strlen(kept_key));
    xft_masters_of(s, &owner, &unused);
    if (s != slot && owner.port == from.port)
      break;
  }
  snprintf(key, sizeof key, "cc:tagmove:%s", what);
  const char *tags[] = {kept, moved};
  xf_policy p = xft_long_ttl();
  p.tags = tags, p.ntags = 2;
  xft_drv *d = node_drv(*driver, 1);
  xf_client *other = node_client(4);
  xft_op_loader l = {.value = "m"};
  drv_expect(d, what, key, &p, &l, XF_SOURCE_LOADER);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  xft_migrate_key(slot, &from, &to, moved_key);
  xft_assign(slot, &to);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE); /* MOVED */
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  cr_assert_eq(xf_invalidate_tags(other, tags + 1, 1), XF_OK, "%s", xf_errmsg(other));
  drv_expect(d, what, key, &p, &l, XF_SOURCE_LOADER);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  xft_migrate_key(slot, &to, &from, moved_key); /* half-way back: ASK */
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  drv_invalidate(d, what, tags + 1, 1);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_LOADER);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  xft_assign(slot, &from);
  drv_expect(d, what, key, &p, &l, XF_SOURCE_CACHE);
  cr_expect_eq(l.calls, 3, "%s: %d loads", what, l.calls);
  xf_stats st;
  xft_drv_stats(d, &st);
  cr_expect_eq(st.tag_invalidated, 2, "%s: %llu refused", what,
               (unsigned long long)st.tag_invalidated);
  cr_expect_geq(st.redirects, 2, "%s: %llu redirects (MOVED, ASK)", what,
                (unsigned long long)st.redirects);
  xft_drv_close(d);
  xf_client_close(other);
}
#endif

/* On a cluster whose masters have a replica, an invalidation's fence is
 * WAIT 1 on the connection of its raise (WAIT counts that connection's
 * writes): one raise and one WAIT per tag, from the same client address,
 * on the blocking client and the pool. */
Test(cluster_client, an_invalidation_waits_for_a_replica_on_its_raise_s_connection) {
  const char *tags[] = {"wr-a"};
  int port = owner_port("xf-tag:{wr-a}");
  cr_assert_geq(port, 0);
  xf_client *c = node_client(0);
  char host[64];
  snprintf(host, sizeof host, HOST ":%d", xft_cluster_port(0));
  xf_options o = XF_OPTIONS_INIT;
  o.host = host;
  o.connect_timeout_ms = o.command_timeout_ms = XFT_CLUSTER_PATIENT_MS;
  xf_pool *pool;
  cr_assert_eq(xf_pool_open(&pool, &o, 2, 0), XF_OK);
  redisContext *m = NULL;
  for (int i = 0; i < 3; i++) {
    if (i == 1) /* connected, the scripts loaded */
      m = xft_monitor(port);
    cr_assert_eq(xf_invalidate_tags(c, tags, 1), XF_OK, "%s", xf_errmsg(c));
    cr_assert_eq(xf_pool_invalidate_tags(pool, tags, 1), XF_OK, "%s", xf_pool_errmsg());
  }
  xft_raises seen = xft_raises_seen(m, port);
  cr_expect_eq(seen.raises, 4, "%d raises, %d waits", seen.raises, seen.waits);
  cr_expect_eq(seen.waits, 4);
  cr_expect_eq(seen.waits_on_the_raise_s_connection, 4);
  xf_pool_close(pool);
  xf_client_close(c);
}
