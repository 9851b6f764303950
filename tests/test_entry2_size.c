/* Format 2's compact header (version 3, src/core/entry_string.c,
 * lua/entry_read.lua): a plain entry costs a SET of its value plus 20 bytes
 * (a 16-byte value stays one embedded string, as its SET is), and the lease
 * slot is there only where it pays: a value of SLOT_AT bytes or more carries
 * it from its write, so a lease rewrites only the header (SETRANGE, the value
 * never copied); a smaller one gets it from its first lease (the string
 * rewritten: a few dozen bytes) and keeps it until its next write. Real
 * redis-server. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "entry2_util.h"
#include "entry_io.h"

#define SLOT_AT 256 /* lua/write.lua */

static char *filled(size_t n) {
  char *v = malloc(n);
  memset(v, 'x', n);
  return v;
}

static int encoding_is(redisContext *r, const char *key, const char *want) {
  redisReply *rep = xft_cmd(r, "OBJECT ENCODING %s", key);
  int is = rep->type == REDIS_REPLY_STRING && strcmp(rep->str, want) == 0;
  freeReplyObject(rep);
  return is;
}

Test(entry2_size, a_16_byte_entry_is_one_embedded_string) {
  redisContext *r = xft_redis();
  xf_client *c = xft_client_format(xft_port(), 1, XF_ENTRY_STRING);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "size:16", 7, "0123456789abcdef", 16, &p), XF_OK);
  cr_expect_eq(xft_int(r, "STRLEN size:16"), 16 + 20, "value + s: a 20-byte header");
  cr_expect(encoding_is(r, "size:16", "embstr"), "one allocation, as a SET of 16 bytes");
  xf_client_close(c);
  redisFree(r);
}

/* MEMORY USAGE of an entry of n bytes against a SET PX of the same value
 * under a key of the same length: at most the header's 20 bytes more (for
 * 100 bytes: the next jemalloc class, 112 -> 128, not 160). */
static void costs_a_set_plus_its_header(size_t n) {
  redisContext *r = xft_redis();
  xf_client *c = xft_client_format(xft_port(), 1, XF_ENTRY_STRING);
  char *v = filled(n);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "size:xf", 7, v, n, &p), XF_OK);
  freeReplyObject(xft_cmd(r, "SET size:px %b PX 60000", v, n));
  long long xf = xft_int(r, "MEMORY USAGE size:xf"),
            px = xft_int(r, "MEMORY USAGE size:px");
  cr_expect(xf - px <= 20, "%zu B: xf_set %lld B, SET PX %lld B", n, xf, px);
  free(v);
  xf_client_close(c);
  redisFree(r);
}

Test(entry2_size, an_entry_costs_a_set_plus_its_header) {
  costs_a_set_plus_its_header(16);
  costs_a_set_plus_its_header(100);
}

/* Takes key's lease and releases it, counting the SETs and SETRANGEs the
 * lease ran; the value is kept. */
static void lease_once(redisContext *r, xf_client *c, const char *key, const char *v,
                       size_t n, long long *sets, long long *setranges) {
  long long s0 = xft_command_calls(r, "set"), r0 = xft_command_calls(r, "setrange");
  redisReply *rep = xft_cmd(r, "GETRANGE %s 8 13", key);
  int64_t e = 0; /* the expiry it read: a lease, not a newer value */
  for (int i = 0; i < 6; i++)
    e = e << 8 | (unsigned char)rep->str[i];
  freeReplyObject(rep);
  char token[40];
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(xft_entry_lease(c, key, strlen(key), 5000, e, token, &now, &won, &newer),
               XF_OK);
  cr_expect_eq(won, XF_LEASE_WON);
  *sets = xft_command_calls(r, "set") - s0;
  *setranges = xft_command_calls(r, "setrange") - r0;
  rep = xft_cmd(r, "GET %s", key);
  int flags = (unsigned char)rep->str[2];
  cr_expect_eq(flags, H_VALUE | H_S | H_LEASE | H_SLOT, "%s: %d", key, flags);
  size_t h = xft_hlen(flags);
  cr_expect(rep->len == h + n && memcmp(rep->str + h, v, n) == 0, "%s: value kept", key);
  freeReplyObject(rep);
  long long pttl = xft_int(r, "PTTL %s", key);
  cr_expect(pttl > 50000, "%s: its TTL kept (%lld)", key, pttl);
  cr_assert_eq(xft_entry_release(c, key, strlen(key), token), XF_OK);
  rep = xft_cmd(r, "GET %s", key);
  cr_expect_eq((unsigned char)rep->str[2], H_VALUE | H_S | H_SLOT, "%s: released", key);
  cr_expect(rep->len == xft_hlen(H_S | H_SLOT) + n, "%s: the slot stays", key);
  freeReplyObject(rep);
}

Test(entry2_size, a_lease_copies_a_small_value_once_and_a_big_one_never) {
  xft_server own; /* its command counts are this test's alone */
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  redisContext *r = xft_redis_port(own.port);
  xf_client *c = xft_client_format(own.port, 1, XF_ENTRY_STRING);
  xf_policy p = XF_POLICY_INIT;
  p.stale_ms = 60000;
  size_t sizes[] = {16, SLOT_AT - 1, SLOT_AT, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    char key[32], *v = filled(n);
    snprintf(key, sizeof key, "size:lease:%zu", n);
    cr_assert_eq(xf_set(c, key, strlen(key), v, n, &p), XF_OK);
    redisReply *rep = xft_cmd(r, "GETRANGE %s 2 2", key);
    int slot = ((unsigned char)rep->str[0] & H_SLOT) != 0;
    freeReplyObject(rep);
    cr_expect_eq(slot, n >= SLOT_AT, "%zu B: the slot from the write", n);
    long long sets, setranges;
    lease_once(r, c, key, v, n, &sets, &setranges);
    if (n >= SLOT_AT)
      cr_expect(sets == 0 && setranges == 1, "%zu B: in place (%lld SET, %lld SETRANGE)", n,
                sets, setranges);
    else
      cr_expect(sets == 1 && setranges == 0, "%zu B: rewritten (%lld SET, %lld SETRANGE)",
                n, sets, setranges);
    lease_once(r, c, key, v, n, &sets, &setranges);
    cr_expect(sets == 0 && setranges == 1, "%zu B, again: in place", n);
    free(v);
  }
  xf_client_close(c);
  redisFree(r);
  xft_server_stop(&own);
}
