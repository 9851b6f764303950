/* Format-2 entries (one string: header + value) that xfetch never writes: a
 * header of another version (2, the unreleased 40-byte layout, among them),
 * an unknown flag, a lease without its slot, a slot without a lease that is
 * not zero, flags announcing a field past the string's end, a time out of
 * the scripts' bounds (d, 5 bytes, cannot exceed its bound of 2^40 us), a
 * header cut short:
 * each is a miss, counted in stats.malformed, recomputed and overwritten, on
 * the hit path (GET, judged in C), the read script's path (judged in Lua),
 * the batch (MGET) and xf_get. A string that does not start with the magic
 * byte is not an entry: XF_EWRONGTYPE, left untouched. Real redis-server. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "entry.h"
#include "entry2_util.h"
#include "entry_io.h"

typedef struct bad_case {
  const char *name;
  void (*spoil)(xft_header *h, long long now, size_t *vlen);
} bad_case;

static void version(xft_header *h, long long now, size_t *vlen) {
  (void)now, (void)vlen;
  h->version = 4;
}
/* The unreleased 40-byte layout (every field, fixed), as it wrote a value. */
static void format_2_layout(xft_header *h, long long now, size_t *vlen) {
  (void)now, (void)vlen;
  h->version = 2;
  h->layout = 2;
}
static void unknown_flag(xft_header *h, long long now, size_t *vlen) {
  (void)now, (void)vlen;
  h->flags |= 64;
}
static void negative_without_value(xft_header *h, long long now, size_t *vlen) {
  (void)now;
  h->flags = H_NEGATIVE | H_S;
  h->d = h->e = 0;
  *vlen = 0;
}
static void delta_without_value(xft_header *h, long long now, size_t *vlen) {
  (void)now;
  h->flags = H_S;
  h->e = 0;
  *vlen = 0;
}
static void bytes_without_value(xft_header *h, long long now, size_t *vlen) {
  (void)now, (void)vlen;
  h->flags = H_S;
  h->d = h->e = 0;
}
static void lease_without_slot(xft_header *h, long long now, size_t *vlen) {
  (void)vlen;
  h->flags |= H_LEASE;
  h->deadline = now + 5000;
}
static void lease_without_flag(xft_header *h, long long now, size_t *vlen) {
  (void)vlen;
  h->flags |= H_SLOT;
  h->deadline = now + 5000;
}
static void token_without_flag(xft_header *h, long long now, size_t *vlen) {
  (void)now, (void)vlen;
  h->flags |= H_SLOT;
  h->token[7] = 1;
}
/* The flags announce f, the string ends before it (a tombstone). */
static void marker_past_the_end(xft_header *h, long long now, size_t *vlen) {
  h->flags = H_S | H_F;
  h->d = h->e = 0;
  h->f = now;
  h->omit = H_F;
  *vlen = 0;
}
/* The flags announce the lease slot, the string ends inside it. */
static void slot_cut_short(xft_header *h, long long now, size_t *vlen) {
  (void)now;
  h->flags |= H_SLOT;
  h->omit = H_SLOT;
  *vlen = 6;
}
static void expiry_too_far(xft_header *h, long long now, size_t *vlen) {
  (void)vlen;
  h->e = now + ((int64_t)1 << 42);
}
static void start_ahead(xft_header *h, long long now, size_t *vlen) {
  (void)vlen;
  h->s = now + 2LL * 86400000;
}
static void deadline_too_far(xft_header *h, long long now, size_t *vlen) {
  (void)vlen;
  h->flags |= H_LEASE | H_SLOT;
  h->deadline = now + ((int64_t)1 << 42);
  h->token[0] = 1;
}

