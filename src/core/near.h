/* The near cache (xf_share_options.near_cache_bytes): entries read from
 * Redis kept in the process, each with its value, delta, expiry and negative
 * flag, kept correct by Redis' server-assisted invalidation (CLIENT TRACKING,
 * RESP2: REDIRECT to one invalidation connection per node, subscribed to
 * __redis__:invalidate). The cache is src/near/near.c (sharded, bounded
 * by bytes, LRU per shard); the nodes, their invalidation connections and
 * the thread that reads them are src/near/near_track.c. The flow only
 * asks and tells through these functions (no lock, socket or clock here):
 *
 *   - before a read is sent it takes a token (xf__near_token): the pending
 *     marker. The read's value is kept (xf__near_put) only if no
 *     invalidation of its key, and no drop of its node, came since, and
 *     only if the connection that answered was tracked (xf__track, filled
 *     in by the transport through cmd.track_out) under its node's current
 *     invalidation connection;
 *   - a get-or-compute or get first asks the near cache (xf__near_get);
 *   - an own set or delete drops the key (xf__near_drop) before it returns.
 *
 * Times are the driver's monotonic ms: an entry is kept until the local time
 * its Redis entry's logical expiry is sure not to have passed (the read's
 * send time plus its remaining life, less the clock drift allowance). */
#ifndef XF_NEAR_H
#define XF_NEAR_H

#include <stddef.h>
#include <stdint.h>

#include "xfetch.h"

struct xf__near;
struct xf__near_node;
struct xf_client;

/* What a data connection's tracking is redirected to: its node and the
 * generation of that node's invalidation connection it was armed under.
 * node NULL = not tracked (the read is never kept). */
typedef struct xf__track {
  struct xf__near_node *node;
  uint64_t gen;
  int fd; /* the data connection's descriptor, watched for its loss */
} xf__track;

/* A near hit's copy of the entry. */
typedef struct xf__near_hit {
  char *data; /* malloc'd, NUL-terminated; the caller's */
  size_t len;
  int64_t delta_us;
  int64_t remaining_ms;    /* > 0 */
  int64_t redis_expiry_ms; /* the Redis entry's logical expiry (server ms): with
                              delta_us, which entry this is a copy of */
  int negative;
} xf__near_hit;

/* The hash the near cache files key under (FNV-1a, folded). */
uint64_t xf__near_key_hash(const char *key, size_t len);

/* The pending marker of a read about to be sent. */
uint64_t xf__near_token(struct xf__near *n);

/* The entry of c's namespace and key, when kept and within its life at
 * now_ms: 1 with *hit filled (hit->data the caller's), 0 else (or out of
 * memory). */
int xf__near_get(struct xf__near *n, const struct xf_client *c, const char *key,
                 size_t keylen, int64_t now_ms, xf__near_hit *hit);

/* Keeps what a read sent with token saw (the Redis entry expiring at server
 * ms redis_expiry_ms), over the connection of t, until driver ms
 * expires_ms: unless the key was invalidated or t's node dropped
 * since token, or t is not tracked under its node's current invalidation
 * connection. Returns the entries evicted to make room. */
uint64_t xf__near_put(struct xf__near *n, const struct xf_client *c, const xf__track *t,
                      uint64_t token, const char *key, size_t keylen, const char *value,
                      size_t len, int64_t delta_us, int64_t redis_expiry_ms,
                      int64_t expires_ms, int negative);

/* An own write or delete of key (acknowledged or not): its entries go now,
 * and a read of it in flight is not kept. */
void xf__near_drop(struct xf__near *n, const char *key, size_t keylen);

/* XF_EV_INVALIDATION: reports through c's hook (c->on_event set) what the
 * near cache was told since the last report by any client of the share
 * (drivers/near_events.c). On the calling thread, no lock held. */
void xf__near_report(struct xf__near *n, const struct xf_client *c, xf_driver driver);

#endif
