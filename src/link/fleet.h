/* The fleet: the servers a client talks to and which one each command goes
 * to, without I/O. It holds the seeds (options.host's servers, or the Unix
 * socket) and the one in use, a connection per cluster node (made through
 * the driver's hooks, by the node's index in route.h's table), the question
 * the router needs answered before commands can go (INFO cluster while the
 * mode is unknown, CLUSTER SLOTS while there is no map or a refresh is due),
 * which connection to ask it of, and each command's way (its trip) through
 * route.h's decisions, told to the driver as what to do next: send to a
 * node, wait, have the map loaded, done, failed.
 *
 * A driver moves the bytes and the time: the blocking drivers in rounds
 * (router.c), the event loop on its connections (async_router.c), the public
 * sans-I/O call as its own SEND steps (call_route.c, with no connection
 * objects: it names servers by host and port). Its owner serialises access. */
#ifndef XF_FLEET_H
#define XF_FLEET_H

#include <stdint.h>

#include "link.h"
#include "reply.h"
#include "resp.h"
#include "route.h"

struct xf_client;

/* How a driver's connections are made and looked at. */
typedef struct xf__fleet_ops {
  /* A connection to host:port (host NULL: the client's Unix socket), not
   * connected; NULL when out of memory. */
  void *(*open)(void *ud, const char *host, int port);
  void (*close)(void *ud, void *conn); /* NULL: the driver frees them itself */
  xf__link *(*link)(void *conn);       /* its engine */
  int (*up)(const void *conn);         /* a stream is open or opening: READONLY goes now */
  int (*connected)(const void *conn);  /* its stream is open: asked first */
  void (*retire)(void *conn);          /* NULL, or: a seed the nodes' connections replace */
} xf__fleet_ops;

typedef struct xf__fleet {
  struct xf_client *c; /* options, messages */
  xf__routes *routes;  /* the client's: mode, map, nodes */
  const xf__fleet_ops *ops;
  void *ud;
  void **seeds; /* the seeds' connections, in options.host's order */
  int nseeds;
  int server;  /* the seed in use */
  void **node; /* routes->nodes[i]'s connection; NULL = none yet */
  int node_cap;
  /* The question on the wire (an event loop's; the others ask it at once). */
  int asking; /* one is on the wire: commands that need it wait for it */
  int ask_tries, ask_avoid;
} xf__fleet;

/* One command's way through the fleet. */
typedef struct xf__trip {
  xf__hop hop;
  xf__route_act act; /* the router's; XF_ROUTE_DONE: the next command is new */
  int arg;           /* XF__FLEET_WAIT: ms; XF__FLEET_FAIL: the code */
} xf__trip;

/* What a driver does next with a command. */
typedef enum xf__fleet_do {
  XF__FLEET_SEND, /* to node trip.hop.node (xf__fleet_node): a SCRIPT LOAD first
                     (xf__fleet_load_script), READONLY first when the node is a
                     replica (xf__fleet_readonly), ASKING first when hop.asking */
  XF__FLEET_WAIT, /* wait trip.arg ms, then xf__fleet_again */
  XF__FLEET_MAP,  /* the map first: ask xf__fleet_question (or wait for the one on
                     the wire: fleet.asking), then xf__fleet_again */
  XF__FLEET_DONE, /* the reply is the command's */
  XF__FLEET_FAIL  /* the command ends with trip.arg (message on the client) */
} xf__fleet_do;

/* Sets f up over c's routes and seeds (nseeds connections, copied), with a
 * driver's ops. XF_OK or XF_ENOMEM. */
int xf__fleet_init(xf__fleet *f, struct xf_client *c, const xf__fleet_ops *ops, void *ud,
                   void *const *seeds, int nseeds);

/* Closes the nodes' connections (ops->close) and frees f's arrays. */
void xf__fleet_free(xf__fleet *f);

/* ---- where commands go ------------------------------------------------------- */

/* Whether commands can be routed now: XF_OK, XF__FLEET_ASK (the mode or the
 * map must be asked first), XF_EINVAL (a cluster and options.db set: the
 * message on the client). */
#define XF__FLEET_ASK 1
int xf__fleet_ready(const xf__fleet *f);

/* Standalone: the seed i places after the one in use (wrapping). */
void *xf__fleet_seed(const xf__fleet *f, int i);
void xf__fleet_seed_where(const xf__fleet *f, int i, const char **host, int *port);
/* The seed conn (or the i-th after the one in use) took a command: it is in
 * use. It failed to come up: if it was in use, the next one is. */
