/* The event-loop driver's connections' lives: one per server (one
 * standalone, one per cluster node), each a connection engine (link.h: the
 * setup and the scripts' SCRIPT LOAD ahead of any call's command, replies in
 * order, the clock, the breaker) over the project's stream (its bytes are
 * async_wire.c's), opened again when a call needs it (unless its breaker is
 * open), and dropped by a watchdog when it stops answering (connect, TLS
 * handshake, command timeouts).
 *
 * Every command's completion runs exactly once: with its reply, or with the
 * engine's code when the connection goes away (lost, failed to connect,
 * timed out, closed): XF_EIO, the flow's I/O-error input (the call fails
 * open through its loader); after a TLS failure XF_ETLS instead (never a
 * fail-open); a refused setup's code. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client_io.h"

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
  if (!cn || (host && !(cn->host = strdup(host))) ||
      xf__link_init(&cn->link, ac->core, cn->host, port, ac->core->unix_path,
                    XF_SETUP_SCRIPTS | XF__LINK_ONE_SCRIPT) != XF_OK) {
    if (cn)
      free(cn->link.clock), free(cn->host);
    free(cn);
    return NULL;
  }
  cn->ac = ac;
  cn->port = port;
  cn->link.why_to = ac->core->conn_err; /* the handle's last connection failure */
  xf__stream_init(&cn->s);
  ac->conns[ac->nconns++] = cn;
  return cn;
}

/* The stream failed before it came up: its calls move on to the next seed. */
static void never_up(xf__aconn *cn) {
  cn->failed_connect = 1;
  xf__aseeds_down(cn);
}

void xf__aconn_connected(xf__aconn *cn) {
  cn->connected = 1;
  xf__link_connected(&cn->link, cn->s.fd, xf__now_ms());
  xf__link_up(&cn->link);
}

/* The code a failed connection's commands get: XF_EIO (fail open), or
 * XF_ETLS (a misconfiguration: never a fail-open). */
static int lost_code(int rc) { return rc == XF_ETLS ? XF_ETLS : XF_EIO; }

void xf__aconn_failed(xf__aconn *cn) {
  int rc = xf__stream_code(&cn->s);
  if (!cn->connected)
    never_up(cn);
  xf__awire_drop(cn, cn->connected, lost_code(rc),
                 cn->s.err == XF__SE_CLOSED ? XF__LINK_PEER_CLOSED : XF__LINK_BROKEN,
                 cn->s.errstr);
}

int xf__aconn_queue(xf__aconn *cn, xf__link_fn *fn, void *privdata, const xf__cmd *cmd) {
  int rc = xf__link_submit(&cn->link, cmd, 0, xf__now_ms(), fn, privdata);
  if (rc == XF_OK)
    xf__awire_rewatch(cn);
  return rc;
}

int xf__aconn_queue_ignored(xf__aconn *cn, const xf__cmd *cmd) {
  return xf__aconn_queue(cn, NULL, NULL, cmd);
}

/* Opens cn's stream (connecting in the background) and starts its engine:
 * the setup and the scripts' preload go first. */
static int start(xf__aconn *cn) {
  xf_client *c = cn->ac->core;
  cn->connected = cn->failed_connect = 0;
  int rc = xf__awire_open(cn);
  if (rc != XF_OK) {
    never_up(cn);
    xf__link_fail(&cn->link, rc, XF__LINK_BROKEN, cn->s.errstr, xf__now_ms());
    xf__stream_close(&cn->s);
    return xf__fail(c, rc == XF_EINVAL || rc == XF_ETLS ? rc : XF_ECONNECT, "%s",
                    cn->link.why);
  }
  cn->dying = 0;
  rc = xf__link_start(&cn->link, xf__now_ms());
  if (rc != XF_OK)
    xf__awire_drop(cn, 0, XF_ENOMEM, XF__LINK_CANCELED, c->errstr);
  return rc;
}

int xf__aconn_open(xf__aconn *cn) {
  xf_client *c = cn->ac->core;
  if (!cn->up && !cn->dying) {
    int rc = xf__link_allows(&cn->link, xf__now_ms());
    if (rc == XF_OK)
      rc = start(cn);
    if (rc != XF_OK)
      return rc;
  }
  if (!cn->link.live)
    return xf__fail(c, XF_ECONNECT, "connection closing after: %s", cn->link.why);
  return XF_OK;
}

