/* A user's own driver of the sans-I/O call, for the tests: one link and its
 * plain socket to a loopback port, moved as xfetch.aio or a C driver would.
 * The driver's clock is CLOCK_MONOTONIC's ms plus skew_ms. */
#ifndef XFT_LINK_NET_H
#define XFT_LINK_NET_H

#include <xfetch.h>

typedef struct xft_net {
  xf_link *link;
  int fd;          /* -1: no socket */
  int port;        /* 127.0.0.1's */
  int connects;    /* sockets opened */
  int64_t skew_ms; /* added to every now_ms given to the link and the calls */
} xft_net;

/* A link to 127.0.0.1:port for c with flags (xf_link_open's); no I/O yet. */
xft_net xft_net_open(xf_client *c, int port, int flags);
void xft_net_close(xft_net *n);

/* The driver's clock: CLOCK_MONOTONIC's ms plus skew_ms. */
int64_t xft_net_now(const xft_net *n);

/* Moves bytes (connecting when the link wants a stream) until a call is
 * ready; returns it. */
xf_call *xft_net_pump(xft_net *n);

/* Sends call (in XF_CALL_SEND) and moves bytes until it comes back ready
 * (the only call on the link); returns its next step (xf_call_received). */
xf_call_step xft_net_exchange(xft_net *n, xf_call *call);

#endif