static const bad_case cases[] = {
    {"version", version},
    {"format_2_layout", format_2_layout},
    {"unknown_flag", unknown_flag},
    {"negative_without_value", negative_without_value},
    {"delta_without_value", delta_without_value},
    {"bytes_without_value", bytes_without_value},
    {"lease_without_slot", lease_without_slot},
    {"lease_without_flag", lease_without_flag},
    {"token_without_flag", token_without_flag},
    {"marker_past_the_end", marker_past_the_end},
    {"slot_cut_short", slot_cut_short},
    {"expiry_too_far", expiry_too_far},
    {"start_ahead", start_ahead},
    {"deadline_too_far", deadline_too_far},
};
#define NCASES (sizeof cases / sizeof *cases)

static void put_bad(redisContext *r, const char *key, const bad_case *bc) {
  long long now = xft_server_ms(r);
  xft_header h = xft_header_valid(now);
  size_t vlen = 6;
  bc->spoil(&h, now, &vlen);
  xft_put2(r, key, &h, "cached", vlen);
}

static xf_client *client2_at(int port) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = 1;
  o.entry_format = XF_ENTRY_STRING;
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static xf_client *client2(void) { return client2_at(xft_port()); }

static uint64_t malformed(xf_client *c) {
  xf_stats s;
  xf_client_stats(c, &s);
  return s.malformed;
}

/* After the recompute the entry is a well-formed format-2 one holding fresh. */
static void expect_rewritten(redisContext *r, const char *key) {
  redisReply *rep = xft_cmd(r, "GET %s", key);
  cr_assert_eq(rep->type, REDIS_REPLY_STRING, "%s", key);
  const unsigned char *h = (const unsigned char *)rep->str;
  cr_expect(rep->len == 25 && h[0] == 0xF8 && h[1] == 3 && h[2] == (H_VALUE | H_S) &&
                memcmp(rep->str + 20, "fresh", 5) == 0,
            "%s: not rewritten", key);
  freeReplyObject(rep);
}

/* warm: a hit first, so the client's clock estimate is fresh and its reads
 * are plain GETs (judged in C); else its first read is the script (Lua). */
static void check_get_or_compute(int warm) {
  xft_server own; /* its command counts are this test's alone */
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  redisContext *r = xft_redis_port(own.port);
  for (size_t i = 0; i < NCASES; i++) {
    xf_client *c = client2_at(own.port);
    xf_policy p = XF_POLICY_INIT;
    p.beta = 0; /* a well-formed entry would be a plain hit */
    xft_loader l = {.value = "fresh", .len = 5};
    xf_value v;
    int64_t learning = xft_now_ms(); /* the warm-up teaches the clock after it */
    if (warm) {
      cr_assert_eq(xf_get_or_compute(c, "malformed2:warm", 15, &p, xft_load, &l, &v),
                   XF_OK);
      xf_value_free(&v);
      __atomic_store_n(&l.calls, 0, __ATOMIC_SEQ_CST);
    }
    char key[80];
    snprintf(key, sizeof key, "malformed2:%d:%s", warm, cases[i].name);
    put_bad(r, key, &cases[i]);
    uint64_t before = malformed(c);
    long long scripts = xft_command_calls(r, "evalsha_ro");
    int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v);
    cr_assert_eq(rc, XF_OK, "%s: %s (%s)", cases[i].name, xf_errname(rc), xf_errmsg(c));
    cr_expect_str_eq(v.data, "fresh", "%s", cases[i].name);
    cr_expect_eq(xft_loader_calls(&l), 1, "%s", cases[i].name);
    cr_expect_eq(malformed(c), before + 1, "%s counted", cases[i].name);
    long long ran = xft_command_calls(r, "evalsha_ro") - scripts; /* a NOSCRIPT too */
    /* Warm, the read is a plain GET while the clock estimate is fresh:
     * younger than XF_CLOCK_REFRESH_MS / 2 (500 ms), so while the warm-up,
     * the SET and the call took less than that (0-4 ms on a quiet machine).
     * Past it (a busy machine) the read refreshes the estimate: the script
     * (twice on a NOSCRIPT), and the script judges the entry instead. */
    int plain = warm && xft_now_ms() - learning < XF_CLOCK_REFRESH_MS / 2;
    cr_expect(plain  ? ran == 0
              : warm ? ran <= 2
                     : ran >= 1,
              "%s: read by %s (%lld read scripts)", cases[i].name,
              plain ? "GET" : "the script", ran);
    xf_value_free(&v);
    expect_rewritten(r, key);
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v), XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_CACHE, "%s: a hit once rewritten", cases[i].name);
    xf_value_free(&v);
    xf_client_close(c);
  }
  redisFree(r);
  xft_server_stop(&own);
}

