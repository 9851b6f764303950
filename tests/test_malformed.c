/* Entries written by someone else (an old writer, a manual fix, another tool)
 * with a field xfetch never writes: each is a miss, counted in
 * stats.malformed, recomputed and overwritten; never an error that bricks the
 * key. One test per field, each bad value through get_or_compute, the batch
 * and xf_get. These are format-1 entries (hashes), read and rewritten by
 * clients that write format 1 (XF_ENTRY_HASH), as a fleet that keeps it does;
 * format 2's malformed strings: test_malformed2.c. Real redis-server. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define MAX_BAD 12

typedef struct field_case {
  const char *field;
  const char *bad[MAX_BAD]; /* NULL-terminated; "%F" = a time far in the future */
} field_case;

/* A well-formed entry (a valid value, 60 s left, no lease), then field set to
 * bad: the value "cached" must never be served. */
static void put(redisContext *r, const char *key, const char *field, const char *bad) {
  long long now = xft_server_ms(r);
  char far[32];
  snprintf(far, sizeof far, "%lld", now + 100LL * 365 * 24 * 3600 * 1000);
  if (strcmp(bad, "%F") == 0)
    bad = far;
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  freeReplyObject(
      xft_cmd(r, "HSET %s v cached d 1000 e %lld s %lld", key, now + 60000, now - 1000));
  freeReplyObject(xft_cmd(r, "HSET %s %s %s", key, field, bad));
  freeReplyObject(xft_cmd(r, "PEXPIRE %s 60000", key));
}

/* A client writing format 1, so the rewrite is a hash again. */
static xf_client *hash_client(void) {
  return xft_client_format(xft_port(), 1, XF_ENTRY_HASH);
}

static uint64_t malformed(xf_client *c) {
  xf_stats s;
  xf_client_stats(c, &s);
  return s.malformed;
}

/* After the recompute the entry is xfetch's own again. */
static void expect_rewritten(redisContext *r, const char *key, const char *what) {
  redisReply *rep = xft_cmd(r, "HMGET %s v d e s l n", key);
  cr_assert_eq(rep->type, REDIS_REPLY_ARRAY);
  cr_expect(rep->element[0]->type == REDIS_REPLY_STRING &&
                strcmp(rep->element[0]->str, "fresh") == 0,
            "%s: v not rewritten", what);
  for (int i = 1; i < 4; i++)
    cr_expect(rep->element[i]->type == REDIS_REPLY_STRING &&
                  strspn(rep->element[i]->str, "0123456789") == rep->element[i]->len,
              "%s: field %d is %s", what, i, rep->element[i]->str);
  cr_expect_eq(rep->element[4]->type, REDIS_REPLY_NIL, "%s: the lease stays", what);
  cr_expect_eq(rep->element[5]->type, REDIS_REPLY_NIL, "%s: n stays", what);
  freeReplyObject(rep);
}

static void check_get_or_compute(const field_case *fc) {
  redisContext *r = xft_redis();
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0; /* a well-formed entry would be a plain hit */
  char key[64];
  snprintf(key, sizeof key, "malformed:goc:%s", fc->field);
  for (int i = 0; fc->bad[i]; i++) {
    put(r, key, fc->field, fc->bad[i]);
    uint64_t before = malformed(c);
    xft_loader l = {.value = "fresh", .len = 5};
    xf_value v;
    int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v);
    cr_assert_eq(rc, XF_OK, "%s=%s: %s (%s)", fc->field, fc->bad[i], xf_errname(rc),
                 xf_errmsg(c));
    cr_expect_str_eq(v.data, "fresh", "%s=%s", fc->field, fc->bad[i]);
    cr_expect_eq(v.source, XF_SOURCE_LOADER, "%s=%s", fc->field, fc->bad[i]);
    cr_expect_eq(xft_loader_calls(&l), 1, "%s=%s", fc->field, fc->bad[i]);
    cr_expect_eq(malformed(c), before + 1, "%s=%s counted", fc->field, fc->bad[i]);
    xf_value_free(&v);
    expect_rewritten(r, key, fc->bad[i]);
    /* Overwritten for good: the next call is a hit. */
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v), XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_CACHE, "%s=%s", fc->field, fc->bad[i]);
    cr_expect_eq(xft_loader_calls(&l), 1);
    xf_value_free(&v);
  }
  redisFree(r);
  xf_client_close(c);
}

