/* The event hook (xf_options.on_event) as the core emits it: one inline
 * check per site, a single predictable branch when no hook is set; the
 * event is built out of line. Clock-free: durations are the inputs'. */
#ifndef XF_EVENT_H
#define XF_EVENT_H

#include "breaker.h"
#include "client.h"

struct xf__flow;

/* Out of line: builds the event of flow f (its key, driver) and calls the
 * hook. */
void xf__emit_flow(const struct xf__flow *f, xf_event_type type, int source,
                   int64_t duration_us, int rc);

/* XF_EV_INVALIDATION: key invalidated by Redis (the Redis key, prefix
 * included), or (key NULL) server's entries dropped, rc 0 for a flush and
 * XF_EIO for a lost connection; key and server NULL: records were lost. */
void xf__emit_invalidation(const xf_client *c, xf_driver driver, const char *key,
                           size_t keylen, const char *server, int rc);

/* A server's event (breaker, reconnect, redirect): server is its name. */
void xf__emit_server(const xf_client *c, xf_event_type type, const char *server,
                     xf_driver driver);

/* A connection to server came up (every driver's connections, one place):
 * its breaker b closes (BREAKER_CLOSED when it was open) and, when one had
 * been up before (*was_up), RECONNECT. */
void xf__server_up(xf_client *c, xf__breaker *b, int *was_up, const char *server);

/* A connection to server failed (why, kept by the breaker): counted in
 * stats.redis_errors, its breaker b trips (BREAKER_OPEN when it opens now). */
void xf__server_down(xf_client *c, xf__breaker *b, int64_t now_ms, const char *why,
                     const char *server);

#define xf__emit(f, type, source, duration_us, rc)                                         \
  do {                                                                                     \
    if (__builtin_expect((f)->cfg->on_event != NULL, 0))                                   \
      xf__emit_flow((f), (type), (source), (duration_us), (rc));                           \
  } while (0)

#endif
