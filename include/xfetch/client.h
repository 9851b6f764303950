/* <xfetch/client.h>: the blocking client: open, the loader and its sink, get-or-compute,
 * get, set, delete.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_CLIENT_H
#define XFETCH_CLIENT_H

#include "base.h"
#include "options.h"
#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque client: one Redis connection plus its PCG32 generator and counters. */
typedef struct xf_client xf_client;

/* Connects (unless opts->lazy_connect) and returns a client in *out. opts
 * NULL means all defaults. On error *out is NULL: there is nothing to close,
 * and xf_errmsg(NULL), on the thread that called, says why ("connect to
 * 127.0.0.1:6379: Connection refused", "cannot resolve cache.local: Name or
 * service not known", "options.port is not in 0..65535"). Codes: XF_ECONNECT
 * (no server reached), XF_ETLS, XF_EAUTH (a password refused, or none given
 * to a server that needs one), XF_EINVAL (an option out of range, a host list
 * or TLS file that cannot be used, out NULL), XF_ENOMEM.
 *
 *   xf_client *c;
 *   int rc = xf_client_open(&c, &opts);
 *   if (rc != XF_OK)
 *     fprintf(stderr, "xfetch: %s: %s\n", xf_strerror(rc), xf_errmsg(c));
 */
XF_EXPORT int xf_client_open(xf_client **out, const xf_options *opts);

/* The bypass switch: with enabled 0, every call of the client (any driver
 * using it) sends nothing to Redis: get-or-compute runs the loader and
 * returns its value (source XF_SOURCE_UNCACHED; stats.bypassed counts them,
 * no event but LOAD_START / LOAD_DONE), xf_get returns XF_ENOTFOUND, xf_set
 * and xf_delete return XF_OK having done nothing. Enabled 1 (the default)
 * caches again. A call reads the switch when it starts. Not thread-safe
 * against the client's own calls (a client is one thread's). Pools take
 * options.disabled for their clients; an event-loop handle also has
 * xf_async_set_enabled. */
XF_EXPORT void xf_client_set_enabled(xf_client *c, int enabled);

/* Closes the connection and frees the client. NULL-safe. */
XF_EXPORT void xf_client_close(xf_client *c);

/* The detail of the last error on this client ("" if none). The string is
 * owned by the client and valid until its next call. c NULL: why the calling
 * thread's last xf_client_open failed (valid until its next
 * xf_client_open), or "client is NULL" when it made none or its last one
 * succeeded. */
XF_EXPORT const char *xf_errmsg(const xf_client *c);

/* The non-zero code the loader returned when a call failed with XF_ELOADER
 * (0 otherwise). */
XF_EXPORT int xf_loader_error(const xf_client *c);

/* Whether c's last xf_get_or_compute returned while its loader still ran
 * (policy.soft_timeout_ms or hard_timeout_ms, on a client with a share): the
 * loader and its loader_ud are then in use, on a worker of the share, until
 * the loader returns. 0 otherwise, and for c NULL. */
XF_EXPORT int xf_load_moved(const xf_client *c);

/* Where a loader puts its result. */
typedef struct xf_sink xf_sink;

/* Hands the loader's bytes to xfetch (copied). Returns XF_OK, XF_EINVAL
 * (data NULL with len > 0, or len above max_value_len) or XF_ENOMEM. The last
 * call wins. */
XF_EXPORT int xf_sink_set(xf_sink *sink, const void *data, size_t len);

/* Marks the result "not found": cached for policy.negative_ttl_ms (when > 0)
 * and reported to the caller as XF_ENOTFOUND. */
XF_EXPORT void xf_sink_not_found(xf_sink *sink);

/* Sets the logical lifetime of the value this loader hands over, instead of
 * policy.ttl_ms (policy.jitter still applies; stale windows unchanged), for a
 * ttl that depends on the result. 0 = do not cache it: the caller gets the
 * value (XF_SOURCE_UNCACHED), nothing is written and the lease is released
 * (the entry keeps what it held). While Redis cannot be used, the client's
 * xf_share keeps the value for this ttl too (0: not kept). Call it from the
 * loader, before or after xf_sink_set; a not-found keeps
 * policy.negative_ttl_ms. Returns XF_OK or XF_EINVAL (sink NULL, ttl_ms
 * outside [0, 2^40]). */
