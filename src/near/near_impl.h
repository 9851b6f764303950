/* What the near cache (near.c), its tracker (near_track.c), the share, the
 * blocking transport (conn.c) and the drivers' waits (drive.c) tell each
 * other; the flow's side is src/core/near.h. */
#ifndef XF_NEAR_IMPL_H
#define XF_NEAR_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "key.h"
#include "near.h"
#include "ports.h"

struct xf_client;
struct xf__ncache;
struct xf_reply;
struct xf__near_tracker;
struct xf__ncache_batch;
typedef struct xf__inval xf__inval;         /* an invalidation connection (near_inval.c) */
typedef struct xf__inval_who xf__inval_who; /* whom it is opened as (near_inval.c) */

/* The near cache's side of its port (ports.h, filled by near_port.c). */
/* The pending marker of a read about to be sent. */
uint64_t xf__near_token(struct xf__ncache *n);

/* The entry of c's namespace and key, when kept and within its life at
 * now_ms: 1 with *hit filled (hit->data the caller's), 0 else (or out of
 * memory). */
int xf__near_get(struct xf__ncache *n, const struct xf_client *c, const char *key,
                 size_t keylen, int64_t now_ms, xf__port_hit *hit);

/* Keeps what a read sent with token saw (the Redis entry expiring at server
 * ms redis_expiry_ms), over the connection of t, until driver ms
 * expires_ms: unless the key was invalidated or t's node dropped
 * since token, or t is not tracked under its node's current invalidation
 * connection. Returns the entries evicted to make room. */
uint64_t xf__near_put(struct xf__ncache *n, const struct xf_client *c, const xf__track *t,
                      uint64_t token, const char *key, size_t keylen, const char *value,
                      size_t len, const unsigned char *tags, size_t tags_len,
                      int64_t delta_us, int64_t redis_expiry_ms, int64_t expires_ms,
                      int negative);

/* An own write or delete of key (acknowledged or not): its entries go now,
 * and a read of it in flight is not kept. */
void xf__near_drop(struct xf__ncache *n, const char *key, size_t keylen);

/* The tag epoch, and an entry's stamp (near.h; ports.h says what each
 * promises). */
uint64_t xf__near_tag_epoch(struct xf__ncache *n);
void xf__near_stamp_entry(struct xf__ncache *n, const struct xf_client *c, const char *key,
                          size_t keylen, const unsigned char *tags, size_t tags_len,
                          const xf__tag_stamp *st);

/* XF_EV_INVALIDATION: reports through c's hook (c->on_event set) what the
 * near cache was told since the last report by any client of the share
 * (near_events.c). On the calling thread, no lock held. */
void xf__near_report(struct xf__ncache *n, const struct xf_client *c, xf_driver driver);

/* The port above, each function given the client (ports.h). */
extern const xf__port_near xf__near_port_impl;

/* One Redis node (by address) whose invalidations the process receives. The
 * nodes live as long as the near cache; ctx and id are the tracker's (under
 * its lock); gen and drop_seq are read without it (__atomic). */
struct xf__track_node {
  struct xf__track_node *next;
  struct xf__near_tracker *tracker;
  char *host; /* NULL: unix_path */
  int port;
  char *unix_path;
  xf__inval *ctx;    /* the invalidation connection; NULL = none */
  int inval_fd;      /* its socket, -1 = none (__atomic: a hit polls it) */
  long long id;      /* its CLIENT ID: the data connections' REDIRECT */
  uint64_t gen;      /* bumped when it is lost: tracking armed under an older
                        one delivers nothing (reconnect to re-arm) */
  uint64_t drop_seq; /* entries kept with a token below it are gone */
  /* Its opening, on an opener thread of its own (near_arm.c), under the
   * tracker's lock but for the fields marked __atomic: */
  xf__inval_who *want; /* asked for, as this client: an opener takes it */
  int opening;         /* an opener is opening it (the lock not held) */
  int asked;           /* __atomic: want or opening (xf__near_arm_due) */
  xf__inval_who *as;   /* the opener's (freed by it; a forked child's copy by
                          the child) */
  int open_fd;         /* the opener's connected socket, -1 = none: a close
                          shuts it down (the open ends at once) */
  int has_opener;      /* opener: a thread to join (opening, or done and not
                          joined yet by the tracker thread) */
  pthread_t opener;
  uint64_t opens;   /* opens tried: a waiting arm waits for it to move */
  int64_t retry_ms; /* __atomic: no open asked in the background before
                       (after a failure: backoff, 100 ms doubling to 5 s) */
  int backoff_ms;
  int open_rc; /* the last failed open's code and reason */
  char why[200];
  uint64_t reading; /* odd while the tracker holds bytes of ctx it has not
                       applied yet (read, partial or not): a hit on the
                       node's entries is served only when it is even and
                       unchanged across the hit (near.c), or
                       across a batch's lookups (near_batch.c); __atomic */
};

