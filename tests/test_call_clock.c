/* GET-priced hits through the sans-I/O call on a link (xf_link_*): the link
 * keeps the estimate of its server's clock, so a read is one plain command
 * (HMGET, GET) once it is fresh, and the estimate's bounds hold when the
 * driver's clock is an hour off or jumps (test_clock.c's behaviours for the
 * blocking driver, through the call). A driver that answers calls by hand
 * keeps the read script. Each test counts commands on a redis-server of its
 * own (INFO commandstats). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "link_net.h"

/* A driver's connection: a link (net.link) or, answered by hand, a socket
 * and its reply parser; net.skew_ms is added to every now_ms the driver
 * gives. */
typedef struct wire {
  xft_net net;
  redisContext *sock; /* by hand: only its file descriptor is used */
  xf_reader *reader;
} wire;

static wire open_wire(xf_client *c, int port, int on_link) {
  wire w = {.net = {.fd = -1}};
  if (on_link) {
    w.net = xft_net_open(c, port, 0);
  } else {
    w.sock = xft_redis_port(port);
    cr_assert_eq(xf_reader_open(&w.reader), XF_OK);
  }
  return w;
}

static void close_wire(wire *w) {
  if (w->net.link)
    xft_net_close(&w->net);
  xf_reader_close(w->reader);
  if (w->sock)
    redisFree(w->sock);
}

static int64_t now(const wire *w) { return xft_net_now(&w->net); }

/* Writes the call's request and reads until its reply is complete. */
static xf_reply *exchange(wire *w, const xf_call *call) {
  return xft_call_exchange(w->sock->fd, w->reader, call, 0);
}

/* A loader whose every value names its generation. */
typedef struct gen {
  int n, sleep_ms;
} gen;

/* Runs a get-or-compute call to the end as a driver would. */
static int drive(wire *w, xf_client *c, const char *key, const xf_policy *p, gen *g,
                 xf_value *out) {
  xf_call *call;
  cr_assert_eq(xf_call_start(&call, c, key, strlen(key), p, now(w)), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    if (step == XF_CALL_SEND && w->net.link) {
      step = xft_net_exchange(&w->net, call);
    } else if (step == XF_CALL_SEND) {
      cr_assert_eq(xf_call_target(call, NULL, NULL), 1);
      step = xf_call_reply(call, exchange(w, call), now(w));
    } else if (step == XF_CALL_LOAD) {
      int64_t t0 = xft_now_ms();
      xft_sleep_ms(g->sleep_ms);
      char buf[32];
      int len = snprintf(buf, sizeof buf, "g%d", ++g->n);
      step = xf_call_loaded(call, buf, (size_t)len, (xft_now_ms() - t0) * 1000, now(w));
    } else {
      usleep((useconds_t)xf_call_wait_ms(call, now(w)) * 1000);
      step = xf_call_woke(call, now(w));
    }
  }
  int rc = xf_call_result(call, out);
  xf_call_free(call);
  return rc;
}

static xf_client *config_client(int port, int format) {
  xf_options o = XF_OPTIONS_INIT;
  o.lazy_connect = 1;
  o.port = port; /* never used for I/O by the client: the wire's */
  o.seed = 3;
  o.entry_format = format;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

typedef struct counts {
  long long scripts, plain;
} counts;

static counts count(redisContext *r, int format) {
  return (counts){xft_command_calls(r, "evalsha_ro"),
                  xft_command_calls(r, format == XF_ENTRY_STRING ? "get" : "hmget")};
}

/* ---- what a hit costs ----------------------------------------------------------- */

#define HITS 200

/* N hits through a link cost ~N plain reads and a script per refresh of the
 * estimate (0.5 s); answered by hand, N scripts. */
static void hits_cost_plain_reads(int format) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *r = xft_redis_port(srv.port);
  xf_client *c = config_client(srv.port, format);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;           /* no early refresh: every call after the first is a hit */
  long long inner = -1; /* plain reads each read script runs (commandstats counts them) */
  for (int on_link = 0; on_link <= 1; on_link++) {
    wire w = open_wire(c, srv.port, on_link);
    char key[32];
    snprintf(key, sizeof key, "cc:hits:%d", on_link);
    gen g = {0};
    xf_value v;
    cr_assert_eq(drive(&w, c, key, &p, &g, &v), XF_OK, "%s", xf_errmsg(c));
    xf_value_free(&v);
    counts before = count(r, format);
    int64_t t0 = xft_now_ms();
    for (int i = 0; i < HITS; i++) {
      cr_assert_eq(drive(&w, c, key, &p, &g, &v), XF_OK, "%s", xf_errmsg(c));
      cr_assert_eq(v.source, XF_SOURCE_CACHE);
      cr_assert_str_eq(v.data, "g1");
      xf_value_free(&v);
    }
    long long refreshes = (xft_now_ms() - t0) / 500 + 2;
    counts after = count(r, format);
    long long scripts = after.scripts - before.scripts, plain = after.plain - before.plain;
    if (on_link) {
      plain -= scripts * inner; /* the driver's own */
      cr_expect_leq(scripts, refreshes, "%lld scripts for %d hits", scripts, HITS);
      cr_expect_geq(plain, HITS - refreshes, "%lld plain reads for %d hits", plain, HITS);
      cr_expect_eq(scripts + plain, HITS, "one command per hit");
    } else {
      cr_assert_eq(scripts, HITS, "answered by hand: the read script, every hit");
      cr_assert_eq(plain % HITS, 0, "%lld plain reads, all in scripts", plain);
      inner = plain / HITS;
    }
    close_wire(&w);
  }
  xf_client_close(c);
  redisFree(r);
  xft_server_stop(&srv);
}

