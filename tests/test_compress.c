/* Compressed values (policy.compress_min_bytes): a value that zstd makes
 * smaller is written as a zstd frame under header version 5, flag 128, and
 * read back as the value on every driver (op_drivers.c) and the batch; a
 * small or incompressible value stays a plain version-3 entry; the previous
 * version's reader (tests/data/read_v4.lua) judges a compressed entry
 * malformed and never serves its frame; a corrupt or hostile frame is a
 * malformed miss, recomputed. Real redis-server. No timing assertions. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.h"
#include "near_env.h"
#include "op_drivers.h"

#define BIG (200 * 1024)

static void del(const char *key) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  redisFree(r);
}

/* A 200 KiB JSON document of records (repetitive as real JSON is). */
static const char *big_json(void) {
  static char buf[BIG + 256];
  if (buf[0])
    return buf;
  size_t n = 0;
  n += (size_t)snprintf(buf + n, sizeof buf - n, "[");
  for (int i = 0; n < BIG - 128; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n,
                          "{\"id\":%d,\"name\":\"user %d\",\"score\":%d,\"active\":%s},", i,
                          i * 7919 % 100003, i * 31 % 977, i % 3 ? "true" : "false");
  buf[n - 1] = ']';
  return buf;
}

static xf_policy compressing(void) {
  xf_policy p = XF_POLICY_INIT;
  p.compress_min_bytes = 1024;
  return p;
}

static xft_drv *open_drv(int driver) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  return xft_drv_open(driver, &o);
}

/* The entry's header bytes 1 and 2 (version, flags) and its length. */
static void header(const char *key, int *version, int *flags, long long *len) {
  redisContext *r = xft_redis();
  redisReply *h = xft_cmd(r, "GETRANGE %s 0 2", key), *n = xft_cmd(r, "STRLEN %s", key);
  cr_assert_eq(h->type, REDIS_REPLY_STRING);
  cr_assert_eq(h->len, 3);
  *version = (unsigned char)h->str[1];
  *flags = (unsigned char)h->str[2];
  *len = n->integer;
  freeReplyObject(h), freeReplyObject(n);
  redisFree(r);
}

static void expect_big(int rc, xf_value *v, const char *what) {
  cr_expect_eq(rc, XF_OK, "%s: %s", what, xf_strerror(rc));
  if (rc == XF_OK) {
    cr_expect_eq(v->len, strlen(big_json()), "%s: %zu bytes", what, v->len);
    cr_expect(v->len == strlen(big_json()) && memcmp(v->data, big_json(), v->len) == 0,
              "%s: the value's bytes", what);
  }
  xf_value_free(v);
}

ParameterizedTestParameters(compress, a_large_value_is_written_compressed_and_read_as_is) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

ParameterizedTest(int *driver, compress,
                  a_large_value_is_written_compressed_and_read_as_is) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 2 only: a hash entry is written plain");
  char key[64], set_key[64];
  snprintf(key, sizeof key, "z:%s", xft_driver_names[*driver]);
  snprintf(set_key, sizeof set_key, "zs:%s", xft_driver_names[*driver]);
  del(key), del(set_key);
  xf_policy p = compressing();
  xft_drv *a = open_drv(*driver), *b = open_drv(*driver);
  xft_op_loader l = {.value = big_json()};
  xf_value v;
  expect_big(xft_drv_get_or_compute(a, key, &p, &l, &v), &v, "the load");
  int version, flags;
  long long len;
  header(key, &version, &flags, &len);
  cr_expect_eq(version, 5, "version %d", version);
  cr_expect_eq(flags & 128, 128, "flags %d", flags);
  cr_expect_lt(len * 4, (long long)strlen(big_json()), "%lld bytes on Redis", len);
  expect_big(xft_drv_get_or_compute(b, key, &p, &l, &v), &v, "another handle's hit");
  cr_expect_eq(l.calls, 1, "loads: %d", l.calls);
  xf_policy plain = XF_POLICY_INIT; /* reading needs no option */
  expect_big(xft_drv_get_or_compute(b, key, &plain, &l, &v), &v, "a plain policy's hit");
  expect_big(xft_drv_get(b, key, &v), &v, "a get");
  cr_expect_eq(xft_drv_set(a, set_key, big_json(), &p), XF_OK, "%s", xft_drv_errmsg(a));
  header(set_key, &version, &flags, &len);
  cr_expect_eq(version, 5, "a set: version %d", version);
  expect_big(xft_drv_get(b, set_key, &v), &v, "a set's value");
  if (xft_drv_has_batch(*driver)) {
    const char *keys[] = {key, set_key};
    xf_value vs[2];
    int rcs[2];
    cr_expect_eq(xft_drv_many(b, 2, keys, &p, &l, vs, rcs), XF_OK);
    expect_big(rcs[0], &vs[0], "the batch's first");
    expect_big(rcs[1], &vs[1], "the batch's second");
  }
  cr_expect_eq(l.calls, 1, "loads: %d", l.calls);
  xft_drv_close(a), xft_drv_close(b);
}

