/* The connection engine: one connection to one Redis server as bytes in and
 * bytes out, with no I/O of its own (h11's shape; hiredis' redisContext
 * without the descriptor). A driver owns the stream and moves bytes and
 * time; the engine holds everything else about the connection:
 *
 *   - the setup a fresh stream runs first (setup.h: AUTH, SELECT, READONLY,
 *     the scripts' preload) and the near cache's CLIENT TRACKING, queued
 *     ahead of any command, their replies judged inside: a refusal fails the
 *     commands queued with its code and the stream is done;
 *   - commands with their completions, answered in order (ASKING ahead of a
 *     redirected one; a plain read sent as the read script when the
 *     connection's clock estimate is not fresh, one script per refresh);
 *   - the output to write and the replies read (hiredis' reader);
 *   - the server's clock estimate (clock.h), the breaker (breaker.h), and
 *     what a failed stream means: which commands may go once more on a new
 *     stream, which fail with what code, whether the breaker trips, why.
 *
 * Typical driver:
 *
 *   if (!connected) { rc = xf__link_allows(l, now); open the stream;
 *                     xf__link_start(l, now); }
 *   xf__link_submit(l, cmd, 0, now, done, ud);
 *   while (waiting) {
 *     xf__link_output(l, &p, &n); written = send(p, n); xf__link_written(l, written);
 *     got = recv(buf); if (xf__link_feed(l, buf, got, now) != XF_OK) close the stream;
 *     on a stream failure: xf__link_fail(l, rc, how, why, now); close the stream;
 *   }
 *
 * Every completion runs exactly once: with a reply (XF_OK), or with the
 * code the engine decided (the connection failed, a setup command was
 * refused, an ASKING refused), or XF__LINK_AGAIN: the peer closed a working
 * connection before the command was answered, and the driver may send it
 * once more on a new stream (XF__LINK_RESENT). */
#ifndef XF_LINK_H
#define XF_LINK_H

#include <hiredis/read.h>
#include <stddef.h>
#include <stdint.h>

#include "breaker.h"
#include "clock.h"
#include "near.h"
#include "reply.h"
#include "resp.h"

struct xf_client;
struct xf__ncache;
struct xf__track_node;
typedef struct xf__link xf__link;

/* ---- the near cache's tracking, as hooks the near cache fills ---------------- */

/* The link layer sits below the near cache: it arms a connection's CLIENT
 * TRACKING through these, registered once by the near cache when one is
 * made (xf__link_set_tracking). */
#define XF__LINK_ARM_LATER 1
typedef struct xf__link_tracking {
  /* For a data connection of c to host:port (or unix_path) being set up:
   * XF_OK with the REDIRECT id and the ticket the connection keeps;
   * XF__LINK_ARM_LATER (without wait) when the node's invalidation
   * connection is not open yet (t->node set: ask again once due); or an
   * XF_E* code (the connection serves untracked). */
  int (*arm)(struct xf__ncache *n, struct xf_client *c, const char *host, int port,
             const char *unix_path, int wait, long long *redirect_id, xf__track *t);
  int (*due)(struct xf__track_node *node);  /* arm again now? */
  void (*watch)(xf__track *t, int fd);      /* tracked: watch fd */
  void (*lost)(const xf__track *t, int fd); /* the connection goes */
  int (*stale)(const xf__track *t);         /* armed under a lost one */
} xf__link_tracking;

void xf__link_set_tracking(const xf__link_tracking *hooks);

/* ---- the engine ------------------------------------------------------------------ */

/* A command's completion. rc XF_OK with *reply (an error reply too): take it
 * by setting *reply to NULL, else it is freed after; any other rc with
 * *reply NULL (XF__LINK_AGAIN: may be resent). */
typedef void xf__link_fn(xf__link *l, void *ud, int rc, xf__reply **reply);

#define XF__LINK_AGAIN 1 /* a completion's rc: send it once more, on a new stream */

/* How the engine runs (xf__link_init's flags, with XF_SETUP_REPLICA and
 * XF_SETUP_SCRIPTS for the setup). */
