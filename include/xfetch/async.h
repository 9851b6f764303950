/* <xfetch/async.h>: the event-loop driver (xf_async).
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_ASYNC_H
#define XFETCH_ASYNC_H

#include "base.h"
#include "client.h"
#include "options.h"
#include "policy.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The event-loop driver ------------------------------------------------
 *
 * xf_async is get-or-compute, get, set and delete for an event loop: calls never
 * block, many run at once on one non-blocking connection per server (plain or TLS;
 * their commands pipelined; in a Redis Cluster one per master, each key routed to its
 * slot's master as xf_client does), waits are loop timers and the loader may complete
 * later. Attach it to a loop with an adapter header shipped next to <xfetch.h>, one
 * directory up from this part (libxfetch links no event library):
 *
 *   #include <xfetch_libuv.h>      xf_async_open_libuv(&ac, &opts, uv_loop)
 *   #include <xfetch_libevent.h>   xf_async_open_libevent(&ac, &opts, base)
 *
 * A handle belongs to its loop's thread: every xf_async_* call, loader
 * completion included, must be made on that thread. */

/* Opaque event-loop handle: a non-blocking connection per server (per
 * cluster node; plain or TLS, as xf_client's), a timer of the loop, and the
 * counters of an xf_client. */
typedef struct xf_async xf_async;

/* Opaque: one of a handle's connections, as an adapter's watch sees it. */
typedef struct xf_async_conn xf_async_conn;

/* What a watched descriptor is waited for / became ready for. */
enum { XF_ASYNC_READ = 1, XF_ASYNC_WRITE = 2 };

/* Opaque: what an async loader completes, exactly once. */
typedef struct xf_async_load xf_async_load;

/* Runs when a call is over, exactly once per call xf_async_get_or_compute or
 * xf_async_get accepted. rc is XF_OK or an error as for xf_get_or_compute or
 * xf_get (XF_ECANCELED when xf_async_close ended the call). value is NULL unless rc is
 * XF_OK; it and its data belong to xfetch and are valid until the callback returns (copy
 * what you keep). The callback may start new calls and may close the handle. */
typedef void (*xf_async_callback_fn)(int rc, const xf_value *value, void *privdata);

/* Runs when a set or a delete is over, exactly once per call xf_async_set /
 * xf_async_delete accepted: rc as xf_set / xf_delete return it (XF_ECANCELED
 * when xf_async_close ended the call). The callback may start new calls and
 * may close the handle. */
typedef void (*xf_async_done_fn)(int rc, void *privdata);

/* The async loader: computes key's value and completes load, now (inside this
 * function) or later from the loop, with xf_async_load_done,
 * xf_async_load_not_found or xf_async_load_fail. key is valid until then. */
typedef void (*xf_async_loader_fn)(void *ud, const char *key, size_t keylen,
                                   xf_async_load *load);

/* The loop glue an adapter header fills in (see xfetch_libuv.h); not needed
 * by users of the adapters. xf_async_open owns data from then on, also on
 * failure: it ends with cleanup(data). */
typedef struct xf_async_loop {
  void *data; /* the adapter's state, passed to every hook */
  /* Watches the socket fd of conn for events (XF_ASYNC_READ | XF_ASYNC_WRITE;
   * 0: nothing for now, the descriptor stays registered), replacing what was
   * watched before; when fd is ready for some of them, the adapter calls
   * xf_async_ready(conn, ready) from the loop, again while the descriptor
   * stays ready (level-triggered, as uv_poll_t and libevent's events are).
   * *watch is the adapter's state for this descriptor: NULL on the first
   * call, set and kept by the adapter. Returns 0, or -1 on failure. */
  int (*watch)(void *data, void **watch, int fd, int events, xf_async_conn *conn);
  /* Stops watching and frees watch (what watch set; fd is closed right
   * after, and xf_async_ready must not be called for it any more). */
  void (*unwatch)(void *data, void *watch);
  /* (Re)arms the adapter's one timer to call xf_async_timer_fired after
   * delay_ms (>= 0), replacing any earlier arming. */
  void (*timer_start)(void *data, int64_t delay_ms);
  /* Disarms the timer. */
  void (*timer_stop)(void *data);
  /* Frees the adapter's state (the timer); called once, by xf_async_close or
   * a failed xf_async_open. */
  void (*cleanup)(void *data);
} xf_async_loop;

