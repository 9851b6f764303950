/* The connection setup as the drivers run it, on a real server: the blocking
 * client and the event-loop driver send the list setup.c builds
 * (seen with MONITOR), a setup command refused by a busy server is
 * "unavailable" (calls fail open), not an authentication failure, and a
 * connection closed during its setup is opened once more, the breaker
 * closed. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xfetch_libuv.h>

#include "fixture.h"
#include "setup.h"

/* ---- the event-loop driver: n calls on one loop ------------------------------- */

typedef struct arun {
  uv_loop_t loop;
  xf_async *ac;
  int n, fired, rc[8];
  xf_source source[8];
} arun;

static void async_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)ud, (void)key, (void)keylen;
  xf_async_load_done(load, "v", 1);
}

typedef struct aslot {
  arun *r;
  int i;
} aslot;

static void on_call(int rc, const xf_value *v, void *privdata) {
  aslot *s = privdata;
  s->r->rc[s->i] = rc;
  s->r->source[s->i] = rc == XF_OK ? v->source : (xf_source)-1;
  if (++s->r->fired == s->r->n)
    xf_async_close(s->r->ac);
}

/* Runs n calls on key with options o until each has called back. */
static void async_calls(arun *r, const xf_options *o, int n, const char *key) {
  memset(r, 0, sizeof *r);
  r->n = n;
  aslot slots[8];
  cr_assert_eq(uv_loop_init(&r->loop), 0);
  cr_assert_eq(xf_async_open_libuv(&r->ac, o, &r->loop), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  for (int i = 0; i < n; i++) {
    slots[i] = (aslot){r, i};
    cr_assert_eq(xf_async_get_or_compute(r->ac, key, strlen(key), &p, async_loader, NULL,
                                         on_call, &slots[i]),
                 XF_OK);
  }
  uv_run(&r->loop, UV_RUN_DEFAULT);
  cr_assert_eq(r->fired, n);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&r->loop), 0);
}

/* ---- MONITOR: which commands each connection sent ----------------------------- */

typedef struct conn_log {
  char addr[64];
  int n;
  char cmd[16][160]; /* the MONITOR line after "[db addr] " (truncated) */
} conn_log;

/* Reads m's MONITOR lines until the marker ECHO, grouped by connection. */
static int monitor_until_echo(redisContext *m, conn_log *logs, int max) {
  int nlogs = 0;
  for (;;) {
    void *v = NULL;
    cr_assert_eq(redisGetReply(m, &v), REDIS_OK, "MONITOR: %s", m->errstr);
    redisReply *line = v;
    char *open = strchr(line->str, '['), *close = open ? strchr(open, ']') : NULL;
    cr_assert(open && close && strchr(open, ' '), "MONITOR line: %s", line->str);
    char *addr = strchr(open, ' ') + 1;
    *close = '\0';
    const char *cmd = close + 2;
    int done = strncmp(cmd, "\"ECHO\"", 6) == 0;
    if (strcmp(addr, "lua") == 0) { /* what the scripts ran */
      freeReplyObject(line);
      continue;
    }
    int at = 0;
    while (at < nlogs && strcmp(logs[at].addr, addr) != 0)
      at++;
    if (!done && at == nlogs && nlogs < max)
      snprintf(logs[nlogs++].addr, sizeof logs->addr, "%s", addr);
    if (!done && at < nlogs && logs[at].n < 16)
      snprintf(logs[at].cmd[logs[at].n++], sizeof logs->cmd[0], "%s", cmd);
    freeReplyObject(line);
    if (done)
      return nlogs;
  }
}

/* How MONITOR shows setup command i: its quoted arguments, AUTH's redacted,
 * a SCRIPT LOAD's source left out. */
static void as_monitored(xf_client *c, int flags, int i, char *out, size_t cap) {
  xf__setup s;
  xf__setup_build(c, flags, &s);
  xf__buf b = {0};
  cr_assert_eq(xf__resp_append_cmd(&b, &s.cmd[i]), 0);
  const char *p = b.data;
  int argc = atoi(p + 1);
  p = strchr(p, '\n') + 1;
  size_t used = 0;
  int auth = 0;
  out[0] = '\0';
  for (int a = 0; a < argc && !(a == 2 && strncmp(out, "\"SCRIPT\"", 8) == 0); a++) {
    int n = atoi(p + 1);
    p = strchr(p, '\n') + 1;
    if (a == 0)
      auth = n == 4 && memcmp(p, "AUTH", 4) == 0;
    used += (size_t)snprintf(out + used, cap - used, "%s\"%.*s\"", a ? " " : "",
                             auth && a ? 10 : n, auth && a ? "(redacted)" : p);
    p += n + 2;
  }
  xf__buf_free(&b);
}

