/* The Redis Cluster router of the blocking client: picks the node of each
 * command by its key's slot (cluster.h's map), opens one connection per node
 * lazily, and follows MOVED / ASK / TRYAGAIN / CLUSTERDOWN and nodes that
 * stop answering. The blocking and batch drivers send through it; the
 * decisions themselves (slots, map, redirect parsing, backoff) are cluster.c's. */
#ifndef XF_ROUTER_H
#define XF_ROUTER_H

#include "cluster.h"
#include "conn.h"

/* How long after a full map load another one may happen: a burst of MOVED
 * (a resharding) or of failures (a failover) refreshes the map once per
 * period; in between each MOVED updates its own slot. */
#define XF_ROUTER_REFRESH_MS 200

typedef struct xf__router {
  xf__cluster_map map;
  xf__conn *conns; /* every endpoint routed to; its index never changes */
  int nconns, cap;
  int *node_conn; /* map.nodes[i] -> index in conns; -1 = not looked up */
  int node_conn_cap;
  int64_t refreshed_ms;  /* when the map was last loaded; INT64_MIN = never */
  uint32_t next_replica; /* round robin over a slot's replicas */
} xf__router;

struct xf_client;

/* Creates the router of c and loads the map through seed (a connected
 * server, or any of c's seeds). Returns XF_OK with *out, or the code of the
 * last failure (XF_ECONNECT, XF_EPROTO for a server that is not a cluster
 * node, XF_ENOMEM) with the reason on c. */
int xf__router_open(struct xf_client *c, xf__router **out);

/* Closes every connection and frees the router (NULL-safe). */
void xf__router_free(xf__router *r);

/* In a forked child: closes the child's copies of every socket. */
void xf__router_forget(xf__router *r);

/* xf__command in cluster mode: sends cmd to the node serving cmd->key and
 * follows redirections (at most XF_CLUSTER_MAX_REDIRECTS). Same contract as
 * xf__command, plus XF_EREDIS when the redirections do not end. */
int xf__router_command(struct xf_client *c, xf__router *r, const xf__cmd *cmd,
                       redisReply **reply);

/* xf__command_many in cluster mode: one pipeline per node, then each
 * redirected command alone through xf__router_command. */
int xf__router_pipeline(struct xf_client *c, xf__router *r, size_t n,
                        const xf__cmd *const *cmds, int *rcs, redisReply **replies);

/* How many node connections are open. */
int xf__router_open_connections(const xf__router *r);

#endif
