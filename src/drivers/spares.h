/* A pool's spare clients, for near hits: a near hit needs no connection,
 * so one that finds every pooled client busy is served on a spare instead
 * of waiting. A spare serves near hits only (xf_near_serve): it never
 * connects and holds no slot of max_connections. At most max exist; each is
 * used by one thread at a time. */
#ifndef XF_SPARES_H
#define XF_SPARES_H

#include <stddef.h>

#include "client_io.h"

typedef struct xf__spares xf__spares;

/* Spares opened with opts (borrowed: it must outlive the set; its
 * lazy_connect set), at most max of them. NULL out of memory. */
xf__spares *xf__spares_open(const xf_options *opts, size_t max);

/* A free spare, opened on first use; NULL when max are in use (or an open
 * failed): the caller waits for a pooled client as before. */
xf_client *xf__spares_take(xf__spares *s);

/* Every pooled client is busy: a near hit needs none, so the near cache is
 * asked on a free spare (xf_near_serve, as the call would on that hit):
 * its answer (msg, cap bytes: "" or the error's message), or XF__NEAR_PASS:
 * make the call on a pooled client. *elected is then the spare, still
 * taken, whose draw elected an early refresh: move it to the call's client
 * (xf_near_move_refresh) before giving the spare back; else NULL. */
int xf__spares_near_serve(xf__spares *s, const char *key, size_t keylen,
                          const xf_policy *policy, xf_value *out, xf_client **elected,
                          char *msg, size_t cap);

/* Gives c back; its counters join the set's totals. */
void xf__spares_give(xf__spares *s, xf_client *c);

/* Adds the spares' counters (as of their last give) to *sum. */
void xf__spares_add_stats(xf__spares *s, xf_stats *sum);

/* Closes every spare (none in use) and the set; NULL-safe. */
void xf__spares_close(xf__spares *s);

#endif