/* ---- calls' commands ------------------------------------------------------------ */

static void on_reply(xf__link *l, void *privdata, int rc, xf__reply **reply) {
  xf__aconn_reply(l, privdata, rc, reply);
}

void xf__aconn_reply(xf__link *l, xf__acall *k, int rc, xf__reply **reply) {
  xf__aconn *cn = XF__ACONN_OF(l);
  k->sent = 0;
  xf_async *ac = k->ac;
  if (!ac) { /* canceled by xf_async_close */
    xf__acall_release(k);
    return;
  }
  int64_t now_ms = xf__now_ms();
  if (ac->closing)
    return;          /* the close cancels the call */
  if (ac->forking) { /* a parent's command, in a fork's child: lost, on the next tick */
    xf__fail(ac->core, rc, "%s", l->why);
    xf__async_defer(ac, k, rc);
    return;
  }
  if (rc == XF__LINK_AGAIN) { /* the engine's: once more, on a new stream (next tick) */
    k->again = k->resend = 1;
    k->wake_ms = now_ms;
    xf__aheap_push(ac, k);
    return;
  }
  k->again = 0;
  if (rc != XF_OK && xf__aseeds_resend(k, cn))
    return;                           /* never written: it went to the next seed */
  if (rc != XF_OK && rc != XF_EPROTO) /* an ASKING refused says so itself */
    rc = xf__fail(ac->core, rc, "%s", l->why);
  xf__async_enter(ac);
  if (ac->core->routes.mode == XF_ROUTE_CLUSTER && (rc == XF_EIO || rc == XF_OK) &&
      xf__aroute_reply(k, rc, *reply)) {
    xf__async_leave(ac);
    return;
  }
  k->attempts = 0; /* the flow's next command starts afresh */
  k->trip.act = XF_ROUTE_DONE;
  xf__reply *r = *reply; /* the flow's now */
  *reply = NULL;
  xf__async_advance(k, xf__flow_reply(&k->f, rc, r, now_ms));
  xf__async_leave(ac);
}

int xf__aconn_send(xf__acall *k, xf__aconn *cn, int asking) {
  if (xf__acork_take(k, cn, asking))
    return XF_OK; /* sent at xf_async_uncork, with the others */
  int rc = xf__aconn_open(cn);
  if (rc == XF_OK)
    rc = xf__link_submit(&cn->link, &k->f.cmd,
                         (asking ? XF__LINK_ASKING : 0) | (k->again ? XF__LINK_RESENT : 0),
                         xf__now_ms(), on_reply, k);
  if (rc == XF_OK) {
    xf__awire_rewatch(cn);
    k->sent = 1;
    k->conn = cn;
  }
  return rc;
}

/* ---- the watchdog ------------------------------------------------------------------ */

static int64_t deadline(const xf__aconn *cn) {
  if (!cn->up || cn->dying)
    return INT64_MAX;
  const xf_client *c = cn->ac->core;
  return xf__link_deadline(&cn->link, cn->connected, c->connect_timeout_ms,
                           c->command_timeout_ms);
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
  if (!cn->connected)
    never_up(cn);
  /* its calls' completions run now */
  xf__awire_drop(cn, 0, lost_code(rc), XF__LINK_TIMEOUT, cn->s.errstr);
}

void xf__aconn_check(xf_async *ac, int64_t now_ms) {
  for (int i = 0; i < ac->nconns && !ac->closing; i++) /* callbacks may add some */
    check(ac->conns[i], now_ms);
}

void xf__aconn_forked(xf_async *ac) {
  for (int i = 0; i < ac->nconns; i++) {
    xf__aconn *cn = ac->conns[i];
    if (cn->up && cn->fork_gen != ac->fork_gen) /* the stream is forgotten (async_wire.c) */
      xf__awire_drop(cn, 1, XF_EIO, XF__LINK_CANCELED,
                     "the connection was the parent's (a fork's child opens its own)");
  }
}

void xf__aconn_close(xf_async *ac) {
  for (int i = 0; i < ac->nconns; i++) {
    xf__aconn *cn = ac->conns[i];
    if (cn->up)
      xf__awire_drop(cn, 1, XF_EIO, XF__LINK_CANCELED, "closed");
    xf__link_free(&cn->link);
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
