/* One blocking connection to one Redis server (the standalone server, or
 * one node of a cluster): the connection engine (link.h: the setup, the
 * replies, the clock, the breaker, what a failure means) driven over a
 * stream with the client's timeouts and keepalive, one command or a
 * pipeline at a time. The client's thread only. */
#ifndef XF_CONN_H
#define XF_CONN_H

#include <stdint.h>

#include "link.h"
#include "reply.h"
#include "resp.h"

struct xf_client;
struct xf__wire; /* conn.c: the stream (plain or TLS) */

typedef struct xf__conn {
  struct xf__wire *link; /* the open stream; NULL while disconnected */
  char *host;            /* owned; NULL when unix_path is used */
  int port;              /* TCP */
  const char *unix_path; /* borrowed from the client; NULL = TCP */
  xf__clock *clock;      /* the engine's estimate of the server's clock (on the
                            heap: a flow's pointer to it outlives the router's
                            array growing); forgotten on every connect */
  xf__link engine;       /* the connection's protocol state across streams */
} xf__conn;

/* Sets k up for host:port (copied), or for unix_path when host is NULL; not
 * connected. Returns XF_OK or XF_ENOMEM. */
int xf__conn_init(xf__conn *k, const char *host, int port, const char *unix_path);

/* Closes and frees what k holds (NULL-safe); k is then as after memset 0. */
void xf__conn_free(xf__conn *k);

/* In a forked child: closes the child's copy of the socket (never a byte on
 * the parent's connection) and resets the breaker. */
void xf__conn_forget(xf__conn *k);

/* "host:port" (or the Unix path) of k, for messages. */
const char *xf__conn_name(const xf__conn *k, char *buf, size_t len);

/* Connects now if k is not connected and its breaker allows it. Returns
 * XF_OK, XF_ECONNECT (breaker open or connect failed), XF_ETLS (TLS failed:
 * certificate, name, handshake; repeated while the breaker is open), XF_EAUTH / XF_EINVAL
 * (AUTH or SELECT refused, also while the breaker is open after such a
 * refusal: a misconfiguration is never taken for a server that is down),
 * XF_EUNAVAILABLE (a busy or loading server refused a setup command) /
 * XF_EREDIS (READONLY refused): xf__setup_judge; XF_ENOMEM; the reason on
 * the client. */
int xf__conn_open(struct xf_client *c, xf__conn *k);

/* Sends cmd on k and returns its reply in *reply (caller frees with
 * xf__reply_free); connects first if needed. With asking, an ASKING travels
 * first in the same write (a Cluster ASK redirection) and its reply is
 * checked. Error replies come back as XF_OK with an error reply. A working
 * connection the server closed (idle timeout, CLIENT KILL) is reopened once
 * and the command sent again. Returns XF_EIO / XF_ECONNECT when the server
 * cannot be reached (k dropped, its breaker armed), XF_ENOMEM, XF_EPROTO. */
int xf__conn_command(struct xf_client *c, xf__conn *k, const xf__cmd *cmd, int asking,
                     xf__reply **reply);

/* Pipelining: sends the n commands in one write and reads their n replies.
 * rcs[i] and replies[i] are what xf__conn_command would give for cmds[i];
 * when the connection fails, that command and every later one get its code.
 * Returns XF_OK when every command got a reply. */
int xf__conn_pipeline(struct xf_client *c, xf__conn *k, size_t n,
                      const xf__cmd *const *cmds, int *rcs, xf__reply **replies);

#endif
