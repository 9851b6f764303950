/* The event-loop driver (xf_async_*) on a libuv loop against a real Redis. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xfetch_libuv.h>

#include "fixture.h"

/* ---- a run: N calls on one loop, each callback counted -------------------------- */

typedef struct run run;

typedef struct slot {
  run *r;
  int fired;
  int rc;
  xf_source source;
} slot;

struct run {
  uv_loop_t loop;
  xf_async *ac;
  int n, fired, close_when_done;
  slot *slots;
  const char *want; /* the value every XF_OK callback must carry */
  int wrong;        /* XF_OK callbacks with another value */
  int by_source[4];
  int loader_error; /* xf_async_loader_error inside the last XF_ELOADER callback */
  char errmsg[256];
  xf_stats stats; /* taken by the last callback */
};

static void on_done(int rc, const xf_value *v, void *privdata) {
  slot *s = privdata;
  run *r = s->r;
  s->fired++;
  s->rc = rc;
  if (rc == XF_OK) {
    s->source = v->source;
    r->by_source[v->source]++;
    if (!r->want || v->len != strlen(r->want) || memcmp(v->data, r->want, v->len) != 0)
      r->wrong++;
  } else {
    cr_expect_null(v);
    r->loader_error = xf_async_loader_error(r->ac);
    snprintf(r->errmsg, sizeof r->errmsg, "%s", xf_async_errmsg(r->ac));
  }
  if (++r->fired == r->n && r->close_when_done) {
    xf_async_stats(r->ac, &r->stats);
    xf_async_close(r->ac); /* from inside a callback: the loop then ends */
  }
}

static void run_open_with(run *r, const xf_options *o) {
  memset(r, 0, sizeof *r);
  cr_assert_eq(uv_loop_init(&r->loop), 0);
  int rc = xf_async_open_libuv(&r->ac, o, &r->loop);
  cr_assert_eq(rc, XF_OK, "xf_async_open_libuv: %s", xf_strerror(rc));
  r->close_when_done = 1;
}

static void run_open(run *r, int port, int lazy) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = 7;
  o.lazy_connect = lazy;
  o.breaker_ms = -1; /* tests that kill Redis want every call to try */
  o.entry_format = xft_entry_format();
  run_open_with(r, &o);
}

/* run_open for a thousand calls at once on the shared server: replies may
 * queue for seconds on a busy machine, and a command timed out would fail
 * open (its own load): 10 s to connect, 30 s for a reply. */
static void run_open_patient(run *r) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.seed = 7;
  o.breaker_ms = -1;
  o.entry_format = xft_entry_format();
  o.connect_timeout_ms = 10000;
  o.command_timeout_ms = 30000;
  run_open_with(r, &o);
}

/* Starts n calls on key, runs the loop until the last callback closed the
 * handle (without close_when_done: until it fired; the sources are then
 * this batch's), and checks each callback fired exactly once. */
static void run_calls(run *r, int n, const char *key, const xf_policy *p,
                      xf_async_loader_fn loader, void *ud) {
  free(r->slots);
  r->fired = 0;
  memset(r->by_source, 0, sizeof r->by_source);
  r->n = n;
  r->slots = calloc((size_t)n, sizeof *r->slots);
  cr_assert_not_null(r->slots);
  for (int i = 0; i < n; i++) {
    r->slots[i].r = r;
    int rc = xf_async_get_or_compute(r->ac, key, strlen(key), p, loader, ud, on_done,
                                     &r->slots[i]);
    cr_assert_eq(rc, XF_OK, "call %d: %s", i, xf_strerror(rc));
  }
  cr_assert_eq(r->fired, 0, "no callback fires inside xf_async_get_or_compute");
  if (r->close_when_done)
    uv_run(&r->loop, UV_RUN_DEFAULT);
  else
    while (r->fired < n)
      uv_run(&r->loop, UV_RUN_ONCE);
  for (int i = 0; i < n; i++)
    cr_expect_eq(r->slots[i].fired, 1, "callback %d fired %d times", i, r->slots[i].fired);
}

static void run_end(run *r) {
  free(r->slots);
  uv_run(&r->loop, UV_RUN_DEFAULT); /* the handles' close callbacks */
  cr_expect_eq(uv_loop_close(&r->loop), 0, "every handle closed");
}

