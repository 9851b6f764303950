/* The loader_ud's lifetime when an early refresh leaves the request path by
 * default (XF_BACKGROUND_AUTO with policy.loader_ud_keep and _drop), on every
 * driver that has such a path: a pool, a blocking client with a share or an
 * executor, the batch driver with a share, the event loop on libevent and on
 * libuv. The caller's loader_ud is malloc'd and freed as soon as its call
 * returned (its callback ran): under AddressSanitizer a read of it afterwards
 * is a use after free; without, its magic is wiped and the loader counts a
 * bad read. keep copies it, drop frees the copy: each refresh must drop
 * exactly once, however it ends: run, its handle closed under it, its lease
 * lost, Redis gone, or the process forked while it ran. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>
#include <xfetch_libevent.h>
#include <xfetch_libuv.h>

#include "fixture.h"

#define MAGIC 0x5eedf00du

typedef struct frame {
  unsigned magic;
  int block; /* the loader waits for the gate, off the test's thread */
} frame;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open, loads, keeps, drops, bad;
  xf_refresh *handed;     /* an executor's refresh, for the test to run or drop */
  xf_async_load *pending; /* an event-loop load, for the test to complete */
  pthread_t test_thread;  /* a loader run there (in the call) never blocks */
} G = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, 0, 0, 0, NULL, NULL, 0};

static int count(const int *n) {
  pthread_mutex_lock(&G.mu);
  int v = *n;
  pthread_mutex_unlock(&G.mu);
  return v;
}

static void bump(int *n) {
  pthread_mutex_lock(&G.mu);
  ++*n;
  pthread_cond_broadcast(&G.cv);
  pthread_mutex_unlock(&G.mu);
}

static void gate_open(void) {
  pthread_mutex_lock(&G.mu);
  G.open = 1;
  pthread_cond_broadcast(&G.cv);
  pthread_mutex_unlock(&G.mu);
}

/* Waits up to ms for *n to reach want; whether it did. Margin: every wait
 * here is for work that takes a few ms; 10 s covers a busy machine. */
static int wait_for(const int *n, int want, int ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  pthread_mutex_lock(&G.mu);
  while (*n < want && pthread_cond_timedwait(&G.cv, &G.mu, &until) == 0)
    ;
  int ok = *n >= want;
  pthread_mutex_unlock(&G.mu);
  return ok;
}

static void *keep_frame(void *ud) {
  frame *copy = malloc(sizeof *copy);
  if (copy)
    *copy = *(const frame *)ud;
  bump(&G.keeps);
  return copy;
}

static void drop_frame(void *kept) {
  frame *f = kept;
  if (f->magic != MAGIC)
    bump(&G.bad);
  f->magic = 0;
  free(f);
  bump(&G.drops);
}

static int frame_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  const frame *f = ud;
  if (f->magic != MAGIC)
    bump(&G.bad);
  int block = f->block && !pthread_equal(pthread_self(), G.test_thread);
  pthread_mutex_lock(&G.mu);
  int n = ++G.loads;
  pthread_cond_broadcast(&G.cv);
  while (block && !G.open)
    pthread_cond_wait(&G.cv, &G.mu);
  pthread_mutex_unlock(&G.mu);
  xft_sleep_ms(2); /* a delta the rate-aware rule can work with */
  char v[16];
  snprintf(v, sizeof v, "v%d", n);
  return xf_sink_set(sink, v, strlen(v)) == XF_OK ? 0 : -1;
}

static void frame_load_async(void *ud, const char *key, size_t keylen,
                             xf_async_load *load) {
  (void)key, (void)keylen;
  if (((const frame *)ud)->magic != MAGIC)
    bump(&G.bad);
  G.pending = load; /* the loop's thread: the test's */
  bump(&G.loads);
}

static int hand_over(xf_refresh *r, void *ud) {
  (void)ud;
  G.handed = r;
  return 0;
}

typedef enum { D_POOL, D_SHARE, D_EXECUTOR, D_BATCH, D_LIBEVENT, D_LIBUV } driver;
typedef enum { E_RUN, E_CLOSED, E_LEASE_LOST, E_REDIS_GONE, E_FORK } ending;
static const char *const driver_names[] = {"pool",  "share",    "executor",
                                           "batch", "libevent", "libuv"};
static const char *const ending_names[] = {"run", "closed", "lease lost", "redis gone",
                                           "fork"};

typedef struct tcase {
  driver d;
  ending e;
} tcase;

typedef struct handle {
  driver d;
  xft_server srv;
  xf_share *share;
  xf_pool *pool;
  xf_client *c;
  xf_async *ac;
  struct event_base *base;
  uv_loop_t uv;
  int uv_open; /* uv initialized and not closed yet */
  int fired, rc;
  xf_source source;
} handle;

