/* The event-loop driver's internals, shared by async.c (calls, loads,
 * timers), async_conn.c (the connections' lives), async_wire.c (their bytes:
 * commands out, replies in, over the project's stream, plain or TLS) and
 * async_router.c (which connection a command goes to, as the fleet says: the
 * server, or a cluster's nodes). */
#ifndef XF_ASYNC_H
#define XF_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "client_io.h"
#include "fleet.h"
#include "flow.h"
#include "link.h"
#include "near.h"
#include "reply.h"
#include "resp.h"
#include "share.h"
#include "stream.h"

typedef struct xf__acall xf__acall;

typedef struct xf_async_conn xf__aconn;

/* One connection to one server (the standalone server, or a cluster node):
 * the connection engine (link.h: setup and scripts' preload first, replies
 * in order, the clock, the breaker, what a failure means) over the
 * project's stream (stream.h: plain or TLS), driven by the loop's readiness
 * events. Every command's completion runs exactly once: with its reply, or
 * with an error when the connection went away first (lost, a failed
 * connect, a watchdog's timeout, xf_async_close). It lives until
 * xf_async_close: a call may point at it. */
struct xf_async_conn {
  xf_async *ac;
  char *host; /* owned; NULL = the core's Unix socket */
  int port;
  xf__link link; /* everything but the bytes' way; live: commands may be queued */
  /* The transport (async_wire.c); up while s is connecting or open. */
  int up;
  xf__stream s;           /* must not move while open: cn is never moved */
  void *watch;            /* the adapter's state for one descriptor; NULL = none yet */
  unsigned watch_gen;     /* s.fd_gen when it was made (s.fd changes: the resolver's
                             pipe, then a socket per address tried, maybe by the
                             same number) */
  int watching;           /* XF_ASYNC_* asked of the adapter */
  int read_wants_write;   /* TLS: a read waits for the socket to be writable */
  int dying;              /* its commands are being told it went away */
  int connected;          /* the stream is open (TLS: after the handshake) */
  int failed_connect;     /* never came up: its commands were never written */
  int is_waker;           /* not a connection: the near cache's wake pipe (async_wake.c) */
  int write_soon;         /* eager: output to write as the driver's frame ends */
  unsigned long fork_gen; /* of the process that opened the stream */
};

/* The connection whose engine l is. */
#define XF__ACONN_OF(l) ((xf__aconn *)((char *)(l)-offsetof(xf__aconn, link)))

/* What an async loader holds: the call it completes. */
struct xf_async_load {
  xf__acall *call;
};

/* One accepted xf_async_get_or_compute call. It lives until its callback has
 * fired (or it was canceled), its command's reply callback has run and its
 * loader has completed: its connection and a late loader may still hold it after
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
  int ud_kept; /* ud is policy.loader_ud_keep's: dropped when the call is freed */
  xf_async_callback_fn cb;
  void *privdata;
  xf_async_load load;
  int64_t load_t0_us;
  int in_loader; /* the loader is running on our stack */
  int loaded;    /* it completed there; loader_rc says how */
  int loader_rc;
  int finished;        /* DONE or canceled: the callback has fired (or never will) */
  int sent;            /* a command is on a connection (its callback will run) */
  int loading;         /* the loader has not completed yet */
  int deferred_rc;     /* a SEND that could not go out: fed on the next tick */
  int deferred_start;  /* decided at start (a near hit, a bypass): start_step, */
  xf__step start_step; /* DONE or LOAD, is taken on the next tick */
  int64_t wake_ms;     /* WAIT (or, with resend, a cluster retry's backoff) */
  /* Routing of the current command (async_router.c). */
  xf__aconn *conn;        /* where it was sent */
  xf__trip trip;          /* its way through the fleet (fleet.h); trip.act
                             XF_ROUTE_DONE: the flow's next command starts afresh */
  int attempts;           /* seeds tried for this command (standalone) */
  int resend;             /* the heap wakes it to send again (a backoff, or
                             the engine's XF__LINK_AGAIN) */
  int again;              /* its command goes once more (XF__LINK_RESENT) */
  xf__acall *next_parked; /* waiting for the cluster mode or map */
  size_t heap_at;         /* index in the wait heap, SIZE_MAX when not waiting */
  xf__acall *prev, *next; /* every unfinished call */
  xf__acall *next_deferred;
  /* Fail-open loads (XF_LOAD_UNCACHED) of one key are shared: the first call's
   * loader runs, calls that need the same load meanwhile follow it. */
  xf__acall *followers, *next_follower; /* a leader's; a follower's link */
  xf__acall *next_leader;               /* in xf_async.leaders */
  xf__flight share; /* with a share: its flight instead (drivers/flight.h) */
  /* A load that outlives its loader's return (async_bound.c): its lease's
   * renewals and its soft or hard timeout, on the wait heap (k->loading). */
  xf__renewal renew;
  int renewing;
  int64_t load_deadline; /* INT64_MAX: none */
  xf__acall *moved;      /* timed out: the call its load went on as */
};

