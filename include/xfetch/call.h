/* <xfetch/call.h>: the sans-I/O call: get-or-compute for a driver that does its own I/O.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_CALL_H
#define XFETCH_CALL_H

#include "base.h"
#include "client.h"
#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The sans-I/O call --------------------------------------------------
 *
 * For a driver written around xfetch rather than on top of it (the Python
 * asyncio binding): the same get-or-compute as xf_get_or_compute, but the
 * caller does the I/O. It writes the call's request bytes on its own
 * connection, parses what comes back with an xf_reader (one per connection:
 * replies come back in the order requests were written, so many calls may be
 * pipelined on one connection) and hands each reply to its call; it runs the
 * loader when asked, and sleeps when asked. The call never touches a socket,
 * a thread, a sleep or a clock: every input carries now_ms, the driver's
 * monotonic time in ms (any clock that never goes back, the same for every
 * call of a client: e.g. Python's time.monotonic() * 1000), and a load's
 * duration is the driver's measure. The client gives the
 * configuration (key prefix, limits, lease-token identity, XFetch draws,
 * stats): open it with lazy_connect and use it from one thread, like the
 * calls; it is never used for I/O by a call. Every connection must have run
 * the client's setup first (xf_call_setup: AUTH, SELECT).
 *
 * Where each request goes: xf_call_target names the server (host, port) —
 * the seed in use, or in a Redis Cluster the node of the key's slot (a
 * replica for reads with options.read_from_replicas) — so a driver keeps one
 * connection per (host, port) and writes the request on that one. What the
 * client's router must learn comes as a call's own SEND, answered like any
 * other: INFO cluster (options.cluster AUTO, first calls) and CLUSTER SLOTS
 * (a Redis Cluster's map, and again after MOVED or a failover). MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN, NOSCRIPT and failed nodes are followed by the call
 * itself: a reply fed back may simply give another SEND, to another server,
 * or a WAIT (a backoff). The map is the client's, shared by all its calls.
 *
 * With a share (options.share), a call whose Redis cannot be used loads
 * through it as xf_get_or_compute does, without blocking: one load per key,
 * its followers polling (XF_CALL_WAIT) until it lands, up to policy.wait_ms;
 * a kept value serves (source XF_SOURCE_LOCAL). The share is the process's:
 * its times are on CLOCK_MONOTONIC's ms, so a driver using one gives now_ms
 * on that clock (Python's time.monotonic() on Linux). */
typedef struct xf_call xf_call;
typedef struct xf_reader xf_reader;
typedef struct xf_reply xf_reply; /* one parsed reply */

typedef enum xf_call_step {
  XF_CALL_SEND = 0, /* write xf_call_request's bytes; then xf_call_reply */
  XF_CALL_LOAD = 1, /* run the loader; then xf_call_loaded / _not_found / _load_failed */
  XF_CALL_WAIT = 2, /* sleep xf_call_wait_ms; then xf_call_woke */
  XF_CALL_DONE = 3  /* xf_call_result; then xf_call_free */
} xf_call_step;

/* Starts a call for key (copied) under policy (copied) with c's
 * configuration at now_ms. Returns XF_OK with *out (already at its first
 * step: bad arguments end it at once with XF_CALL_DONE and the code in
 * xf_call_result), XF_EINVAL (out, c or policy NULL) or XF_ENOMEM. */
XF_EXPORT int xf_call_start(xf_call **out, xf_client *c, const char *key, size_t keylen,
                            const xf_policy *policy, int64_t now_ms);

/* The same for xf_get: a call that only sends and ends with xf_get's code
 * (XF_OK with the value in xf_call_result, XF_ENOTFOUND, or Redis' error: no
 * fail-open). Returns as xf_call_start. */
XF_EXPORT int xf_call_start_get(xf_call **out, xf_client *c, const char *key, size_t keylen,
                                int64_t now_ms);

/* The same for xf_set and xf_delete: a call that only sends (XF_CALL_SEND
 * until XF_CALL_DONE; NOSCRIPT recovered) and ends with xf_set's / xf_delete's
 * code (XF_ESUPERSEDED for a set refused by a newer value; XF_EIO / XF_ECONNECT
 * when the connection failed: nothing to fail open to). data is copied. Bad
 * arguments return XF_EINVAL (no call). */
XF_EXPORT int xf_call_start_set(xf_call **out, xf_client *c, const char *key, size_t keylen,
                                const void *data, size_t len, const xf_policy *policy,
                                int64_t now_ms);
