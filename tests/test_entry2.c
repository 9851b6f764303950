/* Format 2, the string entry (src/core/entry_string.c, lua/entry_read.lua):
 * its layout on Redis, a hit that is one GET and a batch one MGET, leases
 * taken and released in place (the value never copied), the lease-only
 * entry and the tombstone as header-only strings with their own TTL, binary
 * values; and the rolling deploy: each format read by a client writing the
 * other, a write converting an entry, a fleet writing both on one hot key
 * loading it once per episode. Real redis-server. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "entry2_util.h"
#include "entry_io.h"
#include "fleet.h"

static xf_client *client_in(int format, uint64_t seed) {
  return xft_client_format(xft_port(), seed, format);
}

/* Whether key's Redis type is want. */
static int type_is(redisContext *r, const char *key, const char *want) {
  redisReply *rep = xft_cmd(r, "TYPE %s", key);
  int is = rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, want) == 0;
  freeReplyObject(rep);
  return is;
}

static redisReply *get_raw(redisContext *r, const char *key) {
  redisReply *rep = xft_cmd(r, "GET %s", key);
  cr_assert_eq(rep->type, REDIS_REPLY_STRING, "%s is not a string", key);
  cr_assert_geq(rep->len, 14);
  return rep;
}

Test(entry2, a_write_is_one_string_header_then_value) {
  redisContext *r = xft_redis();
  xf_client *c = client_in(XF_ENTRY_STRING, 1);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.stale_ms = 5000;
  p.stale_if_error_ms = 0;
  long long before = xft_server_ms(r);
  cr_assert_eq(xf_set(c, "e2:layout", 9, "a\0b", 3, &p), XF_OK, "%s", xf_errmsg(c));
  redisReply *rep = get_raw(r, "e2:layout");
  const char *h = rep->str;
  cr_expect_eq(rep->len, 23, "a 20-byte header: the fixed 14 and s");
  cr_expect_eq((unsigned char)h[0], 0xF8);
  cr_expect_eq(h[1], 3);
  cr_expect_eq(h[2], H_VALUE | H_S);
  int64_t e = xft_unbe(h + 8, 6), s = xft_unbe(h + 14, 6);
  cr_expect(e >= before + 60000 && e <= before + 62000, "e %lld", (long long)e);
  cr_expect(s >= before && s <= before + 2000, "s %lld", (long long)s);
  cr_expect(memcmp(h + 20, "a\0b", 3) == 0);
  freeReplyObject(rep);
  long long pttl = xft_int(r, "PTTL e2:layout");
  cr_expect(pttl > 60000 && pttl <= 65000, "PTTL %lld: ttl + stale", pttl);
  xf_value v;
  cr_assert_eq(xf_get(c, "e2:layout", 9, &v), XF_OK);
  cr_expect(v.len == 3 && memcmp(v.data, "a\0b", 3) == 0, "binary-safe");
  xf_value_free(&v);
  redisFree(r);
  xf_client_close(c);
}

Test(entry2, a_hit_is_one_get_and_a_batch_one_mget) {
  xft_server own; /* its command counts are this test's alone */
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  redisContext *r = xft_redis_port(own.port);
  xf_client *c = xft_client_format(own.port, 1, XF_ENTRY_STRING);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  xft_loader l = {.value = "v", .len = 1};
  const char *keys[] = {"e2:hit:a", "e2:hit:b", "e2:hit:c"};
  size_t lens[] = {8, 8, 8};
  xf_value v[3];
  int rcs[3];
  int64_t t0 = xft_now_ms();                /* the clock estimate is learned after this */
  for (int round = 0; round < 3; round++) { /* load; learn the clock; plain */
    long long gets = xft_command_calls(r, "get"), mgets = xft_command_calls(r, "mget"),
              scripts =
                  xft_command_calls(r, "evalsha_ro") + xft_command_calls(r, "evalsha");
    cr_assert_eq(xf_get_or_compute(c, "e2:hit", 6, &p, xft_load, &l, v), XF_OK);
    xf_value_free(v);
    cr_assert_eq(xf_get_or_compute_many(c, 3, keys, lens, &p, xft_load, &l, v, rcs), XF_OK);
    for (int i = 0; i < 3; i++) {
      cr_expect_eq(rcs[i], XF_OK);
      xf_value_free(&v[i]);
    }
    /* Round 2 reads plainly while the clock estimate learned since t0 is
     * younger than half its refresh period (500 ms): judged exactly when
     * the three rounds took less than that; on a busy machine, the estimate
     * may be old and a read goes as the read script (once each at most). */
    long long get = xft_command_calls(r, "get") - gets,
              mget = xft_command_calls(r, "mget") - mgets,
              script = xft_command_calls(r, "evalsha_ro") +
                       xft_command_calls(r, "evalsha") - scripts;
    if (round == 2 && xft_now_ms() - t0 < 500) {
      cr_expect_eq(get, 1, "the hit: one GET");
      cr_expect_eq(mget, 1, "the batch: one MGET");
      cr_expect_eq(script, 0, "no script");
    } else if (round == 2) {
      cr_expect_leq(get, 1, "the hit: %lld GETs", get);
      cr_expect_leq(mget, 1, "the batch: %lld MGETs", mget);
      cr_expect_leq(script, 2, "%lld scripts: a read script each at most", script);
      cr_expect_eq(get + mget + script >= 2, 1, "each read sent: %lld",
                   get + mget + script);
    }
  }
  cr_expect_eq(xft_loader_calls(&l), 4);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&own);
}

