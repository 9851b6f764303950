/* The process-local share (xf_share) keeps the loader protected while Redis
 * cannot be used. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "share.h"
#include "thread_fail.h"

/* A client whose Redis is gone (lazy: nobody listens on port 1): XF_OK or
 * the open's code. */
static int open_down(xf_client **c, xf_share *s) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1;
  o.lazy_connect = 1;
  o.share = s;
  return xf_client_open(c, &o);
}

/* open_down, asserted. */
static xf_client *down_client(xf_share *s) {
  xf_client *c;
  cr_assert_eq(open_down(&c, s), XF_OK);
  return c;
}

static int get(xf_client *c, const char *key, const xf_policy *p, xft_loader *l,
               xf_value *v) {
  return xf_get_or_compute(c, key, strlen(key), p, xft_load, l, v);
}

typedef struct worker {
  xf_share *share;
  xft_loader *loader;
  int wrong;
  int sources[5];
  xft_fail fail; /* what went wrong on its thread */
} worker;

static void *hammer(void *arg) {
  worker *w = arg;
  xf_client *c;
  int rc = xft_record_open(open_down(&c, w->share), &w->fail, "the worker");
  if (rc != XF_OK)
    return NULL;
  xf_policy p = XF_POLICY_INIT;
  for (int i = 0; i < 300; i++) {
    xf_value v;
    int rc = get(c, "share:hot", &p, w->loader, &v);
    if (rc != XF_OK || strcmp(v.data, "right") != 0)
      w->wrong++;
    else
      w->sources[v.source]++;
    xf_value_free(&v);
  }
  xf_client_close(c);
  return NULL;
}

static int run_workers(xf_share *s, xft_loader *l, worker w[4]) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].share = s;
    w[i].loader = l;
    pthread_create(&t[i], NULL, hammer, &w[i]);
  }
  int wrong = 0;
  /* join them all before an assertion leaves the frame they write to */
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(xft_fail_count(&w[i].fail), 0, "worker %d: %s", i,
                 xft_fail_msg(&w[i].fail));
    wrong += w[i].wrong;
  }
  return wrong;
}

Test(share, redis_down_four_threads_load_once) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xft_loader l = {.value = "right", .sleep_ms = 20};
  worker w[4];
  cr_expect_eq(run_workers(s, &l, w), 0, "every call answered with the right value");
  cr_expect_leq(xft_loader_calls(&l), 12, "%d loader calls for 1,200 calls",
                xft_loader_calls(&l));
  cr_log_info("redis down, share: %d loader calls for 1,200 calls", xft_loader_calls(&l));
  int local = 0;
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(w[i].sources[XF_SOURCE_CACHE] + w[i].sources[XF_SOURCE_LOADER] +
                     w[i].sources[XF_SOURCE_STALE],
                 0);
    local += w[i].sources[XF_SOURCE_LOCAL];
  }
  cr_expect_eq(local, 1200 - xft_loader_calls(&l));
  xf_share_close(s);
}

Test(share, without_a_share_every_call_loads) {
  xft_loader l = {.value = "right"};
  worker w[4];
  cr_expect_eq(run_workers(NULL, &l, w), 0);
  cr_expect_eq(xft_loader_calls(&l), 1200);
}

Test(share, a_failure_is_not_kept) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  xft_loader bad = {.fail_rc = 3};
  xf_value v;
  cr_expect_eq(get(c, "share:fail", &p, &bad, &v), XF_ELOADER);
  xft_loader good = {.value = "ok"};
  cr_assert_eq(get(c, "share:fail", &p, &good, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&good), 1);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

Test(share, values_expire_with_their_ttl) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  /* The second call is a hit if it comes within the ttl of the first: 1 s
   * for what takes microseconds (50 ms was a scheduler's slice on a busy
   * machine); the sleep starts after it, so the third is past the ttl. */
  p.ttl_ms = 1000;
  xft_loader l = {.value = "v"};
  xf_value v;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(get(c, "share:ttl", &p, &l, &v), XF_OK);
    xf_value_free(&v);
  }
  cr_expect_eq(xft_loader_calls(&l), 1);
  xft_sleep_ms(1100);
  cr_assert_eq(get(c, "share:ttl", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&l), 2);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

