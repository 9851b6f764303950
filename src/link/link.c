/* The connection engine (link.h): a connection's protocol state, bytes in
 * and bytes out, no I/O. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "entry.h"
#include "event.h"
#include "fleet.h"
#include "link.h"
#include "reader.h"
#include "setup.h"

/* What a queued command is: a caller's, the engine's ASKING, or a setup
 * command (SETUP + its xf__setup_kind). */
enum { CALL, ASKING, SETUP };
enum {
  REFRESH = 8,  /* opts: a read script sent to refresh the clock */
  REFUSED = 16, /* opts: the ASKING ahead of it was refused */
};

static const xf__link_tracking *tracking; /* set once a near cache is made */

void xf__link_set_tracking(const xf__link_tracking *hooks) {
  __atomic_store_n(&tracking, hooks, __ATOMIC_RELEASE);
}

static const xf__link_tracking *hooks(void) {
  return __atomic_load_n(&tracking, __ATOMIC_ACQUIRE);
}

int xf__link_init(xf__link *l, struct xf_client *c, const char *host, int port,
                  const char *unix_path, int flags) {
  memset(l, 0, sizeof *l);
  l->c = c;
  l->host = host;
  l->port = port;
  l->unix_path = host ? NULL : unix_path;
  l->flags = flags;
  l->fd = -1;
  l->refresh_ms = -1;
  if (!(l->clock = malloc(sizeof *l->clock)))
    return XF_ENOMEM;
  xf__clock_reset(l->clock);
  return XF_OK;
}

/* Drops the stream's protocol state (the tracking told, when tell). */
static void reset(xf__link *l, int tell) {
  const xf__link_tracking *h = hooks();
  if (l->track.node && tell && h) /* what it tracked is invalidated no more */
    h->lost(&l->track, l->fd);
  l->track.node = l->arming.node = l->arm_later = NULL;
  if (l->rd)
    redisReaderFree(l->rd);
  l->rd = NULL;
  l->out.len = l->out_at = 0;
  l->fifo_at = l->fifo_len = 0;
  l->live = l->connected = l->ready = l->setup_left = 0;
  l->answered = 0;
  l->fd = -1;
  l->gen++;
}

void xf__link_free(xf__link *l) {
  if (!l)
    return;
  reset(l, 1);
  xf__buf_free(&l->out);
  free(l->fifo);
  free(l->clock);
  memset(l, 0, sizeof *l);
}

void xf__link_forget(xf__link *l) { reset(l, 0); }

void xf__link_untrack(xf__link *l) {
  const xf__link_tracking *h = hooks();
  if (l->track.node && h)
    h->lost(&l->track, l->fd);
  l->track.node = NULL;
}

const char *xf__link_name(const xf__link *l, char *buf, size_t len) {
  if (l->host)
    snprintf(buf, len, "%s:%d", l->host, l->port);
  else
    snprintf(buf, len, "%s", l->unix_path ? l->unix_path : "?");
  return buf;
}

int xf__link_allows(xf__link *l, int64_t now_ms) {
  if (xf__breaker_allows(&l->breaker, now_ms))
    return XF_OK;
  return xf__fail(l->c, l->refused_rc ? l->refused_rc : XF_ECONNECT,
                  "circuit open after: %s", l->breaker.why);
}

/* ---- the queue ------------------------------------------------------------------ */

static inline __attribute__((always_inline)) int
push(xf__link *l, const xf__cmd *cmd, int kind, int opts, xf__link_fn *fn, void *ud) {
  if (l->fifo_len == l->fifo_cap) { /* grown into a straight line again */
    size_t cap = l->fifo_cap ? 2 * l->fifo_cap : 16;
    xf__link_pending *grown = malloc(cap * sizeof *grown);
    if (!grown)
      return XF_ENOMEM;
    for (size_t i = 0; i < l->fifo_len; i++)
      grown[i] = l->fifo[(l->fifo_at + i) % l->fifo_cap];
    free(l->fifo);
    l->fifo = grown;
    l->fifo_cap = cap;
    l->fifo_at = 0;
  }
  size_t len = l->out.len;
  if (xf__resp_append_cmd(&l->out, cmd) != 0) {
    l->out.len = len;
    return XF_ENOMEM;
  }
  if (l->fifo_len == 0)
    l->answered = 0;
  size_t at = l->fifo_at + l->fifo_len++;
  l->fifo[at < l->fifo_cap ? at : at - l->fifo_cap] =
      (xf__link_pending){fn, ud, kind == CALL ? cmd->track_out : NULL, (unsigned char)kind,
                         (unsigned char)opts};
  return XF_OK;
}

