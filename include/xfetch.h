/* xfetch — stampede-safe get-or-compute in front of expensive loaders, with
 * Redis as the shared cache.
 *
 *   xf_options o = XF_OPTIONS_INIT;
 *   xf_client *c;
 *   if (xf_client_open(&c, &o) != XF_OK) ...
 *   xf_policy p = XF_POLICY_INIT;
 *   xf_value v;
 *   int rc = xf_get_or_compute(c, "user:42", 7, &p, load_user, db, &v);
 *   ... v.data, v.len ...
 *   xf_value_free(&v);
 *   xf_client_close(c);
 *
 * Every fallible call returns XF_OK (0) or a negative XF_E* code; the detail
 * is on the client (xf_errmsg). If a call that takes a loader returns an error
 * before calling it, the loader is never called.
 *
 * Thread-safety: a client is one Redis connection and must be used by one
 * thread at a time (give each thread its own client). Distinct clients are
 * independent. Every *_free / *_close accepts NULL.
 */
#ifndef XFETCH_H
#define XFETCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(XFETCH_BUILDING) && defined(__GNUC__)
#define XF_EXPORT __attribute__((visibility("default")))
#else
#define XF_EXPORT
#endif

#define XF_VERSION_MAJOR 0
#define XF_VERSION_MINOR 1
#define XF_VERSION_PATCH 0

/* The error list: XF_ERR(NAME, code, message). Codes are frozen once
 * released; new ones are appended. */
#define XF_ERRNO_MAP(XF_ERR)                                                               \
  XF_ERR(EINVAL, -1, "invalid argument")                                                   \
  XF_ERR(ENOMEM, -2, "out of memory")                                                      \
  XF_ERR(ECONNECT, -3, "cannot connect to Redis")                                          \
  XF_ERR(EIO, -4, "Redis connection failed (I/O error or timeout)")                        \
  XF_ERR(EREDIS, -5, "Redis replied with an error")                                        \
  XF_ERR(EPROTO, -6, "unexpected reply from Redis")                                        \
  XF_ERR(ETIMEDOUT, -7, "timed out waiting for another caller's computation")              \
  XF_ERR(ELOADER, -8, "the loader failed")                                                 \
  XF_ERR(ENOTFOUND, -9, "not found (negative entry)")                                      \
  XF_ERR(EWRONGTYPE, -10, "the key holds a value that is not an xfetch entry")             \
  XF_ERR(EAUTH, -11, "Redis authentication or database selection failed")                  \
  XF_ERR(EUNAVAILABLE, -12,                                                                \
         "Redis cannot serve this command right now (busy, loading, read-only, out of "    \
         "memory)")                                                                        \
  XF_ERR(ENOPERM, -13, "the Redis ACL user may not run a command xfetch needs")            \
  XF_ERR(ESUPERSEDED, -14, "not cached: a newer value or a delete won")                    \
  XF_ERR(ECANCELED, -15, "canceled: interrupted, or its handle closed")                    \
  XF_ERR(EBUSY, -16, "every pooled client stayed busy for the checkout timeout")           \
  XF_ERR(ETLS, -17,                                                                        \
         "TLS failed: certificate not trusted, host name mismatch, or the handshake "      \
         "failed or timed out")

/* Return codes. */
enum {
  XF_OK = 0,
#define XF_ERR_ENUM(name, code, msg) XF_##name = (code),
  XF_ERRNO_MAP(XF_ERR_ENUM)
#undef XF_ERR_ENUM
};

/* A static, human-readable message for a return code ("unknown error" for
 * codes not in the list). Never NULL. */
XF_EXPORT const char *xf_strerror(int rc);

/* The code's name without prefix, e.g. "EINVAL" for XF_EINVAL, "OK" for 0,
 * "UNKNOWN" otherwise. Never NULL. */
XF_EXPORT const char *xf_errname(int rc);

/* A process-local share: see xf_share_open below. */
typedef struct xf_share xf_share;

/* An interrupt check (see xf_options.interrupt): non-zero = stop the call. */
typedef int (*xf_interrupt_fn)(void *ud);

/* A background refresh handed to a user's executor (xf_options.refresh_executor). */
typedef struct xf_refresh xf_refresh;

/* The executor: called in the thread of the call that won an early refresh
 * (policy.background_refresh), inside that call. Return 0 having taken r
 * (run it later, on any thread, with xf_refresh_run, or give it up with
 * xf_refresh_drop: exactly one of them, once); non-zero to refuse it (the
 * refresh is skipped: its lease released at once). With options.share, the
 * write goes through one of the share's idle refresh clients: run or drop
 * every r before closing the share. */
typedef int (*xf_refresh_executor_fn)(xf_refresh *r, void *ud);

/* How a client finds out whether it talks to a Redis Cluster. */
typedef enum xf_cluster_mode {
  XF_CLUSTER_AUTO = 0, /* ask the first server reached (INFO cluster) */
  XF_CLUSTER_ON = 1,   /* a cluster: route every key to its slot's node */
  XF_CLUSTER_OFF = 2   /* one standalone server (or a proxy): never route */
} xf_cluster_mode;

/* TLS (rediss://), part of xf_options: all zero = plain TCP. OpenSSL,
 * TLS 1.2 at least; the server's certificate is verified against ca_file /
 * ca_dir (the system store when both are NULL) and its name against
 * server_name or the host connected to (sent as SNI); a failure is XF_ETLS
 * with the reason in xf_errmsg ("certificate not trusted: ...", "host name
 * mismatch: certificate is for ..., wanted ...", "TLS handshake with ...
 * timed out ..."), never served fail-open: the breaker repeats it. A file
 * that cannot be loaded makes xf_client_open (and xf_async_open) fail with
 * XF_EINVAL. Every driver runs over it, the event-loop one included. */
