/* The event-loop driver's connections' lives: one per server (one
 * standalone, one per cluster node) over the project's stream (its bytes are
 * async_wire.c's), each running the connection setup (setup.c: AUTH, SELECT,
 * the scripts' SCRIPT LOAD) ahead of any call's command, opened again when a
 * call needs it (unless its breaker is open), and dropped by a watchdog when
 * it stops answering (connect, TLS handshake, command timeouts).
 *
 * Every command's callback runs exactly once: with its reply, or with NULL
 * when the connection goes away (lost, failed to connect, timed out, closed).
 * A NULL reply is the flow's I/O-error input: the call fails open through its
 * loader; after a TLS failure it is XF_ETLS instead (never a fail-open). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client_io.h"
#include "entry.h"
#include "event.h"
#include "near_impl.h"
#include "reader.h"
#include "reply.h"
#include "setup.h"

/* The callback data of a reply nobody waits for (a setup command's is its
 * xf__setup_kind). */
enum { IGNORED = -1 };

/* ---- replies ------------------------------------------------------------------- */

/* ---- connection state ------------------------------------------------------------- */

xf__aconn *xf__aconn_at(xf_async *ac, const char *host, int port) {
  for (int i = 0; i < ac->nconns; i++) {
    xf__aconn *cn = ac->conns[i];
    if (cn->port == port && (host ? cn->host && strcmp(cn->host, host) == 0 : !cn->host))
      return cn;
  }
  if (ac->nconns == ac->conns_cap) {
    int cap = ac->conns_cap ? 2 * ac->conns_cap : 8;
    xf__aconn **grown = realloc(ac->conns, (size_t)cap * sizeof *grown);
    if (!grown)
      return NULL;
    ac->conns = grown;
    ac->conns_cap = cap;
  }
  xf__aconn *cn = calloc(1, sizeof *cn);
  if (!cn || (host && !(cn->host = strdup(host)))) {
    free(cn);
    return NULL;
  }
  cn->ac = ac;
  cn->port = port;
  cn->refresh_ms = -1;
  xf__stream_init(&cn->s);
  ac->conns[ac->nconns++] = cn;
  return cn;
}

/* cn's server's name, for the hook's events (event.h). */
static const char *name(const xf__aconn *cn, char *buf, size_t len) {
  const xf_client *c = cn->ac->core;
  if (cn->host)
    snprintf(buf, len, "%s:%d", cn->host, cn->port);
  else
    snprintf(buf, len, "%s", c->unix_path ? c->unix_path : "?");
  return buf;
}

/* A connection failed with rc: remember why and open its breaker, as the
 * blocking client does; a TLS failure is a misconfiguration: its commands
 * and the breaker repeat XF_ETLS, never a fail-open. */
__attribute__((format(printf, 3, 4))) static void conn_failed(xf__aconn *cn, int rc,
                                                              const char *fmt, ...) {
  xf_client *c = cn->ac->core;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->conn_err, sizeof c->conn_err, fmt, ap);
  va_end(ap);
  cn->refused_rc = rc == XF_ETLS ? XF_ETLS : 0;
  char server[300];
  xf__server_down(c, &cn->breaker, xf__now_ms(), c->conn_err,
                  name(cn, server, sizeof server));
  if (!cn->connected) { /* never came up: calls move on to the next seed */
    cn->failed_connect = 1;
    xf__aseeds_down(cn);
  }
}

void xf__aconn_connected(xf__aconn *cn) {
  cn->connected = 1;
  cn->refused_rc = 0;
  cn->progress_ms = xf__now_ms();
  char server[300];
  xf__server_up(cn->ac->core, &cn->breaker, &cn->was_up, name(cn, server, sizeof server));
}