Test(share, bounded_by_entries_least_recently_used_first) {
  xf_share *s;
  xf_share_options o = {.max_entries = 2};
  cr_assert_eq(xf_share_open(&s, &o), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  xft_loader a = {.value = "a"}, b = {.value = "b"}, k = {.value = "c"};
  xf_value v;
  cr_assert_eq(get(c, "share:a", &p, &a, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:b", &p, &b, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:a", &p, &a, &v), XF_OK); /* a is now the most recent */
  cr_expect_eq(v.source, XF_SOURCE_LOCAL);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:c", &p, &k, &v), XF_OK); /* evicts b */
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:a", &p, &a, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOCAL);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:b", &p, &b, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED, "b was evicted");
  cr_expect_eq(xft_loader_calls(&b), 2);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

Test(share, bounded_by_bytes) {
  xf_share *s;
  xf_share_options o = {.max_bytes = 64};
  cr_assert_eq(xf_share_open(&s, &o), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  static char big[100];
  memset(big, 'x', sizeof big - 1);
  xft_loader l = {.value = big};
  xf_value v;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(get(c, "share:big", &p, &l, &v), XF_OK);
    xf_value_free(&v);
  }
  cr_expect_eq(xft_loader_calls(&l), 2, "a value above max_bytes is not kept");
  xf_client_close(c);
  xf_share_close(s);
}

/* ---- the share is keyed by where a value came from ------------------------------ */

typedef struct origin {
  const char *host;
  int db;
  const char *user;
  const char *value;
  xft_loader loader;
  xf_client *c;
} origin;

Test(share, keyed_by_server_db_and_user) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  /* Nobody listens on ports 1 and 2: Redis is down for all of them. */
  origin os[] = {{.host = "127.0.0.1:1", .value = "server A db 0"},
                 {.host = "127.0.0.1:1", .db = 1, .value = "server A db 1"},
                 {.host = "127.0.0.1:2", .value = "server B db 0"},
                 {.host = "127.0.0.1:1", .user = "alice", .value = "server A db 0 alice"},
                 {.host = "127.0.0.1:1,127.0.0.1:2", .value = "two seeds"}};
  size_t n = sizeof os / sizeof os[0];
  for (size_t i = 0; i < n; i++) {
    xf_options o = XF_OPTIONS_INIT;
    o.host = os[i].host;
    o.db = os[i].db;
    o.username = os[i].user;
    o.lazy_connect = 1;
    o.share = s;
    cr_assert_eq(xf_client_open(&os[i].c, &o), XF_OK);
    os[i].loader.value = os[i].value;
  }
  xf_policy p = XF_POLICY_INIT;
  for (int round = 0; round < 2; round++)
    for (size_t i = 0; i < n; i++) {
      xf_value v;
      cr_assert_eq(get(os[i].c, "share:ns", &p, &os[i].loader, &v), XF_OK);
      cr_expect_str_eq(v.data, os[i].value, "round %d, client %zu got \"%s\"", round, i,
                       v.data);
      cr_expect_eq(v.source, round == 0 ? XF_SOURCE_UNCACHED : XF_SOURCE_LOCAL);
      cr_expect_eq(xft_loader_calls(&os[i].loader), 1,
                   "client %zu: each namespace loads once", i);
      xf_value_free(&v);
    }
  for (size_t i = 0; i < n; i++)
    xf_client_close(os[i].c);
  xf_share_close(s);
}

/* ---- an acknowledged write or delete drops the share's copy --------------------- */

typedef enum write_kind { BY_DELETE, BY_SET, BY_LOAD, BY_BATCH } write_kind;

/* One client or one pool, on a server that goes down and comes back. */
typedef struct site {
  xft_server srv;
  int port;
  xf_share *share;
  xf_client *c;
  xf_pool *pool;
} site;

static void site_open(site *w, int pool) {
  memset(w, 0, sizeof *w);
  cr_assert_eq(xft_server_start(&w->srv, NULL), 0);
  w->port = w->srv.port;
  xf_options o = XF_OPTIONS_INIT;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", w->port);
  o.host = host;
  o.lazy_connect = 1;
  o.breaker_ms = 1; /* reconnect as soon as the server is back */
  if (pool) {
    cr_assert_eq(xf_pool_open(&w->pool, &o, 2, 0), XF_OK); /* its own share */
  } else {
    cr_assert_eq(xf_share_open(&w->share, NULL), XF_OK);
    o.share = w->share;
    cr_assert_eq(xf_client_open(&w->c, &o), XF_OK);
  }
}

static void site_close(site *w) {
  xf_client_close(w->c);
  xf_pool_close(w->pool);
  xf_share_close(w->share);
  xft_server_stop(&w->srv);
}

