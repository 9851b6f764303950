/* <xfetch/options.h>: a client's connection options (TLS, cluster mode, write fence, entry
 * format).
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_OPTIONS_H
#define XFETCH_OPTIONS_H

#include "base.h"
#include "events.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A process-local share: see xf_share_open in <xfetch/share.h>. */
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
  int read_from_replicas; /* non-zero, in a cluster: reads (a plain read, or
                             the read script as EVALSHA_RO) go to the slot's
                             replicas, round
                             robin, after READONLY; they may see a value up
                             to the replication lag old. Leases and writes
                             always go to the master. Every driver reads
                             from replicas, the event loop (xf_async) too */
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
   * client is on this version (docs/design.md, "The entry on Redis"). */
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
   * caches of the fleet (docs/design.md, "The near cache"). 0 =
   * XF_FENCE_AUTO: on when the client's share has a near cache. */
  int write_fence;
  /* Non-zero: every entry this client's get-or-compute and set write carries
   * the tag of its namespace (its key_prefix: the key "<prefix>xf-ns"), so
   * that xf_clear_namespace invalidates all of them in O(1); each such call,
   * and xf_get, is then a tagged call (policy.tags): it reads that tag's
   * version (with the entry on standalone Redis; one more command on Redis
   * Cluster; none while the near cache keeps it). Every
   * client of the prefix must set it. */
  int namespace_tag;
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

/* The entry on Redis (options.entry_format; docs/design.md, "The entry on Redis"). */
typedef enum xf_entry_format {
  XF_ENTRY_DEFAULT = 0, /* XF_ENTRY_STRING in this version */
  XF_ENTRY_HASH = 1,    /* format 1: a hash (v d e s l n f); a hit is one HMGET */
  XF_ENTRY_STRING = 2   /* format 2: one string, a header (20 bytes for a plain
                           value) and the value; a hit is one GET */
} xf_entry_format;

#define XF_OPTIONS_INIT                                                                    \
  { 0 }

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_OPTIONS_H */