Test(malformed2, each_field_on_the_hit_path) { check_get_or_compute(1); }

Test(malformed2, each_field_on_the_scripts_path) { check_get_or_compute(0); }

/* One batch read of every malformed case: a plain MGET when the client's
 * clock estimate is fresh (it is learned just before; on a busy machine the
 * 1 s it stays fresh may pass first, and then the read is read_many.lua):
 * one round either way, on a server of its own so that the
 * counts are this test's alone. */
Test(malformed2, each_field_in_one_mget) {
  xft_server own;
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  redisContext *r = xft_redis_port(own.port);
  xf_client *c = client2_at(own.port);
  xf_policy p = XF_POLICY_INIT;
  p.beta = 0;
  xft_loader l = {.value = "fresh", .len = 5};
  xf_value v[NCASES + 1];
  int rcs[NCASES + 1];
  char names[NCASES + 1][80];
  const char *keys[NCASES + 1];
  size_t lens[NCASES + 1];
  for (size_t i = 0; i < NCASES; i++) {
    snprintf(names[i], sizeof names[i], "malformed2:batch:%s", cases[i].name);
    put_bad(r, names[i], &cases[i]);
  }
  snprintf(names[NCASES], sizeof names[NCASES], "malformed2:batch:good");
  xft_header good = xft_header_valid(xft_server_ms(r));
  xft_put2(r, names[NCASES], &good, "cached", 6);
  for (size_t i = 0; i <= NCASES; i++)
    keys[i] = names[i], lens[i] = strlen(names[i]);
  cr_assert_eq(xf_get_or_compute(c, "malformed2:warm", 15, &p, xft_load, &l, v), XF_OK);
  xf_value_free(v);
  __atomic_store_n(&l.calls, 0, __ATOMIC_SEQ_CST);
  uint64_t before = malformed(c);
  long long mgets = xft_command_calls(r, "mget"),
            scripts = xft_command_calls(r, "evalsha_ro");
  cr_assert_eq(xf_get_or_compute_many(c, NCASES + 1, keys, lens, &p, xft_load, &l, v, rcs),
               XF_OK);
  mgets = xft_command_calls(r, "mget") - mgets;
  scripts = xft_command_calls(r, "evalsha_ro") - scripts;
  /* One round: one MGET, or the script (twice when the server first answers
   * NOSCRIPT: this server has not seen read_many.lua yet). */
  cr_expect(mgets == 1 ? scripts == 0 : mgets == 0 && scripts >= 1 && scripts <= 2,
            "one read reads them all (%lld MGET, %lld read_many)", mgets, scripts);
  for (size_t i = 0; i <= NCASES; i++) {
    cr_expect_eq(rcs[i], XF_OK, "%s: %s", keys[i], xf_errname(rcs[i]));
    cr_expect(v[i].data && strcmp(v[i].data, i == NCASES ? "cached" : "fresh") == 0,
              "%s: %s", keys[i], v[i].data);
    if (i < NCASES)
      expect_rewritten(r, keys[i]);
    xf_value_free(&v[i]);
  }
  cr_expect_eq(xft_loader_calls(&l), (int)NCASES);
  cr_expect_eq(malformed(c), before + NCASES);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&own);
}

