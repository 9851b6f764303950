/* A big value's format-2 write (lua/entry_read.lua's set2): from BIG_AT
 * bytes the value is not concatenated to its header in Lua (which copies it
 * twice before SET copies it again) but written past the header by SETRANGE
 * on the emptied key, the header then put in place: the value is held once
 * in Lua, and the entry is the same bytes, TTL and memory as a SET of
 * header + value. The write's other rules (newer wins, another caller's lease
 * kept) are the script's, before it. Real redis-server. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "entry2_util.h"
#include "entry_io.h"
#include "entry_peek.h"

#define BIG_AT 4096 /* lua/entry_read.lua */

static char *pattern(size_t n, int salt) {
  char *v = malloc(n);
  for (size_t i = 0; i < n; i++)
    v[i] = (char)(i * 7 + (size_t)salt);
  return v;
}

static long long info_field(redisContext *r, const char *section, const char *field) {
  redisReply *rep = xft_cmd(r, "INFO %s", section);
  const char *at = strstr(rep->str, field);
  long long n = at ? strtoll(at + strlen(field) + 1, NULL, 10) : -1;
  freeReplyObject(rep);
  return n;
}

/* Failed before: a 4 MiB write grew Lua's heap by 12 MiB (the value, the
 * concatenation's buffer and its string); now by the value alone. */
Test(entry2_big, a_big_write_holds_its_value_once_in_lua) {
  xft_server own; /* its Lua interpreter is this test's alone */
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  redisContext *r = xft_redis_port(own.port);
  xf_client *c = xft_client_format(own.port, 1, XF_ENTRY_STRING);
  size_t n = 4 << 20;
  char *v = pattern(n, 1);
  xf_policy p = XF_POLICY_INIT;
  freeReplyObject(xft_cmd(r, "SCRIPT FLUSH")); /* a new interpreter: no garbage yet */
  long long before = info_field(r, "memory", "used_memory_lua");
  cr_assert_eq(xf_set(c, "big:lua", 7, v, n, &p), XF_OK);
  long long grown = info_field(r, "memory", "used_memory_lua") - before;
  cr_expect(grown < (long long)n * 3 / 2, "Lua's heap grew by %lld for a value of %zu",
            grown, n);
  cr_expect_eq(xft_int(r, "STRLEN big:lua"), (long long)(xft_hlen(H_S | H_SLOT) + n));
  free(v);
  xf_client_close(c);
  redisFree(r);
  xft_server_stop(&own);
}

/* The entry of a value of n bytes: its header, its bytes, its TTL and its
 * memory (a SET PX of the same value under a key of the same length: at most
 * the header more, so not a string grown greedily by APPEND or SETRANGE), and
 * how it was written: from BIG_AT bytes, SETRANGEs and no SET. */
