/* <xfetch/events.h>: the event hook: what the flow did, for every driver.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_EVENTS_H
#define XFETCH_EVENTS_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Events ---------------------------------------------------------------
 *
 * One hook (xf_options.on_event) reports what the flow did, synchronously,
 * in the thread (or on the loop) of the call, for every driver: the same
 * events for xf_get_or_compute, the batch, pool and event-loop drivers and
 * xf_call_*. Unset, it costs one predictable branch per event site. The
 * hook must not call into the same client; it must be quick (it runs on the
 * hit path). The event and its strings are valid only during the hook.
 *
 * Each get-or-compute (and get) call reports exactly one result event:
 * XF_EV_HIT, XF_EV_EARLY, XF_EV_MISS, XF_EV_STALE or XF_EV_FAIL_OPEN (or,
 * with a near cache, XF_EV_NEAR); the others say what happened on
 * the way. For metrics, count calls by result from those five. */
typedef enum xf_event_type {
  XF_EV_HIT = 0,              /* result: a fresh value served from Redis */
  XF_EV_MISS = 1,             /* result: no usable value; this call loaded, waited
                                 for another's load, or failed */
  XF_EV_EARLY = 2,            /* result: XFetch elected this call to refresh a
                                 fresh value early (it still serves a value) */
  XF_EV_STALE = 3,            /* result: a value past its ttl was served (stale_ms
                                 while another refreshes, stale_if_error_ms) */
  XF_EV_FAIL_OPEN = 4,        /* result: Redis could not be used (rc: why); the
                                 loader runs uncached, or the share answers
                                 (source XF_SOURCE_LOCAL: no loader runs) */
  XF_EV_NEAR = 5,             /* result: served from the share's near cache */
  XF_EV_LEASE_WON = 6,        /* this call holds the key's lease */
  XF_EV_LEASE_LOST = 7,       /* another caller holds it */
  XF_EV_LOAD_START = 8,       /* the loader is about to run (then LOAD_DONE) */
  XF_EV_LOAD_DONE = 9,        /* it ran: duration_us, rc 0 or its non-zero code */
  XF_EV_WAIT = 10,            /* a wait for another caller's load ended:
                                 duration_us from its start to the last wake-up */
  XF_EV_LOCAL = 11,           /* the share answered instead of the loader */
  XF_EV_SUPERSEDED = 12,      /* a write was refused: a newer value or a delete won */
  XF_EV_BREAKER_OPEN = 13,    /* server's connection failed: calls skip it */
  XF_EV_BREAKER_CLOSED = 14,  /* server's connection is back */
  XF_EV_RECONNECT = 15,       /* a connection to server was opened again */
  XF_EV_REDIRECT = 16,        /* Cluster MOVED / ASK followed (server: where to) */
  XF_EV_INVALIDATION = 17,    /* the near cache was told a key changed, or
                                 dropped a server's entries: see below */
  XF_EV_TAG_INVALIDATED = 18, /* an entry read was refused as fresh (rc: why,
                                 xf_tag_reason): a tag it carries was
                                 invalidated since it was loaded (served stale
                                 at most: policy.tags_never_stale), or it
                                 carries other tags than the call's (or none) */
  XF_EV_LEASE_RENEWED = 19,   /* a loader's lease was renewed while it ran
                                 (policy.max_load_ms; rc 0, or XF_ESUPERSEDED:
                                 it is not the loader's any more), reported
                                 on the thread (or loop) that renewed it */
  XF_EV_SOFT_TIMEOUT = 20,    /* the call's load ran past soft_timeout_ms:
                                 the caller got the value it had (source)
                                 and the load goes on */
  XF_EV_HARD_TIMEOUT = 21,    /* the call's load, or its wait for another
                                 caller's, ran past hard_timeout_ms: the
                                 caller got XF_ETIMEDOUT (rc) or a stale
                                 value (source); its own load goes on */
  XF_EV_FAILSAFE = 22,        /* a load failed lately (the entry's fail-safe
                                 mark, policy.failsafe_throttle_ms): the
                                 caller got the last good value (source
                                 stale), no load */
  XF_EV_REVALIDATED = 23      /* the loader answered "unchanged"
                                 (xf_sink_unchanged): the entry's life was
                                 extended, its value not rewritten */
} xf_event_type;

/* Which driver ran the call. */
typedef enum xf_driver {
  XF_DRIVER_BLOCKING = 0, /* xf_get_or_compute, xf_get, xf_set, xf_delete */
  XF_DRIVER_BATCH = 1,    /* xf_get_or_compute_many (_batch) */
  XF_DRIVER_POOL = 2,     /* xf_pool_* */
  XF_DRIVER_ASYNC = 3,    /* xf_async_* */
  XF_DRIVER_CALL = 4      /* xf_call_* (the sans-I/O call) */
} xf_driver;

/* What the hook receives. key: the user's key (without the prefix; not
 * NUL-terminated), NULL for a server's events; server: "host:port" (or the
 * Unix path) for breaker, reconnect and redirect events, else NULL.
 *
 * XF_EV_INVALIDATION (a share with a near cache): Redis invalidated key
 * (here the Redis key, prefix included: any client's), or, key NULL, the
 * near cache dropped what it kept from server: rc 0 for a FLUSHALL /
 * FLUSHDB, XF_EIO for a lost connection (invalidation or tracked data
 * connection), the open's code (XF_ECONNECT, XF_EAUTH, XF_EREDIS, ...) when
 * the invalidation connection could not be opened (asked again after a
 * backoff: nothing is kept from server meanwhile); key and server both NULL: more came
 * between two reports than are kept (1,024), some went unreported. They arrive on the
 * share's tracker thread and are kept until the next xf_get / xf_get_or_compute (any
 * driver) of a client of the share that has a hook, which reports them first, on its own
 * thread: each once per share, whichever client's hook gets it (up to 64 per call; the rest
 * go with the next calls). */
typedef struct xf_event {
  xf_event_type type;
  xf_driver driver;
  const char *key;
  size_t keylen;
  const char *server;
  int source;          /* the xf_source served (HIT, EARLY, STALE, LOCAL; FAIL_OPEN:
                          LOCAL when the share answered), or -1 */
  int64_t duration_us; /* LOAD_DONE: the loader's time; WAIT: the wait's */
  int rc;              /* LOAD_DONE: 0 or the loader's code; FAIL_OPEN: the
                          XF_E* that made Redis unusable; TAG_INVALIDATED:
                          an xf_tag_reason; else 0 */
} xf_event;

/* Why XF_EV_TAG_INVALIDATED refused an entry (its rc). */
typedef enum xf_tag_reason {
  XF_TAG_RAISED = 1, /* the same tags, a version raised since it was loaded */
  XF_TAG_OTHER = 2   /* other tags than the call's, or none (written by a call
                        of other tags, an untagged one or a client that knows
                        no tags) */
} xf_tag_reason;

/* The hook (see xf_options.on_event in <xfetch/options.h>). */
typedef void (*xf_event_fn)(const xf_event *ev, void *ud);

/* The name of an event type ("hit", "lease_won", ...; "?" if unknown), and of
 * a driver ("blocking", "batch", "pool", "async", "call"). Static strings. */
XF_EXPORT const char *xf_event_name(int type);
XF_EXPORT const char *xf_driver_name(int driver);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_EVENTS_H */
