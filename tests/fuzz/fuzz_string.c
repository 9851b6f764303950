/* Fuzz target: a format-2 entry string (src/core/entry_string.c) as a GET
 * gives it (the reader's value-first layout, xf__entry_string_copy) and as an
 * MGET element gives it (as on Redis), each through xf__entry_parse_string.
 *
 * The input: 6 bytes of the server's earliest time lo, 3 of the clock's
 * window (hi - lo), then the string's bytes. Both layouts must be judged
 * alike (a differential check: same code, same numbers, the same value
 * bytes); an accepted value is exactly the bytes past a header that starts
 * with the magic, within the reply (every byte read, so ASan sees a stray
 * pointer); times in the scripts' bounds; a header-only entry or a malformed
 * one has no times; xf__entry_take_value hands over the value's bytes. A
 * compressed value (flag 128) goes through xf__entry_decode with a 1 MiB cap:
 * a value of at most that many bytes, or a malformed miss, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "fuzz.h"
#include "reply.h"

#define MAX_DELTA_US ((int64_t)1 << 40)
#define MAX_SPAN_MS ((int64_t)1 << 41)
#define DECODE_CAP ((size_t)1 << 20)

static int in_range(int64_t v, int64_t min, int64_t max) { return v >= min && v <= max; }

/* A top-level string reply of s (rotated: laid out as the reader lays a GET's). */
static xf__reply *string_reply(const uint8_t *s, size_t len, int rotated) {
  xf__reply *r = calloc(1, sizeof *r);
  char *buf = malloc(len + 1);
  FUZZ_CHECK(r && buf);
  r->type = XF_REPLY_STRING;
  if (rotated)
    r->integer = xf__entry_string_copy(buf, (const char *)s, len);
  else {
    memcpy(buf, s, len);
    buf[len] = '\0';
  }
  r->str = buf;
  r->len = len;
  return r;
}

static unsigned touch(const char *p, size_t len) {
  unsigned sum = 0;
  for (size_t i = 0; i < len; i++)
    sum += (unsigned char)p[i];
  return sum;
}

/* The invariants of one parse of s (len bytes). */
static void check(int rc, const xf__entry *e, const uint8_t *s, size_t len, int64_t lo,
                  int64_t hi) {
  FUZZ_CHECK(rc == XF_OK || rc == XF_EWRONGTYPE);
  if (rc == XF_EWRONGTYPE) {
    FUZZ_CHECK(len == 0 || s[0] != 0xF8);
    FUZZ_CHECK(e->reply == NULL && e->value == NULL);
    return;
  }
  FUZZ_CHECK(len > 0 && s[0] == 0xF8);
  FUZZ_CHECK(e->now_ms == lo && e->now_late_ms == hi);
  FUZZ_CHECK(e->malformed == 0 || e->malformed == 1);
  if (!e->value) {
    FUZZ_CHECK(e->len == 0 && e->delta_us == 0 && e->expiry_ms == 0 &&
               e->remaining_ms == 0 && e->negative == 0);
    FUZZ_CHECK(e->tags == NULL && e->tags_len == 0); /* a record needs a value */
    FUZZ_CHECK(!e->malformed || e->lease_live == 0);
    return;
  }
  FUZZ_CHECK(!e->malformed);
  const xf__reply *r = e->reply;
  FUZZ_CHECK(e->value >= r->str && e->value + e->len <= r->str + r->len);
  /* 14 to 40 bytes, a tag record's length byte and bytes (at most 255), and
   * (versions 6 to 8) a validator record's, last */
  size_t hlen = len - e->len;
  FUZZ_CHECK(e->len <= len && hlen >= 14 && hlen <= 40 + 2 * (1 + 255));
  FUZZ_CHECK(memcmp(e->value, s + hlen, e->len) == 0);
  size_t vrec = 0; /* the validator record's bytes */
  if (e->validator) {
    vrec = 1 + e->validator_len;
    FUZZ_CHECK(s[1] >= 6 && s[1] <= 8 && e->validator_len > 0 && vrec < hlen);
    FUZZ_CHECK((const char *)e->validator >= r->str &&
               (const char *)e->validator + e->validator_len <= r->str + r->len);
    FUZZ_CHECK(s[hlen - vrec] == e->validator_len &&
               memcmp(e->validator, s + hlen - e->validator_len, e->validator_len) == 0);
  } else {
    FUZZ_CHECK(e->validator_len == 0 && s[1] < 6);
  }
  size_t tags_end = hlen - vrec;
  if (e->tags) { /* the header's last bytes before the validator, inside the reply */
    FUZZ_CHECK(e->tags_len > 0 && e->tags_len < tags_end && (s[2] & 64));
    FUZZ_CHECK((const char *)e->tags >= r->str &&
               (const char *)e->tags + e->tags_len <= r->str + r->len);
    FUZZ_CHECK(memcmp(e->tags, s + tags_end - e->tags_len, e->tags_len) == 0);
  } else {
    FUZZ_CHECK(e->tags_len == 0 &&
               (tags_end <= 40 || ((s[2] & 64) && s[tags_end - 1] == 0)));
  }
  (void)touch(e->value, e->len);
  FUZZ_CHECK(in_range(e->delta_us, 0, MAX_DELTA_US));
  FUZZ_CHECK(in_range(e->expiry_ms, lo - MAX_SPAN_MS, lo + MAX_SPAN_MS));
  FUZZ_CHECK(e->remaining_ms == e->expiry_ms - hi);
  FUZZ_CHECK(e->lease_live == 0 || e->lease_live == 1);
  FUZZ_CHECK(e->negative == 0 || e->negative == 1);
  FUZZ_CHECK(!e->zstd || ((s[2] & 128) && (s[1] == 5 || s[1] == 8) && !e->negative));
}

