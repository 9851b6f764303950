/* One blocking connection to one Redis server: connect (timeouts, keepalive,
 * then the setup of setup.c), the breaker, a command, a pipeline. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client.h"
#include "client_io.h"
#include "conn.h"
#include "reader.h"
#include "reply.h"
#include "setup.h"

#define REPLY_SLICE_MS 50 /* how often a reply wait asks options.interrupt */

int xf__conn_init(xf__conn *k, const char *host, int port, const char *unix_path) {
  memset(k, 0, sizeof *k);
  k->port = port;
  k->unix_path = host ? NULL : unix_path;
  if (host && !(k->host = strdup(host)))
    return XF_ENOMEM;
  return XF_OK;
}

void xf__conn_free(xf__conn *k) {
  if (!k)
    return;
  if (k->ctx)
    redisFree(k->ctx);
  free(k->host);
  free(k->clock);
  memset(k, 0, sizeof *k);
}

void xf__conn_forget(xf__conn *k) {
  if (k->ctx)
    redisFree(k->ctx); /* closes only the child's copy of the descriptor */
  k->ctx = NULL;
  xf__breaker_close(&k->breaker);
}

const char *xf__conn_name(const xf__conn *k, char *buf, size_t len) {
  if (k->host)
    snprintf(buf, len, "%s:%d", k->host, k->port);
  else
    snprintf(buf, len, "%s", k->unix_path ? k->unix_path : "?");
  return buf;
}

static struct timeval to_timeval(int ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  return tv;
}

/* The breaker keeps why the connection went away, for its message (the
 * handle's errstr is cleared by every call). A call the interrupt ended, or
 * a release sent after one (c->grace_ms), says nothing about the server:
 * the connection goes (a reply may still be on its way: never read it as
 * the next command's), the breaker stays closed and nothing is counted. */
static void drop(xf_client *c, xf__conn *k, int rc) {
  if (k->ctx)
    redisFree(k->ctx);
  k->ctx = NULL;
  if (rc == XF_ECANCELED || c->grace_ms)
    return;
  c->stats.redis_errors++;
  xf__breaker_trip(&k->breaker, c->breaker_ms, xf__now_ms(), c->errstr);
}

/* Sends the encoded request with MSG_NOSIGNAL, so a peer that closed the
 * socket gives EPIPE instead of a SIGPIPE that would kill the process (hiredis
 * 0.14 writes with write(2)). hiredis then only reads: its output buffer
 * stays empty. Returns 0, or -1 with errno set. */