/* ---- loaders ----------------------------------------------------------------------- */

typedef struct loader {
  const char *value;
  int calls;
  int fail_rc;
  int later_ms; /* complete from a loop timer this much later (0: at once) */
  uv_loop_t *loop;
  xf_async_load *held[16]; /* never completed by the loader (hold = 1) */
  int hold, held_n;
  uv_timer_t *closer; /* hold: started once a load is held */
  xft_server *kill;   /* stopped by the first loader call */
} loader;

static void close_now(uv_timer_t *t) {
  xf_async_close(t->data);
  uv_close((uv_handle_t *)t, NULL);
}

typedef struct later {
  uv_timer_t timer;
  loader *l;
  xf_async_load *load;
} later;

static void complete(loader *l, xf_async_load *load) {
  if (l->fail_rc)
    xf_async_load_fail(load, l->fail_rc);
  else
    cr_expect_eq(xf_async_load_done(load, l->value, strlen(l->value)), XF_OK);
}

static void later_closed(uv_handle_t *h) { free(h->data); }

static void later_fired(uv_timer_t *t) {
  later *w = t->data;
  complete(w->l, w->load);
  uv_close((uv_handle_t *)t, later_closed);
}

static void test_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key;
  (void)keylen;
  loader *l = ud;
  if (l->calls++ == 0 && l->kill)
    xft_server_stop(l->kill); /* Redis dies while the lease's winner loads */
  if (l->hold) {
    cr_assert_lt(l->held_n, 16);
    l->held[l->held_n++] = load;
    if (l->closer) /* close while this load is pending */
      uv_timer_start(l->closer, close_now, 10, 0);
  } else if (l->later_ms) {
    later *w = calloc(1, sizeof *w);
    w->l = l;
    w->load = load;
    uv_timer_init(l->loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, later_fired, (uint64_t)l->later_ms, 0);
  } else {
    complete(l, load);
  }
}

static xf_policy steady(void) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0; /* no early refresh: sources are exact */
  return p;
}

/* ---- tests ------------------------------------------------------------------------ */

Test(async, thousand_calls_on_a_cold_hot_key_load_once) {
  run r;
  run_open_patient(&r);
  loader l = {.value = "hot-value", .later_ms = 20, .loop = &r.loop};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 1000, "async:hot", &p, test_loader, &l);
  cr_expect_eq(l.calls, 1, "one loader call for 1,000 concurrent calls");
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(r.by_source[XF_SOURCE_LOADER], 1);
  cr_expect_eq(r.by_source[XF_SOURCE_CACHE], 999);
  run_end(&r);
}

Test(async, a_loader_that_completes_at_once_also_loads_once) {
  run r;
  run_open_patient(&r);
  loader l = {.value = "quick"};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 1000, "async:hot-sync", &p, test_loader, &l);
  cr_expect_eq(l.calls, 1);
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(r.by_source[XF_SOURCE_LOADER] + r.by_source[XF_SOURCE_CACHE], 1000);
  run_end(&r);
}

Test(async, hits_never_call_the_loader) {
  xf_client *c = xft_client(1);
  xf_policy p = steady();
  cr_assert_eq(xf_set(c, "async:warm", 10, "warm", 4, &p), XF_OK);
  xf_client_close(c);
  run r;
  run_open(&r, xft_port(), 0);
  loader l = {.value = "not this"};
  r.want = "warm";
  run_calls(&r, 200, "async:warm", &p, test_loader, &l);
  cr_expect_eq(l.calls, 0);
  cr_expect_eq(r.by_source[XF_SOURCE_CACHE], 200);
  cr_expect_eq(r.wrong, 0);
  run_end(&r);
}

Test(async, a_later_loader_value_is_cached_for_the_next_calls) {
  run r;
  run_open(&r, xft_port(), 1);
  loader l = {.value = "later", .later_ms = 5, .loop = &r.loop};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 1, "async:later", &p, test_loader, &l);
  cr_expect_eq(r.slots[0].source, XF_SOURCE_LOADER);
  run_end(&r);
  run r2; /* patient: a read timed out on a busy machine would fail open (a load) */
  run_open_patient(&r2);
  l.loop = &r2.loop; /* r's is closed: a load here must not start a timer on it */
  r2.want = l.value;
  run_calls(&r2, 3, "async:later", &p, test_loader, &l);
  cr_expect_eq(l.calls, 1);
  cr_expect_eq(r2.by_source[XF_SOURCE_CACHE], 3);
  run_end(&r2);
}