Test(entry2, a_big_value_round_trips) {
  xf_client *c = client_in(XF_ENTRY_STRING, 1);
  size_t n = 1 << 20;
  char *big = malloc(n);
  for (size_t i = 0; i < n; i++)
    big[i] = (char)(i * 7);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "e2:big", 6, big, n, &p), XF_OK);
  for (int round = 0; round < 2; round++) { /* the script's read, then GET */
    xf_value v;
    cr_assert_eq(xf_get(c, "e2:big", 6, &v), XF_OK);
    cr_expect(v.len == n && memcmp(v.data, big, n) == 0);
    xf_value_free(&v);
  }
  free(big);
  xf_client_close(c);
}

/* The loader looks at its entry while it holds the lease. */
typedef struct peek_loader {
  size_t len;
  int flags;
  int value_kept;
} peek_loader;

static int peek_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)sink;
  peek_loader *pl = ud;
  redisContext *r = xft_redis();
  redisReply *rep = xft_cmd(r, "GET %b", key, keylen);
  pl->len = rep->len;
  pl->flags = rep->len >= 14 ? rep->str[2] : -1;
  pl->value_kept = rep->len == xft_hlen(pl->flags) + 9 &&
                   memcmp(rep->str + xft_hlen(pl->flags), "old-value", 9) == 0;
  freeReplyObject(rep);
  redisFree(r);
  return 1; /* fails: the lease is released */
}

Test(entry2, a_lease_is_taken_and_released_in_place) {
  redisContext *r = xft_redis();
  long long now = xft_server_ms(r);
  xft_header h = xft_header_valid(now);
  h.e = now - 10; /* stale: the next call leases it */
  xft_put2(r, "e2:lease", &h, "old-value", 9);
  long long pttl = xft_int(r, "PTTL e2:lease");
  xf_client *c = client_in(XF_ENTRY_STRING, 1);
  xf_policy p = XF_POLICY_INIT;
  p.stale_ms = 60000;
  p.stale_if_error_ms = 60000;
  peek_loader pl = {0};
  xf_value v;
  /* The loader fails: lease taken, released; stale served (stale-if-error). */
  cr_assert_eq(xf_get_or_compute(c, "e2:lease", 8, &p, peek_load, &pl, &v), XF_OK, "%s",
               xf_errmsg(c));
  cr_expect_str_eq(v.data, "old-value");
  cr_expect_eq(v.source, XF_SOURCE_STALE);
  xf_value_free(&v);
  cr_expect_eq(pl.flags, H_VALUE | H_S | H_LEASE | H_SLOT, "the lease, in the header");
  cr_expect(pl.value_kept, "the value kept beside the lease (%zu bytes)", pl.len);
  redisReply *rep = get_raw(r, "e2:lease");
  cr_expect_eq(rep->len, 34 + 9);
  cr_expect_eq(rep->str[2], H_VALUE | H_S | H_SLOT, "no lease left; its slot kept");
  cr_expect(memcmp(rep->str + 34, "old-value", 9) == 0);
  freeReplyObject(rep);
  long long after = xft_int(r, "PTTL e2:lease");
  cr_expect(after > 0 && after <= pttl, "its PTTL kept: %lld then %lld", pttl, after);
  redisFree(r);
  xf_client_close(c);
}