Test(malformed2, xf_get_is_not_found_and_leaves_it) {
  redisContext *r = xft_redis();
  xf_client *c = client2();
  for (size_t i = 0; i < NCASES; i++) {
    char key[80];
    snprintf(key, sizeof key, "malformed2:get:%s", cases[i].name);
    put_bad(r, key, &cases[i]);
    uint64_t before = malformed(c);
    xf_value v;
    cr_expect_eq(xf_get(c, key, strlen(key), &v), XF_ENOTFOUND, "%s", cases[i].name);
    cr_expect_eq(malformed(c), before + 1, "%s counted", cases[i].name);
    cr_expect_eq(xft_int(r, "EXISTS %s", key), 1, "%s left as it is", cases[i].name);
  }
  redisFree(r);
  xf_client_close(c);
}

Test(malformed2, a_header_cut_short_is_malformed) {
  redisContext *r = xft_redis();
  xf_client *c = client2();
  freeReplyObject(xft_cmd(r, "SET malformed2:short %b", "\xf8\x03\x01", (size_t)3));
  xft_loader l = {.value = "fresh", .len = 5};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  for (int round = 0; round < 2; round++) { /* the script's judgment, then C's */
    freeReplyObject(xft_cmd(r, "SET malformed2:short %b", "\xf8\x03\x01", (size_t)3));
    uint64_t before = malformed(c);
    cr_assert_eq(xf_get_or_compute(c, "malformed2:short", 16, &p, xft_load, &l, &v), XF_OK);
    cr_expect_str_eq(v.data, "fresh");
    cr_expect_eq(malformed(c), before + 1);
    xf_value_free(&v);
    expect_rewritten(r, "malformed2:short");
  }
  redisFree(r);
  xf_client_close(c);
}

Test(malformed2, a_string_without_the_magic_byte_is_left_untouched) {
  redisContext *r = xft_redis();
  xf_client *c = client2();
  xft_loader l = {.value = "fresh", .len = 5};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  for (int round = 0; round < 2; round++) { /* the script, then GET */
    freeReplyObject(xft_cmd(r, "SET malformed2:foreign precious"));
    cr_expect_eq(xf_get_or_compute(c, "malformed2:foreign", 18, &p, xft_load, &l, &v),
                 XF_EWRONGTYPE, "round %d", round);
    cr_expect(strstr(xf_errmsg(c), "WRONGTYPE") != NULL, "%s", xf_errmsg(c));
    redisReply *rep = xft_cmd(r, "GET malformed2:foreign");
    cr_expect_str_eq(rep->str, "precious");
    freeReplyObject(rep);
    cr_assert_eq(xf_get_or_compute(c, "malformed2:warm-foreign", 23, &p, xft_load, &l, &v),
                 XF_OK);
    xf_value_free(&v);
  }
  cr_expect_eq(xft_loader_calls(&l), 1, "only the warm key loaded");
  redisFree(r);
  xf_client_close(c);
}

/* A lease taken on a malformed entry holds: whatever bytes the string held,
 * the next caller finds a live lease (the string is replaced by the lease
 * alone), so a malformed entry is loaded once, not by everyone. */
Test(malformed2, a_lease_on_a_malformed_entry_holds) {
  redisContext *r = xft_redis();
  xf_client *a = client2(), *b = client2();
  for (size_t i = 0; i < NCASES; i++) {
    char key[80];
    snprintf(key, sizeof key, "malformed2:lease:%s", cases[i].name);
    put_bad(r, key, &cases[i]);
    char token[40];
    int64_t now;
    xf__lease_result won;
    xf__entry newer;
    cr_assert_eq(xft_entry_lease(a, key, strlen(key), 5000, 0, token, &now, &won, &newer),
                 XF_OK);
    cr_expect_eq(won, XF_LEASE_WON, "%s", cases[i].name);
    cr_assert_eq(xft_entry_lease(b, key, strlen(key), 5000, 0, token, &now, &won, &newer),
                 XF_OK);
    cr_expect_eq(won, XF_LEASE_LOST, "%s: the first lease holds", cases[i].name);
  }
  xf_client_close(a);
  xf_client_close(b);
  redisFree(r);
}