void xf__aconn_failed(xf__aconn *cn) {
  int rc = xf__stream_code(&cn->s);
  if (!cn->connected || rc == XF_ETLS) { /* a client certificate refused: after it */
    conn_failed(cn, rc, "%s", cn->s.errstr);
  } else {
    xf_client *c = cn->ac->core;
    snprintf(c->conn_err, sizeof c->conn_err, "connection lost: %.200s",
             cn->s.errstr[0] ? cn->s.errstr : "closed");
    c->stats.redis_errors++;
  }
  xf__awire_drop(cn, cn->connected);
}

/* A setup command refused (xf__setup_judge): the connection is useless. Its
 * calls' replies get the judged code (XF_EAUTH as with the blocking client;
 * XF_EUNAVAILABLE, a busy server, fails them open) and it closes once they
 * are in. A failed SCRIPT LOAD is left to the flow's NOSCRIPT recovery. */
static void on_setup_reply(xf__aconn *cn, const xf__reply *r, void *what) {
  intptr_t kind = (intptr_t)what;
  if (!r || kind == IGNORED || cn->setup_rc != XF_OK)
    return;
  if (kind == XF__SETUP_TRACKING) { /* refused: the connection serves untracked */
    if (r->type != XF_REPLY_ERROR && cn->arming.node) {
      xf__near_watch(&cn->arming, cn->s.fd);
      cn->track = cn->arming;
    }
    cn->arming.node = NULL;
    return;
  }
  xf_client *c = cn->ac->core;
  int rc = xf__setup_judge(c, (xf__setup_kind)kind, r);
  if (rc == XF_OK)
    return;
  cn->setup_rc = rc;
  conn_failed(cn, rc, "%s", c->errstr);
  cn->usable = 0;
  cn->idle_close = 1;
}

int xf__aconn_queue(xf__aconn *cn, xf__aconn_fn *fn, void *privdata, const xf__cmd *cmd) {
  if (xf__awire_queue(cn, fn, privdata, cmd) != 0)
    return xf__fail(cn->ac->core, XF_ENOMEM, "out of memory for a %d-argument command",
                    cmd->argc);
  if (cn->inflight++ == 0)
    cn->progress_ms = xf__now_ms();
  return XF_OK;
}

int xf__aconn_queue_ignored(xf__aconn *cn, const xf__cmd *cmd) {
  return xf__aconn_queue(cn, on_setup_reply, (void *)(intptr_t)IGNORED, cmd);
}

/* With a near cache: CLIENT TRACKING on REDIRECT to the node's invalidation
 * connection, appended to s. That connection is opened by the tracker
 * thread, never on the loop's: while it is not open (XF__NEAR_LATER) the
 * connection serves untracked (nothing it reads is kept) and arms before a
 * later command once it is (xf__aconn_send). */
static void arm(xf__aconn *cn, xf__setup *s) {
  xf_client *c = cn->ac->core;
  long long id;
  cn->arming.node = cn->arm_later = NULL;
  if (!c->near)
    return;
  int rc = xf__near_arm_later(c->near, c, cn->host, cn->port,
                              cn->host ? NULL : c->unix_path, &id, &cn->arming);
  if (rc == XF_OK)
    xf__setup_add_tracking(s, id);
  else if (rc == XF__NEAR_LATER)
    cn->arm_later = cn->arming.node;
  if (rc != XF_OK)
    cn->arming.node = NULL, c->errstr[0] = '\0'; /* an untracked connection is no failure */
}

/* The connection setup with the scripts' preload, ahead of any call's
 * command: many calls are queued at once on a fresh connection. */
static int queue_setup(xf__aconn *cn) {
  xf__setup s;
  xf__setup_build(cn->ac->core, XF_SETUP_SCRIPTS | (cn->readonly ? XF_SETUP_REPLICA : 0),
                  &s);
  arm(cn, &s);
  int rc = XF_OK;
  for (int i = 0; rc == XF_OK && i < s.n; i++)
    rc = xf__aconn_queue(cn, on_setup_reply, (void *)(intptr_t)s.kind[i], &s.cmd[i]);
  return rc;
}

