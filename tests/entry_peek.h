/* An entry's fields as every script reads them, in either format (a hash or
 * a format-2 string): the project's own reader, lua/entry_read.lua's entry(),
 * run on a raw connection. For tests of a behaviour (leases, races, deletes,
 * refreshes) that look into storage whatever the client's entry_format;
 * a test of one format's layout reads it with HGET / GET instead. */
#ifndef XFT_ENTRY_PEEK_H
#define XFT_ENTRY_PEEK_H

#include <hiredis/hiredis.h>

typedef struct xft_peek {
  char kind[8]; /* "hash", "string" or "none" (TYPE) */
  char *v;      /* the value (NUL-terminated), or NULL: none, or malformed */
  size_t vlen;
  long long d, e, s, f, deadline; /* -1 when absent */
  int live;                       /* a lease whose deadline is ahead */
  int mine;                       /* the lease is the one token took */
  int n, bad;                     /* a negative entry; a malformed one */
} xft_peek;

/* Reads key's entry into *out (xft_peek_free frees it); token ("" = none):
 * whose lease out->mine asks about. Asserts the script ran. */
void xft_peek_read(redisContext *r, const char *key, const char *token, xft_peek *out);
void xft_peek_free(xft_peek *p);

#endif
