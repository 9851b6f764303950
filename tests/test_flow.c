/* The flow machine without Redis: scripted replies in, steps out. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flow.h"
#include "flow_env.h"
#include "flow_replies.h"
#include "script.h"

/* No client: the flow runs on a configuration (the defaults xf_options
 * gives) and a runtime of its own, its draws seeded with 1. No transport
 * here keeps a clock estimate (and swaps a plain read for the read script
 * where it is not fresh: xf__entry_read_as), so plain_hits is 0: every read
 * is the script, as for the sans-I/O call. */
static xf__config cfg;
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

TestSuite(flow, .init = setup, .fini = teardown);

static void expect_script(const xf__flow *f, int script) {
  expect_arg(f, 1, xf__scripts[script].sha);
}

static int load_value(xf__flow *f, const char *value) {
  return xf_sink_set(&f->sink, value, strlen(value));
}

#define HIT "*8\r\n$3\r\nold\r\n:1000\r\n:50000\r\n:0\r\n:0\r\n:1060000\r\n:0\r\n$0\r\n\r\n"
#define MISS "*8\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:1010000\r\n:0\r\n$0\r\n\r\n"
#define MISS_LEASED "*8\r\n$-1\r\n:0\r\n:0\r\n:1\r\n:0\r\n:1010000\r\n:0\r\n$0\r\n\r\n"

Test(flow, hit_is_one_read) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  cr_assert_eq(xf__flow_begin(bound(&f), "k", 1, &p, &v, 0), XF_STEP_SEND);
  expect_arg(&f, 0, "EVALSHA_RO");
  expect_script(&f, XF_SCRIPT_READ);
  expect_arg(&f, 3, "k");
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(HIT), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
}

Test(flow, miss_leases_loads_and_writes_dated_by_the_lease) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(MISS), 0), XF_STEP_SEND);
  expect_arg(&f, 0, "EVALSHA");
  expect_script(&f, XF_SCRIPT_LEASE);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1234567\r\n"), 0),
               XF_STEP_LOAD);
  cr_expect_eq(f.load, XF_LOAD_LEASED);
  load_value(&f, "new");
  cr_assert_eq(xf__flow_loaded(&f, 0, 42, 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_WRITE);
  expect_arg(&f, 4, f.token);
  expect_arg(&f, 5, "new");
  expect_arg(&f, 6, "42");
  expect_arg(&f, 9, "1234567"); /* start_ms: the lease's server time */
  expect_arg(&f, 10, "0");
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "new");
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
}

/* The lease covers the entry's last loader: twice its delta when that is
 * longer than policy.lease_ms (here 3 s and 1 s). */
Test(flow, lease_is_twice_the_learned_delta_when_longer) {
  xf_policy p = XF_POLICY_INIT;
  p.lease_ms = 1000;
  struct {
    const char *read;
    const char *lease_ms;
  } cases[] = {
      {MISS, "1000"}, /* no delta learned yet */
      {"*8\r\n$3\r\nold\r\n:3000000\r\n:-10\r\n:0\r\n:0\r\n:1000\r\n:0\r\n$0\r\n\r\n",
       "6000"},
      {"*8\r\n$3\r\nold\r\n:400000\r\n:-10\r\n:0\r\n:0\r\n:1000\r\n:0\r\n$0\r\n\r\n",
       "1000"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    xf_value v;
    xf__flow f;
    xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(cases[i].read), 0), XF_STEP_SEND);
    expect_script(&f, XF_SCRIPT_LEASE);
    expect_arg(&f, 5, cases[i].lease_ms);
    /* Won, the loader fails, the release is lost: the flow ends. */
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1\r\n"), 0), XF_STEP_LOAD);
    cr_assert_eq(xf__flow_loaded(&f, 5, 1, 0), XF_STEP_SEND);
    cr_assert_eq(xf__flow_reply(&f, XF_EIO, NULL, 0), XF_STEP_DONE);
    xf_value_free(&v);
  }
}

/* xf_sink_ttl: the loader's ttl is written instead of the policy's; 0 means
 * the value is returned uncached and the lease released. */
