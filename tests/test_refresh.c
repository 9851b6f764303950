/* Background refresh (policy.background_refresh = XF_BACKGROUND_ON) against a real Redis,
 * through the pool and blocking drivers and their share's refresh workers: the call that
 * wins an early refresh returns the current value while the loader runs
 * elsewhere; a failed refresh keeps the value and releases the lease; close
 * does not wait for a refresh stuck in its loader; a forked child makes its
 * own workers. The loader here blocks until the test lets it go, so "while
 * the refresh runs" is a fact, not a timing. By default every C driver
 * refreshes in the call: a loader_ud is never used after its call returned. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "entry_peek.h"
#include "fixture.h"

typedef struct gated {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;    /* 0: a run blocks until it is 1 */
  int calls;   /* runs started */
  int fail_at; /* the run (1-based) that fails, 0 = none */
} gated;

static gated G = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, 0};

static void gate_set(int open) {
  pthread_mutex_lock(&G.mu);
  G.open = open;
  pthread_cond_broadcast(&G.cv);
  pthread_mutex_unlock(&G.mu);
}

static int calls(void) {
  pthread_mutex_lock(&G.mu);
  int n = G.calls;
  pthread_mutex_unlock(&G.mu);
  return n;
}

static int gated_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  pthread_mutex_lock(&G.mu);
  int n = ++G.calls;
  pthread_cond_broadcast(&G.cv);
  while (!G.open)
    pthread_cond_wait(&G.cv, &G.mu);
  int fail = G.fail_at == n;
  pthread_mutex_unlock(&G.mu);
  xft_sleep_ms(2); /* a delta the rate-aware rule can work with */
  char v[16];
  snprintf(v, sizeof v, "v%d", n);
  return fail ? 9 : (xf_sink_set(sink, v, strlen(v)) == XF_OK ? 0 : -1);
}

static void wait_calls(int n) {
  pthread_mutex_lock(&G.mu);
  while (G.calls < n)
    pthread_cond_wait(&G.cv, &G.mu);
  pthread_mutex_unlock(&G.mu);
}

static void reset(void) {
  G.open = 1;
  G.calls = 0;
  G.fail_at = 0;
}

TestSuite(refresh, .init = reset);

static xf_policy background(void) {
  xf_policy p = XF_POLICY_INIT;
  p.background_refresh = XF_BACKGROUND_ON;
  p.refresh_ahead = 1e9; /* every hit with a delta is due: the test picks when */
  /* Longer than any test runs: an entry expiring mid-test (60 s, the default,
   * was outlasted on a busy machine: 87 s) would read as a lost value. */
  p.ttl_ms = 600000;
  return p;
}

/* The drivers that run refreshes on the share's workers, one test body for
 * both: a pool (its clients), a blocking client (a client opened like it). */
typedef enum { DRIVER_POOL, DRIVER_BLOCKING } driver;

typedef struct handle {
  driver d;
  xf_pool *pool;
  xf_client *client;
} handle;

static handle open_on(driver d, xf_share *s) {
  xf_options o = XF_OPTIONS_INIT;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", xft_port());
  o.host = host;
  o.share = s;
  handle h = {.d = d};
  if (d == DRIVER_POOL)
    cr_assert_eq(xf_pool_open(&h.pool, &o, 4, 0), XF_OK);
  else
    cr_assert_eq(xf_client_open(&h.client, &o), XF_OK);
  return h;
}

static void close_handle(handle *h) {
  xf_pool_close(h->pool);
  xf_client_close(h->client);
}

/* One call through loader: its value into buf, its source returned (-rc on
 * failure). */
static int get_with(handle *h, const char *key, xf_loader_fn loader, char *buf,
                    size_t size) {
  xf_policy pol = background();
  xf_value v;
  int rc = h->pool
               ? xf_pool_get_or_compute(h->pool, key, strlen(key), &pol, loader, NULL, &v)
               : xf_get_or_compute(h->client, key, strlen(key), &pol, loader, NULL, &v);
  if (rc != XF_OK)
    return rc < 0 ? rc : -rc;
  snprintf(buf, size, "%s", v.data);
  int source = (int)v.source;
  xf_value_free(&v);
  return source;
}