static int send_request(xf__conn *k, const xf__buf *request) {
  const char *at = request->data;
  size_t left = request->len;
  while (left > 0) {
    ssize_t n = send(k->ctx->fd, at, left, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    at += n;
    left -= (size_t)n;
  }
  return 0;
}

/* Waits until k's socket can be read, until deadline_ms, in poll() slices
 * of at most REPLY_SLICE_MS when options.interrupt is to be asked between
 * them. XF_OK, XF_ECANCELED or XF_EIO (timed out), the reason on c. */
static int wait_readable(xf_client *c, xf__conn *k, const char *what, int64_t deadline_ms) {
  int ask = c->interrupt && !c->grace_ms; /* a release after an interrupt: not again */
  for (;;) {
    int64_t left = deadline_ms - xf__now_ms();
    if (left <= 0)
      return xf__fail(c, XF_EIO, "%s: no reply within %d ms", what,
                      c->grace_ms ? c->grace_ms : c->command_timeout_ms);
    struct pollfd p = {.fd = k->ctx->fd, .events = POLLIN};
    int n = poll(&p, 1, (int)(ask && left > REPLY_SLICE_MS ? REPLY_SLICE_MS : left));
    if (n > 0) /* a reply, or an error or EOF that the read reports */
      return XF_OK;
    if (n < 0 && errno != EINTR)
      return xf__fail(c, XF_EIO, "%s: poll: %s", what, strerror(errno));
    if (ask && c->interrupt(c->interrupt_ud) != 0)
      return xf__fail(c, XF_ECANCELED, "interrupted (options.interrupt) waiting for %s",
                      what);
  }
}

/* redisGetReply, with the socket read only once poll() says it has bytes: a
 * slow or stopped server then holds the call for one slice, not for the
 * command timeout (hiredis 0.14's blocking read cannot be cut short). The
 * command timeout counts for the whole reply, here. XF_OK with *r set, or
 * with *r NULL when hiredis failed (its error in k->ctx); XF_ECANCELED or
 * XF_EIO with the reason on c. */
__attribute__((noinline)) static int get_reply_sliced(xf_client *c, xf__conn *k,
                                                      const char *what, void **r) {
  int ms = c->grace_ms && c->grace_ms < c->command_timeout_ms ? c->grace_ms
                                                              : c->command_timeout_ms;
  int64_t deadline_ms = xf__now_ms() + ms;
  if (redisGetReplyFromReader(k->ctx, r) != REDIS_OK) /* a reply already read */
    return XF_OK;
  while (!*r) {
    int rc = wait_readable(c, k, what, deadline_ms);
    if (rc != XF_OK)
      return rc;
    if (redisBufferRead(k->ctx) != REDIS_OK ||
        redisGetReplyFromReader(k->ctx, r) != REDIS_OK)
      return XF_OK;
  }
  return XF_OK;
}

/* Reads one reply; on failure the code, with the reason on the client.
 * Without an interrupt to ask, hiredis' blocking read: a hit pays no poll()
 * (a grace is only ever set after an interrupt fired: one test is enough). */
static int read_reply(xf_client *c, xf__conn *k, const char *what, xf__reply **reply) {
  void *r = NULL;
  int ok = REDIS_OK;
  if (!c->interrupt) {
    ok = redisGetReply(k->ctx, &r);
  } else {
    int rc = get_reply_sliced(c, k, what, &r);
    if (rc != XF_OK) { /* canceled, timed out: said on c */
      k->peer_closed = 0;
      return rc;
    }
  }
  if (ok != REDIS_OK || !r) {
    k->peer_closed =
        k->ctx->err == REDIS_ERR_EOF ||
        (k->ctx->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
    return xf__fail(c, k->ctx->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EIO, "%s: %s", what,
                    k->ctx->errstr[0] ? k->ctx->errstr : "no reply");
  }
  *reply = r;
  return XF_OK;
}

static int write_request(xf_client *c, xf__conn *k, const char *what) {
  k->peer_closed = 0;
  if (send_request(k, &c->request) == 0)
    return XF_OK;
  k->peer_closed = errno == EPIPE || errno == ECONNRESET;
  return xf__fail(c, XF_EIO, "%s: %s", what,
                  errno == EAGAIN ? "write timed out" : strerror(errno));
}

static const xf__cmd asking_cmd = {.argc = 1, .argv = {"ASKING"}, .lens = {6}};

/* One command on the live connection (ASKING first when asked). On failure
 * *reply is NULL, the code is returned with the reason on the client; the
 * caller drops the connection. */
static int roundtrip(xf_client *c, xf__conn *k, const xf__cmd *cmd, int asking,
                     xf__reply **reply) {
  *reply = NULL;
  c->request.len = 0;
  if ((asking && xf__resp_append(&c->request, 1, asking_cmd.argv, asking_cmd.lens) != 0) ||
      xf__resp_append_cmd(&c->request, cmd) != 0)
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
  return rc;
}

/* Runs the connection's setup (setup.c), its commands in one write. */
static int setup(xf_client *c, xf__conn *k) {
  xf__setup s;
  xf__setup_build(c, k->readonly ? XF_SETUP_REPLICA : 0, &s);
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
      xf__reply_free(r);
    }
  }
  return rc == XF_EIO ? XF_ECONNECT : rc; /* not set up: not connected */
}