XF_EXPORT int xf_sink_ttl(xf_sink *sink, int64_t ttl_ms);

/* Conditional refresh. When the loader refreshes a value the cache holds (an
 * early or background refresh, or a value past its ttl that Redis still
 * keeps), the sink holds that value: xf_sink_previous gives it (*data, *len:
 * valid until the loader returns) and its age (*age_ms: ms since the load
 * that wrote it, or since its last revalidation, started; -1 when unknown),
 * and returns 1; 0 when there is none (a miss: *data NULL). Any out pointer
 * may be NULL. */
XF_EXPORT int xf_sink_previous(const xf_sink *sink, const void **data, size_t *len,
                               int64_t *age_ms);

/* The loader's answer "the value at the source is the previous one": the
 * entry keeps its value (not rewritten) and its delta, its life is extended
 * as a write's would be (policy.ttl_ms, or xf_sink_ttl's), and the caller
 * gets the value. A write or delete of the key since it was read wins: the
 * value is then returned uncached. Returns XF_OK, or XF_EINVAL when the
 * sink holds no previous value (xf_sink_previous returned 0). A later
 * xf_sink_set or xf_sink_not_found replaces the answer, as the last call
 * wins. */
XF_EXPORT int xf_sink_unchanged(xf_sink *sink);

/* Stores an opaque validator (e.g. the source's ETag or version, 1 to
 * XF_MAX_VALIDATOR bytes, copied; len 0: none) with the value the loader
 * hands over; a later refresh's loader gets it back with the previous value
 * (xf_sink_previous_validator) to ask its source whether the value changed.
 * Kept by entries of format 2 (options.entry_format, the default); format-1
 * entries keep none. Returns XF_OK or XF_EINVAL (sink NULL, data NULL with
 * len > 0, len above XF_MAX_VALIDATOR). */
#define XF_MAX_VALIDATOR 255
XF_EXPORT int xf_sink_validator(xf_sink *sink, const void *data, size_t len);

/* The validator stored with the previous value (xf_sink_previous): 1 with
 * *data and *len (valid until the loader returns), 0 when there is none. */
XF_EXPORT int xf_sink_previous_validator(const xf_sink *sink, const void **data,
                                         size_t *len);

/* The loader: computes the value for key and hands it to sink. Returns 0 on
 * success; any other value is a failure, nothing is cached and the code is
 * kept (xf_loader_error). */
typedef int (*xf_loader_fn)(void *ud, const char *key, size_t keylen, xf_sink *sink);

/* Returns the value of key, computing it with loader when it is missing,
 * expired, or (XFetch) elected for early recomputation. Across every client
 * of the same Redis, one caller at a time runs the loader for a key.
 * On XF_OK, *out holds the value (free it with xf_value_free); on error *out
 * is zeroed. XF_ENOTFOUND when the loader (or a cached negative entry) said
 * not found. When Redis is unreachable the loader is called and its value
 * returned with source XF_SOURCE_UNCACHED (fail open); a server that refuses
 * the client's password, or needs one it was not given, is XF_EAUTH, the
 * loader not called (as for every call of every driver). A call made from
 * inside a loader, on its thread, for the very key that loader computes
 * (through any client or pool of the same servers, db and user; batch and
 * event-loop calls too) returns XF_EINVAL at once, its loader not called,
 * xf_errmsg "the loader for key K asked for K itself (a recursion...)": it
 * would otherwise wait on its own lease for wait_ms, then load again. */
XF_EXPORT int xf_get_or_compute(xf_client *c, const char *key, size_t keylen,
                                const xf_policy *policy, xf_loader_fn loader,
                                void *loader_ud, xf_value *out);

