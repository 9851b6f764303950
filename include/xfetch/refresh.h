/* <xfetch/refresh.h>: background refreshes: a user's executor and the share's refresh
 * workers.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_REFRESH_H
#define XFETCH_REFRESH_H

#include "base.h"
#include "client.h"
#include "options.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs a refresh an executor took: its loader (loader and loader_ud given:
 * these instead of the call's), then the write (or the lease's release) on
 * a client opened with the options of the client that handed it over, then
 * frees r. Returns XF_OK (written, or refused by a newer value), XF_ELOADER
 * (the loader failed: the cached value stays, the lease is released), or
 * the client's error (XF_ENOMEM...; the lease then expires). Any thread. */
XF_EXPORT int xf_refresh_run(xf_refresh *r, xf_loader_fn loader, void *loader_ud);

/* Frees a refresh an executor took without running it: its lease expires
 * after the policy's lease_ms. NULL-safe. Run or drop every refresh before
 * closing the share its client was opened with (the refresh's client uses
 * it). */
XF_EXPORT void xf_refresh_drop(xf_refresh *r);

/* The user's key a refresh is for (not NUL-terminated), valid until it is
 * run or dropped. */
XF_EXPORT const char *xf_refresh_key(const xf_refresh *r, size_t *len);

/* What the share's refresh workers did (background_refresh). */
typedef struct xf_refresh_info {
  uint64_t started;   /* refreshes handed to the workers */
  uint64_t done;      /* finished: written, superseded, or failed */
  uint64_t failed;    /* of those, the loader failed (value kept) */
  uint64_t skipped;   /* not taken (queue full, closing): lease released */
  uint64_t abandoned; /* dropped at close (queued, or past the drain time) */
  xf_stats clients;   /* the counters of the share's refresh clients, those
                         a blocking client's refreshes write through,
                         summed: load_errors, superseded, redis_errors...
                         (the load counts in the caller's loads);
                         connections: those of the idle ones. A pool's
                         refreshes count in xf_pool_stats */
} xf_refresh_info;

/* Copies the share's refresh counters into *out (zeros for NULL). */
XF_EXPORT void xf_share_refresh_stats(xf_share *s, xf_refresh_info *out);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_REFRESH_H */
