/* <xfetch/pool.h>: the pool driver: get-or-compute, get, set, delete and batches for
 * threaded services.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_POOL_H
#define XFETCH_POOL_H

#include "base.h"
#include "batch.h"
#include "client.h"
#include "options.h"
#include "policy.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The pool driver -------------------------------------------------------
 *
 * xf_pool is get-or-compute, get, set, delete and batches for threaded
 * services: any number of threads share at most max_connections clients (Redis
 * connections; in a cluster, that many clients each with its connections to
 * the nodes). A call holds a client only while it talks to Redis, never while
 * its loader runs or it waits, so a loader may call the pool again even with
 * max_connections 1 (a batch is the exception: see
 * xf_pool_get_or_compute_many).
 * The pool owns a process-local share (xf_share: one load per key across the
 * threads while Redis cannot be used) unless opts->share is given. Open it in
 * the process that uses it: after fork(), a child opens its own pool. */
typedef struct xf_pool xf_pool;

/* Opens a pool in *out with one client (not connected: clients connect on
 * first use, as with lazy_connect); more are made on demand up to
 * max_connections (1..4096). opts is copied (NULL = defaults). A call that
 * finds every client busy waits up to checkout_timeout_ms (0 = 1000) for one,
 * then returns XF_EBUSY without calling the loader. Returns XF_OK,
 * XF_EINVAL or XF_ENOMEM. Thread-safe once open. */
XF_EXPORT int xf_pool_open(xf_pool **out, const xf_options *opts, size_t max_connections,
                           int checkout_timeout_ms);

/* xf_get_or_compute through the pool: same arguments, result and contract,
 * plus XF_EBUSY when no client came free in time, and XF_ENOMEM when the
 * pool had room for a new client but could not make it (the pool is then
 * unchanged; the loader is not called). A NULL or empty key or a
 * NULL policy, out or loader is XF_EINVAL at once, without waiting for a
 * client. Thread-safe. */
XF_EXPORT int xf_pool_get_or_compute(xf_pool *p, const char *key, size_t keylen,
                                     const xf_policy *policy, xf_loader_fn loader,
                                     void *loader_ud, xf_value *out);

/* xf_get, xf_set and xf_delete through the pool: same arguments, results
 * and contract, plus XF_EBUSY, and XF_ENOMEM as above. Each holds a client
 * for its one round trip. Thread-safe. */
XF_EXPORT int xf_pool_get(xf_pool *p, const char *key, size_t keylen, xf_value *out);
XF_EXPORT int xf_pool_set(xf_pool *p, const char *key, size_t keylen, const void *data,
                          size_t len, const xf_policy *policy);
XF_EXPORT int xf_pool_delete(xf_pool *p, const char *key, size_t keylen);
/* xf_invalidate_tags and xf_clear_namespace through the pool, as above. */
XF_EXPORT int xf_pool_invalidate_tags(xf_pool *p, const char *const *tags, size_t ntags);
XF_EXPORT int xf_pool_clear_namespace(xf_pool *p);

/* xf_get_or_compute_many and xf_get_or_compute_many_batch (<xfetch/batch.h>)
 * through the pool: same arguments, results and contract, plus XF_EBUSY and
 * XF_ENOMEM as above (no key looked at). Unlike a single call, a batch holds
 * one client from its first round trip to its last, its loads and waits
 * included: a loader that calls the pool needs another client (with
 * max_connections 1 it gets XF_EBUSY after the checkout timeout). n == 0 is
 * XF_OK at once. Thread-safe. */
XF_EXPORT int xf_pool_get_or_compute_many(xf_pool *p, size_t n, const char *const *keys,
                                          const size_t *keylens, const xf_policy *policy,
                                          xf_loader_fn loader, void *loader_ud,
                                          xf_value *values, int *rcs);
XF_EXPORT int xf_pool_get_or_compute_many_batch(xf_pool *p, size_t n,
                                                const char *const *keys,
                                                const size_t *keylens,
                                                const xf_policy *policy,
                                                xf_batch_loader_fn loader, void *loader_ud,
                                                xf_value *values, int *rcs);

/* The message of the calling thread's last failed pool call ("" after a
 * success); valid until its next pool call. Never NULL. */
XF_EXPORT const char *xf_pool_errmsg(void);

/* What the pool did. */
typedef struct xf_pool_info {
  xf_stats clients;   /* the clients' counters summed (as of their last
                         call); connections: those of the idle clients */
  uint64_t open;      /* clients made (<= max_connections) */
  uint64_t idle;      /* clients not in use now */
  uint64_t waited;    /* calls that waited for a client */
  uint64_t timed_out; /* calls that gave up waiting (XF_EBUSY) */
} xf_pool_info;

/* Copies the pool's counters into *out (zeros for a NULL pool). Thread-safe. */
XF_EXPORT void xf_pool_stats(xf_pool *p, xf_pool_info *out);

/* Closes every client and frees the pool (NULL-safe); no call may be running. */
XF_EXPORT void xf_pool_close(xf_pool *p);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_POOL_H */