XF_EXPORT int xf_call_start_delete(xf_call **out, xf_client *c, const char *key,
                                   size_t keylen, int64_t now_ms);

/* The step the call waits on (XF_CALL_DONE for NULL). */
XF_EXPORT xf_call_step xf_call_next(const xf_call *call);

/* In XF_CALL_SEND: the RESP bytes to write, owned by the call, valid until
 * its next step; NULL (and *len 0) in any other step. */
XF_EXPORT const char *xf_call_request(const xf_call *call, size_t *len);

/* In XF_CALL_SEND: the server xf_call_request's bytes go to, and how many
 * replies they produce. *host is the server's name or IP (owned by the
 * client: valid until xf_client_close; NULL with *port 0 for the client's
 * options.unix_path). Returns n >= 1: read n replies on that connection and
 * feed the last one to xf_call_reply, freeing the others with xf_reply_free
 * (a READONLY, ASKING or SCRIPT LOAD may go first, in the same bytes; the
 * command's reply says how they went). XF_EINVAL in any other step. host or
 * port may be NULL. */
XF_EXPORT int xf_call_target(const xf_call *call, const char **host, int *port);

/* GET-priced hits: a read is one plain command (HMGET of a format-1 entry,
 * GET of a format-2 one) on a connection whose estimate of its server's
 * clock is fresh, as on the library's own drivers; else the read script
 * (EVALSHA_RO: Lua and TIME), whose reply refreshes the estimate (every
 * 0.5 s at most, per connection). The estimate is the driver's to keep, one
 * xf_call_conn per connection: open it with the connection
 * (xf_call_conn_open: XF_OK, XF_EINVAL, XF_ENOMEM), reset it whenever the
 * connection is opened again (maybe to another server: a failover), close it
 * after its last call. In XF_CALL_SEND, after xf_call_target and before
 * xf_call_request, xf_call_use_conn(call, conn, now_ms) says the request
 * goes on conn's connection: the request may change (the read script or
 * the plain read, whichever conn's estimate allows at now_ms), and the reply,
 * fed with xf_call_reply(.., now_ms) once read, teaches conn. Say it again
 * for each SEND. One read script per connection per refresh: the reads
 * sent on it behind that script go plain, judged once its reply taught the
 * estimate, so feed a connection's replies in the order they came (one fed
 * out of order is not wrong, its call asks again). Returns XF_OK, XF_EINVAL (call not in
 * XF_CALL_SEND, or a NULL argument) or XF_ENOMEM (the request stays as it was: send it). A
 * driver that never says it keeps the read script on every read. The
 * estimate's bounds are conservative (the request's time as the call was
 * told it, no later than the write; the reply's, no earlier than the read;
 * 1,000 ppm drift): a skewed driver clock moves nothing, only the server's
 * clock judges expiry. Like the calls, one thread; a conn serves any number
 * of calls pipelined on its connection. */
typedef struct xf_call_conn xf_call_conn;
XF_EXPORT int xf_call_conn_open(xf_call_conn **out);
XF_EXPORT void xf_call_conn_reset(xf_call_conn *conn);
XF_EXPORT void xf_call_conn_close(xf_call_conn *conn);
XF_EXPORT int xf_call_use_conn(xf_call *call, xf_call_conn *conn, int64_t now_ms);

/* The (last) reply to the request (the call takes it), or NULL when the
 * connection failed before it came (as xf_call_io_failed with XF_EIO).
 * Returns the next step: another XF_CALL_SEND when the reply was a
 * redirection or the router's own question. A reply given in another step is
 * freed and ignored. */
XF_EXPORT xf_call_step xf_call_reply(xf_call *call, xf_reply *reply, int64_t now_ms);

/* The request could not be written or its reply never came: rc XF_ECONNECT
 * (no connection) or XF_EIO (anything else). Returns the next step: a SEND
 * to another server when one may answer (the next seed after XF_ECONNECT; a
 * replica's read goes to its master; in a cluster, the map is asked again),
 * else the call fails open. */
XF_EXPORT xf_call_step xf_call_io_failed(xf_call *call, int rc, int64_t now_ms);

/* In XF_CALL_LOAD: the loader's value (copied), "not found", or its failure
 * (loader_rc non-zero; 0 counts as -1): nothing is cached. duration_us is
 * how long the loader ran, as the driver measured it (the XFetch delta the
 * entry keeps; < 0 counts as 0). Return the next step. */
