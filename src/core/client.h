/* The client handle: its options, identity, routing state and counters.
 * What the transports keep of it (seeds, node connections) is opaque here;
 * sending commands, the clock and fork detection are in client_io.h. */
#ifndef XF_CLIENT_H
#define XF_CLIENT_H

#include <stdarg.h>
#include <stdint.h>

#include "flow_env.h"
#include "pcg.h"
#include "resp.h"
#include "route.h"
#include "xfetch.h"

/* The transports' state, behind pointers: the core never looks inside. */
struct xf__conn;
struct xf__fleet;
struct xf__tls;

struct xf_client {
  struct xf__conn *seeds; /* the servers options.host lists (most often one) */
  int nseeds;
  int cluster;             /* the xf_cluster_mode asked for */
  int mode_known;          /* standalone or cluster is decided (blocking drivers) */
  xf__routes routes;       /* mode, map, nodes: every driver's routing decisions */
  struct xf__fleet *fleet; /* where the blocking drivers' commands go (the seed in
                              use, a cluster's nodes' connections) */
  struct xf__tls *tls;     /* options.tls made ready (tls.h); NULL = plain TCP */
  char *host, *unix_path, *username, *password; /* host, port: the first seed */
  int port, db, connect_timeout_ms, command_timeout_ms, breaker_ms;
  xf_share *share;                     /* borrowed; NULL = none */
  xf_options *opened_with;             /* a copy of the options (xf__options_dup): a
                                          background refresh opens a client like it */
  struct xf__ncache *near;             /* the share's near cache (near.h); NULL = none */
  struct xf__ncache_batch *near_batch; /* a batch's near hits, checked together
                                        (near_impl.h); NULL = none */
  int grace_ms;    /* > 0 while a driver sends the release of a call the interrupt
                      ended: interrupt not asked, connect and each reply bounded
                      by it (conn.c); set and cleared around that one send */
  xf__buf request; /* the RESP encoding of the command being sent */
  unsigned long fork_generation; /* of the process that owns the connections */
  char conn_err[256];            /* the event-loop driver's: why its connection dropped */
  uint64_t streams;              /* streams its links started: each one's number (link.h) */
  int load_moved;                /* the last get-or-compute timed out with its loader still
                                    running on a worker (blocking_timeout.c, bindings.h) */
  union { /* what the flow reads (flow_env.h): c->prefix is c->cfg.prefix */
    xf__config cfg;
    struct {
      XF__CONFIG_FIELDS
    };
  };
  union { /* what the flow changes (flow_env.h): c->stats is c->rt.stats */
    xf__runtime rt;
    struct {
      XF__RUNTIME_FIELDS
    };
  };
};

/* Records a message on the client and returns rc (so `return fail(...)`). */
int xf__fail(xf_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
