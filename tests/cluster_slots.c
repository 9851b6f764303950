/* Test helpers on the binary's shared cluster: see cluster_slots.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cluster_fixture.h"
#include "cluster_slots.h"
#include "reader.h"
#include "reply.h"
#include "xfetch.h"

#define HOST "127.0.0.1"

/* The number after field (printf-style with name) in the node's INFO section. */
static long long info_count(int port, const char *section, const char *field,
                            const char *name) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *info = xft_cluster_cmd(r, "INFO %s", section);
  char key[96];
  snprintf(key, sizeof key, field, name);
  const char *at = strstr(info->str, key);
  long long n = at ? atoll(at + strlen(key)) : 0;
  freeReplyObject(info);
  redisFree(r);
  return n;
}

long long xft_calls_of(int port, const char *cmd) {
  return info_count(port, "commandstats", "cmdstat_%s:calls=", cmd);
}

long long xft_errors_of(int port, const char *error) {
  return info_count(port, "errorstats", "errorstat_%s:count=", error);
}

void xft_reset_stats(void) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    freeReplyObject(xft_cluster_cmd(r, "CONFIG RESETSTAT"));
    redisFree(r);
  }
}

long long xft_total_calls(const char *cmd) {
  long long n = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    n += xft_calls_of(xft_cluster_port(i), cmd);
  return n;
}

int xft_cluster_entry_format(void) {
  const char *format = getenv("XFT_ENTRY_FORMAT");
  return format ? atoi(format) : 0;
}

const char *xft_cluster_read_cmd(void) {
  return xft_cluster_entry_format() == XF_ENTRY_HASH ? "hmget" : "get";
}

xf__reply *xft_cluster_slots(int port) {
  redisContext *r = xft_cluster_redis(port);
  xf__reader_adopt(r->reader); /* its one reply goes to the core's parser */
  xf__reply *rep = redisCommand(r, "CLUSTER SLOTS");
  cr_assert(rep && rep->type == XF_REPLY_ARRAY, "CLUSTER SLOTS: %s", r->errstr);
  redisFree(r);
  return rep;
}

/* The master serving slot, and another master. */
void xft_masters_of(int slot, xft_node *owner, xft_node *other) {
  xf__reply *rep = xft_cluster_slots(xft_cluster_port(0));
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  char err[128];
  cr_assert_eq(xf__cluster_map_parse(&m, rep, HOST, err, sizeof err), XF_OK, "%s", err);
  int o = xf__cluster_map_master(&m, slot), t = -1;
  for (int n = 0; n < m.nnodes && t < 0; n++)
    if (n != o && m.nodes[n].master == -1)
      t = n;
  cr_assert(o >= 0 && t >= 0);
  owner->port = m.nodes[o].port;
  other->port = m.nodes[t].port;
  snprintf(owner->id, sizeof owner->id, "%s", m.nodes[o].id);
  snprintf(other->id, sizeof other->id, "%s", m.nodes[t].id);
  xf__cluster_map_free(&m);
  xf__reply_free(rep);
}

void xft_expect_ok(redisReply *rep) {
  cr_expect(rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "OK") == 0, "got '%s'",
            rep->str ? rep->str : "?");
  freeReplyObject(rep);
}

/* Tells every master that slot now lives on to. */
void xft_assign(int slot, const xft_node *to) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    redisContext *r = xft_cluster_redis(xft_cluster_port(i));
    redisReply *rep = xft_cluster_cmd(r, "CLUSTER SETSLOT %d NODE %s", slot, to->id);
    freeReplyObject(rep); /* replicas refuse: they learn it from their master */
    redisFree(r);
  }
}

/* Starts moving slot from -> to (IMPORTING, MIGRATING: both may repeat) and
 * moves key over, as redis-cli --cluster reshard does. */
void xft_migrate_key(int slot, const xft_node *from, const xft_node *to, const char *key) {
  redisContext *src = xft_cluster_redis(from->port), *dst = xft_cluster_redis(to->port);
  xft_expect_ok(xft_cluster_cmd(dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, from->id));
  xft_expect_ok(xft_cluster_cmd(src, "CLUSTER SETSLOT %d MIGRATING %s", slot, to->id));
  xft_expect_ok(
      xft_cluster_cmd(src, "MIGRATE %s %d %s 0 5000 KEYS %s", HOST, to->port, "", key));
  redisFree(src);
  redisFree(dst);
}