/* The decoded value of a compressed entry: within the cap, or a miss. */
static void check_decode(xf__runtime *rt, xf__entry *e) {
  int was = e->zstd;
  int rc = xf__entry_decode(rt, e, DECODE_CAP);
  FUZZ_CHECK(rc == XF_OK || rc == XF_ENOMEM);
  FUZZ_CHECK(e->zstd == 0);
  if (rc == XF_OK && was && e->value) {
    FUZZ_CHECK(e->len <= DECODE_CAP && e->value[e->len] == '\0');
    (void)touch(e->value, e->len);
    if (e->tags)
      (void)touch((const char *)e->tags, e->tags_len);
  } else if (rc == XF_OK && was) {
    FUZZ_CHECK(e->malformed == 1 && e->len == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size};
  int64_t lo = 0, window = 0;
  for (int i = 0; i < 6; i++)
    lo = lo << 8 | fuzz_u8(&in);
  for (int i = 0; i < 3; i++)
    window = window << 8 | fuzz_u8(&in);
  int64_t hi = lo + window;
  const uint8_t *s = in.p;
  size_t len = in.n;
  xf_client *c = fuzz_client();
  xf__entry got, mget;
  int rc = xf__entry_parse_string(&c->rt, string_reply(s, len, 1), lo, hi, &got);
  check(rc, &got, s, len, lo, hi);
  int rc2 = xf__entry_parse_string(&c->rt, string_reply(s, len, 0), lo, hi, &mget);
  check(rc2, &mget, s, len, lo, hi);
  FUZZ_CHECK(rc == rc2);
  if (rc == XF_OK) { /* GET and MGET judge an entry alike */
    FUZZ_CHECK(got.malformed == mget.malformed && got.lease_live == mget.lease_live &&
               got.negative == mget.negative && got.delta_us == mget.delta_us &&
               got.expiry_ms == mget.expiry_ms && got.remaining_ms == mget.remaining_ms &&
               got.len == mget.len && !got.value == !mget.value &&
               got.tags_len == mget.tags_len && got.zstd == mget.zstd);
    if (got.tags_len)
      FUZZ_CHECK(memcmp(got.tags, mget.tags, got.tags_len) == 0);
    if (got.zstd) {
      check_decode(&c->rt, &got);
      check_decode(&c->rt, &mget);
      FUZZ_CHECK(got.len == mget.len && !got.value == !mget.value);
      if (got.value)
        FUZZ_CHECK(memcmp(got.value, mget.value, got.len) == 0);
      if (got.value) {
        size_t n = got.len;
        char *v = xf__entry_take_value(&got);
        FUZZ_CHECK(v && v[n] == '\0');
        free(v);
      }
    } else if (got.value) {
      FUZZ_CHECK(memcmp(got.value, mget.value, got.len) == 0);
      size_t n = got.len;
      char *v = xf__entry_take_value(&got);
      FUZZ_CHECK(v && v[n] == '\0' && memcmp(v, s + (len - n), n) == 0);
      free(v);
    }
    xf__entry_free(&got);
    xf__entry_free(&mget);
  }
  return 0;
}
