/* Format 2, the string entry, on the hit path: one GET (a batch: one MGET per
 * node) reads the header and the value at once, no script. The header is
 * judged here as lua/entry_read.lua judges it (entry2), with the server's
 * time known only within [lo, hi] (clock.h), taking the same conservative
 * side as entry_fields.c: remaining life counted from hi, a lease live only
 * when its deadline is past hi. The value is not copied: it points into the
 * reply, past the header.
 *
 * The header (version 3; integers big-endian): a fixed part, then the
 * optional fields its flags announce, in this order, each only when flagged:
 *   0 magic 0xF8 (never in UTF-8 text)   1 version 3   2 flags
 *   3 d (5 bytes, us: below 2^40, the scripts' bound, by construction)   8 e (6, ms)
 *   14.. s (6, ms; flag 8)   f (6, ms; flag 16)   the lease slot (flag 32): deadline
 *   (6, ms) and token id (8)
 * flags: 1 value, 2 negative, 4 lease (held: the slot's fields are one), 8 s, 16 f,
 * 32 slot, 64 tags; a lease needs the slot, a slot without a lease is zero, d and e
 * are zero without a value, and only an entry with a value has bytes past the header
 * or a tag record. A plain value's header is 20 bytes. Version 4 is version 3 with
 * flag 64: after the other fields, the tag record's length (1 byte) and the record
 * (flow_tags.c; a version-3 reader judges it malformed). Version 5 is version 3 or 4
 * with flag 128: the value is a zstd frame (codec.h), never with flag 2; a reader
 * of versions 3 and 4 only judges it malformed (a miss), never serves the frame
 * as the value. Versions 6, 7 and 8 are versions 3, 4 and 5 with a validator
 * record last (after the tag record), only with a value: its length (1 byte,
 * 1 to 255) and its bytes (xf_sink_validator); a reader of versions 3 to 5
 * judges it malformed (a miss). A string whose first byte is not
 * the magic is not an entry at all: the call fails with XF_EWRONGTYPE and leaves it
 * untouched, as for a list; another version (2: the unreleased 40-byte layout) is
 * malformed: a miss, rewritten. */
#include <string.h>

#include "entry.h"
#include "reply.h"

enum {
  F_VALUE = 1,
  F_NEGATIVE = 2,
  F_LEASE = 4,
  F_S = 8,
  F_F = 16,
  F_SLOT = 32,
  F_TAGS = 64,
  F_ZSTD = 128,
  F_ALL = 255
};

#define MAGIC 0xF8
#define VERSION 3
#define VERSION_TAGS 4
#define VERSION_ZSTD 5
#define VALIDATED 3 /* a version plus this: the same with a validator record */
#define FIXED 14    /* magic, version, flags, d, e */
#define MAX_SPAN_MS ((int64_t)1 << 41)
#define DAY_MS 86400000

void xf__entry_get_cmd(xf__cmd *cmd, const char *key, size_t keylen) {
  xf__cmd_begin(cmd, key, keylen);
  cmd->argc = 2;
  cmd->argv[0] = "GET";
  cmd->lens[0] = 3;
  cmd->argv[1] = key;
  cmd->lens[1] = keylen;
}

void xf__entry_mget_cmd(xf__cmd *cmd, size_t nkeys, const char *const *keys,
                        const size_t *keylens) {
  xf__cmd_begin(cmd, keys[0], keylens[0]);
  cmd->argc = 1;
  cmd->argv[0] = "MGET";
  cmd->lens[0] = 4;
  cmd->more_argc = nkeys;
  cmd->more_argv = keys;
  cmd->more_lens = keylens;
}

/* The version a header's flags 64 and 128 call for, by flags >> 6. */
static const unsigned char VERSION_OF[4] = {VERSION, VERSION_TAGS, VERSION_ZSTD,
                                            VERSION_ZSTD};

static int version_ok(const unsigned char *h) {
  return h[1] == VERSION_OF[h[2] >> 6] || h[1] == VERSION_OF[h[2] >> 6] + VALIDATED;
}

/* Whether the header h (of a version_ok) has a validator record. */
static int validated(const unsigned char *h) { return h[1] > VERSION_ZSTD; }

/* How long the header of the string src (len bytes) is, as its flags and
 * version say (unknown bits ignored); 0 when it is shorter than that. */
static size_t header_len(const unsigned char *src, size_t len) {
  if (len < FIXED)
    return 0;
  int flags = src[2];
  size_t n =
      FIXED + (flags & F_S ? 6 : 0) + (flags & F_F ? 6 : 0) + (flags & F_SLOT ? 14 : 0);
  if (flags & F_TAGS)
    n = len > n ? n + 1 + src[n] : 0;
  if (n && validated(src))
    n = len > n ? n + 1 + src[n] : 0;
  return len >= n ? n : 0;
}

long long xf__entry_string_copy(char *dst, const char *src, size_t len) {
  dst[len] = '\0';
  const unsigned char *u = (const unsigned char *)src;
  size_t hlen = header_len(u, len);
  if (!hlen || u[0] != MAGIC || !version_ok(u)) {
    memcpy(dst, src, len);
    return 0;
  }
  size_t vlen = len - hlen;
  memcpy(dst, src + hlen, vlen);
  memcpy(dst + vlen, src, hlen);
  return (long long)hlen;
}

