/* What every C driver that runs loaders on its own threads shares (blocking,
 * batch, pool): running a LOAD step, through the client's share while Redis
 * cannot be used, and sleeping through a WAIT. These read the clock; the
 * flow (flow.h) never does. */
#ifndef XF_DRIVE_H
#define XF_DRIVE_H

#include <stdint.h>
#include <time.h>

#include "client_io.h"
#include "flight.h"
#include "flow.h"
#include "reply.h"
#include "share.h"

/* Performs a LOAD step with loader, in this thread (through the client's
 * share, if any, when Redis cannot be used) and feeds the flow. */
xf__step xf__flow_run_loader(xf__flow *f, xf_loader_fn loader, void *ud);

/* The same in two halves, for a driver that lends the client to others while
 * the loader runs (the pool): xf__flow_call_loader runs it (through sc's
 * share when Redis cannot be used; sc NULL = none; only sc->share and sc->ns
 * are read, see share.h) and touches neither f->c nor the flow's state but
 * its sink; xf__flow_feed_loaded then feeds the outcome
 * (f->c set again). */
typedef struct xf__loaded {
  int served; /* answered by the share: rc, data (malloc'd), len */
  int rc;
  char *data;
  size_t len;
  int loader_rc; /* else the loader's code, duration and end time */
  int64_t delta_us, end_ms;
} xf__loaded;
void xf__flow_call_loader(xf__flow *f, const xf_client *sc, xf_loader_fn loader, void *ud,
                          xf__loaded *out);
xf__step xf__flow_feed_loaded(xf__flow *f, const xf__loaded *l);

/* For drivers that run the loader themselves (the batch loader): f's key in
 * sc's share. xf__flow_share_begin joins its flight (waiting up to the
 * policy's wait_ms) as xf__share_begin does; a LEAD must be ended, once the
 * loader has filled f->sink (loader_rc its code, end_ms when it returned, on
 * xf__now_ms's clock), with xf__flow_share_end. */
xf__share_role xf__flow_share_begin(xf__flow *f, const xf_client *sc, char **data,
                                    size_t *len,
                                    int *rc); /* xf__flow_share_end: flight.h */

/* Sends f's command on f->c (a release after an interrupt within the grace
 * of xf__flow_canceled) and feeds the reply back. Inline: a hit pays no call
 * for it. */
static inline xf__step xf__drive_send(xf__flow *f) {
  xf__reply *r;
  int canceled = xf__flow_canceled(f);
  if (canceled) /* off the hot path: a hit only pays the test */
    f->c->grace_ms = XF_CANCEL_GRACE_MS;
  int rc = xf__command(f->c, &f->cmd, &r);
  if (canceled)
    f->c->grace_ms = 0;
  return xf__flow_reply(f, rc, r, xf__now_ms());
}

/* Sleeps until wake_ms in slices of at most 50 ms, asking the call's
 * interrupt after each. Non-zero: it asked to stop (the driver then calls
 * xf__flow_cancel). */
int xf__drive_sleep(const xf__flow *f, int64_t wake_ms);

#endif
