/* Format 1, the hash (docs/design.md, "The entry on Redis"), read back with plain
 * commands (HGET, HEXISTS, HLEN): every client here writes format 1
 * (XF_ENTRY_HASH), as a fleet that keeps it does. Format 2's layout:
 * test_entry2.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "entry_io.h"
#include "fixture.h"

/* A client writing format-1 entries (hashes), not the default. */
static xf_client *hash_client(void) {
  return xft_client_format(xft_port(), 1, XF_ENTRY_HASH);
}

static long long hget_ll(redisContext *r, const char *key, const char *field) {
  redisReply *rep = xft_cmd(r, "HGET %s %s", key, field);
  cr_assert_eq(rep->type, REDIS_REPLY_STRING, "%s.%s missing", key, field);
  long long v = atoll(rep->str);
  freeReplyObject(rep);
  return v;
}

Test(entry, fields_after_a_loader_write) {
  xf_client *c = hash_client();
  redisContext *r = xft_redis();
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 30000;
  p.stale_ms = 5000;
  xft_loader l = {.value = "payload", .sleep_ms = 50};
  xf_value v;
  long long before = xft_server_ms(r);
  cr_assert_eq(xf_get_or_compute(c, "entry:fields", 12, &p, xft_load, &l, &v), XF_OK);
  long long after = xft_server_ms(r);
  xf_value_free(&v);
  redisReply *rep = xft_cmd(r, "HGET entry:fields v");
  cr_expect_str_eq(rep->str, "payload");
  freeReplyObject(rep);
  long long d = hget_ll(r, "entry:fields", "d");
  /* In microseconds, the loader's own time: at least its 50 ms sleep, and
   * nowhere near a unit slip (50 s) however loaded the machine is. */
  cr_expect(d >= 50000 && d < 5000000, "delta %lld us for a 50 ms loader", d);
  long long e = hget_ll(r, "entry:fields", "e");
  cr_expect(e >= before + 30000 && e <= after + 30000, "e %lld not in [%lld, %lld]", e,
            before + 30000, after + 30000);
  long long s = hget_ll(r, "entry:fields", "s");
  cr_expect(s >= before && s <= after - 50, "s %lld: start of the computation", s);
  cr_expect_eq(xft_int(r, "HEXISTS entry:fields l"), 0, "lease cleared");
  cr_expect_eq(xft_int(r, "HEXISTS entry:fields n"), 0);
  long long pttl = xft_int(r, "PTTL entry:fields");
  cr_expect(pttl > 35000 - 1000 && pttl <= 35000, "PTTL %lld, want ttl + stale", pttl);
  redisFree(r);
  xf_client_close(c);
}

Test(entry, pttl_is_ttl_without_stale_window) {
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 8000;
  cr_assert_eq(xf_set(c, "entry:pttl", 10, "x", 1, &p), XF_OK);
  redisContext *r = xft_redis();
  long long pttl = xft_int(r, "PTTL entry:pttl");
  cr_expect(pttl > 7000 && pttl <= 8000, "PTTL %lld", pttl);
  cr_expect_eq(hget_ll(r, "entry:pttl", "d"), 0, "a new entry's delta is 0");
  redisFree(r);
  xf_client_close(c);
}

Test(entry, lease_only_hash_carries_the_lease_ttl) {
  xf_client *c = hash_client();
  char token[40];
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(xft_entry_lease(c, "entry:lease", 11, 3000, 0, token, &now, &won, &newer),
               XF_OK);
  cr_expect_eq(won, XF_LEASE_WON);
  redisContext *r = xft_redis();
  long long pttl = xft_int(r, "PTTL entry:lease");
  cr_expect(pttl > 2000 && pttl <= 3000, "PTTL %lld", pttl);
  redisReply *rep = xft_cmd(r, "HGET entry:lease l");
  char want[80];
  snprintf(want, sizeof want, "%s:%lld", token, (long long)now + 3000);
  cr_expect_str_eq(rep->str, want);
  freeReplyObject(rep);
  cr_expect_eq(xft_int(r, "HLEN entry:lease"), 1);
  cr_assert_eq(xft_entry_lease(c, "entry:lease", 11, 3000, 0, token, &now, &won, &newer),
               XF_OK);
  cr_expect_eq(won, XF_LEASE_LOST, "a live lease is exclusive");
  redisFree(r);
  xf_client_close(c);
}

Test(entry, lease_extends_a_short_physical_ttl) {
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 500;
  cr_assert_eq(xf_set(c, "entry:extend", 12, "x", 1, &p), XF_OK);
  char token[40];
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(xft_entry_lease(c, "entry:extend", 12, 4000, 1, token, &now, &won, &newer),
               XF_OK);
  cr_assert_eq(won, XF_LEASE_NEWER, "the value read is newer than expiry 1");
  xf__entry_free(&newer);
  redisContext *r = xft_redis();
  redisReply *rep = xft_cmd(r, "HGET entry:extend e");
  int64_t e = atoll(rep->str);
  freeReplyObject(rep);
  cr_assert_eq(xft_entry_lease(c, "entry:extend", 12, 4000, e, token, &now, &won, &newer),
               XF_OK);
  cr_expect_eq(won, XF_LEASE_WON);
  long long pttl = xft_int(r, "PTTL entry:extend");
  cr_expect(pttl > 3000, "PTTL %lld: the entry must outlive the lease", pttl);
  redisFree(r);
  xf_client_close(c);
}

