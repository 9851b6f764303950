/* One blocking connection: the connection engine (link.c) over the
 * project's stream (stream.h: plain or TLS, one path), and a wait loop that
 * moves its bytes under the client's timeouts, asking options.interrupt in
 * slices. The engine decides what a failure means (a working connection
 * the server closed is reopened once and the commands sent again; the
 * breaker); this file only connects, writes, reads and waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "client_io.h"
#include "conn.h"
#include "setup.h"
#include "stream.h"

#define REPLY_SLICE_MS 50 /* how often a reply wait asks options.interrupt */
#define READ_CHUNK 16384  /* as hiredis reads */

/* A live stream: heap-held, since OpenSSL's I/O hooks point at it (a
 * cluster's connections live in an array that may grow). */
struct xf__wire {
  xf__stream s;
};

int xf__conn_init(xf__conn *k, const char *host, int port, const char *unix_path) {
  memset(k, 0, sizeof *k);
  k->port = port;
  k->unix_path = host ? NULL : unix_path;
  if (host && !(k->host = strdup(host)))
    return XF_ENOMEM;
  int rc = xf__link_init(&k->engine, NULL, k->host, port, k->unix_path, XF__LINK_ARM_WAIT);
  k->clock = k->engine.clock;
  return rc;
}

/* Closes k's stream (a TLS peer told, best effort) or, in a forked child,
 * forgets it (never a byte on the parent's connection). The engine has
 * already been told, or forgets it here without a word. */
static void close_wire(xf__conn *k, int forget) {
  struct xf__wire *w = k->link;
  if (!w)
    return;
  if (!forget)
    xf__link_untrack(&k->engine); /* what it tracked is invalidated no more */
  xf__link_forget(&k->engine);
  if (forget)
    xf__stream_forget(&w->s);
  else
    xf__stream_close(&w->s);
  free(w);
  k->link = NULL;
}

void xf__conn_free(xf__conn *k) {
  if (!k)
    return;
  close_wire(k, 0);
  free(k->host);
  xf__link_free(&k->engine);
  memset(k, 0, sizeof *k);
}

void xf__conn_forget(xf__conn *k) {
  close_wire(k, 1);
  xf__breaker_close(&k->engine.breaker);
}

const char *xf__conn_name(const xf__conn *k, char *buf, size_t len) {
  return xf__link_name(&k->engine, buf, len);
}

/* ---- moving bytes ------------------------------------------------------------------ */

/* The stream failed with rc while waiting for what: the reason on c, the
 * engine told (its completions run with its decision), the stream closed. */
static int failed(xf_client *c, xf__conn *k, const char *what, int rc) {
  const xf__stream *s = &k->link->s;
  int how = rc == XF_ECANCELED        ? XF__LINK_CANCELED
            : s->err == XF__SE_CLOSED ? XF__LINK_PEER_CLOSED
                                      : XF__LINK_BROKEN;
  if (rc == XF_ECANCELED)
    xf__fail(c, rc, "interrupted (options.interrupt) waiting for %s", what);
  else
    xf__fail(c, rc, "%s: %s", what, s->errstr[0] ? s->errstr : xf_strerror(rc));
  xf__link_fail(&k->engine, rc, how, c->errstr, xf__now_ms());
  close_wire(k, 0);
  return rc;
}

/* Writes the engine's output under the command timeout. The stream sends
 * with MSG_NOSIGNAL: a peer that closed the socket is EPIPE, never SIGPIPE. */
static inline __attribute__((always_inline)) int flush(xf_client *c, xf__conn *k,
                                                       const char *what) {
  const char *data;
  size_t len, put = 0; /* most requests go in one send: no clock read for them */
  xf__link_output(&k->engine, &data, &len);
  if (len == 0)
    return XF_OK;
  xf__io r = xf__stream_write(&k->link->s, data, len, &put);
  if (r != XF__IO_DONE || put != len) {
    int rc = r == XF__IO_FAIL ? xf__stream_code(&k->link->s)
                              : xf__stream_write_all(&k->link->s, data + put, len - put,
                                                     xf__now_ms() + c->command_timeout_ms);
    if (rc != XF_OK)
      return failed(c, k, what, rc);
  }
  xf__link_written(&k->engine, len);
  return XF_OK;
}

