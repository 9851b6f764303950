/* Options, connect and reconnect (timeouts, AUTH, SELECT), the circuit
 * breaker, and the handle's error state. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

#define DEFAULT_TIMEOUT_MS 1000
#define DEFAULT_BREAKER_MS 1000
#define DEFAULT_MAX_KEY_LEN 65536
#define DEFAULT_MAX_VALUE_LEN (64u * 1024 * 1024)
#define DEFAULT_TOMBSTONE_MS 60000

int xf__fail(xf_client *c, int rc, const char *fmt, ...) {
  if (c) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static int64_t clock_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t xf__now_us(void) { return clock_us(); }
int64_t xf__now_ms(void) { return clock_us() / 1000; }

static struct timeval to_timeval(int ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  return tv;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static uint64_t random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
    v = (uint64_t)clock_us() ^ ((uint64_t)getpid() << 32);
  return v;
}

/* Fork detection without a syscall per command: the child bumps this. */
static unsigned long fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) {
  __atomic_add_fetch(&fork_generation, 1, __ATOMIC_RELAXED);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static unsigned long current_fork_generation(void) {
  return __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
}

unsigned long xf__fork_generation(void) {
  pthread_once(&atfork_once, register_atfork);
  return current_fork_generation();
}

/* Remembers why the connection went away, for the breaker's message (the
 * handle's errstr is cleared by every call). */
static void drop_connection(xf_client *c) {
  memcpy(c->conn_err, c->errstr, sizeof c->conn_err);
  if (c->ctx)
    redisFree(c->ctx);
  c->ctx = NULL;
  if (c->breaker_ms >= 0)
    c->retry_after_ms = xf__now_ms() + c->breaker_ms;
}

/* Sends the encoded request with MSG_NOSIGNAL, so a peer that closed the
 * socket gives EPIPE instead of a SIGPIPE that would kill the process (hiredis
 * 0.14 writes with write(2)). hiredis then only reads: its output buffer
 * stays empty. Returns 0, or -1 with errno set. */
static int send_request(xf_client *c) {
  const char *at = c->request.data;
  size_t left = c->request.len;
  while (left > 0) {
    ssize_t n = send(c->ctx->fd, at, left, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    at += n;
    left -= (size_t)n;
  }
  return 0;
}

/* One command on the live connection. On failure *reply is NULL, the code is
 * returned with the reason on the client; the caller drops the connection. */
static int roundtrip(xf_client *c, int argc, const char *const *argv, const size_t *lens,
                     redisReply **reply) {
  *reply = NULL;
  if (xf__resp_encode(&c->request, argc, argv, lens) != 0)
    return xf__fail(c, XF_ENOMEM, "out of memory for a %d-argument command", argc);
  c->peer_closed = 0;
  if (send_request(c) != 0) {
    c->peer_closed = errno == EPIPE || errno == ECONNRESET;
    return xf__fail(c, XF_EIO, "%s: %s", argv[0],
                    errno == EAGAIN ? "write timed out" : strerror(errno));
  }
  void *r = NULL;
  if (redisGetReply(c->ctx, &r) != REDIS_OK || !r) {
    c->peer_closed =
        c->ctx->err == REDIS_ERR_EOF ||
        (c->ctx->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
    return xf__fail(c, c->ctx->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EIO, "%s: %s", argv[0],
                    c->ctx->errstr[0] ? c->ctx->errstr : "no reply");
  }
  *reply = r;
  return XF_OK;
}

/* Runs a setup command (AUTH, SELECT) on a fresh connection. */
static int setup_command(xf_client *c, int argc, const char **argv) {
  size_t lens[3];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  redisReply *r;
  int rc = roundtrip(c, argc, argv, lens, &r);
  if (rc != XF_OK)
    return XF_ECONNECT; /* roundtrip put the reason on the client */
  int bad = r->type == REDIS_REPLY_ERROR;
  if (bad)
    xf__fail(c, XF_EAUTH, "%s: %s", argv[0], r->str);
  freeReplyObject(r);
  return bad ? XF_EAUTH : XF_OK;
}

static int connect_now(xf_client *c) {
  struct timeval ctv = to_timeval(c->connect_timeout_ms);
  c->ctx = c->unix_path ? redisConnectUnixWithTimeout(c->unix_path, ctv)
                        : redisConnectWithTimeout(c->host, c->port, ctv);
  if (!c->ctx)
    return xf__fail(c, XF_ENOMEM, "cannot allocate the Redis context");
  pthread_once(&atfork_once, register_atfork);
  c->fork_generation = current_fork_generation();
  int rc = XF_OK;
  if (c->ctx->err) {
    rc = xf__fail(c, XF_ECONNECT, "connect to %s%s%d: %s",
                  c->unix_path ? c->unix_path : c->host, c->unix_path ? "" : ":",
                  c->unix_path ? 0 : c->port, c->ctx->errstr);
  } else if (redisSetTimeout(c->ctx, to_timeval(c->command_timeout_ms)) != REDIS_OK) {
    rc = xf__fail(c, XF_ECONNECT, "setting the command timeout: %s", c->ctx->errstr);
  } else if (!c->unix_path) { /* TCP only: keepalive fails on Unix sockets */
    redisEnableKeepAlive(c->ctx);
  }
  if (rc == XF_OK && c->password) {
    const char *auth[] = {"AUTH", c->username ? c->username : "default", c->password};
    rc = setup_command(c, 3, auth);
  }
  if (rc == XF_OK && c->db != 0) {
    char db[16];
    snprintf(db, sizeof db, "%d", c->db);
    const char *select[] = {"SELECT", db};
    rc = setup_command(c, 2, select);
  }
  if (rc != XF_OK) {
    c->stats.redis_errors++;
    drop_connection(c);
  }
  return rc;
}

/* Connects if needed: after a fork the child never reuses the parent's
 * socket, and while the breaker is open no connect is attempted. */
/* A forked child that keeps using the client gets a new identity: its own
 * connection, client id (the lease tokens' prefix) and XFetch stream, so it
 * can never release the parent's lease nor repeat its draws. */
static void renew_after_fork(xf_client *c) {
  if (c->ctx)
    redisFree(c->ctx); /* closes only the child's copy of the descriptor */
  c->ctx = NULL;
  c->retry_after_ms = 0;
  pthread_once(&atfork_once, register_atfork);
  c->fork_generation = current_fork_generation();
  c->id = random_u64();
  c->lease_count = 0;
  xf__pcg32_seed(&c->rng, random_u64(), c->id);
  c->fork_generation = current_fork_generation();
}

void xf__client_check_fork(xf_client *c) {
  if (c->fork_generation != current_fork_generation())
    renew_after_fork(c);
}

static int ensure_connected(xf_client *c) {
  xf__client_check_fork(c);
  if (c->ctx)
    return XF_OK;
  if (c->breaker_ms >= 0 && xf__now_ms() < c->retry_after_ms) {
    return xf__fail(c, XF_ECONNECT, "circuit open after: %s", c->conn_err);
  }
  return connect_now(c);
}

int xf__command(xf_client *c, int argc, const char *const *argv, const size_t *lens,
                redisReply **reply) {
  *reply = NULL;
  int was_connected = c->ctx != NULL;
  int rc = ensure_connected(c);
  if (rc != XF_OK)
    return rc;
  rc = roundtrip(c, argc, argv, lens, reply);
  if (rc == XF_EIO && was_connected && c->peer_closed) {
    /* The server closed a connection that was working (its idle timeout,
     * CLIENT KILL, a proxy's cut-off): not a server that is down. Reconnect
     * once, at once, and send again before the breaker has a say. Every
     * command xfetch sends is safe to repeat: the read is read-only; the
     * lease answers "won" again to its own token; a write that was applied
     * is refused the second time (its lease is gone), so it is reported
     * uncached, never applied twice; release, delete and SCRIPT LOAD are
     * idempotent. */
    redisFree(c->ctx);
    c->ctx = NULL;
    rc = connect_now(c); /* on failure: counted, dropped, breaker armed */
    if (rc != XF_OK)
      return rc;
    rc = roundtrip(c, argc, argv, lens, reply);
  }
  if (rc != XF_OK) {
    c->stats.redis_errors++;
    drop_connection(c); /* a hiredis context with an error cannot be reused */
  }
  return rc;
}

/* Marks commands [from, n) failed with rc (no reply). */
static void fail_from(size_t from, size_t n, int rc, int *rcs) {
  for (size_t i = from; i < n; i++)
    rcs[i] = rc;
}

int xf__command_many(xf_client *c, size_t n, const xf__cmd *const *cmds, int *rcs,
                     redisReply **replies) {
  memset(replies, 0, n * sizeof *replies);
  int rc = ensure_connected(c);
  c->request.len = 0;
  for (size_t i = 0; rc == XF_OK && i < n; i++)
    if (xf__resp_append(&c->request, cmds[i]->argc, cmds[i]->argv, cmds[i]->lens) != 0)
      rc = xf__fail(c, XF_ENOMEM, "out of memory for a pipeline of %zu commands", n);
  if (rc != XF_OK) {
    fail_from(0, n, rc, rcs);
    return rc;
  }
  size_t got = 0;
  if (send_request(c) != 0) {
    rc = xf__fail(c, XF_EIO, "pipeline: %s",
                  errno == EAGAIN ? "write timed out" : strerror(errno));
  } else {
    for (; got < n; got++) {
      void *r = NULL;
      if (redisGetReply(c->ctx, &r) != REDIS_OK || !r) {
        rc = xf__fail(c, c->ctx->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EIO, "pipeline: %s",
                      c->ctx->errstr[0] ? c->ctx->errstr : "no reply");
        break;
      }
      replies[got] = r;
      rcs[got] = XF_OK;
    }
  }
  if (rc != XF_OK) {
    fail_from(got, n, rc, rcs);
    c->stats.redis_errors++;
    drop_connection(c);
  }
  return rc;
}

static int copy_options(xf_client *c, const xf_options *o) {
  c->host = strdup(o->host ? o->host : "127.0.0.1");
  c->unix_path = dup_or_null(o->unix_path);
  c->username = dup_or_null(o->username);
  c->password = dup_or_null(o->password);
  c->prefix = strdup(o->key_prefix ? o->key_prefix : "");
  if (!c->host || !c->prefix || (o->unix_path && !c->unix_path) ||
      (o->username && !c->username) || (o->password && !c->password))
    return XF_ENOMEM;
  c->prefix_len = strlen(c->prefix);
  c->port = o->port ? o->port : 6379;
  c->db = o->db;
  c->connect_timeout_ms =
      o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_TIMEOUT_MS;
  c->command_timeout_ms =
      o->command_timeout_ms ? o->command_timeout_ms : DEFAULT_TIMEOUT_MS;
  c->breaker_ms = o->breaker_ms ? o->breaker_ms : DEFAULT_BREAKER_MS;
  c->max_key_len = o->max_key_len ? o->max_key_len : DEFAULT_MAX_KEY_LEN;
  c->max_value_len = o->max_value_len ? o->max_value_len : DEFAULT_MAX_VALUE_LEN;
  c->share = o->share;
  c->tombstone_ms = o->tombstone_ms ? o->tombstone_ms : DEFAULT_TOMBSTONE_MS;
  return XF_OK;
}

static int check_options(const xf_options *o) {
  return o->port < 0 || o->port > 65535 || o->db < 0 || o->connect_timeout_ms < 0 ||
                 o->command_timeout_ms < 0 || o->tombstone_ms < 0 ||
                 o->tombstone_ms > ((int64_t)1 << 40)
             ? XF_EINVAL
             : XF_OK;
}

int xf_client_open(xf_client **out, const xf_options *opts) {
  if (!out)
    return XF_EINVAL;
  *out = NULL;
  xf_options defaults = XF_OPTIONS_INIT;
  const xf_options *o = opts ? opts : &defaults;
  if (check_options(o) != XF_OK)
    return XF_EINVAL;
  xf_client *c = calloc(1, sizeof *c);
  if (!c)
    return XF_ENOMEM;
  if (copy_options(c, o) != XF_OK) {
    xf_client_close(c);
    return XF_ENOMEM;
  }
  c->id = random_u64();
  /* A given seed makes the draws reproducible: fixed stream too. */
  if (o->seed)
    xf__pcg32_seed(&c->rng, o->seed, 0);
  else
    xf__pcg32_seed(&c->rng, random_u64(), c->id);
  int rc = o->lazy_connect ? XF_OK : connect_now(c);
  if (rc != XF_OK) {
    xf_client_close(c);
    return rc;
  }
  *out = c;
  return XF_OK;
}

void xf_client_close(xf_client *c) {
  if (!c)
    return;
  if (c->ctx)
    redisFree(c->ctx);
  free(c->host);
  free(c->unix_path);
  free(c->username);
  free(c->password);
  free(c->prefix);
  xf__buf_free(&c->request);
  free(c);
}

int xf_ping(xf_client *c) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  const char *argv[] = {"PING"};
  size_t lens[] = {4};
  redisReply *r;
  int rc = xf__command(c, 1, argv, lens, &r);
  if (rc != XF_OK)
    return rc;
  if (r->type == REDIS_REPLY_ERROR)
    rc = xf__fail(c, strncmp(r->str, "NOAUTH", 6) == 0 ? XF_EAUTH : XF_EREDIS, "PING: %s",
                  r->str);
  freeReplyObject(r);
  return rc;
}

const char *xf_errmsg(const xf_client *c) { return c ? c->errstr : "client is NULL"; }

int xf_loader_error(const xf_client *c) { return c ? c->loader_rc : 0; }

void xf_client_stats(const xf_client *c, xf_stats *out) {
  if (!out)
    return;
  if (!c) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = c->stats;
}
