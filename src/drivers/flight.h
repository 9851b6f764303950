/* A load while Redis cannot be used goes through the client's share
 * (share.h), for the drivers that must not block (the sans-I/O call, the
 * event loop), as the blocking driver's does (drive.c): the lead loads (its
 * outcome ends the flight: xf__flight_end), a kept value or a landed flight
 * serves (source "local"), and a flight in progress is polled (a WAIT, as a
 * wait for a lease is) up to the policy's wait, then the call loads alone. */
#ifndef XF_FLIGHT_H
#define XF_FLIGHT_H

#include <stdint.h>

#include "flow.h"
#include "share.h" /* xf__flight */

/* Whether f's LOAD must first go through its client's share: a load that
 * will not be cached (Redis cannot be used), not joined yet. */
int xf__flight_joins(const xf__flow *f, const xf__flight *fl);

/* Joins (or polls) the share's flight for f's key, without blocking:
 * XF_STEP_LOAD (f leads the flight, or loads alone after the policy's
 * wait), XF_STEP_WAIT (another caller's flight: poll again at f->wake_ms,
 * then call again), or the flow's step for the value or outcome the share
 * served. now_ms: the share's clock (xf__now_ms's). */
xf__step xf__flight_join(xf__flow *f, xf__flight *fl, int64_t now_ms);

/* Ends f's lead of its key's flight in sc's share (for the drivers that
 * load themselves: the blocking driver, the batch loader): loader_rc its code
 * and f->sink its value, end_ms when it returned (xf__now_ms's clock); the
 * value is kept for the loader's ttl. */
void xf__flow_share_end(xf__flow *f, const xf_client *sc, int loader_rc, int64_t end_ms);

/* f's load is over (loader_rc: 0, or its failure): a lead hands the outcome
 * to the flight's followers; nothing otherwise. */
void xf__flight_end(xf__flow *f, xf__flight *fl, int loader_rc, int64_t now_ms);

#endif