/* The first commands of log are the setup for flags, then the call's. */
static void expect_setup(const conn_log *log, xf_client *c, int flags, const char *who) {
  xf__setup s;
  xf__setup_build(c, flags, &s);
  int n = s.n;
  cr_assert_gt(log->n, n, "%s sent %d commands", who, log->n);
  for (int i = 0; i < n; i++) {
    char want[160];
    as_monitored(c, flags, i, want, sizeof want);
    cr_expect_eq(strncmp(log->cmd[i], want, strlen(want)), 0, "%s, command %d: %s, not %s",
                 who, i, log->cmd[i], want);
  }
  cr_expect_eq(strncmp(log->cmd[n], "\"EVALSHA", 8), 0, "%s: then the call: %s", who,
               log->cmd[n]);
}

Test(setup_live, the_blocking_and_async_drivers_send_the_same_setup) {
  xft_server s; /* private: MONITOR sees this test's connections only */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  redisContext *r = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(r, "ACL SETUSER same on >pw ~* +@all"));
  redisContext *m = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(m, "MONITOR"));
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.username = "same";
  o.password = "pw";
  o.db = 3;
  o.cluster = XF_CLUSTER_OFF;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK, "%s", xf_strerror(XF_OK));
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "setup:same", 10, "x", 1, &p), XF_OK, "%s", xf_errmsg(c));
  arun a;
  o.lazy_connect = 1;
  async_calls(&a, &o, 1, "setup:same");
  cr_expect_eq(a.rc[0], XF_OK);
  cr_expect_eq(a.source[0], XF_SOURCE_CACHE, "same db: the blocking client's value");
  freeReplyObject(xft_cmd(r, "ECHO end"));
  conn_log logs[3] = {0};
  cr_assert_eq(monitor_until_echo(m, logs, 3), 2,
               "the blocking, then the async connection");
  expect_setup(&logs[0], c, 0, "blocking");
  expect_setup(&logs[1], c, XF_SETUP_SCRIPTS, "async");
  cr_expect_str_eq(logs[0].cmd[0], logs[1].cmd[0], "the same AUTH");
  cr_expect_str_eq(logs[0].cmd[1], logs[1].cmd[1], "the same SELECT");
  cr_expect_str_eq(logs[1].cmd[1], "\"SELECT\" \"3\"");
  xf_client_close(c);
  redisFree(m);
  redisFree(r);
  xft_server_stop(&s);
}

/* ---- a busy server at connect time ------------------------------------------- */

static const char *const busy_config[] = {"--busy-reply-threshold", "10", NULL};

/* SELECT is refused with BUSY while a script runs (AUTH is not): that is a
 * server that cannot serve now, so calls fail open as when it is down. It
 * used to be XF_EAUTH: every call failed as if misconfigured. */
Test(setup_live, busy_at_select_is_unavailable_and_calls_fail_open) {
  xft_server s; /* private: a busy server would stall the other tests */
  cr_assert_eq(xft_server_start(&s, busy_config), 0);
  redisContext *busy = xft_busy_start(s.port);
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.db = 3;
  o.cluster = XF_CLUSTER_OFF;
  xf_client *c;
  cr_expect_eq(xf_client_open(&c, &o), XF_EUNAVAILABLE);
  o.lazy_connect = 1;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  cr_expect_eq(xf_ping(c), XF_EUNAVAILABLE);
  cr_expect(strstr(xf_errmsg(c), "SELECT: BUSY"), "%s", xf_errmsg(c));
  xf_client_close(c);
  cr_assert_eq(xf_client_open(&c, &o), XF_OK); /* a fresh breaker: the call connects */
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "setup:busy", 10, &p, xft_load, &l, &v), XF_OK, "%s",
               xf_errmsg(c));
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
  xf_client_close(c);
  arun a;
  async_calls(&a, &o, 3, "setup:busy");
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(a.rc[i], XF_OK, "async call %d: %s", i, xf_errname(a.rc[i]));
    cr_expect_eq(a.source[i], XF_SOURCE_UNCACHED, "async call %d", i);
  }
  xft_busy_stop(s.port, busy);
  xft_server_stop(&s);
}

/* ---- a connection closed during its setup ------------------------------------- */

/* A relay on loopback in front of the real server: it closes each of the
 * first `cut` connections as soon as its first bytes (the setup) arrive, as
 * a CLIENT KILL landing in the setup's round trip does, and passes the
 * others through both ways. */
#define RELAY_PAIRS 8
typedef struct relay {
  int lfd, port, target, cut;
  int accepted; /* atomic: read by the test */
  int stop;     /* atomic */
  pthread_t thread;
} relay;

static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            listen(fd, 16) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  *port = ntohs(a.sin_port);
  return fd;
}

static int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  return fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? fd : -1;
}