/* One call through the gated loader. */
static int get(handle *h, const char *key, char *buf, size_t size) {
  return get_with(h, key, gated_load, buf, size);
}

ParameterizedTestParameters(refresh,
                            the_caller_gets_the_current_value_while_the_refresh_runs) {
  static driver drivers[] = {DRIVER_POOL, DRIVER_BLOCKING};
  return cr_make_param_array(driver, drivers, 2);
}
ParameterizedTestParameters(refresh,
                            a_failed_refresh_keeps_the_value_and_releases_the_lease) {
  static driver drivers[] = {DRIVER_POOL, DRIVER_BLOCKING};
  return cr_make_param_array(driver, drivers, 2);
}
ParameterizedTestParameters(refresh,
                            close_does_not_wait_for_a_refresh_stuck_in_its_loader) {
  static driver drivers[] = {DRIVER_POOL, DRIVER_BLOCKING};
  return cr_make_param_array(driver, drivers, 2);
}
ParameterizedTestParameters(refresh, a_forked_child_refreshes_on_workers_of_its_own) {
  static driver drivers[] = {DRIVER_POOL, DRIVER_BLOCKING};
  return cr_make_param_array(driver, drivers, 2);
}

/* Keys named after the test and the driver (tests run in parallel). */
static const char *key_of(const char *name, driver d) {
  static char k[64];
  snprintf(k, sizeof k, "refresh:%s:%s", name, d == DRIVER_POOL ? "pool" : "blocking");
  return k;
}

/* What Redis holds now for key (xf_get), polled until it is want or 10 s. */
/* What lands() read last, for its callers' messages. */
static char landed[64];

static int lands(const char *key, const char *want) {
  xf_client *c = xft_client(0);
  int ok = 0;
  for (int i = 0; i < 1000 && !ok; i++) {
    xf_value v;
    int rc = xf_get(c, key, strlen(key), &v);
    if (rc == XF_OK)
      snprintf(landed, sizeof landed, "%s", v.data);
    else
      snprintf(landed, sizeof landed, "rc %d: %.40s", rc, xf_errmsg(c));
    ok = rc == XF_OK && strcmp(v.data, want) == 0;
    xf_value_free(&v);
    if (!ok)
      xft_sleep_ms(10);
  }
  xf_client_close(c);
  return ok;
}

static xf_refresh_info info_when(xf_share *s, uint64_t done_or_abandoned) {
  xf_refresh_info i;
  for (int n = 0; n < 1000; n++) {
    xf_share_refresh_stats(s, &i);
    if (i.done + i.abandoned >= done_or_abandoned)
      break;
    xft_sleep_ms(10);
  }
  return i;
}

ParameterizedTest(driver *d, refresh,
                  the_caller_gets_the_current_value_while_the_refresh_runs) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  handle h = open_on(*d, s);
  handle *p = &h;
  char key[64], v[32];
  snprintf(key, sizeof key, "%s", key_of("slow", *d));
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_LOADER);
  cr_assert_str_eq(v, "v1");
  gate_set(0); /* the refresh's loader will block */
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_CACHE,
               "the refresh's winner returns at once");
  cr_expect_str_eq(v, "v1");
  wait_calls(2); /* the loader runs, elsewhere */
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_CACHE);
  cr_expect_str_eq(v, "v1", "others are served while the lease is held");
  cr_expect_eq(calls(), 2, "one refresh");
  gate_set(1);
  cr_expect(lands(key, "v2"), "the refresh's value lands");
  xf_refresh_info i = info_when(s, 1);
  cr_expect_eq(i.started, 1);
  cr_expect_eq(i.done, 1);
  cr_expect_eq(i.failed, 0);
  close_handle(p);
  xf_share_close(s);
}

