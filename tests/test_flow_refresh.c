/* Background refresh in the flow machine, without Redis: an early refresh
 * whose lease the call won is detachable; detached, the call ends at once
 * with the current value and the refresh carries the lease to its write (or
 * its release). And the rate-aware rule picks who refreshes. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "flow.h"
#include "flow_env.h"
#include "flow_replies.h"
#include "script.h"

static xf__config cfg; /* no client: see test_flow.c */
static xf__runtime rt;

static void setup(void) {
  xf__config_init(&cfg);
  xf__runtime_init(&rt, 1);
}

static void teardown(void) {}

/* A flow bound to the test's configuration and runtime. */
static xf__flow *bound(xf__flow *f) {
  xf__flow_bind(f, &cfg, &rt);
  return f;
}

TestSuite(flow_refresh, .init = setup, .fini = teardown);

static void expect_script(const xf__flow *f, int script) {
  expect_arg(f, 1, xf__scripts[script].sha);
}

/* value "old", 1000 ms left, delta 50 ms, no lease */
#define HIT "*8\r\n$3\r\nold\r\n:50000\r\n:1000\r\n:0\r\n:0\r\n:1060000\r\n:0\r\n$0\r\n\r\n"
#define WON "*2\r\n:1\r\n:1\r\n"

static xf_policy background(void) {
  xf_policy p = XF_POLICY_INIT;
  p.background_refresh = XF_BACKGROUND_ON;
  p.refresh_ahead = 100; /* 100 x 50 ms > 1000 ms left: due */
  return p;
}

/* Reads HIT and wins the early refresh's lease: the LOAD step. */
static void to_refresh_load(xf__flow *f, const xf_policy *p, xf_value *v) {
  cr_assert_eq(xf__flow_begin(bound(f), "k", 1, p, v, 0), XF_STEP_SEND);
  cr_assert_eq(xf__flow_reply(f, XF_OK, reply(HIT), 0), XF_STEP_SEND);
  expect_script(f, XF_SCRIPT_LEASE);
  cr_assert_eq(xf__flow_reply(f, XF_OK, reply(WON), 0), XF_STEP_LOAD);
}

