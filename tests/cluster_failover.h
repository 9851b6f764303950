/* A manual failover on a running 3+3 cluster, plain or TLS (every command
 * goes through xft_cluster_node_cmd, over TLS when the cluster is): which
 * node serves a slot and which replicates it, a replica promoted, and the
 * waits until every node agrees. Shared by the blocking replica tests and
 * the TLS cluster tests. */
#ifndef XFT_CLUSTER_FAILOVER_H
#define XFT_CLUSTER_FAILOVER_H

#include "cluster_fixture.h"

/* The port of slot's master / of its (one) replica, as node i (0..5) sees
 * it; -1 when it sees none. */
int xft_slot_master_seen_by(const xft_cluster *c, int i, int slot);
int xft_slot_replica_seen_by(const xft_cluster *c, int i, int slot);

/* The same as node 0 sees it; asserts there is one. */
int xft_slot_master(const xft_cluster *c, int slot);
int xft_slot_replica(const xft_cluster *c, int slot);

/* Whether the node's INFO replication has line (e.g. "role:master"). */
int xft_node_info_has(const xft_cluster *c, int port, const char *line);

/* Waits (10 s at most, asserting) until the node's INFO replication has line. */
void xft_node_wait_info(const xft_cluster *c, int port, const char *line);

/* Waits until every node's CLUSTER SLOTS lists port as slot's replica (a
 * node lists a replica once it has heard of its replication offset). */
void xft_wait_replica_listed(const xft_cluster *c, int slot, int port);

/* WAIT 1 on the master at port: its writes reached its replica. */
void xft_replicated(const xft_cluster *c, int port);

/* A manual failover (CLUSTER FAILOVER) of the replica at port, asked again
 * until its master has heard of it (a replica demoted a moment ago is not
 * known to its master yet: the request times out); asserts it is master. */
void xft_promote(const xft_cluster *c, int port);

#endif