ParameterizedTest(driver *d, refresh,
                  a_failed_refresh_keeps_the_value_and_releases_the_lease) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  handle h = open_on(*d, s);
  handle *p = &h;
  char key[64], v[32];
  snprintf(key, sizeof key, "%s", key_of("fail", *d));
  G.fail_at = 2;
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_LOADER);
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_CACHE,
               "the failure never reaches a caller");
  xf_refresh_info i = info_when(s, 1);
  cr_expect_eq(i.failed, 1);
  cr_expect(lands(key, "v1"), "the value is kept");
  if (p->pool) { /* a blocking client's refresh counts on a client of its own */
    xf_pool_info pi;
    xf_pool_stats(p->pool, &pi);
    cr_expect_eq(pi.clients.load_errors, 1);
  }
  /* The lease was released: the next due call refreshes again. */
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_CACHE);
  cr_expect(lands(key, "v3"));
  cr_expect_eq(calls(), 3);
  close_handle(p);
  xf_share_close(s);
}

ParameterizedTest(driver *d, refresh,
                  close_does_not_wait_for_a_refresh_stuck_in_its_loader) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  handle h = open_on(*d, s);
  handle *p = &h;
  char key[64], v[32];
  snprintf(key, sizeof key, "%s", key_of("close", *d));
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_LOADER);
  gate_set(0);
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_CACHE);
  wait_calls(2);
  int64_t t0 = xft_now_ms();
  close_handle(p);           /* a pool waits XF_REFRESH_DRAIN_MS, then abandons it */
  if (*d == DRIVER_BLOCKING) /* the share does, for a blocking client's */
    xf_share_close(s);
  int64_t took = xft_now_ms() - t0;
  cr_expect_geq(took, XF_REFRESH_DRAIN_MS - 50, "it drained first (%lld ms)",
                (long long)took);
  /* The loader never returns until the gate opens below: any bound tells
   * "drained, then left it" from "waited for it". 30 s over the drain time (it
   * took 7.7 s in all on a busy machine, load average 15). */
  cr_expect_lt(took, XF_REFRESH_DRAIN_MS + 30000, "bounded (%lld ms)", (long long)took);
  gate_set(1); /* the loader returns after close: its result is dropped */
  if (*d == DRIVER_POOL) {
    xf_refresh_info i = info_when(s, 1);
    cr_expect_eq(i.abandoned, 1);
  }
  xft_sleep_ms(100);
  cr_expect(lands(key, "v1"), "nothing written after close (read %s)", landed);
  if (*d == DRIVER_POOL)
    xf_share_close(s);
}

ParameterizedTest(driver *d, refresh, a_forked_child_refreshes_on_workers_of_its_own) {
  XFT_SKIP_THREADED_FORK();
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  handle h = open_on(*d, s);
  handle *p = &h;
  char key[64], ckey[64], v[32];
  snprintf(key, sizeof key, "%s", key_of("parent", *d));
  snprintf(ckey, sizeof ckey, "%s", key_of("child", *d));
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_LOADER);
  cr_assert_eq(get(p, key, v, sizeof v), XF_SOURCE_CACHE);
  cr_assert(lands(key, "v2"), "the parent's workers run");
  pid_t pid = fork();
  if (pid == 0) { /* the child: its own pool, the inherited share */
    G.calls = 0;
    handle q = open_on(*d, s);
    int ok = get(&q, ckey, v, sizeof v) == XF_SOURCE_LOADER &&
             get(&q, ckey, v, sizeof v) == XF_SOURCE_CACHE && lands(ckey, "v2");
    xf_refresh_info i;
    xf_share_refresh_stats(s, &i);
    ok = ok && i.started == 1; /* the child's own count */
    close_handle(&q);
    _exit(ok ? 0 : 1);
  }
  int status = xft_wait_child(pid, 60); /* a child alone takes < 5 s */
  cr_assert_neq(status, -1, "the child ended within 60 s");
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's refresh landed");
  close_handle(p);
  xf_share_close(s);
}

