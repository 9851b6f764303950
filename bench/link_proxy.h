/* link_proxy: a TCP proxy on loopback that puts an emulated network link
 * between a bench's clients and its redis-server, so that what a reply's bytes
 * cost on a network is measured, not computed.
 *
 * What it emulates: each direction of each connection is a wire of `mbit`
 * Mbit/s. A chunk read from one side (what the sender had written, up to
 * 64 KiB) starts to cross the wire once it has arrived and the wire is free,
 * takes bytes * 8 / rate, and is written to the other side `delay_us` after
 * its last bit left (store and forward per chunk, as a 64 KiB TSO segment
 * would be). A late wake-up delays one chunk and does not move the next
 * chunk's slot; the proxy polls the last 60 us before a chunk is due rather
 * than sleep through them (link_proxy.c), so a run costs some CPU.
 *
 * What it does not emulate: loss, reordering, jitter, a real path's TCP slow
 * start and congestion window, a receiver window, per-packet headers (200 KiB
 * at 1 Gbit/s takes 1.64 ms here, about 1.7 ms on Ethernet). The proxy's own
 * work (one more hop through loopback, two threads per connection) adds to
 * every request through it, the raw GET's and the library's alike (a larger
 * reply's copies cost more, mostly hidden behind its pacing); a run at a rate
 * too high to pace measures it. */
#ifndef LINK_PROXY_H
#define LINK_PROXY_H

#include <stdint.h>

typedef struct link_proxy link_proxy;

/* Listens on a free 127.0.0.1 port and forwards each connection to
 * 127.0.0.1:to_port through the emulated link (mbit > 0, delay_us >= 0).
 * Returns the proxy, or NULL with the reason on stderr. Up to 16 connections. */
link_proxy *link_proxy_start(int to_port, double mbit, int64_t delay_us);
/* The port the proxy listens on. */
int link_proxy_port(const link_proxy *p);
/* Closes the listener and every connection, joins the threads, frees p
 * (NULL is fine). */
void link_proxy_stop(link_proxy *p);

#endif
