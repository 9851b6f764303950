/* One connection setup for every transport: the commands a fresh connection
 * runs before any call's (AUTH, SELECT, READONLY, the scripts' SCRIPT LOAD),
 * built from the client's options and the connection's role, and the one
 * judgement of their replies. No socket here: the connection engine
 * (src/link, for every driver) and the near cache's invalidation connection
 * send the list and feed the replies back, so they cannot drift apart. */
#ifndef XF_SETUP_H
#define XF_SETUP_H

#include "reply.h"
#include "resp.h"
#include "script.h"

struct xf_client;
struct xf_reply;

/* What one setup command is for (its reply is judged by it). */
typedef enum xf__setup_kind {
  XF__SETUP_AUTH,
  XF__SETUP_SELECT,
  XF__SETUP_READONLY,
  XF__SETUP_SCRIPT,   /* a preload: its failure is left to NOSCRIPT recovery */
  XF__SETUP_TRACKING, /* CLIENT TRACKING on REDIRECT (the near cache): refused,
                         the connection is set up untracked */
  XF__SETUP_PROBE     /* HELLO, when nothing else would be sent: whether the
                         server lets a client without a password in */
} xf__setup_kind;

/* The role flags are the public XF_SETUP_REPLICA / XF_SETUP_SCRIPTS. */
#define XF__SETUP_MAX (5 + XF_SCRIPT_COUNT)

/* The list, in the order it is sent. The commands point into the client
 * (username, password) and into the list itself (db's digits): not movable,
 * valid while the client is. */
typedef struct xf__setup {
  int n;
  xf__setup_kind kind[XF__SETUP_MAX];
  xf__cmd cmd[XF__SETUP_MAX];
} xf__setup;

/* Fills s for a connection of c with flags (XF_SETUP_*): AUTH [user] password
 * when a password is set, SELECT db when db != 0, READONLY for a replica,
 * SCRIPT LOAD of each script when asked; HELLO when none of these is sent
 * (a server that needs a password answers it NOAUTH). n >= 1. */
void xf__setup_build(const struct xf_client *c, int flags, xf__setup *s);

/* Appends CLIENT TRACKING on REDIRECT redirect_id to s (after
 * xf__setup_build): the near cache's tracking of a data connection. */
void xf__setup_add_tracking(xf__setup *s, long long redirect_id);

/* Judges r (not freed), the reply to a setup command of kind: XF_OK, or the
 * code with "<COMMAND>: <reply>" on the client:
 *   XF_EUNAVAILABLE  the server cannot take it now (BUSY, LOADING...: the
 *                    unavailable replies of xf__reply_classify): fail open;
 *   XF_EAUTH         AUTH refused (WRONGPASS, ...), NOAUTH (or the
 *                    unauthenticated protocol error) to any command, the
 *                    HELLO included; SELECT refused (no such db, an ACL);
 *   XF_EINVAL        SELECT on a Redis Cluster (only db 0 there);
 *   XF_EREDIS        READONLY refused.
 * A preload's other errors are XF_OK: the call that needs the script loads
 * it; so are CLIENT TRACKING's (the transport then keeps the connection
 * untracked) and the HELLO's (an ACL without it, a server too old for it, a
 * busy one: the calls find out). */
int xf__setup_judge(struct xf_client *c, xf__setup_kind kind, const struct xf_reply *r);

#endif