/* Every bad value of the field in one batch (one read_many), beside a good key. */
static void check_batch(const field_case *fc) {
  redisContext *r = xft_redis();
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  char names[MAX_BAD + 1][64];
  const char *keys[MAX_BAD + 1];
  size_t lens[MAX_BAD + 1], n = 0;
  for (; fc->bad[n]; n++) {
    snprintf(names[n], sizeof names[n], "malformed:batch:%s:%zu", fc->field, n);
    put(r, names[n], fc->field, fc->bad[n]);
  }
  snprintf(names[n], sizeof names[n], "malformed:batch:%s:good", fc->field);
  put(r, names[n], "d", "1000");
  n++;
  for (size_t i = 0; i < n; i++)
    keys[i] = names[i], lens[i] = strlen(names[i]);
  xft_loader l = {.value = "fresh", .len = 5};
  xf_value values[MAX_BAD + 1];
  int rcs[MAX_BAD + 1];
  uint64_t before = malformed(c);
  cr_assert_eq(xf_get_or_compute_many(c, n, keys, lens, &p, xft_load, &l, values, rcs),
               XF_OK);
  for (size_t i = 0; i < n; i++) {
    int good = i == n - 1;
    cr_expect_eq(rcs[i], XF_OK, "%s: %s", keys[i], xf_errname(rcs[i]));
    cr_expect(values[i].data && strcmp(values[i].data, good ? "cached" : "fresh") == 0,
              "%s: %s", keys[i], values[i].data);
    if (!good)
      expect_rewritten(r, keys[i], keys[i]);
    xf_value_free(&values[i]);
  }
  cr_expect_eq(xft_loader_calls(&l), (int)n - 1);
  cr_expect_eq(malformed(c), before + n - 1);
  redisFree(r);
  xf_client_close(c);
}

/* xf_get has no loader: a malformed entry is not found, and stays as it is. */
static void check_get(const field_case *fc) {
  redisContext *r = xft_redis();
  xf_client *c = hash_client();
  char key[64];
  snprintf(key, sizeof key, "malformed:get:%s", fc->field);
  for (int i = 0; fc->bad[i]; i++) {
    put(r, key, fc->field, fc->bad[i]);
    uint64_t before = malformed(c);
    xf_value v;
    int rc = xf_get(c, key, strlen(key), &v);
    cr_expect_eq(rc, XF_ENOTFOUND, "%s=%s: %s (%s)", fc->field, fc->bad[i], xf_errname(rc),
                 xf_errmsg(c));
    cr_expect_null(v.data);
    cr_expect_eq(malformed(c), before + 1, "%s=%s counted", fc->field, fc->bad[i]);
  }
  redisFree(r);
  xf_client_close(c);
}

static void check(const field_case *fc) {
  check_get_or_compute(fc);
  check_batch(fc);
  check_get(fc);
}

/* Delta: microseconds, an integer in [0, 2^40]. */
Test(malformed, delta) {
  check(&(field_case){"d",
                      {"-5", "abc", "nan", "inf", "1e3", "1.5", "", "99999999999999999999",
                       "1099511627777", NULL}});
}

/* Expiry: server ms, an integer within 2^41 ms of now. */
Test(malformed, expiry) {
  check(&(field_case){"e",
                      {"-1", "-1e300", "abc", "nan", "inf", "1e300", "", "%F",
                       "99999999999999999999", NULL}});
}

/* Start: server ms, an integer never later than now (beyond clock skew). */
Test(malformed, start) {
  check(&(field_case){
      "s", {"-1", "abc", "nan", "inf", "1e300", "", "%F", "99999999999999999999", NULL}});
}

/* Lease: "<token>:<deadline ms>", the deadline at most 2^40 ms away. */
Test(malformed, lease) {
  check(&(field_case){"l",
                      {"garbage", "tok:-5", "tok:abc", "tok:", "tok:1e300", "tok:%F",
                       "tok:99999999999999999999", NULL}});
}

/* Negative flag: "1" when present. */
Test(malformed, negative) {
  check(&(field_case){"n", {"0", "-1", "2", "abc", "", "1e300", NULL}});
}

/* The issue's own example: an entry without s whose e is negative. */
Test(malformed, negative_expiry_without_start) {
  redisContext *r = xft_redis();
  xf_client *c = hash_client();
  freeReplyObject(xft_cmd(r, "DEL malformed:issue"));
  freeReplyObject(xft_cmd(r, "HSET malformed:issue v x d 1 e -1"));
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "fresh", .len = 5};
  xf_value v;
  cr_assert_eq(xf_get(c, "malformed:issue", 15, &v), XF_ENOTFOUND, "%s", xf_errmsg(c));
  cr_assert_eq(xf_get_or_compute(c, "malformed:issue", 15, &p, xft_load, &l, &v), XF_OK,
               "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "fresh");
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
  cr_assert_eq(xf_get(c, "malformed:issue", 15, &v), XF_OK);
  cr_expect_str_eq(v.data, "fresh");
  xf_value_free(&v);
  redisFree(r);
  xf_client_close(c);
}
