/* The caching policy of a call: validation and the times derived from it. */
#ifndef XF_POLICY_H
#define XF_POLICY_H

#include <stdint.h>

#include "flow_env.h"

/* The largest time a policy may name, ms (~34 years: far inside Lua's
 * doubles, and the bound the scripts use to spot malformed entries). */
#define XF_MAX_TIME_MS ((int64_t)1 << 40)

/* XF_OK, or XF_EINVAL with a message naming the field. */
int xf__policy_check(xf__runtime *rt, const xf_policy *p);

/* The logical ttl of a write, shortened at random by up to p->jitter. */
int64_t xf__policy_ttl(xf__runtime *rt, const xf_policy *p);

/* How long past its ttl an entry stays in Redis: the larger of the stale and
 * stale-if-error windows, so each works without the other. */
int64_t xf__policy_keep_ms(const xf_policy *p);

/* How long after its start a load keeps renewing its lease (max_load_ms;
 * 0: XF_MAX_LOAD_DEFAULT_MS). */
int64_t xf__policy_max_load_ms(const xf_policy *p);

/* Whether a driver has somewhere to run an early refresh off the request
 * path. */
typedef enum xf__off_path {
  XF__OFF_PATH_NONE = 0,  /* nowhere: a client with neither a share nor an
                             executor, a batch loader */
  XF__OFF_PATH_READY = 1, /* refresh workers, an executor, the event loop: the
                             library runs the loader with loader_ud */
  XF__OFF_PATH_DRIVER = 2 /* the sans-I/O call's driver (xf_call_take_refresh):
                             it runs the loader, there is no loader_ud */
} xf__off_path;

/* Whether an early refresh p's call wins runs off the request path, on a
 * driver that can run one there as `driver` says: with XF_BACKGROUND_ON
 * (the caller's word that loader and loader_ud outlive the call); with
 * XF_BACKGROUND_AUTO when the policy says how long loader_ud lives
 * (loader_ud_keep and _drop) and the library runs the loader. Otherwise in
 * the call: a C caller's loader_ud often lives in the caller's frame. The
 * one place this is decided. */
int xf__policy_background(const xf_policy *p, xf__off_path driver);

/* A refresh leaves the request path with ud: *kept is the ud its loader gets
 * (loader_ud_keep's, else ud). 0: it could not be kept (keep returned NULL
 * for a non-NULL ud): the refresh must not leave. */
int xf__policy_keep_ud(const xf_policy *p, void *ud, void **kept);

/* The refresh that kept `kept` is over: loader_ud_drop, if any. */
void xf__policy_drop_ud(const xf_policy *p, void *kept);

#endif