/* A child forked while the parent's refresh is in its loader: the parent's
 * job is left as it was (kept reachable with the parent's worker set, so
 * valgrind's child sees no leak), the child refreshes on its own workers,
 * and the parent's refresh still lands once let go. The child never touches
 * G (its condition variable was copied with the parent's waiter in it). */
static int plain_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  xft_sleep_ms(2);
  return xf_sink_set(sink, "c", 1) == XF_OK ? 0 : -1;
}

ParameterizedTestParameters(refresh, a_child_forked_during_the_parents_refresh) {
  static driver drivers[] = {DRIVER_POOL, DRIVER_BLOCKING};
  return cr_make_param_array(driver, drivers, 2);
}

ParameterizedTest(driver *d, refresh, a_child_forked_during_the_parents_refresh) {
  XFT_SKIP_THREADED_FORK();
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  handle h = open_on(*d, s);
  char key[64], ckey[64], v[32];
  snprintf(key, sizeof key, "%s", key_of("inflight", *d));
  snprintf(ckey, sizeof ckey, "%s", key_of("inflight-child", *d));
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_LOADER);
  gate_set(0);
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_CACHE);
  wait_calls(2); /* the parent's refresh is in its loader now */
  pid_t pid = fork();
  if (pid == 0) {
    handle q = open_on(*d, s);
    int ok = get_with(&q, ckey, plain_load, v, sizeof v) == XF_SOURCE_LOADER;
    ok = ok && get_with(&q, ckey, plain_load, v, sizeof v) == XF_SOURCE_CACHE;
    xf_refresh_info i = info_when(s, 1);
    ok = ok && i.started == 1 && i.done == 1;
    close_handle(&q);
    _exit(ok ? 0 : 1);
  }
  int status = xft_wait_child(pid, 60); /* a child alone takes < 5 s */
  cr_assert_neq(status, -1, "the child ended within 60 s");
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child refreshed on its own workers (status %d)", status);
  gate_set(1);
  cr_expect(lands(key, "v2"), "the parent's refresh lands once let go");
  close_handle(&h);
  xf_share_close(s);
}

/* ---- a user's executor (xf_options.refresh_executor) ------------------------------ */

static xf_refresh *kept;
static int refuse;

static int keep_refresh(xf_refresh *r, void *ud) {
  (void)ud;
  if (refuse)
    return 1;
  kept = r;
  return 0;
}

/* Options of a client of the fixture's server whose refreshes go to
 * keep_refresh (host: the caller's buffer, as long as o is used). */
static void executor_options(xf_options *o, char *host, size_t hostlen) {
  *o = (xf_options)XF_OPTIONS_INIT;
  snprintf(host, hostlen, "127.0.0.1:%d", xft_port());
  o->host = host;
  o->refresh_executor = keep_refresh;
}

/* A blocking client opened with o that loads key, then finds it due: its
 * refresh goes to the executor (kept, unless refused). */
static handle executor_handle_due(const xf_options *o, const char *key) {
  handle h = {.d = DRIVER_BLOCKING};
  cr_assert_eq(xf_client_open(&h.client, o), XF_OK);
  char v[32];
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_LOADER);
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_CACHE);
  return h;
}

Test(refresh, a_user_executor_gets_the_refresh_to_run_or_drop) {
  xf_options o;
  char host[32];
  executor_options(&o, host, sizeof host);
  const char *key = "refresh:executor";
  handle h = executor_handle_due(&o, key);
  char v[32];
  cr_assert_not_null(kept, "the executor took it");
  cr_expect_eq(calls(), 1, "not run in the call");
  size_t len;
  const char *k = xf_refresh_key(kept, &len);
  cr_expect(len == strlen(key) && memcmp(k, key, len) == 0);
  xf_client_close(h.client); /* the refresh does not need the caller's client */
  cr_expect_eq(xf_refresh_run(kept, NULL, NULL), XF_OK);
  kept = NULL;
  cr_expect(lands(key, "v2"));
  cr_assert_eq(xf_client_open(&h.client, &o), XF_OK);
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_CACHE);
  cr_assert_not_null(kept);
  xf_refresh_drop(kept); /* its lease stays until it expires */
  kept = NULL;
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_CACHE);
  cr_expect_null(kept, "the dropped refresh's lease is still held");
  redisContext *rc = xft_redis(); /* start over */
  freeReplyObject(xft_cmd(rc, "DEL %s", key));
  redisFree(rc);
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_LOADER);
  refuse = 1; /* refused: skipped, the lease released at once */
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_CACHE);
  refuse = 0;
  cr_assert_eq(get(&h, key, v, sizeof v), XF_SOURCE_CACHE);
  cr_expect_not_null(kept, "the next call refreshes");
  xf_refresh_drop(kept);
  close_handle(&h);
}