void xf__fleet_seed_took(xf__fleet *f, const void *conn);
void xf__fleet_seed_took_at(xf__fleet *f, int i);
void xf__fleet_seed_down(xf__fleet *f, const void *conn);
/* conn's index among the seeds, or -1. */
int xf__fleet_seed_index(const xf__fleet *f, const void *conn);

/* A cluster node's connection, made on first use; NULL when out of memory. */
void *xf__fleet_node(xf__fleet *f, int node);

/* Where node i is (routes' strings). */
void xf__fleet_node_where(const xf__fleet *f, int node, const char **host, int *port);

/* A read on a replica needs READONLY on its connection, or the replica
 * answers MOVED. Marks conn's engine a replica's (every setup sends it from
 * now on) and returns whether READONLY must go now, ahead of the command
 * (the stream is open and was set up without it). xf__fleet_readonly_refused
 * takes the mark back. */
int xf__fleet_readonly(xf__fleet *f, void *conn);
void xf__fleet_readonly_refused(xf__fleet *f, void *conn);

/* The commands a SEND may carry ahead of its own. */
extern const xf__cmd xf__fleet_readonly_cmd, xf__fleet_asking_cmd;

/* A command's first act; the act after a WAIT or a map load; the act after
 * its node answered: rc XF_OK with its reply, XF_EIO / XF_ECONNECT (the node
 * could not be reached or did not answer), or another code the command
 * ends with. */
xf__fleet_do xf__fleet_start(xf__fleet *f, xf__trip *t, const xf__cmd *cmd, int64_t now_ms);
xf__fleet_do xf__fleet_again(xf__fleet *f, xf__trip *t, const xf__cmd *cmd, int64_t now_ms);
xf__fleet_do xf__fleet_answered(xf__fleet *f, xf__trip *t, const xf__cmd *cmd, int rc,
                                const xf__reply *reply, int64_t now_ms);

/* For XF__FLEET_SEND: whether a SCRIPT LOAD goes first (*load set). */
int xf__fleet_load_script(const xf__trip *t, const xf__cmd *cmd, xf__cmd *load);

/* The SCRIPT LOAD a blocking round sent came back (rc, reply: freed): XF_OK
 * when the command may be sent, else its code. */
int xf__fleet_script_loaded(xf__fleet *f, const xf__cmd *cmd, int rc, xf__reply *reply);

/* ---- the question ------------------------------------------------------------ */

/* The question to ask: INFO cluster while the mode is unknown, else
 * CLUSTER SLOTS. */
const xf__cmd *xf__fleet_question(const xf__fleet *f);

/* Starts a question, asked of no connection of node avoid (-1 = none): a
 * map's is marked as started (route.h's refresh period). */
void xf__fleet_ask_begin(xf__fleet *f, int avoid, int64_t now_ms);

/* Whether the question may be asked now: the mode always, the map when
 * none was asked within route.h's refresh period (else one is on its way). */
int xf__fleet_ask_due(const xf__fleet *f, int64_t now_ms);

/* The next connection to ask (each at most once per question): the open
 * ones first, nodes before seeds; NULL when none is left. */
void *xf__fleet_ask_next(xf__fleet *f);

/* Without connection objects: the i-th server to ask (the seeds from the
 * one in use for the mode; the known nodes, never avoid, for the map).
 * 0 when none is left. */
int xf__fleet_ask_where(const xf__fleet *f, int i, int avoid, const char **host, int *port);

/* The answer of conn (or of the seed at index seed, -1 for none, at host)
 * to question q (xf__fleet_question's when it was asked): rc XF_OK with the
 * reply, or the failure. XF_OK (the mode or the map is known), XF__FLEET_ASK
 * (a cluster: now ask it for the map), XF_EINVAL (stop: a cluster and
 * options.db), or another code: ask the next. */
int xf__fleet_answer(xf__fleet *f, void *conn, const xf__cmd *q, int rc, const xf__reply *r,
                     int64_t now_ms);
int xf__fleet_answer_from(xf__fleet *f, int seed, const char *host, const xf__cmd *q,
                          int rc, const xf__reply *r, int64_t now_ms);

/* Nobody answered (rc, the last failure; XF__FLEET_ASK: nobody was asked):
 * the code for the commands that waited, XF_OK when the map already held
 * routes them. */
int xf__fleet_ask_failed(xf__fleet *f, int rc);

/* ---- counting ---------------------------------------------------------------- */

/* How many nodes' connections are up. */
int xf__fleet_open_count(const xf__fleet *f);

#endif