/* Opens an event-loop handle with the same options as xf_client_open and
 * starts connecting in the background; most code calls an adapter's
 * xf_async_open_libuv / xf_async_open_libevent instead. AUTH and SELECT (and
 * the scripts' SCRIPT LOAD) go first on every connection; connect and command
 * timeouts are enforced with the loop's timer; the connect (and with
 * options.tls the TLS handshake) runs on the loop, never blocking it (a host
 * name is resolved on a resolver thread, under connect_timeout_ms: a name that
 * does not resolve is a failed connect, found in the background). Returns XF_OK with
 * the handle in *out, XF_EINVAL (bad options or hooks, options.tls files
 * that cannot be loaded), XF_ENOMEM, or XF_ECONNECT when the connection fails at
 * once (unless opts->lazy_connect, which also defers the connect to the first
 * call). A later connection failure makes calls fail open, as
 * xf_get_or_compute does; a TLS failure (certificate not trusted, name
 * mismatch, handshake) fails them with XF_ETLS instead, never open. With opts->cluster
 * XF_CLUSTER_AUTO the first connection asks INFO cluster, and in a cluster the slot map is
 * loaded (CLUSTER SLOTS) on the loop: calls started meanwhile wait for it; XF_EINVAL for
 * XF_CLUSTER_ON with db != 0. A standalone handle given a seed list uses the first seed
 * that comes up, in order (as xf_client_open does), and, when that seed later cannot be
 * reached, the next one (wrapping around); calls queued on a seed that never came up go to
 * the next seed instead of failing open. A fork's child may keep the handle once it has
 * re-made the loop (uv_loop_fork, event_reinit): it then opens connections of its own,
 * and the calls whose commands the parent had on the wire end there with XF_EIO. */
XF_EXPORT int xf_async_open(xf_async **out, const xf_options *opts,
                            const xf_async_loop *loop);

/* Ends every unfinished call (its callback fires with XF_ECANCELED, from
 * inside this function, or when the current callback returns if called from
 * one), closes the connection and frees the handle. Leases held by the ended
 * calls expire by themselves (policy.lease_ms). A loader still running keeps
 * its load valid: complete it as usual; the result is discarded. NULL-safe. */
XF_EXPORT void xf_async_close(xf_async *ac);

/* The bypass switch, as xf_client_set_enabled (<xfetch/client.h>) for a
 * client: with enabled 0 the handle's calls send nothing to Redis
 * (get-or-compute runs the loader, its value XF_SOURCE_UNCACHED and counted in
 * stats.bypassed; a get calls back XF_ENOTFOUND, a set or a delete XF_OK
 * having done nothing); 1 caches again (connecting then, if the handle opened
 * with options.disabled). A call reads the switch when it starts: calls in
 * flight finish as they began. On the loop's thread; NULL-safe. */
XF_EXPORT void xf_async_set_enabled(xf_async *ac, int enabled);

/* Starts get-or-compute of key on the loop: the same flow and results as
 * xf_get_or_compute, with loader run as an async loader and callback called
 * once when it is over. key and policy are copied. Returns XF_OK (the callback
 * will fire, never from inside this function) or an error and then never calls
 * callback nor loader: XF_EINVAL (NULL handle, loader or callback, a bad key or
 * policy, a closing handle) or XF_ENOMEM. Any number of calls may be in flight
 * on one handle. */
XF_EXPORT int xf_async_get_or_compute(xf_async *ac, const char *key, size_t keylen,
                                      const xf_policy *policy, xf_async_loader_fn loader,
                                      void *loader_ud, xf_async_callback_fn callback,
                                      void *privdata);

