/* The keys this thread's loaders are computing right now. A loader that asks
 * for its own key (through any client of the same servers, db and user)
 * would wait on its own lease, or its own flight in the share, for the whole
 * wait_ms and then load a second time: the call fails at once instead. Every
 * driver that runs a loader on the caller's thread pushes a frame around it
 * (src/drivers/nesting.h, which keeps the thread's stack); every
 * get-or-compute asks at its start (xf__flow_start, through the client's
 * ports: ports.h). */
#ifndef XF_NEST_H
#define XF_NEST_H

#include <stddef.h>

/* One frame: it lives on a driver's stack (or in its flow). */
typedef struct xf__nest {
  struct xf__nest *up;
  const char *ns; /* the client's namespace (client.h) */
  size_t ns_len;
  const char *key; /* the Redis key (prefixed) */
  size_t keylen;
} xf__nest;

#endif