static void open_handle(handle *h, driver d) {
  memset(h, 0, sizeof *h);
  h->d = d;
  cr_assert_eq(xft_server_start(&h->srv, NULL), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.port = h->srv.port;
  if (d == D_POOL || d == D_SHARE || d == D_BATCH)
    cr_assert_eq(xf_share_open(&h->share, NULL), XF_OK);
  o.share = h->share;
  o.refresh_executor = d == D_EXECUTOR ? hand_over : NULL;
  if (d == D_POOL) {
    cr_assert_eq(xf_pool_open(&h->pool, &o, 2, 0), XF_OK);
  } else if (d == D_LIBEVENT) {
    cr_assert_not_null(h->base = event_base_new());
    cr_assert_eq(xf_async_open_libevent(&h->ac, &o, h->base), XF_OK);
  } else if (d == D_LIBUV) {
    cr_assert_eq(uv_loop_init(&h->uv), 0);
    h->uv_open = 1;
    cr_assert_eq(xf_async_open_libuv(&h->ac, &o, &h->uv), XF_OK);
  } else {
    cr_assert_eq(xf_client_open(&h->c, &o), XF_OK);
  }
}

/* Closes what is still open (the loop's handles closed too). */
static void close_handle(handle *h) {
  xf_async_close(h->ac);
  h->ac = NULL;
  if (h->base)
    event_base_free(h->base);
  h->base = NULL;
  if (h->uv_open) {
    uv_run(&h->uv, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&h->uv), 0);
    h->uv_open = 0;
  }
  xf_pool_close(h->pool);
  xf_client_close(h->c);
  xf_share_close(h->share);
  h->pool = NULL, h->c = NULL, h->share = NULL;
}

static void turn(handle *h) {
  if (h->base)
    event_base_loop(h->base, EVLOOP_NONBLOCK);
  else
    uv_run(&h->uv, UV_RUN_NOWAIT);
  xft_sleep_ms(1);
}

static void on_done(int rc, const xf_value *v, void *privdata) {
  handle *h = privdata;
  h->fired = 1;
  h->rc = rc;
  h->source = rc == XF_OK ? v->source : (xf_source)-1;
}

/* Turns the loop until the call's callback ran, completing its load. */
static void async_call(handle *h, const char *key, const xf_policy *p, frame *ud) {
  h->fired = 0;
  cr_assert_eq(
      xf_async_get_or_compute(h->ac, key, strlen(key), p, frame_load_async, ud, on_done, h),
      XF_OK);
  for (int64_t until = xft_now_ms() + 10000; !h->fired && xft_now_ms() < until;) {
    if (G.pending) {
      xf_async_load *load = G.pending;
      G.pending = NULL;
      cr_assert_eq(xf_async_load_done(load, "v1", 2), XF_OK);
    }
    turn(h);
  }
  cr_assert(h->fired, "the call's callback ran");
}

/* One call with a fresh loader_ud, freed (its magic wiped) once the call
 * returned; the value's source. */
static int call(handle *h, const char *key, const xf_policy *p, int block) {
  frame *ud = malloc(sizeof *ud);
  cr_assert_not_null(ud);
  ud->magic = MAGIC;
  ud->block = block;
  xf_value v = {0};
  size_t len = strlen(key);
  int rc, key_rc = XF_OK;
  if (h->ac) {
    async_call(h, key, p, ud);
    rc = h->rc, v.source = h->source;
  } else if (h->pool) {
    rc = xf_pool_get_or_compute(h->pool, key, len, p, frame_load, ud, &v);
  } else if (h->d == D_BATCH) {
    rc = xf_get_or_compute_many(h->c, 1, &key, &len, p, frame_load, ud, &v, &key_rc);
    rc = rc != XF_OK ? rc : key_rc;
  } else {
    rc = xf_get_or_compute(h->c, key, len, p, frame_load, ud, &v);
  }
  ud->magic = 0;
  free(ud);
  int source = (int)v.source;
  xf_value_free(&v);
  cr_assert_eq(rc, XF_OK);
  return source;
}

ParameterizedTestParameters(ud_lifetime, kept_across_the_handoff_and_dropped_once) {
  static tcase cases[] = {
      {D_POOL, E_RUN},         {D_POOL, E_CLOSED},         {D_POOL, E_LEASE_LOST},
      {D_POOL, E_REDIS_GONE},  {D_POOL, E_FORK},           {D_SHARE, E_RUN},
      {D_SHARE, E_CLOSED},     {D_SHARE, E_LEASE_LOST},    {D_SHARE, E_REDIS_GONE},
      {D_SHARE, E_FORK},       {D_EXECUTOR, E_RUN},        {D_EXECUTOR, E_CLOSED},
      {D_BATCH, E_RUN},        {D_BATCH, E_CLOSED},        {D_LIBEVENT, E_RUN},
      {D_LIBEVENT, E_CLOSED},  {D_LIBEVENT, E_LEASE_LOST}, {D_LIBEVENT, E_REDIS_GONE},
      {D_LIBUV, E_RUN},        {D_LIBUV, E_CLOSED},        {D_LIBUV, E_LEASE_LOST},
      {D_LIBUV, E_REDIS_GONE},
  };
  return cr_make_param_array(tcase, cases, sizeof cases / sizeof cases[0]);
}

