/* The entry protocol on Redis: read / lease / write / release, one function
 * per script. Keys passed here already carry the prefix. */
#ifndef XF_ENTRY_H
#define XF_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* What the read (or a lease that found a newer value) saw. */
typedef struct xf__entry {
  redisReply *reply; /* owns value */
  const char *value; /* NULL when the entry holds no value */
  size_t len;
  int64_t delta_us;
  int64_t remaining_ms; /* negative once past the logical expiry */
  int64_t expiry_ms;    /* server time; 0 when no value */
  int64_t now_ms;       /* the server's time when it was read */
  int lease_live;
  int negative;
} xf__entry;

void xf__entry_free(xf__entry *e);

int xf__entry_read(xf_client *c, const char *key, size_t keylen, xf__entry *out);

typedef enum { XF_LEASE_LOST = 0, XF_LEASE_WON = 1, XF_LEASE_NEWER = 2 } xf__lease_result;

/* Tries to take the lease for lease_ms. seen_expiry_ms is the expiry the
 * caller read (0 if none). On XF_LEASE_WON, token holds the lease token and
 * *now_ms the server time; on XF_LEASE_NEWER, *newer holds the newer value. */
int xf__entry_lease(xf_client *c, const char *key, size_t keylen, int64_t lease_ms,
                    int64_t seen_expiry_ms, char token[40], int64_t *now_ms,
                    xf__lease_result *result, xf__entry *newer);

/* What a write stores (write.lua's kinds). */
typedef enum {
  XF_WRITE_VALUE = 0,
  XF_WRITE_NOT_FOUND = 1, /* a cached not-found (negative entry) */
  XF_WRITE_GONE = 2       /* not found, not cached: remove the old value */
} xf__write_kind;

typedef struct xf__write {
  const char *token; /* "" = no lease held */
  const char *data;
  size_t len;
  int64_t delta_us; /* <0 = keep the entry's delta */
  int64_t ttl_ms;   /* XF_WRITE_GONE: how long the tombstone stays */
  int64_t keep_ms;  /* how long past ttl_ms the entry stays */
  int64_t start_ms; /* server ms when the computation started; <0 = now */
  xf__write_kind kind;
} xf__write;

/* Writes the entry; *written is 0 when it was refused: a newer computation
 * (or a delete) is in the entry, or the caller's lease is no longer the
 * entry's. */
int xf__entry_write(xf_client *c, const char *key, size_t keylen, const xf__write *w,
                    int *written);

/* Removes the entry and leaves a tombstone for tombstone_ms (delete.lua). */
int xf__entry_delete(xf_client *c, const char *key, size_t keylen, int64_t tombstone_ms);

int xf__entry_release(xf_client *c, const char *key, size_t keylen, const char *token);

#endif