static int start(xf__aconn *cn) {
  xf_client *c = cn->ac->core;
  cn->connected = cn->failed_connect = 0;
  int rc = xf__awire_open(cn);
  if (rc != XF_OK) {
    if (rc == XF_ENOMEM)
      return rc;
    conn_failed(cn, rc, "%s", cn->s.errstr);
    xf__stream_close(&cn->s);
    return xf__fail(c, rc == XF_EINVAL || rc == XF_ETLS ? rc : XF_ECONNECT, "%s",
                    c->conn_err);
  }
  cn->usable = 1;
  cn->dying = 0;
  xf__clock_reset(&cn->clock);
  cn->refresh_ms = -1;
  cn->setup_rc = XF_OK;
  cn->inflight = 0;
  cn->progress_ms = xf__now_ms();
  return queue_setup(cn);
}

int xf__aconn_open(xf__aconn *cn) {
  xf_client *c = cn->ac->core;
  if (!cn->up && !cn->dying) {
    if (!xf__breaker_allows(&cn->breaker, xf__now_ms()))
      return xf__fail(c, cn->refused_rc ? cn->refused_rc : XF_ECONNECT,
                      "circuit open after: %s", cn->breaker.why);
    int rc = start(cn);
    if (rc != XF_OK)
      return rc;
  }
  if (!cn->usable)
    return xf__fail(c, XF_ECONNECT, "connection closing after: %s", c->conn_err);
  return XF_OK;
}

/* ---- calls' commands ------------------------------------------------------------ */

static void on_reply(xf__aconn *cn, const xf__reply *reply, void *privdata) {
  xf__acall *k = privdata;
  k->sent = 0;
  xf_async *ac = k->ac;
  if (!ac) { /* canceled by xf_async_close */
    xf__acall_release(k);
    return;
  }
  int64_t now_ms = xf__now_ms();
  if (ac->closing)
    return; /* the close cancels the call */
  if (!reply && xf__aseeds_resend(k, cn))
    return; /* never written: it went to the next seed */
  int rc = XF_OK;
  xf__reply *copy = NULL;
  if (!reply)
    rc = xf__fail(ac->core, cn->refused_rc ? cn->refused_rc : XF_EIO, "%s",
                  ac->core->conn_err);
  else if (cn->setup_rc != XF_OK)
    rc = xf__fail(ac->core, cn->setup_rc, "%s", ac->core->conn_err);
  xf__async_enter(ac);
  if (ac->core->routes.mode == XF_ROUTE_CLUSTER && (rc == XF_EIO || rc == XF_OK) &&
      xf__aroute_reply(k, rc, reply)) {
    xf__async_leave(ac);
    return;
  }
  k->attempts = 0; /* the flow's next command starts afresh */
  k->route_act = XF_ROUTE_DONE;
  if (rc == XF_OK && !(copy = xf__reply_copy(reply)))
    rc = xf__fail(ac->core, XF_ENOMEM, "out of memory for a reply");
  if (rc == XF_OK && k->f.cmd.track_out) /* whether its value may be kept near */
    *k->f.cmd.track_out = cn->track;
  xf__async_advance(k, xf__flow_reply(&k->f, rc, copy, now_ms));
  xf__async_leave(ac);
}

/* Whether a read script sent to refresh cn's clock is still to be answered:
 * a plain read queued behind it goes as HMGET (xf__clock_refreshing). */
static int refreshing(const xf__aconn *cn, int64_t now_ms) {
  return xf__clock_refreshing(&cn->clock, cn->refresh_ms, now_ms);
}