struct xf_async {
  xf_client *core; /* lazy_connect, never connected: rng, ids, stats, errors */
  xf_async_loop loop;

  /* The connections (async_conn.c) and where commands go (async_router.c). */
  xf__aconn **conns; /* conns[0..nseeds-1]: options.host's seeds; then cluster nodes */
  int nconns, conns_cap;
  xf__fleet fleet;                 /* the seeds, the nodes' connections, the question */
  xf__acall *parked, *parked_tail; /* waiting for the probe (mode or map) */
  struct xf__aprobe *probe;        /* the probe's command on the wire */

  /* The calls. */
  xf__acall *calls; /* every unfinished call */
  size_t ncalls;
  xf__acall **heap; /* waiters, earliest wake_ms first */
  size_t heap_len, heap_cap;
  xf__acall *deferred, *deferred_tail; /* fed their error on the next tick */
  xf__acall *leaders;                  /* calls running a fail-open load */
  int64_t armed_ms;                    /* when the loop timer fires; -1 = stopped */
  int depth;                           /* driver frames on the stack */
  int eager;      /* xf_async_set_eager: commands written as the frame ends */
  int write_soon; /* some connection's write_soon is set */
  int closing;
  /* Corked sends (async_many.c): the plain reads waiting for xf_async_uncork. */
  int corked;
  int autocork;    /* xf_async_set_autocork */
  int auto_corked; /* corked by a call started while others were in flight: the
                      timer, armed at 0, uncorks on the loop's next turn */
  xf__acall **cork;
  size_t ncorked, corked_cap;
  xf__aconn *waker; /* the near cache's wake pipe, watched (async_wake.c); NULL = none */
  int wake_rd;      /* its read end; -1 = none (the waits poll) */
  /* A fork's child that keeps the handle (async_fork.c). */
  unsigned long fork_gen; /* of the process its connections and wake pipe are */
  int forking;            /* the parent's connections are being dropped: their commands'
                             failures are fed on the next tick */
};

/* Driver frames: a user callback may call xf_async_close; the handle is
 * freed when the outermost frame leaves. Entering the outermost frame in a
 * fork's child first drops what the parent holds (xf__afork_check). */
void xf__async_enter(xf_async *ac);
void xf__async_leave(xf_async *ac);

/* Runs the flow of call from step until it must wait for something. */
void xf__async_advance(xf__acall *k, xf__step step);

/* k's LOAD step (async_load.c): 1 with *step the next one when the loader
 * completed at once, 0 when k resumes later. */
int xf__async_load(xf_async *ac, xf__acall *k, xf__step *step);

/* async_bound.c: k's loader returned without completing: its renewals and
 * timeout go on the wait heap (nothing when it has neither); the heap's
 * wake-up of a loading call (xf__async_load_woke); the call that owns the
 * load a completion is for (a timed-out call's load went on as another);
 * k's load completed: off the heap. */
void xf__async_load_bounds(xf_async *ac, xf__acall *k);
/* A call of k's key, policy and loader, with no callback of the user's,
 * linked (its flow not started); NULL: no memory. */
xf__acall *xf__async_spawn(xf_async *ac, const xf__acall *k);
void xf__async_load_woke(xf_async *ac, xf__acall *k, int64_t now_ms);
xf__acall *xf__async_load_owner(xf__acall *k);
void xf__async_load_unbound(xf_async *ac, xf__acall *k);

/* Frees the call once nothing holds it any more. */
void xf__acall_release(xf__acall *k);