static int site_get(site *w, const char *key, xft_loader *l, xf_value *v) {
  xf_policy p = XF_POLICY_INIT;
  if (w->pool)
    return xf_pool_get_or_compute(w->pool, key, strlen(key), &p, xft_load, l, v);
  return xf_get_or_compute(w->c, key, strlen(key), &p, xft_load, l, v);
}

/* Redis answers: the write of kind how, acknowledged. */
static void site_write(site *w, write_kind how, const char *key) {
  xf_policy p = XF_POLICY_INIT;
  size_t len = strlen(key);
  xft_loader l = {.value = "loaded"};
  xf_value v = {0};
  int rc = XF_OK;
  if (how == BY_DELETE)
    rc = w->pool ? xf_pool_delete(w->pool, key, len) : xf_delete(w->c, key, len);
  else if (how == BY_SET)
    rc = w->pool ? xf_pool_set(w->pool, key, len, "set", 3, &p)
                 : xf_set(w->c, key, len, "set", 3, &p);
  else if (how == BY_LOAD)
    rc = site_get(w, key, &l, &v);
  else {
    int one_rc;
    rc = xf_get_or_compute_many(w->c, 1, &key, &len, &p, xft_load, &l, &v, &one_rc);
    cr_assert_eq(one_rc, XF_OK);
  }
  cr_assert_eq(rc, XF_OK, "%s", w->c ? xf_errmsg(w->c) : xf_pool_errmsg());
  if (how == BY_LOAD || how == BY_BATCH) {
    cr_assert_eq(v.source, XF_SOURCE_LOADER, "the leased write was acknowledged");
    cr_assert_eq(xft_loader_calls(&l), 1);
  }
  xf_value_free(&v);
}

/* Outage 1 keeps "old" in the share; Redis comes back and acknowledges a
 * delete or a newer value; outage 2 must not serve "old". */
static void outage_write_outage(write_kind how, int pool) {
  site w;
  site_open(&w, pool);
  const char *key = "share:acked";
  xft_server_stop(&w.srv);
  xft_loader old = {.value = "old"};
  xf_value v;
  cr_assert_eq(site_get(&w, key, &old, &v), XF_OK);
  cr_assert_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
  cr_assert_eq(xft_server_start_on(&w.srv, w.port, NULL), 0);
  site_write(&w, how, key);
  xft_server_stop(&w.srv);
  xft_loader fresh = {.value = "fresh"};
  cr_assert_eq(site_get(&w, key, &fresh, &v), XF_OK);
  cr_expect_str_eq(v.data, "fresh", "got \"%s\" (source %d): the share outlived the write",
                   v.data, v.source);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&fresh), 1);
  xf_value_free(&v);
  site_close(&w);
}

Test(share, an_acknowledged_delete_drops_the_copy) { outage_write_outage(BY_DELETE, 0); }
Test(share, an_acknowledged_set_drops_the_copy) { outage_write_outage(BY_SET, 0); }
Test(share, a_leased_write_drops_the_copy) { outage_write_outage(BY_LOAD, 0); }
Test(share, a_batch_write_drops_the_copy) { outage_write_outage(BY_BATCH, 0); }
Test(share, a_pool_delete_drops_the_copy) { outage_write_outage(BY_DELETE, 1); }
Test(share, a_pool_set_drops_the_copy) { outage_write_outage(BY_SET, 1); }
Test(share, a_pool_leased_write_drops_the_copy) { outage_write_outage(BY_LOAD, 1); }

/* A loader that signals it started, then waits until told to finish. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, go;
} gate;

static int gated_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key;
  (void)keylen;
  gate *g = ud;
  pthread_mutex_lock(&g->mu);
  g->started = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->go)
    pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return xf_sink_set(sink, "during", 6);
}

typedef struct flight {
  xf_client *c;
  const char *key; /* NULL: "share:inflight" */
  gate g;
  xf_value v;
  int rc;
} flight;

static void *fly(void *arg) {
  flight *fl = arg;
  xf_policy p = XF_POLICY_INIT;
  const char *key = fl->key ? fl->key : "share:inflight";
  fl->rc = xf_get_or_compute(fl->c, key, strlen(key), &p, gated_load, &fl->g, &fl->v);
  return NULL;
}

/* Lets fl's gated load go on and joins t, its thread. */
static void land(flight *fl, pthread_t t) {
  pthread_mutex_lock(&fl->g.mu);
  fl->g.go = 1;
  pthread_cond_broadcast(&fl->g.cv);
  pthread_mutex_unlock(&fl->g.mu);
  pthread_join(t, NULL);
}

/* other's delete of key, a sans-I/O call fed its reply (":1") by hand:
 * NULL, or the step that failed. */
