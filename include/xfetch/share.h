/* <xfetch/share.h>: the process-local share: single-flight, fallback cache, near cache.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_SHARE_H
#define XFETCH_SHARE_H

#include "base.h"
#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The process-local share (after curl's share interface): clients opened
 * with the same share have in common, while Redis cannot be used for a key,
 * one in-flight load per key (single-flight across threads: the others wait
 * for its outcome, up to policy.wait_ms) and a bounded fallback cache of the
 * values so loaded (each kept up to its ttl, least recently used evicted).
 * Its entries are keyed by where their values come from: the client's
 * servers (host:port list or Unix path), db and user, then the prefixed key;
 * clients of other servers, dbs or users never see them. A set or delete of
 * the key through a client of the share (xf_set, xf_delete, xf_pool_set,
 * xf_pool_delete, xf_async_set, xf_async_delete, xf_call_start_set/_delete,
 * and the write of a get-or-compute's loaded value) drops the share's copy,
 * acknowledged or not: the share never serves a value older than one written since.
 * Thread-safe. It must outlive every client opened with it. */
typedef struct xf_share_options {
  size_t max_entries; /* keys kept at most; 0 = 10000 */
  size_t max_bytes;   /* bytes of keys and values kept at most; 0 = 64 MiB */
  /* The near cache: bytes (keys, values and ~130 bytes of overhead per
   * entry) of values read from Redis kept in the process, so a hit on them
   * sends nothing; 0 = off (the default). Kept correct by Redis' CLIENT
   * TRACKING (RESP2: one invalidation connection per node, named
   * xfetch-invalidate, read by a thread of the share): a key written
   * elsewhere is dropped when its invalidation comes in (a read overtaken
   * by one is not kept); losing that connection, or any tracked data
   * connection, and FLUSHALL / FLUSHDB drop all of that node's entries at
   * once; this process's own sets and deletes drop them before they
   * return; a forked child starts empty. A near hit runs the XFetch draw
   * locally: an elected refresh, an expiry or a lease goes to Redis as
   * without it. Counted in stats.hits and stats.near_hits (the result event
   * is XF_EV_NEAR). Callers waiting for another caller's load of a key are
   * woken by its invalidation instead of polling (blocking, pool and
   * event-loop drivers; a sans-I/O driver through xf_call_wake_open). Needs
   * Redis 6+; entries come from the blocking, pool and event-loop drivers'
   * reads and from a sans-I/O driver's links (xf_link_*),
   * plain or TLS (the invalidation connections use the client's options.tls
   * and credentials; XF_EV_INVALIDATION reports what they say); evicts least
   * recently used per shard (the budget is split over 8 to 64 shards of
   * 256 KiB or more: an entry larger than a shard's part is never kept). */
  size_t near_cache_bytes;
} xf_share_options;

/* Creates a share in *out. opts NULL = defaults. XF_OK, XF_EINVAL or
 * XF_ENOMEM. */
XF_EXPORT int xf_share_open(xf_share **out, const xf_share_options *opts);

/* Closes the share (NULL-safe). Clients opened with it hold a reference: a
 * share closed before them (a garbage collector's order) is freed with the
 * last one's xf_client_close, and serves them until then. Its
 * refresh workers (background_refresh) stop taking refreshes; queued ones
 * are dropped (their leases expire), running ones are waited for up to
 * XF_REFRESH_DRAIN_MS, then abandoned (they finish their loader and drop its
 * result; their leases expire). */
XF_EXPORT void xf_share_close(xf_share *s);

/* How long closing a pool or share waits for running background refreshes. */
#define XF_REFRESH_DRAIN_MS 2000

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_SHARE_H */