typedef struct xf_tls_options {
  int enable;              /* non-zero: TLS on every connection (seeds, nodes) */
  const char *ca_file;     /* PEM bundle of trusted CAs */
  const char *ca_dir;      /* a c_rehash'd directory of trusted CAs */
  const char *cert_file;   /* client certificate chain (PEM), for mutual TLS */
  const char *key_file;    /* its private key (PEM); NULL: in cert_file */
  const char *server_name; /* SNI and the name to verify; NULL: each host's */
  int no_verify;           /* non-zero: accept any certificate (insecure) */
} xf_tls_options;

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
  XF_EV_HIT = 0,             /* result: a fresh value served from Redis */
  XF_EV_MISS = 1,            /* result: no usable value; this call loaded, waited
                                for another's load, or failed */
  XF_EV_EARLY = 2,           /* result: XFetch elected this call to refresh a
                                fresh value early (it still serves a value) */
  XF_EV_STALE = 3,           /* result: a value past its ttl was served (stale_ms
                                while another refreshes, stale_if_error_ms) */
  XF_EV_FAIL_OPEN = 4,       /* result: Redis could not be used (rc: why); the
                                loader runs (or the share answers) uncached */
  XF_EV_NEAR = 5,            /* result: served from the share's near cache */
  XF_EV_LEASE_WON = 6,       /* this call holds the key's lease */
  XF_EV_LEASE_LOST = 7,      /* another caller holds it */
  XF_EV_LOAD_START = 8,      /* the loader is about to run */
  XF_EV_LOAD_DONE = 9,       /* it ran: duration_us, rc 0 or its non-zero code */
  XF_EV_WAIT = 10,           /* a wait for another caller's load ended:
                                duration_us from its start to the last wake-up */
  XF_EV_LOCAL = 11,          /* the share answered instead of the loader */
  XF_EV_SUPERSEDED = 12,     /* a write was refused: a newer value or a delete won */
  XF_EV_BREAKER_OPEN = 13,   /* server's connection failed: calls skip it */
  XF_EV_BREAKER_CLOSED = 14, /* server's connection is back */
  XF_EV_RECONNECT = 15,      /* a connection to server was opened again */
  XF_EV_REDIRECT = 16,       /* Cluster MOVED / ASK followed (server: where to) */
  XF_EV_INVALIDATION = 17    /* the near cache was told a key changed, or
                                dropped a server's entries: see below */
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
 * backoff: nothing is kept from server meanwhile); key and server both NULL: more came between two reports than
 * are kept (1,024), some went unreported. They arrive on the share's
 * tracker thread and are kept until the next xf_get / xf_get_or_compute
 * (any driver) of a client of the share that has a hook, which reports
 * them first, on its own thread: each once per share, whichever client's
 * hook gets it (up to 64 per call; the rest go with the next calls). */
typedef struct xf_event {
  xf_event_type type;
  xf_driver driver;
  const char *key;
  size_t keylen;
  const char *server;
  int source;          /* the xf_source served (HIT, EARLY, STALE, LOCAL), or -1 */
  int64_t duration_us; /* LOAD_DONE: the loader's time; WAIT: the wait's */
  int rc;              /* LOAD_DONE: 0 or the loader's code; FAIL_OPEN: the
                          XF_E* that made Redis unusable; else 0 */
} xf_event;

/* The hook (see xf_options.on_event). */
typedef void (*xf_event_fn)(const xf_event *ev, void *ud);

/* The name of an event type ("hit", "lease_won", ...; "?" if unknown), and of
 * a driver ("blocking", "batch", "pool", "async", "call"). Static strings. */
XF_EXPORT const char *xf_event_name(int type);
XF_EXPORT const char *xf_driver_name(int driver);

/* Connection options. Zero (or NULL) in any field means its default, so
 * XF_OPTIONS_INIT (all zero) connects to 127.0.0.1:6379, db 0. Strings are
 * copied by xf_client_open; the struct may be freed afterwards. */
