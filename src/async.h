/* The event-loop driver's internals, shared by async.c (calls, loads,
 * timers) and async_conn.c (the hiredis async connection). */
#ifndef XF_ASYNC_H
#define XF_ASYNC_H

#include <hiredis/async.h>
#include <stdint.h>

#include "client.h"
#include "flow.h"

typedef struct xf__acall xf__acall;

/* What an async loader holds: the call it completes. */
struct xf_async_load {
  xf__acall *call;
};

/* One accepted xf_async_get_or_compute call. It lives until its callback has
 * fired (or it was canceled), its command's hiredis callback has run and its
 * loader has completed: hiredis and a late loader may still hold it after
 * xf_async_close (it is then orphaned: ac is NULL). */
struct xf__acall {
  xf_async *ac; /* NULL once orphaned */
  xf__flow f;   /* not movable: f.key may point into itself */
  xf_policy p;  /* copies: the caller's may be gone before we are */
  char *key;
  size_t keylen;
  xf_value out;
  xf_async_loader_fn loader;
  void *ud;
  xf_async_callback_fn cb;
  void *privdata;
  xf_async_load load;
  int64_t load_t0_us;
  int in_loader; /* the loader is running on our stack */
  int loaded;    /* it completed there; loader_rc says how */
  int loader_rc;
  int finished;           /* DONE or canceled: the callback has fired (or never will) */
  int sent;               /* a command is with hiredis (its callback will run) */
  int loading;            /* the loader has not completed yet */
  int deferred_rc;        /* a SEND that could not go out: fed on the next tick */
  int64_t wake_ms;        /* WAIT */
  size_t heap_at;         /* index in the wait heap, SIZE_MAX when not waiting */
  xf__acall *prev, *next; /* every unfinished call */
  xf__acall *next_deferred;
  /* Fail-open loads (XF_LOAD_UNCACHED) of one key are shared: the first call's
   * loader runs, calls that need the same load meanwhile follow it. */
  xf__acall *followers, *next_follower; /* a leader's; a follower's link */
  xf__acall *next_leader;               /* in xf_async.leaders */
};

struct xf_async {
  xf_client *core; /* lazy_connect, never connected: rng, ids, stats, errors */
  xf_async_loop loop;
  xf__buf request; /* one encoding at a time: hiredis copies it */

  /* The connection (async_conn.c). */
  redisAsyncContext *rac; /* NULL while down */
  int usable;             /* commands may be queued on rac */
  int dying;              /* hiredis is freeing rac (its callbacks run with NULL) */
  int connected;
  int setup_rc;        /* AUTH/SELECT/SCRIPT LOAD failed on rac: its replies get this */
  size_t inflight;     /* commands on rac awaiting a reply */
  int64_t progress_ms; /* last sign of life: connect, a reply, the first send */

  /* The calls. */
  xf__acall *calls; /* every unfinished call */
  size_t ncalls;
  xf__acall **heap; /* waiters, earliest wake_ms first */
  size_t heap_len, heap_cap;
  xf__acall *deferred, *deferred_tail; /* fed their error on the next tick */
  xf__acall *leaders;                  /* calls running a fail-open load */
  int64_t armed_ms;                    /* when the loop timer fires; -1 = stopped */
  int depth;                           /* driver frames on the stack */
  int closing;
};

/* Driver frames: a user callback may call xf_async_close; the handle is
 * freed when the outermost frame leaves. */
void xf__async_enter(xf_async *ac);
void xf__async_leave(xf_async *ac);

/* Runs the flow of call from step until it must wait for something. */
void xf__async_advance(xf__acall *k, xf__step step);

/* Frees the call once nothing holds it any more. */
void xf__acall_release(xf__acall *k);

/* ---- async_heap.c: the waiters, earliest wake_ms first ------------------------ */

/* Makes room for need waiters (done when a call is accepted, so that a push
 * never fails). 0, or -1 when out of memory. */
int xf__aheap_reserve(xf_async *ac, size_t need);
void xf__aheap_push(xf_async *ac, xf__acall *k);
xf__acall *xf__aheap_pop(xf_async *ac); /* the earliest; the heap is not empty */

/* ---- async_conn.c --------------------------------------------------------- */

/* Starts connecting (AUTH, SELECT and SCRIPT LOADs queued first). XF_OK or
 * XF_ECONNECT / XF_ENOMEM with the message on the core. */
int xf__aconn_start(xf_async *ac);

/* Queues the call's SEND on the connection (connecting first if the breaker
 * allows). XF_OK, or the error to feed the flow. */
int xf__aconn_send(xf__acall *k);

/* When the connection's watchdog fires (INT64_MAX: none), and what to do
 * when it has: drop a connection that stopped answering. */
int64_t xf__aconn_deadline(const xf_async *ac);
void xf__aconn_check(xf_async *ac, int64_t now_ms);

/* Drops the connection for good (xf_async_close): its pending callbacks
 * then find their calls orphaned. */
void xf__aconn_close(xf_async *ac);

/* A deep copy of a reply, freeable with freeReplyObject; NULL when out of
 * memory. */
redisReply *xf__reply_copy(const redisReply *r);

#endif