/* Reads key's value without computing anything: XF_OK with a copy in *out
 * (source XF_SOURCE_CACHE; free with xf_value_free) while the value is
 * within its ttl; XF_ENOTFOUND when the entry is absent, past its ttl (a
 * stale value is not returned) or a cached not-found. Takes no lease, never
 * waits. One round trip (the same read as a hit's); on a client with
 * options.namespace_tag the namespace's version is read too (with the entry on
 * standalone Redis, by one more command first on Redis Cluster, not at all
 * while the near cache keeps it), and an entry written before xf_clear_namespace is
 * XF_ENOTFOUND. An entry not as xfetch writes it (stats.malformed) is
 * XF_ENOTFOUND. Errors: XF_EINVAL, XF_ECONNECT, XF_EIO, XF_EAUTH,
 * XF_EUNAVAILABLE (BUSY, LOADING...: to the read or its SCRIPT LOAD),
 * XF_EREDIS, XF_EWRONGTYPE, ... (no fail-open: there is no loader). */
XF_EXPORT int xf_get(xf_client *c, const char *key, size_t keylen, xf_value *out);

/* Writes a value for key as if a loader had produced it now (warm-up, or
 * write-through). The entry keeps the delta it learned from its last loader
 * run (0 for a new entry, which is then never refreshed early in its first
 * lifetime). A value being computed concurrently will not overwrite it, even
 * one whose computation started in the same millisecond: the write ends the
 * key's lease, and its holder's write is refused. Returns XF_ESUPERSEDED, writing nothing, when the entry
 * holds a value dated later than now (e.g. after the server's clock stepped
 * back); XF_EUNAVAILABLE when Redis cannot run it now (BUSY, LOADING, ...:
 * answered to the write or to its SCRIPT LOAD). */
XF_EXPORT int xf_set(xf_client *c, const char *key, size_t keylen, const void *data,
                     size_t len, const xf_policy *policy);

/* Checks that Redis answers (PING), connecting first if needed: a readiness
 * probe, or the way to surface a lazy_connect client's connection error.
 * Returns XF_OK, or XF_ECONNECT / XF_EAUTH / XF_EIO / XF_EREDIS with the detail
 * on the client. */
XF_EXPORT int xf_ping(xf_client *c);

/* Removes key's entry (value and lease). Returns XF_OK whether or not it
 * existed. A delete wins over every computation that started before it: a
 * tombstone (a hash holding only `s`, for options.tombstone_ms) refuses their
 * writes, so "update the database, then delete the cache entry" never leaves
 * the old value cached. XF_EUNAVAILABLE as for xf_set. */
XF_EXPORT int xf_delete(xf_client *c, const char *key, size_t keylen);

/* Invalidates ntags tags (policy.tags' names; at most XF_MAX_TAGS): one
 * write of each tag's own key (a version, raised), whatever the number of
 * entries that carry it, never a scan, each followed by a PING on its
 * connection (the write fence, always: near caches keep versions). On Redis
 * Cluster, where the client's slot map gives the tag's master a replica, the
 * PING is WAIT 1 with half options.command_timeout_ms as its timeout: the
 * call goes on once a replica has the raise, so a failover after it returned
 * does not lose it. Once it returns XF_OK, no tagged call of any client
 * serves an entry loaded before it as fresh: each is a miss, loaded once per
 * key again (stats.tag_invalidated). Returns XF_OK, XF_EINVAL (a bad name),
 * XF_ENOTREPLICATED (a tag was raised on its master, but no replica
 * acknowledged it within that timeout: a failover could lose it; the tags
 * after it were not raised), or Redis' error (XF_EIO, XF_ECONNECT,
 * XF_EUNAVAILABLE...). After an error some of the tags may be invalidated,
 * and the call should be made again (raising a tag twice costs one more miss
 * per entry, nothing else). */
XF_EXPORT int xf_invalidate_tags(xf_client *c, const char *const *tags, size_t ntags);

/* Invalidates every entry of the client's namespace (its key_prefix) in
 * O(1): the tag all of them carry when the clients of the prefix set
 * options.namespace_tag (XF_EINVAL on a client without it). Results as
 * xf_invalidate_tags. */
XF_EXPORT int xf_clear_namespace(xf_client *c);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_CLIENT_H */