typedef struct xf_options {
  const char *host;       /* default "127.0.0.1"; or a comma-separated list of
                             seeds, "host[:port],..." ("[::1]:7000" for IPv6):
                             the first that answers is used, and the next
                             when it cannot be reached (a cluster's map is
                             loaded from any of them) */
  int port;               /* default 6379; for seeds given without a port */
  const char *unix_path;  /* Unix socket; when set, host/port are unused */
  const char *username;   /* ACL user (Redis 6+); NULL = "default" */
  const char *password;   /* NULL = no AUTH */
  int db;                 /* SELECT db; default 0 */
  int connect_timeout_ms; /* default 1000 */
  int command_timeout_ms; /* per command; default 1000 */
  const char *key_prefix; /* prepended to every key; default "" */
  uint64_t seed;          /* PCG32 seed for the XFetch draws; 0 = getrandom() */
  size_t max_key_len;     /* longest key accepted; default 65536 */
  size_t max_value_len;   /* longest value accepted; default 64 MiB */
  int breaker_ms;         /* after a connection failure, how long calls skip
                             Redis (fail open) before reconnecting; default
                             1000; negative = never skip */
  int lazy_connect;       /* non-zero: xf_client_open does not connect; the
                             first call does (and fails open if Redis is
                             down), so a service can start without Redis */
  xf_share *share;        /* NULL, or a share (xf_share_open) that keeps the
                             loader protected while Redis cannot be used */
  int64_t tombstone_ms;   /* how long xf_delete's tombstone (and the one a
                             loader's "not found" leaves) refuses the writes
                             of computations that started before it: make it
                             longer than your slowest loader; default 60000 */
  int cluster;            /* xf_cluster_mode; default XF_CLUSTER_AUTO. In a
                             cluster each key goes to its slot's master (one
                             connection per node, opened when first needed),
                             MOVED / ASK / TRYAGAIN / CLUSTERDOWN are followed
                             and the map is reloaded when nodes move or fail;
                             db must be 0. Unix sockets are never a cluster */
  int read_from_replicas; /* non-zero, in a cluster: reads (EVALSHA_RO of the
                             read script) go to the slot's replicas, round
                             robin, after READONLY; they may see a value up
                             to the replication lag old. Leases and writes
                             always go to the master. The event-loop driver
                             (xf_async) ignores it: its reads go to the master */
  /* NULL, or called with interrupt_ud, in the calling thread, at least every
   * 50 ms while a blocking call waits: for another caller's lease, for
   * another thread's load of the key in the share, for a pooled client
   * (xf_pool_*), or for a Redis reply that does not come (a slow or stopped
   * server; any blocking, batch or pool call). Non-zero ends the call at
   * once with XF_ECANCELED: the loader is not run, or its result is dropped;
   * a connection whose reply was still due is closed (reopened on next use,
   * never read again; the breaker is not armed). A lease the call holds is
   * released on a fresh connection within 250 ms, without asking again, or
   * else expires after lease_ms. Not asked while connecting or writing a
   * request. When set, each reply costs one poll(); when NULL, nothing. For
   * bindings that must let a signal (Ctrl-C) through a wait. */
  xf_interrupt_fn interrupt;
  void *interrupt_ud;
  xf_tls_options tls; /* {0}: plain TCP; see xf_tls_options */
  /* NULL, or called with on_event_ud for each event of the client's calls
   * and connections (see xf_event): every driver, the same events. */
  xf_event_fn on_event;
  void *on_event_ud;
  int disabled; /* non-zero: the client starts bypassed (xf_client_set_enabled)
                   and xf_client_open connects to nothing */
  /* xf_entry_format: the format of the entries this client writes (values,
   * leases on a new key, tombstones); 0 = XF_ENTRY_STRING, whose hit is one
   * GET (a batch one MGET per node). Every client of this version reads both,
   * and an existing entry keeps its format until it is rewritten, so a fleet
   * may mix them. XF_ENTRY_HASH (a hit is one HMGET) is for a fleet that still
   * has clients reading hashes only (a pre-release build): keep it until every
   * client is on this version (README, "The entry on Redis"). */
  int entry_format;
  /* NULL, or where a blocking client's background refreshes run (see
   * xf_refresh_executor_fn) instead of its share's refresh workers; called
   * with refresh_executor_ud. */
  xf_refresh_executor_fn refresh_executor;
  void *refresh_executor_ud;
  /* xf_write_fence: whether a write that changes an entry (a load's write,
   * background refreshes included; xf_set; xf_delete) is followed by one
   * PING on the same connection before the call returns, so that when it
   * returns Redis has sent every invalidation the write caused to the near
   * caches of the fleet (README, "Near cache": the write fence). 0 =
   * XF_FENCE_AUTO: on when the client's share has a near cache. */
  int write_fence;
} xf_options;

/* options.write_fence. Redis writes a write's reply to the writer before the
 * invalidations it caused to the tracking connections (one pass over its
 * pending replies, the last first): without the fence a writer may hold its
 * acknowledgement while a near cache elsewhere has not been told yet. The
 * fence costs one round trip per write (a batch: one per round). A fence
 * that fails (the connection lost after the write's reply) does not fail the
 * call: the write was acknowledged, and is counted in stats.fence_failed. */
typedef enum xf_write_fence {
  XF_FENCE_AUTO = 0, /* on with a near cache (xf_share_options.near_cache_bytes) */
  XF_FENCE_ON = 1,   /* always: a writer without a near cache in a fleet whose
                        readers have one */
  XF_FENCE_OFF = 2   /* never */
} xf_write_fence;

/* The entry on Redis (options.entry_format; README, "The entry on Redis"). */
typedef enum xf_entry_format {
  XF_ENTRY_DEFAULT = 0, /* XF_ENTRY_STRING in this version */
  XF_ENTRY_HASH = 1,    /* format 1: a hash (v d e s l n f); a hit is one HMGET */
  XF_ENTRY_STRING = 2   /* format 2: one string, a header (20 bytes for a plain
                           value) and the value; a hit is one GET */
} xf_entry_format;

#define XF_OPTIONS_INIT                                                                    \
  { 0 }

/* What xf_get_or_compute does when a miss waits for another caller's loader
 * longer than policy.wait_ms. */
typedef enum xf_on_wait_timeout {
  XF_WAIT_LOAD = 0, /* run the loader itself (default) */
  XF_WAIT_FAIL = 1  /* return XF_ETIMEDOUT */
} xf_on_wait_timeout;

/* Caching policy for one call. Start from XF_POLICY_INIT and change fields.
 * Times are milliseconds. */
