/* The share behind the flow's port (ports.h): each function is given the
 * client the port was filled for (share_port.c). */
#ifndef XF_SHARE_PORT_H
#define XF_SHARE_PORT_H

#include "ports.h"

extern const xf__port_share xf__share_port_impl;

/* c's ports of its near cache and its share (NULL: none), given c. */
void xf__share_fill_ports(struct xf_client *c);

#endif