Test(async, a_failing_loader_caches_nothing) {
  run r;
  run_open(&r, xft_port(), 0);
  loader l = {.value = "x", .fail_rc = 42, .later_ms = 2, .loop = &r.loop};
  xf_policy p = steady();
  run_calls(&r, 1, "async:fails", &p, test_loader, &l);
  cr_expect_eq(r.slots[0].rc, XF_ELOADER);
  cr_expect_eq(r.loader_error, 42);
  cr_expect(strstr(r.errmsg, "42"), "errmsg: %s", r.errmsg);
  run_end(&r);
  redisContext *raw = xft_redis();
  cr_expect_eq(xft_int(raw, "EXISTS async:fails"), 0, "no value and no lease left");
  redisFree(raw);
}

Test(async, redis_down_fails_open_through_the_loader) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  int port = s.port;
  xft_server_stop(&s);
  run r;
  run_open(&r, port, 1);
  loader l = {.value = "from-loader", .later_ms = 10, .loop = &r.loop};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 100, "async:down", &p, test_loader, &l);
  cr_expect_eq(r.by_source[XF_SOURCE_UNCACHED], 100);
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(l.calls, 1, "concurrent fail-open loads of a key are shared");
  cr_expect_eq(r.stats.loads, 1, "stats count loader calls made");
  cr_expect_eq(r.stats.uncached, 100);
  run_end(&r);
}

Test(async, calls_in_flight_fail_open_when_redis_dies) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  run r;
  run_open(&r, s.port, 0);
  loader l = {.value = "survivor", .later_ms = 50, .loop = &r.loop, .kill = &s};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 100, "async:dies", &p, test_loader, &l);
  cr_expect_eq(r.wrong, 0, "every call got the loader's value");
  cr_expect_eq(r.by_source[XF_SOURCE_UNCACHED], 100, "none could be cached");
  cr_expect_eq(l.calls, 2, "the winner's load, and one shared by the waiters (%d)",
               l.calls);
  run_end(&r);
}

Test(async, a_stalled_server_trips_the_command_timeout) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  redisContext *raw = xft_redis_port(s.port);
  run r;
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.command_timeout_ms = 50;
  run_open_with(&r, &o);
  freeReplyObject(xft_cmd(raw, "CLIENT PAUSE 400 ALL"));
  loader l = {.value = "stalled"};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 3, "async:stalled", &p, test_loader, &l);
  cr_expect_eq(r.by_source[XF_SOURCE_UNCACHED], 3);
  run_end(&r);
  redisFree(raw);
  xft_server_stop(&s);
}

Test(async, close_cancels_calls_in_flight) {
  run r;
  run_open(&r, xft_port(), 0);
  r.close_when_done = 0;
  uv_timer_t closer;
  uv_timer_init(&r.loop, &closer);
  closer.data = r.ac;
  loader l = {.value = "never", .hold = 1, .closer = &closer};
  xf_policy p = steady();
  run_calls(&r, 10, "async:cancel", &p, test_loader, &l);
  cr_expect_eq(l.calls, 1, "one winner loads, the others wait");
  for (int i = 0; i < 10; i++)
    cr_expect_eq(r.slots[i].rc, XF_ECANCELED);
  for (int i = 0; i < l.held_n; i++) /* a late completion is discarded */
    cr_expect_eq(xf_async_load_done(l.held[i], "late", 4), XF_OK);
  run_end(&r);
}

