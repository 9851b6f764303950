/* Bad input: XF_EINVAL with a message naming the argument, and the loader is
 * never called; nothing cached is touched. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "entry_peek.h"
#include "fixture.h"

static xf_client *c;
static xft_loader loader = {.value = "v"};

static void setup(void) {
  c = xft_client(1);
  __atomic_store_n(&loader.calls, 0, __ATOMIC_SEQ_CST);
}
static void teardown(void) { xf_client_close(c); }

TestSuite(bad_input, .init = setup, .fini = teardown);

/* Calls get_or_compute and expects XF_EINVAL naming `word`. */
static void expect_einval(const char *key, size_t keylen, const xf_policy *p,
                          const char *word) {
  xf_value v = {(char *)"garbage", 7, XF_SOURCE_CACHE};
  cr_expect_eq(xf_get_or_compute(c, key, keylen, p, xft_load, &loader, &v), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), word) != NULL, "message '%s' should name %s", xf_errmsg(c),
            word);
  cr_expect_null(v.data, "out is zeroed on error");
  cr_expect_eq(xft_loader_calls(&loader), 0, "the loader is never called");
}

static void expect_policy_einval(xf_policy p, const char *word) {
  expect_einval("bad:policy", 10, &p, word);
}

Test(bad_input, null_client) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_expect_eq(xf_get_or_compute(NULL, "k", 1, &p, xft_load, &loader, &v), XF_EINVAL);
  cr_expect_eq(xf_set(NULL, "k", 1, "v", 1, &p), XF_EINVAL);
  cr_expect_eq(xf_delete(NULL, "k", 1), XF_EINVAL);
  cr_expect_eq(xft_loader_calls(&loader), 0);
}

Test(bad_input, null_key) {
  xf_policy p = XF_POLICY_INIT;
  expect_einval(NULL, 3, &p, "key");
}

Test(bad_input, empty_key) {
  xf_policy p = XF_POLICY_INIT;
  expect_einval("", 0, &p, "key is empty");
}

Test(bad_input, key_above_the_cap) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.max_key_len = 8;
  xf_client_close(c);
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  expect_einval("123456789", 9, &p, "max_key_len");
  cr_expect_eq(xf_delete(c, "123456789", 9), XF_EINVAL);
}

/* A set whose value is refused reads nothing of its key, and a key whose
 * length would overflow with the prefix is refused: with max_key_len at its
 * widest, a claimed SIZE_MAX-byte key made the key's copy read past memory
 * (found by fuzz_options: memcpy of -1 bytes). */
Test(bad_input, a_set_with_a_bad_value_reads_no_key) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.key_prefix = "p:";
  o.max_key_len = SIZE_MAX;
  xf_client_close(c);
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_expect_eq(xf_set(c, "k", SIZE_MAX, NULL, 5, &p), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), "data is NULL") != NULL, "%s", xf_errmsg(c));
  cr_expect_eq(xf_set(c, "k", SIZE_MAX, "v", 1, &p), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), "max_key_len") != NULL, "%s", xf_errmsg(c));
  cr_expect_eq(xf_delete(c, "k", SIZE_MAX - 1), XF_EINVAL);
}

Test(bad_input, null_loader) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "k", 1, &p, NULL, NULL, &v), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), "loader") != NULL);
}

Test(bad_input, null_out) {
  xf_policy p = XF_POLICY_INIT;
  cr_expect_eq(xf_get_or_compute(c, "k", 1, &p, xft_load, &loader, NULL), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), "out") != NULL);
  cr_expect_eq(xft_loader_calls(&loader), 0);
}

Test(bad_input, null_policy) { expect_einval("bad:policy", 10, NULL, "policy"); }

Test(bad_input, negative_beta) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = -1;
  expect_policy_einval(p, "beta");
}

Test(bad_input, nan_beta) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = NAN;
  expect_policy_einval(p, "beta");
}

Test(bad_input, zero_ttl) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 0;
  expect_policy_einval(p, "ttl_ms");
}

Test(bad_input, negative_ttl) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = -5;
  expect_policy_einval(p, "ttl_ms");
}

Test(bad_input, zero_lease) {
  xf_policy p = XF_POLICY_INIT;
  p.lease_ms = 0;
  expect_policy_einval(p, "lease_ms");
}

Test(bad_input, negative_wait_and_windows) {
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = -1;
  expect_policy_einval(p, "wait_ms");
  p = (xf_policy)XF_POLICY_INIT;
  p.stale_ms = -1;
  expect_policy_einval(p, "stale_ms");
  p = (xf_policy)XF_POLICY_INIT;
  p.negative_ttl_ms = -1;
  expect_policy_einval(p, "negative_ttl_ms");
}

Test(bad_input, absurd_ttl) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = INT64_MAX;
  expect_policy_einval(p, "ttl_ms");
}

Test(bad_input, jitter_out_of_range) {
  xf_policy p = XF_POLICY_INIT;
  p.jitter = 1.0;
  expect_policy_einval(p, "jitter");
  p.jitter = NAN;
  expect_policy_einval(p, "jitter");
}