Test(flow, the_loader_s_ttl_replaces_the_policy_s) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  xf__flow_reply(&f, XF_OK, reply(MISS), 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1\r\n"), 0), XF_STEP_LOAD);
  load_value(&f, "new");
  cr_assert_eq(xf_sink_ttl(&f.sink, 1234), XF_OK);
  cr_assert_eq(xf__flow_loaded(&f, 0, 42, 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_WRITE);
  expect_arg(&f, 7, "1234");
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);

  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  xf__flow_reply(&f, XF_OK, reply(MISS), 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1\r\n"), 0), XF_STEP_LOAD);
  cr_assert_eq(xf_sink_ttl(&f.sink, 0), XF_OK); /* before the value: either order */
  load_value(&f, "mine");
  cr_assert_eq(xf__flow_loaded(&f, 0, 42, 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_RELEASE);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "mine");
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);

  cr_expect_eq(xf_sink_ttl(NULL, 1), XF_EINVAL);
  cr_expect_eq(xf_sink_ttl(&f.sink, -1), XF_EINVAL);
  cr_expect_eq(xf_sink_ttl(&f.sink, ((int64_t)1 << 40) + 1), XF_EINVAL);
}

Test(flow, refused_write_is_uncached) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  xf_stats before, after;
  before = rt.stats;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  xf__flow_reply(&f, XF_OK, reply(MISS), 0);
  xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1\r\n"), 0);
  load_value(&f, "mine");
  xf__flow_loaded(&f, 0, 1, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":0\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  after = rt.stats;
  cr_expect_eq(after.superseded, before.superseded + 1);
  xf_value_free(&v);
}

Test(flow, noscript_loads_the_script_and_resends_once) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-NOSCRIPT No matching script.\r\n"), 0),
               XF_STEP_SEND);
  expect_arg(&f, 0, "SCRIPT");
  expect_arg(&f, 1, "LOAD");
  char sha[64];
  snprintf(sha, sizeof sha, "$40\r\n%s\r\n", xf__scripts[XF_SCRIPT_READ].sha);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(sha), 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_READ);
  /* A second NOSCRIPT for the same command is an error, not a loop. */
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("-NOSCRIPT still\r\n"), 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_EREDIS);
}

Test(flow, live_lease_on_a_miss_waits_then_rereads) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 1000);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(MISS_LEASED), 1000), XF_STEP_WAIT);
  cr_expect_eq(f.wake_ms, 1000 + 2);
  cr_assert_eq(xf__flow_woke(&f, 1002), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_READ);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(MISS_LEASED), 1400), XF_STEP_WAIT);
  cr_expect_eq(f.wake_ms, 1400 + 50, "polls after a quarter of the wait, at most 50 ms");
  xf__flow_woke(&f, 1450);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(HIT), 1450), XF_STEP_DONE);
  cr_expect_str_eq(v.data, "old");
  xf_value_free(&v);
}

/* A waiter's re-read that finds the marker of a load that found nothing,
 * ended after its first read (1010000), has its answer, though the next
 * caller holds the lease by then; an older marker is no answer. */
Test(flow, a_waiter_shares_a_not_found_that_ended_after_its_first_read) {
  xf_policy p = XF_POLICY_INIT;
  static const struct {
    const char *reread;
    xf__step step;
  } cases[] = {
      {"*8\r\n$-1\r\n:0\r\n:0\r\n:1\r\n:0\r\n:1010030\r\n:1010020\r\n$0\r\n\r\n",
       XF_STEP_DONE},
      {"*8\r\n$-1\r\n:0\r\n:0\r\n:1\r\n:0\r\n:1010030\r\n:1010000\r\n$0\r\n\r\n",
       XF_STEP_WAIT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    xf_value v;
    xf__flow f;
    xf__flow_begin(bound(&f), "k", 1, &p, &v, 1000);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(MISS_LEASED), 1000), XF_STEP_WAIT);
    cr_assert_eq(xf__flow_woke(&f, 1030), XF_STEP_SEND);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(cases[i].reread), 1030), cases[i].step,
                 "case %zu", i);
    if (cases[i].step == XF_STEP_DONE) {
      cr_expect_eq(f.rc, XF_ENOTFOUND, "%s", rt.errstr);
      cr_expect_null(v.data);
    } else {
      xf__flow_abandon(&f);
    }
  }
}

