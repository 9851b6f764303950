/* One blocking connection to one Redis server over the project's stream
 * (stream.h: plain or TLS, one path): connect (timeouts, keepalive, TLS,
 * then the setup of setup.c), the breaker, a command, a pipeline. Replies are
 * parsed by hiredis' redisReader into our objects (reader.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "client_io.h"
#include "conn.h"
#include "entry.h"
#include "event.h"
#include "near_impl.h"
#include "reader.h"
#include "reply.h"
#include "setup.h"
#include "stream.h"

#define REPLY_SLICE_MS 50 /* how often a reply wait asks options.interrupt */
#define READ_CHUNK 16384  /* as hiredis reads */

/* A live connection: heap-held, since OpenSSL's I/O hooks point at the
 * stream (a cluster's connections live in an array that may grow). */
struct xf__link {
  xf__stream s;
  redisReader *rd;
};

int xf__conn_init(xf__conn *k, const char *host, int port, const char *unix_path) {
  memset(k, 0, sizeof *k);
  k->port = port;
  k->unix_path = host ? NULL : unix_path;
  if (host && !(k->host = strdup(host)))
    return XF_ENOMEM;
  return XF_OK;
}

/* Closes k's link (a TLS peer told, best effort) or, in a forked child,
 * forgets it (never a byte on the parent's connection). */
static void unlink_conn(xf__conn *k, int forget) {
  struct xf__link *l = k->link;
  if (!l)
    return;
  if (k->track.node && !forget) /* what it tracked is invalidated no more */
    xf__near_lost(&k->track, l->s.fd);
  k->track.node = NULL;
  if (forget)
    xf__stream_forget(&l->s);
  else
    xf__stream_close(&l->s);
  redisReaderFree(l->rd);
  free(l);
  k->link = NULL;
}

void xf__conn_free(xf__conn *k) {
  if (!k)
    return;
  unlink_conn(k, 0);
  free(k->host);
  free(k->clock);
  memset(k, 0, sizeof *k);
}

void xf__conn_forget(xf__conn *k) {
  unlink_conn(k, 1);
  xf__breaker_close(&k->breaker);
}

const char *xf__conn_name(const xf__conn *k, char *buf, size_t len) {
  if (k->host)
    snprintf(buf, len, "%s:%d", k->host, k->port);
  else
    snprintf(buf, len, "%s", k->unix_path ? k->unix_path : "?");
  return buf;
}

/* The breaker keeps why the connection went away, for its message (the
 * handle's errstr is cleared by every call). A call the interrupt ended, or
 * a release sent after one (c->grace_ms), says nothing about the server:
 * the connection goes (a reply may still be on its way: never read it as
 * the next command's), the breaker stays closed and nothing is counted. A
 * TLS failure seen after the handshake (a client certificate refused) is a
 * misconfiguration: the breaker repeats it. */
static void drop(xf_client *c, xf__conn *k, int rc) {
  unlink_conn(k, 0);
  if (rc == XF_ECANCELED || c->grace_ms)
    return;
  if (rc == XF_ETLS)
    k->refused_rc = XF_ETLS;
  char name[300];
  xf__server_down(c, &k->breaker, xf__now_ms(), c->errstr,
                  xf__conn_name(k, name, sizeof name));
}

/* The stream failed with rc: the reason on c, and whether the server closed
 * a connection that was working (worth one reconnect). */
static int stream_failed(xf_client *c, xf__conn *k, const char *what, int rc) {
  const xf__stream *s = &k->link->s;
  k->peer_closed = s->err == XF__SE_CLOSED;
  return xf__fail(c, rc, "%s: %s", what, s->errstr[0] ? s->errstr : xf_strerror(rc));
}

/* Reads one reply, feeding the reader what the stream gives until it has
 * one, under the command timeout (or the grace of a release); with
 * options.interrupt, asked every REPLY_SLICE_MS while waiting. On failure
 * the code, with the reason on the client. */
