/* What a flow runs with, apart from its call: the configuration (what
 * xf_options said, resolved when a client is opened; the flow only reads it)
 * and the runtime state of the driver it runs on (its counters, its last
 * message, its random stream, its lease counter, its ports). A client holds
 * one of each (client.h: c->cfg, c->rt, whose fields it also names directly:
 * c->stats is c->rt.stats); a test of the flow builds them with no client
 * (xf__config_init, xf__runtime_init). */
#ifndef XF_FLOW_ENV_H
#define XF_FLOW_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "pcg.h"
#include "ports.h"
#include "xfetch.h"

/* With wake-on-write (a near cache), a wait's fallback poll: a write wakes
 * the waiter, a lost connection too (its node's drop); the poll only bounds
 * how late a lease that expired without a write (its holder died) is seen. */
#define XF__WAKE_POLL_MS 200

/* The fields of each, listed once: client.h lays them out the same way in
 * a union with the named struct, so the client's own names and the flow's
 * pointer reach the same bytes (a common initial sequence). */
#define XF__CONFIG_FIELDS                                                                  \
  char *prefix; /* options.key_prefix, prepended to every key */                           \
  size_t prefix_len;                                                                       \
  size_t max_key_len, max_value_len;                                                       \
  char *ns; /* where values come from: the servers (or unix path), db and user,            \
               NUL-separated (share slots, nested loads) */                                \
  size_t ns_len;                                                                           \
  uint64_t id;       /* random client id: lease tokens are unique fleet-wide */            \
  int entry_format;  /* 1 a hash, 2 a string (options.entry_format): what the writes       \
                        create, and the hit path's first read */                           \
  int write_fence;   /* 1: a write that changes an entry is followed by a PING before      \
                        it returns (options.write_fence, resolved) */                      \
  int namespace_tag; /* every entry carries the prefix's tag (options.namespace_tag) */    \
  int tag_wait_ms;   /* the WAIT after a tag's raise where its master has a replica:       \
                        its timeout (half the command timeout: flow_tag_raise.c) */        \
  int wake_poll_ms;  /* with wake-on-write (a near cache), a wait's fallback poll: a       \
                        write or a lost connection ends the wait sooner (200 ms; a test    \
                        raises it to tell a wake from a poll) */                           \
  int64_t tombstone_ms;                                                                    \
  int read_from_replicas;                                                                  \
  xf_event_fn on_event; /* options.on_event (event.h); NULL = none */                      \
  void *on_event_ud;                                                                       \
  xf_interrupt_fn interrupt; /* options.interrupt: checked during waits */                 \
  void *interrupt_ud;

#define XF__RUNTIME_FIELDS                                                                 \
  xf_stats stats;                                                                          \
  char errstr[256];                                                                        \
  xf__pcg32 rng;                                                                           \
  uint64_t lease_count; /* leases taken, the token's suffix */                             \
  int loader_rc;                                                                           \
  int disabled;     /* the bypass switch (xf_client_set_enabled) */                        \
  xf_driver driver; /* whose calls these are, for events: blocking unless a pool or        \
                       event-loop handle owns the client */                                \
  int plain_hits;   /* a read is HMGET, its time from the connection's clock estimate      \
                       (clock.h), the read script in its place where that estimate is      \
                       not fresh (xf__entry_read_as, by the transport); 0: always the      \
                       read script (a transport that keeps no estimate: the sans-I/O       \
                       call's) */                                                          \
  int one_node;     /* every key on one server (standalone): a command may read any        \
                       keys together (a tagged read its tags': flow_tags.c) */             \
  const struct xf__cluster_map *slot_map; /* the router's (route.c), read on the           \
                       driver's thread: which master a tag's key is on (flow_tags.c);      \
                       NULL: unknown */                                                    \
  int near_wake_fd;             /* > 0: the write end of an event loop's wake pipe         \
                                   (xf_call_wake_open): its waits end on a write */        \
  int link_wakes;               /* links with a wake pipe (xf_link_open): their parked     \
                                   calls' waits end on a write */                          \
  uint64_t near_elect_hash;     /* near_elect: a near hit's draw elected an early */       \
  size_t near_elect_len;        /* refresh of the key of this hash and length that */      \
  int near_elect;               /* the next call takes up (xf__flow_near_elect) */         \
  int64_t near_elect_expiry_ms; /* near_elect: the entry drawn on (its Redis */            \
  int64_t near_elect_delta_us;  /* expiry and delta) */                                    \
  xf__ports ports; /* what the flow calls of the near cache, the share and the loads in    \
                      progress (ports.h) */                                                \
  void *dctx;      /* the zstd decompression context of its decodes (codec.c), or NULL */

typedef struct xf__config {
  XF__CONFIG_FIELDS
} xf__config;

typedef struct xf__runtime {
  XF__RUNTIME_FIELDS
} xf__runtime;

/* A configuration with the defaults xf_client_open gives (no prefix, the
 * default limits, format 2, no fence, no hook), ns "" and id 1. */
void xf__config_init(xf__config *cfg);

/* A runtime with zeroed counters, the random stream seeded with seed, no
 * ports (no near cache, no share, no nesting check), plain_hits 0 (every
 * read the read script) and driver blocking. */
void xf__runtime_init(xf__runtime *rt, uint64_t seed);

/* Records a message on rt and returns rc (so `return xf__rt_fail(...)`). */
int xf__rt_fail(xf__runtime *rt, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
