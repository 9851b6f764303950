/* Fail-safe across the fleet (policy.failsafe_throttle_ms): after a failed
 * load that served the last good value (stale_if_error_ms), the entry says
 * so, and until the throttle ends every client serves that value instead of
 * running its loader; then one caller loads again. Every driver
 * (op_drivers.c) and the batch; real redis-server.
 *
 * Timing margins: a 2 s throttle; the second client's call comes right
 * after the failure (a busy machine may delay it by up to 2 s before it
 * would load again), and the load after the throttle comes 2.2 s after the
 * failure ended (a lower bound only). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <string.h>

#include "op_drivers.h"
#include "thread_fail.h"

#define THROTTLE_MS 2000

static void del(const char *key) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
}

/* The drivers' options: the shared server, the suite's entry format, and
 * the fixture's patience (fixture.h: 10 s connect and command timeouts): no
 * test here is about a timeout, and a read that timed out on a busy machine
 * would fail open (the loader run uncached, the stale value it waited for
 * not served). */
static xf_options patient_options(void) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  o.connect_timeout_ms = o.command_timeout_ms = XFT_PATIENT_MS;
  return o;
}

static void count_failsafe(const xf_event *ev, void *ud) {
  if (ev->type == XF_EV_FAILSAFE)
    __atomic_add_fetch((int *)ud, 1, __ATOMIC_ACQ_REL);
}

static xf_policy failsafe_policy(int64_t throttle_ms) {
  xf_policy p = XF_POLICY_INIT;
  p.stale_if_error_ms = 60000;
  p.failsafe_throttle_ms = throttle_ms;
  return p;
}

/* key holds "good", past its ttl, within stale_if_error_ms. */
static void a_stale_good_value(const char *key, const xf_policy *p) {
  del(key);
  xf_client *w = xft_client(0);
  xf_policy short_ttl = *p;
  short_ttl.ttl_ms = 100;
  cr_assert_eq(xf_set(w, key, strlen(key), "good", 4, &short_ttl), XF_OK);
  xf_client_close(w);
  xft_sleep_ms(200); /* past its ttl */
}

static void expect_value(int rc, xf_value *v, const char *want, xf_source source,
                         const char *what) {
  cr_expect_eq(rc, XF_OK, "%s: %s", what, xf_strerror(rc));
  if (rc == XF_OK) {
    cr_expect_str_eq(v->data, want, "%s", what);
    cr_expect_eq(v->source, source, "%s: source %d, want %d", what, v->source, source);
  }
  xf_value_free(v);
}

/* A failed load on one handle, then a call on another (another process's,
 * as it were): how many times the second one's loader ran. */
static int second_callers_loads(int driver, const char *key, int64_t throttle_ms,
                                int *failsafe_events, xf_stats *second_stats) {
  xf_policy p = failsafe_policy(throttle_ms);
  a_stale_good_value(key, &p);
  xf_options o = patient_options();
  xft_drv *first = xft_drv_open(driver, &o);
  o.on_event = count_failsafe;
  o.on_event_ud = failsafe_events;
  xft_drv *second = xft_drv_open(driver, &o);
  xft_op_loader failing = {.fail = 5};
  xf_value v;
  int rc = xft_drv_get_or_compute(first, key, &p, &failing, &v);
  expect_value(rc, &v, "good", XF_SOURCE_STALE, "the failed load");
  cr_expect_eq(failing.calls, 1);
  xft_op_loader ok = {.value = "new"};
  rc = xft_drv_get_or_compute(second, key, &p, &ok, &v);
  int loads = ok.calls;
  xft_drv_stats(second, second_stats); /* its one call's counters */
  if (throttle_ms > 0) {
    expect_value(rc, &v, "good", XF_SOURCE_STALE, "within the throttle");
    /* The throttle over: one caller loads again. */
    xft_sleep_ms(THROTTLE_MS + 200);
    rc = xft_drv_get_or_compute(second, key, &p, &ok, &v);
    expect_value(rc, &v, "new", XF_SOURCE_LOADER, "after the throttle");
    cr_expect_eq(ok.calls, loads + 1, "after the throttle: %d loads", ok.calls - loads);
  } else {
    xf_value_free(&v);
  }
  xft_drv_close(first);
  xft_drv_close(second);
  return loads;
}