/* Writes what waits, then feeds the engine what the stream reads until
 * *done (the setup's end when done is NULL), under the command timeout (or
 * the grace of a release); with options.interrupt, asked every
 * REPLY_SLICE_MS while waiting. XF_OK when waited out (the engine may have
 * closed the stream: a refused setup, an unreadable reply), else the
 * stream's code with the reason on c and the stream closed. */
static inline __attribute__((always_inline)) int pump(xf_client *c, xf__conn *k,
                                                      const char *what, const int *done) {
  xf__link *l = &k->engine;
  int rc = flush(c, k, what);
  int ms = c->grace_ms && c->grace_ms < c->command_timeout_ms ? c->grace_ms
                                                              : c->command_timeout_ms;
  int64_t deadline_ms = 0; /* ms from the first wait on: set only if it waits on */
  int ask = c->interrupt && !c->grace_ms; /* a release after an interrupt: not again */
  char buf[READ_CHUNK];
  while (rc == XF_OK && k->link && (done ? !*done : l->setup_left > 0)) {
    size_t got;
    rc = xf__stream_read_sliced(&k->link->s, buf, sizeof buf, &got, &deadline_ms, ms,
                                ask ? c->interrupt : NULL, c->interrupt_ud, REPLY_SLICE_MS);
    if (rc != XF_OK)
      return failed(c, k, what, rc);
    if (xf__link_feed(l, buf, got, 0) != XF_OK)
      close_wire(k, 0); /* the engine is done with it: every completion ran */
  }
  return rc;
}

/* A command's completion: its code and reply. */
typedef struct slot {
  int rc;
  int done;
  xf__reply *reply;
} slot;

static void on_done(xf__link *l, void *ud, int rc, xf__reply **reply) {
  (void)l;
  slot *s = ud;
  s->rc = rc;
  s->reply = *reply;
  *reply = NULL;
  s->done = 1;
}

/* ---- connecting --------------------------------------------------------------------- */

/* Opens k's stream (TCP keepalive, TLS when the client has it) within the
 * connect timeout. XF_OK, or the stream's code with its reason on c. */
static int open_wire(xf_client *c, xf__conn *k, int ms) {
  struct xf__wire *w = k->link = calloc(1, sizeof *w);
  if (!w)
    return xf__fail(c, XF_ENOMEM, "out of memory for a connection");
  xf__stream_init(&w->s);
  xf__io r = k->unix_path ? xf__stream_open_unix(&w->s, k->unix_path, c->tls)
                          : xf__stream_open_tcp(&w->s, k->host, k->port, c->tls);
  int rc = r == XF__IO_FAIL ? xf__stream_code(&w->s)
                            : xf__stream_connect_blocking(&w->s, xf__now_ms() + ms);
  return rc == XF_OK ? XF_OK : xf__fail(c, rc, "%s", w->s.errstr);
}

/* Connects and runs the setup (the engine's: AUTH, SELECT, READONLY, the
 * near cache's tracking), its commands in one write. On failure the engine
 * trips the breaker (unless interrupted) and k is down. */
static int connect_once(xf_client *c, xf__conn *k) {
  xf__link *l = &k->engine;
  int ms = c->grace_ms && c->grace_ms < c->connect_timeout_ms ? c->grace_ms
                                                              : c->connect_timeout_ms;
  int rc = open_wire(c, k, ms);
  if (rc != XF_OK) {
    xf__link_fail(l, rc, rc == XF_ECANCELED ? XF__LINK_CANCELED : XF__LINK_BROKEN,
                  c->errstr, xf__now_ms());
    close_wire(k, 0);
    return rc;
  }
  int64_t now_ms = xf__now_ms();
  rc = xf__link_start(l, now_ms);
  xf__link_connected(l, k->link->s.fd, now_ms);
  if (rc == XF_OK)
    rc = pump(c, k, "connection setup", NULL);
  if (rc == XF_OK && !k->link) /* a setup command refused, or unreadable */
    rc = l->setup_rc != XF_OK ? l->setup_rc : XF_EIO;
  if (rc != XF_OK) {
    if (k->link) { /* out of memory before a byte went */
      xf__link_fail(l, rc, XF__LINK_BROKEN, c->errstr, now_ms);
      close_wire(k, 0);
    }
    return rc == XF_EIO ? XF_ECONNECT : rc; /* not set up: not connected */
  }
  xf__link_up(l);
  return XF_OK;
}

/* connect_once, once more when the engine says the server closed the
 * stream during its setup (the first time in a row). */