static int read_reply(xf_client *c, xf__conn *k, const char *what, xf__reply **reply) {
  struct xf__link *l = k->link;
  void *r = NULL;
  k->peer_closed = 0;
  if (xf__reader_get_reply(l->rd, &r) != REDIS_OK)
    goto bad_reply;
  if (r) {
    *reply = r;
    return XF_OK;
  }
  int ms = c->grace_ms && c->grace_ms < c->command_timeout_ms ? c->grace_ms
                                                              : c->command_timeout_ms;
  int64_t deadline_ms = 0; /* ms from the first wait on: set only if it waits on */
  int ask = c->interrupt && !c->grace_ms; /* a release after an interrupt: not again */
  char buf[READ_CHUNK];
  while (!r) {
    size_t got;
    int rc =
        xf__stream_read_sliced(&l->s, buf, sizeof buf, &got, &deadline_ms, ms,
                               ask ? c->interrupt : NULL, c->interrupt_ud, REPLY_SLICE_MS);
    if (rc == XF_ECANCELED)
      return xf__fail(c, XF_ECANCELED, "interrupted (options.interrupt) waiting for %s",
                      what);
    if (rc != XF_OK)
      return stream_failed(c, k, what, rc);
    if (redisReaderFeed(l->rd, buf, got) != REDIS_OK ||
        xf__reader_get_reply(l->rd, &r) != REDIS_OK)
      goto bad_reply;
  }
  *reply = r;
  return XF_OK;
bad_reply:
  return xf__fail(c, l->rd->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EIO, "%s: %s", what,
                  l->rd->errstr[0] ? l->rd->errstr : "unreadable reply");
}

/* Sends the encoded request, under the command timeout. The stream sends
 * with MSG_NOSIGNAL: a peer that closed the socket is EPIPE, never SIGPIPE. */
static int write_request(xf_client *c, xf__conn *k, const char *what) {
  k->peer_closed = 0;
  size_t put = 0; /* most requests go in one send: no clock read for them */
  xf__io r = xf__stream_write(&k->link->s, c->request.data, c->request.len, &put);
  if (r == XF__IO_DONE && put == c->request.len)
    return XF_OK;
  int rc = r == XF__IO_FAIL ? xf__stream_code(&k->link->s)
                            : xf__stream_write_all(&k->link->s, c->request.data + put,
                                                   c->request.len - put,
                                                   xf__now_ms() + c->command_timeout_ms);
  return rc == XF_OK ? XF_OK : stream_failed(c, k, what, rc);
}

static const xf__cmd asking_cmd = {.argc = 1, .argv = {"ASKING"}, .lens = {6}};

/* One command on the live connection (ASKING first when asked). On failure
 * *reply is NULL, the code is returned with the reason on the client; the
 * caller drops the connection. */
static int roundtrip(xf_client *c, xf__conn *k, const xf__cmd *cmd, int asking,
                     xf__reply **reply) {
  *reply = NULL;
  c->request.len = 0;
  xf__cmd script; /* a plain read where k's clock is not fresh: the read script */
  const xf__cmd *sent =
      xf__entry_read_as(cmd, k->clock, cmd->plain_out ? xf__now_ms() : 0, &script);
  if ((asking && xf__resp_append(&c->request, 1, asking_cmd.argv, asking_cmd.lens) != 0) ||
      xf__resp_append_cmd(&c->request, sent) != 0)
    return xf__fail(c, XF_ENOMEM, "out of memory for a %d-argument command", cmd->argc);
  int rc = write_request(c, k, cmd->argv[0]);
  if (rc == XF_OK && asking) {
    xf__reply *ok = NULL;
    rc = read_reply(c, k, "ASKING", &ok);
    if (rc == XF_OK && ok->type == XF_REPLY_ERROR)
      rc = xf__fail(c, XF_EPROTO, "ASKING: %s", ok->str);
    if (ok)
      xf__reply_free(ok);
  }
  if (rc == XF_OK)
    rc = read_reply(c, k, cmd->argv[0], reply);
  if (rc == XF_OK && cmd->clock_out) /* whose clock the reply tells of */
    *cmd->clock_out = k->clock;
  if (rc == XF_OK && cmd->track_out) /* whether its value may be kept near */
    *cmd->track_out = k->track;
  return rc;
}

/* Runs the connection's setup (setup.c), its commands in one write; with a
 * near cache, CLIENT TRACKING on REDIRECT to the node's invalidation
 * connection last: the connection is tracked once it said OK (else, or when
 * that connection cannot be had, it serves untracked: nothing kept near). */
