/* <xfetch/batch.h>: the batch driver: n get-or-compute calls in one round trip.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_BATCH_H
#define XFETCH_BATCH_H

#include "base.h"
#include "client.h"
#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The batch driver: n get-or-compute calls at once, with the same policy and
 * loader. The reads of all n keys travel in one round trip, as one read_many
 * script call (one per slot in Redis Cluster), so hits return after it. The
 * loaders then run one after the other, in this thread, for the keys this
 * caller wins: a key's lease is taken at its turn, with the write of the key
 * before (or for the next few keys at once, as many as the loads so far say
 * fit in half of policy.lease_ms), so every lease covers its key's load
 * however long the batch takes. A key another caller takes meanwhile is
 * waited for or served, not loaded again. Each key
 * behaves exactly as xf_get_or_compute would: rcs[i] is its code and values[i] its value
 * (free each with xf_value_free; zeroed on error). Returns XF_OK when every key has its
 * rcs[i] (whatever they are), XF_EINVAL (a NULL array or loader: no key was looked at) or
 * XF_ENOMEM. n == 0 is XF_OK. Uses the client's one connection: same thread
 * rules as every call. */
XF_EXPORT int xf_get_or_compute_many(xf_client *c, size_t n, const char *const *keys,
                                     const size_t *keylens, const xf_policy *policy,
                                     xf_loader_fn loader, void *loader_ud, xf_value *values,
                                     int *rcs);

/* A batch loader: computes the values of n keys in one go (one SQL IN (...),
 * one multi-get from the source of truth) and hands key i's value to
 * sinks[i] with xf_sink_set (or xf_sink_not_found). keys[i] and keylens[i]
 * are as the caller gave them; every array is valid during the call only.
 * Returns 0 on success (a key whose sink it left unset fails with
 * XF_ELOADER); any other value fails every key of the call, nothing is cached
 * and the code is kept (xf_loader_error). */
typedef int (*xf_batch_loader_fn)(void *ud, size_t n, const char *const *keys,
                                  const size_t *keylens, xf_sink *const *sinks);

/* xf_get_or_compute_many with a batch loader: the keys this caller must load
 * (the leases it won, and any it loads after waiting or failing open) are
 * loaded with one call of loader per round of the batch: usually one call
 * with exactly the batch's missing keys; a key that waited on another
 * caller's lease and then had to load comes in a later call. Each key's delta
 * (XFetch) is the whole call's duration; every lease of a call is taken
 * right before it. Same returns, ownership and thread rules as
 * xf_get_or_compute_many. While Redis cannot be used, the keys go through
 * the client's share as xf_get_or_compute's do: a key another thread is
 * loading is waited for (its outcome served as XF_SOURCE_LOCAL), and the
 * call's loader gets only the keys it leads, their outcomes then handed to
 * the threads waiting on them. */
XF_EXPORT int xf_get_or_compute_many_batch(xf_client *c, size_t n, const char *const *keys,
                                           const size_t *keylens, const xf_policy *policy,
                                           xf_batch_loader_fn loader, void *loader_ud,
                                           xf_value *values, int *rcs);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_BATCH_H */