/* A refresh that waits for its executor (a busy worker) before its loader
 * runs: the entry's delta is the time from the call that found it due to the
 * loader's return, waiting included, so the next refresh is due that much
 * earlier (refresh_ahead x delta) and still lands before the value expires
 * while workers run as late as they did. Margin: the executor waits 200 ms
 * (a sleep, at least that long on any machine) and the loader ~2 ms; the
 * delta must be at least 200 ms, whatever the machine adds. */
Test(refresh, a_late_refresh_counts_its_wait_in_the_entrys_delta) {
  xf_options o;
  char host[32];
  executor_options(&o, host, sizeof host);
  const char *key = "refresh:late";
  handle h = executor_handle_due(&o, key);
  cr_assert_not_null(kept, "the executor took the refresh");
  xft_sleep_ms(200); /* the worker is late */
  cr_assert_eq(xf_refresh_run(kept, NULL, NULL), XF_OK);
  kept = NULL;
  cr_assert(lands(key, "v2"), "landed: %s", landed);
  redisContext *rc = xft_redis();
  xft_peek e;
  char full[64];
  snprintf(full, sizeof full, "%s", key);
  xft_peek_read(rc, full, "", &e);
  cr_expect_geq(e.d, 200000, "delta %lld us: the 200 ms wait for a worker is not counted",
                e.d);
  xft_peek_free(&e);
  freeReplyObject(xft_cmd(rc, "DEL %s", key));
  redisFree(rc);
  close_handle(&h);
}

/* The same through the share's workers (both busy with refreshes blocked in
 * their loaders, so the hot key's refresh queues behind them for 200 ms).
 * Margin: as above, the wait is a sleep of 200 ms and the loader ~2 ms.
 * The share runs 2 workers (XF_REFRESH_THREADS); with more, b3... would be
 * needed to keep them busy. */
ParameterizedTestParameters(refresh, a_queued_refresh_counts_its_wait_in_the_entrys_delta) {
  static driver drivers[] = {DRIVER_POOL, DRIVER_BLOCKING};
  return cr_make_param_array(driver, drivers, 2);
}
ParameterizedTest(driver *d, refresh,
                  a_queued_refresh_counts_its_wait_in_the_entrys_delta) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  handle h = open_on(*d, s);
  char hot[64], b1[64], b2[64], v[32];
  snprintf(hot, sizeof hot, "%s", key_of("queued-hot", *d));
  snprintf(b1, sizeof b1, "%s", key_of("queued-b1", *d));
  snprintf(b2, sizeof b2, "%s", key_of("queued-b2", *d));
  cr_assert_eq(get(&h, b1, v, sizeof v), XF_SOURCE_LOADER);  /* v1 */
  cr_assert_eq(get(&h, b2, v, sizeof v), XF_SOURCE_LOADER);  /* v2 */
  cr_assert_eq(get(&h, hot, v, sizeof v), XF_SOURCE_LOADER); /* v3 */
  gate_set(0);
  cr_assert_eq(get(&h, b1, v, sizeof v), XF_SOURCE_CACHE);
  wait_calls(4); /* a worker blocked in b1's refresh */
  cr_assert_eq(get(&h, b2, v, sizeof v), XF_SOURCE_CACHE);
  wait_calls(5); /* the other in b2's */
  cr_assert_eq(get(&h, hot, v, sizeof v), XF_SOURCE_CACHE, "its refresh is queued");
  xft_sleep_ms(200); /* the workers are late */
  cr_expect_eq(calls(), 5, "the hot key's refresh waited for a worker");
  gate_set(1);
  cr_assert(lands(hot, "v6"), "landed: %s", landed);
  redisContext *rc = xft_redis();
  xft_peek e;
  xft_peek_read(rc, hot, "", &e);
  cr_expect_geq(e.d, 200000, "delta %lld us: the 200 ms wait for a worker is not counted",
                e.d);
  xft_peek_free(&e);
  freeReplyObject(xft_cmd(rc, "DEL %s %s %s", hot, b1, b2));
  redisFree(rc);
  info_when(s, 3);
  close_handle(&h);
  xf_share_close(s);
}

