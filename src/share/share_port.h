/* The share behind the flow's port (ports.h): each function is given the
 * client the port was filled for (share_port.c). */
#ifndef XF_SHARE_PORT_H
#define XF_SHARE_PORT_H

#include "ports.h"

extern const xf__share_port xf__share_port_impl;

#endif
