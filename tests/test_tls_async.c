/* The event-loop driver (xf_async) over TLS against real TLS redis-servers
 * (tls_fixture.c), each test body run on libuv and on libevent: hits with
 * one handshake per connection, single flight, refusals worded for people
 * (XF_ETLS, never served fail-open), mutual TLS, plain TCP to a TLS port. */
#define _DEFAULT_SOURCE /* <uv.h> under -std=c11 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>
#include <xfetch_libevent.h>
#include <xfetch_libuv.h>

#include "async.h"
#include "tls.h"
#include "tls_fixture.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define QUICK_MS (RUNNING_ON_VALGRIND ? 5000 : 1000)
#define MAX_CALLS 16

enum { LIBUV, LIBEVENT };

/* One loop of either kind, the handle on it, and its calls' outcomes. */
typedef struct run {
  int kind;
  uv_loop_t uv;
  struct event_base *base;
  xf_async *ac;
  int n, fired, loads;
  int rc[MAX_CALLS], source[MAX_CALLS];
  char errmsg[MAX_CALLS][300];
  char conn_err[300]; /* why the connection went, as the driver keeps it */
} run;

static const char *loop_name(int kind) { return kind == LIBUV ? "libuv" : "libevent"; }

static void open_loop(run *r, int kind) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  if (kind == LIBUV)
    cr_assert_eq(uv_loop_init(&r->uv), 0);
  else
    cr_assert_not_null(r->base = event_base_new());
}

static int open_handle(run *r, const xf_options *o) {
  return r->kind == LIBUV ? xf_async_open_libuv(&r->ac, o, &r->uv)
                          : xf_async_open_libevent(&r->ac, o, r->base);
}

static void run_loop(run *r) {
  if (r->kind == LIBUV)
    uv_run(&r->uv, UV_RUN_DEFAULT);
  else
    event_base_dispatch(r->base);
}

static void close_loop(run *r) {
  if (r->kind == LIBUV) {
    uv_run(&r->uv, UV_RUN_DEFAULT); /* the closed handles' callbacks */
    cr_assert_eq(uv_loop_close(&r->uv), 0);
  } else {
    event_base_free(r->base);
  }
}

static xf_options tls_opts(int port) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout_ms = o.command_timeout_ms = RUNNING_ON_VALGRIND ? 10000 : 2000;
  o.key_prefix = "tlsa:";
  o.tls.enable = 1;
  o.tls.ca_file = xft_tls_file("ca.crt");
  return o;
}

typedef struct slot {
  run *r;
  int i;
} slot;

static void loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  ((run *)ud)->loads++;
  xf_async_load_done(load, "tls-async", 9);
}

static void on_done(int rc, const xf_value *v, void *privdata) {
  slot *s = privdata;
  run *r = s->r;
  r->rc[s->i] = rc;
  r->source[s->i] = v ? (int)v->source : -1;
  snprintf(r->errmsg[s->i], sizeof r->errmsg[s->i], "%s", xf_async_errmsg(r->ac));
  snprintf(r->conn_err, sizeof r->conn_err, "%s", r->ac->core->conn_err);
  if (rc == XF_OK)
    cr_expect(v->len == 9 && memcmp(v->data, "tls-async", 9) == 0);
  if (++r->fired == r->n)
    xf_async_close(r->ac);
}

/* n calls of key at once on the open handle, the loop run until all are
 * over (the last callback closes the handle). */
static void calls(run *r, const char *key, int n) {
  slot s[MAX_CALLS];
  xf_policy p = XF_POLICY_INIT;
  r->n = n;
  r->fired = 0;
  for (int i = 0; i < n; i++) {
    s[i] = (slot){r, i};
    cr_assert_eq(
        xf_async_get_or_compute(r->ac, key, strlen(key), &p, loader, r, on_done, &s[i]),
        XF_OK);
  }
  run_loop(r);
  cr_assert_eq(r->fired, n);
}

static void unique_key(char *buf, size_t n, const char *what, int kind) {
  snprintf(buf, n, "%s:%s:%d:%ld", what, loop_name(kind), getpid(), (long)xft_now_ms());
}

