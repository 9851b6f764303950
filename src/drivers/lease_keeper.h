/* Renewing a loader's lease while it runs on the calling thread (blocking,
 * pool, batch and the refresh workers: flow.h's xf__renewal): a thread of
 * the load's own sleeps until each renewal is due and sends it on a client
 * opened like the caller's (one of its share's idle refresh clients: no
 * connect when one is idle; without a share, one opened for the load). A
 * batch's keeper renews every key it leased and has not loaded yet. */
#ifndef XF_LEASE_KEEPER_H
#define XF_LEASE_KEEPER_H

#include "client_io.h"
#include "flow.h"

typedef struct xf__keeper xf__keeper;

/* Starts renewing f's lease (f at its LOAD step, before its loader runs)
 * on a client opened with like (valid until xf__keeper_stop; the caller's
 * client's options) and kept by share's idle refresh clients (NULL: one
 * opened for this load, closed after; a share must outlive the keeper).
 * NULL: nothing to renew (xf__flow_renewal), or no memory or thread for it
 * (the lease then runs out as without renewals). */
xf__keeper *xf__keeper_start(const xf__flow *f, const xf_options *like, xf_share *share);

/* xf__keeper_start for the leases of several flows at once (a batch: the
 * keys it leased together, each waiting for its turn to load, keep their
 * leases while another key's loader runs). Flows with nothing to renew are
 * left out; NULL when none is left. */
xf__keeper *xf__keeper_start_many(xf__flow *const *flows, size_t n, const xf_options *like,
                                  xf_share *share);

/* Stops renewing f's lease (one of those started with; its loader is about
 * to run with a keeper of its own, or has run). NULL-safe. */
void xf__keeper_drop(xf__keeper *k, const xf__flow *f);

/* The loader returned: no renewal after this returns (one on the wire is
 * waited for). NULL-safe. */
void xf__keeper_stop(xf__keeper *k);

/* The options of a client a driver opens for work of the caller's client
 * off its thread (a background refresh, renewals): mine copied, connecting
 * lazily, without the per-call fields (interrupt, seed, executor), so that
 * such clients opened alike match. NULL out of memory; free() it. */
xf_options *xf__options_helper(const xf_options *mine);

#endif