/* Starts a get of key on the loop: the same read and results as xf_get (a
 * value within its ttl, else XF_ENOTFOUND; no lease, no wait, no loader: a
 * connection that fails is the call's error, never a fail-open), callback
 * called once with the value when it is over. key is copied. Returns XF_OK
 * (the callback will fire, never from inside this function) or an error and
 * then never calls callback: XF_EINVAL (NULL handle or callback, a bad key, a
 * closing handle) or XF_ENOMEM. */
XF_EXPORT int xf_async_get(xf_async *ac, const char *key, size_t keylen,
                           xf_async_callback_fn callback, void *privdata);

/* Starts a set of key to data on the loop: the same write and results as
 * xf_set (XF_ESUPERSEDED when the entry holds a newer value), callback called
 * once with the code when it is over. key, data and policy are copied.
 * Returns XF_OK (the callback will fire, never from inside this function) or
 * an error and then never calls callback: XF_EINVAL (NULL handle or callback,
 * a bad key or policy, data NULL with len > 0, len above max_value_len, a
 * closing handle) or XF_ENOMEM. */
XF_EXPORT int xf_async_set(xf_async *ac, const char *key, size_t keylen, const void *data,
                           size_t len, const xf_policy *policy, xf_async_done_fn callback,
                           void *privdata);

/* Starts a delete of key on the loop: the same tombstone and results as
 * xf_delete (XF_OK whether or not the entry existed; a delete wins over every
 * computation that started before it, the event loop's own included),
 * callback called once with the code when it is over. key is copied. Returns
 * as xf_async_set. */
XF_EXPORT int xf_async_delete(xf_async *ac, const char *key, size_t keylen,
                              xf_async_done_fn callback, void *privdata);

/* Starts xf_invalidate_tags / xf_clear_namespace on the loop: the same
 * results, callback called once with the code when it is over (tags are
 * copied). Returns as xf_async_set. */
XF_EXPORT int xf_async_invalidate_tags(xf_async *ac, const char *const *tags, size_t ntags,
                                       xf_async_done_fn callback, void *privdata);
XF_EXPORT int xf_async_clear_namespace(xf_async *ac, xf_async_done_fn callback,
                                       void *privdata);

/* With eager 1, a command is written when the xf_async_* function (or the
 * loop event) that queued it returns, instead of on the loop's next writable
 * event: one write per call started outside a callback, a loop turn less per
 * call. For a loop whose turn costs more than a write (an interpreter's);
 * 0 (the default) writes the commands of one loop turn together. */
XF_EXPORT void xf_async_set_eager(xf_async *ac, int eager);

/* Corks the handle's sends: the hits' plain reads that calls started from
 * now on would send wait for xf_async_uncork, which sends those waiting on one
 * connection as one MGET per slot (a batch's hits: one command per node and
 * slot instead of one per key). Other commands go at once. Cork, start the
 * calls, then uncork before returning to the loop. On the loop's thread;
 * NULL-safe. */
XF_EXPORT void xf_async_cork(xf_async *ac);
XF_EXPORT void xf_async_uncork(xf_async *ac);

/* With autocork 1, a call started while others of the handle are in flight
 * corks the handle until the loop's next turn (its timer, armed at 0): the
 * hits of the calls started meanwhile go as one MGET per node and slot, in
 * one write, and a lone call goes at once. For a handle serving many
 * concurrent requests: one command for a burst of hits, a loop turn more for
 * the corked ones. 0 (the default): each call's read goes on its own unless
 * corked by hand. */
XF_EXPORT void xf_async_set_autocork(xf_async *ac, int autocork);

/* Completes load with the value (copied). Returns XF_OK, or XF_EINVAL (data
 * NULL with len > 0, len above max_value_len) / XF_ENOMEM, in which case the
 * load completes as a loader failure with that code. Either way load is used
 * up; it may be completed inside the loader or later, once. */
XF_EXPORT int xf_async_load_done(xf_async_load *load, const void *data, size_t len);

/* The value load refreshes, as xf_sink_previous (<xfetch/client.h>) gives
 * it: valid until load is completed. */
