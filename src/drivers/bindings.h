/* Entry points for xfetch's language bindings (the Python faces compile the
 * library's sources and call these through cffi): internal, not in
 * xfetch.h, free to change with the bindings that ship alongside. */
#ifndef XF_BINDINGS_H
#define XF_BINDINGS_H

#include <xfetch.h>

/* xf__near_serve's answer when the near cache did not serve the call. */
#define XF__NEAR_PASS 1

/* A near hit without the call: serves a get-or-compute of key under p (p
 * non-NULL) or a get (p NULL) from c's share's near cache, with everything
 * the call would do on that hit (the XFetch draw, the counters, the events
 * named after driver), and nothing else. Returns XF_OK with *out filled
 * (freed with xf_value_free), XF_ENOTFOUND for a kept not-found, or
 * XF__NEAR_PASS: nothing was served (no near cache, a bypass, a bad argument,
 * a nested load of key, no hit, or a hit this call's draw elected for an
 * early refresh, which c's next get-or-compute of key then makes without
 * drawing again): make the call as usual, on c. count: NULL, or where a
 * served result's XF_EV_NEAR is counted (atomically, +1) instead of being
 * given to the hook (other events are): a binding whose hook would only
 * count it. Same thread-safety as the other calls on c. */
int xf__near_serve(xf_client *c, const char *key, size_t keylen, const xf_policy *p,
                   xf_driver driver, uint64_t *count, xf_value *out);

/* Moves the early refresh xf__near_serve left on from for its next call
 * (if any) to to: to's next get-or-compute of that key makes it, and from's
 * does not. For a near hit served on another client than the call's (a
 * pool's spare: a near hit waits for no connection). */
void xf__near_elect_move(xf_client *from, xf_client *to);

/* Whether c's last xf_get_or_compute returned with its loader still
 * running (a soft or hard timeout, blocking_timeout.c): the loader and its
 * user data are then in use until the loader returns, on a worker of the
 * share. */
int xf__load_moved(const xf_client *c);

#endif
