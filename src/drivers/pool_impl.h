/* The pool driver's shared state (pool.c: its calls, open and close;
 * pool_lend.c: lending its clients to calls, its stats). */
#ifndef XF_POOL_IMPL_H
#define XF_POOL_IMPL_H

#include <pthread.h>

#include "client_io.h"
#include "refresh.h"
#include "spares.h"

struct xf_pool {
  pthread_mutex_t lock;
  pthread_cond_t freed;
  xf_options opts; /* for new clients: lazy_connect, share set, own strings */
  char *strings[10];
  xf_share *own_share;
  size_t max, made, nidle;
  size_t opening;   /* clients being opened (outside the lock) */
  xf_client **idle; /* a stack of the idle clients */
  xf_client **all;  /* every client made, for close */
  xf_stats *seen;   /* all[i]'s stats already added to totals */
  int checkout_timeout_ms;
  xf_stats totals; /* the clients' counters, as of their last check-in */
  uint64_t waited, timed_out;
  xf__refresh_gate *gate; /* background refreshes (refresh.h) */
  xf__spares *spares;     /* for near hits; NULL without a near cache */
};

#define XF__POOL_ERROR_LEN 256
/* The calling thread's last error message (xf_pool_errmsg). */
extern _Thread_local char xf__pool_error[XF__POOL_ERROR_LEN];

/* A client for this thread: an idle one, a new one while fewer than max
 * exist or are being opened, or the next one checked in. wait_ms < 0 is for a
 * call that already began (so at least one client exists): it waits for an
 * idle one as long as it takes (every holder gives its client back after one
 * command) and never fails; wait_ms 0 is a try: XF_EBUSY at once (not
 * counted, no message) where it would wait. XF_OK, XF_EBUSY on timeout, or
 * the error of a client that could not be made (XF_ENOMEM), with the reason
 * in xf__pool_error. */
int xf__pool_checkout(xf_pool *p, int wait_ms, xf_client **out);
/* Gives c back (its counters added to the pool's). */
void xf__pool_checkin(xf_pool *p, xf_client *c);
/* Checks c in, keeping its message as this thread's; a success clears it
 * (a loader's nested pool call may have failed meanwhile on this thread).
 * Returns rc. */
int xf__pool_finish(xf_pool *p, xf_client *c, int rc);

#endif