Test(entry2, a_lease_only_entry_and_a_tombstone_are_headers_with_their_own_ttl) {
  redisContext *r = xft_redis();
  xf_client *holder = client_in(XF_ENTRY_STRING, 2);
  char token[40];
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(xft_entry_lease(holder, "e2:only", 7, 3000, 0, token, &now, &won, &newer),
               XF_OK);
  cr_expect_eq(won, XF_LEASE_WON);
  redisReply *rep = get_raw(r, "e2:only");
  cr_expect_eq(rep->len, 28, "the lease only: the fixed 14 and the slot");
  cr_expect_eq(rep->str[2], H_LEASE | H_SLOT);
  cr_expect_eq(xft_unbe(rep->str + 14, 6), now + 3000, "its deadline");
  freeReplyObject(rep);
  long long pttl = xft_int(r, "PTTL e2:only");
  cr_expect(pttl > 2000 && pttl <= 3000, "PTTL %lld: the lease's", pttl);
  /* Another caller respects it (plain GET and the script alike). */
  xf_client *c = client_in(XF_ENTRY_STRING, 1);
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 100;
  p.on_wait_timeout = XF_WAIT_FAIL;
  xft_loader l = {.value = "v", .len = 1};
  xf_value v;
  cr_expect_eq(xf_get_or_compute(c, "e2:only", 7, &p, xft_load, &l, &v), XF_ETIMEDOUT);
  cr_expect_eq(xft_loader_calls(&l), 0,
               "a live lease in a header-only string is respected");
  cr_expect_eq(xft_entry_release(holder, "e2:only", 7, token), XF_OK);
  cr_expect_eq(xft_int(r, "EXISTS e2:only"), 0, "released: nothing left");
  /* A delete leaves a header-only tombstone (s) that refuses older writes. */
  cr_assert_eq(xf_delete(c, "e2:tomb", 7), XF_OK);
  rep = get_raw(r, "e2:tomb");
  cr_expect_eq(rep->len, 20);
  cr_expect_eq(rep->str[2], H_S, "a tombstone: s only");
  int64_t s = xft_unbe(rep->str + 14, 6);
  freeReplyObject(rep);
  pttl = xft_int(r, "PTTL e2:tomb");
  cr_expect(pttl > 0 && pttl <= 60000, "PTTL %lld", pttl);
  xf__write w = {.token = "",
                 .data = "old",
                 .len = 3,
                 .delta_us = 5,
                 .ttl_ms = 1000,
                 .keep_ms = 0,
                 .start_ms = s - 1,
                 .kind = XF_WRITE_VALUE};
  int written = -1;
  cr_expect_eq(xft_entry_write(c, "e2:tomb", 7, &w, &written), XF_OK);
  cr_expect_eq(written, 0, "a computation older than the delete is refused");
  xf_client_close(holder);
  redisFree(r);
  xf_client_close(c);
}

/* ---- the rolling deploy ------------------------------------------------------- */

/* A client writing format `writer` sets key; one writing `reader` reads it:
 * the script's read, then the plain one (the other format's WRONGTYPE, then
 * its own read), both hits. */
static void read_across(int writer, int reader, const char *key) {
  redisContext *r = xft_redis();
  xf_client *w = client_in(writer, 1), *c = client_in(reader, 2);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  cr_assert_eq(xf_set(w, key, strlen(key), "across", 6, &p), XF_OK);
  cr_expect(type_is(r, key, writer == XF_ENTRY_STRING ? "string" : "hash"));
  xft_loader l = {.value = "loaded", .len = 6};
  for (int round = 0; round < 3; round++) {
    xf_value v;
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v), XF_OK, "%s",
                 xf_errmsg(c));
    cr_expect_str_eq(v.data, "across");
    cr_expect_eq(v.source, XF_SOURCE_CACHE);
    xf_value_free(&v);
  }
  cr_expect_eq(xft_loader_calls(&l), 0);
  /* A write by the reader converts the entry to its own format. */
  cr_assert_eq(xf_set(c, key, strlen(key), "mine", 4, &p), XF_OK);
  cr_expect(type_is(r, key, reader == XF_ENTRY_STRING ? "string" : "hash"));
  xf_value v;
  cr_assert_eq(xf_get(w, key, strlen(key), &v), XF_OK);
  cr_expect_str_eq(v.data, "mine");
  xf_value_free(&v);
  xf_client_close(w);
  xf_client_close(c);
  redisFree(r);
}

Test(entry2, a_format_2_client_reads_a_hash) {
  read_across(XF_ENTRY_HASH, XF_ENTRY_STRING, "e2:across:1");
}

Test(entry2, a_format_1_client_reads_a_string) {
  read_across(XF_ENTRY_STRING, XF_ENTRY_HASH, "e2:across:2");
}

/* A write in the other format keeps another caller's live lease, which that
 * caller may then release: a lease is not lost across the formats. The
 * write is dated (a waiter's that gave up): one dated now, an xf_set, ends
 * every lease (test_races). */
