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

#include "flow.h"
#include "xfetch.h"

#define XF_REFRESH_THREADS 2 /* workers per share */
#define XF_REFRESH_QUEUE 64  /* refreshes waiting for a worker, at most */
#define XF_REFRESH_IDLE 4    /* idle refresh clients kept per share */

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

/* For xf_share_close: stops taking jobs, drops the queued ones, closes the
 * share's gate (waiting up to drain_ms for its jobs), and leaves the running
 * ones (they free themselves; a pool's were shut out by its own gate). */
void xf__refreshers_close(struct xf__refreshers *w, int drain_ms);

/* The share's field the workers hang on (share.c). */
struct xf__refreshers **xf__share_refreshers(xf_share *s);

/* Every gate function takes NULL as a gate that is always open. */
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

/* The share's own gate: jobs that touch the share after their loader (a
 * blocking client's refresh writes through a client of that share) enter it;
 * xf_share_close closes it. NULL: out of memory. */
xf__refresh_gate *xf__refresh_share_gate(xf_share *s);

/* A share's idle refresh clients (refresh_clients.c): a blocking client's
 * refresh writes through one opened with its options (blocking_refresh.c),
 * kept for the next refresh opened alike instead of closed. */
typedef struct xf__idle_clients xf__idle_clients;

/* A new empty set (NULL: out of memory). */
xf__idle_clients *xf__idle_new(void);
/* Closes the idle clients; those given back later are closed. */
void xf__idle_close(xf__idle_clients *ic);
/* xf__idle_close, then frees ic. */
void xf__idle_free(xf__idle_clients *ic);
/* An idle client opened with options like o, else one opened now with o
 * (NULL: it could not be). *seen: its counters now, for xf__idle_give. ic
 * NULL: always opened. */
xf_client *xf__idle_take(xf__idle_clients *ic, const xf_options *o, xf_stats *seen);
/* c is done: its counters since seen are summed; kept idle (the oldest
 * closed past XF_REFRESH_IDLE), or closed (ic NULL or closed). */
void xf__idle_give(xf__idle_clients *ic, xf_client *c, const xf_stats *seen);
/* The summed counters; connections: those of the idle clients. */
void xf__idle_stats(xf__idle_clients *ic, xf_stats *out);
/* s's set in this process, made if needed (NULL: out of memory). */
xf__idle_clients *xf__refresh_share_idle(xf_share *s);

/* Where the blocking driver (and the batch driver's per-key loader) can run
 * c's early refreshes (blocking_refresh.c): READY with a refresh_executor or
 * a share, else NONE. */
xf__off_path xf__blocking_off_path(const xf_client *c);

/* The blocking driver's detachable LOAD (blocking_refresh.c): to the
 * client's refresh_executor, else its share's workers, else in the call
 * (the LOAD run as any). */
xf__step xf__blocking_refresh(xf__flow *f, xf_loader_fn loader, void *ud);

/* The blocking driver's LOAD under a soft or hard timeout
 * (xf__flow_load_deadline; blocking_timeout.c): its loader on the share's
 * workers, the caller waiting until the deadline; without a share (or a
 * worker), the LOAD runs as any (the timeout does not apply). */
xf__step xf__blocking_bounded_load(xf__flow *f, xf_loader_fn loader, void *ud);

/* ---- a detached refresh as a job (refresh_job.c) --------------------------------- */

/* What every driver's detached refresh holds: its own copies of what the
 * call lent it (policy, key, the client's namespace for the loader's nest
 * frame), the flow at its LOAD, and the gate it answers to. A driver's job
 * embeds it first (after its own fields are set by the driver). */
typedef struct xf__detached {
  xf__refresh_job job;
  xf__refresh_gate *gate;
  xf_loader_fn loader;
  void *ud;                      /* the loader's: kept_ud, or an executor's own */
  void *kept_ud;                 /* policy.loader_ud_keep's, dropped when d is freed */
  struct xf_options *renew_with; /* the caller's options, for the lease's renewals
                                    while the loader runs (lease_keeper.h) */
  struct xf__keeper *keeper;     /* those renewals' thread while the loader runs: held
                                    here, not on the worker's stack, so a child forked
                                    meanwhile still reaches it */
  xf_policy policy;
  xf__flow f;
  xf_value out;
  char *key, *ns;
  size_t keylen, ns_len;
  int loader_rc;  /* the loader's outcome, from xf__detached_load */
  int64_t due_us; /* when the call found the refresh due and took its lease */
  /* The loader's time plus the wait for a worker since due_us (up to a
   * quarter of the ttl), so the next refresh is due early enough
   * (refresh_ahead x delta) to land before the value expires while workers
   * run as late as this one did. */
  int64_t delta_us, end_ms;
} xf__detached;

/* Detaches f's refresh (xf__flow_detachable) into a new job of size bytes
 * (>= sizeof(xf__detached): a driver's struct that starts with one), run by
 * run, answering to gate (held; NULL: none, a user's executor runs it), its
 * loader_ud kept (policy.loader_ud_keep; dropped when the job is freed,
 * however it ends). f is DONE with the current value. NULL (f untouched):
 * out of memory, or the loader_ud could not be kept. */
xf__detached *xf__detached_new(xf__flow *f, size_t size, xf__refresh_gate *gate,
                               int (*run)(xf__refresh_job *), xf_loader_fn loader,
                               void *ud);

/* Hands d to the share's workers; if they do not take it, skips it. */
void xf__detached_submit(xf__detached *d, xf_share *s, xf_client *c);

/* Releases d's lease on c (the calling thread's client) and frees d. */
void xf__detached_skip(xf__detached *d, xf_client *c);

/* On a worker: runs d's loader (unless its gate closed first: 0, d freed as
 * abandoned), then enters the gate (closed: 0, d freed). 1: the driver gives
 * d->f a client, then calls xf__detached_finish. */
int xf__detached_load(xf__detached *d);

/* Feeds the loader's outcome and sends the write or release on d->f.c.
 * Returns XF_REFRESH_DONE or _FAILED. Then the driver lets go of the
 * client, and xf__detached_end leaves the gate and frees d. */
int xf__detached_finish(xf__detached *d);
void xf__detached_end(xf__detached *d);

/* Frees d as abandoned (its lease expires); XF_REFRESH_ABANDONED. */
int xf__detached_abandon(xf__detached *d);

#endif