Test(bad_input, set_rejects_null_data_and_oversize_values) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.max_value_len = 4;
  xf_client_close(c);
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_expect_eq(xf_set(c, "bad:set", 7, NULL, 3, &p), XF_EINVAL);
  cr_expect_eq(xf_set(c, "bad:set", 7, "12345", 5, &p), XF_EINVAL);
  cr_expect(strstr(xf_errmsg(c), "max_value_len") != NULL);
  p.ttl_ms = 0;
  cr_expect_eq(xf_set(c, "bad:set", 7, "1", 1, &p), XF_EINVAL);
  redisContext *r = xft_redis();
  cr_expect_eq(xft_int(r, "EXISTS bad:set"), 0);
  redisFree(r);
}

static int oversize_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  return xf_sink_set(sink, "too long for the cap", 20);
}

Test(bad_input, loader_value_above_the_cap_is_a_loader_error) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.max_value_len = 4;
  xf_client_close(c);
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "bad:big", 7, &p, oversize_loader, NULL, &v),
               XF_ELOADER);
  cr_expect_eq(xf_loader_error(c), XF_EINVAL);
  redisContext *r = xft_redis();
  cr_expect_eq(xft_int(r, "EXISTS bad:big"), 0, "nothing cached, lease released");
  redisFree(r);
}

static int silent_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen, (void)sink;
  return 0;
}

Test(bad_input, loader_that_sets_nothing_is_a_loader_error) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "bad:silent", 10, &p, silent_loader, NULL, &v),
               XF_ELOADER);
  cr_expect(strstr(xf_errmsg(c), "xf_sink_set") != NULL, "%s", xf_errmsg(c));
}

Test(bad_input, sink_rejects_null_data) {
  cr_expect_eq(xf_sink_set(NULL, "x", 1), XF_EINVAL);
}

Test(bad_input, bad_input_leaves_the_cached_value_alone) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "bad:keep", 8, "kept", 4, &p), XF_OK);
  p.beta = -3;
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "bad:keep", 8, &p, xft_load, &loader, &v), XF_EINVAL);
  redisContext *r = xft_redis();
  xft_peek e;
  xft_peek_read(r, "bad:keep", "", &e);
  cr_expect(e.v && strcmp(e.v, "kept") == 0, "v is %s (%s entry)", e.v ? e.v : "(nil)",
            e.kind);
  xft_peek_free(&e);
  redisFree(r);
}

/* Every field's check, each just past its bound and at the int64 extremes:
 * the valid-policy pass and the message's checks must agree on every one. */
Test(bad_input, each_policy_field_is_refused_past_its_bound) {
  static const struct {
    const char *name;
    size_t off;
    int64_t min;
  } times[] = {
      {"ttl_ms", offsetof(xf_policy, ttl_ms), 1},
      {"lease_ms", offsetof(xf_policy, lease_ms), 1},
      {"wait_ms", offsetof(xf_policy, wait_ms), 0},
      {"stale_ms", offsetof(xf_policy, stale_ms), 0},
      {"stale_if_error_ms", offsetof(xf_policy, stale_if_error_ms), 0},
      {"negative_ttl_ms", offsetof(xf_policy, negative_ttl_ms), 0},
      {"max_load_ms", offsetof(xf_policy, max_load_ms), 0},
      {"soft_timeout_ms", offsetof(xf_policy, soft_timeout_ms), 0},
      {"hard_timeout_ms", offsetof(xf_policy, hard_timeout_ms), 0},
      {"failsafe_throttle_ms", offsetof(xf_policy, failsafe_throttle_ms), 0},
  };
  for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
    const int64_t bad[] = {times[i].min - 1, ((int64_t)1 << 40) + 1, INT64_MIN, INT64_MAX};
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
      xf_policy p = XF_POLICY_INIT;
      memcpy((char *)&p + times[i].off, &bad[j], sizeof bad[j]);
      expect_policy_einval(p, times[i].name);
    }
  }
  xf_policy p = XF_POLICY_INIT;
  p.refresh_ahead = INFINITY;
  expect_policy_einval(p, "refresh_ahead");
  p = (xf_policy)XF_POLICY_INIT;
  p.jitter = -0.1;
  expect_policy_einval(p, "jitter");
  p = (xf_policy)XF_POLICY_INIT;
  p.on_wait_timeout = (xf_on_wait_timeout)7;
  expect_policy_einval(p, "on_wait_timeout");
  p = (xf_policy)XF_POLICY_INIT;
  p.background_refresh = (xf_background)-1;
  expect_policy_einval(p, "background_refresh");
  p = (xf_policy)XF_POLICY_INIT;
  p.background_refresh = (xf_background)3;
  expect_policy_einval(p, "background_refresh");
  p = (xf_policy)XF_POLICY_INIT;
  p.soft_timeout_ms = 200;
  p.hard_timeout_ms = 100;
  expect_policy_einval(p, "soft_timeout_ms");
}

/* The bounds themselves are valid. */
Test(bad_input, a_policy_at_its_bounds_is_accepted) {
  xf_policy p = XF_POLICY_INIT;
  p.beta = INFINITY;
  p.jitter = 0.999;
  p.ttl_ms = 1;
  p.wait_ms = p.stale_ms = p.negative_ttl_ms = p.max_load_ms = 0;
  p.soft_timeout_ms = p.hard_timeout_ms = 100;
  p.background_refresh = XF_BACKGROUND_OFF;
  xf_value v = {0};
  cr_assert_eq(xf_get_or_compute(c, "bounds", 6, &p, xft_load, &loader, &v), XF_OK, "%s",
               xf_errmsg(c));
  xf_value_free(&v);
}
