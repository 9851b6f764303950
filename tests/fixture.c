#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#include "fixture.h"
#include "port_free.h"
#include "thread_fail.h"

static xft_server shared;

void xft_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

int xft_wait_child(pid_t pid, int timeout_s) {
  int status = 0;
  for (int waited_ms = 0; waited_ms < timeout_s * 1000; waited_ms += 10) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return status;
    if (r < 0)
      return -1;
    xft_sleep_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

/* A port that was free a moment ago, drawn at random below the kernel's
 * ephemeral range (32768 and up on Linux): a port bind() picks comes from
 * that range, where any outgoing connection may take it before the server
 * binds it, and two test binaries asking at once may be given the same one. */
int xft_free_port(void) {
  static unsigned seed;
  if (!seed)
    seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int attempt = 0; attempt < 100; attempt++) {
    int port = 10000 + (int)(rand_r(&seed) % 22000);
    if (xft_port_free(port))
      return port;
  }
  return -1;
}

/* Whether this server answers PING (NOAUTH counts) on its own Unix socket:
 * a TCP port may be answered by another test's server that took it (this
 * one then exits), and redis-server opens its Unix socket only after every
 * TCP and TLS port it was given. */
static int answers_ping(const xft_server *s) {
  struct timeval tv = {0, 200000};
  redisContext *r = redisConnectUnixWithTimeout(s->unix_path, tv);
  int ok = 0;
  if (r && !r->err) {
    redisReply *rep = redisCommand(r, "PING");
    ok = rep && (rep->type == REDIS_REPLY_STATUS ||
                 (rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "NOAUTH")));
    if (rep)
      freeReplyObject(rep);
  }
  if (r)
    redisFree(r);
  return ok;
}

int xft_server_start(xft_server *s, const char *const *extra) {
  return xft_server_start_on(s, 0, extra);
}