int xf__aconn_send(xf__acall *k, xf__aconn *cn, int asking) {
  static const xf__cmd asking_cmd = {.argc = 1, .argv = {"ASKING"}, .lens = {6}};
  int rc = xf__aconn_open(cn);
  int stale = rc == XF_OK && xf__track_stale(&cn->track);
  if (stale || (rc == XF_OK && cn->arm_later && xf__near_arm_due(cn->arm_later))) {
    /* its node's invalidation connection was lost (tracked anew under the
     * next one, on this connection: Redis takes a new REDIRECT), or is open
     * now (or to be asked for again) where it was not at the setup */
    if (stale)
      xf__near_lost(&cn->track, cn->s.fd);
    cn->track.node = NULL;
    xf__setup s = {0};
    arm(cn, &s);
    if (s.n)
      rc = xf__aconn_queue(cn, on_setup_reply, (void *)(intptr_t)s.kind[0], &s.cmd[0]);
  }
  if (rc == XF_OK && asking)
    rc = xf__aconn_queue_ignored(cn, &asking_cmd);
  xf__cmd script; /* a plain read where cn's clock is not fresh: the read script */
  const xf__cmd *sent = &k->f.cmd;
  int64_t now_ms = sent->plain_out ? xf__now_ms() : 0;
  if (sent->plain_out && refreshing(cn, now_ms))
    *sent->plain_out = 1;
  else
    sent = xf__entry_read_as(sent, &cn->clock, now_ms, &script);
  if (rc == XF_OK)
    rc = xf__aconn_queue(cn, on_reply, k, sent);
  if (rc == XF_OK && sent == &script)
    cn->refresh_ms = now_ms;
  if (rc == XF_OK) {
    k->sent = 1;
    k->conn = cn;
    if (k->f.cmd.clock_out) /* the reply will tell of cn's server's clock */
      *k->f.cmd.clock_out = &cn->clock;
  }
  return rc;
}

/* ---- the watchdog ------------------------------------------------------------------ */

static int64_t deadline(const xf__aconn *cn) {
  if (!cn->up || cn->dying || cn->inflight == 0)
    return INT64_MAX;
  const xf_client *c = cn->ac->core;
  return cn->progress_ms + (cn->connected ? c->command_timeout_ms : c->connect_timeout_ms);
}

int64_t xf__aconn_deadline(const xf_async *ac) {
  int64_t due = INT64_MAX;
  for (int i = 0; i < ac->nconns; i++) {
    int64_t d = deadline(ac->conns[i]);
    if (d < due)
      due = d;
  }
  return due;
}

static void check(xf__aconn *cn, int64_t now_ms) {
  if (now_ms < deadline(cn))
    return;
  /* The loop may have been busy (a slow callback) while the replies were
   * arriving: take what is there before judging. */
  xf__awire_step(cn, cn->connected ? XF_ASYNC_READ : 0);
  if (xf__now_ms() < deadline(cn) || cn->ac->closing)
    return;
  const xf_client *c = cn->ac->core;
  xf__stream_timeout(&cn->s, cn->connected ? c->command_timeout_ms : c->connect_timeout_ms);
  int rc = xf__stream_code(&cn->s);
  conn_failed(cn, rc, "%s", cn->s.errstr);
  xf__awire_drop(cn, 0); /* its calls' callbacks run now, with NULL */
}

void xf__aconn_check(xf_async *ac, int64_t now_ms) {
  for (int i = 0; i < ac->nconns && !ac->closing; i++) /* callbacks may add some */
    check(ac->conns[i], now_ms);
}

void xf__aconn_close(xf_async *ac) {
  for (int i = 0; i < ac->nconns; i++) {
    xf__aconn *cn = ac->conns[i];
    if (cn->up)
      xf__awire_drop(cn, 1);
    xf__awire_free(cn);
    free(cn->host);
    free(cn);
  }
  free(ac->conns);
  ac->conns = NULL;
  ac->nconns = ac->conns_cap = 0;
}

int xf__aconn_count(const xf_async *ac) {
  int n = 0;
  for (int i = 0; i < ac->nconns; i++)
    n += ac->conns[i]->connected;
  return n;
}
