/* A client's ports (ports.h), filled from what it was opened with: the
 * near cache's and the share's own tables (share_port.c), and this thread's
 * loads (nesting.c). */
#include "client.h"
#include "nesting.h"
#include "share_port.h"

void xf__ports_fill(xf_client *c) {
  xf__share_fill_ports(c);
  c->ports.loading = xf__nest_loading;
}