Test(flow_refresh, detached_call_returns_the_current_value_and_the_refresh_writes) {
  xf_policy p = background(), bgp = p;
  xf_value v, bgv;
  xf__flow f, bg;
  to_refresh_load(&f, &p, &v);
  cr_assert(xf__flow_detachable(&f, XF__OFF_PATH_READY));
  char token[40];
  memcpy(token, f.token, sizeof token);
  cr_assert_eq(xf__flow_detach(&f, &bg, &bgp, "k", &bgv), XF_STEP_LOAD);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  cr_expect(!xf__flow_detachable(&bg, XF__OFF_PATH_READY),
            "a detached refresh is not detached again");
  cr_assert_eq(xf_sink_set(&bg.sink, "new", 3), XF_OK);
  cr_assert_eq(xf__flow_loaded(&bg, 0, 40000, 0), XF_STEP_SEND);
  expect_script(&bg, XF_SCRIPT_WRITE);
  expect_arg(&bg, 3, "k");
  expect_arg(&bg, 4, token); /* the lease the call won */
  cr_assert_eq(xf__flow_reply(&bg, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(bg.rc, XF_OK);
  cr_expect_str_eq(bgv.data, "new");
  xf_value_free(&bgv);
}

Test(flow_refresh, failed_background_refresh_releases_and_counts) {
  xf_policy p = background(), bgp = p;
  xf_value v, bgv;
  xf__flow f, bg;
  to_refresh_load(&f, &p, &v);
  xf__flow_detach(&f, &bg, &bgp, "k", &bgv);
  xf_value_free(&v);
  uint64_t errors = rt.stats.load_errors;
  cr_assert_eq(xf__flow_loaded(&bg, 7, 1000, 0), XF_STEP_SEND);
  expect_script(&bg, XF_SCRIPT_RELEASE);
  cr_assert_eq(xf__flow_reply(&bg, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(bg.rc, XF_ELOADER);
  cr_expect_null(bgv.data, "nothing served from a failed refresh");
  cr_expect_eq(rt.stats.load_errors, errors + 1);
}

Test(flow_refresh, skipped_refresh_releases_and_serves_the_current_value) {
  xf_policy p = background();
  xf_value v;
  xf__flow f;
  to_refresh_load(&f, &p, &v);
  uint64_t loads = rt.stats.loads;
  cr_assert_eq(xf__flow_skip(&f), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_RELEASE);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(rt.stats.loads, loads - 1, "no loader ran");
  xf_value_free(&v);
}

Test(flow_refresh, without_background_refresh_nothing_is_detachable) {
  xf_policy p = background();
  p.background_refresh = XF_BACKGROUND_OFF;
  xf_value v;
  xf__flow f;
  to_refresh_load(&f, &p, &v);
  cr_expect(!xf__flow_detachable(&f, XF__OFF_PATH_READY));
  xf__flow_abandon(&f);
}

/* The default (AUTO) keeps an early refresh in the call on every driver (the
 * core cannot know that loader_ud outlives the call); ON sends it off the
 * request path where the driver has somewhere to run it; OFF nowhere. */
Test(flow_refresh, the_policy_and_the_driver_decide_where_a_refresh_runs) {
  static const struct {
    int background;
    xf__off_path driver;
    int detachable;
  } rows[] = {
      {XF_BACKGROUND_AUTO, XF__OFF_PATH_READY, 0},
      {XF_BACKGROUND_AUTO, XF__OFF_PATH_NONE, 0},
      {XF_BACKGROUND_ON, XF__OFF_PATH_READY, 1},
      {XF_BACKGROUND_ON, XF__OFF_PATH_NONE, 0},
      {XF_BACKGROUND_OFF, XF__OFF_PATH_READY, 0},
      {XF_BACKGROUND_OFF, XF__OFF_PATH_NONE, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    xf_policy p = background();
    p.background_refresh = rows[i].background;
    xf_value v;
    xf__flow f;
    to_refresh_load(&f, &p, &v);
    cr_expect_eq(xf__flow_detachable(&f, rows[i].driver), rows[i].detachable,
                 "background_refresh %d on a driver %d", rows[i].background,
                 rows[i].driver);
    xf__flow_abandon(&f);
  }
}

Test(flow_refresh, a_background_refresh_outside_xf_background_is_einval) {
  xf_policy p = background();
  p.background_refresh = 3;
  xf_value v;
  xf__flow f;
  cr_assert_eq(xf__flow_begin(bound(&f), "k", 1, &p, &v, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
  cr_expect(strstr(rt.errstr, "background_refresh") != NULL, "%s", rt.errstr);
}

Test(flow_refresh, a_miss_is_never_detachable) {
  xf_policy p = background();
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(
      xf__flow_reply(
          &f, XF_OK,
          reply("*8\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:1010000\r\n:0\r\n$0\r\n\r\n"), 0),
      XF_STEP_SEND);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(WON), 0), XF_STEP_LOAD);
  cr_expect(!xf__flow_detachable(&f, XF__OFF_PATH_READY), "someone has to wait for a miss");
  xf__flow_abandon(&f);
}

Test(flow_refresh, rate_aware_rule_serves_outside_its_margin) {
  xf_policy p = background();
  p.refresh_ahead = 19; /* 19 x 50 ms = 950 ms < 1000 ms left: a hit */
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(HIT), 0), XF_STEP_DONE);
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  p.refresh_ahead = 20; /* 1000 ms: due */
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(HIT), 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_LEASE);
  xf__flow_abandon(&f);
}

Test(flow_refresh, non_finite_refresh_ahead_is_einval) {
  xf_policy p = background();
  p.refresh_ahead = NAN;
  xf_value v;
  xf__flow f;
  cr_assert_eq(xf__flow_begin(bound(&f), "k", 1, &p, &v, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EINVAL);
  cr_expect(strstr(rt.errstr, "refresh_ahead") != NULL, "%s", rt.errstr);
}
