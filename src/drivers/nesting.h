/* The keys this thread's loaders are computing (nest.h): the thread's stack
 * of frames, pushed by the drivers around each loader they run, asked by
 * the flow through the client's ports (ports.h's loading). */
#ifndef XF_NESTING_H
#define XF_NESTING_H

#include "nest.h"
#include "xfetch.h"

/* Marks key of c's namespace as being loaded by this thread until the
 * matching pop (frames pop in reverse order). n, c's namespace and key must
 * live until then. */
void xf__nest_push(xf__nest *n, const xf_client *c, const char *key, size_t keylen);
void xf__nest_pop(xf__nest *n);

/* The same with the namespace given (a copy of a client's, for a loader run
 * where the client may be gone: a background refresh). */
void xf__nest_push_ns(xf__nest *n, const char *ns, size_t ns_len, const char *key,
                      size_t keylen);

/* Whether a loader on this thread is computing key of namespace ns. */
int xf__nest_loading(const char *ns, size_t ns_len, const char *key, size_t keylen);

#endif
