/* <xfetch/stats.h>: a client's counters.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_STATS_H
#define XFETCH_STATS_H

#include "base.h"
#include "client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters since the client was opened. */
typedef struct xf_stats {
  uint64_t hits;          /* valid value returned from the cache */
  uint64_t misses;        /* no usable value in the cache */
  uint64_t early;         /* XFetch elected an early recompute */
  uint64_t loads;         /* loader calls made by this client */
  uint64_t load_errors;   /* loader calls that failed */
  uint64_t lease_lost;    /* another caller held the lease */
  uint64_t waits;         /* calls that waited for another caller's loader */
  uint64_t stale;         /* stale values served */
  uint64_t uncached;      /* values returned without caching (fail open) */
  uint64_t redis_errors;  /* Redis errors (replies, I/O, connect) */
  uint64_t superseded;    /* writes refused because a newer value or a delete
                             won (the value was returned uncached) */
  uint64_t local;         /* calls the share answered instead of the loader:
                             another thread's load of the key (its value, its
                             not-found or its failure) or a value kept from
                             one (XF_SOURCE_LOCAL); not counted in loads */
  uint64_t redirects;     /* Cluster MOVED and ASK redirections followed */
  uint64_t map_refreshes; /* Cluster slot maps loaded (CLUSTER SLOTS) */
  uint64_t connections;   /* connections open now (one per node in a cluster;
                             a gauge, not a counter) */
  uint64_t malformed;     /* entries read that xfetch did not write as they
                             are (a field out of range or not a number):
                             each is a miss, recomputed and overwritten */
  uint64_t bypassed;      /* calls made while disabled (xf_client_set_enabled) */
  /* hits served from the share's near cache without Redis (also in hits) */
  uint64_t near_hits;
  /* near cache entries this client's reads evicted to stay within
   * near_cache_bytes */
  uint64_t near_evictions;
  /* write fences (options.write_fence) whose PING failed after an
   * acknowledged write: the call succeeded, the fleet's near caches may be
   * told of the write later than it returned */
  uint64_t fence_failed;
  /* entries read that a tagged call refused as fresh (also in misses): a
   * tag they carry was invalidated since they were loaded (policy.tags;
   * served stale at most, as policy.tags_never_stale says) */
  uint64_t tag_invalidated;
  /* stale values served under the fleet-wide fail-safe (also in stale): a
   * load of the key failed lately (policy.failsafe_throttle_ms), so its last
   * good value was served without running the loader (XF_EV_FAILSAFE) */
  uint64_t failsafe;
  /* loads answered "unchanged" (xf_sink_unchanged) whose entry was extended
   * without rewriting its value (XF_EV_REVALIDATED; also in loads) */
  uint64_t revalidated;
} xf_stats;

/* Copies the client's counters into *out. */
XF_EXPORT void xf_client_stats(const xf_client *c, xf_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_STATS_H */