ParameterizedTestParameters(tls_async, miss_then_hit_with_one_handshake) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
ParameterizedTest(int *kind, tls_async, miss_then_hit_with_one_handshake) {
  char key[80];
  unique_key(key, sizeof key, "mh", *kind);
  xf_options o = tls_opts(xft_tls_port());
  run r;
  for (int round = 0; round < 2; round++) {
    open_loop(&r, *kind);
    cr_assert_eq(open_handle(&r, &o), XF_OK);
    calls(&r, key, 1);
    cr_assert_eq(r.rc[0], XF_OK, "%s", r.errmsg[0]);
    cr_assert_eq(r.source[0], round ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
    close_loop(&r);
  }
}

ParameterizedTestParameters(tls_async, a_connection_handshakes_once_for_many_calls) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
/* Sixteen calls on a cold key from one loop turn: one load, and one TLS
 * handshake however many commands the connection carried. */
ParameterizedTest(int *kind, tls_async, a_connection_handshakes_once_for_many_calls) {
  char key[80];
  unique_key(key, sizeof key, "cold", *kind);
  xf_options o = tls_opts(xft_tls_port());
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, &o), XF_OK);
  xf_async *ac = r.ac;
  slot s[MAX_CALLS];
  xf_policy p = XF_POLICY_INIT;
  r.n = MAX_CALLS + 1; /* the handle stays open: closed below */
  for (int i = 0; i < MAX_CALLS; i++) {
    s[i] = (slot){&r, i};
    cr_assert_eq(
        xf_async_get_or_compute(ac, key, strlen(key), &p, loader, &r, on_done, &s[i]),
        XF_OK);
  }
  while (r.fired < MAX_CALLS)
    r.kind == LIBUV ? (void)uv_run(&r.uv, UV_RUN_ONCE)
                    : (void)event_base_loop(r.base, EVLOOP_ONCE);
  cr_assert_eq(r.loads, 1);
  for (int i = 0; i < MAX_CALLS; i++)
    cr_assert_eq(r.rc[i], XF_OK, "%d: %s", i, r.errmsg[i]);
  cr_assert_eq(xf__tls_handshakes(ac->core->tls), 1, "one handshake per connection");
  xf_async_close(ac);
  close_loop(&r);
}

/* What is wrong (parameters must hold no pointer: Criterion runs each in a
 * process of its own). */
enum { WRONG_CA, WRONG_NAME, NO_CLIENT_CERT };
static const char *const refusal_words[] = {"certificate not trusted", "host name mismatch",
                                            "client certificate"};

typedef struct refusal {
  int kind;
  int wrong;
} refusal;

ParameterizedTestParameters(tls_async, a_tls_failure_is_etls_never_served_fail_open) {
  static refusal cases[] = {
      {LIBUV, WRONG_CA},      {LIBEVENT, WRONG_CA},    {LIBUV, WRONG_NAME},
      {LIBEVENT, WRONG_NAME}, {LIBUV, NO_CLIENT_CERT}, {LIBEVENT, NO_CLIENT_CERT},
  };
  return cr_make_param_array(refusal, cases, sizeof cases / sizeof cases[0]);
}
/* The calls end with XF_ETLS and the reason (from the handshake, then from
 * the breaker that repeats it), their loader never run. */
ParameterizedTest(refusal *t, tls_async, a_tls_failure_is_etls_never_served_fail_open) {
  const char *words = refusal_words[t->wrong];
  xf_options o = tls_opts(t->wrong == NO_CLIENT_CERT ? xft_mtls_port() : xft_tls_port());
  if (t->wrong == WRONG_CA)
    o.tls.ca_file = xft_tls_file("other-ca.crt");
  if (t->wrong == WRONG_NAME)
    o.tls.server_name = "redis.example.org";
  for (int lazy = 0; lazy < 2; lazy++) {
    o.lazy_connect = lazy;
    run r;
    open_loop(&r, t->kind);
    cr_assert_eq(open_handle(&r, &o), XF_OK); /* the handshake runs on the loop */
    int64_t t0 = xft_now_ms();
    calls(&r, "refused", 3);
    cr_assert_lt(xft_now_ms() - t0, QUICK_MS);
    cr_assert_eq(r.loads, 0, "a TLS failure is not served fail-open");
    for (int i = 0; i < 3; i++) {
      cr_assert_eq(r.rc[i], XF_ETLS, "%s %d: %d %s", loop_name(t->kind), i, r.rc[i],
                   r.errmsg[i]);
      cr_assert(strstr(r.errmsg[i], words), "%s", r.errmsg[i]);
    }
    close_loop(&r);
  }
}

