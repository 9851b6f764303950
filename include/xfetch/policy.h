/* <xfetch/policy.h>: the caching policy of a call, and the value it returns.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_POLICY_H
#define XFETCH_POLICY_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What xf_get_or_compute does when a miss waits for another caller's loader
 * longer than policy.wait_ms. */
typedef enum xf_on_wait_timeout {
  XF_WAIT_LOAD = 0, /* run the loader itself (default) */
  XF_WAIT_FAIL = 1  /* return XF_ETIMEDOUT */
} xf_on_wait_timeout;

/* policy.background_refresh. */
typedef enum xf_background {
  XF_BACKGROUND_AUTO = 0, /* the default: off the request path where the
                             driver can run it and the policy says how long
                             loader_ud lives (loader_ud_keep), else in the call */
  XF_BACKGROUND_ON = 1,   /* off the request path where the driver can run
                             it: loader and loader_ud outlive the call */
  XF_BACKGROUND_OFF = 2   /* in the call */
} xf_background;

/* policy.loader_ud_keep: called when an early refresh leaves the request
 * path, on the calling thread, before the call returns. Returns the
 * loader_ud the refresh's loader gets, valid until loader_ud_drop: loader_ud
 * itself with a reference taken, or a copy of it. NULL for a non-NULL
 * loader_ud: it cannot be kept (the refresh then runs in the call, or is
 * skipped: its lease released, the next due call refreshes). */
typedef void *(*xf_ud_keep_fn)(void *loader_ud);

/* policy.loader_ud_drop: called exactly once for each kept loader_ud, with
 * what loader_ud_keep returned, when its refresh is over: run, failed,
 * skipped, or abandoned (its client, pool, share or handle closed); on
 * whichever thread ends it. A refresh under way when the process forks
 * stays the parent's: the child never runs nor drops it. */
typedef void (*xf_ud_drop_fn)(void *kept_ud);

/* Caching policy for one call. Start from XF_POLICY_INIT and change fields.
 * Times are milliseconds. */
