/* The blocking drivers' connections: the seeds' and one per cluster node,
 * kept by the fleet (fleet.h), and the loop that performs what it decides
 * (send, ASKING, READONLY, SCRIPT LOAD, back off, ask for the mode or the
 * map) for one command or a pipeline of them, over blocking connections. */
#ifndef XF_ROUTER_H
#define XF_ROUTER_H

#include <stddef.h>

#include "conn.h"
#include "fleet.h"
#include "reply.h"

struct xf_client;

/* Makes c's fleet over its seeds (xf_client_open). XF_OK or XF_ENOMEM. */
int xf__router_init(struct xf_client *c);

/* Closes every node's connection and frees the fleet (NULL-safe). */
void xf__router_free(struct xf_client *c);

/* In a forked child: closes the child's copies of every socket. */
void xf__router_forget(struct xf_client *c);

/* Connects now (xf_client_open): the seed in use, else the first of the
 * others that answers; when the mode is to be found out, asks it, and in a
 * cluster loads the map. */
int xf__router_connect(struct xf_client *c);

/* xf__command and xf__command_many (client_io.h): one pipeline per node,
 * round after round for the commands redirected or refused; the refused
 * ones (TRYAGAIN, CLUSTERDOWN) back off once per round, together. */
int xf__router_command(struct xf_client *c, const xf__cmd *cmd, xf__reply **reply);
int xf__router_pipeline(struct xf_client *c, size_t n, const xf__cmd *const *cmds, int *rcs,
                        xf__reply **replies);

/* The connection commands go to in standalone mode: the seed in use. */
xf__conn *xf__router_seed(const struct xf_client *c);

/* How many connections are open (a cluster's nodes', or the seed in use). */
int xf__router_open_connections(const struct xf_client *c);

#endif