XF_EXPORT xf_call_step xf_call_loaded(xf_call *call, const void *data, size_t len,
                                      int64_t duration_us, int64_t now_ms);
XF_EXPORT xf_call_step xf_call_not_found(xf_call *call, int64_t duration_us,
                                         int64_t now_ms);
XF_EXPORT xf_call_step xf_call_load_failed(xf_call *call, int loader_rc, int64_t now_ms);

/* In XF_CALL_LOAD: the sink the loader fills (xf_sink_set, xf_sink_not_found,
 * xf_sink_ttl: a result with its own ttl), then xf_call_load_done with the
 * loader's code (0: the sink is filled), its duration and the time, as
 * xf_call_loaded; NULL in any other step. */
XF_EXPORT xf_sink *xf_call_sink(xf_call *call);
XF_EXPORT xf_call_step xf_call_load_done(xf_call *call, int loader_rc, int64_t duration_us,
                                         int64_t now_ms);

/* In XF_CALL_WAIT: how many ms to sleep from now_ms (0 = now; a lease
 * holder's wait, or a cluster's TRYAGAIN / CLUSTERDOWN backoff), the wake-up
 * time being on the clock the call was given; then xf_call_woke. */
XF_EXPORT int64_t xf_call_wait_ms(const xf_call *call, int64_t now_ms);
XF_EXPORT xf_call_step xf_call_woke(xf_call *call, int64_t now_ms);

/* In XF_CALL_DONE: the call's result, as xf_get_or_compute returns it; on
 * XF_OK the value moves to *out (free with xf_value_free; out NULL: the code
 * only, the value stays). XF_EINVAL before XF_CALL_DONE, and once the value
 * was moved out (a second call would otherwise look like a cached empty
 * value), with "already taken" in xf_call_errmsg. xf_call_errmsg: the message
 * of a failed call ("" if none), owned by the call. */
XF_EXPORT int xf_call_result(xf_call *call, xf_value *out);
XF_EXPORT const char *xf_call_errmsg(const xf_call *call);

/* Background refresh (policy.background_refresh = XF_BACKGROUND_ON; the
 * default, AUTO, runs it in the call): a get-or-compute call that
 * won an early refresh ends at once (XF_CALL_DONE, the current value) and
 * hands the refresh over as a call of its own, already at XF_CALL_LOAD: run
 * its loader and drive it to XF_CALL_DONE like any call, off the request's
 * path (xf_call_result: XF_OK when its value was written, XF_ELOADER when the
 * loader failed and its lease was released; the cached value stays either
 * way; its value is not for a caller), then xf_call_free it. In
 * XF_CALL_DONE: the refresh (the caller owns it from then on), or NULL (none,
 * or already taken). A refresh never taken is freed with its call: its lease
 * expires after the policy's lease_ms. */
XF_EXPORT xf_call *xf_call_take_refresh(xf_call *call);

/* Frees the call at any step (NULL-safe). A call abandoned before
 * XF_CALL_DONE may leave its lease, which expires after policy.lease_ms. */
XF_EXPORT void xf_call_free(xf_call *call);

/* What a connection is for, in xf_call_setup's flags. */
typedef enum xf_setup_flags {
  XF_SETUP_REPLICA = 1, /* it reads from a replica: READONLY */
  XF_SETUP_SCRIPTS = 2  /* SCRIPT LOAD every script ahead of the calls, so that
                           the first calls on a fresh server do not each get
                           NOSCRIPT and load the script themselves */
} xf_setup_flags;

/* The setup a fresh connection runs before any call's request, the one every
 * xfetch transport runs: AUTH [username] password (options.password set),
 * SELECT db (options.db != 0), then READONLY and the SCRIPT LOADs as flags
 * ask; HELLO when none of these is sent (a server that needs a password
 * answers it NOAUTH). xf_call_setup_count: how many commands (at least 1; XF_EINVAL for a
 * NULL c). xf_call_setup: the RESP bytes of command i (0 <= i < count), owned by c
 * and valid until the next call on c; NULL (and *len 0) for an i out of range
 * or out of memory. The commands may be pipelined, and the calls' requests
 * after them: Redis runs them in order. */
XF_EXPORT int xf_call_setup_count(const xf_client *c, int flags);
XF_EXPORT const char *xf_call_setup(xf_client *c, int flags, int i, size_t *len);