static int setup(xf_client *c, xf__conn *k) {
  xf__setup s;
  xf__setup_build(c, k->readonly ? XF_SETUP_REPLICA : 0, &s);
  xf__track track = {0};
  long long redirect_id;
  if (c->near && xf__near_arm(c->near, c, k->host, k->port, k->unix_path, &redirect_id,
                              &track) == XF_OK)
    xf__setup_add_tracking(&s, redirect_id);
  else if (c->near)
    c->errstr[0] = '\0'; /* an untracked connection is no failure */
  c->request.len = 0;
  for (int i = 0; i < s.n; i++)
    if (xf__resp_append_cmd(&c->request, &s.cmd[i]) != 0)
      return xf__fail(c, XF_ENOMEM, "out of memory for the connection setup");
  int rc = s.n ? write_request(c, k, s.cmd[0].argv[0]) : XF_OK;
  for (int i = 0; rc == XF_OK && i < s.n; i++) {
    xf__reply *r;
    rc = read_reply(c, k, s.cmd[i].argv[0], &r);
    if (rc == XF_OK) {
      rc = xf__setup_judge(c, s.kind[i], r);
      if (rc == XF_OK && s.kind[i] == XF__SETUP_TRACKING && r->type != XF_REPLY_ERROR) {
        xf__near_watch(&track, k->link->s.fd);
        k->track = track;
      }
      xf__reply_free(r);
    }
  }
  return rc == XF_EIO ? XF_ECONNECT : rc; /* not set up: not connected */
}

/* Opens k's stream (TCP keepalive, TLS when the client has it) within the
 * connect timeout. XF_OK, or the stream's code with its reason on c. */
static int open_link(xf_client *c, xf__conn *k, int ms) {
  struct xf__link *l = k->link = calloc(1, sizeof *l);
  if (!l || !(l->rd = xf__reader_create()))
    return xf__fail(c, XF_ENOMEM, "out of memory for a connection");
  xf__stream_init(&l->s);
  xf__io r = k->unix_path ? xf__stream_open_unix(&l->s, k->unix_path, c->tls)
                          : xf__stream_open_tcp(&l->s, k->host, k->port, c->tls);
  int rc = r == XF__IO_FAIL ? xf__stream_code(&l->s)
                            : xf__stream_connect_blocking(&l->s, xf__now_ms() + ms);
  return rc == XF_OK ? XF_OK : xf__fail(c, rc, "%s", l->s.errstr);
}

static int connect_now(xf_client *c, xf__conn *k) {
  int ms = c->grace_ms && c->grace_ms < c->connect_timeout_ms ? c->grace_ms
                                                              : c->connect_timeout_ms;
  int rc = open_link(c, k, ms);
  if (rc == XF_OK)
    rc = setup(c, k);
  k->refused_rc = rc == XF_EAUTH || rc == XF_EINVAL || rc == XF_ETLS ? rc : 0;
  if (rc != XF_OK) {
    drop(c, k, rc);
    return rc;
  }
  if (!k->clock) /* NULL when out of memory: every read asks the server */
    k->clock = malloc(sizeof *k->clock);
  if (k->clock) /* maybe another server (a failover) */
    xf__clock_reset(k->clock);
  char name[300];
  xf__server_up(c, &k->breaker, &k->was_up, xf__conn_name(k, name, sizeof name));
  return rc;
}

int xf__conn_open(xf_client *c, xf__conn *k) {
  xf__client_check_fork(c);
  if (k->link && xf__track_stale(&k->track))
    unlink_conn(k, 0); /* tracked under a lost invalidation connection: re-arm */
  if (k->link)
    return XF_OK;
  if (!xf__breaker_allows(&k->breaker, xf__now_ms()))
    return xf__fail(c, k->refused_rc ? k->refused_rc : XF_ECONNECT,
                    "circuit open after: %s", k->breaker.why);
  return connect_now(c, k);
}