typedef struct xf_policy {
  int64_t ttl_ms;            /* logical lifetime of a computed value; > 0 */
  double beta;               /* XFetch eagerness: 0 = never early, 1 = the
                                paper's optimum, INFINITY = always recompute */
  int64_t lease_ms;          /* how long a loader may hold the key's lease; > 0.
                                The lease taken is twice the entry's delta
                                (its last loader's time) when that is longer,
                                so a slow loader keeps its protection once
                                its time is known */
  int64_t wait_ms;           /* how long a miss waits for another's loader */
  int64_t stale_ms;          /* after ttl, how long a value may still be served
                                while one caller refreshes it (0 = never) */
  int64_t stale_if_error_ms; /* past ttl, serve a stale value this long when the
                                loader fails (independent of stale_ms: the
                                entry stays ttl + the larger of the two) */
  int64_t negative_ttl_ms;   /* lifetime of a cached "not found"; 0 = do not
                                cache not-found (a value still cached for the
                                key is then removed: the loader said it is
                                gone) */
  double jitter;             /* 0..1: each write shortens ttl by up to this
                                fraction, at random, to spread mass expiry */
  xf_on_wait_timeout on_wait_timeout;
  /* Background refresh: non-zero = a caller that wins the lease of an
   * *early* refresh (a value still within its ttl) returns that value at
   * once, and the loader runs off the request path, on the share's refresh
   * workers (xf_share_open; a pool has its own share), with the same lease,
   * write and newer-wins rules; loader and loader_ud must then stay valid
   * until the share (or pool) is closed, and may run on a worker thread. A
   * pool's refresh writes through a pooled client; a blocking client's
   * through one of its share's refresh clients, opened like it (options
   * copied) and kept idle for the next refresh. A failed background refresh
   * keeps the cached value, releases the lease (the next draw retries),
   * counts load_errors (the pool's; a blocking client's in
   * xf_share_refresh_stats' clients)
   * and emits LOAD_DONE with its code; it never reaches a caller. When the
   * queue is full, the refresh is skipped (lease released;
   * xf_refresh_info.skipped). Misses and expired values still load in the
   * call. The sans-I/O call hands the refresh to its driver
   * (xf_call_take_refresh); the event-loop driver runs it on the loop as
   * a call of its own (no callback; xf_async_close cancels it). The batch
   * driver with a per-key loader (xf_get_or_compute_many) hands it on as
   * the blocking driver does. A batch loader (xf_get_or_compute_many_batch),
   * and a client with neither a share nor a refresh_executor, run the
   * refresh in the call. */
  int background_refresh;
  /* When a fresh value is refreshed early. 0: rate-aware (refresh_ahead 1.5)
   * with background_refresh, XFetch (beta) without. > 0: rate-aware: the
   * first call that finds remaining ttl <= refresh_ahead x delta (the last
   * loader's time) refreshes; the lease makes it the only one, so about one
   * load per ttl at any request rate. < 0: XFetch (beta) always. */
  double refresh_ahead;
} xf_policy;

#define XF_POLICY_INIT                                                                     \
  { 60000, 1.0, 5000, 5000, 0, 0, 0, 0.0, XF_WAIT_LOAD, 0, 0.0 }

/* The default refresh_ahead factor of the rate-aware rule. */
#define XF_REFRESH_AHEAD_DEFAULT 1.5

/* Where a returned value came from. */
typedef enum xf_source {
  XF_SOURCE_CACHE = 0,    /* a valid cached value */
  XF_SOURCE_LOADER = 1,   /* this call ran the loader and cached the result */
  XF_SOURCE_STALE = 2,    /* past its ttl, within stale_ms / stale_if_error_ms */
  XF_SOURCE_UNCACHED = 3, /* this call ran the loader but its value was not
                             cached: Redis unreachable or unable to write, or
                             the write was refused because a newer value or a
                             delete won (stats.superseded) */
  XF_SOURCE_LOCAL = 4     /* Redis could not be used, and the value came from
                             the client's xf_share: another thread's load of
                             the key, or one kept from such a load (for up to
                             its ttl) */
} xf_source;

/* A value returned to the caller. data is owned by the value (NUL-terminated
 * for convenience, binary-safe by len); release it with xf_value_free. */
typedef struct xf_value {
  char *data;
  size_t len;
  xf_source source;
} xf_value;

/* Frees v->data and zeroes *v. NULL-safe; safe to call twice. */
XF_EXPORT void xf_value_free(xf_value *v);

/* The process-local share (after curl's share interface): clients opened
 * with the same share have in common, while Redis cannot be used for a key,
 * one in-flight load per key (single-flight across threads: the others wait
 * for its outcome, up to policy.wait_ms) and a bounded fallback cache of the
 * values so loaded (each kept up to its ttl, least recently used evicted).
 * Its entries are keyed by where their values come from: the client's
 * servers (host:port list or Unix path), db and user, then the prefixed key;
 * clients of other servers, dbs or users never see them. A set or delete of
 * the key through a client of the share (xf_set, xf_delete, xf_pool_set,
 * xf_pool_delete, xf_call_start_set/_delete, and the write of a
 * get-or-compute's loaded value) drops the share's copy, acknowledged or
 * not: the share never serves a value older than one written since.
 * Thread-safe. It must outlive every client opened with it. */
