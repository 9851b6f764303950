/* The keys this thread's loaders are computing right now. A loader that asks
 * for its own key (through any client of the same servers, db and user)
 * would wait on its own lease, or its own flight in the share, for the whole
 * wait_ms and then load a second time: the call fails at once instead. Every
 * driver that runs a loader on the caller's thread pushes a frame around it;
 * every get-or-compute checks at its start (xf__flow_start). */
#ifndef XF_NEST_H
#define XF_NEST_H

#include <stddef.h>

#include "xfetch.h"

typedef struct xf__nest {
  struct xf__nest *up;
  const char *ns; /* the client's namespace (client.h) */
  size_t ns_len;
  const char *key; /* the Redis key (prefixed) */
  size_t keylen;
} xf__nest;

/* Marks key of c's namespace as being loaded by this thread until the
 * matching pop (frames pop in reverse order). n, c's namespace and key must
 * live until then. */
void xf__nest_push(xf__nest *n, const xf_client *c, const char *key, size_t keylen);
void xf__nest_pop(xf__nest *n);

/* The same with the namespace given (a copy of a client's, for a loader run
 * where the client may be gone: a background refresh). */
void xf__nest_push_ns(xf__nest *n, const char *ns, size_t ns_len, const char *key,
                      size_t keylen);

/* Whether a loader on this thread is computing key of c's namespace. */
int xf__nest_has(const xf_client *c, const char *key, size_t keylen);

#endif