/* A full fence between the tracker's odd sequence and its recv(), and
 * between a hit's poll() and its second load of the sequence (near.c).
 * gcc's ThreadSanitizer refuses __atomic_thread_fence: there a sequentially
 * consistent read-modify-write of a dummy stands in. */
#ifdef __SANITIZE_THREAD__
extern int xf__near_fence_dummy;
#define XF__NEAR_FENCE()                                                                   \
  ((void)__atomic_fetch_add(&xf__near_fence_dummy, 0, __ATOMIC_SEQ_CST))
#else
#define XF__NEAR_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

/* ---- the cache (near.c) ---- */

int xf__near_open(struct xf__ncache **out, size_t max_bytes);
void xf__near_close(struct xf__ncache *n);

/* An invalidation of key from Redis (any node): as xf__near_drop, counted. */
void xf__near_invalidate(struct xf__ncache *n, const char *key, size_t keylen);

/* Everything kept from node goes (rc XF_EIO: its invalidation connection,
 * or a tracked data connection, was lost; 0: a FLUSHALL / FLUSHDB). */
void xf__near_drop_node(struct xf__ncache *n, struct xf__track_node *node, int rc);

/* Waits until driver ms until_ms, or until key is invalidated (or a node
 * dropped) after token was taken: 1 then, 0 when the time ran out. */
int xf__near_wait(struct xf__ncache *n, const char *key, size_t keylen, uint64_t token,
                  int64_t until_ms);

struct xf__near_tracker *xf__near_tracker(struct xf__ncache *n);

/* Wake pipes of event loops (xf_call_wake_open): fd, a pipe's write end,
 * gets a byte on every invalidation and node drop. */
int xf__near_notify_add(struct xf__ncache *n, int fd);
void xf__near_notify_remove(struct xf__ncache *n, int fd);

/* Whether key was invalidated (or a node dropped) since token: no wait. */
int xf__near_changed(struct xf__ncache *n, const char *key, size_t keylen, uint64_t token);

/* Totals since open (tests, bench). */
uint64_t xf__near_invalidations(const struct xf__ncache *n);
uint64_t xf__near_evictions(const struct xf__ncache *n);

/* fork(): taken by the share's before-fork hook, released in both
 * processes; the child's near cache starts empty and without connections. */
void xf__near_before_fork(struct xf__ncache *n);
void xf__near_after_fork(struct xf__ncache *n, int child);

/* What a lookup found besides its copy: the entry's node, the node's
 * sequence when found (even), and the sockets a check of news polls. */
typedef struct xf__near_seen {
  const struct xf__track_node *node;
  uint64_t reading;
  int inval_fd, data_fd;
  int stamp_fds[XF__STAMP_FDS]; /* a current stamp's (hit->stamp_names): -1 none */
} xf__near_seen;

/* xf__near_get's lookup without its check of news (near.c): 1 with *hit
 * and *seen, 0 when nothing may be served (not kept, past its life, its
 * node's sequence odd, out of memory). The hit is only servable once a
 * check made after it finds no news for seen->node (xf__near_get's, or a
 * batch's: near_batch.c). */