int xf__conn_tune(xf_client *c, redisContext *ctx, int tcp, int blocking) {
  if (blocking && redisSetTimeout(ctx, to_timeval(c->command_timeout_ms)) != REDIS_OK)
    return xf__fail(c, XF_ECONNECT, "setting the command timeout: %s", ctx->errstr);
  if (tcp) /* keepalive fails on Unix sockets */
    redisEnableKeepAlive(ctx);
  return XF_OK;
}

static int connect_now(xf_client *c, xf__conn *k) {
  int ms = c->grace_ms && c->grace_ms < c->connect_timeout_ms ? c->grace_ms
                                                              : c->connect_timeout_ms;
  struct timeval ctv = to_timeval(ms);
  k->ctx = k->unix_path ? redisConnectUnixWithTimeout(k->unix_path, ctv)
                        : redisConnectWithTimeout(k->host, k->port, ctv);
  if (!k->ctx)
    return xf__fail(c, XF_ENOMEM, "cannot allocate the Redis context");
  xf__reader_adopt(k->ctx->reader); /* its replies are xf__reply objects */
  char name[300];
  int rc = k->ctx->err ? xf__fail(c, XF_ECONNECT, "connect to %s: %s",
                                  xf__conn_name(k, name, sizeof name), k->ctx->errstr)
                       : xf__conn_tune(c, k->ctx, !k->unix_path, 1);
  if (rc == XF_OK)
    rc = setup(c, k);
  k->refused_rc = rc == XF_EAUTH || rc == XF_EINVAL ? rc : 0;
  if (rc != XF_OK) {
    drop(c, k, rc);
  } else {
    xf__breaker_close(&k->breaker);
    if (!k->clock) /* NULL when out of memory: every read asks the server */
      k->clock = malloc(sizeof *k->clock);
    if (k->clock) /* maybe another server (a failover) */
      xf__clock_reset(k->clock);
  }
  return rc;
}

int xf__conn_open(xf_client *c, xf__conn *k) {
  xf__client_check_fork(c);
  if (k->ctx)
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
  int was_connected = k->ctx != NULL;
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
    redisFree(k->ctx);
    k->ctx = NULL;
    rc = connect_now(c, k); /* on failure: counted, dropped, breaker armed */
    if (rc != XF_OK)
      return rc;
    rc = roundtrip(c, k, cmd, asking, reply);
  }
  if (rc != XF_OK) {
    drop(c, k, rc); /* a hiredis context with an error cannot be reused */
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

static int encode(xf_client *c, size_t n, const xf__cmd *const *cmds) {
  c->request.len = 0;
  for (size_t i = 0; i < n; i++)
    if (xf__resp_append_cmd(&c->request, cmds[i]) != 0)
      return xf__fail(c, XF_ENOMEM, "out of memory for a pipeline of %zu commands", n);
  return XF_OK;
}

int xf__conn_pipeline(xf_client *c, xf__conn *k, size_t n, const xf__cmd *const *cmds,
                      int *rcs, xf__reply **replies) {
  memset(replies, 0, n * sizeof *replies);
  int was_connected = k->ctx != NULL;
  int rc = xf__conn_open(c, k);
  if (rc == XF_OK)
    rc = encode(c, n, cmds);
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
    redisFree(k->ctx);
    k->ctx = NULL;
    rc = connect_now(c, k); /* on failure: counted, dropped, breaker armed */
    if (rc != XF_OK) {
      fail_from(0, n, rc, rcs);
      return rc;
    }
    rc = encode(c, n, cmds); /* the setup commands reused the buffer */
    if (rc == XF_OK)
      rc = exchange(c, k, n, rcs, replies, &got);
  }
  for (size_t i = 0; i < got; i++)
    if (cmds[i]->clock_out)
      *cmds[i]->clock_out = k->clock;
  if (rc != XF_OK) {
    fail_from(got, n, rc, rcs);
    drop(c, k, rc);
  }
  return rc;
}
