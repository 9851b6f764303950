/* Format-2 entries (src/core/entry_string.c) built and inspected by hand in
 * the tests: a header as xfetch writes it (version 3, its optional fields
 * present as its flags say), or one part of it changed. */
#ifndef XFT_ENTRY2_UTIL_H
#define XFT_ENTRY2_UTIL_H

#include <hiredis/hiredis.h>
#include <stdint.h>
#include <string.h>

#include "fixture.h"

enum { H_VALUE = 1, H_NEGATIVE = 2, H_LEASE = 4, H_S = 8, H_F = 16, H_SLOT = 32 };

/* The longest header: the fixed 14 bytes, s, f and the lease slot. */
#define XFT_HEADER_MAX 40

typedef struct xft_header {
  int magic, version, flags;
  int64_t d, e, s, deadline;
  unsigned char token[8];
  int64_t f;
  int omit;   /* optional fields (H_S, H_F, H_SLOT) left out though flagged */
  int add;    /* optional fields written though not flagged */
  int layout; /* 2: the old 40-byte layout of version 2 (every field, fixed) */
} xft_header;

static inline void xft_be(unsigned char *p, int n, int64_t v) {
  for (int i = n - 1; i >= 0; i--, v >>= 8)
    p[i] = (unsigned char)(v & 0xff);
}

/* The n-byte big-endian number at p (xft_be's reverse). */
static inline int64_t xft_unbe(const char *p, int n) {
  int64_t v = 0;
  for (int i = 0; i < n; i++)
    v = v << 8 | (unsigned char)p[i];
  return v;
}

/* How long a version-3 header with these flags is. */
static inline size_t xft_hlen(int flags) {
  return 14 + (flags & H_S ? 6 : 0) + (flags & H_F ? 6 : 0) + (flags & H_SLOT ? 14 : 0);
}

/* h's header bytes into out; returns how many. */
static inline size_t xft_pack(const xft_header *h, unsigned char out[XFT_HEADER_MAX]) {
  out[0] = (unsigned char)h->magic;
  out[1] = (unsigned char)h->version;
  out[2] = (unsigned char)h->flags;
  xft_be(out + 3, 5, h->d);
  xft_be(out + 8, 6, h->e);
  if (h->layout == 2) {
    xft_be(out + 14, 6, h->s);
    xft_be(out + 20, 6, h->deadline);
    memcpy(out + 26, h->token, 8);
    xft_be(out + 34, 6, h->f);
    return 40;
  }
  int present = (h->flags | h->add) & ~h->omit;
  size_t at = 14;
  if (present & H_S)
    xft_be(out + at, 6, h->s), at += 6;
  if (present & H_F)
    xft_be(out + at, 6, h->f), at += 6;
  if (present & H_SLOT) {
    xft_be(out + at, 6, h->deadline);
    memcpy(out + at + 6, h->token, 8);
    at += 14;
  }
  return at;
}

/* A valid value entry read at server ms now: 60 s left, written a second ago. */
static inline xft_header xft_header_valid(long long now) {
  return (xft_header){.magic = 0xF8,
                      .version = 3,
                      .flags = H_VALUE | H_S,
                      .d = 1000,
                      .e = now + 60000,
                      .s = now - 1000};
}

/* key := h's header, then value (vlen bytes), with a 60 s PEXPIRE. */
static inline void xft_put2(redisContext *r, const char *key, const xft_header *h,
                            const char *value, size_t vlen) {
  unsigned char buf[XFT_HEADER_MAX + 64];
  size_t n = xft_pack(h, buf);
  if (vlen > 64)
    vlen = 64;
  memcpy(buf + n, value, vlen);
  freeReplyObject(xft_cmd(r, "SET %s %b PX 60000", key, buf, n + vlen));
}

#endif