XF_EXPORT int xf_async_load_previous(const xf_async_load *load, const void **data,
                                     size_t *len, int64_t *age_ms);

/* The validator stored with the previous value, and the one to store with
 * the value load completes with (before completing it), as
 * xf_sink_previous_validator and xf_sink_validator give and take them. */
XF_EXPORT int xf_async_load_previous_validator(const xf_async_load *load, const void **data,
                                               size_t *len);
XF_EXPORT int xf_async_load_validator(xf_async_load *load, const void *data, size_t len);

/* Gives the value load completes with its own ttl instead of policy.ttl_ms, as
 * xf_sink_ttl (<xfetch/client.h>) does (0: returned uncached, nothing
 * written), also when the load completes after the call ended (a background
 * refresh, a soft or hard timeout). Call it before completing load. Returns
 * XF_OK, or XF_EINVAL (load NULL, completed or of a closed handle; ttl_ms
 * outside [0, 2^40]). */
XF_EXPORT int xf_async_load_ttl(xf_async_load *load, int64_t ttl_ms);

/* Completes load with "unchanged" (see xf_sink_unchanged): XF_OK, or
 * XF_EINVAL when there is no previous value (load is then not used up). */
XF_EXPORT int xf_async_load_unchanged(xf_async_load *load);

/* Completes load with "not found" (see xf_sink_not_found in <xfetch/client.h>). */
XF_EXPORT void xf_async_load_not_found(xf_async_load *load);

/* Completes load with a failure: nothing is cached, code (0 becomes
 * XF_ELOADER) is kept for xf_async_loader_error, and the call serves stale
 * data if its policy allows or fails with XF_ELOADER. */
XF_EXPORT void xf_async_load_fail(xf_async_load *load, int code);

/* The sink of load (xf_sink, <xfetch/client.h>): a loader may hand its result
 * over as a blocking loader does (xf_sink_set, xf_sink_not_found, xf_sink_ttl,
 * xf_sink_unchanged, xf_sink_validator; xf_sink_previous reads the value
 * refreshed), then complete load with xf_async_load_complete. NULL when load
 * is completed, or when its handle was closed (the result goes nowhere:
 * complete load all the same). For bindings that share one loader glue
 * between the blocking and the event-loop driver. */
XF_EXPORT xf_sink *xf_async_load_sink(xf_async_load *load);

/* Completes load as a blocking loader returning rc would: XF_OK (0) with
 * what its sink holds, else as xf_async_load_fail(load, rc). */
XF_EXPORT void xf_async_load_complete(xf_async_load *load, int rc);

/* xf_near_serve (<xfetch/near.h>) for an event-loop handle: a near hit (or a
 * kept not-found) served before any call is started, its events naming
 * XF_DRIVER_ASYNC; XF_NEAR_NOT_SERVED: start the call as usual (an early
 * refresh the draw elected is made by the handle's next get-or-compute of
 * key). On the loop's thread. */
XF_EXPORT int xf_async_near_serve(xf_async *ac, const char *key, size_t keylen,
                                  const xf_policy *policy, uint64_t *near_hits,
                                  xf_value *out);

/* For adapters: the timer armed by timer_start has fired. */
XF_EXPORT void xf_async_timer_fired(xf_async *ac);

/* For adapters: conn's descriptor is ready for events (XF_ASYNC_READ |
 * XF_ASYNC_WRITE; both when the loop reports an error on it). */
XF_EXPORT void xf_async_ready(xf_async_conn *conn, int events);

/* The detail of the error a callback was given, valid inside that callback
 * ("" if none). Owned by the handle. ac NULL: why the calling thread's last
 * xf_async_open (or xf_client_open) failed, as xf_errmsg(NULL). */
XF_EXPORT const char *xf_async_errmsg(const xf_async *ac);

/* Inside a callback given XF_ELOADER: the code the loader failed with. */
XF_EXPORT int xf_async_loader_error(const xf_async *ac);

/* Copies the handle's counters (as xf_client_stats) into *out. */
XF_EXPORT void xf_async_stats(const xf_async *ac, xf_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_ASYNC_H */