int xft_server_start_on(xft_server *s, int fixed_port, const char *const *extra) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "/tmp/xft-redis-XXXXXX");
  if (!mkdtemp(s->dir))
    return -1;
  snprintf(s->unix_path, sizeof s->unix_path, "%s/redis.sock", s->dir);
  for (int attempt = 0; attempt < 5; attempt++) {
    s->port = fixed_port ? fixed_port : xft_free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[64] = {"redis-server",
                            "--port",
                            port,
                            "--bind",
                            "127.0.0.1",
                            "--dir",
                            s->dir,
                            "--save",
                            "",
                            "--appendonly",
                            "no",
                            "--unixsocket",
                            s->unix_path,
                            "--unixsocketperm",
                            "700",
                            "--daemonize",
                            "no",
                            "--loglevel",
                            "warning",
                            "--logfile",
                            "redis.log"};
    int n = 21;
    for (int i = 0; extra && extra[i] && n < 62; i++)
      argv[n++] = extra[i];
    argv[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive an aborted test run */
      execvp("redis-server", (char *const *)argv);
      _exit(127);
    }
    for (int i = 0; i < 200; i++) {
      if (answers_ping(s))
        return 0;
      if (waitpid(s->pid, NULL, WNOHANG) == s->pid)
        break; /* died: port taken, try another */
      xft_sleep_ms(10);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  return -1;
}

void xft_server_stop(xft_server *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
  if (s->dir[0] && system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", s->dir);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
  (void)set;
  if (xft_server_start(&shared, NULL) != 0) {
    fprintf(stderr, "fixture: cannot start redis-server\n");
    exit(1);
  }
  /* Criterion's workers are new processes: they find the server here. */
  char port[16];
  snprintf(port, sizeof port, "%d", shared.port);
  setenv("XFT_REDIS_PORT", port, 1);
  setenv("XFT_REDIS_SOCK", shared.unix_path, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  (void)stats;
  xft_server_stop(&shared);
}

int xft_port(void) {
  const char *port = getenv("XFT_REDIS_PORT");
  cr_assert_not_null(port, "no shared redis-server (XFT_REDIS_PORT unset)");
  return atoi(port);
}

const char *xft_unix_path(void) { return getenv("XFT_REDIS_SOCK"); }

int xft_entry_format(void) {
  const char *format = getenv("XFT_ENTRY_FORMAT");
  return format ? atoi(format) : 0;
}

xf_client *xft_client_port(int port, uint64_t seed) {
  return xft_client_format(port, seed, xft_entry_format());
}

static int open_with(xf_client **c, int port, uint64_t seed, int format) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = seed;
  o.entry_format = format;
  o.connect_timeout_ms = o.command_timeout_ms = XFT_PATIENT_MS;
  *c = NULL;
  return xf_client_open(c, &o);
}

static xf_client *client_with(int port, uint64_t seed, int format) {
  xf_client *c = NULL;
  int rc = open_with(&c, port, seed, format);
  cr_assert_eq(rc, XF_OK, "xf_client_open: %s (%s)", xf_strerror(rc), xf_errmsg(NULL));
  return c;
}

int xft_client_open(xf_client **c, uint64_t seed) {
  const char *port = getenv("XFT_REDIS_PORT");
  if (!port) { /* no shared server: never a port of the default's */
    *c = NULL;
    return XF_EINVAL;
  }
  return open_with(c, atoi(port), seed, xft_entry_format());
}

int xft_record_open(int rc, struct xft_fail *f, const char *who) {
  if (rc != XF_OK)
    xft_fail_record(f, "%s: xf_client_open returned %d (%s): %s", who, rc, xf_strerror(rc),
                    xf_errmsg(NULL));
  return rc;
}

xf_client *xft_client_format(int port, uint64_t seed, int format) {
  return client_with(port, seed, format);
}

xf_client *xft_client_patient(int port, uint64_t seed) {
  return client_with(port, seed, xft_entry_format());
}

int xft_listen_loopback(int backlog, int *port) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert_geq(lfd, 0);
  cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(lfd, backlog), 0);
  cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return lfd;
}

xf_client *xft_client(uint64_t seed) { return xft_client_port(xft_port(), seed); }

redisContext *xft_redis_port(int port) {
  redisContext *r = redisConnect("127.0.0.1", port);
  cr_assert(r && !r->err, "raw connect to %d failed", port);
  return r;
}

redisContext *xft_redis(void) { return xft_redis_port(xft_port()); }

static redisReply *vcmd(redisContext *r, const char *fmt, va_list ap) {
  redisReply *rep = redisvCommand(r, fmt, ap);
  cr_assert_not_null(rep, "command %s failed: %s", fmt, r->errstr);
  return rep;
}

redisReply *xft_cmd(redisContext *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = vcmd(r, fmt, ap);
  va_end(ap);
  return rep;
}

long long xft_int(redisContext *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = vcmd(r, fmt, ap);
  va_end(ap);
  cr_assert_eq(rep->type, REDIS_REPLY_INTEGER, "%s: not an integer reply", fmt);
  long long v = rep->integer;
  freeReplyObject(rep);
  return v;
}

long long xft_info_int(redisContext *r, const char *field) {
  redisReply *rep = xft_cmd(r, "INFO");
  char needle[128];
  snprintf(needle, sizeof needle, "\r\n%s:", field);
  const char *at = strstr(rep->str, needle);
  long long n = at ? atoll(at + strlen(needle)) : -1;
  freeReplyObject(rep);
  return n;
}

long long xft_command_calls(redisContext *r, const char *cmd) {
  redisReply *rep = xft_cmd(r, "INFO commandstats");
  char needle[64];
  snprintf(needle, sizeof needle, "cmdstat_%s:calls=", cmd);
  const char *at = strstr(rep->str, needle);
  long long n = at ? atoll(at + strlen(needle)) : 0;
  freeReplyObject(rep);
  return n;
}

