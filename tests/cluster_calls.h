/* What the blocking cluster tests call the client with: a loader whose value
 * is "v-" + the key, a policy that never recomputes early (exact counts), and
 * a get that checks the value and its source. */
#ifndef XFT_CLUSTER_CALLS_H
#define XFT_CLUSTER_CALLS_H

#include <hiredis/hiredis.h>

#include "xfetch.h"

/* ud is an int counting the loader's calls (atomically). */
int xft_key_loader(void *ud, const char *key, size_t keylen, xf_sink *sink);

/* An hour's ttl and beta 0: no early recompute, so the counts are exact. */
xf_policy xft_long_ttl(void);

/* Gets key through c and checks the value is "v-" + key from source. */
void xft_expect_get(xf_client *c, const char *key, const xf_policy *p, int *calls,
                    xf_source source);

/* MONITOR on the node at port, over a connection of its own. */
redisContext *xft_monitor(int port);

/* What the node m monitors ran since xft_monitor, as commands on the wire
 * (not a script's own): the raises of a tag (EVALSHA of tag_bump.lua), the
 * WAITs, and how many of those WAITs came on the connection of the raise
 * before them. Ends m. */
typedef struct xft_raises {
  int raises, waits, waits_on_the_raise_s_connection;
} xft_raises;
xft_raises xft_raises_seen(redisContext *m, int port);

#endif
