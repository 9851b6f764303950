/* The bytes of an event-loop connection (async.h): the project's stream
 * (stream.h: plain or TLS, a non-blocking connect and handshake), driven by
 * the loop's readiness events through the adapter's watch hook. The engine's
 * output (link.h) is written when the socket is writable (the commands of
 * one loop turn go in one write: one SSL_write under TLS); what is read, until
 * the stream has no more (TLS may hold decrypted bytes the descriptor no
 * longer signals), is fed to the engine, which answers the commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client_io.h"

#define READ_CHUNK 16384 /* a TLS record's most */

static void unwatch(xf__aconn *cn) {
  if (cn->watch)
    cn->ac->loop.unwatch(cn->ac->loop.data, cn->watch);
  cn->watch = NULL;
  cn->watching = 0;
}

/* Asks the adapter for what cn waits for now: the stream's want while it
 * connects; once open, always readable (a server closing is noticed, and
 * the loop stays alive), writable while output waits. */
static int rewatch(xf__aconn *cn) {
  int want;
  if (!cn->connected)
    want = cn->s.state == XF__STREAM_OPEN ? XF_ASYNC_WRITE /* up: tell us */
           : cn->s.want == XF__WANT_READ  ? XF_ASYNC_READ
                                          : XF_ASYNC_WRITE;
  else
    want =
        XF_ASYNC_READ |
        (cn->link.out.len > cn->link.out_at || cn->read_wants_write ? XF_ASYNC_WRITE : 0);
  xf_async *ac = cn->ac;
  if (cn->watch && cn->watch_gen != cn->s.fd_gen)
    unwatch(cn); /* an adapter watches one descriptor: a new one, a new watch */
  if (want == cn->watching && cn->watch)
    return 0;
  if (ac->loop.watch(ac->loop.data, &cn->watch, cn->s.fd, want, cn) != 0)
    return -1;
  cn->watching = want;
  cn->watch_gen = cn->s.fd_gen;
  return 0;
}

int xf__awire_open(xf__aconn *cn) {
  xf_client *c = cn->ac->core;
  xf__io r = cn->host ? xf__stream_open_tcp(&cn->s, cn->host, cn->port, c->tls)
                      : xf__stream_open_unix(&cn->s, c->unix_path, c->tls);
  if (r == XF__IO_FAIL)
    return xf__stream_code(&cn->s);
  cn->fork_gen = xf__fork_generation();
  cn->up = 1;
  cn->watching = 0;
  if (rewatch(cn) != 0) {
    cn->up = 0;
    xf__stream_close(&cn->s);
    snprintf(cn->s.errstr, sizeof cn->s.errstr, "cannot watch the connection to %s",
             cn->host ? cn->host : c->unix_path);
    return XF_ECONNECT;
  }
  return XF_OK;
}

void xf__awire_rewatch(xf__aconn *cn) {
  if (!cn->connected)
    return;
  if (cn->ac->eager && cn->ac->depth > 0) { /* written as the frame ends */
    cn->write_soon = 1;
    cn->ac->write_soon = 1;
    return;
  }
  rewatch(cn); /* a failure shows as a watchdog timeout */
}

void xf__awire_write_soon(xf_async *ac) {
  ac->write_soon = 0;
  for (int i = 0; i < ac->nconns; i++) {
    xf__aconn *cn = ac->conns[i];
    if (!cn->write_soon)
      continue;
    cn->write_soon = 0;
    if (!cn->up || !cn->connected)
      continue;
    for (;;) { /* a failure is the loop's to find: no callback runs here */
      const char *data;
      size_t len, put;
      xf__link_output(&cn->link, &data, &len);
      if (len == 0 || cn->read_wants_write ||
          xf__stream_write(&cn->s, data, len, &put) != XF__IO_DONE)
        break;
      xf__link_written(&cn->link, put);
    }
    rewatch(cn);
  }
}

/* Writes what waits, until done or the socket is full. 0, or -1 when cn
 * failed (dropped). */