static void written_as_a_set(int port, size_t n) {
  redisContext *r = xft_redis_port(port);
  xf_client *c = xft_client_format(port, 1, XF_ENTRY_STRING);
  char *v = pattern(n, 3), key[32], px[32];
  snprintf(key, sizeof key, "big:set:%zu", n);
  snprintf(px, sizeof px, "big:spx:%zu", n);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 60000;
  p.stale_ms = 5000;
  cr_assert_eq(xf_set(c, key, strlen(key), v, n, &p), XF_OK); /* over an entry */
  long long s0 = xft_command_calls(r, "set"), r0 = xft_command_calls(r, "setrange");
  cr_assert_eq(xf_set(c, key, strlen(key), v, n, &p), XF_OK);
  long long sets = xft_command_calls(r, "set") - s0,
            setranges = xft_command_calls(r, "setrange") - r0;
  if (n >= BIG_AT)
    cr_expect(sets == 0 && setranges == 3, "%zu B: %lld SET, %lld SETRANGE", n, sets,
              setranges);
  else
    cr_expect(sets == 1 && setranges == 0, "%zu B: %lld SET, %lld SETRANGE", n, sets,
              setranges);
  redisReply *rep = xft_cmd(r, "GET %s", key);
  cr_assert_eq(rep->type, REDIS_REPLY_STRING);
  int flags = (unsigned char)rep->str[2];
  size_t h = xft_hlen(flags);
  cr_expect_eq(flags, H_VALUE | H_S | H_SLOT, "%zu B: flags %d", n, flags);
  cr_expect_eq((unsigned char)rep->str[0], 0xF8);
  cr_expect_eq(rep->str[1], 3);
  int64_t e = xft_unbe(rep->str + 8, 6), s = xft_unbe(rep->str + 14, 6);
  cr_expect(e - s >= 60000 && e - s < 61000, "%zu B: e - s = %lld", n, (long long)(e - s));
  cr_expect(rep->len == h + n && memcmp(rep->str + h, v, n) == 0, "%zu B: the value", n);
  cr_expect(memcmp(rep->str + 20, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 14) == 0,
            "%zu B: an empty lease slot", n);
  freeReplyObject(rep);
  long long pttl = xft_int(r, "PTTL %s", key);
  cr_expect(pttl > 60000 && pttl <= 65000, "%zu B: PTTL %lld (ttl + stale)", n, pttl);
  freeReplyObject(xft_cmd(r, "SET %s %b PX 65000", px, v, n));
  long long xf = xft_int(r, "MEMORY USAGE %s", key),
            set = xft_int(r, "MEMORY USAGE %s", px);
  cr_expect(xf - set <= (long long)h, "%zu B: the entry %lld B, SET PX %lld B", n, xf, set);
  free(v);
  xf_client_close(c);
  redisFree(r);
}

Test(entry2_big, a_big_entry_is_the_bytes_ttl_and_memory_of_a_set) {
  xft_server own; /* its command counts are this test's alone */
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  written_as_a_set(own.port, BIG_AT - 1); /* concatenated */
  written_as_a_set(own.port, BIG_AT);
  written_as_a_set(own.port, 100 << 10);
  written_as_a_set(own.port, 1 << 20);
  xft_server_stop(&own);
}

/* A write while another caller holds the entry's lease keeps that lease in
 * the header, the new value after it. The write is dated (a waiter's that
 * gave up): one dated now, an xf_set, ends every lease (test_races). */
Test(entry2_big, a_big_write_keeps_another_callers_lease) {
  redisContext *r = xft_redis();
  xf_client *c = xft_client_format(xft_port(), 1, XF_ENTRY_STRING),
            *other = xft_client_format(xft_port(), 2, XF_ENTRY_STRING);
  size_t n = 1 << 20;
  char *old = pattern(n, 5), *v = pattern(n, 6);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "big:leased", 10, old, n, &p), XF_OK);
  redisReply *rep = xft_cmd(r, "GETRANGE big:leased 8 13");
  int64_t e = xft_unbe(rep->str, 6);
  freeReplyObject(rep);
  char token[40];
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(
      xft_entry_lease(other, "big:leased", 10, 30000, e, token, &now, &won, &newer), XF_OK);
  cr_assert_eq(won, XF_LEASE_WON);
  rep = xft_cmd(r, "GETRANGE big:leased 20 33");
  char slot[14]; /* deadline and token, after s */
  memcpy(slot, rep->str, sizeof slot);
  freeReplyObject(rep);
  xf__write dated = {.token = "",
                     .data = v,
                     .len = n,
                     .delta_us = -1,
                     .ttl_ms = 60000,
                     .start_ms = xft_server_ms(r),
                     .kind = XF_WRITE_VALUE};
  int written = 0;
  cr_assert_eq(xft_entry_write(c, "big:leased", 10, &dated, &written), XF_OK);
  cr_assert_eq(written, 1);
  rep = xft_cmd(r, "GET big:leased");
  cr_expect_eq((unsigned char)rep->str[2], H_VALUE | H_S | H_LEASE | H_SLOT);
  cr_expect(memcmp(rep->str + 20, slot, sizeof slot) == 0, "the other caller's lease kept");
  cr_expect(rep->len == 34 + n && memcmp(rep->str + 34, v, n) == 0, "the new value");
  freeReplyObject(rep);
  xft_peek pk;
  xft_peek_read(r, "big:leased", token, &pk);
  cr_expect(pk.live && pk.mine, "the lease still the other caller's");
  cr_expect(pk.vlen == n && memcmp(pk.v, v, n) == 0);
  xft_peek_free(&pk);
  free(old);
  free(v);
  xf_client_close(other);
  xf_client_close(c);
  redisFree(r);
}