static inline xf__link_pending pop(xf__link *l) {
  xf__link_pending p = l->fifo[l->fifo_at];
  if (++l->fifo_at == l->fifo_cap)
    l->fifo_at = 0;
  l->fifo_len--;
  return p;
}

/* ---- setup ------------------------------------------------------------------------ */

/* With a near cache: CLIENT TRACKING on REDIRECT to the node's invalidation
 * connection, appended to s. Without wait that connection is opened on the
 * tracker's thread: until it is, the connection serves untracked (its reads
 * are never kept) and arms before a later command once it is due. So does
 * a connection whose wait ended in a failed open (the server refused it, a
 * timeout): it asks again, without waiting, once the open's backoff ends. */
static void arm(xf__link *l, xf__setup *s, int wait) {
  struct xf_client *c = l->c;
  const xf__link_tracking *h = hooks();
  l->arming.node = l->arm_later = NULL;
  if (!c->near || !h)
    return;
  long long id;
  int rc = h->arm(c->near, c, l->host, l->port, l->unix_path, wait, &id, &l->arming);
  if (rc == XF_OK)
    xf__setup_add_tracking(s, id);
  else if (rc == XF__LINK_ARM_LATER || wait)
    l->arm_later = l->arming.node;
  if (rc != XF_OK) { /* an untracked connection is no failure */
    l->arming.node = NULL;
    c->errstr[0] = '\0';
  }
}

/* The setup was answered (or there was none): the stream serves. */
static void set_ready(xf__link *l) {
  l->ready = 1;
  l->setup_closes = 0;
}

static int queue_setup(xf__link *l, const xf__setup *s) {
  for (int i = 0; i < s->n; i++) {
    if (push(l, &s->cmd[i], SETUP + (int)s->kind[i], 0, NULL, NULL) != XF_OK)
      return xf__fail(l->c, XF_ENOMEM, "out of memory for the connection setup");
    l->setup_left++;
  }
  return XF_OK;
}

int xf__link_start(xf__link *l, int64_t now_ms) {
  reset(l, 1);
  l->setup_again = 0;
  if (!(l->rd = xf__reader_create()))
    return xf__fail(l->c, XF_ENOMEM, "out of memory for a connection");
  l->live = 1;
  l->stream = ++l->c->streams;
  l->setup_rc = XF_OK;
  l->progress_ms = now_ms;
  l->refresh_ms = -1;
  if (l->clock) /* maybe another server (a failover) */
    xf__clock_reset(l->clock);
  xf__setup s;
  xf__setup_build(l->c, l->flags & (XF_SETUP_REPLICA | XF_SETUP_SCRIPTS), &s);
  arm(l, &s, l->flags & XF__LINK_ARM_WAIT);
  int rc = queue_setup(l, &s);
  if (rc == XF_OK && l->setup_left == 0)
    set_ready(l);
  return rc;
}

void xf__link_connected(xf__link *l, int fd, int64_t now_ms) {
  l->fd = fd;
  l->connected = 1;
  l->progress_ms = now_ms;
}

void xf__link_up(xf__link *l) {
  char name[300];
  l->refused_rc = 0;
  xf__server_up(l->c, &l->breaker, &l->was_up, xf__link_name(l, name, sizeof name));
}

/* ---- commands --------------------------------------------------------------------- */

int xf__link_track_stale_hook(const xf__link *l) {
  const xf__link_tracking *h = hooks();
  return h && h->stale(&l->track);
}

/* The tracking armed again before a command when its invalidation
 * connection was lost (without ARM_WAIT: Redis takes a new REDIRECT on the
 * same connection; with it, the blocking connection is closed and set up
 * again), or is open now (or due to be asked for) where it was not at the
 * setup. Never waits for the open. */
static int rearm(xf__link *l) {
  const xf__link_tracking *h = hooks();
  int stale = !(l->flags & XF__LINK_ARM_WAIT) && xf__link_track_stale(l);
  if (!stale && !(l->arm_later && h && h->due(l->arm_later)))
    return XF_OK;
  if (stale)
    h->lost(&l->track, l->fd);
  l->track.node = NULL;
  xf__setup s = {0};
  arm(l, &s, 0);
  return queue_setup(l, &s);
}

