/* <xfetch/near.h>: a near hit without a call, for a driver that runs its own calls.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_NEAR_H
#define XFETCH_NEAR_H

#include "base.h"
#include "client.h"
#include "events.h"
#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Serving from the near cache alone ----------------------------------
 *
 * With a near cache (xf_share_options.near_cache_bytes) most hits need
 * neither Redis nor a connection. A driver that does its own I/O (a
 * sans-I/O call driver, a language binding, a pool of clients) can ask the
 * near cache first, in one call, and set a call up only when it did not
 * serve:
 *
 *   xf_value v;
 *   int rc = xf_near_serve(c, key, keylen, &policy, XF_DRIVER_CALL, NULL, &v);
 *   if (rc == XF_NEAR_NOT_SERVED)
 *     ... make the call as usual on c (xf_call_start, xf_get_or_compute) ...
 *   else if (rc == XF_OK)
 *     ... v.data, v.len; xf_value_free(&v) ...
 *   else if (rc == XF_ENOTFOUND)
 *     ... a kept not-found ...
 */

/* xf_near_serve's answer when the near cache did not serve: make the call.
 * Positive: not an error. */
#define XF_NEAR_NOT_SERVED 1

/* Serves a get-or-compute of key under policy (policy NULL: an xf_get of
 * key) from c's near cache, doing all that the call would do on that near
 * hit (the XFetch draw, the counters in xf_client_stats, the events, which
 * name driver: the driver the call would have run on) and nothing else: no
 * I/O, no loader, no wait. Returns:
 *   XF_OK               a near hit: the value in *out (source
 *                       XF_SOURCE_CACHE; free it with xf_value_free);
 *   XF_ENOTFOUND        a kept not-found (a loader's xf_sink_not_found
 *                       under negative_ttl_ms);
 *   XF_NEAR_NOT_SERVED  nothing served, *out empty: make the call as usual,
 *                       on c. So when c's share has no near cache, the key
 *                       is not kept, an argument is one the call refuses
 *                       (the call says why), the call is a nested call for
 *                       the key c's loader is computing, the call is
 *                       tagged (policy.tags, options.namespace_tag) and
 *                       its kept entry is not known current for its tags
 *                       (the call looks their versions up; a namespace
 *                       client's get always makes the call), or this
 *                       call's draw elected it to refresh the value early:
 *                       c's next
 *                       get-or-compute of key then refreshes it without
 *                       drawing again (xf_near_move_refresh hands that over
 *                       to another client);
 *   XF_EINVAL           c or out NULL.
 * near_hits: NULL, or a counter to which a served result's XF_EV_NEAR is
 * added (atomically, +1) instead of going to options.on_event (every other
 * event still goes there): for a hook that would only count it. Times are
 * the library's monotonic clock (CLOCK_MONOTONIC, as the share's). Like every
 * call on c: one thread at a time. */
XF_EXPORT int xf_near_serve(xf_client *c, const char *key, size_t keylen,
                            const xf_policy *policy, xf_driver driver, uint64_t *near_hits,
                            xf_value *out);

/* Moves the early refresh that xf_near_serve elected on from (if any, and not
 * yet made) to to: to's next get-or-compute of that key makes it, from's
 * does not. For a near hit asked on another client than the one that makes
 * the call (e.g. an idle client of a pool: a near hit waits for no
 * connection). NULL-safe; neither client in use by another thread. */
XF_EXPORT void xf_near_move_refresh(xf_client *from, xf_client *to);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_NEAR_H */