static const char *delete_by_hand(xf_client *other, const char *key) {
  xf_call *del = NULL;
  xf_reader *rd = NULL;
  xf_reply *reply = NULL;
  xf_value dv;
  const char *failed = xf_call_start_delete(&del, other, key, strlen(key), 0) != XF_OK
                           ? "xf_call_start_delete"
                       : xf_reader_open(&rd) != XF_OK                  ? "xf_reader_open"
                       : xf_reader_feed(rd, ":1\r\n", 4) != XF_OK      ? "xf_reader_feed"
                       : xf_reader_next(rd, &reply) != XF_OK || !reply ? "xf_reader_next"
                       : xf_call_reply(del, reply, 0) != XF_CALL_DONE  ? "xf_call_reply"
                       : xf_call_result(del, &dv) != XF_OK             ? "xf_call_result"
                                                                       : NULL;
  xf_call_free(del);
  xf_reader_close(rd);
  return failed;
}

/* A delete acknowledged while a fail-open load runs: the load's followers
 * get its value, the share does not keep it. The delete is a sans-I/O call
 * fed the reply by hand (no Redis needed to acknowledge it). */
Test(share, a_delete_during_a_flight_is_not_undone_by_it) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  flight fl = {.c = down_client(s),
               .g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER}};
  /* Same server, db, user: same namespace. Cluster OFF: the call's first SEND
   * is the delete itself, not INFO cluster (its reply is fed by hand). */
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1;
  o.lazy_connect = 1;
  o.share = s;
  o.cluster = XF_CLUSTER_OFF;
  xf_client *other;
  cr_assert_eq(xf_client_open(&other, &o), XF_OK); /* before the flight: asserted */
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, fly, &fl), 0);
  pthread_mutex_lock(&fl.g.mu);
  while (!fl.g.started)
    pthread_cond_wait(&fl.g.cv, &fl.g.mu);
  pthread_mutex_unlock(&fl.g.mu);
  const char *failed = delete_by_hand(other, "share:inflight");
  land(&fl, t);
  cr_assert(!failed, "the delete: %s failed", failed);
  cr_assert_eq(fl.rc, XF_OK);
  cr_expect_str_eq(fl.v.data, "during");
  xf_value_free(&fl.v);
  xft_loader after = {.value = "after"};
  xf_value v;
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(get(fl.c, "share:inflight", &p, &after, &v), XF_OK);
  cr_expect_str_eq(v.data, "after", "got \"%s\" (source %d): kept past the delete", v.data,
                   v.source);
  cr_expect_eq(xft_loader_calls(&after), 1);
  xf_value_free(&v);
  xf_client_close(other);
  xf_client_close(fl.c);
  xf_share_close(s);
}

/* ---- a forked child's first use of the share ------------------------------------ */

#define FORK_THREADS 8

static pthread_barrier_t lined_up;
static int released, loader_started;
static xf_share *fork_share;

/* Each thread's first pass: all of them get here before any goes on; one
 * goes first, the others only once its loader runs (so they meet its flight
 * in progress). */
static void line_up(void) {
  static _Thread_local int passed;
  if (passed++)
    return;
  if (pthread_barrier_wait(&lined_up) == PTHREAD_BARRIER_SERIAL_THREAD)
    return;
  for (int i = 0; i < 2000 && !__atomic_load_n(&loader_started, __ATOMIC_SEQ_CST); i++)
    xft_sleep_ms(1);
  __atomic_add_fetch(&released, 1, __ATOMIC_SEQ_CST);
}

static int slow_once(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&loader_started, 1, __ATOMIC_SEQ_CST);
  for (int i = 0;
       i < 2000 && __atomic_load_n(&released, __ATOMIC_SEQ_CST) < FORK_THREADS - 1; i++)
    xft_sleep_ms(1);
  xft_sleep_ms(100); /* the others are past their first pass: let them meet the flight */
  return xf_sink_set(sink, "child", 5);
}