ParameterizedTestParameters(tls_async, mutual_tls_with_a_client_certificate_hits) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
ParameterizedTest(int *kind, tls_async, mutual_tls_with_a_client_certificate_hits) {
  char key[80];
  unique_key(key, sizeof key, "mtls", *kind);
  xf_options o = tls_opts(xft_mtls_port());
  o.tls.cert_file = xft_tls_file("client.crt");
  o.tls.key_file = xft_tls_file("client.key");
  for (int round = 0; round < 2; round++) {
    run r;
    open_loop(&r, *kind);
    cr_assert_eq(open_handle(&r, &o), XF_OK);
    calls(&r, key, 1);
    cr_assert_eq(r.rc[0], XF_OK, "%s", r.errmsg[0]);
    cr_assert_eq(r.source[0], round ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
    close_loop(&r);
  }
}

ParameterizedTestParameters(tls_async, plain_tcp_to_a_tls_port_fails_open_quickly) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
/* Not a TLS failure (no TLS was asked): the server drops the client, the
 * call fails open at once, and the reason says to use rediss://. */
ParameterizedTest(int *kind, tls_async, plain_tcp_to_a_tls_port_fails_open_quickly) {
  xf_options o = tls_opts(xft_tls_port());
  memset(&o.tls, 0, sizeof o.tls);
  o.breaker_ms = -1;
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, &o), XF_OK);
  int64_t t0 = xft_now_ms();
  calls(&r, "plain", 1);
  cr_assert_lt(xft_now_ms() - t0, QUICK_MS);
  cr_assert_eq(r.rc[0], XF_OK, "%s", r.errmsg[0]);
  cr_assert_eq(r.source[0], XF_SOURCE_UNCACHED);
  cr_assert(strstr(r.conn_err, "rediss://"), "%s", r.conn_err);
  close_loop(&r);
}

typedef struct acl_case {
  int kind;
  int wrong_password;
} acl_case;

ParameterizedTestParameters(tls_async, an_acl_user_over_tls) {
  static acl_case cases[] = {{LIBUV, 0}, {LIBEVENT, 0}, {LIBUV, 1}, {LIBEVENT, 1}};
  return cr_make_param_array(acl_case, cases, sizeof cases / sizeof cases[0]);
}
/* An ACL user (made over the server's plain port) with its password hits
 * over TLS; with a wrong one the calls end with XF_EAUTH in the server's
 * words, never a TLS failure nor a fail-open. */
ParameterizedTest(acl_case *t, tls_async, an_acl_user_over_tls) {
  char user[64], key[80];
  snprintf(user, sizeof user, "tlsa-%d", getpid());
  redisContext *admin = xft_redis_port(xft_tls_plain_port());
  redisReply *ok = xft_cmd(admin, "ACL SETUSER %s on >s3cret ~* +@all", user);
  cr_assert(ok && ok->type == REDIS_REPLY_STATUS, "ACL SETUSER refused");
  freeReplyObject(ok);
  redisFree(admin);
  unique_key(key, sizeof key, "acl", t->kind);
  xf_options o = tls_opts(xft_tls_port());
  o.username = user;
  o.password = t->wrong_password ? "not-it" : "s3cret";
  for (int round = 0; round < 2; round++) {
    run r;
    open_loop(&r, t->kind);
    cr_assert_eq(open_handle(&r, &o), XF_OK);
    calls(&r, key, 1);
    if (t->wrong_password) {
      cr_assert_eq(r.rc[0], XF_EAUTH, "%d: %s", r.rc[0], r.errmsg[0]);
      cr_assert(strstr(r.errmsg[0], "WRONGPASS"), "%s", r.errmsg[0]);
      cr_assert_eq(r.loads, 0);
    } else {
      cr_assert_eq(r.rc[0], XF_OK, "%s", r.errmsg[0]);
      cr_assert_eq(r.source[0], round ? XF_SOURCE_CACHE : XF_SOURCE_LOADER);
    }
    close_loop(&r);
  }
}