typedef struct xf_share_options {
  size_t max_entries; /* keys kept at most; 0 = 10000 */
  size_t max_bytes;   /* bytes of keys and values kept at most; 0 = 64 MiB */
  /* The near cache: bytes (keys, values and ~130 bytes of overhead per
   * entry) of values read from Redis kept in the process, so a hit on them
   * sends nothing; 0 = off (the default). Kept correct by Redis' CLIENT
   * TRACKING (RESP2: one invalidation connection per node, named
   * xfetch-invalidate, read by a thread of the share): a key written
   * elsewhere is dropped when its invalidation comes in (a read overtaken
   * by one is not kept); losing that connection, or any tracked data
   * connection, and FLUSHALL / FLUSHDB drop all of that node's entries at
   * once; this process's own sets and deletes drop them before they
   * return; a forked child starts empty. A near hit runs the XFetch draw
   * locally: an elected refresh, an expiry or a lease goes to Redis as
   * without it. Counted in stats.hits and stats.near_hits (the result event
   * is XF_EV_NEAR). Callers waiting for another caller's load of a key are
   * woken by its invalidation instead of polling (blocking, pool and
   * event-loop drivers; a sans-I/O driver through xf_call_wake_open). Needs
   * Redis 6+; entries come from the blocking, pool and event-loop drivers'
   * reads and from a sans-I/O driver's tracked connections (xf_call_track_*),
   * plain or TLS (the invalidation connections use the client's options.tls
   * and credentials; XF_EV_INVALIDATION reports what they say); evicts least
   * recently used per shard (the budget is split over 8 to 64 shards of
   * 256 KiB or more: an entry larger than a shard's part is never kept). */
  size_t near_cache_bytes;
} xf_share_options;

/* Creates a share in *out. opts NULL = defaults. XF_OK, XF_EINVAL or
 * XF_ENOMEM. */
XF_EXPORT int xf_share_open(xf_share **out, const xf_share_options *opts);

/* Closes the share (NULL-safe). Clients opened with it hold a reference: a
 * share closed before them (a garbage collector's order) is freed with the
 * last one's xf_client_close, and serves them until then. Its
 * refresh workers (background_refresh) stop taking refreshes; queued ones
 * are dropped (their leases expire), running ones are waited for up to
 * XF_REFRESH_DRAIN_MS, then abandoned (they finish their loader and drop its
 * result; their leases expire). */
XF_EXPORT void xf_share_close(xf_share *s);

/* How long closing a pool or share waits for running background refreshes. */
#define XF_REFRESH_DRAIN_MS 2000

/* Opaque client: one Redis connection plus its PCG32 generator and counters. */
typedef struct xf_client xf_client;

/* Connects (unless opts->lazy_connect) and returns a client in *out. On
 * error *out is NULL and the code says why (XF_ECONNECT, XF_EAUTH, XF_EINVAL,
 * XF_ENOMEM). opts NULL means all defaults. */
XF_EXPORT int xf_client_open(xf_client **out, const xf_options *opts);

/* The bypass switch: with enabled 0, every call of the client (any driver
 * using it) sends nothing to Redis: get-or-compute runs the loader and
 * returns its value (source XF_SOURCE_UNCACHED; stats.bypassed counts them,
 * no event but LOAD_START / LOAD_DONE), xf_get returns XF_ENOTFOUND, xf_set
 * and xf_delete return XF_OK having done nothing. Enabled 1 (the default)
 * caches again. A call reads the switch when it starts. Not thread-safe
 * against the client's own calls (a client is one thread's). Pools and
 * event-loop handles take options.disabled for their clients. */
XF_EXPORT void xf_client_set_enabled(xf_client *c, int enabled);

/* Closes the connection and frees the client. NULL-safe. */
XF_EXPORT void xf_client_close(xf_client *c);

/* The detail of the last error on this client ("" if none). The string is
 * owned by the client and valid until its next call. */
XF_EXPORT const char *xf_errmsg(const xf_client *c);

/* The non-zero code the loader returned when a call failed with XF_ELOADER
 * (0 otherwise). */
XF_EXPORT int xf_loader_error(const xf_client *c);

/* Where a loader puts its result. */
typedef struct xf_sink xf_sink;

/* Hands the loader's bytes to xfetch (copied). Returns XF_OK, XF_EINVAL
 * (data NULL with len > 0, or len above max_value_len) or XF_ENOMEM. The last
 * call wins. */
XF_EXPORT int xf_sink_set(xf_sink *sink, const void *data, size_t len);

/* Marks the result "not found": cached for policy.negative_ttl_ms (when > 0)
 * and reported to the caller as XF_ENOTFOUND. */
XF_EXPORT void xf_sink_not_found(xf_sink *sink);

/* Sets the logical lifetime of the value this loader hands over, instead of
 * policy.ttl_ms (policy.jitter still applies; stale windows unchanged), for a
 * ttl that depends on the result. 0 = do not cache it: the caller gets the
 * value (XF_SOURCE_UNCACHED), nothing is written and the lease is released
 * (the entry keeps what it held). While Redis cannot be used, the client's
 * xf_share keeps the value for this ttl too (0: not kept). Call it from the
 * loader, before or after xf_sink_set; a not-found keeps
 * policy.negative_ttl_ms. Returns XF_OK or XF_EINVAL (sink NULL, ttl_ms
 * outside [0, 2^40]). */
XF_EXPORT int xf_sink_ttl(xf_sink *sink, int64_t ttl_ms);

/* The loader: computes the value for key and hands it to sink. Returns 0 on
 * success; any other value is a failure, nothing is cached and the code is
 * kept (xf_loader_error). */