Test(async, bad_arguments_never_call_back) {
  run r;
  run_open(&r, xft_port(), 1);
  loader l = {.value = "x"};
  xf_policy p = steady();
  slot s = {.r = &r};
  cr_expect_eq(xf_async_get_or_compute(NULL, "k", 1, &p, test_loader, &l, on_done, &s),
               XF_EINVAL);
  cr_expect_eq(xf_async_get_or_compute(r.ac, "", 0, &p, test_loader, &l, on_done, &s),
               XF_EINVAL);
  cr_expect_eq(xf_async_get_or_compute(r.ac, "k", 1, NULL, test_loader, &l, on_done, &s),
               XF_EINVAL);
  cr_expect_eq(xf_async_get_or_compute(r.ac, "k", 1, &p, NULL, &l, on_done, &s), XF_EINVAL);
  cr_expect_eq(xf_async_get_or_compute(r.ac, "k", 1, &p, test_loader, &l, NULL, &s),
               XF_EINVAL);
  p.ttl_ms = 0;
  cr_expect_eq(xf_async_get_or_compute(r.ac, "k", 1, &p, test_loader, &l, on_done, &s),
               XF_EINVAL);
  xf_async_close(r.ac);
  cr_expect_eq(s.fired, 0);
  cr_expect_eq(l.calls, 0);
  run_end(&r);
}

Test(async, auth_and_select_go_first) {
  xft_server s;
  const char *conf[] = {"--requirepass", "sesame", NULL};
  cr_assert_eq(xft_server_start(&s, conf), 0);
  run r;
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.password = "sesame";
  o.db = 2;
  run_open_with(&r, &o);
  loader l = {.value = "in-db-2"};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 10, "async:db", &p, test_loader, &l);
  cr_expect_eq(r.by_source[XF_SOURCE_LOADER], 1);
  cr_expect_eq(r.by_source[XF_SOURCE_CACHE], 9);
  run_end(&r);
  redisContext *raw = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(raw, "AUTH sesame"));
  freeReplyObject(xft_cmd(raw, "SELECT 2"));
  cr_expect_eq(xft_int(raw, "EXISTS async:db"), 1, "written in db 2");
  redisFree(raw);
  xft_server_stop(&s);
}

Test(async, a_refused_auth_fails_the_calls_behind_it) {
  xft_server s;
  const char *conf[] = {"--requirepass", "sesame", NULL};
  cr_assert_eq(xft_server_start(&s, conf), 0);
  run r;
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  o.password = "wrong";
  run_open_with(&r, &o);
  loader l = {.value = "x"};
  xf_policy p = steady();
  run_calls(&r, 3, "async:auth", &p, test_loader, &l);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(r.slots[i].rc, XF_EAUTH, "call %d: %s", i, xf_strerror(r.slots[i].rc));
  cr_expect(strstr(r.errmsg, "AUTH"), "errmsg: %s", r.errmsg);
  cr_expect_eq(l.calls, 0);
  run_end(&r);
  xft_server_stop(&s);
}

/* An open that fails says why, on the thread that opened. */
Test(async, a_failed_open_says_why) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nothing listens on port 1 */
  xf_async *ac = NULL;
  int rc = xf_async_open_libuv(&ac, &o, &loop);
  if (rc == XF_OK) { /* the refusal may come later, on the loop */
    xf_async_close(ac);
  } else {
    cr_expect_eq(rc, XF_ECONNECT);
    cr_expect(strstr(xf_async_errmsg(NULL), "refused"), "'%s'", xf_async_errmsg(NULL));
  }
  o.port = 70000;
  cr_expect_eq(xf_async_open_libuv(&ac, &o, &loop), XF_EINVAL);
  cr_expect(strstr(xf_async_errmsg(NULL), "options.port"), "'%s'", xf_async_errmsg(NULL));
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* No password for a server that needs one: every call, get-or-compute, get,
 * set and delete, is XF_EAUTH (the connection's setup is answered NOAUTH),
 * never XF_EREDIS, the loader not run. */
typedef struct noauth_run {
  uv_loop_t loop;
  xf_async *ac;
  int fired, rc[4];
  char errmsg[256];
} noauth_run;

static void noauth_fired(noauth_run *r, int i, int rc) {
  r->rc[i] = rc;
  if (rc != XF_OK && !r->errmsg[0])
    snprintf(r->errmsg, sizeof r->errmsg, "%s", xf_async_errmsg(r->ac));
  if (++r->fired == 4)
    xf_async_close(r->ac);
}
static noauth_run *noauth_of;
static void noauth_value(int rc, const xf_value *v, void *i) {
  (void)v;
  noauth_fired(noauth_of, (int)(intptr_t)i, rc);
}
static void noauth_done(int rc, void *i) { noauth_fired(noauth_of, (int)(intptr_t)i, rc); }

Test(async, no_password_fails_every_call_with_eauth) {
  xft_server s;
  const char *conf[] = {"--requirepass", "sesame", NULL};
  cr_assert_eq(xft_server_start(&s, conf), 0);
  noauth_run r = {0};
  noauth_of = &r;
  cr_assert_eq(uv_loop_init(&r.loop), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = s.port;
  cr_assert_eq(xf_async_open_libuv(&r.ac, &o, &r.loop), XF_OK);
  loader l = {.value = "x"};
  xf_policy p = steady();
  cr_assert_eq(xf_async_get_or_compute(r.ac, "async:na", 8, &p, test_loader, &l,
                                       noauth_value, (void *)0),
               XF_OK);
  cr_assert_eq(xf_async_get(r.ac, "async:na", 8, noauth_value, (void *)1), XF_OK);
  cr_assert_eq(xf_async_set(r.ac, "async:na", 8, "v", 1, &p, noauth_done, (void *)2),
               XF_OK);
  cr_assert_eq(xf_async_delete(r.ac, "async:na", 8, noauth_done, (void *)3), XF_OK);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  cr_assert_eq(r.fired, 4);
  static const char *const what[] = {"get_or_compute", "get", "set", "delete"};
  for (int i = 0; i < 4; i++)
    cr_expect_eq(r.rc[i], XF_EAUTH, "%s: %s", what[i], xf_strerror(r.rc[i]));
  cr_expect(strstr(r.errmsg, "NOAUTH"), "errmsg: %s", r.errmsg);
  cr_expect_eq(l.calls, 0);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&r.loop), 0);
  xft_server_stop(&s);
}

