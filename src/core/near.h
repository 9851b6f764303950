/* The near cache (xf_share_options.near_cache_bytes): entries read from
 * Redis kept in the process, each with its value, delta, expiry and negative
 * flag, kept correct by Redis' server-assisted invalidation (CLIENT TRACKING,
 * RESP2: REDIRECT to one invalidation connection per node, subscribed to
 * __redis__:invalidate). The cache is src/near/near.c (sharded, bounded
 * by bytes, LRU per shard); the nodes, their invalidation connections and
 * the thread that reads them are src/near/near_track.c. The flow only
 * asks and tells through its port (ports.h; no lock, socket or clock here):
 *
 *   - before a read is sent it takes a token (near->token): the pending
 *     marker. The read's value is kept (near->put) only if no
 *     invalidation of its key, and no drop of its node, came since, and
 *     only if the connection that answered was tracked (xf__track, filled
 *     in by the transport through cmd.track_out) under its node's current
 *     invalidation connection;
 *   - a get-or-compute or get first asks the near cache (near->get);
 *   - an own set or delete drops the key (near->drop) before it returns.
 *
 * Times are the driver's monotonic ms: an entry is kept until the local time
 * its Redis entry's logical expiry is sure not to have passed (the read's
 * send time plus its remaining life, less the clock drift allowance). */
#ifndef XF_NEAR_H
#define XF_NEAR_H

#include <stddef.h>
#include <stdint.h>

#include "xfetch.h"

struct xf__near_node;

/* What a data connection's tracking is redirected to: its node and the
 * generation of that node's invalidation connection it was armed under.
 * node NULL = not tracked (the read is never kept). */
typedef struct xf__track {
  struct xf__near_node *node;
  uint64_t gen;
  int fd; /* the data connection's descriptor, watched for its loss */
} xf__track;

#endif