/* A loader_ud as a C caller keeps it: in the frame of the call, gone once
 * the call returned. The test keeps the memory (a late touch is counted, not
 * a crash) and marks it gone when the call returns. */
typedef struct call_frame {
  int gone;          /* the call returned */
  int loads;         /* loader runs given this ud */
  int touched_after; /* those that began after the call returned */
  pthread_t caller;  /* the calling thread */
  int in_caller;     /* loader runs on it (a load in the call; a refresh
                        worker's are on its own thread, whenever it runs) */
} call_frame;

static int frame_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  call_frame *f = ud;
  if (__atomic_load_n(&f->gone, __ATOMIC_SEQ_CST))
    __atomic_add_fetch(&f->touched_after, 1, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&f->loads, 1, __ATOMIC_SEQ_CST);
  if (pthread_equal(pthread_self(), f->caller))
    __atomic_add_fetch(&f->in_caller, 1, __ATOMIC_SEQ_CST);
  return gated_load(NULL, key, keylen, sink);
}

/* Where an early refresh runs, driver by driver. By default
 * (background_refresh AUTO) in the call on every C driver, even where a
 * share, a pool or an executor could run it elsewhere: the library cannot
 * know that loader_ud outlives the call, so a default that ran the loader
 * later would read a caller's stack after it returned. XF_BACKGROUND_ON (the
 * caller's word that loader and loader_ud outlive the call) sends it off the
 * call wherever there is somewhere to run it; a bare client has nowhere.
 * The source tells: a refresh in the call returns its own value
 * (XF_SOURCE_LOADER), one that left it the current value (XF_SOURCE_CACHE).
 * The batch driver is xf_get_or_compute_many with one key. */
typedef enum { WHERE_POOL, WHERE_BLOCKING, WHERE_BATCH } where_driver;

typedef struct where_case {
  where_driver d;
  int share, executor, background, off_path;
} where_case;

ParameterizedTestParameters(refresh, where_an_early_refresh_runs) {
  static where_case cases[] = {
      {WHERE_POOL, 0, 0, XF_BACKGROUND_AUTO, 0},
      {WHERE_BLOCKING, 1, 0, XF_BACKGROUND_AUTO, 0},
      {WHERE_BLOCKING, 0, 1, XF_BACKGROUND_AUTO, 0},
      {WHERE_BLOCKING, 0, 0, XF_BACKGROUND_AUTO, 0},
      {WHERE_BATCH, 1, 0, XF_BACKGROUND_AUTO, 0},
      {WHERE_BATCH, 0, 1, XF_BACKGROUND_AUTO, 0},
      {WHERE_POOL, 0, 0, XF_BACKGROUND_ON, 1},
      {WHERE_BLOCKING, 1, 0, XF_BACKGROUND_ON, 1},
      {WHERE_BLOCKING, 0, 1, XF_BACKGROUND_ON, 1},
      {WHERE_BLOCKING, 0, 0, XF_BACKGROUND_ON, 0},
      {WHERE_BATCH, 1, 0, XF_BACKGROUND_ON, 1},
      {WHERE_POOL, 0, 0, XF_BACKGROUND_OFF, 0},
  };
  return cr_make_param_array(where_case, cases, sizeof cases / sizeof cases[0]);
}