enum {
  XF__LINK_ARM_WAIT = 1 << 8,   /* tracking: wait for the invalidation connection
                                   (else the connection serves untracked until it
                                   is open, then arms before a later command) */
  XF__LINK_ONE_SCRIPT = 1 << 11 /* each reply is judged before the next is fed
                                  (an event loop): a plain read queued behind a
                                  read script on its way goes plain, one script
                                  per refresh; else (a pipeline judged after all
                                  its replies) each goes as the clock says */
};

/* xf__link_submit's opts. */
enum {
  XF__LINK_ASKING = 1, /* ASKING first (a Cluster ASK redirection) */
  XF__LINK_RESENT = 2, /* sent once more after XF__LINK_AGAIN: never again */
  XF__LINK_FRESH = 4   /* on a stream opened for it: a close is no idle cut */
};

/* xf__link_fail's how. */
enum {
  XF__LINK_BROKEN,      /* the stream failed (reset, TLS, unreadable) */
  XF__LINK_TIMEOUT,     /* no reply (or connect) within its timeout */
  XF__LINK_PEER_CLOSED, /* the server closed it (end of stream) */
  XF__LINK_CANCELED     /* the driver gave up (an interrupt, a release's grace):
                           says nothing about the server */
};

/* xf__link_feed's result beyond XF_OK. */
#define XF__LINK_CLOSE                                                                     \
  2                     /* the engine is done with the stream (a setup refused,            \
                           an unreadable reply): the driver closes it; every               \
                           completion has run */
#define XF__LINK_GONE 3 /* a completion reset the link: stop touching it */

typedef struct xf__link_pending {
  xf__link_fn *fn; /* NULL: the engine's own (setup, ASKING) */
  void *ud;
  xf__track *track_out; /* the command's: set when its reply comes */
  unsigned char kind;   /* what it is (link.c) */
  unsigned char opts;
} xf__link_pending;

struct xf__link {
  struct xf_client *c; /* options, the reason, stats, events (borrowed) */
  const char *host;    /* borrowed; NULL: unix_path */
  int port;
  const char *unix_path;
  int flags;
  int fd; /* the stream's descriptor once connected (tracking's watch); -1 */
  /* The stream's protocol state, fresh on every xf__link_start. */
  int live;        /* started and not failed */
  int connected;   /* xf__link_connected since the start */
  int ready;       /* its setup was answered, none refused */
  int setup_left;  /* setup replies still awaited */
  int setup_rc;    /* a setup command's refusal (XF_OK: none) */
  size_t answered; /* replies to commands since the queue was last empty */
  redisReader *rd;
  xf__buf out; /* to write, from out_at */
  size_t out_at;
  xf__link_pending *fifo; /* awaiting replies, oldest first (a ring) */
  size_t fifo_at, fifo_len, fifo_cap;
  unsigned gen;        /* one more on every start and failure */
  uint64_t stream;     /* this stream's number among the client's (c->streams), from
                          1: a command's stream_out (resp.h) */
  int64_t progress_ms; /* last sign of life: start, connect, a reply */
  int64_t refresh_ms;  /* when a read script last went to refresh the clock (-1) */
  /* Across streams. */
  xf__clock *clock;    /* the server's clock (heap: a flow's pointer to it outlives
                          an array of links growing); NULL when out of memory */
  xf__breaker breaker; /* no reconnect while open */
  int was_up;          /* it was connected once: a connect now is a reconnect */
  int setup_closes;    /* streams in a row the peer closed during their setup */
  int setup_again;     /* the last stream was one of them, the first: connect once
                          more (xf__link_setup_again) */
  int refused_rc;      /* XF_EAUTH / XF_EINVAL / XF_ETLS: the last failure was a
                          misconfiguration, which the open breaker repeats */
  char why[256];       /* the last failure's reason */
  char *why_to;        /* also written there (256 bytes) when not NULL */
  /* The near cache's tracking (node NULL: not tracked). */
  xf__track track;
  xf__track arming;                 /* the CLIENT TRACKING awaiting its reply */
  struct xf__track_node *arm_later; /* arm before a later command once due */
};