/* A value below compress_min_bytes, or one zstd cannot make smaller, is a
 * plain entry: version 3, its bytes as they are. */
Test(compress, a_small_or_incompressible_value_stays_plain) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 2 only");
  del("z:small"), del("z:random");
  xf_client *c = xft_client(0);
  xf_policy p = compressing();
  char small[65], noise[4097];
  memset(small, 'a', 64); /* compressible, but below the threshold */
  small[64] = '\0';
  srand(7);
  for (int i = 0; i < 4096; i++)
    noise[i] = (char)(1 + rand() % 255);
  noise[4096] = '\0';
  cr_assert_eq(xf_set(c, "z:small", 7, small, 64, &p), XF_OK);
  cr_assert_eq(xf_set(c, "z:random", 8, noise, 4096, &p), XF_OK);
  int version, flags;
  long long len;
  header("z:small", &version, &flags, &len);
  cr_expect_eq(version, 3);
  cr_expect_eq(flags & 128, 0);
  header("z:random", &version, &flags, &len);
  cr_expect_eq(version, 3, "incompressible: version %d", version);
  cr_expect_eq(flags & 128, 0);
  xf_value v;
  cr_assert_eq(xf_get(c, "z:random", 8, &v), XF_OK);
  cr_expect(v.len == 4096 && memcmp(v.data, noise, 4096) == 0);
  xf_value_free(&v);
  xf_client_close(c);
}

static char *read_file(const char *path) {
  FILE *fp = fopen(path, "rb");
  cr_assert(fp, "%s", path);
  static char src[16384];
  size_t n = fread(src, 1, sizeof src - 1, fp);
  fclose(fp);
  src[n] = '\0';
  return src;
}

/* The previous version's reader (its read script, kept in tests/data) judges
 * a compressed entry malformed: a miss, its frame never served as a value;
 * a plain entry written by this version it reads as before. */
Test(compress, the_previous_versions_reader_judges_a_compressed_entry_malformed) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 2 only");
  del("z:v5"), del("z:v3");
  xf_client *c = xft_client(0);
  xf_policy p = compressing();
  cr_assert_eq(xf_set(c, "z:v5", 4, big_json(), strlen(big_json()), &p), XF_OK);
  cr_assert_eq(xf_set(c, "z:v3", 4, "plain", 5, &p), XF_OK);
  xf_client_close(c);
  const char *src = read_file(XFT_DATA_DIR "/read_v4.lua");
  redisContext *r = xft_redis();
  redisReply *old = xft_cmd(r, "EVAL %s 1 z:v5", src);
  cr_assert_eq(old->type, REDIS_REPLY_ARRAY, "%s", old->str ? old->str : "");
  cr_assert_eq(old->elements, 8);
  cr_expect_eq(old->element[0]->type, REDIS_REPLY_NIL, "no value served");
  cr_expect_eq(old->element[4]->integer, 1, "malformed");
  freeReplyObject(old);
  old = xft_cmd(r, "EVAL %s 1 z:v3", src);
  cr_assert_eq(old->type, REDIS_REPLY_ARRAY);
  cr_expect_eq(old->element[0]->type, REDIS_REPLY_STRING, "a plain entry: its value");
  freeReplyObject(old);
  redisFree(r);
}

/* Damages key's compressed value (a valid entry, version 5): how. */
enum { DAMAGE_BODY, DAMAGE_TRUNCATE, DAMAGE_HUGE_SIZE };

static void damage(const char *key, int how) {
  redisContext *r = xft_redis();
  redisReply *s = xft_cmd(r, "GET %s", key);
  cr_assert_eq(s->type, REDIS_REPLY_STRING);
  size_t hlen = 20; /* a plain value's header (entry_string.c), a slot past 256 bytes */
  int flags = (unsigned char)s->str[2];
  hlen = 14 + (flags & 8 ? 6 : 0) + (flags & 16 ? 6 : 0) + (flags & 32 ? 14 : 0);
  char *b = malloc(s->len);
  memcpy(b, s->str, s->len);
  size_t len = s->len;
  if (how == DAMAGE_BODY)
    for (size_t i = hlen + 32; i < len - 8; i += 97)
      b[i] ^= 0x5a;
  else if (how == DAMAGE_TRUNCATE)
    len = hlen + (len - hlen) / 2;
  else { /* a frame that declares 2^40 bytes (8-byte size, single segment) */
    static const unsigned char frame[] = {0x28, 0xb5, 0x2f, 0xfd, 0xe0, 0, 0, 0,
                                          0,    0,    1,    0,    0,    1, 0, 0};
    memcpy(b + hlen, frame, sizeof frame);
    len = hlen + sizeof frame;
  }
  freeReplyObject(xft_cmd(r, "SET %s %b KEEPTTL", key, b, len));
  free(b);
  freeReplyObject(s);
  redisFree(r);
}