/* ---- async_fork.c: a fork's child that keeps the handle ------------------------ */

/* In a fork's child (its loop re-made: uv_loop_fork, event_reinit), once:
 * the client's identity renewed (lease tokens, draws), the parent's
 * connections dropped without a byte on them (their commands end as lost,
 * on the next tick), its question asked again, its wake pipe replaced. The
 * next command opens a connection of the child's own. Nothing otherwise. */
void xf__afork_check(xf_async *ac);

/* ---- async_heap.c: the waiters, earliest wake_ms first ------------------------ */

/* Makes room for need waiters (done when a call is accepted, so that a push
 * never fails). 0, or -1 when out of memory. */
int xf__aheap_reserve(xf_async *ac, size_t need);
void xf__aheap_push(xf_async *ac, xf__acall *k);
xf__acall *xf__aheap_pop(xf_async *ac);            /* the earliest; the heap is not empty */
void xf__aheap_remove(xf_async *ac, xf__acall *k); /* k, if it is on the heap */

/* ---- async_wake.c: wake-on-write (a share's near cache) ----------------------- */

/* Watches the near cache's wake pipe on the loop (nothing without a near
 * cache; without a pipe or a watch the waits poll). XF_OK. */
int xf__awake_open(xf_async *ac);
void xf__awake_close(xf_async *ac);
/* The pipe is readable: waiters whose key changed are due now. */
void xf__awake_ready(xf_async *ac);
/* Whether k, entering a wait for another caller's load, missed its wake:
 * its key was invalidated while its read was on the wire (the wake pipe
 * drained before the call waited). Then it reads again at once. */
int xf__awake_missed(const xf_async *ac, const xf__acall *k);
/* In a fork's child: the wake pipe is the parent's (its near cache writes
 * to it, its loop reads it): unwatched, the child's copies closed, a pipe
 * of the child's own watched instead (none: the waits poll). */
void xf__awake_forked(xf_async *ac);

/* Feeds a SEND's error to the call on the next tick (never on the stack of
 * xf_async_get_or_compute, so no loader or callback runs there). */
void xf__async_defer(xf_async *ac, xf__acall *k, int rc);

/* ---- async_conn.c --------------------------------------------------------- */

/* The connection to host:port (host copied; NULL = the Unix socket) among
 * ac's, added (not connected) if new. NULL when out of memory. */
xf__aconn *xf__aconn_at(xf_async *ac, const char *host, int port);

/* Connects cn if it is down and its breaker allows (the setup and the SCRIPT
 * LOADs queued first). XF_OK or XF_ECONNECT / XF_ENOMEM with the message on
 * the core. */
int xf__aconn_open(xf__aconn *cn);

/* Queues the call's command on cn (ASKING first when asking), connecting
 * first if needed. XF_OK, or the error to feed the flow. */
int xf__aconn_send(xf__acall *k, xf__aconn *cn, int asking);

/* Queues cmd on cn (open) for fn (link.h); a router command. */
int xf__aconn_queue(xf__aconn *cn, xf__link_fn *fn, void *privdata, const xf__cmd *cmd);

/* Queues cmd on cn (open), its reply ignored (ASKING, SCRIPT LOAD). */
int xf__aconn_queue_ignored(xf__aconn *cn, const xf__cmd *cmd);

/* When the earliest connection watchdog fires (INT64_MAX: none), and what to
 * do when it has: drop the connections that stopped answering. */
int64_t xf__aconn_deadline(const xf_async *ac);
void xf__aconn_check(xf_async *ac, int64_t now_ms);

/* In a fork's child: drops every connection the parent opened, as lost
 * (XF_EIO; the breaker untouched, nothing resent), without a byte on it:
 * unwatched, the child's copy of the socket closed. */
void xf__aconn_forked(xf_async *ac);

/* Drops every connection for good (xf_async_close): their pending callbacks
 * then find their calls orphaned. */
void xf__aconn_close(xf_async *ac);

/* How many connections are up. */
int xf__aconn_count(const xf_async *ac);

/* ---- async_conn.c, for async_wire.c ---------------------------------------- */

/* The stream came up (connected, TLS handshake done). */
void xf__aconn_connected(xf__aconn *cn);