static int connect_now(xf_client *c, xf__conn *k) {
  int rc = connect_once(c, k);
  if (rc != XF_OK && xf__link_setup_again(&k->engine))
    rc = connect_once(c, k);
  return rc;
}

int xf__conn_open(xf_client *c, xf__conn *k) {
  xf__client_check_fork(c);
  k->engine.c = c;
  if (k->link && xf__link_track_stale(&k->engine))
    close_wire(k, 0); /* tracked under a lost invalidation connection: re-arm */
  if (k->link)
    return XF_OK;
  int rc = xf__link_allows(&k->engine, xf__now_ms());
  return rc == XF_OK ? connect_now(c, k) : rc;
}

/* ---- commands ------------------------------------------------------------------------ */

/* Sends the n commands (opts for each) in one write and waits for their
 * completions; a plain read goes as the read script when the clock is not
 * fresh (the engine's choice), the clock read once for all. */
static inline __attribute__((always_inline)) void exchange(xf_client *c, xf__conn *k,
                                                           size_t n,
                                                           const xf__cmd *const *cmds,
                                                           int opts, slot *slots) {
  int64_t now_ms = -1;
  for (size_t i = 0; i < n; i++) {
    if (cmds[i]->plain_out && now_ms < 0)
      now_ms = xf__now_ms();
    slots[i] = (slot){.rc = XF_EIO}; /* until its completion runs */
    if (xf__link_submit(&k->engine, cmds[i], opts, now_ms, on_done, &slots[i]) != XF_OK) {
      xf__link_fail(&k->engine, XF_ENOMEM, XF__LINK_BROKEN, c->errstr, xf__now_ms());
      close_wire(k, 0);
      for (size_t j = i; j < n; j++)
        slots[j] = (slot){.rc = XF_ENOMEM, .done = 1};
      return;
    }
  }
  pump(c, k, n == 1 ? cmds[0]->argv[0] : "pipeline", &slots[n - 1].done);
}

/* Runs the n commands on k, connecting first if needed; the commands the
 * engine allows (XF__LINK_AGAIN: the server closed a working connection
 * before they were answered) go once more on a new connection. */
static inline __attribute__((always_inline)) void run(xf_client *c, xf__conn *k, size_t n,
                                                      const xf__cmd *const *cmds,
                                                      int asking, slot *slots) {
  xf__client_check_fork(c);
  int fresh = k->link == NULL;
  k->engine.c = c;
  int rc = k->link && !k->engine.track.node ? XF_OK : xf__conn_open(c, k);
  if (rc != XF_OK) {
    for (size_t i = 0; i < n; i++)
      slots[i] = (slot){.rc = rc, .done = 1};
    return;
  }
  int opts = (asking ? XF__LINK_ASKING : 0) | (fresh ? XF__LINK_FRESH : 0);
  exchange(c, k, n, cmds, opts, slots);
  if (slots[0].rc != XF__LINK_AGAIN)
    return;
  rc = connect_now(c, k); /* on failure: counted, dropped, breaker armed */
  if (rc != XF_OK) {
    for (size_t i = 0; i < n; i++)
      slots[i] = (slot){.rc = rc, .done = 1};
    return;
  }
  exchange(c, k, n, cmds, (asking ? XF__LINK_ASKING : 0) | XF__LINK_RESENT, slots);
}

int xf__conn_command(xf_client *c, xf__conn *k, const xf__cmd *cmd, int asking,
                     xf__reply **reply) {
  slot s;
  run(c, k, 1, &cmd, asking, &s);
  *reply = s.reply;
  return s.rc;
}

int xf__conn_pipeline(xf_client *c, xf__conn *k, size_t n, const xf__cmd *const *cmds,
                      int *rcs, xf__reply **replies) {
  slot stack[16], *slots = n <= 16 ? stack : malloc(n * sizeof *slots);
  if (!slots) {
    for (size_t i = 0; i < n; i++)
      rcs[i] = XF_ENOMEM, replies[i] = NULL;
    return xf__fail(c, XF_ENOMEM, "out of memory for a pipeline of %zu commands", n);
  }
  run(c, k, n, cmds, 0, slots);
  int rc = XF_OK;
  for (size_t i = 0; i < n; i++) {
    rcs[i] = slots[i].rc;
    replies[i] = slots[i].reply;
    if (rc == XF_OK)
      rc = rcs[i];
  }
  if (slots != stack)
    free(slots);
  return rc;
}