static void *child_caller(void *ud) {
  xf_client *c = down_client(fork_share);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  if (xf_get_or_compute(c, "share:forked", 12, &p, slow_once, ud, &v) != XF_OK)
    __atomic_add_fetch((int *)ud, 100, __ATOMIC_SEQ_CST); /* shows as a wrong count */
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

/* In a forked child, 8 threads meet the share at once, Redis down: one loads,
 * the others follow its flight. At the fork, a thread of the parent was
 * loading the same key: that flight does not exist in the child. The exit
 * status is the number of loads. */
Test(share, a_forked_childs_threads_on_one_key_load_once) {
  XFT_SKIP_THREADED_FORK();
  cr_assert_eq(xf_share_open(&fork_share, NULL), XF_OK);
  flight parent = {.c = down_client(fork_share),
                   .g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER}};
  parent.key = "share:forked";
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, fly, &parent), 0);
  pthread_mutex_lock(&parent.g.mu);
  while (!parent.g.started)
    pthread_cond_wait(&parent.g.cv, &parent.g.mu);
  pthread_mutex_unlock(&parent.g.mu);
  pid_t pid = fork();
  if (pid == 0) {
    pthread_barrier_init(&lined_up, NULL, FORK_THREADS);
    xf__share_test_yield = line_up;
    int calls = 0;
    pthread_t t[FORK_THREADS];
    for (int i = 0; i < FORK_THREADS; i++)
      pthread_create(&t[i], NULL, child_caller, &calls);
    for (int i = 0; i < FORK_THREADS; i++)
      pthread_join(t[i], NULL);
    int loads = __atomic_load_n(&calls, __ATOMIC_SEQ_CST);
    _exit(loads > 250 ? 250 : loads);
  }
  int status = xft_wait_child(pid, 60); /* a child alone takes < 5 s */
  land(&parent, t);
  cr_assert_neq(status, -1, "the child ended within 60 s");
  xf_value_free(&parent.v);
  cr_assert(WIFEXITED(status));
  cr_expect_eq(WEXITSTATUS(status), 1, "the child's %d threads ran the loader %d times",
               FORK_THREADS, WEXITSTATUS(status));
  xf_client_close(parent.c);
  xf_share_close(fork_share);
}

/* stats count what happened: loads are loader runs, the calls the share
 * answered are local (before: every call counted a load). */
Test(share, stats_count_loader_runs_and_share_answers) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  for (int i = 0; i < 100; i++) {
    xf_value v;
    cr_assert_eq(get(c, "share:stats", &p, &l, &v), XF_OK);
    xf_value_free(&v);
  }
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(xft_loader_calls(&l), 1);
  cr_expect_eq(st.loads, 1, "loads %llu for 1 loader run", (unsigned long long)st.loads);
  cr_expect_eq(st.local, 99);
  cr_expect_eq(st.uncached, 1);
  xf_client_close(c);
  xf_share_close(s);
}

typedef struct {
  xf_share *share;
  xft_loader *l;
  int rc;
  xft_fail fail; /* what went wrong on its thread */
} share_call;

static void *slow_lead(void *arg) {
  share_call *sc = arg;
  xf_client *c;
  int rc = xft_record_open(open_down(&c, sc->share), &sc->fail, "the lead");
  if (rc != XF_OK)
    return NULL;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  sc->rc = get(c, "share:intr", &p, sc->l, &v);
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

static int stop_now(void *ud) { return ++*(int *)ud >= 2; }

/* A thread waiting for another thread's load of the key in the share asks
 * options.interrupt between 50 ms slices and stops with XF_ECANCELED (before:
 * it slept on the condition until the load landed or wait_ms ran out). */
Test(share, interrupt_ends_a_wait_for_another_threads_load) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xft_loader slow = {.value = "v", .sleep_ms = 1500};
  share_call lead = {s, &slow, -100, {0}};
  int checks = 0;
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1;
  o.lazy_connect = 1;
  o.share = s;
  o.interrupt = stop_now;
  o.interrupt_ud = &checks;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK); /* before the lead: asserted */
  pthread_t t;
  pthread_create(&t, NULL, slow_lead, &lead);
  /* The lead is loading (bound 20 s; the load takes 1.5 s from its start). */
  for (int64_t until = xft_now_ms() + 20000; xft_loader_calls(&slow) == 0;
       xft_sleep_ms(1)) {
    xft_assert_no_fail_join(&lead.fail, t);
    if (xft_now_ms() >= until) {
      pthread_join(t, NULL);
      cr_assert_fail("the lead never loaded");
    }
  }
  xf_policy p = XF_POLICY_INIT;
  xft_loader mine = {.value = "mine"};
  xf_value v;
  cr_expect_eq(get(c, "share:intr", &p, &mine, &v), XF_ECANCELED, "%s", xf_errmsg(c));
  cr_expect_eq(checks, 2);
  cr_expect_eq(xft_loader_calls(&mine), 0);
  cr_expect_eq(__atomic_load_n(&slow.calls, __ATOMIC_RELAXED), 1, "still loading");
  xf_client_close(c);
  pthread_join(t, NULL);
  cr_expect_eq(lead.rc, XF_OK);
  xf_share_close(s);
}