Test(flow, waiter_that_gives_up_is_dated_by_its_last_read) {
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 0;
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(MISS_LEASED), 20), XF_STEP_LOAD);
  cr_expect_eq(f.load, XF_LOAD_GAVE_UP);
  load_value(&f, "mine");
  cr_assert_eq(xf__flow_loaded(&f, 0, 1, 0), XF_STEP_SEND);
  expect_arg(&f, 4, "");        /* no lease */
  expect_arg(&f, 9, "1010000"); /* the read's server time */
  xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0);
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
}

Test(flow, unreachable_redis_fails_open) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_EIO, NULL, 0), XF_STEP_LOAD);
  cr_expect_eq(f.load, XF_LOAD_UNCACHED);
  load_value(&f, "direct");
  cr_assert_eq(xf__flow_loaded(&f, 0, 1, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
}

Test(flow, failed_early_refresh_releases_and_serves_the_valid_value) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = INFINITY;
  p.refresh_ahead = -1; /* XFetch: beta decides */
  xf_value v;
  xf__flow f;
  xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(HIT), 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_LEASE);
  cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1\r\n"), 0), XF_STEP_LOAD);
  cr_assert_eq(xf__flow_loaded(&f, 5, 1, 0), XF_STEP_SEND);
  expect_script(&f, XF_SCRIPT_RELEASE);
  cr_assert_eq(xf__flow_reply(&f, XF_EIO, NULL, 0), XF_STEP_DONE);
  cr_expect_eq(f.rc, XF_OK);
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(rt.loader_rc, 5);
  cr_expect_str_eq(rt.errstr, "loader returned 5", "the release's failure is not the news");
  xf_value_free(&v);
}

Test(flow, every_read_reply_of_another_shape_is_eproto) {
  static const char *bad[] = {
      ":1\r\n",
      "$3\r\nabc\r\n",
      "*0\r\n",
      "*6\r\n$1\r\nv\r\n:1\r\n:1\r\n:0\r\n:0\r\n:1\r\n",
      "*8\r\n:1\r\n:1\r\n:1\r\n:0\r\n:0\r\n:1\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n$1\r\n1\r\n:1\r\n:0\r\n:0\r\n:1\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:1\r\n:0\r\n:0\r\n:1\r\n$1\r\n0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:1\r\n:0\r\n:0\r\n:1\r\n:0\r\n:1\r\n",
      "*8\r\n*0\r\n:1\r\n:1\r\n:0\r\n:0\r\n:1\r\n:0\r\n$0\r\n\r\n",
  };
  xf_policy p = XF_POLICY_INIT;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    xf_value v;
    xf__flow f;
    xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(bad[i]), 0), XF_STEP_DONE, "reply %zu", i);
    cr_expect_eq(f.rc, XF_EPROTO, "reply %zu", i);
    cr_expect_null(v.data);
  }
}

/* Right shape, values no entry has (or read.lua's malformed miss): a miss,
 * counted, whose lease is asked for; never an error that bricks the key. */
Test(flow, every_read_reply_of_bad_values_is_a_malformed_miss) {
  static const char *bad[] = {
      "*8\r\n$1\r\nv\r\n:-1\r\n:1\r\n:0\r\n:0\r\n:1\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:-9223372036854775808\r\n:0\r\n:0\r\n:1\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:1\r\n:0\r\n:0\r\n:-5\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:100\r\n:0\r\n:0\r\n:50\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:100\r\n:0\r\n:2\r\n:500\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1\r\n:100\r\n:-1\r\n:0\r\n:500\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$1\r\nv\r\n:1099511627777\r\n:100\r\n:0\r\n:0\r\n:500\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$-1\r\n:1\r\n:0\r\n:0\r\n:0\r\n:500\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:1\r\n:500\r\n:0\r\n$0\r\n\r\n",
      "*8\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:500\r\n:-1\r\n$0\r\n\r\n",
  };
  xf_policy p = XF_POLICY_INIT;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    xf_value v;
    xf__flow f;
    xf_stats before, after;
    before = rt.stats;
    xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(bad[i]), 0), XF_STEP_SEND, "reply %zu", i);
    expect_script(&f, XF_SCRIPT_LEASE);
    after = rt.stats;
    cr_expect_eq(after.malformed, before.malformed + 1, "reply %zu", i);
    cr_expect_eq(after.misses, before.misses + 1, "reply %zu", i);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1\r\n"), 0), XF_STEP_LOAD);
    xf_sink_set(&f.sink, "new", 3);
    cr_assert_eq(xf__flow_loaded(&f, 0, 1, 0), XF_STEP_SEND);
    expect_script(&f, XF_SCRIPT_WRITE);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0), XF_STEP_DONE);
    cr_expect_eq(f.rc, XF_OK);
    cr_expect_str_eq(v.data, "new");
    xf_value_free(&v);
  }
}