Test(call_clock, hits_are_one_hmget_each) { hits_cost_plain_reads(XF_ENTRY_HASH); }

Test(call_clock, hits_are_one_get_each_on_format_2) {
  hits_cost_plain_reads(XF_ENTRY_STRING);
}

/* ---- a driver whose clock is off, or jumps ---------------------------------------- */

#define MAX_GEN 4096

/* Runs calls on key for ms of real time, the driver's clock skewed by
 * skews[i] during the i-th of nskews equal slices. Every value served from
 * the cache must be one whose expiry (no later than its write's return +
 * ttl) is not behind the call's start; most calls are hits, most hits plain
 * reads; XFetch still refreshes early and the episodes load once. */
static void hammer(const char *key, int ms, const int64_t *skews, int nskews) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *r = xft_redis_port(srv.port);
  xf_client *c = config_client(srv.port, XF_ENTRY_HASH);
  wire w = open_wire(c, srv.port, 1);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 200;
  p.stale_ms = 0;
  p.stale_if_error_ms = 0;
  p.beta = 1.0;
  gen g = {.sleep_ms = 10};
  static int64_t written_at[MAX_GEN + 1]; /* real ms the write of gen n returned */
  memset(written_at, 0, sizeof written_at);
  counts before = count(r, XF_ENTRY_HASH);
  int64_t start = xft_now_ms();
  for (int64_t t = start; t - start < ms; t = xft_now_ms()) {
    w.net.skew_ms = skews[(t - start) * nskews / ms];
    xf_value v;
    int64_t called = xft_now_ms();
    cr_assert_eq(drive(&w, c, key, &p, &g, &v), XF_OK, "%s", xf_errmsg(c));
    int n = atoi(v.data + 1);
    cr_assert(n >= 1 && n <= MAX_GEN);
    if (v.source == XF_SOURCE_LOADER)
      written_at[n] = xft_now_ms();
    else
      cr_assert(v.source == XF_SOURCE_CACHE, "source %d", v.source);
    if (v.source == XF_SOURCE_CACHE && written_at[n])
      cr_assert(called <= written_at[n] + p.ttl_ms, "gen %d served %lld ms past its expiry",
                n, (long long)(called - written_at[n] - p.ttl_ms));
    xf_value_free(&v);
  }
  counts after = count(r, XF_ENTRY_HASH);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_gt(st.early, 0, "XFetch refreshed early");
  cr_expect_gt(st.hits, st.loads * 10, "most calls were hits");
  long long scripts = after.scripts - before.scripts; /* each read is one or the other */
  cr_expect_lt(scripts, (long long)st.hits / 2, "%lld read scripts for %llu hits", scripts,
               (unsigned long long)st.hits);
  close_wire(&w);
  xf_client_close(c);
  redisFree(r);
  xft_server_stop(&srv);
}

typedef struct skewed { /* by value: the tests run in other processes */
  char key[16];
  int ms, n;
  int64_t skews[6];
} skewed;

static const skewed drivers[] = {
    {"cc:ahead", 1200, 1, {3600000}},
    {"cc:behind", 1200, 1, {-3600000}},
    {"cc:jumps", 1800, 6, {0, 3600000, -3600000, 0, -120000, 250}},
};

ParameterizedTestParameters(call_clock, a_skewed_driver_keeps_every_promise) {
  return cr_make_param_array(skewed, (skewed *)drivers, sizeof drivers / sizeof *drivers);
}

ParameterizedTest(const skewed *d, call_clock, a_skewed_driver_keeps_every_promise) {
  hammer(d->key, d->ms, d->skews, d->n);
}

/* A lease left by a caller that died: the skewed driver waits for it to run
 * out on the server's clock (its hits plain), then loads, once. */
static void dead_lease_expires(const char *key, int64_t skew) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *r = xft_redis_port(srv.port);
  xf_client *c = config_client(srv.port, XF_ENTRY_HASH);
  wire w = open_wire(c, srv.port, 1);
  w.net.skew_ms = skew;
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 10000; /* a driver that misjudged the lease waits all of it, then fails */
  p.on_wait_timeout = XF_WAIT_FAIL;
  gen g = {0};
  xf_value v;
  /* A hit first: the reads after it are plain, the estimate learned. */
  cr_assert_eq(drive(&w, c, "cc:warm", &p, &g, &v), XF_OK, "%s", xf_errmsg(c));
  xf_value_free(&v);
  long long deadline = xft_server_ms(r) + 300;
  freeReplyObject(xft_cmd(r, "HSET %s l dead:%lld", key, deadline));
  freeReplyObject(xft_cmd(r, "PEXPIRE %s 300", key));
  int64_t t0 = xft_now_ms();
  cr_assert_eq(drive(&w, c, key, &p, &g, &v), XF_OK, "%s", xf_errmsg(c));
  int64_t waited = xft_now_ms() - t0;
  cr_expect_eq(g.n, 2, "one load for the key");
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  /* Up to 5 s: half the wait budget (2.2 s seen under ASan on a busy machine). */
  cr_expect(waited >= 200 && waited < 5000, "waited %lld ms for a 300 ms lease",
            (long long)waited);
  xf_value_free(&v);
  close_wire(&w);
  xf_client_close(c);
  redisFree(r);
  xft_server_stop(&srv);
}

Test(call_clock, leases_expire_for_a_driver_an_hour_ahead) {
  dead_lease_expires("cc:lease-ahead", 3600000);
}

Test(call_clock, leases_expire_for_a_driver_an_hour_behind) {
  dead_lease_expires("cc:lease-behind", -3600000);
}
