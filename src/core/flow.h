/* The get-or-compute flow as a sans-I/O state machine: it never touches a
 * socket, a clock, a thread or a sleep. A driver starts a call, then performs
 * the step the machine asks for and feeds back what came of it:
 *
 *   XF_STEP_SEND  send f->cmd (a command on f->key)  -> xf__flow_reply
 *   XF_STEP_LOAD  run the loader into &f->sink        -> xf__flow_loaded
 *   XF_STEP_WAIT  until f->wake_ms on the driver's    -> xf__flow_woke
 *                 monotonic clock
 *   XF_STEP_DONE  f->rc is the call's result; on XF_OK *out holds the value.
 *                 The flow has freed everything it held.
 *
 * Every input carries the driver's monotonic time in ms. The machine keeps
 * its state in the flow, never on the client, so calls may nest. */
#ifndef XF_FLOW_H
#define XF_FLOW_H

#include <stdint.h>

#include "entry.h"
#include "key.h"
#include "nest.h"
#include "reply.h"
#include "share.h"
#include "sink.h"

typedef enum xf__step { XF_STEP_SEND, XF_STEP_LOAD, XF_STEP_WAIT, XF_STEP_DONE } xf__step;

/* Why a LOAD runs: with the key's lease, after giving up waiting for another
 * caller's lease, or failing open (Redis cannot be used: nothing is written). */
typedef enum xf__load_kind {
  XF_LOAD_LEASED,
  XF_LOAD_GAVE_UP,
  XF_LOAD_UNCACHED
} xf__load_kind;

typedef struct xf__flow {
  /* The call. */
  xf_client *c;
  const xf_policy *p;
  const char *user_key; /* as given, for the loader */
  size_t user_keylen;
  xf__key key; /* prefixed, for Redis */
  xf_value *out;
  xf_interrupt_fn interrupt; /* the client's, copied: a pool lends the client */
  void *interrupt_ud;        /* to others while this call waits */

  /* What the driver acts on. */
  xf__cmd cmd;         /* SEND */
  struct xf_sink sink; /* LOAD */
  xf__load_kind load;  /* LOAD: why (a driver may share UNCACHED loads) */
  int64_t wake_ms;     /* WAIT */
  int rc;              /* DONE */

  /* Where the call is. */
  int state;
  int script_loading;                 /* a SCRIPT LOAD is on the wire (NOSCRIPT recovery) */
  int script_retried;                 /* at most one SCRIPT LOAD per command */
  int refresh;                        /* an early refresh of a valid value (not a miss) */
  int round;                          /* reads made while waiting */
  int had_value;                      /* a value (or a malformed entry) was read */
  int found_nothing;                  /* the release tells the waiters: not found */
  int64_t first_read_ms;              /* server time of the call's first read */
  xf__entry e;                        /* what the last read saw */
  char token[40];                     /* the lease held ("" = none) */
  int64_t start_ms;                   /* server time the computation is dated by */
  int64_t waited_from_ms, give_up_ms; /* the driver's clock */
  int64_t delta_us;
  xf__write w;
  xf__nest nest; /* while its loader runs: this thread computes key */
  char msg[256]; /* the loader's message, kept across the release */
} xf__flow;

/* Starts a call. Validates policy, out and key (XF_STEP_DONE with XF_EINVAL
 * or XF_ENOMEM when they are bad; XF_EINVAL too for a key a loader on this
 * thread is computing, see nest.h). The loader is the driver's: it must have
 * checked it. */
xf__step xf__flow_start(xf__flow *f, xf_client *c, const char *key, size_t keylen,
                        const xf_policy *p, xf_value *out, int64_t now_ms);

/* The outcome of a SEND: rc XF_OK with the reply (any type, error replies
 * included; the flow takes it), or the driver's error (XF_EIO, XF_ECONNECT,
 * XF_ENOMEM) with reply NULL. */
xf__step xf__flow_reply(xf__flow *f, int rc, xf__reply *reply, int64_t now_ms);

/* The outcome of a LOAD: the loader's return code and how long it ran. */
xf__step xf__flow_loaded(xf__flow *f, int loader_rc, int64_t delta_us, int64_t now_ms);

/* The outcome of a LOAD the driver answered without the loader (from the
 * share: another thread's load of the key): rc, and on XF_OK the value (data,
 * malloc'd, is the flow's). The value is served as XF_SOURCE_LOCAL. */
xf__step xf__flow_local(xf__flow *f, int rc, char *data, size_t len);

/* Whether the SEND step asks for the key's lease (a driver may hold it back
 * until the key's turn to load comes: see batch.c). */
int xf__flow_leasing(const xf__flow *f);

/* For drivers: performs a LOAD step with loader, in this thread (through the
 * client's share, if any, when Redis cannot be used) and feeds the flow. */
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
 * share s. xf__flow_share_begin joins its flight (waiting up to the policy's
 * wait_ms) as xf__share_begin does; a LEAD must be ended, once the loader
 * has filled f->sink (loader_rc its code, end_ms when it returned, on
 * xf__now_ms's clock), with xf__flow_share_end. */
xf__share_role xf__flow_share_begin(xf__flow *f, const xf_client *sc, char **data,
                                    size_t *len, int *rc);
void xf__flow_share_end(xf__flow *f, const xf_client *sc, int loader_rc, int64_t end_ms);

/* For the blocking drivers: sleeps until wake_ms (xf__now_ms's clock). */
void xf__sleep_until_ms(int64_t wake_ms);

/* A WAIT is over. */
xf__step xf__flow_woke(xf__flow *f, int64_t now_ms);

/* Whether the call's interrupt check (options.interrupt) asks it to stop. */
int xf__flow_interrupted(const xf__flow *f);

/* Ends the call with XF_ECANCELED (options.interrupt asked): from a WAIT, or
 * any step where the driver stops it; a SEND's reply wait the interrupt cut
 * short (xf__flow_reply with XF_ECANCELED) comes here too. A lease held (or
 * maybe held: a LEASE whose reply was cut) is released first: that SEND is
 * xf__flow_canceled, and the driver sends it with client->grace_ms. A value
 * already decided is freed. */
xf__step xf__flow_cancel(xf__flow *f);

/* How long the release of a call the interrupt ended may take (connect,
 * setup, reply): the server that was too slow may still be; past it the
 * lease is left to expire (lease_ms), and Ctrl-C is not held for longer. */
#define XF_CANCEL_GRACE_MS 250

/* Whether f's SEND is the release of a call the interrupt ended: to be sent
 * without asking the interrupt again, within a short grace (the lease
 * expires by itself when that fails). Inline, for the hot path: while a call
 * sends, only xf__flow_cancel has set f->rc to XF_ECANCELED (an outcome is
 * kept in f->rc before a release only). */
static inline int xf__flow_canceled(const xf__flow *f) { return f->rc == XF_ECANCELED; }

/* For the blocking drivers: sends f's command on f->c (with the grace of
 * xf__flow_canceled) and feeds the reply back. */
xf__step xf__flow_send(xf__flow *f);

/* For the blocking drivers: sleeps until wake_ms in slices of at most 50 ms,
 * asking the call's interrupt after each. Non-zero: it asked to stop (the
 * driver then calls xf__flow_cancel). */
int xf__flow_sleep(const xf__flow *f, int64_t wake_ms);

#endif