int xf__near_find(struct xf__ncache *n, const struct xf_client *c, const char *key,
                  size_t keylen, int64_t now_ms, xf__port_hit *hit, xf__near_seen *seen);

/* ---- a batch's near hits (near_batch.c) ---- */

/* Looks up the near cache for c's keys[0..count) (the user's keys, c's
 * prefix added) at now_ms, every key first, then checks each node they were
 * found on once: one poll() of the nodes' sockets, then each node's
 * sequence against the one seen when its first entry was found. An
 * invalidation read or pending while the batch looked up its keys makes
 * that node's hits go to Redis, as xf__near_get's own check does for one.
 * Until xf__near_batch_end(c), c's xf__near_get of one of those keys (in
 * order; a key may be skipped) takes its result from the batch. Nothing
 * (the calls then check one by one) when out of memory. */
void xf__near_batch_begin(struct xf__ncache *n, struct xf_client *c, size_t count,
                          const char *const *keys, const size_t *lens, int64_t now_ms);
void xf__near_batch_end(struct xf_client *c);

/* The batch's result for key (c's prefix included) if it is one of its keys
 * not taken yet: 1 with *hit (the caller's), 0 (no hit); -1: not a key of
 * the batch (look it up alone). */
int xf__near_batch_take(struct xf__ncache_batch *b, const struct xf_client *c,
                        const char *key, size_t keylen, xf__port_hit *hit);

/* For tests: called at each check of news a near hit makes (one per hit
 * alone, one per batch); NULL = none. */
extern void (*xf__near_test_on_check)(void);

/* For tests: called by xf__near_get with a hit found and checked (a
 * batch's too), before its caller uses it; NULL = none. */
extern void (*xf__near_test_after_hit)(void);

/* For tests: called by xf__near_batch_begin once every key is looked up,
 * before the check; NULL = none. */
extern void (*xf__near_test_batch_looked_up)(void);

/* For tests: called by xf__near_put before it takes its shard's lock (a
 * read's reply is in, its value not yet kept); NULL = none. */
extern void (*xf__near_test_before_put)(void);

/* For tests: called by the tracker thread with a message read from an
 * invalidation connection, before it applies it; NULL = none. */
extern void (*xf__near_test_before_apply)(void);

/* ---- the invalidations' log (near_events.c): XF_EV_INVALIDATION ---- */

struct xf__near_log *xf__near_log_open(void);
void xf__near_log_close(struct xf__near_log *l);
struct xf__near_log *xf__near_log(struct xf__ncache *n); /* NULL: none (no memory) */

/* fork(): phase 0 before (the log's lock taken, last: nothing is taken
 * under it), 1 after in the parent, 2 after in the child (the parent's
 * records are not the child's to report). */
void xf__near_log_fork(struct xf__near_log *l, int phase);

/* Logs an invalidation of key, or (key NULL) node's drop for rc, to be
 * reported by the next call with a hook (xf__near_report). Any thread. */
void xf__near_log_add(struct xf__near_log *l, const char *key, size_t keylen,
                      const struct xf__track_node *node, int rc);

/* ---- the tracker (near_track.c) ---- */

struct xf__near_tracker *xf__tracker_open(struct xf__ncache *n);
void xf__tracker_close(struct xf__near_tracker *t);
void xf__tracker_before_fork(struct xf__near_tracker *t);
void xf__tracker_after_fork(struct xf__near_tracker *t, int child);

/* For a data connection of c to host:port (or unix_path) being set up: the
 * node's invalidation connection, its id in *redirect_id for CLIENT
 * TRACKING on REDIRECT, and the ticket the connection keeps in *t. The
 * tracker thread opens that connection (with c's timeouts, TLS settings and
 * credentials) when it is not open: xf__near_arm waits for it (the blocking
 * drivers), xf__near_arm_later does not (the event loops'): it asks for it
 * and returns XF__NEAR_LATER with the node in t->node (t->gen meaningless)
 * while it is not open; the connection then serves untracked and asks again
 * once xf__near_arm_due(t->node). XF_OK, or an XF_E* code (the connection
 * is then set up without tracking: its reads are never kept). */
