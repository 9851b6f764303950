/* The keys this thread's loaders are computing: a stack of frames that live
 * on the drivers' stacks (or in their flows), linked from a thread-local top,
 * so nothing is allocated and the usual check (no loader running) is one
 * thread-local load. */
#include <string.h>

#include "client.h"
#include "nesting.h"

static _Thread_local xf__nest *top;

void xf__nest_push(xf__nest *n, const xf_client *c, const char *key, size_t keylen) {
  xf__nest_push_ns(n, c->ns, c->ns_len, key, keylen);
}

void xf__nest_push_ns(xf__nest *n, const char *ns, size_t ns_len, const char *key,
                      size_t keylen) {
  n->ns = ns;
  n->ns_len = ns_len;
  n->key = key;
  n->keylen = keylen;
  n->up = top;
  top = n;
}

void xf__nest_pop(xf__nest *n) { top = n->up; }

int xf__nest_loading(const char *ns, size_t ns_len, const char *key, size_t keylen) {
  for (const xf__nest *n = top; n; n = n->up)
    if (n->keylen == keylen && n->ns_len == ns_len && memcmp(n->key, key, keylen) == 0 &&
        memcmp(n->ns, ns, ns_len) == 0)
      return 1;
  return 0;
}