ParameterizedTestParameters(failsafe, a_failed_load_is_not_retried_within_the_throttle) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, failsafe, a_failed_load_is_not_retried_within_the_throttle) {
  char key[64];
  snprintf(key, sizeof key, "fs:%s", xft_driver_names[*driver]);
  int events = 0;
  xf_stats st;
  int loads = second_callers_loads(*driver, key, THROTTLE_MS, &events, &st);
  cr_log_info("%s: second client's loads within the throttle: %d",
              xft_driver_names[*driver], loads);
  cr_expect_eq(loads, 0, "%s: the second client loaded within the throttle",
               xft_driver_names[*driver]);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 1, "%s: failsafe events",
               xft_driver_names[*driver]);
  /* The serve under the fail-safe is counted once, and is a stale serve too. */
  cr_expect_eq(st.failsafe, 1, "%s: stats.failsafe %llu", xft_driver_names[*driver],
               (unsigned long long)st.failsafe);
  cr_expect_eq(st.stale, 1, "%s: stats.stale %llu", xft_driver_names[*driver],
               (unsigned long long)st.stale);
}

/* Without a throttle (0, the default), the next caller retries at once. */
Test(failsafe, without_a_throttle_the_next_caller_loads) {
  int events = 0;
  xf_stats st;
  cr_expect_eq(second_callers_loads(XFT_BLOCKING, "fs:off", 0, &events, &st), 1);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 0);
  cr_expect_eq(st.failsafe, 0);
}

/* The batch (xf_get_or_compute_many) serves the last good value too. */
Test(failsafe, the_batch_serves_the_last_good_value) {
  const char *key = "fs:batch";
  xf_policy p = failsafe_policy(THROTTLE_MS);
  a_stale_good_value(key, &p);
  xf_options o = patient_options();
  xft_drv *first = xft_drv_open(XFT_BLOCKING, &o);
  xft_op_loader failing = {.fail = 5};
  xf_value v;
  expect_value(xft_drv_get_or_compute(first, key, &p, &failing, &v), &v, "good",
               XF_SOURCE_STALE, "the failed load");
  xft_op_loader ok = {.value = "new"};
  xf_value values[1];
  int rcs[1];
  cr_assert_eq(xft_drv_many(first, 1, &key, &p, &ok, values, rcs), XF_OK);
  expect_value(rcs[0], &values[0], "good", XF_SOURCE_STALE, "the batch");
  cr_expect_eq(ok.calls, 0, "the batch loaded within the throttle");
  xf_stats st;
  xft_drv_stats(first, &st);
  cr_expect_eq(st.failsafe, 1, "the batch's serve under the fail-safe: %llu",
               (unsigned long long)st.failsafe);
  xft_drv_close(first);
}

/* The event's name. */
Test(failsafe, the_event_is_named) {
  cr_expect_str_eq(xf_event_name(XF_EV_FAILSAFE), "failsafe");
}

/* A caller that does not set the throttle (as a client of an earlier version,
 * which knows no mark) sees a live lease: it waits, it does not load. */
Test(failsafe, a_caller_without_the_throttle_sees_a_live_lease) {
  const char *key = "fs:unaware";
  xf_policy p = failsafe_policy(THROTTLE_MS);
  a_stale_good_value(key, &p);
  xf_options o = patient_options();
  xft_drv *d = xft_drv_open(XFT_BLOCKING, &o);
  xft_op_loader failing = {.fail = 5};
  xf_value v;
  expect_value(xft_drv_get_or_compute(d, key, &p, &failing, &v), &v, "good",
               XF_SOURCE_STALE, "the failed load");
  xf_policy unaware = failsafe_policy(0);
  unaware.wait_ms = 0;
  unaware.on_wait_timeout = XF_WAIT_FAIL;
  xft_op_loader ok = {.value = "new"};
  int rc = xft_drv_get_or_compute(d, key, &unaware, &ok, &v);
  cr_expect_eq(rc, XF_ETIMEDOUT, "%s", xf_strerror(rc));
  xf_value_free(&v);
  cr_expect_eq(ok.calls, 0);
  xft_drv_close(d);
}

/* Callers racing a loader that keeps failing, each on its own client (as
 * processes of a fleet would be), with a last good value within
 * stale_if_error_ms: every call is served that value, none gets the
 * loader's error, with and without the throttle. */
