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

/* Joins key's flight at now_ms (monotonic): a fresh fallback value or the
 * outcome of the flight in progress (waiting until deadline_ms; every 50 ms
 * interrupt(ud), when not NULL, may end the wait: SERVED with XF_ECANCELED),
 * or the lead. */
xf__share_role xf__share_begin(xf_share *s, const char *key, size_t keylen, int64_t now_ms,
                               int64_t deadline_ms, xf_interrupt_fn interrupt, void *ud,
                               char **data, size_t *len, int *rc);

/* Ends the lead: rc XF_OK with the value (copied, kept until expires_ms), or
 * the failure to hand to the flight's followers (never kept). */
void xf__share_end(xf_share *s, const char *key, size_t keylen, int rc, const char *data,
                   size_t len, int64_t expires_ms);

#endif