/* The same big value written in each format reads back alike (the scripts'
 * reader), and a format-2 write over a format-1 entry converts it. */
Test(entry2_big, both_formats_read_back_alike) {
  redisContext *r = xft_redis();
  xf_client *one = xft_client_format(xft_port(), 1, XF_ENTRY_HASH),
            *two = xft_client_format(xft_port(), 2, XF_ENTRY_STRING);
  size_t n = 1 << 20;
  char *v = pattern(n, 9);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(one, "big:f1", 6, v, n, &p), XF_OK);
  cr_assert_eq(xf_set(two, "big:f2", 6, v, n, &p), XF_OK);
  cr_assert_eq(xf_set(one, "big:conv", 8, "old", 3, &p), XF_OK);
  cr_assert_eq(xf_set(two, "big:conv", 8, v, n, &p), XF_OK);
  const char *keys[] = {"big:f1", "big:f2", "big:conv"};
  const char *kinds[] = {"hash", "string", "string"};
  for (int i = 0; i < 3; i++) {
    xft_peek pk;
    xft_peek_read(r, keys[i], "", &pk);
    cr_expect_str_eq(pk.kind, kinds[i], "%s", keys[i]);
    cr_expect(!pk.bad && pk.vlen == n && memcmp(pk.v, v, n) == 0, "%s: the value", keys[i]);
    cr_expect(pk.e - pk.s >= 60000 && pk.e - pk.s < 61000, "%s", keys[i]);
    xft_peek_free(&pk);
    xf_value got;
    cr_assert_eq(xf_get(i ? two : one, keys[i], strlen(keys[i]), &got), XF_OK);
    cr_expect(got.len == n && memcmp(got.data, v, n) == 0, "%s: xf_get", keys[i]);
    xf_value_free(&got);
  }
  free(v);
  xf_client_close(one);
  xf_client_close(two);
  redisFree(r);
}

/* Under maxmemory a big write is refused as a small one is (SET's check: the
 * script's first write is the SETRANGE that changes nothing), the entry kept. */
Test(entry2_big, a_big_write_over_maxmemory_is_refused) {
  xft_server own;
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  redisContext *r = xft_redis_port(own.port);
  xf_client *c = xft_client_format(own.port, 1, XF_ENTRY_STRING);
  size_t n = 1 << 20;
  char *old = pattern(n, 11), *v = pattern(n, 12);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "big:oom", 7, old, n, &p), XF_OK);
  freeReplyObject(xft_cmd(r, "CONFIG SET maxmemory 1"));
  cr_expect_neq(xf_set(c, "big:oom", 7, v, n, &p), XF_OK);
  cr_expect_neq(xf_set(c, "big:oom", 7, "small", 5, &p), XF_OK);
  freeReplyObject(xft_cmd(r, "CONFIG SET maxmemory 0"));
  xf_value got;
  cr_assert_eq(xf_get(c, "big:oom", 7, &got), XF_OK);
  cr_expect(got.len == n && memcmp(got.data, old, n) == 0, "the entry kept");
  xf_value_free(&got);
  free(old);
  free(v);
  xf_client_close(c);
  redisFree(r);
  xft_server_stop(&own);
}