/* ---- seed lists ------------------------------------------------------------------ */

/* A loopback port nothing listens on: bound, read, closed. */
static int dead_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* Calls one after the other, each started from the previous one's callback,
 * on a handle that stays open between batches. */
typedef struct seq {
  run r; /* first: a slot's r is the seq */
  const char *key;
  xf_policy p;
  loader *l;
  int until; /* the loop stops once this many callbacks fired */
} seq;

static void seq_start(seq *q);

static void seq_done(int rc, const xf_value *v, void *privdata) {
  seq *q = (seq *)((slot *)privdata)->r;
  on_done(rc, v, privdata);
  if (q->r.fired < q->until)
    seq_start(q);
  else
    uv_stop(&q->r.loop);
}

static void seq_start(seq *q) {
  slot *s = &q->r.slots[q->r.fired];
  s->r = &q->r;
  int rc = xf_async_get_or_compute(q->r.ac, q->key, strlen(q->key), &q->p, test_loader,
                                   q->l, seq_done, s);
  cr_assert_eq(rc, XF_OK, "call %d: %s", q->r.fired, xf_strerror(rc));
}

static void seq_open(seq *q, const char *hosts, int cluster, int total, const char *key,
                     loader *l) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = hosts;
  o.cluster = cluster;
  o.seed = 7;
  /* hiredis' libuv adapter drops a poll error: a refused connect is only
   * seen by the connect watchdog. A loopback connect needs far less. */
  o.connect_timeout_ms = 300;
  run_open_with(&q->r, &o);
  q->r.close_when_done = 0;
  q->r.n = total;
  q->r.slots = calloc((size_t)total, sizeof *q->r.slots);
  cr_assert_not_null(q->r.slots);
  q->r.want = l->value;
  q->key = key;
  q->p = steady();
  q->l = l;
}

/* Runs n more calls, one at a time. */
static void seq_calls(seq *q, int n) {
  q->until = q->r.fired + n;
  cr_assert_leq(q->until, q->r.n);
  seq_start(q);
  uv_run(&q->r.loop, UV_RUN_DEFAULT);
  cr_assert_eq(q->r.fired, q->until);
}

static void seq_close(seq *q) {
  xf_async_close(q->r.ac);
  run_end(&q->r);
}

static void stop_loop(uv_timer_t *t) { uv_stop(t->loop); }

/* Runs the loop for ms (the handle notices what happened meanwhile). */
static void idle_ms(uv_loop_t *loop, int ms) {
  uv_timer_t t;
  uv_timer_init(loop, &t);
  uv_timer_start(&t, stop_loop, (uint64_t)ms, 0);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
}

