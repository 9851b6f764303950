/* A manual failover on a running cluster (cluster_failover.h). */
#include "cluster_failover.h"

#include <criterion/criterion.h>
#include <string.h>

/* Asserts r is a reply, not an error, to what on port; returns it. */
static redisReply *ok(redisReply *r, const char *what, int port) {
  cr_assert(r && r->type != REDIS_REPLY_ERROR, "%s on port %d: %s", what, port,
            r ? r->str : "no reply");
  return r;
}

/* Element at of the range of CLUSTER SLOTS (as node i sees it) that serves
 * slot: 2 the master, 3 its first replica. */
static int slot_node(const xft_cluster *c, int i, int slot, size_t at) {
  redisReply *rep =
      ok(xft_cluster_node_cmd(c, c->port[i], "CLUSTER SLOTS"), "CLUSTER SLOTS", c->port[i]);
  int port = -1;
  for (size_t k = 0; k < rep->elements; k++) {
    redisReply *range = rep->element[k];
    if (range->element[0]->integer <= slot && slot <= range->element[1]->integer &&
        range->elements > at)
      port = (int)range->element[at]->element[1]->integer;
  }
  freeReplyObject(rep);
  return port;
}

int xft_slot_master_seen_by(const xft_cluster *c, int i, int slot) {
  return slot_node(c, i, slot, 2);
}

int xft_slot_replica_seen_by(const xft_cluster *c, int i, int slot) {
  return slot_node(c, i, slot, 3);
}

int xft_slot_master(const xft_cluster *c, int slot) {
  int port = xft_slot_master_seen_by(c, 0, slot);
  cr_assert_gt(port, 0, "slot %d has a master", slot);
  return port;
}

int xft_slot_replica(const xft_cluster *c, int slot) {
  int port = xft_slot_replica_seen_by(c, 0, slot);
  cr_assert_gt(port, 0, "slot %d has a replica", slot);
  return port;
}

int xft_node_info_has(const xft_cluster *c, int port, const char *line) {
  redisReply *info =
      ok(xft_cluster_node_cmd(c, port, "INFO replication"), "INFO replication", port);
  int has = info->type == REDIS_REPLY_STRING && strstr(info->str, line) != NULL;
  freeReplyObject(info);
  return has;
}

void xft_node_wait_info(const xft_cluster *c, int port, const char *line) {
  for (int i = 0; i < 1000 && !xft_node_info_has(c, port, line); i++)
    xft_cluster_sleep_ms(10);
  cr_assert(xft_node_info_has(c, port, line), "node %d never showed %s", port, line);
}

void xft_wait_replica_listed(const xft_cluster *c, int slot, int port) {
  for (int tries = 0; tries < 500; tries++) {
    int seen = 0;
    for (int i = 0; i < XFT_CLUSTER_NODES; i++)
      seen += xft_slot_replica_seen_by(c, i, slot) == port;
    if (seen == XFT_CLUSTER_NODES)
      return;
    xft_cluster_sleep_ms(10);
  }
  cr_assert_fail("port %d never listed as slot %d's replica", port, slot);
}

void xft_replicated(const xft_cluster *c, int port) {
  freeReplyObject(ok(xft_cluster_node_cmd(c, port, "WAIT 1 2000"), "WAIT", port));
}

void xft_promote(const xft_cluster *c, int port) {
  for (int attempt = 0; attempt < 10 && !xft_node_info_has(c, port, "role:master");
       attempt++) {
    freeReplyObject(xft_cluster_node_cmd(c, port, "CLUSTER FAILOVER"));
    for (int i = 0; i < 200 && !xft_node_info_has(c, port, "role:master"); i++)
      xft_cluster_sleep_ms(10);
  }
  cr_assert(xft_node_info_has(c, port, "role:master"), "node %d was never promoted", port);
}