Test(flow, every_malformed_lease_reply_degrades) {
  static const char *bad[] = {":1\r\n", "*1\r\n:1\r\n", "*2\r\n:7\r\n:1\r\n",
                              "*2\r\n$1\r\n1\r\n:1\r\n", "*3\r\n:2\r\n:1\r\n:1\r\n"};
  xf_policy p = XF_POLICY_INIT;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    xf_value v;
    xf__flow f;
    xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
    xf__flow_reply(&f, XF_OK, reply(MISS), 0);
    cr_assert_eq(xf__flow_reply(&f, XF_OK, reply(bad[i]), 0), XF_STEP_DONE, "reply %zu", i);
    cr_expect_eq(f.rc, XF_EPROTO, "reply %zu", i);
  }
}

/* ---- the batch driver's first round: read_many's reply, split per key ---- */

#include "entry.h"

static xf__step start(xf__flow *f, const char *key, const xf_policy *p, xf_value *v) {
  return xf__flow_begin(bound(f), key, strlen(key), p, v, 0);
}

Test(flow, read_many_parts_are_each_flows_own_read) {
  const char *keys[] = {"a", "bb", "c"};
  size_t lens[] = {1, 2, 1};
  xf__cmd cmd;
  xf__entry_read_many_cmd(&cmd, 3, keys, lens);
  cr_expect_eq(cmd.argc, 3);
  cr_expect_eq(memcmp(cmd.argv[0], "EVALSHA_RO", 10), 0);
  cr_expect_eq(memcmp(cmd.argv[1], xf__scripts[XF_SCRIPT_READ_MANY].sha, 40), 0);
  cr_expect_eq(memcmp(cmd.argv[2], "3", cmd.lens[2]), 0);
  cr_expect_eq(cmd.more_argc, 3);
  cr_expect_eq(cmd.more_argv, keys);
  cr_expect_eq(cmd.key, keys[0]);

  xf__reply *parts[3];
  cr_assert_eq(
      xf__entry_split_read_many(
          &rt, reply("*3\r\n" HIT MISS "-WRONGTYPE Operation against a key\r\n"), 3, parts),
      XF_OK);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  xf_value v[3];
  xf__flow f[3];
  for (int i = 0; i < 3; i++)
    cr_assert_eq(start(&f[i], keys[i], &p, &v[i]), XF_STEP_SEND);
  cr_expect_eq(xf__flow_reply(&f[0], XF_OK, parts[0], 0), XF_STEP_DONE);
  cr_expect_eq(f[0].rc, XF_OK);
  cr_expect_str_eq(v[0].data, "old");
  cr_expect_eq(v[0].source, XF_SOURCE_CACHE);
  cr_expect_eq(xf__flow_reply(&f[1], XF_OK, parts[1], 0), XF_STEP_SEND);
  expect_script(&f[1], XF_SCRIPT_LEASE);
  cr_expect_eq(xf__flow_reply(&f[2], XF_OK, parts[2], 0), XF_STEP_DONE);
  cr_expect_eq(f[2].rc, XF_EWRONGTYPE);
  xf_value_free(&v[0]);
  /* f[1] holds no lease yet: a failed lease ends it. */
  cr_expect_eq(xf__flow_reply(&f[1], XF_EIO, NULL, 0), XF_STEP_LOAD);
  cr_expect_eq(f[1].load, XF_LOAD_UNCACHED);
  xf__flow_loaded(&f[1], 1, 0, 0);
}

static void expect_split_fails(const char *resp, size_t nkeys, const char *msg) {
  xf__reply *parts[4] = {(xf__reply *)1, (xf__reply *)1, (xf__reply *)1, (xf__reply *)1};
  cr_expect_eq(xf__entry_split_read_many(&rt, reply(resp), nkeys, parts), XF_EPROTO, "%s",
               resp);
  for (size_t i = 0; i < nkeys; i++)
    cr_expect_null(parts[i]);
  cr_expect(strstr(rt.errstr, msg) != NULL, "%s", rt.errstr);
}