/* A dead seed listed before the live one: the calls reach the live one, the
 * first loads, the others are served from the cache. */
static void dead_then_live(int cluster, const char *key) {
  char hosts[64];
  snprintf(hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", dead_port(), xft_port());
  seq q;
  loader l = {.value = "from-a-seed"};
  seq_open(&q, hosts, cluster, 20, key, &l);
  seq_calls(&q, 20);
  cr_expect_eq(q.r.slots[0].source, XF_SOURCE_LOADER, "%s", q.r.errmsg);
  cr_expect_eq(q.r.by_source[XF_SOURCE_CACHE], 19, "%d uncached (%s)",
               q.r.by_source[XF_SOURCE_UNCACHED], q.r.errmsg);
  cr_expect_eq(l.calls, 1);
  cr_expect_eq(q.r.wrong, 0);
  seq_close(&q);
}

Test(async, a_dead_first_seed_is_skipped_with_cluster_off) {
  dead_then_live(XF_CLUSTER_OFF, "async:seeds:off");
}

Test(async, a_dead_first_seed_is_skipped_with_cluster_auto) {
  dead_then_live(XF_CLUSTER_AUTO, "async:seeds:auto");
}

/* The connected seed goes away: the next calls go to the next seed. */
Test(async, calls_move_to_the_next_seed_when_theirs_goes_away) {
  xft_server first;
  cr_assert_eq(xft_server_start(&first, NULL), 0);
  char hosts[64];
  snprintf(hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", first.port, xft_port());
  seq q;
  loader l = {.value = "either-seed"};
  seq_open(&q, hosts, XF_CLUSTER_OFF, 10, "async:seeds:moved", &l);
  seq_calls(&q, 5);
  cr_expect_eq(q.r.by_source[XF_SOURCE_LOADER], 1);
  cr_expect_eq(q.r.by_source[XF_SOURCE_CACHE], 4);
  xft_server_stop(&first);
  idle_ms(&q.r.loop, 100); /* the handle sees its connection close */
  seq_calls(&q, 5);
  cr_expect_eq(q.r.slots[5].source, XF_SOURCE_LOADER, "the second seed's first call loads");
  cr_expect_eq(q.r.by_source[XF_SOURCE_CACHE], 8, "%d uncached (%s)",
               q.r.by_source[XF_SOURCE_UNCACHED], q.r.errmsg);
  cr_expect_eq(l.calls, 2);
  cr_expect_eq(q.r.wrong, 0);
  seq_close(&q);
}

/* No seed answers: every call fails open after trying each once, with one
 * shared load. Margin: the load ends 1 s after it began, and the 20 calls'
 * tries (refused connects on loopback) all end before: about a millisecond
 * natively; under valgrind on a busy machine they outlasted a 10 ms load. */
Test(async, calls_fail_open_when_every_seed_is_dead) {
  char hosts[64];
  snprintf(hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", dead_port(), dead_port());
  run r;
  xf_options o = XF_OPTIONS_INIT;
  o.host = hosts;
  o.cluster = XF_CLUSTER_OFF;
  o.breaker_ms = -1; /* every call tries both */
  o.connect_timeout_ms = 300;
  run_open_with(&r, &o);
  loader l = {.value = "no-seed", .later_ms = 1000, .loop = &r.loop};
  r.want = l.value;
  xf_policy p = steady();
  run_calls(&r, 20, "async:seeds:dead", &p, test_loader, &l);
  cr_expect_eq(r.by_source[XF_SOURCE_UNCACHED], 20);
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(l.calls, 1);
  run_end(&r);
}

/* A loader that asks for its own key: refused at once (it would wait on its
 * own lease), the outer call loads once. */
typedef struct selfish {
  xf_async *ac;
  int calls, inner_rc;
  char msg[256];
} selfish;

static void ignore_done(int rc, const xf_value *v, void *privdata) {
  (void)rc, (void)v, (void)privdata;
}

static void self_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  selfish *s = ud;
  if (s->calls++ == 0) {
    xf_policy p = steady();
    s->inner_rc =
        xf_async_get_or_compute(s->ac, key, keylen, &p, self_loader, s, ignore_done, NULL);
    snprintf(s->msg, sizeof s->msg, "%s", xf_async_errmsg(s->ac));
  }
  cr_expect_eq(xf_async_load_done(load, "outer", 5), XF_OK);
}

Test(async, a_loader_asking_for_its_own_key_is_refused_at_once) {
  run r;
  run_open(&r, xft_port(), 0);
  r.want = "outer";
  selfish s = {.ac = r.ac};
  xf_policy p = steady();
  run_calls(&r, 1, "async:self", &p, self_loader, &s);
  cr_expect_eq(s.inner_rc, XF_EINVAL, "the nested call returned %s",
               xf_errname(s.inner_rc));
  cr_expect(strstr(s.msg, "async:self asked for async:self itself") != NULL, "message: %s",
            s.msg);
  cr_expect_eq(s.calls, 1);
  cr_expect_eq(r.slots[0].rc, XF_OK);
  cr_expect_eq(r.slots[0].source, XF_SOURCE_LOADER);
  run_end(&r);
}

/* ---- the bypass switch ------------------------------------------------------------ */

static void code_done(int rc, void *privdata) { *(int *)privdata = rc; }

static void got_done(int rc, const xf_value *v, void *privdata) {
  (void)v;
  *(int *)privdata = rc;
}

/* xf_async_set_enabled(ac, 0), on a connected handle, or kept from
 * options.disabled (which connected to nothing): get-or-compute runs the
 * loader every time (XF_SOURCE_UNCACHED, stats.bypassed), a get finds
 * nothing though Redis holds the key, a set and a delete do nothing. Then
 * xf_async_set_enabled(ac, 1): the key's value, untouched, is a hit. */
ParameterizedTestParameters(async, the_bypass_switch_leaves_redis_alone) {
  static int opened_disabled[] = {0, 1};
  return cr_make_param_array(int, opened_disabled, 2);
}

ParameterizedTest(int *opened_disabled, async, the_bypass_switch_leaves_redis_alone) {
  const char *key = *opened_disabled ? "async:bypass:opened" : "async:bypass:switched";
  xf_policy p = steady();
  xf_client *c = xft_client(1);
  cr_assert_eq(xf_set(c, key, strlen(key), "cached", 6, &p), XF_OK);
  xf_client_close(c);
  run r;
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  o.disabled = *opened_disabled;
  run_open_with(&r, &o);
  r.close_when_done = 0;
  xf_async_set_enabled(NULL, 0); /* NULL-safe */
  if (!*opened_disabled)
    xf_async_set_enabled(r.ac, 0);
  loader l = {.value = "v"};
  r.want = "v";
  run_calls(&r, 3, key, &p, test_loader, &l);
  cr_expect_eq(l.calls, 3, "the loader runs for every bypassed call");
  cr_expect_eq(r.by_source[XF_SOURCE_UNCACHED], 3);
  int get_rc = 1, set_rc = 1, del_rc = 1;
  cr_assert_eq(xf_async_get(r.ac, key, strlen(key), got_done, &get_rc), XF_OK);
  cr_assert_eq(xf_async_set(r.ac, key, strlen(key), "x", 1, &p, code_done, &set_rc), XF_OK);
  cr_assert_eq(xf_async_delete(r.ac, key, strlen(key), code_done, &del_rc), XF_OK);
  while (get_rc == 1 || set_rc == 1 || del_rc == 1)
    uv_run(&r.loop, UV_RUN_ONCE);
  cr_expect_eq(get_rc, XF_ENOTFOUND);
  cr_expect_eq(set_rc, XF_OK);
  cr_expect_eq(del_rc, XF_OK);
  xf_stats st;
  xf_async_stats(r.ac, &st);
  cr_expect_eq(st.bypassed, 6);
  cr_expect_eq(st.uncached, 0, "a bypass is not a fail-open");
  xf_async_set_enabled(r.ac, 1);
  r.want = "cached"; /* neither the loads nor the set nor the delete reached Redis */
  run_calls(&r, 1, key, &p, test_loader, &l);
  cr_expect_eq(r.slots[0].rc, XF_OK, "%s", r.errmsg);
  cr_expect_eq(r.by_source[XF_SOURCE_CACHE], 1, "not a hit: the switch stayed off");
  cr_expect_eq(r.wrong, 0);
  cr_expect_eq(l.calls, 3);
  xf_async_close(r.ac);
  run_end(&r);
}
