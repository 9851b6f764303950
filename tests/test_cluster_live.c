/* The cluster router against a real 3 masters + 3 replicas cluster
 * (cluster_fixture.c): the map, slots and redirections as Redis produces them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "reply.h"
#include "xfetch.h"

#define HOST "127.0.0.1"
/* The migration test's keys: every other test leaves their slot alone. */
#define ASK_TAG "{xft-live-ask}"

static void load_map(int port, xf__cluster_map *m) {
  xf__reply *rep = xft_cluster_slots(port);
  char err[160] = "";
  xf__cluster_map_init(m);
  cr_assert_eq(xf__cluster_map_parse(m, rep, HOST, err, sizeof err), XF_OK, "%s", err);
  xf__reply_free(rep);
}

static int ask_slot(void) { return xf__cluster_keyslot(ASK_TAG, strlen(ASK_TAG)); }

/* Parses the error reply of a command that must be redirected. */
static xf__cluster_redirect redirected(redisReply *rep) {
  cr_assert_eq(rep->type, REDIS_REPLY_ERROR, "expected a redirection, got type %d",
               rep->type);
  xf__cluster_redirect d;
  cr_assert_eq(xf__cluster_redirect_parse(rep->str, rep->len, &d), XF_OK, "%s", rep->str);
  freeReplyObject(rep);
  return d;
}

static void expect_redirect(redisReply *rep, xf__cluster_kind kind, int slot, int port) {
  xf__cluster_redirect d = redirected(rep);
  cr_expect_eq(d.kind, kind, "kind %d, want %d", d.kind, kind);
  cr_expect_eq(d.slot, slot);
  cr_expect_str_eq(d.host, HOST);
  cr_expect_eq(d.port, port);
}

static void expect_status(redisReply *rep, const char *want) {
  cr_expect(rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, want) == 0, "got '%s'",
            rep->str ? rep->str : "?");
  freeReplyObject(rep);
}

static void expect_string(redisReply *rep, const char *want) {
  cr_expect(rep->type == REDIS_REPLY_STRING && strcmp(rep->str, want) == 0,
            "got type %d '%s'", rep->type, rep->str ? rep->str : "");
  freeReplyObject(rep);
}

Test(cluster_live, every_node_maps_all_slots_to_three_masters_with_a_replica) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    int port = xft_cluster_port(i);
    xf__cluster_map m;
    load_map(port, &m);
    cr_expect_eq(xf__cluster_map_covered(&m), XF_CLUSTER_SLOTS, "node %d", port);
    cr_expect_eq(m.nnodes, XFT_CLUSTER_NODES);
    int masters = 0;
    for (int n = 0; n < m.nnodes; n++) {
      int rep[2];
      cr_expect_str_eq(m.nodes[n].host, HOST);
      cr_expect(m.nodes[n].port >= xft_cluster_port(0) &&
                m.nodes[n].port <= xft_cluster_port(5));
      cr_expect(m.nodes[n].id && strlen(m.nodes[n].id) == 40);
      if (m.nodes[n].master == -1) {
        masters++;
        cr_expect_eq(xf__cluster_map_replicas(&m, n, rep, 2), 1, "master %d",
                     m.nodes[n].port);
      }
    }
    cr_expect_eq(masters, 3);
    xf__cluster_map_free(&m);
    redisContext *r = xft_cluster_redis(port);
    redisReply *info = xft_cluster_cmd(r, "INFO cluster");
    cr_expect_eq(xf__cluster_info_enabled(info->str, info->len), 1);
    freeReplyObject(info);
    redisFree(r);
  }
}

/* Random binary keys, a third of them with braces in them. */
static size_t make_key(unsigned *x, char *key) {
  static const char alphabet[] = "ab{}{}:\0\xff";
  size_t len = (*x = *x * 1103515245u + 12345u) >> 27; /* 0..31 */
  for (size_t i = 0; i < len; i++) {
    *x = *x * 1103515245u + 12345u;
    key[i] = (*x >> 16) % 3 ? (char)(*x >> 24) : alphabet[(*x >> 20) % 9];
  }
  return len;
}

Test(cluster_live, keyslot_agrees_with_cluster_keyslot_on_1000_keys) {
  redisContext *r = xft_cluster_redis(xft_cluster_port(0));
  char keys[1000][32];
  size_t lens[1000];
  unsigned x = 2024;
  for (int i = 0; i < 1000; i++) {
    lens[i] = make_key(&x, keys[i]);
    redisAppendCommand(r, "CLUSTER KEYSLOT %b", keys[i], lens[i]);
  }
  for (int i = 0; i < 1000; i++) {
    void *v = NULL;
    cr_assert_eq(redisGetReply(r, &v), REDIS_OK);
    redisReply *rep = v;
    cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
    cr_expect_eq(xf__cluster_keyslot(keys[i], lens[i]), rep->integer, "key %d", i);
    freeReplyObject(rep);
  }
  redisFree(r);
}