int xf__conn_command(xf_client *c, xf__conn *k, const xf__cmd *cmd, int asking,
                     xf__reply **reply) {
  *reply = NULL;
  xf__client_check_fork(c);
  int was_connected = k->link != NULL;
  int rc = xf__conn_open(c, k);
  if (rc != XF_OK)
    return rc;
  rc = roundtrip(c, k, cmd, asking, reply);
  if (rc == XF_EIO && was_connected && k->peer_closed) {
    /* The server closed a connection that was working (its idle timeout,
     * CLIENT KILL, a proxy's cut-off): not a server that is down. Reconnect
     * once, at once, and send again before the breaker has a say. Every
     * command xfetch sends is safe to repeat: the read is read-only; the
     * lease answers "won" again to its own token; a write that was applied
     * is refused the second time (its lease is gone), so it is reported
     * uncached, never applied twice; release, delete and SCRIPT LOAD are
     * idempotent. */
    unlink_conn(k, 0);
    rc = connect_now(c, k); /* on failure: counted, dropped, breaker armed */
    if (rc != XF_OK)
      return rc;
    rc = roundtrip(c, k, cmd, asking, reply);
  }
  if (rc != XF_OK) {
    drop(c, k, rc); /* a failed stream cannot be reused */
  }
  return rc;
}

/* Marks commands [from, n) failed with rc (no reply). */
static void fail_from(size_t from, size_t n, int rc, int *rcs) {
  for (size_t i = from; i < n; i++)
    rcs[i] = rc;
}

/* Writes the encoded pipeline and reads its n replies; the count read is in
 * *got. */
static int exchange(xf_client *c, xf__conn *k, size_t n, int *rcs, xf__reply **replies,
                    size_t *got) {
  int rc = write_request(c, k, "pipeline");
  for (*got = 0; rc == XF_OK && *got < n; ++*got) {
    rc = read_reply(c, k, "pipeline", &replies[*got]);
    if (rc != XF_OK)
      break;
    rcs[*got] = XF_OK;
  }
  return rc;
}

/* The pipeline on k: a plain read goes as the read script when k's clock
 * is not fresh (xf__entry_read_as), the clock read once for all. */
static int encode(xf_client *c, xf__conn *k, size_t n, const xf__cmd *const *cmds) {
  c->request.len = 0;
  int64_t now_ms = -1;
  for (size_t i = 0; i < n; i++) {
    xf__cmd script;
    if (cmds[i]->plain_out && now_ms < 0)
      now_ms = xf__now_ms();
    if (xf__resp_append_cmd(&c->request,
                            xf__entry_read_as(cmds[i], k->clock, now_ms, &script)) != 0)
      return xf__fail(c, XF_ENOMEM, "out of memory for a pipeline of %zu commands", n);
  }
  return XF_OK;
}

int xf__conn_pipeline(xf_client *c, xf__conn *k, size_t n, const xf__cmd *const *cmds,
                      int *rcs, xf__reply **replies) {
  memset(replies, 0, n * sizeof *replies);
  int was_connected = k->link != NULL;
  int rc = xf__conn_open(c, k);
  if (rc == XF_OK)
    rc = encode(c, k, n, cmds);
  if (rc != XF_OK) {
    fail_from(0, n, rc, rcs);
    return rc;
  }
  size_t got = 0;
  rc = exchange(c, k, n, rcs, replies, &got);
  if (rc == XF_EIO && got == 0 && was_connected && k->peer_closed) {
    /* As in xf__conn_command: a working connection the server closed is
     * reopened once and the whole pipeline sent again (every command can be
     * sent twice; none got a reply). */
    unlink_conn(k, 0);
    rc = connect_now(c, k); /* on failure: counted, dropped, breaker armed */
    if (rc != XF_OK) {
      fail_from(0, n, rc, rcs);
      return rc;
    }
    rc = encode(c, k, n, cmds); /* the setup commands reused the buffer */
    if (rc == XF_OK)
      rc = exchange(c, k, n, rcs, replies, &got);
  }
  for (size_t i = 0; i < got; i++) {
    if (cmds[i]->clock_out)
      *cmds[i]->clock_out = k->clock;
    if (cmds[i]->track_out)
      *cmds[i]->track_out = k->track;
  }
  if (rc != XF_OK) {
    fail_from(got, n, rc, rcs);
    drop(c, k, rc);
  }
  return rc;
}