typedef struct xf_policy {
  int64_t ttl_ms;            /* logical lifetime of a computed value; > 0 */
  double beta;               /* XFetch eagerness (refresh_ahead < 0): 0 =
                                never early, 1 = the paper's optimum,
                                INFINITY = always recompute */
  int64_t lease_ms;          /* how long a loader may hold the key's lease; > 0.
                                The lease taken is twice the entry's delta
                                (its last loader's time) when that is longer,
                                so a slow loader keeps its protection once
                                its time is known */
  int64_t wait_ms;           /* how long a miss waits for another's loader */
  int64_t stale_ms;          /* after ttl, how long a value may still be served
                                while one caller refreshes it (0 = never) */
  int64_t stale_if_error_ms; /* past ttl, serve a stale value this long when the
                                loader fails (independent of stale_ms: the
                                entry stays ttl + the larger of the two) */
  int64_t negative_ttl_ms;   /* lifetime of a cached "not found"; 0 = do not
                                cache not-found (a value still cached for the
                                key is then removed: the loader said it is
                                gone) */
  double jitter;             /* 0..1: each write shortens ttl by up to this
                                fraction, at random, to spread mass expiry */
  xf_on_wait_timeout on_wait_timeout;
  /* Background refresh (xf_background): whether the caller that wins the
   * lease of an *early* refresh (a value still within its ttl) returns that
   * value at once while the loader runs off the request path, with the same
   * lease, write and newer-wins rules. Off the request path is where the
   * driver has somewhere to run it: a pool's share's refresh workers,
   * writing through a pooled client; a blocking client's (and the batch
   * driver's with a per-key loader, xf_get_or_compute_many)
   * options.refresh_executor, else its share's refresh workers, writing
   * through one of the share's refresh clients (opened like it, options
   * copied, kept idle for the next refresh); the event-loop driver's loop,
   * as a call of its own (no callback; xf_async_close cancels it). A
   * blocking client with neither a share nor a refresh_executor, and a
   * batch loader (xf_get_or_compute_many_batch), run it in the call,
   * whatever this says.
   * XF_BACKGROUND_AUTO (0, the default): off the request path when the
   * policy says how long loader_ud lives (loader_ud_keep and _drop below),
   * else in the call (the rate-aware rule still refreshes about once per
   * ttl): a loader_ud in the caller's frame must not be read after the call
   * returned. XF_BACKGROUND_ON: the caller's word that loader and loader_ud
   * stay valid until the share, pool or handle that runs the refresh is
   * closed (keep and drop are still called when given). The sans-I/O call
   * has no loader_ud: its driver runs the loader, and takes a refresh
   * (xf_call_take_refresh) only with XF_BACKGROUND_ON.
   * Off the request path, the loader may run on a worker thread, or on the
   * loop after the call's callback. A failed background refresh keeps the
   * cached value, releases the lease (the next due call retries), counts
   * load_errors (the pool's; a blocking client's in xf_share_refresh_stats'
   * clients) and emits LOAD_DONE with its code; it never reaches a caller.
   * When the queue is full, the refresh is skipped (lease released;
   * xf_refresh_info.skipped). Misses and expired values always load in the
   * call. */
  int background_refresh;
  /* When a fresh value is refreshed early. 0 (the default): the rate-aware
   * rule with factor XF_REFRESH_AHEAD_DEFAULT. > 0: the rate-aware rule with
   * this factor: the first call that finds remaining ttl <= refresh_ahead x
   * delta (the last loader's time; for a background refresh, with its wait
   * for a worker) refreshes; the lease makes it the only
   * one, so about one load per ttl at any request rate. < 0: XFetch: each
   * call draws (beta), which refreshes earlier the hotter the key. */
  double refresh_ahead;
  /* Tags: ntags NUL-terminated names (at most XF_MAX_TAGS, each 1 to 200
   * bytes), or NULL and 0. A get-or-compute or set reads each tag's version
   * (its own key, "<prefix>xf-tag:{<name>}") before anything else, records
   * them in the entry it writes, and serves an entry only while the versions
   * it records are the current ones: xf_invalidate_tags makes every entry
   * that carries a tag a miss, in O(1) (served stale at most, as
   * tags_never_stale below says). An entry is judged by the tags of the
   * call that reads it: give a key the same tags on every call. A tagged call
   * reads its tags' versions from Redis unless the client's near cache keeps
   * them: with the entry on standalone Redis (a hit is still one command), on
   * Redis Cluster with one more command per master that holds some of them;
   * with every version kept, its entry may be a near hit too (nothing sent). Needs entry format 2 (XF_EINVAL with
   * XF_ENTRY_HASH).
   * Copied by the call: valid only for its duration. */
  const char *const *tags;
  size_t ntags;
  /* How long a loader keeps the key's lease by renewing it while it runs:
   * past a third of its lease, the lease is renewed (with its token: only
   * while it is still this loader's) every third of the lease, until
   * max_load_ms after the load started; a loader that dies stops renewing,
   * so its key is free again within the lease. 0: 60 s; at most the lease
   * (e.g. 1): no renewal. Renewals go from another thread on a client
   * opened like the caller's (blocking, pool, batch, refresh workers), or
   * from the driver's loop (the sans-I/O call: xf_call_renew_at). */
  int64_t max_load_ms;
  /* Soft timeout: a caller that has a value to give (an early refresh's
   * current value, a stale value within stale_ms or stale_if_error_ms)
   * and whose load runs longer gets that value after soft_timeout_ms; the
   * load goes on off the request path and writes as usual. 0: none. */
  int64_t soft_timeout_ms;
  /* Hard timeout: no caller waits longer for a load (its own or another
   * caller's): it gets XF_ETIMEDOUT, or a stale value within
   * stale_if_error_ms; its own load goes on off the request path and is
   * cached. 0: none.
   *
   * The timeouts need somewhere for the load to go on: a driver that can
   * (the sans-I/O call, the Python faces) hands it over; see the C guide
   * for the drivers whose loader runs on the caller's thread. Setting
   * either timeout is the caller's word, as XF_BACKGROUND_ON is, that loader
   * and loader_ud stay valid until the share, pool or handle that runs the
   * load is closed. */
  int64_t hard_timeout_ms;
  /* Fail-safe across the fleet: after a failed load that served the entry's
   * value (stale_if_error_ms, or an early refresh's current value), the entry
   * carries a fail-safe mark for failsafe_throttle_ms (in its lease: clients
   * that know no mark see a live lease). Meanwhile every caller whose policy
   * sets it serves that value within stale_if_error_ms (XF_SOURCE_STALE,
   * XF_EV_FAILSAFE) instead of running its loader; then the next caller
   * loads. 0: none (the next caller retries at once). */
  int64_t failsafe_throttle_ms;
  /* How loader_ud outlives the call when an early refresh runs off the
   * request path (xf_ud_keep_fn, xf_ud_drop_fn): both or neither (NULL).
   * With both, the default XF_BACKGROUND_AUTO refreshes off the request
   * path. E.g. a reference count: keep increments it and returns loader_ud,
   * drop decrements it; or a copy: keep returns a malloc'd copy, drop frees
   * it. Not called for loads a soft or hard timeout moves off the call. */
  xf_ud_keep_fn loader_ud_keep;
  xf_ud_drop_fn loader_ud_drop;
  /* Compressed values: a value of at least compress_min_bytes is written
   * compressed with zstd when that makes it smaller (format 2 entries only).
   * Every client of this version reads compressed and plain values alike;
   * a client of the previous version judges a compressed entry malformed
   * (a miss, reloaded), so turn it on once the whole fleet reads it.
   * 0: off (the default). */
  size_t compress_min_bytes;
  /* An entry whose tag was invalidated (policy.tags, xf_invalidate_tags) is
   * never served as fresh again. 0 (the default): it counts as a value that
   * expired when the invalidation happened, so the stale rules above apply
   * from then on: within stale_ms it is served (XF_SOURCE_STALE) to the
   * callers that find another caller reloading it; within
   * stale_if_error_ms, when that load fails. 1: never served at all, not
   * even stale: the callers wait for the reload as on a miss. */
  int tags_never_stale;
} xf_policy;

