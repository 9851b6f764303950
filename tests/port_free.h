/* Whether a loopback TCP port is free now (it binds): what the fixtures ask
 * before they start a redis-server on it. No Criterion: the bench's cluster
 * launcher uses it too. */
#ifndef XFT_PORT_FREE_H
#define XFT_PORT_FREE_H

int xft_port_free(int port);

#endif