int xf__link_submit(xf__link *l, const xf__cmd *cmd, int opts, int64_t now_ms,
                    xf__link_fn *fn, void *ud) {
  int rc = XF_OK;
  if (l->arm_later || (!(l->flags & XF__LINK_ARM_WAIT) && l->track.node))
    rc = rearm(l);
  if (rc == XF_OK && (opts & XF__LINK_ASKING))
    rc = push(l, &xf__fleet_asking_cmd, ASKING, 0, NULL, NULL);
  xf__cmd script; /* a plain read where the clock is not fresh: the read script */
  const xf__cmd *sent = cmd;
  if (cmd->plain_out && (l->flags & XF__LINK_ONE_SCRIPT) &&
      xf__clock_refreshing(l->clock ? l->clock : &(xf__clock){0}, l->refresh_ms, now_ms))
    *cmd->plain_out = 1; /* the script on its way teaches the clock first */
  else
    sent = xf__entry_read_as(cmd, l->clock, now_ms, &script);
  if (sent == &script)
    opts |= REFRESH;
  if (rc == XF_OK)
    rc = push(l, sent, CALL, opts & ~XF__LINK_ASKING, fn, ud);
  if (rc != XF_OK)
    return xf__fail(l->c, rc, "out of memory for a %d-argument command", cmd->argc);
  if (sent == &script)
    l->refresh_ms = now_ms;
  if (l->fifo_len == 1)
    l->progress_ms = now_ms;
  if (cmd->clock_out) /* the reply will tell of this server's clock */
    *cmd->clock_out = l->clock;
  if (cmd->stream_out) /* a reply comes on the stream its command went on */
    *cmd->stream_out = l->stream;
  return XF_OK;
}

/* ---- failures --------------------------------------------------------------------- */

/* Runs the completions of every queued command with rc (XF__LINK_AGAIN for
 * those resend allows), the stream's state gone first: a completion may
 * start the link again. */
static void fail_all(xf__link *l, int rc, int resend, int tell) {
  xf__link_pending *fifo = l->fifo;
  size_t at = l->fifo_at, len = l->fifo_len, cap = l->fifo_cap;
  l->fifo = NULL;
  l->fifo_at = l->fifo_len = l->fifo_cap = 0;
  reset(l, tell);
  for (size_t i = 0; i < len; i++) {
    xf__link_pending p = fifo[(at + i) % cap];
    if (p.kind != CALL || !p.fn)
      continue;
    xf__reply *none = NULL;
    int again = resend && !(p.opts & (XF__LINK_RESENT | XF__LINK_FRESH));
    p.fn(l, p.ud, again ? XF__LINK_AGAIN : rc, &none);
  }
  if (!l->fifo) { /* no completion queued on a new stream */
    l->fifo = fifo;
    l->fifo_cap = cap;
  } else {
    free(fifo);
  }
}

/* Whether any queued command may be resent. */
static int resendable(const xf__link *l) {
  for (size_t i = 0; i < l->fifo_len; i++) {
    const xf__link_pending *p = &l->fifo[(l->fifo_at + i) % l->fifo_cap];
    if (p->kind == CALL && !(p->opts & (XF__LINK_RESENT | XF__LINK_FRESH)))
      return 1;
  }
  return 0;
}

/* The reason of the last failure, kept (and mirrored where asked). */
__attribute__((format(printf, 2, 3))) static void set_why(xf__link *l, const char *fmt,
                                                          ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->why, sizeof l->why, fmt, ap);
  va_end(ap);
  if (l->why_to)
    snprintf(l->why_to, sizeof l->why, "%s", l->why);
}

static void trip(xf__link *l, int rc, int64_t now_ms) {
  char name[300];
  l->refused_rc = rc == XF_EAUTH || rc == XF_EINVAL || rc == XF_ETLS ? rc : 0;
  xf__server_down(l->c, &l->breaker, now_ms, l->why, xf__link_name(l, name, sizeof name));
}

/* The decision. A call the driver gave up on, or a release sent after one
 * (c->grace_ms), says nothing about the server: the stream goes, the breaker
 * stays closed, nothing is counted. A failure before the setup was answered
 * is a failed connect: the breaker trips (a misconfiguration, XF_ETLS,
 * XF_EAUTH, XF_EINVAL, is repeated while it is open) — but the first stream
 * in a row the server closed during its setup (a CLIENT KILL or a proxy's
 * cut-off in the setup's round trip) is connected once more
 * (xf__link_setup_again), its queued commands resent. The server closing a
 * working connection (its idle timeout, CLIENT KILL, a proxy's cut-off) is
 * no server that is down: its unanswered commands go once more on a new
 * stream (every command xfetch sends is safe to repeat: reads are
 * read-only, a lease answers "won" again to its own token, a write applied
 * is refused the second time, release, delete and SCRIPT LOAD are
 * idempotent), and an idle one (an event loop sees it go) is simply gone;
 * a TLS failure after the handshake is a misconfiguration.
 * Every driver's connections take this one decision: a driver only sends
 * XF__LINK_AGAIN's commands once more, on a new stream. */