static void *relay_run(void *arg) {
  relay *r = arg;
  struct pollfd fds[1 + 2 * RELAY_PAIRS];
  int nfds = 1;
  fds[0] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
  for (int i = 1; i < 1 + 2 * RELAY_PAIRS; i++)
    fds[i] = (struct pollfd){.fd = -1};
  while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
    if (poll(fds, (nfds_t)nfds, 50) <= 0)
      continue;
    if (fds[0].revents & POLLIN) {
      int cfd = accept(r->lfd, NULL, NULL);
      int n = __atomic_add_fetch(&r->accepted, 1, __ATOMIC_ACQ_REL);
      if (cfd >= 0 && n <= r->cut) { /* the setup arrives, then the cut */
        char buf[4096];
        struct pollfd one = {.fd = cfd, .events = POLLIN};
        if (poll(&one, 1, 10000) > 0)
          (void)!read(cfd, buf, sizeof buf);
        close(cfd);
      } else if (cfd >= 0) {
        int sfd = connect_loopback(r->target), i = 1;
        while (i < nfds && fds[i].fd >= 0)
          i += 2;
        if (sfd < 0 || i >= 1 + 2 * RELAY_PAIRS) {
          close(cfd);
          if (sfd >= 0)
            close(sfd);
        } else {
          fds[i] = (struct pollfd){.fd = cfd, .events = POLLIN};
          fds[i + 1] = (struct pollfd){.fd = sfd, .events = POLLIN};
          if (i + 2 > nfds)
            nfds = i + 2;
        }
      }
    }
    for (int i = 1; i < nfds; i++) { /* i and its peer (i ^ 1 in 1-based pairs) */
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      int peer = i % 2 ? i + 1 : i - 1;
      char buf[16384];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got <= 0 || write(fds[peer].fd, buf, (size_t)got) != got) {
        close(fds[i].fd), close(fds[peer].fd);
        fds[i].fd = fds[peer].fd = -1;
      }
    }
  }
  for (int i = 1; i < nfds; i++)
    if (fds[i].fd >= 0)
      close(fds[i].fd);
  return NULL;
}

static void relay_start(relay *r, int target, int cut) {
  *r = (relay){.target = target, .cut = cut};
  r->lfd = listen_loopback(&r->port);
  cr_assert_eq(pthread_create(&r->thread, NULL, relay_run, r), 0);
}

static void relay_stop(relay *r) {
  __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
  pthread_join(r->thread, NULL);
  close(r->lfd);
}

/* The blocking client and the pool (one connection code): the first
 * connection is closed during its setup; the call is served by Redis all
 * the same, on a second connection, and the breaker never opened. Closed
 * during the setup twice in a row, the server is taken as down: the call
 * fails open, the breaker open. */
Test(setup_live, a_connection_closed_during_its_setup_is_opened_once_more) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  for (int pool = 0; pool < 2; pool++) {
    for (int cut = 1; cut <= 2; cut++) {
      relay r;
      relay_start(&r, s.port, cut);
      xf_options o = XF_OPTIONS_INIT;
      o.port = r.port;
      o.lazy_connect = 1;
      o.cluster = XF_CLUSTER_OFF;
      xf_client *c = NULL;
      xf_pool *pl = NULL;
      int opened = pool ? xf_pool_open(&pl, &o, 1, 0) : xf_client_open(&c, &o);
      if (opened != XF_OK) /* the relay ends before the assertion leaves r */
        relay_stop(&r);
      cr_assert_eq(opened, XF_OK);
      xf_policy p = XF_POLICY_INIT;
      xft_loader l = {.value = "v"};
      xf_value v;
      char key[32];
      snprintf(key, sizeof key, "setup:cut:%d:%d", pool, cut);
      int rc = pool ? xf_pool_get_or_compute(pl, key, strlen(key), &p, xft_load, &l, &v)
                    : xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v);
      const char *who = pool ? "pool" : "blocking";
      cr_expect_eq(rc, XF_OK, "%s: %s", who, pool ? xf_pool_errmsg() : xf_errmsg(c));
      xf_stats st;
      if (pool) {
        xf_pool_info info;
        xf_pool_stats(pl, &info);
        st = info.clients;
      } else {
        xf_client_stats(c, &st);
      }
      if (cut == 1) {
        cr_expect_eq(v.source, XF_SOURCE_LOADER, "%s: cached, not failed open", who);
        cr_expect_eq(st.redis_errors, 0, "%s", who);
        cr_expect_eq(__atomic_load_n(&r.accepted, __ATOMIC_ACQUIRE), 2, "%s", who);
      } else {
        cr_expect_eq(v.source, XF_SOURCE_UNCACHED, "%s: two cuts in a row: down", who);
        cr_expect_eq(__atomic_load_n(&r.accepted, __ATOMIC_ACQUIRE), 2, "%s", who);
      }
      if (rc == XF_OK)
        xf_value_free(&v);
      xf_pool_close(pl);
      xf_client_close(c);
      relay_stop(&r);
    }
  }
  xft_server_stop(&s);
}