/* The refresh is under way (its loader blocked, or its load pending on the
 * loop, or handed to the executor): ends it as the case says. */
static void end_refresh(handle *h, ending e) {
  int loop = h->ac != NULL;
  if (e == E_LEASE_LOST) /* lease 300 ms, never renewed: gone after 600 */
    xft_sleep_ms(600);
  if (e == E_REDIS_GONE)
    xft_server_stop(&h->srv);
  if (e == E_FORK) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) { /* the parent's refresh is not the child's to drop */
      close_handle(h);
      _exit(count(&G.keeps) == 1 && count(&G.drops) == 0 ? 0 : 1);
    }
    /* A child alone takes < 5 s (its pool's close waits 2 s): 60 s of margin. */
    int status = xft_wait_child(pid, 60);
    cr_assert_neq(status, -1, "the child ended within 60 s");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "a forked child dropped its parent's refresh");
  }
  if (e == E_CLOSED)
    close_handle(h); /* a pool or share waits 2 s for the blocked loader, then leaves it */
  gate_open();
  if (h->d == D_EXECUTOR) {
    cr_assert_not_null(G.handed, "handed to the executor");
    if (e == E_CLOSED)
      xf_refresh_drop(G.handed);
    else
      cr_expect_eq(xf_refresh_run(G.handed, NULL, NULL), XF_OK);
    G.handed = NULL;
  } else if (loop) {
    cr_assert_not_null(G.pending, "the refresh's load is pending");
    xf_async_load *load = G.pending;
    G.pending = NULL;
    cr_assert_eq(xf_async_load_done(load, "v2", 2), XF_OK);
  }
  for (int64_t until = xft_now_ms() + 10000;
       count(&G.drops) < 1 && xft_now_ms() < until && loop && h->ac;)
    turn(h);
  cr_expect(wait_for(&G.drops, 1, 10000), "the kept loader_ud is dropped");
}

ParameterizedTest(tcase *t, ud_lifetime, kept_across_the_handoff_and_dropped_once) {
  cr_log_info("%s, %s", driver_names[t->d], ending_names[t->e]);
  if (t->e == E_FORK)
    XFT_SKIP_THREADED_FORK();
  else if (getenv("XFT_ONLY_FORKS")) /* the release stage's native run of the forks */
    cr_skip_test("not a fork: run under the sanitizers");
  G.test_thread = pthread_self();
  handle h;
  open_handle(&h, t->d);
  xf_policy p = XF_POLICY_INIT; /* background_refresh AUTO: the default */
  p.loader_ud_keep = keep_frame;
  p.loader_ud_drop = drop_frame;
  p.refresh_ahead = 1e9; /* every hit with a delta is due: the test picks when */
  if (t->e == E_LEASE_LOST)
    p.lease_ms = 300, p.max_load_ms = 1;
  cr_assert_eq(call(&h, "ud:life", &p, 0), XF_SOURCE_LOADER);
  cr_expect_eq(count(&G.keeps), 0, "a miss loads in the call: nothing kept");
  pthread_mutex_lock(&G.mu);
  G.open = 0;
  pthread_mutex_unlock(&G.mu);
  cr_expect_eq(call(&h, "ud:life", &p, 1), XF_SOURCE_CACHE,
               "the refresh left the request path");
  cr_expect_eq(count(&G.keeps), 1);
  if (t->d != D_EXECUTOR && !h.ac)
    cr_assert(wait_for(&G.loads, 2, 10000), "the refresh's loader runs on a worker");
  if (h.ac) /* the refresh's loader runs on the loop after the callback */
    for (int64_t until = xft_now_ms() + 10000; !G.pending && xft_now_ms() < until;)
      turn(&h);
  cr_expect_eq(count(&G.drops), 0, "kept while the refresh runs");
  end_refresh(&h, t->e);
  close_handle(&h);
  if (t->e != E_REDIS_GONE)
    xft_server_stop(&h.srv);
  cr_expect_eq(count(&G.drops), 1, "dropped exactly once");
  cr_expect_eq(count(&G.keeps), 1);
  cr_expect_eq(count(&G.bad), 0, "a loader_ud read after its call returned");
}

/* Keep and drop come together. */
Test(ud_lifetime, keep_without_drop_is_refused) {
  xf_client *c = xft_client(1);
  xf_policy p = XF_POLICY_INIT;
  p.loader_ud_keep = keep_frame;
  frame ud = {MAGIC, 0};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "ud:half", 7, &p, frame_load, &ud, &v), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), "loader_ud_drop") != NULL, "%s", xf_errmsg(c));
  xf_client_close(c);
}