/* Judges the reply to setup command i (same flags) and frees it; NULL = the
 * connection failed before it came. Returns XF_OK, or, with the message in
 * xf_errmsg(c), the code the connection's calls get (close it):
 * XF_EAUTH (AUTH refused: WRONGPASS, ...; NOAUTH to any of them, the server
 * needing a password; SELECT refused), XF_EINVAL
 * (SELECT on a Redis Cluster: db 0 only), XF_EUNAVAILABLE (BUSY, LOADING: the
 * server cannot serve now; calls fail open, as on XF_EIO), XF_EREDIS
 * (READONLY refused), XF_EIO (no reply), XF_EINVAL (c NULL, i out of range).
 * A SCRIPT LOAD's other errors are XF_OK (the call that needs the script
 * loads it), and so are HELLO's (a server without it). */
XF_EXPORT int xf_call_setup_reply(xf_client *c, int flags, int i, xf_reply *reply);

/* The near cache (xf_share_options.near_cache_bytes) on connections the
 * driver owns: a connection whose reads may fill it must be tracked. After
 * its setup, xf_call_track_open gives the request to send on it (CLIENT
 * TRACKING on REDIRECT to the server's invalidation connection) and a
 * ticket; xf_call_track_armed takes the request's reply and the
 * connection's socket (watched for its loss). Before each xf_call_reply on
 * that connection, xf_call_track_reply says under which ticket the reply
 * came (NULL: an untracked connection); 1 means the ticket is stale (the
 * server's invalidation connection was lost): close that connection once
 * the reply is fed, and open a new one; 2 means a ticket given without a
 * request is due: close it and call xf_call_track_open again for that
 * connection (before a later command). xf_call_track_close ends the ticket
 * before its socket is closed (NULL-safe).
 * xf_call_track_open never connects: a background thread opens the
 * server's invalidation connection (once per server and process, as c).
 * XF_OK with *ticket NULL when c's share has no near cache; XF_OK with the
 * request in *request, *len (valid until c's next call); XF_OK with a
 * ticket and *len 0 while the invalidation connection is not open (the
 * connection serves untracked meanwhile); or an error (it serves
 * untracked). */
typedef struct xf_track xf_track;
XF_EXPORT int xf_call_track_open(xf_client *c, const char *host, int port,
                                 xf_track **ticket, const char **request, size_t *len);
XF_EXPORT int xf_call_track_armed(xf_track *ticket, xf_reply *reply, int fd);
XF_EXPORT int xf_call_track_reply(xf_call *call, const xf_track *ticket);
XF_EXPORT void xf_call_track_close(xf_track *ticket, int fd);

/* Wake-on-write for a driver's waits (with a near cache): xf_call_wake_open
 * gives *fd, a pipe's read end (non-blocking) that becomes readable whenever
 * a key is invalidated; drain it, then end the XF_CALL_WAIT of each call
 * for which xf_call_woken is non-zero (its key was written, or a
 * connection lost) with xf_call_woke, at once. A call's waits are then
 * polls of 200 ms at most (the fallback). One per client: XF_EINVAL for a
 * second; XF_OK with *fd -1 when c's share has no near cache.
 * xf_call_wake_close(c, fd) ends it (before the share is closed). */
XF_EXPORT int xf_call_wake_open(xf_client *c, int *fd);
XF_EXPORT void xf_call_wake_close(xf_client *c, int fd);
XF_EXPORT int xf_call_woken(const xf_call *call);

/* A reply parser for one connection (hiredis' reader): feed it every byte
 * read, then take complete replies in order with xf_reader_next (XF_OK with
 * *reply NULL: more bytes needed; XF_EPROTO: the stream is not RESP, drop
 * the connection: from then on xf_reader_feed and xf_reader_next keep
 * returning XF_EPROTO; xf_reader_feed's XF_ENOMEM is only out of memory). xf_reply_is_error
 * tells an error reply (its text in *msg, owned by the reply), e.g. for AUTH. A reply not
 * given to a call is freed with xf_reply_free. Not thread-safe; all NULL-safe. */
XF_EXPORT int xf_reader_open(xf_reader **out);
XF_EXPORT int xf_reader_feed(xf_reader *rd, const char *data, size_t len);
XF_EXPORT int xf_reader_next(xf_reader *rd, xf_reply **reply);
XF_EXPORT int xf_reply_is_error(const xf_reply *reply, const char **msg, size_t *len);
XF_EXPORT void xf_reply_free(xf_reply *reply);
XF_EXPORT void xf_reader_close(xf_reader *rd);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_CALL_H */
