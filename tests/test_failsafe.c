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
#include <string.h>

#include "op_drivers.h"

#define THROTTLE_MS 2000

static void del(const char *key) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
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
                                int *failsafe_events) {
  xf_policy p = failsafe_policy(throttle_ms);
  a_stale_good_value(key, &p);
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
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
  int loads = second_callers_loads(*driver, key, THROTTLE_MS, &events);
  cr_log_info("%s: second client's loads within the throttle: %d",
              xft_driver_names[*driver], loads);
  cr_expect_eq(loads, 0, "%s: the second client loaded within the throttle",
               xft_driver_names[*driver]);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 1, "%s: failsafe events",
               xft_driver_names[*driver]);
}

/* Without a throttle (0, the default), the next caller retries at once. */
Test(failsafe, without_a_throttle_the_next_caller_loads) {
  int events = 0;
  cr_expect_eq(second_callers_loads(XFT_BLOCKING, "fs:off", 0, &events), 1);
  cr_expect_eq(__atomic_load_n(&events, __ATOMIC_ACQUIRE), 0);
}

/* The batch (xf_get_or_compute_many) serves the last good value too. */
Test(failsafe, the_batch_serves_the_last_good_value) {
  const char *key = "fs:batch";
  xf_policy p = failsafe_policy(THROTTLE_MS);
  a_stale_good_value(key, &p);
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
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
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
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