/* Sets l up for host:port (or unix_path when host is NULL; both borrowed) of
 * client c, with flags (XF__LINK_* | XF_SETUP_*). Not started. XF_OK or
 * XF_ENOMEM. */
int xf__link_init(xf__link *l, struct xf_client *c, const char *host, int port,
                  const char *unix_path, int flags);
void xf__link_free(xf__link *l); /* NULL-safe; its completions are not run */

/* "host:port" or the Unix path, for messages. */
const char *xf__link_name(const xf__link *l, char *buf, size_t len);

/* Whether a stream may be opened now (the breaker): XF_OK, or the code the
 * open breaker repeats with "circuit open after: ..." on the client. */
int xf__link_allows(xf__link *l, int64_t now_ms);

/* A fresh stream (connecting or connected): forgets the last one's protocol
 * state and the clock, queues the setup (and the tracking when the client
 * has a near cache). XF_OK or XF_ENOMEM. */
int xf__link_start(xf__link *l, int64_t now_ms);

/* The stream is connected on fd (TLS: after the handshake). */
void xf__link_connected(xf__link *l, int fd, int64_t now_ms);

/* The server is up (the breaker closes, the event says so once per
 * episode): the event loop after connecting, blocking after the setup. */
void xf__link_up(xf__link *l);

/* On a started link (xf__link_start, not failed since): queues cmd (opts
 * XF__LINK_*) for fn(l, ud, ...): its RESP goes to the
 * output; a plain read as the read script when the clock is not fresh (and
 * no script to refresh it is on the way). cmd->clock_out is set now,
 * cmd->track_out when the reply comes. XF_OK or XF_ENOMEM (nothing queued). */
int xf__link_submit(xf__link *l, const xf__cmd *cmd, int opts, int64_t now_ms,
                    xf__link_fn *fn, void *ud);

/* The bytes to write (*len 0: none), and how many were written. */
static inline void xf__link_output(const xf__link *l, const char **data, size_t *len) {
  *data = l->out.data + l->out_at;
  *len = l->out.len - l->out_at;
}
static inline void xf__link_written(xf__link *l, size_t n) {
  l->out_at += n;
  if (l->out_at >= l->out.len)
    l->out.len = l->out_at = 0;
}

/* Bytes read from the stream (a started link, len > 0): the replies they
 * complete go to their completions in order. XF_OK, XF__LINK_CLOSE or
 * XF__LINK_GONE. */
int xf__link_feed(xf__link *l, const char *data, size_t len, int64_t now_ms);

/* The stream failed (how: XF__LINK_*; rc its code, why its reason): the
 * engine decides the rest and runs every pending completion. The driver
 * closes the stream; the next stream starts with xf__link_start. */
void xf__link_fail(xf__link *l, int rc, int how, const char *why, int64_t now_ms);

/* Whether the stream just failed was closed by the peer during its setup,
 * the first in a row (a CLIENT KILL or a proxy's cut-off landing in the
 * setup's round trip): the breaker stayed closed and the driver connects
 * once more at once. A second one in a row trips the breaker. */
static inline int xf__link_setup_again(const xf__link *l) { return l->setup_again; }

/* The stream is about to close: what it tracked is invalidated no more (told
 * before the descriptor goes). */
void xf__link_untrack(xf__link *l);

/* Forgets the stream without a word (a forked child's copy of it, or its
 * close): completions are not run; the breaker is left as is. */
void xf__link_forget(xf__link *l);

/* Commands (and setup commands) awaiting a reply. */
static inline size_t xf__link_pending_count(const xf__link *l) { return l->fifo_len; }

/* Whether the tracking was armed under an invalidation connection since lost
 * (the stream must be set up again to be tracked). */
int xf__link_track_stale_hook(const xf__link *l);
static inline int xf__link_track_stale(const xf__link *l) {
  return l->track.node && xf__link_track_stale_hook(l);
}

/* When the watchdog gives up on the stream (INT64_MAX: nothing awaited). */
int64_t xf__link_deadline(const xf__link *l, int connected, int connect_ms, int command_ms);

#endif
