/* The one Redis Cluster router, without I/O: cluster-mode detection, the slot
 * map, a node table whose indexes never change, replica choice and what to do
 * with each reply (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, NOSCRIPT, a replica's
 * error, a node that does not answer). Every driver (blocking, batch, pool,
 * the event loop, the public xf_call_*) asks it where a command goes and
 * performs what it answers over its own connections: the decisions and their
 * messages exist once, here. It parses replies (xf__reply) but owns no
 * connection, no clock (now_ms is an argument) and no thread; its owner
 * serialises access. */
#ifndef XF_ROUTE_H
#define XF_ROUTE_H

#include <stdint.h>

#include "cluster.h"
#include "reply.h"
#include "resp.h"

struct xf_client;
struct xf_reply;

/* How long after a full map load another one may happen: a burst of MOVED
 * (a resharding) or of failures (a failover) refreshes the map once per
 * period; in between each MOVED updates its own slot. */
#define XF_ROUTE_REFRESH_MS 200

/* What the router knows of the server behind options.host. */
enum { XF_ROUTE_UNKNOWN, XF_ROUTE_STANDALONE, XF_ROUTE_CLUSTER };

/* A node commands were routed to. Its index in xf__routes.nodes never
 * changes, so drivers keep their connections in arrays by it. */
typedef struct xf__route_node {
  char *host; /* owned */
  int port;
  int replica; /* a replica in the current map: reads need READONLY first */
} xf__route_node;

typedef struct xf__routes {
  struct xf_client *c; /* options, messages and counters; never I/O */
  int mode;            /* XF_ROUTE_* */
  int mapped;          /* map holds a CLUSTER SLOTS answer */
  xf__cluster_map map;
  xf__route_node *nodes;
  int nnodes, cap;
  int *node_of; /* map.nodes[i] -> index in nodes; -1 = not looked up */
  int node_of_cap;
  int64_t refreshed_ms;  /* when the map was last asked for; INT64_MIN/2 = never */
  uint32_t next_replica; /* round robin over a slot's replicas */
} xf__routes;

/* One command's way through the cluster: where it goes now and what it met. */
typedef struct xf__hop {
  int node;          /* index in nodes[] */
  int asking;        /* send ASKING first (an ASK redirection) */
  int replica;       /* a read on a replica: its connection needs READONLY */
  int attempt;       /* redirections and retries so far */
  int master_only;   /* a replica failed it: the slot's master from now on */
  int script_loaded; /* one SCRIPT LOAD per command */
  int failed;        /* the node that just did not answer (-1 = none) */
  int failed_rc;     /* and its code */
  int reload;        /* CLUSTERDOWN: reload the map after the backoff */
} xf__hop;

/* What the driver does next with a command. */
typedef enum xf__route_act {
  XF_ROUTE_DONE,        /* the reply is the command's: hand it to the flow */
  XF_ROUTE_SEND,        /* send (again) to hop.node, ASKING / READONLY as the hop says */
  XF_ROUTE_LOAD_SCRIPT, /* SCRIPT LOAD (xf__route_script) on hop.node, then SEND there */
  XF_ROUTE_BACKOFF,     /* wait *arg ms, then xf__route_next */
  XF_ROUTE_REFRESH,     /* load the map (xf__route_map_cmd on xf__route_map_node),
                           feed it to xf__route_take_map, then xf__route_next */
  XF_ROUTE_FAIL         /* the command ends with code *arg (message on the client) */
} xf__route_act;

/* Sets r up from c's options (mode OFF or a Unix socket: standalone; ON:
 * cluster; AUTO: unknown until xf__route_detect). The owner then adds the
 * seeds (xf__route_node_at), which the map is asked of first. */
void xf__route_init(xf__routes *r, struct xf_client *c);

/* Frees the map and the node table (r is then as after init). */
void xf__route_free(xf__routes *r);

/* The commands that teach the router: INFO cluster and CLUSTER SLOTS. */
extern const xf__cmd xf__route_info_cmd, xf__route_map_cmd;

/* The reply to INFO cluster decides the mode (a server that refuses INFO,
 * an ACL or a proxy, is standalone). XF_OK, XF_EPROTO (no cluster_enabled
 * field), XF_EINVAL (a cluster and options.db set), XF_EAUTH (NOAUTH: the
 * server needs a password), message on the client. */
int xf__route_detect(xf__routes *r, const struct xf_reply *info);

/* A CLUSTER SLOTS reply from a node at from_host (NULL: the Unix socket's)
 * becomes the map; roles are updated, map_refreshes counted. XF_OK, or
 * XF_EPROTO / XF_ENOMEM with the message on the client (the old map kept). */
int xf__route_take_map(xf__routes *r, const struct xf_reply *slots, const char *from_host,
                       int64_t now_ms);

/* Whether a map load may start now (none within XF_ROUTE_REFRESH_MS), and
 * marking that one did. */
int xf__route_refresh_due(const xf__routes *r, int64_t now_ms);
void xf__route_refreshing(xf__routes *r, int64_t now_ms);

/* Which node to ask for the map: the i-th candidate, nodes already known
 * first, never avoid (-1 = none); -1 past the last. */
int xf__route_map_node(const xf__routes *r, int i, int avoid);

/* The index of host:port in nodes[], added if new; XF_ENOMEM. */
int xf__route_node_at(xf__routes *r, const char *host, int port);

/* Starts a command: where it goes first. XF_ROUTE_SEND, XF_ROUTE_REFRESH (no
 * map, or its slot has no master and a refresh is due) or XF_ROUTE_FAIL. */
xf__route_act xf__route_start(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int64_t now_ms,
                              int *arg);

/* After a BACKOFF or a REFRESH: where the command goes now (SEND), or FAIL
 * (no master for its slot; the node that failed it is the only one). */
xf__route_act xf__route_next(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int64_t now_ms,
                             int *arg);

/* The reply hop.node gave to cmd. */
xf__route_act xf__route_reply(xf__routes *r, const xf__cmd *cmd, xf__hop *h,
                              const struct xf_reply *reply, int64_t now_ms, int *arg);

/* hop.node could not be reached or did not answer cmd (rc: XF_EIO,
 * XF_ECONNECT). */
xf__route_act xf__route_io_error(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int rc,
                                 int64_t now_ms, int *arg);

/* For XF_ROUTE_LOAD_SCRIPT: the SCRIPT LOAD of the script cmd runs. */
void xf__route_script(const xf__cmd *cmd, xf__cmd *load);

/* The script cmd ran (script.h: a plain read the transport swapped for the
 * read script counts as it: xf__entry_read_as), or -1 for none. */
int xf__route_script_of(const xf__cmd *cmd);

#endif