#define XF__NEAR_LATER 1 /* link.h's XF__LINK_ARM_LATER */
int xf__near_arm(struct xf__ncache *n, struct xf_client *c, const char *host, int port,
                 const char *unix_path, long long *redirect_id, xf__track *t);
int xf__near_arm_later(struct xf__ncache *n, struct xf_client *c, const char *host,
                       int port, const char *unix_path, long long *redirect_id,
                       xf__track *t);

/* Registers the link layer's tracking hooks (link.h) as these functions:
 * done when a near cache is opened. */
void xf__near_link_hooks(void);

/* Whether a connection told XF__NEAR_LATER for node should arm again now:
 * its invalidation connection is open, or a failed open's backoff is over
 * (the next arm asks again). No lock: one atomic load or two. */
int xf__near_arm_due(struct xf__track_node *node);

/* For tests: each open of an invalidation connection sleeps this long
 * first (a slow server: xf__inval_open); 0 = none. */
extern int xf__near_test_open_delay_ms;

/* The connection of ticket t (socket fd) is tracked: watched, so its loss
 * (CLIENT KILL, a server closing it) drops its node's entries at once; t->fd
 * is set (a hit polls it: see near.c). */
void xf__near_watch(xf__track *t, int fd);

/* The connection of t (fd) is going away: no longer watched, and its node's
 * entries drop (Redis stops invalidating what it tracked: redis#13082). */
void xf__near_lost(const xf__track *t, int fd);

/* Whether t was armed under an invalidation connection since lost (the
 * connection must be set up again to be tracked). */
static inline int xf__track_stale(const xf__track *t) {
  return t->node && __atomic_load_n(&t->node->gen, __ATOMIC_ACQUIRE) != t->gen;
}

/* Whether news for the near cache has reached the process and is not
 * applied yet: bytes waiting on an invalidation connection, or read by the
 * tracker and not yet applied (the bench's classification of stale reads;
 * no lock taken). */
int xf__near_news_waiting(struct xf__ncache *n);

/* ---- an invalidation connection (near_inval.c) ---- */

/* Opens one to host:port (or unix_path) as c's data connections are (TLS,
 * timeouts, AUTH, SELECT), named xfetch-invalidate and subscribed to
 * __redis__:invalidate; its CLIENT ID in *id. XF_OK, or the code with the
 * reason on c. Blocking (c's connect and command timeouts). */
int xf__inval_open(xf__inval **out, struct xf_client *c, const char *host, int port,
                   const char *unix_path, long long *id);

/* What of c an open needs (its TLS context referenced, its credentials
 * copied), kept for the tracker thread: c may close before it opens.
 * NULL: out of memory. _open_as: xf__inval_open as w, the reason in why. */
xf__inval_who *xf__inval_who_new(const struct xf_client *c);
void xf__inval_who_free(xf__inval_who *w);
int xf__inval_open_as(xf__inval **out, xf__inval_who *w, const char *host, int port,
                      const char *unix_path, long long *id, char *why, size_t whylen);

/* An open as w tells on(ud, fd) its socket once connected (before the
 * setup is sent) and on(ud, -1) before that socket closes or is handed
 * over: shutdown() of it meanwhile ends the open at once (XF_EIO). */
void xf__inval_who_watch(xf__inval_who *w, void (*on)(void *ud, int fd), void *ud);
int xf__inval_fd(const xf__inval *v);

/* Reads what the connection has, without waiting, and hands each whole
 * message to on (the reply freed after). 0; 1 when it holds the start of a
 * message whose rest has not come yet; -1 when the connection is lost
 * (closed, reset, unreadable). */
int xf__inval_read(xf__inval *v, void (*on)(void *ud, const struct xf_reply *r), void *ud);

/* Closes v (NULL-safe); _forget in a forked child (no byte sent). */
void xf__inval_close(xf__inval *v);
void xf__inval_forget(xf__inval *v);

#endif
