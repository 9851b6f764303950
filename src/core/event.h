/* The event hook (xf_options.on_event) as the core emits it: one inline
 * check per site, a single predictable branch when no hook is set; the
 * event is built out of line. Clock-free: durations are the inputs'. */
#ifndef XF_EVENT_H
#define XF_EVENT_H

#include "client.h"

struct xf__flow;

/* Out of line: builds the event of flow f (its key, driver) and calls the
 * hook. */
void xf__emit_flow(const struct xf__flow *f, xf_event_type type, int source,
                   int64_t duration_us, int rc);

/* A server's event (breaker, reconnect, redirect): server is its name. */
void xf__emit_server(const xf_client *c, xf_event_type type, const char *server,
                     xf_driver driver);

#define xf__emit(f, type, source, duration_us, rc)                                         \
  do {                                                                                     \
    if (__builtin_expect((f)->c->on_event != NULL, 0))                                     \
      xf__emit_flow((f), (type), (source), (duration_us), (rc));                           \
  } while (0)

#endif