static int where_call(handle *h, where_driver d, const char *key, const xf_policy *pol,
                      call_frame *f, xf_value *v) {
  size_t len = strlen(key);
  if (d == WHERE_POOL)
    return xf_pool_get_or_compute(h->pool, key, len, pol, frame_load, f, v);
  if (d == WHERE_BLOCKING)
    return xf_get_or_compute(h->client, key, len, pol, frame_load, f, v);
  int key_rc = XF_OK;
  int rc = xf_get_or_compute_many(h->client, 1, &key, &len, pol, frame_load, f, v, &key_rc);
  return rc != XF_OK ? rc : key_rc;
}

ParameterizedTest(where_case *w, refresh, where_an_early_refresh_runs) {
  xf_share *s = NULL;
  if (w->share)
    cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  char host[32], key[80];
  snprintf(host, sizeof host, "127.0.0.1:%d", xft_port());
  o.host = host;
  o.share = s;
  o.refresh_executor = w->executor ? keep_refresh : NULL;
  kept = NULL;
  handle h = {.d = w->d == WHERE_POOL ? DRIVER_POOL : DRIVER_BLOCKING};
  if (w->d == WHERE_POOL)
    cr_assert_eq(xf_pool_open(&h.pool, &o, 2, 0), XF_OK);
  else
    cr_assert_eq(xf_client_open(&h.client, &o), XF_OK);
  snprintf(key, sizeof key, "refresh:where:%d%d%d%d", w->d, w->share, w->executor,
           w->background);
  xf_policy pol = XF_POLICY_INIT; /* background_refresh as the case says */
  pol.background_refresh = w->background;
  pol.refresh_ahead = 1e9; /* every hit with a delta is due: the test picks when */
  call_frame cold = {.caller = pthread_self()}, early = {.caller = pthread_self()};
  xf_value v;
  cr_assert_eq(where_call(&h, w->d, key, &pol, &cold, &v), XF_OK);
  __atomic_store_n(&cold.gone, 1, __ATOMIC_SEQ_CST);
  cr_assert_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  cr_assert_eq(where_call(&h, w->d, key, &pol, &early, &v), XF_OK);
  if (!w->off_path) /* the caller's frame ends here */
    __atomic_store_n(&early.gone, 1, __ATOMIC_SEQ_CST);
  /* loads on this thread so far: in the call (an executor's runs later) */
  int loads_in_call = __atomic_load_n(&early.in_caller, __ATOMIC_SEQ_CST);
  if (w->off_path) {
    cr_expect_eq(v.source, XF_SOURCE_CACHE, "the winner returns the current value at once");
    cr_expect_str_eq(v.data, "v1");
    cr_expect_eq(loads_in_call, 0, "not run in the call");
    if (w->executor) {
      cr_assert_not_null(kept, "handed to the executor");
      cr_expect_eq(xf_refresh_run(kept, NULL, NULL), XF_OK);
      kept = NULL;
    }
    cr_expect(lands(key, "v2"), "the background refresh's value lands");
  } else {
    cr_expect_eq(v.source, XF_SOURCE_LOADER, "refreshed in the call");
    cr_expect_str_eq(v.data, "v2");
    cr_expect_eq(loads_in_call, 1, "the loader ran before the call returned");
    cr_expect_null(kept, "nothing handed to the executor");
    if (kept) /* what an executor would do with it later */
      xf_refresh_run(kept, NULL, NULL);
    kept = NULL;
  }
  xf_value_free(&v);
  close_handle(&h); /* drains whatever a pool or share still runs */
  xf_share_close(s);
  cr_expect_eq(__atomic_load_n(&cold.touched_after, __ATOMIC_SEQ_CST), 0);
  cr_expect_eq(__atomic_load_n(&early.touched_after, __ATOMIC_SEQ_CST), 0,
               "a loader_ud used after its call returned");
  cr_expect_eq(__atomic_load_n(&early.loads, __ATOMIC_SEQ_CST), 1, "one refresh");
}