/* n is a constant at each use: the loop unrolls (a hit reads two or three
 * of these). */
static inline __attribute__((always_inline)) int64_t be(const unsigned char *p, int n) {
  int64_t v = 0;
#pragma GCC unroll 8
  for (int i = 0; i < n; i++)
    v = v << 8 | p[i];
  return v;
}

static int all_zero(const unsigned char *p, int n) {
  for (int i = 0; i < n; i++)
    if (p[i])
      return 0;
  return 1;
}

/* Whether the header h (hlen bytes, as its flags say) of a string of len
 * bytes is as xfetch writes it; fills out's numbers as it goes. */
static int header_ok(const unsigned char *h, size_t hlen, size_t len, int64_t lo,
                     int64_t hi, xf__entry *out) {
  int flags = h[2];
  int has_value = flags & F_VALUE;
  if (h[0] != MAGIC || !version_ok(h) || (flags & ~F_ALL) ||
      ((flags & (F_NEGATIVE | F_TAGS | F_ZSTD)) && !has_value) ||
      (flags & (F_ZSTD | F_NEGATIVE)) == (F_ZSTD | F_NEGATIVE) ||
      ((flags & F_LEASE) && !(flags & F_SLOT)) || (!has_value && len > hlen))
    return 0;
  int64_t d = be(h + 3, 5), e = be(h + 8, 6), s = 0, f = 0, deadline = 0;
  const unsigned char *at = h + FIXED;
  if (flags & F_S)
    s = be(at, 6), at += 6;
  if (flags & F_F)
    f = be(at, 6), at += 6;
  if (flags & F_SLOT)
    deadline = be(at, 6);
  const unsigned char *slot = at;
  if (flags & F_SLOT)
    at += 14;
  if (flags & F_TAGS) {
    out->tags_len = at[0];
    out->tags = out->tags_len ? at + 1 : NULL;
    at += 1 + at[0];
  }
  if (validated(h)) {
    if (!has_value || !at[0])
      return 0;
    out->validator_len = at[0];
    out->validator = at + 1;
  }
  if ((!has_value && (d || e)) ||
      ((flags & F_SLOT) && !(flags & F_LEASE) && (deadline || !all_zero(slot + 6, 8))))
    return 0;
  if (s > hi + DAY_MS || deadline > hi + ((int64_t)1 << 40))
    return 0;
  if (has_value && (e > lo + MAX_SPAN_MS || e <= hi - MAX_SPAN_MS))
    return 0;
  out->lease_live = (flags & F_LEASE) && deadline > hi;
  out->delta_us = d;
  out->expiry_ms = e;
  out->negative = (flags & F_NEGATIVE) != 0;
  out->nothing_ms = f;
  out->start_ms = s;
  if (flags & F_ZSTD)
    out->zstd = 1;
  return 1;
}

int xf__entry_parse_string(xf__runtime *rt, xf__reply *r, int64_t lo, int64_t hi,
                           xf__entry *out) {
  memset(out, 0, sizeof *out);
  out->reply = r;
  if (r->type != XF_REPLY_STRING && r->type != XF_REPLY_NIL) {
    xf__entry_free(out);
    return xf__rt_fail(rt, XF_EPROTO, "GET of an entry: a reply of an unexpected type");
  }
  out->now_ms = lo;      /* dates what follows no later than the read */
  out->now_late_ms = hi; /* a load that ended past it ended after the read */
  if (r->type == XF_REPLY_NIL)
    return XF_OK;
  /* The reader may have put the header after the value (rotated). */
  int rotated = r->integer > 0 && (size_t)r->integer <= r->len;
  size_t hlen = rotated ? (size_t)r->integer : 0;
  const unsigned char *h = (const unsigned char *)r->str + (rotated ? r->len - hlen : 0);
  if (r->len == 0 || h[0] != MAGIC) { /* not an entry: left untouched */
    xf__entry_free(out);
    return xf__rt_fail(rt, XF_EWRONGTYPE,
                       "WRONGTYPE the key holds a string that is not an xfetch entry");
  }
  if (!rotated) /* an MGET's element, or not version 3 or 4 */
    hlen = header_len(h, r->len);
  if (!hlen || !header_ok(h, hlen, r->len, lo, hi, out)) {
    out->lease_live = out->delta_us = out->expiry_ms = out->negative = 0;
    out->nothing_ms = out->zstd = 0;
    out->tags = NULL;
    out->tags_len = 0;
    out->validator = NULL;
    out->validator_len = 0;
    out->malformed = 1;
    rt->stats.malformed++;
    return XF_OK;
  }
  if (!(h[2] & F_VALUE)) {
    out->delta_us = out->expiry_ms = 0;
    return XF_OK;
  }
  out->value = rotated ? r->str : r->str + hlen;
  out->len = r->len - hlen;
  out->remaining_ms = out->expiry_ms - hi; /* within the clock's error of e: expiring */
  return XF_OK;
}
