/* A wake pipe on a client's near cache: its write end gets a byte on every
 * invalidation and node drop (the near port's notify_add), so that a driver
 * waiting on several keys (a link, an event loop, a batch) polls its read
 * end. */
#ifndef XF_WAKE_PIPE_H
#define XF_WAKE_PIPE_H

#include "client.h"

/* Opens a non-blocking pipe (p[0] to read, p[1] to write) and registers
 * p[1] with c's near cache (which c must have): XF_OK, or XF_ENOMEM when
 * there is no pipe or no memory (nothing open then). */
int xf__wake_pipe_open(xf_client *c, int p[2]);

/* Unregisters wr from c's near cache and closes it, and rd unless -1. */
void xf__wake_pipe_close(xf_client *c, int rd, int wr);

#endif
