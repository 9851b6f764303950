/* The process-local share (xf_share): what clients of one process have in
 * common while Redis cannot be used: one in-flight load per key, and a
 * bounded fallback cache of the values loaded. Thread-safe. */
#ifndef XF_SHARE_H
#define XF_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "xfetch.h"

typedef enum {
  XF_SHARE_LEAD,   /* the caller loads, then calls xf__share_end */
  XF_SHARE_SERVED, /* *rc is the answer (on XF_OK with *data and *len, the caller frees
                      data) */
  XF_SHARE_ALONE   /* the wait ran out: the caller loads on its own */
} xf__share_role;

/* A caller's place in a key's flight, for the drivers that must not block
 * (the sans-I/O call, the event loop: drivers/flight.h). */
typedef struct xf__flight {
  int lead, polling, alone;
  unsigned long seen; /* the flight found in progress (xf__share_try) */
  int64_t from_ms, give_up_ms;
} xf__flight;

/* Every function takes the client whose share (c->share; NULL = none: a
 * no-op, or XF_SHARE_ALONE) and namespace (c->ns: where its values come
 * from) to use, and key, the Redis key (prefixed): the share keys its slots
 * by both, so no caller can mix up servers or dbs. They read only c->share,
 * c->ns and c->interrupt, which never change once the client is open: a pooled client
 * another thread holds meanwhile will do. */

/* Joins key's flight at now_ms (monotonic): a fresh fallback value or the
 * outcome of the flight in progress (waiting until deadline_ms; every 50 ms
 * c->interrupt, when set, may end the wait: SERVED with XF_ECANCELED), or the
 * lead. */
xf__share_role xf__share_begin(const xf_client *c, const char *key, size_t keylen,
                               int64_t now_ms, int64_t deadline_ms, char **data,
                               size_t *len, int *rc);

/* xf__share_begin for a caller that must not block (the sans-I/O call): a
 * flight in progress returns XF_SHARE_ALONE at once, noting it in *seen (0
 * on the first try), and a later try with that *seen is SERVED its outcome
 * once it landed, as a waiting follower would be. */
xf__share_role xf__share_try(const xf_client *c, const char *key, size_t keylen,
                             int64_t now_ms, unsigned long *seen, char **data, size_t *len,
                             int *rc);

/* Ends the lead: rc XF_OK with the value (copied, kept until expires_ms), or
 * the failure to hand to the flight's followers (never kept). */
void xf__share_end(const xf_client *c, const char *key, size_t keylen, int rc,
                   const char *data, size_t len, int64_t expires_ms);

/* Redis acknowledged (or was sent) a write or delete of key: the share's
 * copy goes, and a flight in progress hands its value to its followers but
 * does not keep it (it started before the write). */
void xf__share_drop(const xf_client *c, const char *key, size_t keylen);

/* The share's near cache (xf_share_options.near_cache_bytes; near.h), NULL
 * when off. */
struct xf__ncache *xf__share_near(const xf_share *s);

/* A client opened with the share holds a reference to it (xf_client_open),
 * dropped by xf_client_close: the share is freed with its last reference,
 * so closing it before its clients is safe. */
void xf__share_ref(xf_share *s);
void xf__share_unref(xf_share *s);

/* For tests: called by xf__share_begin before it takes the share's lock
 * (where a thread of a forked child first meets the share); NULL = none. */
extern void (*xf__share_test_yield)(void);

#endif
