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
#include <string.h>

#include "xfetch.h"

struct xf__track_node;

/* What a data connection's tracking is redirected to: its node and the
 * generation of that node's invalidation connection it was armed under.
 * node NULL = not tracked (the read is never kept). */
typedef struct xf__track {
  struct xf__track_node *node;
  uint64_t gen;
  int fd; /* the data connection's descriptor, watched for its loss */
} xf__track;

/* The tags' versions (flow_tags.c) are kept as near entries of their own
 * keys, "<prefix>xf-tag:{<name>}" and "<prefix>xf-ns". The near cache
 * counts every invalidation or drop of such a key in its tag epoch: an
 * entry whose tag record was found current under the versions kept at
 * epoch E (its stamp) is current while the epoch is still E, so a warm
 * tagged hit needs no lookup of its versions. A stamp is only made when
 * every version is tracked on the entry's node, so a drop of that node
 * (a flush, a lost connection) takes the entry with it. */
#define XF__TAG_OPEN "xf-tag:{"
#define XF__NS_TAG "xf-ns"

/* Whether key (a Redis key) may be a tag's: a user key that looks like one
 * only costs its stamps. */
static inline int xf__is_tag_key(const char *key, size_t keylen) {
  for (size_t i = 0; i + 5 <= keylen; i++)
    if (key[i] == 'x' && key[i + 1] == 'f' && key[i + 2] == '-' &&
        (memcmp(key + i + 3, "ns", 2) == 0 ||
         (i + 8 <= keylen && memcmp(key + i + 3, "tag:{", 5) == 0)))
      return 1;
  return 0;
}

/* What an entry's stamp says (xf__port_near.stamp): its tag record matched
 * the versions kept when the tag epoch was `epoch`, for the tags whose names
 * hash to `names` (never 0), until driver ms until_ms (the versions' own
 * life); the versions were read over the connections of fds (those other
 * than the entry's own: a hit polls them for their loss as it polls the
 * entry's), all tracked under the entry's node. */
#define XF__STAMP_FDS 2
typedef struct xf__tag_stamp {
  uint64_t epoch, names;
  int64_t until_ms;
  const struct xf__track_node *node;
  int fds[XF_MAX_TAGS];
  size_t nfds;
} xf__tag_stamp;

#endif
