/* The bytes of an event-loop connection (async.h): the project's stream
 * (stream.h: plain or TLS, a non-blocking connect and handshake), driven by
 * the loop's readiness events through the adapter's watch hook. Commands are
 * appended to an output buffer and written when the socket is writable (the
 * commands of one loop turn go in one write: one SSL_write under TLS);
 * replies are read until the stream has no more (TLS may hold decrypted bytes
 * the descriptor no longer signals), parsed by hiredis' redisReader into
 * xf__reply objects and handed, in order, to the callbacks of the commands
 * they answer. Every callback runs exactly once: with its reply, or with
 * NULL when the connection goes away. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client_io.h"
#include "near_impl.h"
#include "reader.h"

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
    want = XF_ASYNC_READ |
           (cn->out.len > cn->out_at || cn->read_wants_write ? XF_ASYNC_WRITE : 0);
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
  if (!cn->rd && !(cn->rd = xf__reader_create()))
    return xf__fail(c, XF_ENOMEM, "out of memory for a connection");
  xf__io r = cn->host ? xf__stream_open_tcp(&cn->s, cn->host, cn->port, c->tls)
                      : xf__stream_open_unix(&cn->s, c->unix_path, c->tls);
  if (r == XF__IO_FAIL)
    return xf__stream_code(&cn->s);
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

int xf__awire_queue(xf__aconn *cn, xf__aconn_fn *fn, void *privdata, const xf__cmd *cmd) {
  if (cn->fifo_len == cn->fifo_cap) { /* grown into a straight line again */
    size_t cap = cn->fifo_cap ? 2 * cn->fifo_cap : 16;
    xf__apending *grown = malloc(cap * sizeof *grown);
    if (!grown)
      return -1;
    for (size_t i = 0; i < cn->fifo_len; i++)
      grown[i] = cn->fifo[(cn->fifo_at + i) % cn->fifo_cap];
    free(cn->fifo);
    cn->fifo = grown;
    cn->fifo_cap = cap;
    cn->fifo_at = 0;
  }
  size_t len = cn->out.len;
  if (xf__resp_append_cmd(&cn->out, cmd) != 0) {
    cn->out.len = len;
    return -1;
  }
  cn->fifo[(cn->fifo_at + cn->fifo_len++) % cn->fifo_cap] = (xf__apending){fn, privdata};
  if (cn->connected)
    rewatch(cn); /* a failure shows as a watchdog timeout */
  return 0;
}

/* Writes what waits, until done or the socket is full. 0, or -1 when cn
 * failed (dropped). */
static int flush(xf__aconn *cn) {
  while (cn->out_at < cn->out.len) {
    size_t put;
    xf__io r =
        xf__stream_write(&cn->s, cn->out.data + cn->out_at, cn->out.len - cn->out_at, &put);
    if (r == XF__IO_AGAIN)
      return 0;
    if (r == XF__IO_FAIL) {
      xf__aconn_failed(cn);
      return -1;
    }
    cn->out_at += put;
  }
  cn->out.len = cn->out_at = 0;
  return 0;
}

/* A reply that the stream cannot be: the connection is lost. */
static void unreadable(xf__aconn *cn, const char *why) {
  snprintf(cn->s.errstr, sizeof cn->s.errstr, "%.120s sent an unreadable reply: %.100s",
           cn->s.peer, why);
  cn->s.err = XF__SE_IO;
  xf__aconn_failed(cn);
}

/* Hands the parsed replies to their commands' callbacks, oldest first. 0,
 * or -1 when cn went away (or the handle is closing) under a callback. */
static int answer(xf__aconn *cn, unsigned gen) {
  for (;;) {
    void *r = NULL;
    if (xf__reader_get_reply(cn->rd, &r) != REDIS_OK) {
      unreadable(cn, cn->rd->errstr[0] ? cn->rd->errstr : "protocol error");
      return -1;
    }
    if (!r)
      return 0;
    if (cn->fifo_len == 0) {
      xf__reply_free(r);
      unreadable(cn, "a reply to no command");
      return -1;
    }
    xf__apending p = cn->fifo[cn->fifo_at];
    cn->fifo_at = (cn->fifo_at + 1) % cn->fifo_cap;
    cn->fifo_len--;
    cn->inflight--;
    cn->progress_ms = xf__now_ms();
    p.fn(cn, r, p.privdata);
    xf__reply_free(r);
    if (cn->gen != gen || cn->ac->closing)
      return -1;
  }
}

/* Reads until the stream has nothing more, answering as it goes. 0, or -1
 * when cn went away. */
static int drain(xf__aconn *cn, unsigned gen) {
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
    if (redisReaderFeed(cn->rd, buf, got) != REDIS_OK) {
      unreadable(cn, "out of memory");
      return -1;
    }
    if (answer(cn, gen) != 0)
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
  unsigned gen = cn->gen;
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
    if (drain(cn, gen) != 0)
      return;
  if (cn->idle_close && cn->fifo_len == 0) {
    xf__awire_drop(cn, 0);
    return;
  }
  rewatch(cn);
}

void xf__awire_drop(xf__aconn *cn, int dying) {
  unwatch(cn);
  if (cn->track.node) /* what it tracked is invalidated no more */
    xf__near_lost(&cn->track, cn->s.fd);
  cn->track.node = cn->arming.node = NULL;
  xf__stream_close(&cn->s);
  redisReaderFree(cn->rd);
  cn->rd = NULL;
  cn->out.len = cn->out_at = 0;
  xf__apending *fifo = cn->fifo;
  size_t at = cn->fifo_at, len = cn->fifo_len, cap = cn->fifo_cap;
  cn->fifo = NULL;
  cn->fifo_at = cn->fifo_len = cn->fifo_cap = 0;
  cn->up = cn->usable = cn->connected = cn->idle_close = cn->read_wants_write = 0;
  cn->inflight = 0;
  cn->gen++;
  cn->dying = dying;
  for (size_t i = 0; i < len; i++) { /* their callbacks may open cn again */
    xf__apending p = fifo[(at + i) % cap];
    p.fn(cn, NULL, p.privdata);
  }
  free(fifo);
  cn->dying = 0;
}

void xf__awire_free(xf__aconn *cn) {
  xf__buf_free(&cn->out);
  free(cn->fifo);
  redisReaderFree(cn->rd);
}

void xf_async_ready(xf_async_conn *cn, int events) {
  if (cn && cn->is_waker && !cn->ac->closing) {
    xf__awake_ready(cn->ac);
    return;
  }
  if (!cn || !cn->up || cn->ac->closing)
    return;
  xf_async *ac = cn->ac;
  xf__async_enter(ac); /* leaving re-arms the watchdog */
  xf__awire_step(cn, events);
  xf__async_leave(ac);
}
