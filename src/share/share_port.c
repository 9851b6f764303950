/* The share behind the flow's port (ports.h). */
#include "share_port.h"
#include "share.h"

static void drop(void *self, const char *key, size_t keylen) {
  xf__share_drop(self, key, keylen);
}

const xf__share_port xf__share_port_impl = {.drop = drop};
