/* The blocking drivers' Redis Cluster connections: one per node of the
 * router (route.h), opened lazily, and the loop that performs what the
 * router decides (send, ASKING, READONLY, SCRIPT LOAD, back off, reload the
 * map) for one command or a pipeline of them. */
#ifndef XF_ROUTER_H
#define XF_ROUTER_H

#include "conn.h"
#include "reply.h"
#include "route.h"

typedef struct xf__router {
  xf__conn *conns; /* by node index in the client's routes; host NULL = unused */
  int nconns;
} xf__router;

struct xf_client;

/* Creates the router of c and loads the map through any of c's seeds.
 * Returns XF_OK with *out, or the code of the last failure (XF_ECONNECT,
 * XF_EPROTO for a server that is not a cluster node, XF_ENOMEM) with the
 * reason on c. */
int xf__router_open(struct xf_client *c, xf__router **out);

/* Closes every connection and frees the router (NULL-safe). */
void xf__router_free(xf__router *r);

/* In a forked child: closes the child's copies of every socket. */
void xf__router_forget(xf__router *r);

/* xf__command in cluster mode: sends cmd where the router says and follows
 * its decisions. Same contract as xf__command, plus XF_EREDIS when the
 * redirections do not end. */
int xf__router_command(struct xf_client *c, xf__router *r, const xf__cmd *cmd,
                       xf__reply **reply);

/* xf__command_many in cluster mode: one pipeline per node, round after round
 * for the commands redirected or refused; the refused ones (TRYAGAIN,
 * CLUSTERDOWN) back off once per round, together. */
int xf__router_pipeline(struct xf_client *c, xf__router *r, size_t n,
                        const xf__cmd *const *cmds, int *rcs, xf__reply **replies);

/* How many node connections are open. */
int xf__router_open_connections(const xf__router *r);

#endif
