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
 * caller does the I/O. It keeps one xf_link per server (below): the link is
 * the connection without its socket (setup, tracking, the clock estimate,
 * replies in order, the resend after the server closed it); the driver
 * sends each call in XF_CALL_SEND on its server's link (xf_call_send), moves
 * the bytes, runs the loader when asked and sleeps when asked. The call and
 * the link never touch a socket, a thread, a sleep or a clock: every input
 * carries now_ms, the driver's monotonic time in ms (any clock that never
 * goes back, the same for every call of a client: e.g. Python's
 * time.monotonic() * 1000), and a load's duration is the driver's measure.
 * The client gives the configuration (key prefix, limits, lease-token
 * identity, XFetch draws, stats, the breaker's time): open it with
 * lazy_connect and use it from one thread, like the calls and links; it is
 * never used for I/O by a call.
 *
 * A call can also be answered by hand, without a link (tests, replies
 * scripted): write xf_call_request's bytes, parse the replies with an
 * xf_reader and give the call its reply with xf_call_reply. Nothing runs a
 * setup or keeps a clock estimate on such a connection: every read is the
 * read script.
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
  XF_CALL_SEND =
      0, /* xf_call_send on the link of xf_call_target (by hand: xf_call_request) */
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
/* The same for xf_invalidate_tags and xf_clear_namespace (tags copied): a
 * call that only sends, one command per tag, and ends with their code. */
XF_EXPORT int xf_call_start_invalidate_tags(xf_call **out, xf_client *c,
                                            const char *const *tags, size_t ntags,
                                            int64_t now_ms);
XF_EXPORT int xf_call_start_clear_namespace(xf_call **out, xf_client *c, int64_t now_ms);

/* The step the call waits on (XF_CALL_DONE for NULL). */
XF_EXPORT xf_call_step xf_call_next(const xf_call *call);

/* In XF_CALL_SEND: the RESP bytes to write, owned by the call, valid until
 * its next step; NULL (and *len 0) in any other step. */
XF_EXPORT const char *xf_call_request(const xf_call *call, size_t *len);

/* In XF_CALL_SEND: the server the call goes to: send it on that server's
 * link. *host is the server's name or IP (owned by the client: valid until
 * xf_client_close; NULL with *port 0 for the client's options.unix_path).
 * Returns n >= 1, which only a driver answering by hand needs: how many
 * replies xf_call_request's bytes produce (a READONLY, ASKING or SCRIPT LOAD
 * may go first, in the same bytes): read n replies and feed the last one to
 * xf_call_reply, freeing the others with xf_reply_free. XF_EINVAL in any
 * other step. host or port may be NULL. */
XF_EXPORT int xf_call_target(const xf_call *call, const char **host, int *port);

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

/* Background refresh (policy.background_refresh = XF_BACKGROUND_ON; by
 * default the call runs it): a get-or-compute call that won an early
 * refresh ends at once (XF_CALL_DONE, the current value) and hands the
 * refresh over as a call of its own, already at XF_CALL_LOAD: run its loader
 * and drive it to XF_CALL_DONE like any call, off the request's path
 * (xf_call_result: XF_OK when its value was written, XF_ELOADER when the
 * loader failed and its lease was released; the cached value stays either
 * way; its value is not for a caller), then xf_call_free it. In
 * XF_CALL_DONE: the refresh (the caller owns it from then on), or NULL (none,
 * or already taken). A refresh never taken is freed with its call: its lease
 * expires after the policy's lease_ms. */
XF_EXPORT xf_call *xf_call_take_refresh(xf_call *call);

/* Load timeouts (policy.soft_timeout_ms, hard_timeout_ms): in XF_CALL_LOAD,
 * xf_call_load_deadline says until when (the driver's ms; INT64_MAX: no
 * bound) the caller waits for its loader. A driver whose loader is still
 * running then calls xf_call_load_timeout: the call ends (XF_CALL_DONE)
 * with the value it had (soft: the early refresh's current value or a
 * stale one), or XF_ETIMEDOUT (hard; a value within stale_if_error_ms is
 * served instead), and the load goes on as a call of its own, at
 * XF_CALL_LOAD, taken with xf_call_take_refresh: feed it the loader's
 * outcome (its own xf_call_sink, xf_call_load_done...) and drive it to its
 * end like a background refresh (its write, or the release of its lease;
 * renew its lease meanwhile with xf_call_renew_at). Returns the call's
 * step (XF_CALL_LOAD unchanged when there was no memory to move the load:
 * the call then waits for its loader). A driver that cannot run a loader
 * off the call ignores the deadline. */
XF_EXPORT int64_t xf_call_load_deadline(const xf_call *call);
XF_EXPORT xf_call_step xf_call_load_timeout(xf_call *call, int64_t now_ms);

/* Lease renewal (policy.max_load_ms): a call in XF_CALL_LOAD whose loader
 * outlives a third of its lease keeps the key's lease by renewing it while
 * the loader runs. xf_call_renew_at: when the next renewal is due (the
 * driver's ms), INT64_MAX for none (no lease held, max_load_ms reached, not
 * in XF_CALL_LOAD). At or past it, xf_call_start_renew starts *out, a call
 * of its own that renews the loading call's lease: drive it as a set's
 * (XF_CALL_SEND until XF_CALL_DONE; xf_call_result: XF_OK renewed,
 * XF_ESUPERSEDED when the lease is not the loading call's any more, or
 * Redis' error), then free it; it may outlive the loading call. Returns
 * XF_OK (*out NULL: nothing due now), XF_EINVAL (loading not in
 * XF_CALL_LOAD) or XF_ENOMEM. A driver that never renews lets the lease
 * run out after lease_ms, as before. */
XF_EXPORT int64_t xf_call_renew_at(const xf_call *call);
XF_EXPORT int xf_call_start_renew(xf_call **out, xf_call *loading, int64_t now_ms);

/* Frees the call at any step (NULL-safe). A call abandoned before
 * XF_CALL_DONE may leave its lease, which expires after policy.lease_ms. */
XF_EXPORT void xf_call_free(xf_call *call);

/* ---- The link: one connection, bytes in and bytes out ----------------------
 *
 * An xf_link is everything about one connection to one server except its
 * socket (h11's shape): the driver opens the socket, writes what
 * xf_link_output gives, feeds what it reads to xf_link_feed and says when
 * the socket failed; the link runs the connection's setup (AUTH, SELECT,
 * the scripts' preload with XF_SETUP_SCRIPTS) and, with a near cache, its
 * CLIENT TRACKING ahead of the calls' commands, judges their replies, keeps
 * the estimate of the server's clock (a hit is one plain GET or HMGET while
 * it is fresh, else the read script refreshes it), sends ASKING, READONLY
 * and a SCRIPT LOAD where a call needs them, and has the server's circuit
 * breaker. A call in XF_CALL_SEND goes on the link of the server
 * xf_call_target names (one link per (host, port)): xf_call_send. When its
 * reply has been fed (or the link failed), the call comes out of
 * xf_link_ready; xf_call_received then takes its reply in (where the driver
 * runs the call: its events are emitted there) and gives its next step.
 *
 * The server closing a working connection (its idle timeout, CLIENT KILL)
 * fails nothing: the commands it did not answer wait for a new stream and go
 * once more (xf_link_wants_stream), the breaker closed. A failed connect, a
 * timeout or a broken stream trips the breaker and fails the calls on it
 * (each moves on: another server, or failing open). Like the calls, a link
 * belongs to one thread; its client is opened with lazy_connect.
 *
 * A driver's loop:
 *
 *   xf_call_send(call, link, now);           (for each call in XF_CALL_SEND)
 *   if (xf_link_wants_stream(link)) {
 *     if (xf_link_start(link, now) == XF_OK) open the socket (non-blocking);
 *   }                                         (a refused start moved the calls)
 *   once connected (TLS: handshaken): xf_link_connected(link, fd, now);
 *   xf_link_output(link, &len) -> write; xf_link_written(link, n);
 *   read -> xf_link_feed(link, bytes, n, now) (not XF_OK: close the socket);
 *   end of stream, error, xf_link_deadline passed ->
 *     xf_link_failed(link, XF_LINK_CLOSED / _BROKEN / _TIMEOUT, why, now),
 *     close the socket;
 *   a call in XF_CALL_WAIT: xf_call_park(call, link, now) (any link: the one
 *     of its last SEND);
 *   xf_link_deadline passed, or xf_link_wake_fd readable ->
 *     xf_link_tick(link, now) (non-zero: the stream timed out, as above);
 *   while ((call = xf_link_ready(link))) step = xf_call_received(call, now);
 *     (in the order they came: a reply behind a read script is judged after it;
 *     a parked call's wait has ended) */
typedef struct xf_link xf_link;

/* What a connection is for, in xf_link_open's flags. */
typedef enum xf_setup_flags {
  XF_SETUP_REPLICA = 1, /* it reads from a replica: READONLY */
  XF_SETUP_SCRIPTS = 2  /* SCRIPT LOAD every script ahead of the calls, so that
                           the first calls on a fresh server do not each get
                           NOSCRIPT and load the script themselves */
} xf_setup_flags;

/* Opens a link (no I/O) to host:port of c (host NULL: c's options.unix_path;
 * copied), flags as xf_setup_flags (0: the setup c's options ask).
 * XF_OK, XF_EINVAL (out or c NULL) or XF_ENOMEM. */
XF_EXPORT int xf_link_open(xf_link **out, xf_client *c, const char *host, int port,
                           int flags);

/* Whether the link needs a stream: calls wait for one (sent on a link with
 * none, or to go once more after the server closed the last one). */
XF_EXPORT int xf_link_wants_stream(const xf_link *link);

/* A fresh stream is being opened (the socket connecting): the setup is
 * queued; the calls waiting go out once it is connected. Returns XF_OK, or, while the
 * breaker is open after a failure, its code (XF_ECONNECT, or the refusal it
 * repeats: XF_EAUTH, XF_ETLS, ...; "circuit open after: ..." in xf_errmsg):
 * open no socket, the waiting calls have moved (xf_link_ready). */
XF_EXPORT int xf_link_start(xf_link *link, int64_t now_ms);

/* The stream is connected (TLS: after the handshake) on fd (-1 if it has
 * none: the near cache watches it for its loss): the calls waiting go to
 * the output. */
XF_EXPORT void xf_link_connected(xf_link *link, int fd, int64_t now_ms);

/* The bytes to write (owned by the link, valid until its next call; *len 0:
 * none), then how many were written. */
XF_EXPORT const char *xf_link_output(const xf_link *link, size_t *len);
XF_EXPORT void xf_link_written(xf_link *link, size_t n);

/* Bytes read from the stream. Returns XF_OK, or the code of why the link is
 * done with this stream (a setup command refused: XF_EAUTH, XF_EINVAL,
 * XF_EUNAVAILABLE; an unreadable reply: XF_EIO): close the socket; the
 * calls on it have moved. */
XF_EXPORT int xf_link_feed(xf_link *link, const void *data, size_t len, int64_t now_ms);

/* xf_link_failed's how. */
typedef enum xf_link_how {
  XF_LINK_CLOSED = 0,  /* the server closed the stream (end of stream, reset) */
  XF_LINK_BROKEN = 1,  /* the connect or the stream failed */
  XF_LINK_TIMEOUT = 2, /* no connect or reply by xf_link_deadline */
  XF_LINK_TLS = 3,     /* TLS refused (handshake, certificate): a misconfiguration */
  XF_LINK_CANCELED = 4 /* the driver dropped the stream: says nothing of the server */
} xf_link_how;

/* The stream failed (why: a message, may be NULL): the link decides what
 * its calls do (they move, or wait for a new stream) and whether the breaker
 * trips. Close the socket. */
XF_EXPORT void xf_link_failed(xf_link *link, xf_link_how how, const char *why,
                              int64_t now_ms);

/* When to call xf_link_tick next, on now_ms's clock: the stream is to be
 * given up then (the connect or command timeout from the last sign of life),
 * or a parked call's wait ends; INT64_MAX while nothing is awaited. */
XF_EXPORT int64_t xf_link_deadline(const xf_link *link);

/* The next call that moved since it was sent (its reply fed, or the link
 * decided its failure), oldest first; NULL: none. Give it xf_call_received
 * before anything else, in this order. */
XF_EXPORT xf_call *xf_link_ready(xf_link *link);

/* A call out of xf_link_ready takes in its reply (or its link's failure),
 * or ends its parked wait (as xf_call_woke): returns its next step (another
 * XF_CALL_SEND after a redirection, the router's question, a read asked
 * again). For any other call: xf_call_next. */
XF_EXPORT xf_call_step xf_call_received(xf_call *call, int64_t now_ms);

/* Sends call (in XF_CALL_SEND, for this link's server) on the link: its
 * command goes to the output now (or once a stream is connected), encoded for the
 * link (the read script or a plain read, by the link's clock estimate).
 * Returns XF_OK (the call comes out of xf_link_ready once it moved),
 * XF_EINVAL (not in XF_CALL_SEND, already sent, NULL) or XF_ENOMEM. */
XF_EXPORT int xf_call_send(xf_call *call, xf_link *link, int64_t now_ms);

/* Sends calls[0..n) (each in XF_CALL_SEND, for this link's server) on the
 * link as xf_call_send does each, except that the first reads of entries
 * among them (plain reads: the link's clock estimate fresh, or being
 * refreshed by the first one's read script) go as one MGET (one per slot
 * in a Redis Cluster): a batch of hits costs one command, as xf_get_many's.
 * Each call then moves as if its own read had answered. Returns XF_OK, or
 * the first error (XF_EINVAL, XF_ENOMEM): the calls after it are not sent. */
XF_EXPORT int xf_call_send_many(xf_call *const *calls, size_t n, xf_link *link,
                                int64_t now_ms);

/* Parks call (in XF_CALL_WAIT) on link instead of sleeping: it comes out
 * of xf_link_ready once its wait ends — its time came (xf_link_deadline
 * counts it; xf_link_tick moves it) or, with a near cache, its key was
 * written or a connection lost (the link's wake pipe) — and
 * xf_call_received ends the wait. It may come out at once (a wait of 0 ms).
 * Returns XF_OK, XF_EINVAL (not in XF_CALL_WAIT, on a link already, NULL) or
 * XF_ENOMEM. */
XF_EXPORT int xf_call_park(xf_call *call, xf_link *link, int64_t now_ms);

/* The time is now_ms (xf_link_deadline passed), or xf_link_wake_fd was
 * readable (its bytes are drained here): the parked calls whose wait ended
 * move (xf_link_ready). Returns non-zero when the stream's own deadline
 * passed: fail it with XF_LINK_TIMEOUT (a driver whose connect has its own
 * timeout ignores it while connecting). */
XF_EXPORT int xf_link_tick(xf_link *link, int64_t now_ms);

/* With a near cache, a pipe's read end (non-blocking, the link's) that
 * becomes readable whenever a key is invalidated: watch it while calls are
 * parked and call xf_link_tick when it is; -1 without a near cache. */
XF_EXPORT int xf_link_wake_fd(const xf_link *link);

/* Closes the link (NULL-safe), the socket the driver's. Parked calls stay
 * in XF_CALL_WAIT (wake them with xf_call_woke). Calls still on it
 * fail as on XF_LINK_CANCELED (received) and are not reported: look at
 * xf_call_next. */
XF_EXPORT void xf_link_close(xf_link *link);

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