/* clang-format off */
#define XF_POLICY_INIT                                                                     \
  { 60000, 1.0, 5000, 5000, 0, 0, 0, 0.0, XF_WAIT_LOAD, XF_BACKGROUND_AUTO, 0.0, NULL, 0,   \
    0, 0, 0, 0, NULL, NULL, 0, 0 }
/* clang-format on */

/* The most tags a call carries (its namespace's included). */
#define XF_MAX_TAGS 15
/* The longest tag name, in bytes. */
#define XF_MAX_TAG_LEN 200

/* policy.max_load_ms 0: how long a loader keeps renewing its lease. */
#define XF_MAX_LOAD_DEFAULT_MS 60000

/* The default refresh_ahead factor of the rate-aware rule. */
#define XF_REFRESH_AHEAD_DEFAULT 1.5

/* Where a returned value came from. */
typedef enum xf_source {
  XF_SOURCE_CACHE = 0,    /* a valid cached value */
  XF_SOURCE_LOADER = 1,   /* this call ran the loader and cached the result */
  XF_SOURCE_STALE = 2,    /* past its ttl, within stale_ms / stale_if_error_ms */
  XF_SOURCE_UNCACHED = 3, /* this call ran the loader but its value was not
                             cached: Redis unreachable or unable to write, or
                             the write was refused because a newer value or a
                             delete won (stats.superseded) */
  XF_SOURCE_LOCAL = 4     /* Redis could not be used, and the value came from
                             the client's xf_share: another thread's load of
                             the key, or one kept from such a load (for up to
                             its ttl) */
} xf_source;

/* A value returned to the caller. data is owned by the value (NUL-terminated
 * for convenience, binary-safe by len); release it with xf_value_free. */
typedef struct xf_value {
  char *data;
  size_t len;
  xf_source source;
} xf_value;

/* Frees v->data and zeroes *v. NULL-safe; safe to call twice. */
XF_EXPORT void xf_value_free(xf_value *v);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_POLICY_H */