ParameterizedTestParameters(compress, a_corrupt_frame_is_a_malformed_miss_recomputed) {
  static int drivers[] = XFT_ALL_DRIVERS;
  return cr_make_param_array(int, drivers, XFT_NDRIVERS);
}

/* A damaged frame (its blocks, cut short, or declaring more than
 * max_value_len) is never served nor decoded past the cap: the call loads
 * and rewrites the entry, and counts it malformed. */
ParameterizedTest(int *driver, compress, a_corrupt_frame_is_a_malformed_miss_recomputed) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 2 only");
  for (int how = DAMAGE_BODY; how <= DAMAGE_HUGE_SIZE; how++) {
    char key[64];
    snprintf(key, sizeof key, "zc:%s:%d", xft_driver_names[*driver], how);
    del(key);
    xf_client *w = xft_client(0);
    xf_policy p = compressing();
    cr_assert_eq(xf_set(w, key, strlen(key), big_json(), strlen(big_json()), &p), XF_OK);
    xf_client_close(w);
    damage(key, how);
    xft_drv *d = open_drv(*driver);
    xft_op_loader l = {.value = big_json()};
    xf_value v;
    expect_big(xft_drv_get_or_compute(d, key, &p, &l, &v), &v, "the recompute");
    cr_expect_eq(l.calls, 1, "damage %d: loads %d", how, l.calls);
    xf_stats st;
    xft_drv_stats(d, &st);
    cr_expect_geq(st.malformed, 1, "damage %d: malformed %llu", how,
                  (unsigned long long)st.malformed);
    expect_big(xft_drv_get(d, key, &v), &v, "rewritten");
    xft_drv_close(d);
  }
}

/* ---- a fleet on one hot key -------------------------------------------------- */

static size_t every_other_compresses(int i) { return i % 2 ? 0 : 1024; }

static xf_client *fleet_client(int i, void *ud) {
  (void)i, (void)ud;
  return xft_client(0);
}

static const char *fleet_label(int i) {
  return i % 2 ? "plain writer" : "compressing writer";
}

/* Members that compress and members that do not (a fleet turning it on)
 * share one hot key of a 200 KiB value: each reads what the other wrote,
 * and the fleet still loads once per episode (fleet.h). */
Test(compress, a_mixed_fleet_on_one_hot_key_loads_once_per_episode, .timeout = 60) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 2 only");
  del("z:fleet");
  xft_fleet_value(big_json(), strlen(big_json()), every_other_compresses);
  xft_fleet_run("z:fleet", 6, 1500, 3, fleet_client, NULL, fleet_label);
}

/* The near cache keeps the decoded value: its hits serve the value's bytes
 * (a near hit sends nothing and decodes nothing: decoding is done on a reply
 * from Redis, before the near cache keeps it). 16 KiB of the document: an
 * entry must fit a shard of the near cache's 1 MiB. */
Test(compress, the_near_cache_serves_the_decoded_value) {
  if (xft_entry_format() == XF_ENTRY_HASH)
    cr_skip_test("format 2 only");
  near_env e;
  near_env_open(&e);
  xf_policy p = compressing();
  const size_t len = 16 * 1024;
  cr_assert_eq(xf_set(e.other, "z:near", 6, big_json(), len, &p), XF_OK);
  redisReply *h = xft_cmd(e.r, "GETRANGE z:near 1 1");
  cr_expect_eq(h->str[0], 5, "compressed: version %d", h->str[0]);
  freeReplyObject(h);
  int64_t until = xft_now_ms() + BOUND_MS; /* the first reads fill the cache */
  while (near_hits(e.c) == 0 && xft_now_ms() < until) {
    xf_value v;
    cr_assert_eq(xf_get(e.c, "z:near", 6, &v), XF_OK);
    cr_expect(v.len == len && memcmp(v.data, big_json(), len) == 0, "a read's bytes");
    xf_value_free(&v);
  }
  cr_assert_gt(near_hits(e.c), 0, "no near hit within %d ms", BOUND_MS);
  uint64_t before = near_hits(e.c);
  for (int i = 0; i < 5; i++) {
    xf_value v;
    cr_assert_eq(xf_get(e.c, "z:near", 6, &v), XF_OK);
    cr_expect(v.len == len && memcmp(v.data, big_json(), len) == 0, "a near hit's bytes");
    xf_value_free(&v);
  }
  cr_expect_eq(near_hits(e.c), before + 5, "near hits %llu",
               (unsigned long long)(near_hits(e.c) - before));
  near_env_close(&e);
}