/* The stream failed (s.err, s.errstr say why): the engine decides (a failed
 * connect trips the breaker; a lost connection is counted). Drops cn. */
void xf__aconn_failed(xf__aconn *cn);

/* ---- async_wire.c: the bytes of a connection -------------------------------- */

/* Starts cn's stream to its server (the client's TLS when it has one). XF_OK
 * (connecting in the background), else the stream's code with cn down and
 * s.errstr saying why. */
int xf__awire_open(xf__aconn *cn);

/* cn has output to write: watched for writability (eager: written as the
 * driver's outermost frame ends, xf__awire_write_soon). */
void xf__awire_rewatch(xf__aconn *cn);

/* The outermost frame ends: writes what the eager handle's connections have
 * queued meanwhile, as far as their sockets take it; the rest (and a
 * failure) waits for the loop's writable event. No user code runs. */
void xf__awire_write_soon(xf_async *ac);

/* Does what cn's descriptor is ready for (XF_ASYNC_*): the connect and
 * handshake, writing, reading and answering the replies. */
void xf__awire_step(xf__aconn *cn, int events);

/* Closes cn's stream (no byte waited for) and hands the failure (rc, how:
 * xf__link_fail) to its engine, which tells each of its commands; with
 * dying, cn refuses commands while they are told. cn is then down: the next
 * send opens it again. */
void xf__awire_drop(xf__aconn *cn, int dying, int rc, int how, const char *why);

/* Closes cn's stream after the engine was done with it (XF__LINK_CLOSE). */
void xf__awire_close(xf__aconn *cn);

/* The reply path of a call's command on cn's engine l (rc XF_OK with *reply,
 * taken when the flow takes it; or the connection's failure). */
void xf__aconn_reply(xf__link *l, xf__acall *k, int rc, xf__reply **reply);

/* ---- async_many.c: corked sends ----------------------------------------------- */

/* While the handle is corked, takes k's command for cn (a first plain read
 * of an entry on a connected cn with a fresh clock) to send with the others
 * at xf_async_uncork: 1, with k sent; 0: send it as usual. */
int xf__acork_take(xf__acall *k, xf__aconn *cn, int asking);

/* A call is starting: with autocork, corks the handle when others are in
 * flight (uncorked by the timer on the loop's next turn). */
void xf__acork_auto(xf_async *ac);

/* xf_async_close: the corked calls are not sent, the cork freed. */
void xf__acork_drop(xf_async *ac);

/* ---- async_router.c: where commands go --------------------------------------- */

/* cn failed to come up: if it is the seed in use, the next one is. */
void xf__aseeds_down(xf__aconn *cn);

/* A NULL reply from cn: when cn never came up (the command was never written)
 * and another seed is left to try for this command, sends it there and
 * returns 1; 0 when the reply stands. */
int xf__aseeds_resend(xf__acall *k, xf__aconn *cn);

/* Sets up where commands go from the options: the seeds' connections, the
 * mode (OFF or a Unix socket: standalone; ON: cluster; AUTO: asked on the
 * first connection). With connect_now, starts connecting (and asking).
 * XF_OK, or XF_EINVAL / XF_ENOMEM / XF_ECONNECT with the message on the core. */
int xf__aroute_open(xf_async *ac, int connect_now);

/* In a fork's child: the question on the wire is the parent's, forgotten
 * (before its connection is dropped); then (after) asked again on a
 * connection of the child's own for the calls parked on it, or they get
 * the failure on the next tick. */
void xf__aroute_forget_question(xf_async *ac);
void xf__aroute_ask_again(xf_async *ac);

/* Frees the router's state (before xf__aconn_close). */
void xf__aroute_free(xf_async *ac);

/* Sends the call's command where it belongs: the server, or its key's node
 * (parked until the mode or the map is known). XF_OK, or the error to feed
 * the flow. */
int xf__aroute_send(xf__acall *k);

/* In cluster mode, before the flow sees a reply (rc: XF_OK with r, or the
 * connection's error): follows MOVED / ASK / TRYAGAIN / CLUSTERDOWN / NOSCRIPT
 * and nodes that stopped answering. Returns 1 when it took the call over. */
int xf__aroute_reply(xf__acall *k, int rc, const xf__reply *r);

#endif