void xf__link_fail(xf__link *l, int rc, int how, const char *why, int64_t now_ms) {
  set_why(l, "%s", why);
  int resend = 0;
  if (how == XF__LINK_CANCELED || l->c->grace_ms) {
  } else if (how == XF__LINK_PEER_CLOSED && l->connected && !l->ready &&
             l->setup_closes++ == 0) {
    l->setup_again = 1;
    resend = 1;
  } else if (how == XF__LINK_PEER_CLOSED && rc != XF_ETLS && l->connected && l->ready &&
             (l->fifo_len == 0 || (l->answered == 0 && resendable(l)))) {
    resend = l->fifo_len > 0; /* an idle stream: nothing lost, the next command opens one */
  } else {
    trip(l, rc, now_ms);
  }
  fail_all(l, rc, resend, 1);
}

/* ---- replies ---------------------------------------------------------------------- */

/* A setup command's reply r (not freed). A refusal (xf__setup_judge) ends
 * the stream: the breaker trips and the commands queued get its code. */
static int on_setup(xf__link *l, xf__setup_kind kind, xf__reply *r, int64_t now_ms) {
  l->setup_left--;
  int rc = xf__setup_judge(l->c, kind, r);
  if (rc == XF_OK && kind == XF__SETUP_TRACKING && r->type != XF_REPLY_ERROR &&
      l->arming.node) { /* refused: the connection serves untracked */
    const xf__link_tracking *h = hooks();
    h->watch(&l->arming, l->fd);
    l->track = l->arming;
  }
  if (kind == XF__SETUP_TRACKING)
    l->arming.node = NULL;
  if (rc != XF_OK) {
    l->setup_rc = rc;
    set_why(l, "%s", l->c->errstr);
    if (!l->c->grace_ms)
      trip(l, rc, now_ms);
    fail_all(l, rc, 0, 1);
    return XF__LINK_CLOSE;
  }
  if (l->setup_left == 0)
    set_ready(l);
  return XF_OK;
}

/* A reply the stream cannot be: the stream is lost. */
static int unreadable(xf__link *l, int rc, const char *what, int64_t now_ms) {
  char why[256], name[300];
  snprintf(why, sizeof why, "%.120s sent an unreadable reply: %.100s",
           xf__link_name(l, name, sizeof name), what);
  xf__fail(l->c, rc, "%s", why);
  xf__link_fail(l, rc, XF__LINK_BROKEN, why, now_ms);
  return XF__LINK_CLOSE;
}

int xf__link_feed(xf__link *l, const char *data, size_t len, int64_t now_ms) {
  if (redisReaderFeed(l->rd, data, len) != REDIS_OK)
    return unreadable(l, XF_ENOMEM, "out of memory", now_ms);
  unsigned gen = l->gen;
  for (;;) {
    void *got = NULL;
    if (xf__reader_get_reply(l->rd, &got) != REDIS_OK)
      return unreadable(l, l->rd->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EIO,
                        l->rd->errstr[0] ? l->rd->errstr : "protocol error", now_ms);
    if (!got)
      return XF_OK;
    xf__reply *r = got;
    if (l->fifo_len == 0) {
      xf__reply_free(r);
      return unreadable(l, XF_EIO, "a reply to no command", now_ms);
    }
    xf__link_pending p = pop(l);
    l->progress_ms = now_ms;
    if (p.kind >= SETUP) {
      int rc = on_setup(l, (xf__setup_kind)(p.kind - SETUP), r, now_ms);
      xf__reply_free(r);
      if (rc != XF_OK)
        return rc;
      continue;
    }
    if (p.kind == ASKING) { /* the command after it is next */
      if (r->type == XF_REPLY_ERROR && l->fifo_len) {
        xf__fail(l->c, XF_EPROTO, "ASKING: %s", r->str);
        l->fifo[l->fifo_at].opts |= REFUSED;
      }
      xf__reply_free(r);
      continue;
    }
    l->answered++;
    int rc = XF_OK;
    if (__builtin_expect(p.opts & (REFRESH | REFUSED), 0)) {
      if (p.opts & REFRESH)
        l->refresh_ms = -1;
      if (p.opts & REFUSED) {
        rc = XF_EPROTO;
        xf__reply_free(r);
        r = NULL;
      }
    }
    if (rc == XF_OK && p.track_out) /* whether its value may be kept near */
      *p.track_out = l->track;
    if (p.fn)
      p.fn(l, p.ud, rc, &r);
    if (r)
      xf__reply_free(r);
    if (l->gen != gen)
      return XF__LINK_GONE;
    if (l->rd->pos >= l->rd->len)
      return XF_OK; /* every byte read is parsed: no reply waits */
  }
}

/* ---- the watchdog ----------------------------------------------------------------- */

int64_t xf__link_deadline(const xf__link *l, int connected, int connect_ms,
                          int command_ms) {
  if (!l->live || l->fifo_len == 0)
    return INT64_MAX;
  return l->progress_ms + (connected ? command_ms : connect_ms);
}