typedef int (*xf_loader_fn)(void *ud, const char *key, size_t keylen, xf_sink *sink);

/* Returns the value of key, computing it with loader when it is missing,
 * expired, or (XFetch) elected for early recomputation. Across every client
 * of the same Redis, one caller at a time runs the loader for a key.
 * On XF_OK, *out holds the value (free it with xf_value_free); on error *out
 * is zeroed. XF_ENOTFOUND when the loader (or a cached negative entry) said
 * not found. When Redis is unreachable the loader is called and its value
 * returned with source XF_SOURCE_UNCACHED (fail open). A call made from
 * inside a loader, on its thread, for the very key that loader computes
 * (through any client or pool of the same servers, db and user; batch and
 * event-loop calls too) returns XF_EINVAL at once, its loader not called,
 * xf_errmsg "the loader for key K asked for K itself (a recursion...)": it
 * would otherwise wait on its own lease for wait_ms, then load again. */
XF_EXPORT int xf_get_or_compute(xf_client *c, const char *key, size_t keylen,
                                const xf_policy *policy, xf_loader_fn loader,
                                void *loader_ud, xf_value *out);

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

/* The batch driver: n get-or-compute calls at once, with the same policy and
 * loader. The reads of all n keys travel in one round trip, as one read_many
 * script call (one per slot in Redis Cluster), so hits return after it. The
 * loaders then run one after the other, in this thread, for the keys this
 * caller wins: a key's lease is taken at its turn, with the write of the key
 * before (or for the next few keys at once, as many as the loads so far say
 * fit in half of policy.lease_ms), so every lease covers its key's load
 * however long the batch takes. A key another caller takes meanwhile is
 * waited for or served, not loaded again. Each key
 * behaves exactly as xf_get_or_compute would: rcs[i] is its code and values[i] its value
 * (free each with xf_value_free; zeroed on error). Returns XF_OK when every key has its
 * rcs[i] (whatever they are), XF_EINVAL (a NULL array or loader: no key was looked at) or
 * XF_ENOMEM. n == 0 is XF_OK. Uses the client's one connection: same thread
 * rules as every call. */
XF_EXPORT int xf_get_or_compute_many(xf_client *c, size_t n, const char *const *keys,
                                     const size_t *keylens, const xf_policy *policy,
                                     xf_loader_fn loader, void *loader_ud, xf_value *values,
                                     int *rcs);

/* A batch loader: computes the values of n keys in one go (one SQL IN (...),
 * one multi-get from the source of truth) and hands key i's value to
 * sinks[i] with xf_sink_set (or xf_sink_not_found). keys[i] and keylens[i]
 * are as the caller gave them; every array is valid during the call only.
 * Returns 0 on success (a key whose sink it left unset fails with
 * XF_ELOADER); any other value fails every key of the call, nothing is cached
 * and the code is kept (xf_loader_error). */
typedef int (*xf_batch_loader_fn)(void *ud, size_t n, const char *const *keys,
                                  const size_t *keylens, xf_sink *const *sinks);

/* xf_get_or_compute_many with a batch loader: the keys this caller must load
 * (the leases it won, and any it loads after waiting or failing open) are
 * loaded with one call of loader per round of the batch: usually one call
 * with exactly the batch's missing keys; a key that waited on another
 * caller's lease and then had to load comes in a later call. Each key's delta
 * (XFetch) is the whole call's duration; every lease of a call is taken
 * right before it. Same returns, ownership and thread rules as
 * xf_get_or_compute_many. While Redis cannot be used, the keys go through
 * the client's share as xf_get_or_compute's do: a key another thread is
 * loading is waited for (its outcome served as XF_SOURCE_LOCAL), and the
 * call's loader gets only the keys it leads, their outcomes then handed to
 * the threads waiting on them. */
XF_EXPORT int xf_get_or_compute_many_batch(xf_client *c, size_t n, const char *const *keys,
                                           const size_t *keylens, const xf_policy *policy,
                                           xf_batch_loader_fn loader, void *loader_ud,
                                           xf_value *values, int *rcs);

/* Reads key's value without computing anything: XF_OK with a copy in *out
 * (source XF_SOURCE_CACHE; free with xf_value_free) while the value is
 * within its ttl; XF_ENOTFOUND when the entry is absent, past its ttl (a
 * stale value is not returned) or a cached not-found. Takes no lease, never
 * waits. One round trip (the read script). An entry not as xfetch writes it
 * (stats.malformed) is XF_ENOTFOUND. Errors: XF_EINVAL, XF_ECONNECT, XF_EIO,
 * XF_EUNAVAILABLE (BUSY, LOADING...: to the read or its SCRIPT LOAD),
 * XF_EREDIS, XF_EWRONGTYPE, ... (no fail-open: there is no loader). */
XF_EXPORT int xf_get(xf_client *c, const char *key, size_t keylen, xf_value *out);

/* Writes a value for key as if a loader had produced it now (warm-up, or
 * write-through). The entry keeps the delta it learned from its last loader
 * run (0 for a new entry, which is then never refreshed early in its first
 * lifetime). A value being computed concurrently that started earlier will
 * not overwrite it. Returns XF_ESUPERSEDED, writing nothing, when the entry
 * holds a value dated later than now (e.g. after the server's clock stepped
 * back); XF_EUNAVAILABLE when Redis cannot run it now (BUSY, LOADING, ...:
 * answered to the write or to its SCRIPT LOAD). */