long long xft_read_calls(redisContext *r) {
  return xft_command_calls(r, "get") + xft_command_calls(r, "mget") +
         xft_command_calls(r, "hmget") + xft_command_calls(r, "evalsha_ro");
}

int64_t xft_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long xft_server_ms(redisContext *r) {
  redisReply *rep = xft_cmd(r, "TIME");
  long long ms = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
  freeReplyObject(rep);
  return ms;
}

int xft_under_valgrind(void) { return RUNNING_ON_VALGRIND; }

int xft_loader_calls(xft_loader *l) { return __atomic_load_n(&l->calls, __ATOMIC_SEQ_CST); }

int xft_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key;
  (void)keylen;
  xft_loader *l = ud;
  __atomic_add_fetch(&l->calls, 1, __ATOMIC_SEQ_CST);
  if (l->sleep_ms)
    xft_sleep_ms(l->sleep_ms);
  while (__atomic_load_n(&l->held, __ATOMIC_ACQUIRE))
    xft_sleep_ms(1);
  if (l->fail_rc)
    return l->fail_rc;
  if (l->not_found) {
    xf_sink_not_found(sink);
    return 0;
  }
  return xf_sink_set(sink, l->value, l->len ? l->len : strlen(l->value));
}

void xft_loader_release(xft_loader *l) { __atomic_store_n(&l->held, 0, __ATOMIC_RELEASE); }

/* (fixture.h) Busy until the probe's PING says so: from then on the other
 * tests' commands are refused, not merely slow. */
redisContext *xft_busy_start(int port) {
  redisContext *b = xft_redis_port(port);
  redisAppendCommand(b, "EVAL %s 0", "while true do end");
  int done = 0;
  while (!done)
    cr_assert_eq(redisBufferWrite(b, &done), REDIS_OK);
  redisContext *probe = xft_redis_port(port);
  int busy = 0;
  for (int i = 0; i < 1000 && !busy; i++) {
    redisReply *r = xft_cmd(probe, "PING");
    busy = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSY", 4) == 0;
    freeReplyObject(r);
    if (!busy)
      xft_sleep_ms(2);
  }
  cr_assert(busy, "the server never got busy");
  redisFree(probe);
  return b;
}

void xft_busy_stop(int port, redisContext *b) {
  redisContext *k = xft_redis_port(port);
  freeReplyObject(xft_cmd(k, "SCRIPT KILL"));
  redisFree(k);
  void *r = NULL;
  redisGetReply(b, &r); /* the killed script's error */
  freeReplyObject(r);
  redisFree(b);
}

xf_reply *xft_call_exchange_try(int fd, xf_reader *rd, const xf_call *call, size_t chunk,
                                const char **why) {
  size_t len;
  const char *req = xf_call_request(call, &len);
  if (!req) {
    *why = "the call has no request";
    return NULL;
  }
  if (write(fd, req, len) != (ssize_t)len) {
    *why = "the request's write failed";
    return NULL;
  }
  for (;;) {
    xf_reply *reply;
    if (xf_reader_next(rd, &reply) != XF_OK) {
      *why = "xf_reader_next failed";
      return NULL;
    }
    if (reply)
      return reply;
    char buf[4096];
    ssize_t n = read(fd, buf, chunk && chunk < sizeof buf ? chunk : sizeof buf);
    if (n <= 0) {
      *why = "the reply's read failed";
      return NULL;
    }
    if (xf_reader_feed(rd, buf, (size_t)n) != XF_OK) {
      *why = "xf_reader_feed failed";
      return NULL;
    }
  }
}

xf_reply *xft_call_exchange(int fd, xf_reader *rd, const xf_call *call, size_t chunk) {
  const char *why = "";
  xf_reply *reply = xft_call_exchange_try(fd, rd, call, chunk, &why);
  cr_assert_not_null(reply, "the call's exchange: %s", why);
  return reply;
}