Test(entry, write_keeps_a_newer_computation) {
  xf_client *c = hash_client();
  redisContext *r = xft_redis();
  long long now = xft_server_ms(r);
  xf__write newer = {"", "new", 3, 10, 60000, 0, now, 0, NULL, 0, 0, NULL, 0};
  xf__write older = {"", "old", 3, 10, 60000, 0, now - 1000, 0, NULL, 0, 0, NULL, 0};
  int written;
  cr_assert_eq(xft_entry_write(c, "entry:newer", 11, &newer, &written), XF_OK);
  cr_expect_eq(written, 1);
  cr_assert_eq(xft_entry_write(c, "entry:newer", 11, &older, &written), XF_OK);
  cr_expect_eq(written, 0);
  redisReply *rep = xft_cmd(r, "HGET entry:newer v");
  cr_expect_str_eq(rep->str, "new");
  freeReplyObject(rep);
  redisFree(r);
  xf_client_close(c);
}

Test(entry, release_drops_only_the_callers_lease) {
  xf_client *c = hash_client();
  char token[40];
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(xft_entry_lease(c, "entry:release", 13, 5000, 0, token, &now, &won, &newer),
               XF_OK);
  cr_assert_eq(won, XF_LEASE_WON);
  redisContext *r = xft_redis();
  cr_assert_eq(xft_entry_release(c, "entry:release", 13, "someone-else"), XF_OK);
  cr_expect_eq(xft_int(r, "HEXISTS entry:release l"), 1);
  cr_assert_eq(xft_entry_release(c, "entry:release", 13, token), XF_OK);
  cr_expect_eq(xft_int(r, "EXISTS entry:release"), 0, "a lease-only hash is deleted");
  redisFree(r);
  xf_client_close(c);
}

Test(entry, negative_entry_has_n_and_negative_ttl) {
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  p.negative_ttl_ms = 2000;
  xft_loader l = {.not_found = 1};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "entry:neg", 9, &p, xft_load, &l, &v), XF_ENOTFOUND);
  cr_expect_null(v.data);
  redisContext *r = xft_redis();
  cr_expect_eq(hget_ll(r, "entry:neg", "n"), 1);
  long long pttl = xft_int(r, "PTTL entry:neg");
  cr_expect(pttl > 1000 && pttl <= 2000, "PTTL %lld", pttl);
  cr_expect_eq(xf_get_or_compute(c, "entry:neg", 9, &p, xft_load, &l, &v), XF_ENOTFOUND);
  cr_expect_eq(xft_loader_calls(&l), 1, "the negative entry is served from the cache");
  redisFree(r);
  xf_client_close(c);
}

Test(entry, not_found_without_negative_ttl_is_not_cached) {
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.not_found = 1};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "entry:neg0", 10, &p, xft_load, &l, &v), XF_ENOTFOUND);
  cr_expect_eq(xf_get_or_compute(c, "entry:neg0", 10, &p, xft_load, &l, &v), XF_ENOTFOUND);
  cr_expect_eq(xft_loader_calls(&l), 2);
  redisContext *r = xft_redis();
  /* Lease released, no value: only the found-nothing marker (f) for the
   * callers that waited on the load, gone after wait_ms. */
  cr_expect_eq(xft_int(r, "HLEN entry:neg0"), 1, "lease released, nothing written");
  cr_expect_eq(xft_int(r, "HEXISTS entry:neg0 f"), 1);
  long long pttl = xft_int(r, "PTTL entry:neg0");
  cr_expect(pttl > 0 && pttl <= p.wait_ms, "PTTL %lld", pttl);
  redisFree(r);
  xf_client_close(c);
}

Test(entry, set_keeps_the_delta_learned_by_the_loader) {
  xf_client *c = hash_client();
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "computed", .sleep_ms = 30};
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "entry:keepd", 11, &p, xft_load, &l, &v), XF_OK);
  xf_value_free(&v);
  redisContext *r = xft_redis();
  long long learned = hget_ll(r, "entry:keepd", "d");
  cr_assert_geq(learned, 30000);
  cr_assert_eq(xf_set(c, "entry:keepd", 11, "written-through", 15, &p), XF_OK);
  cr_expect_eq(hget_ll(r, "entry:keepd", "d"), learned);
  redisReply *rep = xft_cmd(r, "HGET entry:keepd v");
  cr_expect_str_eq(rep->str, "written-through");
  freeReplyObject(rep);
  redisFree(r);
  xf_client_close(c);
}
