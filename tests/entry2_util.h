/* Format-2 entries (src/core/entry_string.c) built and inspected by hand in
 * the tests: a header as xfetch writes it, or one field of it changed. */
#ifndef XFT_ENTRY2_UTIL_H
#define XFT_ENTRY2_UTIL_H

#include <hiredis/hiredis.h>
#include <stdint.h>
#include <string.h>

#include "fixture.h"

enum { H_VALUE = 1, H_NEGATIVE = 2, H_LEASE = 4, H_S = 8, H_F = 16 };

typedef struct xft_header {
  int magic, version, flags;
  int64_t d, e, s, deadline;
  unsigned char token[8];
  int64_t f;
} xft_header;

static inline void xft_be(unsigned char *p, int n, int64_t v) {
  for (int i = n - 1; i >= 0; i--, v >>= 8)
    p[i] = (unsigned char)(v & 0xff);
}

/* The 40 header bytes of h into out. */
static inline void xft_pack(const xft_header *h, unsigned char out[40]) {
  out[0] = (unsigned char)h->magic;
  out[1] = (unsigned char)h->version;
  out[2] = (unsigned char)h->flags;
  xft_be(out + 3, 5, h->d);
  xft_be(out + 8, 6, h->e);
  xft_be(out + 14, 6, h->s);
  xft_be(out + 20, 6, h->deadline);
  memcpy(out + 26, h->token, 8);
  xft_be(out + 34, 6, h->f);
}

/* A valid value entry read at server ms now: 60 s left, written a second ago. */
static inline xft_header xft_header_valid(long long now) {
  return (xft_header){.magic = 0xF8,
                      .version = 2,
                      .flags = H_VALUE | H_S,
                      .d = 1000,
                      .e = now + 60000,
                      .s = now - 1000};
}

/* key := h's header, then value (vlen bytes), with a 60 s PEXPIRE. */
static inline void xft_put2(redisContext *r, const char *key, const xft_header *h,
                            const char *value, size_t vlen) {
  unsigned char buf[40 + 64];
  xft_pack(h, buf);
  if (vlen > 64)
    vlen = 64;
  memcpy(buf + 40, value, vlen);
  freeReplyObject(xft_cmd(r, "SET %s %b PX 60000", key, buf, (size_t)40 + vlen));
}

#endif