XF_EXPORT int xf_set(xf_client *c, const char *key, size_t keylen, const void *data,
                     size_t len, const xf_policy *policy);

/* Checks that Redis answers (PING), connecting first if needed: a readiness
 * probe, or the way to surface a lazy_connect client's connection error.
 * Returns XF_OK, or XF_ECONNECT / XF_EAUTH / XF_EIO / XF_EREDIS with the detail
 * on the client. */
XF_EXPORT int xf_ping(xf_client *c);

/* Removes key's entry (value and lease). Returns XF_OK whether or not it
 * existed. A delete wins over every computation that started before it: a
 * tombstone (a hash holding only `s`, for options.tombstone_ms) refuses their
 * writes, so "update the database, then delete the cache entry" never leaves
 * the old value cached. XF_EUNAVAILABLE as for xf_set. */
XF_EXPORT int xf_delete(xf_client *c, const char *key, size_t keylen);

/* Counters since the client was opened. */
typedef struct xf_stats {
  uint64_t hits;          /* valid value returned from the cache */
  uint64_t misses;        /* no usable value in the cache */
  uint64_t early;         /* XFetch elected an early recompute */
  uint64_t loads;         /* loader calls made by this client */
  uint64_t load_errors;   /* loader calls that failed */
  uint64_t lease_lost;    /* another caller held the lease */
  uint64_t waits;         /* calls that waited for another caller's loader */
  uint64_t stale;         /* stale values served */
  uint64_t uncached;      /* values returned without caching (fail open) */
  uint64_t redis_errors;  /* Redis errors (replies, I/O, connect) */
  uint64_t superseded;    /* writes refused because a newer value or a delete
                             won (the value was returned uncached) */
  uint64_t local;         /* calls the share answered instead of the loader:
                             another thread's load of the key (its value, its
                             not-found or its failure) or a value kept from
                             one (XF_SOURCE_LOCAL); not counted in loads */
  uint64_t redirects;     /* Cluster MOVED and ASK redirections followed */
  uint64_t map_refreshes; /* Cluster slot maps loaded (CLUSTER SLOTS) */
  uint64_t connections;   /* connections open now (one per node in a cluster;
                             a gauge, not a counter) */
  uint64_t malformed;     /* entries read that xfetch did not write as they
                             are (a field out of range or not a number):
                             each is a miss, recomputed and overwritten */
  uint64_t bypassed;      /* calls made while disabled (xf_client_set_enabled) */
  /* hits served from the share's near cache without Redis (also in hits) */
  uint64_t near_hits;
  /* near cache entries this client's reads evicted to stay within
   * near_cache_bytes */
  uint64_t near_evictions;
  /* write fences (options.write_fence) whose PING failed after an
   * acknowledged write: the call succeeded, the fleet's near caches may be
   * told of the write later than it returned */
  uint64_t fence_failed;
} xf_stats;

/* Copies the client's counters into *out. */
XF_EXPORT void xf_client_stats(const xf_client *c, xf_stats *out);

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
 * duration is the driver's measure (changed before 1.0: the calls read
 * CLOCK_MONOTONIC themselves until then). The client gives the
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
 * out of order is not wrong, its call asks again). Returns XF_OK, XF_EINVAL (call not in XF_CALL_SEND, or a
 * NULL argument) or XF_ENOMEM (the request stays as it was: send it). A
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

/* Background refresh (policy.background_refresh): a get-or-compute call that
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
 * ask. xf_call_setup_count: how many commands (0: none; XF_EINVAL for a NULL
 * c). xf_call_setup: the RESP bytes of command i (0 <= i < count), owned by c
 * and valid until the next call on c; NULL (and *len 0) for an i out of range
 * or out of memory. The commands may be pipelined, and the calls' requests
 * after them: Redis runs them in order. */
XF_EXPORT int xf_call_setup_count(const xf_client *c, int flags);
XF_EXPORT const char *xf_call_setup(xf_client *c, int flags, int i, size_t *len);

/* Judges the reply to setup command i (same flags) and frees it; NULL = the
 * connection failed before it came. Returns XF_OK, or, with the message in
 * xf_errmsg(c), the code the connection's calls get (close it):
 * XF_EAUTH (AUTH refused: WRONGPASS, ...; NOAUTH; SELECT refused), XF_EINVAL
 * (SELECT on a Redis Cluster: db 0 only), XF_EUNAVAILABLE (BUSY, LOADING: the
 * server cannot serve now; calls fail open, as on XF_EIO), XF_EREDIS
 * (READONLY refused), XF_EIO (no reply), XF_EINVAL (c NULL, i out of range).
 * A SCRIPT LOAD's error is XF_OK: the call that needs the script loads it. */
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

/* ---- The pool driver -------------------------------------------------------
 *
 * xf_pool is get-or-compute for threaded services: any number of threads
 * share at most max_connections clients (Redis connections; in a cluster,
 * that many clients each with its connections to the nodes). A call holds a
 * client only while it talks to Redis, never while its loader runs or it
 * waits, so a loader may call the pool again even with max_connections 1.
 * The pool owns a process-local share (xf_share: one load per key across the
 * threads while Redis cannot be used) unless opts->share is given. Open it in
 * the process that uses it: after fork(), a child opens its own pool. */
typedef struct xf_pool xf_pool;

