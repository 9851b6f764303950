/* A client's ports (ports.h), filled from what it was opened with: the
 * near cache's and the share's own tables, and this thread's loads. */
#include "client.h"
#include "near_impl.h"
#include "nesting.h"
#include "share_port.h"

void xf__ports_fill(xf_client *c) {
  c->ports = (xf__ports){.self = c,
                         .near = c->near ? &xf__near_port_impl : NULL,
                         .share = c->share ? &xf__share_port_impl : NULL,
                         .loading = xf__nest_loading};
}
