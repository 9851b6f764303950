/* The client handle: its options, identity, routing state and counters.
 * What the transports keep of it (seeds, node connections) is opaque here;
 * sending commands, the clock and fork detection are in client_io.h. */
#ifndef XF_CLIENT_H
#define XF_CLIENT_H

#include <stdarg.h>
#include <stdint.h>

#include "pcg.h"
#include "ports.h"
#include "resp.h"
#include "route.h"
#include "xfetch.h"

/* The transports' state, behind pointers: the core never looks inside. */
struct xf__conn;
struct xf__router;
struct xf__tls;

struct xf_client {
  struct xf__conn *seeds; /* the servers options.host lists (most often one) */
  int nseeds;
  int server;                /* standalone: the seed in use */
  int cluster;               /* the xf_cluster_mode asked for */
  int mode_known;            /* standalone or cluster is decided (blocking drivers) */
  xf__routes routes;         /* mode, map, nodes: every driver's routing decisions */
  struct xf__router *router; /* the blocking drivers' node connections; NULL standalone */
  struct xf__tls *tls;       /* options.tls made ready (tls.h); NULL = plain TCP */
  int read_from_replicas;
  char *host, *unix_path, *username, *password; /* host, port: the first seed */
  int port, db, connect_timeout_ms, command_timeout_ms, breaker_ms;
  int64_t tombstone_ms;
  xf_share *share;                   /* borrowed; NULL = none */
  xf_options *opened_with;           /* a copy of the options (xf__options_dup): a
                                        background refresh opens a client like it */
  struct xf__near *near;             /* the share's near cache (near.h); NULL = none */
  xf__ports ports;                   /* what the flow calls of the near cache, the
                                        share and the loads in progress (ports.h) */
  int near_wake_fd;                  /* > 0: the write end of an event loop's wake pipe
                                        (xf_call_wake_open): its waits end on a write */
  uint64_t near_elect_hash;          /* near_elect: a near hit's draw elected an early */
  size_t near_elect_len;             /* refresh of the key of this hash and length that */
  int near_elect;                    /* the next call takes up (xf__flow_near_elect) */
  int64_t near_elect_expiry_ms;      /* near_elect: the entry drawn on (its Redis */
  int64_t near_elect_delta_us;       /* expiry and delta) */
  struct xf__near_batch *near_batch; /* a batch's near hits, checked together
                                        (near_impl.h); NULL = none */
  char *ns; /* where values come from: the servers (or unix path), db
               and user, NUL-separated (share slots, nested loads) */
  size_t ns_len;
  xf_interrupt_fn interrupt; /* options.interrupt: checked during waits */
  void *interrupt_ud;
  int grace_ms; /* > 0 while a driver sends the release of a call the interrupt
                   ended: interrupt not asked, connect and each reply bounded
                   by it (conn.c); set and cleared around that one send */
  size_t max_key_len, max_value_len;
  char *prefix;
  size_t prefix_len;
  xf__buf request;               /* the RESP encoding of the command being sent */
  unsigned long fork_generation; /* of the process that owns the connections */
  xf__pcg32 rng;
  uint64_t id;          /* random client id: lease tokens are unique fleet-wide */
  uint64_t lease_count; /* leases taken, the token's suffix */
  int plain_hits;       /* a read is HMGET, its time from the connection's clock
                           estimate (clock.h), the read script in its place where
                           that estimate is not fresh (xf__entry_read_as, by the
                           transport); 0: always the read script (a transport
                           that keeps no estimate: the sans-I/O call's) */
  int entry_format;     /* 1 a hash, 2 a string (options.entry_format): what the
                           writes create, and the hit path's first read */
  int write_fence;      /* 1: a write that changes an entry is followed by a PING
                           before it returns (options.write_fence, resolved) */
  int loader_rc;
  xf_event_fn on_event; /* options.on_event (event.h); NULL = none */
  void *on_event_ud;
  int disabled;     /* the bypass switch (xf_client_set_enabled) */
  xf_driver driver; /* whose calls these are, for events: blocking unless a
                       pool or event-loop handle owns the client */
  xf_stats stats;
  char errstr[256];
  char conn_err[256]; /* the event-loop driver's: why its connection dropped */
};

/* Records a message on the client and returns rc (so `return fail(...)`). */
int xf__fail(xf_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
