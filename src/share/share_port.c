/* The share behind the flow's port (ports.h), and a client's ports of
 * its near cache and its share. */
#include "share_port.h"
#include "client.h"
#include "near_impl.h"
#include "share.h"

static void drop(void *self, const char *key, size_t keylen) {
  xf__share_drop(self, key, keylen);
}

const xf__port_share xf__share_port_impl = {.drop = drop};

void xf__share_fill_ports(xf_client *c) {
  c->ports.self = c;
  c->ports.near = c->near ? &xf__near_port_impl : NULL;
  c->ports.share = c->share ? &xf__share_port_impl : NULL;
}