/* Opens a pool in *out with one client (not connected: clients connect on
 * first use, as with lazy_connect); more are made on demand up to
 * max_connections (1..4096). opts is copied (NULL = defaults). A call that
 * finds every client busy waits up to checkout_timeout_ms (0 = 1000) for one,
 * then returns XF_EBUSY without calling the loader. Returns XF_OK,
 * XF_EINVAL or XF_ENOMEM. Thread-safe once open. */
XF_EXPORT int xf_pool_open(xf_pool **out, const xf_options *opts, size_t max_connections,
                           int checkout_timeout_ms);

/* xf_get_or_compute through the pool: same arguments, result and contract,
 * plus XF_EBUSY when no client came free in time, and XF_ENOMEM when the
 * pool had room for a new client but could not make it (the pool is then
 * unchanged; the loader is not called). A NULL or empty key or a
 * NULL policy, out or loader is XF_EINVAL at once, without waiting for a
 * client. Thread-safe. */
XF_EXPORT int xf_pool_get_or_compute(xf_pool *p, const char *key, size_t keylen,
                                     const xf_policy *policy, xf_loader_fn loader,
                                     void *loader_ud, xf_value *out);

/* xf_set and xf_delete through the pool (plus XF_EBUSY, and XF_ENOMEM as
 * above). Thread-safe. */
XF_EXPORT int xf_pool_set(xf_pool *p, const char *key, size_t keylen, const void *data,
                          size_t len, const xf_policy *policy);
XF_EXPORT int xf_pool_delete(xf_pool *p, const char *key, size_t keylen);

/* The message of the calling thread's last failed pool call ("" after a
 * success); valid until its next pool call. Never NULL. */
XF_EXPORT const char *xf_pool_errmsg(void);

/* What the pool did. */
typedef struct xf_pool_info {
  xf_stats clients;   /* the clients' counters summed (as of their last
                         call); connections: those of the idle clients */
  uint64_t open;      /* clients made (<= max_connections) */
  uint64_t idle;      /* clients not in use now */
  uint64_t waited;    /* calls that waited for a client */
  uint64_t timed_out; /* calls that gave up waiting (XF_EBUSY) */
} xf_pool_info;

/* Copies the pool's counters into *out (zeros for a NULL pool). Thread-safe. */
XF_EXPORT void xf_pool_stats(xf_pool *p, xf_pool_info *out);

/* Closes every client and frees the pool (NULL-safe); no call may be running. */
XF_EXPORT void xf_pool_close(xf_pool *p);

/* ---- The event-loop driver ------------------------------------------------
 *
 * xf_async is get-or-compute for an event loop: calls never block, many run at
 * once on one non-blocking connection per server (plain or TLS; their commands pipelined;
 * in a Redis Cluster one per master, each key routed to its slot's master as
 * xf_client does), waits are loop timers and the loader may complete later. Attach it to a
 * loop with an adapter header shipped next to this one (libxfetch links no event library):
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

/* Runs when a call is over, exactly once per call xf_async_get_or_compute
 * accepted. rc is XF_OK or an error as for xf_get_or_compute (XF_ECANCELED
 * when xf_async_close ended the call). value is NULL unless rc is XF_OK; it
 * and its data belong to xfetch and are valid until the callback returns
 * (copy what you keep). The callback may start new calls and may close the
 * handle. */
typedef void (*xf_async_callback_fn)(int rc, const xf_value *value, void *privdata);

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
 * the next seed instead of failing open. */
XF_EXPORT int xf_async_open(xf_async **out, const xf_options *opts,
                            const xf_async_loop *loop);

/* Ends every unfinished call (its callback fires with XF_ECANCELED, from
 * inside this function, or when the current callback returns if called from
 * one), closes the connection and frees the handle. Leases held by the ended
 * calls expire by themselves (policy.lease_ms). A loader still running keeps
 * its load valid: complete it as usual; the result is discarded. NULL-safe. */
XF_EXPORT void xf_async_close(xf_async *ac);

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

/* Completes load with the value (copied). Returns XF_OK, or XF_EINVAL (data
 * NULL with len > 0, len above max_value_len) / XF_ENOMEM, in which case the
 * load completes as a loader failure with that code. Either way load is used
 * up; it may be completed inside the loader or later, once. */
XF_EXPORT int xf_async_load_done(xf_async_load *load, const void *data, size_t len);

/* Completes load with "not found" (see xf_sink_not_found). */
XF_EXPORT void xf_async_load_not_found(xf_async_load *load);

/* Completes load with a failure: nothing is cached, code (0 becomes
 * XF_ELOADER) is kept for xf_async_loader_error, and the call serves stale
 * data if its policy allows or fails with XF_ELOADER. */
XF_EXPORT void xf_async_load_fail(xf_async_load *load, int code);

/* For adapters: the timer armed by timer_start has fired. */
XF_EXPORT void xf_async_timer_fired(xf_async *ac);

/* For adapters: conn's descriptor is ready for events (XF_ASYNC_READ |
 * XF_ASYNC_WRITE; both when the loop reports an error on it). */
XF_EXPORT void xf_async_ready(xf_async_conn *conn, int events);

/* The detail of the error a callback was given, valid inside that callback
 * ("" if none). Owned by the handle. */
XF_EXPORT const char *xf_async_errmsg(const xf_async *ac);

/* Inside a callback given XF_ELOADER: the code the loader failed with. */
XF_EXPORT int xf_async_loader_error(const xf_async *ac);

/* Copies the handle's counters (as xf_client_stats) into *out. */
XF_EXPORT void xf_async_stats(const xf_async *ac, xf_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_H */
