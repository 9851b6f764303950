/* Fuzz target: bytes from Redis -> hiredis reader -> every entry-protocol
 * parser (read, lease incl. the "newer value" form, write, release, delete,
 * and read_many's split, each part then read-parsed).
 *
 * The input is raw RESP. Each parser gets every reply the reader completes
 * (at most MAX_REPLIES per input). After a successful parse the harness
 * checks what the flow relies on (fields in range and consistent with each
 * other, the value pointing into the reply), so a parser that accepts a reply
 * the scripts cannot produce is caught, not only one that crashes. A read
 * reply of the right shape whose numbers no entry has is a malformed miss
 * (counted), never XF_EPROTO: no entry may brick its key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "fuzz.h"
#include "reader.h"
#include "reply.h"

#define MAX_REPLIES 4
#define MAX_PARTS 64
#define MAX_DELTA_US ((int64_t)1 << 40)
#define MAX_SPAN_MS ((int64_t)1 << 41)
#define MAX_CLOCK_MS ((int64_t)1 << 50)

enum {
  P_READ,
  P_LEASE,
  P_WRITE,
  P_RELEASE,
  P_DELETE,
  P_READ_MANY,
  P_READ_MANY_MISCOUNTED, /* split for one key more than the reply has */
  P_COUNT
};

static int in_range(int64_t v, int64_t min, int64_t max) { return v >= min && v <= max; }

/* Reads every byte of the value: ASan flags a pointer or length that strays
 * outside the reply. */
static unsigned touch(const char *p, size_t len) {
  unsigned sum = 0;
  for (size_t i = 0; i < len; i++)
    sum += (unsigned char)p[i];
  return sum;
}

/* Whether r's elements at.. have the read reply's shape: eight, the value a
 * bulk string or nil, six integers, the tag record a bulk string; then
 * optionally the entry's start s (an integer) and after it its validator (a
 * bulk string). Whatever their values, such a reply must parse (a malformed
 * entry is a miss, never XF_EPROTO). */
static int read_shaped(const xf__reply *r, size_t at) {
  if (r->type != XF_REPLY_ARRAY || r->elements < at + 8 || r->elements > at + 10)
    return 0;
  int t = r->element[at]->type;
  if (t != XF_REPLY_STRING && t != XF_REPLY_NIL)
    return 0;
  for (size_t i = at + 1; i < at + 7; i++)
    if (r->element[i]->type != XF_REPLY_INTEGER)
      return 0;
  if (r->elements > at + 8 && r->element[at + 8]->type != XF_REPLY_INTEGER)
    return 0;
  if (r->elements > at + 9 && r->element[at + 9]->type != XF_REPLY_STRING)
    return 0;
  return r->element[at + 7]->type == XF_REPLY_STRING;
}

/* A malformed entry: a miss with nothing of the reply's numbers but the lease
 * flag and a clock in range. */
static void check_malformed(const xf__reply *r, size_t at, const xf__entry *e) {
  FUZZ_CHECK(e->value == NULL && e->len == 0 && e->negative == 0);
  FUZZ_CHECK(e->tags == NULL && e->tags_len == 0);
  FUZZ_CHECK(e->delta_us == 0 && e->remaining_ms == 0 && e->expiry_ms == 0);
  FUZZ_CHECK(in_range(e->now_ms, 0, MAX_CLOCK_MS));
  FUZZ_CHECK(in_range(e->nothing_ms, 0, MAX_CLOCK_MS));
  FUZZ_CHECK(e->lease_live == (r->element[at + 3]->integer == 1));
}

