/* What the drivers and transports need of the client beyond client.h:
 * sending commands over its connections (the seed, or a cluster's nodes),
 * the clock, and fork detection. Defined in client.c. */
#ifndef XF_CLIENT_IO_H
#define XF_CLIENT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "conn.h"
#include "now.h"
#include "reply.h"
#include "resp.h"
#include "router.h"

/* Bumped in every forked child (pthread_atfork): compare to detect a fork. */
unsigned long xf__fork_generation(void);

/* In a forked child, gives the client its own identity (connection, client
 * id, XFetch stream) on first use; a load and a compare otherwise. */
void xf__client_check_fork(xf_client *c);

/* Sends one command and returns its reply in *reply (caller frees with
 * xf__reply_free). Connects first if needed (and, the first time, finds out
 * whether the server is a Redis Cluster node: then cmd goes to the node of
 * cmd->key's slot, redirections followed). Error replies come back as XF_OK
 * with an error reply: the caller decides. Returns XF_EIO / XF_ECONNECT when
 * Redis cannot be reached (the connection is dropped and the breaker armed),
 * XF_EUNAVAILABLE (a cluster node refused the SCRIPT LOAD that recovers its
 * NOSCRIPT: busy, loading), XF_ENOMEM, XF_EPROTO, XF_EAUTH, XF_EREDIS (endless
 * redirections), XF_EINVAL (a cluster with options.db set). */
int xf__command(xf_client *c, const xf__cmd *cmd, xf__reply **reply);

/* Pipelining: sends the n commands in one write and reads their n replies.
 * rcs[i] and replies[i] are what xf__command would give for cmds[i]; when the
 * connection fails, that command and every later one get its code. Returns
 * XF_OK when every command got a reply. */
int xf__command_many(xf_client *c, size_t n, const xf__cmd *const *cmds, int *rcs,
                     xf__reply **replies);

/* Whether every connection c has open (at least one) holds a fresh estimate
 * of its server's clock (xf__clock_fresh) at driver ms now_ms: the batch's
 * reads then go plain, else read_many refreshes them (batch_read.c). */
int xf__clocks_fresh(xf_client *c, int64_t now_ms);

/* A copy of o with its strings, in one allocation (free() frees it); NULL:
 * out of memory. */
xf_options *xf__options_dup(const xf_options *o);

/* client_options.c: XF_EINVAL for options out of range (the first one named
 * in why, when not NULL), else XF_OK; and c's fields set from o with their
 * defaults (XF_OK, XF_ENOMEM, or XF_EINVAL for a host list or TLS files that
 * cannot be used, the reason on c), for xf_client_open. */
int xf__options_check(const xf_options *o, char *why, size_t len);

/* Records why an open that went through xf_client_open failed after it (the
 * event-loop handle's connect), for xf_errmsg(NULL) on this thread. */
void xf__open_failed(const char *why);
int xf__client_options_copy(xf_client *c, const xf_options *o);

/* Tests only (internal; reached through the static library): with N > 0,
 * every Nth xf_client_open fails with XF_ENOMEM as if calloc had, and
 * xf__test_failed_opens counts those. Read and written with __atomic_*. */
extern unsigned xf__test_fail_open_every, xf__test_failed_opens;

#endif