/* Runs r's loop one turn at a time until r has fired `fired` callbacks and
 * has `up` connections up (the handle stays open). */
static void turn_until(run *r, int fired, int up) {
  int64_t t0 = xft_now_ms();
  for (;;) {
    xf_stats st;
    xf_async_stats(r->ac, &st);
    if (r->fired >= fired && (int)st.connections == up)
      return;
    cr_assert_lt(xft_now_ms() - t0, 10000, "fired %d of %d, %d connections up, want %d",
                 r->fired, fired, (int)st.connections, up);
    r->kind == LIBUV ? (void)uv_run(&r->uv, UV_RUN_ONCE)
                     : (void)event_base_loop(r->base, EVLOOP_ONCE);
  }
}

ParameterizedTestParameters(tls_async, a_killed_connection_comes_back_with_one_handshake) {
  static int kinds[] = {LIBUV, LIBEVENT};
  return cr_make_param_array(int, kinds, 2);
}
/* The server drops the handle's idle TLS connection (CLIENT KILL): the loop
 * sees it go, the next call opens it again (one more handshake) and hits. */
ParameterizedTest(int *kind, tls_async, a_killed_connection_comes_back_with_one_handshake) {
  char key[80];
  unique_key(key, sizeof key, "kill", *kind);
  xf_options o = tls_opts(xft_tls_port());
  run r;
  open_loop(&r, *kind);
  cr_assert_eq(open_handle(&r, &o), XF_OK);
  xf_async *ac = r.ac;
  slot s[2] = {{&r, 0}, {&r, 1}};
  xf_policy p = XF_POLICY_INIT;
  r.n = 3; /* never reached: the handle stays open */
  cr_assert_eq(
      xf_async_get_or_compute(ac, key, strlen(key), &p, loader, &r, on_done, &s[0]), XF_OK);
  turn_until(&r, 1, 1);
  cr_assert_eq(r.source[0], XF_SOURCE_LOADER, "%s", r.errmsg[0]);
  cr_assert_eq(xf__tls_handshakes(ac->core->tls), 1);
  /* This connection only: other tests share the server. */
  struct sockaddr_in me;
  socklen_t len = sizeof me;
  cr_assert_eq(getsockname(ac->conns[0]->s.fd, (struct sockaddr *)&me, &len), 0);
  redisContext *admin = xft_redis_port(xft_tls_plain_port());
  redisReply *killed = xft_cmd(admin, "CLIENT KILL ADDR 127.0.0.1:%d", ntohs(me.sin_port));
  cr_assert(killed && killed->type == REDIS_REPLY_INTEGER && killed->integer == 1,
            "CLIENT KILL ADDR 127.0.0.1:%d killed no one", ntohs(me.sin_port));
  freeReplyObject(killed);
  redisFree(admin);
  turn_until(&r, 1, 0); /* the loop saw the connection close */
  cr_assert_eq(
      xf_async_get_or_compute(ac, key, strlen(key), &p, loader, &r, on_done, &s[1]), XF_OK);
  turn_until(&r, 2, 1);
  cr_assert_eq(r.rc[1], XF_OK, "%s", r.errmsg[1]);
  cr_assert_eq(r.source[1], XF_SOURCE_CACHE, "%s", r.conn_err);
  cr_assert_eq(r.loads, 1);
  cr_assert_eq(xf__tls_handshakes(ac->core->tls), 2, "one more handshake");
  xf_async_close(ac);
  close_loop(&r);
}