/* The invariants of an entry parsed from elements at.. of r. */
static void check_entry(const xf__reply *r, size_t at, const xf__entry *e) {
  FUZZ_CHECK(e->reply == r);
  FUZZ_CHECK(read_shaped(r, at));
  FUZZ_CHECK(e->malformed == 0 || e->malformed == 1);
  if (e->malformed) {
    check_malformed(r, at, e);
    return;
  }
  const xf__reply *v = r->element[at];
  if (e->value) {
    FUZZ_CHECK(v->type == XF_REPLY_STRING);
    FUZZ_CHECK(e->value == v->str && e->len == v->len);
    (void)touch(e->value, e->len);
    /* read.lua and lease.lua: remaining = e - now, exactly. */
    FUZZ_CHECK(e->expiry_ms - e->now_ms == e->remaining_ms);
    /* The tag record: exactly the reply's last string, none when empty. */
    const xf__reply *t = r->element[at + 7];
    FUZZ_CHECK(e->tags_len == t->len);
    FUZZ_CHECK(t->len ? e->tags == (const unsigned char *)t->str : e->tags == NULL);
    (void)touch((const char *)e->tags, e->tags_len);
    /* The validator: the tenth string when not empty, else none. */
    const xf__reply *x = r->elements > at + 9 ? r->element[at + 9] : NULL;
    FUZZ_CHECK(x && x->len ? e->validator == (const unsigned char *)x->str &&
                                 e->validator_len == x->len
                           : e->validator == NULL && e->validator_len == 0);
  } else {
    FUZZ_CHECK(v->type == XF_REPLY_NIL && e->len == 0);
    /* A miss is {false, 0, 0, live, 0, now} (1 in place of the 0: malformed). */
    FUZZ_CHECK(e->delta_us == 0 && e->remaining_ms == 0 && e->expiry_ms == 0);
    FUZZ_CHECK(e->negative == 0 && r->element[at + 4]->integer == 0);
    FUZZ_CHECK(e->tags == NULL && r->element[at + 7]->len == 0); /* no record */
  }
  FUZZ_CHECK(in_range(e->delta_us, 0, MAX_DELTA_US));
  FUZZ_CHECK(in_range(e->remaining_ms, -MAX_SPAN_MS, MAX_SPAN_MS));
  FUZZ_CHECK(in_range(e->expiry_ms, 0, MAX_CLOCK_MS));
  FUZZ_CHECK(in_range(e->now_ms, 0, MAX_CLOCK_MS));
  /* The marker of a load that found nothing: the reply's, a clock in range. */
  FUZZ_CHECK(e->nothing_ms == r->element[at + 6]->integer);
  FUZZ_CHECK(in_range(e->nothing_ms, 0, MAX_CLOCK_MS));
  FUZZ_CHECK(e->lease_live == 0 || e->lease_live == 1);
  FUZZ_CHECK(e->negative == 0 || e->negative == 1);
  /* Booleans are 0 or 1 in the reply, never "anything non-zero". */
  FUZZ_CHECK(r->element[at + 3]->integer == e->lease_live);
  /* A value's fifth field: 1 negative, 2 a zstd frame (never both). */
  FUZZ_CHECK(!e->value || r->element[at + 4]->integer == (e->zstd ? 2 : e->negative));
  FUZZ_CHECK(!(e->zstd && e->negative));
}

static void check_failed(xf_client *c, int rc, const xf__entry *e) {
  FUZZ_CHECK(rc == XF_EPROTO);
  FUZZ_CHECK(e->reply == NULL && e->value == NULL && e->len == 0);
  FUZZ_CHECK(xf_errmsg(c)[0] != '\0');
}

static void parse_read(xf_client *c, xf__reply *r) {
  xf__entry e;
  int shaped = read_shaped(r, 0);
  xf_stats before, after;
  xf_client_stats(c, &before);
  int rc = xf__entry_parse_read(&c->rt, r, &e);
  if (rc != XF_OK) {
    FUZZ_CHECK(!shaped); /* bad values are a malformed miss, never an error */
    check_failed(c, rc, &e);
    return;
  }
  xf_client_stats(c, &after);
  FUZZ_CHECK(after.malformed == before.malformed + (uint64_t)e.malformed);
  check_entry(r, 0, &e);
  xf__entry_free(&e);
  FUZZ_CHECK(e.reply == NULL);
}