Test(entry2, a_converting_write_keeps_anothers_lease) {
  redisContext *r = xft_redis();
  for (int from = XF_ENTRY_HASH; from <= XF_ENTRY_STRING; from++) {
    const char *key = from == XF_ENTRY_HASH ? "e2:carry:1" : "e2:carry:2";
    int to = from == XF_ENTRY_HASH ? XF_ENTRY_STRING : XF_ENTRY_HASH;
    xf_client *holder = client_in(from, 1), *w = client_in(to, 2);
    char token[40];
    int64_t now;
    xf__lease_result won;
    xf__entry newer;
    cr_assert_eq(
        xft_entry_lease(holder, key, strlen(key), 5000, 0, token, &now, &won, &newer),
        XF_OK);
    cr_assert_eq(won, XF_LEASE_WON);
    xf__write dated = {.token = "",
                       .data = "v",
                       .len = 1,
                       .delta_us = -1,
                       .ttl_ms = 60000,
                       .start_ms = xft_server_ms(r),
                       .kind = XF_WRITE_VALUE};
    int set = 0;
    cr_assert_eq(xft_entry_write(w, key, strlen(key), &dated, &set), XF_OK);
    cr_assert_eq(set, 1);
    xf_client *other = client_in(to, 3);
    char token2[40];
    cr_assert_eq(
        xft_entry_lease(other, key, strlen(key), 5000, 1, token2, &now, &won, &newer),
        XF_OK);
    cr_expect_eq(won, XF_LEASE_NEWER, "from %d: the value is newer than expiry 1", from);
    xf__entry_free(&newer);
    xf__write wr = {.token = token,
                    .data = "held",
                    .len = 4,
                    .delta_us = 5,
                    .ttl_ms = 1000,
                    .keep_ms = 0,
                    .start_ms = -1,
                    .kind = XF_WRITE_VALUE};
    int written = 0;
    cr_expect_eq(xft_entry_write(holder, key, strlen(key), &wr, &written), XF_OK);
    cr_expect_eq(written, 1, "from %d: the holder's lease survived the conversion", from);
    xf_client_close(other);
    xf_client_close(holder);
    xf_client_close(w);
  }
  redisFree(r);
}

/* ---- a mixed fleet: format-1 and format-2 writers on one hot key ------------ */

static xf_client *fleet_client(int i, void *ud) {
  (void)ud;
  return client_in(i % 2 ? XF_ENTRY_STRING : XF_ENTRY_HASH, 0);
}

static const char *fleet_label(int i) { return i % 2 ? "format 2" : "format 1"; }

Test(entry2, both_formats_on_one_hot_key_load_once_per_episode) {
  xft_fleet_run("e2:fleet", 6, 1500, 2, fleet_client, NULL, fleet_label);
}

/* A batch on a format-2 client whose keys are partly format-1 hashes: MGET
 * reads the hashes as nil, their keys ask for the lease, whose script reads
 * the hash and serves its value (newer): nothing loads. */
Test(entry2, a_batch_serves_hashes_among_strings_without_loading) {
  xf_client *old = client_in(XF_ENTRY_HASH, 1), *c = client_in(XF_ENTRY_STRING, 2);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  const char *keys[] = {"e2:mix:0", "e2:mix:1", "e2:mix:2", "e2:mix:3"};
  size_t lens[] = {8, 8, 8, 8};
  for (int i = 0; i < 4; i++)
    cr_assert_eq(xf_set(i % 2 ? old : c, keys[i], lens[i], keys[i], lens[i], &p), XF_OK);
  xft_loader l = {.value = "loaded", .len = 6};
  xf_value v[4];
  int rcs[4];
  for (int round = 0; round < 2; round++) { /* read_many, then MGET (clock fresh) */
    cr_assert_eq(xf_get_or_compute_many(c, 4, keys, lens, &p, xft_load, &l, v, rcs), XF_OK);
    for (int i = 0; i < 4; i++) {
      cr_expect_eq(rcs[i], XF_OK);
      cr_expect_str_eq(v[i].data, keys[i], "round %d key %d", round, i);
      cr_expect_eq(v[i].source, XF_SOURCE_CACHE, "round %d key %d", round, i);
      xf_value_free(&v[i]);
    }
  }
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_client_close(old);
  xf_client_close(c);
}

/* Format 2 is the default: a client opened with entry_format unset (0) writes
 * one string, as XF_ENTRY_STRING does (before: a hash, format 1). */
Test(entry2, the_default_format_is_the_string) {
  redisContext *r = xft_redis();
  xf_client *c = client_in(XF_ENTRY_DEFAULT, 1);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "e2:default", 10, "v", 1, &p), XF_OK, "%s", xf_errmsg(c));
  cr_expect(type_is(r, "e2:default", "string"), "a default client's entry is a string");
  redisReply *rep = get_raw(r, "e2:default");
  cr_expect_eq((unsigned char)rep->str[0], 0xF8, "format 2's magic byte");
  freeReplyObject(rep);
  xft_loader l = {.value = "loaded"};
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "e2:default-load", 15, &p, xft_load, &l, &v), XF_OK);
  xf_value_free(&v);
  cr_expect(type_is(r, "e2:default-load", "string"), "a load writes a string too");
  xf_client_close(c);
  redisFree(r);
}