Test(flow, read_many_of_the_wrong_shape_is_a_protocol_error) {
  expect_split_fails("*2\r\n" HIT MISS, 3, "2 replies for 3 keys");
  expect_split_fails("*4\r\n" HIT MISS HIT MISS, 3, "4 replies for 3 keys");
  expect_split_fails("*0\r\n", 1, "0 replies for 1 keys");
  expect_split_fails("*-1\r\n", 2, "not an array");
  expect_split_fails(":3\r\n", 3, "not an array");
  expect_split_fails("$3\r\nabc\r\n", 3, "not an array");
}

Test(flow, a_read_many_error_reaches_every_flow) {
  /* What batch_read.c feeds each flow when the whole call failed. */
  xf_policy p = XF_POLICY_INIT;
  xf_value v[2];
  xf__flow f[2];
  for (int i = 0; i < 2; i++)
    start(&f[i], i ? "y" : "x", &p, &v[i]);
  cr_expect_eq(xf__flow_reply(&f[0], XF_EPROTO, NULL, 0), XF_STEP_DONE);
  cr_expect_eq(f[0].rc, XF_EPROTO);
  cr_expect_null(v[0].data);
  cr_expect_eq(xf__flow_reply(&f[1], XF_EREDIS, NULL, 0), XF_STEP_DONE);
  cr_expect_eq(f[1].rc, XF_EREDIS);
}

/* A stale window of W ms serves a value at most W ms past its ttl, the
 * entry's remaining time in (-W, 0], as Redis keeps it (its PEXPIRE is the
 * ttl plus the window): a window of 0 serves nothing past the ttl, not even
 * in the ms it ends. Here another caller holds the lease, with wait_ms 0. */
Test(flow, a_stale_window_of_w_ms_serves_w_ms_past_the_ttl_and_no_more) {
  static const struct {
    int64_t stale_ms, remaining_ms;
    int served;
  } cases[] = {{0, 0, 0}, {1, 0, 1}, {1, -1, 0}, {5, -4, 1}, {5, -5, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    for (int if_error = 0; if_error <= 1; if_error++) {
      xf_policy p = XF_POLICY_INIT;
      p.wait_ms = 0;
      p.on_wait_timeout = XF_WAIT_FAIL;
      if (if_error)
        p.stale_if_error_ms = cases[i].stale_ms;
      else
        p.stale_ms = cases[i].stale_ms;
      char read[160];
      snprintf(
          read, sizeof read,
          "*8\r\n$3\r\nold\r\n:1000\r\n:%lld\r\n:%d\r\n:0\r\n:1060000\r\n:0\r\n$0\r\n\r\n",
          (long long)cases[i].remaining_ms, if_error ? 0 : 1);
      xf_value v = {0};
      xf__flow f;
      xf__flow_begin(bound(&f), "k", 1, &p, &v, 0);
      xf__step step = xf__flow_reply(&f, XF_OK, reply(read), 0);
      if (if_error) { /* no lease held: this call loads, and its loader fails */
        cr_assert_eq(step, XF_STEP_SEND, "case %zu", i);
        cr_assert_eq(xf__flow_reply(&f, XF_OK, reply("*2\r\n:1\r\n:1060000\r\n"), 0),
                     XF_STEP_LOAD);
        step = xf__flow_loaded(&f, 5, 1, 0);
        if (step == XF_STEP_SEND) /* the release of its lease */
          step = xf__flow_reply(&f, XF_OK, reply(":1\r\n"), 0);
      }
      cr_assert_eq(step, XF_STEP_DONE, "case %zu, %s", i, if_error ? "if_error" : "stale");
      cr_expect_eq(f.rc == XF_OK, cases[i].served,
                   "case %zu (%s): window %lld, remaining %lld", i,
                   if_error ? "stale_if_error_ms" : "stale_ms",
                   (long long)cases[i].stale_ms, (long long)cases[i].remaining_ms);
      if (cases[i].served)
        cr_expect_eq(v.source, XF_SOURCE_STALE);
      xf_value_free(&v);
    }
  }
}