typedef struct racer {
  const char *key;
  xf_policy p;
  int calls, errors, stale, loads; /* atomics */
  int64_t slowest_ms;              /* atomic */
  xft_fail fail;                   /* what went wrong on a racer's thread */
} racer;

static int slow_failing_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen, (void)sink;
  __atomic_add_fetch(&((racer *)ud)->loads, 1, __ATOMIC_ACQ_REL);
  xft_sleep_ms(20);
  return -1;
}

static void *race(void *arg) {
  racer *r = arg;
  xf_client *c;
  int rc = xft_record_open(xft_client_open(&c, 0), &r->fail, "a racer");
  if (rc != XF_OK)
    return NULL;
  for (int i = 0; i < 20; i++) {
    xf_value v;
    int64_t t0 = xft_now_ms();
    int rc = xf_get_or_compute(c, r->key, strlen(r->key), &r->p, slow_failing_load, r, &v);
    int64_t took = xft_now_ms() - t0,
            was = __atomic_load_n(&r->slowest_ms, __ATOMIC_ACQUIRE);
    while (took > was && !__atomic_compare_exchange_n(&r->slowest_ms, &was, took, 0,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      ;
    __atomic_add_fetch(&r->calls, 1, __ATOMIC_ACQ_REL);
    if (rc != XF_OK)
      __atomic_add_fetch(&r->errors, 1, __ATOMIC_ACQ_REL);
    else if (v.source == XF_SOURCE_STALE)
      __atomic_add_fetch(&r->stale, 1, __ATOMIC_ACQ_REL);
    xf_value_free(&v);
    xft_sleep_ms(2);
  }
  xf_client_close(c);
  return NULL;
}

ParameterizedTestParameters(failsafe,
                            callers_racing_a_failing_loader_get_the_last_good_value) {
  static int64_t throttles[] = {0, THROTTLE_MS};
  return cr_make_param_array(int64_t, throttles, 2);
}

ParameterizedTest(int64_t *throttle, failsafe,
                  callers_racing_a_failing_loader_get_the_last_good_value) {
  racer r = {.p = failsafe_policy(*throttle)};
  char key[64];
  snprintf(key, sizeof key, "fs:race:%lld", (long long)*throttle);
  r.key = key;
  a_stale_good_value(key, &r.p);
  pthread_t t[8];
  int started = 0, rc = 0;
  while (started < 8 && (rc = pthread_create(&t[started], NULL, race, &r)) == 0)
    started++;
  for (int i = 0; i < started; i++)
    pthread_join(t[i], NULL);
  cr_assert_eq(rc, 0);
  xft_assert_no_fail(&r.fail);
  int calls = __atomic_load_n(&r.calls, __ATOMIC_ACQUIRE);
  cr_log_info("throttle %lld: %d calls, %d stale, %d errors, %d loads, the slowest %lld ms",
              (long long)*throttle, calls, r.stale, r.errors, r.loads,
              (long long)r.slowest_ms);
  cr_expect_eq(__atomic_load_n(&r.errors, __ATOMIC_ACQUIRE), 0,
               "throttle %lld: %d of %d calls got the loader's error", (long long)*throttle,
               r.errors, calls);
  cr_expect_eq(__atomic_load_n(&r.stale, __ATOMIC_ACQUIRE), calls,
               "throttle %lld: %d of %d calls served stale", (long long)*throttle, r.stale,
               calls);
}

/* A holder (another process, as it were: its own client on a thread) whose
 * load fails once the test lets it go. */
typedef struct holder {
  const char *key;
  xf_policy p;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, go; /* under mu */
  int rc;
  pthread_t t;
  xft_fail fail; /* what went wrong on its thread (then it broadcasts cv) */
} holder;

static void holder_set(holder *h, int *field) {
  pthread_mutex_lock(&h->mu);
  *field = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Waits up to 20 s (a busy machine's margin; a step takes milliseconds), or
 * until the holder's thread failed. */
static int holder_wait(holder *h, const int *field) {
  pthread_mutex_lock(&h->mu);
  for (int i = 0; i < 200 && !*field && !xft_fail_count(&h->fail); i++) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000L;
    if (until.tv_nsec >= 1000000000L)
      until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&h->cv, &h->mu, &until);
  }
  int set = *field;
  pthread_mutex_unlock(&h->mu);
  return set;
}

static int held_then_failing_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen, (void)sink;
  holder *h = ud;
  holder_set(h, &h->started);
  holder_wait(h, &h->go);
  return -1;
}

static void *hold(void *arg) {
  holder *h = arg;
  xf_client *c;
  int rc = xft_client_open(&c, 0);
  if (rc != XF_OK) {
    pthread_mutex_lock(&h->mu);
    xft_record_open(rc, &h->fail, "the holder");
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
  }
  xf_value v;
  h->rc =
      xf_get_or_compute(c, h->key, strlen(h->key), &h->p, held_then_failing_load, h, &v);
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

static void holder_start(holder *h, const char *key, const xf_policy *p) {
  *h = (holder){.key = key, .p = *p};
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  cr_assert_eq(pthread_create(&h->t, NULL, hold, h), 0);
  int started = holder_wait(h, &h->started);
  xft_assert_no_fail_join(&h->fail, h->t);
  if (!started) { /* its load fails once let go: it ends */
    holder_set(h, &h->go);
    pthread_join(h->t, NULL);
  }
  cr_assert(started, "the holder's loader runs");
}

static void holder_end(holder *h) {
  holder_set(h, &h->go);
  pthread_join(h->t, NULL);
  cr_expect_eq(h->rc, XF_OK, "the holder is served the last good value: %s",
               xf_strerror(h->rc));
}

static void go_when_waiting(const xf_event *ev, void *ud) {
  if (ev->type == XF_EV_LEASE_LOST)
    holder_set(ud, &((holder *)ud)->go);
}

ParameterizedTestParameters(
    failsafe, a_caller_that_waited_on_a_failed_load_gets_the_last_good_value) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* The load a caller waited on failed: the caller is served the last good
 * value (stale_if_error_ms), as the loading caller is, without running its
 * own loader; callers that waited on a failing load do not retry it one
 * after another. */
ParameterizedTest(int *driver, failsafe,
                  a_caller_that_waited_on_a_failed_load_gets_the_last_good_value) {
  char key[64];
  snprintf(key, sizeof key, "fs:waited:%s", xft_driver_names[*driver]);
  xf_policy p = failsafe_policy(0);
  a_stale_good_value(key, &p);
  holder h;
  xf_options o = patient_options();
  o.on_event = go_when_waiting; /* the holder fails once this call waits */
  o.on_event_ud = &h;
  xft_drv *d = xft_drv_open(*driver, &o); /* opened (asserted) before the holder runs */
  holder_start(&h, key, &p);
  xft_op_loader mine = {.fail = 5};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &mine, &v);
  expect_value(rc, &v, "good", XF_SOURCE_STALE, xft_driver_names[*driver]);
  cr_expect_eq(mine.calls, 0, "%s: the waiter ran its loader %d times",
               xft_driver_names[*driver], mine.calls);
  holder_end(&h);
  xft_drv_close(d);
}

ParameterizedTestParameters(failsafe,
                            a_caller_that_gave_up_waiting_gets_the_last_good_value) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A caller that gave up waiting (wait_ms) loads itself; when that load
 * fails it is served the last good value, as a leased load is. */
ParameterizedTest(int *driver, failsafe,
                  a_caller_that_gave_up_waiting_gets_the_last_good_value) {
  char key[64];
  snprintf(key, sizeof key, "fs:gave-up:%s", xft_driver_names[*driver]);
  xf_policy p = failsafe_policy(0);
  a_stale_good_value(key, &p);
  holder h;
  xf_options o = patient_options();
  xft_drv *d = xft_drv_open(*driver, &o); /* opened (asserted) before the holder runs */
  holder_start(&h, key, &p);              /* held until this call ended */
  xf_policy impatient = p;
  impatient.wait_ms = 50;
  xft_op_loader mine = {.fail = 5};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &impatient, &mine, &v);
  expect_value(rc, &v, "good", XF_SOURCE_STALE, xft_driver_names[*driver]);
  cr_expect_eq(mine.calls, 1, "%s: the caller that gave up loads",
               xft_driver_names[*driver]);
  holder_end(&h);
  xft_drv_close(d);
}
