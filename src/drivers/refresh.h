/* Background refresh (policy.background_refresh): where a detached refresh
 * (flow.h, xf__flow_detach) runs. A share owns a small bounded set of
 * refresh workers, made on first use (again in a forked child: it never
 * inherits the parent's threads); a driver hands them jobs. An owner whose
 * jobs touch its own state after the loader (the pool: its clients) holds a
 * gate: a job enters it before touching the owner, and closing the gate
 * waits a bounded time for its jobs, then shuts them out (a job still in its
 * loader then drops its result; its lease expires). */
#ifndef XF_REFRESH_H
#define XF_REFRESH_H

#include <stdint.h>

#include "xfetch.h"

#define XF_REFRESH_THREADS 2 /* workers per share */
#define XF_REFRESH_QUEUE 64  /* refreshes waiting for a worker, at most */

/* What a job's run came to, for xf_refresh_info. */
enum { XF_REFRESH_DONE, XF_REFRESH_FAILED, XF_REFRESH_ABANDONED };

typedef struct xf__refresh_job {
  int (*run)(struct xf__refresh_job *j);   /* on a worker; frees j */
  void (*drop)(struct xf__refresh_job *j); /* never run (closing): frees j */
  struct xf__refresh_job *next;
} xf__refresh_job;

struct xf__refreshers;

/* Hands j to s's workers: XF_OK (it will run or be dropped), or XF_EBUSY
 * (the queue is full, s is closing, a thread could not be made: j is not
 * taken; counted as skipped). */
int xf__refresh_submit(xf_share *s, xf__refresh_job *j);

/* For xf_share_close: stops taking jobs, drops the queued ones, waits up to
 * drain_ms for the running ones, then leaves them (they free themselves). */
void xf__refreshers_close(struct xf__refreshers *w, int drain_ms);

/* The share's field the workers hang on (share.c). */
struct xf__refreshers **xf__share_refreshers(xf_share *s);

typedef struct xf__refresh_gate xf__refresh_gate;

/* A new gate (NULL: out of memory). */
xf__refresh_gate *xf__gate_open(void);
/* A job of the owner's is submitted (before xf__refresh_submit). */
void xf__gate_hold(xf__refresh_gate *g);
/* The job is over (run, abandoned or not taken). */
void xf__gate_release(xf__refresh_gate *g);
/* 1 (then xf__gate_leave) if the job may touch the owner, 0 if the owner is
 * closing (before its loader: do not run it) or closed. */
int xf__gate_enter(xf__refresh_gate *g, int before_loader);
void xf__gate_leave(xf__refresh_gate *g);
/* The owner closes: waits up to drain_ms for its jobs, then shuts the rest
 * out (waiting only for those inside the gate: one command each). */
void xf__gate_close(xf__refresh_gate *g, int drain_ms);

#endif