static void parse_lease(xf_client *c, xf__reply *r) {
  xf__entry newer;
  int64_t now_ms = -12345;
  xf__lease_result result = (xf__lease_result)-1;
  int rc = xf__entry_parse_lease(&c->rt, r, &now_ms, &result, &newer);
  if (rc != XF_OK) {
    check_failed(c, rc, &newer);
    return;
  }
  FUZZ_CHECK(result == XF_LEASE_LOST || result == XF_LEASE_WON ||
             result == XF_LEASE_NEWER || result == XF_LEASE_NOTHING ||
             result == XF_LEASE_FAILSAFE);
  FUZZ_CHECK(in_range(now_ms, 0, MAX_CLOCK_MS));
  if (result != XF_LEASE_NEWER) {
    FUZZ_CHECK(newer.reply == NULL && newer.value == NULL);
    return; /* r was freed: LeakSanitizer says if not */
  }
  check_entry(r, 2, &newer);
  /* lease.lua answers "newer" only with a valid value, no live lease, dated
   * by the same clock reading: the flow serves it as a hit. */
  FUZZ_CHECK(!newer.malformed && newer.value != NULL && newer.remaining_ms > 0);
  FUZZ_CHECK(newer.lease_live == 0 && newer.now_ms == now_ms);
  xf__entry_free(&newer);
}

static void parse_int(xf_client *c, xf__reply *r, int which) {
  int is_int = r->type == XF_REPLY_INTEGER;
  long long raw = is_int ? r->integer : 0;
  int v = -7, rc;
  rc = xf__entry_parse_int(&c->rt, r,
                           which == P_WRITE     ? "write"
                           : which == P_RELEASE ? "release"
                                                : "delete",
                           &v);
  if (rc != XF_OK) {
    FUZZ_CHECK(rc == XF_EPROTO && xf_errmsg(c)[0] != '\0');
    return;
  }
  /* The scripts answer 0 or 1; nothing else may be taken for either. */
  FUZZ_CHECK(is_int && (raw == 0 || raw == 1));
  FUZZ_CHECK(v == 0 || v == 1);
  FUZZ_CHECK(v == raw);
}

/* read_many's reply split for as many keys as it has elements (and for one
 * more): each part then goes through the read parser, as the flow gets it. */
static void parse_read_many(xf_client *c, xf__reply *r, size_t extra) {
  xf__reply *parts[MAX_PARTS + 1];
  size_t n = r->type == XF_REPLY_ARRAY ? r->elements + extra : 1 + extra;
  if (n > MAX_PARTS) {
    xf__reply_free(r);
    return;
  }
  int was_array = r->type == XF_REPLY_ARRAY && r->elements == n;
  int rc = xf__entry_split_read_many(&c->rt, r, n, parts);
  if (rc != XF_OK) {
    FUZZ_CHECK(rc == XF_EPROTO && xf_errmsg(c)[0] != '\0');
    FUZZ_CHECK(!was_array);
    for (size_t i = 0; i < n; i++)
      FUZZ_CHECK(parts[i] == NULL);
    return;
  }
  FUZZ_CHECK(was_array);
  for (size_t i = 0; i < n; i++) {
    FUZZ_CHECK(parts[i] != NULL);
    if (parts[i]->type == XF_REPLY_ERROR)
      xf__reply_free(parts[i]); /* the flow's error path, not the parser's */
    else
      parse_read(c, parts[i]);
  }
}

static void parse(xf_client *c, xf__reply *r, int which) {
  if (which == P_READ_MANY || which == P_READ_MANY_MISCOUNTED)
    parse_read_many(c, r, which == P_READ_MANY_MISCOUNTED);
  else if (which == P_READ)
    parse_read(c, r);
  else if (which == P_LEASE)
    parse_lease(c, r);
  else
    parse_int(c, r, which);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_client *c = fuzz_client();
  for (int which = 0; which < P_COUNT; which++) {
    redisReader *rd = xf__reader_create();
    FUZZ_CHECK(rd != NULL);
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
      for (int n = 0; n < MAX_REPLIES; n++) {
        void *reply = NULL;
        if (xf__reader_get_reply(rd, &reply) != REDIS_OK || !reply)
          break;
        parse(c, reply, which);
      }
    }
    redisReaderFree(rd);
  }
  return 0;
}
