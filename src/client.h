/* The client handle and its connection to Redis. */
#ifndef XF_CLIENT_H
#define XF_CLIENT_H

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <sys/types.h>

#include "conn.h"
#include "pcg.h"
#include "resp.h"
#include "router.h"
#include "xfetch.h"

struct xf_client {
  xf__conn *seeds; /* the servers options.host lists (most often one) */
  int nseeds;
  int server;         /* standalone: the seed in use */
  int cluster;        /* the xf_cluster_mode asked for */
  int mode_known;     /* standalone or cluster is decided (blocking drivers) */
  xf__routes routes;  /* mode, map, nodes: every driver's routing decisions */
  xf__router *router; /* the blocking drivers' node connections; NULL standalone */
  int read_from_replicas;
  char *host, *unix_path, *username, *password; /* host, port: the first seed */
  int port, db, connect_timeout_ms, command_timeout_ms, breaker_ms;
  int64_t tombstone_ms;
  xf_share *share; /* borrowed; NULL = none */
  char *ns;        /* where values come from: the servers (or unix path), db
                      and user, NUL-separated (share slots, nested loads) */
  size_t ns_len;
  xf_interrupt_fn interrupt; /* options.interrupt: checked during waits */
  void *interrupt_ud;
  int grace_ms; /* > 0 while a driver sends the release of a call the interrupt
                   ended: interrupt not asked, connect and each reply bounded
                   by it (conn.c); set and cleared around that one send */
  size_t max_key_len, max_value_len;
  char *prefix;
  size_t prefix_len;
  xf__buf request;               /* the RESP encoding of the command being sent */
  unsigned long fork_generation; /* of the process that owns the connections */
  xf__pcg32 rng;
  uint64_t id;          /* random client id: lease tokens are unique fleet-wide */
  uint64_t lease_count; /* leases taken, the token's suffix */
  int loader_rc;
  xf_stats stats;
  char errstr[256];
  char conn_err[256]; /* the event-loop driver's: why its connection dropped */
};

/* Records a message on the client and returns rc (so `return fail(...)`). */
int xf__fail(xf_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CLOCK_MONOTONIC in ms and us. */
int64_t xf__now_ms(void);
int64_t xf__now_us(void);

/* Bumped in every forked child (pthread_atfork): compare to detect a fork. */
unsigned long xf__fork_generation(void);

/* In a forked child, gives the client its own identity (connection, client
 * id, XFetch stream) on first use; a load and a compare otherwise. */
void xf__client_check_fork(xf_client *c);

/* Sends one command and returns its reply in *reply (caller frees with
 * freeReplyObject). Connects first if needed (and, the first time, finds out
 * whether the server is a Redis Cluster node: then cmd goes to the node of
 * cmd->key's slot, redirections followed). Error replies come back as XF_OK
 * with an error reply: the caller decides. Returns XF_EIO / XF_ECONNECT when
 * Redis cannot be reached (the connection is dropped and the breaker armed),
 * XF_EUNAVAILABLE (a cluster node refused the SCRIPT LOAD that recovers its
 * NOSCRIPT: busy, loading), XF_ENOMEM, XF_EPROTO, XF_EAUTH, XF_EREDIS (endless
 * redirections), XF_EINVAL (a cluster with options.db set). */
int xf__command(xf_client *c, const xf__cmd *cmd, redisReply **reply);

/* Pipelining: sends the n commands in one write and reads their n replies.
 * rcs[i] and replies[i] are what xf__command would give for cmds[i]; when the
 * connection fails, that command and every later one get its code. Returns
 * XF_OK when every command got a reply. */
int xf__command_many(xf_client *c, size_t n, const xf__cmd *const *cmds, int *rcs,
                     redisReply **replies);

/* Tests only (internal; reached through the static library): with N > 0,
 * every Nth xf_client_open fails with XF_ENOMEM as if calloc had, and
 * xf__test_failed_opens counts those. Read and written with __atomic_*. */
extern unsigned xf__test_fail_open_every, xf__test_failed_opens;

#endif