Test(cluster_live, keys_sent_where_the_map_says_are_not_redirected) {
  xf__cluster_map m;
  load_map(xft_cluster_port(0), &m);
  cr_assert_eq(m.nnodes, XFT_CLUSTER_NODES);
  redisContext *conn[XFT_CLUSTER_NODES] = {0};
  int sent[XFT_CLUSTER_NODES] = {0};
  char key[32];
  for (int i = 0; i < 1000; i++) {
    int len = snprintf(key, sizeof key, "xft-live-route-%d", i);
    int slot = xf__cluster_keyslot(key, (size_t)len);
    if (slot == ask_slot())
      continue; /* may be mid-migration */
    int n = xf__cluster_map_master(&m, slot);
    cr_assert_geq(n, 0);
    if (!conn[n])
      conn[n] = xft_cluster_redis(m.nodes[n].port);
    redisAppendCommand(conn[n], "SET %s %d", key, i);
    sent[n]++;
  }
  for (int n = 0; n < m.nnodes; n++)
    for (; sent[n] > 0; sent[n]--) {
      void *v = NULL;
      cr_assert_eq(redisGetReply(conn[n], &v), REDIS_OK);
      expect_status(v, "OK");
    }
  for (int n = 0; n < m.nnodes; n++)
    redisFree(conn[n]);
  xf__cluster_map_free(&m);
}

Test(cluster_live, a_wrong_node_answers_moved_to_the_owner) {
  xf__cluster_map m;
  load_map(xft_cluster_port(0), &m);
  const char *key = "xft-live-moved";
  int slot = xf__cluster_keyslot(key, strlen(key));
  cr_assert_neq(slot, ask_slot());
  int owner = xf__cluster_map_master(&m, slot);
  int others = 0;
  for (int n = 0; n < m.nnodes; n++) { /* other masters and every replica */
    if (n == owner)
      continue;
    redisContext *r = xft_cluster_redis(m.nodes[n].port);
    expect_redirect(xft_cluster_cmd(r, "GET %s", key), XF_CLUSTER_MOVED, slot,
                    m.nodes[owner].port);
    redisFree(r);
    others++;
  }
  cr_expect_eq(others, 5);
  xf__cluster_map_free(&m);
}

typedef struct node {
  int port;
  const char *id;
} node;

/* Migrates slot from -> to by hand (IMPORTING, MIGRATING, MIGRATE, NODE) as
 * redis-cli --cluster reshard does, checking what each node answers: ASK for
 * keys the source no longer holds, MOVED once the slot is assigned. */
static void migrate(int slot, node from, node to, const char *kept, const char *gone) {
  redisContext *src = xft_cluster_redis(from.port), *dst = xft_cluster_redis(to.port);
  expect_status(xft_cluster_cmd(dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, from.id),
                "OK");
  expect_status(xft_cluster_cmd(src, "CLUSTER SETSLOT %d MIGRATING %s", slot, to.id), "OK");
  /* The source still serves what it holds, and sends the rest to the target. */
  expect_string(xft_cluster_cmd(src, "GET %s", kept), "v");
  expect_redirect(xft_cluster_cmd(src, "GET %s", gone), XF_CLUSTER_ASK, slot, to.port);
  /* The target refuses without ASKING: the slot is not its own yet. */
  expect_redirect(xft_cluster_cmd(dst, "GET %s", kept), XF_CLUSTER_MOVED, slot, from.port);
  expect_status(
      xft_cluster_cmd(src, "MIGRATE %s %d %s 0 5000 KEYS %s", HOST, to.port, "", kept),
      "OK");
  expect_redirect(xft_cluster_cmd(src, "GET %s", kept), XF_CLUSTER_ASK, slot, to.port);
  expect_status(xft_cluster_cmd(dst, "ASKING"), "OK");
  expect_string(xft_cluster_cmd(dst, "GET %s", kept), "v");
  expect_status(xft_cluster_cmd(dst, "CLUSTER SETSLOT %d NODE %s", slot, to.id), "OK");
  expect_status(xft_cluster_cmd(src, "CLUSTER SETSLOT %d NODE %s", slot, to.id), "OK");
  expect_redirect(xft_cluster_cmd(src, "GET %s", kept), XF_CLUSTER_MOVED, slot, to.port);
  expect_string(xft_cluster_cmd(dst, "GET %s", kept), "v");
  redisFree(src);
  redisFree(dst);
}

Test(cluster_live, a_slot_migration_answers_ask_then_moved) {
  xf__cluster_map m;
  load_map(xft_cluster_port(0), &m);
  int slot = ask_slot();
  int s = xf__cluster_map_master(&m, slot), t = -1;
  for (int n = 0; n < m.nnodes && t < 0; n++)
    if (n != s && m.nodes[n].master == -1)
      t = n;
  cr_assert(s >= 0 && t >= 0);
  node src = {m.nodes[s].port, m.nodes[s].id}, dst = {m.nodes[t].port, m.nodes[t].id};
  redisContext *r = xft_cluster_redis(src.port);
  expect_status(xft_cluster_cmd(r, "SET %s v", ASK_TAG "kept"), "OK");
  freeReplyObject(xft_cluster_cmd(r, "DEL %s", ASK_TAG "gone"));
  redisFree(r);
  migrate(slot, src, dst, ASK_TAG "kept", ASK_TAG "gone");
  migrate(slot, dst, src, ASK_TAG "kept", ASK_TAG "gone"); /* and back, as created */
  xf__cluster_map_free(&m);
}