static int flush(xf__aconn *cn) {
  for (;;) {
    const char *data;
    size_t len, put;
    xf__link_output(&cn->link, &data, &len);
    if (len == 0)
      return 0;
    xf__io r = xf__stream_write(&cn->s, data, len, &put);
    if (r == XF__IO_AGAIN)
      return 0;
    if (r == XF__IO_FAIL) {
      xf__aconn_failed(cn);
      return -1;
    }
    xf__link_written(&cn->link, put);
  }
}

/* Reads until the stream has nothing more, the engine answering as it goes.
 * 0, or -1 when cn went away (or the engine is done with it: closed). */
static int drain(xf__aconn *cn) {
  char buf[READ_CHUNK];
  for (;;) {
    size_t got;
    xf__io r = xf__stream_read(&cn->s, buf, sizeof buf, &got);
    cn->read_wants_write = r == XF__IO_AGAIN && cn->s.want == XF__WANT_WRITE; /* TLS */
    if (r == XF__IO_AGAIN)
      return 0;
    if (r == XF__IO_FAIL) {
      xf__aconn_failed(cn);
      return -1;
    }
    int fed = xf__link_feed(&cn->link, buf, got, xf__now_ms());
    if (fed == XF__LINK_CLOSE && cn->up && !cn->link.live)
      xf__awire_close(cn);
    if (fed != XF_OK || cn->ac->closing)
      return -1;
    /* A short read emptied the socket (the loop says when more comes), unless
     * TLS holds decrypted bytes the descriptor will not signal. */
    if (got < sizeof buf && !xf__stream_pending(&cn->s))
      return 0;
  }
}

void xf__awire_step(xf__aconn *cn, int events) {
  if (!cn->up)
    return;
  if (!cn->connected) {
    if (!xf__stream_resolved(&cn->s))
      return; /* still watching the resolver's pipe */
    if (cn->s.state == XF__STREAM_RESOLVING)
      unwatch(cn); /* before the stream closes the pipe (a libuv rule) */
    xf__io r = xf__stream_continue(&cn->s);
    if (r == XF__IO_FAIL) {
      xf__aconn_failed(cn);
      return;
    }
    if (r == XF__IO_AGAIN) {
      rewatch(cn);
      return;
    }
    xf__aconn_connected(cn);
    events |= XF_ASYNC_WRITE;
  }
  if (events & XF_ASYNC_WRITE && flush(cn) != 0)
    return;
  if (events & XF_ASYNC_READ || xf__stream_pending(&cn->s) ||
      (events & XF_ASYNC_WRITE && cn->read_wants_write))
    if (drain(cn) != 0)
      return;
  rewatch(cn);
}

/* The stream goes (what it tracked told first); in a forked child, one the
 * parent opened is forgotten: never a byte (a TLS close_notify) on the
 * parent's connection. */
static void close_stream(xf__aconn *cn) {
  unwatch(cn);
  if (cn->fork_gen != xf__fork_generation()) {
    xf__stream_forget(&cn->s);
  } else {
    xf__link_untrack(&cn->link);
    xf__stream_close(&cn->s);
  }
  cn->up = cn->connected = cn->read_wants_write = 0;
}

void xf__awire_close(xf__aconn *cn) { close_stream(cn); }

void xf__awire_drop(xf__aconn *cn, int dying, int rc, int how, const char *why) {
  char reason[256];
  snprintf(reason, sizeof reason, "%s", why); /* it may be the stream's */
  close_stream(cn);
  cn->dying = dying;
  xf__link_fail(&cn->link, rc, how, reason, xf__now_ms()); /* completions may open cn */
  cn->dying = 0;
}

void xf_async_ready(xf_async_conn *cn, int events) {
  if (!cn || cn->ac->closing)
    return;
  xf_async *ac = cn->ac;
  /* In a fork's child, entering drops the parent's connections and wake
   * pipe first: nothing of theirs is read here. Leaving re-arms the
   * watchdog. */
  xf__async_enter(ac);
  if (cn->is_waker)
    xf__awake_ready(ac);
  else
    xf__awire_step(cn, events); /* nothing when cn is down */
  xf__async_leave(ac);
}
